"""Engine emissions to bytes on the client connections: the simulator's hot path.

A streamed request gets one chunk per emission that carries tokens, written the moment its engine
step ends (a chat stream's first one also carries the role chunk), then the finish chunk, the usage
chunk when asked, ``[DONE]``. A non-streamed request collects its text and gets one body when it
finishes. An aborted request ends with an error: an error event inside its stream, or a 500.

Stream faults, per request (-1: off): after ``stall_at`` content chunks nothing more is sent and
the connection stays open; chunk ``malformed_at + 1`` is cut short mid-JSON; after ``error_at``
chunks an error event ends the stream and the request is aborted.

The emission log (``--emission-log``) gets one JSON line per chunk sent: ``request_id``, ``index``
(per request, from 0), ``tokens``, ``emit_ns`` (wall clock, ns), ``kind`` (role, content, finish,
usage, error) and, on content lines, ``output_kind``: what the chunk carries (``reasoning``,
``text`` or ``tool``). It is buffered; the owner flushes it.

An answer with a plan (:mod:`loadgen.sim.output_plan`: reasoning, a tool call) takes its output
tokens in order: the first ``reasoning_tokens`` are reasoning (``delta.reasoning_content``
chunks, SGLang's field), the rest answer text (``delta.content``) or the call's arguments: one
chunk with the call's id, name and empty arguments, then one ``tool_calls`` arguments chunk per
emission, finish_reason "tool_calls". An emission that crosses from reasoning to the answer is
written as two chunks in one write (two log lines); the stream faults count emissions as before.
Its usage carries ``completion_tokens_details.reasoning_tokens`` when reasoning was asked for.

A pooling request (:class:`PooledResponse`: embeddings, rerank, score) spans several engine
sequences and gets one whole JSON body when the last one finishes (a 500 if one is aborted), with
one emission-log line of kind ``body`` (``error`` for the 500).

A response with its own framing (``framing`` set: a Responses API call, :mod:`loadgen.sim.responses_api`)
is marked not streamed here and handed every emission; the chat stream path never looks at it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import IO, Any, Protocol

import orjson

from loadgen.sim.bodies import (
    DONE,
    arguments_template,
    chunk_prefix,
    completion_body,
    content_template,
    crossing_chunk,
    error_body,
    finish_chunk,
    malformed_chunk,
    reasoning_template,
    role_chunk,
    stream_error,
    tool_call_chunk,
    usage_chunk,
    usage_json,
)
from loadgen.sim.continuation import PromptContinuation, continuation
from loadgen.sim.engine import ABORTED, Emission, Engine, SimRequest
from loadgen.sim.http import Connection
from loadgen.sim.output_plan import OutputPlan
from loadgen.sim.text import TextSource


class Framing(Protocol):
    """Writes the emissions of responses that are not chat/completions (``Response.framing``)."""

    def deliver(self, st: Response, em: Emission) -> None:
        """One emission of ``st``'s request (tokens, and/or its end), taken and written."""


class Response:
    """Per-request response state (the engine request's ``context``)."""

    __slots__ = (
        "chat", "chunks", "conn", "continuous_usage", "done", "error_at", "framing", "head", "id_json",
        "include_usage", "keep_text", "malformed_at", "pending", "pieces", "plan", "prefix", "prompt_tokens",
        "reasoning", "req", "rid", "sent", "stall_at", "stream", "tail", "tool_open",
    )  # fmt: skip

    conn: Connection
    req: SimRequest
    rid: str
    id_json: bytes
    chat: bool
    stream: bool
    prompt_tokens: int
    include_usage: bool
    continuous_usage: bool
    stall_at: int
    malformed_at: int
    error_at: int
    prefix: bytes  # what every chunk of this response starts with (bodies.chunk_prefix)
    head: bytes
    tail: bytes

    def __init__(self) -> None:
        self.chunks = 0
        self.done = False
        self.pieces: list[bytes] = []  # the text taken so far (non-streamed, or keep_text)
        self.keep_text = False  # a stream keeps its text too (its output joins the prefix cache)
        self.pending: bytes | None = None  # text taken at finish for tokens not sent yet: sent next
        self.sent = 0
        self.framing: Framing | None = None  # set (with stream False): not framed by the Responder
        self.plan: OutputPlan | None = None  # reasoning and/or a tool call (None: plain text)
        self.reasoning: list[bytes] = []  # the reasoning text taken so far (a plan with reasoning)
        self.tool_open = False  # the tool call's first chunk / item was written

    def reasoning_done(self) -> int:
        """Reasoning tokens generated so far."""
        plan = self.plan
        return 0 if plan is None else min(plan.reasoning_tokens, self.req.generated)

    def reasoning_usage(self) -> int | None:
        """``reasoning_tokens`` for usage: None when the request asked for no reasoning."""
        plan = self.plan
        return None if plan is None or plan.effort is None else self.reasoning_done()

    def finish_reason(self) -> str:
        """The finish reason of a finished request ("tool_calls" for a complete call)."""
        reason = self.req.finish_reason or "stop"
        plan = self.plan
        return "tool_calls" if reason == "stop" and plan is not None and plan.call is not None else reason


class PooledResponse(Response):
    """A pooling request (embeddings, rerank, score): several engine sequences, one JSON body when
    the last of them ends. ``render`` builds that body; ``fault``: "" or the stream fault that hits
    the body (a whole body counts as one chunk, so only a fault set to 0 chunks does):
    "stall" (nothing is sent), "malformed" (the body cut short mid-JSON), "error" (a 500)."""

    __slots__ = ("fault", "left", "render", "seqs")

    render: Callable[[], bytes]
    seqs: list[SimRequest]
    left: int
    fault: str


class Responder:
    """Writes the engine's emissions to their requests' connections.

    ``clock``: the engine's time (s), read when a fault aborts a request."""

    def __init__(
        self,
        engine: Engine,
        text: TextSource,
        model_name: str,
        created: int,
        style: str,
        emission_log: str | None,
        clock: Callable[[], float],
    ) -> None:
        self.engine = engine
        self.text = text
        self.model_name = model_name
        self.model_json = orjson.dumps(model_name)
        self.created = created
        self.style = style
        self.clock = clock
        self._emlog: IO[bytes] | None = open(emission_log, "ab") if emission_log else None  # noqa: SIM115

    def open(
        self,
        conn: Connection,
        rid: str,
        chat: bool,
        stream: bool,
        prompt_tokens: int,
        include_usage: bool,
        continuous_usage: bool,
        stall_at: int,
        malformed_at: int,
        error_at: int,
        plan: OutputPlan | None = None,
    ) -> Response:
        """A new response to one request on ``conn``, its chunk templates built once."""
        st = Response()
        st.conn = conn
        st.rid = rid
        st.chat = chat
        st.stream = stream
        st.prompt_tokens = prompt_tokens
        st.id_json = orjson.dumps(rid)
        st.include_usage = include_usage
        st.continuous_usage = continuous_usage
        st.stall_at = stall_at
        st.malformed_at = malformed_at
        st.error_at = error_at
        st.prefix = chunk_prefix(st.id_json, chat, self.created, self.model_json)
        st.head, st.tail = content_template(st.prefix, chat)
        st.plan = plan
        return st

    def continuation(
        self, st: Response, body: dict[str, Any], chars_per_token: float, block_tokens: int
    ) -> PromptContinuation | None:
        """The hook that names ``st``'s prompt + reply blocks for the prefix cache (None: not cached);
        from now on ``st`` keeps the text it sends."""
        hook = continuation(body, st.chat, chars_per_token, block_tokens, lambda n: self.reply_text(st, n))
        st.keep_text = hook is not None
        return hook

    def reply_text(self, st: Response, n_tokens: int) -> str:
        """The first ``n_tokens`` tokens of ``st``'s output text. Tokens the engine generated whose
        text was not taken yet (the emission being finished, chunks held back by a fault) get their
        text now; it is what their emission will carry."""
        text = b"".join(st.pieces)
        have = text.count(b" ")  # every token is one word with a leading space
        missing = st.req.generated - have
        if missing > 0:
            st.pending = self.text.take(missing)
            st.pieces = [text, st.pending]
            text += st.pending
        if n_tokens < have + max(0, missing):
            text = b" ".join(text.split(b" ")[: n_tokens + 1])
        return text.decode()

    def flush(self) -> None:
        if self._emlog is not None:
            self._emlog.flush()

    def close(self) -> None:
        if self._emlog is not None:
            self._emlog.flush()
            self._emlog.close()
            self._emlog = None

    def deliver(self, emissions: list[Emission]) -> None:
        emlog = self._emlog
        for em in emissions:
            st: Response = em.req.context  # type: ignore[assignment]
            if st is None or st.done:
                continue
            if not st.stream:
                if st.framing is not None:
                    st.framing.deliver(st, em)
                    continue
                if em.tokens:
                    if st.plan is not None:
                        self.take_planned(st, em)
                    elif st.pending is not None:
                        st.pending = None  # already in pieces
                    else:
                        st.pieces.append(self.text.take(em.tokens))
                if em.finished:
                    self._finish_plain(st, em.req)
                continue
            conn = st.conn
            if conn.closed:
                continue
            if em.req.state == ABORTED:
                self._stream_error(st, em.req.abort_message or "The request was aborted.", "InternalServerError", 500)
                continue
            if em.tokens:
                st.chunks += 1
                if st.stall_at >= 0 and st.chunks > st.stall_at:
                    if em.finished:
                        st.done = True
                    continue
                if st.error_at >= 0 and st.chunks > st.error_at:
                    self._stream_error(
                        st,
                        "Simulated internal error while generating (--error-after-chunks).",
                        "InternalServerError",
                        500,
                    )
                    self.engine.abort(st.rid, self.clock(), "fault")
                    continue
                if st.plan is not None:
                    self._write_planned(st, em)
                    if em.finished:
                        self._finish_stream(st, em.req)
                    continue
                if st.pending is not None:
                    text, st.pending = st.pending, None
                else:
                    text = self.text.take(em.tokens)
                    if st.keep_text:
                        st.pieces.append(text)
                if st.malformed_at >= 0 and st.chunks == st.malformed_at + 1:
                    payload = malformed_chunk(st.id_json)
                elif st.continuous_usage:
                    n = em.req.generated
                    usage = usage_json(st.prompt_tokens, n, em.req.cached_tokens)
                    payload = st.head + text + st.tail[:-7] + usage + b"}\n\n"  # the tail ends in null}\n\n
                else:
                    payload = st.head + text + st.tail
                if st.chunks == 1 and st.chat:
                    usage = usage_json(st.prompt_tokens, 0, em.req.cached_tokens) if st.continuous_usage else b"null"
                    role = role_chunk(st.prefix, usage)
                    if emlog is not None:
                        self._emit_log(st, 0, "role")
                    if emlog is not None:
                        self._emit_log(st, em.tokens, "content", "text")
                    conn.write_chunk(role + payload)
                else:
                    if emlog is not None:
                        self._emit_log(st, em.tokens, "content", "text")
                    conn.write_chunk(payload)
            if em.finished:
                self._finish_stream(st, em.req)

    def log_emission(self, st: Response, tokens: int, kind: str, output_kind: str = "") -> None:
        """One emission-log line for an event of ``st`` about to be written (nothing without a log);
        ``output_kind`` (reasoning, text, tool) for an event that carries output."""
        if self._emlog is not None:
            self._emit_log(st, tokens, kind, output_kind)

    def _emit_log(self, st: Response, tokens: int, kind: str, output_kind: str = "") -> None:
        assert self._emlog is not None
        line = {"request_id": st.rid, "index": st.sent, "tokens": tokens, "emit_ns": time.time_ns(), "kind": kind}
        if output_kind:
            line["output_kind"] = output_kind
        self._emlog.write(orjson.dumps(line) + b"\n")
        st.sent += 1

    # -- answers with a plan (reasoning, a tool call) -------------------------------------------

    def take_planned(self, st: Response, em: Emission) -> tuple[bytes, bytes]:
        """The reasoning text and answer text of an emission of a planned answer, kept in ``st``
        (a tool call's arguments need no keeping: they follow from the token count)."""
        plan = st.plan
        assert plan is not None
        n_reason, n_answer = plan.split(em.req.generated - em.tokens, em.tokens)
        reasoning = self.text.take(n_reason) if n_reason else b""
        if reasoning:
            st.reasoning.append(reasoning)
        text = b""
        if n_answer and plan.call is None:
            text = self.text.take(n_answer)
            st.pieces.append(text)
        return reasoning, text

    def _write_planned(self, st: Response, em: Emission) -> None:
        """One emission of a streamed chat answer with a plan (the faults already applied; only chat
        answers have plans)."""
        plan = st.plan
        assert plan is not None
        before = em.req.generated - em.tokens
        n_reason, n_answer = plan.split(before, em.tokens)
        reasoning, text = self.take_planned(st, em)
        end = b"null}\n\n"
        if st.continuous_usage:
            end = usage_json(st.prompt_tokens, em.req.generated, em.req.cached_tokens, st.reasoning_usage()) + b"}\n\n"
        out = b""
        if st.chunks == 1 and st.chat:
            first = usage_json(st.prompt_tokens, 0, em.req.cached_tokens) if st.continuous_usage else b"null"
            out = role_chunk(st.prefix, first)
            self.log_emission(st, 0, "role")
        malformed = st.malformed_at >= 0 and st.chunks == st.malformed_at + 1
        if malformed:
            self.log_emission(st, em.tokens, "content", "reasoning" if n_reason else "tool" if plan.call else "text")
            st.conn.write_chunk(out + malformed_chunk(st.id_json))
            return
        # One chunk per emission, as a server sends one delta per step: a step that ends the
        # reasoning and begins the answer (or the call) carries both in one delta. Two chunks in one
        # write would be indistinguishable, for a client, from two steps its reads merged.
        call = plan.call
        if n_reason and not n_answer:
            head, tail = reasoning_template(st.prefix)
            out += head + reasoning + tail[:-7] + end
            self.log_emission(st, n_reason, "content", "reasoning")
        elif n_answer and call is None:
            if n_reason:
                out += crossing_chunk(st.prefix, reasoning, text)[:-7] + end
                self.log_emission(st, n_reason, "content", "reasoning")
            else:
                out += st.head + text + st.tail[:-7] + end
            self.log_emission(st, n_answer, "content", "text")
        elif n_answer and call is not None:
            piece = call.piece(before + n_reason - plan.reasoning_tokens, n_answer)
            if n_reason:
                self.log_emission(st, n_reason, "content", "reasoning")
            if not st.tool_open:
                # the call's id and name open it, with the first piece of its arguments
                st.tool_open = True
                said = b'"' + reasoning + b'"' if n_reason else b"null"
                out += tool_call_chunk(st.prefix, call.call_id, call.name, piece, said)[:-7] + end
            else:
                head, tail = arguments_template(st.prefix)
                out += head + orjson.dumps(piece) + tail[:-7] + end
            self.log_emission(st, n_answer, "content", "tool")
        st.conn.write_chunk(out)

    def _finish_stream(self, st: Response, req: SimRequest) -> None:
        reason = st.finish_reason()
        usage_all = usage_json(st.prompt_tokens, req.generated, req.cached_tokens, st.reasoning_usage())
        out = finish_chunk(st.prefix, st.chat, reason, usage_all if st.continuous_usage else b"null")
        emlog = self._emlog
        if emlog is not None:
            self._emit_log(st, 0, "finish")
        if st.include_usage:
            out += usage_chunk(st.prefix, usage_all)
            if emlog is not None:
                self._emit_log(st, 0, "usage")
        out += DONE
        st.done = True
        st.conn.write_chunk(out)
        st.conn.end_response()

    def _stream_error(self, st: Response, message: str, err_type: str, code: int) -> None:
        payload = stream_error(message, err_type, code)
        if self._emlog is not None:
            self._emit_log(st, 0, "error")
        st.done = True
        st.conn.write_chunk(payload)
        st.conn.end_response()

    def _finish_plain(self, st: Response, req: SimRequest) -> None:
        if isinstance(st, PooledResponse):
            self._finish_pooled(st, req)
            return
        st.done = True
        if req.state == ABORTED:
            body = error_body(self.style, 500, req.abort_message or "aborted", "InternalServerError")
            st.conn.end_plain(500, body)
            return
        text = b"".join(st.pieces).decode()
        reason = st.finish_reason()
        plan = st.plan
        reasoning: str | None = None
        calls: list[dict[str, Any]] | None = None
        if plan is not None:
            reasoning = b"".join(st.reasoning).decode() if plan.effort is not None else None
            call = plan.call
            if call is not None:
                arguments = call.piece(0, max(0, req.generated - plan.reasoning_tokens))
                if st.chat:
                    fn = {"name": call.name, "arguments": arguments}
                    calls = [{"id": call.call_id, "index": 0, "type": "function", "function": fn}]
                else:  # not reached: only chat answers have plans
                    text = arguments
        body = completion_body(
            st.chat, st.rid, self.created, self.model_name, text, reason, st.prompt_tokens, req.generated,
            req.cached_tokens, reasoning, calls, st.reasoning_usage(),
        )  # fmt: skip
        st.conn.end_plain(200, body, extra=b"x-request-id: " + st.rid.encode("latin-1", "replace") + b"\r\n")

    def _finish_pooled(self, st: PooledResponse, req: SimRequest) -> None:
        """One sequence of a pooling request ended; the last one writes the body (and its log line)."""
        if req.state == ABORTED:
            st.done = True
            now = self.clock()
            for other in st.seqs:
                self.engine.abort(other.rid, now, "another input of the request was aborted")
            self._end_pooled(
                st, 500, error_body(self.style, 500, req.abort_message or "aborted", "InternalServerError")
            )
            return
        st.left -= 1
        if st.left > 0:
            return
        st.done = True
        if st.fault == "stall":
            return
        if st.fault == "error":
            message = "Simulated internal error while computing the request (--error-after-chunks)."
            self._end_pooled(st, 500, error_body(self.style, 500, message, "InternalServerError"))
            return
        body = st.render()
        if st.fault == "malformed":
            body = body[: len(body) // 2]
        self._end_pooled(st, 200, body)

    def _end_pooled(self, st: PooledResponse, status: int, body: bytes) -> None:
        if self._emlog is not None:
            self._emit_log(st, 0, "body" if status == 200 else "error")
        st.conn.end_plain(status, body, extra=b"x-request-id: " + st.rid.encode("latin-1", "replace") + b"\r\n")
