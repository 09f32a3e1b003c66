"""What a chat or text completion request asks for, read from its JSON body.

Fields understood: ``messages`` (chat: required, a list) or ``prompt`` (completions: required),
``max_completion_tokens`` or else ``max_tokens`` (a non-negative integer; absent: up to the context
length), ``min_tokens`` (a floor on the natural length; not an integer: 0), ``ignore_eos``,
``stream`` and ``stream_options`` (``include_usage``: SGLang sends usage only when asked, vLLM
whenever ``stream_options`` is present; ``continuous_usage_stats``). Chat messages may carry image
parts (``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}``), which add
their tokens to the prompt (:mod:`loadgen.sim.images`; one that cannot be read is a 400 naming
it), and ``tools`` add theirs (:func:`loadgen.sim.text.tools_tokens`). What the answer consists of
(reasoning, tool calls) is read by :mod:`loadgen.sim.output_plan`. Other fields are ignored.
A body that breaks these rules raises :class:`BadRequest`, whose message the client gets with a 400.
Prompt tokens are estimated from the text (:func:`loadgen.sim.text.count_prompt_tokens`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from loadgen.sim.images import ImageError, prompt_images
from loadgen.sim.text import count_prompt_tokens, prompt_text, tools_tokens


class BadRequest(Exception):
    """The body cannot be served; ``message`` is what the client is told."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def read_json_object(body_raw: bytes) -> dict[str, Any]:
    """A request body that must be one JSON object; anything else raises :class:`BadRequest`
    ("Invalid JSON body: ..."), the 400 of every endpoint that reads a body."""
    try:
        body = orjson.loads(body_raw)
        if not isinstance(body, dict):
            raise ValueError("the request body must be a JSON object")
    except (orjson.JSONDecodeError, ValueError) as exc:
        raise BadRequest(f"Invalid JSON body: {exc}") from None
    return body


def body_priority(body: dict[str, Any]) -> int:
    """The body's ``priority`` (0 when absent): an integer, as vLLM's and SGLang's request models
    declare it; anything else is a 400."""
    value = body.get("priority", 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"priority must be an integer, got {value!r}")
    return value


def body_prompt_tokens(
    body: dict[str, Any], chat: bool, chars_per_token: float, measured: tuple[str, int] | None = None
) -> int:
    """The prompt tokens the simulator counts for a request body: its text's estimate
    (:func:`loadgen.sim.text.count_prompt_tokens`), and for chat its images' and tools' tokens. Written
    once for the server, the router's view of a request and the fleet's reading of a workload file.
    ``measured``: the body's :func:`~loadgen.sim.text.prompt_text`, when the caller has it. An image
    that cannot be read raises :class:`BadRequest` naming it."""
    text, n_msgs = measured if measured is not None else prompt_text(body, chat)
    tokens = count_prompt_tokens(text, n_msgs, chars_per_token)
    if chat and isinstance(body.get("messages"), list):
        try:
            images = prompt_images(body["messages"])
        except ImageError as exc:
            raise BadRequest(f"Invalid image in {exc}") from None
        tokens += sum(image.tokens for image in images) + tools_tokens(body.get("tools"), chars_per_token)
    return tokens


@dataclass(frozen=True)
class GenerateParams:
    body: dict[str, Any]
    text: str  # the prompt's text (chat: the messages' contents)
    prompt_tokens: int
    max_tokens: int | None
    min_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool


def read_params(body_raw: bytes, chat: bool, chars_per_token: float, style: str) -> GenerateParams:
    """Parse and check one request body (``style``: "sglang" or "vllm", the server imitated)."""
    body = read_json_object(body_raw)
    if chat and not isinstance(body.get("messages"), list):
        raise BadRequest("Field 'messages' is required and must be a list.")
    if not chat and "prompt" not in body:
        raise BadRequest("Field 'prompt' is required.")
    measured = prompt_text(body, chat)
    text = measured[0]
    prompt_tokens = body_prompt_tokens(body, chat, chars_per_token, measured)
    body_priority(body)  # checked here: a bad priority is a 400 before anything is queued
    max_tokens = body.get("max_completion_tokens")
    if max_tokens is None:
        max_tokens = body.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 0):
        raise BadRequest(f"max_tokens must be a non-negative integer, got {max_tokens!r}")
    min_tokens = body.get("min_tokens") or 0
    if not isinstance(min_tokens, int):
        min_tokens = 0
    sent = body.get("stream_options")
    opts = sent if isinstance(sent, dict) else {}
    return GenerateParams(
        body=body,
        text=text,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=bool(body.get("ignore_eos")),
        stream=bool(body.get("stream")),
        include_usage=bool(opts.get("include_usage", style == "vllm" and isinstance(sent, dict))),
        continuous_usage=bool(opts.get("continuous_usage_stats")),
    )
