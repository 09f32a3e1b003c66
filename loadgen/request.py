"""What one LLM call should send: the hand-off from a workload to the user and its transport."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Endpoint = Literal["chat", "completions"]

ENDPOINT_PATHS: dict[str, str] = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
}


@dataclass(slots=True)
class RequestSpec:
    """One request to send.

    ``messages`` is used for the chat endpoint, ``prompt`` for completions. ``extra`` is merged into
    the JSON body last (sampling parameters, ``ignore_eos``...). ``intended_ns`` is the open-loop
    schedule's wall-clock send time (None for closed loop: the send time is the intended time).
    ``context_tokens`` is the prompt length the workload asked for (the server's usage is truth).
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
