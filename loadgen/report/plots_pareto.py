"""The Pareto plot: output tok/s per GPU against per-user tok/s (``analysis.pareto``).

Each step is a point (x: 1000 / TPOT p50, the median request's decode speed; y: aggregate output
tok/s divided by the GPU count, or per node when the count is unknown); the frontier is joined,
dominated steps are squares, INVALID steps open grey markers (never on the frontier), the knee step
a red diamond, the SLO's TPOT limits vertical lines. The caption says how the per-user figure
stands against the step table's per-request tok/s. ``pareto_groups``, ``pareto_series`` and the
SLO lines are shared with the comparison's overlay (``plots_overlay``).
"""

from __future__ import annotations

from collections.abc import Sequence

from loadgen.analysis.contracts import LoadAxis, ParetoPoint, ParetoSummary, RunSummary
from loadgen.analysis.formats import prose
from loadgen.analysis.pareto import pareto_summary
from loadgen.analysis.values import as_dict, number, steps_of, summary_axis
from loadgen.report.plots_common import KNEE_COLOR, Plot, knee_load, load_label
from loadgen.report.svg import BAD, FAINT, PALETTE, Chart, RefLine, Series, no_data, render


def pareto_of(summary: RunSummary) -> ParetoSummary:
    """The summary's ``pareto``; computed from its steps for a summary written before it existed."""
    pareto = summary.get("pareto")
    if isinstance(pareto, dict) and isinstance(pareto.get("points"), list):
        return pareto
    return pareto_summary(steps_of(summary))


def tpot_limits(summary: RunSummary) -> list[tuple[str, float]]:
    """The SLO's TPOT limits as (key, ms), tightest first."""
    slo = summary.get("slo")
    if not isinstance(slo, dict):
        return []
    out = [(str(k), v) for k, value in slo.items() if str(k).startswith("tpot_") and (v := number(value)) and v > 0]
    return sorted(out, key=lambda kv: kv[1])


def slo_x_refs(limits: Sequence[tuple[str, float]], x_max: float) -> tuple[list[RefLine], list[str]]:
    """Vertical lines at per-user tok/s = 1000 / each TPOT limit; those beyond 3x the data are named."""
    refs: list[RefLine] = []
    off: list[str] = []
    for key, ms in limits:
        stat_name = key.removeprefix("tpot_").removesuffix("_ms")
        x = 1000.0 / ms
        label = f"SLO TPOT {stat_name} ≤ {ms:,g} ms"
        if x_max > 0 and x > 3 * x_max:
            off.append(f"{label} ({prose(x)} tok/s per user)")
            continue
        tip = f"{label}: a request at the limit streams {prose(x)} tok/s; points left of it are slower"
        refs.append(RefLine("x", x, f"{label} = {prose(x)} tok/s", BAD, "2 3", tip=tip, label_at="bottom"))
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
        f"{head}step {p.get('step', '?')} · {where} · {prose(x) if x is not None else '–'} tok/s per user · "
        f"{prose(y) if y is not None else '–'} tok/s {per} · {status}"
    )


def pareto_groups(points: Sequence[ParetoPoint]) -> list[tuple[int | None, list[ParetoPoint]]]:
    groups: dict[int | None, list[ParetoPoint]] = {}
    for p in points:
        if number(p.get("per_user_tok_s")) is None or number(p.get("tok_s_per_gpu")) is None:
            continue
        groups.setdefault(p.get("context_tokens"), []).append(p)
    return sorted(groups.items(), key=lambda kv: (kv[0] is not None, kv[0] or 0))


def pareto_series(
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


def pareto_x_max(points: Sequence[ParetoPoint]) -> float:
    return max((x for p in points if (x := number(p.get("per_user_tok_s"))) is not None), default=0.0)


PARETO_TITLE = "Throughput per GPU vs interactivity (Pareto)"


def pareto_plot(summary: RunSummary) -> Plot:
    """Output tok/s per GPU (y) against per-user tok/s (x), each step a point, the frontier joined,
    the knee step ringed, the SLO's TPOT limit as a vertical line (``analysis.pareto``)."""
    slug, title = "pareto", PARETO_TITLE
    pareto = pareto_of(summary)
    axis = summary_axis(summary)
    points = pareto["points"]
    groups = pareto_groups(points)
    if not groups:
        why = "no step has both an output throughput and a TPOT p50 (no successful requests)"
        return Plot(slug, title, no_data(title, why, slug=slug), "", False, why)
    per = "per GPU" if pareto.get("gpus_source") != "unknown" else "per node"
    x_max = pareto_x_max(points)
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
        chart.series.extend(pareto_series(group, name, PALETTE[i % len(PALETTE)], axis, per, labels=True))
    refs, off = slo_x_refs(tpot_limits(summary), x_max)
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
    where = "; ".join(f"{load_label(_point_load(p, axis), axis)}: {prose(u)} vs {prose(r)}" for p, u, r in below)
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


__all__ = [
    "PARETO_TITLE",
    "pareto_groups",
    "pareto_of",
    "pareto_plot",
    "pareto_series",
    "pareto_x_max",
    "per_user_vs_per_request",
    "slo_x_refs",
    "tpot_limits",
]
