"""The ``loadgen`` command's subcommands, each run from its parsed flags, and ``main``.

Subcommands import what they need when they run: ``ramp`` and ``demo`` import Locust (and with it
gevent's monkey-patching) first thing; ``report``, ``sim`` and ``scenario`` never touch gevent.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from loadgen.cli.codes import (
    EXIT_INTERRUPTED,
    EXIT_NOT_READY,
    EXIT_OK,
    EXIT_RUN_DIR,
    EXIT_THRESHOLDS,
    EXIT_USAGE,
    UsageError,
)
from loadgen.cli.parser import build_parser
from loadgen.cli.ramp_options import DEMO_BODY, ramp_options
from loadgen.rundir.layout import output_folder
from loadgen.spec import flags
from loadgen.spec.options import OptionError


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


def cmd_ramp(ns: argparse.Namespace, argv: list[str]) -> int:
    opts = ramp_options(ns, argv)
    output_folder(opts.out)  # writable before anything starts (exit 4 otherwise)
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
    _check_priorities(opts)
    try:
        run_dir = ramp.run_ramp(opts)
    except ramp.WorkersMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_NOT_READY
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


def _check_priorities(opts: Any) -> None:
    """Tenants with priorities against a server that reads no body ``priority`` (its OpenAPI
    document has none, or it is known to have none): the test could not show what it is asked to,
    so it is refused before it starts, in one line (exit 2)."""
    from loadgen.lifecycle import priority_unread
    from loadgen.spec.calls import CALLS

    if opts.workload:
        from loadgen.workload.wfile import read_header

        header = read_header(opts.workload)
        tenants = [(str(t.get("name")), t.get("priority")) for t in header.tenants]
        endpoint = header.endpoint
    elif opts.scenario:
        from loadgen.workload.scenario import load_scenario

        scenario = load_scenario(opts.scenario)
        tenants = [(t.name, t.priority) for t in scenario.tenants]
        endpoint = scenario.endpoint
    else:
        return
    given = [f"{name} {priority}" for name, priority in tenants if priority is not None]
    if not given:
        return
    why = priority_unread(opts.url, CALLS[endpoint].path, opts.api_key)
    if why:
        raise UsageError(
            f"tenants with priorities ({', '.join(given)}) are sent as the request body's priority field, and "
            f"the server at {opts.url} does not read it: {why}. Their priorities would change nothing; drop "
            "them, or test a server that schedules by them (vLLM --scheduling-policy priority, SGLang "
            "--enable-priority-scheduling)"
        )


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
            opts = ramp_options(ns, argv)
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
        summary = rebuild(
            run_dir, flags.parse_value(flags.BY_DEST["slo"], ns.slo, "--slo"), call_type=ns.call_type, fail_on=fail_on
        )
    except CallTypeError as exc:
        raise UsageError(f"--call-type {ns.call_type}: {exc}") from None
    code = _judged(summary, ns.junit)
    print(f"report: {run_dir / 'report.md'}")
    print(run_dir)
    return code


def cmd_predict(ns: argparse.Namespace, argv: list[str]) -> int:
    from loadgen.predict.deploy import main as predict_main

    return predict_main(ns.predict_args)


def cmd_fleet(ns: argparse.Namespace, argv: list[str]) -> int:
    from loadgen.fleet.cli import main as fleet_main

    return fleet_main(ns.fleet_args)


def cmd_router(ns: argparse.Namespace, argv: list[str]) -> int:
    from loadgen.fleet.proxy import main as router_main

    return router_main(ns.router_args)


def cmd_sim(ns: argparse.Namespace, argv: list[str]) -> int:
    from loadgen.sim.cli import main as sim_main

    return sim_main(ns.sim_args)


def cmd_scenario(ns: argparse.Namespace, argv: list[str]) -> int:
    from loadgen.workload.cli import check_main, show_main

    if ns.action == "check":
        return check_main(ns.file)
    return show_main(ns.file, ns.n)


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
    slo = flags.parse_value(flags.BY_DEST["slo"], ns.slo, "--slo")
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


def cmd_calibrate(ns: argparse.Namespace, argv: list[str]) -> int:
    from loadgen.twin.cli import calibrate_main

    return calibrate_main(ns.twin_args)


def cmd_twin(ns: argparse.Namespace, argv: list[str]) -> int:
    from loadgen.twin.cli import twin_main

    return twin_main(ns.twin_args)


def cmd_workload(ns: argparse.Namespace, argv: list[str]) -> int:
    from loadgen.cli.workload_cmd import main as workload_main

    return workload_main(ns.workload_args)


def cmd_worker(ns: argparse.Namespace, argv: list[str]) -> int:
    from loadgen.run.worker import main as worker_main  # imports locust and gevent

    return worker_main(ns.worker_args)


# each subcommand's function, by the name its parser sets in ``command``
COMMANDS: dict[str, Callable[[argparse.Namespace, list[str]], int]] = {
    "demo": cmd_demo,
    "ramp": cmd_ramp,
    "report": cmd_report,
    "predict": cmd_predict,
    "fleet": cmd_fleet,
    "router": cmd_router,
    "sim": cmd_sim,
    "plan": cmd_plan,
    "compare": cmd_compare,
    "scenario": cmd_scenario,
    "ui": cmd_ui,
    "campaign": cmd_campaign,
    "monitor": cmd_monitor,
    "worker": cmd_worker,
    "workload": cmd_workload,
    "calibrate": cmd_calibrate,
    "twin": cmd_twin,
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv and argv[0] == "sim":
        return cmd_sim(argparse.Namespace(sim_args=argv[1:]), argv)
    if argv and argv[0] == "predict":
        return cmd_predict(argparse.Namespace(predict_args=argv[1:]), argv)
    if argv and argv[0] == "router":
        return cmd_router(argparse.Namespace(router_args=argv[1:]), argv)
    if argv and argv[0] == "fleet":
        return cmd_fleet(argparse.Namespace(fleet_args=argv[1:]), argv)
    if argv and argv[0] == "campaign":
        return cmd_campaign(argparse.Namespace(campaign_args=argv[1:]), argv)
    if argv and argv[0] == "monitor":
        return cmd_monitor(argparse.Namespace(monitor_args=argv[1:]), argv)
    if argv and argv[0] == "worker":
        return cmd_worker(argparse.Namespace(worker_args=argv[1:]), argv)
    if argv and argv[0] == "workload":
        return cmd_workload(argparse.Namespace(workload_args=argv[1:]), argv)
    if argv and argv[0] == "ui":
        return cmd_ui(argparse.Namespace(ui_args=argv[1:]), argv)
    if argv and argv[0] in ("calibrate", "twin"):
        return (cmd_calibrate if argv[0] == "calibrate" else cmd_twin)(argparse.Namespace(twin_args=argv[1:]), argv)
    ns = parser.parse_args(argv)
    try:
        return COMMANDS[ns.command](ns, argv)
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
