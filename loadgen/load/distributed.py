"""Several load-generating processes on Locust's own master/worker mode.

The master runs the load shape, writes steps.jsonl and the manifest, starts the telemetry side
process and renders the report; workers run the users. Four custom messages:

* ``lg_hello`` (worker -> master, once its handlers are registered) and ``lg_config`` (the
  master's answer): what to send and where (the ramp's options,
  no secrets: a worker takes its API key from its own environment, ``OPENAI_API_KEY``), the run
  directory, and the worker's index.
* ``lg_ready`` (worker -> master): the config taken (its scenario file checked); ``loadgen ramp``
  starts the first step once ``--expect-workers`` (or ``--workers``) said so.
* ``lg_step`` (master -> workers): every step transition as it happens, so all workers switch
  steps together and stamp their records with the same step.
* ``lg_records`` (worker -> master, every 0.25 s and at the end): live counts for the progress
  line and ``--requests-per-step``, and, for a worker that cannot reach the run directory (another
  machine), the records themselves, which the master appends to ``requests-<worker>.jsonl``.
* ``lg_fatal`` (worker -> master, at once): the worker's first calls say the run cannot succeed (a
  404 for the endpoint, or every call refused alike: ``loadgen.load.refusal``); the master stops the
  ramp as a single-process run does. Also a worker that refuses the master's run (its scenario file
  differs from the master's): it says why in one line and quits.
* ``lg_clock`` / ``lg_clock_echo`` (at connect, ``CLOCK_PINGS`` round trips): the master's wall clock
  against the worker's; the round trip with the least delay gives the offset (worker minus master,
  +/- half that round trip). A worker whose offset is larger than its round trip (and 1 ms) puts its
  records on the master's clock (``Anchor.follow``); the offsets go to the manifest (``workers``).
* ``lg_refuse`` (master -> worker): another loadgen version; the worker prints the line and exits 2.
* ``lg_drain`` / ``lg_drained`` (after the last step): each worker sends what it holds and answers
  once the master acknowledged all of it; the master waits for every worker (``DRAIN_S`` at most)
  before it ends them and reads the run directory.
* ``lg_ack`` (master -> worker): a batch of ``lg_records`` (numbered ``seq``) is on the master's disk.
  A worker keeps at most ``UNACKED_MAX`` batches unacknowledged (a slow master slows its reporting,
  it drops nothing), sends an unacknowledged one again after ``RESEND_S`` (the master keeps a batch
  once), and when the master goes silent for ``MASTER_SILENCE_S`` with users running it sends no
  new request (a master that died must not leave load generators hammering a server); if the
  master answers again it sends from the next step the master begins, never mid-step; if not, it
  exits 3 after ``--master-timeout``, writing what the master did not take to its own disk.

A worker started by ``loadgen ramp --workers N`` on the master's machine (``--direct``; not with
``LOADGEN_RECORDS_VIA_MASTER=1`` in its environment) writes its records straight into the run
directory, one ``write`` per request as in a single-process run, so a worker that dies loses nothing
it finished. A worker elsewhere (``loadgen worker --master HOST:PORT``) sends its records in the
0.25 s batches, acknowledged: one that dies loses at most what it had not yet sent. The master
notices a worker that stops sending heartbeats (Locust's own liveness check, about 3 s), records a
``worker_lost`` event, says so, and goes on or stops as ``--on-worker-loss`` says; the analysis marks
that step below plan (``analysis.worker_loss``).
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import gevent
import orjson
from locust.env import Environment

from loadgen import __version__
from loadgen.load.runtime import RunState, bind
from loadgen.rundir.clock import ANCHOR
from loadgen.rundir.records import JsonlAppender
from loadgen.spec.options import RampOptions

MSG_HELLO = "lg_hello"
MSG_CONFIG = "lg_config"
MSG_STEP = "lg_step"
MSG_RECORDS = "lg_records"
MSG_FATAL = "lg_fatal"
MSG_CLOCK = "lg_clock"
MSG_CLOCK_ECHO = "lg_clock_echo"
MSG_REFUSE = "lg_refuse"
MSG_ACK = "lg_ack"
MSG_READY = "lg_ready"
MSG_DRAIN = "lg_drain"
MSG_DRAINED = "lg_drained"
FLUSH_S = 0.25
CLOCK_PINGS = 5
UNACKED_MAX = 16  # batches a worker has in flight before it waits for the master's acks
RESEND_S = 5.0  # a batch not acknowledged this long is sent again
MASTER_SILENCE_S = 5.0  # five of the master's 1 s heartbeats missed: it is gone
DRAIN_S = 10.0  # the longest the master waits for the workers' last records
MAX_PENDING_LINES = 500_000  # records a worker holds for a master that is slow to take them
EXIT_REFUSED = 2
EXIT_MASTER_LOST = 3
USERS_PER_WORKER = 1_000_000  # user index offset per worker: no two users share a prompt stream


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class WorkerClock:
    """A worker's wall clock against the master's, from the round trip with the least delay."""

    offset_ns: int  # worker minus master
    rtt_ns: int

    @property
    def follows(self) -> bool:
        """Whether the worker moves its records onto the master's clock: only an offset the round
        trip can tell from zero (larger than the round trip and than 1 ms)."""
        return abs(self.offset_ns) > max(self.rtt_ns, 1_000_000)

    @classmethod
    def best(cls, pings: list[tuple[int, int, int]]) -> WorkerClock:
        """From (master send, worker time, master receive) triples."""
        t0, tw, t1 = min(pings, key=lambda p: p[2] - p[0])
        return cls(tw - (t0 + t1) // 2, t1 - t0)


def scenario_digest(path: str | None) -> str | None:
    """The sha256 of a scenario file (None: no scenario, or none at that path)."""
    if not path:
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


class MasterLink:
    """The master's side: checks and clocks each worker, hands out the config, relays steps,
    collects records and counts."""

    def __init__(self, env: Environment, state: RunState | None, config: dict[str, Any] | None, out: TextIO) -> None:
        """Register the handlers at once (before anything yields to the hub: a worker's hello can
        come in any time after); ``state``/``config`` may follow with ``bind``."""
        self.env, self.out = env, out
        self.appenders: dict[str, JsonlAppender] = {}
        self.known: set[str] = set()
        self.state: RunState | None = None
        self.config: dict[str, Any] | None = None
        self.events: JsonlAppender | None = None
        self.roster: dict[str, dict[str, Any]] = {}  # client id -> the worker as it joined
        self.refused: list[str] = []  # one line each
        self.on_lost: Callable[[str, int], None] | None = None  # (worker, step)
        self.lost_any = False  # a worker of this run stopped answering
        self._pings: dict[str, list[tuple[int, int, int]]] = {}
        self._hello: dict[str, dict[str, Any]] = {}
        self._batches: dict[str, set[int]] = {}  # worker -> the batch numbers written
        runner = env.runner
        assert runner is not None
        runner.register_message(MSG_RECORDS, self._on_records)
        runner.register_message(MSG_FATAL, self._on_fatal)
        runner.register_message(MSG_CLOCK_ECHO, self._on_clock_echo)
        runner.register_message(MSG_DRAINED, lambda environment, msg, **_: self._drained.add(msg.node_id))
        runner.register_message(MSG_READY, lambda environment, msg, **_: self._configured.add(msg.node_id))
        self._configured: set[str] = set()  # workers that took the run's config (its scenario checked)
        self._drained: set[str] = set()
        # a worker says hello once its handlers are in place (Locust's own connect handshake can
        # arrive before a worker has registered them)
        runner.register_message(MSG_HELLO, self._on_hello)
        if state is not None and config is not None:
            self.bind(state, config)

    def bind(self, state: RunState, config: dict[str, Any]) -> None:
        """Point the link at a (new) run: workers connected now get its config at once."""
        runner: Any = self.env.runner
        for app in self.appenders.values():
            app.close()
        self.appenders = {}
        self._batches = {}
        if self.events is not None:
            self.events.close()
        self.state, self.config = state, config
        self.lost_any = False
        self.events = JsonlAppender(state.run_dir / "events.jsonl")

        def relay(message: dict[str, Any]) -> None:
            if message.get("event") == "start":  # each worker's share of an open-loop step's arrivals
                message = {**message, "shares": self.shares()}
            runner.send_message(MSG_STEP, message)

        state.on_step = relay
        for client_id in sorted(self.known):
            self._on_connect(client_id)

    @property
    def ready(self) -> int:
        """Workers checked, clocked, given the run and ready to send it."""
        return len(self.known & self._configured)

    def _event(self, kind: str, **fields: Any) -> None:
        if self.events is not None:
            self.events.write({"t_ns": ANCHOR.now_wall_ns(), "src": "loadgen", "kind": kind, **fields})

    def _on_hello(self, environment: Environment, msg: Any, **_: Any) -> None:
        runner: Any = self.env.runner
        hello = dict(msg.data or {})
        version = hello.get("version")
        if version != __version__:
            why = (
                f"worker on {hello.get('host', '?')} runs loadgen {version or 'unknown'}, the master {__version__}: "
                "install the same version on every machine"
            )
            self._refuse(msg.node_id, why)
            runner.send_message(MSG_REFUSE, {"why": why}, client_id=msg.node_id)
            return
        self._hello[msg.node_id] = hello
        self._pings[msg.node_id] = []
        runner.send_message(MSG_CLOCK, {"t0": time.time_ns()}, client_id=msg.node_id)

    def _refuse(self, client_id: str, why: str) -> None:
        self.refused.append(why)
        self.out.write(f"\nrefused a worker: {why}\n")
        self._event("worker_refused", client_id=client_id, detail=why)

    def _on_clock_echo(self, environment: Environment, msg: Any, **_: Any) -> None:
        t1 = time.time_ns()
        pings = self._pings.get(msg.node_id)
        if pings is None:
            return
        pings.append((int(msg.data["t0"]), int(msg.data["tw"]), t1))
        runner: Any = self.env.runner
        if len(pings) < CLOCK_PINGS:
            runner.send_message(MSG_CLOCK, {"t0": time.time_ns()}, client_id=msg.node_id)
            return
        clock = WorkerClock.best(self._pings.pop(msg.node_id))
        hello = self._hello.pop(msg.node_id, {})
        worker = f"w{runner.get_worker_index(msg.node_id)}"
        self.roster[msg.node_id] = {
            "worker": worker,
            "host": hello.get("host"),
            "pid": hello.get("pid"),
            "version": hello.get("version"),
            "clock_offset_ns": clock.offset_ns,
            "clock_rtt_ns": clock.rtt_ns,
            "follows_master_clock": clock.follows,
        }
        self._event("worker_joined", **self.roster[msg.node_id])
        self._on_connect(msg.node_id)

    def _on_connect(self, client_id: str) -> None:
        runner: Any = self.env.runner
        index = runner.get_worker_index(client_id)
        self.known.add(client_id)
        if self.state is None or self.config is None:
            return  # no run yet: ``bind`` sends the config
        joined = self.roster.get(client_id, {})
        clock = {"offset_ns": joined.get("clock_offset_ns", 0), "follow": joined.get("follows_master_clock", False)}
        runner.send_message(MSG_CONFIG, {**self.config, "worker_index": index, "clock": clock}, client_id=client_id)
        if self.state.step_index >= 0 and self.state.step_plan is not None:
            from loadgen.load.runtime import plan_to_dict

            # a worker that joins mid-run learns the current step
            runner.send_message(
                MSG_STEP,
                {
                    "event": "start",
                    "step": self.state.step_index,
                    "t_ns": self.state.counters[-1].first_ns,
                    "plan": plan_to_dict(self.state.step_plan),
                    "shares": {},  # the others send this step's arrivals: from the next step on
                },
                client_id=client_id,
            )

    def drain(self, timeout_s: float = DRAIN_S) -> list[str]:
        """After the last step: ask every worker for what it still holds and wait until each says
        the master acknowledged all of it; the workers that did not say so in time."""
        runner: Any = self.env.runner
        self._drained = set()
        waiting = set(self.known)
        for client_id in sorted(waiting):
            runner.send_message(MSG_DRAIN, None, client_id=client_id)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not waiting <= self._drained | (waiting - self.known):
            gevent.sleep(0.05)
        return sorted(self.roster.get(c, {}).get("worker", c) for c in waiting - self._drained if c in self.known)

    def shares(self) -> dict[str, list[int]]:
        """Worker -> [rank, of]: the workers ready now, in index order; each sends the arrivals of an
        open-loop step whose number modulo ``of`` is its ``rank``, so that together they send the
        process asked for, once."""
        runner: Any = self.env.runner
        ready = sorted(self.known & self._configured, key=runner.get_worker_index)
        return {f"w{runner.get_worker_index(c)}": [k, len(ready)] for k, c in enumerate(ready)}

    def workers(self) -> list[dict[str, Any]]:
        """The workers that joined, in their index order (the manifest's ``workers``)."""
        return sorted(self.roster.values(), key=lambda w: int(str(w["worker"])[1:]))

    def _on_records(self, environment: Environment, msg: Any, **_: Any) -> None:
        if self.state is None:
            return
        data = msg.data
        worker = str(data.get("worker", msg.node_id))
        seq = data.get("seq")
        if seq is not None:
            runner: Any = self.env.runner
            runner.send_message(MSG_ACK, {"seq": seq}, client_id=msg.node_id)
            done = self._batches.setdefault(worker, set())
            if seq in done:
                return  # sent again before our ack reached the worker: kept once
            done.add(seq)
        for step, error_class, tokens, sent_ns in data.get("counts", ()):
            self.state.count(step, error_class, tokens, sent_ns)
        lines = data.get("lines")
        if lines:
            app = self.appenders.get(worker)
            if app is None:
                app = self.appenders[worker] = JsonlAppender(self.state.run_dir / f"requests-{worker}.jsonl")
            app.write_bytes("".join(lines).encode())
        samples = data.get("client")
        if samples:
            key = "client:" + worker
            app = self.appenders.get(key)
            if app is None:
                app = self.appenders[key] = JsonlAppender(self.state.run_dir / f"client-{worker}.jsonl")
            app.write_bytes("".join(samples).encode())

    def _on_fatal(self, environment: Environment, msg: Any, **_: Any) -> None:
        """A worker's first calls say the run cannot succeed: the master's state acts on it; or a
        worker refused the run (its scenario differs): say why, it leaves."""
        state, data = self.state, msg.data
        if data.get("kind") == "worker_refused":
            self.known.discard(msg.node_id)
            self.roster.pop(msg.node_id, None)
            self._refuse(msg.node_id, str(data.get("why")))
            return
        if state is None:
            return
        if data.get("kind") == "endpoint_missing" and state.on_endpoint_missing is not None:
            state.on_endpoint_missing(*data["args"])
        elif data.get("kind") == "refused" and state.on_refused is not None:
            from loadgen.load.refusal import Refusal

            state.on_refused(Refusal(**data["refusal"]))

    def watch(self) -> None:
        """Notice workers that stop answering, and those that come back (a greenlet for the run's
        length): a worker back sends again from the next step on (``WorkerLink._master_watch``)."""
        runner: Any = self.env.runner
        while True:
            gevent.sleep(1.0)
            alive = {c.id for c in runner.clients.all if c.state != "missing"}
            for client_id in sorted((alive & set(self.roster)) - self.known):
                self.known.add(client_id)
                if self.state is not None:
                    worker, step = self.roster[client_id]["worker"], self.state.step_index
                    self._event("worker_back", worker=worker, client_id=client_id, step=step)
                    self.out.write(f"\nworker {worker} answers again during step {step + 1}: it sends from the next\n")
            for client_id in sorted(self.known - alive):
                self.known.discard(client_id)
                index = runner.worker_indexes.get(client_id)
                if self.events is None or self.state is None:
                    continue
                step = self.state.step_index
                self.lost_any = True
                self._event("worker_lost", worker=f"w{index}", client_id=client_id, step=step)
                self.out.write(f"\nworker w{index} stopped answering during step {step + 1}\n")
                if self.on_lost is not None:
                    self.on_lost(f"w{index}", step)

    def short_handed(self) -> bool:
        """A worker of this run was lost and every live worker has spawned its users: a step's load
        is what they run (Locust gives the lost worker's users to nobody until the next change of
        load, or until it drops the worker a minute later)."""
        runner: Any = self.env.runner
        return bool(self.lost_any) and not runner.clients.spawning and runner.spawning_completed

    def close(self) -> None:
        for app in self.appenders.values():
            app.close()
        if self.events is not None:
            self.events.close()


def start_local_workers(n: int, port: int, run_dir: Path) -> list[subprocess.Popen[bytes]]:
    """``n`` worker processes on this machine, their output in ``worker-<i>.log`` of the run dir."""
    procs = []
    for i in range(n):
        log = open(run_dir / f"worker-{i}.log", "wb")  # noqa: SIM115  (the child owns it)
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "loadgen.run.worker",
                    "--master",
                    f"127.0.0.1:{port}",
                    "--direct",
                    "--spill-dir",
                    str(run_dir),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        )
        log.close()
    return procs


class WorkerLink:
    """A worker's side: builds its run state from the master's config, follows steps, reports.

    ``direct``: the worker shares the master's disk (``loadgen ramp --workers N``) and writes its
    records into the run directory itself; otherwise they go to the master in acknowledged batches,
    and what the master never took is written under ``spill_dir`` when it goes silent."""

    def __init__(self, env: Environment, direct: bool = False, spill_dir: Path | None = None) -> None:
        self.env = env
        self.direct = direct and not os.environ.get("LOADGEN_RECORDS_VIA_MASTER")
        self.spill_dir = spill_dir if spill_dir is not None else Path.cwd()
        self.state: RunState | None = None
        self.counts: list[tuple[int, str | None, int, int]] = []
        self.lines: list[str] | None = None
        self.client: list[str] = []  # self-watch lines for the master (records not direct)
        self.worker = "w?"
        self.run_id = ""
        self.watch: Any = None
        self.seq = 0
        self.unacked: dict[int, tuple[float, dict[str, Any]]] = {}  # seq -> (sent at, batch)
        self.exit_code = 0
        self.master_back_ns: int | None = None  # when a silent master answered again
        self.followed_ns = 0  # the clock offset this process follows
        self.last_heartbeat = time.monotonic()
        runner = env.runner
        assert runner is not None
        runner.register_message(MSG_CONFIG, self._on_config)
        runner.register_message(MSG_STEP, self._on_step)
        runner.register_message(MSG_CLOCK, self._on_clock)
        runner.register_message(MSG_ACK, self._on_ack)
        runner.register_message(MSG_DRAIN, lambda environment, msg, **_: gevent.spawn(self._drain))
        runner.register_message(MSG_REFUSE, lambda environment, msg, **_: self._leave(str(msg.data["why"])))
        env.events.heartbeat_received.add_listener(self._on_heartbeat)
        self._flusher = gevent.spawn(self._flush_loop)
        self._watchdog = gevent.spawn(self._master_watch)
        runner.send_message(MSG_HELLO, {"version": __version__, "host": socket.gethostname(), "pid": os.getpid()})
        env.events.test_stop.add_listener(self._on_test_stop)
        env.events.quitting.add_listener(lambda **_: self.flush())

    def _on_heartbeat(self, **_: Any) -> None:
        self.last_heartbeat = time.monotonic()

    def _on_clock(self, environment: Environment, msg: Any, **_: Any) -> None:
        runner: Any = environment.runner
        runner.send_message(MSG_CLOCK_ECHO, {"t0": msg.data["t0"], "tw": time.time_ns()})

    def _on_ack(self, environment: Environment, msg: Any, **_: Any) -> None:
        self.unacked.pop(int(msg.data["seq"]), None)

    def _leave(self, why: str, code: int = EXIT_REFUSED) -> None:
        """Refused by the master, or refusing its run: say why and end the process."""
        sys.stderr.write(f"error: {why}\n")
        self.exit_code = code
        runner: Any = self.env.runner

        def leave() -> None:
            self.env.events.quitting.fire(environment=self.env, reverse=True)  # Locust tells the master
            runner.quit()

        gevent.spawn_later(0.2, leave)  # the fatal message goes out first

    def _on_test_stop(self, **_: Any) -> None:
        self.flush()
        # The users have stopped (Locust's stop already gave them stop_timeout). Its worker then sleeps
        # stop_timeout again before it reads the next message, so a master's quit would wait the whole
        # drain time (60 s by default) and the ramp's report with it; the next spawn sets it again.
        self.env.stop_timeout = 0.0

    def _on_config(self, environment: Environment, msg: Any, **_: Any) -> None:
        from loadgen.load.compose import compose
        from loadgen.load.selfwatch import SelfWatch

        if self.state is not None:  # a new run (the web UI's next Start): close the last one
            self.flush()
            self.state.close()
        if self.watch is not None:
            self.watch.stop()
            self.watch = None
        cfg = dict(msg.data)
        index = int(cfg.pop("worker_index"))
        run_dir = Path(cfg.pop("run_dir"))
        self.run_id = run_dir.name
        clock = cfg.pop("clock", None) or {}
        digest = cfg.pop("scenario_sha256", None)
        opts = replace(RampOptions.from_manifest(cfg.pop("options")), api_key=os.environ.get("OPENAI_API_KEY") or None)
        self.worker = f"w{index}"
        why = other_scenario(opts.scenario, digest)
        if why is not None:
            runner_: Any = environment.runner
            runner_.send_message(MSG_FATAL, {"kind": "worker_refused", "why": why})
            self._leave(why)
            return
        offset = int(clock.get("offset_ns", 0)) if clock.get("follow") else 0
        ANCHOR.follow(offset - self.followed_ns)  # onto the master's clock (once, whatever the runs)
        self.followed_ns = offset
        shared = self.direct and run_dir.is_dir() and os.access(run_dir, os.W_OK)
        sink = None
        if not shared:
            self.lines = []
            lines = self.lines
            sink = lambda line: lines.append(line.decode())  # noqa: E731
        state = compose(
            opts,
            "worker",
            plan=[],  # the master's steps arrive as messages
            run_dir=run_dir if shared else Path("."),
            worker=self.worker,
            record_sink=sink,
            step_log=False,
            user_offset=index * USERS_PER_WORKER,
        ).state
        state.on_count = lambda step, error_class, tokens, sent_ns: self.counts.append(
            (step, error_class, tokens, sent_ns)
        )
        runner: Any = environment.runner
        state.on_endpoint_missing = lambda *args: runner.send_message(
            MSG_FATAL, {"kind": "endpoint_missing", "args": list(args)}
        )
        state.on_refused = lambda refusal: runner.send_message(
            MSG_FATAL, {"kind": "refused", "refusal": refusal.fields()}
        )
        bind(environment, state)
        self.state = state
        runner.send_message(MSG_READY, {"worker": self.worker})
        # its own CPU and loop lag: into the run directory, or to the master with the records (the
        # "load generator bound" verdict judges every worker, wherever it runs)
        client = self.client
        client.clear()
        self.watch = SelfWatch(
            run_dir,
            self.worker,
            lambda: state.in_flight,
            sink=None if shared else lambda line: client.append(line.decode()),
        )
        self.watch.start()

    def _on_step(self, environment: Environment, msg: Any, **_: Any) -> None:
        if self.state is None:
            return
        data = msg.data
        if data.get("event") == "start" and "shares" in data:
            share = data["shares"].get(self.worker)
            self.state.open_share = (int(share[0]), int(share[1])) if share else None
        back = self.master_back_ns
        if data.get("event") == "start" and self.state.benched and back is not None and int(data["t_ns"]) > back:
            self.state.benched = False  # back with the master, from a step it began since
        self.state.apply_step_message(data)

    def flush(self) -> None:
        """Send the counts and records taken since the last batch, unless the master has not yet
        acknowledged ``UNACKED_MAX`` batches (they wait here, up to ``MAX_PENDING_LINES`` records)."""
        runner = self.env.runner
        if runner is None:
            return
        now = time.monotonic()
        for seq, (sent, batch) in list(self.unacked.items()):
            if now - sent > RESEND_S:
                self.unacked[seq] = (now, batch)
                runner.send_message(MSG_RECORDS, batch)
        if (not self.counts and not self.lines and not self.client) or len(self.unacked) >= UNACKED_MAX:
            if self.lines is not None and len(self.lines) > MAX_PENDING_LINES:
                self._spill("the master took no records for too long")
            if len(self.client) > MAX_PENDING_LINES:
                del self.client[: len(self.client) // 2]  # the oldest self-watch samples; never records
            return
        data: dict[str, Any] = {"worker": self.worker, "seq": self.seq, "counts": self.counts}
        self.counts = []
        if self.lines:
            data["lines"] = self.lines[:]
            self.lines.clear()
        if self.client:
            data["client"] = self.client[:]
            self.client.clear()
        self.unacked[self.seq] = (now, data)
        self.seq += 1
        runner.send_message(MSG_RECORDS, data)

    def _drain(self) -> None:
        """Send everything held; say so once the master acknowledged all of it."""
        deadline = time.monotonic() + DRAIN_S
        self.flush()
        while (self.unacked or self.counts or self.lines) and time.monotonic() < deadline:
            gevent.sleep(0.05)
            self.flush()
        if not self.unacked:
            runner: Any = self.env.runner
            runner.send_message(MSG_DRAINED, {"worker": self.worker})

    def spill_left(self) -> None:
        """At exit: what the master never acknowledged goes to this machine's disk, said where."""
        lost = self.exit_code == EXIT_MASTER_LOST
        self._spill("master lost" if lost else "the run ended before the master took them")

    def _flush_loop(self) -> None:
        while True:
            gevent.sleep(FLUSH_S)
            self.flush()

    def _undelivered(self) -> list[str]:
        out = [line for _, batch in sorted(self.unacked.items()) for line in batch[1].get("lines", ())]
        self.unacked.clear()
        if self.lines:
            out += self.lines
            self.lines.clear()
        return out

    def _spill(self, why: str) -> Path | None:
        """Write the records the master did not take to this machine's disk; say where."""
        lines = self._undelivered()
        if not lines:
            return None
        path = self.spill_dir / f"undelivered-{self.run_id or 'run'}-{self.worker}.jsonl"
        with path.open("a", encoding="utf-8") as f:
            f.write("".join(lines))
        sys.stderr.write(f"{why}: {len(lines)} records the master did not take are in {path}\n")
        return path

    def _master_watch(self) -> None:
        """Stop sending when the master goes silent with users running: a load generator left
        hammering a server after its master died is the worst failure this tool can have. The
        users stay (Locust's master still counts them) but send nothing new; the worker waits for
        the master (Locust's own master timeout, ``--master-timeout``, after which it exits 3 and the
        calls still in flight are cancelled) and, if it comes back, sends again from the first step
        the master begins after that, never in the middle of one."""
        runner: Any = self.env.runner
        while True:
            gevent.sleep(0.5)
            silent = time.monotonic() - self.last_heartbeat
            state = self.state
            if state is None or not (runner.user_count or self.unacked or self.lines):
                continue
            if state.benched:
                if silent < MASTER_SILENCE_S and self.master_back_ns is None:
                    self.master_back_ns = ANCHOR.now_wall_ns()
                    self.exit_code = 0
                    sys.stderr.write("the master answers again: this worker sends again from its next step\n")
                continue
            if silent < MASTER_SILENCE_S:
                continue
            sys.stderr.write(
                f"error: the master sent no heartbeat for {silent:.0f} s: this worker sends nothing more\n"
            )
            self.exit_code = EXIT_MASTER_LOST
            self.master_back_ns = None
            state.benched = True


def other_scenario(path: str | None, digest: str | None) -> str | None:
    """Why this worker cannot run the master's scenario (another file at that path, or none); None
    when it has the same file (or the run has no scenario)."""
    mine = scenario_digest(path)
    if digest is None or mine == digest:
        return None
    how = "is not on this machine" if mine is None else f"differs (sha256 {mine[:12]} here, {digest[:12]} there)"
    return f"worker on {socket.gethostname()}: scenario {path} {how}: copy the master's file to this path"


def master_config(run_dir: Path, options: dict[str, Any]) -> dict[str, Any]:
    """What every worker gets: the run directory, the options (no secrets) and the scenario file's
    digest, which a worker checks against its own copy."""
    return {
        "run_dir": str(run_dir.resolve()),
        "options": orjson.loads(orjson.dumps(options, default=str)),
        "scenario_sha256": scenario_digest(options.get("scenario")),
    }


__all__ = [
    "MasterLink",
    "WorkerClock",
    "WorkerLink",
    "asdict",
    "free_port",
    "master_config",
    "other_scenario",
    "scenario_digest",
    "start_local_workers",
]
