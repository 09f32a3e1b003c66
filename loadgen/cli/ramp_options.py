"""``loadgen ramp``'s and ``loadgen demo``'s options: the flags from the one table, read back into
the frozen ``RampOptions`` with the scenario's values where the flags leave them out."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from loadgen.cli.codes import UsageError
from loadgen.spec import flags
from loadgen.spec.options import RampOptions, parse_host_port

if TYPE_CHECKING:
    from loadgen.workload.scenario import Scenario

# ramp defaults when neither a flag nor a scenario says otherwise (the flag table's)
RAMP_DEFAULTS: dict[str, Any] = {dest: flags.BY_DEST[dest].default for dest in flags.SCENARIO_SETS}

# loadgen demo: the story's benchmark (docs/simulator.md, Calibration) on the default 60-token
# prompts, 512 output tokens forced with ignore_eos, in about two minutes. A C=128 request lasts
# ~14 s, so each step warms up 8 s and measures 16 s: long enough that the requests in the window
# finish at spread-out times (their prefills count, as in a long benchmark) and C=128 lands within
# ~2 % of the seed's 4,723 tok/s on the virtual clock. No C=32 step: the seed has no figure there.
# max_tokens is the ramp's 512, left unset so that a --scenario's output lengths may set it.
DEMO_DEFAULTS: dict[str, Any] = {
    "concurrency": [1, 8, 64, 128],
    "step_seconds": 16.0,
    "warmup_seconds": 8.0,
}

DEMO_PROFILE = "b300x8-kimi-k2.6-ddtree"

# request body fields the demo adds unless --extra-body sets them (the story forced 512 tokens)
DEMO_BODY: dict[str, Any] = {"ignore_eos": True}


def add_ramp_flags(p: argparse.ArgumentParser, demo: bool = False) -> None:
    """``loadgen ramp``'s options, from the one flag table, in its groups; the demo starts its own
    server, so it has a --profile, no --url and no telemetry sources of its own."""
    if demo:
        groups = flags.add_arguments(p, "ramp", skip=("url", "model"), defaults=DEMO_DEFAULTS)
        groups[flags.TARGET].add_argument(
            "--profile",
            default=DEMO_PROFILE,
            metavar="NAME",
            help=f"the simulated server's profile (loadgen sim --list-profiles; default: {DEMO_PROFILE})",
        )
        return
    groups = flags.add_arguments(p, "ramp")
    from loadgen.telemetry.options import add_source_args

    add_source_args(groups[flags.TELEMETRY])


def ramp_options(ns: argparse.Namespace, argv: list[str]) -> RampOptions:
    """The options of ``loadgen ramp`` (and ``loadgen demo``) from its parsed flags, each value read
    and bounded by the flag table, the scenario's values where the flags leave them out; a
    UsageError (or the table's OptionError) names the flag and what to do."""
    from loadgen.spec.options import Timeouts, parse_request_id_header

    raw = flags.raw_values(ns, "ramp")

    def value(dest: str) -> Any:
        f = flags.BY_DEST[dest]
        return flags.parse_value(f, raw.get(dest), f.flag("ramp"))

    _check_transport(raw.get("transport"))
    _check_workload(ns)
    scenario = _scenario(ns.scenario)
    if ns.rate and ns.concurrency:
        raise UsageError("--rate and --concurrency: give one (open loop or closed loop), not both")
    load = _load_values(value, scenario, open_loop=bool(ns.rate))
    _check_repeat(ns.repeat, ns.find_knee)
    burstiness = value("burstiness")
    _check_combination(ns, value, burstiness)
    gate = scenario.gate if scenario is not None else None
    # the flags' thresholds, read by the table; else the scenario's, read with the scenario
    fail_on = value("fail_on") or (gate.fail_on if gate else None)
    abort_on = value("abort_on") or (gate.abort_on if gate else None)
    if scenario is not None and (ns.max_tokens is not None or ns.extra_body):
        raise UsageError(
            "--max-tokens / --extra-body with --scenario: set output lengths and body fields in the scenario file"
        )
    return RampOptions(
        url=ns.url,
        model=value("model") or (scenario.model if scenario is not None and scenario.model else ""),
        **load,
        rates=value("rates"),
        arrival=value("arrival"),
        burstiness=burstiness,
        scenario=value("scenario"),
        workload=value("workload"),
        context_tokens=value("context_tokens"),
        endpoint=raw["endpoint"],
        stream=not ns.no_stream,
        extra_body=value("extra_body") or {},
        tenants=value("tenants") or (),
        label=value("label"),
        out=raw["out"],
        transport=raw["transport"],
        api_key=value("api_key") or os.environ.get("OPENAI_API_KEY") or None,
        timeouts=Timeouts(connect_s=ns.connect_timeout, stall_s=ns.stall_timeout, request_s=ns.request_timeout),
        request_id_header=parse_request_id_header(raw.get("request_id_header")),
        seed=ns.seed,
        drain_seconds=value("drain_seconds"),
        telemetry=None if ns.no_telemetry else telemetry_options(ns),
        slo=value("slo"),
        on_server_down=ns.on_server_down,
        server_status=value("server_status"),
        workers=ns.workers,
        master=ns.master,
        master_bind=value("master_bind"),
        expect_workers=value("expect_workers"),
        worker_wait_s=value("worker_wait_s"),
        on_worker_loss=value("on_worker_loss"),
        prometheus_port=ns.prometheus_port,
        tokenizer=value("tokenizer"),
        wait_ready_s=ns.wait_ready,
        fail_on=fail_on,
        abort_on=abort_on,
        junit=value("junit"),
        call_type=value("call_type"),
        gpu_count=value("gpu_count"),
        repeat=ns.repeat,
        find_knee=ns.find_knee,
        search_max_steps=ns.max_steps,
        search_max_seconds=ns.max_seconds,
        search_factor=ns.factor,
        search_max_load=ns.max_load,
        argv=_redact(argv),
    )


# what a workload file holds itself: its requests and its steps (workload.replay)
_WORKLOAD_SETS = (
    ("scenario", "--scenario"),
    ("tenant", "--tenant"),
    ("concurrency", "--concurrency"),
    ("rate", "--rate"),
    ("context_tokens", "--context-tokens"),
    ("max_tokens", "--max-tokens"),
    ("extra_body", "--extra-body"),
    ("arrival", "--arrival"),
    ("step_seconds", "--step-seconds"),
    ("warmup_seconds", "--warmup-seconds"),
    ("requests_per_step", "--requests-per-step"),
    ("find_knee", "--find-knee"),
    ("workers", "--workers"),
    ("master", "--master"),
)


def _check_workload(ns: argparse.Namespace) -> None:
    """``--workload FILE`` holds the requests and the steps: the flags that would set them again are
    refused, naming them; so are the distributed and searching runs it cannot run yet."""
    if not getattr(ns, "workload", None):
        return
    from loadgen.workload.wfile import WorkloadFileError, read_header

    try:
        read_header(ns.workload)  # another schema or version: one line, before anything starts
    except WorkloadFileError as exc:
        raise UsageError(f"--workload {exc}") from None
    given = [flag for attr, flag in _WORKLOAD_SETS if getattr(ns, attr, None)]
    if getattr(ns, "repeat", 1) > 1:
        given.append("--repeat")
    if given:
        raise UsageError(
            f"--workload {ns.workload} and {', '.join(given)}: the workload file holds the requests and the "
            "steps (export it again with those options: loadgen workload export ...); a file replays in one "
            "process, without --workers/--master/--find-knee"
        )


def _check_combination(ns: argparse.Namespace, value: Callable[[str], Any], burstiness: float | None) -> None:
    """The rules between options (the table's), and the master's address when it listens."""
    flags.check_combination(
        {
            "burstiness": burstiness,
            "arrival": value("arrival"),
            "master": ns.master,
            "expect_workers": value("expect_workers"),
            "workers": ns.workers,
        },
        "ramp",
    )
    if ns.master:
        parse_host_port(value("master_bind"), "--master-bind")


def _check_transport(transport: str | None) -> None:
    if transport == "openai":
        import importlib.util

        if importlib.util.find_spec("openai") is None:
            raise UsageError(
                "--transport openai needs the openai package, an optional extra: "
                "pip install 'llm-loadgen[openai]' (or use --transport fast)"
            )


def _scenario(path: str | None) -> Scenario | None:
    if not path:
        return None
    from loadgen.workload.scenario import ScenarioError, load_scenario

    try:
        return load_scenario(path)
    except ScenarioError as exc:
        raise UsageError(str(exc)) from None


def _load_values(value: Callable[[str], Any], scenario: Scenario | None, *, open_loop: bool) -> dict[str, Any]:
    """The steps' shape: the flags', else the scenario's ``[load]`` (and its output lengths), else
    the ramp's defaults (``RAMP_DEFAULTS``). Each value's bound was checked as it was read."""
    load = scenario.load if scenario is not None else None
    step_seconds = value("step_seconds")
    if step_seconds is None:
        step_seconds = load.step_seconds if load is not None else RAMP_DEFAULTS["step_seconds"]
    warmup = value("warmup_seconds")
    if warmup is None:
        warmup = load.warmup_seconds if load is not None else RAMP_DEFAULTS["warmup_seconds"]
    requests = value("requests_per_step")
    if requests is None and load is not None and load.requests_per_step:
        requests = load.requests_per_step
    max_tokens = value("max_tokens")
    concurrency = value("concurrency")
    if concurrency is None and scenario is None and not open_loop:
        concurrency = list(RAMP_DEFAULTS["concurrency"])
    return {
        "concurrency": concurrency,
        "step_seconds": step_seconds,
        "warmup_seconds": warmup,
        "requests_per_step": requests,
        "max_tokens": max_tokens if max_tokens is not None else RAMP_DEFAULTS["max_tokens"],
    }


def _check_repeat(repeat: int, find_knee: bool) -> None:
    if repeat < 1:
        raise UsageError(f"--repeat {repeat}: must be 1 or more")
    if repeat > 1 and find_knee:
        raise UsageError("--repeat with --find-knee: the search chooses its steps one at a time; repeat a fixed list")


def telemetry_options(ns: argparse.Namespace) -> Any:
    from loadgen.telemetry import TelemetryOptions

    if not hasattr(ns, "gpu_source"):  # the demo sets its sources itself
        return TelemetryOptions(gpu_source="none")
    return TelemetryOptions.from_args(ns)


def _redact(argv: list[str]) -> list[str]:
    out: list[str] = []
    hide = False
    for a in argv:
        if hide:
            out.append("***")
            hide = False
        elif a == "--api-key":
            out.append(a)
            hide = True
        elif a.startswith("--api-key="):
            out.append("--api-key=***")
        else:
            out.append(a)
    return out
