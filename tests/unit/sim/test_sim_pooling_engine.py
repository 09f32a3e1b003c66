"""Prefill-only (pooling) sequences in the engine, on a virtual clock: cost, batching, admission."""

from __future__ import annotations

import pytest
from test_sim_engine import drain, req, tiny

from loadgen.sim.engine import FINISHED, Engine, SimRequest


def pooled(rid: str, tokens: int) -> SimRequest:
    return SimRequest(rid, tokens, 0, 0, "stop", prefill_only=True)


def finish_times(engine: Engine) -> dict[str, float]:
    """Run to idle; the time of each request's last emission."""
    return {em.req.rid: t for t, em in drain(engine) if em.finished}


@pytest.mark.parametrize(("tokens", "expected_s"), [(10, 0.02002), (1000, 0.022), (8000, 0.036)])
def test_latency_is_one_prefill_step_growing_with_input_tokens(tokens: int, expected_s: float) -> None:
    e = Engine(tiny())
    e.submit(pooled("e", tokens), 0.0)
    e.advance(0.0)
    ems = drain(e)
    # tiny: a prefill step is 20 ms + 2 ms per 1k tokens; nothing is generated, no decode step
    assert [(t, em.tokens, em.finished) for t, em in ems] == [(pytest.approx(expected_s), 0, True)]
    r = ems[0][1].req
    assert r.state == FINISHED and r.generated == 0 and r.finish_reason == "stop"
    c = e.counters
    assert (c.decode_steps, c.prefill_steps, c.generation_tokens) == (0, 1, 0)
    assert (c.requests, c.finished, c.prompt_tokens) == (1, 1, tokens)
    assert e.ttft.count == 0 and e.e2e.count == 1  # no first token; end-to-end latency counted
    assert e.used_tokens == 0 and not e.requests and not e.running
    e.check_invariants()


def test_pooled_sequences_batch_with_a_generation_prefill() -> None:
    e = Engine(tiny())
    e.submit(req("gen", prompt=1000, out=3), 0.0)
    for i in range(3):
        e.submit(pooled(f"emb{i}", 2000), 0.0)
    e.advance(0.0)
    ems = drain(e)
    # one prefill step over 1000 + 3 * 2000 tokens: 20 + 14 ms; the generation request's first
    # token comes with it, then its decode steps run alone (pooled sequences never decode)
    assert e.counters.prefill_steps == 1
    done = {em.req.rid: t for t, em in ems if em.finished}
    for i in range(3):
        assert done[f"emb{i}"] == pytest.approx(0.034)
    gen_times = [t for t, em in ems if em.req.rid == "gen" and em.tokens]
    assert gen_times == pytest.approx([0.034, 0.039, 0.044])  # 5 ms steps of one request
    assert e.counters.decode_steps == 2
    e.check_invariants()


def test_pooled_sequence_queues_behind_a_running_prefill_and_grows_it_with_load() -> None:
    alone = Engine(tiny())
    alone.submit(pooled("e", 1000), 0.0)
    alone.advance(0.0)
    t_alone = finish_times(alone)["e"]

    e = Engine(tiny())
    e.submit(req("long", prompt=8000, out=2), 0.0)
    e.advance(0.0)  # the 36-ms prefill of "long" starts now
    e.submit(pooled("e", 1000), 0.001)
    times = finish_times(e)
    assert times["e"] == pytest.approx(0.036 + 0.022)  # waited for the step in flight, then its own
    assert times["e"] - 0.001 > t_alone


def test_pooled_sequences_count_against_max_running_and_the_token_budget() -> None:
    e = Engine(tiny(**{"server.max_running_requests": 2}))
    for i in range(5):
        e.submit(pooled(f"e{i}", 500), 0.0)
    e.advance(0.0)
    times = finish_times(e)
    # two sequences per step (1000 tokens: 22 ms), the fifth alone (500 tokens: 21 ms)
    assert [times[f"e{i}"] for i in range(5)] == pytest.approx([0.022, 0.022, 0.044, 0.044, 0.065])

    e = Engine(tiny(**{"server.chunked_prefill_size": 4096}))
    for i in range(3):
        e.submit(pooled(f"b{i}", 3000), 0.0)
    e.advance(0.0)
    times = finish_times(e)
    # 4096-token budget: b0 and a 1096-token chunk of b1, then b1's rest and a 2096-token chunk
    # of b2, then b2's last 904 tokens
    assert e.counters.prefill_steps == 3
    assert times["b0"] == pytest.approx(0.020 + 0.002 * 4.096)
    assert times["b2"] == pytest.approx(3 * 0.020 + 0.002 * 9.0)


def test_abort_of_a_waiting_pooled_sequence_frees_it() -> None:
    e = Engine(tiny(**{"server.max_running_requests": 1}))
    e.submit(req("gen", prompt=100, out=50), 0.0)
    e.advance(0.0)
    e.submit(pooled("e", 100), 0.0)  # waits: the one running slot is taken by "gen"
    drain(e, until=0.05)
    assert e.requests["e"].state != FINISHED
    assert e.abort("e", 0.05) is not None
    drain(e)
    assert e.counters.aborted == 1 and e.used_tokens == 0
    e.check_invariants()
