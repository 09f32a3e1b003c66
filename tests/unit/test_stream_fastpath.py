"""The fast path of ``ChunkAccumulator.finish`` (``loadgen/parse/stream/fastpath.py``) against the full
decode: template chunks, blocks of them and usage in every chunk must give exactly what decoding
each payload alone with orjson gives, and fall back wherever the bytes are not what they seem."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest
from test_stream import TEXTS, chat_stream, check, feed

from loadgen.parse.stream import KIND_REASONING, KIND_TEXT, KIND_TOOL, ChunkAccumulator, StreamResult
from loadgen.parse.stream.fastpath import _decode_strings


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"reasoning": 12},
        {"reasoning": 12, "mixed": True, "tools": 2},
        {"reasoning": 9, "tools": 3, "sglang": True},
        {"reasoning": 10, "mixed": True, "tools": 1, "continuous": True},
    ],
)
def test_template_path_equals_full_decoding(kwargs: dict[str, Any]) -> None:
    """The same chunks, once able to use the template path and once with a per-chunk stamp that
    forces full decoding, give identical results apart from ids: kinds, first times and tool
    calls included."""
    for seed in range(40):
        a = chat_stream(random.Random(seed), n=30, **kwargs)
        b = chat_stream(random.Random(seed), n=30, stamp=True, **kwargs)
        cuts = sorted(random.Random(seed).sample(range(1, len(a.stream)), 10))
        ra, _ = feed(a.stream, cuts)
        rb, _ = feed(b.stream, cuts)
        assert ra == rb
        if kwargs.get("reasoning"):
            assert ra.chunk_kinds[0] == KIND_REASONING and ra.first_text_ns is not None


def test_template_is_not_fooled_by_an_equal_string_elsewhere() -> None:
    # The delta's text is written escaped (\u0061 = "a") while another field holds a raw "a":
    # the raw occurrence must not become the template.
    head = b'{"id":"x","choices":[{"index":0,"delta":{"content":"\\u0061"},"finish_reason":null}],'
    payloads = [head + b'"extra":{"content":"a"}}', head + b'"extra":{"content":"zzz"}}']
    acc = ChunkAccumulator()
    for i, p in enumerate(payloads):
        acc.add(p, i)
    res = acc.finish(5)
    assert res.text == "aa"
    assert res.chunk_chars == [1, 1]


def test_template_mid_that_is_not_one_string_falls_back() -> None:
    pre = b'{"id":"x","choices":[{"index":0,"delta":{"content":"'
    suf = b'"},"finish_reason":null}]}'
    acc = ChunkAccumulator()
    acc.add(pre + b"first" + suf, 1)
    acc.add(pre + b'a","role":"assistant' + suf, 2)  # same prefix/suffix, two fields in between
    acc.add(pre + b"bad \\q escape" + suf, 3)  # invalid JSON
    acc.add(pre + b"\xff\xfe" + suf, 4)  # invalid UTF-8
    acc.add(pre + b'say \\"hi\\"' + suf, 5)  # escaped quotes: decoded exactly
    res = acc.finish(6)
    assert res.text == 'firstasay "hi"'
    assert res.chunk_times_ns == [1, 2, 5]
    assert res.malformed == 2


def _in_one_stream(payloads: list[bytes]) -> StreamResult:
    """The payloads through one accumulator (where the template path runs), each at its index as its time."""
    acc = ChunkAccumulator()
    for i, p in enumerate(payloads):
        acc.add(p, i)
    return acc.finish(0)


def _one_by_one(payloads: list[bytes]) -> StreamResult:
    """Reference: every payload decoded on its own (a one-payload stream never uses a template),
    then the per-payload results concatenated in order."""
    total = StreamResult()
    for i, p in enumerate(payloads):
        acc = ChunkAccumulator()
        acc.add(p, i)
        r = acc.finish(0)
        total.chunk_times_ns += r.chunk_times_ns
        total.chunk_chars += r.chunk_chars
        total.chunk_kinds += r.chunk_kinds
        total.first_reasoning_ns = _first(total.first_reasoning_ns, r.first_reasoning_ns)
        total.first_text_ns = _first(total.first_text_ns, r.first_text_ns)
        total.first_tool_ns = _first(total.first_tool_ns, r.first_tool_ns)
        total.first_tool_arguments_ns = _first(total.first_tool_arguments_ns, r.first_tool_arguments_ns)
        total.text += r.text
        total.malformed += r.malformed
        total.reasoning_chunks += r.reasoning_chunks
        total.reasoning_text_chars += r.reasoning_text_chars
        total.done = total.done or r.done
        total.finish_reason = r.finish_reason or total.finish_reason
        total.error = total.error or r.error
    return total


def _first(a: int | None, b: int | None) -> int | None:
    return b if a is None else a


def _same_kinds(got: StreamResult, want: StreamResult, times: list[int] | None = None) -> None:
    """Kinds and first times as ``_one_by_one`` gives them (its times are payload indices: ``times``
    maps them to the times the payloads were fed with)."""
    assert got.chunk_kinds == want.chunk_kinds
    assert len(got.chunk_kinds) == len(got.chunk_times_ns)
    firsts = [want.first_reasoning_ns, want.first_text_ns, want.first_tool_ns, want.first_tool_arguments_ns]
    if times is not None:
        firsts = [None if i is None else times[i] for i in firsts]
    assert [got.first_reasoning_ns, got.first_text_ns, got.first_tool_ns, got.first_tool_arguments_ns] == firsts


_PRE = (
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"'
)
_SUF = b'"},"logprobs":null,"finish_reason":null}]}'
_ODD_MIDS = [
    b"\xff\xfe",  # invalid UTF-8
    b"\xc3",  # half a character
    b"tab\there",  # raw control character (invalid JSON, accepted by slicing)
    b"bad \\q escape",  # invalid escape
    b'a","role":"assistant',  # two fields where the text was
    b"ends in one backslash \\",  # escapes the closing quote: not one string
    b"",  # empty text
    b"x\ny",  # a line feed (multi-line SSE data)
    b'\\"',  # escaped quote only
    b"\\\\",  # one escaped backslash at the end
    b"\\u00e9\\n",  # escapes only
]


@pytest.mark.parametrize("seed", range(12))
def test_long_runs_equal_one_by_one_decoding(seed: int) -> None:
    """Long runs of template chunks (the bulk path) with odd and foreign payloads mixed in decode
    exactly as each payload does alone."""
    rng = random.Random(seed)
    payloads = [orjson.dumps({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"role": "assistant"}}]})]
    for _ in range(rng.randint(20, 300)):
        r = rng.random()
        if r < 0.03:
            payloads.append(_PRE + rng.choice(_ODD_MIDS) + _SUF)
        elif r < 0.04:
            payloads.append(b'{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}')
        elif r < 0.05:
            payloads.append(b"not json")
        elif r < 0.08:
            # Foreign payloads as long as a template chunk: another stamp, a finish, usage, error.
            raw = orjson.dumps(rng.choice(TEXTS))[1:-1]
            payloads.append(
                rng.choice(
                    [
                        _PRE.replace(b'"created":1', b'"created":2') + raw + _SUF,
                        _PRE.replace(b'"index":0', b'"index":1') + raw + _SUF,
                        _PRE + raw + _SUF.replace(b'"finish_reason":null', b'"finish_reason":"st"'),
                        _PRE + raw + _SUF.replace(b'"finish_reason":null', b'"finish_reason":"length"'),
                        _PRE + raw + _SUF[:-1] + b',"usage":{"prompt_tokens":1,"completion_tokens":2}}',
                        b'{"error":{"message":"' + b"x" * 150 + b'","type":"InternalServerError","code":500}}',
                    ]
                )
            )
        else:
            text = rng.choice([*TEXTS, "\\", '"', 'x\\"', "\\\\n"])
            payloads.append(_PRE + orjson.dumps(text)[1:-1] + _SUF)
    payloads.append(b"[DONE]")
    got = _in_one_stream(payloads)
    want = _one_by_one(payloads)
    assert got.chunk_times_ns == want.chunk_times_ns
    assert got.chunk_chars == want.chunk_chars
    _same_kinds(got, want)
    assert got.text == want.text
    assert got.malformed == want.malformed
    assert got.done
    assert got.finish_reason == want.finish_reason
    assert got.error == want.error


def test_reasoning_runs_equal_one_by_one_decoding() -> None:
    pre = _PRE.replace(b'"content"', b'"reasoning_content"')
    payloads = [pre + orjson.dumps(t)[1:-1] + _SUF for t in TEXTS * 3]
    payloads += [_PRE + orjson.dumps(t)[1:-1] + _SUF for t in TEXTS * 3]
    acc = ChunkAccumulator()
    acc.add_all(payloads, 7)
    got = acc.finish(0)
    want = _one_by_one(payloads)
    assert got.reasoning_chunks == want.reasoning_chunks == len(TEXTS) * 3
    assert got.reasoning_text_chars == want.reasoning_text_chars
    assert got.text == want.text == "".join(TEXTS) * 3
    assert got.chunk_chars == want.chunk_chars
    assert got.chunk_kinds == [KIND_REASONING] * len(TEXTS) * 3 + [KIND_TEXT] * len(TEXTS) * 3
    _same_kinds(got, want, [7] * len(payloads))


_TOOL_HEAD = b'{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"tool_calls":[{"index":%d,"id":"call_%d",'
_TOOL_HEAD += b'"type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]}'
_TOOL_ARGS = b'{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"tool_calls":[{"index":%d,'
_TOOL_ARGS += b'"function":{"arguments":"%s"}}]},"finish_reason":null}]}'


@pytest.mark.parametrize("seed", range(8))
def test_reasoning_text_and_tool_runs_equal_one_by_one_decoding(seed: int) -> None:
    """Runs of reasoning and text template chunks (bulk and one by one, across compactions), a
    chunk that switches from reasoning to text, and parallel tool calls: kinds and first times
    as each payload alone gives them, calls put together per index."""
    rng = random.Random(seed)
    r_pre = _PRE.replace(b'"content"', rng.choice([b'"reasoning_content"', b'"reasoning"']))
    text = [orjson.dumps(t)[1:-1] for t in TEXTS]
    payloads = [r_pre + rng.choice(text) + _SUF for _ in range(rng.randint(1, 1500))]
    payloads.append(_PRE[:-1] + b'"x","reasoning_content":"y' + _SUF)  # both: kind text
    payloads += [_PRE + rng.choice(text) + _SUF for _ in range(rng.randint(0, 1500))]
    args = [b'{\\"city\\": ', b'\\"Paris\\"', b"}"]
    want_calls = []
    for j in range(rng.randint(0, 2)):
        payloads.append(_TOOL_HEAD % (j, j))
        payloads += [_TOOL_ARGS % (j, a) for a in args]
        want_calls.append((f"call_{j}", "get_weather", '{"city": "Paris"}'))
    payloads.append(b'{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}')
    payloads.append(b"[DONE]")
    acc = ChunkAccumulator()
    times = sorted(rng.randrange(10**6) for _ in payloads)
    for p, t in zip(payloads, times, strict=True):
        acc.add(p, t)
    got = acc.finish(10**7)
    want = _one_by_one(payloads)
    assert got.malformed == want.malformed == 0
    assert got.chunk_times_ns == [times[i] for i in want.chunk_times_ns]
    assert got.chunk_chars == want.chunk_chars
    _same_kinds(got, want, times)
    k = got.chunk_kinds
    assert k.count(KIND_TOOL) == 4 * len(want_calls) and got.tool_call_chunks == k.count(KIND_TOOL)
    assert [(c.call_id, c.name, c.arguments) for c in got.function_calls] == want_calls
    firsts = [got.first_reasoning_ns, got.first_text_ns, got.first_tool_ns, got.first_tool_arguments_ns]
    i_text = k.index(KIND_TEXT)
    assert firsts[:2] == [got.chunk_times_ns[0], got.chunk_times_ns[i_text]]
    if want_calls:
        assert firsts[2:] == [got.chunk_times_ns[k.index(KIND_TOOL)], got.chunk_times_ns[k.index(KIND_TOOL) + 1]]
    else:
        assert firsts[2:] == [None, None]
    assert got.reasoning_chunks == want.reasoning_chunks == i_text + 1


@pytest.mark.parametrize(
    "bodies",
    [
        [b"plain", b" \\u00e9", b"\\n\\n"],
        [b'say \\"hi\\"', b"ok", b'\\"'],
        [b"ends in an escaped backslash \\\\", b"next", b"\\\\"],
        [b'\\"', b"\\\\", b'x\\"\\\\'],
    ],
)
def test_decode_strings_bodies_with_quotes_and_backslashes(bodies: list[bytes]) -> None:
    want = [orjson.loads(b'"' + m + b'"') for m in bodies]
    assert _decode_strings(bodies) == want


@pytest.mark.parametrize(
    "bodies",
    [
        [b"a\\", b'","b'],  # a trailing escape swallowing the next quote
        [b'a","b', b"c"],  # a body that is two strings
        [b"tab\there"],  # raw control character
        [b"\\q"],  # bad escape
        [b"\xff"],  # bad UTF-8
        [b"ok", b'"'],  # a bare quote
        [b"x\\", b',"y', b"z"],  # decoded as one array these would give three wrong strings
        [b"ok", b"x\\", b',"y', b"z"],
        [b'x","y', b"z\\", b","],
    ],
)
def test_decode_strings_refuses_what_is_not_one_string_each(bodies: list[bytes]) -> None:
    assert _decode_strings(bodies) is None


@pytest.mark.parametrize("kwargs", [{}, {"continuous": True}, {"reasoning": 3000, "sglang": True}])
def test_very_long_stream_is_decoded_in_parts(kwargs: dict[str, Any]) -> None:
    """More payloads than one compaction holds: decoded in several passes, same truth."""
    rng = random.Random(5)
    t = chat_stream(rng, n=4500, **kwargs)
    check(t, [])
    cuts = sorted(rng.sample(range(1, len(t.stream)), 3000))
    check(t, cuts)
    res, _ = feed(t.stream, cuts)
    assert res.n_payloads == 4500 + 3  # role, chunks, finish, usage; [DONE] not counted


def _expected_tokens(payloads: list[bytes]) -> list[int] | None:
    """Reference for per-chunk tokens: cumulative usage deltas, tokens of chunks without output
    carried to the next output chunk (or the last one)."""
    tokens: list[int] = []
    pending = 0
    last = 0
    exact = True
    for p in payloads:
        try:
            obj = orjson.loads(p)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(obj, dict):
            continue
        one = ChunkAccumulator()
        one.add(p, 0)
        has_text = bool(one.finish(0).chunk_chars)
        usage = obj.get("usage")
        delta = None
        if isinstance(usage, dict) and type(usage.get("completion_tokens")) is int:
            delta = usage["completion_tokens"] - last
            last = usage["completion_tokens"]
            exact = exact and delta >= 0
        if has_text:
            if delta is None:
                exact = False
            tokens.append(pending + (delta or 0))
            pending = 0
        elif delta is not None:
            pending += delta
    if not exact or not tokens:
        return None
    tokens[-1] += pending
    return tokens


@pytest.mark.parametrize("seed", range(12))
def test_usage_in_every_chunk_equals_one_by_one_decoding(seed: int) -> None:
    """vLLM continuous_usage_stats: the usage-template path against full decoding, with odd
    payloads mixed in (usage not last, not an object, bad text, decreasing counts)."""
    rng = random.Random(seed)
    ct = 0
    head = _PRE.replace(b'"content"', rng.choice([b'"content"', b'"reasoning_content"']))
    payloads = [
        b'{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"role":"assistant"}}],'
        b'"usage":{"prompt_tokens":9,"completion_tokens":0,"total_tokens":9}}'
    ]
    for _ in range(rng.randint(20, 200)):
        ct += rng.choice([1, 1, 2, 3])
        usage = b'{"prompt_tokens":9,"completion_tokens":%d,"total_tokens":%d}' % (ct, ct + 9)
        raw = orjson.dumps(rng.choice([*TEXTS, "\\", '"']))[1:-1]
        r = rng.random()
        if r < 0.02:
            usage = b'"not an object"'
        elif r < 0.04:
            usage = b'{"prompt_tokens":9,"completion_tokens":%d}' % (ct - 5)
        elif r < 0.06:
            raw = rng.choice(_ODD_MIDS)
        elif r < 0.08:
            payloads.append(head + raw + _SUF[:-1] + b',"usage":' + usage + b',"x":1}')
            continue
        elif r < 0.1:
            payloads.append(b'{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":' + usage + b"}")
            continue
        payloads.append(head + raw + _SUF[:-1] + b',"usage":' + usage + b"}")
    got = _in_one_stream(payloads)
    want = _one_by_one(payloads)
    assert got.chunk_times_ns == want.chunk_times_ns
    assert got.chunk_chars == want.chunk_chars
    assert got.text == want.text
    assert got.reasoning_chunks == want.reasoning_chunks
    assert got.malformed == want.malformed
    assert got.chunk_tokens == _expected_tokens(payloads)
    if got.chunk_tokens is not None:
        assert sum(got.chunk_tokens) == got.completion_tokens
