"""Wiring for ``locust -f loadgen/locustfile.py --host URL`` (web UI or --headless); ``loadgen ui``.

The same ``LLMUser`` as ``loadgen ramp``. Two ways to drive it:

* ramp steps given (``--lg-steps 1,8,32`` users, or ``--lg-rates 0.5,1,2`` req/s open loop with the
  scenario's arrival process; editable fields of the web UI's form): Start walks the steps with
  ``loadgen.load.shape.RampShape`` (warm-up, then a steady window of ``--lg-step-seconds`` per step),
  planned as ``loadgen ramp`` plans them; each Start is a run directory of its own. While it runs,
  ``/loadgen/control/*`` (``loadgen.webui.control``) steers it: hold, skip, add a step, set the load.
* no ramp steps: Locust's own user count and spawn rate drive the load; each test start (each
  Start in the web UI) is one step of one run directory per Locust process.

The report is written when the test stops. The web UI gets an "LLM" tab (live charts from the run
directory, the knee verdict, links to the report) and ``/loadgen/metrics`` (Prometheus). The
telemetry side process runs beside the load (not on workers) with the flags of ``loadgen ramp``
(``--gpu-source``, ``--metrics-url``, ...; ``--no-telemetry`` for none). The options are the rows of
``loadgen.spec.flags.FLAGS``: those whose surfaces hold ``form`` are fields of the web UI's form
(``--lg-steps``, ``--lg-max-tokens``, ...), those with ``lg`` are on Locust's command line only
(``--lg-out``, ``--lg-stall-timeout``, ...); ``validate`` checks them as ``loadgen ramp`` does. The
API key comes from $OPENAI_API_KEY.
"""

from __future__ import annotations

import copy
import logging
import os
import sys
import time
from argparse import Namespace
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from locust import events
from locust.env import Environment

from loadgen.load.compose import compose
from loadgen.load.runtime import bind
from loadgen.load.shape import RampShape
from loadgen.load.user import LLMUser
from loadgen.rundir.clock import ANCHOR
from loadgen.spec import flags
from loadgen.spec.options import OptionError, RampOptions, StepPlan, Timeouts, parse_request_id_header

if TYPE_CHECKING:
    from loadgen.load.distributed import MasterLink
    from loadgen.telemetry import TelemetryOptions

__all__ = ["LLMUser"]

log = logging.getLogger("loadgen")


class _Hidden:
    """Adds arguments that stay off the web UI's form (Locust shows only those it marks)."""

    def __init__(self, parser: Any) -> None:
        self.parser = parser

    def add_argument(self, *args: Any, **kwargs: Any) -> Any:
        return self.parser.add_argument(*args, include_in_web_ui=False, **kwargs)


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    # from the one flag table: the form's fields (editable before each Start) and the command-line-only
    # --lg-* options; the telemetry sources as loadgen ramp's
    hidden = _Hidden(parser)
    flags.add_locust_arguments(parser, hidden)
    from loadgen.telemetry.options import add_source_args

    add_source_args(hidden)  # type: ignore[arg-type]
    hidden.add_argument(
        "--lg-scenarios",
        default="",
        help="comma-separated folders whose *.toml scenarios the start form offers (default ./scenarios)",
    )


def _value(opts: Namespace, dest: str) -> Any:
    """One --lg-* option's value, parsed as loadgen ramp parses its flag (None: empty)."""
    f = flags.BY_DEST[dest]
    return flags.parse_value(f, getattr(opts, f.lg_attr), f.flag("lg"))


def _telemetry(opts: Namespace) -> TelemetryOptions | None:
    if getattr(opts, "no_telemetry", False) or not hasattr(opts, "gpu_source"):
        return None
    from loadgen.telemetry import TelemetryOptions

    return TelemetryOptions.from_args(opts)


def wants_ramp(opts: Namespace) -> bool:
    """Ramp steps given (users, ``--lg-steps``, or rates, ``--lg-rates``), or a trace scenario (its
    ``[load]`` time scales are the steps): the shape walks them."""
    if str(opts.lg_steps).strip() or str(getattr(opts, "lg_rates", "")).strip():
        return True
    return _replays_a_trace(str(getattr(opts, "lg_scenario", "") or ""))


def _replays_a_trace(path: str) -> bool:
    if not path:
        return False
    from loadgen.workload.scenario import ScenarioError, load_scenario

    try:
        load = load_scenario(path).load
    except ScenarioError:
        return False  # validate() says what is wrong with it
    return load.mode == "open" and load.arrival == "trace"


# options the form carries when the flag table gives them its form surface (read only where present)
_FORM_EXTRAS = ("rates", "requests_per_step", "arrival", "burstiness", "fail_on", "abort_on")


def _extras(opts: Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dest in _FORM_EXTRAS:
        f = flags.BY_DEST.get(dest)
        if f is not None and hasattr(opts, f.lg_attr) and dest in RampOptions.__dataclass_fields__:
            out[dest] = _value(opts, dest)
    return out


def _request_id_header(opts: Namespace) -> str | None:
    """--lg-request-id-header (Locust's command line only): the id header's name, None for none."""
    flag = flags.BY_DEST["request_id_header"].flag("lg")
    return parse_request_id_header(getattr(opts, "lg_request_id_header", None), flag)


def validate(opts: Namespace) -> None:
    """Check the --lg-* values before a run starts; raises OptionError naming the option and value."""
    for dest in ("concurrency", "slo", "extra_body"):
        _value(opts, dest)
    extras = _extras(opts)
    arrival = extras.get("arrival")
    if arrival is not None and arrival not in flags.BY_DEST["arrival"].choices:
        raise OptionError(f"--lg-arrival {arrival!r}: give one of {', '.join(flags.BY_DEST['arrival'].choices)}")
    _request_id_header(opts)
    # every number against the table's bound, and the rules between options, as loadgen ramp checks them
    values = {
        dest: flags.parse_value(flags.BY_DEST[dest], raw, flags.BY_DEST[dest].flag("form"))
        for dest, raw in flags.raw_values(opts, "lg").items()
        if flags.BY_DEST[dest].bound is not None
    }
    flags.check_combination({**values, "arrival": arrival}, "form")
    contexts = _value(opts, "context_tokens")
    if contexts and len(contexts) > 1 and not wants_ramp(opts):
        raise OptionError(
            f"--lg-context-tokens {opts.lg_context_tokens!r}: several context lengths make a matrix of "
            "ramp steps: give --lg-steps (or --lg-rates) too (or one length)"
        )
    if opts.lg_scenario:
        from loadgen.workload.scenario import ScenarioError, load_scenario

        try:
            load_scenario(opts.lg_scenario)
        except ScenarioError as exc:
            raise OptionError(f"--lg-scenario: {exc}") from None


def _ramp_options(opts: Namespace, host: str, model: str) -> RampOptions:
    """The run's options from the form's --lg-* values, in the shape ``loadgen ramp`` records."""
    return RampOptions(
        url=host,
        model=model,
        concurrency=_value(opts, "concurrency"),
        step_seconds=opts.lg_step_seconds,
        warmup_seconds=opts.lg_warmup_seconds,
        max_tokens=opts.lg_max_tokens,
        context_tokens=_value(opts, "context_tokens"),
        endpoint=opts.lg_endpoint,
        extra_body=_value(opts, "extra_body") or {},
        label=opts.lg_label or None,
        out=opts.lg_out,
        scenario=opts.lg_scenario or None,
        transport=opts.lg_transport,
        api_key=os.environ.get("OPENAI_API_KEY") or None,
        timeouts=Timeouts(stall_s=opts.lg_stall_timeout, request_s=opts.lg_request_timeout),
        request_id_header=_request_id_header(opts),
        slo=_value(opts, "slo"),
        call_type=_value(opts, "call_type") or None,
        gpu_count=_value(opts, "gpu_count"),
        drain_seconds=opts.lg_drain_seconds,
        **_extras(opts),
    )


class _UIRun:
    """One run directory: its RunState (the step sink), its telemetry process, its plan."""

    def __init__(
        self,
        env: Environment,
        ramp: bool,
        opts: Namespace | None = None,
        host: str | None = None,
        telemetry: bool = True,
    ) -> None:
        from loadgen.lifecycle import first_model

        opts = opts if opts is not None else env.parsed_options
        if opts is None:
            raise OptionError("no options parsed: run this locustfile with locust -f")
        host = host if host is not None else (env.host or "")
        self.ramp = ramp
        contexts = _value(opts, "context_tokens")
        self.slo = _value(opts, "slo")
        scenario = None
        if opts.lg_scenario:
            from loadgen.workload.scenario import ScenarioError, load_scenario

            try:
                scenario = load_scenario(opts.lg_scenario)
            except ScenarioError as exc:
                raise OptionError(f"--lg-scenario: {exc}") from None
        # a ramp's steps as loadgen ramp plans them (rates win over users; the scenario fills the rest)
        plan: list[StepPlan] | None = None if ramp else []
        model = opts.lg_model or (scenario.model if scenario is not None and scenario.model else "")
        model = model or first_model(host) or "default"
        self.options = _ramp_options(opts, host, model)
        master = _is_master(env)
        run = compose(
            self.options,
            "locust-ramp" if ramp else "locust",
            plan=plan,
            worker="master" if master else "w0",
            records_elsewhere=master,  # a master's workers send the requests
            default_context=contexts[0] if contexts else None,  # Locust's user count drives the load: one length
            dir_label="locust",
            manifest_extra={"argv": [a if not a.startswith("--api-key") else "--api-key=***" for a in sys.argv[1:]]},
        )
        self.plan, self.run_dir, self.state = run.plan, run.run_dir, run.state
        self.ctx = contexts[0] if contexts else None
        if master:
            _link_workers(env, self)
        bind(env, self.state)
        self.env = env
        self.step = -1
        self.closed = False
        self.side: Any = None
        from loadgen.load.selfwatch import SelfWatch

        # as loadgen ramp: this process measures its own CPU and loop lag (client-<worker>.jsonl), so a
        # step the load generator could not carry is flagged and the live page's process panel fills
        self.watch: SelfWatch | None = SelfWatch(self.run_dir, self.state.worker, lambda: self.state.in_flight)
        self.watch.start()
        sources = _telemetry(opts) if telemetry else None
        if sources is not None and not sources.metrics_url:
            from loadgen.lifecycle import probe_metrics

            # as loadgen ramp: the server's own /metrics when it serves one (KV fill, queue, preemptions)
            sources = replace(sources, metrics_url=probe_metrics(host, os.environ.get("OPENAI_API_KEY") or None))
        if sources is not None:
            from loadgen.run.ramp import start_telemetry

            self.side = start_telemetry(self.run_dir, sources, sys.stderr)

    def start_step(self) -> None:
        """Manual mode: a test start is the next step, at Locust's user count."""
        self.step += 1
        users = getattr(self.env.parsed_options, "num_users", None) or 0
        now = ANCHOR.now_wall_ns()
        self.state.step_started(self.step, StepPlan(users, self.ctx, 0.0, None, None), now)
        self.state.step_steady(self.step, now)

    def end_step(self) -> None:
        if self.step >= 0 and self.state.step_live:
            self.state.step_ended(self.step, ANCHOR.now_wall_ns(), "stopped")

    def write_report(self) -> None:
        from loadgen.report.pipeline import rebuild

        rebuild(self.run_dir, self.slo)
        print(f"report: {Path(self.run_dir) / 'report.md'}", file=sys.stderr)

    def stop_watch(self) -> None:
        if self.watch is not None:
            self.watch.stop()
            self.watch = None

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.stop_watch()
        if self.side is not None:
            self.side.stop()
        self.state.close()


class UIRampShape(RampShape):
    """The ramp of one run (its plan from --lg-steps or --lg-rates); built complete before Locust starts
    it, steered while it runs from /loadgen/control/* (``loadgen.webui.control`` finds it as
    ``env.shape_class``)."""

    abstract = True

    def __init__(self, env: Environment, run: _UIRun) -> None:
        from loadgen.load.user import OpenLoopUser

        super().__init__(run.plan, run.state, closed_classes=[LLMUser], open_classes=[OpenLoopUser])
        _open_loop_users(env, True)
        # as loadgen ramp: the calls in flight when the last step ends were sent inside its steady
        # window and finish (up to --drain-seconds); Locust's own default (--stop-timeout 0) would
        # cancel them and the report would show failures nobody caused. A master passes it on to its
        # workers with each spawn message. The Stop button still stops at once (``_stop_now``).
        env.stop_timeout = run.options.drain_seconds
        self.runner = env.runner
        self.run = run
        if _link is not None:  # a master: a step after a lost worker runs at what the others carry
            self.short_handed = _link.short_handed
        self.abort: Any = None
        if run.options.abort_on:  # as loadgen ramp --abort-on: judged each time a step ends
            from loadgen.run.ramp import AbortGuard

            self.abort = AbortGuard(
                run.options.abort_on, run.run_dir, run.state, self, _event_writer(run.run_dir), sys.stderr
            )

    def tick(self) -> tuple[int, float] | tuple[int, float, list[Any]] | None:
        if self.abort is not None:
            self.abort.poll()  # a breach stops the ramp: the next tick returns None
        return super().tick()

    def reset_time(self) -> None:
        # Locust's master calls this again at its first start(), after the ramp's first tick: that
        # would begin step 0 twice. A new Start builds a new shape, so once begun, a ramp never resets.
        if getattr(self, "index", -1) >= 0 and not self.finished:
            return
        super().reset_time()


def _event_writer(run_dir: Path) -> Any:
    """``write(kind, **fields)`` to the run's events.jsonl (``src: loadgen``), as loadgen ramp's."""
    from loadgen.rundir.records import JsonlAppender

    events = JsonlAppender(Path(run_dir) / "events.jsonl")

    def write(kind: str, **fields: Any) -> None:
        events.write({"t_ns": ANCHOR.now_wall_ns(), "src": "loadgen", "kind": kind, **fields})

    return write


def _open_loop_users(env: Environment, on: bool) -> None:
    """Locust spawns only classes of ``env.user_classes``; the open-loop dispatcher is one during a ramp
    (its rate steps, or a rate set while it runs), and never when Locust's own user count drives the
    load (that would split the users between the two classes by weight)."""
    from loadgen.load.user import OpenLoopUser

    present = OpenLoopUser in env.user_classes
    if on and not present:
        env.user_classes.append(OpenLoopUser)
    elif not on and present:
        env.user_classes.remove(OpenLoopUser)


_run: _UIRun | None = None
_metrics: Any = None


def _begin_run(env: Environment, ramp: bool, opts: Namespace | None = None, host: str | None = None) -> _UIRun:
    global _run
    if _run is not None and not _run.closed:
        _finish_run(_run)
    # telemetry beside the load, never on a worker (the master's run samples the servers once)
    _run = _UIRun(env, ramp, opts, host, telemetry=not _is_worker(env))
    return _run


def _form_options(env: Environment, form: Mapping[str, str]) -> Namespace:
    """The parsed options as they will be once Locust applies the form (it does so after us)."""
    if env.parsed_options is None:
        raise OptionError("no options parsed: run this locustfile with locust -f")
    opts: Namespace = copy.copy(env.parsed_options)
    for key, value in form.items():
        if key.startswith("lg_") and hasattr(opts, key):
            old = getattr(opts, key)
            try:
                setattr(opts, key, type(old)(value) if old is not None else value)
            except ValueError:
                raise OptionError(f"--{key.replace('_', '-')} {value!r}: expected a {type(old).__name__}") from None
    return opts


def _finish_run(run: _UIRun) -> None:
    run.stop_watch()  # its last samples are on disk before the report reads them
    try:
        run.write_report()
    finally:
        run.close()


def _current_dir() -> Path | None:
    return _run.run_dir if _run is not None else None


def _running_dir() -> Path | None:
    """The run going on now: None once its report is written (Past runs may compare it then)."""
    return _run.run_dir if _run is not None and not _run.closed else None


def _is_master(env: Environment) -> bool:
    from locust.runners import MasterRunner

    return isinstance(env.runner, MasterRunner)


_link: MasterLink | None = None


HANDSHAKE_WAIT_S = 15.0  # how long a Start waits for connected workers to end their clock exchange


def _link_workers(env: Environment, run: _UIRun) -> None:
    """A master hands its run to the workers: config, steps, and records back (loadgen.load.distributed)."""

    from loadgen.load.distributed import MasterLink, master_config
    from loadgen.rundir.layout import read_manifest, write_manifest

    global _link
    config = master_config(run.run_dir, run.options.manifest())
    if _link is None:
        _link = MasterLink(env, None, None, sys.stderr)
    runner: Any = env.runner
    # Locust lets a Start through once its workers are connected; ours may still be exchanging clocks
    # with us (a slow or lossy hop), and one that has not ended gets its config only then: the first
    # step would start without it. Wait for them (bounded), as a headless master waits for its workers.
    deadline = time.monotonic() + HANDSHAKE_WAIT_S
    while len(_link.roster) < len(runner.clients) and time.monotonic() < deadline:
        import gevent

        gevent.sleep(0.05)
    _link.bind(run.state, config)
    # the workers at the Start, with their clocks, as a headless ramp's manifest has them (a worker
    # that joins later is in events.jsonl, ``worker_joined``)
    manifest = read_manifest(run.run_dir)
    manifest["workers"] = _link.workers()
    write_manifest(run.run_dir, manifest)
    if len(_link.roster) < len(runner.clients):
        # Locust let the Start through with a worker whose clock exchange with us is still under way
        # (a slow or lossy hop): it is a worker of the Start all the same, in the manifest once it ends
        import gevent

        gevent.spawn(_complete_roster, run.run_dir, len(runner.clients))


def _complete_roster(run_dir: Path, expected: int, wait_s: float = 30.0) -> None:
    import gevent

    from loadgen.rundir.layout import read_manifest, write_manifest

    link = _link
    deadline = time.monotonic() + wait_s
    while link is not None and len(link.roster) < expected and time.monotonic() < deadline:
        gevent.sleep(0.1)
    if link is not None and link.roster:
        manifest = read_manifest(run_dir)
        manifest["workers"] = link.workers()
        write_manifest(run_dir, manifest)


def _is_worker(env: Environment) -> bool:
    from locust.runners import WorkerRunner

    return isinstance(env.runner, WorkerRunner)


def _install_web_ui(env: Environment, opts: Namespace, metrics: Any) -> None:
    """The LLM tab, its login (required beyond loopback), and the two hooks on Locust's own routes:
    Stop ends the test now; Start chooses, per press, between the form's ramp and a user count."""
    from flask import jsonify, request

    from loadgen.webui.auth import credentials, exposure_warning, install_login
    from loadgen.webui.blueprint import install

    assert env.web_ui is not None and env.web_ui.app is not None
    app = env.web_ui.app
    web_login = bool(getattr(opts, "web_login", False))
    warning = exposure_warning(getattr(opts, "web_host", None), int(getattr(opts, "web_port", 8089)), web_login)
    if warning and not web_login:
        # beyond loopback the UI can start load against the target: never without a login
        sys.exit(f"error: {warning}")
    if warning:
        log.warning("%s", warning)
    if web_login:
        try:
            install_login(env.web_ui, *credentials())
        except ValueError as exc:
            sys.exit(f"error: {exc}")
    install(env, _current_dir, metrics, running=_running_dir)

    @app.before_request
    def _stop_now() -> None:
        # Locust's Stop button: the user ends the test now, as Ctrl-C ends loadgen ramp (the calls in
        # flight are recorded as cancelled, counted apart from failures); the end of a ramp drains
        if request.path.rstrip("/").endswith("/stop") and request.method == "POST":
            env.stop_timeout = 0.0

    @app.before_request
    def _choose_shape() -> Any:
        # the form's --lg-steps decides, per Start, between the ramp and Locust's user count
        if request.path.rstrip("/").endswith("/swarm") and request.method == "POST":
            from locust.runners import STATE_RUNNING, STATE_SPAWNING

            running = env.runner is not None and env.runner.state in (STATE_RUNNING, STATE_SPAWNING)
            try:
                form_opts = _form_options(env, request.form)
                validate(form_opts)
                if running and (isinstance(env.shape_class, UIRampShape) or wants_ramp(form_opts)):
                    # an edit while a test runs: a ramp's steps are fixed once it started
                    raise OptionError(
                        "a test is running: Stop it before starting a ramp (steer a running ramp with the LLM "
                        "tab's Steer panel: hold, skip, add a step, set the load)"
                    )
                if wants_ramp(form_opts):
                    host = str(request.form.get("host") or env.host or "")
                    run = _begin_run(env, True, form_opts, host)
                    env.shape_class = UIRampShape(env, run)
                else:
                    env.shape_class = None
                    _open_loop_users(env, False)
            except (OptionError, ValueError) as exc:
                from loadgen.webui.start import in_form_words

                # the form's labels, not the hidden field names the option table speaks of
                return jsonify({"success": False, "message": in_form_words(str(exc)), "host": env.host})
        return None


@events.init.add_listener
def _on_init(environment: Environment, **_: Any) -> None:
    from loadgen.webui.promexport import LoadgenMetrics, serve_metrics

    global _metrics
    env = environment
    opts = env.parsed_options
    if _is_worker(env):
        from loadgen.load.distributed import WorkerLink

        # the master's config, steps and run directory arrive as messages; a worker that can write
        # the run directory (on the master's machine, or a shared volume) writes its records there
        WorkerLink(env, direct=True)
        _open_loop_users(env, True)  # a worker spawns whichever class the master sends it
        return
    if opts is None:
        return
    if _is_master(env):
        from loadgen.load.distributed import MasterLink

        global _link
        _link = MasterLink(env, None, None, sys.stderr)  # before anything yields: workers say hello early
        # workers that stop answering, or come back: events of the current run (its steps marked)
        import gevent

        gevent.spawn(_link.watch)

    def users() -> int | None:
        return int(env.runner.user_count) if env.runner is not None else None

    def in_flight() -> int | None:
        v = getattr(_run.state, "in_flight", None) if _run is not None else None
        return v if isinstance(v, int) else None

    _metrics = LoadgenMetrics(_current_dir, users=users, in_flight=in_flight)
    if env.web_ui is not None and env.web_ui.app is not None:
        _install_web_ui(env, opts, _metrics)
    elif opts.lg_prometheus_port:
        serve_metrics(_metrics, opts.lg_prometheus_port)
    if opts.headless:
        try:
            validate(opts)
        except OptionError as exc:
            sys.exit(f"error: {exc}")
    # --autostart starts the test without the form's POST: the ramp is chosen here, as headless
    if wants_ramp(opts) and (opts.headless or getattr(opts, "autostart", False)):
        try:
            env.shape_class = UIRampShape(env, _begin_run(env, ramp=True))
        except (OptionError, ValueError) as exc:
            sys.exit(f"error: {exc}")

    def spawning_complete(user_count: int, **_: Any) -> None:
        if isinstance(env.shape_class, UIRampShape):
            env.shape_class.on_spawning_complete(user_count)

    env.events.spawning_complete.add_listener(spawning_complete)


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_: Any) -> None:
    if _is_worker(environment):
        return  # a worker follows the master's run (loadgen.load.distributed.WorkerLink)
    if isinstance(environment.shape_class, UIRampShape):
        return  # the run was built with the shape (the form's Start, or --lg-steps headless); it walks the steps
    try:
        if _run is None or _run.closed or _run.ramp:
            _begin_run(environment, ramp=False)
        assert _run is not None
        _run.start_step()
    except OptionError as exc:
        log.error("%s", exc)


@events.test_stop.add_listener
def _on_test_stop(environment: Environment, **_: Any) -> None:
    _end_run(environment)


def _end_run(environment: Environment) -> None:
    """The test stopped (Stop, the end of a ramp, ``-t``) or Locust quits (SIGTERM, Ctrl-C: Locust
    tells ``quitting`` before ``test_stop`` then): the step ends and the report is written."""
    run = _run
    if run is None or run.closed:
        return
    shape = environment.shape_class
    if run.ramp and isinstance(shape, UIRampShape):
        shape.stop("stopped")  # a no-op when the ramp reached its end
        if environment.web_ui is not None:
            environment.shape_class = None  # the form shows Locust's user count again until the next ramp
        _finish_run(run)
        return
    run.end_step()
    run.write_report()


@events.quitting.add_listener
def _on_quitting(environment: Environment, **_: Any) -> None:
    run = _run
    if run is None or run.closed:
        return
    try:
        if run.state.step_live:  # a run still going when Locust quits still gets its report
            _end_run(environment)
    finally:
        run.close()
