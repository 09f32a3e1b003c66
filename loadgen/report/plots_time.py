"""The time plots: telemetry against seconds since the first step started.

Total GPU power against the summed power limit, power per GPU against the per-GPU limit, KV-cache
fill, running and queued requests. Each step is a shaded band, its warm-up lighter than its steady
window; server log matches and failed requests are ticks in lanes above the plot (binned to at most
240). Series break across telemetry gaps and are thinned to about 1,200 points per line. The total
power follows the step figures' rule for a stale or lost GPU (``analysis.telemetry.as_of``).

Inputs are ``samples.jsonl`` and ``events.jsonl`` lines as plain dicts (any key may be absent or
None) and the failed requests as ``Failure``; a plot without its telemetry is a no-data panel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen.analysis.contracts import RunSummary
from loadgen.analysis.formats import prose
from loadgen.analysis.telemetry import as_of, gpu_stale_ns
from loadgen.analysis.values import number, steps_of, summary_axis
from loadgen.report.plots_common import Plot, load_label
from loadgen.report.svg import (
    BAD,
    F64,
    PALETTE,
    WARN,
    Band,
    Chart,
    Mark,
    RefLine,
    Series,
    downsample,
    no_data,
    render,
)
from loadgen.rundir.samples import GpuSample, Sample, ServerSample, gpu_samples, server_samples

MAX_POINTS = 1200
MAX_MARKS = 240
KV_FULL_FRAC = 0.95


@dataclass
class Failure:
    """One failed request on the time axis (wall-clock ns) and its error class."""

    t_ns: int
    error_class: str


@dataclass
class _TimeAxis:
    t0_ns: int
    unit_s: float
    label: str

    def x(self, t_ns: float) -> float:
        return (t_ns - self.t0_ns) / 1e9 / self.unit_s


def _time_axis(summary: RunSummary, samples: Sequence[Sample]) -> _TimeAxis | None:
    starts = [v for s in steps_of(summary) if (v := number(s.get("start_ns"))) is not None]
    ends = [v for s in steps_of(summary) if (v := number(s.get("end_ns"))) is not None]
    t0 = min(starts) if starts else None
    if t0 is None:
        times = [float(r["t_ns"]) for r in samples]
        if not times:
            return None
        t0, t1 = min(times), max(times)
    else:
        t1 = max(ends) if ends else t0
    span_s = (t1 - t0) / 1e9
    if span_s > 2 * 3600:
        return _TimeAxis(int(t0), 3600.0, "time since the first step, hours")
    if span_s > 20 * 60:
        return _TimeAxis(int(t0), 60.0, "time since the first step, minutes")
    return _TimeAxis(int(t0), 1.0, "time since the first step, s")


def _bands(summary: RunSummary, ta: _TimeAxis) -> list[Band]:
    axis = summary_axis(summary)
    bands: list[Band] = []
    for s in steps_of(summary):
        a, b, steady = number(s.get("start_ns")), number(s.get("end_ns")), number(s.get("steady_ns"))
        if a is None or b is None or b <= a:
            continue
        load = load_label(number(s.get(axis)), axis)
        bad = s.get("valid", True) is False
        status = "VALID" if not bad else f"INVALID: {s.get('invalid_reason') or 'no reason given'}"
        failed = int(number(s.get("requests_failed")) or 0)
        tip = (
            f"step {s.get('step', '?')} · {load} · {status} · {int(number(s.get('requests_ok')) or 0):,} ok, "
            f"{failed:,} failed"
        )
        if s.get("power_valid") is False and s.get("power_invalid_reason"):
            tip += f" · power invalid: {s['power_invalid_reason']}"
        inner = (ta.x(steady), ta.x(b)) if steady is not None and a <= steady <= b else None
        bands.append(Band(ta.x(a), ta.x(b), load, tip, inner, bad))
    return bands


def _marks(
    events: Sequence[dict[str, Any]], failures: Sequence[Failure], ta: _TimeAxis
) -> tuple[list[Mark], list[str]]:
    """Log matches (lane "server log") and failed requests (lane "failed") binned to at most MAX_MARKS."""
    lanes: list[str] = []
    marks: list[Mark] = []
    logs = [e for e in events if e.get("src") == "log" and number(e.get("t_ns")) is not None]
    tele = [
        e
        for e in events
        if e.get("src") == "telemetry"
        and number(e.get("t_ns")) is not None
        and e.get("kind") not in ("started", "stopped", "gpus", "sampler_recovered")
    ]

    def binned(items: list[tuple[float, str, str]], lane: int) -> None:
        if not items:
            return
        xs = [x for x, _, _ in items]
        lo, hi = min(xs), max(xs)
        width = (hi - lo) / MAX_MARKS if hi > lo else 1.0
        bins: dict[int, list[tuple[float, str, str]]] = {}
        for it in items:
            bins.setdefault(int((it[0] - lo) / width) if width else 0, []).append(it)
        for group in bins.values():
            colors = {c for _, _, c in group}
            color = BAD if BAD in colors else next(iter(colors))
            if len(group) == 1:
                tip = group[0][1]
            else:
                counts: dict[str, int] = {}
                for _, t, _ in group:
                    head = t.split(" · ")[1] if " · " in t else t
                    counts[head] = counts.get(head, 0) + 1
                span = f"{prose(group[0][0])}–{prose(group[-1][0])}"
                tip = f"{len(group)} events at {span}: " + ", ".join(f"{k} ×{v}" for k, v in counts.items())
                tip += f" · first: {group[0][1]}"
            marks.append(Mark(group[0][0], tip[:600], color, lane))

    if logs or tele:
        lanes.append("server log")
        items = []
        for e in sorted(logs + tele, key=lambda e: float(e["t_ns"])):
            sev = str(e.get("severity") or "")
            color = BAD if sev in ("error", "critical", "fatal") or e.get("src") == "telemetry" else WARN
            what = str(e.get("pattern") or e.get("kind") or "event")
            line = str(e.get("line") or e.get("message") or e.get("error") or "")
            x = ta.x(float(e["t_ns"]))
            items.append((x, f"t={prose(x)} · {what} · {line[:300]}", color))
        binned(items, len(lanes) - 1)
    if failures:
        lanes.append("failed")
        items = [
            (ta.x(f.t_ns), f"t={prose(ta.x(f.t_ns))} · {f.error_class} · request failed", BAD)
            for f in sorted(failures, key=lambda f: f.t_ns)
        ]
        binned(items, len(lanes) - 1)
    return marks, lanes


def _points(recs: Sequence[GpuSample] | Sequence[ServerSample], key: str) -> tuple[F64, F64]:
    """(t_ns, value) arrays of the samples that have a number under ``key``, in time order."""
    rows: Sequence[Mapping[str, object]] = recs
    pairs = [(r["t_ns"], v) for r in rows if (v := number(r.get(key))) is not None]
    if not pairs:
        return np.empty(0), np.empty(0)
    arr = np.array(pairs, dtype=float)
    order = np.argsort(arr[:, 0], kind="stable")
    return arr[order, 0], arr[order, 1]


def _line(t: F64, y: F64, ta: _TimeAxis) -> tuple[F64, F64]:
    """A time series ready to draw: broken (NaN) across telemetry gaps, thinned to MAX_POINTS."""
    if len(t) > 2:
        dt = np.diff(t)
        limit = max(5 * float(np.median(dt)), 1e9)
        gaps = np.flatnonzero(dt > limit)
        if len(gaps):
            t = np.insert(t, gaps + 1, t[gaps] + 1)
            y = np.insert(y, gaps + 1, np.nan)
    x = (t - ta.t0_ns) / 1e9 / ta.unit_s
    return downsample(x, y, MAX_POINTS)


def _series_of(recs: Sequence[ServerSample], key: str, ta: _TimeAxis, scale: float = 1.0) -> tuple[F64, F64]:
    t, y = _points(recs, key)
    return _line(t, y * scale, ta)


def _time_chart(
    slug: str, title: str, y_label: str, ta: _TimeAxis, bands: list[Band], marks: list[Mark], lanes: list[str]
) -> Chart:
    return Chart(title, ta.label, y_label, bands=bands, marks=marks, mark_lanes=lanes, y_min=0.0, slug=slug)


@dataclass
class _Gpu:
    t: F64  # ns, ascending
    power_w: F64
    limit_w: float | None  # the median of its power_limit_w readings


def _gpus(samples: Sequence[Sample]) -> dict[int, _Gpu]:
    """Per GPU index: its power readings as arrays and its power limit."""
    by_index: dict[int, list[GpuSample]] = {}
    for r in gpu_samples(samples):
        by_index.setdefault(r["gpu"], []).append(r)
    out: dict[int, _Gpu] = {}
    for g, recs in sorted(by_index.items()):
        t, w = _points(recs, "power_w")
        limits = [v for r in recs if (v := number(r["power_limit_w"])) is not None]
        out[g] = _Gpu(t, w, float(np.median(limits)) if limits else None)
    return out


def _total_power(
    gpus: dict[int, _Gpu], ta: _TimeAxis, lost: dict[int, int] | None = None
) -> tuple[F64, F64, float | None]:
    """Sum over GPUs of each one's last power reading on a common time grid; the summed limit.

    The step figures' rule (``analysis.telemetry.as_of``, ``gpu_stale_ns``): a GPU whose last
    reading is older than 5 median sampling intervals (at least 1 s), or that was lost, counts as
    missing at that instant; where every GPU is missing the total is a gap.
    """
    series = {gpu: g for gpu, g in gpus.items() if len(g.t)}
    if not series:
        return np.empty(0), np.empty(0), None
    t_all = np.unique(np.concatenate([g.t for g in series.values()]))
    if len(t_all) > 4 * MAX_POINTS:
        t_all = np.linspace(t_all[0], t_all[-1], 4 * MAX_POINTS)
    stale = gpu_stale_ns([g.t for g in series.values()])
    total = np.zeros(len(t_all))
    seen = np.zeros(len(t_all), dtype=bool)
    for gpu, g in series.items():
        vals = as_of(g.t, g.power_w, t_all, stale, (lost or {}).get(gpu))
        ok = ~np.isnan(vals)
        total[ok] += vals[ok]
        seen |= ok
    total[~seen] = np.nan
    x = (t_all - ta.t0_ns) / 1e9 / ta.unit_s
    xs, ys = downsample(x, total, MAX_POINTS)
    limits = [g.limit_w for g in series.values() if g.limit_w is not None]
    limit = sum(limits) if len(limits) == len(series) else None
    return xs, ys, limit


def power_plots(
    summary: RunSummary,
    samples: Sequence[Sample],
    events: Sequence[dict[str, Any]],
    failures: Sequence[Failure],
) -> list[Plot]:
    gpus = _gpus(samples)
    ta = _time_axis(summary, samples)
    has_power = any(len(g.t) for g in gpus.values())
    t_total, t_per = "GPU power, all GPUs", "GPU power per GPU"
    if ta is None or not has_power:
        why = "no GPU telemetry in samples.jsonl" if not gpus else "GPU samples carry no power reading"
        if not samples:
            why = "no samples.jsonl (telemetry was not recorded)"
        return [
            Plot("power_total", t_total, no_data(t_total, why, slug="power_total"), "", False, why),
            Plot("power_per_gpu", t_per, no_data(t_per, why, slug="power_per_gpu"), "", False, why),
        ]
    bands = _bands(summary, ta)
    marks, lanes = _marks(events, failures, ta)
    lost = {
        int(e["gpu"]): int(e["t_ns"])
        for e in events
        if e.get("kind") == "gpu_lost" and number(e.get("gpu")) is not None and number(e.get("t_ns")) is not None
    }
    xs, ys, limit = _total_power(gpus, ta, lost)
    chart = _time_chart("power_total", t_total, "watts", ta, bands, marks, lanes)
    chart.series.append(
        Series(f"total of {len(gpus)} GPU{'s' if len(gpus) > 1 else ''}", xs, ys, PALETTE[0], markers=False, width=1.6)
    )
    if limit:
        chart.refs.append(RefLine("y", limit, f"power limit {prose(limit)} W", BAD, "6 3"))
    caption = "Sum over GPUs of each one's latest power reading; shaded: load steps (darker: steady window)."
    invalid = [s for s in steps_of(summary) if s.get("power_valid") is False]
    if invalid:
        caption += (
            f" Power is INVALID in {len(invalid)} step(s), e.g. "
            + str(invalid[0].get("power_invalid_reason") or "no reason given")
            + "."
        )
    plots = [Plot("power_total", t_total, render(chart), caption)]

    per = _time_chart("power_per_gpu", t_per, "watts", ta, bands, marks, lanes)
    for i, (index, gpu) in enumerate(gpus.items()):
        xs, ys = _line(gpu.t, gpu.power_w, ta)
        per.series.append(Series(f"GPU {index}", xs, ys, PALETTE[i % len(PALETTE)], markers=False, width=1.2))
    limits = [g.limit_w for g in gpus.values() if g.limit_w is not None]
    if limits:
        lim = float(np.median(limits))
        per.refs.append(RefLine("y", lim, f"per-GPU limit {prose(lim)} W", BAD, "6 3"))
    plots.append(Plot("power_per_gpu", t_per, render(per), "Each GPU's power reading against its power limit."))
    return plots


def server_plots(
    summary: RunSummary,
    samples: Sequence[Sample],
    events: Sequence[dict[str, Any]],
    failures: Sequence[Failure],
) -> list[Plot]:
    server = server_samples(samples)
    ta = _time_axis(summary, samples)
    t_kv, t_q = "KV-cache fill", "Server queue"
    out: list[Plot] = []
    bands = _bands(summary, ta) if ta else []
    marks, lanes = _marks(events, failures, ta) if ta else ([], [])
    kv_x, kv_y = _series_of(server, "kv_usage", ta, 100.0) if ta else (np.empty(0), np.empty(0))
    if not len(kv_x) or not np.isfinite(kv_y).any():
        why = "no server metrics in samples.jsonl" if not server else "the server's metrics have no KV-cache fill"
        if not samples:
            why = "no samples.jsonl (telemetry was not recorded)"
        out.append(Plot("kv_cache", t_kv, no_data(t_kv, why, slug="kv_cache"), "", False, why))
    else:
        assert ta is not None
        chart = _time_chart("kv_cache", t_kv, "KV cache used, %", ta, bands, marks, lanes)
        chart.y_max = 100.0
        chart.series.append(Series("KV-cache fill", kv_x, kv_y, PALETTE[2], markers=False, width=1.6))
        chart.refs.append(RefLine("y", KV_FULL_FRAC * 100, f"{KV_FULL_FRAC:.0%} full", BAD, "2 3"))
        out.append(
            Plot(
                "kv_cache",
                t_kv,
                render(chart),
                "Fraction of the server's KV cache in use; ticks above: server log matches and failed requests.",
            )
        )
    series = []
    if ta:
        for key, name, color in (("queued", "queued (waiting)", PALETTE[1]), ("running", "running", PALETTE[0])):
            x, y = _series_of(server, key, ta)
            if len(x) and np.isfinite(y).any():
                series.append(Series(name, x, y, color, markers=False, width=1.6))
    if not series:
        why = (
            "no server metrics in samples.jsonl"
            if not server
            else "the server's metrics have no queue or running count"
        )
        if not samples:
            why = "no samples.jsonl (telemetry was not recorded)"
        out.append(Plot("queue", t_q, no_data(t_q, why, slug="queue"), "", False, why))
    else:
        assert ta is not None
        chart = _time_chart("queue", t_q, "requests", ta, bands, marks, lanes)
        chart.series.extend(series)
        out.append(
            Plot("queue", t_q, render(chart), "Requests the server reports as running and as waiting in its queue.")
        )
    return out


__all__ = ["Failure", "power_plots", "server_plots"]
