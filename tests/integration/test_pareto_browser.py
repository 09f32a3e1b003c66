"""The Pareto plot and the compare page in a real browser: headless Chromium over the DevTools
protocol (``websocket-client``) opens plots/pareto.svg, report.html and compare.html from file://
URLs, offline, records every console message and uncaught exception while each loads, and checks
that no error was logged and that every step's marker is laid out inside its chart and is what the
browser hits at its centre (drawn, not hidden behind another element).

A page that logs an error is opened first, so a silent recorder cannot pass the test. Skipped
without a Chromium binary (``apt-get install chromium``, or set LOADGEN_CHROMIUM).
"""

from __future__ import annotations

import copy
import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadgen.analysis.pareto import pareto_summary
from loadgen.report.compare import compare_runs, render_compare_page
from loadgen.report.html import write_html
from loadgen.report.plots_demo import write_demo_run
from tests.browser import CHROMIUM, HAVE_WS, Tab
from tests.conftest import free_port, wait_http

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None or not HAVE_WS,
        reason="needs a Chromium binary (apt-get install chromium, or set LOADGEN_CHROMIUM) and websocket-client",
    ),
]


@pytest.fixture(scope="module")
def tab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tab]:
    assert CHROMIUM is not None
    port = free_port()
    profile = tmp_path_factory.mktemp("chromium-profile")
    browser = subprocess.Popen(
        [
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
            "--disable-background-networking", "--disable-sync", "--disable-dev-shm-usage",
            f"--user-data-dir={profile}", f"--remote-debugging-port={port}", "--window-size=1280,1000",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    page = None
    try:
        wait_http(f"http://127.0.0.1:{port}/json/version", browser, 30)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as resp:
            targets = [t for t in json.load(resp) if t.get("type") == "page"]
        page = Tab(targets[0]["webSocketDebuggerUrl"])
        for domain in ("Page", "Runtime", "Log"):
            page.call(f"{domain}.enable")
        yield page
    finally:
        if page is not None:
            page.close()
        browser.terminate()
        try:
            browser.wait(10)
        except subprocess.TimeoutExpired:
            browser.kill()
            browser.wait(10)


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pages")
    run_dir = root / "run"
    summary: dict[str, Any] = dict(write_demo_run(run_dir))
    write_html(run_dir, summary)  # type: ignore[arg-type]
    other = copy.deepcopy(summary)
    other["label"] = "speculative"
    for s in other["steps"]:
        if s["output_tok_s"] is not None:
            s["output_tok_s"] *= 1.4
            s["tpot_ms"] = {k: v / 1.5 for k, v in s["tpot_ms"].items()}
    other["pareto"] = pareto_summary(other["steps"])
    runs = [summary, other]
    compare = root / "compare.html"
    compare.write_text(render_compare_page(compare_runs(runs, ["autoregressive", "speculative"]), runs))  # type: ignore[arg-type]
    noisy = root / "noisy.html"
    noisy.write_text("<!doctype html><title>x</title><script>console.error('recorder works')</script>")
    return {
        "svg": run_dir / "plots" / "pareto.svg",
        "report": run_dir / "report.html",
        "compare": compare,
        "noisy": noisy,
    }


# For each step marker of one chart: laid out with a size, inside the chart's box, and the element
# the browser hits at its centre (after scrolling it into view).
MARKERS = """
((selector) => {
  const svg = document.querySelector(selector);
  if (!svg) return null;
  const out = {box: null, markers: []};
  for (const el of svg.querySelectorAll("circle, polygon, rect")) {
    const title = el.querySelector("title");
    if (!title || !/step \\d+/.test(title.textContent) || title.textContent.startsWith("knee")) continue;
    el.scrollIntoView({block: "center"});
    const b = el.getBoundingClientRect(), s = svg.getBoundingClientRect();
    const cx = b.left + b.width / 2, cy = b.top + b.height / 2;
    const hit = document.elementFromPoint(cx, cy);
    out.markers.push({
      title: title.textContent, w: b.width, h: b.height,
      inside: b.left >= s.left - 1 && b.right <= s.right + 1 && b.top >= s.top - 1 && b.bottom <= s.bottom + 1,
      hit: hit === el || (hit && hit.closest && hit.closest("circle, polygon, rect") === el),
      fill: getComputedStyle(el).fill,
    });
  }
  const s = svg.getBoundingClientRect();
  out.box = {w: s.width, h: s.height};
  return out;
})
"""


def test_the_error_recorder_hears_an_error(tab: Tab, pages: dict[str, Path]) -> None:
    assert any("recorder works" in e for e in tab.open(pages["noisy"].as_uri()))


def test_pareto_svg_opens_without_errors_with_every_point_visible(tab: Tab, pages: dict[str, Path]) -> None:
    assert tab.open(pages["svg"].as_uri()) == []
    # opened as an XML document: a parse error would replace the svg root
    assert tab.js("document.documentElement.localName") == "svg"
    found = tab.js(f"{MARKERS}('svg')")
    assert found["box"]["w"] >= 600 and found["box"]["h"] >= 300
    assert len(found["markers"]) == 8, found
    for m in found["markers"]:
        assert m["w"] > 4 and m["h"] > 4 and m["inside"] and m["hit"], m
    assert tab.js("document.querySelectorAll('polyline.series').length") == 1
    # the knee: a larger diamond under the C=32 point, showing around it
    knee = tab.js(
        "(() => { const t = [...document.querySelectorAll('polygon > title')]"
        ".find(t => t.textContent.startsWith('knee C=32'));"
        " const b = t && t.parentNode.getBoundingClientRect(); return b ? b.width : 0; })()"
    )
    assert knee > 12


def test_report_pareto_section_renders_without_errors(tab: Tab, pages: dict[str, Path]) -> None:
    assert tab.open(pages["report"].as_uri()) == []
    found = tab.js(f"{MARKERS}('#pareto ~ .plots svg[data-chart=pareto]')")
    assert found is not None, "no Pareto figure after the #pareto heading"
    assert found["box"]["w"] >= 500
    assert len(found["markers"]) == 8
    assert all(m["w"] > 4 and m["inside"] and m["hit"] for m in found["markers"]), found
    line = tab.js("document.querySelector('svg[data-chart=pareto] polyline.series').getTotalLength()")
    assert line > 100


def test_compare_overlays_render_without_errors(tab: Tab, pages: dict[str, Path]) -> None:
    assert tab.open(pages["compare"].as_uri()) == []
    charts = tab.js(
        "[...document.querySelectorAll('figure[data-plot]')].map(f => ({slug: f.dataset.plot,"
        " w: f.querySelector('svg').getBoundingClientRect().width,"
        " lines: [...f.querySelectorAll('polyline.series')].map(p => p.getTotalLength())}))"
    )
    assert {c["slug"] for c in charts} >= {"throughput", "ttft_p99", "tpot_p99", "power", "tokens_per_joule", "pareto"}
    for c in charts:
        assert c["w"] > 300 and len(c["lines"]) >= 2 and min(c["lines"]) > 50, c
    found = tab.js(f"{MARKERS}('svg[data-chart=cmp-pareto]')")
    assert len(found["markers"]) == 16  # 8 steps of each run
    assert sum(m["inside"] for m in found["markers"]) == 16
    assert sum(m["hit"] for m in found["markers"]) >= 14  # two runs' points may touch
