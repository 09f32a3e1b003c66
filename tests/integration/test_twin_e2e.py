"""The twin end to end, fast (issue 29): ramp a simulator profile over HTTP, then one ``loadgen twin
RUN_DIR --concurrency ... --plan`` call, and read what a user reads: twin.json, twin.md, the replayed
and what-if run directories, their reports and the plan.

What this holds is what is exact: the KV pool the twin learns from the run's /metrics is the
profile's to the token, every column is filled on the measured steps, the what-if is marked
predicted with its distance from the measured loads, and every artifact of the replay says it was
predicted. Accuracy (throughput and TPOT p50 within 5 %, TTFT p50 within 10 %, twice the load, the
KV overflow's onset, the seed story, a context what-if) waits on the wall clock for minutes and is
held by ``benchmarks/accuracy/test_twin_recovery.py`` (figures in docs/twin.md and
benchmarks/RESULTS.md); this test guards only against a fit that is grossly off (25 %).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.sim.memory import memory_plan
from loadgen.sim.profile import apply_overrides, load_profile
from tests.conftest import run_loadgen
from tests.twin import SPREAD, run_twin

pytestmark = pytest.mark.slow

FLAGS = ("--profile", "h100-llama-8b", "--startup-s", "0", "--mem-fraction-static", "0.2165")


def test_a_twin_learns_the_pool_replays_the_ramp_and_marks_the_what_if_predicted(
    sim_factory: Any, tmp_path: Path
) -> None:
    pool = memory_plan(apply_overrides(load_profile("h100-llama-8b"), {"server.mem_fraction_static": 0.2165}))
    scenario = tmp_path / "spread.toml"
    scenario.write_text(SPREAD)
    sim = sim_factory(*FLAGS)
    done = run_loadgen(
        "ramp",
        "--url",
        sim.url,
        "--concurrency",
        "2,8",
        "--step-seconds",
        "2",
        "--warmup-seconds",
        "1",
        "--scenario",
        str(scenario),
        "--gpu-source",
        f"{sim.url}/gpu/metrics",
        "--slo",
        "ttft_p99=2s,tpot_p99=50ms",
        "--out",
        str(tmp_path / "runs"),
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    measured = Path(done.stdout.strip().splitlines()[-1])
    sim.stop()

    table = run_twin(str(measured), tmp_path / "twin", "--concurrency", "16", "--plan", "--target-rps", "5")
    params = table["fit"]["params"]
    assert params["kv_pool_tokens"]["value"] == pool.kv_pool_tokens  # from the run's /metrics, exact
    assert table["fit"]["engine"] == "sglang" and "/metrics" in table["fit"]["engine_evidence"]
    rows = {r["load"]: r for r in table["steps"]}
    assert sorted(rows) == [2.0, 8.0, 16.0]
    for load in (2.0, 8.0):  # measured steps: both values and an error in every column
        row = rows[load]
        assert row["measured"] and not row["predicted"]
        for label in ("KV fill mean", "KV fill max", "queue mean", "retractions", "power W mean"):
            assert row[label]["measured"] is not None and row[label]["twin"] is not None, (load, label, row[label])
        # a grossly wrong fit (a unit, a missing term) misses by far more; the benchmark holds 5 %
        assert abs(row["throughput tok/s"]["rel_error"]) < 0.25, row["throughput tok/s"]
        assert abs(row["TPOT p50 ms"]["rel_error"]) < 0.25, row["TPOT p50 ms"]
    what_if = rows[16.0]
    assert what_if["predicted"] and what_if["outside"] == "2x the highest measured load (8)"
    assert what_if["KV fill max"]["measured"] is None and what_if["KV fill max"]["twin"] is not None

    replayed, what_if_run = (Path(p) for p in table["twin_runs"])
    for run in (replayed, what_if_run):
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["twin"]["predicted"] is True and manifest["twin"]["source_run"] == str(measured.resolve())
    mark = f"Predicted by the twin of {measured.name} (what-if: concurrency 16)"
    assert mark in (what_if_run / "report.md").read_text().splitlines()[2]
    assert "PREDICTED, not measured" in (what_if_run / "report.html").read_text()
    plan = json.loads((what_if_run / "plan.json").read_text())
    assert plan["plan"]["predicted"].startswith(mark) and plan["request"]["target_rps"] == 5.0
    md = (tmp_path / "twin" / "twin.md").read_text()
    assert "## KV cache, queue, retractions, power" in md and "| not measured |" not in md
    assert "## Planning from the twin" in md and f"> **PREDICTED.** {mark}" in md
