"""Strategies shared by the fuzz tests: plausible SSE streams of chat and Responses events, JSON
values, TOML documents written from random tables, and read splits."""

from __future__ import annotations

import math
import os
from typing import Any

import orjson
from hypothesis import strategies as st

_DEEP = os.environ.get("HYPOTHESIS_PROFILE") == "deep"


def examples(n: int) -> int:
    """``n`` examples in CI, 50x under the ``deep`` profile (see conftest.py)."""
    return n * 50 if _DEEP else n


# --- JSON ---------------------------------------------------------------------------------------

WORDS = st.sampled_from(["", "a", "Hi", " the", "é", "日本", "\n", '"', "\\", "\x00", "\u2028", "😀"])
TEXT = st.one_of(WORDS, st.text(max_size=12))
JSON_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
)
JSON = st.recursive(
    JSON_SCALAR,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=12,
)


def maybe(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``value`` most of the time, any JSON value (a wrong type) now and then."""
    return st.one_of(value, value, value, JSON)


@st.composite
def shaped(draw: st.DrawFn, fields: dict[str, st.SearchStrategy[Any]]) -> dict[str, Any]:
    """A dict with a random subset of ``fields`` (each value maybe of the wrong type), maybe an extra key."""
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if draw(st.integers(0, 3)):
            out[key] = draw(maybe(value))
    if draw(st.integers(0, 7)) == 0:
        out[draw(TEXT)] = draw(JSON)
    return out


TOKENS = st.integers(-2, 40)
USAGE = shaped(
    {
        "prompt_tokens": TOKENS,
        "completion_tokens": TOKENS,
        "total_tokens": TOKENS,
        "prompt_tokens_details": shaped({"cached_tokens": TOKENS}),
        "completion_tokens_details": shaped({"reasoning_tokens": TOKENS}),
    }
)
ERROR = shaped({"message": TEXT, "type": TEXT, "code": st.one_of(st.integers(400, 600), TEXT), "detail": TEXT})
TOOL_CALL = shaped(
    {
        "index": st.integers(-1, 2),
        "id": st.sampled_from(["", "call_1", "call_2"]),
        "type": st.just("function"),
        "function": shaped({"name": st.sampled_from(["", "get", "search"]), "arguments": TEXT}),
    }
)
DELTA = shaped(
    {
        "role": st.sampled_from(["assistant", ""]),
        "content": st.one_of(st.none(), TEXT),
        "reasoning_content": TEXT,
        "reasoning": TEXT,
        "tool_calls": st.lists(TOOL_CALL, max_size=2),
    }
)
CHOICE = shaped(
    {
        "index": st.integers(0, 1),
        "delta": DELTA,
        "message": DELTA,
        "text": TEXT,
        "finish_reason": st.sampled_from([None, "stop", "length", "tool_calls"]),
    }
)
CHAT_CHUNK = shaped(
    {
        "id": st.sampled_from(["chatcmpl-1", "cmpl-2"]),
        "object": st.sampled_from(["chat.completion.chunk", "text_completion", "error"]),
        "model": st.just("m"),
        "choices": st.lists(CHOICE, max_size=2),
        "usage": USAGE,
        "error": ERROR,
        "message": TEXT,
    }
)


@st.composite
def template_chunk(draw: st.DrawFn) -> dict[str, Any]:
    """A plain text chunk as vLLM/SGLang stream them: what the accumulator's template path takes."""
    key = draw(st.sampled_from(["content", "reasoning_content", "reasoning"]))
    chunk: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": {key: draw(TEXT)}, "finish_reason": None}],
    }
    if draw(st.booleans()):
        chunk["usage"] = {"prompt_tokens": 5, "completion_tokens": draw(TOKENS), "total_tokens": 9}
    return chunk


def _dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


# A payload: a chat chunk (often a template one, as real streams are), [DONE], or junk.
CHAT_PAYLOAD = st.one_of(
    template_chunk().map(_dumps),
    template_chunk().map(_dumps),
    CHAT_CHUNK.map(_dumps),
    st.just(b"[DONE]"),
    JSON.map(_dumps),
    st.binary(max_size=12),
    CHAT_CHUNK.map(_dumps).map(lambda b: b[: len(b) // 2]),  # cut mid-JSON
)

RESPONSE_TYPES = [
    "response.created",
    "response.in_progress",
    "response.output_text.delta",
    "response.reasoning_text.delta",
    "response.reasoning_summary_text.delta",
    "response.refusal.delta",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.output_item.added",
    "response.output_item.done",
    "response.content_part.added",
    "response.completed",
    "response.incomplete",
    "response.failed",
    "error",
]
ITEM_ID = st.sampled_from(["fc_1", "fc_2", "msg_1"])
ITEM = shaped(
    {
        "type": st.sampled_from(["function_call", "message", "reasoning"]),
        "id": ITEM_ID,
        "call_id": st.sampled_from(["", "call_1"]),
        "name": st.sampled_from(["", "get"]),
        "arguments": TEXT,
        "summary": st.lists(shaped({"type": st.just("summary_text"), "text": TEXT}), max_size=2),
        "content": st.lists(
            shaped(
                {
                    "type": st.sampled_from(["output_text", "refusal", "reasoning_text"]),
                    "text": TEXT,
                    "refusal": TEXT,
                }
            ),
            max_size=2,
        ),
    }
)
RESPONSE = shaped(
    {
        "id": st.sampled_from(["", "resp_1"]),
        "object": st.sampled_from(["response", "error"]),
        "model": st.just("m"),
        "status": st.sampled_from(["completed", "incomplete", "failed", "in_progress"]),
        "usage": shaped(
            {
                "input_tokens": TOKENS,
                "output_tokens": TOKENS,
                "output_tokens_details": shaped({"reasoning_tokens": TOKENS}),
                "input_tokens_details": shaped({"cached_tokens": TOKENS}),
            }
        ),
        "incomplete_details": shaped({"reason": st.sampled_from(["max_output_tokens", "content_filter"])}),
        "error": ERROR,
        "output": st.lists(ITEM, max_size=3),
    }
)


@st.composite
def responses_event(draw: st.DrawFn) -> tuple[str, bytes]:
    """``(type, payload)`` of one Responses stream event (the type also goes on its ``event:`` line)."""
    kind = draw(st.sampled_from(RESPONSE_TYPES))
    obj = draw(
        shaped(
            {
                "delta": TEXT,
                "item_id": ITEM_ID,
                "arguments": TEXT,
                "name": st.just("get"),
                "item": ITEM,
                "response": RESPONSE,
                "message": TEXT,
                "code": TEXT,
                "error": ERROR,
            }
        )
    )
    if draw(st.integers(0, 9)):
        obj["type"] = kind
    payload = draw(st.one_of(st.just(_dumps(obj)), st.just(_dumps(obj)), st.just(b"[DONE]"), st.binary(max_size=8)))
    return kind, payload


# --- SSE framing --------------------------------------------------------------------------------

EOL = st.sampled_from([b"\n", b"\n", b"\r\n", b"\r"])


@st.composite
def sse_stream(draw: st.DrawFn, events: list[tuple[str | None, bytes]]) -> bytes:
    """``events`` (name or None, payload) framed as SSE, with what servers and proxies add: CR/LF
    variants, comments, ``id``/``retry`` fields, payloads split over several ``data:`` lines, a
    BOM, stray garbage lines, no space after the colon, and maybe no final blank line."""
    out: list[bytes] = []
    if draw(st.integers(0, 9)) == 0:
        out.append(b"\xef\xbb\xbf")
    for name, payload in events:
        lines: list[bytes] = []
        if draw(st.integers(0, 5)) == 0:
            lines.append(b":" + draw(st.sampled_from([b"", b" keep-alive", b"ping"])))
        if name is not None:
            lines.append(b"event: " + name.encode())
        if draw(st.integers(0, 9)) == 0:
            lines.append(draw(st.sampled_from([b"id: 7", b"id", b"retry: 1500", b"retry: x", b"foo: bar"])))
        body = payload.replace(b"\r", b"").replace(b"\n", b"")
        if b"\n" in payload or draw(st.integers(0, 9)) == 0:
            for part in (body[: len(body) // 2], body[len(body) // 2 :]):
                lines.append(b"data:" + part)
        else:
            lines.append(draw(st.sampled_from([b"data: ", b"data: ", b"data:"])) + body)
        if draw(st.integers(0, 15)) == 0:
            lines.append(draw(st.binary(max_size=10)))
        for line in lines:
            out.append(line + draw(EOL))
        out.append(draw(EOL))  # the blank line that dispatches the event
    if out and draw(st.integers(0, 5)) == 0:
        out[-1] = b""  # the server omitted the last blank line
    return b"".join(out)


@st.composite
def chat_sse(draw: st.DrawFn) -> bytes:
    """A chat/completions stream: unnamed events, now and then an ``event: error`` one."""
    payloads = draw(st.lists(CHAT_PAYLOAD, max_size=14))
    events: list[tuple[str | None, bytes]] = [("error" if draw(st.integers(0, 12)) == 0 else None, p) for p in payloads]
    return draw(sse_stream(events))


@st.composite
def responses_sse(draw: st.DrawFn, named: bool) -> bytes:
    """A Responses stream, every event named (OpenAI, vLLM) or none (the JSON's type alone)."""
    evs = draw(st.lists(responses_event(), max_size=14))
    return draw(sse_stream([(kind if named else None, payload) for kind, payload in evs]))


@st.composite
def splits(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """``data`` cut at random points (empty reads included)."""
    if not data:
        return [data]
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    return pieces


def one_byte_reads(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


# --- TOML ---------------------------------------------------------------------------------------


def toml_str(s: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    out = ['"']
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def toml_key(k: str) -> str:
    bare = k and all(c.isascii() and (c.isalnum() or c in "_-") for c in k)
    return k if bare else toml_str(k)


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return toml_str(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def to_toml(doc: dict[str, Any]) -> str:
    """A TOML document for ``doc``: root keys, then a ``[table]`` per table and a ``[[table]]`` per
    table of an array of tables (sub-tables inline), the way people write scenario files."""
    head: list[str] = []
    tail: list[str] = []
    for k, v in doc.items():
        if isinstance(v, dict):
            tail.append(f"\n[{toml_key(k)}]")
            tail += [f"{toml_key(kk)} = {toml_value(vv)}" for kk, vv in v.items()]
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for item in v:
                tail.append(f"\n[[{toml_key(k)}]]")
                tail += [f"{toml_key(kk)} = {toml_value(vv)}" for kk, vv in item.items()]
        else:
            head.append(f"{toml_key(k)} = {toml_value(v)}")
    return "\n".join(head + tail) + "\n"


TOML_SCALAR = st.one_of(
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-3, 300),
    st.floats(),
    st.text(max_size=10),
)
TOML_ANY = st.recursive(
    TOML_SCALAR,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8,
)


def toml_table(fields: dict[str, st.SearchStrategy[Any]], keep: int = 3) -> st.SearchStrategy[dict[str, Any]]:
    """A table with a random subset of ``fields`` (each kept with chance 1/``keep``), now and then a
    wrong-typed value or an unknown key: mostly valid, so the parser gets past its first check."""

    @st.composite
    def table(draw: st.DrawFn) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in fields.items():
            if draw(st.integers(1, keep)) == 1:
                out[key] = draw(TOML_ANY) if draw(st.integers(0, 15)) == 0 else draw(value)
        if draw(st.integers(0, 19)) == 0:
            out[draw(st.text(max_size=6))] = draw(TOML_ANY)
        return out

    return table()
