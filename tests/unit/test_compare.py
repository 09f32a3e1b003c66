"""Run comparison: ratios per matched step, the Markdown table, reading summary.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.analysis.knee import knee_verdict
from loadgen.report.compare import compare_runs, load_summary, render_compare_html, render_compare_md
from loadgen.rundir.records import RunDirError


def step(c: int, tok_s: float, tpot_p50: float, ctx: int = 1024, valid: bool = True) -> dict[str, Any]:
    return {
        "step": c,
        "concurrency": c,
        "context_tokens": ctx,
        "rate": None,
        "output_tok_s": tok_s,
        "per_request_tok_s": tok_s / c,
        "ttft_ms": {"mean": None, "p50": 120.0, "p90": None, "p99": None},
        "tpot_ms": {"mean": None, "p50": tpot_p50, "p90": None, "p99": None},
        "e2e_ms": {"mean": None, "p50": None, "p90": None, "p99": 9000.0},
        "valid": valid,
        "invalid_reason": None if valid else "server down",
    }


def autoregressive() -> dict[str, Any]:
    return {"label": "ar", "steps": [step(1, 132.7, 7.5), step(64, 3000.0, 20.0), step(128, 3600.0, 30.0)]}


def speculative() -> dict[str, Any]:
    steps = [step(1, 303.2, 3.0), step(64, 3795.0, 16.0), step(128, 4723.2, 24.0, valid=False), step(256, 4800, 50)]
    return {"label": "spec", "steps": steps}


def test_ratios_per_matched_step() -> None:
    cmp = compare_runs([autoregressive(), speculative()], ["ar", "spec"])
    assert cmp["baseline"] == "ar" and cmp["axis"] == "concurrency"
    rows = {r["concurrency"]: r for r in cmp["rows"]}
    assert sorted(rows) == [1, 64, 128]
    assert rows[1]["ratios"]["spec"]["output_tok_s"] == pytest.approx(303.2 / 132.7)  # 2.285x
    assert rows[64]["ratios"]["spec"]["output_tok_s"] == pytest.approx(3795.0 / 3000.0)
    assert rows[64]["ratios"]["spec"]["tpot_ms"] == pytest.approx(0.8)
    assert rows[64]["ratios"]["spec"]["ttft_ms"] == pytest.approx(1.0)
    # An invalid step gets values but no ratio.
    assert rows[128]["values"]["spec"]["output_tok_s"] == 4723.2
    assert rows[128]["ratios"]["spec"]["output_tok_s"] is None
    assert rows[128]["valid"] == {"ar": True, "spec": False}
    assert cmp["unmatched"] == {"ar": [], "spec": [[1024, 256.0]]}
    json.dumps(cmp, allow_nan=False)


def test_steps_are_matched_by_context_and_concurrency() -> None:
    a = {"steps": [step(8, 100.0, 10.0, ctx=1024), step(8, 50.0, 20.0, ctx=8192)]}
    b = {"steps": [step(8, 80.0, 10.0, ctx=8192), step(8, 300.0, 10.0, ctx=1024)]}
    cmp = compare_runs([a, b])
    assert cmp["labels"] == ["run1", "run2"]
    got = {(r["context_tokens"], r["concurrency"]): r["ratios"]["run2"]["output_tok_s"] for r in cmp["rows"]}
    assert got == {(1024, 8.0): pytest.approx(3.0), (8192, 8.0): pytest.approx(1.6)}


def test_three_runs_each_against_the_first() -> None:
    third = {"steps": [step(1, 265.4, 3.5), step(64, 6000.0, 10.0)]}
    cmp = compare_runs([autoregressive(), speculative(), third], ["ar", "spec", "fast"])
    rows = {r["concurrency"]: r for r in cmp["rows"]}
    assert sorted(rows) == [1, 64]  # 128 is not in the third run
    assert rows[1]["ratios"]["fast"]["output_tok_s"] == pytest.approx(2.0)
    assert rows[64]["ratios"]["fast"]["output_tok_s"] == pytest.approx(2.0)


def test_markdown_table() -> None:
    md = render_compare_md(compare_runs([autoregressive(), speculative()], ["ar", "spec"]))
    lines = md.splitlines()
    assert lines[0] == (
        "| context | C | ar tok/s | spec tok/s | spec/ar tok/s "
        "| ar TPOT p50 ms | spec TPOT p50 ms | spec/ar TPOT p50 ms |"
    )
    assert lines[2] == "| 1024 | 1 | 133 | 303 | 2.28x | 7.5 | 3 | 0.40x |"
    assert "| 1024 | 128 | 3,600 | 4,723 (invalid) | — |" in md
    assert "Ratios are left out (—) where either step is INVALID." in md
    assert "Steps in only some runs (load@context): spec: 256@1024" in md


def test_markdown_escapes_pipes_in_labels() -> None:
    md = render_compare_md(compare_runs([autoregressive(), speculative()], ["a|r", "spec"]))
    assert "a\\|r tok/s" in md


def test_html_table_escapes_labels_and_marks_invalid_steps() -> None:
    page = render_compare_html(compare_runs([autoregressive(), speculative()], ["<b>ar</b>", "spec"]))
    assert "<b>ar</b>" not in page and "&lt;b&gt;ar&lt;/b&gt; tok/s" in page
    assert '<td class="invalid" title="INVALID step">4,723</td>' in page
    assert '<td class="ratio">2.28x</td>' in page
    assert page.count("<tr>") == 4  # header + C=1, 64, 128


def test_compare_needs_two_runs_and_distinct_labels() -> None:
    with pytest.raises(ValueError, match="at least two runs"):
        compare_runs([autoregressive()])
    with pytest.raises(ValueError, match="distinct"):
        compare_runs([autoregressive(), speculative()], ["x", "x"])


def test_load_summary_reads_a_run_dir(tmp_path: Path) -> None:
    summary = {"steps": [step(1, 10.0, 5.0)], "knee": knee_verdict([step(1, 10.0, 5.0)])}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    assert load_summary(tmp_path)["steps"][0]["output_tok_s"] == 10.0


def test_load_summary_errors_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(RunDirError, match=r"no summary.json in .*: run `loadgen report .*` first"):
        load_summary(tmp_path)
    with pytest.raises(RunDirError, match="not a run directory"):
        load_summary(tmp_path / "missing")
    (tmp_path / "summary.json").write_text('{"steps": [1,\n')
    with pytest.raises(RunDirError, match=r"summary.json is not valid JSON \(line 2"):
        load_summary(tmp_path)
    (tmp_path / "summary.json").write_text('{"knee": {}}')
    with pytest.raises(RunDirError, match="has no 'steps' list"):
        load_summary(tmp_path)
