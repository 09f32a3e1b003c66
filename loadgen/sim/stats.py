"""The simulated engine's statistics, which :mod:`loadgen.sim.prom` renders as ``/metrics``.

:class:`Counters` only grow; :class:`Gauges` hold what the engine published at its last log point
(SGLang refreshes them there only); a :class:`Histogram` is cumulative, Prometheus-style, over the
bucket bounds below (seconds: TTFT and queue time, inter-token latency, end-to-end latency).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass


class Histogram:
    """Cumulative Prometheus-style histogram."""

    __slots__ = ("bounds", "count", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float, n: int = 1) -> None:
        self.counts[bisect_left(self.bounds, value)] += n
        self.total += value * n
        self.count += n


TTFT_BOUNDS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    15.0,
    20.0,
    30.0,
    60.0,
)
ITL_BOUNDS = (
    0.002,
    0.005,
    0.01,
    0.015,
    0.02,
    0.025,
    0.03,
    0.035,
    0.04,
    0.06,
    0.08,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.0,
)
E2E_BOUNDS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0, 600.0, 1200.0)


@dataclass
class Counters:
    """Monotonic totals since start."""

    requests: int = 0
    finished: int = 0
    aborted: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    retracted_reqs: int = 0
    preempted_reqs: int = 0  # SGLang's priority preemption: running requests sent back for a waiting one
    retracted_input_tokens: int = 0
    retracted_output_tokens: int = 0
    spec_cycles: int = 0  # request-cycles (drafts)
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0
    finished_stop: int = 0
    finished_length: int = 0
    prefill_steps: int = 0
    cached_tokens: int = 0  # prompt tokens served from the prefix cache (first scheduling)
    prefix_queries: int = 0  # prompt tokens looked up in the prefix cache (first scheduling)
    decode_steps: int = 0
    busy_s: float = 0.0


@dataclass
class Gauges:
    """Values as last published (SGLang refreshes them at log points only)."""

    num_running_reqs: int = 0
    num_queue_reqs: int = 0
    num_used_tokens: int = 0
    token_usage: float = 0.0
    gen_throughput: float = 0.0
    spec_accept_length: float = 0.0
    spec_accept_rate: float = 0.0
    num_retracted_reqs: int = 0
    cache_hit_rate: float = 0.0
