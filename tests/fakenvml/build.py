"""Build the fake ``libnvidia-ml.so.1`` (fakenvml.c) with gcc, for tests and benchmarks.

``build_fake_nvml(dest)`` compiles into ``dest/libnvidia-ml.so.1`` and returns ``dest``: put it first
on ``LD_LIBRARY_PATH`` of a *subprocess* and the unmodified nvidia-ml-py loads it in ``nvmlInit()``.
The environment variables that script the fake GPUs are documented at the top of fakenvml.c.
Run as a script to build into a folder: ``python tests/fakenvml/build.py OUT_DIR``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).with_name("fakenvml.c")
LIB_NAME = "libnvidia-ml.so.1"


class FakeNvmlBuildError(RuntimeError):
    pass


def build_fake_nvml(dest: Path) -> Path:
    """Compile fakenvml.c into ``dest/libnvidia-ml.so.1``; raise FakeNvmlBuildError with gcc's output."""
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise FakeNvmlBuildError("no C compiler found (gcc or cc); install gcc to build the fake NVML")
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / LIB_NAME
    proc = subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", "-o", str(out), str(SOURCE)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise FakeNvmlBuildError(f"{cc} failed on {SOURCE} (exit {proc.returncode}):\n{proc.stderr}")
    return dest


def fake_nvml_env(lib_dir: Path, base: dict[str, str] | None = None, **fake: str) -> dict[str, str]:
    """An environment for a subprocess that loads the fake library; ``fake`` sets FAKE_NVML_<KEY>."""
    env = dict(os.environ if base is None else base)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(lib_dir), env.get("LD_LIBRARY_PATH", "")) if p)
    for key, value in fake.items():
        env[f"FAKE_NVML_{key.upper()}"] = value
    return env


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd()
    print(build_fake_nvml(target) / LIB_NAME)
