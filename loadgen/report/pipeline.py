"""From a run directory to every output: the one place that decides what a report contains.

``loadgen ramp``, ``loadgen demo``, ``loadgen report`` and the Locust wiring all call
``rebuild(run_dir)``, so a report rebuilt after a crash is the same report the run would have
written: per-step statistics, the telemetry join, the knee verdict (against the SLO the run was
given, kept in its manifest), the outputs.
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
from loadgen.analysis.thresholds import judge
from loadgen.report.outputs import write_run_outputs
from loadgen.report.sections import LEAD_SECTIONS, TRAILING_SECTIONS
from loadgen.rundir.layout import read_manifest


def summarise(
    run_dir: str | os.PathLike[str],
    slo: dict[str, float] | None = None,
    *,
    call_type: str | None = None,
    fail_on: str | None = None,
) -> tuple[Run, RunSummary]:
    """Load and summarise ``run_dir``; ``slo`` (or the manifest's) feeds the knee verdict.

    ``call_type`` (``--call-type``): the call type the knee and the plan are about when the run
    mixes several (default: the manifest's ``call_type``, else the one that served the most tokens;
    ``analysis.calltypes``). Raises CallTypeError when the run has no such call type.

    ``fail_on`` (``loadgen report --fail-on``): judge these thresholds instead of the run's own
    ``--fail-on``/``--abort-on`` (kept in its manifest); ``summary["thresholds"]`` holds the verdict.
    """
    run = load_run(Path(run_dir))
    summary = build_summary(run, [telemetry_enricher, client_load_enricher, server_down_enricher], call_type=call_type)
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


def write_plan(run_dir: str | os.PathLike[str], request: dict[str, Any]) -> CapacityPlan:
    """Plan ``run_dir`` with ``request``, keep both in plan.json, re-render the report with it."""
    return rebuild(run_dir, write_plan_request=request)["plan"]


def rebuild(
    run_dir: str | os.PathLike[str],
    slo: dict[str, float] | None = None,
    write_plan_request: dict[str, Any] | None = None,
    *,
    call_type: str | None = None,
    fail_on: str | None = None,
) -> RunSummary:
    """Summarise ``run_dir`` and write its outputs; return the summary.

    ``write_plan_request``: options of ``loadgen plan``; the plan is computed, stored in plan.json
    (request and result) and becomes part of every later rebuild of this run. ``call_type``,
    ``fail_on``: see :func:`summarise`.
    """
    run, summary = summarise(
        run_dir, slo if write_plan_request is None else write_plan_request["slo"], call_type=call_type, fail_on=fail_on
    )
    if write_plan_request is not None:
        summary["plan"] = make_plan(summary, write_plan_request)
        data = {"request": write_plan_request, "plan": summary["plan"]}
        (Path(run_dir) / PLAN_FILE).write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
    write_run_outputs(run, summary, TRAILING_SECTIONS, LEAD_SECTIONS)
    return summary
