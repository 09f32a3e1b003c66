"""OpenAI-compatible response chunks -> ``StreamResult``. Pure: no I/O, no gevent, no locust.

Streaming: the transport takes ``perf_counter_ns()`` when a read returns, feeds the bytes to an
``SSEDecoder`` and hands the payloads to ``ChunkAccumulator.add`` / ``add_all`` with that time.
Those only append to lists (and spot ``[DONE]``); all decoding waits for ``finish(end_ns)``, after
the stream, so the per-chunk path stays a few hundred ns and timing is not delayed by parsing.

``finish`` decodes each payload once, exactly as orjson would decode it alone (the tests check
this against one-payload-at-a-time decoding). The first text chunk of a request goes through
orjson; if it is a plain one (one choice, one non-empty text field, no finish_reason, no usage),
its raw bytes become a template: everything before and after the text string. Later chunks that
start and end with the very same bytes differ from it only in that string, so only the string is
decoded. A run of such chunks is checked and decoded as a block with a few C-level operations
(two joins and a compare prove every payload is prefix + text + suffix; one orjson call decodes
all texts as a JSON array), which is what makes ``finish`` cheap. Chunks that do not match (role,
finish, usage, errors, continuous usage stats, a server that stamps every chunk) are decoded in
full. Every ``_COMPACT_AT`` payloads the accumulator decodes what it holds and drops the raw
bytes, so a long answer at high concurrency does not pile up memory (a pause of ~0.3 ms per 1024
chunks of that stream on a slow core).

Shapes understood (chat, completions, and the vLLM / SGLang variants of both):
- chat chunk ``choices[i].delta.content`` / ``reasoning_content`` / ``reasoning`` / ``tool_calls``;
  completions chunk ``choices[i].text``; non-streaming ``choices[i].message.*`` or ``text``;
- a role-only first chunk (content ``""`` or null), ``finish_reason`` on the last text chunk or on
  a separate empty-delta chunk, several tokens in one chunk (speculative decoding);
- ``usage`` on a final chunk with ``choices: []``, or on every chunk (vLLM
  ``stream_options.continuous_usage_stats``), giving exact tokens per chunk;
- errors inside a 200 stream: ``{"error": {...}}``, ``{"object": "error", "message": ...}`` and
  ``event: error``; payloads that are not JSON objects; a stream cut before ``[DONE]``.

A chunk "carries output" when any choice has non-empty content, reasoning text or tool-call text.
Only those chunks get an entry in ``chunk_times_ns`` / ``chunk_chars`` (TTFT and ITL are measured
on them); ``text`` holds the content of choice 0 only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate, repeat
from operator import itemgetter, sub
from typing import Any

import orjson

_DONE = b"[DONE]"
_QUOTE = 34
_BACKSLASH = 92
# Templates are derived from plain text chunks; stop trying when a stream's chunks never repeat
# the template's bytes (e.g. a server that stamps each chunk), so derivation cannot cost per chunk.
_MAX_TEMPLATE_MISSES = 8
# Blocks of template chunks shorter than this are not worth the bulk path's fixed cost.
_BULK_MIN = 8
_RUN_END_LOOKBACK = 8
_FIRST_MALFORMED_CHARS = 200
# Decode and drop stored payloads this often: bounds the raw bytes a long stream holds (a
# 32k-token answer is ~8 MB of chunks; 1024 chunks ~250 KB).
_COMPACT_AT = 1024

TOKENS_PER_CHUNK_USAGE = "usage_per_chunk"
TOKENS_USAGE = "usage"
TOKENS_CHUNKS = "chunks"


@dataclass(slots=True)
class StreamResult:
    """What one response carried, decoded after the stream ended.

    Times are ``perf_counter_ns`` values as given to the accumulator. ``chunk_*`` lists are aligned:
    one entry per chunk that carried output. ``chunk_tokens`` is exact and present only when every
    such chunk carried a cumulative ``usage`` (vLLM ``continuous_usage_stats``); tokens of chunks
    without output (a final empty-delta chunk with the EOS token) go to the next output chunk, or to
    the last one when none follows, so ``sum(chunk_tokens) == completion_tokens``.

    ``text``: content of choice 0 (reasoning is counted in ``reasoning_chunks`` /
    ``reasoning_text_chars`` but not kept); usage fields come from the last usage object seen;
    ``finish_reason`` is the last one seen; ``done``: ``[DONE]`` arrived (always True for a
    non-streaming body); ``error``: the first error by arrival, as ``{"message", "type", "code"}``;
    ``malformed``: payloads that were not a JSON object (``first_malformed``: the first, 200
    chars); ``role_only_chunks`` / ``empty_chunks``: chunks with choices but no output, with and
    without a role; ``named_events``: events with an ``event:`` name; ``n_payloads``: payloads
    other than ``[DONE]``.

    ``late_ns``: sparse ``[chunk index, ns]`` pairs for output chunks whose time is only an upper
    bound: the chunk really arrived at most ``ns`` before it (see ``ChunkAccumulator.note_read``);
    every other time is exact. ``chunk_clock``: what the times are, ``kernel`` (when the kernel
    received the bytes) or ``read`` (when the process read them); set by the transport.
    """

    chunk_times_ns: list[int] = field(default_factory=list)
    chunk_chars: list[int] = field(default_factory=list)
    chunk_tokens: list[int] | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str | None = None
    text: str = ""
    reasoning_chunks: int = 0
    reasoning_text_chars: int = 0
    tool_call_chunks: int = 0
    done: bool = False
    error: dict[str, Any] | None = None
    malformed: int = 0
    first_malformed: str | None = None
    server_id: str | None = None
    model: str | None = None
    role_only_chunks: int = 0
    empty_chunks: int = 0
    named_events: int = 0
    n_payloads: int = 0
    end_ns: int = 0
    late_ns: list[list[int]] = field(default_factory=list)
    chunk_clock: str = "read"

    @property
    def first_chunk_ns(self) -> int | None:
        """Arrival of the first chunk that carried output (the end of TTFT), or None."""
        return self.chunk_times_ns[0] if self.chunk_times_ns else None

    def token_split(self) -> tuple[list[int], int | None, str]:
        """``(tokens per output chunk, output tokens, tokens_source)`` from the best source present.

        ``usage_per_chunk``: exact per-chunk counts; ``usage``: the final usage's total spread over
        the chunks by characters (``distribute_tokens``); ``chunks``: no usage at all, one token per
        output chunk (a lower bound on a speculative server; a tokenizer would do better).
        """
        if self.chunk_tokens is not None and self.completion_tokens is not None:
            return list(self.chunk_tokens), self.completion_tokens, TOKENS_PER_CHUNK_USAGE
        if self.completion_tokens is not None:
            return (
                distribute_tokens(self.chunk_chars, self.completion_tokens),
                self.completion_tokens,
                TOKENS_USAGE,
            )
        n = len(self.chunk_times_ns)
        return [1] * n, n, TOKENS_CHUNKS

    def error_class(self) -> str | None:
        """The records' error class this result implies on an HTTP 200, or None when it is clean.

        An error object wins (``stream_error``); a stream with neither ``[DONE]`` nor a finish
        reason was cut (``truncated``: its last payload may be half a JSON object, which is not
        counted against the server as malformed); otherwise undecodable payloads give
        ``malformed_stream``.
        """
        if self.error is not None:
            return "stream_error"
        if not self.done and self.finish_reason is None:
            return "truncated"
        if self.malformed:
            return "malformed_stream"
        return None


class ChunkAccumulator:
    """Collects one stream's SSE payloads with their arrival times; ``finish`` decodes them.

    The transport must read the clock before feeding the decoder, and pass the same time for
    every payload of one read. Every ``_COMPACT_AT`` payloads the stored ones are decoded and
    dropped, so a very long stream holds its decoded results, not all of its raw bytes.
    """

    __slots__ = ("_compacted", "_done", "_named", "_notes", "_pass", "_payloads", "_result", "_times")

    def __init__(self) -> None:
        self._payloads: list[bytes] = []
        self._times: list[int] = []
        self._named: list[tuple[str, bytes, int]] = []
        self._done = False
        self._pass: _Pass | None = None
        self._compacted = 0
        self._result: StreamResult | None = None
        self._notes: list[tuple[int, int, bool]] = []

    def add(self, payload: bytes, t_ns: int) -> bool:
        """Store one payload; False once ``[DONE]`` has been seen (the caller may stop reading)."""
        self._payloads.append(payload)
        self._times.append(t_ns)
        if payload == _DONE:
            self._done = True
        elif len(self._payloads) >= _COMPACT_AT:
            self._compact()
        return not self._done

    def add_all(self, payloads: list[bytes], t_ns: int) -> bool:
        """``add`` for every payload of one read (all arrived at ``t_ns``); cheaper per payload."""
        n = len(payloads)
        if n == 1:
            self._payloads.append(payloads[0])
            self._times.append(t_ns)
        elif not n:  # a read that completed no event
            return not self._done
        else:
            self._payloads += payloads
            self._times += [t_ns] * n
        if _DONE in payloads:
            self._done = True
        elif len(self._payloads) >= _COMPACT_AT:
            self._compact()
        return not self._done

    def note_read(self, t_ns: int, early_ns: int, partial: bool) -> None:
        """The payloads just added at ``t_ns`` may have arrived in several pieces, up to ``early_ns``
        before ``t_ns`` (the kernel merges segments that queue up unread and keeps only the newest
        one's time). Each output chunk of that read but the last is then marked as an upper bound;
        the last is too when ``partial`` (the read ended inside a later event, whose bytes came in
        a later piece). A last output chunk followed only by events without output (finish, usage,
        ``[DONE]``) keeps its time: servers write those right after it."""
        self._notes.append((t_ns, early_ns, partial))

    def add_named(self, event: str, payload: bytes, t_ns: int) -> None:
        """Store an event that had an ``event:`` name other than ``message`` (see ``SSEDecoder.named``)."""
        self._named.append((event, payload, t_ns))

    @property
    def n_payloads(self) -> int:
        """Payloads stored so far, ``[DONE]`` included."""
        return self._compacted + len(self._payloads)

    def _compact(self) -> None:
        if self._pass is None:
            self._pass = _Pass()
        self._pass.run(self._payloads, self._times)
        self._compacted += len(self._payloads)
        self._payloads = []
        self._times = []

    def finish(self, end_ns: int) -> StreamResult:
        """Decode everything stored; ``end_ns``: when the stream ended (EOF, error or cancel).

        Call it once, after the last ``add``; a second call returns the same result.
        """
        if self._result is not None:
            return self._result
        p = self._pass or _Pass()
        p.run(self._payloads, self._times)
        b = p.b
        res = b.res
        res.end_ns = end_ns
        res.reasoning_chunks += p.fast_reasoning_chunks
        res.reasoning_text_chars += p.fast_reasoning_chars
        for event, payload, t_ns in self._named:
            b.named(event, payload, t_ns)
        res.n_payloads = self.n_payloads - p.n_done
        self._result = b.result()
        if self._notes:
            self._result.late_ns = _late_bounds(self._result.chunk_times_ns, self._notes)
        self._payloads, self._times = [], []
        return self._result


def _late_bounds(times: list[int], notes: list[tuple[int, int, bool]]) -> list[list[int]]:
    """``[index, early_ns]`` for the output chunks of the noted reads (see ``note_read``)."""
    at: dict[int, list[int]] = {}
    for i, t in enumerate(times):
        at.setdefault(t, []).append(i)
    out: dict[int, int] = {}
    for t, early, partial in notes:
        idx = at.get(t)
        if not idx or early <= 0:
            continue
        for i in idx if partial else idx[:-1]:
            if early > out.get(i, 0):
                out[i] = early
    return [[i, out[i]] for i in sorted(out)]


def parse_completion_body(body: bytes, t_first_ns: int, end_ns: int) -> StreamResult:
    """Decode a non-streaming response body (chat ``message`` or completions ``text``).

    The whole output counts as one chunk arriving at ``t_first_ns`` (when the body started to
    arrive); with a usage object its token count is that chunk's exact token count. ``done`` is
    always True (the body was complete); a bad body shows in ``malformed`` or ``error``.
    """
    b = _Builder(end_ns)
    b.payload(body, t_first_ns)
    res = b.result()
    res.n_payloads = 1
    res.done = True  # the whole body was read; a bad one shows as malformed or error
    return res


def distribute_tokens(chunk_chars: list[int], total_tokens: int) -> list[int]:
    """Split ``total_tokens`` over chunks by their characters: integers summing exactly to it.

    With at least as many tokens as chunks, every chunk gets one and the surplus (the extra
    tokens of multi-token chunks) goes by characters; with fewer, all of it goes by characters
    (some chunks get 0). "By characters" is cumulative rounding, so each chunk is within one token
    of its exact share. Chunks with no characters weigh as one character. 0 everywhere when
    ``total_tokens`` <= 0. Linear, C-level work only (it runs once per request).
    """
    n = len(chunk_chars)
    if n == 0:
        return []
    if total_tokens <= 0:
        return [0] * n
    if total_tokens == n:
        return [1] * n
    base = 1 if total_tokens > n else 0
    share = total_tokens - n * base
    weights = chunk_chars if 0 not in chunk_chars else [c if c > 0 else 1 for c in chunk_chars]
    cum = list(accumulate(weights))
    whole = cum[-1]
    twice_whole = 2 * whole
    twice_share = 2 * share
    if base:  # cumulative bounds of "one each + surplus share": bound k gains k + 1
        bounds = [(c * twice_share + whole) // twice_whole + k for k, c in enumerate(cum, 1)]
    else:
        bounds = [(c * twice_share + whole) // twice_whole for c in cum]
    return [bounds[0], *map(sub, bounds[1:], bounds)]


def _error_dict(obj: Any) -> dict[str, Any]:
    """Normalise an error object (OpenAI, vLLM flat, or anything) to message/type/code."""
    if isinstance(obj, dict):
        msg = obj.get("message")
        if msg is None:
            msg = obj.get("detail", obj.get("error"))
        return {
            "message": msg if isinstance(msg, str) else ("" if msg is None else str(msg)),
            "type": obj.get("type"),
            "code": obj.get("code"),
        }
    return {"message": obj if isinstance(obj, str) else str(obj), "type": None, "code": None}


class _Builder:
    """Mutable state of one decode; the slow path for chunks that do not match a template."""

    __slots__ = (
        "chars",
        "error_t",
        "last_ct",
        "pending_tokens",
        "per_chunk_ok",
        "res",
        "text",
        "times",
        "tokens",
    )

    def __init__(self, end_ns: int) -> None:
        self.res = StreamResult(end_ns=end_ns)
        self.times = self.res.chunk_times_ns
        self.chars = self.res.chunk_chars
        self.text: list[str] = []
        self.tokens: list[int] = []
        self.per_chunk_ok = True
        self.last_ct = 0
        self.pending_tokens = 0
        self.error_t = 0

    def set_error(self, err: dict[str, Any], t_ns: int) -> None:
        if self.res.error is None or t_ns < self.error_t:
            self.res.error = err
            self.error_t = t_ns

    def bad(self, payload: bytes) -> None:
        res = self.res
        res.malformed += 1
        if res.first_malformed is None:
            res.first_malformed = payload[: _FIRST_MALFORMED_CHARS * 4].decode("utf-8", "replace")[
                :_FIRST_MALFORMED_CHARS
            ]

    def payload(self, payload: bytes, t_ns: int) -> dict[str, Any] | None:
        """Decode one payload fully and take it in; returns the object (None when not one)."""
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            if payload.strip() == _DONE:
                self.res.done = True
            else:
                self.bad(payload)
            return None
        if not isinstance(obj, dict):
            self.bad(payload)
            return None
        self.obj(obj, t_ns)
        return obj

    def obj(self, obj: dict[str, Any], t_ns: int) -> None:
        # Written for speed: it runs for every chunk that is not a template chunk (all of them
        # when the server sends usage in every chunk). ``type(x) is str`` is the cheap check.
        res = self.res
        if res.server_id is None:
            sid = obj.get("id")
            if type(sid) is str:
                res.server_id = sid
            model = obj.get("model")
            if type(model) is str:
                res.model = model
        err = obj.get("error")
        if err is not None:
            self.set_error(_error_dict(err), t_ns)
        if obj.get("object") == "error":
            self.set_error(_error_dict(obj), t_ns)
        chunk_tokens: int | None = None
        usage = obj.get("usage")
        if usage is not None and type(usage) is dict:
            ct = self.take_usage(usage)
            if ct is not None:
                chunk_tokens = ct - self.last_ct
                if chunk_tokens < 0:  # not cumulative after all: no exact per-chunk counts
                    self.per_chunk_ok = False
                self.last_ct = ct
        choices = obj.get("choices")
        n_chars = 0
        reasoning = False
        role = False
        tool = False
        if type(choices) is list:
            for ch in choices:
                if type(ch) is not dict:
                    continue
                fr = ch.get("finish_reason")
                if fr is not None and type(fr) is str:
                    res.finish_reason = fr
                delta = ch.get("delta")
                if delta is None:
                    delta = ch.get("message")
                    if delta is None:
                        t = ch.get("text")  # completions
                        if type(t) is str and t:
                            n_chars += len(t)
                            if ch.get("index", 0) == 0:
                                self.text.append(t)
                        continue
                if type(delta) is not dict:
                    continue
                c = delta.get("content")
                if c and type(c) is str:
                    n_chars += len(c)
                    if ch.get("index", 0) == 0:
                        self.text.append(c)
                r = delta.get("reasoning_content") or delta.get("reasoning")
                if r and type(r) is str:
                    n_chars += len(r)
                    reasoning = True
                    res.reasoning_text_chars += len(r)
                if delta.get("role"):
                    role = True
                calls = delta.get("tool_calls")
                if calls:
                    k = _tool_call_chars(calls)
                    if k:
                        n_chars += k
                        tool = True
        if n_chars:
            self.times.append(t_ns)
            self.chars.append(n_chars)
            if reasoning:
                res.reasoning_chunks += 1
            if tool:
                res.tool_call_chunks += 1
            if chunk_tokens is None:
                self.per_chunk_ok = False
                self.tokens.append(self.pending_tokens)
            else:
                self.tokens.append(self.pending_tokens + chunk_tokens)
            self.pending_tokens = 0
        else:
            if chunk_tokens is not None:
                self.pending_tokens += chunk_tokens
            if role:
                res.role_only_chunks += 1
            elif choices and type(choices) is list:
                res.empty_chunks += 1

    def text_with_usage(self, t_ns: int, text: str, reasoning: bool, usage: dict[str, Any]) -> None:
        """What ``obj`` does for a plain one-text chunk carrying usage (the usage-template path)."""
        res = self.res
        ct = self.take_usage(usage)
        self.times.append(t_ns)
        self.chars.append(len(text))
        if reasoning:
            res.reasoning_chunks += 1
            res.reasoning_text_chars += len(text)
        else:
            self.text.append(text)
        if ct is None:
            self.per_chunk_ok = False
            self.tokens.append(self.pending_tokens)
        else:
            chunk_tokens = ct - self.last_ct
            if chunk_tokens < 0:
                self.per_chunk_ok = False
            self.last_ct = ct
            self.tokens.append(self.pending_tokens + chunk_tokens)
        self.pending_tokens = 0

    def take_usage(self, usage: dict[str, Any]) -> int | None:
        res = self.res
        pt = usage.get("prompt_tokens")
        if type(pt) is int:
            res.prompt_tokens = pt
        ct = usage.get("completion_tokens")
        if type(ct) is int:
            res.completion_tokens = ct
        else:
            ct = None
        details = usage.get("prompt_tokens_details")
        if details is not None and type(details) is dict:
            cached = details.get("cached_tokens")
            if type(cached) is int:
                res.cached_tokens = cached
        return ct

    def named(self, event: str, payload: bytes, t_ns: int) -> None:
        self.res.named_events += 1
        if event != "error":
            return
        try:
            obj: Any = orjson.loads(payload)
        except orjson.JSONDecodeError:
            obj = payload[:1000].decode("utf-8", "replace")
        if isinstance(obj, dict) and isinstance(obj.get("error"), (dict, str)):
            obj = obj["error"]
        self.set_error(_error_dict(obj), t_ns)

    def result(self) -> StreamResult:
        res = self.res
        res.text = "".join(self.text)
        tokens = self.tokens
        if self.per_chunk_ok and tokens and res.completion_tokens is not None:
            tokens[-1] += self.pending_tokens
            res.chunk_tokens = tokens
        return res


def _tool_call_chars(calls: Any) -> int:
    n = 0
    if isinstance(calls, list):
        for call in calls:
            if isinstance(call, dict):
                fn = call.get("function")
                if isinstance(fn, dict):
                    for key in ("name", "arguments"):
                        v = fn.get(key)
                        if isinstance(v, str):
                            n += len(v)
    return n


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
    none), so they never disturb per-chunk token counts.
    """

    __slots__ = (
        "b",
        "bulk",
        "fast_reasoning_chars",
        "fast_reasoning_chunks",
        "have",
        "hits",
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
