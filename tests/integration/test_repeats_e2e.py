"""`loadgen ramp --repeat 3` against the simulator: each step three times in a row, intervals in
summary.json, steps.csv and the report, the knee judged on the means and its stability stated."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_dir_of, run_loadgen

pytestmark = pytest.mark.slow


def test_repeat_runs_each_step_n_times_and_gives_intervals(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory("--profile", "tiny")
    args = [
        "--url",
        sim.url,
        "--concurrency",
        "1,8",
        "--repeat",
        "3",
        # each step ends once 20 requests of its window finished: all six valid at any speed of the
        # machine; the 60 s only catch a hang
        "--requests-per-step",
        "20",
        "--step-seconds",
        "60",
        "--warmup-seconds",
        "0.3",
    ]
    run_dir = run_dir_of(run_loadgen("ramp", *args, "--max-tokens", "24", "--no-telemetry", "--out", str(tmp_path)))
    summary = json.loads((run_dir / "summary.json").read_text())
    steps = summary["steps"]
    # in a row: C=1 three times, then C=8 three times
    assert [(s["concurrency"], s["step_fields"]["repeat"]) for s in steps] == [
        (1, 0),
        (1, 1),
        (1, 2),
        (8, 0),
        (8, 1),
        (8, 2),
    ]
    rep = summary["repeats"]
    assert rep["repeats"] == 3 and "Student's t" in rep["method"]
    groups = {g["concurrency"]: g for g in rep["groups"]}
    for c, g in groups.items():
        tok = g["figures"]["output_tok_s"]
        values = [s["output_tok_s"] for s in steps if s["concurrency"] == c and s["valid"]]
        assert g["valid_repeats"] == len(values) == 3
        assert tok["mean"] == pytest.approx(sum(values) / 3)
        # Student's t with 2 degrees of freedom over the three repeats' own figures
        half = 4.302653 * statistics.stdev(values) / 3**0.5
        assert tok["low"] == pytest.approx(tok["mean"] - half) and tok["high"] == pytest.approx(tok["mean"] + half)
    # the knee is judged on one point per load, and says how the repeats agree
    assert rep["knee"]["repeats"] == 3 and " of 3 repeats" in rep["knee"]["text"]
    report = (run_dir / "report.md").read_text()
    assert "## Repeats" in report and "each repeat on its own:" in report
    rows = list(csv.DictReader((run_dir / "steps.csv").open()))
    assert (
        float(rows[0]["ci_output_tok_s_low"])
        <= float(rows[0]["output_tok_s"])
        <= float(rows[0]["ci_output_tok_s_high"])
    )
