"""Engine behaviour on a virtual clock: exact step times, batching, KV pool, retraction, limits."""

from __future__ import annotations

import re

import numpy as np
import pytest

from loadgen.sim.acceptance import acceptance_cdf
from loadgen.sim.engine import ABORTED, FINISHED, Emission, Engine, RejectError, SimRequest
from loadgen.sim.profile import Profile, apply_overrides, load_profile

# the scanner patterns of reference/telemetry-metrics-knee.md section 3.4 (SGLang's own wording)
SGL_RETRACT = re.compile(
    r"KV cache pool is full\. Retract requests\. #retracted_reqs: (\d+)(?:, #new_tokens_gained: (\d+))?, "
    r"#new_token_ratio: ([\d.]+) -> ([\d.]+)"
)
SGL_DECODE = re.compile(
    r"Decode batch(?: \[\d+\])?[.,] #running-req: (\d+), #token: (\d+), token usage: ([\d.]+), "
    r"(?:accept len: ([\d.]+), accept rate: ([\d.]+), )?.*?gen throughput \(token/s\): ([\d.]+), #queue-req: (\d+)"
)


def tiny(**overrides: object) -> Profile:
    return apply_overrides(load_profile("tiny"), dict(overrides))


def req(rid: str, prompt: int = 1000, out: int = 10, max_new: int | None = None, source: str = "default") -> SimRequest:
    return SimRequest(
        rid=rid,
        prompt_tokens=prompt,
        max_new_tokens=max_new or out,
        target_tokens=out,
        stop_reason="length",
        source=source,
    )


def drain(engine: Engine, lines: list[str] | None = None, until: float = 1e9) -> list[tuple[float, Emission]]:
    """Run the engine to idle on the virtual clock; return (time, emission) pairs."""
    out: list[tuple[float, Emission]] = []
    while engine.next_event_s is not None and engine.next_event_s <= until:
        t = engine.next_event_s
        out.extend((t, em) for em in engine.advance(t))
    return out


def test_exact_ttft_and_step_times_single_request() -> None:
    e = Engine(tiny())
    e.submit(req("a", prompt=1000, out=10), 0.0)
    e.advance(0.0)
    ems = drain(e)
    times = [t for t, em in ems if em.tokens]
    # prefill: 20 ms + 2 ms per 1k prompt tokens; then one token every 5 ms
    assert times[0] == pytest.approx(0.022)
    assert np.diff(times) == pytest.approx([0.005] * 9)
    assert sum(em.tokens for _, em in ems) == 10
    assert ems[-1][1].finished and ems[-1][1].req.state == FINISHED


def test_decode_step_slows_with_batch_size() -> None:
    e = Engine(tiny())
    for i in range(3):
        e.submit(req(f"r{i}", prompt=100, out=5), 0.0)
    e.advance(0.0)
    ems = drain(e)
    t_first = sorted({t for t, em in ems if em.req.rid == "r0"})
    # all three prefilled in one batch (20 ms + 2 ms per 1k of the 300 tokens), then steps of
    # 5 * (1 + 0.01 * 2) ms
    assert t_first[0] == pytest.approx(0.0206)
    assert np.diff(t_first) == pytest.approx([0.0051] * 4)


def test_prefill_is_chunked_at_chunked_prefill_size() -> None:
    e = Engine(tiny(**{"server.chunked_prefill_size": 4096}))
    e.submit(req("long", prompt=10000, out=2), 0.0)
    e.advance(0.0)
    ems = drain(e)
    assert e.counters.prefill_steps == 3  # 4096 + 4096 + 1808
    first = min(t for t, em in ems if em.tokens)
    assert first == pytest.approx(0.020 * 3 + 0.002 * 10.0)


def test_context_length_and_queue_limits_reject_with_real_messages() -> None:
    e = Engine(tiny(**{"server.max_queued_requests": 2, "server.max_running_requests": 1}))
    with pytest.raises(RejectError) as exc:
        e.check(40000, 10)
    assert exc.value.status == 400 and "longer than the model's context length (32768 tokens)" in exc.value.message
    with pytest.raises(RejectError) as exc:
        e.check(30000, 5000)
    assert exc.value.status == 400 and "maximum context length of 32768 tokens" in exc.value.message
    e.submit(req("q0", prompt=10), 0.0)
    e.advance(0.0)  # admitted: running
    for i in (1, 2):
        e.check(10, 10)
        e.submit(req(f"q{i}", prompt=10), 0.0)  # max_running_requests 1: these wait
    with pytest.raises(RejectError) as exc:
        e.check(10, 10)
    assert exc.value.status == 503 and exc.value.message == "The request queue is full."


def test_abort_frees_kv() -> None:
    e = Engine(tiny())
    e.submit(req("a", prompt=500, out=100), 0.0)
    e.advance(0.0)
    drain(e, until=0.05)
    assert e.used_tokens > 500
    e.abort("a", 0.05)
    assert e.used_tokens == 0 and not e.running
    assert e.counters.aborted == 1


def test_kv_pool_full_retracts_and_everyone_finishes() -> None:
    lines: list[str] = []
    # pool = (0.8 * 1.3 GB - 1 GB) / 32 KiB = 1220 tokens
    e = Engine(tiny(**{"hardware.hbm_gb": 1.3}), log=lines.append)
    assert e.pool_tokens == 1220
    for i in range(6):
        e.submit(req(f"r{i}", prompt=150, out=300), 0.0)
    e.advance(0.0)
    ems = drain(e)
    assert e.counters.retracted_reqs > 0
    assert any(SGL_RETRACT.search(line) for line in lines)
    done = {em.req.rid for _, em in ems if em.finished}
    assert done == {f"r{i}" for i in range(6)}
    per_req: dict[str, int] = {}
    for _, em in ems:
        per_req[em.req.rid] = per_req.get(em.req.rid, 0) + em.tokens
    assert set(per_req.values()) == {300}  # recompute after retraction does not re-emit tokens
    assert e.used_tokens == 0


def test_request_larger_than_pool_is_aborted() -> None:
    e = Engine(tiny(**{"hardware.hbm_gb": 1.3}))
    e.submit(req("huge", prompt=5000, out=10), 0.0)
    ems = e.advance(0.0)
    assert [(em.req.rid, em.finished) for em in ems] == [("huge", True)]
    assert ems[0].req.state == ABORTED and "cannot fit in the KV cache pool" in ems[0].req.abort_message


@pytest.mark.parametrize(("tau", "depth"), [(4.4, 8), (2.5, 3), (1.5, 7)])
def test_acceptance_distribution_mean_and_bounds(tau: float, depth: int) -> None:
    cdf = acceptance_cdf(tau, depth)
    pmf = np.diff(np.concatenate([[0.0], cdf]))
    assert len(pmf) == depth + 1
    assert float(np.dot(np.arange(1, depth + 2), pmf)) == pytest.approx(tau, rel=1e-6)


def test_speculative_chunks_carry_accepted_plus_one_tokens() -> None:
    p = load_profile("b300x8-kimi-k2.6-ddtree")
    e = Engine(p, seed=3)
    e.submit(req("s", prompt=1000, out=5000, max_new=5000), 0.0)
    e.advance(0.0)
    ems = drain(e)
    sizes = np.array([em.tokens for _, em in ems[1:-1]])  # skip prefill token and the capped last chunk
    assert sizes.min() >= 1 and sizes.max() <= p.spec.depth + 1
    assert sizes.mean() == pytest.approx(p.spec.tau, rel=0.05)
    assert sum(em.tokens for _, em in ems) == 5000


def test_code_prompts_accept_more_than_prose() -> None:
    p = load_profile("b300x8-kimi-k2.6-ddtree")
    means = {}
    for source in ("code", "prose"):
        e = Engine(p, seed=1)
        e.submit(req(source, prompt=500, out=4000, max_new=4000, source=source), 0.0)
        e.advance(0.0)
        means[source] = np.mean([em.tokens for _, em in drain(e)[1:-1]])
    assert means["code"] > means["prose"] + 0.5


def test_gauges_refresh_only_at_log_points() -> None:
    lines: list[str] = []
    e = Engine(tiny(), log=lines.append)
    e.submit(req("a", prompt=100, out=200), 0.0)
    e.advance(0.0)
    drain(e, until=0.020 + 0.0002 + 0.005 * 10)
    assert e.gauges.num_running_reqs == 0  # published at the prefill, before the request ran
    drain(e, until=0.0202 + 0.005 * 45)
    assert e.gauges.num_running_reqs == 1  # the 40th decode step published
    decode_lines = [line for line in lines if line.startswith("Decode batch, #running-req: 1, #token: ")]
    assert len(decode_lines) == 1 and "gen throughput (token/s): " in decode_lines[0]
    assert any(line.startswith("Prefill batch, #new-seq: 1, #new-token: 100,") for line in lines)


def test_speculative_decode_lines_carry_accept_length() -> None:
    lines: list[str] = []
    e = Engine(load_profile("b300x8-kimi-k2.6-ddtree"), log=lines.append)
    for i in range(4):
        e.submit(req(f"s{i}", prompt=500, out=2000, max_new=2000), 0.0)
    e.advance(0.0)
    drain(e)
    matches = [m for m in map(SGL_DECODE.search, lines) if m]
    assert matches
    running, _, _, accept_len, _, gen_tput, queue = matches[0].groups()
    assert running == "4" and queue == "0"
    assert float(accept_len) == pytest.approx(4.4, abs=0.5)
    assert float(gen_tput) > 0
