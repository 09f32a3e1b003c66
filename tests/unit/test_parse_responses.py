"""ResponsesDecoder / parse_responses_body against wire-format fixtures whose truth is known.

The fixtures (``tests/fixtures/responses/``) are streams as vLLM, SGLang and OpenAI write them
(``event: <type>`` + compact JSON ``data:``, sequence numbers, no ``[DONE]``): a plain answer, reasoning
then answer, a reasoning summary then a streamed function call (OpenAI), a failed response, a stream
cut inside an event, and a non-streamed body. The expected values are written out by hand below;
the time of each output event comes from ``reference_events``, a naive reading of the fixture (split
on blank lines, ``json.loads`` each data line) that shares no code with the decoder. Each stream is fed
whole, one byte at a time, and at random cuts, with the read's index as its clock.
"""

from __future__ import annotations

import bisect
import itertools
import json
import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.parse.responses import (
    KIND_REASONING,
    KIND_TEXT,
    KIND_TOOL,
    FunctionCall,
    ResponsesDecoder,
    ResponsesResult,
    parse_responses_body,
)
from loadgen.parse.stream import TOKENS_USAGE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "responses"
END = 10**9  # the time finish() is given


@dataclass
class Truth:
    """What a fixture carries, written by hand from its file."""

    response_id: str | None
    kinds: dict[str, int]  # output events per kind
    text: str = ""
    reasoning_text: str = ""
    reasoning_summary: str = ""
    calls: list[FunctionCall] = field(default_factory=list)
    usage: tuple[int | None, int | None, int | None, int | None] = (None, None, None, None)
    status: str | None = None
    finish_reason: str | None = None
    done: bool = True
    error: dict[str, Any] | None = None
    error_class: str | None = None
    malformed: int = 0
    model: str | None = None


TRUTHS: dict[str, Truth] = {
    "plain_text.sse": Truth(
        response_id="resp_8f2a6c1d9e3b4f70a1c2d3e4f5a6b7c8",
        kinds={KIND_TEXT: 18},
        text='The capital of Japan is 東京 (Tokyo). It\'s home to ~14M people 🗼\n\nSay "hi" \\o/',
        usage=(31, 19, 0, 16),
        status="completed",
        finish_reason="stop",
        model="Qwen/Qwen3-8B",
    ),
    "reasoning_then_answer.sse": Truth(
        response_id="resp_b7e1d0c2a3f44e5d8c9b0a1f2e3d4c5b",
        kinds={KIND_REASONING: 11, KIND_TEXT: 6},
        text="2 + 2 = **4**.",
        reasoning_text="Okay, the user asks 2+2. That is 4.",
        usage=(18, 24, 16, 0),
        status="completed",
        finish_reason="stop",
        model="deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
    ),
    "function_call.sse": Truth(
        response_id="resp_68af1c2e3d4b5a69b0c1d2e3f4a5b6c7",
        kinds={KIND_REASONING: 8, KIND_TOOL: 12},  # 11 argument deltas + the call's appearance
        reasoning_summary="**Checking weather**\n\nThe user wants Paris weather.",
        calls=[
            FunctionCall(
                item_id="fc_68af1c30b1c2d3e4",
                call_id="call_Xq7s9LmN2pQr",
                name="get_weather",
                arguments='{"city":"Paris, France","unit":"c"}',
            )
        ],
        usage=(92, 87, 64, 0),
        status="completed",
        finish_reason="tool_calls",
        model="gpt-5-mini-2025-08-07",
    ),
    "failed.sse": Truth(
        response_id="resp_c0ffee00112233445566778899aabbcc",
        kinds={KIND_TEXT: 3},
        text="Once upon a",
        usage=(12, 3, 0, 0),
        status="failed",
        error={
            "message": "The server had an error while processing your request: KV cache is full.",
            "type": None,
            "code": "server_error",
        },
        error_class="stream_error",
        model="Qwen/Qwen3-8B",
    ),
    "truncated.sse": Truth(
        response_id="resp_7a7a7a7a7a7a4b4b8c8c9d9d0e0e1f1f",
        kinds={KIND_TEXT: 4},  # the fifth delta is cut inside its JSON
        text="Load testing is fun",
        status="in_progress",
        done=False,
        error_class="truncated",
        malformed=1,
        model="Qwen/Qwen3-8B",
    ),
}


@dataclass
class RefEvent:
    dispatch: int  # offset of the byte that completes the event (the blank line's LF)
    kind: str | None  # output kind, None for an event that carries no output
    chars: int


def reference_events(stream: bytes) -> list[RefEvent]:
    """Naive reading of an LF-only fixture: events end at a blank line; output by the documented
    rules (non-empty deltas, a function call's appearance with its name and arguments)."""
    out: list[RefEvent] = []
    pos = 0
    while True:
        end = stream.find(b"\n\n", pos)
        if end < 0:
            break
        block = stream[pos:end].decode()
        pos = end + 2
        data = "\n".join(line[6:] for line in block.split("\n") if line.startswith("data: "))
        obj = json.loads(data)
        t = obj["type"]
        kind, chars = None, 0
        if t == "response.output_text.delta" and obj["delta"]:
            kind, chars = KIND_TEXT, len(obj["delta"])
        elif t in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta") and obj["delta"]:
            kind, chars = KIND_REASONING, len(obj["delta"])
        elif t == "response.function_call_arguments.delta" and obj["delta"]:
            kind, chars = KIND_TOOL, len(obj["delta"])
        elif t == "response.output_item.added" and obj["item"]["type"] == "function_call":
            kind, chars = KIND_TOOL, len(obj["item"]["name"]) + len(obj["item"]["arguments"])
        out.append(RefEvent(end + 1, kind, chars))
    return out


def run(stream: bytes, cuts: list[int]) -> tuple[ResponsesResult, list[int], list[bool]]:
    """Feed ``stream`` cut at ``cuts``; read i arrives at time i. Returns the result, the last byte
    offset of every read, and what each feed returned."""
    bounds = [0, *cuts, len(stream)]
    dec = ResponsesDecoder()
    more = [dec.feed(stream[a:b], i) for i, (a, b) in enumerate(itertools.pairwise(bounds))]
    return dec.finish(END), [b - 1 for b in bounds[1:]], more


def check(name: str, cuts: list[int]) -> None:
    stream = (FIXTURES / name).read_bytes()
    truth = TRUTHS[name]
    res, ends, more = run(stream, cuts)
    ref = [e for e in reference_events(stream) if e.kind is not None]
    want_times = [bisect.bisect_left(ends, e.dispatch) for e in ref]
    assert res.chunk_times_ns == want_times, cuts
    assert res.chunk_kinds == [e.kind for e in ref]
    assert res.chunk_chars == [e.chars for e in ref]
    assert {k: res.chunk_kinds.count(k) for k in set(res.chunk_kinds)} == truth.kinds
    firsts = {k: next((t for t, e in zip(want_times, ref, strict=True) if e.kind == k), None) for k in truth.kinds}
    assert res.first_output_ns == (want_times[0] if want_times else None)
    assert res.first_text_ns == firsts.get(KIND_TEXT)
    assert res.first_reasoning_ns == firsts.get(KIND_REASONING)
    assert res.first_tool_ns == firsts.get(KIND_TOOL)
    assert res.text == truth.text
    assert res.reasoning_text == truth.reasoning_text
    assert res.reasoning_summary == truth.reasoning_summary
    assert res.function_calls == truth.calls
    assert (res.prompt_tokens, res.completion_tokens, res.reasoning_tokens, res.cached_tokens) == truth.usage
    assert res.response_id == truth.response_id and res.model == truth.model
    assert res.status == truth.status
    assert res.finish_reason == truth.finish_reason
    assert res.done == truth.done
    assert res.error == truth.error
    assert res.error_class() == truth.error_class
    assert res.malformed == truth.malformed
    assert res.end_ns == END
    # feed() says "stop reading" from the read that completed the terminal event on
    if truth.done:
        last = bisect.bisect_left(ends, reference_events(stream)[-1].dispatch)
        assert more == [i < last for i in range(len(more))]
    else:
        assert all(more)


@pytest.mark.parametrize("name", list(TRUTHS))
def test_fixture_whole_bytewise_and_random_splits(name: str) -> None:
    n = len((FIXTURES / name).read_bytes())
    check(name, [])
    check(name, list(range(1, n)))  # one byte at a time
    rng = random.Random(name)
    for _ in range(60):
        check(name, sorted(rng.sample(range(1, n), rng.randint(1, 40))))


def test_fixture_first_tool_arguments_come_after_the_call_appears() -> None:
    res, _, _ = run((FIXTURES / "function_call.sse").read_bytes(), [])
    assert res.first_tool_ns == res.first_tool_arguments_ns == 0  # one read: one time for all
    stream = (FIXTURES / "function_call.sse").read_bytes()
    ref = reference_events(stream)
    tool = [e for e in ref if e.kind == KIND_TOOL]
    res, _, _ = run(stream, [tool[0].dispatch + 1])  # the call's appearance in read 0, its arguments in read 1
    assert (res.first_tool_ns, res.first_tool_arguments_ns) == (0, 1)
    assert res.first_reasoning_ns == 0 and res.first_text_ns is None
    assert res.tool_call_chunks == 12 and res.reasoning_chunks == 8
    assert res.reasoning_text_chars == len(TRUTHS["function_call.sse"].reasoning_summary)


@pytest.mark.parametrize("name", list(TRUTHS))
def test_fixture_with_crlf_line_ends(name: str) -> None:
    stream = (FIXTURES / name).read_bytes()
    crlf = stream.replace(b"\n", b"\r\n")
    want, _, _ = run(stream, [])
    assert run(crlf, [])[0] == want
    got, _, _ = run(crlf, list(range(1, len(crlf))))  # byte i arrives at time i
    # a CR ends a line: an event is complete at the second CR of its "\r\n\r\n"
    ends = [i + 2 for i in range(len(crlf)) if crlf.startswith(b"\r\n\r\n", i)]
    outputs = [ends[i] for i, e in enumerate(reference_events(stream)) if e.kind is not None]
    assert got.chunk_times_ns == outputs
    assert (
        replace(
            got,
            chunk_times_ns=want.chunk_times_ns,
            first_text_ns=want.first_text_ns,
            first_reasoning_ns=want.first_reasoning_ns,
            first_tool_ns=want.first_tool_ns,
            first_tool_arguments_ns=want.first_tool_arguments_ns,
        )
        == want
    )


@pytest.mark.parametrize("name", list(TRUTHS))
def test_fixture_without_event_names(name: str) -> None:
    """A server (or proxy) that sends ``data:`` only: the JSON's ``type`` is enough."""
    stream = (FIXTURES / name).read_bytes()
    plain = b"\n".join(line for line in stream.split(b"\n") if not line.startswith(b"event: "))
    want, _, _ = run(stream, [])
    got, _, _ = run(plain, [])
    assert got == want
    ref = [e for e in reference_events(plain) if e.kind is not None]
    got, _, _ = run(plain, list(range(1, len(plain))))
    assert got.chunk_times_ns == [e.dispatch for e in ref]
    assert got.text == want.text and got.function_calls == want.function_calls and got.error == want.error


def test_times_attributed_to_the_read_that_completed_each_event() -> None:
    events = [
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
        {"type": "response.reasoning_text.delta", "delta": "Hm", "item_id": "rs_1"},
        {"type": "response.reasoning_text.delta", "delta": "m.", "item_id": "rs_1"},
        {"type": "response.output_text.delta", "delta": "Yes", "item_id": "msg_1"},
        {"type": "response.output_text.delta", "delta": "", "item_id": "msg_1"},  # empty: no output
        {"type": "response.output_text.delta", "delta": "!", "item_id": "msg_1"},
        {"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}},
    ]
    wire = [b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events]
    dec = ResponsesDecoder()
    # read at t=5: created, both reasoning deltas and the first half of the first answer delta
    assert dec.feed(wire[0] + wire[1] + wire[2] + wire[3][:30], 5)
    # read at t=7: the rest of that delta (completes it) and the empty one
    assert dec.feed(wire[3][30:] + wire[4], 7)
    # read at t=9: the last delta and the end
    assert not dec.feed(wire[5] + wire[6], 9)
    res = dec.finish(11)
    assert res.chunk_times_ns == [5, 5, 7, 9]
    assert res.chunk_kinds == [KIND_REASONING, KIND_REASONING, KIND_TEXT, KIND_TEXT]
    assert res.chunk_chars == [2, 2, 3, 1]
    assert (res.first_output_ns, res.first_reasoning_ns, res.first_text_ns, res.first_tool_ns) == (5, 5, 7, None)
    assert res.text == "Yes!" and res.reasoning_text == "Hmm."
    assert res.n_payloads == 7 and res.end_ns == 11


def test_last_event_without_blank_line_gets_the_end_time() -> None:
    dec = ResponsesDecoder()
    dec.feed(b'data: {"type":"response.output_text.delta","delta":"a"}\n\n', 1)
    dec.feed(b'data: {"type":"response.output_text.delta","delta":"b"}\n', 2)  # complete only at EOF
    res = dec.finish(4)
    assert res.chunk_times_ns == [1, 4] and res.text == "ab" and res.malformed == 0
    assert res.error_class() == "truncated"  # no terminal event
    assert dec.finish(5) is res  # a second finish: the same result
    dec = ResponsesDecoder()
    assert dec.feed(b'data: {"type":"response.completed","response":{"id":"r","status":"completed"}}', 3)
    res = dec.finish(4)
    assert res.done and res.error_class() is None and res.response_id == "r"


def test_function_call_first_arguments_on_the_added_item_and_no_item_ids() -> None:
    """vLLM can put the first arguments on ``output_item.added``; deltas may name no item."""
    events = [
        {"type": "response.output_item.added", "item": {"type": "function_call", "name": "f", "arguments": '{"a"'}},
        {"type": "response.function_call_arguments.delta", "delta": ": 1}"},
        {"type": "response.output_item.added", "item": {"type": "function_call", "name": "g", "call_id": "c2"}},
        {"type": "response.function_call_arguments.delta", "delta": "{}"},
        {"type": "response.completed", "response": {"status": "completed"}},
    ]
    dec = ResponsesDecoder()
    for i, e in enumerate(events):
        dec.feed(b"data: " + orjson.dumps(e) + b"\n\n", i)
    res = dec.finish(9)
    assert res.function_calls == [
        FunctionCall(name="f", arguments='{"a": 1}'),
        FunctionCall(name="g", call_id="c2", arguments="{}"),
    ]
    assert res.chunk_times_ns == [0, 1, 2, 3] and res.chunk_chars == [5, 4, 1, 2]
    assert res.first_tool_ns == 0 and res.first_tool_arguments_ns == 0
    assert res.finish_reason == "tool_calls"


def test_done_events_override_streamed_arguments_and_final_output_fills_gaps() -> None:
    events = [
        {"type": "response.output_item.added", "item": {"type": "function_call", "id": "fc1", "name": "f"}},
        {"type": "response.function_call_arguments.delta", "item_id": "fc1", "delta": '{"x":'},
        {"type": "response.function_call_arguments.done", "item_id": "fc1", "arguments": '{"x": 2}'},
        {
            "type": "response.completed",
            "response": {
                "id": "resp_9",
                "status": "completed",
                "output": [
                    {"type": "function_call", "id": "fc1", "name": "f", "arguments": '{"x": 2}', "call_id": "c1"},
                    {"type": "function_call", "id": "fc2", "name": "h", "arguments": "[]", "call_id": "c2"},
                    {"type": "message", "content": [{"type": "output_text", "text": "never streamed"}]},
                ],
            },
        },
    ]
    dec = ResponsesDecoder()
    for i, e in enumerate(events):
        dec.feed(b"data: " + orjson.dumps(e) + b"\n\n", i)
    res = dec.finish(9)
    assert res.function_calls == [
        FunctionCall(item_id="fc1", name="f", arguments='{"x": 2}'),
        FunctionCall(item_id="fc2", call_id="c2", name="h", arguments="[]"),
    ]
    assert res.text == "never streamed"  # from the final output, with no output time
    assert res.chunk_kinds == [KIND_TOOL, KIND_TOOL] and res.server_id == "resp_9"


def test_error_event_inside_a_200_stream() -> None:
    stream = (
        b"event: response.created\n"
        b'data: {"type":"response.created","response":{"id":"resp_e","status":"in_progress"}}\n\n'
        b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"x"}\n\n'
        b'event: error\ndata: {"type":"error","code":"ERR_SOMETHING","message":"Something went wrong","param":null,'
        b'"sequence_number":2}\n\n'
    )
    res, _, more = run(stream, [])
    assert more == [True]  # an error event is not a terminal event: the server closes the stream
    assert res.error == {"message": "Something went wrong", "type": None, "code": "ERR_SOMETHING"}
    assert res.error_class() == "stream_error" and res.text == "x" and res.response_id == "resp_e"
    # vLLM's shape: an error object, in an event of its own; the first error wins
    stream += (
        b'data: {"error":{"message":"Internal server error","type":"InternalServerError","param":null,"code":500}}\n\n'
    )
    res, _, _ = run(stream, [])
    assert res.error == {"message": "Something went wrong", "type": None, "code": "ERR_SOMETHING"}
    res, _, _ = run(stream[stream.index(b'data: {"error"') :], [])
    assert res.error == {"message": "Internal server error", "type": "InternalServerError", "code": 500}


def test_incomplete_response_is_a_clean_end() -> None:
    stream = (
        b'data: {"type":"response.output_text.delta","delta":"abc"}\n\n'
        b'data: {"type":"response.incomplete","response":{"id":"resp_i","status":"incomplete",'
        b'"incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":5,"output_tokens":16,'
        b'"output_tokens_details":{"reasoning_tokens":15}}}}\n\n'
    )
    res, _, more = run(stream, [])
    assert more == [False] and res.done and res.error_class() is None
    assert (res.status, res.incomplete_reason, res.finish_reason) == ("incomplete", "max_output_tokens", "length")
    assert (res.prompt_tokens, res.completion_tokens, res.reasoning_tokens) == (5, 16, 15)
    other = stream.replace(b'"max_output_tokens"', b'"content_filter"')
    assert run(other, [])[0].finish_reason == "content_filter"


def test_done_marker_is_ignored_and_junk_is_malformed() -> None:
    stream = (
        b'data: {"type":"response.output_text.delta","delta":"a"}\n\n'
        b"data: not json\n\n"
        b"data: [1, 2]\n\n"
        b'data: {"type":"response.completed","response":{"status":"completed"}}\n\n'
        b"data: [DONE]\n\n"
    )
    res, _, _ = run(stream, [])
    assert res.malformed == 2 and res.first_malformed == "not json"
    assert res.error_class() == "malformed_stream" and res.done and res.n_payloads == 4  # [DONE] aside
    assert res.ignored_events == 0


def test_token_split_spreads_output_tokens_over_output_events() -> None:
    res, _, _ = run((FIXTURES / "reasoning_then_answer.sse").read_bytes(), [])
    per_event, total, source = res.token_split()
    assert (total, source) == (24, TOKENS_USAGE)
    assert len(per_event) == 17 and sum(per_event) == 24 and min(per_event) >= 1


# --- malformed input never raises -------------------------------------------------------------

JUNK: list[Any] = [None, 0, -1, 1.5, True, "", "x", [], [1, "a"], {}, {"a": None}, {"type": "function_call"}]


def _mutate(obj: Any, rng: random.Random) -> Any:
    """Replace one value somewhere in ``obj`` by something of the wrong type."""
    if isinstance(obj, dict) and obj:
        key = rng.choice(list(obj))
        if rng.random() < 0.4 or not isinstance(obj[key], (dict, list)):
            return {**obj, key: rng.choice(JUNK)}
        return {**obj, key: _mutate(obj[key], rng)}
    if isinstance(obj, list) and obj:
        i = rng.randrange(len(obj))
        return [*obj[:i], _mutate(obj[i], rng), *obj[i + 1 :]]
    return rng.choice(JUNK)


def test_wrong_types_anywhere_never_raise() -> None:
    rng = random.Random(15)
    events: list[Any] = []
    for name in TRUTHS:
        stream = (FIXTURES / name).read_bytes()
        for block in stream.split(b"\n\n"):
            for line in block.split(b"\n"):
                if line.startswith(b"data: "):
                    try:
                        events.append(json.loads(line[6:]))
                    except ValueError:
                        pass  # the truncated fixture's cut event
    assert len(events) > 90
    for _ in range(300):
        picked = rng.sample(events, 12)
        wire = b"".join(
            b"data: " + orjson.dumps(_mutate(e, rng) if rng.random() < 0.7 else e) + b"\n\n" for e in picked
        )
        dec = ResponsesDecoder()
        for i in range(0, len(wire), 97):
            dec.feed(wire[i : i + 97], i)
        res = dec.finish(1)
        assert len(res.chunk_times_ns) == len(res.chunk_kinds) == len(res.chunk_chars)
        res.error_class()
        res.token_split()
    body = (FIXTURES / "body.json").read_bytes()
    obj = json.loads(body)
    for _ in range(300):
        parse_responses_body(orjson.dumps(_mutate(obj, rng)), 1, 2).error_class()


def test_random_bytes_never_raise() -> None:
    rng = random.Random(150)
    stream = (FIXTURES / "function_call.sse").read_bytes()
    for _ in range(200):
        b = bytearray(stream)
        for _ in range(rng.randint(1, 30)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        if rng.random() < 0.3:
            b = b[: rng.randrange(len(b))]
        dec = ResponsesDecoder()
        for i in range(0, len(b), 61):
            dec.feed(bytes(b[i : i + 61]), i)
        dec.finish(1).error_class()
        parse_responses_body(bytes(b[:2000]), 1, 2)


# --- non-streamed bodies ----------------------------------------------------------------------


def test_body_fixture() -> None:
    res = parse_responses_body((FIXTURES / "body.json").read_bytes(), 100, 200)
    assert res.response_id == "resp_0123456789abcdef0123456789abcdef"
    assert res.text == "The answer is 4." and res.reasoning_text == "Add the numbers: 2+2=4."
    assert res.chunk_times_ns == [100] and res.chunk_kinds == [KIND_REASONING]
    assert res.chunk_chars == [len("The answer is 4.") + len("Add the numbers: 2+2=4.")]
    assert (res.first_output_ns, res.first_reasoning_ns, res.first_text_ns, res.first_tool_ns) == (100, 100, 100, None)
    assert (res.prompt_tokens, res.completion_tokens, res.reasoning_tokens, res.cached_tokens) == (15, 21, 12, 8)
    assert res.status == "completed" and res.finish_reason == "stop" and res.done
    assert res.error_class() is None and res.end_ns == 200 and res.n_payloads == 1
    assert res.token_split() == ([21], 21, TOKENS_USAGE)


def test_body_with_function_calls() -> None:
    body = orjson.dumps(
        {
            "id": "resp_f",
            "object": "response",
            "status": "completed",
            "error": None,
            "output": [
                {"type": "function_call", "name": "a", "arguments": "{}", "call_id": "c1"},
                {"type": "function_call", "name": "b", "arguments": '{"k":1}', "call_id": "c2"},
            ],
            "usage": {"input_tokens": 50, "output_tokens": 12},
        }
    )
    res = parse_responses_body(body, 7, 8)
    assert res.function_calls == [
        FunctionCall(name="a", call_id="c1", arguments="{}"),
        FunctionCall(name="b", call_id="c2", arguments='{"k":1}'),
    ]
    assert res.chunk_kinds == [KIND_TOOL] and res.chunk_chars == [1 + 2 + 1 + 7]
    assert res.first_tool_ns == res.first_tool_arguments_ns == 7 and res.finish_reason == "tool_calls"


@pytest.mark.parametrize(
    ("body", "message", "code"),
    [
        (
            b'{"error": {"message": "Response with id \'resp_x\' not found.", "type": "invalid_request_error", '
            b'"param": "response_id", "code": 404}}',
            "Response with id 'resp_x' not found.",
            404,
        ),
        (
            b'{"object": "error", "message": "The engine prompt length 9000 exceeds the max_model_len 8192.", '
            b'"type": "BadRequestError", "param": null, "code": 400}',
            "The engine prompt length 9000 exceeds the max_model_len 8192.",
            400,
        ),
        (
            b'{"id": "resp_y", "object": "response", "status": "failed", "output": [], '
            b'"error": {"code": "server_error", "message": "boom"}}',
            "boom",
            "server_error",
        ),
    ],
)
def test_body_errors(body: bytes, message: str, code: Any) -> None:
    res = parse_responses_body(body, 1, 2)
    assert res.error is not None and res.error["message"] == message and res.error["code"] == code
    assert res.error_class() == "stream_error" and res.chunk_times_ns == [] and res.finish_reason is None


@pytest.mark.parametrize("body", [b"", b"<html>502 Bad Gateway</html>", b'{"output": [', b"[]"])
def test_body_malformed(body: bytes) -> None:
    res = parse_responses_body(body, 1, 2)
    assert res.malformed == 1 and res.error_class() == "malformed_stream"
    assert res.first_malformed == body.decode()
