"""A deployment's ramp on the virtual clock: what ``loadgen ramp`` would measure, without HTTP.

``run_point`` drives the simulator's engine (the same ``Engine`` ``loadgen sim`` serves over HTTP)
with a closed loop of ``concurrency`` users (each sends its next request ``client_gap_s`` after its
last one ended) or an open loop of Poisson arrivals at ``rate`` requests/s, every request
``input_tokens`` long asking for ``output_tokens`` (``ignore_eos``: it always runs to the limit).
It measures the window ``[warmup_s, warmup_s + window_s]`` as a ramp step measures its steady
window: output tokens that arrived in it per second, and each request *sent* in it (the analysis'
rule) with its TTFT, TPOT ((E2E - TTFT) / (output tokens - 1)) and E2E; the server's KV-cache fill
and queue sampled at every engine step; the mean per-GPU power from the engine's energy counter.

Nothing here sleeps or opens a socket: a minute of a deployment's serving costs tens of
milliseconds to a few seconds of CPU, depending on how many engine steps it takes.
"""

from __future__ import annotations

import heapq
from array import array
from dataclasses import dataclass, field

import numpy as np

from loadgen.sim.engine import Engine, SimRequest, natural_length
from loadgen.sim.profile import Profile


@dataclass
class PointResult:
    """What one load measured over its window (times in seconds; the figures a ramp step reports)."""

    window_s: float
    output_tokens: int  # tokens that arrived in the window
    requests_done: int  # requests that ended in the window
    energy_j: float  # per GPU, over the window
    busy_s: float
    retracted: int
    ttft_s: list[float] = field(default_factory=list)  # requests sent in the window that finished
    tpot_s: list[float] = field(default_factory=list)
    # gaps between successive chunks of the requests sent in the window (ITL, DESIGN.md's definition)
    itl_s: array = field(default_factory=lambda: array("d"))
    e2e_s: list[float] = field(default_factory=list)
    e2e_done_s: list[float] = field(default_factory=list)  # requests that ended in the window
    ttft_done_s: list[float] = field(default_factory=list)
    kv_usage: list[float] = field(default_factory=list)  # per engine step in the window
    queued: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    sent_in_window: int = 0
    unfinished: int = 0  # sent in the window, not finished when the run stopped
    cache_hit_rate: float = 0.0

    @property
    def output_tok_s(self) -> float:
        return self.output_tokens / self.window_s

    @property
    def power_w(self) -> float:
        """Mean per-GPU power over the window."""
        return self.energy_j / self.window_s


def run_point(
    profile: Profile,
    *,
    concurrency: int | None = None,
    rate: float | None = None,
    input_tokens: int = 1000,
    output_tokens: int = 512,
    warmup_s: float = 20.0,
    window_s: float = 60.0,
    drain_s: float = 0.0,
    client_gap_s: float = 0.001,
    stagger_s: float = 0.0,
    source: str = "default",
    seed: int = 0,
    shared_prefix_tokens: int | None = None,
    natural_lengths: bool = False,
) -> PointResult:
    """Run one load (``concurrency`` users, or Poisson arrivals at ``rate``) and measure its window.

    ``drain_s``: how long after the window the requests sent in it may go on finishing (a ramp's
    drain; 0 stops at the window's end, as the calibration loops do). Closed loop: user ``i``
    starts at ``i * stagger_s``. ``natural_lengths``: a request stops on its own at a log-normal
    length (the profile's ``natural_len_median``/``sigma``, drawn from ``seed``) capped at
    ``output_tokens``. ``shared_prefix_tokens=N``: every prompt's first ``N`` tokens are the same
    blocks (a system prompt), the rest unique; None gives prompts no blocks at all."""
    if (concurrency is None) == (rate is None):
        raise ValueError("give a concurrency or a rate, not both")
    engine = Engine(profile, seed=seed)
    lengths = np.random.default_rng(seed)
    gaps = np.random.default_rng(seed + 1)
    server = profile.server
    block = engine.cache.block_tokens if engine.cache is not None else 0
    n_blocks = input_tokens // block if block else 0
    n_shared = min(n_blocks, (shared_prefix_tokens or 0) // block) if block else 0
    t_win = warmup_s + window_s
    t_end = t_win + drain_s
    arrivals: list[tuple[float, int]] = []
    if concurrency is not None:
        arrivals = [(i * stagger_s, i) for i in range(concurrency)]
    elif rate is not None and rate > 0:
        arrivals = [(float(gaps.exponential(1.0 / rate)), 0)]
    heapq.heapify(arrivals)
    out = PointResult(window_s=window_s, output_tokens=0, requests_done=0, energy_j=0.0, busy_s=0.0, retracted=0)
    in_window: set[str] = set()
    last_chunk: dict[str, float] = {}
    seq = 0
    e0 = b0 = None
    retracted0 = 0
    now = 0.0
    while True:
        nxt = engine.next_event_s
        t_arr = arrivals[0][0] if arrivals else None
        if nxt is None and t_arr is None:
            break
        if t_arr is not None and (nxt is None or t_arr <= nxt):
            now = t_arr
            if now > t_end:
                break
            while arrivals and arrivals[0][0] <= now:
                at, user = heapq.heappop(arrivals)
                if at > t_win:
                    continue  # a ramp's step sends nothing after its window; what was sent drains
                target, reason = output_tokens, "length"
                if natural_lengths:
                    natural = natural_length(lengths, server.natural_len_median, server.natural_len_sigma)
                    if natural < output_tokens:
                        target, reason = natural, "stop"
                req = SimRequest(
                    rid=f"u{user}-{seq}",
                    prompt_tokens=input_tokens,
                    max_new_tokens=output_tokens,
                    target_tokens=target,
                    stop_reason=reason,
                    source=source,
                )
                if shared_prefix_tokens is not None and block:
                    # shared blocks are keys 1..n_shared; the request's own blocks are unique keys
                    own = (seq + 1) << 24
                    req.block_hashes = [i + 1 if i < n_shared else own + i for i in range(n_blocks)]
                seq += 1
                req.context = user
                if warmup_s <= now <= t_win:
                    in_window.add(req.rid)
                engine.submit(req, now)
                if rate is not None:
                    heapq.heappush(arrivals, (now + float(gaps.exponential(1.0 / rate)), 0))
            if not engine.busy:
                engine.advance(now)
            continue
        assert nxt is not None
        now = nxt
        if now > t_end or (now > t_win and not in_window and drain_s > 0):
            break  # past the window, and every request sent in it has ended
        if e0 is None and now >= warmup_s:
            e0, b0 = engine.energy_at(warmup_s), engine.totals_at(warmup_s)[1]
            retracted0 = engine.counters.retracted_reqs
        emissions = engine.advance(now)
        window = warmup_s <= now <= t_win
        if window:
            pool = engine.pool_tokens
            out.kv_usage.append(engine.used_tokens / pool if pool else 0.0)
            out.queued.append(len(engine.waiting))
            out.running.append(len(engine.running))
        for em in emissions:
            req = em.req
            if window:
                out.output_tokens += em.tokens
            if req.rid in in_window and em.tokens > 0:
                before = last_chunk.get(req.rid)
                if before is not None:
                    out.itl_s.append(now - before)
                last_chunk[req.rid] = now
            if not em.finished:
                continue
            ttft = req.first_token_s - req.arrival_s
            e2e = req.finish_s - req.arrival_s
            if window:
                out.requests_done += 1
                out.e2e_done_s.append(e2e)
                out.ttft_done_s.append(ttft)
            if req.rid in in_window:
                in_window.discard(req.rid)
                last_chunk.pop(req.rid, None)
                out.ttft_s.append(ttft)
                out.e2e_s.append(e2e)
                if req.generated > 1:
                    out.tpot_s.append((req.finish_s - req.first_token_s) / (req.generated - 1))
            if concurrency is not None:
                heapq.heappush(arrivals, (now + client_gap_s, int(req.context)))  # type: ignore[call-overload]
    end = min(now, t_win)
    out.window_s = max(1e-9, end - warmup_s)
    if e0 is None or b0 is None:
        e0, b0 = 0.0, 0.0
    e1, b1 = engine.totals_at(end)
    out.energy_j = e1 - e0
    out.busy_s = b1 - b0
    out.retracted = engine.counters.retracted_reqs - retracted0
    out.sent_in_window = len(out.ttft_s) + len(in_window)
    out.unfinished = len(in_window)
    out.cache_hit_rate = engine.counters.cached_tokens / max(1, engine.counters.prefix_queries)
    return out
