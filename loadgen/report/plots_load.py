"""The load plots: one figure per step against load, one series per context length.

Aggregate output tok/s with the USL curve (the knee's USL detector's fit, else fitted here; drawn
for a single-context concurrency ramp) and the knee; per-request tok/s; latency percentiles (p50
dashed, p99 solid) with the SLO's limits as lines (a limit over 3x the largest p99 is named in the
caption instead); tokens per joule (open markers where power is invalid). A plot none of whose
steps has its figure is a "no data: <why>" panel.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from loadgen.analysis.contracts import LatencyKey, LoadAxis, RunSummary, StepSummary
from loadgen.analysis.usl import fit_usl
from loadgen.analysis.values import as_dict, number, stat, steps_of, summary_axis
from loadgen.report.plots_common import (
    KNEE_COLOR,
    Plot,
    context_groups,
    group_name,
    knee_load,
    load_label,
    load_of,
    step_tip,
    unjoined_invalid,
    x_axis,
)
from loadgen.report.svg import BAD, FAINT, MUTED, PALETTE, Chart, RefLine, Series, no_data, render

LATENCIES: tuple[tuple[LatencyKey, str, str], ...] = (
    ("ttft_ms", "TTFT", "time to first token"),
    ("tpot_ms", "TPOT", "time per output token"),
    ("e2e_ms", "E2E", "end-to-end latency"),
)


def _knee_ref(summary: RunSummary, axis: LoadAxis) -> list[RefLine]:
    k = knee_load(summary)
    if k is None:
        return []
    knee = as_dict(summary.get("knee"))
    return [RefLine("x", k, f"knee {load_label(k, axis)}", KNEE_COLOR, "6 3", tip=str(knee.get("reason") or ""))]


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
    groups = context_groups(steps, axis)
    x_label, scale = x_axis(axis, steps)
    chart = Chart(title, x_label, y_label, x_scale=scale, slug=slug)
    colour = 0
    any_value = False
    for ctx, group in groups:
        for s in group:
            if all(get(s) is None for _, get, _ in metric_of) and not s.get("valid", True):
                chart.refs.append(
                    RefLine(
                        "x",
                        load_of(s, axis),
                        "INVALID",
                        FAINT,
                        "2 3",
                        tip=step_tip(s, axis, "no value", None),
                        label_at="bottom",
                    )
                )
        for name, get, dash in metric_of:
            xs = [load_of(s, axis) for s in group]
            ys = [get(s) for s in group]
            if all(v is None for v in ys):
                continue
            any_value = True
            hollow = [not s.get("valid", True) or (valid_key != "valid" and s.get(valid_key) is False) for s in group]
            tips = []
            for s, v in zip(group, ys, strict=True):
                tip = step_tip(s, axis, name, v)
                if valid_key != "valid" and s.get(valid_key) is False:
                    tip += f" · {reason_key}: {s.get(reason_key) or 'invalid'}"
                tips.append(tip)
            chart.series.extend(
                unjoined_invalid(
                    Series(
                        group_name(ctx, len(groups), name),
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
    groups = context_groups(steps_of(summary), axis)
    if axis != "concurrency":
        return [], [], " The USL curve is drawn for concurrency ramps only."
    if len(groups) != 1:
        return [], [], " The USL curve is drawn for a single context length only."
    group = groups[0][1]
    pts = [(load_of(s, axis), v) for s in group if s.get("valid", True) and (v := number(s.get("output_tok_s")))]
    params = _usl_params(summary, [p[0] for p in pts], [p[1] for p in pts]) if len(pts) >= 3 else None
    if not params:
        return [], [], " No USL curve: it needs at least three valid steps with throughput."
    lam, sigma, kappa = params["lambda"], params["sigma"], params["kappa"]
    xs = [load_of(s, axis) for s in group]
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


__all__ = ["LATENCIES", "latency_plots", "per_request_plot", "throughput_plot", "tokens_per_joule_plot"]
