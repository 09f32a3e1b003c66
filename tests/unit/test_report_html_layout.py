"""report.html and report.md as a capacity engineer meets them at 1280x800: a verdict whose words
weigh the detectors beside it, the step table with ITL and without empty columns, sections and rows
a run did not use left out, captions whose words follow the figures (issue 27)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from loadgen.analysis.knee import knee_verdict
from loadgen.report.calltables import output_kinds_table
from loadgen.report.html import render_html
from loadgen.report.markdown import render_markdown
from loadgen.report.plots_demo import write_demo_run
from loadgen.report.plots_pareto import pareto_plot
from loadgen.report.sections import LEAD_SECTIONS, TRAILING_SECTIONS
from tests.unit.test_knee import demo_steps
from tests.unit.test_report_html import Page


@pytest.fixture
def demo(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    return tmp_path, dict(write_demo_run(tmp_path))


def _steps_html(page: str) -> str:
    return page[page.index("id=steps>") : page.index("id=detectors")]


def _no_knee_summary() -> dict[str, Any]:
    """The demo's real ramp through the real knee analysis: no knee, three detectors fired."""
    steps = demo_steps()
    return {"label": "demo", "steps": steps, "knee": knee_verdict(steps)}


def test_no_knee_verdict_names_the_detectors_that_fired_and_styles_them_as_evidence(tmp_path: Path) -> None:
    summary = _no_knee_summary()
    page = render_html(tmp_path, summary)  # type: ignore[arg-type]
    verdict = page[page.index('id="verdict"') : page.index('id="figures"')]
    text = Page(verdict).all_text()
    assert "No knee in the measured range" in text
    assert (
        "Kneedle and Kleinrock flag C=64 and the power plateau C=8, but throughput still gained at least +18% per "
        "doubling of concurrency (the least from C=64 to C=128), above the rule's 10% floor: no knee"
    ) in text
    assert "No detector found saturation" not in page  # the old rule line, false beside three findings
    assert "a doubling of load that buys under 10% more throughput" in text
    # every clause of summary.json's reason is on the page, in its words
    for clause in summary["knee"]["reason"].split("; "):
        assert clause[:1].upper() + clause[1:] in text or clause in text, clause
    rows = dict(re.findall(r'data-detector="(\w+)" data-finding="([\w-]+)"', page))
    assert rows["kneedle"] == rows["kleinrock"] == rows["power_plateau"] == "flagged"
    assert "decides" not in rows.values()
    assert "<span class='tag flag'>flagged C=64</span>" in page and "<span class='tag flag'>flagged C=8</span>" in page
    assert "'tag bad'>triggered" not in page and "tag decide" not in page


def test_the_deciding_detector_alone_looks_like_the_verdict(demo: tuple[Path, dict[str, Any]]) -> None:
    run_dir, summary = demo
    page = render_html(run_dir, summary)  # type: ignore[arg-type]
    rows = dict(re.findall(r'data-detector="(\w+)" data-finding="([\w-]+)"', page))
    assert [n for n, f in rows.items() if f == "decides"] == ["slo_breach"]
    assert rows["kv_saturation"] == "flagged" and rows["error_onset"] == "clear"
    assert "<span class='tag decide hard'>decides</span>" in page
    assert "Decided by a hard limit (the SLO)" in page


def test_request_count_cards_carry_stable_attributes(demo: tuple[Path, dict[str, Any]]) -> None:
    run_dir, summary = demo
    cards = Page(render_html(run_dir, summary)).tags  # type: ignore[arg-type]
    counts = {a["data-count"]: a.get("class") for t, a in cards if t == "div" and "data-count" in a}
    assert counts == {"ok": "figure", "failed": "figure bad"}
    page = render_html(run_dir, summary)  # type: ignore[arg-type]
    assert re.search(r"data-count=\"ok\"><b>375</b>", page) and re.search(r"data-count=\"failed\"><b>340</b>", page)


def test_step_table_has_itl_and_grouped_columns(demo: tuple[Path, dict[str, Any]]) -> None:
    run_dir, summary = demo
    table = _steps_html(render_html(run_dir, summary))  # type: ignore[arg-type]
    groups = re.findall(r"<th colspan=(\d+) class=group>([^<]+)</th>", table)
    assert [g for _, g in groups] == ["Load", "Output tok/s", "Latency p50 / p99, ms", "Requests", "Server", "Power"]
    heads = re.findall(r"<th(?: class=n)?(?: title=\"[^\"]*\")?>([^<]+)</th>", table)
    assert heads[heads.index("TTFT") : heads.index("E2E") + 1] == ["TTFT", "ITL", "TPOT", "E2E"]
    itl = summary["steps"][0]["itl_ms"]
    assert f"<td class=n>{itl['p50']:.1f} / {itl['p99']:.1f}</td>" in table
    assert {"KV max", "queue", "preempt.", "log events", "GPU W", "tok/J"} <= set(heads)


def test_columns_a_run_left_empty_are_left_out(tmp_path: Path) -> None:
    summary = dict(write_demo_run(tmp_path, telemetry=False))
    for s in summary["steps"]:
        for key in ("gpu_power_w", "tokens_per_joule", "kv_usage", "queue_len", "log_events", "itl_ms"):
            s[key] = None
        s["preemptions"] = 0
    table = _steps_html(render_html(tmp_path, summary))  # type: ignore[arg-type]
    heads = set(re.findall(r">([^<>]+)</th>", table))
    assert not heads & {"GPU W", "tok/J", "KV max", "queue", "preempt.", "log events", "ITL", "Power", "Server"}
    assert "No step had a retraction or preemption. No GPU telemetry: no power columns." in table


def test_plain_chat_run_has_no_kinds_of_output_section(demo: tuple[Path, dict[str, Any]]) -> None:
    run_dir, summary = demo
    for s in summary["steps"]:  # what the analysis writes for a plain chat step
        s.update(ttft_reasoning_ms=None, ttft_answer_ms=s["ttft_ms"], ttft_tool_ms=None, reasoning_tokens_mean=None)
        s.update(reasoning_share=None, tool_calls=0, tool_args_chars_mean=None)
    assert output_kinds_table(summary) is None  # type: ignore[arg-type]
    assert "Kinds of output" not in render_html(run_dir, summary)  # type: ignore[arg-type]
    assert "Kinds of output" not in render_markdown(summary, TRAILING_SECTIONS)  # type: ignore[arg-type]
    # reasoning without tools: the table, without the tool columns
    summary["steps"][0].update(ttft_reasoning_ms={"p50": 10.0, "p99": 20.0}, reasoning_tokens_mean=30.0)
    table = output_kinds_table(summary)  # type: ignore[arg-type]
    assert table is not None and "Reasoning p50/p99 ms" in table.head
    assert not {"Tool call p50/p99 ms", "Tool calls", "Tool args chars"} & set(table.head)


def test_scenario_rows_the_run_did_not_use_are_left_out(demo: tuple[Path, dict[str, Any]]) -> None:
    run_dir, summary = demo
    manifest = {
        "options": {
            "url": "http://gpu-host:30000",
            "max_tokens": 512,
            "seed": 0,
            "scenario": None,
            "description": "",
            "find_knee": False,
            "search_max_steps": 12,
            "repeat": 1,
            "workers": 0,
            "rates": None,
        }
    }
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    section = render_html(run_dir, summary)  # type: ignore[arg-type]
    section = section[section.index("id=scenario") : section.index("id=environment")]
    rows = re.findall(r"<tr><th>([^<]+)</th>", section)
    assert rows == ["url", "max_tokens", "seed"]
    assert "7 options the run left empty or off" in section


def test_pareto_caption_follows_the_figures(demo: tuple[Path, dict[str, Any]]) -> None:
    _, summary = demo
    caption = pareto_plot(summary).caption  # type: ignore[arg-type]
    assert "Here it is above the per-request tok/s at every valid step." in caption
    assert "so faster than the per-request" not in caption  # no fixed claim
    # the demo run's C=1: 285 tok/s per user (1000 / TPOT p50) against 295 tok/s per request
    slow = copy.deepcopy(summary)
    point = next(p for p in slow["pareto"]["points"] if p["step"] == 0)
    point["per_user_tok_s"] = 285.0
    slow["steps"][0]["per_request_tok_s"] = 295.2
    caption = pareto_plot(slow).caption  # type: ignore[arg-type]
    assert "Here it is above the per-request tok/s except at C=1: 285 vs 295 tok/s" in caption


def test_markdown_verdict_is_whole_and_power_p95_below_the_mean_is_explained() -> None:
    summary = _no_knee_summary()
    summary["steps"][0]["gpu_power_w"] = {"mean": 2014.5, "p95": 1988.5, "max": 2740.1}
    md = render_markdown(summary, TRAILING_SECTIONS, LEAD_SECTIONS)  # type: ignore[arg-type]
    assert f"**No knee in the measured range.** {summary['knee']['reason']}" in md  # not cut at 300 characters
    assert "| kneedle | flagged | 64 |" in md and "| Detector | Finding | At | Evidence |" in md
    assert (
        "GPU W p95 below the mean at step 0 (C=1): p95 1,988 W < mean 2,014 W (max 2,740 W). Not an error: fewer "
        "than one reading in twenty is above the mean there"
    ) in md
    assert "the mean is time-weighted over the steady window, p95 is over the readings" in md
    for s in summary["steps"]:
        s["gpu_power_w"] = {"mean": 100.0, "p95": 120.0, "max": 130.0}
    assert "p95 below the mean" not in render_markdown(summary, TRAILING_SECTIONS)  # type: ignore[arg-type]
