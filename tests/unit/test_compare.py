"""Run comparison: ratios per matched step, the Markdown table, reading summary.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.analysis.knee import knee_verdict
from loadgen.report.compare import (
    compare_runs,
    load_summary,
    render_compare_html,
    render_compare_md,
    render_compare_page,
)
from loadgen.rundir.records import RunDirError


def step(c: int, tok_s: float, tpot_p50: float, ctx: int | None = 1024, valid: bool = True) -> dict[str, Any]:
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
    assert lines[0] == "**ar vs spec** (baseline ar):"  # the headline first, then the table
    table = lines.index("| context | C | ar tok/s | spec tok/s | spec/ar tok/s "
                        "| ar TPOT p50 ms | spec TPOT p50 ms | spec/ar TPOT p50 ms |")  # fmt: skip
    assert lines[table + 2] == "| 1024 | 1 | 133 | 303 | 2.28x | 7.5 | 3 | 0.40x |"
    assert "| 1024 | 128 | 3,600 | 4,723 (invalid) | — |" in md
    assert "Ratios are left out (—) where either step is INVALID." in md
    assert "Steps in only some runs: spec: C=256, 1,024 ctx" in md


def test_a_step_without_context_is_named_by_its_load_alone() -> None:
    a = {"steps": [step(1, 100.0, 5.0, ctx=None), step(6, 500.0, 9.0, ctx=None)]}
    b = {"steps": [step(1, 120.0, 5.0, ctx=None)]}
    cmp = compare_runs([a, b])
    md, page = render_compare_md(cmp), render_compare_page(cmp, [a, b])  # type: ignore[list-item]
    assert "@None" not in md and "None" not in page
    assert "Steps in only some runs: run1: C=6" in md and "<li>run1: C=6</li>" in page


def repeated(label: str, tok_s: dict[int, list[float]], ttft: dict[int, list[float]]) -> dict[str, Any]:
    """A run with --repeat: each load's repeats in a row, each a step of its own."""
    steps = []
    for c, values in tok_s.items():
        for r, (x, t) in enumerate(zip(values, ttft[c], strict=True)):
            s = step(c, x, 10.0)
            s["step"] = len(steps)
            s["ttft_ms"] = {"mean": t, "p50": t, "p90": None, "p99": None}
            s["step_fields"] = {"repeat": r}
            steps.append(s)
    return {"label": label, "steps": steps}


def test_headline_with_one_run_each_says_the_noise_is_unknown() -> None:
    cmp = compare_runs([autoregressive(), speculative()], ["ar", "spec"])
    peak, ttft = cmp["headline"]
    # the peak over VALID steps: spec's 4,723 at C=128 is INVALID, its 4,800 at C=256 counts
    assert (peak["metric"], peak["better"], peak["value"], peak["baseline_value"]) == (
        "peak_output_tok_s", "spec", 4800.0, 3600.0,
    )  # fmt: skip
    assert peak["ratio"] == pytest.approx(4800 / 3600)
    assert peak["noise"] == "unknown" and peak["beyond_noise"] is None and peak["low"] is None
    assert peak["text"] == (
        "Peak valid output throughput: spec 4,800 tok/s (C=256, 1,024 ctx) vs ar 3,600 tok/s (C=128, 1,024 ctx): "
        "spec is higher, 1.33x ar's (+33%, higher is better); noise unknown: one run each (no --repeat), so no "
        "spread to judge it by; the difference is not shown to be beyond the noise; the runs measured different "
        "loads (spec up to C=256, ar up to C=128): compare at a load both ran (below)."
    )
    # a peak at a load the other run never measured names no winner: the page's title is the like-for-like
    # finding (TTFT at the highest load both ran validly)
    assert peak["like_for_like"] is False and ttft["like_for_like"] is True
    page = render_compare_page(cmp, [autoregressive(), speculative()])
    assert "<p class=head>TTFT p50 at C=64, 1,024 ctx, the highest load both ran validly: the same" in page
    # TTFT at the highest load both ran validly (C=128 is INVALID in spec): the same 120 ms
    assert ttft["metric"] == "ttft_p50_ms" and ttft["where"]["spec"] == [1024, 64]
    assert ttft["better"] is None and ttft["text"].endswith("spec 120 ms vs ar 120 ms: the same.")
    md = render_compare_md(cmp)
    assert f"- {peak['text']}" in md and "beyond the noise (" not in md


def test_headline_beyond_and_within_the_noise_of_repeats() -> None:
    base = repeated(
        "ar", {8: [1000.0, 1010.0, 990.0], 16: [1500.0, 1530.0, 1470.0]}, {8: [50, 52, 48], 16: [80, 82, 78]}
    )
    fast = repeated(
        "spec", {8: [1400.0, 1390.0, 1410.0], 16: [2100.0, 2120.0, 2080.0]}, {8: [50, 60, 40], 16: [79, 90, 70]}
    )
    cmp = compare_runs([base, fast], ["ar", "spec"])
    peak, ttft = cmp["headline"]
    assert peak["better"] == "spec" and peak["ratio"] == pytest.approx(1.4)
    assert peak["noise"] == "repeats" and peak["beyond_noise"] is True
    assert peak["low"] is not None and peak["high"] is not None and 1.0 < peak["low"] < 1.4 < peak["high"]
    assert f"beyond the noise (95% CI {peak['low']:.2f}-{peak['high']:.2f}x over the repeats)" in peak["text"]
    # TTFT at C=16: 79.7 vs 80 ms, a spread of +-10 ms: lower, but within the noise
    assert ttft["where"]["spec"] == [1024, 16] and ttft["better"] == "spec"
    assert ttft["beyond_noise"] is False and "no clear winner" in ttft["text"]
    assert "spec is ahead, 1.00x ar's (-0.4%, lower is better); within the noise (95% CI" in ttft["text"]
    page = render_compare_page(cmp, [base, fast])  # type: ignore[list-item]
    assert "Peak valid output throughput: spec is better, 1.40x (beyond the noise)" in page
    assert 'data-metric="ttft_p50_ms" data-noise="repeats"' in page


def test_headline_when_only_one_run_was_repeated() -> None:
    base = repeated("ar", {8: [1000.0, 1010.0, 990.0]}, {8: [50, 52, 48]})
    single = {"label": "one", "steps": [step(8, 900.0, 10.0)]}
    peak, _ = compare_runs([base, single], ["ar", "one"])["headline"]
    assert peak["better"] == "ar" and peak["beyond_noise"] is None
    assert "ar is ahead: one at 0.90x ar's (-10%, higher is better)" in peak["text"]
    assert "noise unknown: only ar was repeated, so the other's spread is not known" in peak["text"]


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
