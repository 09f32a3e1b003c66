"""The knee detectors. Each reads one :class:`~loadgen.analysis.knee.curve.Curve` on its own and
returns a :class:`~loadgen.analysis.knee.curve.Finding` (``triggered``, the load it points at, one
evidence sentence, its numbers, or ``has_data=False`` with "no data"); a missing or malformed step
figure never raises. :func:`run_detectors` runs them all.

curve detectors (throughput ``output_tok_s`` against load)
  ``kneedle``        Kneedle (Satopaa et al. 2011) on the measured points: normalise load and
                     throughput to [0, 1], take the difference curve d = y - x, and declare the knee
                     at a local maximum of d once d later falls below d_max - S * mean(diff(x)). S is
                     the sensitivity (how many "flat" steps to wait for; larger is more conservative).
                     The points are used as measured (no resampling), so the knee is a measured step.
  ``usl``            Universal Scalability Law fit (:mod:`loadgen.analysis.usl`): sigma, kappa, peak
                     N*; triggered when the fit is good (R^2 >= 0.9) and N* lies within the measured
                     range. Concurrency axis only.
  ``marginal_gain``  throughput gain per doubling of load between consecutive steps,
                     (X2/X1) ** (1 / log2(L2/L1)) - 1; triggered at the first pair below
                     ``min_gain_per_doubling`` (10 %): "throughput +6% for +100% concurrency past C=128".
  ``kleinrock``      Kleinrock's power, throughput / mean E2E latency; its maximum is the classic
                     optimal operating point. Triggered when the maximum is not the last step.
hard limits
  ``slo_breach``     first step whose percentile exceeds an SLO limit ({"ttft_p99_ms": 2000, ...}).
  ``error_onset``    first step whose failed fraction exceeds ``max_error_frac`` (1 %), by class.
  ``kv_saturation``  first step whose KV-cache fill max reaches ``kv_full_frac`` (0.95).
  ``preemption``     first step with retractions / preemptions.
supporting signals
  ``queue_onset``    first step whose mean server queue exceeds ``queue_threshold`` (1 request).
  ``power_plateau``  from some step on, GPU power never again rises more than 5 % per doubling of
                     load over at least one doubling (and whether it sits far below the power
                     limit: memory-bandwidth bound, not power bound).
  ``server_log``     first step with failure lines in the server log (KV full, OOM, ...).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any

import numpy as np

from loadgen.analysis.knee.curve import (
    Curve,
    Finding,
    KneeOptions,
    as_number,
    failed_frac,
    fmt_load,
    gain_per_doubling,
    no_data,
    pct,
    series,
)
from loadgen.analysis.usl import fit_usl
from loadgen.analysis.values import number, stat
from loadgen.spec.gates import parse_slo_key

# ------------------------------------------------------------------------------------------- kneedle


def kneedle(x: Sequence[float], y: Sequence[float], sensitivity: float = 1.0) -> int | None:
    """Index of the knee of a concave increasing curve by Kneedle, or None.

    ``x`` must be increasing. Points are used as given. Needs at least three points and a
    non-constant ``y``; a straight or convex curve has no knee.
    """
    xa = np.asarray(x, dtype=float)
    ya = np.asarray(y, dtype=float)
    n = xa.size
    if n < 3 or np.ptp(xa) <= 0 or np.ptp(ya) <= 0:
        return None
    xn = (xa - xa[0]) / (xa[-1] - xa[0])
    yn = (ya - ya.min()) / np.ptp(ya)
    d = yn - xn
    threshold_step = sensitivity * float(np.mean(np.diff(xn)))
    candidate: int | None = None
    threshold = math.inf
    for i in range(1, n):
        is_max = i < n - 1 and d[i - 1] < d[i] >= d[i + 1]
        is_min = i < n - 1 and d[i - 1] > d[i] <= d[i + 1]
        if candidate is not None and d[i] < threshold:
            return candidate
        if is_max:
            candidate, threshold = i, float(d[i]) - threshold_step
        elif is_min:
            candidate, threshold = None, math.inf
    return None


def detect_kneedle(curve: Curve, opts: KneeOptions) -> Finding:
    pts = series(curve, "output_tok_s")
    if len(pts) < 3:
        return no_data("kneedle", f"{len(pts)} valid steps with throughput, need >= 3")
    xs = [curve.loads[i] for i, _ in pts]
    ys = [v for _, v in pts]
    k = kneedle(xs, ys, opts.sensitivity)
    numbers = {"sensitivity": opts.sensitivity, "points": len(pts)}
    if k is None:
        return Finding(
            "kneedle",
            False,
            None,
            None,
            f"Kneedle (S={opts.sensitivity:g}) finds no knee in throughput over "
            f"{fmt_load(xs[0], curve.axis)}..{fmt_load(xs[-1], curve.axis)}.",
            numbers=numbers,
        )
    where = fmt_load(xs[k], curve.axis)
    numbers.update(knee_throughput=ys[k])
    return Finding(
        "kneedle",
        True,
        xs[k],
        xs[k],
        f"Kneedle (S={opts.sensitivity:g}) puts the knee of the throughput curve at {where} "
        f"({ys[k]:.0f} tok/s; {ys[-1]:.0f} tok/s at {fmt_load(xs[-1], curve.axis)}).",
        phrase=f"throughput curve bends at {where}",
        numbers=numbers,
    )


# ----------------------------------------------------------------------------------------- USL peak


def detect_usl(curve: Curve, opts: KneeOptions) -> Finding:
    if curve.axis != "concurrency":
        return no_data("usl", "open-loop rate ramp; the USL models concurrency")
    pts = series(curve, "output_tok_s")
    fit = fit_usl([curve.loads[i] for i, _ in pts], [v for _, v in pts])
    if not fit.ok:
        return no_data("usl", fit.reason)
    last = curve.loads[pts[-1][0]]
    numbers = fit.to_dict()
    numbers["extrapolated"] = {str(int(last * m)): float(fit.predict(last * m)) for m in (1.5, 2, 4)}
    params = f"sigma={fit.sigma:.3g}, kappa={fit.kappa:.3g}, R^2={fit.r_squared:.3f}"
    if math.isinf(fit.peak_concurrency):
        return Finding(
            "usl",
            False,
            None,
            None,
            f"USL fit ({params}) has no retrograde term: throughput approaches "
            f"{fit.peak_throughput:.0f} tok/s without a peak.",
            numbers=numbers,
        )
    peak = f"C*={fit.peak_concurrency:.0f} ({fit.peak_throughput:.0f} tok/s)"
    if fit.r_squared < opts.usl_min_r2:
        return Finding(
            "usl",
            False,
            fit.peak_concurrency,
            None,
            f"USL fit is poor ({params}); its peak {peak} is not used.",
            numbers=numbers,
        )
    if fit.peak_concurrency > last:
        return Finding(
            "usl",
            False,
            fit.peak_concurrency,
            None,
            f"USL fit ({params}) extrapolates the peak to {peak}, past the last step C={last:g}.",
            numbers=numbers,
        )
    below = [x for x in curve.loads if x <= fit.peak_concurrency]
    knee = below[-1] if below else curve.loads[0]
    return Finding(
        "usl",
        True,
        fit.peak_concurrency,
        knee,
        f"USL fit ({params}) peaks at {peak}; more concurrency lowers throughput past it.",
        phrase=f"USL peak at C≈{fit.peak_concurrency:.0f} (sigma {fit.sigma:.2f}, kappa {fit.kappa:.2g})",
        numbers=numbers,
    )


# ------------------------------------------------------------------------------------ marginal gain


def detect_marginal_gain(curve: Curve, opts: KneeOptions) -> Finding:
    pts = series(curve, "output_tok_s")
    if len(pts) < 2:
        return no_data("marginal_gain", f"{len(pts)} valid steps with throughput, need >= 2")
    gains = []
    for (i, x1), (j, x2) in pairwise(pts):
        l1, l2 = curve.loads[i], curve.loads[j]
        if x1 <= 0:
            continue
        gains.append((l1, l2, x2 / x1 - 1.0, l2 / l1 - 1.0, gain_per_doubling(x1, x2, l1, l2) if x2 > 0 else -1.0))
    numbers: dict[str, Any] = {
        "min_gain_per_doubling": opts.min_gain_per_doubling,
        "pairs": [
            {"from": a, "to": b, "throughput_gain": g, "load_gain": lg, "gain_per_doubling": gd}
            for a, b, g, lg, gd in gains
        ],
    }
    noun = "concurrency" if curve.axis == "concurrency" else "rate"
    for l1, l2, g, lg, gd in gains:
        if gd < opts.min_gain_per_doubling:
            where = fmt_load(l1, curve.axis)
            clause = f"throughput {pct(g)} for {pct(lg)} {noun} past {where}"
            return Finding(
                "marginal_gain",
                True,
                l1,
                l1,
                f"Marginal gain falls below {opts.min_gain_per_doubling:.0%} per doubling: {clause} "
                f"(to {fmt_load(l2, curve.axis)}).",
                phrase=clause,
                numbers=numbers,
            )
    if not gains:
        return no_data("marginal_gain", "no step with throughput > 0")
    l1, l2, g, lg, _ = gains[-1]
    return Finding(
        "marginal_gain",
        False,
        None,
        None,
        f"Throughput still scales: {pct(g)} for {pct(lg)} {noun} from "
        f"{fmt_load(l1, curve.axis)} to {fmt_load(l2, curve.axis)}.",
        numbers=numbers,
    )


# ---------------------------------------------------------------------------------------- Kleinrock


def detect_kleinrock(curve: Curve, opts: KneeOptions) -> Finding:
    vals = []
    for i, s in enumerate(curve.steps):
        x = number(s.get("output_tok_s"))
        lat = stat(s, "e2e_ms", "mean")
        if lat is None:
            lat = stat(s, "e2e_ms", "p50")
        if x is not None and lat is not None and lat > 0:
            vals.append((i, x / (lat / 1000.0)))
    if len(vals) < 2:
        return no_data("kleinrock", f"{len(vals)} valid steps with throughput and E2E latency, need >= 2")
    best_i, best = max(vals, key=lambda t: t[1])
    load = curve.loads[best_i]
    numbers = {"power": {str(as_number(curve.loads[i])): p for i, p in vals}, "max_power": best}
    where = fmt_load(load, curve.axis)
    if best_i == vals[-1][0]:
        return Finding(
            "kleinrock",
            False,
            load,
            None,
            f"Kleinrock's power (throughput / E2E latency) still rises at the last step {where}.",
            numbers=numbers,
        )
    return Finding(
        "kleinrock",
        True,
        load,
        load,
        f"Kleinrock's power (throughput / E2E latency) is highest at {where}: past it latency "
        "grows faster than throughput.",
        phrase=f"best throughput/latency at {where}",
        numbers=numbers,
    )


# ------------------------------------------------------------------------------------- hard limits


def detect_slo_breach(curve: Curve, slo: Mapping[str, float] | None) -> Finding:
    if not slo:
        return no_data("slo_breach", "no SLO given")
    limits = [(k, *parse_slo_key(k), float(v)) for k, v in slo.items()]
    seen_any = False
    for i, s in enumerate(curve.steps):
        over = []
        for key, metric, part, limit in limits:
            v = stat(s, f"{metric}_ms", part)
            if v is None:
                continue
            seen_any = True
            if v > limit:
                over.append((key, metric, part, v, limit))
        if over:
            load = curve.loads[i]
            where = curve.where(load)
            parts = [f"{metric.upper()} {part} {v:.0f} ms > {limit:g} ms" for _, metric, part, v, limit in over]
            prev = curve.before(i)
            return Finding(
                "slo_breach",
                True,
                load,
                prev,
                f"SLO first breached at {where}: {', '.join(parts)}"
                + (f"; {curve.where(prev)} met it." if prev is not None else "; no measured load met it."),
                phrase=f"SLO breached at {where} ({parts[0]})",
                numbers={
                    "breaches": [{"key": k, "value": v, "limit": lim} for k, _, _, v, lim in over],
                    "last_ok": prev,
                },
            )
    if not seen_any:
        return no_data("slo_breach", "no step has the latency percentiles named in the SLO")
    return Finding(
        "slo_breach", False, None, None, f"Every valid step meets the SLO up to {curve.where(curve.loads[-1])}."
    )


def detect_error_onset(curve: Curve, opts: KneeOptions) -> Finding:
    pts = [(i, f) for i, s in enumerate(curve.steps) if (f := failed_frac(s)) is not None]
    if not pts:
        return no_data("error_onset", "no step counted requests")
    for i, frac in pts:
        if frac > opts.max_error_frac:
            s = curve.steps[i]
            load = curve.loads[i]
            raw = s.get("errors")
            errors: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
            top = sorted(((str(k), int(v)) for k, v in errors.items() if number(v)), key=lambda kv: -kv[1])[:3]
            classes = ", ".join(f"{k} {v}" for k, v in top) or "class not recorded"
            prev = curve.before(i)
            return Finding(
                "error_onset",
                True,
                load,
                prev,
                f"{frac:.1%} of requests failed at {curve.where(load)} ({classes}).",
                phrase=f"{frac:.0%} errors at {curve.where(load)} ({top[0][0] if top else 'unclassified'})",
                numbers={"failed_frac": frac, "errors": dict(top), "max_error_frac": opts.max_error_frac},
            )
    worst = max(f for _, f in pts)
    return Finding(
        "error_onset",
        False,
        None,
        None,
        f"Failures stay at or below {opts.max_error_frac:.0%} (worst {worst:.1%}).",
        numbers={"worst_failed_frac": worst},
    )


def detect_kv_saturation(curve: Curve, opts: KneeOptions) -> Finding:
    pts = series(curve, "kv_usage", "max")
    if not pts:
        return no_data("kv_saturation", "no KV-cache telemetry")
    for i, v in pts:
        if v >= opts.kv_full_frac:
            load = curve.loads[i]
            mean = stat(curve.steps[i], "kv_usage", "mean")
            mean_txt = f" (mean {mean:.0%})" if mean is not None else ""
            return Finding(
                "kv_saturation",
                True,
                load,
                load,
                f"KV cache {v:.0%} full at {curve.where(load)}{mean_txt}.",
                phrase=f"KV cache {v:.0%} full at {curve.where(load)}",
                numbers={"kv_usage_max": v, "kv_usage_mean": mean, "kv_full_frac": opts.kv_full_frac},
            )
    i, v = max(pts, key=lambda t: t[1])
    return Finding(
        "kv_saturation",
        False,
        None,
        None,
        f"KV cache peaks at {v:.0%} ({curve.where(curve.loads[i])}).",
        numbers={"kv_usage_max": v},
    )


def detect_preemption(curve: Curve) -> Finding:
    pts = series(curve, "preemptions")
    if not pts:
        return no_data("preemption", "no retraction/preemption telemetry")
    for i, v in pts:
        if v > 0:
            load = curve.loads[i]
            return Finding(
                "preemption",
                True,
                load,
                curve.before(i),
                f"First retraction/preemption at {curve.where(load)} ({v:g} in the step).",
                phrase=f"first retraction at {curve.where(load)}",
                numbers={"preemptions": v},
            )
    return Finding("preemption", False, None, None, "No retraction or preemption in any valid step.")


# ------------------------------------------------------------------------------- supporting signals


def detect_queue_onset(curve: Curve, opts: KneeOptions) -> Finding:
    pts = series(curve, "queue_len", "mean")
    if not pts:
        return no_data("queue_onset", "no server queue telemetry")
    for i, v in pts:
        if v > opts.queue_threshold:
            load = curve.loads[i]
            return Finding(
                "queue_onset",
                True,
                load,
                curve.before(i),
                f"Requests queue at the server from {curve.where(load)} (mean {v:.1f} waiting).",
                phrase=f"server queue from {curve.where(load)} (mean {v:.0f})",
                numbers={"queue_mean": v, "queue_threshold": opts.queue_threshold},
            )
    return Finding(
        "queue_onset", False, None, None, f"Server queue stays at or below {opts.queue_threshold:g} on average."
    )


def detect_power_plateau(curve: Curve, opts: KneeOptions) -> Finding:
    pts = [(i, v) for i, v in series(curve, "gpu_power_w", "mean") if curve.steps[i].get("power_valid") is not False]
    if len(pts) < 2:
        return no_data("power_plateau", f"{len(pts)} steps with valid GPU power, need >= 2")
    noun = "concurrency" if curve.axis == "concurrency" else "rate"
    watts = {str(as_number(curve.loads[k])): v for k, v in pts}
    # Plateau from step i: the load still at least doubles after it, yet no later step draws more
    # than ``power_flat_per_doubling`` above it per doubling (so idle-dominated low steps, whose small
    # relative rises continue, do not count).
    for n, (i, p1) in enumerate(pts[:-1]):
        l1 = curve.loads[i]
        later = pts[n + 1 :]
        j_last, p_last = later[-1]
        span = curve.loads[j_last] / l1
        if p1 <= 0 or span < 2.0:
            continue
        p_top = max(p for _, p in later)
        if gain_per_doubling(p1, max(p_top, p1), l1, curve.loads[j_last]) < opts.power_flat_per_doubling:
            frac = number(curve.steps[j_last].get("gpu_power_frac_of_limit"))
            limit_txt = ""
            if frac is not None:
                limit_txt = (
                    f" at {frac:.0%} of the power limit: power-limited"
                    if frac >= 0.9
                    else f" at only {frac:.0%} of the power limit: not power-bound (likely memory-bandwidth bound)"
                )
            where = curve.where(l1)
            return Finding(
                "power_plateau",
                True,
                l1,
                l1,
                f"GPU power flat past {where}: {p1:.0f} W to {p_last:.0f} W ({pct(p_last / p1 - 1)}) for "
                f"{pct(span - 1)} {noun}{limit_txt}.",
                phrase=f"GPU power flat at {p_last:.0f} W past {where}"
                + (f" ({frac:.0%} of limit)" if frac is not None else ""),
                numbers={"power_w": watts, "frac_of_limit": frac},
            )
    return Finding(
        "power_plateau",
        False,
        None,
        None,
        f"GPU power keeps rising with load ({pts[0][1]:.0f} W to {pts[-1][1]:.0f} W).",
        numbers={"power_w": watts},
    )


def detect_server_log(curve: Curve) -> Finding:
    seen = False
    for i, s in enumerate(curve.steps):
        ev = s.get("log_events")
        if not isinstance(ev, Mapping):
            continue
        seen = True
        hits = {str(k): int(v) for k, v in ev.items() if number(v)}
        if hits:
            load = curve.loads[i]
            names = ", ".join(f"{k} x{v}" for k, v in sorted(hits.items(), key=lambda kv: -kv[1]))
            return Finding(
                "server_log",
                True,
                load,
                None,
                f"Server log failure lines from {curve.where(load)}: {names}.",
                phrase=f"server log: {names} at {curve.where(load)}",
                numbers={"log_events": hits},
            )
    if not seen:
        return no_data("server_log", "no server log capture")
    return Finding("server_log", False, None, None, "No failure lines in the server log during valid steps.")


# --------------------------------------------------------------------------------------------- all


def run_detectors(curve: Curve, slo: Mapping[str, float] | None, opts: KneeOptions) -> dict[str, Finding]:
    """Every detector's finding on ``curve``, by name (``slo`` as in :func:`detect_slo_breach`)."""
    found = [
        detect_slo_breach(curve, slo),
        detect_error_onset(curve, opts),
        detect_kv_saturation(curve, opts),
        detect_preemption(curve),
        detect_marginal_gain(curve, opts),
        detect_kneedle(curve, opts),
        detect_usl(curve, opts),
        detect_kleinrock(curve, opts),
        detect_queue_onset(curve, opts),
        detect_power_plateau(curve, opts),
        detect_server_log(curve),
    ]
    return {f.name: f for f in found}
