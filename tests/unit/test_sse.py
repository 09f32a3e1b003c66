"""SSEDecoder: every edge case fed whole, split at every byte position, and one byte at a time.

The expected results are written out by hand for the edge cases, and for generated streams they come
from ``reference_decode`` below: a deliberately naive, character-at-a-time reading of the WHATWG
event-stream rules (plus our documented flush of an unterminated last event), written independently
of the decoder's bulk paths.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

import pytest

from loadgen.parse.sse import SSEDecoder


@dataclass
class Decoded:
    payloads: list[bytes]
    named: list[tuple[str, bytes]] = field(default_factory=list)
    comments: int = 0
    last_event_id: str | None = None
    retry_ms: int | None = None


def run(pieces: list[bytes]) -> Decoded:
    dec = SSEDecoder()
    out: list[bytes] = []
    for piece in pieces:
        out += dec.feed(piece)
    out += dec.flush()
    return Decoded(out, dec.named, dec.comments, dec.last_event_id, dec.retry_ms)


def splits(stream: bytes) -> list[list[bytes]]:
    """The stream whole, cut in two at every position, and one byte at a time."""
    ways = [[stream], [bytes([b]) for b in stream]]
    ways += [[stream[:i], stream[i:]] for i in range(len(stream) + 1)]
    return ways


def assert_all_splits(stream: bytes, expected: Decoded) -> None:
    for pieces in splits(stream):
        got = run(pieces)
        assert got == expected, f"split {[len(p) for p in pieces][:8]}...: {got} != {expected}"


def reference_decode(stream: bytes) -> Decoded:
    """Naive spec reading: normalise line ends char by char, then interpret line by line."""
    if stream.startswith(b"\xef\xbb\xbf"):
        stream = stream[3:]
    lines: list[bytes] = []
    cur = bytearray()
    i = 0
    while i < len(stream):
        c = stream[i : i + 1]
        if c == b"\r":
            lines.append(bytes(cur))
            cur = bytearray()
            if stream[i + 1 : i + 2] == b"\n":
                i += 1
        elif c == b"\n":
            lines.append(bytes(cur))
            cur = bytearray()
        else:
            cur += c
        i += 1
    # Our documented choice: at end of stream a partial line counts as a line and a pending event
    # is dispatched, as if "\n\n" had arrived.
    if cur:
        lines.append(bytes(cur))
    lines.append(b"")
    res = Decoded([])
    data: bytes | None = None
    event = b""
    for line in lines:
        if line == b"":
            if data is not None:
                if event in (b"", b"message"):
                    res.payloads.append(data)
                else:
                    res.named.append((event.decode(), data))
            data = None
            event = b""
        elif line.startswith(b":"):
            res.comments += 1
        else:
            name, sep, value = line.partition(b":")
            if sep and value.startswith(b" "):
                value = value[1:]
            if name == b"data":
                data = value if data is None else data + b"\n" + value
            elif name == b"event":
                event = value
            elif name == b"id" and b"\0" not in value:
                res.last_event_id = value.decode()
            elif name == b"retry" and value.isdigit():
                res.retry_ms = int(value)
    return res


CASES: dict[str, tuple[bytes, Decoded]] = {
    "plain LF": (b'data: a\n\ndata: {"x": 1}\n\n', Decoded([b"a", b'{"x": 1}'])),
    "CRLF": (b"data: a\r\n\r\ndata: b\r\n\r\n", Decoded([b"a", b"b"])),
    "lone CR": (b"data: a\r\rdata: b\r\r", Decoded([b"a", b"b"])),
    "mixed line ends": (b"data: a\r\n\ndata: b\r\rdata: c\n\r\n", Decoded([b"a", b"b", b"c"])),
    "no space after colon": (b"data:a\n\ndata:  two spaces\n\n", Decoded([b"a", b" two spaces"])),
    "multi-line data": (b"data: a\ndata: b\ndata:\n\n", Decoded([b"a\nb\n"])),
    "empty data": (b"data:\n\ndata: \n\n", Decoded([b"", b""])),
    "field without colon": (b"data\n\n", Decoded([b""])),
    "comments": (
        b": keep-alive\n\n:\ndata: a\n: inside\n\n: ping\r\n\r\n",
        Decoded([b"a"], comments=4),
    ),
    "named events": (
        b'event: error\ndata: {"message": "boom"}\n\nevent: message\ndata: m\n\nevent:\ndata: e\n\n',
        Decoded([b"m", b"e"], named=[("error", b'{"message": "boom"}')]),
    ),
    "event name resets": (b"event: ping\ndata: p\n\ndata: after\n\n", Decoded([b"after"], named=[("ping", b"p")])),
    "event without data dispatches nothing": (b"event: error\n\ndata: a\n\n", Decoded([b"a"])),
    "id and retry": (
        b"id: 42\nretry: 1500\ndata: a\n\nid: bad\0id\nretry: 1.5\ndata: b\n\n",
        Decoded([b"a", b"b"], last_event_id="42", retry_ms=1500),
    ),
    "unknown fields ignored": (b"foo: bar\ndata: a\nbaz\n\n", Decoded([b"a"])),
    "BOM at start": (b"\xef\xbb\xbfdata: a\n\n", Decoded([b"a"])),
    "BOM only once": (b"\xef\xbb\xbfdata: a\n\n\xef\xbb\xbfdata: b\n\n", Decoded([b"a"])),
    "blank lines between events": (b"\n\n\ndata: a\n\n\n\ndata: b\n\n", Decoded([b"a", b"b"])),
    "unterminated last event (no blank line)": (b"data: a\n\ndata: [DONE]\n", Decoded([b"a", b"[DONE]"])),
    "unterminated last line": (b'data: a\n\ndata: {"trunc', Decoded([b"a", b'{"trunc'])),
    "trailing CR at end": (b"data: a\r", Decoded([b"a"])),
    "data: inside payload": (b"data: x data: y\n\n", Decoded([b"x data: y"])),
    "empty stream": (b"", Decoded([])),
    "only comments": (b": a\n: b\n", Decoded([], comments=2)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_edge_case_every_split(name: str) -> None:
    stream, expected = CASES[name]
    assert reference_decode(stream) == expected  # the reference agrees with the hand-written truth
    assert_all_splits(stream, expected)


@pytest.mark.parametrize("name", [n for n in CASES if "BOM" not in n])
def test_edge_case_after_a_clean_event(name: str) -> None:
    """Same cases once the decoder sits at a clean boundary, where the bulk fast paths apply."""
    stream, expected = CASES[name]
    warm = b"data: warm\n\n"
    want = Decoded(
        [b"warm", *expected.payloads], expected.named, expected.comments, expected.last_event_id, expected.retry_ms
    )
    for pieces in splits(stream):
        assert run([warm, *pieces]) == want


def test_feed_returns_events_as_soon_as_complete() -> None:
    dec = SSEDecoder()
    assert dec.feed(b"data: a\n") == []
    assert dec.feed(b"\n") == [b"a"]
    assert dec.feed(b"data: b\n\ndata: c\n\ndata: d") == [b"b", b"c"]
    assert dec.feed(b"\r") == []  # the line ended, the event did not
    assert dec.feed(b"\n") == []  # the LF of the CRLF, not a blank line
    assert dec.feed(b"\r\n") == [b"d"]
    assert dec.flush() == []


def test_split_crlf_is_one_line_end() -> None:
    dec = SSEDecoder()
    assert dec.feed(b"data: a\r") == []
    assert dec.feed(b"\n") == []
    assert dec.feed(b"data: b\r\n\r\n") == [b"a\nb"]


def test_flush_is_idempotent_and_resets() -> None:
    dec = SSEDecoder()
    assert dec.feed(b"data: a") == []
    assert dec.flush() == [b"a"]
    assert dec.flush() == []


def test_large_event_fed_byte_by_byte_is_linear() -> None:
    payload = b"x" * 200_000
    dec = SSEDecoder()
    out: list[bytes] = []
    for i in range(0, len(payload), 7):
        out += dec.feed(b"data: " + payload[i : i + 7] if i == 0 else payload[i : i + 7])
    out += dec.feed(b"\n\n")
    assert out == [payload]


def _random_stream(rng: random.Random) -> bytes:
    ends = [b"\n", b"\r\n", b"\r"]
    end = rng.choice(ends) if rng.random() < 0.3 else b"\n"
    parts: list[bytes] = []
    if rng.random() < 0.1:
        parts.append(b"\xef\xbb\xbf")
    for _ in range(rng.randint(0, 12)):
        kind = rng.random()
        e = rng.choice(ends) if rng.random() < 0.1 else end
        if kind < 0.6:
            text = rng.choice(["a", "é", "\\n", " 東京", ""])
            body = '{"choices":[{"delta":{"content":"' + text + '"}}]}'
            parts.append(b"data:" + (b" " if rng.random() < 0.8 else b"") + body.encode() + e + e)
        elif kind < 0.7:
            parts.append(b": keep-alive" + e + (e if rng.random() < 0.5 else b""))
        elif kind < 0.8:
            parts.append(b"event: error" + e + b'data: {"error": {"message": "x"}}' + e + e)
        elif kind < 0.9:
            parts.append(b"id: 7" + e + b"data: one" + e + b"data: two" + e + e)
        else:
            parts.append(e)
    if rng.random() < 0.2:
        parts.append(b"data: [DONE]")  # unterminated
    else:
        parts.append(b"data: [DONE]" + end + end)
    return b"".join(parts)


def test_random_streams_random_splits_match_reference() -> None:
    rng = random.Random(20261129)
    for _ in range(300):
        stream = _random_stream(rng)
        expected = reference_decode(stream)
        assert run([stream]) == expected
        assert run([bytes([b]) for b in stream]) == expected
        for _ in range(5):
            cuts = sorted(rng.sample(range(len(stream) + 1), min(len(stream) + 1, rng.randint(1, 12))))
            pieces = [stream[a:b] for a, b in itertools.pairwise([0, *cuts, len(stream)])]
            assert run(pieces) == expected, (stream, cuts)


def test_fast_path_not_taken_for_multiline_events_in_one_read() -> None:
    # Several events in one clean read, one of them with two data lines: bulk split must not apply.
    stream = b"data: a\n\ndata: b1\ndata: b2\n\ndata: c\n\n"
    dec = SSEDecoder()
    dec.feed(b"data: warm\n\n")
    assert dec.feed(stream) == [b"a", b"b1\nb2", b"c"]
    stream = b"data: a\n\nevent: error\ndata: e\n\ndata: c\n\n"
    assert dec.feed(stream) == [b"a", b"c"]
    assert dec.named == [("error", b"e")]
