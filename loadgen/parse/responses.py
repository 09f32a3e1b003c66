"""OpenAI Responses API answers (``/v1/responses``) -> ``ResponsesResult``. Pure: no I/O, no clock.

Streaming: the transport reads the clock when a read returns and hands the bytes with that time to
``ResponsesDecoder.feed(data, t_ns)``, in any split (one byte at a time included); ``finish(end_ns)``
ends the stream. Each event is decoded once, when its last byte arrives: one orjson call and a few
dict look-ups, appends only (text pieces are joined once, in ``finish``), so the cost per event does
not grow with the answer. Every event gets the time of the read that completed it; events that only
end of stream completes (a last event without its blank line) get ``end_ns``.

Wire format (OpenAI, vLLM, SGLang): SSE events ``event: <type>`` + ``data: <JSON>``, whose JSON
repeats the type in ``"type"`` (the JSON's type wins; the event name is the fallback). No
``[DONE]`` (tolerated and ignored when a proxy adds one). The events taken in:

- ``response.created`` / ``response.in_progress``: the response id (``previous_response_id`` of the
  next turn) and model;
- ``response.output_text.delta`` (answer), ``response.refusal.delta`` (answer, kept in
  ``refusal``), ``response.reasoning_text.delta`` and ``response.reasoning_summary_text.delta``
  (reasoning, kept in ``reasoning_text`` / ``reasoning_summary``),
  ``response.function_call_arguments.delta`` (tool): output events;
- ``response.output_item.added`` of a ``function_call``: its name, call id and any arguments it
  already carries (vLLM puts the first ones there); an output event of kind tool (the name is
  generated text, as in chat's ``tool_calls`` chunks);
- ``response.function_call_arguments.done`` / ``response.output_item.done``: the final arguments,
  name and call id of a call (they replace what the deltas built);
- ``response.completed`` / ``response.incomplete`` / ``response.failed``: the end (``done``), its
  ``status``, usage (``input_tokens``, ``output_tokens``, ``output_tokens_details.reasoning_tokens``,
  ``input_tokens_details.cached_tokens``) and, for ``failed``, ``response.error``; the final
  ``output`` fills in what no delta carried (calls, text, reasoning) but adds no output times;
- ``error`` (``{"type": "error", "code", "message", "param"}``, or ``{"error": {...}}``): an error.
  Everything else (``content_part.*``, ``*.done`` of text, web search, ...) is counted and ignored.

An *output event* is a delta with non-empty text (or a call's first appearance); only those get an
entry in ``chunk_times_ns`` / ``chunk_chars`` / ``chunk_kinds`` (kind ``reasoning``, ``text`` or
``tool``): TTFT ends at the first of any kind, as for chat; ``first_reasoning_ns``,
``first_text_ns``, ``first_tool_ns`` (name or arguments) and ``first_tool_arguments_ns`` are the
first of each. ``finish_reason`` mirrors chat's: ``stop``, ``tool_calls`` (completed with a function
call), ``length`` (incomplete for ``max_output_tokens``) or the incomplete reason as given.

Errors, as ``StreamResult.error_class`` reads them: an ``error`` event or ``response.failed`` is
``stream_error``; a stream that ends before a terminal event is ``truncated`` (its cut last event is
counted malformed but not held against the server); a payload that is not a JSON object is
``malformed_stream``. Nothing raises out of the decoder: a field of the wrong type is ignored.

Order: ``SSEDecoder`` hands named events apart from unnamed ones, so within one read the named
events are taken first. Servers name all events (or none); only a stream that mixed named and
unnamed output events in one read would see their text reordered (never their times).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from loadgen.parse.sse import SSEDecoder
from loadgen.parse.stream.result import KIND_REASONING, KIND_TEXT, KIND_TOOL, FunctionCall, StreamResult

_DONE = b"[DONE]"
_FIRST_MALFORMED_CHARS = 200
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


@dataclass(slots=True)
class ResponsesResult(StreamResult):
    """What one Responses API answer carried (see the module doc); a ``StreamResult`` with more.

    Inherited fields keep their meaning, with the Responses names mapped: ``server_id`` is the
    response id (also ``response_id``), ``prompt_tokens`` / ``completion_tokens`` are usage's
    ``input_tokens`` / ``output_tokens``, ``n_payloads`` counts events (``[DONE]`` excluded),
    ``done``: a terminal event arrived (always True for a whole body), ``tool_call_chunks`` and
    ``reasoning_chunks`` count output events of those kinds, ``reasoning_text_chars`` the characters
    of reasoning and summary deltas. ``chunk_tokens`` is never set (Responses usage is not per
    event), so ``token_split`` spreads ``output_tokens`` over the output events by characters.

    ``chunk_kinds`` / ``first_*`` are per output event (one kind each, see the module doc);
    ``reasoning_tokens`` is usage's ``output_tokens_details.reasoning_tokens``. ``status``: the
    response's last status (``completed``, ``incomplete``, ``failed``, ``in_progress`` when cut);
    ``incomplete_reason``: ``incomplete_details.reason``. ``ignored_events``: events taken in
    without effect (lifecycle, ``*.done`` of text, tools other than functions).
    """

    reasoning_text: str = ""
    reasoning_summary: str = ""
    refusal: str = ""
    status: str | None = None
    incomplete_reason: str | None = None
    ignored_events: int = 0

    @property
    def response_id(self) -> str | None:
        """The id to send as ``previous_response_id`` in the next turn."""
        return self.server_id

    @property
    def first_output_ns(self) -> int | None:
        """Arrival of the first output of any kind (the end of TTFT); ``first_chunk_ns``."""
        return self.chunk_times_ns[0] if self.chunk_times_ns else None


def _error_dict(obj: Any) -> dict[str, Any]:
    """An error object (``{"message", "type", "code"}``, OpenAI's event, vLLM's flat or nested)."""
    if type(obj) is dict:
        inner = obj.get("error")
        if type(inner) is dict or (type(inner) is str and "message" not in obj):
            obj = inner
    if type(obj) is dict:
        msg = obj.get("message")
        if msg is None:
            msg = obj.get("detail")
        kind = obj.get("type")
        return {
            "message": msg if type(msg) is str else ("" if msg is None else str(msg)),
            "type": None if kind == "error" else kind,  # "error" is the event's type, not the error's
            "code": obj.get("code"),
        }
    return {"message": obj if type(obj) is str else str(obj), "type": None, "code": None}


class _Call:
    """A function call being streamed: argument pieces, joined once at the end."""

    __slots__ = ("call", "final", "pieces")

    def __init__(self, item_id: str | None) -> None:
        self.call = FunctionCall(item_id=item_id)
        self.pieces: list[str] = []
        self.final: str | None = None  # the arguments a ``.done`` event stated


class ResponsesDecoder:
    """Pure, incremental decoder of one streamed ``/v1/responses`` answer (one per stream)."""

    __slots__ = (
        "_calls",
        "_calls_by_item",
        "_reasoning",
        "_refusal",
        "_result",
        "_sse",
        "_summary",
        "_text",
        "res",
    )

    def __init__(self) -> None:
        self._sse = SSEDecoder()
        self.res = ResponsesResult()
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._summary: list[str] = []
        self._refusal: list[str] = []
        self._calls: list[_Call] = []
        self._calls_by_item: dict[str, _Call] = {}
        self._result: ResponsesResult | None = None

    def feed(self, data: bytes, t_ns: int) -> bool:
        """Decode one read that returned at ``t_ns``; False once a terminal event has arrived (the
        caller may stop reading; more bytes are still taken in)."""
        payloads = self._sse.feed(data)
        named = self._sse.named
        if named:
            for name, payload in named:
                self.event(payload, t_ns, name)
            named.clear()  # decoded: the SSE decoder need not keep them
        for payload in payloads:
            self.event(payload, t_ns)
        return not self.res.done

    def event(self, payload: bytes, t_ns: int, name: str = "") -> None:
        """Take in one event's ``data`` (for a caller that runs its own SSE decoder)."""
        res = self.res
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            if payload.strip() != _DONE:
                res.n_payloads += 1
                self._bad(payload)
            return
        res.n_payloads += 1
        if type(obj) is not dict:
            self._bad(payload)
            return
        kind = obj.get("type")
        if type(kind) is not str:
            kind = name
        # The hot events first: one comparison each.
        if kind == "response.output_text.delta":
            self._delta(obj, t_ns, KIND_TEXT, self._text)
        elif kind == "response.reasoning_text.delta":
            self._delta(obj, t_ns, KIND_REASONING, self._reasoning)
        elif kind == "response.function_call_arguments.delta":
            self._arguments_delta(obj, t_ns)
        elif kind == "response.reasoning_summary_text.delta":
            self._delta(obj, t_ns, KIND_REASONING, self._summary)
        elif kind == "response.refusal.delta":
            self._delta(obj, t_ns, KIND_TEXT, self._refusal)
        elif kind == "response.output_item.added":
            if not self._item(obj.get("item"), t_ns, added=True):
                res.ignored_events += 1
        elif kind == "response.output_item.done":
            self._item(obj.get("item"), t_ns, added=False)
            res.ignored_events += 1
        elif kind == "response.function_call_arguments.done":
            self._arguments_done(obj)
        elif kind in _TERMINAL:
            self._terminal(kind, obj.get("response"), t_ns)
        elif kind == "response.created" or kind == "response.in_progress":
            self._response(obj.get("response"))
            res.ignored_events += 1
        elif kind == "error" or obj.get("error") is not None or obj.get("object") == "error":
            self._set_error(_error_dict(obj))
        else:
            res.ignored_events += 1

    def finish(self, end_ns: int) -> ResponsesResult:
        """End of stream (EOF, error or cancel at ``end_ns``): decode what the SSE decoder still
        holds and return the result. A second call returns the same result."""
        if self._result is not None:
            return self._result
        for payload in self._sse.flush():
            self.event(payload, end_ns)
        for name, payload in self._sse.named:
            self.event(payload, end_ns, name)
        self._sse.named.clear()
        res = self.res
        res.end_ns = end_ns
        self._result = self._build()
        return self._result

    # --- per event ------------------------------------------------------------------------------

    def _output(self, t_ns: int, kind: str, n_chars: int) -> None:
        res = self.res
        res.chunk_times_ns.append(t_ns)
        res.chunk_chars.append(n_chars)
        res.chunk_kinds.append(kind)
        if kind == KIND_TEXT:
            if res.first_text_ns is None:
                res.first_text_ns = t_ns
        elif kind == KIND_REASONING:
            res.reasoning_chunks += 1
            res.reasoning_text_chars += n_chars
            if res.first_reasoning_ns is None:
                res.first_reasoning_ns = t_ns
        else:
            res.tool_call_chunks += 1
            if res.first_tool_ns is None:
                res.first_tool_ns = t_ns

    def _delta(self, obj: dict[str, Any], t_ns: int, kind: str, into: list[str]) -> None:
        delta = obj.get("delta")
        if type(delta) is str and delta:
            into.append(delta)
            self._output(t_ns, kind, len(delta))

    def _call(self, item_id: Any, *, fresh: bool = False) -> _Call:
        """The call with this item id, made when new; without an id, a new call when ``fresh`` (an
        item appears), else the one being streamed (a delta or ``.done`` that names no item)."""
        key = item_id if type(item_id) is str else None
        if key is not None:
            call = self._calls_by_item.get(key)
            if call is not None:
                return call
        elif self._calls and not fresh:
            return self._calls[-1]
        call = _Call(key)
        self._calls.append(call)
        if key is not None:
            self._calls_by_item[key] = call
        return call

    def _arguments_delta(self, obj: dict[str, Any], t_ns: int) -> None:
        delta = obj.get("delta")
        if type(delta) is str and delta:
            self._call(obj.get("item_id")).pieces.append(delta)
            self._output(t_ns, KIND_TOOL, len(delta))
            if self.res.first_tool_arguments_ns is None:
                self.res.first_tool_arguments_ns = t_ns

    def _arguments_done(self, obj: dict[str, Any]) -> None:
        self.res.ignored_events += 1
        args = obj.get("arguments")
        if type(args) is str:
            call = self._call(obj.get("item_id"))
            call.final = args
            name = obj.get("name")
            if type(name) is str and name:
                call.call.name = name

    def _item(self, item: Any, t_ns: int, *, added: bool, fresh: bool | None = None) -> bool:
        """``output_item.added`` / ``.done`` of a function call (other items carry nothing that the
        deltas do not): take its name, call id and arguments. True when it was an output event."""
        if type(item) is not dict or item.get("type") != "function_call":
            return False
        call = self._call(item.get("id"), fresh=added if fresh is None else fresh)
        fc = call.call
        name = item.get("name")
        if type(name) is str and name:
            fc.name = name
        call_id = item.get("call_id")
        if type(call_id) is str and call_id:
            fc.call_id = call_id
        args = item.get("arguments")
        if type(args) is not str:
            args = ""
        if not added:
            if args or call.final is None:
                call.final = args
            return False
        # A call appears: its name (and any first arguments) are the model's first tool tokens.
        n_chars = len(fc.name or "") + len(args)
        if args:
            call.pieces.append(args)
            if self.res.first_tool_arguments_ns is None:
                self.res.first_tool_arguments_ns = t_ns
        if n_chars:
            self._output(t_ns, KIND_TOOL, n_chars)
        return n_chars > 0

    def _response(self, resp: Any) -> dict[str, Any] | None:
        """Take the id, model and status of a response object; return it when it is one."""
        if type(resp) is not dict:
            return None
        res = self.res
        rid = resp.get("id")
        if type(rid) is str and rid and res.server_id is None:
            res.server_id = rid
        model = resp.get("model")
        if type(model) is str and res.model is None:
            res.model = model
        status = resp.get("status")
        if type(status) is str:
            res.status = status
        return resp

    def _terminal(self, kind: str, resp_obj: Any, t_ns: int) -> None:
        res = self.res
        res.done = True
        resp = self._response(resp_obj)
        res.status = kind.removeprefix("response.")
        if resp is None:
            resp = {}
        usage = resp.get("usage")
        if type(usage) is dict:
            self._usage(usage)
        if kind == "response.incomplete":
            details = resp.get("incomplete_details")
            reason = details.get("reason") if type(details) is dict else None
            res.incomplete_reason = reason if type(reason) is str else None
        elif kind == "response.failed":
            err = resp.get("error")
            self._set_error(_error_dict(err) if err else {"message": "response.failed", "type": None, "code": None})
        output = resp.get("output")
        if type(output) is list:
            self._final_output(output)

    def _usage(self, usage: dict[str, Any]) -> None:
        res = self.res
        n = usage.get("input_tokens", usage.get("prompt_tokens"))
        if type(n) is int:
            res.prompt_tokens = n
        n = usage.get("output_tokens", usage.get("completion_tokens"))
        if type(n) is int:
            res.completion_tokens = n
        details = usage.get("output_tokens_details")
        if type(details) is dict:
            n = details.get("reasoning_tokens")
            if type(n) is int:
                res.reasoning_tokens = n
        details = usage.get("input_tokens_details", usage.get("prompt_tokens_details"))
        if type(details) is dict:
            n = details.get("cached_tokens")
            if type(n) is int:
                res.cached_tokens = n

    def _final_output(self, output: list[Any]) -> None:
        """Fill in, from a terminal response's ``output``, what no event carried."""
        text: list[str] = []
        reasoning: list[str] = []
        summary: list[str] = []
        refusal: list[str] = []
        calls: list[dict[str, Any]] = []
        _walk_output(output, text, reasoning, summary, refusal, calls)
        for have, got in ((self._text, text), (self._reasoning, reasoning), (self._summary, summary)):
            if not have and got:
                have += got
        if not self._refusal and refusal:
            self._refusal += refusal
        for i, item in enumerate(calls):
            item_id = item.get("id")
            if type(item_id) is str:
                if item_id in self._calls_by_item:
                    continue  # streamed already
            elif i < len(self._calls):
                continue  # no ids to match by: the i-th call streamed is this one
            self._item(item, 0, added=False, fresh=True)

    def _set_error(self, err: dict[str, Any]) -> None:
        if self.res.error is None:  # events come in order: the first is the cause
            self.res.error = err

    def _bad(self, payload: bytes) -> None:
        res = self.res
        res.malformed += 1
        if res.first_malformed is None:
            res.first_malformed = payload[: _FIRST_MALFORMED_CHARS * 4].decode("utf-8", "replace")[
                :_FIRST_MALFORMED_CHARS
            ]

    def _build(self) -> ResponsesResult:
        res = self.res
        res.text = "".join(self._text)
        res.reasoning_text = "".join(self._reasoning)
        res.reasoning_summary = "".join(self._summary)
        res.refusal = "".join(self._refusal)
        for call in self._calls:
            call.call.arguments = call.final if call.final is not None else "".join(call.pieces)
            res.function_calls.append(call.call)
        if res.done and res.error is None:
            if res.status == "incomplete":
                reason = res.incomplete_reason
                res.finish_reason = "length" if reason in (None, "max_output_tokens") else reason
            else:
                res.finish_reason = "tool_calls" if res.function_calls else "stop"
        return res


def _walk_output(
    output: list[Any],
    text: list[str],
    reasoning: list[str],
    summary: list[str],
    refusal: list[str],
    calls: list[dict[str, Any]],
) -> None:
    """Collect the texts and calls of a response's ``output`` items, in order."""
    for item in output:
        if type(item) is not dict:
            continue
        kind = item.get("type")
        if kind == "function_call":
            calls.append(item)
            continue
        if kind == "reasoning":
            parts = item.get("summary")
            if type(parts) is list:
                for part in parts:
                    if type(part) is dict and type(part.get("text")) is str:
                        summary.append(part["text"])
        content = item.get("content")
        if type(content) is not list:
            continue
        for part in content:
            if type(part) is not dict:
                continue
            ptype = part.get("type")
            value = part.get("refusal") if ptype == "refusal" else part.get("text")
            if type(value) is not str or not value:
                continue
            if ptype == "refusal":
                refusal.append(value)
            elif kind == "reasoning" or ptype == "reasoning_text":
                reasoning.append(value)
            elif kind == "message":
                text.append(value)


def parse_responses_body(body: bytes, t_first_ns: int, end_ns: int) -> ResponsesResult:
    """Decode a non-streamed ``/v1/responses`` body (a response object, or an error object).

    The whole output is one output event at ``t_first_ns`` (when the body started to arrive), of
    the first kind it holds (reasoning, then text, then tool); every ``first_*`` time of a kind
    present is ``t_first_ns``. ``done`` is True (the body was complete); a bad body shows in
    ``malformed``, a failed response or an error object in ``error``.
    """
    dec = ResponsesDecoder()
    res = dec.res
    res.end_ns = end_ns
    res.done = True
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    if type(obj) is not dict:
        dec._bad(body)
        dec._result = res
        return res
    res.n_payloads = 1
    if obj.get("object") == "error" or (obj.get("error") is not None and "output" not in obj):
        dec._set_error(_error_dict(obj))
        res.finish_reason = None
        return res
    dec._response(obj)
    status = res.status
    usage = obj.get("usage")
    if type(usage) is dict:
        dec._usage(usage)
    if status == "failed" or obj.get("error"):
        err = obj.get("error")
        dec._set_error(_error_dict(err) if err else {"message": "response failed", "type": None, "code": None})
    if status == "incomplete":
        details = obj.get("incomplete_details")
        reason = details.get("reason") if type(details) is dict else None
        res.incomplete_reason = reason if type(reason) is str else None
    output = obj.get("output")
    text: list[str] = []
    reasoning: list[str] = []
    summary: list[str] = []
    refusal: list[str] = []
    calls: list[dict[str, Any]] = []
    if type(output) is list:
        _walk_output(output, text, reasoning, summary, refusal, calls)
    dec._text, dec._reasoning, dec._summary, dec._refusal = text, reasoning, summary, refusal
    for item in calls:
        dec._item(item, t_first_ns, added=False, fresh=True)
    n_reasoning = sum(map(len, reasoning)) + sum(map(len, summary))
    n_text = sum(map(len, text)) + sum(map(len, refusal))
    n_tool = sum(len(c.call.name or "") + len(c.final or "") for c in dec._calls)
    kinds = [k for k, n in ((KIND_REASONING, n_reasoning), (KIND_TEXT, n_text), (KIND_TOOL, n_tool)) if n]
    if kinds:
        res.chunk_times_ns.append(t_first_ns)
        res.chunk_chars.append(n_reasoning + n_text + n_tool)
        res.chunk_kinds.append(kinds[0])
        if n_reasoning:
            res.reasoning_chunks = 1
            res.reasoning_text_chars = n_reasoning
            res.first_reasoning_ns = t_first_ns
        if n_text:
            res.first_text_ns = t_first_ns
        if n_tool:
            res.tool_call_chunks = 1
            res.first_tool_ns = t_first_ns
            if any(c.final for c in dec._calls):
                res.first_tool_arguments_ns = t_first_ns
    dec._result = dec._build()
    return dec._result


__all__ = [
    "KIND_REASONING",
    "KIND_TEXT",
    "KIND_TOOL",
    "FunctionCall",
    "ResponsesDecoder",
    "ResponsesResult",
    "parse_responses_body",
]
