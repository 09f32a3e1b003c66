"""``loadgen ramp --wait-ready`` when the server does not come up: stop at once when the status
command says failed, show the matched lines of the server's log, exit 3, and keep the captured
log and a ``server_not_ready`` event in a run directory (lifecycle.readiness_gate wired in cli.py).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_loadgen, start_sim

pytestmark = pytest.mark.slow

# prints "failed" once the process is gone or a zombie, like `systemctl is-active` for a dead unit
STATUS = (
    "import sys\n"
    "try:\n"
    "    state = open(f'/proc/{sys.argv[1]}/stat').read().rsplit(')', 1)[1].split()[0]\n"
    "except OSError:\n"
    "    state = 'gone'\n"
    "print('failed' if state in ('Z', 'gone') else 'active')\n"
)


def _not_ready_dir(out: Path) -> Path:
    found = [p.parent for p in out.glob("*/events.jsonl")]
    assert len(found) == 1, list(out.rglob("*"))
    return found[0]


def test_start_failure_stops_the_wait_and_shows_the_log_line(tmp_path: Path) -> None:
    status_py = tmp_path / "status.py"
    status_py.write_text(STATUS)
    sim = start_sim(tmp_path, "--profile", "b300x8-kimi-k2.6-ddtree", "--max-running-requests", "256", wait_ready=False)
    out = tmp_path / "o"
    try:
        t0 = time.monotonic()
        proc = run_loadgen(
            "ramp",
            "--url",
            sim.url,
            "--model",
            "m",
            "--wait-ready",
            "120",
            "--server-status",
            f"{sys.executable} {status_py} {sim.proc.pid}",
            "--server-log-file",
            str(sim.log_file),
            "--no-telemetry",
            "--out",
            str(out),
        )
        took = time.monotonic() - t0
    finally:
        sim.stop()
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert took < 40  # stopped when the status said failed, not after --wait-ready 120
    assert "says 'failed'" in proc.stderr
    assert "Capture cuda graph failed: CUDA out of memory" in proc.stderr
    run_dir = _not_ready_dir(out)
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    (ev,) = [e for e in events if e["kind"] == "server_not_ready"]
    assert ev["matches"][0]["pattern"] == "cuda_graph_capture_failed"
    assert "Capture cuda graph failed" in (run_dir / ev["log_file"]).read_text()


def test_never_ready_keeps_the_captured_log(tmp_path: Path) -> None:
    sim = start_sim(tmp_path, "--profile", "tiny", "--ready-delay-s", "600", wait_ready=False)
    out = tmp_path / "o"
    try:
        proc = run_loadgen(
            "ramp",
            "--url",
            sim.url,
            "--model",
            "m",
            "--wait-ready",
            "1",
            "--server-logs",
            f"{sys.executable} -c \"print('loading weights'); print('still loading')\"",
            "--no-telemetry",
            "--out",
            str(out),
        )
    finally:
        sim.stop()
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "not ready after 1 s" in proc.stderr and "HTTP 503" in proc.stderr
    assert "the log ends with:\n  loading weights\n  still loading" in proc.stderr
    run_dir = _not_ready_dir(out)
    assert (run_dir / "server-not-ready.log").read_text() == "loading weights\nstill loading\n"
