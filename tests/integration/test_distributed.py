"""Master plus worker processes on loopback against the simulated server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from tests.conftest import REPO, loadgen_cmd, run_dir_of, run_records

pytestmark = pytest.mark.slow


def _served(emission_log: Path) -> set[str]:
    return {json.loads(line)["request_id"] for line in emission_log.read_text().splitlines()}


def test_two_workers_record_every_request_the_server_saw(sim_factory: Any, tmp_path: Path) -> None:
    """Records travel to the master in Locust messages here (as from workers on other machines,
    which cannot reach the run directory); the next test covers workers writing it directly."""
    sim = sim_factory("--profile", "tiny")
    proc = subprocess.run(
        loadgen_cmd(
            "ramp",
            "--url",
            sim.url,
            "--workers",
            "2",
            "--concurrency",
            "4,8",
            "--step-seconds",
            "2.5",
            "--warmup-seconds",
            "0.5",
            "--max-tokens",
            "16",
            "--no-telemetry",
            "--out",
            str(tmp_path),
        ),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "LOADGEN_RECORDS_VIA_MASTER": "1"},
    )
    run_dir = run_dir_of(proc)
    recs = run_records(run_dir)
    assert {r["worker"] for r in recs} == {"w0", "w1"}
    # written by the master from the workers' messages
    assert sorted(f.name for f in run_dir.glob("requests*.jsonl")) == ["requests-w0.jsonl", "requests-w1.jsonl"]
    # every request the server answered is on the master's disk, once
    ids = [r["header_id"] for r in recs]  # the id the server saw
    assert len(ids) == len(set(ids))
    assert set(ids) == _served(sim.emission_log)
    # both workers followed the master's steps
    steps = json.loads((run_dir / "summary.json").read_text())["steps"]
    assert [s["concurrency"] for s in steps] == [4, 8]
    for w in ("w0", "w1"):
        assert {r["step"] for r in recs if r["worker"] == w} == {0, 1}
    # percentiles come from all records, not averaged per worker
    lines = [json.loads(x) for x in (run_dir / "steps.jsonl").read_text().splitlines()]
    ev = {(x["step"], x["event"]): x["t_ns"] for x in lines}
    window = [
        r
        for r in recs
        if r["step"] == 1 and r["error_class"] is None and ev[(1, "steady")] <= r["sent_ns"] <= ev[(1, "end")]
    ]
    ttft = np.array([(r["first_chunk_ns"] - r["intended_ns"]) / 1e6 for r in window])
    assert steps[1]["requests_ok"] == len(window)
    assert steps[1]["ttft_ms"]["p50"] == pytest.approx(float(np.percentile(ttft, 50)), rel=1e-6)
    assert steps[1]["ttft_ms"]["p99"] == pytest.approx(float(np.percentile(ttft, 99)), rel=1e-6)


def test_a_worker_that_dies_is_reported_and_the_run_completes(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory("--profile", "tiny")
    proc = subprocess.Popen(
        loadgen_cmd(
            "ramp",
            "--url",
            sim.url,
            "--workers",
            "2",
            "--concurrency",
            "4,4",
            "--step-seconds",
            "4",
            "--warmup-seconds",
            "0.2",
            "--max-tokens",
            "16",
            "--no-telemetry",
            "--out",
            str(tmp_path),
        ),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        victim = None
        while time.monotonic() < deadline and victim is None:
            files = list(tmp_path.glob("*/requests-w*.jsonl"))
            if len(files) == 2 and all(len(f.read_bytes().splitlines()) > 10 for f in files):
                kids = psutil.Process(proc.pid).children()
                workers = [k for k in kids if "loadgen.load.worker" in " ".join(k.cmdline())]
                victim = workers[0]
            time.sleep(0.1)
        assert victim is not None, "the workers recorded nothing"
        os.kill(victim.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    run_dir = Path(out.strip().splitlines()[-1])
    assert "stopped answering" in err
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    assert any(e["kind"] == "worker_lost" for e in events)
    assert "worker_lost" in (run_dir / "report.md").read_text()
    recs = run_records(run_dir)
    # the dead worker's finished requests are on disk; the survivor carried on to the end
    assert len({r["worker"] for r in recs}) == 2
    assert json.loads((run_dir / "summary.json").read_text())["steps"][1]["requests_ok"] > 0
