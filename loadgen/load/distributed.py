"""Several load-generating processes on Locust's own master/worker mode.

The master runs the load shape, writes steps.jsonl and the manifest, starts the telemetry side
process and renders the report; workers run the users. Four custom messages:

* ``lg_hello`` (worker -> master, once its handlers are registered) and ``lg_config`` (the
  master's answer): what to send and where (the ramp's options,
  no secrets: a worker takes its API key from its own environment, ``OPENAI_API_KEY``), the run
  directory, and the worker's index.
* ``lg_step`` (master -> workers): every step transition as it happens, so all workers switch
  steps together and stamp their records with the same step.
* ``lg_records`` (worker -> master, every 0.25 s and at the end): live counts for the progress
  line and ``--requests-per-step``, and, for a worker that cannot reach the run directory (another
  machine), the records themselves, which the master appends to ``requests-<worker>.jsonl``.
* ``lg_fatal`` (worker -> master, at once): the worker's first calls say the run cannot succeed (a
  404 for the endpoint, or every call refused alike: ``loadgen.load.refusal``); the master stops the
  ramp as a single-process run does.

A worker that can write the run directory (``loadgen ramp --workers N`` on the master's machine; not
with ``LOADGEN_RECORDS_VIA_MASTER=1`` in its environment) writes its records straight into
the run directory, one ``write`` per request as in a single-process run, so a worker that dies
loses nothing it finished. A remote worker's records travel in the 0.25 s batches: one that dies
loses at most its last batch. The master notices a worker that stops sending heartbeats (Locust's
own liveness check, about 3 s), records a ``worker_lost`` event and says so; Locust moves that
worker's users to the others.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, TextIO

import gevent
import orjson
from locust.env import Environment

from loadgen.load.runtime import RunState, bind
from loadgen.rundir.clock import ANCHOR
from loadgen.rundir.records import JsonlAppender
from loadgen.spec.options import RampOptions

MSG_HELLO = "lg_hello"
MSG_CONFIG = "lg_config"
MSG_STEP = "lg_step"
MSG_RECORDS = "lg_records"
MSG_FATAL = "lg_fatal"
FLUSH_S = 0.25
USERS_PER_WORKER = 1_000_000  # user index offset per worker: no two users share a prompt stream


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


class MasterLink:
    """The master's side: hands out the config, relays steps, collects records and counts."""

    def __init__(self, env: Environment, state: RunState | None, config: dict[str, Any] | None, out: TextIO) -> None:
        """Register the handlers at once (before anything yields to the hub: a worker's hello can
        come in any time after); ``state``/``config`` may follow with ``bind``."""
        self.env, self.out = env, out
        self.appenders: dict[str, JsonlAppender] = {}
        self.known: set[str] = set()
        self.state: RunState | None = None
        self.config: dict[str, Any] | None = None
        self.events: JsonlAppender | None = None
        runner = env.runner
        assert runner is not None
        runner.register_message(MSG_RECORDS, self._on_records)
        runner.register_message(MSG_FATAL, self._on_fatal)
        # a worker asks for its config once its handlers are in place (Locust's own connect
        # handshake can arrive before a worker has registered them)
        runner.register_message(MSG_HELLO, lambda environment, msg, **_: self._on_connect(msg.node_id))
        if state is not None and config is not None:
            self.bind(state, config)

    def bind(self, state: RunState, config: dict[str, Any]) -> None:
        """Point the link at a (new) run: workers connected now get its config at once."""
        runner: Any = self.env.runner
        for app in self.appenders.values():
            app.close()
        self.appenders = {}
        if self.events is not None:
            self.events.close()
        self.state, self.config = state, config
        self.events = JsonlAppender(state.run_dir / "events.jsonl")
        state.on_step = lambda message: runner.send_message(MSG_STEP, message)
        for client_id in sorted(self.known):
            self._on_connect(client_id)

    def _on_connect(self, client_id: str) -> None:
        runner: Any = self.env.runner
        index = runner.get_worker_index(client_id)
        self.known.add(client_id)
        if self.state is None or self.config is None:
            return  # no run yet: ``bind`` sends the config
        runner.send_message(MSG_CONFIG, {**self.config, "worker_index": index}, client_id=client_id)
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
                },
                client_id=client_id,
            )

    def _on_records(self, environment: Environment, msg: Any, **_: Any) -> None:
        if self.state is None:
            return
        data = msg.data
        for step, error_class, tokens, sent_ns in data.get("counts", ()):
            self.state.count(step, error_class, tokens, sent_ns)
        lines = data.get("lines")
        if lines:
            worker = str(data.get("worker", msg.node_id))
            app = self.appenders.get(worker)
            if app is None:
                app = self.appenders[worker] = JsonlAppender(self.state.run_dir / f"requests-{worker}.jsonl")
            app.write_bytes("".join(lines).encode())
        samples = data.get("client")
        if samples:
            worker = str(data.get("worker", msg.node_id))
            key = "client:" + worker
            app = self.appenders.get(key)
            if app is None:
                app = self.appenders[key] = JsonlAppender(self.state.run_dir / f"client-{worker}.jsonl")
            app.write_bytes("".join(samples).encode())

    def _on_fatal(self, environment: Environment, msg: Any, **_: Any) -> None:
        """A worker's first calls say the run cannot succeed: the master's state acts on it."""
        state, data = self.state, msg.data
        if state is None:
            return
        if data.get("kind") == "endpoint_missing" and state.on_endpoint_missing is not None:
            state.on_endpoint_missing(*data["args"])
        elif data.get("kind") == "refused" and state.on_refused is not None:
            from loadgen.load.refusal import Refusal

            state.on_refused(Refusal(**data["refusal"]))

    def watch(self) -> None:
        """Notice workers that stop answering (a greenlet for the run's length)."""
        runner: Any = self.env.runner
        while True:
            gevent.sleep(1.0)
            alive = {c.id for c in runner.clients.all if c.state != "missing"}
            for client_id in sorted(self.known - alive):
                self.known.discard(client_id)
                index = runner.worker_indexes.get(client_id)
                if self.events is None or self.state is None:
                    continue
                self.events.write(
                    {
                        "t_ns": ANCHOR.now_wall_ns(),
                        "src": "loadgen",
                        "kind": "worker_lost",
                        "worker": f"w{index}",
                        "client_id": client_id,
                        "step": self.state.step_index,
                    }
                )
                self.out.write(f"\nworker w{index} stopped answering; Locust moves its users to the others\n")

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
                [sys.executable, "-m", "loadgen.load.worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        )
        log.close()
    return procs


class WorkerLink:
    """A worker's side: builds its run state from the master's config, follows steps, reports."""

    def __init__(self, env: Environment) -> None:
        self.env = env
        self.state: RunState | None = None
        self.counts: list[tuple[int, str | None, int, int]] = []
        self.lines: list[str] | None = None
        self.worker = "w?"
        self.watch: Any = None
        runner = env.runner
        assert runner is not None
        runner.register_message(MSG_CONFIG, self._on_config)
        runner.register_message(MSG_STEP, self._on_step)
        self._flusher = gevent.spawn(self._flush_loop)
        runner.send_message(MSG_HELLO, {})
        env.events.test_stop.add_listener(self._on_test_stop)
        env.events.quitting.add_listener(lambda **_: self.flush())

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
        opts = replace(RampOptions.from_manifest(cfg.pop("options")), api_key=os.environ.get("OPENAI_API_KEY") or None)
        self.worker = f"w{index}"
        shared = run_dir.is_dir() and os.access(run_dir, os.W_OK) and not os.environ.get("LOADGEN_RECORDS_VIA_MASTER")
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
        if shared:
            self.watch = SelfWatch(run_dir, self.worker, lambda: state.in_flight)
            self.watch.start()

    def _on_step(self, environment: Environment, msg: Any, **_: Any) -> None:
        if self.state is not None:
            self.state.apply_step_message(msg.data)

    def flush(self) -> None:
        if not self.counts and not self.lines:
            return
        data: dict[str, Any] = {"worker": self.worker, "counts": self.counts}
        self.counts = []
        if self.lines:
            data["lines"] = self.lines[:]
            self.lines.clear()
        runner = self.env.runner
        if runner is not None:
            runner.send_message(MSG_RECORDS, data)

    def _flush_loop(self) -> None:
        while True:
            gevent.sleep(FLUSH_S)
            self.flush()


def master_config(run_dir: Path, options: dict[str, Any]) -> dict[str, Any]:
    return {"run_dir": str(run_dir.resolve()), "options": orjson.loads(orjson.dumps(options, default=str))}


__all__ = ["MasterLink", "WorkerLink", "asdict", "free_port", "master_config", "start_local_workers"]
