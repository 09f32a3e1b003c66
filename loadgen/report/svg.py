"""A small SVG chart renderer for the reports: line/scatter charts, no dependencies.

A :class:`Chart` holds series, reference lines (vertical knee markers, horizontal SLO and limit
lines), shaded bands (load steps on a time axis) and event marks (log lines, failures); ``render``
turns it into one standalone ``<svg>`` element that is valid both inside HTML and as an ``.svg``
file (all attributes inline, no CSS classes needed, no scripts). Hover text is an SVG ``<title>``.

Axes: linear with "nice" ticks (1, 2 or 5 times a power of ten, :func:`nice_ticks`) or log2 with
powers of two (:func:`log2_ticks`, for concurrency). The y axis starts at 0 unless told otherwise.
Every piece of text goes through :func:`esc`: control characters and ANSI colour codes are dropped
(XML forbids most of them) and ``& < > " '`` are escaped, so server and log text never becomes markup.
Long time series are thinned with :func:`downsample` (min and max per bucket, so peaks survive).
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]

FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
INK = "#1f2933"
MUTED = "#616e7c"
FAINT = "#9aa5b1"
GRID = "#e4e7eb"
PAPER = "#ffffff"
BAD = "#c0392b"
WARN = "#d68910"
# Colour-blind-safe, restrained (Okabe-Ito, darkened for text contrast on white).
PALETTE = ("#0b6fa4", "#d55e00", "#009e73", "#8e5ea2", "#b8860b", "#cc79a7", "#56676f", "#2b9bd8")

_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def esc(text: object) -> str:
    """Text safe as HTML or XML content or attribute value: controls and ANSI codes dropped, escaped."""
    return html.escape(_CONTROL.sub("", str(text)), quote=True)


# ------------------------------------------------------------------------------------------ ticks


def nice_step(span: float, target: int = 5) -> float:
    """The 1/2/5 x 10^k step that cuts ``span`` into about ``target`` intervals."""
    if not math.isfinite(span) or span <= 0:
        return 1.0
    raw = span / max(target, 1)
    mag = 10.0 ** math.floor(math.log10(raw))
    for m in (1.0, 2.0, 5.0, 10.0):
        if raw <= m * mag * 1.000001:
            return m * mag
    return 10.0 * mag


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]: multiples of a 1/2/5 x 10^k step, first <= lo, last >= hi.

    A zero-width range is widened around its value (0 -> [0, 1]).
    """
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0, 1.0]
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = (lo - pad, hi + pad) if lo != 0 else (0.0, 1.0)
    step = nice_step(hi - lo, target)
    first = math.floor(lo / step + 1e-9)
    last = math.ceil(hi / step - 1e-9)
    digits = max(0, -math.floor(math.log10(step)) + 1)
    return [round(k * step, digits) + 0.0 for k in range(first, last + 1)]


def log2_ticks(lo: float, hi: float, max_ticks: int = 9) -> list[float]:
    """Powers of two covering [lo, hi] (lo > 0), every second/fourth... one when there are many."""
    if not (lo > 0 and hi > 0 and math.isfinite(lo) and math.isfinite(hi)):
        return [1.0, 2.0]
    if hi < lo:
        lo, hi = hi, lo
    a = math.floor(math.log2(lo) + 1e-9)
    b = math.ceil(math.log2(hi) - 1e-9)
    if b == a:
        b = a + 1
    stride = max(1, math.ceil((b - a + 1) / max_ticks))
    return [2.0**e for e in range(a, b + 1, stride)]


def format_number(value: float, step: float | None = None) -> str:
    """A tick or value label: thousands separators, k/M suffixes, only the decimals ``step`` needs."""
    if not math.isfinite(value):
        return "–"
    step = abs(step) if step else (abs(value) or 1.0)
    av = abs(value)
    if av >= 1e6 and step >= 1e5:
        return f"{value / 1e6:g}M"
    if av >= 1e4 and step >= 1e3:
        return f"{value / 1e3:g}k"
    if step >= 1 or value == 0:
        return f"{value:,.0f}"
    decimals = min(6, -math.floor(math.log10(step) + 1e-9))
    return f"{value:,.{decimals}f}"


def format_ticks(ticks: Sequence[float]) -> list[str]:
    """Labels for one axis's ticks, in one style: all in k (or M) once the largest reaches 10,000."""
    if not ticks:
        return []
    step = abs(ticks[1] - ticks[0]) if len(ticks) > 1 else (abs(ticks[0]) or 1.0)
    top = max(abs(t) for t in ticks)
    if top >= 1e6 and step >= 1e5:
        return [f"{t / 1e6:g}M" if t else "0" for t in ticks]
    if top >= 1e4 and step >= 1e3:
        return [f"{t / 1e3:g}k" if t else "0" for t in ticks]
    return [format_number(t, step) for t in ticks]


# ------------------------------------------------------------------------------------- downsample


def downsample(x: Sequence[float] | F64, y: Sequence[float] | F64, max_points: int = 1200) -> tuple[F64, F64]:
    """Thin (x, y) (x ascending) to about ``max_points``: per x bucket the min and the max y, in x order.

    NaN in y (a gap) is kept where its bucket has no value, so lines still break there.
    """
    xs = np.asarray(x, dtype=float)
    ys = np.asarray(y, dtype=float)
    n = len(xs)
    if n <= max_points or n < 4:
        return xs, ys
    buckets = max(1, max_points // 2)
    edges = np.linspace(xs[0], xs[-1], buckets + 1)
    starts = np.searchsorted(xs, edges[:-1], side="left")
    starts = np.unique(np.append(starts, n))
    keep: list[int] = []
    for a, b in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True):
        seg = ys[a:b]
        finite = np.isfinite(seg)
        if not finite.any():
            keep.append(a)
            continue
        idx = np.flatnonzero(finite)
        lo = a + int(idx[np.argmin(seg[idx])])
        hi = a + int(idx[np.argmax(seg[idx])])
        keep.extend(sorted({lo, hi}))
        if not finite.all():  # a gap inside the bucket: keep one NaN so the line breaks
            keep.append(a + int(np.flatnonzero(~finite)[0]))
    order = np.array(sorted(set(keep)), dtype=int)
    return xs[order], ys[order]


# ------------------------------------------------------------------------------------------ model


@dataclass
class Series:
    """One line and/or set of markers. ``None``/NaN in ``y`` breaks the line.

    ``hollow[i]`` draws point i as an open marker (e.g. an INVALID step); ``tips[i]`` is its hover text;
    ``labels[i]`` a short text drawn beside it.
    """

    name: str
    x: Sequence[float] | F64
    y: Sequence[float | None] | F64
    color: str = PALETTE[0]
    line: bool = True
    markers: bool = True
    dash: str | None = None
    width: float = 2.0
    marker: str = "circle"  # circle | square | diamond
    hollow: Sequence[bool] | None = None
    tips: Sequence[str] | None = None
    legend: bool = True
    size: float = 3.6  # marker radius, px
    labels: Sequence[str] | None = None  # a short text beside each marker (e.g. the step's load)


@dataclass
class RefLine:
    """A vertical (``axis="x"``) or horizontal (``axis="y"``) reference line with a label."""

    axis: str
    value: float
    label: str
    color: str = INK
    dash: str | None = "5 4"
    tip: str | None = None
    label_at: str = "top"  # x lines: label near the top or the bottom of the plot


@dataclass
class Band:
    """A shaded x range (a load step); ``inner`` (a sub-range, e.g. the steady window) shaded darker."""

    x0: float
    x1: float
    label: str
    tip: str = ""
    inner: tuple[float, float] | None = None
    bad: bool = False


@dataclass
class Mark:
    """A point event on the x axis (a log line, failures), drawn as a tick in a lane above the plot."""

    x: float
    tip: str
    color: str = BAD
    lane: int = 0


@dataclass
class Chart:
    title: str
    x_label: str
    y_label: str
    series: list[Series] = field(default_factory=list)
    refs: list[RefLine] = field(default_factory=list)
    bands: list[Band] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    mark_lanes: Sequence[str] = ()
    x_scale: str = "linear"  # linear | log2
    x_range: tuple[float, float] | None = None
    y_min: float | None = 0.0
    y_max: float | None = None
    width: int = 640
    height: int = 320
    slug: str = "chart"


# ----------------------------------------------------------------------------------------- render


def _finite(values: Sequence[float | None] | F64) -> F64:
    arr = np.array([np.nan if v is None else float(v) for v in values], dtype=float)
    finite: F64 = arr[np.isfinite(arr)]
    return finite


def _text_width(text: str, size: float) -> float:
    return len(text) * size * 0.56


class _Scale:
    def __init__(self, lo: float, hi: float, a: float, b: float, log2: bool) -> None:
        self.log2 = log2
        self.lo, self.hi = (math.log2(lo), math.log2(hi)) if log2 else (lo, hi)
        if self.hi == self.lo:
            self.hi = self.lo + 1.0
        self.a, self.b = a, b

    def __call__(self, v: float) -> float:
        t = math.log2(v) if self.log2 else v
        return self.a + (t - self.lo) / (self.hi - self.lo) * (self.b - self.a)


def _fmt(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def _marker(shape: str, x: float, y: float, r: float, color: str, hollow: bool, tip: str | None) -> str:
    fill = PAPER if hollow else color
    style = f'fill="{fill}" stroke="{color}" stroke-width="1.5"'
    if shape == "square":
        el = f'<rect x="{_fmt(x - r)}" y="{_fmt(y - r)}" width="{_fmt(2 * r)}" height="{_fmt(2 * r)}" {style}'
    elif shape == "diamond":
        d = r * 1.3
        pts = f"{_fmt(x)},{_fmt(y - d)} {_fmt(x + d)},{_fmt(y)} {_fmt(x)},{_fmt(y + d)} {_fmt(x - d)},{_fmt(y)}"
        el = f'<polygon points="{pts}" {style}'
    else:
        el = f'<circle cx="{_fmt(x)}" cy="{_fmt(y)}" r="{_fmt(r)}" {style}'
    if tip:
        return f"{el}><title>{esc(tip)}</title></{el.split()[0][1:]}>"
    return el + "/>"


def _x_domain(chart: Chart) -> tuple[float, float]:
    if chart.x_range is not None:
        return chart.x_range
    xs: list[float] = []
    for s in chart.series:
        ys = list(s.y)
        xs.extend(float(x) for x, y in zip(s.x, ys, strict=True) if y is not None and math.isfinite(float(y)))
    xs.extend(r.value for r in chart.refs if r.axis == "x")
    xs.extend(v for b in chart.bands for v in (b.x0, b.x1))
    if chart.x_scale == "log2":
        xs = [x for x in xs if x > 0]
    if not xs:
        return (1.0, 2.0) if chart.x_scale == "log2" else (0.0, 1.0)
    return min(xs), max(xs)


def _y_domain(chart: Chart) -> tuple[float, float]:
    ys = np.concatenate([_finite(s.y) for s in chart.series]) if chart.series else np.empty(0)
    refs = [r.value for r in chart.refs if r.axis == "y"]
    lo = float(ys.min()) if len(ys) else 0.0
    hi = float(ys.max()) if len(ys) else 1.0
    if refs:
        hi = max(hi, *refs)
        lo = min(lo, *refs)
    if chart.y_min is not None:
        lo = min(chart.y_min, lo)
    if chart.y_max is not None:
        hi = chart.y_max
    return lo, hi


@dataclass
class _Frame:
    """Where a chart's parts go, in px: the plot area (``left``, ``top``, ``pw`` x ``ph``), its
    scales and ticks, the legend's rows (each item with its x offset) and the event lanes above it."""

    left: int
    top: int
    pw: int
    ph: int
    sx: _Scale
    sy: _Scale
    log2: bool
    xticks: list[float]
    yticks: list[float]
    legend_rows: list[list[tuple[Series, float]]]
    lanes: list[str]
    lane_h: int
    band_row: int
    clip: str  # the clip-path attribute that keeps lines inside the plot area


def _legend_rows(chart: Chart) -> list[list[tuple[Series, float]]]:
    """The legend's items in rows that fit the chart's width, each with its x offset."""
    legend_items = [s for s in chart.series if s.legend]
    legend_rows: list[list[tuple[Series, float]]] = [[]]
    x_cursor = 0.0
    avail = chart.width - 70
    for s in legend_items:
        item_w = 26 + _text_width(s.name, 11) + 16
        if x_cursor + item_w > avail and legend_rows[-1]:
            legend_rows.append([])
            x_cursor = 0.0
        legend_rows[-1].append((s, x_cursor))
        x_cursor += item_w
    if not legend_items:
        legend_rows = []
    return legend_rows


def _x_ticks(chart: Chart, pw: int) -> tuple[list[float], float, float]:
    """The x ticks and the drawn x domain (lo, hi): log2 padded a little, linear on the ticks."""
    xlo, xhi = _x_domain(chart)
    if chart.x_scale == "log2":
        xticks = log2_ticks(xlo, xhi)
        pad = max(0.15, (math.log2(xhi) - math.log2(xlo)) * 0.04) if xhi > xlo else 0.5
        dlo, dhi = 2 ** (math.log2(xlo) - pad), 2 ** (math.log2(xhi) + pad)
        xticks = [t for t in xticks if dlo <= t <= dhi] or xticks
    else:
        xticks = nice_ticks(xlo, xhi, max(3, pw // 90))
        dlo, dhi = (xlo, xhi) if chart.bands else (xticks[0], xticks[-1])
        if dhi <= dlo:
            dlo, dhi = xticks[0], xticks[-1]
    return xticks, dlo, dhi


def _frame(chart: Chart) -> _Frame:
    """The layout, top to bottom: title, legend rows, mark lanes, band labels, plot, x axis."""
    w, h = chart.width, chart.height
    legend_rows = _legend_rows(chart)
    top = 30
    top += 18 * len(legend_rows) + 6
    lanes = list(chart.mark_lanes) if chart.marks else []
    lane_h = 14
    top += lane_h * len(lanes)
    band_row = 14 if chart.bands else 0
    top += band_row
    left, right, bottom = 62, 18, 46
    pw, ph = w - left - right, h - top - bottom
    log2 = chart.x_scale == "log2"
    xticks, dlo, dhi = _x_ticks(chart, pw)
    sx = _Scale(dlo, dhi, left, left + pw, log2)
    # y scale: always nice
    ylo, yhi = _y_domain(chart)
    yticks = nice_ticks(ylo, yhi, max(3, ph // 55))
    sy = _Scale(yticks[0], yticks[-1], top + ph, top, False)
    clip = f'clip-path="url(#clip-{esc(chart.slug)})"'
    return _Frame(left, top, pw, ph, sx, sy, log2, xticks, yticks, legend_rows, lanes, lane_h, band_row, clip)


def _opening(chart: Chart, f: _Frame) -> list[str]:
    """The ``<svg>`` element's start: its size and fonts, hover title, paper, title and clip path."""
    w, h, left = chart.width, chart.height, f.left
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" '
        f'role="img" aria-label="{esc(chart.title)}" class="chart" data-chart="{esc(chart.slug)}" '
        f'font-family="{esc(FONT)}" font-size="11" fill="{INK}">',
        f"<title>{esc(chart.title)}</title>",
        f'<rect x="0" y="0" width="{w}" height="{h}" fill="{PAPER}"/>',
        f'<text x="{left - 50}" y="19" font-size="14" font-weight="600">{esc(chart.title)}</text>',
        f'<clipPath id="clip-{esc(chart.slug)}">'
        f'<rect x="{left}" y="{f.top}" width="{f.pw}" height="{f.ph}"/></clipPath>',
    ]


def _legend(f: _Frame) -> list[str]:
    """Each legend item: its line sample and/or marker, then its name."""
    out: list[str] = []
    for row_i, row in enumerate(f.legend_rows):
        ly = 30 + 18 * row_i + 6
        for s, off in row:
            lx = f.left - 50 + off
            dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
            if s.line:
                out.append(
                    f'<line x1="{_fmt(lx)}" y1="{ly}" x2="{_fmt(lx + 22)}" y2="{ly}" stroke="{s.color}" '
                    f'stroke-width="{s.width}"{dash}/>'
                )
            if s.markers:
                out.append(_marker(s.marker, lx + 11, ly, 3.2, s.color, False, None))
            out.append(f'<text x="{_fmt(lx + 27)}" y="{ly + 4}" fill="{MUTED}">{esc(s.name)}</text>')
    return out


def _bands(chart: Chart, f: _Frame) -> list[str]:
    """The shaded bands (under the grid), their inner ranges darker, labelled where they fit."""
    left, top, pw, ph, sx = f.left, f.top, f.pw, f.ph, f.sx
    band_g: list[str] = []
    for i, b in enumerate(chart.bands):
        x0, x1 = max(sx(b.x0), left), min(sx(b.x1), left + pw)
        if x1 <= x0:
            continue
        fill = "#fbe9e7" if b.bad else ("#f3f5f7" if i % 2 == 0 else "#fafbfc")
        tip = f"<title>{esc(b.tip or b.label)}</title>"
        band_g.append(
            f'<rect class="band" x="{_fmt(x0)}" y="{top}" width="{_fmt(x1 - x0)}" height="{ph}" '
            f'fill="{fill}">{tip}</rect>'
        )
        if b.inner:
            i0, i1 = max(sx(b.inner[0]), x0), min(sx(b.inner[1]), x1)
            if i1 > i0:
                band_g.append(
                    f'<rect x="{_fmt(i0)}" y="{top}" width="{_fmt(i1 - i0)}" height="{ph}" '
                    f'fill="{"#f5c6c0" if b.bad else "#e9edf1"}" fill-opacity="0.55">{tip}</rect>'
                )
        if x1 - x0 >= _text_width(b.label, 10) + 4:
            band_g.append(
                f'<text x="{_fmt((x0 + x1) / 2)}" y="{top - 4}" text-anchor="middle" font-size="10" '
                f'fill="{BAD if b.bad else MUTED}">{esc(b.label)}</text>'
            )
    return band_g


def _axes(chart: Chart, f: _Frame) -> list[str]:
    """The grid, the tick labels and the axis titles (no vertical grid lines over bands)."""
    left, top, pw, ph, sx, sy = f.left, f.top, f.pw, f.ph, f.sx, f.sy
    out: list[str] = []
    for t, label in zip(f.yticks, format_ticks(f.yticks), strict=True):
        y = sy(t)
        out.append(f'<line x1="{left}" y1="{_fmt(y)}" x2="{left + pw}" y2="{_fmt(y)}" stroke="{GRID}"/>')
        out.append(f'<text x="{left - 6}" y="{_fmt(y + 3.5)}" text-anchor="end" fill="{MUTED}">{esc(label)}</text>')
    xticks = f.xticks
    x_labels = format_ticks(xticks) if not f.log2 else [format_number(t, 1.0) if t >= 1 else f"{t:g}" for t in xticks]
    for t, label in zip(xticks, x_labels, strict=True):
        x = sx(t)
        if x < left - 0.5 or x > left + pw + 0.5:
            continue
        if not chart.bands:
            out.append(f'<line x1="{_fmt(x)}" y1="{top}" x2="{_fmt(x)}" y2="{top + ph}" stroke="{GRID}"/>')
        out.append(f'<line x1="{_fmt(x)}" y1="{top + ph}" x2="{_fmt(x)}" y2="{top + ph + 4}" stroke="{FAINT}"/>')
        out.append(f'<text x="{_fmt(x)}" y="{top + ph + 16}" text-anchor="middle" fill="{MUTED}">{esc(label)}</text>')
    out.append(f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="{FAINT}"/>')
    out.append(
        f'<text x="{left + pw / 2:.1f}" y="{chart.height - 8}" text-anchor="middle" fill="{MUTED}">'
        f"{esc(chart.x_label)}</text>"
    )
    out.append(
        f'<text transform="translate(14 {top + ph / 2:.1f}) rotate(-90)" text-anchor="middle" '
        f'fill="{MUTED}">{esc(chart.y_label)}</text>'
    )
    return out


def _ref_line(r: RefLine, f: _Frame) -> list[str]:
    """One reference line and its label; nothing for a vertical one outside the plot."""
    left, top, pw, ph = f.left, f.top, f.pw, f.ph
    dash = f' stroke-dasharray="{r.dash}"' if r.dash else ""
    tip = f"<title>{esc(r.tip or r.label)}</title>"
    if r.axis == "x":
        if f.log2 and r.value <= 0:
            return []
        x = f.sx(r.value)
        if not left - 0.5 <= x <= left + pw + 0.5:
            return []
        anchor, dx = ("end", -4) if x > left + pw * 0.75 else ("start", 4)
        ly = top + 14 if r.label_at == "top" else top + ph - 6
        return [
            f'<line class="ref-x" x1="{_fmt(x)}" y1="{top}" x2="{_fmt(x)}" y2="{top + ph}" stroke="{r.color}" '
            f'stroke-width="1.5"{dash}>{tip}</line>',
            f'<text x="{_fmt(x + dx)}" y="{ly}" text-anchor="{anchor}" font-size="10.5" font-weight="600" '
            f'fill="{r.color}">{esc(r.label)}</text>',
        ]
    y = f.sy(r.value)
    return [
        f'<line class="ref-y" x1="{left}" y1="{_fmt(y)}" x2="{left + pw}" y2="{_fmt(y)}" stroke="{r.color}" '
        f'stroke-width="1.5"{dash}>{tip}</line>',
        f'<text x="{left + pw - 4}" y="{_fmt(y - 4)}" text-anchor="end" font-size="10.5" '
        f'fill="{r.color}">{esc(r.label)}</text>',
    ]


def _series(s: Series, f: _Frame) -> list[str]:
    """One series: its line (broken at gaps, clipped to the plot), markers and point labels."""
    sx, sy, log2 = f.sx, f.sy, f.log2
    out: list[str] = []
    xs = [float(v) for v in s.x]
    ys = [math.nan if v is None else float(v) for v in s.y]
    hollow = list(s.hollow) if s.hollow is not None else [False] * len(xs)
    tips: list[str | None] = list(s.tips) if s.tips is not None else [None] * len(xs)
    dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
    if s.line:
        segs: list[list[str]] = [[]]
        for x, y in zip(xs, ys, strict=True):
            if not math.isfinite(y) or (log2 and x <= 0):
                if segs[-1]:
                    segs.append([])
                continue
            segs[-1].append(f"{_fmt(sx(x))},{_fmt(sy(y))}")
        for seg in segs:
            if len(seg) >= 2:
                out.append(
                    f'<polyline class="series" points="{" ".join(seg)}" fill="none" stroke="{s.color}" '
                    f'stroke-width="{s.width}" stroke-linejoin="round" stroke-linecap="round"{dash} {f.clip}/>'
                )
    if s.markers:
        for x, y, hol, hover in zip(xs, ys, hollow, tips, strict=True):
            if not math.isfinite(y) or (log2 and x <= 0):
                continue
            color = FAINT if hol else s.color
            out.append(_marker(s.marker, sx(x), sy(y), s.size, color, hol, hover))
    if s.labels is not None:
        for x, y, text in zip(xs, ys, s.labels, strict=True):
            if text and math.isfinite(y) and not (log2 and x <= 0):
                out.append(
                    f'<text class="point-label" x="{_fmt(sx(x) + s.size + 2)}" y="{_fmt(sy(y) - s.size - 1)}" '
                    f'font-size="9.5" fill="{MUTED}">{esc(text)}</text>'
                )
    return out


def _lanes(chart: Chart, f: _Frame) -> list[str]:
    """The event lanes above the plot: each lane's name, each mark's tick and its faint line down."""
    if not f.lanes:
        return []
    left, top, pw, ph, lane_h = f.left, f.top, f.pw, f.ph, f.lane_h
    out: list[str] = []
    lane_top = top - f.band_row - lane_h * len(f.lanes)
    for li, name in enumerate(f.lanes):
        ly = lane_top + li * lane_h
        out.append(
            f'<text x="{left - 6}" y="{ly + 10}" text-anchor="end" font-size="9.5" fill="{MUTED}">{esc(name)}</text>'
        )
    for m in chart.marks:
        if f.log2 and m.x <= 0:
            continue
        x = f.sx(m.x)
        if not left - 1 <= x <= left + pw + 1:
            continue
        ly = lane_top + m.lane * lane_h
        out.append(
            f'<rect class="mark" x="{_fmt(x - 1.5)}" y="{ly + 2}" width="3" height="{lane_h - 4}" '
            f'fill="{m.color}"><title>{esc(m.tip)}</title></rect>'
        )
        out.append(
            f'<line x1="{_fmt(x)}" y1="{top}" x2="{_fmt(x)}" y2="{top + ph}" stroke="{m.color}" stroke-opacity="0.25"/>'
        )
    return out


def render(chart: Chart) -> str:
    """The chart as one ``<svg>`` element (standalone-valid: carries its own xmlns and fonts)."""
    f = _frame(chart)
    out = [*_opening(chart, f), *_legend(f), *_bands(chart, f), *_axes(chart, f)]
    for r in chart.refs:
        out.extend(_ref_line(r, f))
    for s in chart.series:
        out.extend(_series(s, f))
    out.extend(_lanes(chart, f))
    out.append("</svg>")
    return "\n".join(out)


def no_data(title: str, why: str, width: int = 640, height: int = 120, slug: str = "chart") -> str:
    """A small panel saying the plot has no data and why, in place of an empty chart."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="{esc(title)}: no data" class="chart no-data" '
        f'data-chart="{esc(slug)}" font-family="{esc(FONT)}" font-size="12" fill="{INK}">'
        f"<title>{esc(title)}: no data</title>"
        f'<rect x="0.5" y="0.5" width="{width - 1}" height="{height - 1}" rx="6" fill="#fafbfc" '
        f'stroke="{GRID}"/>'
        f'<text x="12" y="24" font-size="14" font-weight="600">{esc(title)}</text>'
        f'<text x="12" y="{height / 2 + 14:.0f}" fill="{MUTED}">no data: {esc(why)}</text>'
        "</svg>"
    )


__all__ = [
    "PALETTE",
    "Band",
    "Chart",
    "Mark",
    "RefLine",
    "Series",
    "downsample",
    "esc",
    "format_number",
    "format_ticks",
    "log2_ticks",
    "nice_step",
    "nice_ticks",
    "no_data",
    "render",
]
