"""vLLM's V1 scheduler on the simulated engine (``server.engine = "vllm"``; SGLang's is sched_sglang.py).

Read in vLLM's source (``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule`` and
``_preempt_request``; ``vllm/v1/core/kv_cache_manager.py``, ``allocate_slots``; the same rules in V1
from 0.8 to the 0.32 CPU build that ../shared/realserver serves):

* One step is one forward. A token budget (``max_num_batched_tokens``: here
  ``server.chunked_prefill_size``, which ``--engine vllm`` sets from vLLM's defaults) is shared by
  every request the step schedules. Running requests come first, in the order they were admitted:
  a decoding one takes ``n_v`` tokens (1, or 1 + the draft tokens), one still in its prompt takes
  what is left of it, up to the budget (chunked prefill).
* Each scheduled request must hold KV slots for every token it will have after the step, in blocks
  of ``B`` tokens (vLLM's ``--block-size``: here ``server.prefix_block_tokens``; 16 on GPUs, 128 on
  the CPU build). Free blocks include cached blocks no request holds (evicted least recently used
  first). When none is left the newest running request is preempted by recompute: its blocks are
  freed (its full blocks stay cached until evicted), its computed tokens drop to 0 and it goes to
  the front of the waiting queue. When the request being scheduled is itself the newest, it is the
  one preempted and the running pass ends. A request alone that cannot grow can never run: it is
  aborted, as the SGLang engine aborts it (vLLM refuses such a ``max_model_len`` at start-up).
* Only when nothing was preempted in the step are waiting requests admitted, first come first
  served, while budget is left and fewer than ``max_num_seqs`` (``max_running_requests``) run:
  a prefix-cache hit in whole blocks (never the last token), then a chunk of the rest, if its slots
  fit now. The first that does not fit ends admission. Nothing is reserved for the output tokens
  a request will need later: that is why vLLM preempts where SGLang (sched_sglang.py) waits.
* A request whose computed tokens reach its prompt (plus its output so far, after a preemption)
  samples one token at the end of the step; a partial chunk samples none.

What a preempted request pays: its prompt and its output so far are prefilled again, less what the
prefix cache still holds, and its next token comes only after that: one long inter-token gap.
Priorities (``--scheduling-policy priority``, ``server.scheduling_policy``): the waiting queue is
served by (priority, arrival), the lower value first, a preempted request going back at its place
(vLLM's ``PriorityRequestQueue``), and the request preempted is the running one of the lowest
priority, latest arrival (``max(running, key=(priority, arrival_time))``), even one scheduled
earlier in the step (its tokens go back to the budget). Under ``fcfs`` the body's priority is
ignored, as vLLM 0.32 ignores it.

Not modelled: async scheduling (one step of lookahead), ``long_prefill_token_threshold`` (0 by
default) and partial prefills of several requests at once (vLLM's default allows one long prefill
at a time only when that threshold is set).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadgen.sim.prefix import Block
from loadgen.sim.seq import RUNNING, WAITING, Emission, SimRequest, Step

if TYPE_CHECKING:
    from loadgen.sim.engine import Engine


class VllmScheduler:
    """Plans and completes the engine's steps the way vLLM's V1 scheduler does."""

    def __init__(self, engine: Engine) -> None:
        self.e = engine
        s = engine.profile.server
        self.block = max(1, s.prefix_block_tokens)
        self.budget = s.chunked_prefill_size if s.chunked_prefill_size > 0 else 1 << 30

    # -- KV slots in blocks ---------------------------------------------------------------------

    def _slots(self, tokens: int) -> int:
        """KV slots (whole blocks) that ``tokens`` tokens take."""
        return -(-tokens // self.block) * self.block

    def _held(self, req: SimRequest) -> int:
        cache = self.e.cache
        return req.kv_tokens + (len(req.locked) * cache.block_tokens if cache is not None else 0)

    def _grow(self, req: SimRequest, tokens_after: int) -> bool:
        """Give ``req`` the blocks for ``tokens_after`` tokens; False (nothing taken) if the pool
        cannot, free and cached-but-unheld blocks together."""
        e = self.e
        need = self._slots(tokens_after) - self._held(req)
        if need <= 0:
            return True
        if need > e.free_tokens + e.evictable_tokens:
            return False
        e._take(req, need)
        return True

    def _match(self, req: SimRequest) -> list[Block]:
        """Cached blocks at the head of what ``req`` must compute: its prompt, and after a preemption
        its output so far; never the block of its last token."""
        cache = self.e.cache
        if cache is None:
            return []
        limit = (req.recompute_len - 1) // cache.block_tokens
        hook = req.continued_block_hashes
        keys = hook(req.generated) if hook is not None and req.generated > 0 else req.block_hashes
        return cache.match(keys[:limit]) if keys else []

    # -- planning -------------------------------------------------------------------------------

    def plan(self, t: float) -> Step | None:
        e = self.e
        budget = self.budget
        reqs: list[SimRequest] = []
        chunks: list[int] = []
        preempted = False
        i = 0
        while i < len(e.running) and budget > 0:
            req = e.running[i]
            if req.prefilled >= req.recompute_len:  # decoding
                n = min(e.n_v, budget)
                after = req.prefilled + e.n_v - 1
            else:
                n = min(req.recompute_len - req.prefilled, budget)
                after = req.prefilled + n
            scheduled = True
            while not self._grow(req, after):
                if e.by_priority:  # the lowest priority (then the latest arrival) goes, wherever it stands
                    k = max(range(len(e.running)), key=lambda j: e.rank(e.running[j]))
                    victim = e.running.pop(k)
                    if k < i:
                        i -= 1
                        at = reqs.index(victim)  # scheduled earlier in this step: its tokens come back
                        budget += chunks.pop(at)
                        reqs.pop(at)
                else:
                    victim = e.running.pop()
                preempted = True
                if victim is req and not e.running:
                    e._abort_unfittable(req, t)
                else:
                    self._preempt(victim)
                if victim is req:
                    scheduled = False
                    break
            if not scheduled:
                break
            reqs.append(req)
            chunks.append(n)
            budget -= n
            i += 1
        if not preempted:
            budget = self._admit(t, budget, reqs, chunks)
        if not reqs:
            # under the priority policy a request can preempt itself after older ones went before
            # it: nothing ran, but blocks were freed; vLLM's engine loop schedules again at once
            return self.plan(t) if preempted and e.running else None
        return self._step(t, reqs, chunks)

    def _admit(self, t: float, budget: int, reqs: list[SimRequest], chunks: list[int]) -> int:
        e = self.e
        cache = e.cache
        while e.waiting and budget > 0 and len(e.running) < e.max_running:
            req = e.waiting[0]
            if self._slots(req.recompute_len + 1) > e.pool_tokens:
                e.waiting.popleft()
                e._abort_unfittable(req, t)
                continue
            path = self._match(req) if req.prefilled == 0 else []
            hit = len(path) * cache.block_tokens if cache is not None else 0
            moving = cache.block_tokens * sum(1 for b in path if b.ref == 0) if cache is not None else 0
            n = min(req.recompute_len - hit, budget)
            need = self._slots(hit + n) - hit
            if need + moving > e.free_tokens + e.evictable_tokens:
                break
            e.waiting.popleft()
            if path:
                assert cache is not None
                cache.lock(path)
                req.locked = path
                req.prefilled = hit
            e._take(req, need)
            e._leave_queue(req, t, hit)
            req.state = RUNNING
            e.running.append(req)
            reqs.append(req)
            chunks.append(n)
            budget -= n
        return budget

    def _preempt(self, req: SimRequest) -> None:
        """Preemption by recompute: blocks freed (the full ones stay cached), back to the queue's front."""
        e = self.e
        c = e.counters
        c.retracted_reqs += 1
        c.retracted_input_tokens += req.prompt_tokens
        c.retracted_output_tokens += req.generated
        e._cache_output(req)
        e._free(req)
        req.prefilled = 0
        req.state = WAITING
        req.retractions += 1
        e.enqueue(req, front=True)
        e.log(f"Preempted request {req.rid} by recompute: KV cache is full (#running-req: {len(e.running)})")

    def _step(self, t: float, reqs: list[SimRequest], chunks: list[int]) -> Step:
        e = self.e
        n_dec = 0
        ctx = 0.0
        n_tok = 0
        pairs = 0.0
        n_pre = 0
        for req, n in zip(reqs, chunks, strict=True):
            if req.prefilled >= req.recompute_len:
                n_dec += 1
                ctx += req.prefilled
            else:
                n_pre += 1
                n_tok += n
                pairs += n * (req.prefilled + n / 2.0)
        cost = e.timing.mixed(n_dec, ctx, n_tok, pairs, n_pre)
        if n_pre:
            e.counters.prefill_steps += 1
        if n_dec:
            e.counters.decode_steps += 1
            if e._log_t is None:
                e._log_t = t
                e._log_tokens = 0
        e._publish_common()
        return Step("mixed", t, t + cost.duration_s, cost, reqs, chunks)

    # -- completion -----------------------------------------------------------------------------

    def complete(self, step: Step) -> list[Emission]:
        e = self.e
        end = step.end_s
        out: list[Emission] = []
        decoding = [r for r in step.reqs if r.state == RUNNING and r.prefilled >= r.recompute_len]
        drawn: dict[int, int] = {}
        if e.spec is not None and decoding:
            drawn = {id(r): c for r, c in zip(decoding, e._draw(decoding), strict=True)}
            e.counters.spec_cycles += len(decoding)
            e.counters.spec_draft_tokens += len(decoding) * (e.n_v - 1)
            e._log_cycles += len(decoding)
        for req, n in zip(step.reqs, step.chunks, strict=True):
            if req.state != RUNNING:
                continue  # aborted (or preempted) while the step ran
            if req.prefilled >= req.recompute_len:
                c = drawn.get(id(req), 1)
                if drawn:
                    req.verify_ct += 1
                    e.counters.spec_accepted_tokens += c - 1
                    e._log_committed += c
                out.append(e._sample(req, c, end))  # its KV slots were given when the step was planned
                continue
            req.prefilled += n
            if req.prefilled < req.recompute_len:
                continue  # a chunk: no token yet
            e._insert_prompt(req)
            if req.prefill_only:
                e.running.remove(req)
                e._finish_prefill_only(req, end)
                out.append(Emission(req, 0, True))
                continue
            out.append(e._sample(req, 1, end))
        if decoding and e.counters.decode_steps % e.profile.server.decode_log_interval == 0:
            e._log_decode(end)
        return out
