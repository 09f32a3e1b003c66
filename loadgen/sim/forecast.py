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
from collections.abc import Sequence
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
    itl_s: array[float] = field(default_factory=lambda: array("d"))
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
    (out,) = run_ramp(
        profile,
        [concurrency] if concurrency is not None else None,
        [rate] if rate is not None else None,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        warmup_s=warmup_s,
        window_s=window_s,
        drain_s=drain_s,
        client_gap_s=client_gap_s,
        stagger_s=stagger_s,
        source=source,
        seed=seed,
        shared_prefix_tokens=shared_prefix_tokens,
        natural_lengths=natural_lengths,
    )
    return out


def run_ramp(
    profile: Profile,
    concurrencies: list[int] | None = None,
    rates: list[float] | None = None,
    *,
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
    client_gaps_s: Sequence[float] | None = None,
) -> list[PointResult]:
    """Run the loads one after another on one engine, as ``loadgen ramp`` runs its steps: step
    ``k`` starts where step ``k-1``'s window ended, with its warm-up and its window; a closed loop's
    users carry over (the new ones start at the step's start, ``stagger_s`` apart; a smaller step
    retires the last ones after their request in flight), an open loop switches rate. Each step
    measures its own window, and a request belongs to the step in whose window it was sent. After
    the last window nothing is sent, and the requests sent in the windows finish within ``drain_s``.
    ``client_gaps_s``: a closed loop's user waits a turn drawn from these (a client's measured turns,
    seeded) instead of ``client_gap_s``: a real client's jitter of a few ms is what moves its users'
    phases, so that some prefills run inside the others' decodes. Else as :func:`run_point`."""
    closed = concurrencies is not None
    loads: list[float] = [float(c) for c in concurrencies] if closed else list(rates or [])  # type: ignore[union-attr]
    if not loads or (closed and rates):
        raise ValueError("give concurrencies or rates, not both")
    ramp = _Ramp(
        profile,
        loads,
        closed,
        seed=seed,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        warmup_s=warmup_s,
        window_s=window_s,
        drain_s=drain_s,
        client_gap_s=client_gap_s,
        stagger_s=stagger_s,
        source=source,
        shared_prefix_tokens=shared_prefix_tokens,
        natural_lengths=natural_lengths,
        client_gaps_s=client_gaps_s,
    )
    ramp.run()
    return ramp.results()


class _Ramp:
    """One :func:`run_ramp` on the virtual clock: the engine, the users or arrivals that feed it,
    and what each step's window measured. :meth:`run` moves the clock from event to event (an
    engine step ending, a request due, a step starting) until the last window and its drain end;
    :meth:`results` then closes each step's figures."""

    def __init__(
        self,
        profile: Profile,
        loads: list[float],
        closed: bool,
        *,
        seed: int,
        input_tokens: int,
        output_tokens: int,
        warmup_s: float,
        window_s: float,
        drain_s: float,
        client_gap_s: float,
        stagger_s: float,
        source: str,
        shared_prefix_tokens: int | None,
        natural_lengths: bool,
        client_gaps_s: Sequence[float] | None,
    ) -> None:
        self.loads = loads
        self.closed = closed
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.warmup_s = warmup_s
        self.drain_s = drain_s
        self.client_gap_s = client_gap_s
        self.stagger_s = stagger_s
        self.source = source
        self.shared_prefix_tokens = shared_prefix_tokens
        self.natural_lengths = natural_lengths
        self.client_gaps_s = client_gaps_s
        self.engine = engine = Engine(profile, seed=seed)
        self.lengths = np.random.default_rng(seed)
        self.gaps = np.random.default_rng(seed + 1)
        self.turns = np.random.default_rng(seed + 2)
        self.server = profile.server
        self.block = block = engine.cache.block_tokens if engine.cache is not None else 0
        self.n_blocks = input_tokens // block if block else 0
        self.n_shared = min(self.n_blocks, (shared_prefix_tokens or 0) // block) if block else 0
        self.period = period = warmup_s + window_s
        self.n_steps = n_steps = len(loads)
        self.t_last = n_steps * period  # the last window's end: nothing is sent after it
        self.t_end = self.t_last + drain_s
        self.outs = [
            PointResult(window_s=window_s, output_tokens=0, requests_done=0, energy_j=0.0, busy_s=0.0, retracted=0)
            for _ in loads
        ]
        self.owner: dict[str, int] = {}  # request id -> the step whose window it was sent in
        self.last_chunk: dict[str, float] = {}
        # (energy, busy, retracted) at each window's start, and the same at its end
        self.marks: list[tuple[float, float, int] | None] = [None] * n_steps
        self.ends: list[tuple[float, float, int] | None] = [None] * n_steps
        self.arrivals: list[tuple[float, int]] = []
        self.active: set[int] = set()  # closed loop: users with a request in flight or about to send
        self.step = -1
        self.seq = 0
        self.now = 0.0

    def _step_at(self, t: float) -> int:
        return min(self.n_steps - 1, int(t // self.period))

    def _in_window(self, t: float, k: int) -> bool:
        return k * self.period + self.warmup_s <= t <= (k + 1) * self.period

    def _start_step(self, k: int) -> None:
        t0 = k * self.period
        if self.closed:
            # the step's users not already active start now, stagger_s apart (ids >= the step's
            # concurrency retire when they would next send)
            new = [i for i in range(int(self.loads[k])) if i not in self.active]
            for j, i in enumerate(new):
                heapq.heappush(self.arrivals, (t0 + j * self.stagger_s, i))
                self.active.add(i)
        else:
            # the open loop's next arrival at the new rate (a pending one of the old rate is dropped)
            self.arrivals.clear()
            if self.loads[k] > 0:
                heapq.heappush(self.arrivals, (t0 + float(self.gaps.exponential(1.0 / self.loads[k])), 0))

    def run(self) -> None:
        """Advance the clock to the next event, again and again, until nothing is left to do."""
        engine = self.engine
        arrivals = self.arrivals
        n_steps, period = self.n_steps, self.period
        self._start_step(0)
        self.step = 0
        while True:
            nxt = engine.next_event_s
            t_arr = arrivals[0][0] if arrivals else None
            t_step = (self.step + 1) * period if self.step + 1 < n_steps else None
            candidates = [t for t in (nxt, t_arr, t_step) if t is not None]
            if not candidates:
                break
            t_next = min(candidates)
            self._close_windows(t_next)
            if (
                t_step is not None
                and t_next == t_step
                and (t_arr is None or t_step <= t_arr)
                and (nxt is None or t_step <= nxt)
            ):
                self.step += 1
                self._start_step(self.step)
                continue
            if t_arr is not None and (nxt is None or t_arr <= nxt):
                self.now = t_arr
                if t_arr > self.t_end:
                    break
                self._send_due(t_arr)
                if not engine.busy:
                    engine.advance(t_arr)
                continue
            assert nxt is not None
            self.now = nxt
            if nxt > self.t_end or (nxt > self.t_last and not self.owner and self.drain_s > 0):
                break  # past the last window, and every request sent in a window has ended
            self._end_engine_step(nxt)

    def _close_windows(self, t_next: float) -> None:
        """Record the totals at the end of each window ``t_next`` passes (the engine keeps ~5 s of history)."""
        for k in range(self.n_steps):
            w1 = (k + 1) * self.period
            if self.ends[k] is None and t_next >= w1:
                self.ends[k] = (*self.engine.totals_at(w1), self.engine.counters.retracted_reqs)

    def _send_due(self, now: float) -> None:
        """Submit every request due at or before ``now`` (an open loop schedules its next arrival)."""
        arrivals, loads, engine = self.arrivals, self.loads, self.engine
        output_tokens = self.output_tokens
        while arrivals and arrivals[0][0] <= now:
            at, user = heapq.heappop(arrivals)
            if at > self.t_last:
                continue  # a ramp sends nothing after its last window; what was sent drains
            k = self._step_at(at)
            if self.closed and user >= int(loads[k]):
                self.active.discard(user)
                continue  # this step has fewer users: this one retires
            target, reason = output_tokens, "length"
            if self.natural_lengths:
                server = self.server
                natural = natural_length(self.lengths, server.natural_len_median, server.natural_len_sigma)
                if natural < output_tokens:
                    target, reason = natural, "stop"
            req = SimRequest(
                rid=f"u{user}-{self.seq}",
                prompt_tokens=self.input_tokens,
                max_new_tokens=output_tokens,
                target_tokens=target,
                stop_reason=reason,
                source=self.source,
            )
            if self.shared_prefix_tokens is not None and self.block:
                # shared blocks are keys 1..n_shared; the request's own blocks are unique keys
                own = (self.seq + 1) << 24
                n_shared = self.n_shared
                req.block_hashes = [i + 1 if i < n_shared else own + i for i in range(self.n_blocks)]
            self.seq += 1
            req.context = user
            if self._in_window(now, k):
                self.owner[req.rid] = k
            engine.submit(req, now)
            if not self.closed:
                heapq.heappush(arrivals, (now + float(self.gaps.exponential(1.0 / loads[k])), 0))

    def _end_engine_step(self, now: float) -> None:
        """The engine's step ends at ``now``: sample the server if in a window, record what it emitted."""
        engine = self.engine
        k = self._step_at(now)
        w0 = k * self.period + self.warmup_s
        if self.marks[k] is None and now >= w0:
            self.marks[k] = (engine.energy_at(w0), engine.totals_at(w0)[1], engine.counters.retracted_reqs)
        emissions = engine.advance(now)
        window = self._in_window(now, k)
        out = self.outs[k]
        if window:
            pool = engine.pool_tokens
            out.kv_usage.append(engine.used_tokens / pool if pool else 0.0)
            out.queued.append(len(engine.waiting))
            out.running.append(len(engine.running))
        outs, owner, last_chunk = self.outs, self.owner, self.last_chunk
        for em in emissions:
            req = em.req
            if window:
                out.output_tokens += em.tokens
            mine = owner.get(req.rid)
            if mine is not None and em.tokens > 0:
                before = last_chunk.get(req.rid)
                if before is not None:
                    outs[mine].itl_s.append(now - before)
                last_chunk[req.rid] = now
            if not em.finished:
                continue
            ttft = req.first_token_s - req.arrival_s
            e2e = req.finish_s - req.arrival_s
            if window:
                out.requests_done += 1
                out.e2e_done_s.append(e2e)
                out.ttft_done_s.append(ttft)
            if mine is not None:
                del owner[req.rid]
                last_chunk.pop(req.rid, None)
                sent = outs[mine]
                sent.ttft_s.append(ttft)
                sent.e2e_s.append(e2e)
                if req.generated > 1:
                    sent.tpot_s.append((req.finish_s - req.first_token_s) / (req.generated - 1))
            if self.closed:
                gaps_s = self.client_gaps_s
                gap = gaps_s[int(self.turns.integers(len(gaps_s)))] if gaps_s else self.client_gap_s
                heapq.heappush(self.arrivals, (now + gap, int(req.context)))  # type: ignore[call-overload]

    def results(self) -> list[PointResult]:
        """Each step's figures over its window (cut short where the run stopped inside it)."""
        engine, now = self.engine, self.now
        for k, out in enumerate(self.outs):
            w0, w1 = k * self.period + self.warmup_s, (k + 1) * self.period
            end = min(now, w1)
            out.window_s = max(1e-9, end - w0)
            e0, b0, r0 = self.marks[k] or (0.0, 0.0, engine.counters.retracted_reqs)
            e1, b1, r1 = self.ends[k] or (*engine.totals_at(end), engine.counters.retracted_reqs)
            if end > w0:
                out.energy_j = e1 - e0
                out.busy_s = b1 - b0
            out.retracted = r1 - r0
            open_k = sum(1 for v in self.owner.values() if v == k)
            out.sent_in_window = len(out.ttft_s) + open_k
            out.unfinished = open_k
            out.cache_hit_rate = engine.counters.cached_tokens / max(1, engine.counters.prefix_queries)
        return self.outs
