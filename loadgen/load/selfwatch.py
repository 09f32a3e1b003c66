"""The load generator measures itself: CPU use and event-loop lag, into ``client-<worker>.jsonl``.

A load generator that cannot keep up measures itself, not the server: its reads are late, so TTFT
and ITL grow, and a closed loop sends less than asked. A greenlet wakes every few milliseconds and
records how late each wake-up was (gevent hub lag: a read that becomes ready waits about as long)
and, every ``interval_s``, the process's CPU share since the last sample. The analysis flags a step where either
shows saturation as INVALID ("load generator bound"); the report says to add workers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import gevent
import orjson

from loadgen.rundir.clock import ANCHOR
from loadgen.rundir.records import LAG_EDGES_MS, JsonlAppender, RunDirError


class SelfWatch:
    """A heartbeat every ``beat_s`` measures how late the hub wakes it (the loop lag: how long a
    ready read can wait); every ``interval_s`` one line goes to ``client-<worker>.jsonl`` with the
    CPU share since the last line, the lag of that moment (``loop_lag_ms``), the largest lag of
    the interval (``lag_max_ms``) and the lag histogram of its beats (``lag_hist``, counts per
    ``LAG_EDGES_MS`` bucket), so the analysis sees every hold longer than a beat, not one sample in
    fifty."""

    def __init__(
        self,
        run_dir: Path,
        worker: str,
        in_flight: Callable[[], int],
        interval_s: float = 0.25,
        beat_s: float = 0.005,
        sink: Callable[[bytes], None] | None = None,
    ) -> None:
        """``sink``: where each line goes instead of the file (a worker on another machine sends its
        lines to the master with its records, and the master writes them to this file)."""
        self.out: JsonlAppender | None = None if sink is not None else JsonlAppender(run_dir / f"client-{worker}.jsonl")
        self.sink = sink
        self.worker = worker
        self.in_flight = in_flight
        self.interval_s = interval_s
        self.beat_s = beat_s
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill()
            self._greenlet = None
        if self.out is not None:
            self.out.close()

    def _run(self) -> None:
        beat = self.beat_s
        perf = time.perf_counter
        cpu0 = time.process_time()
        t0 = perf()
        edges = LAG_EDGES_MS
        nb = len(edges)
        while True:
            hist = [0] * (nb + 1)
            lag_max = lag_ms = 0.0
            end = t0 + self.interval_s
            now = t0
            while now < end:
                before = perf()
                gevent.sleep(beat)
                now = perf()
                lag_ms = max(0.0, (now - before - beat) * 1000.0)
                if lag_ms > lag_max:
                    lag_max = lag_ms
                k = 0
                while k < nb and lag_ms > edges[k]:
                    k += 1
                hist[k] += 1
            cpu = time.process_time()
            cpu_frac = (cpu - cpu0) / max(now - t0, 1e-9)
            cpu0, t0 = cpu, now
            try:
                self._line(cpu_frac, lag_ms, lag_max, hist)
            except RunDirError:
                return  # the run directory cannot be written; the ramp stops on its own records

    def _line(self, cpu_frac: float, lag_ms: float, lag_max: float, hist: list[int]) -> None:
        line = {
            "t_ns": ANCHOR.now_wall_ns(),
            "src": "client",
            "worker": self.worker,
            "pid": os.getpid(),
            "cpu_frac": round(cpu_frac, 4),
            "loop_lag_ms": round(lag_ms, 3),
            "lag_max_ms": round(lag_max, 3),
            "lag_hist": hist,
            "in_flight": self.in_flight(),
        }
        if self.out is not None:
            self.out.write(line)
        elif self.sink is not None:
            self.sink(orjson.dumps(line) + b"\n")
