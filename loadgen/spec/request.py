"""What one LLM call should send: the hand-off from a workload to the user and its transport, and
where it goes (the target URL split into its parts). Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

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
