"""compare.html: every main plot with all runs overlaid (one colour per run, a legend), the Pareto
plot among them, and the step table kept; all run text escaped."""

from __future__ import annotations

import copy
import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from loadgen.analysis.pareto import pareto_summary
from loadgen.report.compare import compare_runs, render_compare_page
from loadgen.report.plots_demo import write_demo_run
from loadgen.report.plots_overlay import OVERLAY_SLUGS
from loadgen.report.svg import PALETTE, PAPER

NS = "{http://www.w3.org/2000/svg}"
LABELS = ["ar", "spec <b>x</b>", "tp4"]


def _scaled(summary: dict[str, Any], label: str, tok: float, tpot: float) -> dict[str, Any]:
    out = copy.deepcopy(summary)
    out["label"] = label
    for s in out["steps"]:
        if s["output_tok_s"] is not None:
            s["output_tok_s"] *= tok
            s["tpot_ms"] = {k: v * tpot for k, v in s["tpot_ms"].items()}
            s["tokens_per_joule"] *= tok
    out["pareto"] = pareto_summary(out["steps"])
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    base = dict(write_demo_run(tmp_path_factory.mktemp("cmp") / "run"))
    return [_scaled(base, LABELS[0], 1.0, 1.0), _scaled(base, LABELS[1], 1.5, 0.6), _scaled(base, LABELS[2], 0.8, 1.2)]


def _svgs(page: str) -> dict[str, ET.Element]:
    out = {}
    for block in re.findall(r"<svg .*?</svg>", page, re.S):
        root = ET.fromstring(block)
        out[root.get("data-chart") or ""] = root
    return out


@pytest.mark.parametrize("n", [2, 3])
def test_every_main_plot_overlays_every_run(runs: list[dict[str, Any]], n: int) -> None:
    chosen = runs[:n]
    cmp = compare_runs(chosen, LABELS[:n])  # type: ignore[arg-type]
    page = render_compare_page(cmp, chosen)  # type: ignore[arg-type]
    assert page.startswith("<!doctype html>")
    figures = re.findall(r'data-plot="([^"]+)" data-has-data="(\w+)"', page)
    assert [slug for slug, _ in figures] == list(OVERLAY_SLUGS)
    assert all(has == "true" for _, has in figures)
    assert set(OVERLAY_SLUGS) >= {"throughput", "ttft_p99", "tpot_p99", "power", "tokens_per_joule", "pareto"}
    svgs = _svgs(page)
    assert set(svgs) == {f"cmp-{slug}" for slug in OVERLAY_SLUGS}
    for slug, root in svgs.items():
        strokes = {el.get("stroke") for el in root.iter(f"{NS}polyline") if el.get("class") == "series"}
        assert strokes == set(PALETTE[:n]), slug  # one line per run, each in its own colour
        legend = {t.text for t in root.iter(f"{NS}text")}
        assert set(LABELS[:n]) <= legend, slug  # the legend names every run (as text)
    # the page-level legend and the table stay
    assert page.count('class="swatch"') == n
    assert "(baseline)" in page and '<table class="compare">' in page
    assert "<b>x</b>" not in page and "spec &lt;b&gt;x&lt;/b&gt;" in page


def test_pareto_overlay_has_each_runs_frontier(runs: list[dict[str, Any]]) -> None:
    cmp = compare_runs(runs, LABELS)  # type: ignore[arg-type]
    root = _svgs(render_compare_page(cmp, runs))["cmp-pareto"]  # type: ignore[arg-type]
    lines = [el for el in root.iter(f"{NS}polyline") if el.get("class") == "series"]
    assert len(lines) == 3 and all(len((el.get("points") or "").split()) == 8 for el in lines)
    tips = [t.text or "" for el in root.iter() if (t := el.find(f"{NS}title")) is not None]
    for label in LABELS:
        assert sum(t.startswith(f"{label} · step ") for t in tips) == 8
    assert any(el.get("class") == "ref-x" for el in root.iter(f"{NS}line"))  # the SLO's TPOT limit


def test_a_run_without_power_leaves_the_others_drawn(runs: list[dict[str, Any]]) -> None:
    bare = copy.deepcopy(runs[1])
    for s in bare["steps"]:
        for key in ("gpu_power_w", "tokens_per_joule", "power_valid"):
            s.pop(key, None)
    chosen = [runs[0], bare]
    page = render_compare_page(compare_runs(chosen, LABELS[:2]), chosen)  # type: ignore[arg-type]
    power = _svgs(page)["cmp-power"]
    strokes = {el.get("stroke") for el in power.iter(f"{NS}polyline") if el.get("class") == "series"}
    assert strokes == {PALETTE[0]}
    nopower = [copy.deepcopy(bare), copy.deepcopy(bare)]
    nopower[1]["label"] = "again"
    page = render_compare_page(compare_runs(nopower, ["a", "b"]), nopower)  # type: ignore[arg-type]
    assert 'data-plot="power" data-has-data="false"' in page


def test_summaries_must_match_the_labels(runs: list[dict[str, Any]]) -> None:
    cmp = compare_runs(runs[:2], LABELS[:2])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="3 summaries for 2 labels"):
        render_compare_page(cmp, runs)  # type: ignore[arg-type]


def test_older_summaries_without_pareto_still_overlay(runs: list[dict[str, Any]]) -> None:
    old = [copy.deepcopy(r) for r in runs[:2]]
    for r in old:
        del r["pareto"]
    page = render_compare_page(compare_runs(old, LABELS[:2]), old)  # type: ignore[arg-type]
    assert 'data-plot="pareto" data-has-data="true"' in page


def test_an_invalid_step_is_an_open_marker_off_the_line(runs: list[dict[str, Any]]) -> None:
    """A step that cannot be trusted keeps its figure as an open grey marker, but no run's line bends
    through it: the line joins the valid steps on either side (as the report's own plots do)."""
    chosen = [copy.deepcopy(r) for r in runs[:2]]
    bad = chosen[1]["steps"][4]  # C=16, with figures
    bad["valid"], bad["invalid_reason"] = False, "too few requests"
    page = render_compare_page(compare_runs(chosen, LABELS[:2]), chosen)  # type: ignore[arg-type]
    root = _svgs(page)["cmp-throughput"]
    line = next(
        el for el in root.iter(f"{NS}polyline") if el.get("class") == "series" and el.get("stroke") == PALETTE[1]
    )
    # 8 steps with figures, C=256 has none: 7 on the line, not the INVALID C=16
    assert len((line.get("points") or "").split()) == 7
    hollow = [
        el
        for el in root.iter()
        if (t := el.find(f"{NS}title")) is not None and (t.text or "").startswith(f"{LABELS[1]} · step 4 ")
    ]
    assert (
        len(hollow) == 1
        and hollow[0].get("fill") == PAPER
        and "INVALID: too few requests"
        in (
            hollow[0].find(f"{NS}title").text or ""  # type: ignore[union-attr]
        )
    )
    x_of_marker = float(hollow[0].get("x") or 0) + float(hollow[0].get("width") or 0) / 2  # a square: run 2
    assert all(abs(float(p.split(",")[0]) - x_of_marker) > 1 for p in (line.get("points") or "").split())
