"""Capacity plan from a measured ramp: how much load one replica carries within the SLO, and
what a target load then needs in replicas, GPUs, energy and money.

The arithmetic, in order (every figure is in the returned dict, with the approximations named in
``notes``):

1. Operating point: the highest load L such that every valid step at or below L meets every SLO
   limit and fails at most ``max_error_frac`` of its requests (a later step that passes again after
   a failing one does not count: it is noise, not capacity). No interpolation between steps unless
   ``interpolate=True``: then the load is raised linearly towards the first failing step until the
   first limit would be crossed (linear in load for each percentile and for throughput).
2. Successful requests per second there: requests_ok / window_s when the step has its steady
   window length; else closed loop by Little's law with no think time, concurrency / mean E2E
   latency (s) x success fraction; else open loop, the offered rate x success fraction.
3. Goodput: the fraction of successful requests meeting every SLO. Given per step
   (``goodput_frac`` argument keyed by step id, or a step's ``goodput_frac`` key) it is used as is.
   Otherwise it is bounded from the step's percentiles: when a p-th percentile meets its limit, at
   most (1 - p) of the requests miss it, so at least 1 - sum(1 - p_k) meet all of them (union
   bound; a mean limit bounds nothing and adds no term). goodput req/s = successful req/s * that
   fraction; goodput tok/s = output tok/s * that fraction (assumes requests meeting the SLO have
   average length).
4. Per replica at the planned load: capacity * (1 - headroom).
5. Replicas = ceil(target_rps / (goodput req/s * (1 - headroom))), or for users
   ceil(target_users / (concurrency * (1 - headroom))); GPUs = replicas * gpus_per_replica.
6. Energy: kWh per million tokens = 1e6 / tokens_per_joule / 3.6e6, at the operating step.
7. Cost per million tokens = gpu_hour_cost * gpus_per_replica / (goodput tok/s * (1 - headroom)
   * 3600) * 1e6: the GPUs are paid for the headroom too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

from loadgen.analysis.contracts import (
    CapacityPlan,
    LatencyKey,
    LatencyStats,
    LoadAxis,
    OperatingPoint,
    PerReplica,
    PlanCost,
    PlanEnergy,
    StepSummary,
)
from loadgen.analysis.values import at_axis, load_axis, number, stat
from loadgen.spec.gates import SLO_KEY, SLO_NAMES, SLOError

LATENCIES: tuple[LatencyKey, ...] = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")

_STAT_FRAC = {"p50": 0.50, "p90": 0.90, "p99": 0.99}


def _stat(step: StepSummary, key: str) -> float | None:
    """Value of an SLO key ("ttft_p99_ms") in a step, or None."""
    m = SLO_KEY.match(key)
    if not m:
        raise SLOError(f"unknown SLO key {key!r}: use {SLO_NAMES} with _ms (e.g. ttft_p99_ms)")
    return stat(step, f"{m.group(1)}_ms", m.group(2))


def _load(step: StepSummary, axis: LoadAxis) -> float:
    """The load of a step known to have one, as written (a concurrency stays an int)."""
    load = step.get(axis)
    assert load is not None, "only steps with a numeric load are planned"
    return load


def _success(step: StepSummary) -> float:
    ok = number(step.get("requests_ok")) or 0.0
    failed = number(step.get("requests_failed")) or 0.0
    return ok / (ok + failed) if ok + failed > 0 else 0.0


def _failed(step: StepSummary) -> float:
    ok = number(step.get("requests_ok")) or 0.0
    failed = number(step.get("requests_failed")) or 0.0
    return failed / (ok + failed) if ok + failed > 0 else 0.0


def _check(step: StepSummary, slo: Mapping[str, float], max_error_frac: float) -> list[str]:
    """Why a step misses the SLO ([] when it meets it)."""
    why = []
    if (number(step.get("requests_ok")) or 0) <= 0:
        why.append("no successful request")
    elif (failed := _failed(step)) > max_error_frac:
        why.append(f"{failed:.1%} of requests failed")
    for key, limit in slo.items():
        v = _stat(step, key)
        if v is None:
            why.append(f"{key} not measured")
        elif v > limit:
            why.append(f"{key} {v:.0f} > {limit:g}")
    return why


def _ok_req_per_s(step: StepSummary, axis: LoadAxis, load: float) -> tuple[float | None, str]:
    """Successful requests per second at a step run at ``load`` (its own, or an interpolated one),
    and how it was obtained."""
    window = number(step.get("window_s"))
    ok = number(step.get("requests_ok"))
    if window is not None and window > 0 and ok is not None:
        return ok / window, "successful requests sent in the steady window / window length"
    if axis == "rate":
        rate = number(load)
        return (rate * _success(step) if rate is not None else None), "offered rate x success fraction"
    c = number(load)
    e2e = stat(step, "e2e_ms", "mean")
    if c is None or e2e is None or e2e <= 0:
        return None, "nowhere: no steady window length and no mean E2E latency"
    return (
        c / (e2e / 1000.0) * _success(step),
        "Little's law: concurrency / mean E2E latency (closed loop, no think time) x success fraction",
    )


def _slo_fraction(slo: Mapping[str, float]) -> float:
    miss = 0.0
    for key in slo:
        m = SLO_KEY.match(key)
        if m and m.group(2) in _STAT_FRAC:
            miss += 1.0 - _STAT_FRAC[m.group(2)]
    return max(0.0, 1.0 - miss)


def capacity_plan(
    steps: Sequence[StepSummary],
    slo: Mapping[str, float],
    target_rps: float | None = None,
    target_users: float | None = None,
    headroom: float = 0.2,
    gpus_per_replica: int = 8,
    gpu_hour_cost: float | None = None,
    *,
    goodput_frac: Mapping[int, float] | None = None,
    context_tokens: int | None = None,
    max_error_frac: float = 0.01,
    interpolate: bool = False,
) -> CapacityPlan:
    """The capacity plan of a ramp (see the module docstring for the arithmetic).

    Returns a JSON-ready ``CapacityPlan``: ``operating_point`` (None with ``reason`` when no valid
    step meets the SLO), ``per_replica``, ``replicas``/``gpus`` (when a target is given),
    ``energy``, ``cost`` (when ``gpu_hour_cost`` is given) and ``notes``. With several context lengths the
    largest is planned unless ``context_tokens`` picks one.
    """
    _check_arguments(slo, headroom, gpus_per_replica)
    notes: list[str] = []
    contexts = sorted({int(c) for s in steps if (c := s.get("context_tokens")) is not None})
    if context_tokens is None and len(contexts) > 1:
        context_tokens = contexts[-1]
        notes.append(f"several context lengths measured ({contexts}); planned for the largest, {context_tokens}")
    axis, valid = _valid_steps(steps, context_tokens, notes)
    result: CapacityPlan = {
        "slo": dict(slo),
        "axis": axis,
        "context_tokens": context_tokens if context_tokens is not None else (contexts[0] if contexts else None),
        "headroom": headroom,
        "gpus_per_replica": gpus_per_replica,
        "target_rps": target_rps,
        "target_users": target_users,
        "operating_point": None,
        "per_replica": None,
        "replicas": None,
        "gpus": None,
        "energy": None,
        "cost": None,
        "notes": notes,
    }
    best, first_fail = _last_passing(valid, slo, max_error_frac)
    if best is None:
        result["reason"] = _no_plan_reason(first_fail, axis)
        return result

    load = float(_load(best, axis))
    step_for_rates = best
    interpolated = False
    if interpolate and first_fail is not None:
        load, step_for_rates, interpolated = _interpolate(best, first_fail[0], slo, axis)
        if interpolated:
            notes.append(
                f"operating point interpolated linearly between {axis}={best[axis]} and "
                f"{axis}={first_fail[0][axis]} to where the first SLO limit is reached"
            )
    result["operating_point"] = point = _operating_point(
        best, step_for_rates, first_fail, slo, axis, load, interpolated, goodput_frac, notes
    )
    keep = 1.0 - headroom
    good_rps, good_tok_s = point["goodput_req_s"], point["goodput_tok_s"]
    per_replica: PerReplica = {
        "req_s": good_rps * keep if good_rps is not None else None,
        "tok_s": good_tok_s * keep if good_tok_s is not None else None,
        **at_axis(axis, load * keep),
    }
    result["per_replica"] = per_replica
    replicas = _replicas(per_replica, target_rps, target_users, axis, load * keep, notes)
    if replicas is not None:
        result["replicas"] = replicas
        result["gpus"] = replicas * gpus_per_replica
    result["energy"] = _energy(best, notes)
    if gpu_hour_cost is not None:
        result["cost"] = _cost(per_replica, gpu_hour_cost, gpus_per_replica, replicas, notes)
    return result


def _check_arguments(slo: Mapping[str, float], headroom: float, gpus_per_replica: int) -> None:
    """Raise SLOError for a missing or unknown SLO key, ValueError for a headroom or GPU count out of range."""
    if not slo:
        raise SLOError("no SLO given: pass limits like ttft_p99=2s,tpot_p99=50ms")
    for key in slo:
        if not SLO_KEY.match(key):
            raise SLOError(f"unknown SLO key {key!r}: use {SLO_NAMES} with _ms (e.g. ttft_p99_ms)")
    if not 0 <= headroom < 1:
        raise ValueError(f"headroom must be in [0, 1), got {headroom}: 0.2 plans each replica at 80% of capacity")
    if gpus_per_replica < 1:
        raise ValueError(f"gpus_per_replica must be >= 1, got {gpus_per_replica}")


def _valid_steps(
    steps: Sequence[StepSummary], context_tokens: int | None, notes: list[str]
) -> tuple[LoadAxis, list[StepSummary]]:
    """The load axis of the steps at ``context_tokens`` (all steps when None), and those of them
    that are valid and have a load, by increasing load; notes how many were left out."""
    chosen = [s for s in steps if context_tokens is None or s.get("context_tokens") == context_tokens]
    axis: LoadAxis = load_axis(chosen) if chosen else "concurrency"
    valid = sorted(
        (s for s in chosen if s.get("valid", True) is not False and number(s.get(axis)) is not None),
        key=lambda s: float(_load(s, axis)),
    )
    skipped = len(chosen) - len(valid)
    if skipped:
        notes.append(f"{skipped} invalid step(s) left out")
    return axis, valid


def _last_passing(
    valid: Sequence[StepSummary], slo: Mapping[str, float], max_error_frac: float
) -> tuple[StepSummary | None, tuple[StepSummary, list[str]] | None]:
    """The highest step of the passing run from the lowest load (None when the lowest fails), and the
    first failing step with why it fails (None when every step passes)."""
    best: StepSummary | None = None
    for s in valid:
        why = _check(s, slo, max_error_frac)
        if why:
            return best, (s, why)
        best = s
    return best, None


def _no_plan_reason(first_fail: tuple[StepSummary, list[str]] | None, axis: LoadAxis) -> str:
    if first_fail is None:
        return "no valid step to plan from"
    s, why = first_fail
    return f"no valid step meets the SLO; the lowest, {axis}={s[axis]}, has {'; '.join(why)}"


def _goodput_fraction(
    best: StepSummary, slo: Mapping[str, float], goodput_frac: Mapping[int, float] | None, notes: list[str]
) -> float:
    """The step's measured goodput fraction (the argument's, else its own key), else the union bound."""
    given = (goodput_frac or {}).get(int(best.get("step", -1))) if best.get("step") is not None else None
    if given is None:
        given = number(best.get("goodput_frac"))
    if given is not None:
        notes.append("goodput fraction measured per request")
        return float(given)
    frac = _slo_fraction(slo)
    notes.append(
        f"goodput approximated: at least {frac:.1%} of successful requests meet every SLO, "
        "bounded from the step's percentiles (union bound), no per-request data"
    )
    return frac


def _operating_point(
    best: StepSummary,
    step_for_rates: StepSummary,
    first_fail: tuple[StepSummary, list[str]] | None,
    slo: Mapping[str, float],
    axis: LoadAxis,
    load: float,
    interpolated: bool,
    goodput_frac: Mapping[int, float] | None,
    notes: list[str],
) -> OperatingPoint:
    """The operating point at ``load``: ``best`` when measured, or ``step_for_rates``, ``best``
    with its throughput and latencies interpolated to ``load``, when ``interpolated``."""
    ok_rps, how = _ok_req_per_s(step_for_rates, axis, load)
    notes.append(f"request rate from {how}")
    success = _success(best)
    frac = _goodput_fraction(best, slo, goodput_frac, notes)
    tok_s = number(step_for_rates.get("output_tok_s"))
    return {
        "step": best.get("step"),
        **at_axis(axis, load),
        "interpolated": interpolated,
        "ok_req_s": ok_rps,
        "output_tok_s": tok_s,
        "success_frac": success,
        "goodput_frac": frac,
        "goodput_req_s": ok_rps * frac if ok_rps is not None else None,
        "goodput_tok_s": tok_s * frac if tok_s is not None else None,
        "slo_values": {k: _stat(step_for_rates, k) for k in slo},
        "next_step_fails": (
            {**at_axis(axis, _load(first_fail[0], axis)), "why": first_fail[1]} if first_fail is not None else None
        ),
    }


def _replicas(
    per_replica: PerReplica,
    target_rps: float | None,
    target_users: float | None,
    axis: LoadAxis,
    planned_load: float,
    notes: list[str],
) -> int | None:
    """Replicas for the target rate and/or users (the larger), None without a usable target."""
    replicas: int | None = None
    if target_rps is not None:
        if per_replica["req_s"]:
            replicas = math.ceil(target_rps / per_replica["req_s"] - 1e-9)
        else:
            notes.append("target req/s given but the request rate at the operating point is unknown")
    if target_users is not None:
        if axis == "concurrency":
            by_users = math.ceil(target_users / planned_load - 1e-9)
            replicas = max(replicas or 0, by_users)
        else:
            notes.append("target users needs a closed-loop (concurrency) ramp; ignored for this open-loop run")
    return replicas


def _energy(best: StepSummary, notes: list[str]) -> PlanEnergy | None:
    tpj = number(best.get("tokens_per_joule"))
    if not (tpj and tpj > 0):
        notes.append("no energy figures: the operating step has no valid tokens_per_joule")
        return None
    power = best.get("gpu_power_w")
    return {
        "tokens_per_joule": tpj,
        "kwh_per_million_tokens": 1e6 / tpj / 3.6e6,
        "gpu_power_w_mean": number(power.get("mean")) if isinstance(power, Mapping) else None,
        "measured_at": "operating step, full load",
    }


def _cost(
    per_replica: PerReplica, gpu_hour_cost: float, gpus_per_replica: int, replicas: int | None, notes: list[str]
) -> PlanCost | None:
    if not per_replica["tok_s"]:
        notes.append("no cost per token: output tok/s unknown at the operating point")
        return None
    hourly = gpu_hour_cost * gpus_per_replica
    return {
        "gpu_hour_cost": gpu_hour_cost,
        "replica_hour_cost": hourly,
        "per_million_tokens": hourly / (per_replica["tok_s"] * 3600.0) * 1e6,
        "total_hour_cost": hourly * replicas if replicas is not None else None,
    }


def _interpolate(
    good: StepSummary, bad: StepSummary, slo: Mapping[str, float], axis: LoadAxis
) -> tuple[float, StepSummary, bool]:
    """Load between a passing and the next failing step where the first limit is reached, and
    the passing step with its throughput and latencies interpolated to that load."""
    l0, l1 = float(_load(good, axis)), float(_load(bad, axis))
    t = 1.0
    for key, limit in slo.items():
        v0, v1 = _stat(good, key), _stat(bad, key)
        if v0 is None or v1 is None or v1 <= limit:
            continue
        t = min(t, (limit - v0) / (v1 - v0) if v1 != v0 else 0.0)
    if not 0.0 < t < 1.0 or _success(bad) < _success(good) - 1e-9:
        # Errors at the failing step, or no percentile to interpolate on: keep the measured step.
        return l0, good, False
    if axis == "concurrency":
        # A planned concurrency is a whole number of users: round down and re-derive t.
        t = (math.floor(l0 + t * (l1 - l0)) - l0) / (l1 - l0)
        if t <= 0.0:
            return l0, good, False
    mixed: StepSummary = {**good}
    a, b = number(good.get("output_tok_s")), number(bad.get("output_tok_s"))
    if a is not None and b is not None:
        mixed["output_tok_s"] = a + t * (b - a)
    for name in LATENCIES:
        ga, gb = good.get(name), bad.get(name)
        if isinstance(ga, Mapping) and isinstance(gb, Mapping):
            mixed[name] = _between(ga, gb, t)
    return l0 + t * (l1 - l0), mixed, True


def _between(a: LatencyStats, b: LatencyStats, t: float) -> LatencyStats:
    def at(part: Literal["mean", "p50", "p90", "p99"]) -> float | None:
        x, y = number(a.get(part)), number(b.get(part))
        return x + t * (y - x) if x is not None and y is not None else None

    return {"mean": at("mean"), "p50": at("p50"), "p90": at("p90"), "p99": at("p99")}
