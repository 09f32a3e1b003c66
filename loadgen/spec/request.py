"""What one LLM call should send: the hand-off from a workload to the user and its transport
(:class:`RequestSpec`, in chat form for every call type), what the workload is told of the answer
(:class:`Reply`), and where it goes (the target URL split into its parts). Pure: no I/O.

A workload always speaks chat: ``messages`` in the chat form (content a string, or a list of
``text`` / ``image_url`` parts; assistant turns with ``tool_calls``; ``tool`` turns with a
``tool_call_id``) and ``tools`` in the chat form (``{"type": "function", "function": {"name",
"description", "parameters"}}``). Each call type turns that into its API's own body
(``spec.calls``: one module per type, ``request_body``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

# max_tokens of a call when neither a flag nor a scenario says: the one default of every surface
# (the ramp's flag, the web form, campaigns, a scenario's [output], a RequestSpec); the story's 512
DEFAULT_MAX_TOKENS = 512

# the call types' names: each has its module in spec/calls (``call_type`` matches them exhaustively)
Endpoint = Literal["chat", "completions", "responses", "embeddings", "rerank", "score"]


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
    ``messages`` (recorded; the server's usage tells their token cost). ``body``: a workload file's
    request (``workload.wfile``): the JSON body exactly as the file has it, with the run's model; the
    other fields then only describe it (for the record and the length feedback).
    """

    endpoint: Endpoint = "chat"
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
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
    tenant: str | None = None  # [[tenants]]: whose request (the record's ``tenant``)
    headers: dict[str, str] | None = None  # the tenant's extra request headers
    body: dict[str, Any] | None = None  # a workload file's request: this body is sent as it is (its model set)


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
    done_ns: int = 0  # when the answer's last bytes reached this host (wall ns; 0: not known)


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
