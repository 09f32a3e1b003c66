"""Kinds of output in chat streams (``chunk_kinds``, ``first_*_ns``, ``function_calls``,
``reasoning_tokens``) against wire-format fixtures whose truth is known.

The fixtures (``tests/fixtures/chat/``) are streams as vLLM and SGLang write them: a reasoning model
(``reasoning_content`` deltas, a step that ends the reasoning and starts the answer, usage with
``completion_tokens_details.reasoning_tokens`` as OpenAI documents it); a newer vLLM (``reasoning``
deltas) making two parallel tool calls by index, the id and name in each call's first delta; SGLang
(every field in every delta, null when unused) repeating the id on every tool delta and sending one
call's arguments whole; and a non-streamed body with tool calls and reasoning. The expected values
are written out by hand; the time of each output chunk comes from ``reference_chunks``, a naive
reading of the fixture (split on blank lines, ``json.loads``) that shares no code with the decoder.
Each stream is fed whole, cut at every position, one byte at a time and at random cuts; read i
arrives at ``T0 + 10 * i``.
"""

from __future__ import annotations

import bisect
import itertools
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest

from loadgen.parse import responses
from loadgen.parse.sse import SSEDecoder
from loadgen.parse.stream import (
    KIND_REASONING,
    KIND_TEXT,
    KIND_TOOL,
    ChunkAccumulator,
    FunctionCall,
    StreamResult,
    parse_completion_body,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "chat"
T0 = 1_000_000
END = 10**12


@dataclass
class Truth:
    """What a fixture carries, written by hand from its file."""

    kinds: list[str]
    text: str = ""
    reasoning_text: str = ""  # not kept by the decoder: its length is checked
    calls: list[FunctionCall] = field(default_factory=list)
    usage: tuple[int | None, int | None, int | None, int | None] = (None, None, None, None)
    finish_reason: str | None = None
    first_arguments: int | None = None  # index of the output chunk with the first arguments


R, T, X = KIND_REASONING, KIND_TEXT, KIND_TOOL
TRUTHS: dict[str, Truth] = {
    "vllm_reasoning.sse": Truth(
        kinds=[R] * 6 + [T] * 5,  # the step with both reasoning and content is text
        text='\n\n**9.8** is greater than 9.11 — 东京 "quoted" \\o/',
        reasoning_text="Okay, the user asks 9.11 vs 9.8.\n9.8 > 9.11.\n",
        usage=(17, 43, None, 31),
        finish_reason="stop",
    ),
    "vllm_parallel_tool_calls.sse": Truth(
        kinds=[R] * 3 + [T] + [X] * 9,
        text="\n\n",
        reasoning_text="The user wants weather for two cities.",
        calls=[
            FunctionCall(
                call_id="chatcmpl-tool-8e3f1a2b4c5d6e7f", name="get_weather", arguments='{"city": "Paris", "unit": "c"}'
            ),
            FunctionCall(call_id="chatcmpl-tool-0a1b2c3d4e5f6a7b", name="get_weather", arguments='{"city": "東京"}'),
        ],
        usage=(210, 52, None, None),
        finish_reason="tool_calls",
        first_arguments=5,
    ),
    "sglang_tool_calls.sse": Truth(
        kinds=[R] * 3 + [X] * 5,
        reasoning_text="Need the time and a search.",
        calls=[
            FunctionCall(call_id="call_5f1e2d3c4b5a4f6e8d7c", name="get_time", arguments='{"tz": "Europe/Paris"}'),
            FunctionCall(call_id="call_9a8b7c6d5e4f4a3b2c1d", name="search", arguments='{"query": "SSE \\n spec"}'),
        ],
        usage=(300, 41, 256, None),
        finish_reason="tool_calls",
        first_arguments=4,
    ),
}


@dataclass
class RefChunk:
    dispatch: int  # offset of the byte that completes the event (the blank line's LF)
    kinds: set[str]  # every kind the chunk carries
    chars: int


def reference_chunks(stream: bytes) -> list[RefChunk]:
    """Naive reading of an LF-only fixture: the output chunks, by the documented rules."""
    out: list[RefChunk] = []
    pos = 0
    while (end := stream.find(b"\n\n", pos)) >= 0:
        data = stream[pos:end].decode().removeprefix("data: ")
        pos = end + 2
        if data == "[DONE]":
            continue
        kinds: set[str] = set()
        chars = 0
        for choice in json.loads(data)["choices"]:
            delta = choice["delta"]
            if delta.get("content"):
                kinds.add(KIND_TEXT)
                chars += len(delta["content"])
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning:
                kinds.add(KIND_REASONING)
                chars += len(reasoning)
            for call in delta.get("tool_calls") or []:
                n = len(call["function"].get("name") or "") + len(call["function"].get("arguments") or "")
                if n:
                    kinds.add(KIND_TOOL)
                    chars += n
        if kinds:
            out.append(RefChunk(end + 1, kinds, chars))
    return out


def feed(stream: bytes, cuts: list[int]) -> tuple[StreamResult, list[int]]:
    """Feed ``stream`` cut at ``cuts``; read i arrives at ``T0 + 10 * i``. Returns the result and
    the last byte offset of every read."""
    bounds = [0, *cuts, len(stream)]
    dec = SSEDecoder()
    acc = ChunkAccumulator()
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        payloads = dec.feed(stream[a:b])
        if payloads:
            acc.add_all(payloads, T0 + 10 * i)
    for payload in dec.flush():
        acc.add(payload, END)
    return acc.finish(END), [b - 1 for b in bounds[1:]]


def check(name: str, cuts: list[int]) -> None:
    stream = (FIXTURES / name).read_bytes()
    truth = TRUTHS[name]
    res, ends = feed(stream, cuts)
    ref = reference_chunks(stream)
    times = [T0 + 10 * bisect.bisect_left(ends, c.dispatch) for c in ref]
    assert res.chunk_times_ns == times, cuts
    assert res.chunk_chars == [c.chars for c in ref]
    assert res.chunk_kinds == truth.kinds
    firsts = {k: next((t for t, c in zip(times, ref, strict=True) if k in c.kinds), None) for k in (R, T, X)}
    assert res.first_reasoning_ns == firsts[R]
    assert res.first_text_ns == firsts[T]
    assert res.first_tool_ns == firsts[X]
    want_args = None if truth.first_arguments is None else times[truth.first_arguments]
    assert res.first_tool_arguments_ns == want_args
    assert res.function_calls == truth.calls
    assert res.text == truth.text
    assert res.reasoning_chunks == sum(R in c.kinds for c in ref)
    assert res.reasoning_text_chars == len(truth.reasoning_text)
    assert res.tool_call_chunks == truth.kinds.count(X)
    assert (res.prompt_tokens, res.completion_tokens, res.cached_tokens, res.reasoning_tokens) == truth.usage
    assert res.finish_reason == truth.finish_reason
    assert res.done and res.error_class() is None and res.malformed == 0 and res.end_ns == END


@pytest.mark.parametrize("name", list(TRUTHS))
def test_fixture_whole_every_cut_bytewise_and_random_cuts(name: str) -> None:
    n = len((FIXTURES / name).read_bytes())
    check(name, [])
    check(name, list(range(1, n)))  # one byte at a time
    for i in range(1, n):
        check(name, [i])
    rng = random.Random(name)
    for _ in range(40):
        check(name, sorted(rng.sample(range(1, n), rng.randint(1, 60))))


def test_fixture_first_times_fall_in_their_own_reads() -> None:
    """Cut right after the first reasoning, text and tool chunks: each first time is its own read."""
    stream = (FIXTURES / "vllm_parallel_tool_calls.sse").read_bytes()
    ref = reference_chunks(stream)
    cuts = [ref[0].dispatch + 1, ref[3].dispatch + 1, ref[4].dispatch + 1]
    res, _ = feed(stream, cuts)
    assert (res.first_reasoning_ns, res.first_text_ns, res.first_tool_ns, res.first_tool_arguments_ns) == (
        T0,
        T0 + 10,
        T0 + 20,
        T0 + 30,
    )
    assert res.first_chunk_ns == T0


def test_body_fixture_with_tool_calls_and_reasoning() -> None:
    body = (FIXTURES / "body.json").read_bytes()
    res = parse_completion_body(body, 100, 200)
    assert res.chunk_times_ns == [100] and res.chunk_kinds == [KIND_TOOL]
    reasoning = "Two cities: two calls."
    assert res.chunk_chars == [len(reasoning) + 2 * len("get_weather") + len('{"city": "Paris"}{"city": "Tokyo"}')]
    assert (res.first_reasoning_ns, res.first_text_ns, res.first_tool_ns, res.first_tool_arguments_ns) == (
        100,
        None,
        100,
        100,
    )
    assert res.function_calls == [
        FunctionCall(call_id="chatcmpl-tool-1111aaaa2222bbbb", name="get_weather", arguments='{"city": "Paris"}'),
        FunctionCall(call_id="chatcmpl-tool-3333cccc4444dddd", name="get_weather", arguments='{"city": "Tokyo"}'),
    ]
    assert res.reasoning_tokens == 12 and (res.prompt_tokens, res.completion_tokens) == (190, 57)
    assert res.reasoning_chunks == 1 and res.reasoning_text_chars == len(reasoning) and res.tool_call_chunks == 1
    assert res.text == "" and res.finish_reason == "tool_calls" and res.chunk_tokens == [57]


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ({"content": "4", "reasoning": "2+2"}, KIND_TEXT),
        ({"content": None, "reasoning_content": "hm"}, KIND_REASONING),
        (
            {
                "content": "ok",
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}],
            },
            KIND_TOOL,
        ),
    ],
)
def test_body_kind_is_tool_then_text_then_reasoning(message: dict[str, object], kind: str) -> None:
    body = orjson.dumps({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})
    res = parse_completion_body(body, 7, 9)
    assert res.chunk_kinds == [kind]
    assert res.first_text_ns == (7 if message.get("content") else None)
    assert res.first_tool_arguments_ns is None


def _run(chunks: list[dict[str, object]]) -> StreamResult:
    """Chunks one per read, chunk i at ``T0 + 10 * i``."""
    acc = ChunkAccumulator()
    for i, c in enumerate(chunks):
        acc.add(orjson.dumps(c), T0 + 10 * i)
    return acc.finish(END)


def _tools(*entries: object, index: int = 0) -> dict[str, object]:
    return {"choices": [{"index": index, "delta": {"tool_calls": list(entries)}}]}


def _fn(name: str | None = None, arguments: str | None = None) -> dict[str, object]:
    return {k: v for k, v in (("name", name), ("arguments", arguments)) if v is not None}


def test_a_reused_index_with_a_new_id_is_a_new_call() -> None:
    # Reported of vLLM and SGLang parsers: parallel calls all at index 0; vLLM with an empty id on
    # argument deltas, SGLang with the call's id on every delta.
    res = _run(
        [
            _tools({"index": 0, "id": "tool-a", "type": "function", "function": _fn("f", "")}),
            _tools({"index": 0, "id": "", "function": _fn(arguments='{"x": 1}')}),
            _tools({"index": 0, "id": "tool-b", "type": "function", "function": _fn("g", "")}),
            _tools({"index": 0, "id": "", "function": _fn(arguments="{}")}),
            _tools({"index": 0, "id": "0", "type": "function", "function": _fn("h", "")}),
            _tools({"index": 0, "id": "0", "type": "function", "function": _fn(None, "[1")}),
            _tools({"index": 0, "id": "0", "type": "function", "function": _fn("h", "]")}),  # name repeated
            _tools({"index": 0, "id": "1", "type": "function", "function": _fn("k", "{}")}),
        ]
    )
    assert [(c.call_id, c.name, c.arguments) for c in res.function_calls] == [
        ("tool-a", "f", '{"x": 1}'),
        ("tool-b", "g", "{}"),
        ("0", "h", "[1]"),
        ("1", "k", "{}"),
    ]
    assert res.chunk_kinds == [KIND_TOOL] * 8
    assert (res.first_tool_ns, res.first_tool_arguments_ns) == (T0, T0 + 10)


def test_entries_without_index_continue_the_last_call() -> None:
    res = _run(
        [
            _tools({"id": "a", "function": _fn("f")}),
            _tools({"function": _fn(arguments="{")}, {"index": 3, "id": "z", "function": _fn("zz", "")}),
            _tools({"function": _fn(arguments="}")}),
            _tools({"id": "b", "function": _fn("g", "1")}),
            _tools({"index": 3, "function": _fn(arguments="9")}),
        ]
    )
    assert [(c.call_id, c.name, c.arguments) for c in res.function_calls] == [
        ("a", "f", "{}"),
        ("z", "zz", "9"),
        ("b", "g", "1"),
    ]


def test_calls_of_other_choices_count_but_are_not_kept() -> None:
    res = _run(
        [
            _tools({"index": 0, "id": "c1", "function": _fn("other", '{"a": 1}')}, index=1),
            {
                "choices": [
                    {"index": 0, "delta": {"content": "Hi", "tool_calls": [{"index": 0, "function": {"name": "f"}}]}}
                ]
            },
            _tools({"index": 0, "function": _fn(arguments="{}")}),
        ]
    )
    assert res.chunk_kinds == [KIND_TOOL] * 3  # content and a call in one chunk: tool
    assert (res.first_text_ns, res.first_tool_ns, res.first_tool_arguments_ns) == (T0 + 10, T0, T0)
    assert res.function_calls == [FunctionCall(name="f", arguments="{}")]
    assert res.text == "Hi" and res.tool_call_chunks == 3


def test_empty_tool_text_and_junk_entries_are_no_output() -> None:
    res = _run(
        [
            _tools({"index": 0, "id": "c", "type": "function", "function": {"name": "", "arguments": ""}}),
            _tools("junk", {"index": 0, "function": "junk"}, {"index": 0, "function": {"name": 5, "arguments": None}}),
            {"choices": [{"index": 0, "delta": {"tool_calls": {"not": "a list"}}}]},
            {"choices": [{"index": 0, "delta": {"content": "x"}}]},
        ]
    )
    assert res.chunk_kinds == [KIND_TEXT] and res.first_tool_ns is None and res.tool_call_chunks == 0
    assert res.function_calls == [FunctionCall(call_id="c")]  # the call appeared, with no text


def test_completions_are_always_text() -> None:
    chunks: list[dict[str, object]] = [
        {"choices": [{"index": 0, "text": t, "finish_reason": None}]} for t in "abcdefghij"
    ]
    chunks.append(
        {"choices": [], "usage": {"completion_tokens": 10, "completion_tokens_details": {"reasoning_tokens": 0}}}
    )
    res = _run(chunks)
    assert res.chunk_kinds == [KIND_TEXT] * 10 and res.text == "abcdefghij"
    assert (res.first_text_ns, res.first_reasoning_ns, res.first_tool_ns) == (T0, None, None)
    assert res.reasoning_tokens == 0


def test_reasoning_tokens_from_continuous_usage_take_the_last() -> None:
    pre = b'{"id":"x","choices":[{"index":0,"delta":{"reasoning":"r'
    acc = ChunkAccumulator()
    for i in range(20):
        usage = b'{"completion_tokens":%d,"completion_tokens_details":{"reasoning_tokens":%d}}' % (i + 1, i + 1)
        acc.add(pre + b'"},"finish_reason":null}],"usage":' + usage + b"}", T0 + i)
    res = acc.finish(END)
    assert res.chunk_kinds == [KIND_REASONING] * 20 and res.first_reasoning_ns == T0 and res.first_text_ns is None
    assert res.reasoning_tokens == 20 and res.chunk_tokens == [1] * 20


def test_responses_names_are_the_shared_ones() -> None:
    assert responses.FunctionCall is FunctionCall
    assert (responses.KIND_REASONING, responses.KIND_TEXT, responses.KIND_TOOL) == (R, T, X)
    assert issubclass(responses.ResponsesResult, StreamResult)
    r = responses.ResponsesResult()
    assert r.chunk_kinds == [] and r.function_calls == [] and r.reasoning_tokens is None
