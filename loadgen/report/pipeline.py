"""From a run directory to every output: the one place that decides what a report contains.

``loadgen ramp``, ``loadgen demo``, ``loadgen report`` and the Locust wiring all call
``rebuild(run_dir)``, so a report rebuilt after a crash is the same report the run would have
written: the summary (``analysis.pipeline.summarise``: per-step statistics, the telemetry join, the
knee verdict against the SLO the run was given, kept in its manifest), then the outputs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from loadgen.analysis.contracts import CapacityPlan, RunSummary
from loadgen.analysis.pipeline import PLAN_FILE, make_plan, summarise
from loadgen.report.outputs import write_run_outputs
from loadgen.report.sections import LEAD_SECTIONS, TRAILING_SECTIONS
from loadgen.spec.gates import Thresholds


def write_plan(run_dir: str | os.PathLike[str], request: dict[str, Any]) -> CapacityPlan:
    """Plan ``run_dir`` with ``request``, keep both in plan.json, re-render the report with it."""
    return rebuild(run_dir, write_plan_request=request)["plan"]


def rebuild(
    run_dir: str | os.PathLike[str],
    slo: dict[str, float] | None = None,
    write_plan_request: dict[str, Any] | None = None,
    *,
    call_type: str | None = None,
    fail_on: Thresholds | None = None,
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
