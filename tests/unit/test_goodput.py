"""Goodput counted from the records (``analysis.goodput``): each request judged on its own figures,
against a synthetic run whose every time is known."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.analysis.goodput import add_goodput
from loadgen.analysis.load import load_run
from loadgen.analysis.plan import capacity_plan
from loadgen.analysis.summary import build_summary
from loadgen.analysis.synthetic import make_record, step_lines, write_run_dir
from loadgen.report.pipeline import rebuild

SLO = {"ttft_p99_ms": 150.0, "tpot_p99_ms": 60.0, "itl_p99_ms": 120.0}


def run(path: Path) -> Path:
    """Step 0, window [1000, 11000) ms, 4 successful requests of 3 tokens (+ 1 outside the window):
    a: TTFT 100, gaps 50/50 (TPOT 50)            -> meets all
    b: TTFT 200, gaps 50/50                      -> misses TTFT
    c: TTFT 100, gaps 100/100 (TPOT 100)         -> misses TPOT (its p99 gap 100 is within 120)
    d: TTFT 100, gaps 10/200 (TPOT 105, p99 gap 198.1) -> misses TPOT and ITL
    """
    recs = [
        make_record("a", 0, 2000, [100, 150, 200]),
        make_record("b", 0, 3000, [200, 250, 300]),
        make_record("c", 0, 4000, [100, 200, 300]),
        make_record("d", 0, 5000, [100, 110, 310]),
        make_record("warm", 0, 500, [300, 900, 1500]),  # sent in the warm-up: not judged
    ]
    return write_run_dir(path, steps=step_lines(0, 0, 1000, 11_000, concurrency=4), records={"requests-w0.jsonl": recs})


def test_each_request_is_judged_on_its_own_figures(tmp_path: Path) -> None:
    r = load_run(run(tmp_path))
    summary = build_summary(r)
    add_goodput(r, summary["steps"], SLO)
    g = summary["steps"][0]["goodput"]
    assert (g["requests"], g["met"]) == (4, 1)
    assert g["frac"] == pytest.approx(0.25) and g["req_s"] == pytest.approx(1 / 10)
    assert g["missed_by_limit"] == {"ttft_p99_ms": 1, "tpot_p99_ms": 2, "itl_p99_ms": 1}
    # a's 3 of the 12 output tokens: a quarter of the step's aggregate tok/s
    assert g["tok_s"] == pytest.approx(summary["steps"][0]["output_tok_s"] * 3 / 12)
    assert summary["steps"][0]["goodput_frac"] == pytest.approx(0.25)


def test_the_plan_uses_the_measured_share_not_the_union_bound(tmp_path: Path) -> None:
    recs = [make_record(f"r{i}", 0, 2000 + 500 * i, [100, 150, 200]) for i in range(8)]
    d = write_run_dir(
        tmp_path, steps=step_lines(0, 0, 1000, 11_000, concurrency=4), records={"requests-w0.jsonl": recs}
    )
    r = load_run(d)
    summary = build_summary(r)
    assert summary["steps"][0]["valid"]
    loose = {"ttft_p99_ms": 1000.0}
    add_goodput(r, summary["steps"], loose)
    plan = capacity_plan(summary["steps"], loose)
    op = plan["operating_point"]
    assert op is not None and op["goodput_frac"] == 1.0
    assert "goodput fraction measured per request" in plan["notes"]
    assert not any("union bound" in n for n in plan["notes"])


def test_the_report_shows_goodput_when_an_slo_is_given(tmp_path: Path) -> None:
    d = run(tmp_path)
    rebuild(d, SLO)
    summary = json.loads((d / "summary.json").read_text())
    assert summary["steps"][0]["goodput"]["met"] == 1
    report = (d / "report.md").read_text()
    assert "## Goodput" in report and "| 0 | C=4 | 4 | 1 | 25.0% |" in report
    rebuild(d)  # no SLO: no goodput
    assert "## Goodput" not in (d / "report.md").read_text()


def test_a_request_without_a_figure_does_not_meet_a_limit_on_it(tmp_path: Path) -> None:
    recs = [make_record("one", 0, 2000, [100]), make_record("none", 0, 3000, [], end_ms=50, output_tokens=0)]
    d = write_run_dir(
        tmp_path, steps=step_lines(0, 0, 1000, 11_000, concurrency=2), records={"requests-w0.jsonl": recs}
    )
    r = load_run(d)
    summary = build_summary(r)
    add_goodput(r, summary["steps"], {"tpot_p99_ms": 1000.0, "e2e_p99_ms": 1000.0})
    g = summary["steps"][0]["goodput"]
    # one token: no TPOT to judge; no chunk at all: no TPOT either
    assert (g["requests"], g["met"], g["missed_by_limit"]) == (2, 0, {"tpot_p99_ms": 2, "e2e_p99_ms": 0})
