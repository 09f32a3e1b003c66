"""The prefix cache keeps generated tokens too: a conversation's next turn hits prompt + reply."""

from __future__ import annotations

import numpy as np
import pytest
from test_sim_prefix_cache import B, chat_request, run_one, tiny, words

from loadgen.sim.continuation import PromptContinuation, continuation
from loadgen.sim.engine import ABORTED, FINISHED, Engine, SimRequest
from loadgen.sim.profile import load_profile
from loadgen.sim.text import TextSource, count_prompt_tokens, prompt_block_hashes, prompt_text

Messages = list[dict[str, str]]


def with_reply(engine: Engine, r: SimRequest, messages: Messages, seed: int) -> list[str]:
    """Give ``r`` a reply (words from a seeded text source, as the server's) and the hook that
    caches it; returns the reply's words (``"".join(words[:n])``: its first n tokens)."""
    text = TextSource(seed).take(r.target_tokens).decode()
    reply_words = [" " + w for w in text.split(" ")[1:]]
    assert len(reply_words) == r.target_tokens
    s = engine.profile.server
    r.continued_block_hashes = PromptContinuation(
        messages, "", s.chars_per_token, s.prefix_block_tokens, lambda n: "".join(reply_words[:n])
    )
    return reply_words


def tokens_of(messages: Messages) -> int:
    text, n = prompt_text({"messages": messages}, True)
    return count_prompt_tokens(text, n, 4.0)


def test_second_turn_hits_prompt_and_reply_and_is_much_faster() -> None:
    profile = load_profile("b300x8-kimi-k2.6-ddtree")
    turn1: Messages = [{"role": "system", "content": words(1, 32000)}, {"role": "user", "content": "Summarise."}]
    e = Engine(profile)
    r1 = chat_request(e, "t1", turn1, out=1000)
    reply = with_reply(e, r1, turn1, seed=5)
    run_one(e, r1, 0.0)
    turn2 = [*turn1, {"role": "assistant", "content": "".join(reply)}, {"role": "user", "content": "Go on."}]
    r2 = chat_request(e, "t2", turn2, out=8)
    warm_ttft = run_one(e, r2, 100.0)

    # the cached part is every full block of: turn 1's messages, the assistant marker, the reply
    # but its last token (whose KV is never computed)
    known = [*turn1, {"role": "assistant", "content": "".join(reply[:-1])}]
    assert r2.cached_tokens == len(prompt_block_hashes({"messages": known}, True, 4.0, B)) * B
    prompt1_and_reply = tokens_of([*turn1, {"role": "assistant", "content": "".join(reply)}])
    assert prompt1_and_reply - B - 4 < r2.cached_tokens <= prompt1_and_reply  # block + last word
    assert r2.cached_tokens > r1.prompt_tokens + r1.generated  # 8012 + 1000 (the reply is ~1,440 here)
    assert r2.prompt_tokens - r2.cached_tokens < B

    # the same second turn on a cold server, and on one that caches prompts only (no hook)
    cold = Engine(profile)
    cold_ttft = run_one(cold, chat_request(cold, "c", turn2, out=8), 0.0)
    prompts_only = Engine(profile)
    run_one(prompts_only, chat_request(prompts_only, "p1", turn1, out=1000), 0.0)
    p2 = chat_request(prompts_only, "p2", turn2, out=8)
    prompts_only_ttft = run_one(prompts_only, p2, 100.0)
    assert p2.cached_tokens == (r1.prompt_tokens - 1) // B * B  # turn 1's prompt, not the reply
    assert warm_ttft < 0.2 * cold_ttft
    assert warm_ttft < prompts_only_ttft < cold_ttft


def test_reply_blocks_occupy_the_pool_and_are_evicted_from_their_tail() -> None:
    e = Engine(tiny())
    assert e.cache is not None
    turn1: Messages = [{"role": "user", "content": words(2, 4000)}]
    r1 = chat_request(e, "t1", turn1, out=300)
    reply = with_reply(e, r1, turn1, seed=6)
    run_one(e, r1, 0.0)
    assert r1.continued_block_hashes is not None
    keys = r1.continued_block_hashes(r1.generated - 1)
    n_prompt = (r1.prompt_tokens - 1) // B
    assert len(keys) > n_prompt + 4 and keys[:n_prompt] == r1.block_hashes[:n_prompt]
    # every block is cached, unlocked: it counts in the pool but not in token usage
    assert set(e.cache.blocks) == set(keys)
    assert e.cache.total_tokens == e.evictable_tokens == len(keys) * B
    assert e.free_tokens == e.pool_tokens - len(keys) * B and e.used_tokens == 0
    e.check_invariants()
    # LRU eviction takes the deepest leaf first: the end of the reply
    assert e.cache.evict(2 * B) == 2 * B and set(e.cache.blocks) == set(keys[:-2])
    turn2 = [*turn1, {"role": "assistant", "content": "".join(reply)}, {"role": "user", "content": "More."}]
    r2 = chat_request(e, "t2", turn2)
    run_one(e, r2, 10.0)
    assert r2.cached_tokens == (len(keys) - 2) * B


def test_aborted_request_caches_only_what_it_generated() -> None:
    e = Engine(tiny())
    assert e.cache is not None
    turn1: Messages = [{"role": "user", "content": words(3, 2000)}]
    r = chat_request(e, "a", turn1, out=1000)
    with_reply(e, r, turn1, seed=7)
    e.submit(r, 0.0)
    e.advance(0.0)
    while r.generated < 400:
        assert e.next_event_s is not None
        e.advance(e.next_event_s)
    generated = r.generated
    e.abort("a", e.next_event_s or 0.0, "client went away")
    e.check_invariants()
    assert r.state == ABORTED and r.continued_block_hashes is not None
    kept = r.continued_block_hashes(generated - 1)
    assert set(e.cache.blocks) == set(kept) and e.used_tokens == 0
    assert len(r.continued_block_hashes(1000)) > len(kept) + 5  # the rest was never generated: not cached
    # a request aborted before its prefill finished leaves no output (nor prompt) blocks
    w = chat_request(e, "w", [{"role": "user", "content": words(4, 2000)}], out=10)
    with_reply(e, w, [{"role": "user", "content": words(4, 2000)}], seed=8)
    e.submit(w, 100.0)
    e.abort("w", 100.0)
    assert set(e.cache.blocks) == set(kept)


def test_continuation_hook_refuses_token_ids_and_continues_text_prompts() -> None:
    def reply(n: int) -> str:
        return " word" * n

    assert continuation({"prompt": [1, 2, 3]}, False, 4.0, B, reply) is None
    assert continuation({"messages": "not a list"}, True, 4.0, B, reply) is None
    assert continuation({"prompt": "x"}, False, 4.0, 0, reply) is None
    hook = continuation({"prompt": "p" * 1000}, False, 4.0, B, reply)
    assert hook is not None
    assert hook(100) == prompt_block_hashes({"prompt": "p" * 1000 + " word" * 100}, False, 4.0, B)
    pieces = continuation({"prompt": ["a" * 300, "b" * 300]}, False, 4.0, B, reply)
    assert pieces is not None and pieces(0) == prompt_block_hashes({"prompt": "a" * 300 + "b" * 300}, False, 4.0, B)


def test_conversations_on_a_small_pool_keep_accounting_consistent_and_hit_replies() -> None:
    """Interleaved multi-turn conversations, aborts, retractions and evictions on a 1220-token pool."""
    e = Engine(tiny(**{"hardware.hbm_gb": 1.3}))
    assert e.pool_tokens == 1220 and e.cache is not None
    rng = np.random.default_rng(11)
    history: dict[int, Messages] = {}
    replies: dict[str, list[str]] = {}
    live: dict[int, SimRequest] = {}
    followups: list[tuple[SimRequest, int]] = []  # a later turn, the previous turn's prompt tokens
    t = 0.0
    for i in range(300):
        t += float(rng.exponential(0.05))
        while e.next_event_s is not None and e.next_event_s <= t:
            for em in e.advance(e.next_event_s):
                if em.finished and em.req.state == FINISHED:
                    conv = int(em.req.rid.split("-")[0])
                    text = "".join(replies[em.req.rid][: em.req.generated])
                    history[conv] = [*history[conv], {"role": "assistant", "content": text}]
                    live.pop(conv, None)
            e.check_invariants()
        conv = int(rng.integers(0, 5))
        if conv in live:
            continue
        previous = history.get(conv)
        turn = [{"role": "user", "content": words(100 + i, int(rng.integers(40, 400)))}]
        messages = [*previous, *turn] if previous and len(previous) < 8 else turn
        r = chat_request(e, f"{conv}-{i}", messages, out=int(rng.integers(10, 80)))
        if previous and messages is not turn and previous[-1]["role"] == "assistant":
            followups.append((r, tokens_of(previous[:-1])))
        replies[r.rid] = with_reply(e, r, messages, seed=i)
        history[conv] = messages
        live[conv] = r
        e.submit(r, t)
        if not e.busy:
            e.advance(t)
        e.check_invariants()
        if i % 23 == 7 and len(live) > 1:
            victim = next(iter(live.values()))
            e.abort(victim.rid, t, "client went away")
            live = {k: v for k, v in live.items() if v is not victim}
            e.check_invariants()
    while e.next_event_s is not None:
        e.advance(e.next_event_s)
        e.check_invariants()
    assert e.used_tokens == 0 and e.evictable_tokens == e.cache.total_tokens <= e.pool_tokens
    assert e.cache.evicted_tokens > 0 and e.counters.retracted_reqs > 0
    # some later turns found their previous reply still cached: hits past the previous prompt
    assert len(followups) > 50  # 99 with this seed
    assert sum(1 for r, prev in followups if r.cached_tokens > prev) > 20  # 47


@pytest.mark.parametrize("chat", [True, False])
def test_hook_blocks_extend_the_prompt_blocks(chat: bool) -> None:
    body: dict[str, object] = (
        {"messages": [{"role": "user", "content": words(12, 3000)}]} if chat else {"prompt": words(12, 3000)}
    )
    hook = continuation(body, chat, 4.0, B, lambda n: " the" * n)
    assert hook is not None
    prompt = prompt_block_hashes(body, chat, 4.0, B)
    assert hook(0)[: len(prompt)] == prompt and hook(500)[: len(prompt)] == prompt and len(hook(500)) > len(prompt)
