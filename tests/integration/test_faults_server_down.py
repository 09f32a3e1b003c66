"""A server that dies mid-ramp (README, "Server down"): after 3 connection-level failures in a row
the ramp checks readiness; a down server ends the step with reason ``server_down``, leaves a
``server_down`` event, and the ramp stops (default), skips to the next step, or waits for the
server and resumes. The step is INVALID ("server down") and its power is not load power.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SimServer, run_loadgen, start_sim

pytestmark = pytest.mark.slow

QUICK = ["--warmup-seconds", "0.2", "--max-tokens", "8", "--drain-seconds", "3"]


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _ramp(sim: SimServer, out: Path, policy: str | None, *extra: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """A ramp of three steps of 4 users. The crash (30 requests in) must come in step 0 however long
    they take: a step ends by the server going down, or by ``extra``'s --requests-per-step; its 60 s
    only catch a hang."""
    args = [
        "ramp",
        "--url",
        sim.url,
        "--concurrency",
        "4,4,4",
        "--step-seconds",
        "60",
        "--gpu-source",
        f"{sim.url}/gpu/metrics",
        "--gpu-hz",
        "10",
        "--server-log-file",
        str(sim.log_file),
        "--log-from-start",
        "--out",
        str(out),
        *QUICK,
        *extra,
    ]
    if policy is not None:
        args += ["--on-server-down", policy]
    proc = run_loadgen(*args, timeout=120)
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.stderr[-3000:]
    run_dir = Path(lines[-1])
    assert run_dir.is_dir(), proc.stderr[-3000:]
    return proc, run_dir


def _step_ends(run_dir: Path) -> dict[int, str]:
    return {x["step"]: x["reason"] for x in _lines(run_dir / "steps.jsonl") if x["event"] == "end"}


def _starts(run_dir: Path) -> list[int]:
    return [x["step"] for x in _lines(run_dir / "steps.jsonl") if x["event"] == "start"]


def _assert_down_step(run_dir: Path, step: int) -> None:
    summary = json.loads((run_dir / "summary.json").read_text())
    row = next(s for s in summary["steps"] if s["step"] == step)
    assert row["valid"] is False and "server down" in (row["invalid_reason"] or ""), row
    assert row.get("power_valid") is False, row  # never read as load power
    assert "server down" in (run_dir / "report.md").read_text()


def test_default_stops_the_ramp_and_marks_the_step(tmp_path: Path) -> None:
    sim = start_sim(tmp_path, "--profile", "tiny", "--crash-after-requests", "30")
    try:
        t0 = time.monotonic()
        proc, run_dir = _ramp(sim, tmp_path / "o", None)
        took = time.monotonic() - t0
    finally:
        sim.stop()
    assert _step_ends(run_dir) == {0: "server_down"}  # the crash step ends early ...
    assert _starts(run_dir) == [0]  # ... and no later step starts
    assert took < 50  # well before the 60 s step's end
    events = _lines(run_dir / "events.jsonl")
    down = [e for e in events if e["kind"] == "server_down"]
    assert len(down) == 1 and down[0]["step"] == 0
    # the server's own reason, from its log, is in the run directory
    assert any(e["kind"] == "log_match" and e["pattern"] == "sglang_fatal" for e in events)
    _assert_down_step(run_dir, 0)
    records = [r for f in run_dir.glob("requests*.jsonl") for r in _lines(f)]
    assert sum(1 for r in records if r["error_class"] is None) >= 20  # what ran before the crash stands
    assert "server down" in proc.stderr


def test_skip_step_goes_on_with_every_step(tmp_path: Path) -> None:
    sim = start_sim(tmp_path, "--profile", "tiny", "--crash-after-requests", "30")
    try:
        _, run_dir = _ramp(sim, tmp_path / "o", "skip-step")
    finally:
        sim.stop()
    assert _starts(run_dir) == [0, 1, 2]
    ends = _step_ends(run_dir)
    assert ends[0] == "server_down" and ends[1] == "server_down" and ends[2] == "server_down"
    for step in (0, 1, 2):
        _assert_down_step(run_dir, step)


def test_wait_resumes_when_the_server_comes_back(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    first = tmp_path / "first"
    first.mkdir()
    sim = start_sim(first, "--profile", "tiny", "--crash-after-requests", "30", "--port", str(port))
    revived: list[SimServer] = []

    def restart_after_crash() -> None:
        sim.proc.wait(60)
        time.sleep(3.5)  # down longer than the ramp's readiness check (2 s): it must notice and wait
        again = tmp_path / "again"
        again.mkdir()
        revived.append(start_sim(again, "--profile", "tiny", "--port", str(port)))

    watcher = threading.Thread(target=restart_after_crash, daemon=True)
    watcher.start()
    try:
        # steps 1 and 2 end once 150 requests finished (valid at any speed); step 0 ends by the crash
        # first (30 served, then refused ones paced 0.1 s apart while the ramp checks: 40 seen)
        _, run_dir = _ramp(sim, tmp_path / "o", "wait", "--wait-ready", "30", "--requests-per-step", "150")
    finally:
        watcher.join(70)
        sim.stop()
        for r in revived:
            r.stop()
    assert revived, "the simulator was never restarted"
    assert _starts(run_dir) == [0, 1, 2]
    ends = _step_ends(run_dir)
    assert ends[0] == "server_down" and ends[1] != "server_down" and ends[2] != "server_down"
    kinds = [e["kind"] for e in _lines(run_dir / "events.jsonl") if e["kind"] in ("server_down", "server_up")]
    assert kinds[:2] == ["server_down", "server_up"]
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = {s["step"]: s for s in summary["steps"]}
    _assert_down_step(run_dir, 0)
    for step in (1, 2):
        assert rows[step]["valid"] and rows[step]["requests_ok"] > 0 and rows[step]["requests_failed"] == 0
