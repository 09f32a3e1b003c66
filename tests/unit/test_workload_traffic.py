from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from loadgen.spec.request import RequestSpec
from loadgen.workload import TraceReplay, Workload
from loadgen.workload.datasets import load_trace
from loadgen.workload.prompts import estimate_tokens
from loadgen.workload.scenario import Scenario, parse_scenario

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "traces"
MOONCAKE = TRACES / "mooncake-conversation.jsonl"


def scenario(text: str, base_dir: Path | None = None) -> Scenario:
    return parse_scenario(text, "test.toml", base_dir)


def user_text(spec: RequestSpec) -> str:
    assert spec.messages is not None
    return str(spec.messages[-1]["content"])


def as_json(specs: list[RequestSpec]) -> str:
    return json.dumps([(s.messages, s.prompt, s.max_tokens, s.extra, s.intended_ns) for s in specs])


def closed_draw(w: Workload, users: int, each: int) -> list[RequestSpec]:
    out = []
    for i in range(users):
        session = w.session(i)
        for _ in range(each):
            spec, _ = session.next()
            out.append(spec)
            session.record_reply("ok", True)
    return out


CHAT = """
seed = 7
[prompt]
input_tokens = { dist = "lognormal", median = 300, sigma = 0.5 }
[output]
max_tokens = { dist = "uniform", low = 16, high = 128 }
[sampling]
temperature = 0.5
[load]
concurrency = [4]
"""


def test_same_seed_same_requests_and_another_seed_differs() -> None:
    a = closed_draw(Workload(scenario(CHAT)), 3, 4)
    b = closed_draw(Workload(scenario(CHAT)), 3, 4)
    c = closed_draw(Workload(scenario(CHAT.replace("seed = 7", "seed = 8"))), 3, 4)
    assert as_json(a) == as_json(b)
    assert as_json(a) != as_json(c)
    assert len({user_text(s) for s in a}) == len(a)  # every request its own prompt


def test_order_of_users_does_not_change_their_requests() -> None:
    forward = [Workload(scenario(CHAT)).session(i).next()[0] for i in range(4)]
    w = Workload(scenario(CHAT))
    backward = [w.session(i).next()[0] for i in reversed(range(4))][::-1]
    assert as_json(forward) == as_json(backward)


def test_sessions_for_different_steps_send_different_prompts() -> None:
    w = Workload(scenario(CHAT))
    assert user_text(w.session(0, step=0).next()[0]) != user_text(w.session(0, step=1).next()[0])


def test_a_new_session_for_the_same_user_does_not_repeat_prompts() -> None:
    w = Workload(scenario(CHAT))
    first = [w.session(0).next()[0] for _ in range(3)]  # a user re-created three times
    assert len({user_text(s) for s in first}) == 3
    # and the sequence of sessions is itself reproducible
    again = Workload(scenario(CHAT))
    assert as_json([again.session(0).next()[0] for _ in range(3)]) == as_json(first)


def test_open_loop_arrivals_are_reproducible_and_carry_intended_times() -> None:
    text = CHAT.replace("concurrency = [4]", 'mode = "open"\nrates = [5.0]')
    w1, w2 = Workload(scenario(text)), Workload(scenario(text))
    start = 1_000_000_000_000
    a = list(w1.arrivals(start, 5.0, 20.0))
    b = list(w2.arrivals(start, 5.0, 20.0))
    assert as_json([s for _, s in a]) == as_json([s for _, s in b])
    assert all(spec.intended_ns == t for t, spec in a)
    times = [t for t, _ in a]
    assert times == sorted(times) and start <= times[0] and times[-1] < start + 20 * 10**9
    assert 50 < len(a) < 150  # 5/s for 20 s; Poisson count sd is 10


def test_lengths_sampling_and_limits_reach_the_spec() -> None:
    specs = closed_draw(Workload(scenario(CHAT)), 2, 20)
    for spec in specs:
        assert spec.extra == {"temperature": 0.5}
        assert 16 <= spec.max_tokens <= 128
        # requested is the target; the estimator builds to it or at most two tokens below
        assert 0 <= spec.context_tokens - estimate_tokens(user_text(spec)) <= 2
        assert spec.source.startswith("chat:")


def test_prompt_plus_output_is_clipped_to_the_context_limit() -> None:
    text = """
context_limit = 1000
[prompt]
input_tokens = { dist = "uniform", low = 100, high = 5000 }
[output]
max_tokens = 600
"""
    specs = closed_draw(Workload(scenario(text)), 1, 40)
    for spec in specs:
        assert spec.context_tokens is not None
        assert spec.context_tokens + spec.max_tokens <= 1000
        assert spec.max_tokens >= 1


def test_forced_output_length_fields() -> None:
    text = """
[output]
max_tokens = { dist = "uniform", low = 10, high = 20 }
ignore_eos = true
min_tokens = "max_tokens"
[body]
chat_template_kwargs = { enable_thinking = false }
"""
    for spec in closed_draw(Workload(scenario(text)), 1, 10):
        assert spec.extra["ignore_eos"] is True
        assert spec.extra["min_tokens"] == spec.max_tokens
        assert spec.extra["chat_template_kwargs"] == {"enable_thinking": False}


def test_completions_endpoint_gets_a_prompt_string() -> None:
    text = 'endpoint = "completions"\n[prompt]\nsource = "code"\ninput_tokens = 200\n'
    spec, _ = Workload(scenario(text)).session(0).next()
    assert spec.endpoint == "completions" and spec.messages is not None  # chat form, as for every endpoint
    assert spec.prompt == spec.messages[0]["content"]  # the prompt sent: one user turn as is
    assert spec.prompt is not None and 198 <= estimate_tokens(spec.prompt) <= 200


def test_simple_workload_for_the_context_matrix() -> None:
    w = Workload.simple(4000, 512, "chat", {"temperature": 0}, seed=3)
    specs = [w.session(i).next()[0] for i in range(5)]
    for spec in specs:
        assert spec.max_tokens == 512 and spec.extra == {"temperature": 0}
        assert 3998 <= estimate_tokens(user_text(spec)) <= 4000
    assert as_json(specs) == as_json(
        [Workload.simple(4000, 512, "chat", {"temperature": 0}, seed=3).session(i).next()[0] for i in range(5)]
    )


def test_matrix_cells_do_not_repeat_each_others_prompts() -> None:
    w = Workload(scenario("[matrix]\ncontext_tokens = [100, 2000]\n"))
    small, large = (w.for_context(n).session(0).next()[0] for n in (100, 2000))
    assert estimate_tokens(user_text(small)) <= 100 < estimate_tokens(user_text(large))
    assert not user_text(large).startswith(user_text(small)[:200])


MULTI = """
seed = 3
[prompt]
input_tokens = 200
[output]
max_tokens = 50
[conversation]
turns = 4
think_time_s = { dist = "uniform", low = 1.0, high = 2.0 }
followup_tokens = 80
[load]
concurrency = [1]
"""


def test_multi_turn_history_grows_with_the_actual_replies() -> None:
    session = Workload(scenario(MULTI)).session(0)
    previous: list[dict[str, str]] = []
    for turn in range(4):
        spec, think_s = session.next()
        assert spec.messages is not None
        assert spec.turn == turn and spec.conversation is not None
        if turn == 0:
            assert think_s == 0.0 and len(spec.messages) == 1
        else:
            assert 1.0 <= think_s <= 2.0
            # earlier turns verbatim, then the reply we gave, then the new user turn
            assert spec.messages[: len(previous)] == previous
            assert spec.messages[len(previous)] == {"role": "assistant", "content": f"reply {turn - 1}"}
            assert spec.messages[-1]["role"] == "user" and len(spec.messages) == len(previous) + 2
            assert spec.context_tokens is not None and spec.context_tokens > 200 + 50 * (turn - 1)
        previous = list(spec.messages)
        session.record_reply(f"reply {turn}", True)
    # four turns done: the next request starts a new conversation
    spec, think_s = session.next()
    assert spec.turn == 0 and spec.messages is not None and len(spec.messages) == 1
    assert session.conversations_started == 2


def test_failed_turn_ends_the_conversation() -> None:
    session = Workload(scenario(MULTI)).session(0)
    first, _ = session.next()
    session.record_reply("fine", True)
    second, _ = session.next()
    assert second.conversation == first.conversation and second.turn == 1
    session.record_reply(None, False)
    third, _ = session.next()
    assert third.conversation != first.conversation and third.turn == 0


def test_reply_not_kept_is_stood_in_for() -> None:
    session = Workload(scenario(MULTI)).session(0)
    session.next()
    session.record_reply(None, True)
    spec, _ = session.next()
    assert spec.messages is not None and spec.messages[1]["role"] == "assistant"
    assert 48 <= estimate_tokens(spec.messages[1]["content"]) <= 50
    assert "stand-in" in spec.source


def test_multi_turn_on_completions_is_a_growing_transcript() -> None:
    session = Workload(scenario('endpoint = "completions"\n' + MULTI)).session(0)
    first, _ = session.next()
    session.record_reply("THE REPLY", True)
    second, _ = session.next()
    assert first.prompt is not None and second.prompt is not None
    assert second.prompt.startswith("User: " + first.prompt)
    assert "\n\nAssistant: THE REPLY\n\nUser: " in second.prompt and second.prompt.endswith("Assistant:")


SHARED = """
seed = 1
[prompt]
input_tokens = 100
[shared_prefix]
tokens = 1000
ratio = {ratio}
pool = {pool}
kind = "{kind}"
[load]
warmup_seconds = 5
warmup_prompts = "{warmup}"
"""


def shared(ratio: float = 1.0, pool: int = 1, kind: str = "document", warmup: str = "separate") -> Workload:
    return Workload(scenario(SHARED.format(ratio=ratio, pool=pool, kind=kind, warmup=warmup)))


def test_shared_document_prefix_is_identical_byte_for_byte() -> None:
    specs = closed_draw(shared(), 5, 3)
    texts = [user_text(s) for s in specs]
    prefix = texts[0][: texts[0].index("\n\nWith the document above")]
    assert 995 <= estimate_tokens(prefix) <= 1000
    assert all(t.startswith(prefix + "\n\n") for t in texts)
    assert len({t[len(prefix) :] for t in texts}) == len(texts)  # the questions differ


def test_shared_system_prompt_is_identical() -> None:
    specs = closed_draw(shared(kind="system"), 4, 2)
    systems = {s.messages[0]["content"] for s in specs if s.messages}
    assert len(systems) == 1 and all(s.messages and s.messages[0]["role"] == "system" for s in specs)


def test_sharing_ratio_and_pool_size() -> None:
    specs = closed_draw(shared(ratio=0.5, pool=3), 20, 20)
    heads = [user_text(s)[:300] for s in specs]
    counts: dict[str, int] = {}
    for h in heads:
        counts[h] = counts.get(h, 0) + 1
    shared_heads = {h: c for h, c in counts.items() if c > 1}
    assert len(shared_heads) == 3  # the pool
    share = sum(shared_heads.values()) / len(specs)
    assert abs(share - 0.5) < 4 * (0.25 / len(specs)) ** 0.5  # binomial, 4 sigma


def test_separate_warmup_does_not_touch_the_measured_prefixes() -> None:
    w = shared(pool=2)
    session = w.session(0)
    warm = [session.next(warmup=True)[0] for _ in range(20)]
    measured = [session.next()[0] for _ in range(20)]
    warm_heads = {user_text(s)[:300] for s in warm}
    measured_heads = {user_text(s)[:300] for s in measured}
    assert len(warm_heads) == 2 and len(measured_heads) == 2
    assert not warm_heads & measured_heads


def test_same_warmup_primes_the_measured_prefixes() -> None:
    w = shared(pool=1, warmup="same")
    session = w.session(0)
    warm = session.next(warmup=True)[0]
    measured = session.next()[0]
    assert user_text(warm)[:300] == user_text(measured)[:300]


def test_open_loop_warmup_window_uses_warmup_prompts() -> None:
    w = Workload(
        scenario(
            SHARED.format(ratio=1.0, pool=1, kind="document", warmup="separate") + 'mode = "open"\nrates = [4.0]\n'
        )
    )
    arrivals = list(w.arrivals(0, 4.0, 30.0, warmup_s=10.0))
    warm = {user_text(s)[:300] for t, s in arrivals if t < 10 * 10**9}
    measured = {user_text(s)[:300] for t, s in arrivals if t >= 10 * 10**9}
    assert len(warm) == 1 and len(measured) == 1 and warm != measured


def mooncake_file(tmp_path: Path, rows: list[dict[str, object]]) -> Path:
    path = tmp_path / "mc.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def trace_scenario(path: Path, extra: str = "") -> Scenario:
    text = f"""
[prompt]
source = "trace"
[trace]
path = "{path}"
format = "mooncake"
[load]
mode = "open"
arrival = "trace"
time_scales = [0.5]
{extra}
"""
    return scenario(text)


def test_mooncake_hash_ids_give_identical_block_text(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 0, "input_length": 1500, "output_length": 10, "hash_ids": [0, 1, 2]},
        {"timestamp": 100, "input_length": 1200, "output_length": 20, "hash_ids": [0, 1, 3]},
        {"timestamp": 200, "input_length": 700, "output_length": 30, "hash_ids": [0, 4]},
        {"timestamp": 300, "input_length": 300, "output_length": 40, "hash_ids": [5]},
        {"timestamp": 400, "input_length": 1400, "output_length": 50, "hash_ids": [0, 1, 2]},
    ]
    w = Workload(trace_scenario(mooncake_file(tmp_path, rows)))
    target = w.step_targets()[0]
    assert isinstance(target, TraceReplay) and target.time_scale == 0.5
    out = list(w.arrivals(0, target, 1e6))
    assert [t for t, _ in out] == [0, 50_000_000, 100_000_000, 150_000_000, 200_000_000]
    texts = [user_text(s) for _, s in out]
    assert [s.max_tokens for _, s in out] == [10, 20, 30, 40, 50]
    for text, row in zip(texts, rows, strict=True):
        assert row["input_length"] - 3 <= estimate_tokens(text) <= row["input_length"]  # type: ignore[operator]
    common01 = _common_prefix(texts[0], texts[1])
    common02 = _common_prefix(texts[0], texts[2])
    # rows 0 and 1 share blocks 0 and 1 (~1024 tokens); rows 0 and 2 share block 0 (~512)
    assert 1020 <= estimate_tokens(texts[0][:common01]) <= 1030
    assert 508 <= estimate_tokens(texts[0][:common02]) <= 515
    assert _common_prefix(texts[0], texts[3]) < 20  # no shared block
    # the same ids, a shorter last block: a byte-for-byte prefix of the longer request
    assert texts[0].startswith(texts[4]) or texts[4].startswith(texts[0])


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@pytest.mark.skipif(not MOONCAKE.exists(), reason=f"trace not present at {MOONCAKE} (needs ../shared beside the repo)")
def test_real_mooncake_trace_shares_text_where_it_shares_blocks(tmp_path: Path) -> None:
    w = Workload(dataclasses.replace(trace_scenario(MOONCAKE), context_limit=200_000))
    trace = load_trace(MOONCAKE)
    rows = [r for r in trace.rows[:300] if r.input_tokens <= 20_000]
    texts = [w._trace_text(r, r.input_tokens, w.counter)[0] for r in rows]
    checked = 0
    for i in range(len(rows)):
        for j in range(i + 1, min(len(rows), i + 20)):
            a, b = rows[i].hash_ids or (), rows[j].hash_ids or ()
            k = 0
            while k < min(len(a), len(b)) - 1 and a[k] == b[k]:
                k += 1
            if k >= 1:
                # the first k blocks are full in both rows: the texts agree on all of them
                common = _common_prefix(texts[i], texts[j])
                assert estimate_tokens(texts[i][:common]) >= 512 * k - 3 * k
                checked += 1
    assert checked > 50


def test_sharegpt_conversations_replay_their_own_user_turns(tmp_path: Path) -> None:
    data = [
        {
            "conversations": [
                {"from": "system", "value": "be brief"},
                {"from": "human", "value": "first question"},
                {"from": "gpt", "value": "word " * 40},
                {"from": "human", "value": "second question"},
                {"from": "gpt", "value": "word " * 7},
                {"from": "human", "value": "third question"},
            ]
        }
    ]
    (tmp_path / "sg.json").write_text(json.dumps(data))
    text = '[prompt]\nsource = "sharegpt"\npath = "sg.json"\n[conversation]\nturns = 10\n'
    session = Workload(scenario(text, tmp_path)).session(0)
    sent = []
    for i in range(4):
        spec, _ = session.next()
        sent.append((user_text(spec), spec.max_tokens, spec.turn))
        session.record_reply(f"answer {i}", True)
    # the dataset's three user turns in order, with the dataset's reply lengths where it has them
    assert sent[0] == ("first question", 40, 0)
    assert sent[1] == ("second question", 7, 1)
    assert sent[2][0] == "third question" and sent[2][2] == 2
    assert sent[3] == ("first question", 40, 0)  # the conversation ran out of turns: a new one


def _all_text(spec: RequestSpec) -> int:
    if spec.messages is None:
        return estimate_tokens(spec.prompt or "")
    # history and the new turn: what the request asks the server to read (template aside)
    return sum(estimate_tokens(str(m["content"])) for m in spec.messages)


@pytest.mark.parametrize("name", ["chat", "rag-long-context", "agentic-multi-turn", "code-completion"])
def test_requested_prompt_tokens_are_the_target_of_what_is_sent(name: str) -> None:
    from loadgen.workload.scenario import load_scenario

    s = load_scenario(Path(__file__).resolve().parents[2] / "scenarios" / f"{name}.toml")
    w = Workload(s)
    session = w.session(0)
    for i in range(12):
        spec, _ = session.next()
        sent = _all_text(spec)
        # separators between system/history messages are not counted in either; requested is the
        # target, which the estimator builds to or at most two below, for the first turn (counted
        # in the history) and for the new message
        assert 0 <= spec.context_tokens - sent <= 4, (i, spec.source)
        if spec.turn == 0:
            assert spec.context_tokens - sent <= 2, (i, spec.source)
        session.record_reply("a short reply.", True)
