"""Repeated steps (``--repeat N``): confidence intervals, the knee's stability, differences beyond noise.

A ramp with ``--repeat N`` runs each step N times in a row (C=1, 1, 1, 8, 8, 8, ...); each step's
``steps.jsonl`` lines carry ``repeat`` (0 .. N-1). Each step is first analysed on its own, as every
step is; the repeats of one load (same context length, concurrency or rate) then form a *group*:

- Every figure of the group (``FIGURES``: aggregate and per-request tok/s, TTFT / ITL / TPOT / E2E
  p50 and p99, goodput share when an SLO was given) is the mean over its VALID repeats with a 95 %
  confidence interval from Student's t with n - 1 degrees of freedom: mean ± t(0.975, n-1) · s/√n,
  s the repeats' sample standard deviation. The repeats are the independent samples (one figure per
  repeat), not the requests inside them: requests of one step share the server's state and are
  not independent. With one valid repeat there is no interval (``low``/``high`` None).
- The knee verdict of the run is judged on the group means (one point per load, ``merged_steps``);
  it is also judged on each repeat's steps alone, and ``knee_stability`` says how often the
  repeats agree ("C=64 in 3 of 3 repeats").
- ``ratio_ci`` compares one figure between two groups (two runs, or two loads): the ratio of the
  means with a 95 % interval by the delta method on the log ratio (Welch's degrees of freedom), so
  "speculative vs autoregressive at C=64: 2.1x, 95 % CI 2.0-2.2". A difference is *beyond the
  noise* when the interval excludes 1.

Why each step N times in a row and not the whole ramp N times: the repeats of a load then meet the
same server state (caches warm, the same neighbours) within minutes of each other, so the interval
measures the run-to-run noise at that load, not a drift of the machine over the whole run; and a
ramp cut short still has complete groups for the loads it reached.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats

from loadgen.analysis.contracts import ConfidenceInterval, RepeatGroup, StepSummary
from loadgen.analysis.values import number

LEVEL = 0.95
METHOD = "Student's t over the repeats (n - 1 degrees of freedom), 95 %"

# figure name -> how to read it from a step summary
FIGURES: dict[str, Callable[[Mapping[str, Any]], float | None]] = {
    "output_tok_s": lambda s: number(s.get("output_tok_s")),
    "per_request_tok_s": lambda s: number(s.get("per_request_tok_s")),
    "ttft_p50_ms": lambda s: number((s.get("ttft_ms") or {}).get("p50")),
    "ttft_p99_ms": lambda s: number((s.get("ttft_ms") or {}).get("p99")),
    "itl_p50_ms": lambda s: number((s.get("itl_ms") or {}).get("p50")),
    "itl_p99_ms": lambda s: number((s.get("itl_ms") or {}).get("p99")),
    "tpot_p50_ms": lambda s: number((s.get("tpot_ms") or {}).get("p50")),
    "tpot_p99_ms": lambda s: number((s.get("tpot_ms") or {}).get("p99")),
    "e2e_p50_ms": lambda s: number((s.get("e2e_ms") or {}).get("p50")),
    "e2e_p99_ms": lambda s: number((s.get("e2e_ms") or {}).get("p99")),
    "goodput_frac": lambda s: number(s.get("goodput_frac")),
}


def repeat_of(step: Mapping[str, Any]) -> int | None:
    """The step's repeat index (None: the run had no repeats)."""
    fields = step.get("step_fields") or {}
    r = fields.get("repeat") if isinstance(fields, dict) else None
    return int(r) if isinstance(r, int) and not isinstance(r, bool) else None


def has_repeats(steps: Sequence[Mapping[str, Any]]) -> bool:
    return any(repeat_of(s) is not None for s in steps)


def mean_ci(values: Sequence[float], level: float = LEVEL) -> ConfidenceInterval:
    """Mean and Student-t interval of independent samples (see the module doc)."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    n = len(x)
    if n == 0:
        return {"mean": None, "low": None, "high": None, "n": 0, "sd": None}
    mean = float(x.mean())
    if n == 1:
        return {"mean": mean, "low": None, "high": None, "n": 1, "sd": None}
    sd = float(x.std(ddof=1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n, "sd": sd}


def _key(step: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    return (step.get("context_tokens"), step.get("concurrency"), step.get("rate"))


def repeat_groups(steps: Sequence[StepSummary]) -> list[RepeatGroup]:
    """One group per load that was repeated, in the order the loads were first run."""
    order: list[tuple[Any, Any, Any]] = []
    members: dict[tuple[Any, Any, Any], list[StepSummary]] = {}
    for s in steps:
        if repeat_of(s) is None:
            continue
        k = _key(s)
        if k not in members:
            order.append(k)
            members[k] = []
        members[k].append(s)
    groups: list[RepeatGroup] = []
    for k in order:
        rows = members[k]
        valid = [s for s in rows if s.get("valid", True) is not False]
        figures = {name: mean_ci([v for s in valid if (v := read(s)) is not None]) for name, read in FIGURES.items()}
        groups.append(
            {
                "context_tokens": k[0],
                "concurrency": k[1],
                "rate": k[2],
                "steps": [int(s["step"]) for s in rows],
                "repeats": len(rows),
                "valid_repeats": len(valid),
                "figures": {n: ci for n, ci in figures.items() if ci["n"]},
            }
        )
    return groups


def merged_steps(steps: Sequence[StepSummary], groups: Sequence[RepeatGroup]) -> list[StepSummary]:
    """One step per load for the knee and the plan: the first valid repeat's row with every figure
    replaced by the group's mean (latency dicts keep their other percentiles from that row). A
    load whose repeats were all INVALID stays INVALID (the first repeat's row)."""
    by_id = {int(s["step"]): s for s in steps}
    out: list[StepSummary] = []
    for g in groups:
        rows = [by_id[i] for i in g["steps"] if i in by_id]
        valid = [s for s in rows if s.get("valid", True) is not False]
        base: dict[str, Any] = dict(valid[0] if valid else rows[0])
        if valid:
            f = g["figures"]
            for name in ("output_tok_s", "per_request_tok_s", "goodput_frac"):
                if name in f and f[name]["mean"] is not None:
                    base[name] = f[name]["mean"]
            for metric in ("ttft", "itl", "tpot", "e2e"):
                lat: dict[str, Any] = dict(base.get(f"{metric}_ms") or {})
                for p in ("p50", "p99"):
                    ci = f.get(f"{metric}_{p}_ms")
                    if ci is not None and ci["mean"] is not None:
                        lat[p] = ci["mean"]
                if lat:
                    base[f"{metric}_ms"] = lat
            base["requests_ok"] = sum(int(s.get("requests_ok") or 0) for s in valid)
            base["requests_failed"] = sum(int(s.get("requests_failed") or 0) for s in valid)
        base["repeats"] = g["repeats"]
        out.append(base)  # type: ignore[arg-type]
    plain = [s for s in steps if repeat_of(s) is None]
    return [*plain, *out] if plain else out


def steps_of_repeat(steps: Sequence[StepSummary], r: int) -> list[StepSummary]:
    return [s for s in steps if repeat_of(s) == r]


def knee_stability(per_repeat: Sequence[float | None], axis: str = "concurrency") -> dict[str, Any]:
    """How the repeats' own knee verdicts agree: the most common one and its count."""
    n = len(per_repeat)
    counts: dict[float | None, int] = {}
    for k in per_repeat:
        counts[k] = counts.get(k, 0) + 1
    top, top_n = max(counts.items(), key=lambda kv: (kv[1], -(kv[0] or 0.0)))

    def name(k: float | None) -> str:
        if k is None:
            return "no knee"
        return f"C={k:g}" if axis == "concurrency" else f"{k:g} req/s"

    others = [f"{name(k)} in {c}" for k, c in counts.items() if k != top]
    text = f"{name(top)} in {top_n} of {n} repeats" + (f" ({'; '.join(others)})" if others else "")
    return {
        "per_repeat": list(per_repeat),
        "mode": top,
        "agree": top_n,
        "repeats": n,
        "stable": top_n == n,
        "text": text,
    }


def ratio_ci(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> dict[str, Any]:
    """mean(a) / mean(b) with a delta-method interval on the log ratio (Welch's degrees of freedom);
    ``beyond_noise`` when the interval excludes 1. Needs two samples on each side for an interval."""
    xa = np.asarray(a, dtype=np.float64)
    xb = np.asarray(b, dtype=np.float64)
    if len(xa) == 0 or len(xb) == 0 or xb.mean() == 0:
        return {"ratio": None, "low": None, "high": None, "beyond_noise": None, "method": "no data"}
    ma, mb = float(xa.mean()), float(xb.mean())
    ratio = ma / mb
    if len(xa) < 2 or len(xb) < 2 or ma <= 0 or mb <= 0:
        return {"ratio": ratio, "low": None, "high": None, "beyond_noise": None, "method": "one sample: no interval"}
    va = float(xa.var(ddof=1)) / (len(xa) * ma * ma)
    vb = float(xb.var(ddof=1)) / (len(xb) * mb * mb)
    se = math.sqrt(va + vb)
    if se == 0:
        return {"ratio": ratio, "low": ratio, "high": ratio, "beyond_noise": ratio != 1.0, "method": "no spread"}
    dof = (va + vb) ** 2 / ((va * va) / (len(xa) - 1) + (vb * vb) / (len(xb) - 1))
    t = float(stats.t.ppf(0.5 + level / 2, dof))
    low, high = ratio * math.exp(-t * se), ratio * math.exp(t * se)
    return {
        "ratio": ratio,
        "low": low,
        "high": high,
        "beyond_noise": not (low <= 1.0 <= high),
        "method": f"delta method on the log ratio, Welch's t ({dof:.1f} dof), {level:.0%}",
    }


def add_repeats(
    summary: dict[str, Any], steps: Sequence[StepSummary], slo: Mapping[str, float] | None
) -> list[StepSummary]:
    """With repeated steps: ``summary["repeats"]`` (the method, every group's figures with their
    intervals, the knee verdict of each repeat and their agreement), each step row's ``ci`` (its
    group's intervals: steps.csv gets them as columns), and the merged steps the knee and the plan
    are judged on. Without repeats: nothing, and ``steps`` as they are."""
    from loadgen.analysis.knee import knee_verdict
    from loadgen.analysis.values import load_axis

    if not has_repeats(steps):
        return list(steps)
    groups = repeat_groups(steps)
    intervals = {
        step_id: {name: {"low": ci["low"], "high": ci["high"]} for name, ci in g["figures"].items()}
        for g in groups
        for step_id in g["steps"]
    }
    # the rows the knee reads and the run's own rows (they differ when ``steps`` is a call type's view)
    for row in (*steps, *summary.get("steps", [])):
        if int(row["step"]) in intervals:
            row["ci"] = intervals[int(row["step"])]
    n = max((repeat_of(s) or 0) for s in steps) + 1
    axis = load_axis(list(steps))
    per_repeat: list[float | None] = []
    for r in range(n):
        mine = steps_of_repeat(steps, r)
        if not mine:
            continue
        v = knee_verdict(mine, slo)
        per_repeat.append(v.get("rate") if axis == "rate" else v.get("concurrency"))
    summary["repeats"] = {
        "method": METHOD,
        "repeats": n,
        "groups": groups,
        "knee": knee_stability(per_repeat, axis),
    }
    return merged_steps(steps, groups)
