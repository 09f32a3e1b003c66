"""SGLang's scheduler on the simulated engine (``server.engine`` other than "vllm"; vLLM's is
sched_vllm.py).

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
  profile's ``tau`` for the prompt's source class (:mod:`loadgen.sim.acceptance`).
  The verify pass costs ``num_draft_tokens`` per request whatever is accepted.
* Before a decode step the pool must hold the step's new tokens (``C * num_draft_tokens`` with
  speculative decoding). If it cannot, requests are retracted (fewest output tokens first), their
  KV freed and they go back to the front of the queue to be re-prefilled (prompt + output so far),
  with SGLang's log line, and ``new_token_ratio`` is set to what the remaining requests have
  decoded (plus 20 steps each) over their ``max_tokens``, at most 1. A lone request that cannot fit is aborted.

Priorities (``--enable-priority-scheduling``: ``server.scheduling_policy = "priority"``): the
waiting queue is served by priority, then arrival: the higher value first, as SGLang's
``SchedulePolicy`` does unless ``--schedule-low-priority-values-first``
(``server.low_priority_values_first``, which ``--engine sglang`` sets off); a retracted request goes
back at its place. A waiting request that cannot be admitted (no slot under
``max_running_requests``, or no room in the pool) preempts running requests whose priority it beats
by more than ``server.priority_preemption_threshold`` (SGLang's
``--priority-scheduling-preemption-threshold``, 10; ``server.disable_priority_preemption`` is its
``--disable-priority-preemption``), as SGLang's ``PrefillAdder.preempt_to_schedule`` does
(python/sglang/srt/managers/schedule_policy.py): the running requests in order of the lowest
priority, then the latest arrival, each taken while it is beaten by more than the threshold, until
what they hold and reserve covers the new request's prompt and output (clipped at 4096) beyond the
room left; if that cannot be covered none is preempted. The preempted ones free their KV and go back
to the queue at their place, to be prefilled again (prompt and output so far). SGLang tries it when
it next plans a prefill after the batch was found full; here in the same pass (ASSUMPTION: one
step earlier). Not modelled: retraction by priority (``--retraction-policy priority``).

The KV pool, the prefix cache and the statistics are the engine's (engine.py); this module decides
only what each step holds and what it commits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from loadgen.sim.model import StepCost
from loadgen.sim.prefix import Block
from loadgen.sim.seq import ABORTED, RUNNING, WAITING, Emission, SimRequest, Step

if TYPE_CHECKING:
    from loadgen.sim.engine import Engine

CLIP_MAX_NEW_TOKENS = 4096
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600
RETRACT_DECODE_STEPS = 20


class SglangScheduler:
    """Plans and completes the engine's steps the way SGLang's scheduler does."""

    def __init__(self, engine: Engine) -> None:
        self.e = engine
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO

    # -- planning -------------------------------------------------------------------------------

    def plan(self, t: float) -> Step | None:
        """The step to start at ``t``: a prefill batch if one can be admitted, else a decode batch
        of the running requests; None when there is nothing to run."""
        if self.e.transferred:
            self._admit_transferred(t)
        step = self._plan_prefill(t)
        if step is None and self.e.running:
            e = self.e
            if e.coalesce and not e.waiting and not e.transferred:
                step = self._plan_run(t)
            if step is None:
                step = self._plan_decode(t)
        return step

    def _admit_transferred(self, t: float) -> None:
        """Requests whose prompt KV came from a prefill server join the running batch, first come first
        served, while a slot is free and the pool holds their prompt and reserved output (SGLang's decode
        side of PD disaggregation preallocates the KV before the transfer; here the room is checked when
        it arrives). Their first token, sampled by the prefill server, is emitted now."""
        e = self.e
        while e.transferred and len(e.running) < e.max_running:
            req = e.transferred[0]
            need = req.prompt_tokens + 1 + min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS)
            if e.running and need > e.pool_tokens - e.used_tokens - self._reserved_tokens():
                break
            e.transferred.popleft()
            e._leave_queue(req, t, 0)
            e._take(req, req.prompt_tokens)
            req.prefilled = req.prompt_tokens
            req.state = RUNNING
            e.running.append(req)
            e._emitted_now.append(e._commit(req, 1, t))

    def _plan_run(self, t: float) -> Step | None:
        """Coalesced decode steps (``Engine.coalesce``, no request waiting): as many as run until the
        first request finishes, while the pool holds each step's tokens (``C * n_v`` free at its start,
        as a single step asks); None when fewer than two would (a single step is planned instead).
        With speculative decoding each step's commits are drawn for the whole run at once, per request
        from its source's acceptance distribution, as single steps draw them."""
        e = self.e
        running = e.running
        n = len(running)
        room = e.free_tokens + e.evictable_tokens
        rem = np.fromiter((r.target_tokens - r.generated for r in running), dtype=np.int64, count=n)
        steps = min(int(rem.min()), (room - n * e.n_v) // n + 1)
        if steps < 2:
            return None
        commits = None
        if e.spec is None:
            before = np.arange(steps, dtype=np.int64) * n  # tokens committed before each step
        else:
            commits = np.cumsum(e._draw_run(running, steps), axis=0)  # (steps, n): committed by each end
            reached = commits >= rem
            first = np.where(reached.any(axis=0), reached.argmax(axis=0), steps - 1)
            steps = int(first.min()) + 1
            before = np.concatenate([[0], commits[: steps - 1].sum(axis=1)])
            fits = before + n * e.n_v <= room  # each step's start finds its verify tokens' room
            steps = min(steps, int(fits.argmin()) if not fits.all() else steps)
            if steps < 2:
                return None
            commits = commits[:steps]
            before = before[:steps]
        total = int(before[-1]) + (n if commits is None else int(commits[-1].sum()) - int(before[-1]))
        e._make_room(total)
        if e.free_tokens < total:
            return None
        if e._log_t is None:
            e._log_t = t
            e._log_tokens = 0
        ctx_sum = float(sum(r.prefilled for r in running))
        ends, energy, first_cost = e.run_times(t, n, ctx_sum + before.astype(float))
        span = float(ends[-1]) - t
        cost = StepCost(span, first_cost.u_bw, first_cost.u_tc, first_cost.u_nvl, float(energy[-1]) / span)
        return Step("run", t, float(ends[-1]), cost, list(running), ends=ends, energy=energy, commits=commits)

    def _reserved_tokens(self) -> float:
        e = self.e
        ratio = self.new_token_ratio
        total = 0.0
        for r in e.running:
            total += min(r.max_new_tokens - r.generated, CLIP_MAX_NEW_TOKENS) * ratio
        return total

    @property
    def _preempting(self) -> bool:
        srv = self.e.profile.server
        return self.e.by_priority and not srv.disable_priority_preemption

    def _offset(self, req: SimRequest) -> float:
        """What a running request holds and reserves in the pool (its KV, its remaining output at the
        new-token ratio): what preempting it gives back to admission."""
        return req.kv_tokens + min(req.max_new_tokens - req.generated, CLIP_MAX_NEW_TOKENS) * self.new_token_ratio

    def _preempt_for(self, req: SimRequest, need: float) -> float:
        """SGLang's priority preemption for ``req``, which lacks a slot or ``need`` tokens of room
        (module docstring); the room it freed (0: none preempted)."""
        e = self.e
        srv = e.profile.server
        sign = 1 if srv.low_priority_values_first else -1
        order = sorted(e.running, key=lambda r: (r.priority * -sign, -r.arrival_s))
        chosen: list[SimRequest] = []
        for r in order:
            if (req.priority - r.priority) * -sign <= srv.priority_preemption_threshold:
                break
            chosen.append(r)
            need -= self._offset(r)
            if need <= 0:
                break
        if not chosen or need > 0:
            return 0.0
        freed = 0.0
        for r in chosen:
            freed += self._offset(r)
            e.running.remove(r)
            e._free(r)
            r.prefilled = 0
            r.state = WAITING
            r.retractions += 1
            e.enqueue(r)
        e.counters.preempted_reqs += len(chosen)
        return freed

    def _head_need(self, req: SimRequest) -> int:
        """The pool ``req`` asks of admission, its prefix-cache hits aside: its prompt (or what is left
        of it) and its output (clipped)."""
        return req.recompute_len - req.prefilled + min(req.max_new_tokens - req.generated, CLIP_MAX_NEW_TOKENS)

    def _plan_prefill(self, t: float) -> Step | None:
        e = self.e
        if not e.waiting:
            return None
        if len(e.running) >= e.max_running:
            if not self._preempting:
                return None
            rem0 = e.pool_tokens - e.used_tokens - self._reserved_tokens()
            if not self._preempt_for(e.waiting[0], self._head_need(e.waiting[0]) - rem0):
                return None
        budget = e.profile.server.chunked_prefill_size
        if budget <= 0:
            budget = 1 << 30
        rem = e.pool_tokens - e.used_tokens - self._reserved_tokens()
        batch: list[SimRequest] = []
        chunks: list[int] = []
        pairs = 0.0
        hit_tokens = 0
        cache = e.cache
        while e.waiting and budget > 0:
            req = e.waiting[0]
            if len(e.running) + len(batch) >= e.max_running:
                if not self._preempting:
                    break
                freed = self._preempt_for(req, self._head_need(req) - rem)
                if not freed:
                    break
                rem += freed
            if req.recompute_len + 1 > e.pool_tokens:
                e.waiting.popleft()
                e._abort_unfittable(req, t)
                continue
            path: list[Block] = []
            moving = 0
            if cache is not None and req.prefilled == 0 and req.block_hashes:
                path = cache.match(req.block_hashes[: e._cacheable_blocks(req)])
                moving = cache.block_tokens * sum(1 for b in path if b.ref == 0)
            hit = len(path) * cache.block_tokens if cache is not None else 0
            need_total = req.recompute_len - req.prefilled - hit
            reserve = need_total + min(req.max_new_tokens - req.generated, CLIP_MAX_NEW_TOKENS)
            if reserve + moving > rem and (batch or e.running):
                freed = self._preempt_for(req, reserve + moving - rem) if self._preempting else 0.0
                if not freed:
                    break
                rem += freed
            chunk = min(need_total, budget)
            e.waiting.popleft()
            if path:
                assert cache is not None
                rem -= cache.lock(path)
                req.locked = path
                req.prefilled = hit
            hit_tokens += hit
            e._leave_queue(req, t, hit)
            batch.append(req)
            chunks.append(chunk)
            pairs += chunk * (req.prefilled + chunk / 2.0)
            budget -= chunk
            rem -= reserve
            # KV for the prompt is taken now
            e._take(req, chunk)
            if chunk < need_total:
                break  # a chunked request ends the batch, as SGLang's single chunked request does
        if not batch:
            return None
        n_tokens = sum(chunks)
        cost = e.timing.prefill(n_tokens, pairs, len(batch) + len(e.waiting))
        e.counters.prefill_steps += 1
        e._log_prefill(len(batch), n_tokens, hit_tokens)
        return Step("prefill", t, t + cost.duration_s, cost, batch, chunks)

    def _plan_decode(self, t: float) -> Step | None:
        e = self.e
        need = len(e.running) * e.n_v
        if e.free_tokens < need:
            e._make_room(need)
            if e.free_tokens < need:
                self._retract(need, t)
                if not e.running:
                    return self._plan_prefill(t)
                e._make_room(len(e.running) * e.n_v)
        if e._log_t is None:
            e._log_t = t
            e._log_tokens = 0
        ctx_sum = float(sum(r.prefilled for r in e.running))  # context incl. cached prefix
        cost = e.timing.decode(len(e.running), ctx_sum)
        e.counters.decode_steps += 1
        return Step("decode", t, t + cost.duration_s, cost, list(e.running))

    def _retract(self, need: int, t: float) -> None:
        """Free KV by retracting requests until the next decode step fits (SGLang's policy)."""
        e = self.e
        order = sorted(e.running, key=lambda r: (r.generated, -r.prompt_tokens), reverse=True)
        retracted: list[SimRequest] = []
        while e.free_tokens + e.evictable_tokens < need and len(order) > 1:
            req = order.pop()
            e.running.remove(req)
            e.counters.retracted_input_tokens += req.prompt_tokens
            e.counters.retracted_output_tokens += req.generated
            e._free(req)
            req.prefilled = 0
            req.state = WAITING
            req.retractions += 1
            retracted.append(req)
            need = len(order) * e.n_v
        if e.free_tokens + e.evictable_tokens < need and len(order) == 1:
            req = order.pop()
            e.running.remove(req)
            e._abort_unfittable(req, t)
        for req in reversed(retracted):
            e.enqueue(req, front=True)
        if retracted:
            old = self.new_token_ratio
            total_decoded = sum(r.generated for r in e.running)
            total_max_new = sum(r.max_new_tokens for r in e.running) or 1
            self.new_token_ratio = min(1.0, (total_decoded + RETRACT_DECODE_STEPS * len(e.running)) / total_max_new)
            e.counters.retracted_reqs += len(retracted)
            e._log_retracted += len(retracted)
            e.log(
                f"KV cache pool is full. Retract requests. #retracted_reqs: {len(retracted)}, "
                f"#new_token_ratio: {old:.4f} -> {self.new_token_ratio:.4f}"
            )

    # -- completion -----------------------------------------------------------------------------

    def complete(self, step: Step) -> list[Emission]:
        """The emissions of ``step``, which has just ended (its energy already accounted)."""
        if step.kind == "prefill":
            return self._complete_prefill(step)
        if step.kind == "run":
            return self._complete_run(step)
        return self._complete_decode(step)

    def _complete_run(self, step: Step) -> list[Emission]:
        """A coalesced run of ``len(step.ends)`` decode steps: each running request commits one token a
        step; those that reach their length finish at the run's end (only its last step can end one)."""
        e = self.e
        k = len(step.ends)
        end = step.end_s
        gap = (end - step.start_s) / k
        out: list[Emission] = []
        gen_total = 0
        itl = e.itl
        drawn: list[int] | None = None
        if step.commits is not None:
            drawn = step.commits[k - 1].tolist()
            n = len(step.reqs)
            e.counters.spec_cycles += n * k
            e.counters.spec_draft_tokens += n * k * (e.n_v - 1)
            e._log_cycles += n * k
        for j, req in enumerate(step.reqs):
            if req.state != RUNNING:
                continue
            c = k
            if drawn is not None:
                c = drawn[j]
                req.verify_ct += k
                e.counters.spec_accepted_tokens += c - k
                e._log_committed += c
            c = min(c, req.target_tokens - req.generated)
            req.generated += c
            req.kv_tokens += c
            req.prefilled += c
            gen_total += c
            if c > 0:
                itl.observe(gap, c)
            req.last_token_s = end
            done = req.generated >= req.target_tokens
            if done:
                e._finish(req, end)
            out.append(Emission(req, c, done))
        e._private += gen_total
        e.counters.generation_tokens += gen_total
        e.counters.decode_steps += k
        e._log_tokens += gen_total
        self.new_token_ratio = max(self.new_token_ratio - k * NEW_TOKEN_RATIO_DECAY, MIN_NEW_TOKEN_RATIO)
        return out

    def _complete_prefill(self, step: Step) -> list[Emission]:
        """A prefilled prompt commits its first token (a chunk goes back to the queue's front)."""
        e = self.e
        out: list[Emission] = []
        end = step.end_s
        for req, chunk in zip(step.reqs, step.chunks, strict=True):
            if req.state == ABORTED:
                continue
            req.prefilled += chunk
            if req.prefilled < req.recompute_len:
                e.waiting.appendleft(req)  # chunked: continue next step
                continue
            e._insert_prompt(req)
            if req.prefill_only:
                e._finish_prefill_only(req, end)
                out.append(Emission(req, 0, True))
                continue
            req.state = RUNNING
            e.running.append(req)
            out.append(e._commit(req, 1, end))
        return out

    def _complete_decode(self, step: Step) -> list[Emission]:
        """Each running request commits one token, or ``accepted + 1`` with speculative decoding."""
        e = self.e
        out: list[Emission] = []
        end = step.end_s
        n = len(step.reqs)
        committed: list[int] | None = None
        if e.spec is not None:
            committed = e._draw(step.reqs)
            e.counters.spec_cycles += n
            e.counters.spec_draft_tokens += n * (e.n_v - 1)
            e._log_cycles += n
        gen_total = 0
        itl = e.itl
        for i, req in enumerate(step.reqs):
            if req.state != RUNNING:
                continue
            c = 1
            if committed is not None:
                c = committed[i]
                req.verify_ct += 1
                e.counters.spec_accepted_tokens += c - 1
                e._log_committed += c
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
                e._finish(req, end)
                out.append(Emission(req, c, True))
            else:
                out.append(Emission(req, c, False))
        e._private += gen_total
        e.counters.generation_tokens += gen_total
        e._log_tokens += gen_total
        self.new_token_ratio = max(self.new_token_ratio - NEW_TOKEN_RATIO_DECAY, MIN_NEW_TOKEN_RATIO)
        if e.counters.decode_steps % e.profile.server.decode_log_interval == 0:
            e._log_decode(end)
        return out
