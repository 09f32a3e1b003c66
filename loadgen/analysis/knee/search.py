"""The knee search of ``--find-knee``: which load to measure next, a pure function of the steps
measured so far (in any order) and the budget.

:func:`search_next` raises the load geometrically until a step is saturated (SLO breach, errors, KV
full or preemptions, nothing served, or a gain per doubling below the threshold measured against a
good step at most 1/1.5 of the load: :func:`saturation_reasons`), then bisects between the last good
and the first saturated step until they are within the precision, or the step or time budget runs
out. The thresholds are the knee verdict's (:class:`~loadgen.analysis.knee.curve.KneeOptions`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from loadgen.analysis.knee.curve import (
    KneeOptions,
    Step,
    failed_frac,
    fmt_load,
    gain_per_doubling,
    pct,
)
from loadgen.analysis.values import number, stat
from loadgen.spec.gates import parse_slo_key


@dataclass(frozen=True)
class SearchBudget:
    """Limits and thresholds of ``--find-knee``.

    Loads are concurrencies (integers) or, with ``axis="rate"``, request rates. The search stops
    when ``max_steps`` steps were measured, when another step of ``step_time_s`` (default: the
    mean so far) would pass ``max_time_s``, when ``max_load`` was good, or when the last good and
    the first saturated load are within max(min_gap, rel_precision * last good). ``min_gap``
    defaults to 1 user (concurrency) or 0.1 req/s (rate).
    """

    max_steps: int = 12
    max_time_s: float | None = None
    step_time_s: float | None = None
    start: float = 1
    factor: float = 2.0
    max_load: float = 4096
    rel_precision: float = 0.1
    min_gap: float | None = None
    axis: str = "concurrency"
    slo: Mapping[str, float] | None = None
    options: KneeOptions = field(default_factory=KneeOptions)


@dataclass(frozen=True)
class SearchState:
    next_load: float | None
    phase: str  # "start" | "raise" | "bisect" | "done"
    last_good: float | None
    first_saturated: float | None
    stop_reason: str
    saturated: dict[float, str]  # load -> why it counts as saturated


def saturation_reasons(
    step: Step, ref: Step | None, axis: str, slo: Mapping[str, float] | None, opts: KneeOptions
) -> list[str]:
    """Why one step counts as saturated for the search ([] when it does not)."""
    why = []
    ok = number(step.get("requests_ok")) or 0.0
    if ok <= 0:
        why.append("nothing served")
    frac = failed_frac(step)
    if frac is not None and frac > opts.max_error_frac:
        why.append(f"{frac:.0%} errors")
    for key, limit in (slo or {}).items():
        metric, part = parse_slo_key(key)
        v = stat(step, f"{metric}_ms", part)
        if v is not None and v > limit:
            why.append(f"{key} {v:.0f} > {limit:g}")
    kv = stat(step, "kv_usage", "max")
    if kv is not None and kv >= opts.kv_full_frac:
        why.append(f"KV cache {kv:.0%} full")
    pre = number(step.get("preemptions"))
    if pre:
        why.append(f"{pre:g} preemptions")
    if ref is not None and not why:
        x1, x2 = number(ref.get("output_tok_s")), number(step.get("output_tok_s"))
        l1, l2 = number(ref.get(axis)), number(step.get(axis))
        if x1 and x2 and l1 and l2 and l2 > l1 and x1 > 0:
            gd = gain_per_doubling(x1, x2, l1, l2)
            if gd < opts.min_gain_per_doubling:
                why.append(f"throughput {pct(x2 / x1 - 1)} for {pct(l2 / l1 - 1)} load")
    return why


def search_state(history: Sequence[Step], budget: SearchBudget, elapsed_s: float | None = None) -> SearchState:
    """Where the knee search stands after ``history`` (steps measured so far, any order)."""
    axis = budget.axis
    min_gap = budget.min_gap if budget.min_gap is not None else (1.0 if axis == "concurrency" else 0.1)
    by_load: dict[float, Step] = {}
    for s in history:
        load = number(s.get(axis))
        if load is not None:
            by_load[load] = s
    loads = sorted(by_load)
    saturated: dict[float, str] = {}
    good: list[float] = []
    for load in loads:
        s = by_load[load]
        refs = [g for g in good if g <= load / 1.5] or [g for g in good if g < load]
        ref = by_load[refs[-1]] if refs and by_load[refs[-1]].get("valid", True) is not False else None
        why = saturation_reasons(s, ref, axis, budget.slo, budget.options)
        if why:
            saturated[load] = "; ".join(why)
        else:
            good.append(load)
    first_sat = min(saturated) if saturated else None
    below = [g for g in good if first_sat is None or g < first_sat]
    last_good = below[-1] if below else None

    def done(why: str) -> SearchState:
        return SearchState(None, "done", last_good, first_sat, why, saturated)

    if len(history) >= budget.max_steps:
        return done(f"step budget of {budget.max_steps} used")
    if budget.max_time_s is not None and history:
        spent = elapsed_s or 0.0
        per_step = budget.step_time_s or (spent / len(history) if spent else 0.0)
        if spent + per_step > budget.max_time_s:
            return done(f"time budget of {budget.max_time_s:g} s used ({spent:.0f} s spent)")

    def clean(v: float) -> float:
        return round(v) if axis == "concurrency" else float(f"{v:.3g}")

    if not loads:
        return SearchState(clean(budget.start), "start", None, None, "", saturated)
    if first_sat is None:
        top = loads[-1]
        if top >= budget.max_load:
            return done(f"no saturation up to the maximum load {fmt_load(top, axis)}")
        return SearchState(
            min(clean(top * budget.factor), clean(budget.max_load)), "raise", last_good, None, "", saturated
        )
    if last_good is None:
        lowest = loads[0]
        nxt = clean(lowest / budget.factor)
        if nxt < min_gap or nxt in by_load or nxt >= lowest:
            return done(f"saturated already at the lowest load {fmt_load(lowest, axis)}")
        return SearchState(nxt, "bisect", None, first_sat, "", saturated)
    if first_sat - last_good <= max(min_gap, budget.rel_precision * last_good):
        return done(f"converged between {fmt_load(last_good, axis)} and {fmt_load(first_sat, axis)}")
    mid = clean((last_good + first_sat) / 2)
    if mid in by_load or not last_good < mid < first_sat:
        return done(f"converged between {fmt_load(last_good, axis)} and {fmt_load(first_sat, axis)}")
    return SearchState(mid, "bisect", last_good, first_sat, "", saturated)


def search_next(history: Sequence[Step], budget: SearchBudget, elapsed_s: float | None = None) -> float | None:
    """The next load for ``--find-knee`` to measure, or None when the search is over."""
    return search_state(history, budget, elapsed_s).next_load
