"""What the text call types share: the chat form's text, tools and streaming fields of a body."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loadgen.spec.request import RequestSpec


def stream(body: dict[str, Any], spec: RequestSpec, *, usage: bool) -> None:
    """``stream`` when asked; ``usage``: ask for the usage chunk (``stream_options``)."""
    if spec.stream:
        body["stream"] = True
        if usage:
            body["stream_options"] = {"include_usage": True}


def tools(body: dict[str, Any], spec: RequestSpec, shape: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """``tools`` (each chat-form tool in the type's ``shape``) and ``tool_choice``, when given."""
    if spec.tools:
        body["tools"] = [shape(t) for t in spec.tools]
    if spec.tool_choice is not None:
        body["tool_choice"] = spec.tool_choice


def messages_or_prompt(spec: RequestSpec) -> list[dict[str, Any]]:
    """The conversation in chat form: ``messages``, else the prompt as one user turn."""
    return spec.messages or [{"role": "user", "content": spec.prompt or ""}]


def text_of(content: Any) -> str:
    """A message's text: the string, or its ``text`` parts joined (images have none)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return "" if content is None else str(content)


def flatten(messages: list[dict[str, Any]] | None) -> str:
    """Chat messages as one plain text (the completions prompt of a chat workload)."""
    if not messages:
        return ""
    return "\n\n".join(text_of(m.get("content", "")) for m in messages)


def message_chars(message: dict[str, Any]) -> int:
    """A message's text, and the names and arguments of the tool calls it holds (prompt text too)."""
    n = len(text_of(message.get("content")))
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        n += len(fn.get("name") or "") + len(fn.get("arguments") or "")
    return n


def prompt_of(spec: RequestSpec, messages: list[dict[str, Any]] | None) -> tuple[int, int]:
    """Characters and messages of ``messages`` as sent; without messages, the plain prompt."""
    if messages:
        return sum(message_chars(m) for m in messages), len(messages)
    if spec.prompt is not None:
        return len(spec.prompt), 1
    return 0, 1
