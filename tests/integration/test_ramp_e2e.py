"""`loadgen ramp` as a user runs it: a real process against the simulated server on 127.0.0.1."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, emissions_by_request, loadgen_cmd, run_dir_of, run_loadgen, run_records

pytestmark = pytest.mark.slow

FAST = ["--profile", "tiny"]


def test_three_step_ramp_gives_three_sane_rows(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory(*FAST)
    proc = run_loadgen(
        "ramp",
        "--url",
        sim.url,
        "--concurrency",
        "1,4,16",
        # each step ends once 30 requests of its window finished: a valid step on a machine of any
        # speed (5 are needed); the 60 s only catch a hang
        "--requests-per-step",
        "30",
        "--step-seconds",
        "60",
        "--warmup-seconds",
        "0.5",
        "--max-tokens",
        "24",
        "--label",
        "three steps",
        "--out",
        str(tmp_path / "reports"),
    )
    run_dir = run_dir_of(proc)
    summary = json.loads((run_dir / "summary.json").read_text())
    steps = summary["steps"]
    assert [s["concurrency"] for s in steps] == [1, 4, 16]
    assert summary["label"] == "three steps"
    for s in steps:
        assert s["requests_ok"] > 0 and s["requests_failed"] == 0, s
        assert s["valid"], s
        assert 0 < s["ttft_ms"]["p50"] <= s["ttft_ms"]["p99"] < 2000
        assert 0 < s["itl_ms"]["p50"] < 1000
        assert s["e2e_ms"]["p50"] > s["ttft_ms"]["p50"]
        assert s["output_tok_s"] > 0 and s["per_request_tok_s"] > 0
    # more users, more aggregate throughput, each user slower or equal (a batching server)
    assert steps[2]["output_tok_s"] > steps[0]["output_tok_s"] * 2
    assert steps[2]["per_request_tok_s"] <= steps[0]["per_request_tok_s"] * 1.1
    rows = list(csv.DictReader((run_dir / "steps.csv").open()))
    assert len(rows) == 3
    report = (run_dir / "report.md").read_text()
    assert "three steps" in report and "16" in report
    # steps.jsonl: every step has its three transitions, in order, steady = start + warm-up or later
    lines = [json.loads(x) for x in (run_dir / "steps.jsonl").read_text().splitlines()]
    for i in range(3):
        ev = {x["event"]: x["t_ns"] for x in lines if x["step"] == i}
        assert ev["start"] + 0.5e9 <= ev["steady"] < ev["end"]
        assert [x["reason"] for x in lines if x["step"] == i and x["event"] == "end"] == ["requests"]
    assert all(s["requests_ok"] >= 30 for s in steps), [s["requests_ok"] for s in steps]


def test_kill_9_keeps_finished_records_and_report_rebuilds(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory(*FAST)
    out = tmp_path / "reports"
    proc = subprocess.Popen(
        loadgen_cmd(
            "ramp",
            "--url",
            sim.url,
            "--concurrency",
            "4,8",
            "--step-seconds",
            "60",
            "--warmup-seconds",
            "0.2",
            "--max-tokens",
            "16",
            "--out",
            str(out),
        ),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        files: list[Path] = []
        while time.monotonic() < deadline:
            files = list(out.glob("*/requests*.jsonl"))
            if files and len(files[0].read_bytes().splitlines()) >= 30:
                break
            time.sleep(0.1)
        else:
            pytest.fail("no requests recorded within 30 s")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    run_dir = files[0].parent
    assert not (run_dir / "summary.json").exists()
    complete = [json.loads(x) for x in files[0].read_bytes().splitlines() if x.endswith(b"}")]
    ok = sum(1 for r in complete if r["error_class"] is None)
    rebuilt = run_loadgen("report", str(run_dir))
    assert rebuilt.returncode == 0, rebuilt.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(summary["steps"]) == 1
    assert sum(s["requests_ok"] for s in summary["steps"]) <= ok
    assert summary["steps"][0]["requests_ok"] > 0
    assert (run_dir / "report.md").exists() and (run_dir / "steps.csv").exists()


def test_server_not_listening_is_a_clear_error(tmp_path: Path) -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    proc = run_loadgen(
        "ramp",
        "--url",
        f"http://127.0.0.1:{port}",
        "--model",
        "m",
        "--concurrency",
        "1",
        "--step-seconds",
        "1",
        "--out",
        str(tmp_path),
    )
    assert proc.returncode == 3
    assert "not ready" in proc.stderr and "Connection" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_flags_name_the_flag(tmp_path: Path) -> None:
    proc = run_loadgen("ramp", "--url", "http://127.0.0.1:1", "--concurrency", "1,x", "--out", str(tmp_path))
    assert proc.returncode == 2 and "--concurrency '1,x'" in proc.stderr
    proc = run_loadgen("ramp", "--url", "http://127.0.0.1:1", "--extra-body", "temperature", "--out", str(tmp_path))
    assert proc.returncode == 2 and "--extra-body 'temperature'" in proc.stderr


def test_openai_sdk_transport(sim_factory: Any, tmp_path: Path) -> None:
    pytest.importorskip("openai")  # an optional extra (in [dev])
    sim = sim_factory(*FAST)
    proc = run_loadgen(
        "ramp",
        "--url",
        sim.url + "/v1",
        "--concurrency",
        "2",
        "--step-seconds",
        "2",
        "--warmup-seconds",
        "0",
        "--max-tokens",
        "16",
        "--transport",
        "openai",
        "--out",
        str(tmp_path / "reports"),
    )
    run_dir = run_dir_of(proc)
    recs = run_records(run_dir)
    assert recs and all(r["error_class"] is None for r in recs), recs[:2]
    emitted = emissions_by_request(sim.emission_log)
    for r in recs:
        assert r["output_tokens"] == sum(e["tokens"] for e in emitted[r["header_id"]])
        assert r["first_chunk_ns"] >= emitted[r["header_id"]][0]["emit_ns"]


def test_completions_endpoint_and_non_streaming(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory(*FAST)
    for extra in (["--endpoint", "completions"], ["--no-stream"]):
        proc = run_loadgen(
            "ramp",
            "--url",
            sim.url,
            "--concurrency",
            "2",
            "--step-seconds",
            "1.5",
            "--warmup-seconds",
            "0",
            "--max-tokens",
            "12",
            *extra,
            "--out",
            str(tmp_path / "reports"),
        )
        run_dir = run_dir_of(proc)
        recs = run_records(run_dir)
        assert recs and all(r["error_class"] is None for r in recs), (extra, recs[:1])
        assert all(r["output_tokens"] and r["output_tokens"] <= 12 for r in recs)
        assert all(r["endpoint"] == ("completions" if "completions" in extra else "chat") for r in recs)
        # a step of --step-seconds alone ends by its duration, its steady window that long
        lines = [json.loads(x) for x in (run_dir / "steps.jsonl").read_text().splitlines()]
        ev = {x["event"]: x for x in lines}
        assert ev["end"]["reason"] == "duration" and ev["end"]["t_ns"] - ev["steady"]["t_ns"] >= 1.5e9 - 1e6


def test_find_knee_plan_and_compare_from_the_run_directory(sim_factory: Any, tmp_path: Path) -> None:
    """A knee search on a server whose capacity is known, then plan and compare on its run dir."""
    # the tiny profile admits 16 running requests; past that requests queue and TTFT grows
    sim = sim_factory(*FAST, "--max-running-requests", "16")
    out = str(tmp_path / "reports")
    proc = run_loadgen(
        "ramp",
        "--url",
        sim.url,
        "--find-knee",
        "--concurrency",
        "2",
        "--max-steps",
        "6",
        "--step-seconds",
        "2",
        "--warmup-seconds",
        "0.5",
        "--max-tokens",
        "24",
        "--slo",
        "ttft_p99=150ms",
        "--no-telemetry",
        "--out",
        out,
        timeout=240,
    )
    run_dir = run_dir_of(proc)
    assert "knee search" in proc.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    loads = [s["concurrency"] for s in summary["steps"]]
    assert loads[:3] == [2, 4, 8] and len(loads) <= 6
    knee = summary["knee"]
    assert knee["detectors"]["slo_breach"]["has_data"]
    # requests beyond 16 queue: the SLO breaks above it, never at or below 8
    assert knee["concurrency"] is not None and 8 <= knee["concurrency"] <= 32, knee["reason"]
    assert "Saturation verdict" in (run_dir / "report.md").read_text()

    planned = run_loadgen("plan", str(run_dir), "--slo", "ttft_p99=150ms", "--target-rps", "100")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads((run_dir / "plan.json").read_text())["plan"]
    op = plan["operating_point"]
    assert op is not None and op["concurrency"] <= knee["concurrency"] * 2
    assert plan["replicas"] >= 1 and plan["replicas"] == pytest.approx(100 / plan["per_replica"]["req_s"], abs=1.0)
    # the plan stays part of the report when it is rebuilt
    assert run_loadgen("report", str(run_dir)).returncode == 0
    assert "Capacity plan" in (run_dir / "report.md").read_text()

    bad = run_loadgen("plan", str(run_dir), "--slo", "ttft_p98=1s")
    assert bad.returncode == 2 and "ttft_p98" in bad.stderr and "Traceback" not in bad.stderr

    cmp = run_loadgen("compare", str(run_dir), str(run_dir), "--out", out)
    assert cmp.returncode == 0, cmp.stderr
    cmp_dir = Path(cmp.stdout.strip().splitlines()[-1])
    assert "1.00x" in (cmp_dir / "compare.md").read_text()
    assert (cmp_dir / "compare.html").read_text().startswith("<!doctype html>")
