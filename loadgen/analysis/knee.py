"""Where a deployment saturates, and why: the knee verdict and the knee search.

Input is the summary's step list (plain dicts, see ``loadgen report``). Only steps labelled
``valid`` are used; the verdict lists the ones it ignored and why. The load axis is concurrency
(closed loop) or, when any step has no concurrency, the open-loop request rate. Several context
lengths are analysed one curve each; the verdict is the lowest knee among them.

Detectors stand on their own; each returns a :class:`Finding` (``triggered``, the load it points
at, one evidence sentence, its numbers, or ``has_data=False`` with "no data"):

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
                     ``min_gain_per_doubling`` (25 %): "throughput +24% for +100% concurrency past C=64".
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

The verdict (:func:`knee_verdict`):

1. Each hard limit proposes a knee: for ``slo_breach``, ``error_onset`` and ``preemption`` the step
   where the signal appears already fails, so the knee is the step before it; a full KV cache
   marks the load at which the server became full, so the knee is that step. The verdict is the
   lowest of these (None, "no load meets ...", when a failing signal is already at the first step).
2. Without a hard limit, the curve detectors vote: Kneedle's knee, the last measured step at or
   below the USL peak, and the step before the first poor marginal gain. The verdict is the median
   of those that triggered (the lower one when two did).
3. Otherwise there is no knee within the measured range, and the reason says how the last step
   still scaled.

The reason is one sentence: the deciding signal first, then every other triggered signal, then the
ignored steps. Kleinrock's optimum, the queue, power and log signals only ever add evidence.

:func:`search_next` drives ``--find-knee``: it raises the load geometrically until a step is
saturated (SLO breach, errors, KV full or preemptions, nothing served, or a gain per doubling
below the threshold measured against a good step at most 1/1.5 of the load), then bisects between
the last good and the first saturated step until they are within the precision, or the step or
time budget runs out. It is a pure function of the steps measured so far.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np

from loadgen.analysis.usl import fit_usl
from loadgen.analysis.values import load_axis, number, stat

Step = Mapping[str, Any]

SLO_KEY = re.compile(r"^(ttft|itl|tpot|e2e)_(mean|p50|p90|p99)_ms$")

CURVE_DETECTORS = ("kneedle", "usl", "marginal_gain")
HARD_DETECTORS = ("slo_breach", "error_onset", "kv_saturation", "preemption")
DETECTOR_ORDER = (
    "slo_breach",
    "error_onset",
    "kv_saturation",
    "preemption",
    "marginal_gain",
    "kneedle",
    "usl",
    "kleinrock",
    "queue_onset",
    "power_plateau",
    "server_log",
)


@dataclass(frozen=True)
class KneeOptions:
    """Thresholds of the detectors; the defaults are the documented ones."""

    sensitivity: float = 1.0  # Kneedle S
    min_gain_per_doubling: float = 0.25
    max_error_frac: float = 0.01
    kv_full_frac: float = 0.95
    queue_threshold: float = 1.0
    power_flat_per_doubling: float = 0.05
    usl_min_r2: float = 0.9


@dataclass
class Finding:
    """One detector's answer.

    ``load`` is the detector's own point (the onset step for signals, the knee for curve
    detectors); ``knee`` is the knee it proposes to the verdict (the last good load), or None.
    """

    name: str
    triggered: bool
    load: float | None
    knee: float | None
    evidence: str
    phrase: str = ""  # short clause for the verdict's sentence; "" when not triggered
    has_data: bool = True
    numbers: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, axis: str = "concurrency") -> dict[str, Any]:
        d = asdict(self)
        d["load"], d["knee"] = as_number(self.load), as_number(self.knee)
        d["concurrency"] = d["load"] if axis == "concurrency" else None
        d["rate"] = d["load"] if axis == "rate" else None
        return d


def as_number(v: float | None) -> float | int | None:
    """Whole numbers as int (C=128, not 128.0) for JSON; fractions unchanged; None, nan, inf -> None."""
    if v is None or not math.isfinite(v):
        return None
    return int(v) if float(v).is_integer() else v


def _no_data(name: str, why: str) -> Finding:
    return Finding(name, False, None, None, f"no data: {why}", has_data=False)


# --------------------------------------------------------------------------------------------- steps


def fmt_load(load: float | None, axis: str) -> str:
    if load is None:
        return "none"
    text = f"{load:g}" if load != int(load) else str(int(load))
    return f"C={text}" if axis == "concurrency" else f"rate={text} req/s"


def _pct(frac: float) -> str:
    return f"{frac * 100:+.0f}%"


@dataclass(frozen=True)
class Curve:
    """Valid steps of one context length, sorted by load (one step per load: the last measured)."""

    axis: str
    loads: list[float]
    steps: list[Step]

    def where(self, load: float) -> str:
        return fmt_load(load, self.axis)

    def before(self, i: int) -> float | None:
        return self.loads[i - 1] if i > 0 else None


def make_curve(steps: Sequence[Step], axis: str | None = None) -> Curve:
    axis = axis or load_axis(steps)
    by_load: dict[float, Step] = {}
    for s in steps:
        load = number(s.get(axis))
        if load is not None and s.get("valid", True) is not False:
            by_load[load] = s
    loads = sorted(by_load)
    return Curve(axis, loads, [by_load[x] for x in loads])


def _series(curve: Curve, key: str, sub: str | None = None) -> list[tuple[int, float]]:
    out = []
    for i, s in enumerate(curve.steps):
        v = stat(s, key, sub) if sub else number(s.get(key))
        if v is not None:
            out.append((i, v))
    return out


def _failed_frac(step: Step) -> float | None:
    ok = number(step.get("requests_ok")) or 0.0
    failed = number(step.get("requests_failed")) or 0.0
    return failed / (ok + failed) if ok + failed > 0 else None


def _gain_per_doubling(x1: float, x2: float, l1: float, l2: float) -> float:
    return float((x2 / x1) ** (1.0 / math.log2(l2 / l1)) - 1.0)


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
    pts = _series(curve, "output_tok_s")
    if len(pts) < 3:
        return _no_data("kneedle", f"{len(pts)} valid steps with throughput, need >= 3")
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
        return _no_data("usl", "open-loop rate ramp; the USL models concurrency")
    pts = _series(curve, "output_tok_s")
    fit = fit_usl([curve.loads[i] for i, _ in pts], [v for _, v in pts])
    if not fit.ok:
        return _no_data("usl", fit.reason)
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
    pts = _series(curve, "output_tok_s")
    if len(pts) < 2:
        return _no_data("marginal_gain", f"{len(pts)} valid steps with throughput, need >= 2")
    gains = []
    for (i, x1), (j, x2) in pairwise(pts):
        l1, l2 = curve.loads[i], curve.loads[j]
        if x1 <= 0:
            continue
        gains.append((l1, l2, x2 / x1 - 1.0, l2 / l1 - 1.0, _gain_per_doubling(x1, x2, l1, l2) if x2 > 0 else -1.0))
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
            clause = f"throughput {_pct(g)} for {_pct(lg)} {noun} past {where}"
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
        return _no_data("marginal_gain", "no step with throughput > 0")
    l1, l2, g, lg, _ = gains[-1]
    return Finding(
        "marginal_gain",
        False,
        None,
        None,
        f"Throughput still scales: {_pct(g)} for {_pct(lg)} {noun} from "
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
        return _no_data("kleinrock", f"{len(vals)} valid steps with throughput and E2E latency, need >= 2")
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


def parse_slo_key(key: str) -> tuple[str, str]:
    m = SLO_KEY.match(key)
    if not m:
        raise ValueError(
            f"unknown SLO key {key!r}: use <metric>_<stat>_ms with metric in ttft, itl, tpot, e2e "
            "and stat in mean, p50, p90, p99 (e.g. ttft_p99_ms)"
        )
    return m.group(1), m.group(2)


def detect_slo_breach(curve: Curve, slo: Mapping[str, float] | None) -> Finding:
    if not slo:
        return _no_data("slo_breach", "no SLO given")
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
        return _no_data("slo_breach", "no step has the latency percentiles named in the SLO")
    return Finding(
        "slo_breach", False, None, None, f"Every valid step meets the SLO up to {curve.where(curve.loads[-1])}."
    )


def detect_error_onset(curve: Curve, opts: KneeOptions) -> Finding:
    pts = [(i, f) for i, s in enumerate(curve.steps) if (f := _failed_frac(s)) is not None]
    if not pts:
        return _no_data("error_onset", "no step counted requests")
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
    pts = _series(curve, "kv_usage", "max")
    if not pts:
        return _no_data("kv_saturation", "no KV-cache telemetry")
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
    pts = _series(curve, "preemptions")
    if not pts:
        return _no_data("preemption", "no retraction/preemption telemetry")
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
    pts = _series(curve, "queue_len", "mean")
    if not pts:
        return _no_data("queue_onset", "no server queue telemetry")
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
    pts = [(i, v) for i, v in _series(curve, "gpu_power_w", "mean") if curve.steps[i].get("power_valid") is not False]
    if len(pts) < 2:
        return _no_data("power_plateau", f"{len(pts)} steps with valid GPU power, need >= 2")
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
        if _gain_per_doubling(p1, max(p_top, p1), l1, curve.loads[j_last]) < opts.power_flat_per_doubling:
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
                f"GPU power flat past {where}: {p1:.0f} W to {p_last:.0f} W ({_pct(p_last / p1 - 1)}) for "
                f"{_pct(span - 1)} {noun}{limit_txt}.",
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
        return _no_data("server_log", "no server log capture")
    return Finding("server_log", False, None, None, "No failure lines in the server log during valid steps.")


# ----------------------------------------------------------------------------------------- verdict


def run_detectors(curve: Curve, slo: Mapping[str, float] | None, opts: KneeOptions) -> dict[str, Finding]:
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


def _ignored(steps: Sequence[Step], axis: str) -> list[dict[str, Any]]:
    return [
        {
            "step": s.get("step"),
            axis: s.get(axis),
            "context_tokens": s.get("context_tokens"),
            "invalid_reason": s.get("invalid_reason") or "invalid",
        }
        for s in steps
        if s.get("valid", True) is False
    ]


def _verdict_one(
    steps: Sequence[Step], slo: Mapping[str, float] | None, opts: KneeOptions, axis: str
) -> dict[str, Any]:
    curve = make_curve(steps, axis)
    ignored = _ignored(steps, axis)
    ignored_txt = ""
    if ignored:
        parts = [f"{fmt_load(number(s[axis]), axis)}: {s['invalid_reason']}" for s in ignored]
        ignored_txt = f"ignored {len(ignored)} invalid step{'s' if len(ignored) > 1 else ''} ({'; '.join(parts)})"
    base: dict[str, Any] = {"axis": axis, "ignored_steps": ignored}

    if len(curve.loads) < 2:
        why = f"insufficient data: {len(curve.loads)} valid step{'s' if len(curve.loads) != 1 else ''}, need >= 2"
        return {
            **base,
            "knee": None,
            "rule": "none",
            "reason": "; ".join(x for x in (why, ignored_txt) if x),
            "detectors": {},
        }

    found = run_detectors(curve, slo, opts)
    hard = [found[n] for n in HARD_DETECTORS if found[n].triggered]
    deciding: list[Finding] = []
    knee: float | None
    if hard:
        rule = "hard limit"
        # A hard limit failing already at the first step (knee None) means no load qualifies: it wins.
        knee = min((-math.inf if f.knee is None else f.knee) for f in hard)
        deciding = [f for f in hard if (-math.inf if f.knee is None else f.knee) == knee]
        if math.isinf(knee):
            knee = None
    else:
        votes = sorted(
            (f for n in CURVE_DETECTORS if (f := found[n]).triggered and f.knee is not None),
            key=lambda f: f.knee or 0.0,
        )
        if votes:
            rule = "curve consensus"
            knee = votes[(len(votes) - 1) // 2].knee
            deciding = [f for f in votes if f.knee == knee]
        else:
            rule, knee = "none", None
    deciding.sort(key=lambda f: DETECTOR_ORDER.index(f.name))

    lead = [f.phrase for f in deciding]
    rest = [found[n].phrase for n in DETECTOR_ORDER if found[n].triggered and found[n] not in deciding]
    if rule == "none":
        gain = found["marginal_gain"]
        scaling = gain.evidence.rstrip(".")
        if gain.has_data:
            lead = [f"no saturation up to {fmt_load(curve.loads[-1], axis)}: {scaling[:1].lower()}{scaling[1:]}"]
        else:
            lead = [f"no knee found, throughput has {scaling}"]
        if found["usl"].load is not None and not found["usl"].triggered:
            lead.append(f"USL predicts a peak at C≈{found['usl'].load:.0f}")
    elif knee is None:
        lead.insert(0, f"no load meets the limits (already at {fmt_load(curve.loads[0], axis)})")
    reason = "; ".join(x for x in [*lead, *rest, ignored_txt] if x)
    return {
        **base,
        "knee": knee,
        "rule": rule,
        "reason": reason,
        "detectors": {n: found[n].to_dict(axis) for n in DETECTOR_ORDER},
    }


def knee_verdict(
    steps: Sequence[Step], slo: Mapping[str, float] | None = None, options: KneeOptions | None = None
) -> dict[str, Any]:
    """The knee of a ramp: {"concurrency", "rate", "reason", "rule", "detectors", ...}.

    ``concurrency`` (closed loop) or ``rate`` (open loop) is the knee or None; ``reason`` is one
    sentence; ``detectors`` maps each detector's name to its finding. With several context
    lengths each is judged alone (``by_context``) and the lowest knee is reported.
    """
    opts = options or KneeOptions()
    if slo:
        for k in slo:
            parse_slo_key(k)
    if not steps:
        return {
            "concurrency": None,
            "rate": None,
            "axis": "concurrency",
            "context_tokens": None,
            "knee": None,
            "rule": "none",
            "reason": "insufficient data: no steps",
            "detectors": {},
            "ignored_steps": [],
        }
    axis = load_axis(steps)
    groups: dict[Any, list[Step]] = {}
    for s in steps:
        groups.setdefault(s.get("context_tokens"), []).append(s)
    verdicts = {ctx: _verdict_one(g, slo, opts, axis) for ctx, g in groups.items()}
    ctx, chosen = min(
        verdicts.items(),
        key=lambda kv: (
            kv[1]["knee"] is None and kv[1]["rule"] != "hard limit",
            kv[1]["knee"] if kv[1]["knee"] is not None else -1.0,
        ),
    )
    out = dict(chosen)
    if len(groups) > 1:
        out["reason"] = f"at {ctx} context tokens: {out['reason']}"
        out["by_context"] = {str(k): v for k, v in verdicts.items()}
    out["context_tokens"] = ctx
    out["knee"] = as_number(out["knee"])
    out["concurrency"] = out["knee"] if axis == "concurrency" else None
    out["rate"] = out["knee"] if axis == "rate" else None
    return out


# ------------------------------------------------------------------------------------------ search


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
    options: KneeOptions = KneeOptions()


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
    frac = _failed_frac(step)
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
            gd = _gain_per_doubling(x1, x2, l1, l2)
            if gd < opts.min_gain_per_doubling:
                why.append(f"throughput {_pct(x2 / x1 - 1)} for {_pct(l2 / l1 - 1)} load")
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
