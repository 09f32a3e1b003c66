"""From a run directory to its summary: the one place that decides what a summary contains.

``summarise(run_dir)`` loads the records (``analysis.load``), builds the per-step statistics with
the telemetry, the load generator's own load and the server-down joins (``analysis.summary``),
then adds what the run was asked to be judged by: the SLO and its goodput, the repeats' intervals,
the knee verdict, the ``--fail-on``/``--abort-on`` verdict, the plan of ``loadgen plan``. Everything
that shows a run's figures (the report, the live page, the ramp's own search and abort guard,
campaigns, the twin) reads them from here, so a summary rebuilt after a crash is the one the run
would have written. Writing the outputs is the report's (``report.pipeline.rebuild``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, cast

import orjson

from loadgen.analysis.calltypes import knee_steps
from loadgen.analysis.client_load import client_load_enricher
from loadgen.analysis.contracts import CapacityPlan, RunEvent, RunSummary
from loadgen.analysis.goodput import add_goodput
from loadgen.analysis.knee import knee_verdict
from loadgen.analysis.load import Run, load_run
from loadgen.analysis.plan import capacity_plan
from loadgen.analysis.repeats import add_repeats, merged_steps
from loadgen.analysis.server_down import server_down_enricher
from loadgen.analysis.summary import build_summary, manifest_value
from loadgen.analysis.telemetry import telemetry_enricher
from loadgen.analysis.tenants import add_tenants, tenant_knee
from loadgen.analysis.thresholds import judge
from loadgen.analysis.worker_loss import worker_loss_enricher
from loadgen.rundir.layout import read_manifest
from loadgen.spec.gates import Thresholds


def summarise(
    run_dir: str | os.PathLike[str],
    slo: dict[str, float] | None = None,
    *,
    call_type: str | None = None,
    fail_on: Thresholds | None = None,
) -> tuple[Run, RunSummary]:
    """Load and summarise ``run_dir``; ``slo`` (or the manifest's) feeds the knee verdict.

    ``call_type`` (``--call-type``): the call type the knee and the plan are about when the run
    mixes several (default: the manifest's ``call_type``, else the one that served the most tokens;
    ``analysis.calltypes``). Raises CallTypeError when the run has no such call type.

    ``fail_on`` (``loadgen report --fail-on``): judge these thresholds instead of the run's own
    ``--fail-on``/``--abort-on`` (kept in its manifest); ``summary["thresholds"]`` holds the verdict.
    """
    run = load_run(Path(run_dir))
    enrichers = [telemetry_enricher, client_load_enricher, server_down_enricher, worker_loss_enricher, add_tenants]
    summary = build_summary(run, enrichers, call_type=call_type)
    predicted = predicted_mark(run.manifest)
    if predicted:
        summary["predicted"] = predicted
    if slo is None:
        slo = read_manifest(Path(run_dir)).get("slo") or None
    if slo:
        summary["slo"] = dict(slo)
        add_goodput(run, summary["steps"], slo)
    # with --repeat: intervals over the repeats, and the knee judged on one point per load
    judged_steps = add_repeats(cast(dict[str, Any], summary), knee_steps(summary), slo)
    summary["knee"] = knee_verdict(judged_steps, slo)
    by_tenant = tenant_knee(summary["steps"], summary["knee"]["axis"])
    if by_tenant is not None:  # with tenants, the first tenant whose SLO breaks is the knee's reason
        summary["tenant_knee"] = by_tenant
        knee = by_tenant["knee"]
        closed = by_tenant["axis"] == "concurrency"
        summary["knee"] = {
            **summary["knee"],
            "knee": knee,
            "concurrency": knee if closed else None,
            "rate": None if closed else knee,
            "rule": "tenant SLO",
            "reason": by_tenant["reason"],
        }
    summary["run_events"] = [cast(RunEvent, e) for e in run.events if e.get("src") == "loadgen"]
    if fail_on is not None:  # a re-judgement: these thresholds only, not how the ramp ended
        judged = judge(summary, fail_on, None, ())
    else:
        m = run.manifest
        judged = judge(summary, manifest_value(m, "fail_on"), manifest_value(m, "abort_on"), summary["run_events"])
    if judged is not None:
        summary["thresholds"] = cast(dict[str, Any], judged)
    plan_request = Path(run_dir) / PLAN_FILE
    if plan_request.exists():
        summary["plan"] = make_plan(summary, orjson.loads(plan_request.read_bytes()).get("request", {}))
    return run, summary


PLAN_FILE = "plan.json"


def predicted_mark(manifest: dict[str, Any]) -> str | None:
    """The line every report and plan of a twin's replay carries (manifest ``twin``, written by
    ``loadgen twin``): whose twin, and the what-if; None for a measured run."""
    twin = manifest.get("twin")
    if not isinstance(twin, dict) or not twin.get("predicted"):
        return None
    source = twin.get("source_run_id") or Path(str(twin.get("source_run") or "?")).name
    changes = [f"{k}={v}" for k, v in (twin.get("overrides") or {}).items()]
    for key, name in (("concurrency", "concurrency"), ("context_tokens", "context tokens")):
        if isinstance(twin.get(key), list) and twin[key]:
            changes.append(f"{name} {','.join(str(v) for v in twin[key])}")
    if twin.get("max_tokens") is not None:
        changes.append(f"max_tokens {twin['max_tokens']}")
    what_if = f" (what-if: {'; '.join(changes)})" if changes else ""
    return f"Predicted by the twin of {source}{what_if}, not measured."


def make_plan(summary: RunSummary, request: dict[str, Any]) -> CapacityPlan:
    """``capacity_plan`` over the summary's steps; ``request`` holds the ``loadgen plan`` options."""
    steps = knee_steps(summary)
    if summary.get("repeats"):
        steps = merged_steps(steps, summary["repeats"]["groups"])
    plan = capacity_plan(
        steps,
        request["slo"],
        target_rps=request.get("target_rps"),
        target_users=request.get("target_users"),
        headroom=request.get("headroom", 0.2),
        gpus_per_replica=request.get("gpus_per_replica", 8),
        gpu_hour_cost=request.get("gpu_hour_cost"),
        context_tokens=request.get("context_tokens"),
    )
    if summary.get("predicted"):
        plan["predicted"] = summary["predicted"]
    return plan


__all__ = ["PLAN_FILE", "make_plan", "predicted_mark", "summarise"]
