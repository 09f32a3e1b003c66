"""The SVG chart module: tick generation, number formatting, downsampling, escaping, geometry."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from loadgen.report.svg import (
    Band,
    Chart,
    Mark,
    RefLine,
    Series,
    downsample,
    esc,
    format_number,
    format_ticks,
    log2_ticks,
    nice_step,
    nice_ticks,
    no_data,
    render,
)

NS = "{http://www.w3.org/2000/svg}"


def _is_nice_step(step: float) -> bool:
    mag = 10 ** math.floor(math.log10(step) + 1e-12)
    return any(math.isclose(step, m * mag, rel_tol=1e-9) for m in (1, 2, 5, 10))


@pytest.mark.parametrize(
    ("lo", "hi", "expected"),
    [
        (0, 97, [0, 20, 40, 60, 80, 100]),
        (0, 1, [0, 0.2, 0.4, 0.6, 0.8, 1.0]),
        (0.013, 0.071, [0, 0.02, 0.04, 0.06, 0.08]),
        (0, 8800, [0, 2000, 4000, 6000, 8000, 10000]),
        (-3, 3, [-4, -2, 0, 2, 4]),
    ],
)
def test_nice_ticks_known_ranges(lo: float, hi: float, expected: list[float]) -> None:
    assert nice_ticks(lo, hi) == pytest.approx(expected)


def test_nice_ticks_cover_the_range_with_round_evenly_spaced_values() -> None:
    rng = np.random.default_rng(1)
    for _ in range(500):
        scale = 10 ** rng.uniform(-4, 7)
        lo = rng.uniform(-1, 1) * scale
        hi = lo + rng.uniform(0.01, 3) * scale
        target = int(rng.integers(3, 9))
        ticks = nice_ticks(lo, hi, target)
        step = ticks[1] - ticks[0]
        assert ticks[0] <= lo + 1e-9 * scale and ticks[-1] >= hi - 1e-9 * scale
        assert _is_nice_step(step), (lo, hi, ticks)
        assert np.allclose(np.diff(ticks), step, rtol=1e-6)
        # every tick is a whole multiple of the step: "round" numbers, no float noise like 0.30000000004
        assert all(abs(t / step - round(t / step)) < 1e-6 for t in ticks)
        assert 2 <= len(ticks) <= 2 * target + 2


def test_nice_ticks_degenerate_ranges() -> None:
    assert nice_ticks(0, 0) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    five = nice_ticks(5, 5)
    assert five[0] < 5 < five[-1]
    assert nice_ticks(10, 0) == nice_ticks(0, 10)
    assert nice_ticks(float("nan"), 1) == [0.0, 1.0]
    assert nice_step(0) == 1.0


def test_log2_ticks_are_powers_of_two_covering_the_range() -> None:
    assert log2_ticks(1, 128) == [1, 2, 4, 8, 16, 32, 64, 128]
    assert log2_ticks(0.5, 8) == [0.5, 1, 2, 4, 8]
    assert log2_ticks(3, 100) == [2, 4, 8, 16, 32, 64, 128]
    many = log2_ticks(1, 4096)  # 13 powers: every second one
    assert many == [1, 4, 16, 64, 256, 1024, 4096]
    assert log2_ticks(8, 8) == [8, 16]
    assert log2_ticks(0, 8) == [1.0, 2.0]  # no log of zero


def test_format_ticks_uses_one_style_per_axis() -> None:
    assert format_ticks([0, 5000, 10000]) == ["0", "5k", "10k"]
    assert format_ticks([0, 500, 1000, 1500]) == ["0", "500", "1,000", "1,500"]
    assert format_ticks([0, 0.2, 0.4]) == ["0", "0.2", "0.4"]
    assert format_ticks([0, 0.05, 0.1]) == ["0", "0.05", "0.10"]
    assert format_ticks([0, 2e6, 4e6]) == ["0", "2M", "4M"]
    assert format_number(1234.5, 1) == "1,234"
    assert format_number(float("inf")) == "–"


def test_downsample_keeps_peaks_order_and_gaps() -> None:
    x = np.arange(100_000, dtype=float)
    y = np.sin(x / 5000.0)
    y[54_321] = 9.0  # a one-sample spike must survive
    y[80_000:80_010] = np.nan  # a telemetry gap must still break the line
    xs, ys = downsample(x, y, 1200)
    assert len(xs) <= 1300
    assert np.all(np.diff(xs) > 0)
    assert np.nanmax(ys) == 9.0 and 54_321.0 in xs
    assert np.isnan(ys).any()
    assert np.nanmin(ys) == pytest.approx(np.nanmin(y), abs=1e-6)
    small_x, small_y = downsample([1.0, 2.0], [3.0, 4.0])
    assert small_x.tolist() == [1.0, 2.0] and small_y.tolist() == [3.0, 4.0]


def test_esc_removes_controls_and_escapes_markup() -> None:
    assert esc('<b x="1">a & b</b>') == "&lt;b x=&quot;1&quot;&gt;a &amp; b&lt;/b&gt;"
    assert esc("\x1b[31mred\x1b[0m\x00 ok\x07") == "red ok"
    assert esc("tab\tand\nnewline") == "tab\tand\nnewline"


def _chart(**kw: object) -> Chart:
    chart = Chart(
        "Throughput <b>x</b>",
        "concurrent users",
        "tok/s",
        x_scale="log2",
        series=[
            Series("measured <i>", [1, 2, 4, 8], [10, 20, 35, None], tips=["a", "b<script>", "c", "d"]),
            Series("fit", [1, 2, 4, 8], [11, 21, 33, 40], markers=False, dash="4 4"),
        ],
        refs=[RefLine("x", 4, "knee C=4"), RefLine("y", 30, "SLO <30>")],
        slug="t1",
    )
    for k, v in kw.items():
        setattr(chart, k, v)
    return chart


def test_render_is_well_formed_svg_with_every_element() -> None:
    svg = render(_chart())
    root = ET.fromstring(svg)
    assert root.tag == f"{NS}svg"
    texts = [t.text for t in root.iter(f"{NS}text")]
    assert "Throughput <b>x</b>" in texts  # escaped in the source, plain text once parsed
    assert "measured <i>" in texts and "knee C=4" in texts and "SLO <30>" in texts
    assert not list(root.iter(f"{NS}script")) and not list(root.iter("b"))
    for tick in ("1", "2", "4", "8"):
        assert tick in texts
    circles = list(root.iter(f"{NS}circle"))
    # three markers with values (the None point has none) plus legend swatches; hover text on markers
    titled = [c for c in circles if c.find(f"{NS}title") is not None]
    assert [c.find(f"{NS}title").text for c in titled] == ["a", "b<script>", "c"]  # type: ignore[union-attr]
    assert len(list(root.iter(f"{NS}polyline"))) == 2
    assert len([ln for ln in root.iter(f"{NS}line") if ln.get("class") == "ref-x"]) == 1
    assert len([ln for ln in root.iter(f"{NS}line") if ln.get("class") == "ref-y"]) == 1


def test_log2_axis_labels_fractions_exactly() -> None:
    chart = Chart("rates", "req/s", "tok/s", x_scale="log2", series=[Series("s", [0.25, 0.5, 1, 2], [1, 2, 3, 4])])
    texts = [t.text for t in ET.fromstring(render(chart)).iter(f"{NS}text")]
    assert "0.25" in texts and "0.5" in texts and "1" in texts and "2" in texts


def test_log2_axis_places_points_geometrically() -> None:
    root = ET.fromstring(render(_chart()))
    xs = [
        float(c.get("cx", "nan")) for c in root.iter(f"{NS}circle") if c.find(f"{NS}title") is not None
    ]  # C = 1, 2, 4
    assert xs[1] - xs[0] == pytest.approx(xs[2] - xs[1], abs=0.2)


def test_y_axis_is_linear_from_zero() -> None:
    root = ET.fromstring(render(_chart()))
    ys = [float(c.get("cy", "nan")) for c in root.iter(f"{NS}circle") if c.find(f"{NS}title") is not None]
    # values 10, 20, 35: the pixel distance from 10 to 20 is 10/15 of the distance from 20 to 35
    assert (ys[0] - ys[1]) / (ys[1] - ys[2]) == pytest.approx(10 / 15, rel=0.01)
    zero_label = [t for t in root.iter(f"{NS}text") if t.text == "0"]
    assert zero_label, "the y axis starts at 0"


def test_bands_and_marks_render_with_tooltips() -> None:
    chart = Chart(
        "KV",
        "time, s",
        "%",
        series=[Series("kv", [0, 5, 10, 15], [0, 40, 90, 95], markers=False)],
        bands=[Band(0, 10, "C=1", "step 0 · VALID", inner=(3, 10)), Band(10, 15, "C=2", "step 1 · INVALID", bad=True)],
        marks=[Mark(12, "kv_cache_full · <img src=x>")],
        mark_lanes=["server log"],
        slug="kv",
    )
    root = ET.fromstring(render(chart))
    bands = [r for r in root.iter(f"{NS}rect") if r.get("class") == "band"]
    assert [b.find(f"{NS}title").text for b in bands] == ["step 0 · VALID", "step 1 · INVALID"]  # type: ignore[union-attr]
    assert bands[1].get("fill") != bands[0].get("fill")
    marks = [r for r in root.iter(f"{NS}rect") if r.get("class") == "mark"]
    assert marks[0].find(f"{NS}title").text == "kv_cache_full · <img src=x>"  # type: ignore[union-attr]
    assert not list(root.iter(f"{NS}img"))
    texts = [t.text for t in root.iter(f"{NS}text")]
    assert "server log" in texts and "C=1" in texts


def test_line_breaks_at_missing_values() -> None:
    chart = Chart("gap", "x", "y", series=[Series("s", [0, 1, 2, 3, 4], [1, 2, None, 3, 4], markers=False)])
    root = ET.fromstring(render(chart))
    lines = list(root.iter(f"{NS}polyline"))
    assert len(lines) == 2
    assert all(len(p.get("points", "").split()) == 2 for p in lines)


def test_no_data_panel_says_why() -> None:
    svg = no_data("GPU power", "no samples.jsonl <none>", slug="p")
    root = ET.fromstring(svg)
    texts = [t.text for t in root.iter(f"{NS}text")]
    assert "no data: no samples.jsonl <none>" in texts
    assert "no-data" in (root.get("class") or "")
    assert not re.search(r"<none>", svg)
