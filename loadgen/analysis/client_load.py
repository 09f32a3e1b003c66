"""Per-step load of the load generator itself (from ``client-*.jsonl``) and the "load generator
bound" verdict: a step where a process used more than ``CPU_BOUND_FRAC`` of a core on average, or
whose event loop woke up more than ``LAG_BOUND_MS`` late in at least one sample in ten (p90), measured
the client as much as the server. Such a step is INVALID; the fix is more worker processes.

The lag test uses the 90th percentile, not the maximum: one late wake-up (a collection pause, a
neighbour taking the core for a moment) delays a few timestamps; a saturated loop is late all the
time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from loadgen.analysis.load import Run
from loadgen.records import read_jsonl

CPU_BOUND_FRAC = 0.9
SCHEDULE_LAG_MS = 10.0  # open loop: mean delay of actual behind intended send times
LAG_BOUND_MS = 20.0


def client_load_enricher(run: Run, steps: list[dict[str, Any]]) -> None:
    """Add ``client_cpu`` {mean, max} (share of one core, per process), ``loop_lag_ms`` {p50, p90,
    p99, max}, ``client_bound`` and, when bound, mark the step invalid."""
    for step in steps:
        lag_ms = (step.get("schedule_lag_ms") or {}).get("mean")
        if step.get("rate") is not None and lag_ms is not None and lag_ms > SCHEDULE_LAG_MS:
            _invalid(
                step,
                f"load generator lagging: requests left {lag_ms:.0f} ms after their scheduled time on "
                "average (add worker processes)",
            )
    rows: list[dict[str, Any]] = []
    for f in sorted(run.path.glob("client-*.jsonl")):
        rows += read_jsonl(f)
    if not rows:
        return
    t = np.array([r["t_ns"] for r in rows], dtype=np.int64)
    cpu = np.array([r.get("cpu_frac") or 0.0 for r in rows])
    lag = np.array([r.get("loop_lag_ms") or 0.0 for r in rows])
    workers = np.array([str(r.get("worker", "")) for r in rows])
    for step in steps:
        lo, hi = step.get("steady_ns"), step.get("end_ns")
        if lo is None or hi is None:
            continue
        sel = (t >= lo) & (t <= hi)
        if not sel.any():
            continue
        per_worker = [float(cpu[sel & (workers == w)].mean()) for w in np.unique(workers[sel])]
        step["client_cpu"] = {"mean": max(per_worker), "max": float(cpu[sel].max())}
        step["loop_lag_ms"] = {
            "p50": float(np.percentile(lag[sel], 50)),
            "p90": float(np.percentile(lag[sel], 90)),
            "p99": float(np.percentile(lag[sel], 99)),
            "max": float(lag[sel].max()),
        }
        why = []
        if max(per_worker) > CPU_BOUND_FRAC:
            why.append(f"client CPU {max(per_worker):.0%} of a core")
        if step["loop_lag_ms"]["p90"] > LAG_BOUND_MS:
            why.append(f"event-loop lag p90 {step['loop_lag_ms']['p90']:.0f} ms")
        step["client_bound"] = bool(why)
        if why:
            _invalid(step, "load generator bound (" + ", ".join(why) + "): add worker processes (--workers N)")


def _invalid(step: dict[str, Any], reason: str) -> None:
    step["valid"] = False
    prev = step.get("invalid_reason")
    step["invalid_reason"] = f"{prev}; {reason}" if prev else reason
