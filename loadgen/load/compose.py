"""The composition root: one place that turns a run's options into the objects a load-generating
process runs with.

``loadgen ramp`` (``ramp.run_ramp``), the web UI's runs (``locustfile``), the distributed workers
(``distributed.WorkerLink``) and, through ``loadgen ramp``, campaigns all call ``compose``: the
workload (the scenario's, or chat prompts from the flags), the step plan, the run directory and
its manifest, the target, the per-process ``RunState`` and the output-token counter are built here
and nowhere else. Locust's Environment is wired to the state by ``runtime.bind``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadgen.load.runtime import RunState, TargetOptions
from loadgen.rundir.layout import create_run_dir, write_manifest
from loadgen.spec.calls import OPENAI_SDK
from loadgen.spec.options import (
    DEFAULT_CONTEXT_TOKENS,
    OptionError,
    RampOptions,
    StepPlan,
    build_ramp_plan,
    run_manifest,
    with_scenario_contexts,
)
from loadgen.workload import Workload
from loadgen.workload.errors import TableError
from loadgen.workload.replay import FileWorkload
from loadgen.workload.scenario import Scenario, load_scenario
from loadgen.workload.tenants import parse_tenants
from loadgen.workload.tokens import TokenCounter, load_counter
from loadgen.workload.wfile import WorkloadFileError


@dataclass(slots=True)
class ComposedRun:
    """What one process runs with: its options, the workload it was built from, its steps (empty
    when Locust's own user count drives the load, and on a worker, which follows the master's),
    its run directory and its state."""

    opts: RampOptions
    base: Workload
    plan: list[StepPlan]
    run_dir: Path
    state: RunState


def base_workload(opts: RampOptions) -> Workload:
    """The scenario's workload, or chat prompts of a fixed length built from the ramp's flags; with
    ``--tokenizer``, prompts are cut to exact lengths by it (else by the scenario's, or the ratio the
    workload learns from the server's usage)."""
    if opts.workload:
        try:
            return FileWorkload.open(opts.workload)  # its bodies are sent as they are: no prompt to build
        except WorkloadFileError as exc:
            raise OptionError(f"--workload {exc}") from None
    counter = load_counter(opts.tokenizer) if opts.tokenizer else None  # exact prompt lengths by it
    if opts.tenants and opts.scenario:
        raise OptionError("--tenant and --scenario: give the tenants in the scenario ([[tenants]]) or on the line")
    if opts.scenario:
        base = Workload(with_arrival(load_scenario(opts.scenario), opts), counter=counter)
    else:
        base = Workload.simple(
            context_tokens=DEFAULT_CONTEXT_TOKENS,
            max_tokens=opts.max_tokens,
            endpoint=opts.endpoint,
            extra=dict(opts.extra_body),
            seed=opts.seed,
            counter=counter,
        )
        base.scenario = with_arrival(base.scenario, opts)
        if opts.tenants:
            base.scenario = flag_tenants(base.scenario, opts)
    return base


def flag_tenants(scenario: Scenario, opts: RampOptions) -> Scenario:
    """``--tenant NAME=SCENARIO`` (repeated): tenants that split each step's ``--concurrency`` (the
    ramp's default steps when not given) or ``--rate`` evenly, as ``[[tenants]]`` with equal shares."""
    n = len(opts.tenants)
    raw = [{"name": name, "scenario": path, "share": 1.0 / n} for name, path in opts.tenants]
    try:
        tenants = parse_tenants(raw, Path.cwd())
    except TableError as exc:
        k = int(exc.key.split("]")[0].split("[")[-1]) if exc.key.startswith("tenants[") else 0
        raise OptionError(f"--tenant {'='.join(opts.tenants[k])}: {exc.problem}") from None
    load = replace(scenario.load, mode="open") if opts.rates else replace(scenario.load, mode="closed")
    return replace(scenario, name="tenants", tenants=tenants, load=load)


def with_arrival(scenario: Scenario, opts: RampOptions) -> Scenario:
    """The scenario with ``--arrival`` / ``--burstiness`` in its ``[load]`` (the flags win, as for
    every other option a scenario sets)."""
    if opts.arrival is None:
        return scenario
    burstiness = (opts.burstiness or 1.0) if opts.arrival == "gamma" else 1.0
    return replace(scenario, load=replace(scenario.load, arrival=opts.arrival, burstiness=burstiness))


def output_token_counter(base: Workload) -> TokenCounter | None:
    """The tokenizer that counts output tokens when a server sends no usage: the workload's
    (``--tokenizer``, else the scenario's); None (count chunks) when neither names one."""
    counter = base.counter
    return counter if getattr(counter, "name", "estimate") != "estimate" else None


def workload_factory(base: Workload, default_context: int | None = None) -> Callable[[StepPlan | None], Workload]:
    """The workload of a step, one per context length, built once (``default_context``: the length
    when no step plan says, as in the web UI's runs driven by Locust's user count)."""
    cache: dict[int | None, Workload] = {}

    def workload_for(plan: StepPlan | None) -> Workload:
        ctx = plan.context_tokens if plan is not None else default_context
        if ctx not in cache:
            cache[ctx] = base.for_context(ctx) if ctx else base
        return cache[ctx]

    return workload_for


def target_of(opts: RampOptions) -> TargetOptions:
    return TargetOptions(
        url=opts.url,
        model=opts.model,
        api_key=opts.api_key,
        transport=opts.transport,
        timeouts=opts.timeouts,
        stream=opts.stream,
        request_id_header=opts.request_id_header,
    )


def compose(
    opts: RampOptions,
    kind: str,
    *,
    plan: Sequence[StepPlan] | None = None,
    run_dir: Path | None = None,
    worker: str = "w0",
    records_elsewhere: bool = False,
    record_sink: Callable[[bytes], None] | None = None,
    step_log: bool = True,
    user_offset: int = 0,
    default_context: int | None = None,
    dir_label: str | None = None,
    manifest_extra: dict[str, Any] | None = None,
) -> ComposedRun:
    """Build one process's run.

    ``kind``: the manifest's (``ramp``, ``locust-ramp``, ``locust``) or ``worker``; ``plan``: the
    steps (default: from the options and the scenario, as ``loadgen ramp`` plans them); ``run_dir``:
    an existing run directory to join (a worker: no directory is created and no manifest written),
    else a new one under ``opts.out``; ``records_elsewhere``: this process sends no requests itself (a
    master: its workers write the records); ``record_sink``: where each record's line goes instead of
    the process's own requests file (a remote worker's batches to the master); ``dir_label``: the run
    directory's name when the options have no label.
    """
    base = base_workload(opts)
    distributed = opts.workers > 0 or opts.master or kind == "worker" or records_elsewhere
    if base.scenario.tenants and kind == "locust":
        raise OptionError(
            f"{base.scenario.path or '--tenant'}: tenants split each step's load among them; run it as a ramp "
            "(steps in the form), not with Locust's user count"
        )
    if base.scenario.tenants and (distributed or opts.find_knee):
        raise OptionError(
            f"{base.scenario.path or '--tenant'}: tenants run their own steps in one process for now (each "
            "step's users are split among the tenants by their rank in the process); drop "
            "--workers/--master/--find-knee"
        )
    endpoint = base.scenario.endpoint
    if opts.transport == "openai" and endpoint not in OPENAI_SDK:
        raise OptionError(
            f"--transport openai: the openai SDK has no API for the {endpoint} endpoint; use --transport fast"
        )
    replaying = isinstance(base, FileWorkload)
    if replaying and (distributed or kind == "locust" or opts.find_knee):
        raise OptionError(
            f"--workload {opts.workload}: a workload file replays its own steps in one process for now; run it "
            "with loadgen ramp, without --workers/--master/--find-knee"
        )
    if plan is None and not replaying:  # the manifest records the prompt lengths the plan steps through
        opts = with_scenario_contexts(opts, base)
    if plan is not None:
        steps = list(plan)
    else:
        steps = base.plan() if isinstance(base, FileWorkload) else build_ramp_plan(opts, base)
    if run_dir is None:
        extra = dict(manifest_extra or {})
        if isinstance(base, FileWorkload):
            extra.update(workload_manifest(base))
        run_dir = create_run_dir(opts.out, opts.label or dir_label)
        write_manifest(run_dir, run_manifest(kind, run_dir.name, opts, steps, base, **extra))
    sink = (lambda line: None) if records_elsewhere else record_sink
    state = RunState(
        run_dir,
        target_of(opts),
        workload_factory(base, default_context),
        worker=worker,
        record_sink=sink,
        step_log=step_log,
        user_offset=user_offset,
    )
    state.token_counter = output_token_counter(base)
    state.tenants = tenant_workloads(base)
    return ComposedRun(opts, base, steps, run_dir, state)


def workload_manifest(base: FileWorkload) -> dict[str, Any]:
    """What the manifest says of a replayed workload file: where, its hash, what it holds, and its
    tenants as the export's manifest would have them (their SLOs judge the replay the same way)."""
    wf = base.file
    h = wf.header
    out: dict[str, Any] = {
        "workload": {
            "path": str(wf.path.resolve()),
            "sha256": wf.sha256,
            "requests": wf.requests,
            "mode": h.mode,
            "redacted": h.redacted,
            "source": h.source,
            "created_by": h.created_by,
            "scenario": h.scenario,
        }
    }
    if h.tenants:
        out["tenants"] = h.tenants
    return out


def tenant_workloads(base: Workload) -> dict[str, Workload]:
    """The workload of each of the scenario's ``[[tenants]]``: its own scenario file's (or the
    scenario's own sections), with its body fields, priority and headers; each its own random
    streams, one length calibrator for all (they talk to one server)."""
    out: dict[str, Workload] = {}
    for t in base.scenario.tenants:
        scenario = base.scenario if t.scenario is None else load_scenario(t.scenario)
        if t.scenario is not None and scenario.tenants:
            raise OptionError(
                f"tenant {t.name}: its scenario {t.scenario} has tenants of its own; give it one workload"
            )
        out[t.name] = Workload(
            replace(scenario, tenants=()), counter=base.counter, salt=f"#{t.name}", lengths=base.lengths, tenant=t
        )
    return out
