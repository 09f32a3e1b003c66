"""Prefix cache (RadixAttention-like): hits, shared blocks, LRU eviction, pool accounting, reporting."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from sim_testutil import SimProc, by_name, parse_prometheus

from loadgen.sim.engine import ABORTED, FINISHED, Engine, SimRequest
from loadgen.sim.prefix import PrefixCache
from loadgen.sim.profile import Profile, apply_overrides, load_profile
from loadgen.sim.prom import render_sglang, render_vllm
from loadgen.sim.text import count_prompt_tokens, prompt_block_hashes, prompt_text
from loadgen.sim.virtual import LoopResult, closed_loop

CHAT = "/v1/chat/completions"
B = 64  # default block size, estimated tokens (256 characters)
SGL_PREFILL = re.compile(
    r"Prefill batch(?: \[\d+\])?[.,] #new-seq: (\d+), #new-token: (\d+), #cached-token: (\d+), "
    r".*?#running-req: (\d+), #queue-req: (\d+)"
)


def tiny(**overrides: object) -> Profile:
    # 2 ms of prefill per 1k uncached tokens, so cache hits show in TTFT
    return apply_overrides(load_profile("tiny"), {"timing.ttft_per_1k_ms": 2.0, **overrides})


def words(seed: int, n_chars: int) -> str:
    rng = np.random.default_rng(seed)
    vocab = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "lambda"]
    text = " ".join(vocab[i] for i in rng.integers(0, len(vocab), n_chars // 4))
    return text[:n_chars]


def chat_request(engine: Engine, rid: str, messages: list[dict[str, str]], out: int = 4) -> SimRequest:
    """A request built from chat messages the way the HTTP server builds it."""
    body = {"messages": messages}
    text, n = prompt_text(body, True)
    s = engine.profile.server
    r = SimRequest(
        rid=rid,
        prompt_tokens=count_prompt_tokens(text, n, s.chars_per_token),
        max_new_tokens=out,
        target_tokens=out,
        stop_reason="length",
    )
    r.block_hashes = prompt_block_hashes(body, True, s.chars_per_token, s.prefix_block_tokens)
    return r


def run_one(engine: Engine, r: SimRequest, t0: float) -> float:
    """Submit at ``t0``, run to idle checking the pool after every step; return the TTFT."""
    engine.submit(r, t0)
    engine.advance(t0)
    while engine.next_event_s is not None:
        engine.advance(engine.next_event_s)
        engine.check_invariants()
    assert r.state == FINISHED
    return r.first_token_s - t0


def test_repeated_prompt_hits_all_full_blocks_and_is_faster() -> None:
    lines: list[str] = []
    e = Engine(tiny(), log=lines.append)
    msgs = [{"role": "system", "content": words(1, 8000)}, {"role": "user", "content": "What does it say?"}]
    first, second = chat_request(e, "a", msgs), chat_request(e, "b", msgs)
    assert first.block_hashes == second.block_hashes
    p = first.prompt_tokens  # 2000 + 5 + 8 = 2013
    ttft1 = run_one(e, first, 0.0)
    ttft2 = run_one(e, second, 10.0)
    assert first.cached_tokens == 0
    assert second.cached_tokens == (p - 1) // B * B  # all but the last partial block
    assert p - B < second.cached_tokens < p
    assert ttft1 == pytest.approx(0.020 + 0.002 * p / 1000)
    assert ttft2 == pytest.approx(0.020 + 0.002 * (p - second.cached_tokens) / 1000)
    prefills = [SGL_PREFILL.search(line) for line in lines if line.startswith("Prefill batch")]
    assert [(int(m[2]), int(m[3])) for m in prefills if m] == [(p, 0), (p - second.cached_tokens, second.cached_tokens)]
    assert e.gauges.cache_hit_rate == pytest.approx(second.cached_tokens / p)
    assert e.counters.cached_tokens == second.cached_tokens and e.counters.prefix_queries == 2 * p
    # everything finished: no KV held by requests, the prompt's blocks stay cached and evictable
    assert e.used_tokens == 0 and e.evictable_tokens == e.cache.total_tokens == second.cached_tokens  # type: ignore[union-attr]


def test_seed_profile_16k_document_ttft_drops_on_reuse() -> None:
    e = Engine(load_profile("b300x8-kimi-k2.6-ddtree"))
    doc = words(2, 64000)  # 16k tokens
    ttfts = []
    for k in range(3):
        r = chat_request(e, f"q{k}", [{"role": "system", "content": doc}, {"role": "user", "content": f"Q{k}?"}])
        ttfts.append(run_one(e, r, 100.0 * k))
        assert r.cached_tokens == (0 if k == 0 else 16000)
    assert ttfts[1] < 0.1 * ttfts[0] and ttfts[2] == pytest.approx(ttfts[1])


def test_shared_prefix_then_divergence_shares_exactly_the_common_blocks() -> None:
    e = Engine(tiny())
    doc = words(3, 5000)
    a = chat_request(e, "a", [{"role": "user", "content": doc + " first: " + words(30, 900)}])
    b = chat_request(e, "b", [{"role": "user", "content": doc + " second: " + words(31, 900)}])
    # the block stream is a 16-character role marker then the content: 5016 common characters
    common = (16 + len(doc) + len(" ")) // (B * 4)
    assert common == 19
    assert a.block_hashes[:common] == b.block_hashes[:common]
    assert a.block_hashes[common] != b.block_hashes[common]
    run_one(e, a, 0.0)
    run_one(e, b, 1.0)
    assert b.cached_tokens == common * B
    # b's own blocks after the divergence were added beside a's: a tree with one fork
    assert e.cache is not None and len(e.cache.blocks) == len(a.block_hashes) + len(b.block_hashes) - common


def test_identical_prompts_prefilled_together_keep_one_cached_copy() -> None:
    e = Engine(tiny())
    msgs = [{"role": "user", "content": words(9, 4000)}]
    a, b = chat_request(e, "a", msgs, out=50), chat_request(e, "b", msgs, out=50)
    e.submit(a, 0.0)
    e.submit(b, 0.0)
    e.advance(0.0)
    assert e.current is not None and e.current.kind == "prefill" and len(e.current.reqs) == 2
    e.advance(e.current.end_s)  # both prefilled in one batch: neither could hit
    e.check_invariants()
    p, shared = a.prompt_tokens, (a.prompt_tokens - 1) // B * B
    assert a.cached_tokens == b.cached_tokens == 0 and e.cache is not None
    # b's copy of the shared blocks was freed: the pool holds them once, locked by both
    assert e.cache.total_tokens == shared and e.evictable_tokens == 0
    assert e.used_tokens == shared + 2 * (p - shared + 1) and e.free_tokens == e.pool_tokens - e.used_tokens
    while e.next_event_s is not None:
        e.advance(e.next_event_s)
    e.check_invariants()
    assert e.used_tokens == 0 and e.evictable_tokens == shared


def test_lru_evicts_least_recently_used_leaves_never_locked_ones() -> None:
    c = PrefixCache(B)
    x1, _ = c.insert(1, None)
    x2, _ = c.insert(2, x1)
    x3, _ = c.insert(3, x2)
    y1, _ = c.insert(11, None)
    y2, _ = c.insert(12, y1)
    assert c.total_tokens == 5 * B and c.evictable_tokens == 0
    c.unlock([x1, x2, x3])  # x used less recently than y
    c.unlock([y1, y2])
    assert c.evictable_tokens == 5 * B
    assert c.evict(1) == B and set(c.blocks) == {1, 2, 11, 12}  # x's tail first
    assert c.lock(c.match([11, 12])) == 2 * B  # y in use again
    assert c.evict(10 * B) == 2 * B and set(c.blocks) == {11, 12}  # only x could go
    assert c.evict(B) == 0
    c.check()
    # a shared prefix is one path: two users lock it twice, it stays until both let go
    z, new = c.insert(11, None)
    assert not new and z is y1 and y1.ref == 2
    c.unlock([y1])
    c.unlock([y1, y2])
    assert c.evictable_tokens == 2 * B and c.evict(2 * B) == 2 * B and not c.blocks
    c.check()


def test_small_pool_under_mixed_load_keeps_accounting_consistent() -> None:
    """Random arrivals, shared and unique prefixes, aborts, retractions on a 1220-token pool."""
    e = Engine(tiny(**{"hardware.hbm_gb": 1.3}))
    assert e.pool_tokens == 1220 and e.cache is not None
    rng = np.random.default_rng(7)
    docs = [words(10 + i, 1600) for i in range(3)]  # three 400-token shared prefixes
    t = 0.0
    reqs: list[SimRequest] = []
    for i in range(120):
        t += float(rng.exponential(0.01))
        while e.next_event_s is not None and e.next_event_s <= t:
            e.advance(e.next_event_s)
            e.check_invariants()
        if rng.random() < 0.6:
            content = docs[int(rng.integers(0, 3))] + f" question {i}"
        else:
            content = words(1000 + i, int(rng.integers(200, 2400)))
        r = chat_request(e, f"r{i}", [{"role": "user", "content": content}], out=int(rng.integers(1, 120)))
        e.submit(r, t)
        reqs.append(r)
        if not e.busy:
            e.advance(t)
        e.check_invariants()
        if i % 17 == 5:
            e.abort(reqs[i - 2].rid, t, "client went away")
            e.check_invariants()
    while e.next_event_s is not None:
        e.advance(e.next_event_s)
        e.check_invariants()
    assert all(r.state in (FINISHED, ABORTED) for r in reqs)
    assert e.used_tokens == 0 and e.evictable_tokens == e.cache.total_tokens <= e.pool_tokens
    assert e.cache.evicted_tokens > 0  # the pool was too small to keep everything
    assert e.counters.retracted_reqs > 0  # and running requests were retracted (their blocks unlocked)
    assert e.counters.cached_tokens > 0  # and shared prefixes still hit
    assert sum(1 for r in reqs if r.cached_tokens >= 6 * B) > 10


def test_disable_radix_cache_gives_no_hits_and_full_prefill() -> None:
    e = Engine(tiny(**{"server.disable_radix_cache": True}))
    assert e.cache is None
    msgs = [{"role": "user", "content": words(4, 8000)}]
    ttfts = [run_one(e, chat_request(e, f"x{k}", msgs), 10.0 * k) for k in range(2)]
    assert ttfts[0] == pytest.approx(ttfts[1])
    assert e.counters.cached_tokens == 0 and e.counters.prefix_queries == 0


def test_unique_prompts_leave_the_calibration_unchanged() -> None:
    profile = load_profile("b300x8-kimi-k2.6-ddtree")

    def loop(shared_prefix_tokens: int | None) -> LoopResult:
        return closed_loop(
            profile,
            64,
            prompt_tokens=1000,
            output_tokens=512,
            stagger_s=0.05,
            warmup_s=10.0,
            window_s=15.0,
            shared_prefix_tokens=shared_prefix_tokens,
        )

    plain, unique = loop(None), loop(0)
    assert unique == plain  # every prompt enters the cache and none hits: nothing else changes
    shared = loop(896)
    assert shared.cache_hit_rate > 0.8 and shared.mean_ttft_s < plain.mean_ttft_s


def test_metrics_report_hits_in_both_styles() -> None:
    e = Engine(tiny())
    msgs = [{"role": "user", "content": words(5, 4000)}]
    for k in range(3):
        run_one(e, chat_request(e, f"m{k}", msgs), float(k))
    hit = e.counters.cached_tokens
    assert hit == 2 * ((1004 - 1) // B * B)
    sgl = parse_prometheus(render_sglang(e, "m"))
    assert by_name(sgl, "sglang:cached_tokens_total") == [hit]
    assert by_name(sgl, "sglang:cache_hit_rate")[0] == pytest.approx(hit / 2 / 1004)
    vllm = parse_prometheus(render_vllm(e, "m"))
    assert by_name(vllm, "vllm:prefix_cache_hits_total") == [hit]
    assert by_name(vllm, "vllm:prefix_cache_queries_total") == [3 * 1004]


def _usage_of_stream(events: list[tuple[int, bytes]]) -> dict[str, object]:
    objs = [json.loads(p) for _, p in events if p != b"[DONE]"]
    usage = [o["usage"] for o in objs if not o["choices"]]
    assert len(usage) == 1
    result: dict[str, object] = usage[0]
    return result


def test_http_usage_carries_cached_tokens_and_metrics_move(tmp_path: Path) -> None:
    log = tmp_path / "sim.log"
    proc = SimProc(tmp_path, "--profile", "tiny", "--log-file", str(log))
    try:
        doc = words(6, 6000)
        body = {"messages": [{"role": "user", "content": doc}], "max_tokens": 3, "ignore_eos": True}
        status, _, raw = proc.post(CHAT, body)
        assert status == 200
        first = json.loads(raw)["usage"]
        assert first["prompt_tokens"] == 1504 and first["prompt_tokens_details"] == {"cached_tokens": 0}
        rate0 = by_name(parse_prometheus(proc.get("/metrics")[1].decode()), "sglang:cache_hit_rate")
        status, events = proc.stream(CHAT, {**body, "stream": True, "stream_options": {"include_usage": True}})
        assert status == 200
        cached = (1504 - 1) // B * B
        assert _usage_of_stream(events)["prompt_tokens_details"] == {"cached_tokens": cached}
        samples = parse_prometheus(proc.get("/metrics")[1].decode())
        assert rate0 == [0.0] and by_name(samples, "sglang:cache_hit_rate")[0] == pytest.approx(cached / 1504)
        assert by_name(samples, "sglang:cached_tokens_total") == [cached]
        completion = {"prompt": doc, "max_tokens": 2, "ignore_eos": True}
        proc.post("/v1/completions", completion)
        status, _, raw = proc.post("/v1/completions", completion)  # the plain prompt: no role marker
        assert json.loads(raw)["usage"]["prompt_tokens_details"] == {"cached_tokens": (1500 - 1) // B * B}
    finally:
        proc.stop()
    hits = [int(m[3]) for m in map(SGL_PREFILL.search, log.read_text().splitlines()) if m]
    assert hits == [0, cached, 0, (1500 - 1) // B * B]


def test_http_disable_radix_cache_flag(tmp_path: Path) -> None:
    proc = SimProc(tmp_path, "--profile", "tiny", "--disable-radix-cache", "--metrics-style", "vllm")
    try:
        body = {"messages": [{"role": "user", "content": words(8, 6000)}], "max_tokens": 2, "ignore_eos": True}
        for _ in range(2):
            status, _, raw = proc.post(CHAT, body)
            assert status == 200 and json.loads(raw)["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
        samples = parse_prometheus(proc.get("/metrics")[1].decode())
        assert by_name(samples, "vllm:prefix_cache_hits_total") == [0]
        assert json.loads(proc.get("/server_info")[1])["disable_radix_cache"] is True
    finally:
        proc.stop()
