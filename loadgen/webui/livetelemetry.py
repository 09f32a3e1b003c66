"""The run's side streams read as they grow: ``samples.jsonl``, ``events.jsonl`` and each
``client-<worker>.jsonl``, kept for the step joins and drawn as the live page's time series.

``LiveTelemetry.read`` takes what was appended since the last read (``tail.JsonlTail``). It keeps
every sample timed at or after ``samples_from_ns`` (``forget_before`` drops older ones;
``samples_between`` reads a stretch older than that back from samples.jsonl), every event and every
client line, for the report's enrichers to join with a step.

Time series (for the charts; at most one point a second, ``SERIES_POINTS`` each): GPU power per GPU
and in total (the sum of each GPU's last reading, as the analysis sums it), the power limits; the
server's KV-cache fill, queue, running requests and preemptions (retractions) since the first
sample; each worker's CPU share and event-loop lag from its ``client-<worker>.jsonl``. ``charts``
gives them as the payload holds them, timed in seconds since the run's start. Nothing here imports
Flask or Locust.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from loadgen.analysis.values import number
from loadgen.rundir.samples import Sample, samples_of
from loadgen.webui.tail import JsonlTail, json_lines

SERIES_POINTS = 1800  # points kept per time series (30 min at one a second)
LOG_LINES = 50  # the latest server log matches kept
GPU_STALE_NS = 5_000_000_000  # a GPU reading older than this is left out of the live total

I64 = npt.NDArray[np.int64]


Series = deque[tuple[float, float]]


def _series() -> Series:
    return deque(maxlen=SERIES_POINTS)


def _append_thinned(series: Series, t: float, v: float) -> None:
    """Keep at most one point a second: a new point within a second of the last replaces it."""
    if series and t - series[-1][0] < 1.0:
        if t >= series[-1][0]:
            series[-1] = (series[-1][0], v)
        return
    series.append((t, v))


@dataclass
class _Worker:
    """One load-generator process's own load, from its ``client-<worker>.jsonl``."""

    cpu: Series = field(default_factory=_series)
    lag: Series = field(default_factory=_series)
    last: dict[str, Any] = field(default_factory=dict)


class LiveTelemetry:
    """The samples, events and client lines of one run directory so far, and their time series."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._sample_tail = JsonlTail(run_dir / "samples.jsonl")
        self._event_tail = JsonlTail(run_dir / "events.jsonl")
        self._client_tails: dict[str, JsonlTail] = {}
        self.first_sample_ns: int | None = None  # the time of the first sample ever read
        self.samples: list[Sample] = []
        self.events: list[dict[str, Any]] = []
        self.logs: deque[dict[str, Any]] = deque(maxlen=LOG_LINES)
        self.log_counts: dict[str, int] = {}
        self.power: dict[str, Series] = {}
        self.power_total: Series = _series()
        self.power_limit_w: dict[str, float] = {}
        self._gpu_last: dict[str, tuple[int, float]] = {}
        self.kv: Series = _series()
        self.queue: Series = _series()
        self.running: Series = _series()
        self.preemptions: Series = _series()
        self._preempt: tuple[float, float] | None = None  # (last counter value, increase so far)
        self.workers: dict[str, _Worker] = {}
        self._client_lines: dict[str, list[dict[str, Any]]] = {}
        self.server_seen = False
        self._sample_t: I64 = np.empty(0, dtype=np.int64)
        self._sample_index: list[tuple[int, int, int, int]] = []  # per read: first, last t_ns; offset, bytes
        self.samples_from_ns = 0  # memory holds every sample timed at or after this
        self.latest_sample_ns = 0
        self.latest_client_ns = 0

    def read(self) -> None:
        """Take the samples, events and client lines appended since the last read."""
        data, start = self._sample_tail.read_block()
        times = [self._sample(s) for s in samples_of(json_lines(data))]
        if times:
            self._sample_index.append((min(times), max(times), start, len(data)))
        for e in self._event_tail.read():
            self._event(e)
        for path in sorted(self.run_dir.glob("client-*.jsonl")):
            tail = self._client_tails.setdefault(path.name, JsonlTail(path))
            for row in tail.read():
                self._client(path.name, row)

    def _sample(self, s: Sample) -> int:
        """Keep one telemetry sample and add it to the series; its time."""
        t = s["t_ns"]
        self.samples.append(s)
        self.latest_sample_ns = max(self.latest_sample_ns, t)
        if self.first_sample_ns is None:
            self.first_sample_ns = t
        self._chart(s, t)
        return t

    def _chart(self, s: Sample, t: int) -> None:
        """Add a sample to the page's time series (power, KV fill, queue, preemptions)."""
        if s["src"] == "gpu":
            key = f"gpu{s['gpu']}"
            limit = number(s["power_limit_w"])
            if limit is not None:
                self.power_limit_w[key] = limit
            power = number(s["power_w"])
            if power is None:
                return
            _append_thinned(self.power.setdefault(key, _series()), t / 1e9, power)
            self._gpu_last[key] = (t, power)
            total = sum(w for t_g, w in self._gpu_last.values() if t - t_g <= GPU_STALE_NS)
            _append_thinned(self.power_total, t / 1e9, total)
        else:
            self.server_seen = True
            gauges = ((s.get("kv_usage"), self.kv), (s.get("queued"), self.queue), (s.get("running"), self.running))
            for v, series in gauges:
                if (n := number(v)) is not None:
                    _append_thinned(series, t / 1e9, n)
            count = number(s.get("preemptions_total"))
            if count is not None:
                if self._preempt is None:
                    self._preempt = (count, 0.0)
                else:
                    last, so_far = self._preempt
                    # a counter that went down restarted from zero: its value is what it counted since
                    self._preempt = (count, so_far + (count - last if count >= last else count))
                _append_thinned(self.preemptions, t / 1e9, self._preempt[1])

    def _event(self, e: dict[str, Any]) -> None:
        if not isinstance(e.get("t_ns"), int):
            return
        self.events.append(e)
        if e.get("src") == "log" and e.get("pattern"):
            pattern = str(e["pattern"])
            self.log_counts[pattern] = self.log_counts.get(pattern, 0) + 1
            self.logs.append(
                {
                    "t_ns": e["t_ns"],
                    "pattern": pattern,
                    "severity": e.get("severity"),
                    "line": e.get("line"),
                }
            )

    def _client(self, file: str, row: dict[str, Any]) -> None:
        t = row.get("t_ns")
        if not isinstance(t, int):
            return
        name = str(row.get("worker") or file.removeprefix("client-").removesuffix(".jsonl"))
        w = self.workers.setdefault(name, _Worker())
        self.latest_client_ns = max(self.latest_client_ns, t)
        self._client_lines.setdefault(file, []).append(row)
        cpu, lag = number(row.get("cpu_frac")), number(row.get("lag_max_ms", row.get("loop_lag_ms")))
        if cpu is not None:
            _append_thinned(w.cpu, t / 1e9, cpu)
        if lag is not None:
            # the largest lag of each second, not the last one's: a hold between samples shows
            if w.lag and t / 1e9 - w.lag[-1][0] < 1.0:
                lag = max(lag, w.lag[-1][1])
            _append_thinned(w.lag, t / 1e9, lag)
        w.last = {
            "t_ns": t,
            "cpu_frac": cpu,
            "loop_lag_ms": number(row.get("loop_lag_ms")),
            "lag_max_ms": number(row.get("lag_max_ms")),
            "in_flight": row.get("in_flight"),
        }

    def client_rows(self) -> list[dict[str, Any]]:
        """Every client line, in the report's order (file name, then line)."""
        out: list[dict[str, Any]] = []
        for name in sorted(self._client_lines):
            out += self._client_lines[name]
        return out

    def _sample_times(self) -> I64:
        if len(self._sample_t) != len(self.samples):
            new = np.fromiter((s["t_ns"] for s in self.samples[len(self._sample_t) :]), dtype=np.int64)
            self._sample_t = np.concatenate([self._sample_t, new])
        return self._sample_t

    def samples_between(self, lo: int, hi: int) -> list[Sample]:
        """The samples timed in ``[lo, hi]``, in file order: from memory, or read back from
        samples.jsonl for a stretch older than what memory keeps (``forget_before``)."""
        if lo >= self.samples_from_ns:
            t = self._sample_times()
            return [self.samples[i] for i in np.flatnonzero((t >= lo) & (t <= hi))]
        out: list[Sample] = []
        with self._sample_tail.path.open("rb") as f:
            for first, last, offset, size in self._sample_index:
                if last < lo or first > hi:
                    continue
                f.seek(offset)
                out += [s for s in samples_of(json_lines(f.read(size))) if lo <= s["t_ns"] <= hi]
        return out

    def forget_before(self, horizon_ns: int) -> None:
        """Drop the samples timed before ``horizon_ns`` from memory (``samples_between`` reads
        them back from samples.jsonl when asked for)."""
        keep = np.flatnonzero(self._sample_times() >= horizon_ns)
        self.samples = [self.samples[i] for i in keep]
        self._sample_t = self._sample_t[keep]
        self.samples_from_ns = horizon_ns

    def charts(self, t0_ns: int, worker_requests: dict[str, list[int]]) -> dict[str, Any]:
        """The payload's time series, server log matches and processes (with ``worker_requests``,
        each process's [ok, failed] records); times in seconds since ``t0_ns``."""

        def pts(series: Series, digits: int) -> list[list[float]]:
            return [[round(t - t0_ns / 1e9, 2), round(v, digits)] for t, v in series]

        return {
            "power": {k: pts(v, 1) for k, v in sorted(self.power.items())},
            "power_total": pts(self.power_total, 1),
            "power_limit_w": dict(sorted(self.power_limit_w.items())),
            "power_limit_total_w": sum(self.power_limit_w.values()) if self.power_limit_w else None,
            "kv": pts(self.kv, 4),
            "queue": pts(self.queue, 1),
            "running": pts(self.running, 1),
            "preemptions": pts(self.preemptions, 1),
            "server_samples": self.server_seen,
            "logs": [{**e, "t_s": round(e["t_ns"] / 1e9 - t0_ns / 1e9, 2)} for e in self.logs],
            "log_counts": dict(self.log_counts),
            "workers": self._workers_payload(pts, worker_requests),
        }

    def _workers_payload(
        self, pts: Callable[[Series, int], list[list[float]]], worker_requests: dict[str, list[int]]
    ) -> dict[str, dict[str, Any]]:
        """Each process: its last self-measurement, its CPU and lag series, the requests it recorded
        (a process seen only in records, or only in its client file, is listed too)."""
        out: dict[str, dict[str, Any]] = {}
        for name in sorted(set(self.workers) | set(worker_requests)):
            w = self.workers.get(name) or _Worker()
            ok, failed = worker_requests.get(name, [0, 0])
            last = w.last or {
                "t_ns": None,
                "cpu_frac": None,
                "loop_lag_ms": None,
                "lag_max_ms": None,
                "in_flight": None,
            }
            out[name] = {
                **last,
                "cpu": pts(w.cpu, 4),
                "lag_ms": pts(w.lag, 2),
                "requests_ok": ok,
                "requests_failed": failed,
            }
        return out
