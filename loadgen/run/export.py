"""``loadgen workload export``'s run half: the ramp's options composed as a ramp composes them (the
workload, its steps, the tenants' workloads), every request of it written as a workload file
(``workload.export``); nothing is sent."""

from __future__ import annotations

from pathlib import Path

from loadgen.load.compose import base_workload, tenant_workloads, workload_factory
from loadgen.spec.options import RampOptions, build_ramp_plan, with_scenario_contexts
from loadgen.workload.export import ExportOptions, export_to


def export_run(opts: RampOptions, path: Path, *, per_user: int | None, redact: bool) -> tuple[int, int]:
    """Write every request of the ramp ``opts`` describes to ``path``: (requests, steps)."""
    base = base_workload(opts)
    plan = build_ramp_plan(with_scenario_contexts(opts, base), base)
    n = export_to(
        path,
        base,
        plan,
        workload_factory(base),
        tenant_workloads(base),
        ExportOptions(per_user=per_user, redact=redact, model=opts.model),
    )
    return n, len(plan)
