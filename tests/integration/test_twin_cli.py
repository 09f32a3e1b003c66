"""``loadgen twin RUN_DIR --set ... --concurrency ... --plan`` end to end against the simulator: the
side-by-side KV fill, queue, retraction and power columns, a what-if beyond the measured loads with
its KV overflow, and the plan from the twin marked predicted (docs/twin.md).

The measured server is ``tiny`` with a KV pool of 4096 tokens, 16 running requests at most and
outputs that always run to max_tokens (128): C=4 and 8 fit (100 + 128 tokens each); the what-if lifts
max running requests to 64 and replays C=32, where 32 requests need ~7,300 tokens: the pool fills
and the engine retracts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_dir_of, run_loadgen

pytestmark = pytest.mark.slow

POOL_4096 = str(int(19.2e9 - 4096 * 32768))  # tiny: static memory less the weights leaves 4096 KV tokens


def test_twin_what_if_reports_kv_queue_power_and_plans_predicted(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory(
        *("--profile", "tiny", "--startup-s", "0", "--set", f"model.weight_bytes={POOL_4096}"),
        *("--set", "server.max_running_requests=16", "--set", "server.natural_len_median=100000"),
    )
    measured = run_dir_of(
        run_loadgen(
            *("ramp", "--url", sim.url, "--concurrency", "4,8", "--step-seconds", "2", "--warmup-seconds", "0.5"),
            *("--max-tokens", "128", "--context-tokens", "100", "--drain-seconds", "10", "--out", str(tmp_path)),
            *("--gpu-source", f"{sim.url}/gpu/metrics", "--metrics-url", f"{sim.url}/metrics", "--metrics-hz", "4"),
            *("--slo", "ttft_p99=2s,tpot_p99=50ms"),
        )
    )
    sim.stop()
    out = tmp_path / "twin"
    done = run_loadgen(
        *("twin", str(measured), "--out", str(out), "--set", "max_running_requests=64"),
        *("--concurrency", "4,8,32", "--plan", "--target-rps", "20"),
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    twin_run = Path(done.stdout.strip().splitlines()[-1])
    table = json.loads((out / "twin.json").read_text())
    rows = {r["load"]: r for r in table["steps"]}

    for load in (4.0, 8.0):  # measured steps: every column has both values and an error
        row = rows[load]
        assert row["measured"] and not row["predicted"]
        for label in ("KV fill mean", "KV fill max", "queue mean", "retractions", "power W mean"):
            assert row[label]["measured"] is not None and row[label]["twin"] is not None, (load, label, row[label])
        assert 0.05 < row["KV fill mean"]["measured"] < 0.6
        assert abs(row["KV fill mean"]["abs_error"]) < 0.1  # the twin's pool is the measured one (4096)
        assert row["power W mean"]["rel_error"] is not None and abs(row["power W mean"]["rel_error"]) < 0.1

    what_if = rows[32.0]
    assert what_if["predicted"] and what_if["outside"] == "4x the highest measured load (8)"
    assert what_if["KV fill max"]["measured"] is None and what_if["KV fill max"]["twin"] > 0.9
    onset = table["onset"]
    assert onset["kv_full"]["load"] == 32.0 and onset["kv_full"]["predicted"]
    assert onset["retractions"]["load"] == 32.0, onset  # the pool overflows: the engine retracts
    assert onset["measured_kv_full"] is None and onset["measured_retractions"] is None
    md = (out / "twin.md").read_text()
    assert "## KV cache, queue, retractions, power" in md and "| not measured |" not in md
    assert "- Retractions start: C=32, context 100 (**predicted**: 4x the highest measured load (8))" in md

    # the replay is marked a prediction; its report and the plan made from it say so
    manifest = json.loads((twin_run / "manifest.json").read_text())
    assert manifest["twin"]["predicted"] is True
    assert manifest["twin"]["source_run"] == str(measured.resolve())
    assert manifest["twin"]["overrides"] == {"max_running_requests": "64"}
    mark = f"Predicted by the twin of {measured.name} (what-if: max_running_requests=64; concurrency 4,8,32)"
    assert mark in (twin_run / "report.md").read_text().splitlines()[2]
    plan = json.loads((twin_run / "plan.json").read_text())
    assert plan["plan"]["predicted"].startswith(mark) and plan["request"]["target_rps"] == 20.0
    assert "## Planning from the twin" in md and f"> **PREDICTED.** {mark}" in md
    assert "PREDICTED, not measured" in (twin_run / "report.html").read_text()
