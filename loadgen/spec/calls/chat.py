"""Chat completions (``/v1/chat/completions``): the workload's chat form sent as it is."""

from __future__ import annotations

from typing import Any

from loadgen.spec.calls.base import Answer, CallType, Decoder, Inputs, no_items
from loadgen.spec.calls.text import messages_or_prompt, prompt_of, stream, tools
from loadgen.spec.request import RequestSpec


def _build(spec: RequestSpec, body: dict[str, Any]) -> None:
    body["max_tokens"] = spec.max_tokens
    body["messages"] = messages_or_prompt(spec)
    tools(body, spec, _tool)
    stream(body, spec, usage=True)


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    return tool


def _prompt(spec: RequestSpec) -> tuple[int, int]:
    return prompt_of(spec, spec.messages)


CALL = CallType(
    name="chat",
    path="/v1/chat/completions",
    inputs=Inputs.MESSAGES,
    answer=Answer.TEXT,
    decoder=Decoder.CHAT,
    openai_sdk=True,
    takes_tools=True,
    build=_build,
    prompt=_prompt,
    items=no_items,
)
