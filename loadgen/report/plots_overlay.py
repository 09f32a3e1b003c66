"""Several runs on the same axes, one colour each (``loadgen compare``, ``loadgen predict``).

Throughput, TTFT p99, TPOT p99, GPU power and tokens per joule against load (one marker shape per
run, one dash per context length; INVALID steps open markers, never joined; the runs' SLO limits as
lines), and the Pareto plot with each run's frontier. A figure no run has is a no-data panel.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from loadgen.analysis.contracts import LoadAxis, RunSummary, StepSummary
from loadgen.analysis.values import as_dict, number, stat, steps_of, summary_axis
from loadgen.report.plots_common import Plot, context_groups, group_name, load_of, step_tip, unjoined_invalid, x_axis
from loadgen.report.plots_pareto import (
    PARETO_TITLE,
    pareto_groups,
    pareto_of,
    pareto_series,
    pareto_x_max,
    slo_x_refs,
    tpot_limits,
)
from loadgen.report.svg import BAD, PALETTE, Chart, RefLine, Series, no_data, render

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
    x_label, scale = x_axis(axis, all_steps)
    chart = Chart(title, x_label, y_label, x_scale=scale, slug=f"cmp-{slug}")
    for i, (label, summary) in enumerate(runs):
        groups = context_groups(steps_of(summary), axis)
        for g, (ctx, group) in enumerate(groups):
            ys = [get(s) for s in group]
            if all(v is None for v in ys):
                continue
            hollow = [s.get("valid", True) is False or s.get(valid_key, True) is False for s in group]
            chart.series.extend(
                unjoined_invalid(
                    Series(
                        group_name(ctx, len(groups), label),
                        [load_of(s, axis) for s in group],
                        ys,
                        _run_color(i),
                        dash=_CTX_DASHES[g % len(_CTX_DASHES)],
                        marker=_RUN_MARKERS[i % len(_RUN_MARKERS)],
                        hollow=hollow,
                        tips=[f"{label} · " + step_tip(s, axis, y_label, v) for s, v in zip(group, ys, strict=True)],
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
        groups = pareto_groups(pareto["points"])
        x_max = max(x_max, pareto_x_max(pareto["points"]))
        per = "per GPU" if pareto.get("gpus_source") != "unknown" else "per node"
        for g, (ctx, group) in enumerate(groups):
            name = group_name(ctx, len(groups), label)
            for ser in pareto_series(group, name, _run_color(i), axis, per, labels=False, run=label):
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
    limits = sorted({lim for _, summary in runs for lim in tpot_limits(summary)}, key=lambda kv: (kv[1], kv[0]))
    refs, off = slo_x_refs(limits, x_max)
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


__all__ = ["OVERLAY_SLUGS", "OverlayRun", "overlay_plots"]
