"""report.html in a real browser: headless Chromium opens it from a file:// URL, offline.

A copy of the page gets a small probe script (the report itself has none) that measures every
plot as Chromium laid it out and looks for injected elements; ``--dump-dom`` hands the result back.
A screenshot checks that the page paints. At 1280x800 (over the DevTools protocol) the report's
verdict and step table are above the fold and the step table fits without scrolling sideways, and
the comparison's headline is above the fold; both screenshots are kept (``report-1280.png``,
``compare-1280.png``). Skipped when no Chromium binary is installed (Debian: ``apt-get install
chromium``; or set LOADGEN_CHROMIUM to the binary).
"""

from __future__ import annotations

import copy
import html
import json
import os
import re
import signal
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest

from loadgen.analysis.pareto import pareto_summary
from loadgen.report.compare import compare_runs, render_compare_page
from loadgen.report.html import write_html
from loadgen.report.plots import PLOT_SLUGS
from loadgen.report.plots_demo import MARKUP_ERROR, MARKUP_LOG, write_demo_run
from tests.browser import CHROMIUM, Tab, chromium, keep_artifact, needs_browser

pytestmark = pytest.mark.slow

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium binary (apt-get install chromium, or set LOADGEN_CHROMIUM)"
)

PROBE = """<script id="probe">
window.addEventListener("load", () => {
  const out = {figures: {}, injected: 0, text: document.body.innerText};
  for (const fig of document.querySelectorAll("figure[data-plot]")) {
    const svg = fig.querySelector("svg");
    const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
    const lines = svg ? [...svg.querySelectorAll("polyline")] : [];
    out.figures[fig.dataset.plot] = {
      hasData: fig.dataset.hasData,
      width: box.width, height: box.height,
      lineLength: lines.reduce((a, p) => a + p.getTotalLength(), 0),
      markers: svg ? svg.querySelectorAll("circle, polygon, rect.mark").length : 0,
      texts: svg ? svg.querySelectorAll("text").length : 0,
    };
  }
  out.injected = document.querySelectorAll(".pwn, img, script:not(#probe), iframe").length;
  const pre = document.createElement("pre");
  pre.id = "probe-result";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def _run_chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",  # tests may run as root in a container
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=5000",
        *args,
    ]
    # Its own process group, so that on a timeout (a page that hangs the browser) the browser and
    # every helper process it started are ended together.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"chromium did not finish within 90 s; stderr: {err[-2000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.fixture
def report(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    summary = write_demo_run(run_dir)
    write_html(run_dir, summary)
    return run_dir / "report.html"


@needs_chromium
def test_every_plot_renders_in_chromium_and_markup_stays_text(report: Path, tmp_path: Path) -> None:
    probe_page = report.with_name("probe.html")
    probe_page.write_text(report.read_text().replace("</body>", PROBE + "</body>"))
    done = _run_chromium(["--dump-dom", probe_page.as_uri()], tmp_path / "profile")
    found = re.search(r'<pre id="probe-result">(.*?)</pre>', done.stdout, re.S)
    assert found, f"no probe result; chromium said: {done.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    assert sorted(result["figures"]) == sorted(PLOT_SLUGS)
    for slug, fig in result["figures"].items():
        assert fig["hasData"] == "true", slug
        assert fig["width"] > 300 and fig["height"] > 150, (slug, fig)
        assert fig["lineLength"] > 100, (slug, fig)  # Chromium computed the drawn lines' geometry
        assert fig["texts"] >= 6, (slug, fig)  # title, axis labels, tick labels
    assert result["figures"]["throughput"]["markers"] >= 8
    assert result["figures"]["kv_cache"]["markers"] >= 4  # log-line ticks
    assert result["injected"] == 0
    assert MARKUP_ERROR in result["text"] and MARKUP_LOG in result["text"]


def _png_pixels(path: Path) -> tuple[int, int, bytes]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return width, height, zlib.decompress(idat)


@needs_chromium
def test_report_paints_offline(report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    done = _run_chromium(["--window-size=1280,2400", f"--screenshot={shot}", report.as_uri()], tmp_path / "profile")
    assert shot.is_file(), done.stderr[-2000:]
    width, height, raw = _png_pixels(shot)
    assert (width, height) == (1280, 2400)
    # a painted page: many distinct byte values (text, lines, fills), not one flat background
    assert len(set(raw)) > 100


FOLD = """(() => {
  const box = (sel) => { const el = document.querySelector(sel); return el && el.getBoundingClientRect(); };
  const table = document.querySelector("#steps-table");
  return {
    page: [document.documentElement.scrollWidth, innerWidth, innerHeight],
    table: table && [table.scrollWidth, table.clientWidth],
    verdict: box("#verdict") && box("#verdict").top,
    tableHead: box("#steps-table thead") && box("#steps-table thead").bottom,
    headline: box("#headline") && box("#headline").bottom,
  };
})()"""


def _at_1280(tab: Tab, page: Path, shot: Path) -> dict[str, Any]:
    """Open ``page`` in a 1280x800 viewport; its layout figures; a screenshot kept as an artifact."""
    for domain in ("Page", "Runtime", "Log"):
        tab.call(f"{domain}.enable")
    tab.call("Emulation.setDeviceMetricsOverride", width=1280, height=800, deviceScaleFactor=1, mobile=False)
    assert tab.open(page.as_uri()) == []
    found: dict[str, Any] = tab.js(FOLD)
    tab.screenshot(shot)
    keep_artifact(shot)
    return found


@needs_browser
def test_report_and_comparison_fit_1280x800(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    summary: dict[str, Any] = dict(write_demo_run(run_dir))
    write_html(run_dir, summary)  # type: ignore[arg-type]
    other = copy.deepcopy(summary)
    other["label"] = "speculative"
    for s in other["steps"]:
        if s["output_tok_s"] is not None:
            s["output_tok_s"] *= 1.4
            s["tpot_ms"] = {k: v / 1.5 for k, v in s["tpot_ms"].items()}
    other["steps"][4].update(valid=False, invalid_reason="too few requests")
    other["pareto"] = pareto_summary(other["steps"])
    runs = [summary, other]
    compare = tmp_path / "compare.html"
    compare.write_text(render_compare_page(compare_runs(runs, ["autoregressive", "speculative"]), runs))  # type: ignore[arg-type]
    with chromium(tmp_path, size="1280,800") as tab:
        report = _at_1280(tab, run_dir / "report.html", tmp_path / "report-1280.png")
        cmp = _at_1280(tab, compare, tmp_path / "compare-1280.png")
    width, inner_w, inner_h = report["page"]
    assert (inner_w, inner_h) == (1280, 800) and width <= inner_w, report  # no sideways scroll of the page
    scroll_w, client_w = report["table"]
    assert scroll_w <= client_w, report  # every step column fits: tok/J, KV, queue, preemptions included
    assert report["verdict"] < 800 and report["tableHead"] < 800, report  # verdict and step table start in view
    assert cmp["page"][0] <= 1280 and cmp["headline"] < 800, cmp
    for name in ("report-1280.png", "compare-1280.png"):
        width, height, raw = _png_pixels(tmp_path / name)
        assert (width, height) == (1280, 800) and len(set(raw)) > 100
