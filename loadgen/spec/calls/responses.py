"""The Responses API (``/v1/responses``): ``input`` items (``input_text`` / ``input_image`` parts,
``function_call`` and ``function_call_output`` items), flat function tools, ``max_output_tokens``;
with ``previous_response_id`` only the turns after the previous response are sent."""

from __future__ import annotations

from typing import Any

from loadgen.spec.calls.base import Answer, CallType, Decoder, Inputs, no_items
from loadgen.spec.calls.text import message_chars, messages_or_prompt, prompt_of, stream, text_of, tools
from loadgen.spec.request import RequestSpec


def _sent(spec: RequestSpec, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The turns a chained call sends: those after the stored response's."""
    return messages[spec.new_from :] if spec.previous_response_id is not None else messages


def _build(spec: RequestSpec, body: dict[str, Any]) -> None:
    body["max_output_tokens"] = spec.max_tokens
    if spec.previous_response_id is not None:
        body["previous_response_id"] = spec.previous_response_id
    body["input"] = responses_input(_sent(spec, messages_or_prompt(spec)))
    tools(body, spec, _tool)
    stream(body, spec, usage=False)


def _prompt(spec: RequestSpec) -> tuple[int, int]:
    if spec.messages:
        sent = _sent(spec, spec.messages)
        return sum(message_chars(m) for m in sent), len(sent)
    return prompt_of(spec, None)


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
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
                {"type": "function_call_output", "call_id": m.get("tool_call_id"), "output": text_of(m.get("content"))}
            )
            continue
        content = m.get("content")
        if role == "assistant":
            text = text_of(content)
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
        items.append({"role": role, "content": [_part(p) for p in content or ()]})
    return items


def _part(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind == "text":
        return {"type": "input_text", "text": part.get("text", "")}
    if kind == "image_url":
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, dict) else url
        return {"type": "input_image", "image_url": url}
    return part


CALL = CallType(
    name="responses",
    path="/v1/responses",
    inputs=Inputs.MESSAGES,
    answer=Answer.TEXT,
    decoder=Decoder.RESPONSES,
    openai_sdk=True,
    takes_tools=True,
    build=_build,
    prompt=_prompt,
    items=no_items,
)
