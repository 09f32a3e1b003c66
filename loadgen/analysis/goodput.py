"""Goodput measured from the request records: which requests met every SLO limit.

A step's goodput counts its requests the way its latency statistics do (sent inside the steady
window; successful ones), and checks each request against every limit with that request's own
figure of the metric:

- ``ttft_*``: its TTFT (intended send to first output); ``e2e_*``: its E2E; ``tpot_*``: its TPOT
  ((E2E - TTFT) / (output tokens - 1));
- ``itl_*``: its own inter-chunk gaps: ``_mean`` their mean, ``_pNN`` their NN-th percentile
  (numpy's linear interpolation, as everywhere), so ``itl_p99=40ms`` asks each request's p99 gap to
  stay within 40 ms.

The stat suffix of a limit says which figure of the *request* is checked for ITL only; for TTFT,
TPOT and E2E a request has one value. A request without the figure (no output chunk for TTFT,
one output token for TPOT, fewer than two chunks for ITL) cannot be judged on it and does not
meet it: goodput never counts a request it cannot vouch for.

Per step (``step["goodput"]``): ``requests`` (successful, in the window), ``met`` (met every
limit), ``frac`` = met / requests, ``req_s`` = met / window, ``tok_s`` = the step's aggregate
output tok/s x the met requests' share of the output tokens, and ``missed_by_limit`` (how many
missed each limit; a request may miss several). ``step["goodput_frac"]`` is what
:func:`loadgen.analysis.plan.capacity_plan` reads ("goodput fraction measured per request").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from loadgen.analysis.contracts import GoodputStats, StepSummary
from loadgen.analysis.load import Run
from loadgen.analysis.steps import NS_PER_MS, NS_PER_S, PERCENTILE_METHOD, StepAnalysis, steady_windows

_METRICS = ("ttft", "itl", "tpot", "e2e")


def _split(key: str) -> tuple[str, str]:
    """``ttft_p99_ms`` -> (``ttft``, ``p99``)."""
    name = key[:-3] if key.endswith("_ms") else key
    metric, _, stat = name.partition("_")
    if metric not in _METRICS or not stat:
        raise ValueError(f"SLO key {key!r}: expected <ttft|itl|tpot|e2e>_<mean|p50|p90|p99>_ms")
    return metric, stat


def _itl_figure(gaps_ns: np.ndarray, stat: str) -> float:
    if stat == "mean":
        return float(gaps_ns.mean())
    return float(np.percentile(gaps_ns, float(stat[1:]), method=PERCENTILE_METHOD))


def add_goodput(run: Run, steps: Sequence[StepSummary], slo: Mapping[str, float]) -> None:
    """Set ``goodput`` and ``goodput_frac`` on every step with a steady window (see the module doc)."""
    if not slo or not steps:
        return
    limits = slo_limits(slo)
    a = StepAnalysis(run)
    for row, step, rows in steady_windows(a, list(steps)):
        lo, hi = step.steady_ns, step.end_ns
        ok = rows[a.ok[rows]]
        n = len(ok)
        met, missed = met_limits(a, ok, limits)
        n_met = int(met.sum())
        window_s = (hi - lo) / NS_PER_S
        out = a.out_eff[ok]
        out_all = float(out.sum())
        share = float(out[met].sum()) / out_all if out_all > 0 else (1.0 if n_met == n and n else 0.0)
        tok_s = row.get("output_tok_s")
        stats: GoodputStats = {
            "requests": n,
            "met": n_met,
            "frac": n_met / n if n else None,
            "req_s": n_met / window_s if window_s > 0 else None,
            "tok_s": float(tok_s) * share if tok_s is not None else None,
            "missed_by_limit": missed,
        }
        row["goodput"] = stats
        if n:
            row["goodput_frac"] = n_met / n


def slo_limits(slo: Mapping[str, float]) -> list[tuple[str, str, str, float]]:
    """(key, metric, stat, limit ms) of each SLO limit."""
    return [(key, *_split(key), float(limit)) for key, limit in slo.items()]


def met_limits(
    a: StepAnalysis, ok: np.ndarray, limits: list[tuple[str, str, str, float]]
) -> tuple[np.ndarray, dict[str, int]]:
    """Which of the successful requests ``ok`` met every limit, and how many missed each."""
    req = a.req
    n = len(ok)
    met = np.ones(n, dtype=bool)
    missed: dict[str, int] = {}
    intended = req.intended_ns[ok]
    first = req.first_chunk_ns[ok]
    end = req.end_ns[ok]
    out = a.out_eff[ok]
    has_first = first >= 0
    for key, metric, stat, limit_ms in limits:
        limit_ns = limit_ms * NS_PER_MS
        if metric == "ttft":
            good = has_first & ((first - intended) <= limit_ns)
        elif metric == "e2e":
            good = (end - intended) <= limit_ns
        elif metric == "tpot":
            judged = has_first & (out > 1)
            tpot = np.where(judged, (end - first) / np.maximum(out - 1, 1), np.inf)
            good = judged & (tpot <= limit_ns)
        else:
            good = np.zeros(n, dtype=bool)
            for i, r in enumerate(ok.tolist()):
                offs, _ = req.chunks_of(r)
                if len(offs) >= 2:
                    good[i] = _itl_figure(np.diff(offs), stat) <= limit_ns
        missed[key] = int((~good).sum())
        met &= good
    return met, missed
