"""SGLang's priority preemption (sched_sglang.py, after SGLang's ``PrefillAdder.preempt_to_schedule``)
on the virtual clock, against schedules worked by hand.

The tiny profile's timing: a prefill of n tokens takes 20 ms + 2 ms per 1,000, a decode step of c
requests 5 ms * (1 + 0.01 (c - 1)). SGLang serves the higher priority value first by default.
"""

from __future__ import annotations

import pytest

from loadgen.sim.engine import Engine
from loadgen.sim.profile import Profile, apply_overrides, load_profile
from tests.unit.sim.test_sched_vllm import decode_s, prefill_s, req, run


def sglang(**overrides: object) -> Profile:
    base = {"server.scheduling_policy": "priority", "server.low_priority_values_first": False,
            "server.disable_radix_cache": True, "server.max_running_requests": 1}  # fmt: skip
    return apply_overrides(load_profile("tiny"), {**base, **overrides})


def _two(chat_priority: int, **overrides: object) -> tuple[Engine, dict[str, list[float]]]:
    """batch (priority 0, 20-token prompt, 30 out) at 0; chat (20 in, 5 out) at 50 ms, mid-decode."""
    e = Engine(sglang(**overrides))
    batch, chat = req("batch", 20, 30), req("chat", 20, 5)
    batch.priority, chat.priority = 0, chat_priority
    return e, run(e, [(0.0, batch), (0.050, chat)])


def test_a_waiting_request_beating_the_threshold_preempts_the_running_one() -> None:
    e, times = _two(20)
    # batch: prefilled by 20.04 ms, then a token every 5 ms; the step that ends after chat's arrival
    # is the last it runs before chat preempts it (one slot: --max-running-requests 1)
    first = prefill_s(20)
    steps_before = 1 + int((0.050 - first) // decode_s(1)) + 1  # its first token, then the decodes to 50 ms+
    preempted_at = first + (steps_before - 1) * decode_s(1)
    assert times["batch"][:steps_before] == pytest.approx([first + k * decode_s(1) for k in range(steps_before)])
    # chat is prefilled at once, and runs to its end alone
    assert times["chat"][0] == pytest.approx(preempted_at + prefill_s(20))
    chat_end = times["chat"][0] + 4 * decode_s(1)
    assert times["chat"][-1] == pytest.approx(chat_end)
    # batch goes back to the queue and is prefilled again, its prompt and what it had generated
    assert times["batch"][steps_before] == pytest.approx(chat_end + prefill_s(20 + steps_before))
    assert len(times["batch"]) == 30 and len(times["chat"]) == 5
    assert e.counters.preempted_reqs == 1 and e.counters.retracted_reqs == 0


@pytest.mark.parametrize(
    ("chat_priority", "overrides"),
    [(5, {}), (20, {"server.disable_priority_preemption": True}), (20, {"server.scheduling_policy": "fcfs"})],
    ids=["within-the-threshold", "preemption-off", "first-come-first-served"],
)
def test_no_preemption_within_the_threshold_or_when_it_is_off(chat_priority: int, overrides: dict[str, object]) -> None:
    e, times = _two(chat_priority, **overrides)
    batch_end = prefill_s(20) + 29 * decode_s(1)
    assert times["batch"][-1] == pytest.approx(batch_end)  # batch never stopped
    assert times["chat"][0] == pytest.approx(batch_end + prefill_s(20))  # chat waited for the slot
    assert e.counters.preempted_reqs == 0


def test_a_request_the_pool_cannot_hold_preempts_for_room_and_the_threshold_still_holds() -> None:
    # a 64-token pool and slots to spare: batch holds its prompt and reserves for its output, so chat's
    # 20 + 30 do not fit; beating batch by 20 it takes the room, beaten by 5 it waits
    for chat_priority, preempted in ((20, 1), (5, 0)):
        e = Engine(sglang(**{"server.max_running_requests": 8}))
        e.pool_tokens = 64
        batch, chat = req("batch", 20, 30), req("chat", 20, 30)
        batch.priority, chat.priority = 0, chat_priority
        times = run(e, [(0.0, batch), (0.050, chat)])
        assert e.counters.preempted_reqs == preempted, chat_priority
        assert len(times["batch"]) == len(times["chat"]) == 30
        if preempted:
            assert times["chat"][-1] < times["batch"][-1]
        else:
            assert times["chat"][0] > times["batch"][0]
