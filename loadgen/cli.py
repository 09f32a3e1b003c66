"""The ``loadgen`` command.

Subcommands import what they need when they run: ``ramp`` and ``demo`` import Locust (and with it
gevent's monkey-patching) first thing; ``report``, ``sim`` and ``scenario`` never touch gevent.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from loadgen.spec import flags
from loadgen.spec.options import OptionError, RampOptions

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_NOT_READY = 3
EXIT_RUN_DIR = 4
EXIT_THRESHOLDS = 5  # a --fail-on / --abort-on threshold was breached (the run and its report are complete)
EXIT_INTERRUPTED = 130  # SIGINT or SIGTERM; the partial report is written


class UsageError(OptionError):
    """Bad command-line input; the message names the flag, the value and what to do."""


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


def _add_ramp_flags(p: argparse.ArgumentParser, demo: bool = False) -> None:
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


def _ramp_options(ns: argparse.Namespace, argv: list[str]) -> RampOptions:
    from loadgen.spec.options import Timeouts, parse_request_id_header

    raw = flags.raw_values(ns, "ramp")

    def value(dest: str) -> Any:
        f = flags.BY_DEST[dest]
        return flags.parse_value(f, raw.get(dest), f.flag("ramp"))

    if raw.get("transport") == "openai":
        import importlib.util

        if importlib.util.find_spec("openai") is None:
            raise UsageError(
                "--transport openai needs the openai package, an optional extra: "
                "pip install 'llm-loadgen[openai]' (or use --transport fast)"
            )
    scenario = None
    if ns.scenario:
        from loadgen.workload.scenario import ScenarioError, load_scenario

        try:
            scenario = load_scenario(ns.scenario)
        except ScenarioError as exc:
            raise UsageError(str(exc)) from None
    if ns.rate and ns.concurrency:
        raise UsageError("--rate and --concurrency: give one (open loop or closed loop), not both")
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
    max_tokens = max_tokens if max_tokens is not None else RAMP_DEFAULTS["max_tokens"]
    concurrency = value("concurrency")
    if concurrency is None and scenario is None and not ns.rate:
        concurrency = list(RAMP_DEFAULTS["concurrency"])
    # each value's bound was checked as it was read (flags.parse_value: the table's ``bound``)
    if ns.repeat < 1:
        raise UsageError(f"--repeat {ns.repeat}: must be 1 or more")
    if ns.repeat > 1 and ns.find_knee:
        raise UsageError("--repeat with --find-knee: the search chooses its steps one at a time; repeat a fixed list")
    burstiness = value("burstiness")
    flags.check_combination({"burstiness": burstiness, "arrival": value("arrival")}, "ramp")
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
        concurrency=concurrency,
        rates=value("rates"),
        arrival=value("arrival"),
        burstiness=burstiness,
        scenario=value("scenario"),
        step_seconds=step_seconds,
        warmup_seconds=warmup,
        requests_per_step=requests,
        max_tokens=max_tokens,
        context_tokens=value("context_tokens"),
        endpoint=raw["endpoint"],
        stream=not ns.no_stream,
        extra_body=value("extra_body") or {},
        label=value("label"),
        out=raw["out"],
        transport=raw["transport"],
        api_key=value("api_key") or os.environ.get("OPENAI_API_KEY") or None,
        timeouts=Timeouts(connect_s=ns.connect_timeout, stall_s=ns.stall_timeout, request_s=ns.request_timeout),
        request_id_header=parse_request_id_header(raw.get("request_id_header")),
        seed=ns.seed,
        drain_seconds=value("drain_seconds"),
        telemetry=None if ns.no_telemetry else _telemetry_options(ns),
        slo=_slo(ns.slo),
        on_server_down=ns.on_server_down,
        server_status=value("server_status"),
        workers=ns.workers,
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


def _judged(summary: Any, junit: str | None) -> int:
    """After a run or a rebuild: print the thresholds' verdict, write ``--junit`` and the GitHub
    step summary; EXIT_THRESHOLDS when a threshold was breached, else EXIT_OK."""
    from loadgen.analysis.thresholds import verdict_lines
    from loadgen.report.ci import write_ci_outputs

    verdict = summary.get("thresholds")
    if verdict:
        print("\n".join(verdict_lines(verdict)), file=sys.stderr)
    try:
        for path in write_ci_outputs(summary, junit):
            print(f"wrote {path}", file=sys.stderr)
    except OSError as exc:
        from loadgen.rundir.records import RunDirError

        raise RunDirError(f"cannot write the CI outputs ({junit or '$GITHUB_STEP_SUMMARY'}): {exc}") from exc
    return EXIT_THRESHOLDS if verdict and verdict.get("verdict") == "fail" else EXIT_OK


def _read_summary(run_dir: Path) -> Any:
    return orjson.loads((run_dir / "summary.json").read_bytes())


def _telemetry_options(ns: argparse.Namespace) -> Any:
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


def _check_out(out: str) -> None:
    """The run directory's parent must be writable before anything starts (exit 4 otherwise)."""
    from loadgen.rundir.records import RunDirError

    folder = Path(out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(
            f"cannot create the output folder {folder}: {exc.strerror}. Pass --out with a writable folder."
        ) from exc
    if not os.access(folder, os.W_OK | os.X_OK):
        raise RunDirError(f"cannot write in {folder}: permission denied. Pass --out with a writable folder.")


def cmd_ramp(ns: argparse.Namespace, argv: list[str]) -> int:
    opts = _ramp_options(ns, argv)
    _check_out(opts.out)
    from loadgen.lifecycle import NotReady, first_model, readiness_gate
    from loadgen.run import ramp  # imports locust first
    from loadgen.rundir.layout import create_run_dir, write_manifest
    from loadgen.spec.options import run_manifest

    def not_ready_dir() -> Path:  # called only when the server is not ready
        run_dir = create_run_dir(opts.out, opts.label)
        write_manifest(run_dir, run_manifest("ramp", run_dir.name, opts, outcome="server_not_ready"))
        return run_dir

    try:
        readiness_gate(
            opts.url,
            ns.wait_ready,
            api_key=opts.api_key,
            status_cmd=ns.server_status,
            log_cmd=ns.server_logs,
            log_file=ns.server_log_file,
            run_dir=not_ready_dir,
            out=sys.stderr,
        )
    except NotReady as exc:
        print(f"error: server not ready: {exc}", file=sys.stderr)
        return EXIT_NOT_READY
    except ValueError as exc:  # a status or log command that cannot be split or run
        raise UsageError(str(exc)) from None
    if opts.telemetry is not None and not opts.telemetry.metrics_url:
        from loadgen.lifecycle import probe_metrics

        opts = replace(opts, telemetry=replace(opts.telemetry, metrics_url=probe_metrics(opts.url, opts.api_key)))
    if not opts.model:
        opts = replace(opts, model=first_model(opts.url, opts.api_key) or "")
        if not opts.model:
            raise UsageError("--model not given and the server's /v1/models lists none; pass --model NAME")
    try:
        run_dir = ramp.run_ramp(opts)
    except ramp.RunStopped as exc:
        print(f"error: {exc}\npartial report: {exc.run_dir / 'report.md'}", file=sys.stderr)
        print(exc.run_dir)
        return EXIT_USAGE
    except (ramp.RunInterrupted, ramp.RunWriteStopped) as exc:
        return _stopped_early(exc)
    code = _judged(_read_summary(run_dir), opts.junit)
    print(f"report: {run_dir / 'report.md'}")
    print(run_dir)
    return code


def _stopped_early(exc: Any) -> int:
    """A ramp stopped by a signal (130) or a run directory it could no longer write (4): say so,
    print the run directory last (for scripts)."""
    from loadgen.run import ramp

    run_dir: Path = exc.run_dir
    if isinstance(exc, ramp.RunWriteStopped):
        print(f"error: {exc}", file=sys.stderr)
        print(run_dir)
        return EXIT_RUN_DIR
    print(f"{exc}; partial report: {run_dir / 'report.md'}", file=sys.stderr)
    print(f"report: {run_dir / 'report.md'}")
    print(run_dir)
    return EXIT_INTERRUPTED


def cmd_demo(ns: argparse.Namespace, argv: list[str]) -> int:
    """Start the built-in simulator, ramp it, write the report, stop the simulator."""
    from loadgen.lifecycle import NotReady, wait_ready
    from loadgen.run import ramp  # imports locust first

    with tempfile.TemporaryDirectory(prefix="loadgen-demo-") as tmp:
        port_file = Path(tmp) / "port"
        sim_log = Path(tmp) / "sim.log"
        cmd = [
            sys.executable,
            "-m",
            "loadgen.sim",
            "--profile",
            ns.profile,
            "--port",
            "0",
            "--port-file",
            str(port_file),
            "--log-file",
            str(sim_log),
        ]
        print(f"starting the simulated server: {' '.join(cmd[2:])}", file=sys.stderr)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while not port_file.exists() or not port_file.read_text().strip():
                if proc.poll() is not None:
                    err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
                    print(f"error: the simulator exited with {proc.returncode}:\n{err}", file=sys.stderr)
                    return EXIT_NOT_READY
                if time.monotonic() > deadline:
                    print("error: the simulator did not open its port within 60 s", file=sys.stderr)
                    return EXIT_NOT_READY
                time.sleep(0.05)
            url = f"http://127.0.0.1:{int(port_file.read_text().strip())}"

            def alive() -> str | None:
                return None if proc.poll() is None else f"the simulator exited with {proc.returncode}"

            try:
                wait_ready(url, 120, alive=alive)
            except NotReady as exc:
                print(f"error: {exc}", file=sys.stderr)
                return EXIT_NOT_READY
            ns.url = url
            ns.model = None
            opts = _ramp_options(ns, argv)
            from loadgen.lifecycle import first_model

            opts = replace(
                opts,
                extra_body=opts.extra_body if opts.scenario else {**DEMO_BODY, **opts.extra_body},
                model=first_model(url) or "demo",
                label=ns.label or f"demo {ns.profile}",
            )
            if opts.telemetry is not None:  # the simulator's own sources
                sources = replace(
                    opts.telemetry,
                    gpu_source=f"{url}/gpu/metrics",
                    gpu_hz=5.0,
                    metrics_url=f"{url}/metrics",
                    server_log_file=str(sim_log),
                    log_from_start=True,
                )
                opts = replace(opts, telemetry=sources)
            try:
                run_dir = ramp.run_ramp(opts)
            except (ramp.RunInterrupted, ramp.RunWriteStopped) as exc:
                return _stopped_early(exc)
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    code = _judged(_read_summary(run_dir), opts.junit)
    print(f"report: {run_dir / 'report.md'}")
    print(run_dir)
    return code


def cmd_report(ns: argparse.Namespace, argv: list[str]) -> int:
    from loadgen.analysis.calltypes import CallTypeError
    from loadgen.report.pipeline import rebuild

    run_dir = _existing_run_dir(ns.run_dir)
    fail_on = flags.parse_value(flags.BY_DEST["fail_on"], ns.fail_on, "--fail-on")
    try:
        summary = rebuild(run_dir, _slo(ns.slo), call_type=ns.call_type, fail_on=fail_on)
    except CallTypeError as exc:
        raise UsageError(f"--call-type {ns.call_type}: {exc}") from None
    code = _judged(summary, ns.junit)
    print(f"report: {run_dir / 'report.md'}")
    print(run_dir)
    return code


def cmd_predict(ns: argparse.Namespace, argv: list[str]) -> int:
    from loadgen.predict.deploy import main as predict_main

    return predict_main(ns.predict_args)


def cmd_sim(ns: argparse.Namespace, argv: list[str]) -> int:
    from loadgen.sim.cli import main as sim_main

    return sim_main(ns.sim_args)


def cmd_scenario(ns: argparse.Namespace, argv: list[str]) -> int:
    from loadgen.workload.cli import check_main, show_main

    if ns.action == "check":
        return check_main(ns.file)
    return show_main(ns.file, ns.n)


def _slo(text: str | None) -> dict[str, float] | None:
    if not text:
        return None
    from loadgen.spec.gates import SLOError, parse_slo

    try:
        return parse_slo(text)
    except SLOError as exc:
        raise UsageError(f"--slo {text!r}: {exc}") from None


def _existing_run_dir(text: str) -> Path:
    run_dir = Path(text)
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: no such run directory")
    if not (run_dir / "steps.jsonl").exists() and not any(run_dir.glob("requests*.jsonl")):
        raise UsageError(f"{run_dir}: not a run directory (no steps.jsonl, no requests*.jsonl)")
    return run_dir


def cmd_plan(ns: argparse.Namespace, argv: list[str]) -> int:
    from loadgen.report.pipeline import write_plan
    from loadgen.report.sections import render_plan_md

    run_dir = _existing_run_dir(ns.run_dir)
    slo = _slo(ns.slo)
    if ns.target_rps is not None and ns.target_users is not None:
        raise UsageError("--target-rps and --target-users: give one")
    request = {
        "slo": slo,
        "target_rps": ns.target_rps,
        "target_users": ns.target_users,
        "headroom": ns.headroom,
        "gpus_per_replica": ns.gpus_per_replica,
        "gpu_hour_cost": ns.gpu_hour_cost,
        "context_tokens": ns.context_tokens,
    }
    try:
        plan = write_plan(run_dir, request)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(render_plan_md(plan))
    print(f"plan: {run_dir / 'plan.json'}")
    print(run_dir)
    return EXIT_OK


def cmd_compare(ns: argparse.Namespace, argv: list[str]) -> int:
    from loadgen.report.compare import write_comparison

    if len(ns.run_dirs) < 2:
        raise UsageError("loadgen compare needs two run directories or more")
    out, md = write_comparison([_existing_run_dir(d) for d in ns.run_dirs], ns.out)
    print(md)
    print(out)
    return EXIT_OK


def cmd_ui(ns: argparse.Namespace, argv: list[str]) -> int:
    from loadgen.webui.cli import main as ui_main

    return ui_main(ns.ui_args)


def cmd_campaign(ns: argparse.Namespace, argv: list[str]) -> int:
    from loadgen.campaign import main as campaign_main

    return campaign_main(ns.campaign_args)


def cmd_monitor(ns: argparse.Namespace, argv: list[str]) -> int:
    from loadgen.telemetry.monitor import main as monitor_main

    return monitor_main(ns.monitor_args)


# What each subcommand's --help says above and below its options. Examples use loopback addresses
# and this repository's files; tests/unit/test_help.py parses every one of them with its parser.
HELP = argparse.RawDescriptionHelpFormatter
_RUN_DIR = "reports/20260501-120000-run"  # a run directory, named as loadgen ramp names them
DESCRIPTION = """\
A load generator for OpenAI-compatible LLM servers (SGLang, vLLM, llama.cpp,
...), built on Locust: it ramps the load step by step, measures every request
and the server's and GPUs' telemetry, and writes a run directory with a report.
`loadgen COMMAND --help` tells more of each command, with examples."""
EPILOG = """\
examples:
  loadgen demo                                  # a whole run, simulated server
  loadgen ramp --url http://127.0.0.1:30000     # ramp a server, write a report
  loadgen ui --url http://127.0.0.1:30000       # web UI, http://127.0.0.1:8089
  loadgen sim --port 30000                      # a simulated server to try"""
RAMP_DESCRIPTION = """\
Ramp the load on an OpenAI-compatible server step by step, to find where it
saturates (the knee). Closed loop (--concurrency, the default): each step holds
that many users, each sending its next request when its last one finished.
Open loop (--rate): requests arrive at that rate, whatever the server does.
Each step warms up, then measures its window: TTFT, inter-token latency,
throughput, errors, the server's and the GPUs' telemetry. All of it goes to a
new run directory under --out (report.md, summary.json, steps.csv, the raw
records), whose path is the last line printed.

exit status: 0 done; 2 bad usage, or the run stopped early; 3 server not
ready; 4 run directory not writable; 5 a --fail-on/--abort-on threshold
breached; 130 interrupted (the partial report is written)."""
RAMP_EPILOG = """\
examples:
  # the default ramp: 1, 8, 32, 64, 128 users, 30-s steps, 512 output tokens
  loadgen ramp --url http://127.0.0.1:30000
  # a quick look: three short steps of short answers
  loadgen ramp --url http://127.0.0.1:30000 --concurrency 1,8,32 \\
      --step-seconds 10 --max-tokens 128
  # open loop: 1, 2, 4 and 8 requests/s, arriving as a Poisson process
  loadgen ramp --url http://127.0.0.1:30000 --rate 1,2,4,8
  # a described workload against an SLO; exit 5 on a breach (for CI)
  loadgen ramp --url http://127.0.0.1:30000 --scenario scenarios/chat.toml \\
      --slo ttft_p99=2s,tpot_p99=50ms --fail-on 'ttft_p99>2s,error_rate>1%'
  # search for the knee from 4 users (doubling, then bisecting), 15 min at most
  loadgen ramp --url http://127.0.0.1:30000 --find-knee --concurrency 4 \\
      --max-seconds 900"""
DEMO_DESCRIPTION = """\
Start the built-in simulated server (SGLang-like, with a calibrated model of
its GPUs: no GPU needed), ramp it as loadgen ramp would with the demo's
shorter steps, write the report and stop the server: about two minutes with
the defaults. Takes loadgen ramp's options but --url, --model and the
telemetry sources: those are the simulator's. The run directory's path is
the last line printed."""
DEMO_EPILOG = """\
examples:
  loadgen demo
  # under a minute: two short steps
  loadgen demo --concurrency 1,8 --step-seconds 5 --warmup-seconds 2
  # one H200 serving Llama-3.1-8B (loadgen sim --list-profiles lists them)
  loadgen demo --profile h200-llama-8b --concurrency 1,16,64,256
  # a described workload with an SLO, reports under /tmp
  loadgen demo --scenario scenarios/chat.toml --slo ttft_p99=2s \\
      --out /tmp/loadgen-demo"""
REPORT_DESCRIPTION = """\
Rebuild summary.json, steps.csv and report.md of a run directory from its raw
records: after an upgrade, or to judge the run against another SLO or other
thresholds. RUN_DIR is the path loadgen ramp printed last. Exit status 5 when
a threshold is breached, as loadgen ramp's; 2 when RUN_DIR is no run."""
REPORT_EPILOG = f"""\
examples:
  loadgen report {_RUN_DIR}
  loadgen report {_RUN_DIR} --slo ttft_p99=2s,tpot_p99=50ms
  loadgen report {_RUN_DIR} --fail-on 'ttft_p99>2s' \\
      --junit thresholds.xml"""
PLAN_DESCRIPTION = """\
Plan capacity from a run: the highest load one replica carries within the
SLO, less the headroom; the replicas (and GPUs) a target load needs; the
energy per token and, given a GPU-hour price, the cost per million tokens.
Prints the plan and writes plan.json into the run directory."""
PLAN_EPILOG = f"""\
examples:
  loadgen plan {_RUN_DIR} --slo ttft_p99=2s,tpot_p99=50ms
  loadgen plan {_RUN_DIR} --slo ttft_p99=2s --target-rps 50 \\
      --gpu-hour-cost 2.5
  loadgen plan {_RUN_DIR} --slo e2e_p90=20s \\
      --target-users 400 --gpus-per-replica 4"""
COMPARE_DESCRIPTION = """\
Put two runs or more side by side, step by step (the same load and context
length), with each figure's ratio to the first run's. Writes compare.md,
compare.html and compare.json into a new directory under --out, prints the
Markdown, then that directory."""
COMPARE_EPILOG = """\
examples:
  loadgen compare reports/20260501-120000-before reports/20260501-130000-after
  # three runs, each against the first
  loadgen compare reports/20260501-120000-tp8 reports/20260501-130000-tp4 \\
      reports/20260501-140000-tp2
  loadgen compare reports/20260501-120000-sglang \\
      reports/20260501-130000-vllm --out /tmp/comparisons"""
SCENARIO_DESCRIPTION = """\
Check a scenario file (a described workload: prompts, lengths, load pattern;
docs/scenarios.md) and say what is wrong where, or draw requests from it as a
run would and show them, with their lengths' statistics. Exit status 0 when
the file is usable, 2 when not."""
SCENARIO_EPILOG = """\
examples:
  loadgen scenario check scenarios/chat.toml
  loadgen scenario show scenarios/chat.toml -n 50
  loadgen scenario show scenarios/agentic-multi-turn.toml"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loadgen", description=DESCRIPTION, epilog=EPILOG, formatter_class=HELP)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "demo",
        help="ramp the built-in simulated server and write a report",
        usage="%(prog)s [--profile NAME] [options]",
        description=DEMO_DESCRIPTION,
        epilog=DEMO_EPILOG,
        formatter_class=HELP,
    )
    _add_ramp_flags(p, demo=True)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser(
        "ramp",
        help="escalating-concurrency ramp against a server",
        usage="%(prog)s --url URL [options]",
        description=RAMP_DESCRIPTION,
        epilog=RAMP_EPILOG,
        formatter_class=HELP,
    )
    _add_ramp_flags(p)
    p.set_defaults(func=cmd_ramp)

    p = sub.add_parser(
        "report",
        help="rebuild summary.json, steps.csv and report.md from a run directory",
        description=REPORT_DESCRIPTION,
        epilog=REPORT_EPILOG,
        formatter_class=HELP,
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory")
    p.add_argument(
        "--slo",
        metavar="LIMITS",
        help="judge the knee against these limits, e.g. ttft_p99=2s,tpot_p99=50ms (default: the run's own)",
    )
    p.add_argument(
        "--call-type",
        metavar="TYPE",
        help="the call type the knee verdict and plan are about, when the run mixes several "
        "(default: the run's own choice, else the one that served the most tokens)",
    )
    p.add_argument(
        "--fail-on",
        metavar="THRESHOLDS",
        help="re-judge the run against these thresholds (loadgen ramp's syntax; replaces the run's own "
        "--fail-on/--abort-on); exit 5 when one is breached (default: the run's own)",
    )
    p.add_argument(
        "--junit",
        metavar="FILE",
        help="write the thresholds' results as JUnit XML to this file (default: none, not written)",
    )
    p.set_defaults(func=cmd_report)

    p = sub.add_parser(
        "predict",
        help="the ramp a deployment would give, on the simulator's virtual clock (loadgen predict --help)",
        add_help=False,
    )
    p.add_argument("predict_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("sim", help="the simulated server on its own (loadgen sim --help)", add_help=False)
    p.add_argument("sim_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_sim)

    p = sub.add_parser(
        "plan",
        help="capacity plan from a run: load per replica at an SLO, replicas, energy, cost",
        description=PLAN_DESCRIPTION,
        epilog=PLAN_EPILOG,
        formatter_class=HELP,
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory")
    p.add_argument(
        "--slo",
        metavar="LIMITS",
        required=True,
        help="limits, e.g. ttft_p99=2s,tpot_p99=50ms,e2e_p90=20s (required, no default)",
    )
    p.add_argument(
        "--target-rps",
        metavar="RPS",
        type=float,
        help="requests/s the service must carry (default: none; give it or --target-users for a replica count)",
    )
    p.add_argument(
        "--target-users", metavar="USERS", type=float, help="concurrent users the service must carry (default: none)"
    )
    p.add_argument(
        "--headroom",
        metavar="FRACTION",
        type=float,
        default=0.2,
        help="spare capacity per replica (default: 0.2, plan at 80%%)",
    )
    p.add_argument(
        "--gpus-per-replica", metavar="N", type=int, default=8, help="GPUs each replica runs on (default: 8)"
    )
    p.add_argument(
        "--gpu-hour-cost",
        metavar="PRICE",
        type=float,
        help="price of one GPU-hour, for cost per million tokens (default: none, no cost)",
    )
    p.add_argument(
        "--context-tokens",
        metavar="TOKENS",
        type=int,
        help="plan for this context length of a matrix run (default: the largest the run measured)",
    )
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser(
        "compare",
        help="runs side by side with ratios per step (Markdown and HTML)",
        description=COMPARE_DESCRIPTION,
        epilog=COMPARE_EPILOG,
        formatter_class=HELP,
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories, the first one the baseline")
    p.add_argument(
        "--out", metavar="DIR", default="reports", help="folder for the comparison's directory (default: reports)"
    )
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser(
        "scenario",
        help="validate a scenario file, or draw requests from it and show them",
        description=SCENARIO_DESCRIPTION,
        epilog=SCENARIO_EPILOG,
        formatter_class=HELP,
    )
    p.add_argument("action", choices=["check", "show"], help="check: validate the file; show: draw requests too")
    p.add_argument("file", metavar="FILE", help="a scenario file (TOML)")
    p.add_argument("-n", type=int, default=20, help="requests to draw (show; default: 20)")
    p.set_defaults(func=cmd_scenario)

    p = sub.add_parser("ui", help="Locust's web UI with the live LLM tab (loadgen ui --help)", add_help=False)
    p.add_argument("ui_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_ui)

    p = sub.add_parser(
        "campaign", help="the same ramp against several server configurations (loadgen campaign --help)", add_help=False
    )
    p.add_argument("campaign_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_campaign)

    p = sub.add_parser("monitor", help="the telemetry side process on its own (loadgen monitor --help)", add_help=False)
    p.add_argument("monitor_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_monitor)

    p = sub.add_parser(
        "calibrate",
        help="fit a simulator profile (a twin) to what a run observed (loadgen calibrate --help)",
        add_help=False,
    )
    p.add_argument("twin_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser(
        "twin",
        help="calibrate a twin, replay the ramp against it, compare; what-ifs (loadgen twin --help)",
        add_help=False,
    )
    p.add_argument("twin_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_twin)
    return parser


def cmd_calibrate(ns: argparse.Namespace, argv: list[str]) -> int:
    from loadgen.twin.cli import calibrate_main

    return calibrate_main(ns.twin_args)


def cmd_twin(ns: argparse.Namespace, argv: list[str]) -> int:
    from loadgen.twin.cli import twin_main

    return twin_main(ns.twin_args)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv and argv[0] == "sim":
        return cmd_sim(argparse.Namespace(sim_args=argv[1:]), argv)
    if argv and argv[0] == "predict":
        return cmd_predict(argparse.Namespace(predict_args=argv[1:]), argv)
    if argv and argv[0] == "campaign":
        return cmd_campaign(argparse.Namespace(campaign_args=argv[1:]), argv)
    if argv and argv[0] == "monitor":
        return cmd_monitor(argparse.Namespace(monitor_args=argv[1:]), argv)
    if argv and argv[0] == "ui":
        return cmd_ui(argparse.Namespace(ui_args=argv[1:]), argv)
    if argv and argv[0] in ("calibrate", "twin"):
        return (cmd_calibrate if argv[0] == "calibrate" else cmd_twin)(argparse.Namespace(twin_args=argv[1:]), argv)
    ns = parser.parse_args(argv)
    try:
        code: int = ns.func(ns, argv)
        return code
    except OptionError as exc:  # UsageError, and what the shared option parsers raise
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        from loadgen.rundir.records import RunDirError

        if isinstance(exc, RunDirError):
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_RUN_DIR
        raise


if __name__ == "__main__":
    sys.exit(main())
