"""The run directory: the single source of truth of a run (see README, "Run directory").

Layout of ``reports/<run-id>/``::

    manifest.json        what was run: argv, options, scenario, versions, host (written at start)
    steps.jsonl          one line per step transition: {"step", "event": "start"|"steady"|"end", "t_ns", ...}
    requests-<w>.jsonl   one RequestRecord per line per load-generating process w
    samples.jsonl        telemetry samples (the side process)
    events.jsonl         log matches and lifecycle events
    summary.json steps.csv report.md report.html   rendered outputs (rebuilt by ``loadgen report``)

Step lines: ``start`` carries ``concurrency``, ``context_tokens``, ``rate`` (open loop, req/s or
null), ``warmup_s``, ``duration_s``, ``requests`` (target per step or null); ``steady`` marks the end
of warm-up; ``end`` carries ``reason`` ("duration", "requests", "stopped", "server_down").
"""

from __future__ import annotations

import json
import os
import platform
import re
import socket
import sys
import time
from pathlib import Path
from typing import Any

from loadgen.rundir.records import JsonlAppender, RunDirError

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def make_run_id(label: str | None = None, now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now if now is not None else time.time()))
    slug = _SAFE.sub("-", label or "run").strip("-")[:48] or "run"
    return f"{stamp}-{slug}"


def output_folder(out: str | os.PathLike[str]) -> Path:
    """``out`` created if missing and writable, or a RunDirError saying what to pass instead (a
    command checks this before anything starts: exit 4, nothing sent)."""
    base = Path(out)
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(
            f"cannot create the output folder {base}: {exc.strerror}. Pass --out with a writable folder."
        ) from exc
    if not os.access(base, os.W_OK | os.X_OK):
        raise RunDirError(f"cannot write in {base}: permission denied. Pass --out with a writable folder.")
    return base


def create_run_dir(out: str | os.PathLike[str], label: str | None = None) -> Path:
    """Create a fresh run directory under ``out``; fail early with a clear message if unwritable."""
    base = output_folder(out)
    run_id = make_run_id(label)
    path = base / run_id
    n = 1
    while path.exists():
        n += 1
        path = base / f"{run_id}-{n}"
    try:
        path.mkdir()
        probe = path / ".write-test"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        raise RunDirError(f"cannot write in {path}: {exc.strerror}. Pass --out with a writable folder.") from exc
    return path


def host_info() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }


def versions() -> dict[str, str]:
    from importlib import metadata

    out: dict[str, str] = {}
    for dist in ("llm-loadgen", "locust", "gevent", "geventhttpclient", "orjson", "openai", "numpy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


def write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    data = {"created_ns": time.time_ns(), "host": host_info(), "versions": versions(), **manifest}
    tmp = path / "manifest.json.tmp"
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path / "manifest.json")


def read_manifest(path: Path) -> dict[str, Any]:
    f = Path(path) / "manifest.json"
    if not f.exists():
        return {}
    try:
        data: dict[str, Any] = json.loads(f.read_text())
    except json.JSONDecodeError:
        return {}
    return data


class StepLog:
    """Appends step transitions to ``steps.jsonl`` as they happen (a killed run keeps them)."""

    def __init__(self, path: Path) -> None:
        self._out = JsonlAppender(path / "steps.jsonl")

    def start(self, step: int, t_ns: int, **fields: Any) -> None:
        self._out.write({"step": step, "event": "start", "t_ns": t_ns, **fields})

    def steady(self, step: int, t_ns: int) -> None:
        self._out.write({"step": step, "event": "steady", "t_ns": t_ns})

    def end(self, step: int, t_ns: int, reason: str, **fields: Any) -> None:
        self._out.write({"step": step, "event": "end", "t_ns": t_ns, "reason": reason, **fields})

    def close(self) -> None:
        self._out.close()


__all__ = [
    "RunDirError",
    "StepLog",
    "create_run_dir",
    "make_run_id",
    "output_folder",
    "read_manifest",
    "write_manifest",
]
