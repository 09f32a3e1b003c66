"""What one LLM call should send: the hand-off from a workload to the user and its transport, where
it goes (the target URL split into its parts), and the JSON body each API defines for it. Pure: no I/O.

A workload always speaks chat: ``messages`` in the chat form (content a string, or a list of
``text`` / ``image_url`` parts; assistant turns with ``tool_calls``; ``tool`` turns with a
``tool_call_id``) and ``tools`` in the chat form (``{"type": "function", "function": {"name",
"description", "parameters"}}``). :func:`request_body` turns that into the endpoint's own shape:

- ``chat``: as is (``max_tokens``; ``stream_options.include_usage`` when streaming);
- ``completions``: the messages as one plain-text prompt (images and tools have no place there);
- ``responses``: ``input`` items (``input_text`` / ``input_image`` parts, ``function_call`` and
  ``function_call_output`` items), flat function tools, ``max_output_tokens``; with
  ``previous_response_id`` only the turns after the previous response are sent;
- ``embeddings``: ``input`` (the batch), no output length;
- ``rerank``: ``query`` and ``documents`` (vLLM's and SGLang's shape; Cohere's and Jina's too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import orjson

Endpoint = Literal["chat", "completions", "responses", "embeddings", "rerank"]
ENDPOINTS: tuple[Endpoint, ...] = ("chat", "completions", "responses", "embeddings", "rerank")

ENDPOINT_PATHS: dict[str, str] = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "responses": "/v1/responses",
    "embeddings": "/v1/embeddings",
    "rerank": "/v1/rerank",
}

# endpoints whose answer is generated text, streamed when asked (the others answer with one body)
GENERATIVE: frozenset[str] = frozenset({"chat", "completions", "responses"})


@dataclass(slots=True)
class RequestSpec:
    """One request to send.

    ``messages`` is the conversation in chat form (any generative endpoint), ``prompt`` a plain
    completions prompt. ``extra`` is merged into the JSON body last (sampling parameters,
    ``ignore_eos``...). ``intended_ns`` is the open-loop schedule's wall-clock send time (None for
    closed loop: the send time is the intended time). ``context_tokens`` is the prompt length the
    workload asked for (the server's usage is truth): for images, the text part only.

    Tool calls: ``tools`` (chat form) and ``tool_choice`` go with the request; ``max_turns`` is the
    agent loop's cap on turns (None outside an agent loop; ``conversation`` is then the task and
    ``turn`` its step). Responses API: ``previous_response_id`` chains to a stored response, and
    ``new_from`` is the index of the first message not yet held by it (the turns sent). Embeddings:
    ``inputs`` (the batch). Rerank: ``query`` and ``documents``. ``images``: image parts in
    ``messages`` (recorded; the server's usage tells their token cost).
    """

    endpoint: Endpoint = "chat"
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    max_tokens: int = 256
    stream: bool = True
    extra: dict[str, Any] = field(default_factory=dict)
    intended_ns: int | None = None
    context_tokens: int | None = None
    source: str = ""
    conversation: str | None = None
    turn: int = 0
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    max_turns: int | None = None
    previous_response_id: str | None = None
    new_from: int = 0
    inputs: list[str] | None = None
    query: str | None = None
    documents: list[str] | None = None
    images: int = 0

    @property
    def n_inputs(self) -> int | None:
        """Items of a pooling call (embedding inputs, rerank documents); None for generative calls."""
        if self.endpoint == "embeddings":
            return len(self.inputs or ())
        if self.endpoint == "rerank":
            return len(self.documents or ())
        return None


@dataclass(slots=True)
class ToolCall:
    """One tool call of a reply: what the agent loop answers with a tool result."""

    call_id: str
    name: str
    arguments: str = ""


@dataclass(slots=True)
class Reply:
    """What the workload is told of an answer: its text (None if not kept), the tool calls it made
    and, for the Responses API, the id the next turn can chain to."""

    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    response_id: str | None = None


def request_body(spec: RequestSpec, model: str) -> bytes:
    """The JSON body of ``spec`` for its endpoint (see the module doc)."""
    ep = spec.endpoint
    body: dict[str, Any] = {"model": model}
    if ep == "chat":
        body["max_tokens"] = spec.max_tokens
        body["messages"] = spec.messages or [{"role": "user", "content": spec.prompt or ""}]
        _tools(body, spec, _chat_tool)
        _stream(body, spec, usage=True)
    elif ep == "completions":
        body["max_tokens"] = spec.max_tokens
        body["prompt"] = spec.prompt if spec.prompt is not None else flatten(spec.messages)
        _stream(body, spec, usage=True)
    elif ep == "responses":
        body["max_output_tokens"] = spec.max_tokens
        messages = spec.messages or [{"role": "user", "content": spec.prompt or ""}]
        if spec.previous_response_id is not None:
            body["previous_response_id"] = spec.previous_response_id
            messages = messages[spec.new_from :]
        body["input"] = responses_input(messages)
        _tools(body, spec, _responses_tool)
        _stream(body, spec, usage=False)
    elif ep == "embeddings":
        body["input"] = list(spec.inputs or [])
    elif ep == "rerank":
        body["query"] = spec.query or ""
        body["documents"] = list(spec.documents or [])
    else:
        raise ValueError(f"unknown endpoint {ep!r}; expected one of {', '.join(ENDPOINTS)}")
    if spec.extra:
        body.update(spec.extra)
    return orjson.dumps(body)


def _stream(body: dict[str, Any], spec: RequestSpec, *, usage: bool) -> None:
    if spec.stream:
        body["stream"] = True
        if usage:
            body["stream_options"] = {"include_usage": True}


def _tools(body: dict[str, Any], spec: RequestSpec, shape: Any) -> None:
    if spec.tools:
        body["tools"] = [shape(t) for t in spec.tools]
    if spec.tool_choice is not None:
        body["tool_choice"] = spec.tool_choice


def _chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    return tool


def _responses_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """Chat's nested function tool -> the Responses API's flat one."""
    fn = tool.get("function")
    if tool.get("type") != "function" or not isinstance(fn, dict):
        return tool
    out: dict[str, Any] = {"type": "function", "name": fn.get("name")}
    if fn.get("description") is not None:
        out["description"] = fn["description"]
    out["parameters"] = fn.get("parameters") or {"type": "object", "properties": {}}
    if fn.get("strict") is not None:
        out["strict"] = fn["strict"]
    return out


def responses_input(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages -> Responses API input items."""
    items: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "tool":
            items.append(
                {"type": "function_call_output", "call_id": m.get("tool_call_id"), "output": _text_of(m.get("content"))}
            )
            continue
        content = m.get("content")
        if role == "assistant":
            text = _text_of(content)
            if text:
                items.append({"role": "assistant", "content": [{"type": "output_text", "text": text}]})
            for call in m.get("tool_calls") or ():
                fn = call.get("function") or {}
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.get("id"),
                        "name": fn.get("name"),
                        "arguments": fn.get("arguments") or "",
                    }
                )
            continue
        if isinstance(content, str):
            items.append({"role": role, "content": content})
            continue
        parts: list[dict[str, Any]] = []
        for part in content or ():
            kind = part.get("type")
            if kind == "text":
                parts.append({"type": "input_text", "text": part.get("text", "")})
            elif kind == "image_url":
                url = part.get("image_url")
                url = url.get("url") if isinstance(url, dict) else url
                parts.append({"type": "input_image", "image_url": url})
            else:
                parts.append(part)
        items.append({"role": role, "content": parts})
    return items


def _message_chars(message: dict[str, Any]) -> int:
    """A message's text, and the names and arguments of the tool calls it holds (prompt text too)."""
    n = len(_text_of(message.get("content")))
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        n += len(fn.get("name") or "") + len(fn.get("arguments") or "")
    return n


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return "" if content is None else str(content)


def flatten(messages: list[dict[str, Any]] | None) -> str:
    """Chat messages as one plain text (the completions prompt of a chat workload)."""
    if not messages:
        return ""
    return "\n\n".join(_text_of(m.get("content", "")) for m in messages)


def prompt_chars(spec: RequestSpec) -> tuple[int, int]:
    """Characters of the prompt text as sent (message text, the completions prompt, embedding
    inputs, rerank query and documents) and the number of messages or items. Tool definitions are
    prompt text too (chat templates render their JSON into the prompt): their JSON counts as one
    more message."""
    chars, n = _prompt_chars(spec)
    if spec.tools and spec.endpoint in ("chat", "responses"):
        chars += len(orjson.dumps(spec.tools))
        n += 1
    return chars, n


def _prompt_chars(spec: RequestSpec) -> tuple[int, int]:
    if spec.endpoint == "embeddings":
        inputs = spec.inputs or []
        return sum(map(len, inputs)), max(1, len(inputs))
    if spec.endpoint == "rerank":
        docs = spec.documents or []
        return len(spec.query or "") + sum(map(len, docs)), 1 + len(docs)
    if spec.endpoint != "completions" and spec.messages:
        messages = spec.messages
        if spec.endpoint == "responses" and spec.previous_response_id is not None:
            messages = messages[spec.new_from :]
        return sum(_message_chars(m) for m in messages), len(messages)
    if spec.prompt is not None:
        return len(spec.prompt), 1
    return len(flatten(spec.messages)), 1


def split_base_url(url: str) -> tuple[str, str, int, str]:
    """``http://h:p/prefix`` -> (scheme, host, port, prefix without trailing slash).

    A trailing ``/v1`` is dropped from the prefix: endpoint paths already carry it.
    """
    parts = urlsplit(url if "://" in url else "http://" + url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"--url {url!r}: the scheme must be http or https")
    if not parts.hostname:
        raise ValueError(f"--url {url!r}: no host name; expected e.g. http://127.0.0.1:30000")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    prefix = parts.path.rstrip("/")
    if prefix.endswith("/v1"):
        prefix = prefix[:-3]
    return parts.scheme, parts.hostname, port, prefix
