"""Completions (``/v1/completions``): the messages as one plain-text prompt; images and tools have
no place there."""

from __future__ import annotations

from typing import Any

from loadgen.spec.calls.base import Answer, CallType, Decoder, Inputs, no_items
from loadgen.spec.calls.text import flatten, stream
from loadgen.spec.request import RequestSpec


def _prompt_text(spec: RequestSpec) -> str:
    return spec.prompt if spec.prompt is not None else flatten(spec.messages)


def _build(spec: RequestSpec, body: dict[str, Any]) -> None:
    body["max_tokens"] = spec.max_tokens
    body["prompt"] = _prompt_text(spec)
    stream(body, spec, usage=True)


def _prompt(spec: RequestSpec) -> tuple[int, int]:
    return len(_prompt_text(spec)), 1


CALL = CallType(
    name="completions",
    path="/v1/completions",
    inputs=Inputs.PROMPT,
    answer=Answer.TEXT,
    decoder=Decoder.CHAT,
    openai_sdk=True,
    takes_tools=False,
    build=_build,
    prompt=_prompt,
    items=no_items,
)
