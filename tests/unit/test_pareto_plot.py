"""plots/pareto.svg: well-formed SVG with one marker per step, the frontier line, the knee, the SLO
line, INVALID steps hollow; computed for a summary written before ``pareto`` existed."""

from __future__ import annotations

import copy
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from loadgen.analysis.pareto import pareto_summary
from loadgen.report.html import write_html
from loadgen.report.plots_demo import write_demo_run
from loadgen.report.plots_pareto import pareto_plot
from loadgen.report.svg import FAINT, PAPER

NS = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    run_dir = tmp_path_factory.mktemp("pareto") / "run"
    return run_dir, dict(write_demo_run(run_dir))


def _titles(root: ET.Element, tag: str) -> list[str]:
    return [t.text or "" for el in root.iter(f"{NS}{tag}") if (t := el.find(f"{NS}title")) is not None]


def test_the_svg_file_is_well_formed_with_a_marker_per_step(demo: tuple[Path, dict[str, Any]]) -> None:
    run_dir, summary = demo
    write_html(run_dir, summary)  # type: ignore[arg-type]
    root = ET.parse(run_dir / "plots" / "pareto.svg").getroot()
    assert root.tag == f"{NS}svg" and root.get("data-chart") == "pareto"
    points = [t for t in _titles(root, "circle") if t.startswith("step ")]
    drawn = [p for p in summary["pareto"]["points"] if p["per_user_tok_s"] is not None]
    assert len(points) == len(drawn) == 8
    assert all("on the frontier" in t for t in points)  # the demo's curve is all frontier
    assert "step 6 · C=64 · 22.5 tok/s per user · 180 tok/s per GPU · on the frontier" in points
    line = root.find(f"{NS}polyline[@class='series']")
    assert line is not None and len((line.get("points") or "").split()) == 8
    labels = [t.text for t in root.iter(f"{NS}text") if t.get("class") == "point-label"]
    assert labels == [f"C={c}" for c in (128, 64, 32, 16, 8, 4, 2, 1)]  # in frontier (x) order


def test_knee_and_slo_line(demo: tuple[Path, dict[str, Any]]) -> None:
    _, summary = demo
    plot = pareto_plot(summary)  # type: ignore[arg-type]
    root = ET.fromstring(plot.svg)
    knee = _titles(root, "polygon")
    assert len(knee) == 1 and knee[0].startswith("knee C=32: step 5 · C=32")
    refs = [el for el in root.iter(f"{NS}line") if el.get("class") == "ref-x"]
    assert len(refs) == 1
    tip = refs[0].find(f"{NS}title")
    assert tip is not None and "SLO TPOT p99 ≤ 50 ms" in (tip.text or "") and "20.0 tok/s" in (tip.text or "")
    # the SLO line sits at x = 1000 / 50 = 20 tok/s: a quarter of the 0..80 axis
    ticks = {t.text: float(t.get("x") or 0) for t in root.iter(f"{NS}text") if t.get("text-anchor") == "middle"}
    x0, x80 = ticks["0"], ticks["80"]
    assert float(refs[0].get("x1") or 0) == pytest.approx(x0 + (x80 - x0) / 4, abs=0.2)
    assert "Red diamond: the knee step" in plot.caption


def test_invalid_step_with_figures_is_hollow_and_off_the_frontier(demo: tuple[Path, dict[str, Any]]) -> None:
    _, summary = demo
    s = copy.deepcopy(summary)
    s["steps"][7]["valid"] = False  # C=128, the highest throughput per GPU
    s["steps"][7]["invalid_reason"] = "too few requests"
    s["pareto"] = pareto_summary(s["steps"])
    assert not s["pareto"]["points"][7]["on_frontier"]
    root = ET.fromstring(pareto_plot(s).svg)  # type: ignore[arg-type]
    hollow = [
        el
        for el in root.iter(f"{NS}circle")
        if el.get("fill") == PAPER and el.get("stroke") == FAINT and el.find(f"{NS}title") is not None
    ]
    assert len(hollow) == 1
    title = hollow[0].find(f"{NS}title")
    assert title is not None and "C=128" in (title.text or "") and "INVALID" in (title.text or "")


def test_summary_without_pareto_and_unknown_gpus(demo: tuple[Path, dict[str, Any]]) -> None:
    _, summary = demo
    s = copy.deepcopy(summary)
    del s["pareto"]
    for step in s["steps"]:
        step.pop("gpu_count", None)
    plot = pareto_plot(s)  # type: ignore[arg-type]
    assert plot.has_data
    assert "output tok/s per node" in plot.svg and "per GPU unknown: per node" in plot.caption


def test_far_slo_is_named_not_drawn(demo: tuple[Path, dict[str, Any]]) -> None:
    _, summary = demo
    s = copy.deepcopy(summary)
    s["slo"] = {"tpot_p99_ms": 1.0}  # 1000 tok/s per user, far right of the fastest step (60)
    plot = pareto_plot(s)  # type: ignore[arg-type]
    assert 'class="ref-x"' not in plot.svg
    assert "Off the scale" in plot.caption and "1,000 tok/s per user" in plot.caption


def test_no_points_is_a_no_data_panel(demo: tuple[Path, dict[str, Any]]) -> None:
    _, summary = demo
    s = copy.deepcopy(summary)
    for step in s["steps"]:
        step["output_tok_s"] = None
    s["pareto"] = pareto_summary(s["steps"])
    plot = pareto_plot(s)  # type: ignore[arg-type]
    assert not plot.has_data and "no-data" in plot.svg
    ET.fromstring(plot.svg)
    assert re.search(r"no data: no step has both", plot.svg)
