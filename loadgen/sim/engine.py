"""The simulated inference engine: continuous batching over a KV token pool, on an injected clock.

Time is an input. :meth:`Engine.submit` and :meth:`Engine.advance` take ``now`` (seconds on any
monotonic clock); :attr:`Engine.next_event_s` says when the running step ends. The HTTP server
drives it on ``perf_counter`` and sleeps until ``next_event_s``; tests drive it on a virtual clock
by jumping straight there, with no sleeping and no sockets.

A scheduler decides what each step holds and what it commits: SGLang's (:mod:`loadgen.sim.sched_sglang`,
prefill or decode batches, admission that reserves output tokens, retraction) or vLLM's
(:mod:`loadgen.sim.sched_vllm`, one mixed forward under a token budget, preemption), by
``server.engine``. The engine owns what both share: the queues, the KV pool and prefix cache, a
request's tokens and finish, speculative decoding's draws (:mod:`loadgen.sim.acceptance`), the
statistics (:mod:`loadgen.sim.stats`) and the energy account. Step times come from the step model
(:mod:`loadgen.sim.model`) or a profile's fixed timing (:mod:`loadgen.sim.fixed_timing`).

Prefix cache (SGLang's RadixAttention; off with ``disable_radix_cache``): a waiting request's
prompt is matched against cached blocks (:mod:`loadgen.sim.prefix`) when it is first scheduled,
at most up to the last full block before its final token (one token is always computed). Matched
blocks are locked and only the rest is prefilled, so the prefill step is shorter (its attention
still reads the cached prefix). When the prompt has been prefilled its full blocks join the cache;
when the request ends they stay there, evictable, followed by the blocks of its output (named by
content through the request's ``continued_block_hashes`` hook, so the next turn of a conversation
hits them). Cached blocks share the KV pool with running
requests: free = pool - private request tokens - cached tokens; admission counts evictable blocks
as free (SGLang's ``available_size() + evictable_size()``) and allocation evicts least recently used
unlocked blocks when the free part is short. ``used_tokens`` (token usage, ``#token``) is SGLang's
``pool - (free + evictable)``: tokens of running requests, shared cached blocks counted once.

Gauges (running, queued, token usage, throughput, acceptance length) are refreshed the way SGLang
refreshes them: at each prefill batch and every ``decode_log_interval`` decode steps, together with
the ``Prefill batch`` / ``Decode batch`` log lines.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from loadgen.sim.acceptance import class_cdfs
from loadgen.sim.fixed_timing import FixedStepModel
from loadgen.sim.memory import MemoryPlan, memory_plan
from loadgen.sim.model import StepCost, StepModel
from loadgen.sim.prefix import PrefixCache
from loadgen.sim.profile import Profile
from loadgen.sim.sched_sglang import SglangScheduler
from loadgen.sim.sched_vllm import VllmScheduler
from loadgen.sim.seq import (
    ABORTED,
    FINISHED,
    RUNNING,
    WAITING,
    Emission,
    LogFn,
    RejectError,
    SimRequest,
    Step,
)
from loadgen.sim.stats import E2E_BOUNDS, ITL_BOUNDS, TTFT_BOUNDS, Counters, Gauges, Histogram

__all__ = [
    "ABORTED",
    "FINISHED",
    "RUNNING",
    "WAITING",
    "Emission",
    "Engine",
    "RejectError",
    "SimRequest",
    "natural_length",
]


class Engine:
    """Continuous-batching engine. Not thread-safe; one caller drives it."""

    def __init__(self, profile: Profile, *, seed: int = 0, log: LogFn | None = None) -> None:
        self.profile = profile
        self.model = StepModel(profile)
        self.timing: StepModel | FixedStepModel = (
            FixedStepModel(profile.timing, self.model) if profile.timing else self.model
        )
        self.plan: MemoryPlan = memory_plan(profile)
        self.pool_tokens = self.plan.kv_pool_tokens if profile.timing is None else max(self.plan.kv_pool_tokens, 1)
        self.rng = np.random.default_rng(seed)
        self.log = log or (lambda line: None)
        self.max_running = profile.max_running_requests
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.requests: dict[str, SimRequest] = {}
        self._private = 0  # KV tokens held by requests outside the prefix cache
        s = profile.server
        self.cache: PrefixCache | None = (
            PrefixCache(s.prefix_block_tokens) if not s.disable_radix_cache and s.prefix_block_tokens > 0 else None
        )
        self.current: Step | None = None
        self.counters = Counters()
        self.gauges = Gauges()
        self.ttft = Histogram(TTFT_BOUNDS)
        self.itl = Histogram(ITL_BOUNDS)
        self.e2e = Histogram(E2E_BOUNDS)
        self.queue_time = Histogram(TTFT_BOUNDS)
        self.spec = profile.spec if profile.spec.enabled else None
        self.n_v = profile.verify_width
        self._cdfs: dict[str, np.ndarray] = class_cdfs(self.spec) if self.spec is not None else {}
        # energy / busy accounting per GPU: (time, energy_j, busy_s) at step boundaries
        self.energy_j = 0.0
        self._acct_t: float | None = None
        self.history: deque[tuple[float, float, float]] = deque()
        # interval stats for the Decode batch line
        self._log_t: float | None = None
        self._log_tokens = 0
        self._log_cycles = 0
        self._log_committed = 0
        self._log_retracted = 0
        self.last_cost: StepCost | None = None
        self._aborted_now: list[SimRequest] = []
        # disaggregated serving's decode side: requests whose prompt KV (and first token) came from a
        # prefill server, waiting for a place in the running batch (submit_transferred)
        self.transferred: deque[SimRequest] = deque()
        self._emitted_now: list[Emission] = []
        # decode steps that nothing can change (no request waiting, none finishing before the last)
        # run as one coalesced step whose end the caller can pull in with interrupt(): the fleet's
        # many replicas; off for the HTTP server, predict and the twin (their step-by-step gauges,
        # log lines and ITL samples are what they report)
        self.coalesce = False
        # vLLM's V1 scheduler when the deployment is served by vLLM; else SGLang's
        self.scheduler: SglangScheduler | VllmScheduler = (
            VllmScheduler(self) if s.engine == "vllm" else SglangScheduler(self)
        )

    # -- submission -----------------------------------------------------------------------------

    def check(self, prompt_tokens: int, max_new_tokens: int | None) -> None:
        """Raise :class:`RejectError` if the request cannot be accepted (context, queue limits)."""
        ctx = self.profile.context_length
        if prompt_tokens >= ctx:
            raise RejectError(
                400,
                f"The input ({prompt_tokens} tokens) is longer than the model's context length ({ctx} tokens).",
                "BadRequestError",
            )
        if max_new_tokens is not None and prompt_tokens + max_new_tokens > ctx:
            raise RejectError(
                400,
                f"Requested token count exceeds the model's maximum context length of {ctx} tokens. "
                f"You requested a total of {prompt_tokens + max_new_tokens} tokens: {prompt_tokens} tokens "
                f"from the input messages and {max_new_tokens} tokens for the completion. Please reduce "
                "the number of tokens in the input messages or the completion to fit within the limit.",
                "BadRequestError",
            )
        limit = self.profile.server.max_queued_requests
        if limit > 0 and len(self.waiting) >= limit:
            raise RejectError(503, "The request queue is full.", "ServiceUnavailableError")

    def submit(self, req: SimRequest, now: float) -> None:
        """Queue a request (call :meth:`check` first). Call :meth:`advance` afterwards if idle."""
        req.arrival_s = now
        req.state = WAITING
        self.enqueue(req)
        self.requests[req.rid] = req
        self.counters.requests += 1
        self.counters.prompt_tokens += req.prompt_tokens

    def submit_transferred(self, req: SimRequest, now: float) -> None:
        """Queue a request whose prompt was prefilled elsewhere (disaggregated serving): its KV and its
        first token arrive now. It joins the running batch without a prefill when a slot and the pool
        allow (SGLang's scheduler only: the fleet's decode pools); call :meth:`advance` if idle."""
        req.arrival_s = now
        req.state = WAITING
        self.transferred.append(req)
        self.requests[req.rid] = req
        self.counters.requests += 1
        self.counters.prompt_tokens += req.prompt_tokens

    def rank(self, req: SimRequest) -> tuple[int, float]:
        """Where a request stands under the priority policy: its priority (the lower first, or the
        higher with ``low_priority_values_first`` off, as SGLang by default), then its arrival."""
        sign = 1 if self.profile.server.low_priority_values_first else -1
        return (sign * req.priority, req.arrival_s)

    @property
    def by_priority(self) -> bool:
        return self.profile.server.scheduling_policy == "priority"

    def enqueue(self, req: SimRequest, front: bool = False) -> None:
        """Into the waiting queue: at its end (or front: a preempted request, first come first
        served), or under the priority policy at its rank (vLLM's heap of (priority, arrival))."""
        if self.by_priority:
            key = self.rank(req)
            k = len(self.waiting)
            while k > 0 and self.rank(self.waiting[k - 1]) > key:
                k -= 1
            self.waiting.insert(k, req)
        elif front:
            self.waiting.appendleft(req)
        else:
            self.waiting.append(req)

    def abort(self, rid: str, now: float, message: str = "") -> SimRequest | None:
        """Drop a request (client went away). Its KV is freed; no emission follows."""
        req = self.requests.pop(rid, None)
        if req is None:
            return None
        if req.state == WAITING:
            try:
                self.waiting.remove(req)
            except ValueError:
                pass
        elif req.state == RUNNING:
            try:
                self.running.remove(req)
            except ValueError:
                pass
            self._cache_output(req)  # what it generated so far stays cached, as SGLang does
        self._free(req)
        req.state = ABORTED
        req.finish_reason = "abort"
        req.abort_message = message
        req.finish_s = now
        self.counters.aborted += 1
        return req

    # -- KV pool --------------------------------------------------------------------------------

    @property
    def used_tokens(self) -> int:
        """KV tokens held by requests, shared cached blocks once (SGLang: pool - free - evictable)."""
        c = self.cache
        return self._private + (c.total_tokens - c.evictable_tokens if c is not None else 0)

    @property
    def free_tokens(self) -> int:
        """KV tokens held by nobody: not by requests, not by the prefix cache."""
        return self.pool_tokens - self._private - (self.cache.total_tokens if self.cache is not None else 0)

    @property
    def evictable_tokens(self) -> int:
        return self.cache.evictable_tokens if self.cache is not None else 0

    def _make_room(self, n: int) -> None:
        """Evict unlocked cached blocks until ``n`` tokens are free (as far as possible)."""
        short = n - self.free_tokens
        if short > 0 and self.cache is not None:
            self.cache.evict(short)

    def _take(self, req: SimRequest, n: int) -> None:
        self._make_room(n)
        req.kv_tokens += n
        self._private += n

    def _cacheable_blocks(self, req: SimRequest) -> int:
        """Full prompt blocks that may be cached: all but the one holding the last prompt token."""
        assert self.cache is not None
        return min(len(req.block_hashes), (req.prompt_tokens - 1) // self.cache.block_tokens)

    def check_invariants(self) -> None:
        """Assert the KV pool accounting is consistent (tests call it)."""
        live = [r for r in self.requests.values() if r.state in (WAITING, RUNNING)]
        assert self._private == sum(r.kv_tokens for r in live), "private tokens != sum of request KV"
        assert self.free_tokens >= 0, f"pool over-committed by {-self.free_tokens} tokens"
        assert self.used_tokens <= self.pool_tokens
        c = self.cache
        if c is not None:
            c.check()
            refs: dict[int, int] = {}
            for r in live:
                assert len(r.locked) * c.block_tokens <= r.prefilled, "locked beyond prefill"
                for b in r.locked:
                    assert c.blocks.get(b.key) is b, "a block held by a request was evicted"
                    refs[id(b)] = refs.get(id(b), 0) + 1
            for b in c.blocks.values():
                assert b.ref == refs.get(id(b), 0), "block lock count != requests holding it"
        else:
            assert all(not r.locked for r in live)

    # -- time -----------------------------------------------------------------------------------

    @property
    def next_event_s(self) -> float | None:
        """When the running step ends (None when idle)."""
        return self.current.end_s if self.current is not None else None

    @property
    def busy(self) -> bool:
        return self.current is not None

    def advance(self, now: float) -> list[Emission]:
        """Complete the running step if it is due, then start the next one if there is work.

        Returns the emissions of the completed step (empty if none was due). The next step starts
        at the scheduled end of the previous one, so lateness of the caller does not accumulate.
        """
        out: list[Emission] = []
        if self.current is not None:
            if now + 1e-9 < self.current.end_s:
                return out
            step = self.current
            self.current = None
            out = self._complete(step)
            start = step.end_s
        else:
            start = now
        self._start(start)
        if self._aborted_now:
            out.extend(Emission(req, 0, True) for req in self._aborted_now)
            self._aborted_now = []
        if self._emitted_now:
            out.extend(self._emitted_now)
            self._emitted_now = []
        return out

    def interrupt(self, t: float) -> None:
        """Something arrived at ``t``: a coalesced run of decode steps ends with the step running at
        ``t`` (as a single step's engine would plan anew at that step's end). Nothing else changes."""
        step = self.current
        if step is None or step.ends is None or t >= step.end_s:
            return
        j = int(np.searchsorted(step.ends, t, side="left"))  # the first step ending at or after t
        if j >= len(step.ends) - 1:
            return
        step.ends = step.ends[: j + 1]
        step.energy = step.energy[: j + 1]
        if step.commits is not None:
            step.commits = step.commits[: j + 1]
        step.end_s = float(step.ends[-1])
        span = step.end_s - step.start_s
        c = step.cost
        step.cost = StepCost(span, c.u_bw, c.u_tc, c.u_nvl, float(step.energy[-1]) / span if span > 0 else c.power_w)

    def run_times(self, t: float, n_reqs: int, ctx_at: np.ndarray) -> tuple[np.ndarray, np.ndarray, StepCost]:
        """A run of decode steps of ``n_reqs`` requests from ``t``, step ``k`` over contexts summing to
        ``ctx_at[k]`` tokens: each step's end, the energy (J per GPU) spent by each end, and the first
        step's cost. The step model is evaluated at the first, the middle and the last step and
        interpolated between them (a step's time is linear in the context within a roofline regime;
        where the run crosses from one to the other the kink is cut by at most half a run's growth)."""
        timing = self.timing
        steps = len(ctx_at)
        last = steps - 1
        points = [0, last // 2, last] if last >= 2 else list(range(steps))
        costs = [timing.decode(n_reqs, float(ctx_at[k])) for k in points]
        ks = np.arange(steps, dtype=float)
        durations = np.interp(ks, points, [c.duration_s for c in costs])
        powers = np.interp(ks, points, [c.power_w for c in costs])
        return t + np.cumsum(durations), np.cumsum(durations * powers), costs[0]

    def _account_idle(self, t: float) -> None:
        if self._acct_t is None:
            self._acct_t = t
            self.history.append((t, self.energy_j, self.counters.busy_s))
            return
        if t > self._acct_t:
            self.energy_j += self.profile.hardware.idle_w * (t - self._acct_t)
            self._acct_t = t
            self.history.append((t, self.energy_j, self.counters.busy_s))

    def _start(self, t: float) -> None:
        self._account_idle(t)
        self.current = self.scheduler.plan(t)

    # -- for the schedulers: leaving the queue, aborting, a request's KV and cached blocks ------

    def _leave_queue(self, req: SimRequest, t: float, hit: int) -> None:
        """First scheduling of ``req`` at ``t`` with ``hit`` prompt tokens from the prefix cache: its
        queue time and the cache's hit counters (a re-prefill after retraction counts neither)."""
        if req.queue_end_s >= 0:
            return
        req.queue_end_s = t
        self.queue_time.observe(t - req.arrival_s)
        if self.cache is not None:
            req.cached_tokens = hit
            self.counters.cached_tokens += hit
            self.counters.prefix_queries += req.prompt_tokens

    def _abort_unfittable(self, req: SimRequest, t: float) -> None:
        self._free(req)
        self.requests.pop(req.rid, None)
        req.state = ABORTED
        req.finish_reason = "abort"
        req.abort_message = (
            f"Request {req.rid} cannot fit in the KV cache pool "
            f"({req.recompute_len} tokens needed, pool {self.pool_tokens} tokens)."
        )
        req.finish_s = t
        self.counters.aborted += 1
        self.log(f"Abort request {req.rid}: {req.abort_message}")
        self._aborted_now.append(req)

    def _free(self, req: SimRequest) -> None:
        self._private -= req.kv_tokens
        req.kv_tokens = 0
        if req.locked:
            assert self.cache is not None
            self.cache.unlock(req.locked)
            req.locked = []

    def _insert_prompt(self, req: SimRequest) -> None:
        """The prefilled prompt's full blocks join the prefix cache (its KV for them moves there)."""
        cache = self.cache
        if cache is None or not req.block_hashes:
            return
        n = self._cacheable_blocks(req)
        parent = req.locked[-1] if req.locked else None
        size = cache.block_tokens
        for key in req.block_hashes[len(req.locked) : n]:
            block, _ = cache.insert(key, parent)  # an existing block: our duplicate KV is freed
            req.locked.append(block)
            req.kv_tokens -= size
            self._private -= size
            parent = block

    def _cache_output(self, req: SimRequest) -> None:
        """A prefilled request ends: the full blocks of its prompt + output join the cache.

        As SGLang's ``cache_finished_req``: the KV of the prompt and of all output tokens but the
        last (whose KV was never computed) is kept, as the continuation of the request's prompt
        path. The request's private KV is released first; each new block then takes one block of
        the pool (evicting least recently used unlocked blocks if the free part is short) and
        insertion stops at the first block that finds no room. Blocks already cached are shared.
        The blocks stay locked by ``req`` until :meth:`_free` unlocks them with its prompt path.
        """
        cache, hook = self.cache, req.continued_block_hashes
        if cache is None or hook is None or req.prefilled < req.prompt_tokens:
            return
        keys = hook(max(0, req.generated - 1))
        held = len(req.locked)
        if len(keys) <= held or (held and keys[held - 1] != req.locked[-1].key):
            return  # nothing beyond the prompt path (or a hook that disagrees with it: cache nothing)
        self._private -= req.kv_tokens
        req.kv_tokens = 0
        size = cache.block_tokens
        parent = req.locked[-1] if held else None
        for key in keys[held:]:
            if key not in cache.blocks:  # then neither is any later key (a block's parent is cached)
                self._make_room(size)
                if self.free_tokens < size:
                    break
            block, _ = cache.insert(key, parent)
            req.locked.append(block)
            parent = block

    # -- step completion ------------------------------------------------------------------------

    def _complete(self, step: Step) -> list[Emission]:
        end = step.end_s
        cost = step.cost
        self.energy_j += cost.power_w * (end - step.start_s)
        self.counters.busy_s += end - step.start_s
        self._acct_t = end
        self.history.append((end, self.energy_j, self.counters.busy_s))
        while self.history and self.history[0][0] < end - 5.0 and len(self.history) > 2:
            self.history.popleft()
        self.last_cost = cost
        return self.scheduler.complete(step)

    def _draw(self, reqs: list[SimRequest]) -> list[int]:
        """Tokens committed this cycle per request (accepted + 1), by the request's prompt source."""
        u = self.rng.random(len(reqs))
        default = self._cdfs["default"]
        out = np.searchsorted(default, u, side="right") + 1
        for i, req in enumerate(reqs):
            cdf = self._cdfs.get(req.source, default)
            if cdf is not default:
                out[i] = int(np.searchsorted(cdf, u[i], side="right")) + 1
        result: list[int] = out.tolist()
        return result

    def _draw_run(self, reqs: list[SimRequest], steps: int) -> np.ndarray:
        """Tokens committed by each of ``reqs`` (columns) in each of ``steps`` cycles (rows), as
        :meth:`_draw` draws one cycle."""
        u = self.rng.random((steps, len(reqs)))
        default = self._cdfs["default"]
        out = np.searchsorted(default, u, side="right") + 1
        for i, req in enumerate(reqs):
            cdf = self._cdfs.get(req.source, default)
            if cdf is not default:
                out[:, i] = np.searchsorted(cdf, u[:, i], side="right") + 1
        return out

    def _commit(self, req: SimRequest, tokens: int, t: float) -> Emission:
        tokens = max(0, min(tokens, req.target_tokens - req.generated))
        self._take(req, tokens)
        return self._sample(req, tokens, t)

    def _sample(self, req: SimRequest, tokens: int, t: float) -> Emission:
        """``req`` samples ``tokens`` at ``t`` (their KV taken by the caller): counters, TTFT or ITL, finish."""
        tokens = max(0, min(tokens, req.target_tokens - req.generated))
        req.generated += tokens
        req.prefilled += tokens
        self.counters.generation_tokens += tokens
        self._log_tokens += tokens
        if req.first_token_s < 0:
            req.first_token_s = t
            self.ttft.observe(t - req.arrival_s)
        elif tokens > 0:
            self.itl.observe((t - req.last_token_s) / tokens, tokens)
        req.last_token_s = t
        finished = req.generated >= req.target_tokens
        if finished:
            self._finish(req, t)
        return Emission(req, tokens, finished)

    def _finish(self, req: SimRequest, t: float) -> None:
        req.state = FINISHED
        req.finish_reason = req.stop_reason
        req.finish_s = t
        self.running.remove(req)
        self._cache_output(req)
        self._free(req)
        self.requests.pop(req.rid, None)
        self.counters.finished += 1
        if req.stop_reason == "stop":
            self.counters.finished_stop += 1
        else:
            self.counters.finished_length += 1
        self.e2e.observe(t - req.arrival_s)

    def _finish_prefill_only(self, req: SimRequest, t: float) -> None:
        """A pooling sequence ends with its prefill: nothing generated, no TTFT, its KV freed."""
        req.state = FINISHED
        req.finish_reason = req.stop_reason
        req.finish_s = t
        self._free(req)
        self.requests.pop(req.rid, None)
        self.counters.finished += 1
        self.counters.finished_stop += 1
        self.e2e.observe(t - req.arrival_s)

    # -- gauges and log lines -------------------------------------------------------------------

    def _publish_common(self) -> None:
        g = self.gauges
        g.num_running_reqs = len(self.running)
        g.num_queue_reqs = len(self.waiting)
        g.num_used_tokens = self.used_tokens
        g.token_usage = self.used_tokens / self.pool_tokens if self.pool_tokens else 0.0

    def _log_prefill(self, n_seq: int, n_tokens: int, hit_tokens: int) -> None:
        self._publish_common()
        g = self.gauges
        g.cache_hit_rate = hit_tokens / (hit_tokens + n_tokens) if hit_tokens + n_tokens else 0.0
        self.log(
            f"Prefill batch, #new-seq: {n_seq}, #new-token: {n_tokens}, #cached-token: {hit_tokens}, "
            f"token usage: {g.token_usage:.2f}, #running-req: {g.num_running_reqs}, "
            f"#queue-req: {g.num_queue_reqs},"
        )

    def _log_decode(self, t: float) -> None:
        self._publish_common()
        g = self.gauges
        if self._log_t is not None and t > self._log_t:
            g.gen_throughput = self._log_tokens / (t - self._log_t)
        self._log_t = t
        self._log_tokens = 0
        g.num_retracted_reqs = self._log_retracted
        g.cache_hit_rate = 0.0  # SGLang's decode log resets it
        self._log_retracted = 0
        spec = ""
        if self.spec is not None and self._log_cycles:
            g.spec_accept_length = self._log_committed / self._log_cycles
            g.spec_accept_rate = (g.spec_accept_length - 1) / max(1, self.n_v - 1)
            spec = f"accept len: {g.spec_accept_length:.2f}, accept rate: {g.spec_accept_rate:.2f}, "
            self._log_cycles = 0
            self._log_committed = 0
        self.log(
            f"Decode batch, #running-req: {g.num_running_reqs}, #token: {g.num_used_tokens}, "
            f"token usage: {g.token_usage:.2f}, {spec}cuda graph: "
            f"{g.num_running_reqs <= self.profile.server.cuda_graph_max_bs}, "
            f"gen throughput (token/s): {g.gen_throughput:.2f}, #queue-req: {g.num_queue_reqs},"
        )

    # -- telemetry ------------------------------------------------------------------------------

    def _cumulative(self, t: float) -> tuple[float, float]:
        """Energy (J per GPU) and busy seconds accumulated up to ``t`` (t at or after the last boundary)."""
        e, b = self.energy_j, self.counters.busy_s
        last = self._acct_t if self._acct_t is not None else t
        if t > last:
            if self.current is not None and t > self.current.start_s:
                span = min(t, self.current.end_s) - max(self.current.start_s, last)
                e += self.current.cost.power_w * max(0.0, span)
                b += max(0.0, span)
            else:
                e += self.profile.hardware.idle_w * (t - last)
        return e, b

    def totals_at(self, t: float) -> tuple[float, float]:
        """Per-GPU energy (J) and busy seconds accumulated up to ``t``; interpolated between step
        boundaries, exact at them. Times older than the last ~5 s of history clamp to its start."""
        hist = self.history
        if not hist or t >= hist[-1][0]:
            return self._cumulative(t)
        prev = hist[0]
        if t <= prev[0]:
            return prev[1], prev[2]
        for item in hist:
            if item[0] >= t:
                span = item[0] - prev[0]
                f = (t - prev[0]) / span if span > 0 else 1.0
                return prev[1] + f * (item[1] - prev[1]), prev[2] + f * (item[2] - prev[2])
            prev = item
        return self._cumulative(t)

    def power_w(self, now: float, window_s: float = 1.0) -> float:
        """Average per-GPU power over the last ``window_s`` (NVML reports a 1-s average)."""
        e1, _ = self.totals_at(now)
        e0, _ = self.totals_at(now - window_s)
        first = self.history[0][0] if self.history else now
        span = min(window_s, now - first)
        if span <= 0:
            return self.profile.hardware.idle_w
        return (e1 - e0) / span

    def busy_share(self, now: float, window_s: float = 1.0) -> float:
        _, b1 = self.totals_at(now)
        _, b0 = self.totals_at(now - window_s)
        first = self.history[0][0] if self.history else now
        span = min(window_s, now - first)
        return min(1.0, max(0.0, (b1 - b0) / span)) if span > 0 else 0.0

    def energy_at(self, now: float) -> float:
        """Per-GPU energy in joules since the engine started, up to ``now``."""
        return self._cumulative(now)[0]


def natural_length(rng: np.random.Generator, median: int, sigma: float) -> int:
    """Output length of a request that may stop on its own: log-normal around ``median`` tokens."""
    return max(1, int(math.exp(math.log(max(1, median)) + sigma * rng.standard_normal())))
