"""The fast path of ``ChunkAccumulator.finish``: template chunks decoded by their text alone,
blocks of them with a few C-level operations (see ``loadgen.parse.stream``'s docstring). It must give
exactly what the full decode (``_Builder``) gives; ``tests/unit/test_stream_fastpath.py`` checks that.
Pure."""

from __future__ import annotations

from itertools import repeat
from operator import itemgetter
from typing import Any

import orjson

from loadgen.parse.stream.builder import _DONE, _Builder
from loadgen.parse.stream.result import KIND_REASONING, KIND_TEXT

_QUOTE = 34
_BACKSLASH = 92
# Templates are derived from plain text chunks; stop trying when a stream's chunks never repeat
# the template's bytes (e.g. a server that stamps each chunk), so derivation cannot cost per chunk.
_MAX_TEMPLATE_MISSES = 8
# Blocks of template chunks shorter than this are not worth the bulk path's fixed cost.
_BULK_MIN = 8
_RUN_END_LOOKBACK = 8


def _plain_text(obj: dict[str, Any], with_usage: bool = False) -> tuple[str, str] | None:
    """``(key, text)`` when ``obj`` is a plain output chunk: one choice (index 0) with exactly one
    non-empty text field, and no finish_reason, tool calls or error; no usage, or (``with_usage``)
    a usage object."""
    usage = obj.get("usage")
    if usage is not None and not (with_usage and isinstance(usage, dict)):
        return None
    if obj.get("error") is not None or obj.get("object") == "error":
        return None
    choices = obj.get("choices")
    if not isinstance(choices, list) or len(choices) != 1:
        return None
    ch = choices[0]
    if not isinstance(ch, dict) or ch.get("index", 0) != 0 or ch.get("finish_reason") is not None:
        return None
    # The same reading as _Builder.obj: a delta (or message) wins over a completions "text".
    delta = ch.get("delta")
    if delta is None:
        delta = ch.get("message")
    if delta is None:
        t = ch.get("text")
        return ("text", t) if isinstance(t, str) and t else None
    if not isinstance(delta, dict) or delta.get("tool_calls"):
        return None
    found: tuple[str, str] | None = None
    for key in ("content", "reasoning_content", "reasoning"):
        v = delta.get(key)
        if isinstance(v, str) and v:
            if found is not None:
                return None
            found = (key, v)
    return found


_PROBE = "q"


_PROBE_USAGE = b'{"completion_tokens":7}'


def _template(payload: bytes, obj: dict[str, Any]) -> tuple[bytes, bytes, str, bool] | None:
    """``(prefix, suffix, key, with_usage)``: the raw bytes around the text of a plain chunk.

    Without usage the payload is prefix + text + suffix. With a usage object in every chunk (vLLM
    ``continuous_usage_stats``) it must be the last member: the payload is prefix + text + suffix
    + usage + ``}``, the suffix ending in ``"usage":``. The text's raw occurrence must be unique,
    and a probe object built from the parts must decode to the same plain shape with the probe's
    text (and usage), which proves the bytes found are those fields and not equal bytes elsewhere.
    """
    usage = obj.get("usage")
    with_usage = isinstance(usage, dict)
    plain = _plain_text(obj, with_usage)
    if plain is None:
        return None
    key, text = plain
    if '"' in text or "\\" in text:
        return None
    raw = text.encode()
    for sep in (b'":"', b'": "'):
        pattern = b'"' + key.encode() + sep + raw + b'"'
        at = payload.find(pattern)
        if at < 0:
            continue
        if payload.find(pattern, at + 1) >= 0:
            return None
        start = at + len(pattern) - len(raw) - 1
        pre, suf = payload[:start], payload[start + len(raw) :]
        probe_text = _PROBE.encode()
        try:
            if with_usage:
                k = suf.rfind(b'"usage":')
                if k < 0 or suf[-1:] != b"}" or orjson.loads(suf[k + 8 : -1]) != usage:
                    return None
                suf = suf[: k + 8]
                probe = orjson.loads(pre + probe_text + suf + _PROBE_USAGE + b"}")
            else:
                probe = orjson.loads(pre + probe_text + suf)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(probe, dict) or _plain_text(probe, with_usage) != (key, _PROBE):
            return None
        if with_usage and probe.get("usage") != orjson.loads(_PROBE_USAGE):
            return None
        return pre, suf, key, with_usage
    return None


class _Pass:
    """The decode of one stream's payloads, in order, possibly over several ``run`` calls.

    Paths, cheapest first: a block of consecutive template chunks is checked and decoded with a
    handful of C-level operations over the whole block (``block``); a single template chunk has
    only its text decoded (``one``); with usage in every chunk, the text and the usage object are
    decoded on their own (``one``, ``with_usage``); anything else is decoded in full by the
    ``_Builder``. Plain template chunks carry no usage (the chunk the template came from had
    none), so they never disturb per-chunk token counts. They are all of the template's kind
    (``kind``), and never the first of it: the template's own chunk came first, through the
    ``_Builder``, which set ``first_*_ns``.
    """

    __slots__ = (
        "b",
        "bulk",
        "fast_reasoning_chars",
        "fast_reasoning_chunks",
        "have",
        "hits",
        "kind",
        "lp",
        "ls",
        "misses",
        "n_done",
        "next_bulk",
        "payloads",
        "pre",
        "reasoning",
        "suf",
        "times",
        "with_usage",
    )

    def __init__(self) -> None:
        self.b = _Builder(0)
        self.payloads: list[bytes] = []
        self.times: list[int] = []
        self.have = False
        self.with_usage = False
        self.bulk = False
        self.pre = self.suf = b""
        self.lp = self.ls = 0
        self.reasoning = False
        self.kind = KIND_TEXT
        self.hits = 0
        self.misses = 0
        self.n_done = 0
        self.next_bulk = 0
        self.fast_reasoning_chunks = 0
        self.fast_reasoning_chars = 0

    def run(self, payloads: list[bytes], times: list[int]) -> None:
        """Decode the next payloads of the stream (in order; may be called for successive parts)."""
        self.payloads = payloads
        self.times = times
        self.next_bulk = 0
        n = len(payloads)
        i = 0
        while i < n:
            if self.bulk and i >= self.next_bulk and n - i >= _BULK_MIN:
                p = payloads[i]
                if p.startswith(self.pre) and p.endswith(self.suf):
                    k = self.bulk_run(i, self.run_end(i))
                    if k > i:
                        i = k
                        continue
                    self.next_bulk = i + _BULK_MIN  # no progress: do not retry at every chunk
            self.one(payloads[i], self.times[i])
            i += 1
        self.payloads = []  # do not keep a compacted part alive
        self.times = []

    def run_end(self, i: int) -> int:
        """End of the template run starting at i: the last few payloads (finish, usage, [DONE])
        are usually not template chunks, so look back from the end a few steps."""
        payloads = self.payloads
        pre, suf = self.pre, self.suf
        j = len(payloads)
        for _ in range(_RUN_END_LOOKBACK):
            if j <= i:
                break
            p = payloads[j - 1]
            if p.startswith(pre) and p.endswith(suf):
                return j
            j -= 1
        return len(payloads) if j > i else i

    def bulk_run(self, i: int, end: int) -> int:
        """Decode [i, end) in as few blocks as possible; returns the first index not decoded."""
        size = end - i
        while i < end and size >= _BULK_MIN:
            if self.block(i, i + size):
                i += size
                size = end - i
            else:
                size //= 2
        return i

    def block(self, lo: int, hi: int) -> bool:
        """Decode payloads[lo:hi] if every one is a template chunk whose text decodes; else False
        and nothing recorded. Exact: each payload starts with the prefix, ends with the suffix and
        has a non-empty text between them (so the two do not overlap), and every text is one JSON
        string (``_decode_strings``).
        """
        chunk = self.payloads[lo:hi]
        pre, suf = self.pre, self.suf
        mids: list[bytes] = list(map(itemgetter(slice(self.lp, -self.ls)), chunk))
        if not all(mids):
            return False
        if not all(map(bytes.startswith, chunk, repeat(pre))) or not all(map(bytes.endswith, chunk, repeat(suf))):
            return False
        strs = _decode_strings(mids)
        if strs is None:
            return False
        text = "".join(strs)
        chars = list(map(len, strs))
        b = self.b
        b.times += self.times[lo:hi]
        b.chars += chars
        b.kinds += [self.kind] * len(chars)
        if self.reasoning:
            self.fast_reasoning_chunks += len(chars)
            self.fast_reasoning_chars += len(text)
        else:
            b.text.append(text)
        self.hits += len(chars)
        return True

    def one(self, payload: bytes, t_ns: int) -> None:
        if self.with_usage:
            # prefix + text + suffix + usage + "}": the first suffix after the prefix ends the
            # text (an earlier false match leaves a text ending in a lone backslash, refused).
            lp = self.lp
            if payload.startswith(self.pre) and payload[-1:] == b"}":
                q = payload.find(self.suf, lp)
                if q > lp:
                    try:
                        text: Any = orjson.loads(b'"' + payload[lp:q] + b'"')
                        usage: Any = orjson.loads(payload[q + self.ls : -1])
                    except orjson.JSONDecodeError:
                        text = usage = None
                    if text and type(usage) is dict:
                        self.hits += 1
                        self.b.text_with_usage(t_ns, text, self.reasoning, usage)
                        return
        elif self.have:
            n = len(payload)
            lp, ls = self.lp, self.ls
            if n > lp + ls and payload.startswith(self.pre) and payload.endswith(self.suf):
                # The text decoded on its own, by the same decoder as everything else (so control
                # characters, bad escapes and bad UTF-8 are refused exactly as in a full decode); it
                # fails unless the bytes between prefix and suffix are exactly one JSON string.
                try:
                    s: Any = orjson.loads(b'"' + payload[lp : n - ls] + b'"')
                except orjson.JSONDecodeError:
                    s = None
                if s:
                    self.hits += 1
                    b = self.b
                    b.times.append(t_ns)
                    b.chars.append(len(s))
                    b.kinds.append(self.kind)
                    if self.reasoning:
                        self.fast_reasoning_chunks += 1
                        self.fast_reasoning_chars += len(s)
                    else:
                        b.text.append(s)
                    return
        if payload == _DONE:
            self.n_done += 1
            self.b.res.done = True
            return
        obj = self.b.payload(payload, t_ns)
        if obj is not None and self.misses < _MAX_TEMPLATE_MISSES:
            tpl = _template(payload, obj)
            if tpl is not None:
                if self.have and not self.hits:
                    self.misses += 1
                pre, suf, key, with_usage = tpl
                self.pre, self.suf = pre, suf
                self.lp, self.ls = len(pre), len(suf)
                self.have = not with_usage
                self.with_usage = with_usage
                self.bulk = not with_usage
                self.next_bulk = 0
                self.hits = 0
                self.reasoning = key in ("reasoning_content", "reasoning")
                self.kind = KIND_REASONING if self.reasoning else KIND_TEXT


def _decode_strings(mids: list[bytes]) -> list[str] | None:
    """Decode JSON string bodies (escapes allowed) in one orjson call; None if any is not one.

    They are decoded as one JSON array, which is exact when every quote inside a body is escaped
    and no body ends in an unpaired backslash: then each body is delimited by our own quotes and
    orjson checks its escapes, control characters and UTF-8. Both conditions are checked on the
    bodies framed by NULs, with escaped backslashes and then escaped quotes removed (a body that
    fails them is not one JSON string; the caller then decodes payload by payload).
    """
    framed = b"\0".join(mids) + b"\0"
    if _BACKSLASH in framed:
        framed = framed.replace(b"\\\\", b"").replace(b'\\"', b"")
        if b"\\\0" in framed:
            return None
    if _QUOTE in framed:
        return None
    try:
        strs = orjson.loads(b'["' + b'","'.join(mids) + b'"]')
    except orjson.JSONDecodeError:
        return None
    if not isinstance(strs, list) or len(strs) != len(mids):
        return None
    return strs
