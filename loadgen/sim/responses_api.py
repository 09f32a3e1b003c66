"""The OpenAI Responses API (``POST /v1/responses``) on the simulator: request, events, stored turns.

Request (:func:`read_responses_request`): ``input`` a string (one user message) or a non-empty list
of items: messages (``type`` "message" or absent; ``role`` user, system, developer or assistant;
``content`` a string or a list of ``input_text`` / ``output_text`` parts, their ``text`` joined) and
``function_call_output`` items (a tool message carrying ``output``); ``instructions`` (a system
message put first; not carried to later turns, as OpenAI documents); ``max_output_tokens`` (a
non-negative integer; absent: up to the context length); ``stream``; ``store`` (default true);
``previous_response_id``; ``model`` (accepted, the served name answered); ``temperature`` and
``top_p`` (echoed, no effect); ``ignore_eos`` and ``min_tokens`` as for chat. The prompt is the chat
prompt of those messages: the same token estimate, the same prefix-cache blocks and the same engine
request, so a Responses call costs what a chat call with the same messages costs. A body that breaks
these rules raises :class:`~loadgen.sim.params.BadRequest` (400); an unknown ``previous_response_id``
raises :class:`UnknownResponse` (404, vLLM's wording; 400 when it does not begin with ``resp``).

Turns (:class:`ResponseStore`): a stored response keeps its conversation: its input messages (without
its instructions), then its answer as an assistant message. ``previous_response_id`` puts that
conversation before the new input (after the new instructions), so the prompt grows turn by turn and
continues the previous prompt + answer byte for byte, which the prefix cache holds once the previous
turn ended (:mod:`loadgen.sim.continuation`). The store keeps the last :data:`STORE_LIMIT` responses
(least recently used out first), finished ones only (completed or incomplete; not failed, aborted or
``store: false``).

Ids: ``resp_<X-Request-Id>`` when the header is given (else ``resp_<32 hex>``), ``msg_<24 hex>`` for
the message item. The engine request, the ``x-request-id`` response header and the emission log use
the header's value (else the response id), as chat does.

Stream (``stream: true``): SSE ``event: <type>`` + ``data: <JSON>`` whose JSON repeats ``type`` and
carries ``sequence_number`` (0, 1, ...). ``response.created`` and ``response.in_progress`` when the
request is accepted; with the first tokens ``response.output_item.added`` (the message item) and
``response.content_part.added``; one ``response.output_text.delta`` per emission that carries tokens
(every token one engine step committed); at the end ``response.output_text.done``,
``response.content_part.done``, ``response.output_item.done`` and ``response.completed`` with the whole
response and usage (``response.incomplete``, ``incomplete_details.reason`` "max_output_tokens", when
the output reached its cap). No ``[DONE]``. Not streamed: the response object as one JSON body.

Faults (the chat stream's, counted in deltas; :class:`~loadgen.sim.streams.Response` ``stall_at``,
``malformed_at``, ``error_at``): after K deltas nothing more is sent and the connection stays open;
delta K+1 is cut short mid-JSON (the stream goes on); after K deltas a ``response.failed`` event
(``status`` failed, ``error.code`` server_error) ends the stream and the request is aborted. An engine
abort (a request that can never fit the KV pool) ends a stream with an ``error`` event, a body with a
500. A non-streamed call gets no stream faults (as chat).

Reasoning, tool calls, images (:mod:`loadgen.sim.output_plan`, :mod:`loadgen.sim.images`):
``reasoning: {"effort": ...}``, ``tools`` (flat or chat form) and ``tool_choice``, ``input_image``
parts (data URLs; kept as chat ``image_url`` parts in the messages) and ``function_call`` /
``reasoning`` input items. A reasoning answer has a ``reasoning`` output item first (events
``output_item.added``, ``content_part.added`` of a ``reasoning_text`` part,
``response.reasoning_text.delta``, ``reasoning_text.done``, ``content_part.done``,
``output_item.done``), the answer item then at ``output_index`` 1. A call is a ``function_call``
item (``output_item.added`` with empty arguments, ``response.function_call_arguments.delta`` per
emission, ``function_call_arguments.done``, ``output_item.done``); it is stored as an assistant
message with ``tool_calls``. The faults count emissions of any kind.

Emission log: one line per event written, right before its write; ``kind`` is the event type without
``response.`` (``created``, ``in_progress``, ``output_item.added``, ...) except ``content`` for a delta
(``tokens``: its tokens; ``output_kind`` reasoning, text or tool) and ``error`` for ``error`` and
``response.failed``; a function_call's ``output_item.added`` has ``output_kind`` tool. Not streamed:
no line.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson

from loadgen.sim.bodies import error_body
from loadgen.sim.engine import ABORTED, Emission, SimRequest
from loadgen.sim.http import Connection
from loadgen.sim.images import ImageError, prompt_images, read_image
from loadgen.sim.output_plan import OutputPlan, ToolAsk, read_effort, read_tools
from loadgen.sim.params import BadRequest, read_json_object
from loadgen.sim.streams import Responder, Response
from loadgen.sim.text import count_prompt_tokens, prompt_text, tools_tokens

STORE_LIMIT = 10_000
ROLES = ("user", "system", "developer", "assistant")
TEXT_PARTS = ("input_text", "output_text", "text")
DELTA = "response.output_text.delta"
MALFORMED_DELTA = b'event: response.output_text.delta\ndata: {"type":"response.output_text.del\n\n'

Message = dict[str, Any]  # a chat message: role, content (a string or chat content parts), tool_calls


class UnknownResponse(Exception):
    """``previous_response_id`` names no stored response; ``status`` 404 (400: not a ``resp`` id)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def unknown_response_body(style: str, exc: UnknownResponse) -> bytes:
    """vLLM's error for an unknown response id (``param`` names it), in the imitated server's shape."""
    err = {"message": exc.message, "type": "invalid_request_error", "param": "response_id", "code": exc.status}
    return orjson.dumps({"error": err} if style == "vllm" else {"object": "error", **err})


class ResponseStore:
    """The last ``limit`` finished responses' conversations, by response id (LRU)."""

    def __init__(self, limit: int = STORE_LIMIT) -> None:
        self.limit = limit
        self._conversations: OrderedDict[str, list[Message]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._conversations)

    def get(self, response_id: str) -> list[Message] | None:
        conversation = self._conversations.get(response_id)
        if conversation is not None:
            self._conversations.move_to_end(response_id)
        return conversation

    def put(self, response_id: str, conversation: list[Message]) -> None:
        self._conversations[response_id] = conversation
        self._conversations.move_to_end(response_id)
        while len(self._conversations) > self.limit:
            self._conversations.popitem(last=False)


@dataclass(frozen=True)
class ResponsesRequest:
    """What one ``/v1/responses`` body asks for (see the module doc)."""

    messages: list[Message]  # the prompt as chat messages: instructions, earlier turns, this input
    conversation: list[Message]  # the same without this request's instructions (what is stored)
    text: str  # the messages' contents, joined
    prompt_tokens: int
    max_output_tokens: int | None
    min_tokens: int
    ignore_eos: bool
    stream: bool
    store: bool
    instructions: str | None
    previous_response_id: str | None
    temperature: float
    top_p: float
    effort: str | None = None  # reasoning.effort (output_plan)
    tools: ToolAsk | None = None
    tools_raw: list[Any] | None = None  # the body's tools, echoed and in the prompt
    tool_choice: Any = "auto"  # echoed


def read_responses_request(body_raw: bytes, chars_per_token: float, store: ResponseStore) -> ResponsesRequest:
    """Parse and check one body; earlier turns come from ``store``."""
    body = read_json_object(body_raw)
    if "input" not in body:
        raise BadRequest("Field 'input' is required.")
    new_input = _input_messages(body["input"])
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise BadRequest(f"Field 'instructions' must be a string, got {instructions!r}.")
    max_tokens = body.get("max_output_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 0):
        raise BadRequest(f"max_output_tokens must be a non-negative integer, got {max_tokens!r}")
    previous = body.get("previous_response_id")
    earlier: list[Message] = []
    if previous is not None:
        if not isinstance(previous, str) or not previous.startswith("resp"):
            raise UnknownResponse(400, f"Invalid 'response_id': '{previous}'. Expected an ID that begins with 'resp'.")
        found = store.get(previous)
        if found is None:
            raise UnknownResponse(404, f"Response with id '{previous}' not found.")
        earlier = found
    conversation = [*earlier, *new_input]
    messages = [{"role": "system", "content": instructions}, *conversation] if instructions else conversation
    text, _ = prompt_text({"messages": messages}, True)
    min_tokens = body.get("min_tokens") or 0
    store_it = body.get("store", True)
    effort = read_effort(body, responses=True)
    tools = read_tools(body)
    raw_tools = body.get("tools") if tools is not None else None
    try:
        image_tokens = sum(image.tokens for image in prompt_images(messages))
    except ImageError as exc:  # not reached: input images were read above, stored ones earlier
        raise BadRequest(f"Invalid image in {exc}") from None
    prompt_tokens = count_prompt_tokens(text, len(messages), chars_per_token) + image_tokens
    return ResponsesRequest(
        messages=messages,
        conversation=conversation,
        text=text,
        prompt_tokens=prompt_tokens + tools_tokens(raw_tools, chars_per_token),
        max_output_tokens=max_tokens,
        min_tokens=min_tokens if isinstance(min_tokens, int) else 0,
        ignore_eos=bool(body.get("ignore_eos")),
        stream=bool(body.get("stream")),
        store=store_it is None or bool(store_it),
        instructions=instructions,
        previous_response_id=previous,
        temperature=_number(body.get("temperature"), 1.0),
        top_p=_number(body.get("top_p"), 1.0),
        effort=effort,
        tools=tools,
        tools_raw=raw_tools,
        tool_choice=body.get("tool_choice") or "auto",
    )


def _number(value: Any, default: float) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def _input_messages(value: Any) -> list[Message]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise BadRequest("Field 'input' must be a string or a non-empty list of input items.")
    out: list[Message] = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise BadRequest(f"input[{i}] must be an object (an input item), got {item!r}.")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ROLES:
                raise BadRequest(f"input[{i}].role must be one of {', '.join(ROLES)}; got {role!r}.")
            out.append({"role": role, "content": _content(item.get("content"), i)})
        elif kind == "function_call_output":
            output = item.get("output")
            if not isinstance(output, str):
                raise BadRequest(f"input[{i}].output must be a string, got {output!r}.")
            out.append({"role": "tool", "content": output})
        elif kind == "function_call":  # an earlier call given back: an assistant message with it
            name, arguments = item.get("name"), item.get("arguments")
            if not isinstance(name, str) or not isinstance(arguments, str):
                raise BadRequest(f"input[{i}] (a function_call) needs string 'name' and 'arguments'.")
            call = {"type": "function", "function": {"name": name, "arguments": arguments}}
            out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "reasoning":
            continue  # earlier reasoning: chat templates drop it from later prompts
        else:
            raise BadRequest(
                f"input[{i}].type {kind!r} is not served by the simulator "
                "(message, function_call, function_call_output, reasoning are)."
            )
    return out


def _content(content: Any, i: int) -> str | list[dict[str, Any]]:
    """A message's content: its text joined, or chat content parts when it holds an image."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest(f"input[{i}].content must be a string or a list of input_text parts, got {content!r}.")
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "input_image":
            url = part.get("image_url")
            try:
                read_image(url if isinstance(url, str) else "")
            except ImageError as exc:
                raise BadRequest(f"Invalid image in input[{i}].content[{j}]: {exc}") from None
            parts.append({"type": "image_url", "image_url": {"url": url}})
            continue
        text = part.get("text") if isinstance(part, dict) else None
        if kind not in TEXT_PARTS or not isinstance(text, str):
            raise BadRequest(
                f"input[{i}].content[{j}] must be an input_text part with a string 'text' or an input_image "
                f"part, got {part!r}."
            )
        parts.append({"type": "text", "text": text})
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


class ApiResponse(Response):
    """A Responses API call's state (a :class:`Response` whose ``framing`` is :class:`ResponsesFraming`)."""

    __slots__ = (
        "answer_index", "created_at", "delta_head", "delta_mid", "fc_id", "msg_id", "opened", "reasoning_state",
        "request", "resp_id", "rs_id", "seq",
    )  # fmt: skip

    request: ResponsesRequest
    resp_id: str
    msg_id: str
    rs_id: str  # the reasoning item's id (a plan with reasoning)
    fc_id: str  # the function_call item's id (a plan with a call)
    answer_index: int  # output_index of the message / function_call item (1 after a reasoning item)
    created_at: int
    delta_head: bytes  # a delta event up to its text
    delta_mid: bytes  # from after its text up to its sequence number
    seq: int  # the next event's sequence_number
    opened: bool  # output_item.added and content_part.added were sent
    reasoning_state: int  # 0: no reasoning item yet, 1: open, 2: done


def _usage(prompt: int, generated: int, cached: int, reasoning: int) -> dict[str, Any]:
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": generated,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + generated,
    }


class ResponsesFraming:
    """Writes Responses API calls (the :class:`~loadgen.sim.streams.Framing` of their
    :class:`ApiResponse`); stores finished ones in ``store``. Text, emission log, clock and engine
    are the ``responder``'s."""

    def __init__(self, responder: Responder, store: ResponseStore) -> None:
        self.responder = responder
        self.store = store
        self.take = responder.text.take

    def open(
        self,
        conn: Connection,
        rid: str,
        resp_id: str,
        request: ResponsesRequest,
        stall_at: int,
        malformed_at: int,
        error_at: int,
        plan: OutputPlan | None = None,
    ) -> ApiResponse:
        """The state of a new call on ``conn`` (engine request id ``rid``); nothing is written yet."""
        st = ApiResponse()
        st.conn, st.rid, st.resp_id, st.request = conn, rid, resp_id, request
        st.chat = True  # its prompt is chat messages (the prefix-cache continuation reads this)
        st.stream = False  # not framed by the Responder: it hands every emission to ``framing``
        st.framing = self
        st.keep_text = True
        st.plan = plan
        st.prompt_tokens = request.prompt_tokens
        st.stall_at, st.malformed_at, st.error_at = stall_at, malformed_at, error_at
        st.msg_id = "msg_" + uuid.uuid4().hex[:24]
        st.rs_id = "rs_" + uuid.uuid4().hex[:24] if plan is not None and plan.effort is not None else ""
        st.fc_id = "fc_" + uuid.uuid4().hex[:24] if plan is not None and plan.call is not None else ""
        st.answer_index = 1 if st.rs_id else 0
        st.created_at = int(time.time())
        st.seq = 0
        st.opened = False
        st.reasoning_state = 0
        st.delta_head = (
            b"event: " + DELTA.encode() + b'\ndata: {"type":"' + DELTA.encode() + b'","content_index":0,"delta":"'
        )
        st.delta_mid = (
            b'","item_id":"' + st.msg_id.encode() + b'","logprobs":[],"output_index":%d,"sequence_number":'
        ) % st.answer_index
        return st

    def start(self, st: ApiResponse) -> None:
        """A streamed call's head and its ``response.created`` / ``response.in_progress`` events."""
        if not st.request.stream:
            return
        st.conn.start_stream(st.rid)
        obj = self._response(st, "in_progress", [], None)
        out = self._event(st, "response.created", {"response": obj})
        out += self._event(st, "response.in_progress", {"response": obj})
        st.conn.write_chunk(out)

    # -- per emission -------------------------------------------------------------------------

    def deliver(self, st: Response, em: Emission) -> None:
        assert isinstance(st, ApiResponse)
        req = em.req
        if req.state == ABORTED:
            self._aborted(st, req.abort_message or "The request was aborted.")
            return
        if not st.request.stream:
            if em.tokens:
                if st.plan is not None:
                    self.responder.take_planned(st, em)
                elif st.pending is not None:
                    st.pending = None  # already in pieces
                else:
                    st.pieces.append(self.take(em.tokens))
            if em.finished:
                self._finish_body(st, req)
            return
        conn = st.conn
        if conn.closed:
            return
        if em.tokens:
            st.chunks += 1
            if st.stall_at >= 0 and st.chunks > st.stall_at:
                if em.finished:
                    st.done = True
                return
            if st.error_at >= 0 and st.chunks > st.error_at:
                self._failed(st, req, "Simulated internal error while generating (--error-after-chunks).")
                self.responder.engine.abort(st.rid, self.responder.clock(), "fault")
                return
            if st.plan is not None:
                conn.write_chunk(self._planned_events(st, em))
            else:
                if st.pending is not None:
                    text, st.pending = st.pending, None
                else:
                    text = self.take(em.tokens)
                    st.pieces.append(text)
                out = b"" if st.opened else self._open_item(st)
                if st.malformed_at >= 0 and st.chunks == st.malformed_at + 1:
                    payload = MALFORMED_DELTA
                else:
                    payload = st.delta_head + text + st.delta_mid + b"%d}\n\n" % st.seq
                st.seq += 1
                self.responder.log_emission(st, em.tokens, "content", "text")
                conn.write_chunk(out + payload)
        if em.finished:
            self._finish_stream(st, req)

    def _planned_events(self, st: ApiResponse, em: Emission) -> bytes:
        """The events of one emission of a streamed answer with a plan: reasoning deltas in the
        reasoning item, then text deltas in the message item or argument deltas in the call's."""
        plan = st.plan
        assert plan is not None
        before = em.req.generated - em.tokens
        n_reason, n_answer = plan.split(before, em.tokens)
        reasoning, text = self.responder.take_planned(st, em)
        malformed = st.malformed_at >= 0 and st.chunks == st.malformed_at + 1
        out = b""
        if n_reason:
            if st.reasoning_state == 0:
                out += self._open_reasoning(st)
            if malformed:
                self.responder.log_emission(st, em.tokens, "content", "reasoning")
                return out + MALFORMED_DELTA
            ids = {"content_index": 0, "item_id": st.rs_id, "output_index": 0}
            out += self._event(
                st, "response.reasoning_text.delta", {**ids, "delta": reasoning.decode()}, "content", n_reason,
                "reasoning",
            )  # fmt: skip
        if n_answer:
            out += self._close_reasoning(st)
            call = plan.call
            kind = "text" if call is None else "tool"
            if call is None:
                if not st.opened:
                    out += self._open_item(st)
            elif not st.tool_open:
                out += self._open_call(st)
            if malformed:
                self.responder.log_emission(st, n_answer, "content", kind)
                return out + MALFORMED_DELTA
            if call is None:
                out += st.delta_head + text + st.delta_mid + b"%d}\n\n" % st.seq
                st.seq += 1
                self.responder.log_emission(st, n_answer, "content", "text")
            else:
                piece = call.piece(before + n_reason - plan.reasoning_tokens, n_answer)
                ids = {"item_id": st.fc_id, "output_index": st.answer_index}
                out += self._event(
                    st, "response.function_call_arguments.delta", {**ids, "delta": piece}, "content", n_answer, "tool"
                )
        return out

    # -- events -------------------------------------------------------------------------------

    def _event(
        self,
        st: ApiResponse,
        kind: str,
        fields: dict[str, Any],
        log_kind: str = "",
        tokens: int = 0,
        output_kind: str = "",
    ) -> bytes:
        """One SSE event (its sequence number taken) and its emission-log line."""
        obj = {"type": kind, **fields, "sequence_number": st.seq}
        st.seq += 1
        self.responder.log_emission(st, tokens, log_kind or kind.removeprefix("response."), output_kind)
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"

    def _open_item(self, st: ApiResponse) -> bytes:
        st.opened = True
        item = {"id": st.msg_id, "content": [], "role": "assistant", "status": "in_progress", "type": "message"}
        part = {"annotations": [], "text": "", "type": "output_text", "logprobs": []}
        out = self._event(st, "response.output_item.added", {"output_index": st.answer_index, "item": item})
        ids = {"content_index": 0, "item_id": st.msg_id, "output_index": st.answer_index}
        return out + self._event(st, "response.content_part.added", {**ids, "part": part})

    def _open_reasoning(self, st: ApiResponse) -> bytes:
        st.reasoning_state = 1
        item = {"id": st.rs_id, "type": "reasoning", "summary": [], "content": [], "status": "in_progress"}
        out = self._event(st, "response.output_item.added", {"output_index": 0, "item": item})
        ids = {"content_index": 0, "item_id": st.rs_id, "output_index": 0}
        return out + self._event(st, "response.content_part.added", {**ids, "part": _reasoning_part("")})

    def _close_reasoning(self, st: ApiResponse) -> bytes:
        """The reasoning item's end events (nothing when it is not open)."""
        if st.reasoning_state != 1:
            return b""
        st.reasoning_state = 2
        item = self._reasoning_item(st)
        text = item["content"][0]["text"]
        ids = {"content_index": 0, "item_id": st.rs_id, "output_index": 0}
        out = self._event(st, "response.reasoning_text.done", {**ids, "text": text})
        out += self._event(st, "response.content_part.done", {**ids, "part": _reasoning_part(text)})
        return out + self._event(st, "response.output_item.done", {"output_index": 0, "item": item})

    def _open_call(self, st: ApiResponse) -> bytes:
        st.tool_open = True
        item = self._call_item(st, "in_progress", "")
        return self._event(
            st, "response.output_item.added", {"output_index": st.answer_index, "item": item}, output_kind="tool"
        )

    def _reasoning_item(self, st: ApiResponse) -> dict[str, Any]:
        text = b"".join(st.reasoning).decode()
        return {"id": st.rs_id, "type": "reasoning", "summary": [], "content": [_reasoning_part(text)],
                "encrypted_content": None, "status": "completed"}  # fmt: skip

    def _call_item(self, st: ApiResponse, status: str, arguments: str) -> dict[str, Any]:
        call = st.plan.call if st.plan is not None else None
        assert call is not None
        return {"id": st.fc_id, "type": "function_call", "call_id": call.call_id, "name": call.name,
                "arguments": arguments, "status": status}  # fmt: skip

    def _arguments(self, st: ApiResponse, req: SimRequest) -> str:
        """The call's arguments generated so far."""
        plan = st.plan
        assert plan is not None and plan.call is not None
        return plan.call.piece(0, max(0, req.generated - plan.reasoning_tokens))

    def _response(
        self,
        st: ApiResponse,
        status: str,
        output: list[dict[str, Any]],
        usage: dict[str, Any] | None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The response object (OpenAI's fields, as vLLM fills them)."""
        r = st.request
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        reasoning = {"effort": r.effort, "summary": None} if r.effort is not None else None
        return {
            "id": st.resp_id, "created_at": st.created_at, "error": error, "incomplete_details": incomplete,
            "instructions": r.instructions, "metadata": None, "model": self.responder.model_name,
            "object": "response", "output": output, "parallel_tool_calls": True, "temperature": r.temperature,
            "tool_choice": r.tool_choice, "tools": r.tools_raw or [], "top_p": r.top_p, "background": False,
            "max_output_tokens": r.max_output_tokens, "max_tool_calls": None,
            "previous_response_id": r.previous_response_id, "prompt": None, "reasoning": reasoning,
            "service_tier": "auto", "status": status, "store": r.store, "text": None, "top_logprobs": None,
            "truncation": "disabled", "usage": usage, "user": None,
        }  # fmt: skip

    def _final(self, st: ApiResponse, req: SimRequest) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
        """(status, output items, response object) of a call that ended; stores it when asked.
        The output: the reasoning item (reasoning asked for), then the message item or, for an
        answer that calls a tool, the function_call item (none when the cap came before it)."""
        text = b"".join(st.pieces).decode()
        status = "incomplete" if req.finish_reason == "length" else "completed"
        output: list[dict[str, Any]] = []
        if st.rs_id:
            output.append(self._reasoning_item(st))
        plan = st.plan
        answer: Message = {"role": "assistant", "content": text}
        if plan is not None and plan.call is not None:
            arguments = self._arguments(st, req)
            if req.generated > plan.reasoning_tokens:
                output.append(self._call_item(st, status, arguments))
            call = {"type": "function", "function": {"name": plan.call.name, "arguments": arguments}}
            answer = {"role": "assistant", "content": "", "tool_calls": [call]}
        else:
            part: dict[str, Any] = {"annotations": [], "text": text, "type": "output_text", "logprobs": None}
            item = {"id": st.msg_id, "content": [part], "role": "assistant", "status": status, "type": "message"}
            output.append(item)
        usage = _usage(st.prompt_tokens, req.generated, req.cached_tokens, st.reasoning_done())
        if st.request.store:
            self.store.put(st.resp_id, [*st.request.conversation, answer])
        return status, output, self._response(st, status, output, usage)

    def _finish_stream(self, st: ApiResponse, req: SimRequest) -> None:
        out = self._close_reasoning(st)
        plan = st.plan
        calling = plan is not None and plan.call is not None
        if not calling and not st.opened:
            out += self._open_item(st)
        status, output, obj = self._final(st, req)
        last = output[-1] if output else None
        if calling and st.tool_open:
            assert last is not None and plan is not None and plan.call is not None
            ids = {"item_id": st.fc_id, "output_index": st.answer_index}
            done = {**ids, "arguments": last["arguments"], "name": plan.call.name}
            out += self._event(st, "response.function_call_arguments.done", done)
            out += self._event(st, "response.output_item.done", {"output_index": st.answer_index, "item": last})
        elif not calling:
            assert last is not None
            part: dict[str, Any] = last["content"][0]
            ids = {"content_index": 0, "item_id": st.msg_id, "output_index": st.answer_index}
            out += self._event(st, "response.output_text.done", {**ids, "logprobs": [], "text": part["text"]})
            out += self._event(st, "response.content_part.done", {**ids, "part": part})
            out += self._event(st, "response.output_item.done", {"output_index": st.answer_index, "item": last})
        out += self._event(st, "response." + status, {"response": obj})
        st.done = True
        st.conn.write_chunk(out)
        st.conn.end_response()

    def _finish_body(self, st: ApiResponse, req: SimRequest) -> None:
        st.done = True
        _, _, obj = self._final(st, req)
        st.conn.end_plain(200, orjson.dumps(obj), extra=self._id_header(st))

    def _failed(self, st: ApiResponse, req: SimRequest, message: str) -> None:
        """End a stream with ``response.failed`` (the error fault)."""
        usage = _usage(st.prompt_tokens, req.generated, req.cached_tokens, st.reasoning_done())
        obj = self._response(st, "failed", [], usage, {"code": "server_error", "message": message})
        st.done = True
        st.conn.write_chunk(self._event(st, "response.failed", {"response": obj}, "error"))
        st.conn.end_response()

    def _aborted(self, st: ApiResponse, message: str) -> None:
        """The engine aborted the request: an ``error`` event ends a stream, a body gets a 500."""
        st.done = True
        if not st.request.stream:
            body = error_body(self.responder.style, 500, message, "InternalServerError")
            st.conn.end_plain(500, body, extra=self._id_header(st))
            return
        fields = {"code": "server_error", "message": message, "param": None}
        st.conn.write_chunk(self._event(st, "error", fields, "error"))
        st.conn.end_response()

    @staticmethod
    def _id_header(st: ApiResponse) -> bytes:
        return b"x-request-id: " + st.rid.encode("latin-1", "replace") + b"\r\n"


def _reasoning_part(text: str) -> dict[str, Any]:
    return {"type": "reasoning_text", "text": text}
