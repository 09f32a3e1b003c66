"""ChunkAccumulator / parse_completion_body / distribute_tokens against streams whose truth is known.

Streams are generated the way vLLM and SGLang write them (compact JSON, Python ``json.dumps`` with
spaces, ASCII-escaped JSON, per-chunk stamps that defeat the template path), so every expected value
(text, chars and arrival read of each output chunk, tokens, usage, errors) is known before parsing.
Each stream is fed whole, split at every byte position, one byte at a time, and at random cuts.
"""

from __future__ import annotations

import bisect
import itertools
import json
import random
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from loadgen.parse.sse import SSEDecoder
from loadgen.parse.stream import (
    KIND_REASONING,
    KIND_TEXT,
    KIND_TOOL,
    TOKENS_CHUNKS,
    TOKENS_PER_CHUNK_USAGE,
    TOKENS_USAGE,
    ChunkAccumulator,
    FunctionCall,
    StreamResult,
    distribute_tokens,
    parse_completion_body,
)

TEXTS = [
    "Hello",
    " world",
    ",",
    " the",
    "\n",
    "\n\n",
    ' "quoted"',
    "back\\slash",
    "tab\there",
    " é",
    " 東京",
    " 🚀",
    "\u2028",
    "</s>",
    ' {"json": 1}',
    "ends with \\",
    "'",
    " 42",
    "data: x",
]
TOOL_ARGS = ['{"city": "Paris", "unit": "c"}', '{"q": "東京 \\"quoted\\"\\n", "n": 3}', "{}"]


@dataclass
class Truth:
    stream: bytes = b""
    dispatch: list[int] = field(default_factory=list)  # byte offset dispatching each output chunk
    chars: list[int] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    firsts: dict[str, int] = field(default_factory=dict)  # kind (or "arguments") -> first dispatch
    calls: list[FunctionCall] = field(default_factory=list)
    reasoning_tokens: int | None = None
    tokens: list[int] | None = None
    text: str = ""
    reasoning_chunks: int = 0
    reasoning_chars: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str | None = None
    done: bool = False
    error: dict[str, Any] | None = None
    malformed: int = 0
    role_only: int = 0
    server_id: str | None = None


class Writer:
    """Serialises events in one server style and tracks where each one is dispatched."""

    def __init__(self, style: str, end: bytes, rng: random.Random) -> None:
        self.style = style
        self.end = end
        self.rng = rng
        self.buf = bytearray()
        self.n = 0

    def dumps(self, obj: Any) -> bytes:
        if self.style == "spaced":
            return json.dumps(obj, ensure_ascii=False).encode()
        if self.style == "ascii":
            return json.dumps(obj).encode()
        return orjson.dumps(obj)

    def event(self, payload: bytes, name: str | None = None, comment: bool = False) -> int:
        e = self.end
        if comment and self.rng.random() < 0.5:
            self.buf += b": keep-alive" + e + e
        if name:
            self.buf += b"event: " + name.encode() + e
        self.buf += b"data: " + payload + e
        at = len(self.buf)
        self.buf += e
        return at


def chat_stream(
    rng: random.Random,
    *,
    style: str = "compact",
    end: bytes = b"\n",
    n: int = 12,
    sglang: bool = False,
    continuous: bool = False,
    reasoning: int = 0,
    finish_separate: bool = True,
    usage: bool = True,
    done: bool = True,
    stamp: bool = False,
    error_at: int | None = None,
    error_kind: str = "error",
    truncate: bool = False,
    completions: bool = False,
    tools: int = 0,
    mixed: bool = False,
) -> Truth:
    """One response as a server writes it, with its truth: ``reasoning`` reasoning chunks, then
    content (``mixed``: the first content chunk also ends the reasoning, as vLLM sends a switch
    inside one multi-token step), then ``tools`` tool calls streamed by index (name first, then
    argument pieces; the id on every delta or only the first)."""
    w = Writer(style, end, rng)
    t = Truth()
    rid = ("cmpl-" if completions else "chatcmpl-") + f"{rng.getrandbits(32):08x}"
    t.server_id = rid
    prompt = rng.randint(1, 5000)
    cached = rng.randint(0, prompt) if rng.random() < 0.5 else None
    r_tokens = rng.randint(0, 50) if reasoning and rng.random() < 0.7 else None
    ct = 0
    pending = 0
    tokens: list[int] = []

    def base() -> dict[str, Any]:
        o: dict[str, Any] = {
            "id": rid,
            "object": "text_completion" if completions else "chat.completion.chunk",
            "created": 1764000000,
            "model": "m",
        }
        if stamp:
            o["created"] = 1764000000 + w.n  # changes every chunk
        return o

    def usage_obj() -> dict[str, Any]:
        u: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": ct, "total_tokens": prompt + ct}
        if cached is not None:
            u["prompt_tokens_details"] = {"cached_tokens": cached}
        if r_tokens is not None:
            u["completion_tokens_details"] = {"reasoning_tokens": r_tokens}
        return u

    def choice(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        if completions:
            return {
                "index": 0,
                "text": delta.get("content", ""),
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
            }
        if sglang:
            d = {"role": None, "content": None, "reasoning_content": None, "tool_calls": None}
            d.update(delta)
            return {"index": 0, "delta": d, "logprobs": None, "finish_reason": finish, "matched_stop": None}
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

    def emit(delta: dict[str, Any], k: int, finish: str | None = None) -> int:
        nonlocal ct
        ct += k
        o = base()
        o["choices"] = [choice(delta, finish)]
        if continuous:
            o["usage"] = usage_obj()
        elif sglang:
            o["usage"] = None
        w.n += 1
        return w.event(w.dumps(o), comment=True)

    if not completions:
        emit({"role": "assistant", "content": "" if rng.random() < 0.5 else None}, 0)
        t.role_only += 1
    r_key = rng.choice(["reasoning_content", "reasoning"])
    assert not (completions and reasoning) and not (truncate and (continuous or reasoning >= n))
    assert not (tools and (completions or truncate))
    pieces: list[str] = []

    def output(at: int, kinds: tuple[str, ...], chars: int, k: int) -> None:
        nonlocal pending
        t.dispatch.append(at)
        t.chars.append(chars)
        t.kinds.append(kinds[0])
        for kind in kinds:
            t.firsts.setdefault(kind, at)
        tokens.append(pending + k)
        pending = 0

    for i in range(n):
        if error_at == i:
            if error_kind == "error":
                body = w.dumps({"error": {"message": "KV cache is full", "type": "InternalServerError", "code": 503}})
                w.event(body)
            elif error_kind == "object":
                body = w.dumps(
                    {
                        "object": "error",
                        "message": "out of memory",
                        "type": "BadRequestError",
                        "param": None,
                        "code": 400,
                    }
                )
                w.event(body)
            else:
                w.event(b'{"error": {"message": "named boom", "type": "x", "code": 1}}', name="error")
            t.error = {
                "error": {"message": "KV cache is full", "type": "InternalServerError", "code": 503},
                "object": {"message": "out of memory", "type": "BadRequestError", "code": 400},
                "named": {"message": "named boom", "type": "x", "code": 1},
            }[error_kind]
        text = rng.choice(TEXTS)
        k = rng.choice([1, 1, 1, 2, 3, 4])  # several tokens per chunk: speculative decoding
        is_reasoning = i < reasoning
        last = i == n - 1 and not tools
        finish = "length" if (last and not finish_separate) else None
        if is_reasoning:
            at = emit({r_key: text}, k, finish)
            t.reasoning_chunks += 1
            t.reasoning_chars += len(text)
            output(at, (KIND_REASONING,), len(text), k)
        elif mixed and reasoning and i == reasoning:
            at = emit({r_key: "."} | {"content": text}, k, finish)
            t.reasoning_chunks += 1
            t.reasoning_chars += 1
            pieces.append(text)
            output(at, (KIND_TEXT, KIND_REASONING), len(text) + 1, k)
        else:
            at = emit({"content": text}, k, finish)
            pieces.append(text)
            output(at, (KIND_TEXT,), len(text), k)
    id_every = rng.random() < 0.5
    for j in range(tools):
        name, args = rng.choice(["get_weather", "search"]), rng.choice(TOOL_ARGS)
        call_id = f"call_{rng.getrandbits(40):010x}"
        t.calls.append(FunctionCall(call_id=call_id, name=name, arguments=args))
        cuts = sorted(rng.sample(range(1, len(args)), min(len(args) - 1, rng.randint(0, 4))))
        parts = [args[a:b] for a, b in itertools.pairwise([0, *cuts, len(args)])]
        fn = {"name": name, "arguments": ""}
        if rng.random() < 0.3:  # the whole arguments with the name (SGLang may)
            fn["arguments"], parts = args, []
        head = {"index": j, "id": call_id, "type": "function", "function": fn}
        lasts = j == tools - 1 and not parts
        at = emit({"tool_calls": [head]}, 1, "tool_calls" if lasts and not finish_separate else None)
        output(at, (KIND_TOOL,), len(name) + len(fn["arguments"]), 1)
        if fn["arguments"]:
            t.firsts.setdefault("arguments", at)
        for m, part in enumerate(parts):
            entry: dict[str, Any] = {"index": j, "function": {"arguments": part}}
            if id_every:
                entry["id"] = call_id
            lasts = j == tools - 1 and m == len(parts) - 1
            k = rng.choice([1, 2])
            at = emit({"tool_calls": [entry]}, k, "tool_calls" if lasts and not finish_separate else None)
            output(at, (KIND_TOOL,), len(part), k)
            t.firsts.setdefault("arguments", at)
    if finish_separate:
        emit({}, 1, "tool_calls" if tools else "stop")  # the EOS token: counted in usage, carries no text
        tokens[-1] += 1
    t.finish_reason = "tool_calls" if tools else "stop" if finish_separate else "length"
    if usage:
        o = base()
        o["choices"] = []
        o["usage"] = usage_obj()
        w.event(w.dumps(o))
        t.prompt_tokens, t.completion_tokens, t.cached_tokens = prompt, ct, cached
        t.reasoning_tokens = r_tokens
    elif continuous:
        t.prompt_tokens, t.completion_tokens, t.cached_tokens = prompt, ct, cached
        t.reasoning_tokens = r_tokens
    if continuous:
        t.tokens = tokens
    if done:
        w.event(b"[DONE]")
        t.done = True
    t.text = "".join(pieces)
    t.stream = bytes(w.buf)
    if truncate:
        # Cut inside the last output chunk's JSON: no finish, no usage, no [DONE].
        cut = t.dispatch[-1] - 5
        t.stream = t.stream[:cut]
        t.dispatch.pop()
        t.chars.pop()
        t.kinds.pop()
        t.firsts = {k: at for k, at in t.firsts.items() if at < cut}
        t.text = "".join(pieces[:-1])
        t.done = False
        t.finish_reason = None
        t.prompt_tokens = t.completion_tokens = t.cached_tokens = t.reasoning_tokens = None
        t.tokens = None
        t.malformed = 1  # the half object, returned by flush
    return t


def feed(stream: bytes, cuts: list[int]) -> tuple[StreamResult, list[int]]:
    """Feed the stream cut at ``cuts``; the clock of read i is i (flush is len(pieces))."""
    bounds = [0, *cuts, len(stream)]
    pieces = [stream[a:b] for a, b in itertools.pairwise(bounds)]
    dec = SSEDecoder()
    acc = ChunkAccumulator()
    seen = 0
    for i, piece in enumerate(pieces):
        payloads = dec.feed(piece)
        if payloads:
            acc.add_all(payloads, i)
        for name, payload in dec.named[seen:]:
            acc.add_named(name, payload, i)
        seen = len(dec.named)
    for payload in dec.flush():
        acc.add(payload, len(pieces))
    for name, payload in dec.named[seen:]:
        acc.add_named(name, payload, len(pieces))
    ends = [b - 1 for b in bounds[1:]]
    return acc.finish(10**9), ends


def check(t: Truth, cuts: list[int]) -> None:
    res, ends = feed(t.stream, cuts)
    want_times = [bisect.bisect_left(ends, at) for at in t.dispatch]
    assert res.chunk_times_ns == want_times
    assert res.chunk_chars == t.chars
    assert res.chunk_tokens == t.tokens
    assert res.reasoning_chunks == t.reasoning_chunks
    assert res.reasoning_text_chars == t.reasoning_chars
    assert (res.prompt_tokens, res.completion_tokens, res.cached_tokens) == (
        t.prompt_tokens,
        t.completion_tokens,
        t.cached_tokens,
    )
    assert res.finish_reason == t.finish_reason
    assert res.done == t.done
    assert res.error == t.error
    assert res.malformed == t.malformed
    assert res.role_only_chunks == t.role_only
    assert res.server_id == t.server_id
    assert res.text == t.text
    assert res.chunk_kinds == t.kinds
    firsts = {k: bisect.bisect_left(ends, at) for k, at in t.firsts.items()}
    assert res.first_reasoning_ns == firsts.get(KIND_REASONING)
    assert res.first_text_ns == firsts.get(KIND_TEXT)
    assert res.first_tool_ns == firsts.get(KIND_TOOL)
    assert res.first_tool_arguments_ns == firsts.get("arguments")
    assert res.function_calls == t.calls
    assert res.tool_call_chunks == t.kinds.count(KIND_TOOL)
    assert res.reasoning_tokens == t.reasoning_tokens


def every_split(t: Truth) -> None:
    n = len(t.stream)
    check(t, [])
    check(t, list(range(1, n)))
    for i in range(n + 1):
        check(t, [i])


SHAPES: dict[str, dict[str, Any]] = {
    "vllm": {},
    "vllm_crlf": {"end": b"\r\n"},
    "vllm_cr": {"end": b"\r"},
    "sglang_finish_on_last_chunk": {"sglang": True, "finish_separate": False},
    "python_json_spaces": {"style": "spaced"},
    "ascii_escaped_json": {"style": "ascii"},
    "stamped_chunks_no_template": {"stamp": True},
    "continuous_usage": {"continuous": True},
    "continuous_usage_no_final_chunk": {"continuous": True, "usage": False},
    "reasoning_then_content": {"reasoning": 3},
    "reasoning_switch_inside_a_chunk": {"reasoning": 2, "mixed": True},
    "sglang_reasoning": {"sglang": True, "reasoning": 2},
    "tool_calls": {"tools": 1},
    "reasoning_then_parallel_tool_calls": {"reasoning": 2, "tools": 2, "n": 3},
    "sglang_tool_calls_finish_on_last_chunk": {"sglang": True, "tools": 2, "finish_separate": False},
    "tool_calls_continuous_usage": {"tools": 2, "continuous": True, "reasoning": 1},
    "no_usage": {"usage": False},
    "no_done": {"done": False},
    "completions": {"completions": True},
    "completions_continuous": {"completions": True, "continuous": True},
    "error_object_mid_stream": {"error_at": 2},
    "vllm_flat_error_mid_stream": {"error_at": 1, "error_kind": "object"},
    "named_error_event": {"error_at": 3, "error_kind": "named"},
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_stream_shape_every_split(shape: str) -> None:
    t = chat_stream(random.Random(shape), **{"n": 8, **SHAPES[shape]})
    every_split(t)


def test_truncated_stream_mid_json() -> None:
    rng = random.Random(3)
    t = chat_stream(rng, n=6, truncate=True)
    # The truth's text: all complete output chunks (the cut one is lost).
    res, _ = feed(t.stream, [])
    assert res.malformed == 1 and res.first_malformed is not None
    assert res.first_malformed.startswith('{"id":')
    assert res.error_class() == "truncated"
    assert len(res.chunk_times_ns) == len(t.dispatch) == 5
    every_split(t)


def test_random_streams_random_splits() -> None:
    rng = random.Random(20261129)
    for _ in range(150):
        options: dict[str, list[Any]] = {
            "style": ["compact", "compact", "spaced", "ascii"],
            "end": [b"\n", b"\n", b"\r\n", b"\r"],
            "sglang": [False, True],
            "continuous": [False, False, True],
            "finish_separate": [True, False],
            "usage": [True, True, False],
            "done": [True, True, False],
            "stamp": [False, False, True],
            "completions": [False, False, True],
        }
        kwargs = {k: rng.choice(v) for k, v in options.items()}
        if not kwargs["completions"]:
            kwargs["reasoning"] = rng.choice([0, 0, 2])
            kwargs["mixed"] = rng.random() < 0.3
            kwargs["tools"] = rng.choice([0, 0, 1, 2])
        if rng.random() < 0.1:
            kwargs["error_at"] = 1
            kwargs["error_kind"] = rng.choice(["error", "object", "named"])
        t = chat_stream(rng, n=rng.randint(1, 40), **kwargs)
        check(t, [])
        for _ in range(4):
            k = rng.randint(1, 30)
            check(t, sorted(rng.sample(range(1, len(t.stream)), min(k, len(t.stream) - 1))))


def test_add_reports_done_and_keeps_order() -> None:
    acc = ChunkAccumulator()
    assert acc.add(b'{"choices":[{"delta":{"content":"a"}}]}', 1)
    assert not acc.add(b"[DONE]", 2)
    assert not acc.add(b'{"choices":[{"delta":{"content":"b"}}]}', 3)
    res = acc.finish(4)
    assert res.done and res.text == "ab" and res.n_payloads == 2
    acc = ChunkAccumulator()
    assert acc.add_all([b'{"choices":[]}'], 1)
    assert not acc.add_all([b'{"choices":[]}', b"[DONE]"], 2)
    assert acc.n_payloads == 3


def test_finish_twice_returns_the_same_result() -> None:
    acc = ChunkAccumulator()
    acc.add_all([b'{"choices":[{"delta":{"content":"a"}}]}'] * 20, 1)
    first = acc.finish(2)
    assert acc.finish(3) is first and first.text == "a" * 20 and first.end_ns == 2


def test_done_with_whitespace_and_malformed_payloads() -> None:
    acc = ChunkAccumulator()
    for p in (b"not json", b"[1, 2]", b'"str"', b" [DONE] ", b"x" * 500):
        acc.add(p, 1)
    res = acc.finish(2)
    assert res.done
    assert res.malformed == 4
    assert res.first_malformed == "not json"
    assert res.error_class() == "malformed_stream"
    acc = ChunkAccumulator()
    acc.add(b"\xff" * 300, 1)
    assert len(acc.finish(2).first_malformed or "") == 200


def test_delta_wins_over_text_on_every_path() -> None:
    # A chat delta with no text next to a completions-style "text": no output, template or not.
    payloads = [b'{"choices":[{"index":0,"delta":{},"text":"t%d"}]}' % i for i in range(20)]
    payloads += [b'{"choices":[{"index":0,"delta":{"content":"c%d"}}]}' % i for i in range(20)]
    acc = ChunkAccumulator()
    acc.add_all(payloads, 1)
    res = acc.finish(2)
    assert res.text == "".join(f"c{i}" for i in range(20))
    assert res.empty_chunks == 20 and len(res.chunk_chars) == 20


def test_multi_choice_tool_calls_and_role_with_text() -> None:
    chunks = [
        {"id": "a", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}]},
        {"id": "a", "choices": [{"index": 0, "delta": {"content": "x"}}, {"index": 1, "delta": {"content": "yy"}}]},
        {
            "id": "a",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "get", "arguments": '{"q"'},
                            }
                        ]
                    },
                }
            ],
        },
        {"id": "a", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    acc = ChunkAccumulator()
    for i, c in enumerate(chunks):
        acc.add(orjson.dumps(c), i)
    res = acc.finish(9)
    assert res.chunk_times_ns == [0, 1, 2]
    assert res.chunk_chars == [2, 3, 7]
    assert res.text == "Hix"
    assert res.tool_call_chunks == 1
    assert res.role_only_chunks == 0 and res.empty_chunks == 1
    assert res.finish_reason == "tool_calls"


def test_error_class() -> None:
    assert StreamResult(done=True, finish_reason="length").error_class() is None
    # [DONE] without a finish reason: the server cut the answer (llama.cpp's interrupted requests)
    assert StreamResult(done=True).error_class() == "truncated"
    assert StreamResult(done=False, finish_reason="stop").error_class() is None
    assert StreamResult(done=False).error_class() == "truncated"
    assert StreamResult(done=True, malformed=1).error_class() == "malformed_stream"
    assert StreamResult(done=True, error={"message": "x", "type": None, "code": None}).error_class() == ("stream_error")


def test_token_split_sources() -> None:
    r = StreamResult(chunk_times_ns=[1, 2], chunk_chars=[1, 3], chunk_tokens=[2, 3], completion_tokens=5)
    assert r.token_split() == ([2, 3], 5, TOKENS_PER_CHUNK_USAGE)
    r = StreamResult(chunk_times_ns=[1, 2], chunk_chars=[1, 3], completion_tokens=8)
    assert r.token_split() == ([3, 5], 8, TOKENS_USAGE)  # 1 each, surplus 6 split 1.5 : 4.5
    r = StreamResult(chunk_times_ns=[1, 2, 3], chunk_chars=[1, 3, 1])
    assert r.token_split() == ([1, 1, 1], 3, TOKENS_CHUNKS)


# --- non-streaming bodies ----------------------------------------------------------------------


def test_body_chat_with_reasoning_and_usage() -> None:
    body = orjson.dumps(
        {
            "id": "chatcmpl-9",
            "object": "chat.completion",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "The answer: 4.", "reasoning_content": "2+2"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": 12,
                "completion_tokens": 9,
                "total_tokens": 21,
                "prompt_tokens_details": {"cached_tokens": 8},
            },
        }
    )
    res = parse_completion_body(body, 100, 200)
    assert res.chunk_times_ns == [100] and res.chunk_chars == [17]
    assert res.chunk_tokens == [9]
    assert res.text == "The answer: 4." and res.reasoning_chunks == 1 and res.reasoning_text_chars == 3
    assert (res.prompt_tokens, res.completion_tokens, res.cached_tokens) == (12, 9, 8)
    assert res.finish_reason == "stop" and res.done and res.error_class() is None
    assert res.server_id == "chatcmpl-9" and res.role_only_chunks == 0 and res.end_ns == 200


def test_body_completions_without_usage() -> None:
    body = (
        b'{"id": "cmpl-1", "object": "text_completion", '
        b'"choices": [{"index": 0, "text": " ok", "finish_reason": "length"}]}'
    )
    res = parse_completion_body(body, 5, 6)
    assert res.text == " ok" and res.chunk_tokens is None and res.completion_tokens is None
    assert res.token_split() == ([1], 1, TOKENS_CHUNKS)


@pytest.mark.parametrize(
    ("body", "message", "code"),
    [
        (
            b'{"error": {"message": "This model\'s maximum context length is 8192 tokens.", '
            b'"type": "BadRequestError", "param": null, "code": 400}}',
            "This model's maximum context length is 8192 tokens.",
            400,
        ),
        (
            b'{"object": "error", "message": "The input (9000 tokens) is longer than the model\'s context '
            b'length (8192 tokens).", "type": "BadRequestError", "param": null, "code": 400}',
            "The input (9000 tokens) is longer than the model's context length (8192 tokens).",
            400,
        ),
        (b'{"error": "rate limited"}', "rate limited", None),
    ],
)
def test_body_errors(body: bytes, message: str, code: int | None) -> None:
    res = parse_completion_body(body, 1, 2)
    assert res.error is not None and res.error["message"] == message and res.error["code"] == code
    assert res.error_class() == "stream_error" and res.chunk_times_ns == []


@pytest.mark.parametrize("body", [b"", b"<html>502 Bad Gateway</html>", b'{"choices": [', b"[]"])
def test_body_malformed(body: bytes) -> None:
    res = parse_completion_body(body, 1, 2)
    assert res.malformed == 1 and res.error_class() == "malformed_stream"
    assert res.first_malformed == body.decode()


def test_named_error_event_without_json() -> None:
    acc = ChunkAccumulator()
    acc.add(b'{"choices":[{"delta":{"content":"a"}}]}', 1)
    acc.add_named("error", b"upstream died", 2)
    acc.add_named("ping", b"{}", 3)
    res = acc.finish(4)
    assert res.error == {"message": "upstream died", "type": None, "code": None}
    assert res.named_events == 2 and res.error_class() == "stream_error"


# --- distribute_tokens -------------------------------------------------------------------------


def test_distribute_tokens_examples() -> None:
    assert distribute_tokens([], 5) == []
    assert distribute_tokens([3, 4], 0) == [0, 0]
    assert distribute_tokens([5, 1, 9], 3) == [1, 1, 1]
    assert distribute_tokens([10, 10], 5) in ([2, 3], [3, 2])
    assert distribute_tokens([100, 1, 1, 1], 4) == [1, 1, 1, 1]
    assert distribute_tokens([100, 1, 1, 1], 10) == [7, 1, 1, 1]
    assert distribute_tokens([1, 1, 1], 2) in ([1, 0, 1], [0, 1, 1], [1, 1, 0])
    assert distribute_tokens([0, 0, 0], 6) == [2, 2, 2]
    assert distribute_tokens([3, 2, 8, 1, 1], 6) == [1, 1, 2, 1, 1]  # the EOS token: longest chunk
    assert distribute_tokens([4, 12, 4, 8], 7) == [1, 3, 1, 2]  # speculative multi-token chunks
    assert distribute_tokens([1, 30], 2) == [1, 1]


def test_distribute_tokens_properties() -> None:
    rng = random.Random(99)
    for _ in range(2000):
        n = rng.randint(1, 60)
        chars = [rng.choice([0, 1, 1, 2, 3, 5, 8, 40]) for _ in range(n)]
        total = rng.randint(0, 4 * n)
        out = distribute_tokens(chars, total)
        assert len(out) == n and sum(out) == total and min(out) >= 0
        assert out == distribute_tokens(chars, total)  # deterministic
        if total <= 0:
            continue
        weights = [c if c > 0 else 1 for c in chars]
        base = 1 if total >= n else 0
        surplus = total - base * n
        share = [surplus * w / sum(weights) for w in weights]
        # One token each when there are enough, and the rest within one token of its exact share.
        assert all(abs(o - base - s) < 1 for o, s in zip(out, share, strict=True))
        if total >= n:
            assert min(out) >= 1


def test_first_error_by_arrival_wins() -> None:
    acc = ChunkAccumulator()
    acc.add(b'{"choices":[{"delta":{"content":"a"}}]}', 1)
    acc.add(b'{"error":{"message":"second","type":"t2","code":2}}', 5)
    acc.add_named("error", b'{"error":{"message":"first","type":"t1","code":1}}', 3)
    assert acc.finish(6).error == {"message": "first", "type": "t1", "code": 1}
    acc = ChunkAccumulator()
    acc.add(b'{"object":"error","message":"first","type":"t1","code":1}', 3)
    acc.add_named("error", b'{"message":"second"}', 5)
    assert acc.finish(6).error == {"message": "first", "type": "t1", "code": 1}


def test_mangled_streams_never_raise() -> None:
    """Realistic streams with random byte damage (flips, cuts, insertions of syntax characters):
    decoding never raises and the result stays self-consistent."""
    rng = random.Random(404)
    junk = [b'"', b"\\", b"{", b"}", b"[", b"]", b":", b",", b"\n", b"\r", b"\xff", b"0", b"null", b"data: "]
    for _ in range(300):
        t = chat_stream(rng, n=rng.randint(1, 30), continuous=rng.random() < 0.3, reasoning=0)
        s = bytearray(t.stream)
        for _ in range(rng.randint(1, 6)):
            at = rng.randrange(len(s))
            r = rng.random()
            if r < 0.4:
                s[at] = rng.randrange(256)
            elif r < 0.7:
                s[at:at] = rng.choice(junk)
            else:
                del s[at : at + rng.randint(1, 40)]
        stream = bytes(s)
        cuts = sorted(rng.sample(range(1, len(stream)), min(len(stream) - 1, rng.randint(0, 20))))
        res, _ = feed(stream, cuts)
        assert len(res.chunk_times_ns) == len(res.chunk_chars)
        assert all(c > 0 for c in res.chunk_chars)
        assert res.chunk_times_ns == sorted(res.chunk_times_ns)
        if res.chunk_tokens is not None:
            assert len(res.chunk_tokens) == len(res.chunk_times_ns)
        tokens, total, _ = res.token_split()
        assert len(tokens) == len(res.chunk_times_ns)
        if tokens and total is not None and total >= 0:
            assert sum(tokens) == total
        assert res.error_class() in (None, "stream_error", "truncated", "malformed_stream")


# llama.cpp's server (llama-cpp-python 0.3.36, a tiny byte-level model), as sent: one token a chunk,
# an empty content for a token that ends inside a UTF-8 character, no usage in the stream
def _llama(delta: bytes, finish: bytes = b"null") -> bytes:
    return (
        b'{"id": "chatcmpl-9", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": '
        + delta
        + b', "logprobs": null, "finish_reason": '
        + finish
        + b"}]}"
    )


_LLAMA_CPP = [
    _llama(b'{"role": "assistant"}'),
    _llama(b'{"content": "\\u0012"}'),
    _llama(b'{"content": ""}'),
    _llama(b'{"content": "\\u00ea"}'),
    _llama(b'{"content": "m"}'),
    _llama(b"{}", b'"length"'),
    b"[DONE]",
]


def test_a_token_whose_text_was_held_back_counts_with_the_chunk_that_brings_it() -> None:
    acc = ChunkAccumulator()
    for i, p in enumerate(_LLAMA_CPP):
        acc.add(p, 10 * (i + 1))
    res = acc.finish(100)
    assert res.chunk_times_ns == [20, 40, 50] and res.held_at == [1]
    assert res.token_split() == ([1, 2, 1], 4, TOKENS_CHUNKS)  # 4 tokens: what max_tokens=4 asked
    assert res.error_class() is None and res.finish_reason == "length"
    # a role chunk, vLLM's `"content": ""` beside the role, and a last empty delta are no tokens
    acc = ChunkAccumulator()
    acc.add(b'{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}', 1)
    acc.add(b'{"choices": [{"index": 0, "delta": {"content": "a"}}]}', 2)
    acc.add(b'{"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "stop"}]}', 3)
    acc.add(b"[DONE]", 4)
    res = acc.finish(5)
    assert res.held_at == [] and res.token_split() == ([1], 1, TOKENS_CHUNKS)


def test_a_stream_closed_with_done_but_no_finish_reason_is_truncated() -> None:
    # llama.cpp's server ends a request it interrupts for a newer one: the role chunk, then [DONE]
    acc = ChunkAccumulator()
    acc.add(_LLAMA_CPP[0], 1)
    acc.add(_LLAMA_CPP[1], 2)
    acc.add(b"[DONE]", 3)
    res = acc.finish(4)
    assert res.done and res.finish_reason is None and res.error_class() == "truncated"
