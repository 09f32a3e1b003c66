"""Universal Scalability Law (Gunther) fitted to throughput-vs-concurrency points.

    X(N) = lambda * N / (1 + sigma * (N - 1) + kappa * N * (N - 1))

``lambda`` is the throughput of one user alone (same unit as the points, e.g. tok/s), ``sigma``
the contention (serialised fraction), ``kappa`` the coherency (crosstalk) cost. With kappa > 0 and
sigma < 1 throughput peaks at N* = sqrt((1 - sigma) / kappa) and falls past it (retrograde); with
kappa == 0 it rises towards the ceiling lambda / sigma and never peaks (N* = inf; a fitted kappa
whose term adds under 0.01 % to the denominator at the largest measured N counts as 0). N* is returned
as the continuous maximiser; the integer peak is floor or ceil of it, whichever predicts more.

The fit is a bounded non-linear least squares (scipy ``least_squares``, lambda > 0,
0 <= sigma <= 1, kappa >= 0) on absolute residuals, started from the closed-form linearisation
N * lambda0 / X(N) - 1 = sigma (N - 1) + kappa N (N - 1) (non-negative least squares for sigma,
kappa given lambda0 from the lowest-concurrency point). Fewer than three distinct concurrencies
give ``ok=False`` with the reason, never an exception.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import least_squares, nnls

Points = Sequence[float] | NDArray[Any]

MIN_POINTS = 3
# kappa counts as zero when its term adds less than this fraction to the USL denominator at the
# largest measured concurrency: the optimiser's leftover, not a coherency cost.
_KAPPA_NEGLIGIBLE = 1e-4


@dataclass(frozen=True)
class USLFit:
    """A USL fit. When ``ok`` is False only ``reason`` and ``n_points`` mean anything."""

    ok: bool
    lambda_: float
    sigma: float
    kappa: float
    peak_concurrency: float  # N*, continuous; math.inf when kappa == 0
    peak_throughput: float  # X(N*); when N* is inf, the ceiling lambda / sigma (inf if sigma == 0)
    r_squared: float
    n_points: int
    reason: str = ""

    @overload
    def predict(self, n: float) -> float: ...

    @overload
    def predict(self, n: Sequence[float] | NDArray[np.float64]) -> NDArray[np.float64]: ...

    def predict(self, n: float | Sequence[float] | NDArray[np.float64]) -> float | NDArray[np.float64]:
        """Throughput the fit predicts at concurrency ``n`` (scalar or array); nan when not ``ok``."""
        if isinstance(n, (int, float)):
            if not self.ok:
                return math.nan
            return float(_usl(np.array([float(n)]), self.lambda_, self.sigma, self.kappa)[0])
        arr = np.asarray(n, dtype=float)
        if not self.ok:
            return np.full(arr.shape, math.nan)
        return _usl(arr, self.lambda_, self.sigma, self.kappa)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; infinities become None (JSON has no inf)."""

        def num(v: float) -> float | None:
            return None if not math.isfinite(v) else float(v)

        return {
            "ok": self.ok,
            "lambda": num(self.lambda_),
            "sigma": num(self.sigma),
            "kappa": num(self.kappa),
            "peak_concurrency": num(self.peak_concurrency),
            "peak_throughput": num(self.peak_throughput),
            "r_squared": num(self.r_squared),
            "n_points": self.n_points,
            "reason": self.reason,
        }


def _usl(n: NDArray[np.float64], lam: float, sigma: float, kappa: float) -> NDArray[np.float64]:
    return lam * n / (1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0))


def insufficient(n_points: int, reason: str) -> USLFit:
    nan = math.nan
    return USLFit(False, nan, nan, nan, nan, nan, nan, n_points, reason)


def fit_usl(concurrency: Points, throughput: Points) -> USLFit:
    """Fit the USL to (concurrency, throughput) pairs.

    Points with non-finite or non-positive values are dropped. Needs at least three distinct
    concurrencies; otherwise (or when the optimiser fails) returns ``ok=False`` with ``reason``.
    """
    n_all = np.asarray(concurrency, dtype=float)
    x_all = np.asarray(throughput, dtype=float)
    if n_all.shape != x_all.shape:
        raise ValueError(f"concurrency has {n_all.size} values but throughput has {x_all.size}")
    keep = np.isfinite(n_all) & np.isfinite(x_all) & (n_all > 0) & (x_all > 0)
    n, x = n_all[keep], x_all[keep]
    distinct = int(np.unique(n).size)
    if distinct < MIN_POINTS:
        return insufficient(
            int(n.size),
            f"insufficient data: {distinct} distinct concurrencies with throughput > 0, need >= {MIN_POINTS}",
        )

    order = np.argsort(n, kind="stable")
    n, x = n[order], x[order]
    lam0 = float(x[0] / n[0])
    # Linearisation at lambda0; sigma, kappa >= 0 by NNLS.
    a = np.column_stack([n - 1.0, n * (n - 1.0)])
    b = n * lam0 / x - 1.0
    (sigma0, kappa0), _ = nnls(a, b)
    sigma0 = float(min(max(sigma0, 0.0), 0.99))
    kappa0 = float(max(kappa0, 0.0))

    scale = float(np.max(x))

    def residuals(p: NDArray[np.float64]) -> NDArray[np.float64]:
        out: NDArray[np.float64] = (_usl(n, p[0], p[1], p[2]) - x) / scale
        return out

    lo = np.array([1e-12 * lam0, 0.0, 0.0])
    hi = np.array([np.inf, 1.0, np.inf])
    start = np.clip(np.array([lam0, sigma0, kappa0]), lo, [np.inf, 1.0, np.inf])
    try:
        res = least_squares(
            residuals, start, bounds=(lo, hi), x_scale="jac", method="trf", max_nfev=2000, xtol=1e-10, ftol=1e-10
        )
    except (ValueError, FloatingPointError) as exc:
        return insufficient(int(n.size), f"fit failed: {exc}")
    lam, sigma, kappa = (float(v) for v in res.x)
    n_max = float(n[-1])
    if kappa * n_max * (n_max - 1.0) < _KAPPA_NEGLIGIBLE * (1.0 + sigma * (n_max - 1.0)):
        kappa = 0.0

    pred = _usl(n, lam, sigma, kappa)
    ss_res = float(np.sum((x - pred) ** 2))
    ss_tot = float(np.sum((x - np.mean(x)) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)

    if kappa > 0 and sigma < 1:
        peak_n = math.sqrt((1.0 - sigma) / kappa)
        peak_x = float(_usl(np.array([peak_n]), lam, sigma, kappa)[0])
    else:
        peak_n = math.inf
        peak_x = lam / sigma if sigma > 0 else math.inf
    return USLFit(True, lam, sigma, kappa, peak_n, peak_x, r2, int(n.size))
