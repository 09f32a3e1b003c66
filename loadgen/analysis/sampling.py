"""How far a step's own figures would move by chance: the sampling band of one steady window.

A short window holds few requests: at C=1 a 3-s window of a speculative server holds about a dozen,
each with its own acceptance, and its TPOT p50 moves ±15 % from one run to the next with nothing
changed. Comparing two runs step by step (``loadgen twin``: measured against twin) needs that
spread, or a difference of chance reads as a difference of servers. Per step, 95 %:

- **Percentiles** (TTFT and TPOT p50, p99): the distribution-free interval of a quantile from the
  window's order statistics. For ``n`` values and quantile ``q``, the ranks ``l < u`` are the closest
  pair with ``P(B < l) <= 2.5 %`` and ``P(B >= u) <= 2.5 %``, ``B ~ Binomial(n, q)``; the interval is
  ``[x(l), x(u)]`` and covers the true quantile with probability >= 95 % for any continuous
  distribution. None when ``n`` is too small for either rank to exist (a median needs 6 values;
  a p99, 368).
- **Throughput** has no band: the tokens arriving in one window are not draws of their own (a
  request streams across the window; closed-loop users finishing together make the next steps
  prefill-heavy), and batch means over parts of the window read C=32's spread at ±10 % where runs
  differ by ±3 %. ``--repeat N`` measures it.

The band treats the window's requests as draws from one steady state: it is the spread *inside* one
window, not run-to-run noise (``--repeat N``, ``analysis.repeats``, measures that), and says how
precisely that window pins its own percentile.
"""

from __future__ import annotations

import math
from typing import Final, TypedDict

import numpy as np
import numpy.typing as npt
from scipy import stats

from loadgen.analysis.load import MISSING, Run
from loadgen.analysis.steps import StepAnalysis

LEVEL: Final = 0.95

Interval = tuple[float, float]


class StepSampling(TypedDict):
    """The 95 % sampling band of a step's figures (None: too few values to bound it)."""

    requests: int
    ttft_p50_ms: Interval | None
    ttft_p99_ms: Interval | None
    tpot_p50_ms: Interval | None
    tpot_p99_ms: Interval | None


def quantile_interval(values: npt.ArrayLike, q: float, level: float = LEVEL) -> Interval | None:
    """Distribution-free ``level`` interval of the ``q`` quantile of the population ``values`` were
    drawn from, from their order statistics (module docstring); None when ``values`` are too few."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = len(x)
    if n == 0:
        return None
    tail = (1.0 - level) / 2.0
    ks = np.arange(n + 1)
    # x(l) lies above the quantile when fewer than l values fall below it: P(B <= l - 1); the
    # lower rank is the largest l with that chance <= tail
    below = np.flatnonzero(stats.binom.cdf(ks, n, q) <= tail)
    # x(u) lies below the quantile when u or more values do: P(B >= u); the smallest such u
    above = np.flatnonzero(stats.binom.sf(ks[:-1], n, q) <= tail) + 1  # sf(u - 1) = P(B >= u)
    if len(below) == 0 or len(above) == 0:
        return None
    lo, hi = int(below[-1]) + 1, int(above[0])
    return float(x[lo - 1]), float(x[hi - 1])


def step_sampling(run: Run, analysis: StepAnalysis | None = None) -> dict[int, StepSampling]:
    """Step id -> the sampling band of each of its figures (module docstring); ``analysis``: the
    run's own, when the caller has built it for the step rows."""
    analysis = analysis or StepAnalysis(run)
    req = analysis.req
    out: dict[int, StepSampling] = {}
    for step in run.steps:
        ok = analysis.ok_rows(step)
        first = req.first_chunk_ns[ok]
        has_first = first != MISSING
        ttft = ((first - req.intended_ns[ok])[has_first]).astype(np.float64) / 1e6
        n_out = analysis.out_eff[ok]
        tpot_rows = has_first & (n_out > 1)
        tpot = (req.end_ns[ok] - first)[tpot_rows].astype(np.float64) / (n_out[tpot_rows] - 1) / 1e6
        out[step.step] = {
            "requests": len(ok),
            "ttft_p50_ms": quantile_interval(ttft, 0.5),
            "ttft_p99_ms": quantile_interval(ttft, 0.99),
            "tpot_p50_ms": quantile_interval(tpot, 0.5),
            "tpot_p99_ms": quantile_interval(tpot, 0.99),
        }
    return out


def relative_half_width(band: Interval | None, value: float | None) -> float | None:
    """Half the band's width over the figure's value (None without either)."""
    if band is None or value is None or value == 0.0:
        return None
    return (band[1] - band[0]) / 2.0 / abs(value)


def combined_noise(a: float | None, b: float | None) -> float | None:
    """The band of a ratio of two independent figures, each with relative half-width ``a``, ``b``:
    √(a² + b²) (None when either is unknown)."""
    if a is None or b is None:
        return None
    return math.hypot(a, b)


__all__ = [
    "LEVEL",
    "StepSampling",
    "combined_noise",
    "quantile_interval",
    "relative_half_width",
    "step_sampling",
]
