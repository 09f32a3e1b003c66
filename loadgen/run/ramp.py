"""Headless escalating-concurrency ramp: Locust as a library, one process, then the report.

Import this module before anything that opens sockets: it imports locust, which monkey-patches
the standard library for gevent.

Stopping early (docs/lifecycle.md): SIGINT (Ctrl-C) and SIGTERM both end the current step
``stopped``, cancel the calls in flight, write the partial report and raise :class:`RunInterrupted`
(exit 130). A SIGINT that was ignored when the process started (a background job of a script,
``nohup cmd &`` in some shells) stays ignored, as POSIX programs do: a Ctrl-C meant for the
foreground job does not stop it; SIGTERM always does. A write into the run directory that fails
(disk full, read-only) stops the ramp the same way and raises :class:`RunWriteStopped` (exit 4).
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import gevent
from locust.env import Environment

from loadgen.load.compose import compose
from loadgen.load.refusal import Refusal
from loadgen.load.runtime import RunState, bind, quiet_gc
from loadgen.load.selfwatch import SelfWatch
from loadgen.load.shape import RampShape
from loadgen.load.user import LLMUser, OpenLoopUser
from loadgen.rundir.clock import ANCHOR
from loadgen.rundir.records import JsonlAppender, RunDirError, format_bytes, free_bytes
from loadgen.spec.gates import Thresholds
from loadgen.spec.options import RampOptions, StepPlan


def _load_label(plan: StepPlan) -> str:
    if plan.rate is not None:
        return f"rate={plan.rate:g}/s"
    if plan.replay is not None:
        return f"trace x{plan.replay.time_scale:g}"
    return f"C={plan.concurrency}"


class Progress:
    """The live line: step, users, completed requests, tok/s, errors. Rewritten in place on a tty."""

    def __init__(self, state: RunState, shape: RampShape, env: Environment, out: TextIO) -> None:
        self.state, self.shape, self.env, self.out = state, shape, env, out
        self.tty = out.isatty()
        self.last_index = -1

    def line(self) -> str:
        st, shape = self.state, self.shape
        i = st.step_index
        if i < 0 or i >= len(st.counters):
            return "starting"
        plan = shape.plan[i]
        c = st.counters[i]
        elapsed = max((ANCHOR.now_wall_ns() - c.first_ns) / 1e9, 1e-9)
        phase = "steady" if st.steady_ns is not None else "warm-up"
        ctx = f" ctx={plan.context_tokens}" if plan.context_tokens else ""
        errs = " ".join(f"{k}={v}" for k, v in sorted(c.errors.items()))
        # the live form of the report's "timing uncertain" mark (more than 1 % of TTFTs)
        late = (
            f" timing uncertain: {c.late_ttft / c.ok:.0%} of TTFTs late-bounded"
            if c.ok and c.late_ttft > c.ok / 100
            else ""
        )
        users = self.env.runner.user_count if self.env.runner is not None else 0
        return (
            f"step {i + 1}/{len(shape.plan)} {_load_label(plan)}{ctx} users={users} {phase} "
            f"ok={c.ok} failed={c.failed} tok/s={c.output_tokens / elapsed:,.0f}"
            + late
            + (f" errors: {errs}" if errs else "")
        )

    def run(self) -> None:
        while True:
            i = self.state.step_index
            if i != self.last_index and self.last_index >= 0 and self.tty:
                self.out.write("\n")
            self.last_index = i
            text = self.line()
            if self.tty:
                self.out.write("\r" + text[:200].ljust(100))
            else:
                self.out.write(text + "\n")
            self.out.flush()
            gevent.sleep(1.0 if self.tty else 5.0)


class _QuietSpawnWarning(logging.Filter):
    """Locust warns about spawn rates above 100/s; a ramp starts each step's users at once on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "spawn rate is very high" not in record.getMessage()


class ServerDownGuard:
    """Connection-level failures in a row: is the server down? If so, end the step and act.

    The check runs in its own greenlet (users never block on it). A server that answers is left
    alone. A down server ends the current step with reason ``server_down`` (the analysis marks it
    INVALID and its power idle), an event goes to events.jsonl, and then, per ``--on-server-down``:
    ``stop`` ends the ramp; ``wait`` holds the load at zero until the server is ready again (up to
    ``--wait-ready`` seconds, 300 when not given) and goes on with the next step; ``skip-step`` goes
    on with the next step at once.
    """

    def __init__(self, opts: RampOptions, state: RunState, shape: RampShape, out: TextIO) -> None:
        self.opts, self.state, self.shape, self.out = opts, state, shape, out
        self.events = JsonlAppender(state.run_dir / "events.jsonl")
        self.checking = False
        self.fatal: str | None = None  # why the ramp cannot go on

    def suspect(self) -> None:
        if not self.checking and not self.shape.finished and not self.shape.holding:
            self.checking = True
            gevent.spawn(self._check)

    def _event(self, kind: str, **fields: Any) -> None:
        if self.state.write_failure is not None:
            return  # the run directory cannot be written; the ramp is stopping
        try:
            self.events.write({"t_ns": ANCHOR.now_wall_ns(), "src": "loadgen", "kind": kind, **fields})
        except RunDirError as exc:
            self.state._write_failed(exc)

    def _check(self) -> None:
        from loadgen.lifecycle import NotReady, capture_logs, match_failures, split_command, wait_ready

        opts, state, shape = self.opts, self.state, self.shape
        try:
            try:
                # short: a refused /health after refused requests is decisive, and the step the
                # failures happened in must still be the current one when it is marked
                status = split_command(opts.server_status, "--server-status") if opts.server_status else None
                wait_ready(opts.url, 0.5, opts.api_key, status_cmd=status)
                return  # it answers: the failures were the server's own, keep measuring
            except NotReady as exc:
                why = str(exc)
            step = state.step_index
            # the server's own account, from the log the telemetry process copies into the run dir
            lines = capture_logs(None, state.run_dir / "server.log", max_lines=500)
            matches = [{"pattern": m["pattern"], "line": m["line"]} for m in match_failures(lines)][-10:]
            self._event("server_down", step=step, detail=why, policy=opts.on_server_down, log_matches=matches)
            self.out.write(f"\nserver down during step {step + 1}: {why}\n")
            for m in matches[-3:]:
                self.out.write(f"  server log: {m['line']}\n")
            if opts.on_server_down == "stop":
                shape.stop("server_down")
                return
            shape.abort_step("server_down")
            if opts.on_server_down == "wait":
                limit = opts.wait_ready_s or 300.0
                self.out.write(f"waiting up to {limit:g} s for the server to come back\n")
                try:
                    wait_ready(opts.url, limit, opts.api_key)
                except NotReady as exc:
                    self._event("server_not_ready", step=step, detail=str(exc))
                    self.out.write(f"the server did not come back: {exc}\n")
                    shape.stop("server_down")
                    return
                self._event("server_up", step=step)
            shape.resume()
        finally:
            state.conn_streak = 0
            self.checking = False

    def endpoint_missing(self, endpoint: str, path: str, error: str) -> None:
        """The first calls got 404: the server does not serve the endpoint. Stop the ramp (once),
        naming the endpoint and what the server lists; the records taken stay."""
        if self.fatal is not None:
            return
        self.fatal = ""  # claimed: later 404s of the same burst do nothing
        gevent.spawn(self._endpoint_missing, endpoint, path, error)

    def _endpoint_missing(self, endpoint: str, path: str, error: str) -> None:
        from loadgen.lifecycle import endpoint_missing_message, served_endpoints

        message = endpoint_missing_message(endpoint, path, error, served_endpoints(self.opts.url, self.opts.api_key))
        self.fatal = message
        self._event("endpoint_missing", step=self.state.step_index, endpoint=endpoint, path=path, detail=message)
        self.out.write(f"\nstopping: POST {path} answered 404 before any call succeeded\n")
        self.shape.stop("endpoint_missing")

    def requests_refused(self, refusal: Refusal) -> None:
        """The first calls were all refused with one client error (``loadgen.load.refusal``): stop the
        ramp (once) with its one line; the records taken stay and the partial report is written."""
        if self.fatal is not None:
            return
        self.fatal = refusal.message()
        gevent.spawn(self._requests_refused, refusal)

    def _requests_refused(self, refusal: Refusal) -> None:
        self._event("requests_refused", step=self.state.step_index, detail=self.fatal, **refusal.fields())
        how = "all failed" if refusal.status >= 500 else "were all refused"
        self.out.write(f"\nstopping: the first {refusal.count} requests {how} with HTTP {refusal.status}\n")
        self.shape.stop("requests_refused")

    def worker_lost(self, worker: str, step: int) -> None:
        """A worker stopped answering mid-ramp (the link recorded ``worker_lost``): with
        ``--on-worker-loss stop`` the ramp ends here, its report partial; else it goes on with the
        others (the analysis marks the step below plan)."""
        if self.opts.on_worker_loss != "stop" or self.fatal is not None:
            return
        self.fatal = f"worker {worker} stopped answering during step {step + 1} (--on-worker-loss stop)"
        self.out.write(f"\nstopping: {self.fatal}\n")
        self.shape.stop("worker_lost")

    def close(self) -> None:
        self.events.close()


class RunStopped(Exception):
    """The ramp stopped because it cannot go on (its report is written); ``run_dir`` holds it."""

    def __init__(self, message: str, run_dir: Path) -> None:
        super().__init__(message)
        self.run_dir = run_dir


class RunInterrupted(Exception):
    """SIGINT or SIGTERM stopped the ramp; the partial report is written in ``run_dir``."""

    def __init__(self, signal_name: str, run_dir: Path) -> None:
        super().__init__(f"interrupted by {signal_name}")
        self.signal_name = signal_name
        self.run_dir = run_dir


class RunWriteStopped(RunDirError):
    """A write into the run directory failed mid-run and the ramp stopped sending. The message
    names the file, the reason, the free space, what is on disk and whether the report could be
    written (else how to rebuild it)."""

    def __init__(self, message: str, run_dir: Path, report_written: bool) -> None:
        super().__init__(message)
        self.run_dir = run_dir
        self.report_written = report_written


class KneeSearch:
    """``--find-knee``: after each step, the run so far decides the next load (or the end)."""

    def __init__(self, opts: RampOptions, run_dir: Path, template: StepPlan, out: TextIO) -> None:
        from loadgen.analysis.knee import SearchBudget

        axis = "rate" if template.open_loop else "concurrency"
        start = template.rate if template.open_loop else template.concurrency
        self.budget = SearchBudget(
            max_steps=opts.search_max_steps,
            max_time_s=opts.search_max_seconds,
            start=start or 1,
            factor=opts.search_factor,
            max_load=opts.search_max_load,
            axis=axis,
            slo=opts.slo,
        )
        self.run_dir, self.template, self.out = run_dir, template, out
        self.started = time.monotonic()
        self.state: Any = None

    def __call__(self, ended_index: int) -> StepPlan | None:
        from loadgen.analysis.calltypes import knee_steps
        from loadgen.analysis.knee import search_state
        from loadgen.analysis.pipeline import summarise

        _, summary = summarise(self.run_dir, dict(self.budget.slo) if self.budget.slo else None)
        # the steps as the call type the verdict is about saw them (all calls when only one type)
        self.state = search_state(knee_steps(summary), self.budget, time.monotonic() - self.started)
        nxt = self.state.next_load
        t = self.template
        if nxt is None:
            self.out.write(f"\nknee search: {self.state.stop_reason}\n")
            return None
        self.out.write(f"\nknee search ({self.state.phase}): next {self.budget.axis} {nxt:g}\n")
        if t.open_loop:
            return StepPlan(t.concurrency, t.context_tokens, t.warmup_s, t.duration_s, t.requests, rate=float(nxt))
        return StepPlan(int(nxt), t.context_tokens, t.warmup_s, t.duration_s, t.requests)


class AbortGuard:
    """``--abort-on``: each time a step ends, the run so far is summarised (as the knee search does)
    and its ended steps judged; the first threshold measured past its limit stops the ramp (the step
    under way ends with reason ``aborted``), with an ``aborted`` event naming it in events.jsonl.
    Run-scope thresholds see every request so far. A threshold with nothing measured yet waits."""

    def __init__(
        self, thresholds: Thresholds, run_dir: Path, state: RunState, shape: RampShape, event: Any, out: TextIO
    ) -> None:
        self.thresholds = thresholds.items
        self.run_dir, self.state, self.shape, self.event, self.out = run_dir, state, shape, event, out
        self.judged = 0  # steps ended and judged so far
        self.fired: str | None = None

    def poll(self) -> None:
        """Called from the ramp's loop: judge once per newly ended step."""
        st = self.state
        ended = st.step_index + (0 if st.step_live else 1)
        if self.fired is not None or ended <= self.judged or self.shape.finished:
            return
        self.judged = ended
        from loadgen.analysis.pipeline import summarise
        from loadgen.analysis.thresholds import ABORT_EVENT, evaluate, first_breach

        _, summary = summarise(self.run_dir)
        done = [s for s in summary["steps"] if s.get("end_reason") is not None]
        hit = first_breach(evaluate(summary, self.thresholds, "abort_on", steps=done))
        if hit is None:
            return
        self.fired = hit["threshold"]
        self.event(ABORT_EVENT, step=hit["step"], threshold=hit["threshold"], detail=hit["message"])
        self.out.write(f"\naborting: --abort-on {hit['threshold']}: {hit['message']}\n")
        self.shape.stop(ABORT_EVENT)


def _telemetry_end(code: int | None, run_dir: Path) -> str:
    from loadgen.telemetry.runner import EXIT_WRITE_FAILED

    if code == EXIT_WRITE_FAILED:
        free = free_bytes(run_dir)
        return (
            f"it could not write {run_dir} (disk full or read-only; "
            f"{'unknown space' if free is None else format_bytes(free)} free)"
        )
    return f"exit {code}; see {run_dir / 'telemetry.log'}"


def start_telemetry(run_dir: Path, options: Any, out: TextIO) -> Any:
    """The telemetry side process (a separate process: NVML blocks), or None when not asked for."""
    if options is None:
        return None
    from loadgen.telemetry import start_side_process

    side = start_side_process(run_dir, options)
    if not side.wait_ready(10.0):
        out.write(f"warning: the telemetry process did not start; see {run_dir / 'telemetry.log'}\n")
    return side


def run_ramp(opts: RampOptions, out: TextIO = sys.stderr) -> Path:
    """Run the ramp to the end (or Ctrl-C), write the report; return the run directory."""
    distributed = opts.workers > 0 or opts.master
    run = compose(opts, "ramp", worker="master" if distributed else "w0", records_elsewhere=distributed)
    plan, run_dir, state = _dispatchers(opts, run.plan), run.run_dir, run.state
    search = None
    if opts.find_knee:
        plan = plan[:1]  # the search starts from the first step and chooses the rest
        search = KneeSearch(opts, run_dir, plan[0], out)
    shape = RampShape(plan, state, closed_classes=[LLMUser], open_classes=[OpenLoopUser], extend=search)
    guard = ServerDownGuard(opts, state, shape, out)
    state.on_server_suspect = guard.suspect
    state.on_endpoint_missing = guard.endpoint_missing
    state.on_refused = guard.requests_refused
    abort = AbortGuard(opts.abort_on, run_dir, state, shape, guard._event, out) if opts.abort_on else None
    # in-flight requests finish after the last step (and when a matrix row lowers concurrency):
    # they were sent inside a steady window and belong to its statistics
    env = Environment(
        user_classes=[LLMUser, OpenLoopUser], shape_class=shape, host=opts.url, stop_timeout=opts.drain_seconds
    )
    bind(env, state)
    env.events.spawning_complete.add_listener(lambda user_count, **_: shape.on_spawning_complete(user_count))
    sidecars = _Sidecars.start(opts, run_dir, state, env, out)
    side = sidecars.telemetry
    link = None
    watcher = None
    workers: list[Any] = []
    if distributed:
        runner, link, workers = _master(env, state, opts, run_dir, out)
        link.on_lost = lambda worker, step: guard.worker_lost(worker, step)
        shape.short_handed = link.short_handed
        watcher = gevent.spawn(link.watch)
    else:
        runner = env.create_local_runner()
    logging.getLogger("locust.runners").addFilter(_QuietSpawnWarning())
    progress = Progress(state, shape, env, out)
    printer = gevent.spawn(progress.run)
    interrupted: list[str] = []

    def on_signal(signum: int, _frame: Any) -> None:
        interrupted.append(signal.Signals(signum).name)
        env.stop_timeout = 0.0  # Ctrl-C: stop now; in-flight calls are recorded as cancelled
        shape.stop("stopped")

    def on_write_failed(exc: RunDirError) -> None:
        # nothing more can be kept: stop sending at once (the calls in flight are cancelled)
        env.stop_timeout = 0.0
        out.write(f"\nstopping: {exc}\n")
        shape.stop("write_failed")

    state.on_write_failed = on_write_failed
    previous = _take_signals(on_signal)
    quiet_gc()
    try:
        runner.start_shape()
        gevent.sleep(0.05)
        _until_done(runner, interrupted, abort, side, guard, run_dir, out)
        if watcher is not None:
            watcher.kill()
        runner.stop()
        if link is not None:
            _drain(link, out)
        runner.quit()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        printer.kill()
        sidecars.stop()
        guard.close()
        out.write("\n" if progress.tty else "")
        out.write(progress.line() + "\n")
        state.close()
        if link is not None:
            link.close()
        for proc in workers:
            try:
                proc.wait(15)
            except Exception:
                proc.kill()
    return _report(run_dir, state, shape, guard, interrupted, out)


def _report(
    run_dir: Path, state: RunState, shape: RampShape, guard: ServerDownGuard, interrupted: list[str], out: TextIO
) -> Path:
    """The report of a ramp that ended, whole or partial; then why it ended early, if it did."""
    if state.write_failure is not None:
        raise _write_stopped(run_dir, state, shape, out)
    if interrupted:
        out.write(f"interrupted ({interrupted[0]}): writing a partial report\n")
    from loadgen.report.pipeline import rebuild

    rebuild(run_dir)
    if guard.fatal:
        raise RunStopped(guard.fatal, run_dir)
    if interrupted:
        raise RunInterrupted(interrupted[0], run_dir)
    return run_dir


@dataclass
class _Sidecars:
    """What runs beside the load and stops with it: the telemetry side process, the load
    generator's own Prometheus exporter (``--prometheus-port``) and its self-watch."""

    telemetry: Any
    exporter: Any
    watch: SelfWatch

    @classmethod
    def start(cls, opts: RampOptions, run_dir: Path, state: RunState, env: Environment, out: TextIO) -> _Sidecars:
        side = start_telemetry(run_dir, opts.telemetry, out)
        exporter = None
        if opts.prometheus_port is not None:
            from loadgen.webui.promexport import start_exporter

            exporter = start_exporter(state, opts.prometheus_port, env)
            out.write(f"load generator metrics on http://0.0.0.0:{exporter.port}/metrics\n")
        watch = SelfWatch(run_dir, state.worker, lambda: state.in_flight)
        watch.start()
        return cls(side, exporter, watch)

    def stop(self) -> None:
        self.watch.stop()
        if self.exporter is not None:
            self.exporter()
        if self.telemetry is not None:
            self.telemetry.stop()


def _dispatchers(opts: RampOptions, plan: list[StepPlan]) -> list[StepPlan]:
    """A distributed ramp's open-loop steps get one dispatcher a worker, each sending its share of
    the one process of arrivals (``load.distributed.MasterLink.shares``)."""
    workers = opts.expect_workers if opts.master else opts.workers
    return [replace(p, concurrency=workers) if p.open_loop and workers else p for p in plan]


def _drain(link: Any, out: TextIO) -> None:
    """The workers' last batches of counts and records, before the master reads the run directory."""
    late = link.drain()
    if late:
        out.write(f"\nworkers {', '.join(late)} did not hand over their last records in time\n")


class WorkersMissing(Exception):
    """``--master``: fewer than ``--expect-workers`` workers joined within ``--worker-wait``."""


def _master(
    env: Environment, state: RunState, opts: RampOptions, run_dir: Path, out: TextIO
) -> tuple[Any, Any, list[Any]]:
    """The master runner and its link to the workers (their records and counts), once every
    worker joined: ``--workers N`` local worker processes (60 s at most), or ``--master``'s
    ``--expect-workers`` from other machines (``--worker-wait`` at most). The workers' clocks
    go to the manifest."""
    from loadgen.load.distributed import MasterLink, free_port, master_config, start_local_workers
    from loadgen.rundir.layout import read_manifest, write_manifest
    from loadgen.spec.options import parse_host_port

    if opts.master:
        host, port = parse_host_port(opts.master_bind, "--master-bind")
        expected, wait_s = opts.expect_workers, opts.worker_wait_s
    else:
        host, port = "127.0.0.1", free_port()
        expected, wait_s = opts.workers, 60.0
    runner: Any = env.create_master_runner(master_bind_host=host, master_bind_port=port)
    link = MasterLink(env, state, master_config(run_dir, opts.manifest()), out)
    workers = start_local_workers(opts.workers, port, run_dir) if not opts.master else []
    if opts.master:
        out.write(f"master on {host}:{port}: waiting up to {wait_s:g} s for {expected} workers (loadgen worker "
                  f"--master THIS_HOST:{port})\n")  # fmt: skip
    deadline = time.monotonic() + wait_s
    while link.ready < expected:
        dead = [i for i, p in enumerate(workers) if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            for p in workers:
                p.kill()
            runner.quit()
            where = f"; see {run_dir}/worker-*.log" if workers else ""
            refused = "".join(f"\n  refused: {why}" for why in link.refused)
            raise WorkersMissing(f"{expected} workers did not join ({link.ready} did){where}{refused}")
        gevent.sleep(0.1)
    manifest = read_manifest(run_dir)
    manifest["workers"] = link.workers()
    write_manifest(run_dir, manifest)
    return runner, link, workers


def _take_signals(on_signal: Callable[[int, Any], None]) -> dict[int, Any]:
    """SIGINT and SIGTERM to ``on_signal``; the handlers they had, to put back. A SIGINT ignored on
    entry (a background job) stays ignored; SIGTERM still stops."""
    previous: dict[int, Any] = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig, handler in previous.items():
        if sig == signal.SIGINT and handler is signal.SIG_IGN:
            continue
        signal.signal(sig, on_signal)
    return previous


def _until_done(
    runner: Any,
    interrupted: list[str],
    abort: AbortGuard | None,
    side: Any,
    guard: ServerDownGuard,
    run_dir: Path,
    out: TextIO,
) -> None:
    """Wait for the shape to end (or a signal), judging ``--abort-on`` as steps end and saying once
    when the telemetry process died (the run goes on without it)."""
    telemetry_alive = side is not None
    while runner.shape_greenlet is not None and not interrupted:
        gevent.sleep(0.1)
        if abort is not None:
            abort.poll()
        if telemetry_alive and not side.alive():
            telemetry_alive = False
            why = _telemetry_end(side.proc.returncode, run_dir)
            guard._event("telemetry_died", step=guard.state.step_index, detail=why)
            out.write(f"\nwarning: the telemetry process ended ({why}); the run goes on\n")


def _write_stopped(run_dir: Path, state: RunState, shape: RampShape, out: TextIO) -> RunWriteStopped:
    """The ramp stopped because the run directory cannot be written: try the partial report (it
    may fit: it replaces nothing until each file is whole), and say what is on disk."""
    from loadgen.analysis.load import RunLoadError
    from loadgen.report.pipeline import rebuild

    failure = state.write_failure
    step = f"step {state.step_index + 1}/{len(shape.plan)}" if state.step_index >= 0 else "the start"
    lines = [
        f"{failure}",
        f"the ramp stopped sending at {step}: {state.records_kept:,} request records are on disk "
        f"(whole lines), {state.records_lost:,} could not be written",
    ]
    out.write("writing a partial report\n")
    try:
        rebuild(run_dir)
        written = True
        lines.append(f"partial report: {run_dir / 'report.md'}")
    except (OSError, RunLoadError) as exc:
        written = False
        free = free_bytes(run_dir)
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        lines.append(
            f"the report could not be written ({why}; "
            f"{'unknown space' if free is None else format_bytes(free)} free): free space (or make the folder "
            f"writable), then run `loadgen report {run_dir}`"
        )
    return RunWriteStopped("\n".join(lines), run_dir, written)
