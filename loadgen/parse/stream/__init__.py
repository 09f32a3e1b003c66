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
Only those chunks get an entry in ``chunk_times_ns`` / ``chunk_chars`` / ``chunk_kinds`` (TTFT and
ITL are measured on them); ``text`` holds the content of choice 0 only, ``function_calls`` its tool
calls. Kinds, as the Responses decoder reports them: non-empty ``reasoning_content`` or
``reasoning`` is reasoning, ``content`` (or a completions ``text``) is text, names or arguments in
``tool_calls`` are tool; a chunk with several is tool, else text, else reasoning, and counts for
the ``first_*_ns`` of each it carries. A non-streamed body is one chunk, by the same rule.
"""

from __future__ import annotations

from loadgen.parse.stream.builder import _DONE, _Builder
from loadgen.parse.stream.fastpath import _Pass
from loadgen.parse.stream.result import (
    KIND_REASONING,
    KIND_TEXT,
    KIND_TOOL,
    TOKENS_CHUNKS,
    TOKENS_PER_CHUNK_USAGE,
    TOKENS_USAGE,
    FunctionCall,
    StreamResult,
    distribute_tokens,
)

# Decode and drop stored payloads this often: bounds the raw bytes a long stream holds (a
# 32k-token answer is ~8 MB of chunks; 1024 chunks ~250 KB).
_COMPACT_AT = 1024


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


__all__ = [
    "KIND_REASONING",
    "KIND_TEXT",
    "KIND_TOOL",
    "TOKENS_CHUNKS",
    "TOKENS_PER_CHUNK_USAGE",
    "TOKENS_USAGE",
    "ChunkAccumulator",
    "FunctionCall",
    "StreamResult",
    "distribute_tokens",
    "parse_completion_body",
]
