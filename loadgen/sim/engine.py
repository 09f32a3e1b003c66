"""The simulated inference engine: continuous batching over a KV token pool, on an injected clock.

Time is an input. :meth:`Engine.submit` and :meth:`Engine.advance` take ``now`` (seconds on any
monotonic clock); :attr:`Engine.next_event_s` says when the running step ends. The HTTP server
drives it on ``perf_counter`` and sleeps until ``next_event_s``; tests drive it on a virtual clock
by jumping straight there, with no sleeping and no sockets.

Scheduling follows SGLang's scheduler:

* A step is either a prefill batch or a decode batch (no mixing). Waiting requests are prefilled
  first, first come first served, while the batch stays within ``chunked_prefill_size`` tokens
  (a long prompt is chunked over several steps), running + new requests stay within
  ``max_running_requests``, and the KV pool can hold each new prompt plus its ``max_tokens``
  (clipped at 4096) on top of what running requests reserve: ``new_token_ratio`` times their
  remaining ``max_tokens``. ``new_token_ratio`` starts at 0.7 and decays to 0.098 over 600
  decode steps, so admission is cautious after a retraction and then loosens.
* A prefill commits one token (the first), except for a ``prefill_only`` sequence (a pooling
  request's input: an embedding, a rerank pair), which reserves no output tokens, finishes when
  its prefill ends (no token, no TTFT sample, its KV freed) and never joins a decode batch.
  A decode step commits one token per request, or ``accepted + 1`` with speculative decoding,
  drawn per request from a truncated geometric acceptance distribution whose mean is the
  profile's ``tau`` for the prompt's source class.
  The verify pass costs ``num_draft_tokens`` per request whatever is accepted.
* Before a decode step the pool must hold the step's new tokens (``C * num_draft_tokens`` with
  speculative decoding). If it cannot, requests are retracted (fewest output tokens first), their
  KV freed and they go back to the front of the queue to be re-prefilled (prompt + output so far),
  with SGLang's log line. A lone request that cannot fit is aborted.

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
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass

import numpy as np

from loadgen.sim.memory import MemoryPlan, memory_plan
from loadgen.sim.model import StepCost, StepModel
from loadgen.sim.prefix import Block, PrefixCache
from loadgen.sim.profile import FixedTiming, Profile
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
from loadgen.sim.text import classify_source

__all__ = [
    "ABORTED",
    "FINISHED",
    "RUNNING",
    "SOURCE_PREFIX",
    "WAITING",
    "Emission",
    "Engine",
    "FixedStepModel",
    "Histogram",
    "RejectError",
    "SimRequest",
    "acceptance_cdf",
    "natural_length",
    "request_source",
]

CLIP_MAX_NEW_TOKENS = 4096
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600
RETRACT_DECODE_STEPS = 20


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


SOURCE_PREFIX = "src:"
"""A request's ``source`` is this and its workload label when the profile's ``tau_by_source`` names
the label (the X-Loadgen-Source header), else the classifier's ``code``/``prose``/``default``."""


def request_source(taus_by_source: dict[str, float], label: str | None, text: str) -> str:
    """The acceptance class of a request: its workload label where the profile keys acceptance by
    it (``SpecConfig.taus_by_source()``), else what the prompt's text classifies as."""
    if label and label in taus_by_source:
        return SOURCE_PREFIX + label
    return classify_source(text)


class FixedStepModel:
    """Step durations from :class:`FixedTiming` (TTFT and per-step time given), same interface."""

    def __init__(self, timing: FixedTiming, real: StepModel) -> None:
        self.t = timing
        self.real = real
        self._batch, self._step_ms = timing.decode_points()

    def decode(self, n_reqs: int, ctx_sum: float) -> StepCost:
        kv_ms = self.t.decode_ms_per_1k_ctx * ctx_sum / 1000.0
        if self._batch:
            return self._cost((self._table_ms(float(n_reqs)) + kv_ms) / 1e3)
        d = (self.t.itl_ms * (1.0 + self.t.itl_growth * max(0, n_reqs - 1)) + kv_ms) / 1e3
        return self._cost(d)

    def _table_ms(self, n: float) -> float:
        xs, ys = self._batch, self._step_ms
        i = min(max(bisect_left(xs, n), 1), len(xs) - 1)  # segment [i-1, i]; the end ones extend
        slope = (ys[i] - ys[i - 1]) / (xs[i] - xs[i - 1])
        return max(ys[i - 1] + slope * (n - xs[i - 1]), 1e-3)

    def prefill(self, n_tokens: int, attn_pairs: float, requests: int = 1) -> StepCost:
        d = max(self.t.ttft_floor_ms, self.t.ttft_ms + self.t.ttft_per_1k_ms * n_tokens / 1000.0) / 1e3
        return self._cost(d)

    def mixed(self, n_reqs: int, ctx_sum: float, n_tokens: int, attn_pairs: float, prefill_reqs: int) -> StepCost:
        # ASSUMPTION: a given timing has no shared forward, so a mixed step costs both of its parts,
        # unless its prefill time was measured with the decodes beside it (a twin of a vLLM run)
        if n_tokens <= 0:
            return self.decode(n_reqs, ctx_sum)
        if n_reqs <= 0:
            return self.prefill(n_tokens, attn_pairs, prefill_reqs)
        dec = self.decode(n_reqs, ctx_sum).duration_s
        pre = self.prefill(n_tokens, attn_pairs, prefill_reqs).duration_s
        return self._cost(max(dec, pre) if self.t.prefill_holds_decode else dec + pre)

    def _cost(self, d: float) -> StepCost:
        hw = self.real.p.hardware
        busy = min(self.t.power_busy_w, hw.power_limit_w)
        share = (busy - hw.idle_w) / max(1.0, hw.power_limit_w - hw.idle_w)
        return StepCost(d, share, share, 0.0, busy)


def acceptance_cdf(tau: float, depth: int) -> np.ndarray:
    """CDF over committed tokens 1..depth+1 with P(committed > j) = p**j and mean ``tau``."""
    if depth <= 0 or tau <= 1.0:
        return np.array([1.0])
    tau = min(tau, depth + 1.0 - 1e-6)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        p = (lo + hi) / 2
        mean = 1.0 + sum(p**j for j in range(1, depth + 1))
        if mean < tau:
            lo = p
        else:
            hi = p
    p = (lo + hi) / 2
    surv = np.array([p**j for j in range(depth + 1)])  # P(committed > j), j = 0..depth
    pmf = surv - np.append(surv[1:], 0.0)
    cdf = np.cumsum(pmf)
    cdf[-1] = 1.0
    return cdf


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
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self.current: Step | None = None
        self.counters = Counters()
        self.gauges = Gauges()
        self.ttft = Histogram(TTFT_BOUNDS)
        self.itl = Histogram(ITL_BOUNDS)
        self.e2e = Histogram(E2E_BOUNDS)
        self.queue_time = Histogram(TTFT_BOUNDS)
        self.spec = profile.spec if profile.spec.enabled else None
        self.n_v = profile.verify_width
        self._cdfs: dict[str, np.ndarray] = {}
        if self.spec is not None:
            sp = self.spec
            self._cdfs["default"] = acceptance_cdf(sp.tau, sp.depth)
            self._cdfs["code"] = acceptance_cdf(sp.tau_code or sp.tau, sp.depth)
            self._cdfs["prose"] = acceptance_cdf(sp.tau_prose or sp.tau, sp.depth)
            for label, tau in sp.taus_by_source().items():
                self._cdfs[SOURCE_PREFIX + label] = acceptance_cdf(tau, sp.depth)
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
        # vLLM's V1 scheduler (sched_vllm.py) when the deployment is served by vLLM; else SGLang's below
        self.vllm: VllmScheduler | None = VllmScheduler(self) if s.engine == "vllm" else None

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
        self.waiting.append(req)
        self.requests[req.rid] = req
        self.counters.requests += 1
        self.counters.prompt_tokens += req.prompt_tokens

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
        return out

    # -- step planning --------------------------------------------------------------------------

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
        if self.vllm is not None:
            self.current = self.vllm.plan(t)
            return
        step = self._plan_prefill(t)
        if step is None and self.running:
            step = self._plan_decode(t)
        self.current = step

    def _reserved_tokens(self) -> float:
        ratio = self.new_token_ratio
        total = 0.0
        for r in self.running:
            total += min(r.max_new_tokens - r.generated, CLIP_MAX_NEW_TOKENS) * ratio
        return total

    def _plan_prefill(self, t: float) -> Step | None:
        if not self.waiting or len(self.running) >= self.max_running:
            return None
        budget = self.profile.server.chunked_prefill_size
        if budget <= 0:
            budget = 1 << 30
        rem = self.pool_tokens - self.used_tokens - self._reserved_tokens()
        batch: list[SimRequest] = []
        chunks: list[int] = []
        pairs = 0.0
        hit_tokens = 0
        slots = self.max_running - len(self.running)
        cache = self.cache
        while self.waiting and len(batch) < slots and budget > 0:
            req = self.waiting[0]
            if req.recompute_len + 1 > self.pool_tokens:
                self.waiting.popleft()
                self._abort_unfittable(req, t)
                continue
            path: list[Block] = []
            moving = 0
            if cache is not None and req.prefilled == 0 and req.block_hashes:
                path = cache.match(req.block_hashes[: self._cacheable_blocks(req)])
                moving = cache.block_tokens * sum(1 for b in path if b.ref == 0)
            hit = len(path) * cache.block_tokens if cache is not None else 0
            need_total = req.recompute_len - req.prefilled - hit
            reserve = need_total + min(req.max_new_tokens - req.generated, CLIP_MAX_NEW_TOKENS)
            if reserve + moving > rem and (batch or self.running):
                break
            chunk = min(need_total, budget)
            self.waiting.popleft()
            if path:
                assert cache is not None
                rem -= cache.lock(path)
                req.locked = path
                req.prefilled = hit
            hit_tokens += hit
            self._leave_queue(req, t, hit)
            batch.append(req)
            chunks.append(chunk)
            pairs += chunk * (req.prefilled + chunk / 2.0)
            budget -= chunk
            rem -= reserve
            # KV for the prompt is taken now
            self._take(req, chunk)
            if chunk < need_total:
                break  # a chunked request ends the batch, as SGLang's single chunked request does
        if not batch:
            return None
        n_tokens = sum(chunks)
        cost = self.timing.prefill(n_tokens, pairs, len(batch) + len(self.waiting))
        self.counters.prefill_steps += 1
        self._log_prefill(len(batch), n_tokens, hit_tokens)
        return Step("prefill", t, t + cost.duration_s, cost, batch, chunks)

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

    def _plan_decode(self, t: float) -> Step | None:
        need = len(self.running) * self.n_v
        if self.free_tokens < need:
            self._make_room(need)
            if self.free_tokens < need:
                self._retract(need, t)
                if not self.running:
                    return self._plan_prefill(t)
                self._make_room(len(self.running) * self.n_v)
        if self._log_t is None:
            self._log_t = t
            self._log_tokens = 0
        ctx_sum = float(sum(r.prefilled for r in self.running))  # context incl. cached prefix
        cost = self.timing.decode(len(self.running), ctx_sum)
        self.counters.decode_steps += 1
        return Step("decode", t, t + cost.duration_s, cost, list(self.running))

    def _retract(self, need: int, t: float) -> None:
        """Free KV by retracting requests until the next decode step fits (SGLang's policy)."""
        order = sorted(self.running, key=lambda r: (r.generated, -r.prompt_tokens), reverse=True)
        retracted: list[SimRequest] = []
        while self.free_tokens + self.evictable_tokens < need and len(order) > 1:
            req = order.pop()
            self.running.remove(req)
            self.counters.retracted_input_tokens += req.prompt_tokens
            self.counters.retracted_output_tokens += req.generated
            self._free(req)
            req.prefilled = 0
            req.state = WAITING
            req.retractions += 1
            retracted.append(req)
            need = len(order) * self.n_v
        if self.free_tokens + self.evictable_tokens < need and len(order) == 1:
            req = order.pop()
            self.running.remove(req)
            self._abort_unfittable(req, t)
        for req in reversed(retracted):
            self.waiting.appendleft(req)
        if retracted:
            old = self.new_token_ratio
            total_decoded = sum(r.generated for r in self.running)
            total_max_new = sum(r.max_new_tokens for r in self.running) or 1
            self.new_token_ratio = min(1.0, (total_decoded + RETRACT_DECODE_STEPS * len(self.running)) / total_max_new)
            self.counters.retracted_reqs += len(retracted)
            self._log_retracted += len(retracted)
            self.log(
                f"KV cache pool is full. Retract requests. #retracted_reqs: {len(retracted)}, "
                f"#new_token_ratio: {old:.4f} -> {self.new_token_ratio:.4f}"
            )

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
        out: list[Emission] = []
        end = step.end_s
        cost = step.cost
        self.energy_j += cost.power_w * (end - step.start_s)
        self.counters.busy_s += end - step.start_s
        self._acct_t = end
        self.history.append((end, self.energy_j, self.counters.busy_s))
        while self.history and self.history[0][0] < end - 5.0 and len(self.history) > 2:
            self.history.popleft()
        self.last_cost = cost
        if step.kind == "mixed":
            assert self.vllm is not None
            return self.vllm.complete(step)
        if step.kind == "prefill":
            for req, chunk in zip(step.reqs, step.chunks, strict=True):
                if req.state == ABORTED:
                    continue
                req.prefilled += chunk
                if req.prefilled < req.recompute_len:
                    self.waiting.appendleft(req)  # chunked: continue next step
                    continue
                self._insert_prompt(req)
                if req.prefill_only:
                    self._finish_prefill_only(req, end)
                    out.append(Emission(req, 0, True))
                    continue
                req.state = RUNNING
                self.running.append(req)
                out.append(self._commit(req, 1, end))
        else:
            n = len(step.reqs)
            committed: list[int] | None = None
            if self.spec is not None:
                committed = self._draw(step.reqs)
                self.counters.spec_cycles += n
                self.counters.spec_draft_tokens += n * (self.n_v - 1)
                self._log_cycles += n
            gen_total = 0
            itl = self.itl
            for i, req in enumerate(step.reqs):
                if req.state != RUNNING:
                    continue
                c = 1
                if committed is not None:
                    c = committed[i]
                    req.verify_ct += 1
                    self.counters.spec_accepted_tokens += c - 1
                    self._log_committed += c
                rem = req.target_tokens - req.generated
                if c > rem:
                    c = rem
                req.generated += c
                req.kv_tokens += c
                req.prefilled += c
                gen_total += c
                if c > 0:
                    itl.observe((end - req.last_token_s) / c, c)
                req.last_token_s = end
                if req.generated >= req.target_tokens:
                    self._finish(req, end)
                    out.append(Emission(req, c, True))
                else:
                    out.append(Emission(req, c, False))
            self._private += gen_total
            self.counters.generation_tokens += gen_total
            self._log_tokens += gen_total
            self.new_token_ratio = max(self.new_token_ratio - NEW_TOKEN_RATIO_DECAY, MIN_NEW_TOKEN_RATIO)
            if self.counters.decode_steps % self.profile.server.decode_log_interval == 0:
                self._log_decode(end)
        return out

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
