"""What one response carried (``StreamResult``) and how its output tokens were counted."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate
from operator import sub
from typing import Any

TOKENS_PER_CHUNK_USAGE = "usage_per_chunk"
TOKENS_USAGE = "usage"
TOKENS_CHUNKS = "chunks"

# The kind of an output chunk (``StreamResult.chunk_kinds``).
KIND_REASONING = "reasoning"
KIND_TEXT = "text"
KIND_TOOL = "tool"


@dataclass(slots=True)
class FunctionCall:
    """One function call of the answer: ``arguments`` is the JSON text the model wrote (not parsed).

    ``call_id``: the id to answer the call with (chat ``tool_calls[].id``, Responses ``call_id``);
    ``item_id``: the Responses output item's id (None for chat).
    """

    item_id: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(slots=True)
class StreamResult:
    """What one response carried, decoded after the stream ended.

    Times are ``perf_counter_ns`` values as given to the accumulator. ``chunk_*`` lists are aligned:
    one entry per chunk that carried output. ``chunk_tokens`` is exact and present only when every
    such chunk carried a cumulative ``usage`` (vLLM ``continuous_usage_stats``); tokens of chunks
    without output (a final empty-delta chunk with the EOS token) go to the next output chunk, or to
    the last one when none follows, so ``sum(chunk_tokens) == completion_tokens``.

    ``chunk_kinds``: the kind of each output chunk, ``reasoning``, ``text`` or ``tool``
    (``KIND_*``); a chat chunk that carries several is ``tool`` when it has tool-call text, else
    ``text`` when it has content, else ``reasoning``. ``first_reasoning_ns`` / ``first_text_ns`` /
    ``first_tool_ns``: arrival of the first chunk carrying that kind, whatever the chunk's own kind
    (None when none came); ``first_tool_arguments_ns``: of the first non-empty arguments piece.
    ``function_calls``: the calls of choice 0, in order of appearance, arguments joined.
    ``reasoning_tokens``: usage's ``completion_tokens_details.reasoning_tokens`` (part of
    ``completion_tokens``), None when not reported.

    ``text``: content of choice 0 (reasoning is counted in ``reasoning_chunks`` /
    ``reasoning_text_chars`` but not kept); usage fields come from the last usage object seen;
    ``finish_reason`` is the last one seen; ``done``: ``[DONE]`` arrived (always True for a
    non-streaming body); ``error``: the first error by arrival, as ``{"message", "type", "code"}``;
    ``malformed``: payloads that were not a JSON object (``first_malformed``: the first, 200
    chars); ``role_only_chunks`` / ``empty_chunks``: chunks with choices but no output, with and
    without a role; ``held_at``: of those, the chunks whose delta carried an empty text (no role,
    no finish reason): a token whose text the server held back (llama.cpp's server sends
    ``"content": ""`` for a token that ends inside a UTF-8 character, and the bytes with a later
    token), each as the index of the output chunk that follows it; ``named_events``: events with an
    ``event:`` name; ``n_payloads``: payloads other than ``[DONE]``.

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
    held_at: list[int] = field(default_factory=list)
    named_events: int = 0
    n_payloads: int = 0
    end_ns: int = 0
    late_ns: list[list[int]] = field(default_factory=list)
    chunk_clock: str = "read"
    chunk_kinds: list[str] = field(default_factory=list)
    first_reasoning_ns: int | None = None
    first_text_ns: int | None = None
    first_tool_ns: int | None = None
    first_tool_arguments_ns: int | None = None
    function_calls: list[FunctionCall] = field(default_factory=list)
    reasoning_tokens: int | None = None

    @property
    def first_chunk_ns(self) -> int | None:
        """Arrival of the first chunk that carried output (the end of TTFT), or None."""
        return self.chunk_times_ns[0] if self.chunk_times_ns else None

    def token_split(self) -> tuple[list[int], int | None, str]:
        """``(tokens per output chunk, output tokens, tokens_source)`` from the best source present.

        ``usage_per_chunk``: exact per-chunk counts; ``usage``: the final usage's total spread over
        the chunks by characters (``distribute_tokens``); ``chunks``: no usage at all, one token per
        output chunk, plus one for each chunk whose text was held back (``held_at``: counted with the
        output chunk that brought its text, the last one when none followed); a lower bound on a
        speculative server, where a tokenizer would do better.
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
        tokens = [1] * n
        if n:
            for i in self.held_at:
                tokens[min(i, n - 1)] += 1
        return tokens, sum(tokens), TOKENS_CHUNKS

    def error_class(self) -> str | None:
        """The records' error class this result implies on an HTTP 200, or None when it is clean.

        An error object wins (``stream_error``); an answer that never said why it ended (no finish
        reason) was cut (``truncated``), whether the connection broke (its last payload may be half
        a JSON object, which is not counted against the server as malformed) or the server closed
        it with ``[DONE]`` (llama.cpp's server ends a request it interrupts for a newer one so:
        the role chunk, then ``[DONE]``); undecodable payloads in a stream that was not cut give
        ``malformed_stream`` first (they say more).
        """
        if self.error is not None:
            return "stream_error"
        if self.finish_reason is None and not self.done:
            return "truncated"
        if self.malformed:
            return "malformed_stream"
        if self.finish_reason is None:
            return "truncated"
        return None


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
