"""A drawn turn and the chat messages it becomes.

:class:`Turn` is what :class:`~loadgen.workload.traffic.Workload` built for one request (the text,
its requested tokens, the output length, the images), before it is rendered for an endpoint; the
functions here give its messages in chat form (the form every generative request is kept in), the
image parts of a list of messages, and the transcript a completions prompt sends instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Turn:
    """What the workload built for one request, before it is rendered for an endpoint."""

    system: str | None
    user: str
    prompt_tokens: int  # requested: the target (see :mod:`loadgen.workload.traffic`), not the size built
    max_tokens: int
    source: str
    # A dataset conversation's later user turns, with their reply lengths when known.
    followups: tuple[tuple[str, int | None], ...] = ()
    images: tuple[str, ...] = ()  # data URLs, sent after the text


def user_message(turn: Turn) -> dict[str, Any]:
    """The turn's user message: its text, or content parts (the text, then the images) when it has images."""
    if not turn.images:
        return {"role": "user", "content": turn.user}
    parts: list[dict[str, Any]] = [{"type": "text", "text": turn.user}]
    parts.extend({"type": "image_url", "image_url": {"url": url}} for url in turn.images)
    return {"role": "user", "content": parts}


def chat_messages(turn: Turn) -> list[dict[str, Any]]:
    """The turn as the first messages of a conversation: its system message (if any), then the user's."""
    messages: list[dict[str, Any]] = [user_message(turn)]
    if turn.system:
        messages.insert(0, {"role": "system", "content": turn.system})
    return messages


def count_images(messages: list[dict[str, Any]]) -> int:
    """The image parts in ``messages``."""
    n = 0
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            n += sum(1 for part in content if isinstance(part, dict) and part.get("type") == "image_url")
    return n


def transcript(messages: list[dict[str, Any]]) -> str:
    """Chat messages as one completions prompt (plain text; a single user turn is sent as is)."""
    if len(messages) == 1:
        return _content_text(messages[0]["content"])
    names = {"system": "System", "user": "User", "assistant": "Assistant"}
    lines = [f"{names.get(m['role'], m['role'])}: {_content_text(m['content'])}" for m in messages]
    return "\n\n".join(lines) + "\n\nAssistant:"


def _content_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return "" if content is None else str(content)
