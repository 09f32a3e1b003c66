"""vLLM's V1 scheduler (sched_vllm.py) on the virtual clock, against schedules worked by hand.

The tiny profile's timing is given: a prefill of n tokens takes 20 ms + 2 ms per 1,000, a decode step
of c requests 5 ms * (1 + 0.01 (c - 1)), and a vLLM step that holds both costs the two together.
"""

from __future__ import annotations

import pytest

from loadgen.sim.engine import FINISHED, Emission, Engine, SimRequest
from loadgen.sim.engines import with_engine
from loadgen.sim.model import StepModel
from loadgen.sim.profile import Profile, apply_overrides, load_profile
from loadgen.sim.prom import render_vllm
from loadgen.telemetry import prom
from loadgen.telemetry.server import map_metrics


def vllm(**overrides: object) -> Profile:
    base = {
        "server.engine": "vllm",
        "server.prefix_block_tokens": 16,
        "server.disable_radix_cache": True,
        "server.chunked_prefill_size": 8192,
    }
    return apply_overrides(load_profile("tiny"), {**base, **overrides})


def req(rid: str, prompt: int, out: int) -> SimRequest:
    return SimRequest(rid=rid, prompt_tokens=prompt, max_new_tokens=out, target_tokens=out, stop_reason="length")


def run(e: Engine, arrivals: list[tuple[float, SimRequest]]) -> dict[str, list[float]]:
    """Drive the engine on a virtual clock; the times at which each request got each token."""
    pending = sorted(arrivals, key=lambda a: a[0])
    times: dict[str, list[float]] = {r.rid: [] for _, r in arrivals}

    def record(t: float, ems: list[Emission]) -> None:
        for em in ems:
            times[em.req.rid].extend([t] * em.tokens)
        e.check_invariants()

    while pending or e.next_event_s is not None:
        t_step = e.next_event_s
        if pending and (t_step is None or pending[0][0] < t_step):
            t = pending[0][0]
            while pending and pending[0][0] == t:  # arrivals at one instant are queued together
                e.submit(pending.pop(0)[1], t)
            if not e.busy:
                record(t, e.advance(t))
            continue
        assert t_step is not None
        record(t_step, e.advance(t_step))
    return times


def prefill_s(n: int) -> float:
    return 0.020 + 0.002 * n / 1000


def decode_s(c: int) -> float:
    return 0.005 * (1 + 0.01 * (c - 1))


def test_the_token_budget_is_shared_by_decodes_and_a_chunked_prompt() -> None:
    e = Engine(vllm(**{"server.chunked_prefill_size": 512}))
    a, b = req("a", 100, 3), req("b", 1000, 2)
    times = run(e, [(0.0, a), (0.001, b)])
    t1 = prefill_s(100)  # a alone
    t2 = t1 + decode_s(1) + prefill_s(511)  # a's decode takes 1 of the 512 tokens, b's first chunk 511
    t3 = t2 + decode_s(1) + prefill_s(489)  # b's last 489 tokens beside a's last decode: b's first token
    t4 = t3 + decode_s(1)
    assert times["a"] == pytest.approx([t1, t2, t3])
    assert times["b"] == pytest.approx([t3, t4])
    assert a.state == FINISHED and b.state == FINISHED
    assert e.counters.prefill_steps == 3 and e.counters.decode_steps == 3


def test_a_preempted_request_goes_back_to_the_queue_and_is_prefilled_again() -> None:
    e = Engine(vllm())
    e.pool_tokens = 64  # four blocks of 16
    a, b = req("a", 20, 30), req("b", 20, 30)
    times = run(e, [(0.0, a), (0.0, b)])
    t1 = prefill_s(40)  # both admitted at once: two blocks each, nothing reserved for their output
    assert times["a"][0] == pytest.approx(t1) and times["b"][0] == pytest.approx(t1)
    # both decode until a's 13th token needs a third block: the newest running request (b) is
    # preempted by recompute and a goes on alone
    t_pre = t1 + 12 * decode_s(2)
    assert times["b"][:13] == pytest.approx([t1 + k * decode_s(2) for k in range(13)])
    assert times["a"] == pytest.approx(
        [t1 + k * decode_s(2) for k in range(13)] + [t_pre + k * decode_s(1) for k in range(1, 18)]
    )
    # b cannot come back while a holds three blocks (it needs three for its 20 + 13 tokens); when a
    # ends, b's prompt and 13 tokens are prefilled again and its 14th token follows that prefill
    t_a_end = times["a"][-1]
    t_back = t_a_end + prefill_s(33)
    assert times["b"][13:] == pytest.approx([t_back + k * decode_s(1) for k in range(17)])
    assert e.counters.retracted_reqs == 1 and b.retractions == 1 and a.retractions == 0
    assert e.counters.retracted_output_tokens == 13
    assert len(times["a"]) == len(times["b"]) == 30


def test_vllm_admits_what_sglang_holds_back_for_future_output() -> None:
    # a pool of 2,000 tokens, two requests of 500 + up to 1,000 output: SGLang admits the second only
    # when the first's reservation leaves room; vLLM admits both and preempts later if it must
    arrivals = [(0.0, req("a", 500, 1000)), (0.0, req("b", 500, 1000))]
    firsts = {}
    for engine in ("sglang", "vllm"):
        p = vllm(**{"server.engine": engine})
        e = Engine(p)
        e.pool_tokens = 2000
        times = run(e, [(t, req(r.rid, r.prompt_tokens, r.target_tokens)) for t, r in arrivals])
        firsts[engine] = (times["a"][0], times["b"][0])
    assert firsts["vllm"] == pytest.approx((prefill_s(1000), prefill_s(1000)))
    assert firsts["sglang"][0] == pytest.approx(prefill_s(500))
    assert firsts["sglang"][1] > firsts["sglang"][0] + 0.5  # b waited for a's reservation to shrink


def test_a_request_that_can_never_fit_is_aborted_not_left_waiting() -> None:
    e = Engine(vllm())
    e.pool_tokens = 48
    a = req("a", 40, 30)  # 40 + 30 tokens need five blocks of 16: the pool has three
    times = run(e, [(0.0, a)])
    assert a.finish_reason == "abort" and "cannot fit" in a.abort_message
    assert len(times["a"]) == 9  # tokens 1..9 fit in three blocks (40 + 8 computed, the 9th sampled)
    assert e.next_event_s is None and not e.waiting and not e.running


def test_a_mixed_step_is_each_part_alone_and_shares_the_weights_read() -> None:
    m = StepModel(with_engine(load_profile("generic"), "vllm"))
    dec = m.decode(32, 32 * 2000.0)
    pre = m.prefill(2048, 2048 * 1024.0, 1)
    assert m.mixed(32, 32 * 2000.0, 0, 0.0, 0).duration_s == dec.duration_s
    assert m.mixed(0, 0.0, 2048, 2048 * 1024.0, 1).duration_s == pre.duration_s
    both = m.mixed(32, 32 * 2000.0, 2048, 2048 * 1024.0, 1).duration_s
    assert max(dec.duration_s, pre.duration_s) < both < dec.duration_s + pre.duration_s


def test_the_simulated_vllm_exports_its_pool_as_vllm_does_and_telemetry_reads_it_back() -> None:
    e = Engine(vllm())
    e.pool_tokens = 64
    rec = map_metrics(prom.parse(render_vllm(e, "tiny")))
    assert rec["engine"] == "vllm" and rec["kv_capacity_tokens"] == 64 and rec["kv_block_tokens"] == 16


def test_under_the_priority_policy_the_lowest_priority_is_preempted_and_the_queue_goes_by_priority() -> None:
    # the preemption test's pool, a (priority 0) arriving after b (priority 1): first come first
    # served preempts the newest (a); the priority policy preempts b, the lowest, scheduled first
    for policy, victim in (("fcfs", "a"), ("priority", "b")):
        e = Engine(vllm(**{"server.scheduling_policy": policy}))
        e.pool_tokens = 64
        b, a = req("b", 20, 30), req("a", 20, 30)
        b.priority, a.priority = 1, 0
        times = run(e, [(0.0, b), (0.001, a)])
        assert [r.rid for r in (a, b) if r.retractions] == [victim], policy
        assert len(times["a"]) == len(times["b"]) == 30
    # waiting requests: the policy serves the lower value first, then the earlier arrival
    e = Engine(vllm(**{"server.scheduling_policy": "priority", "server.max_running_requests": 1}))
    order = [("late-urgent", 0, 0.002), ("first", 2, 0.0), ("second", 1, 0.001), ("early-urgent", 0, 0.0015)]
    reqs = {}
    for rid, prio, _ in order:
        reqs[rid] = req(rid, 20, 2)
        reqs[rid].priority = prio
    times = run(e, [(t, reqs[rid]) for rid, _, t in order])
    by_first = sorted(times, key=lambda rid: times[rid][0])
    assert by_first == ["first", "early-urgent", "late-urgent", "second"]  # "first" ran before the others came
    # SGLang's default: the higher value first (unless --schedule-low-priority-values-first)
    e = Engine(vllm(**{"server.scheduling_policy": "priority", "server.max_running_requests": 1,
                       "server.low_priority_values_first": False}))  # fmt: skip
    reqs = {}
    for rid, prio, _ in order:
        reqs[rid] = req(rid, 20, 2)
        reqs[rid].priority = prio
    times = run(e, [(t, reqs[rid]) for rid, _, t in order])
    assert sorted(times, key=lambda rid: times[rid][0]) == ["first", "second", "early-urgent", "late-urgent"]
