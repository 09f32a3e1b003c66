"""Tenants: each one's figures per step, its SLO, fairness across them, and the tenant the knee is about.

A run whose records carry a ``tenant`` (a scenario's ``[[tenants]]``; workload.tenants) gets, per
step, over the step's steady window as every step figure:

- ``tenants``: per tenant, ``demand`` (its users, or requests/s, in the step's plan), the figures
  of ``by_call`` (requests ok/failed, errors, TTFT, ITL, TPOT, E2E, output and prompt tok/s: the
  same function computes both), ``token_share`` (its share of the step's output tok/s), and, when
  it has an SLO (``slo`` in the manifest's tenants), ``goodput`` (requests that met every limit:
  ``met``, ``frac``, ``req_s``, as the run's goodput counts them) and ``slo_breaks``: each limit whose
  step figure the tenant's requests exceed (``ttft_p99 2.41 s > 2 s``), empty when it held; a
  tenant with demand and no successful request sent in the window broke its SLO (starved).
- ``fairness``: Jain's index, (Σx)² / (n·Σx²), over the tenants that had demand, of x = goodput
  requests/s per unit of demand (per user, or per request/s asked for): 1 when every tenant got the
  same service for what it asked, 1/n when one got everything.

And per run, ``tenant_knee`` when a tenant's SLO breaks as the load grows: the first step (in load
order) where one does, the last step before it where all held (the knee's load), which tenant broke
which limit, and the tenants whose output still grew at that step ("knee: C=96, tenant chat breaks
ttft_p99 2.4 s > 2 s at C=128 while batch still gains (+310 tok/s)"). The pipeline makes it the run's knee.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from loadgen.analysis.calltypes import subset_stats
from loadgen.analysis.contracts import StepSummary, TenantKnee, TenantStats
from loadgen.analysis.goodput import met_limits, slo_limits
from loadgen.analysis.knee.curve import fmt_load
from loadgen.analysis.load import Run
from loadgen.analysis.steps import NS_PER_S, StepAnalysis, steady_windows
from loadgen.analysis.values import number


def tenant_slos(manifest: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Each tenant's SLO as the manifest has it (``tenants``: their describe()), parsed."""
    from loadgen.spec.gates import parse_slo

    out: dict[str, dict[str, float]] = {}
    for t in manifest.get("tenants") or []:
        if isinstance(t, dict) and t.get("name") and t.get("slo"):
            out[str(t["name"])] = parse_slo(str(t["slo"]))
    return out


def add_tenants(run: Run, steps: list[StepSummary]) -> None:
    """Per step ``tenants`` and ``fairness`` (see the module doc); nothing for a run without tenants."""
    a = StepAnalysis(run)
    req = a.req
    names = [n for n in req.tenant.names if n]
    if not names:
        return
    slos = tenant_slos(run.manifest)
    masks = {n: req.tenant.codes == req.tenant.code_of(n) for n in names}
    for row, step, rows in steady_windows(a, steps):
        lo, hi = step.steady_ns, step.end_ns
        window_s = (hi - lo) / NS_PER_S
        demand = step.fields.get("tenants") or {}
        per: dict[str, TenantStats] = {}
        for name in sorted(names, key=lambda n: list(demand).index(n) if n in demand else len(demand)):
            stats = cast(TenantStats, subset_stats(a, masks[name], rows, lo, hi, False))
            stats["demand"] = demand.get(name)
            slo = slos.get(name)
            if slo:
                mine = rows[masks[name][rows]]
                ok = mine[a.ok[mine]]
                met, missed = met_limits(a, ok, slo_limits(slo))
                n_met = int(met.sum())
                stats["slo"] = slo
                stats["goodput"] = {
                    "requests": len(ok),
                    "met": n_met,
                    "frac": n_met / len(ok) if len(ok) else None,
                    "req_s": n_met / window_s if window_s > 0 else None,
                    "missed_by_limit": missed,
                }
                stats["slo_breaks"] = _breaks(stats, slo)
            per[name] = stats
        total = sum(float(s.get("output_tok_s") or 0.0) for s in per.values())
        for stats in per.values():
            stats["token_share"] = float(stats.get("output_tok_s") or 0.0) / total if total > 0 else None
        row["tenants"] = per
        row["fairness"] = _jain(per, window_s)


def _breaks(stats: TenantStats, slo: dict[str, float]) -> list[str]:
    """The limits the tenant's step figures broke; a tenant that asked for load and got no request
    through in the window broke them all (it was starved: nothing to vouch for)."""
    if not stats.get("requests_ok"):  # nothing asked: nothing to judge
        return ["no successful request in the steady window"] if stats.get("demand") else []
    out = []
    for key, limit in slo.items():
        metric, _, stat = key.removesuffix("_ms").partition("_")
        value = cast(dict[str, Any], stats).get(f"{metric}_ms", {}).get(stat)
        if value is None:
            out.append(f"{metric}_{stat} not measured")
            continue
        if value > limit:
            out.append(f"{metric}_{stat} {_ms(value)} > {_ms(limit)}")
    return out


def _ms(v: float) -> str:
    return f"{v / 1000:.3g} s" if v >= 1000 else f"{v:.3g} ms"


def _jain(per: dict[str, TenantStats], window_s: float) -> float | None:
    xs = []
    for s in per.values():
        demand = s.get("demand")
        if not demand:
            continue
        good = s["goodput"]["req_s"] if "goodput" in s else None
        if good is None:
            good = s.get("requests_ok", 0) / window_s if window_s > 0 else None
        if good is None:
            continue
        xs.append(float(good) / float(demand))
    if len(xs) < 2 or sum(x * x for x in xs) == 0:
        return None
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def tenant_knee(steps: Sequence[StepSummary], axis: str) -> TenantKnee | None:
    """The first step, in load order, where a tenant's SLO breaks, and the knee before it (see the
    module doc); None when every tenant held (or no tenant has an SLO)."""
    judged = [s for s in steps if s.get("tenants") and s.get(axis) is not None]
    judged.sort(key=lambda s: number(s.get(axis)) or 0.0)
    last_good: StepSummary | None = None
    for s in judged:
        per = s["tenants"]
        broke = [(n, t["slo_breaks"]) for n, t in per.items() if t.get("slo_breaks")]
        if not broke:
            last_good = s
            continue
        name, why = broke[0]
        gaining = []
        if last_good is not None:
            before = last_good["tenants"]
            for other, t in per.items():
                now = t.get("output_tok_s")
                then = before[other].get("output_tok_s") if other in before else None
                if other != name and now and now > (then or 0.0):
                    gaining.append(f"{other} still gains (+{now - (then or 0.0):,.0f} tok/s)")
        knee_load = number(last_good.get(axis)) if last_good is not None else None
        if knee_load is not None and knee_load.is_integer() and axis == "concurrency":
            knee_load = int(knee_load)
        at = float(number(s.get(axis)) or 0.0)
        load_txt = fmt_load(at, axis)
        reason = f"tenant {name} breaks {', '.join(why)} at {load_txt}"
        if gaining:
            reason += " while " + " and ".join(gaining)
        if knee_load is None:
            reason += "; no step held every tenant's SLO"
        return {
            "axis": axis,
            "knee": knee_load,
            "at": at,
            "tenant": name,
            "breaks": why,
            "step": s["step"],
            "reason": reason,
        }
    return None
