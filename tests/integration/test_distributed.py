"""Master plus worker processes on loopback against the simulated server."""

from __future__ import annotations

import itertools
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
    # written by the master from the workers' messages: their records, and their own CPU and loop lag
    assert sorted(f.name for f in run_dir.glob("requests*.jsonl")) == ["requests-w0.jsonl", "requests-w1.jsonl"]
    assert sorted(f.name for f in run_dir.glob("client-*.jsonl")) == [
        "client-master.jsonl",
        "client-w0.jsonl",
        "client-w1.jsonl",
    ]
    # every request the server answered is on the master's disk, once
    ids = [r["header_id"] for r in recs]  # the id the server saw
    assert len(ids) == len(set(ids))
    assert set(ids) == _served(sim.emission_log)
    # both workers followed the master's steps
    steps = json.loads((run_dir / "summary.json").read_text())["steps"]
    assert [s["concurrency"] for s in steps] == [4, 8]
    assert all(s["client_cpu"]["processes"] == 3 for s in steps)  # every process judged
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
    proc = _two_workers_killing_one(sim.url, tmp_path, "--concurrency", "4,4")
    out, err = _kill_one_worker(proc, tmp_path)
    assert proc.returncode == 0, err[-3000:]
    run_dir = Path(out.strip().splitlines()[-1])
    assert "stopped answering" in err
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    assert any(e["kind"] == "worker_lost" for e in events)
    assert "worker_lost" in (run_dir / "report.md").read_text()
    recs = run_records(run_dir)
    # the dead worker's finished requests are on disk; the survivor carried on to the end
    assert len({r["worker"] for r in recs}) == 2
    steps = json.loads((run_dir / "summary.json").read_text())["steps"]
    assert steps[1]["requests_ok"] > 0
    # the step it was lost in ran below its plan from then on: marked, naming the worker and when
    lost = next(e for e in events if e["kind"] == "worker_lost")
    marked = steps[lost["step"]]
    assert marked["valid"] is False
    assert f"load below plan: worker {lost['worker']} lost" in marked["invalid_reason"]
    # a step that began after the loss runs at what the survivor carries: it opens its steady window
    # after its warm-up, not once Locust drops the dead worker (a minute later)
    lines = [json.loads(x) for x in (run_dir / "steps.jsonl").read_text().splitlines()]
    after = [x["step"] for x in lines if x["event"] == "start" and x["t_ns"] > lost["t_ns"]]
    for k in after:
        start, steady = (
            next(x["t_ns"] for x in lines if x["step"] == k and x["event"] == e) for e in ("start", "steady")
        )
        assert (steady - start) / 1e9 < 10.0, (k, (steady - start) / 1e9)
    # the workers joined with their clocks measured against the master's (one machine: within the hop)
    joined = json.loads((run_dir / "manifest.json").read_text())["workers"]
    assert [w["worker"] for w in joined] == ["w0", "w1"]
    assert all(abs(w["clock_offset_ns"]) <= w["clock_rtt_ns"] for w in joined)


def test_on_worker_loss_stop_ends_the_ramp_with_a_partial_report(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory("--profile", "tiny")
    proc = _two_workers_killing_one(sim.url, tmp_path, "--concurrency", "4,4,4", "--on-worker-loss", "stop")
    out, err = _kill_one_worker(proc, tmp_path)
    assert proc.returncode == 2, err[-3000:]
    assert "(--on-worker-loss stop)" in err and "partial report" in err
    run_dir = Path(out.strip().splitlines()[-1])
    steps = json.loads((run_dir / "summary.json").read_text())["steps"]
    assert len(steps) < 3 and steps[-1]["end_reason"] == "worker_lost"


def _two_workers_killing_one(url: str, tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    """A two-worker ramp of 4-s steps, for a test that kills one of its workers."""
    argv = loadgen_cmd(
        "ramp",
        "--url",
        url,
        "--workers",
        "2",
        "--step-seconds",
        "4",
        "--warmup-seconds",
        "0.2",
        "--max-tokens",
        "16",
        "--no-telemetry",
        "--out",
        str(tmp_path),
        *extra,
    )
    return subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _a_worker_once_recording(proc: subprocess.Popen[str], tmp_path: Path) -> psutil.Process:
    """One of the ramp's two local workers, once both have recorded some requests."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        files = list(tmp_path.glob("*/requests-w*.jsonl"))
        if len(files) == 2 and all(len(f.read_bytes().splitlines()) > 10 for f in files):
            kids = psutil.Process(proc.pid).children()
            return next(k for k in kids if "loadgen.run.worker" in " ".join(k.cmdline()))
        time.sleep(0.1)
    raise AssertionError("the workers recorded nothing")


def _kill_one_worker(proc: subprocess.Popen[str], tmp_path: Path) -> tuple[str, str]:
    """SIGKILL one of the ramp's workers once both record; the ramp's stdout and stderr when it ends."""
    try:
        victim = _a_worker_once_recording(proc, tmp_path)
        os.kill(victim.pid, signal.SIGKILL)
        return proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_an_open_loop_rate_over_two_workers_sends_one_poisson_process(sim_factory: Any, tmp_path: Path) -> None:
    """Each worker sends its share of the same seeded arrivals (the i-th when i % 2 is its rank): the
    merged send times are the process asked for, not two processes at half the rate, nor one."""
    from scipy import stats

    sim = sim_factory("--profile", "tiny")
    proc = subprocess.run(
        loadgen_cmd(
            "ramp",
            "--url",
            sim.url,
            "--workers",
            "2",
            "--rate",
            "50",
            "--step-seconds",
            "10",
            "--warmup-seconds",
            "0.5",
            "--max-tokens",
            "8",
            "--no-telemetry",
            "--out",
            str(tmp_path),
        ),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    run_dir = run_dir_of(proc)
    recs = run_records(run_dir)
    ids = [r["header_id"] for r in recs]
    assert len(ids) == len(set(ids)) and set(ids) == _served(sim.emission_log)
    by_worker = {w: sum(r["worker"] == w for r in recs) for w in ("w0", "w1")}
    assert min(by_worker.values()) > 0.35 * len(recs), by_worker  # both send, about half each
    sent = np.sort(np.array([r["sent_ns"] for r in recs], dtype=np.int64))
    gaps_s = np.diff(sent) / 1e9
    assert 400 <= len(recs) <= 640, len(recs)  # 50/s for 10.5 s: 525 expected
    ks = stats.kstest(gaps_s, "expon", args=(0, 1 / 50))
    assert ks.pvalue > 0.01, (ks, by_worker)
    # the intended times are exact: each worker's share interleaves with the other's
    intended = sorted((r["intended_ns"], r["worker"]) for r in recs)
    switches = sum(a[1] != b[1] for a, b in itertools.pairwise(intended))
    assert switches > 0.9 * (len(intended) - 1), switches
