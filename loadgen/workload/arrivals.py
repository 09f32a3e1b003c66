"""Open-loop arrival processes: when each request is *intended* to be sent.

Pure functions of their inputs (rate, seed, trace, start time): nothing here reads a clock or
sleeps. The open-loop user waits until each intended time and sends; latency is measured from the
intended time, so a load generator that falls behind cannot hide the queueing it caused
(coordinated omission).

- :func:`poisson_offsets`: exponential gaps with mean ``1 / rate``;
- :func:`gamma_offsets`: gamma gaps with mean ``1 / rate`` and coefficient of variation ``cv``
  (``cv = 1`` is Poisson, ``cv > 1`` bursty, ``cv < 1`` smoother than Poisson). The gamma shape is
  ``1 / cv**2``; note vLLM's ``--burstiness`` is that shape, i.e. ``1 / cv**2``, not ``cv``;
- :func:`trace_offsets`: a trace's own times multiplied by ``time_scale`` (0.5 replays twice as
  fast), starting ``offset_s`` into the trace.

Offsets are seconds since the start of the schedule; :func:`schedule_ns` turns them into
wall-clock nanoseconds up to a duration.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from typing import TypeVar

from loadgen.workload.datasets import Trace, TraceRow

T = TypeVar("T")


def poisson_offsets(rate: float, rng: random.Random) -> Iterator[float]:
    """Endless arrival offsets (s) of a Poisson process of ``rate`` requests/s."""
    if rate <= 0:
        raise ValueError(f"arrival rate must be > 0 requests/s, got {rate}")
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        yield t


def gamma_offsets(rate: float, cv: float, rng: random.Random) -> Iterator[float]:
    """Endless arrival offsets (s) with gamma gaps: mean ``1 / rate``, coefficient of variation ``cv``."""
    if rate <= 0:
        raise ValueError(f"arrival rate must be > 0 requests/s, got {rate}")
    if cv <= 0:
        raise ValueError(f"burstiness (coefficient of variation) must be > 0, got {cv}")
    shape = 1.0 / (cv * cv)
    scale = 1.0 / (rate * shape)
    t = 0.0
    while True:
        t += rng.gammavariate(shape, scale)
        yield t


def trace_offsets(trace: Trace, time_scale: float = 1.0, offset_s: float = 0.0) -> Iterator[tuple[float, TraceRow]]:
    """The trace's requests from ``offset_s`` on, each with its offset (s) scaled by ``time_scale``."""
    if time_scale <= 0:
        raise ValueError(f"time_scale must be > 0, got {time_scale}")
    for row in trace.rows:
        if row.offset_s >= offset_s:
            yield (row.offset_s - offset_s) * time_scale, row


def schedule_ns(start_ns: int, offsets: Iterable[tuple[float, T]], duration_s: float) -> Iterator[tuple[int, T]]:
    """``(start_ns + offset, item)`` for every offset below ``duration_s`` (offsets must not decrease)."""
    for offset_s, item in offsets:
        if offset_s >= duration_s:
            return
        yield start_ns + round(offset_s * 1e9), item
