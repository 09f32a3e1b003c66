"""The live view follows a real ramp (a master and two worker processes against the simulated
server, with its GPU and /metrics telemetry) while it runs, and ends on the report's figures."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from loadgen.webui.live import LiveRun
from tests.conftest import REPO, loadgen_cmd

pytestmark = pytest.mark.slow


def test_live_page_shows_both_workers_and_the_reports_figures(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory("--profile", "tiny")
    out = tmp_path / "reports"
    proc = subprocess.Popen(
        loadgen_cmd(
            "ramp", "--url", sim.url, "--workers", "2", "--concurrency", "4,8", "--step-seconds", "2",
            "--warmup-seconds", "0.5", "--max-tokens", "16", "--gpu-source", f"{sim.url}/gpu/metrics",
            "--gpu-hz", "4", "--metrics-url", f"{sim.url}/metrics", "--metrics-hz", "4", "--out", str(out),
        ),
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    live: LiveRun | None = None
    seen_workers: set[str] = set()
    phases: set[str] = set()
    try:
        deadline = time.monotonic() + 90
        while proc.poll() is None and time.monotonic() < deadline:
            runs = list(out.iterdir()) if out.exists() else []
            if runs and live is None:
                live = LiveRun(runs[0], prefer_report=False)
            if live is not None:
                p = live.payload()
                seen_workers |= {w for w, v in p["workers"].items() if v["cpu"]}
                phases |= {s["phase"] for s in p["steps"] if p["current"] and s["step"] == p["current"]["step"]}
            time.sleep(0.4)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr[-3000:]
    run_dir = Path(stdout.strip().splitlines()[-1])
    assert live is not None and live.run_dir == run_dir
    # while it ran: each process's own load (the master measures itself too), the current step
    # through its warm-up and its steady window
    assert seen_workers == {"master", "w0", "w1"}
    assert {"warm-up", "steady"} <= phases

    p = live.payload()  # the last records and telemetry, computed (not read from summary.json)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert p["source"] == "live"
    assert [s["concurrency"] for s in p["steps"]] == [4, 8]
    for s, row in zip(p["steps"], summary["steps"], strict=True):
        assert s["phase"] == "ended"
        assert s["tok_s"] == row["output_tok_s"] and s["req_tok_s"] == row["per_request_tok_s"]
        for fig in ("ttft", "tpot", "itl"):
            for q in ("p50", "p99"):
                assert s[f"{fig}_{q}"] == row[f"{fig}_ms"][q], (row["step"], fig, q)
        assert (s["requests_ok"], s["requests_failed"]) == (row["requests_ok"], row["requests_failed"])
        assert (s["valid"], s["invalid_reason"]) == (row["valid"], row["invalid_reason"])
        assert (s["timing_uncertain"], s["timing_reason"]) == (row["timing"]["uncertain"], row["timing"]["reason"])
        assert s["client_cpu"] == row["client_cpu"]["mean"] and s["client_processes"] == row["client_cpu"]["processes"]
        assert s["kv_usage_mean"] == row["kv_usage"]["mean"] and s["gpu_power_w"] == row["gpu_power_w"]["mean"]
    assert p["pareto"]["points"] == summary["pareto"]["points"]
    assert p["errors"] == summary["totals"]["errors"]
    # both workers, each with its CPU and loop lag, and the requests it sent
    workers = p["workers"]
    assert sorted(workers) == ["master", "w0", "w1"]
    for name, w in workers.items():
        assert w["cpu"] and w["lag_ms"] and w["cpu_frac"] is not None
        assert (w["requests_ok"] > 0) == (name != "master")
    assert sum(w["requests_ok"] for w in workers.values()) == summary["totals"]["requests_ok"]
    # the simulator's telemetry: KV fill and queue from /metrics, power per GPU and in total
    assert p["server_samples"] and p["kv"] and p["queue"]
    assert p["power"] and p["power_total"] and p["power_limit_total_w"]
    # once summary.json is there the page reads it: the same figures
    shown = LiveRun(run_dir).payload()
    assert shown["source"] == "report"
    assert [s["tok_s"] for s in shown["steps"]] == [s["tok_s"] for s in p["steps"]]
