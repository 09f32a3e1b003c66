"""Each endpoint's JSON body from one chat-form RequestSpec (spec.request.request_body)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from loadgen.spec.calls import ENDPOINTS, items_of, prompt_chars, request_body
from loadgen.spec.request import RequestSpec

TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the docs",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    },
}
IMAGE = "data:image/png;base64,iVBORw0KGgo="
AGENT_HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {
        "role": "user",
        "content": [{"type": "text", "text": "What is here?"}, {"type": "image_url", "image_url": {"url": IMAGE}}],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"q":"x"}'}}],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "result text"},
]


def body(spec: RequestSpec) -> dict[str, Any]:
    out: dict[str, Any] = orjson.loads(request_body(spec, "m"))
    return out


def test_chat_body_passes_messages_tools_and_asks_for_usage() -> None:
    spec = RequestSpec(
        messages=AGENT_HISTORY, max_tokens=64, tools=[TOOL], tool_choice="auto", extra={"temperature": 0}
    )
    b = body(spec)
    assert b["model"] == "m" and b["max_tokens"] == 64 and b["messages"] == AGENT_HISTORY
    assert b["tools"] == [TOOL] and b["tool_choice"] == "auto" and b["temperature"] == 0
    assert b["stream"] is True and b["stream_options"] == {"include_usage": True}
    assert "stream" not in body(RequestSpec(messages=AGENT_HISTORY, stream=False))


def test_completions_body_is_the_plain_text_of_the_messages() -> None:
    b = body(RequestSpec(endpoint="completions", messages=AGENT_HISTORY[:2], max_tokens=8))
    assert b["prompt"] == "You are terse.\n\nWhat is here?" and b["max_tokens"] == 8
    assert "tools" not in b and "messages" not in b
    assert body(RequestSpec(endpoint="completions", prompt="hi"))["prompt"] == "hi"


def test_responses_body_converts_parts_calls_outputs_and_tools() -> None:
    spec = RequestSpec(
        endpoint="responses", messages=AGENT_HISTORY, max_tokens=32, tools=[TOOL], tool_choice="required"
    )
    b = body(spec)
    assert b["max_output_tokens"] == 32 and "max_tokens" not in b and b["stream"] is True
    assert "stream_options" not in b  # the Responses API always reports usage in response.completed
    assert b["input"] == [
        {"role": "system", "content": "You are terse."},
        {
            "role": "user",
            "content": [{"type": "input_text", "text": "What is here?"}, {"type": "input_image", "image_url": IMAGE}],
        },
        {"type": "function_call", "call_id": "call_1", "name": "search", "arguments": '{"q":"x"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "result text"},
    ]
    fn = TOOL["function"]
    assert isinstance(fn, dict)
    assert b["tools"] == [
        {"type": "function", "name": "search", "description": "Search the docs", "parameters": fn["parameters"]}
    ]
    assert b["tool_choice"] == "required"


def test_responses_with_previous_response_id_sends_only_the_new_turns() -> None:
    spec = RequestSpec(endpoint="responses", messages=AGENT_HISTORY, previous_response_id="resp_1", new_from=3)
    b = body(spec)
    assert b["previous_response_id"] == "resp_1"
    assert b["input"] == [{"type": "function_call_output", "call_id": "call_1", "output": "result text"}]
    # the calibrator is told what was sent, not what the stored response holds
    assert prompt_chars(spec) == (len("result text"), 1)


def test_pooling_bodies() -> None:
    b = body(RequestSpec(endpoint="embeddings", inputs=["a b", "c"], extra={"dimensions": 8}))
    assert b == {"model": "m", "input": ["a b", "c"], "dimensions": 8}
    r = body(RequestSpec(endpoint="rerank", query="q?", documents=["d1", "d2", "d3"]))
    assert r == {"model": "m", "query": "q?", "documents": ["d1", "d2", "d3"]}
    assert items_of(RequestSpec(endpoint="rerank", documents=["a", "b"])) == 2
    assert items_of(RequestSpec(endpoint="embeddings", inputs=["a"])) == 1
    assert items_of(RequestSpec()) is None
    assert prompt_chars(RequestSpec(endpoint="rerank", query="q?", documents=["d1", "d2"])) == (6, 3)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_every_endpoint_has_a_body(endpoint: Any) -> None:
    spec = RequestSpec(
        endpoint=endpoint, messages=[{"role": "user", "content": "hi"}], inputs=["x"], query="q", documents=["d"]
    )
    assert body(spec)["model"] == "m"


def test_an_unknown_endpoint_is_named() -> None:
    with pytest.raises(ValueError, match="unknown endpoint 'audio'"):
        request_body(RequestSpec(endpoint="audio"), "m")  # type: ignore[arg-type]


def test_tool_definitions_and_calls_count_as_prompt_text() -> None:
    # the tools' JSON is one more message; an assistant turn's calls count by name and arguments
    spec = RequestSpec(messages=AGENT_HISTORY, tools=[TOOL])
    chars, n = prompt_chars(spec)
    text = len("You are terse.") + len("What is here?") + len("search") + len('{"q":"x"}') + len("result text")
    assert (chars, n) == (text + len(orjson.dumps([TOOL])), len(AGENT_HISTORY) + 1)
