"""The package data pyproject.toml names is what the package has: every pattern matches a file, and
every file the package reads that is not Python is named (an installed wheel carries exactly these)."""

from __future__ import annotations

import fnmatch
import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_package_data_names_every_data_file_and_nothing_that_does_not_exist() -> None:
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["loadgen"]
    pkg = ROOT / "loadgen"
    for pattern in patterns:
        assert list(pkg.glob(pattern)), f"package-data pattern {pattern!r} matches no file under loadgen/"
    tracked = subprocess.run(
        ["git", "ls-files", "loadgen"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.split()
    data = [p.removeprefix("loadgen/") for p in tracked if not p.endswith(".py")]
    assert data, "git ls-files found no data files (not a checkout?)"
    for rel in data:
        assert any(fnmatch.fnmatch(rel, pat) for pat in patterns), f"{rel} is not in package-data"
