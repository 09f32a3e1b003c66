"""Signals as users send them: ``loadgen ramp`` and ``loadgen campaign`` started with SIGINT
ignored (a background job of a script; the disposition is inherited across exec) keep ignoring
it, and still stop cleanly on SIGTERM with a partial report (exit 130)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, loadgen_cmd, start_sim
from tests.integration.test_campaign import start_long_campaign

pytestmark = pytest.mark.slow


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _wait_for_lines(pattern: str, root: Path, n: int, proc: subprocess.Popen[str], timeout_s: float = 60) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for f in root.glob(pattern):
            if f.read_bytes().count(b"\n") >= n:
                return f.parent
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.05)
    raise AssertionError(f"fewer than {n} records after {timeout_s} s")


def _still_running_after_sigint(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGINT)
    time.sleep(1.5)
    assert proc.poll() is None, "SIGINT was ignored on entry and must stay ignored"


def test_ramp_with_sigint_ignored_stops_on_sigterm_with_a_partial_report(tmp_path: Path) -> None:
    sim = start_sim(tmp_path, "--profile", "tiny")
    out = tmp_path / "o"
    cmd = loadgen_cmd(
        "ramp", "--url", sim.url, "--concurrency", "4", "--step-seconds", "60", "--warmup-seconds", "0.2",
        "--max-tokens", "8", "--out", str(out), "--gpu-source", f"{sim.url}/gpu/metrics",
    )  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_ignore_sigint
    )
    try:
        run_dir = _wait_for_lines("*/requests*.jsonl", out, 20, proc)
        _still_running_after_sigint(proc)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        sim.stop()
    assert proc.returncode == 130, stderr[-2000:]
    assert took < 20
    assert "interrupted (SIGTERM)" in stderr and "Traceback" not in stderr
    assert stdout.strip().splitlines()[-1] == str(run_dir)
    assert (run_dir / "report.md").exists() and (run_dir / "summary.json").exists()
    ends = [json.loads(x) for x in (run_dir / "steps.jsonl").read_text().splitlines() if '"end"' in x]
    assert ends and ends[-1]["reason"] == "stopped"
    assert not (run_dir / "telemetry.pid").exists()  # the side process was stopped too


def test_campaign_with_sigint_ignored_stops_on_sigterm_rolls_back_and_reports(tmp_path: Path) -> None:
    proc, out, trail = start_long_campaign(tmp_path, "background", preexec_fn=_ignore_sigint)
    try:
        # 30 recorded: at least 10 of them in the steady window (the 0.2-s warm-up's 2 users send
        # fewer than 10 requests of 55 ms or more)
        _wait_for_lines("*/long/*/requests*.jsonl", out, 30, proc)
        _still_running_after_sigint(proc)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=90)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr[-2000:]
    assert took < 45
    cdir = Path(stdout.strip().splitlines()[-1])
    report = json.loads((cdir / "campaign.json").read_text())
    assert report["interrupted"] is True
    (long,) = report["variants"]
    assert long["status"] == "interrupted" and long["server_exit"] == 0
    assert trail.read_text() == "rolled back\n"
    assert (cdir / long["run_dir"] / "report.md").exists()  # the ramp's partial report
    assert long["summary"]["requests_ok"] >= 10
