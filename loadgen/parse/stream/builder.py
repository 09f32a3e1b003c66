"""The full decode of one response's payloads into a ``StreamResult`` (``_Builder``): the
semantics of every shape ``loadgen.parse.stream`` understands. Pure.

Tool calls are put together per ``index`` of choice 0's ``tool_calls`` entries, the way OpenAI,
vLLM and SGLang stream them: the first delta of a call brings its ``id``, ``type`` and
``function.name`` (and maybe arguments: SGLang may send them whole), later ones only
``function.arguments`` pieces, which are joined. An entry without an ``index`` continues the last
such call; an ``id`` other than the one its call has starts a new call (a server that reuses an
index); the same ``id`` again (servers that stamp it on every delta) continues it, and a repeated
name is not doubled. Each entry of a non-streamed ``message.tool_calls`` is a call of its own.
"""

from __future__ import annotations

from typing import Any

import orjson

from loadgen.parse.stream.result import KIND_REASONING, KIND_TEXT, KIND_TOOL, FunctionCall, StreamResult

_DONE = b"[DONE]"
_FIRST_MALFORMED_CHARS = 200
# A usage count above this is a lie, not an answer (the longest contexts are ~10M tokens): taking
# it would make a step's tok/s absurd. It is left out and the stream counted as malformed.
MAX_PLAUSIBLE_TOKENS = 100_000_000


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


class _Call:
    """A tool call being streamed: its argument pieces, joined once at the end."""

    __slots__ = ("call", "pieces")

    def __init__(self) -> None:
        self.call = FunctionCall()
        self.pieces: list[str] = []


class _Builder:
    """Mutable state of one decode; the slow path for chunks that do not match a template."""

    __slots__ = (
        "calls",
        "calls_at",
        "chars",
        "error_t",
        "kinds",
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
        self.kinds = self.res.chunk_kinds
        self.text: list[str] = []
        self.calls: list[_Call] = []
        self.calls_at: dict[int, _Call] = {}  # by the entries' index; -1: entries without one
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

    def implausible(self, key: str, value: int) -> None:
        """A usage count no answer can have: not taken (the chunks count instead), the stream is
        malformed, and the message keeps what the server said."""
        res = self.res
        res.malformed += 1
        if res.first_malformed is None:
            res.first_malformed = f"usage.{key} = {value} is outside 0..{MAX_PLAUSIBLE_TOKENS} (not counted)"

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
        text = False
        reasoning = False
        role = False
        tool = False
        held = False  # choice 0 brought an empty text and no finish reason: a token held back
        if type(choices) is list:
            for ch in choices:
                if type(ch) is not dict:
                    continue
                fr = ch.get("finish_reason")
                if fr is not None and type(fr) is str:
                    res.finish_reason = fr
                delta = ch.get("delta")
                whole = delta is None
                if whole:
                    delta = ch.get("message")
                    if delta is None:
                        t = ch.get("text")  # completions
                        if type(t) is str and t:
                            n_chars += len(t)
                            text = True
                            if ch.get("index", 0) == 0:
                                self.text.append(t)
                        continue
                if type(delta) is not dict:
                    continue
                c = delta.get("content")
                if c and type(c) is str:
                    n_chars += len(c)
                    text = True
                    if ch.get("index", 0) == 0:
                        self.text.append(c)
                elif c == "" and fr is None and ch.get("index", 0) == 0:
                    held = True
                r = delta.get("reasoning_content") or delta.get("reasoning")
                if r and type(r) is str:
                    n_chars += len(r)
                    reasoning = True
                    res.reasoning_text_chars += len(r)
                if delta.get("role"):
                    role = True
                calls = delta.get("tool_calls")
                if calls:
                    k = self.tool_calls(calls, t_ns, ch.get("index", 0) == 0, whole)
                    if k:
                        n_chars += k
                        tool = True
        if n_chars:
            self.times.append(t_ns)
            self.chars.append(n_chars)
            # One kind per chunk: the last to be generated when a chunk spans a switch (reasoning
            # ends, then the answer; tool calls come after any content).
            if tool:
                self.kinds.append(KIND_TOOL)
                res.tool_call_chunks += 1
                if res.first_tool_ns is None:
                    res.first_tool_ns = t_ns
            elif text:
                self.kinds.append(KIND_TEXT)
            else:
                self.kinds.append(KIND_REASONING)
            if text and res.first_text_ns is None:
                res.first_text_ns = t_ns
            if reasoning:
                res.reasoning_chunks += 1
                if res.first_reasoning_ns is None:
                    res.first_reasoning_ns = t_ns
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
                if held and not tool:
                    res.held_at.append(len(self.times))

    def text_with_usage(self, t_ns: int, text: str, reasoning: bool, usage: dict[str, Any]) -> None:
        """What ``obj`` does for a plain one-text chunk carrying usage (the usage-template path)."""
        res = self.res
        ct = self.take_usage(usage)
        self.times.append(t_ns)
        self.chars.append(len(text))
        # first_*_ns is already set: the template's own chunk, of this kind, went through ``obj``
        if reasoning:
            self.kinds.append(KIND_REASONING)
            res.reasoning_chunks += 1
            res.reasoning_text_chars += len(text)
        else:
            self.kinds.append(KIND_TEXT)
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
            if 0 <= pt <= MAX_PLAUSIBLE_TOKENS:
                res.prompt_tokens = pt
            else:
                self.implausible("prompt_tokens", pt)
        ct = usage.get("completion_tokens")
        if type(ct) is int and 0 <= ct <= MAX_PLAUSIBLE_TOKENS:
            res.completion_tokens = ct
        else:
            if type(ct) is int:
                self.implausible("completion_tokens", ct)
            ct = None
        details = usage.get("prompt_tokens_details")
        if details is not None and type(details) is dict:
            cached = details.get("cached_tokens")
            if type(cached) is int:
                res.cached_tokens = cached
        details = usage.get("completion_tokens_details")
        if details is not None and type(details) is dict:
            n = details.get("reasoning_tokens")
            if type(n) is int:
                res.reasoning_tokens = n
        return ct

    def tool_calls(self, calls: Any, t_ns: int, keep: bool, whole: bool) -> int:
        """Characters of names and arguments in a ``tool_calls`` list (a delta's, or a message's
        when ``whole``); notes the first arguments' time, and takes the calls in when ``keep``
        (choice 0; see the module doc)."""
        n = 0
        if type(calls) is not list:
            return 0
        for entry in calls:
            if type(entry) is not dict:
                continue
            fn = entry.get("function")
            if type(fn) is not dict:
                continue
            name = fn.get("name")
            if type(name) is str:
                n += len(name)
            args = fn.get("arguments")
            if type(args) is str and args:
                n += len(args)
                if self.res.first_tool_arguments_ns is None:
                    self.res.first_tool_arguments_ns = t_ns
            if not keep:
                continue
            call = self.call_for(entry, whole)
            fc = call.call
            if type(name) is str and name and fc.name is None:
                fc.name = name
            if type(args) is str and args:
                call.pieces.append(args)
        return n

    def call_for(self, entry: dict[str, Any], whole: bool) -> _Call:
        """The call a ``tool_calls`` entry belongs to, made when new."""
        index = entry.get("index")
        key = index if type(index) is int else -1
        cid = entry.get("id")
        if type(cid) is not str or not cid:
            cid = None
        call = self.calls_at.get(key)
        if call is None or whole or (cid is not None and call.call.call_id not in (None, cid)):
            call = _Call()
            self.calls.append(call)
            self.calls_at[key] = call
        if cid is not None and call.call.call_id is None:
            call.call.call_id = cid
        return call

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
        for call in self.calls:
            call.call.arguments = "".join(call.pieces)
            res.function_calls.append(call.call)
        tokens = self.tokens
        if self.per_chunk_ok and tokens and res.completion_tokens is not None:
            tokens[-1] += self.pending_tokens
            res.chunk_tokens = tokens
        return res
