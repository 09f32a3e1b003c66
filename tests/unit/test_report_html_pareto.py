"""report.html's Pareto section: its own heading before the plots, the figure, the points table,
the GPU count's source, and the Pareto plot not repeated in the plot grid."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from loadgen.analysis.pareto import pareto_summary
from loadgen.report.html import render_html
from loadgen.report.plots_demo import write_demo_run
from tests.unit.test_report_html import Page


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    run_dir = tmp_path_factory.mktemp("report") / "run"
    return run_dir, dict(write_demo_run(run_dir))


def test_pareto_section_comes_before_the_plots(demo: tuple[Path, dict[str, Any]]) -> None:
    run_dir, summary = demo
    page = render_html(run_dir, summary)  # type: ignore[arg-type]
    assert page.index("id=plan") < page.index("id=pareto") < page.index("id=plots")
    section = page[page.index("id=pareto") : page.index("id=plots")]
    assert "Throughput per GPU vs interactivity" in section
    assert "1000 / TPOT p50" in section and "8 GPUs, from the GPU telemetry" in section
    assert "plots/pareto.svg" in section
    tags = Page(page).tags
    figures = [a["data-plot"] for t, a in tags if t == "figure"]
    assert figures.count("pareto") == 1  # in its own section only, not again in the grid
    assert 'data-chart="pareto"' in section
    # the points table: a row per step with figures, the frontier and the INVALID step tagged
    table = section[section.index("id=pareto-points") :]
    assert table.count("'tag ok'>frontier<") == 8 and table.count("'tag bad'>INVALID<") == 1
    assert "22.5" in table and "180.4" in table  # C=64: tok/s per user, tok/s per GPU


def test_gpu_count_from_the_option_and_unknown(demo: tuple[Path, dict[str, Any]]) -> None:
    run_dir, summary = demo
    s = copy.deepcopy(summary)
    s["pareto"] = pareto_summary(s["steps"], 2)
    page = render_html(run_dir, s)  # type: ignore[arg-type]
    assert "2 GPUs, from --gpu-count" in page
    s["pareto"] = pareto_summary([{**st, "gpu_count": 0} for st in s["steps"]])  # type: ignore[typeddict-item]
    page = render_html(run_dir, s)  # type: ignore[arg-type]
    section = page[page.index("id=pareto") : page.index("id=plots")]
    assert "per GPU unknown: per node" in section and "tok/s per node" in section
