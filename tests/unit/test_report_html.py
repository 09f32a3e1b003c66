"""report.html and plots/*.svg rendered from synthetic runs: content, order, escaping, no-data panels."""

from __future__ import annotations

import copy
import json
import time
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadgen.analysis.load import RunLoadError, load_run
from loadgen.analysis.summary import build_summary
from loadgen.analysis.synthetic import make_record, step_lines, write_run_dir
from loadgen.report.html import render_html, write_html
from loadgen.report.plots import PLOT_SLUGS, build_plots
from loadgen.report.plots_demo import MARKUP_ERROR, MARKUP_LOG, write_demo_run
from loadgen.report.plots_time import Failure

NS = "{http://www.w3.org/2000/svg}"


class Page(HTMLParser):
    """Tags, attributes and text of a page as a browser's parser sees them."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def all_text(self) -> str:
        return "".join(self.text)

    def figures(self) -> dict[str, str | None]:
        return {
            a["data-plot"] or "": a.get("data-has-data") for t, a in self.tags if t == "figure" and "data-plot" in a
        }


@pytest.fixture
def demo(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    return tmp_path, write_demo_run(tmp_path)


def test_full_report_has_verdict_first_then_every_plot(demo: tuple[Path, dict[str, Any]]) -> None:
    run_dir, summary = demo
    page = render_html(run_dir, summary)
    parsed = Page(page)
    text = parsed.all_text()
    knee = summary["knee"]
    assert knee["concurrency"] == 32
    assert f"Knee: C={knee['concurrency']}" in text
    first_clause = knee["reason"].split("; ")[0]
    assert first_clause in text
    # at 1280x800 the verdict, the headline cards and the step table come first
    assert page.index('id="verdict"') < page.index('id="figures"') < page.index("id=steps") < page.index("id=plots")
    assert page.index("id=plots") < page.index("id=errors") < page.index("id=logs") < page.index("id=scenario")
    assert parsed.figures() == {slug: "true" for slug in PLOT_SLUGS}
    # each plot is an inline SVG with its drawn elements
    svgs = [a for t, a in parsed.tags if t == "svg"]
    assert [a["data-chart"] for a in svgs] == list(PLOT_SLUGS)
    assert "knee C=32" in text and "USL fit" in text and "SLO TTFT p99 ≤ 2,000 ms" in text
    assert "SLO TPOT p99 ≤ 50 ms" in text and "power limit 8,800 W" in text and "95% full" in text
    # the capacity plan, the scenario and the environment close the page
    plan = summary["plan"]
    assert f"{plan['replicas']} ({plan['gpus']} GPUs)" in text
    assert "1, 2, 4, 8, 16, 32, 64, 128, 256" in text and "loadgen ramp --demo" in text
    assert "bench-01" in text and "2.47.0" in text


def test_step_table_labels_every_step(demo: tuple[Path, dict[str, Any]]) -> None:
    run_dir, summary = demo
    page = render_html(run_dir, summary)
    rows = [a.get("class") for t, a in Page(page).tags if t == "tr" and a.get("class") in ("valid", "invalid")]
    assert rows == ["valid" if s["valid"] else "invalid" for s in summary["steps"]]
    table = page[page.index("id=steps") : page.index("id=detectors")]
    assert table.count(">VALID<") == 8 and table.count(">INVALID<") == 1
    assert "server served nothing" in table


def test_server_text_with_markup_shows_as_text(demo: tuple[Path, dict[str, Any]]) -> None:
    run_dir, summary = demo
    summary = copy.deepcopy(summary)
    summary["steps"][0]["invalid_reason"] = "<i>bad</i>"  # even analysis text is escaped
    summary["steps"][0]["valid"] = False
    page = render_html(run_dir, summary)
    parsed = Page(page)
    tags = [t for t, _ in parsed.tags]
    assert "script" not in tags and "img" not in tags
    assert not any("pwn" in (a.get("class") or "") for _, a in parsed.tags)
    # the same page with plain words instead of markup has exactly the same elements
    plain = copy.deepcopy(summary)
    plain["steps"][0]["invalid_reason"] = "bad"
    plain["totals"]["error_samples"] = {"connection_refused": "boom"}
    plain["label"] = "demo"
    assert sorted(t for t, _ in Page(render_html(run_dir, plain)).tags) == sorted(tags)
    text = parsed.all_text()
    assert MARKUP_ERROR in text  # the error sample, as the characters the server sent
    assert MARKUP_LOG in text  # the captured log line
    assert "demo <ramp> & co" in text  # the label
    assert "<i>bad</i>" in text


def test_svg_files_beside_the_page_are_well_formed(demo: tuple[Path, dict[str, Any]]) -> None:
    run_dir, summary = demo
    paths = write_html(run_dir, summary)
    assert paths[0] == run_dir / "report.html" and paths[0].is_file()
    assert sorted(p.name for p in paths[1:]) == sorted(f"{s}.svg" for s in PLOT_SLUGS)
    for p in paths[1:]:
        root = ET.parse(p).getroot()
        assert root.tag == f"{NS}svg"
        assert not list(root.iter(f"{NS}script"))
        if p.stem in ("throughput", "power_total", "kv_cache"):
            assert list(root.iter(f"{NS}polyline")), p.name
    # the log line with markup sits in a <title> of the KV plot as text
    kv = ET.parse(run_dir / "plots" / "kv_cache.svg").getroot()
    titles = [t.text or "" for t in kv.iter(f"{NS}title")]
    assert any(MARKUP_LOG in t for t in titles)


def test_page_is_self_contained(demo: tuple[Path, dict[str, Any]]) -> None:
    run_dir, summary = demo
    page = render_html(run_dir, summary)
    parsed = Page(page)
    assert not [t for t, _ in parsed.tags if t in ("script", "link", "iframe", "object", "embed")]
    for _, attrs in parsed.tags:
        for name in ("src", "href", "xlink:href"):
            value = attrs.get(name)
            assert value is None or value.startswith("#"), (name, value)
    assert "@import" not in page and "url(http" not in page and "@font-face" not in page


def test_no_telemetry_and_no_knee(tmp_path: Path) -> None:
    summary = write_demo_run(tmp_path, telemetry=False, knee=False)
    page = render_html(tmp_path, summary)
    parsed = Page(page)
    text = parsed.all_text()
    assert "No knee verdict" in text
    figs = parsed.figures()
    for slug in ("throughput", "per_request", "ttft", "tpot", "e2e"):
        assert figs[slug] == "true"
    for slug in ("tokens_per_joule", "power_total", "power_per_gpu", "kv_cache", "queue"):
        assert figs[slug] == "false"
    assert "no data: no samples.jsonl (telemetry was not recorded)" in text
    assert "no data: no GPU energy was measured" in text
    assert "No events.jsonl" in text
    # without a knee object the USL curve is still fitted from the steps
    assert "USL fit" in text and "knee C=" not in text


def test_telemetry_keys_absent_or_none(tmp_path: Path) -> None:
    summary = write_demo_run(tmp_path)
    for s in summary["steps"]:
        for key in ("gpu_power_w", "tokens_per_joule", "kv_usage", "queue_len", "preemptions", "log_events"):
            s[key] = None
        s.pop("power_valid")
    (tmp_path / "samples.jsonl").write_text('{"t_ns": 1, "src": "gpu", "gpu": 0, "power_w": null}\n{torn')
    page = render_html(tmp_path, summary)
    figs = Page(page).figures()
    assert figs["tokens_per_joule"] == "false" and figs["power_total"] == "false"
    assert "GPU samples carry no power reading" in page
    assert "no server metrics in samples.jsonl" in page


def test_malformed_summary_values_never_break_the_page(tmp_path: Path) -> None:
    """A hand-edited or older summary.json: any value of the wrong type renders, as "–" or no data."""
    base = write_demo_run(tmp_path, telemetry=False)
    targets: list[tuple[Any, str]] = [(None, k) for k in ("steps", "totals", "knee", "plan", "slo", "label")]
    targets += [("step", k) for k in base["steps"][0]]
    targets += [("totals", k) for k in base["totals"]]
    targets += [("knee", k) for k in ("concurrency", "reason", "detectors", "ignored_steps", "axis")]
    targets += [("plan", k) for k in ("operating_point", "per_replica", "notes", "energy")]
    for where, key in targets:
        for bad in (None, "<x>", [1], {"mean": "<x>"}, float("nan")):
            summary = copy.deepcopy(base)
            owner: dict[str, Any] = (
                summary if where is None else summary["steps"][3] if where == "step" else summary[where]
            )
            owner[key] = bad
            page = render_html(tmp_path, summary)
            parsed = Page(page)
            assert len(parsed.figures()) == len(PLOT_SLUGS), (where, key, bad)
            assert "<x>" not in page


def test_numpy_numbers_in_the_summary_are_numbers(tmp_path: Path) -> None:
    summary = write_demo_run(tmp_path, telemetry=False)
    for s in summary["steps"]:
        s["concurrency"] = np.int64(s["concurrency"])
        if s["output_tok_s"] is not None:
            s["output_tok_s"] = np.float64(s["output_tok_s"])
        s["requests_ok"] = np.int64(s["requests_ok"])
    page = render_html(tmp_path, summary)
    assert Page(page).figures()["throughput"] == "true"
    assert f"<td class=n>{int(summary['steps'][2]['requests_ok']):,}</td>" in page


def test_unwritable_plot_folder_names_the_path(tmp_path: Path) -> None:
    summary = write_demo_run(tmp_path, telemetry=False)
    (tmp_path / "plots").write_text("a file where the folder should be")
    with pytest.raises(RunLoadError, match=r"cannot write .*plots.*permissions"):
        write_html(tmp_path, summary)


def test_empty_summary_renders_every_panel_as_no_data(tmp_path: Path) -> None:
    page = render_html(tmp_path, {})
    parsed = Page(page)
    assert set(parsed.figures().values()) == {"false"}
    assert "No steps were recorded" in parsed.all_text()
    assert "No manifest.json" in parsed.all_text()


def test_rate_ramp_and_several_context_lengths(tmp_path: Path) -> None:
    summary = write_demo_run(tmp_path, telemetry=False, knee=False)
    steps = []
    for ctx in (1000, 8000):
        for s in summary["steps"]:
            t = copy.deepcopy(s)
            t["rate"], t["concurrency"], t["context_tokens"] = s["concurrency"] / 4, None, ctx
            steps.append(t)
    summary["steps"] = steps
    page = render_html(tmp_path, summary)
    text = Page(page).all_text()
    assert "request rate, req/s (log2 scale)" in text
    assert "1,000 ctx" in text and "8,000 ctx" in text
    assert "The USL curve is drawn for concurrency ramps only." in text
    assert "rate, req/s" in text  # the step table's load column


def test_failures_from_the_request_records_are_marked(tmp_path: Path) -> None:
    """A real run directory through load_run/build_summary: failed requests appear on the time plots."""
    lines = step_lines(0, 0, 100, 3000, concurrency=1, warmup_s=0.1) + step_lines(
        1, 3000, 3100, 6000, concurrency=2, warmup_s=0.1
    )
    ok = [make_record(f"ok{i}", 0, 200 + i * 100, [10, 20, 30]) for i in range(20)]
    bad = [
        make_record(f"bad{i}", 1, 3200 + i * 100, [], status=500, error_class="http_5xx", error="<b>down</b>")
        for i in range(5)
    ]
    write_run_dir(tmp_path, steps=lines, records={"requests-w0.jsonl": ok + bad}, manifest={"label": "t"})
    t0 = 1_700_000_000_000_000_000
    samples = [{"t_ns": t0 + k * 100_000_000, "src": "server", "kv_usage": k / 60, "queued": 0} for k in range(60)]
    (tmp_path / "samples.jsonl").write_text("\n".join(json.dumps(s) for s in samples) + "\n")
    run = load_run(tmp_path)
    summary = build_summary(run)
    write_html(tmp_path, summary, run=run)
    kv = ET.parse(tmp_path / "plots" / "kv_cache.svg").getroot()
    marks = [r for r in kv.iter(f"{NS}rect") if r.get("class") == "mark"]
    tips = [m.find(f"{NS}title").text or "" for m in marks]  # type: ignore[union-attr]
    assert len(tips) == 5 and all("http_5xx" in t for t in tips)
    assert "failed" in [t.text for t in kv.iter(f"{NS}text")]
    page = (tmp_path / "report.html").read_text()
    assert "&lt;b&gt;down&lt;/b&gt;" in page and "<b>down</b>" not in page


def test_many_failures_and_log_lines_are_binned() -> None:
    summary = {"steps": [{"step": 0, "concurrency": 1, "start_ns": 0, "steady_ns": 0, "end_ns": int(100e9)}]}
    samples = [{"t_ns": int(k * 1e8), "src": "server", "kv_usage": 0.5} for k in range(1000)]
    failures = [Failure(int(k * 1e7), "timeout") for k in range(10_000)]
    events = [{"t_ns": int(k * 1e8), "src": "log", "pattern": "oom", "line": f"line {k}"} for k in range(1000)]
    kv = next(p for p in build_plots(summary, samples, events, failures) if p.slug == "kv_cache")
    root = ET.fromstring(kv.svg)
    marks = [r for r in root.iter(f"{NS}rect") if r.get("class") == "mark"]
    assert 2 <= len(marks) <= 2 * 241
    tips = [t.text or "" for m in marks if (t := m.find(f"{NS}title")) is not None]
    assert sum("timeout ×" in t for t in tips) > 100


def test_long_time_series_render_fast_and_thinned(tmp_path: Path) -> None:
    summary = write_demo_run(tmp_path, gpu_hz=70.0)  # 8 GPUs x 70 Hz x 180 s: about 100k samples
    n = (tmp_path / "samples.jsonl").read_bytes().count(b"\n")
    assert n > 95_000
    start = time.perf_counter()
    page = render_html(tmp_path, summary)
    elapsed = time.perf_counter() - start
    assert elapsed < 5.0, f"render took {elapsed:.1f} s"
    for _, attrs in Page(page).tags:
        if "points" in attrs:
            assert len((attrs["points"] or "").split()) <= 1300


def test_total_power_sums_each_gpus_latest_reading() -> None:
    """Two GPUs at 100 W and 300 W sampled at different instants sum to 400 W; while GPU 1 is silent
    for longer than the stale limit the total is GPU 0 alone; the limit is the sum of both limits."""
    from loadgen.report.plots_time import _gpus, _TimeAxis, _total_power
    from loadgen.rundir.samples import samples_of

    s = 1_000_000_000
    samples = [
        {"t_ns": k * s // 10, "src": "gpu", "gpu": 0, "power_w": 100.0, "power_limit_w": 700} for k in range(300)
    ]
    samples += [
        {"t_ns": k * s // 10 + s // 20, "src": "gpu", "gpu": 1, "power_w": 300.0, "power_limit_w": 700}
        for k in range(300)
        if not 100 <= k < 200  # GPU 1 silent from 10 s to 20 s
    ]
    xs, ys, limit = _total_power(_gpus(samples_of(samples)), _TimeAxis(0, 1.0, "s"))
    assert limit == 1400.0
    middle = (xs > 12) & (xs < 19)
    early = (xs > 1) & (xs < 9)
    assert np.all(ys[middle] == 100.0)
    assert np.all(ys[early] == 400.0)


def test_total_power_drops_a_lost_gpu_as_the_step_figures_do() -> None:
    """A GPU lost at 5 s: its last reading holds neither in the plot nor in the step's power,
    even within the stale limit (both read GPU power through analysis.telemetry.as_of)."""
    from loadgen.analysis.telemetry import step_telemetry
    from loadgen.report.plots_time import _gpus, _TimeAxis, _total_power
    from loadgen.rundir.samples import samples_of

    s = 1_000_000_000
    samples = [
        {"t_ns": k * s // 10, "src": "gpu", "gpu": g, "power_w": 100.0 + 200 * g} for k in range(100) for g in (0, 1)
    ]
    samples = [x for x in samples if not (x["gpu"] == 1 and x["t_ns"] > 5 * s - s // 10)]  # GPU 1 stops at 4.9 s
    lost = {1: 5 * s}
    xs, ys, _ = _total_power(_gpus(samples_of(samples)), _TimeAxis(0, 1.0, "s"), lost)
    assert np.all(ys[(xs > 1) & (xs < 4.8)] == 400.0)
    assert np.all(ys[(xs >= 5.0) & (xs < 5.5)] == 100.0)  # at once, not after the 1 s stale limit
    events = [{"t_ns": 5 * s, "kind": "gpu_lost", "gpu": 1}]
    row = step_telemetry(samples, events, [(5 * s, 9 * s)], [10])[0]
    assert row["gpu_power_w"]["mean"] == pytest.approx(100.0)
