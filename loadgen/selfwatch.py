"""The load generator measures itself: CPU use and event-loop lag, into ``client-<worker>.jsonl``.

A load generator that cannot keep up measures itself, not the server: its reads are late, so TTFT
and ITL grow, and a closed loop sends less than asked. A greenlet wakes every ``interval_s`` and
records how late the wake-up was (gevent hub lag: every greenlet's timestamps are late by about
as much) and the process's CPU share since the last sample. The analysis flags a step where either
shows saturation as INVALID ("load generator bound"); the report says to add workers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import gevent

from loadgen.clock import ANCHOR
from loadgen.records import JsonlAppender


class SelfWatch:
    def __init__(self, run_dir: Path, worker: str, in_flight: Callable[[], int], interval_s: float = 0.25) -> None:
        self.out = JsonlAppender(run_dir / f"client-{worker}.jsonl")
        self.worker = worker
        self.in_flight = in_flight
        self.interval_s = interval_s
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill()
            self._greenlet = None
        self.out.close()

    def _run(self) -> None:
        interval = self.interval_s
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        while True:
            before = time.perf_counter()
            gevent.sleep(interval)
            now = time.perf_counter()
            lag_ms = max(0.0, (now - before - interval) * 1000.0)
            cpu = time.process_time()
            cpu_frac = (cpu - cpu0) / max(now - t0, 1e-9)
            cpu0, t0 = cpu, now
            self.out.write(
                {
                    "t_ns": ANCHOR.now_wall_ns(),
                    "src": "client",
                    "worker": self.worker,
                    "pid": os.getpid(),
                    "cpu_frac": round(cpu_frac, 4),
                    "loop_lag_ms": round(lag_ms, 3),
                    "in_flight": self.in_flight(),
                }
            )
