"""Per-step load of the load generator itself (from ``client-*.jsonl``) and the "load generator
bound" verdict: a step where a process used more than ``CPU_BOUND_FRAC`` of a core on average, or
whose event loop woke up more than ``LAG_BOUND_MS`` late in at least one sample in ten (p90), measured
the client as much as the server. Such a step is INVALID; the fix is more worker processes.

The lag test uses the 90th percentile, not the maximum: one late wake-up (a collection pause, a
neighbour taking the core for a moment) delays a few timestamps; a saturated loop is late all the
time. Lag percentiles come from the heartbeats' histograms (a beat every few ms; samples carry
``lag_hist``), or from the one lag of each sample in older runs.

"Timing uncertain" is a separate mark (the step stays valid): the step's latency figures cannot be
trusted to ``TIMING_TOLERANCE_NS`` when more than ``TIMING_SHARE`` of its TTFTs or of its ITL
gaps may be late by more (their chunks came merged with later ones while the loop was busy; the
records say by how much at most), or when chunks were timed at the read (no kernel receive
times) while the loop lag p99 exceeded the tolerance; nor its load, when a closed loop's users lost
more than ``USERS_LATE_SHARE`` of their time in the window to sends that went out late (the server
then had fewer requests in flight than the step's users: a load generator descheduled by a server
on the same cores). The reason names the shares, the loop lag
p99 and max and the client's CPU, so the cause is in the report.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from loadgen.analysis.contracts import ClientCpu, LoopLag, StepSummary
from loadgen.analysis.load import TIMING_TOLERANCE_NS, Run
from loadgen.analysis.steps import mark_invalid
from loadgen.analysis.values import as_dict
from loadgen.rundir.records import LAG_EDGES_MS, read_jsonl

CPU_BOUND_FRAC = 0.9
SCHEDULE_LAG_MS = 10.0  # open loop: mean delay of actual behind intended send times
LAG_BOUND_MS = 20.0
TIMING_SHARE = 0.01
USERS_LATE_SHARE = 0.05  # closed loop: the users' time lost to late sends that makes a step's load uncertain
# The CPU share per worker process that the advice aims at. Streams' chunks come in bursts (a
# server step answers every running request at once), and a process busy more than about half
# the time reads the last sockets of a burst after their next chunk came (measured: at 78 % of a
# core, 18 % of chunks against a batching server; at 70 %, 2 %). Workers = total CPU / this.
WORKER_CPU_TARGET = 0.5


def client_load_enricher(run: Run, steps: list[StepSummary], client_rows: list[dict[str, Any]] | None = None) -> None:
    """Add ``client_cpu`` {mean, max} (share of one core, per process), ``loop_lag_ms`` {p50, p90,
    p99, max}, ``client_bound`` and, when bound, mark the step invalid.

    ``client_rows``: the lines of the run's ``client-*.jsonl`` when the caller has read them
    already (the live view follows the files as they grow); else they are read here."""
    for step in steps:
        lag_ms = (step.get("schedule_lag_ms") or {}).get("mean")
        if step.get("rate") is not None and lag_ms is not None and lag_ms > SCHEDULE_LAG_MS:
            mark_invalid(
                step,
                f"load generator lagging: requests left {lag_ms:.0f} ms after their scheduled time on "
                "average (add worker processes)",
            )
    _loop_enricher(run, steps, client_rows)
    cpus = _host_cpus(run)
    for step in steps:
        _timing_verdict(step, cpus)


def _host_cpus(run: Run) -> int | None:
    host = run.manifest.get("host")
    cpus = host.get("cpus") if isinstance(host, dict) else None
    return cpus if isinstance(cpus, int) else None


def read_client_rows(run: Run) -> list[dict[str, Any]]:
    """Every line of the run's ``client-*.jsonl`` files, in file name order."""
    rows: list[dict[str, Any]] = []
    for f in sorted(run.path.glob("client-*.jsonl")):
        rows += read_jsonl(f)
    return rows


def _loop_enricher(run: Run, steps: list[StepSummary], client_rows: list[dict[str, Any]] | None = None) -> None:
    rows = read_client_rows(run) if client_rows is None else client_rows
    if not rows:
        return
    t = np.array([r["t_ns"] for r in rows], dtype=np.int64)
    cpu = np.array([r.get("cpu_frac") or 0.0 for r in rows])
    lag = np.array([r.get("loop_lag_ms") or 0.0 for r in rows])
    lag_max = np.array([r.get("lag_max_ms", r.get("loop_lag_ms")) or 0.0 for r in rows])
    hists = [r.get("lag_hist") for r in rows]
    workers = np.array([str(r.get("worker", "")) for r in rows])
    for step in steps:
        lo, hi = step.get("steady_ns"), step.get("end_ns")
        if lo is None or hi is None:
            continue
        sel = (t >= lo) & (t <= hi)
        if not sel.any():
            continue
        names = [str(w) for w in np.unique(workers[sel])]
        per_worker = [float(cpu[sel & (workers == w)].mean()) for w in names]
        step["client_cpu"] = {
            "mean": max(per_worker),
            "max": float(cpu[sel].max()),
            "total": float(sum(per_worker)),
            "processes": len(per_worker),
        }
        step["loop_lag_ms"] = _lag_stats([hists[i] for i in np.flatnonzero(sel)], lag[sel], lag_max[sel])
        why = []
        master = dict(zip(names, per_worker, strict=True)).get("master") if len(names) > 1 else None
        if master is not None and master > CPU_BOUND_FRAC:
            # the master takes every worker's records and relays the steps: more workers add to its load
            step["client_bound"] = True
            mark_invalid(
                step,
                f"load generator bound (the master's CPU {master:.0%} of a core, over {len(names) - 1} workers): "
                "it paces the steps and takes every record, so more workers cannot help; give the master a "
                "core of its own (nothing else on its machine), or split the load over several masters",
            )
            continue
        if max(per_worker) > CPU_BOUND_FRAC:
            why.append(f"client CPU {max(per_worker):.0%} of a core")
        if step["loop_lag_ms"]["p90"] > LAG_BOUND_MS:
            why.append(f"event-loop lag p90 {step['loop_lag_ms']['p90']:.0f} ms")
        step["client_bound"] = bool(why)
        if why:
            advice = _worker_advice(step, _host_cpus(run))
            mark_invalid(step, "load generator bound (" + ", ".join(why) + "): " + advice)


def _lag_stats(hists: list[Any], lag: Any, lag_max: Any) -> LoopLag:
    """p50/p90/p99 of every heartbeat's lag (bucket upper edges; the open bucket reads as the
    largest lag seen) and the max; from the samples' own lags when they carry no histogram."""
    mx = float(lag_max.max()) if len(lag_max) else 0.0
    if hists and all(type(h) is list and len(h) == len(LAG_EDGES_MS) + 1 for h in hists):
        counts = np.sum(np.array(hists, dtype=np.int64), axis=0)
        total = int(counts.sum())
        if total:
            cum = np.cumsum(counts)
            edges = [*LAG_EDGES_MS, max(mx, LAG_EDGES_MS[-1])]

            def q(p: float) -> float:
                k = int(np.searchsorted(cum, p * total, side="left"))
                return min(float(edges[min(k, len(edges) - 1)]), mx) if k else min(float(edges[0]), mx)

            return {"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": mx, "beats": total}
    return {
        "p50": float(np.percentile(lag, 50)),
        "p90": float(np.percentile(lag, 90)),
        "p99": float(np.percentile(lag, 99)),
        "max": mx,
    }


def workers_needed(client_cpu: ClientCpu) -> int | None:
    """Worker processes that would carry the step's load at ``WORKER_CPU_TARGET`` of a core each
    (at least one more than it had); None when the step has no CPU figures."""
    total = client_cpu.get("total", client_cpu.get("mean"))
    if total is None:
        return None
    have = int(client_cpu.get("processes") or 1)
    return max(have + 1, math.ceil(total / WORKER_CPU_TARGET))


def _worker_advice(step: StepSummary, cpus: int | None) -> str:
    cpu = as_dict(step.get("client_cpu"))
    need = workers_needed(cpu)
    if need is None:
        return "add worker processes (--workers N)"
    step["workers_advised"] = need
    # a saturated process used what it could, not what the load asked for: the need is a floor
    floor = (cpu.get("mean") or 0.0) > CPU_BOUND_FRAC
    text = (
        f"{'at least' if floor else 'about'} {need} worker processes (--workers {need}) would keep each under "
        f"{WORKER_CPU_TARGET:.0%} of a core (this step used {cpu.get('total', cpu.get('mean', 0)):.0%} in all)"
    )
    if cpus is not None and need > max(cpus - 1, 1):
        text += (
            f"; this machine has {cpus} CPUs: with anything else on it (a local server), run them on a "
            "larger machine or on several (loadgen worker)"
        )
    return text


def _timing_verdict(step: StepSummary, cpus: int | None = None) -> None:
    timing = step.get("timing")
    if not isinstance(timing, dict):
        return
    tol_ms = TIMING_TOLERANCE_NS / 1e6
    lag = as_dict(step.get("loop_lag_ms"))
    why = []
    ttft_share, itl_share = timing.get("ttft_late_share"), timing.get("itl_late_share")
    if ttft_share is not None and ttft_share > TIMING_SHARE:
        top = timing.get("ttft_late_max_ms")
        # the largest lateness in the precision of the tolerance: "more than 1 ms (up to 1.3 ms)", never "(up to 1 ms)"
        top_s = "?" if top is None else f"{top:.1f}" if top < 10 else f"{top:.0f}"
        why.append(f"{ttft_share:.1%} of TTFTs may be late by more than {tol_ms:g} ms (up to {top_s} ms)")
    if itl_share is not None and itl_share > TIMING_SHARE:
        why.append(f"{itl_share:.1%} of ITLs may be off by more than {tol_ms:g} ms")
    if timing.get("read_clock_requests") and lag.get("p99") is not None and lag["p99"] > tol_ms:
        why.append(f"{timing['read_clock_requests']} requests timed at the read (no kernel receive times)")
    users = timing.get("users_late_share")
    if users is not None and users > USERS_LATE_SHARE:
        why.append(
            f"the users sent {users:.1%} of their time late (up to {timing.get('users_late_max_ms') or 0:.0f} ms after "
            f"a request was due): fewer requests were in flight than the step's {step.get('concurrency')} users"
        )
    timing["uncertain"] = bool(why)
    if why:
        if lag:
            why.append(f"loop lag p99 {lag['p99']:.0f} ms, max {lag['max']:.0f} ms")
        cpu = as_dict(step.get("client_cpu")).get("mean")
        if cpu is not None:
            why.append(f"client CPU {cpu:.0%}")
        if cpu is not None and cpu <= WORKER_CPU_TARGET:
            # not this process's own load: something else on the machine held its core
            why.append(
                "the load generator was not busy: other processes on this machine delayed its reads (run it on a "
                "machine of its own, or give it a scheduling group of its own: docs/metrics-and-reports.md)"
            )
        elif cpu is not None:
            why.append(_worker_advice(step, cpus))
        timing["reason"] = "timing uncertain: " + "; ".join(why)
    else:
        timing["reason"] = None
