"""What every plot of the report shares: the ``Plot`` it returns, and the load axis.

A ``Plot`` is one rendered chart or a "no data: <why>" panel. The load axis is concurrency on a
log2 axis, or request rate for open-loop ramps (log2 when the rates span a factor of 4); steps with
a positive load are grouped by context length, one series each, and INVALID steps are open grey
markers that the line does not join (``unjoined_invalid``). Hover text of a step names its load,
context, value and VALID / INVALID with the reason.

Inputs are plain dicts (``summary.json``): any key may be absent or None.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from loadgen.analysis.contracts import LoadAxis, RunSummary, StepSummary
from loadgen.analysis.formats import prose
from loadgen.analysis.values import number, summary_axis
from loadgen.report.svg import Series

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


def load_label(value: float | None, axis: str) -> str:
    """A load in words: ``C=64``, ``C≈2.5`` (not a whole number) or ``2.5 req/s``; "–" when missing."""
    if value is None:
        return "–"
    if axis == "rate":
        return f"{value:.4g} req/s"
    return f"C={value:g}" if float(value).is_integer() else f"C≈{prose(value)}"


def knee_load(summary: RunSummary) -> float | None:
    """The knee's load on the summary's axis (older summaries: its ``knee``); None without a knee."""
    knee = summary.get("knee")
    if not isinstance(knee, dict):
        return None
    return (
        number(knee.get(summary_axis(summary)))
        if knee.get(summary_axis(summary)) is not None
        else number(knee.get("knee"))
    )


_Group = tuple[int | float | str | None, list[StepSummary]]


def load_of(step: StepSummary, axis: LoadAxis) -> float:
    """The load of a step that ``context_groups`` kept (a positive number)."""
    load = number(step.get(axis))
    assert load is not None
    return load


def context_groups(steps: Sequence[StepSummary], axis: LoadAxis) -> list[_Group]:
    """Steps with a positive load, grouped by context length, each sorted by load."""
    groups: dict[int | float | str | None, list[StepSummary]] = {}
    for s in steps:
        load = number(s.get(axis))
        if load is None or load <= 0:
            continue
        ctx = s.get("context_tokens")
        groups.setdefault(ctx if ctx is None or isinstance(ctx, (int, float, str)) else str(ctx), []).append(s)
    out = [(k, sorted(v, key=lambda s: load_of(s, axis))) for k, v in groups.items()]
    out.sort(key=lambda kv: (kv[0] is not None, kv[0] or 0))
    return out


def group_name(ctx: object, n_groups: int, what: str) -> str:
    """A series' legend name: ``what``, with the context length when there are several groups."""
    if n_groups == 1 or ctx is None:
        return what
    return f"{what}, {ctx:,} ctx" if isinstance(ctx, int) else f"{what}, ctx {ctx}"


def x_axis(axis: LoadAxis, steps: Sequence[StepSummary]) -> tuple[str, str]:
    """(x label, scale): concurrency on log2; rates on log2 when they span a factor of 4."""
    if axis == "concurrency":
        return "concurrent users (log2 scale)", "log2"
    rates = [r for s in steps if (r := number(s.get("rate"))) and r > 0]
    if rates and max(rates) / min(rates) >= 4:
        return "request rate, req/s (log2 scale)", "log2"
    return "request rate, req/s", "linear"


def step_tip(step: StepSummary, axis: LoadAxis, metric: str, value: float | None) -> str:
    load = load_label(number(step.get(axis)), axis)
    ctx = step.get("context_tokens")
    where = f"{load}" + (f", {ctx} ctx" if ctx is not None else "")
    shown = prose(value) if value is not None else "–"
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


__all__ = [
    "KNEE_COLOR",
    "Plot",
    "context_groups",
    "group_name",
    "knee_load",
    "load_label",
    "load_of",
    "step_tip",
    "unjoined_invalid",
    "x_axis",
]
