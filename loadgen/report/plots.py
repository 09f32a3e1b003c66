"""The report's plots, built from a run's summary and its telemetry lines.

Load plots (x = concurrency on a log2 axis, or request rate for open-loop ramps), one series per
context length: aggregate output tok/s with the USL curve and the knee, per-request tok/s, latency
percentiles (p50 dashed, p99 solid) with SLO lines, tokens per joule. Time plots (x = seconds since
the first step started; each step a shaded band, its warm-up lighter than its steady window; server
log matches and failed requests as ticks in lanes above the plot): total GPU power against the
summed power limit, power per GPU against the per-GPU limit, KV-cache fill, running and queued
requests. The Pareto plot (first): output tok/s per GPU against per-user tok/s, each step a point,
the frontier joined, the knee step and the SLO's TPOT limit drawn (``analysis.pareto``). INVALID
steps are open grey markers whose hover text gives the reason; a plot whose input was not measured
is a "no data: <why>" panel. ``overlay_plots`` draws the load plots and the Pareto plot with several
runs on the same axes, one colour each (``loadgen compare``).

Inputs are plain dicts (``summary.json``, ``samples.jsonl`` and ``events.jsonl`` lines): any key
may be absent or None. Time series are thinned to about 1,200 points per line before drawing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from loadgen.analysis.contracts import LatencyKey, LoadAxis, ParetoPoint, ParetoSummary, RunSummary, StepSummary
from loadgen.analysis.pareto import pareto_summary
from loadgen.analysis.telemetry import as_of, gpu_stale_ns
from loadgen.analysis.usl import fit_usl
from loadgen.analysis.values import as_dict, number, stat, steps_of, summary_axis
from loadgen.report.svg import (
    BAD,
    F64,
    FAINT,
    MUTED,
    PALETTE,
    WARN,
    Band,
    Chart,
    Mark,
    RefLine,
    Series,
    downsample,
    format_value,
    no_data,
    render,
)

MAX_POINTS = 1200
MAX_MARKS = 240
KV_FULL_FRAC = 0.95
LATENCIES: tuple[tuple[LatencyKey, str, str], ...] = (
    ("ttft_ms", "TTFT", "time to first token"),
    ("tpot_ms", "TPOT", "time per output token"),
    ("e2e_ms", "E2E", "end-to-end latency"),
)
KNEE_COLOR = "#b03a2e"


@dataclass
class Plot:
    """One rendered plot: ``svg`` is a chart, or a no-data panel (``has_data`` False, ``why`` says why)."""

    slug: str
    title: str
    svg: str
    caption: str = ""
    has_data: bool = True
    why: str = ""


@dataclass
class Failure:
    """One failed request on the time axis (wall-clock ns) and its error class."""

    t_ns: int
    error_class: str


def load_label(value: float | None, axis: str) -> str:
    if value is None:
        return "–"
    if axis == "rate":
        return f"{value:.4g} req/s"
    return f"C={value:g}" if float(value).is_integer() else f"C≈{format_value(value)}"


def knee_load(summary: RunSummary) -> float | None:
    knee = summary.get("knee")
    if not isinstance(knee, dict):
        return None
    return (
        number(knee.get(summary_axis(summary)))
        if knee.get(summary_axis(summary)) is not None
        else number(knee.get("knee"))
    )


_Group = tuple[int | float | str | None, list[StepSummary]]


def _load_of(step: StepSummary, axis: LoadAxis) -> float:
    """The load of a step that ``_groups`` kept (a positive number)."""
    load = number(step.get(axis))
    assert load is not None
    return load


def _groups(steps: Sequence[StepSummary], axis: LoadAxis) -> list[_Group]:
    """Steps with a positive load, grouped by context length, each sorted by load."""
    groups: dict[int | float | str | None, list[StepSummary]] = {}
    for s in steps:
        load = number(s.get(axis))
        if load is None or load <= 0:
            continue
        ctx = s.get("context_tokens")
        groups.setdefault(ctx if ctx is None or isinstance(ctx, (int, float, str)) else str(ctx), []).append(s)
    out = [(k, sorted(v, key=lambda s: _load_of(s, axis))) for k, v in groups.items()]
    out.sort(key=lambda kv: (kv[0] is not None, kv[0] or 0))
    return out


def _group_name(ctx: object, n_groups: int, what: str) -> str:
    if n_groups == 1 or ctx is None:
        return what
    return f"{what}, {ctx:,} ctx" if isinstance(ctx, int) else f"{what}, ctx {ctx}"


def _x_axis(axis: LoadAxis, steps: Sequence[StepSummary]) -> tuple[str, str]:
    """(x label, scale): concurrency on log2; rates on log2 when they span a factor of 4."""
    if axis == "concurrency":
        return "concurrent users (log2 scale)", "log2"
    rates = [r for s in steps if (r := number(s.get("rate"))) and r > 0]
    if rates and max(rates) / min(rates) >= 4:
        return "request rate, req/s (log2 scale)", "log2"
    return "request rate, req/s", "linear"


def _knee_ref(summary: RunSummary, axis: LoadAxis) -> list[RefLine]:
    k = knee_load(summary)
    if k is None:
        return []
    knee = as_dict(summary.get("knee"))
    return [RefLine("x", k, f"knee {load_label(k, axis)}", KNEE_COLOR, "6 3", tip=str(knee.get("reason") or ""))]


def _step_tip(step: StepSummary, axis: LoadAxis, metric: str, value: float | None) -> str:
    load = load_label(number(step.get(axis)), axis)
    ctx = step.get("context_tokens")
    where = f"{load}" + (f", {ctx} ctx" if ctx is not None else "")
    shown = format_value(value) if value is not None else "–"
    status = "VALID" if step.get("valid", True) else f"INVALID: {step.get('invalid_reason') or 'no reason given'}"
    return f"step {step.get('step', '?')} · {where} · {metric} {shown} · {status}"


def unjoined_invalid(series: Series) -> list[Series]:
    """``series`` with its hollow (INVALID) points taken off the line: the line joins the valid
    points only, and the invalid ones follow as open markers of their own, not joined to anything
    (a figure that cannot be trusted must not bend the curve)."""
    hollow = list(series.hollow or [])
    if not any(hollow):
        return [series]
    keep = [i for i, h in enumerate(hollow) if not h]
    bad = [i for i, h in enumerate(hollow) if h]

    def pick(seq: Sequence[Any] | None, idx: list[int]) -> list[Any] | None:
        return None if seq is None else [seq[i] for i in idx]

    xs, ys = list(series.x), list(series.y)
    line = replace(
        series,
        x=[xs[i] for i in keep],
        y=[ys[i] for i in keep],
        hollow=None,
        tips=pick(series.tips, keep),
        labels=pick(series.labels, keep),
    )
    marks = replace(
        series,
        x=[xs[i] for i in bad],
        y=[ys[i] for i in bad],
        hollow=[True] * len(bad),
        tips=pick(series.tips, bad),
        labels=pick(series.labels, bad),
        line=False,
        legend=not keep,
    )
    return [line, marks] if keep else [marks]


def _load_chart(
    summary: RunSummary,
    slug: str,
    title: str,
    y_label: str,
    metric_of: Sequence[tuple[str, Callable[[StepSummary], float | None], str | None]],
    *,
    why_empty: str,
    caption: str,
    valid_key: Literal["valid", "power_valid"] = "valid",
    reason_key: Literal["invalid_reason", "power_invalid_reason"] = "invalid_reason",
    extra_series: Sequence[Series] = (),
    extra_refs: Sequence[RefLine] = (),
) -> Plot:
    """A metric-vs-load chart: one series per (context group, metric); ``metric_of`` is
    [(legend name, step -> value, dash)]."""
    axis = summary_axis(summary)
    steps = steps_of(summary)
    groups = _groups(steps, axis)
    x_label, scale = _x_axis(axis, steps)
    chart = Chart(title, x_label, y_label, x_scale=scale, slug=slug)
    colour = 0
    any_value = False
    for ctx, group in groups:
        for s in group:
            if all(get(s) is None for _, get, _ in metric_of) and not s.get("valid", True):
                chart.refs.append(
                    RefLine(
                        "x",
                        _load_of(s, axis),
                        "INVALID",
                        FAINT,
                        "2 3",
                        tip=_step_tip(s, axis, "no value", None),
                        label_at="bottom",
                    )
                )
        for name, get, dash in metric_of:
            xs = [_load_of(s, axis) for s in group]
            ys = [get(s) for s in group]
            if all(v is None for v in ys):
                continue
            any_value = True
            hollow = [not s.get("valid", True) or (valid_key != "valid" and s.get(valid_key) is False) for s in group]
            tips = []
            for s, v in zip(group, ys, strict=True):
                tip = _step_tip(s, axis, name, v)
                if valid_key != "valid" and s.get(valid_key) is False:
                    tip += f" · {reason_key}: {s.get(reason_key) or 'invalid'}"
                tips.append(tip)
            chart.series.extend(
                unjoined_invalid(
                    Series(
                        _group_name(ctx, len(groups), name),
                        xs,
                        ys,
                        color=PALETTE[colour % len(PALETTE)],
                        dash=dash,
                        hollow=hollow,
                        tips=tips,
                    )
                )
            )
        colour += 1
    if not any_value:
        return Plot(slug, title, no_data(title, why_empty, slug=slug), caption, False, why_empty)
    chart.series.extend(extra_series)
    chart.refs.extend(extra_refs)
    chart.refs.extend(_knee_ref(summary, axis))
    return Plot(slug, title, render(chart), caption)


# --------------------------------------------------------------------------------- load plots


def _usl_params(summary: RunSummary, xs: Sequence[float], ys: Sequence[float]) -> dict[str, float] | None:
    """lambda/sigma/kappa/r_squared/peak from the knee's USL detector, else fitted here."""
    knee = summary.get("knee")
    numbers: dict[str, Any] | None = None
    if isinstance(knee, dict):
        det = as_dict(knee.get("detectors")).get("usl")
        if isinstance(det, dict):
            numbers = det.get("numbers")
    if isinstance(numbers, dict) and numbers.get("ok") and number(numbers.get("lambda")) is not None:
        out = {k: number(numbers.get(k)) for k in ("lambda", "sigma", "kappa", "r_squared", "peak_concurrency")}
        if out["sigma"] is not None and out["kappa"] is not None:
            return {k: v for k, v in out.items() if v is not None}
    fit = fit_usl(list(xs), list(ys))
    if not fit.ok:
        return None
    d = fit.to_dict()
    return {
        k: float(d[k]) for k in ("lambda", "sigma", "kappa", "r_squared", "peak_concurrency") if d.get(k) is not None
    }


def _usl_curve(summary: RunSummary) -> tuple[list[Series], list[RefLine], str]:
    """The USL fit drawn over a single-context concurrency ramp: (series, refs, caption text)."""
    axis = summary_axis(summary)
    groups = _groups(steps_of(summary), axis)
    if axis != "concurrency":
        return [], [], " The USL curve is drawn for concurrency ramps only."
    if len(groups) != 1:
        return [], [], " The USL curve is drawn for a single context length only."
    group = groups[0][1]
    pts = [(_load_of(s, axis), v) for s in group if s.get("valid", True) and (v := number(s.get("output_tok_s")))]
    params = _usl_params(summary, [p[0] for p in pts], [p[1] for p in pts]) if len(pts) >= 3 else None
    if not params:
        return [], [], " No USL curve: it needs at least three valid steps with throughput."
    lam, sigma, kappa = params["lambda"], params["sigma"], params["kappa"]
    xs = [_load_of(s, axis) for s in group]
    hi = max(xs) * 2
    grid = np.exp2(np.linspace(math.log2(min(xs)), math.log2(hi), 120))
    curve = lam * grid / (1 + sigma * (grid - 1) + kappa * grid * (grid - 1))
    series = Series(
        f"USL fit (σ={sigma:.2g}, κ={kappa:.2g})",
        grid.tolist(),
        curve.tolist(),
        MUTED,
        markers=False,
        dash="4 4",
        width=1.5,
    )
    refs = []
    peak = params.get("peak_concurrency")
    if peak is not None and min(xs) <= peak <= hi:
        refs.append(RefLine("x", peak, f"USL peak C≈{peak:.0f}", MUTED, "1 3", tip="USL-predicted throughput peak"))
    r2 = f", R²={params['r_squared']:.3f}" if "r_squared" in params else ""
    caption = (
        " Dashed grey: Universal Scalability Law fit X(N) = λN / (1 + σ(N−1) + κN(N−1)) with "
        f"σ={sigma:.3g}, κ={kappa:.3g}{r2}, extrapolated to twice the last step."
    )
    return [series], refs, caption


def throughput_plot(summary: RunSummary) -> Plot:
    series, refs, usl_caption = _usl_curve(summary)
    return _load_chart(
        summary,
        "throughput",
        "Aggregate output throughput",
        "output tok/s",
        [("measured output tok/s", lambda s: number(s.get("output_tok_s")), None)],
        why_empty="no step has an output throughput (no successful requests, or no steps)",
        caption="Output tokens per second summed over all requests in each step's steady window. "
        "Open grey markers are INVALID steps (hover for the reason)." + usl_caption,
        extra_series=series,
        extra_refs=refs,
    )


def per_request_plot(summary: RunSummary) -> Plot:
    return _load_chart(
        summary,
        "per_request",
        "Per-request output speed",
        "tok/s per request",
        [("per-request tok/s", lambda s: number(s.get("per_request_tok_s")), None)],
        why_empty="no step has a per-request speed (no successful requests)",
        caption="Mean over successful requests of output tokens ÷ end-to-end time: what one user sees.",
    )


def _slo_refs(summary: RunSummary, metric: str, data_max: float) -> tuple[list[RefLine], list[str]]:
    slo = summary.get("slo")
    refs: list[RefLine] = []
    off: list[str] = []
    if not isinstance(slo, dict):
        return refs, off
    base = metric.removesuffix("_ms")
    for key, value in sorted(slo.items()):
        v = number(value)
        if v is None or not str(key).startswith(base + "_"):
            continue
        stat = str(key)[len(base) + 1 :].removesuffix("_ms")
        label = f"SLO {base.upper()} {stat} ≤ {v:,g} ms"
        if data_max > 0 and v > 3 * data_max:
            off.append(label)
            continue
        refs.append(RefLine("y", v, label, BAD, "2 3"))
    return refs, off


def _stat_of(key: LatencyKey, part: str) -> Callable[[StepSummary], float | None]:
    return lambda s: stat(s, key, part)


def latency_plots(summary: RunSummary) -> list[Plot]:
    plots: list[Plot] = []
    steps = steps_of(summary)
    for key, short, long in LATENCIES:
        data_max = max((v for s in steps if (v := stat(s, key, "p99")) is not None), default=0.0)
        refs, off = _slo_refs(summary, key, data_max)
        caption = f"{short} per step: p99 solid, p50 dashed."
        if refs:
            caption += " Red dotted: the SLO limit."
        if off:
            caption += " Off the scale (over 3x the largest p99): " + "; ".join(off) + "."
        plots.append(
            _load_chart(
                summary,
                key.removesuffix("_ms"),
                f"{short} ({long})",
                f"{short}, ms",
                [
                    ("p99", _stat_of(key, "p99"), None),
                    ("p50", _stat_of(key, "p50"), "5 3"),
                ],
                why_empty=f"no step has {short} percentiles (no successful requests)",
                caption=caption,
                extra_refs=refs,
            )
        )
    return plots


def tokens_per_joule_plot(summary: RunSummary) -> Plot:
    return _load_chart(
        summary,
        "tokens_per_joule",
        "Energy efficiency",
        "output tokens per joule",
        [("tok/J", lambda s: number(s.get("tokens_per_joule")), None)],
        why_empty="no GPU energy was measured (no GPU telemetry, or every step's power invalid)",
        caption="Output tokens per joule of GPU energy in each step's steady window; open markers: power invalid.",
        valid_key="power_valid",
        reason_key="power_invalid_reason",
    )


# ----------------------------------------------------------------------------------- Pareto


def pareto_of(summary: RunSummary) -> ParetoSummary:
    """The summary's ``pareto``; computed from its steps for a summary written before it existed."""
    pareto = summary.get("pareto")
    if isinstance(pareto, dict) and isinstance(pareto.get("points"), list):
        return pareto
    return pareto_summary(steps_of(summary))


def _tpot_limits(summary: RunSummary) -> list[tuple[str, float]]:
    """The SLO's TPOT limits as (key, ms), tightest first."""
    slo = summary.get("slo")
    if not isinstance(slo, dict):
        return []
    out = [(str(k), v) for k, value in slo.items() if str(k).startswith("tpot_") and (v := number(value)) and v > 0]
    return sorted(out, key=lambda kv: kv[1])


def _slo_x_refs(limits: Sequence[tuple[str, float]], x_max: float) -> tuple[list[RefLine], list[str]]:
    """Vertical lines at per-user tok/s = 1000 / each TPOT limit; those beyond 3x the data are named."""
    refs: list[RefLine] = []
    off: list[str] = []
    for key, ms in limits:
        stat_name = key.removeprefix("tpot_").removesuffix("_ms")
        x = 1000.0 / ms
        label = f"SLO TPOT {stat_name} ≤ {ms:,g} ms"
        if x_max > 0 and x > 3 * x_max:
            off.append(f"{label} ({format_value(x)} tok/s per user)")
            continue
        tip = f"{label}: a request at the limit streams {format_value(x)} tok/s; points left of it are slower"
        refs.append(RefLine("x", x, f"{label} = {format_value(x)} tok/s", BAD, "2 3", tip=tip, label_at="bottom"))
    return refs, off


def _point_load(p: ParetoPoint, axis: LoadAxis) -> float | None:
    return number(p.get(axis))


def _pareto_tip(p: ParetoPoint, axis: LoadAxis, per: str, run: str = "") -> str:
    load = load_label(_point_load(p, axis), axis)
    ctx = p.get("context_tokens")
    where = load + (f", {ctx} ctx" if ctx is not None else "")
    x, y = number(p.get("per_user_tok_s")), number(p.get("tok_s_per_gpu"))
    status = "on the frontier" if p.get("on_frontier") else "dominated" if p.get("valid") else "INVALID"
    head = f"{run} · " if run else ""
    return (
        f"{head}step {p.get('step', '?')} · {where} · {format_value(x) if x is not None else '–'} tok/s per user · "
        f"{format_value(y) if y is not None else '–'} tok/s {per} · {status}"
    )


def _pareto_groups(points: Sequence[ParetoPoint]) -> list[tuple[int | None, list[ParetoPoint]]]:
    groups: dict[int | None, list[ParetoPoint]] = {}
    for p in points:
        if number(p.get("per_user_tok_s")) is None or number(p.get("tok_s_per_gpu")) is None:
            continue
        groups.setdefault(p.get("context_tokens"), []).append(p)
    return sorted(groups.items(), key=lambda kv: (kv[0] is not None, kv[0] or 0))


def _pareto_series(
    points: Sequence[ParetoPoint], name: str, color: str, axis: LoadAxis, per: str, *, labels: bool, run: str = ""
) -> list[Series]:
    """One context group of one run: the frontier (line and markers), the dominated steps (markers),
    the INVALID ones (open grey markers)."""

    def xy(p: ParetoPoint) -> tuple[float, float]:
        return number(p.get("per_user_tok_s")) or 0.0, number(p.get("tok_s_per_gpu")) or 0.0

    def label_of(p: ParetoPoint) -> str:
        return load_label(_point_load(p, axis), axis)

    out: list[Series] = []
    front = sorted((p for p in points if p.get("on_frontier")), key=xy)
    rest = [p for p in points if not p.get("on_frontier") and p.get("valid")]
    bad = [p for p in points if not p.get("valid")]
    for kind, group, line in (("frontier", front, True), ("dominated", rest, False)):
        if not group:
            continue
        out.append(
            Series(
                f"{name} {kind}".strip(),
                [xy(p)[0] for p in group],
                [xy(p)[1] for p in group],
                color,
                line=line,
                markers=True,
                marker="circle" if line else "square",
                tips=[_pareto_tip(p, axis, per, run) for p in group],
                labels=[label_of(p) for p in group] if labels else None,
                legend=line or not run,
            )
        )
    if bad:
        out.append(
            Series(
                f"{name} INVALID".strip(),
                [xy(p)[0] for p in bad],
                [xy(p)[1] for p in bad],
                FAINT,
                line=False,
                hollow=[True] * len(bad),
                tips=[_pareto_tip(p, axis, per, run) for p in bad],
                labels=[label_of(p) for p in bad] if labels else None,
                legend=not run,
            )
        )
    return out


def _pareto_x_max(points: Sequence[ParetoPoint]) -> float:
    return max((x for p in points if (x := number(p.get("per_user_tok_s"))) is not None), default=0.0)


PARETO_TITLE = "Throughput per GPU vs interactivity (Pareto)"


def pareto_plot(summary: RunSummary) -> Plot:
    """Output tok/s per GPU (y) against per-user tok/s (x), each step a point, the frontier joined,
    the knee step ringed, the SLO's TPOT limit as a vertical line (``analysis.pareto``)."""
    slug, title = "pareto", PARETO_TITLE
    pareto = pareto_of(summary)
    axis = summary_axis(summary)
    points = pareto["points"]
    groups = _pareto_groups(points)
    if not groups:
        why = "no step has both an output throughput and a TPOT p50 (no successful requests)"
        return Plot(slug, title, no_data(title, why, slug=slug), "", False, why)
    per = "per GPU" if pareto.get("gpus_source") != "unknown" else "per node"
    x_max = _pareto_x_max(points)
    chart = Chart(
        title,
        "per-user output tok/s (1000 / TPOT p50)",
        f"output tok/s {per}",
        x_range=(0.0, x_max),
        slug=slug,
    )
    knee_pt = _knee_point(summary, points, axis)
    if knee_pt is not None:
        x, y = number(knee_pt.get("per_user_tok_s")), number(knee_pt.get("tok_s_per_gpu"))
        assert x is not None and y is not None
        knee_name = f"knee {load_label(_point_load(knee_pt, axis), axis)}"
        tip = f"{knee_name}: " + _pareto_tip(knee_pt, axis, per)
        chart.series.append(Series(knee_name, [x], [y], KNEE_COLOR, line=False, marker="diamond", size=7.0, tips=[tip]))
    for i, (ctx, group) in enumerate(groups):
        name = "" if len(groups) == 1 or ctx is None else f"{ctx:,} ctx"
        chart.series.extend(_pareto_series(group, name, PALETTE[i % len(PALETTE)], axis, per, labels=True))
    refs, off = _slo_x_refs(_tpot_limits(summary), x_max)
    chart.refs.extend(refs)
    gpus, source = pareto.get("gpus"), pareto.get("gpus_source")
    caption = (
        "Each step is a point: aggregate output tok/s "
        + (
            f"÷ {gpus} GPUs (from {'--gpu-count' if source == 'option' else 'the GPU telemetry'})"
            if per == "per GPU"
            else f"per node ({pareto.get('note') or 'GPU count unknown'})"
        )
        + " against the median request's decode speed (1000 / TPOT p50; the per-request tok/s, output tokens / "
        "E2E, also counts the wait for the first token). "
        + per_user_vs_per_request(summary, points, axis)
        + " The line joins the frontier: the steps no other valid step beats on both "
        "axes. Squares are dominated steps, open grey markers INVALID steps (never on the frontier)."
    )
    if knee_pt is not None:
        caption += " Red diamond: the knee step."
    if refs:
        caption += " Red dotted: the SLO's TPOT limit; steps left of it stream slower than the limit at p50."
    if off:
        caption += " Off the scale (over 3x the fastest step): " + "; ".join(off) + "."
    return Plot(slug, title, render(chart), caption)


def per_user_vs_per_request(summary: RunSummary, points: Sequence[ParetoPoint], axis: LoadAxis) -> str:
    """How the plot's per-user tok/s (1000 / TPOT p50) stands against the step table's per-request
    tok/s (the mean of output tokens / E2E), in words from the figures: above at every valid step,
    below at every one, or above except at the steps named (with both figures). "" without a pair."""
    per_request = {str(s.get("step")): number(s.get("per_request_tok_s")) for s in steps_of(summary)}
    pairs = [
        (p, u, r)
        for p in points
        if p.get("valid") and (u := number(p.get("per_user_tok_s"))) is not None
        if (r := per_request.get(str(p.get("step")))) is not None
    ]
    if not pairs:
        return ""
    below = [(p, u, r) for p, u, r in pairs if u < r]
    why = "a median request's decode speed against a mean over requests: they part where requests' speeds spread"
    if not below:
        return "Here it is above the per-request tok/s at every valid step."
    if len(below) == len(pairs):
        return f"Here it is below the per-request tok/s at every valid step ({why})."
    where = "; ".join(
        f"{load_label(_point_load(p, axis), axis)}: {format_value(u)} vs {format_value(r)}" for p, u, r in below
    )
    return f"Here it is above the per-request tok/s except at {where} tok/s ({why})."


def _knee_point(summary: RunSummary, points: Sequence[ParetoPoint], axis: LoadAxis) -> ParetoPoint | None:
    load = knee_load(summary)
    if load is None:
        return None
    ctx = as_dict(summary.get("knee")).get("context_tokens")
    for p in points:
        if (
            _point_load(p, axis) == load
            and (ctx is None or p.get("context_tokens") == ctx)
            and number(p.get("per_user_tok_s")) is not None
            and number(p.get("tok_s_per_gpu")) is not None
        ):
            return p
    return None


# ------------------------------------------------------------------------------- overlays (compare)

OverlayRun = tuple[str, RunSummary]
"""A run in a comparison: its label and its summary."""

# (slug, title, y label, step -> value, the validity key that hollows a point, caption)
_OVERLAYS: tuple[tuple[str, str, str, Callable[[StepSummary], float | None], str, str], ...] = (
    (
        "throughput",
        "Aggregate output throughput",
        "output tok/s",
        lambda s: number(s.get("output_tok_s")),
        "valid",
        "Output tokens per second of each step's steady window.",
    ),
    (
        "ttft_p99",
        "TTFT p99 (time to first token)",
        "TTFT p99, ms",
        lambda s: stat(s, "ttft_ms", "p99"),
        "valid",
        "99th percentile of TTFT per step; the SLO limit as a red line.",
    ),
    (
        "tpot_p99",
        "TPOT p99 (time per output token)",
        "TPOT p99, ms",
        lambda s: stat(s, "tpot_ms", "p99"),
        "valid",
        "99th percentile of TPOT per step; the SLO limit as a red line.",
    ),
    (
        "power",
        "GPU power, all GPUs",
        "watts (steady-window mean)",
        lambda s: stat(s, "gpu_power_w", "mean"),
        "power_valid",
        "Total GPU power per step, time-weighted mean over its steady window; open markers: power invalid.",
    ),
    (
        "tokens_per_joule",
        "Energy efficiency",
        "output tokens per joule",
        lambda s: number(s.get("tokens_per_joule")),
        "power_valid",
        "Output tokens per joule of GPU energy per step; open markers: power invalid.",
    ),
)
OVERLAY_SLUGS = (*(o[0] for o in _OVERLAYS), "pareto")


def _run_color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


_CTX_DASHES = (None, "6 3", "2 3", "8 3 2 3")
_RUN_MARKERS = ("circle", "square", "diamond")


def _overlay_load_plot(
    runs: Sequence[OverlayRun],
    axis: LoadAxis,
    spec: tuple[str, str, str, Callable[[StepSummary], float | None], str, str],
) -> Plot:
    slug, title, y_label, get, valid_key, caption = spec
    all_steps = [s for _, summary in runs for s in steps_of(summary)]
    x_label, scale = _x_axis(axis, all_steps)
    chart = Chart(title, x_label, y_label, x_scale=scale, slug=f"cmp-{slug}")
    for i, (label, summary) in enumerate(runs):
        groups = _groups(steps_of(summary), axis)
        for g, (ctx, group) in enumerate(groups):
            ys = [get(s) for s in group]
            if all(v is None for v in ys):
                continue
            hollow = [s.get("valid", True) is False or s.get(valid_key, True) is False for s in group]
            chart.series.extend(
                unjoined_invalid(
                    Series(
                        _group_name(ctx, len(groups), label),
                        [_load_of(s, axis) for s in group],
                        ys,
                        _run_color(i),
                        dash=_CTX_DASHES[g % len(_CTX_DASHES)],
                        marker=_RUN_MARKERS[i % len(_RUN_MARKERS)],
                        hollow=hollow,
                        tips=[f"{label} · " + _step_tip(s, axis, y_label, v) for s, v in zip(group, ys, strict=True)],
                    )
                )
            )
    if not chart.series:
        why = "no run has this figure" + (" (no GPU telemetry)" if valid_key == "power_valid" else "")
        return Plot(slug, title, no_data(title, why, slug=f"cmp-{slug}"), "", False, why)
    metric = {"ttft_p99": "ttft_p99_ms", "tpot_p99": "tpot_p99_ms"}.get(slug)
    if metric is not None:
        limits = sorted(
            {v for _, summary in runs if (v := number(as_dict(summary.get("slo")).get(metric))) is not None}
        )
        data_max = max((v for ser in chart.series for v in ser.y if v is not None), default=0.0)
        for v in limits:
            if not (data_max > 0 and v > 3 * data_max):
                chart.refs.append(RefLine("y", v, f"SLO {metric.split('_')[0].upper()} p99 ≤ {v:,g} ms", BAD, "2 3"))
    return Plot(slug, title, render(chart), caption + " One colour per run; open markers: INVALID steps.")


def _overlay_pareto(runs: Sequence[OverlayRun]) -> Plot:
    slug, title = "pareto", PARETO_TITLE
    paretos = [(label, pareto_of(summary), summary_axis(summary)) for label, summary in runs]
    unknown = [label for label, p, _ in paretos if p.get("gpus_source") == "unknown"]
    chart = Chart(title, "per-user output tok/s (1000 / TPOT p50)", "output tok/s per GPU", slug="cmp-pareto")
    x_max = 0.0
    for i, (label, pareto, axis) in enumerate(paretos):
        groups = _pareto_groups(pareto["points"])
        x_max = max(x_max, _pareto_x_max(pareto["points"]))
        per = "per GPU" if pareto.get("gpus_source") != "unknown" else "per node"
        for g, (ctx, group) in enumerate(groups):
            name = _group_name(ctx, len(groups), label)
            for ser in _pareto_series(group, name, _run_color(i), axis, per, labels=False, run=label):
                ser.marker = _RUN_MARKERS[i % len(_RUN_MARKERS)]
                if ser.line:
                    ser.dash = _CTX_DASHES[g % len(_CTX_DASHES)]
                    ser.name = name
                chart.series.append(ser)
    if not chart.series:
        why = "no run has a step with both an output throughput and a TPOT p50"
        return Plot(slug, title, no_data(title, why, slug="cmp-pareto"), "", False, why)
    chart.x_range = (0.0, x_max)
    if unknown:
        chart.y_label = "output tok/s per GPU (per node where unknown)"
    limits = sorted({lim for _, summary in runs for lim in _tpot_limits(summary)}, key=lambda kv: (kv[1], kv[0]))
    refs, off = _slo_x_refs(limits, x_max)
    chart.refs.extend(refs)
    caption = (
        "Each run's steps: output tok/s per GPU against per-user tok/s (1000 / TPOT p50); the line joins each "
        "run's frontier, markers off it are dominated steps, open grey markers INVALID steps."
    )
    if unknown:
        caption += " Per node, GPU count unknown, for: " + ", ".join(unknown) + "."
    if off:
        caption += " Off the scale: " + "; ".join(off) + "."
    return Plot(slug, title, render(chart), caption)


def overlay_plots(runs: Sequence[OverlayRun], axis: LoadAxis) -> list[Plot]:
    """The main plots with every run overlaid, one colour each (``loadgen compare``): throughput,
    TTFT p99, TPOT p99, GPU power and tokens per joule against load, and the Pareto plot."""
    return [*(_overlay_load_plot(runs, axis, spec) for spec in _OVERLAYS), _overlay_pareto(runs)]


# --------------------------------------------------------------------------------- time plots


@dataclass
class _TimeAxis:
    t0_ns: int
    unit_s: float
    label: str

    def x(self, t_ns: float) -> float:
        return (t_ns - self.t0_ns) / 1e9 / self.unit_s


def _time_axis(summary: RunSummary, samples: Sequence[dict[str, Any]]) -> _TimeAxis | None:
    starts = [v for s in steps_of(summary) if (v := number(s.get("start_ns"))) is not None]
    ends = [v for s in steps_of(summary) if (v := number(s.get("end_ns"))) is not None]
    t0 = min(starts) if starts else None
    if t0 is None:
        times = [v for r in samples if (v := number(r.get("t_ns"))) is not None]
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
                span = f"{format_value(group[0][0])}–{format_value(group[-1][0])}"
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
            items.append((x, f"t={format_value(x)} · {what} · {line[:300]}", color))
        binned(items, len(lanes) - 1)
    if failures:
        lanes.append("failed")
        items = [
            (ta.x(f.t_ns), f"t={format_value(ta.x(f.t_ns))} · {f.error_class} · request failed", BAD)
            for f in sorted(failures, key=lambda f: f.t_ns)
        ]
        binned(items, len(lanes) - 1)
    return marks, lanes


def _points(recs: Sequence[dict[str, Any]], key: str) -> tuple[F64, F64]:
    """(t_ns, value) arrays of the records that have a number under ``key``, in time order."""
    pairs = [(t, v) for r in recs if (v := number(r.get(key))) is not None and (t := number(r.get("t_ns"))) is not None]
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


def _series_of(recs: Sequence[dict[str, Any]], key: str, ta: _TimeAxis, scale: float = 1.0) -> tuple[F64, F64]:
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


def _gpus(samples: Sequence[dict[str, Any]]) -> dict[int, _Gpu]:
    """Per GPU index: its power readings as arrays and its power limit."""
    by_index: dict[int, list[dict[str, Any]]] = {}
    for r in samples:
        if r.get("src") == "gpu":
            g = number(r.get("gpu"))
            by_index.setdefault(int(g) if g is not None else 0, []).append(r)
    out: dict[int, _Gpu] = {}
    for g, recs in sorted(by_index.items()):
        t, w = _points(recs, "power_w")
        limits = [v for r in recs if (v := number(r.get("power_limit_w"))) is not None]
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
    samples: Sequence[dict[str, Any]],
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
        chart.refs.append(RefLine("y", limit, f"power limit {format_value(limit)} W", BAD, "6 3"))
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
        per.refs.append(RefLine("y", lim, f"per-GPU limit {format_value(lim)} W", BAD, "6 3"))
    plots.append(Plot("power_per_gpu", t_per, render(per), "Each GPU's power reading against its power limit."))
    return plots


def server_plots(
    summary: RunSummary,
    samples: Sequence[dict[str, Any]],
    events: Sequence[dict[str, Any]],
    failures: Sequence[Failure],
) -> list[Plot]:
    server = [r for r in samples if r.get("src") == "server" and number(r.get("t_ns")) is not None]
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


def build_plots(
    summary: RunSummary,
    samples: Sequence[dict[str, Any]] = (),
    events: Sequence[dict[str, Any]] = (),
    failures: Sequence[Failure] = (),
) -> list[Plot]:
    """Every plot of the report, in reading order; a plot without data is a no-data panel."""
    return [
        pareto_plot(summary),
        throughput_plot(summary),
        per_request_plot(summary),
        *latency_plots(summary),
        tokens_per_joule_plot(summary),
        *power_plots(summary, samples, events, failures),
        *server_plots(summary, samples, events, failures),
    ]


PLOT_SLUGS = (
    "pareto",
    "throughput",
    "per_request",
    "ttft",
    "tpot",
    "e2e",
    "tokens_per_joule",
    "power_total",
    "power_per_gpu",
    "kv_cache",
    "queue",
)

__all__ = [
    "OVERLAY_SLUGS",
    "PLOT_SLUGS",
    "Failure",
    "OverlayRun",
    "Plot",
    "build_plots",
    "knee_load",
    "load_label",
    "overlay_plots",
    "pareto_of",
    "pareto_plot",
]
