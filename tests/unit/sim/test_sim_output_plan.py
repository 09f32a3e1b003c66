"""The simulator's answer plans (reasoning, tool calls) and image token rule, without a server."""

from __future__ import annotations

import json
import random

import pytest
from sim_media import data_url, jpeg, png

from loadgen.sim.images import ImageError, image_marker, image_size, image_tokens, prompt_images, read_image
from loadgen.sim.output_plan import (
    ToolAsk,
    decide_call,
    plan_output,
    read_effort,
    read_tools,
    reasoning_tokens,
    sample_value,
)
from loadgen.sim.params import BadRequest

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "ratio": {"type": "number", "minimum": 0, "maximum": 1},
        "metric": {"type": "boolean"},
        "unit": {"type": "string", "enum": ["c", "f"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "where": {"type": "object", "properties": {"lat": {"type": "number"}}, "required": ["lat", "alt"]},
        "note": {"type": ["string", "null"]},
        "pick": {"anyOf": [{"type": "null"}, {"type": "integer"}]},
    },
    "required": ["city", "extra"],
}


def test_image_tokens_follow_qwen2_vl_smart_resize() -> None:
    assert image_tokens(448, 448) == 16 * 16 + 2
    assert image_tokens(28, 28) == 2 * 2 + 2  # lifted to the 4*28*28 pixel floor
    assert image_tokens(10, 10) == 2 * 2 + 2
    assert image_tokens(4000, 4000) == 35 * 35 + 2  # scaled into 1280*28*28 pixels
    assert image_tokens(1000, 500) == 36 * 18 + 2  # sides rounded to multiples of 28
    assert image_tokens(100_000, 50) <= 1280 + 2


def test_headers_are_read_from_png_and_jpeg_bytes() -> None:
    assert image_size(png(640, 480)) == (640, 480)
    assert image_size(jpeg(1000, 500)) == (1000, 500)
    assert image_size(jpeg(333, 777, progressive=True)) == (333, 777)
    img = read_image(data_url(jpeg(448, 448), "image/jpeg"))
    assert (img.width, img.height, img.tokens) == (448, 448, 258)
    for bad in (b"GIF89a....", png(0, 10), b"\x89PNG\r\n\x1a\n\x00", b"\xff\xd8\xff\xd9"):
        with pytest.raises(ImageError):
            image_size(bad)
    with pytest.raises(ImageError, match="not fetched"):
        read_image("https://example.com/cat.png")
    with pytest.raises(ImageError, match=r"messages\[1\]\.content\[0\]"):
        prompt_images([{"content": "x"}, {"content": [{"type": "image_url", "image_url": {"url": "file:///a"}}]}])


def test_image_markers_differ_by_image_and_span_their_tokens() -> None:
    a, b = data_url(png(448, 448)), data_url(png(448, 449))
    assert image_marker(a, 4.0) != image_marker(b, 4.0)
    assert len(image_marker(a, 4.0)) == 258 * 4


def test_effort_from_each_request_form() -> None:
    assert read_effort({"reasoning_effort": "high"}, False) == "high"
    assert read_effort({"reasoning_effort": "minimal"}, False) == "low"
    assert read_effort({"chat_template_kwargs": {"enable_thinking": True}}, False) == "medium"
    assert read_effort({"chat_template_kwargs": {"thinking": True}}, False) == "medium"
    assert read_effort({"chat_template_kwargs": {"enable_thinking": False}, "reasoning_effort": "high"}, False) is None
    assert read_effort({}, False) is None
    assert read_effort({"reasoning": {"effort": "low"}}, True) == "low"
    assert read_effort({"reasoning_effort": "low"}, True) is None  # a chat field on /v1/responses
    with pytest.raises(BadRequest, match="reasoning_effort"):
        read_effort({"reasoning_effort": "max"}, False)


def test_reasoning_share_of_the_cap() -> None:
    assert [reasoning_tokens(e, 100, 100) for e in ("low", "medium", "high")] == [25, 50, 75]
    assert reasoning_tokens("high", 2, 2) == 1  # one answer token left
    assert reasoning_tokens("low", 1, 1) == 0
    assert reasoning_tokens("medium", None, 100_000) == 2048  # no max_tokens: a 4096 base
    assert reasoning_tokens(None, 100, 100) == 0
    target, reason, plan = plan_output(100, 100, 0, True, "low", None)
    assert (target, reason) == (100, "length") and plan is not None and plan.split(20, 10) == (5, 5)
    target, reason, plan = plan_output(100, 100, 30, False, "low", None)
    assert (target, reason) == (55, "stop")
    assert plan_output(100, 100, 30, False, None, None) == (30, "stop", None)


def test_tool_choice_decisions_and_rotation() -> None:
    body = {
        "tools": [
            {"type": "function", "function": {"name": "a", "parameters": SCHEMA}},
            {"type": "function", "name": "b"},
        ]
    }
    ask = read_tools(body)
    assert isinstance(ask, ToolAsk) and [t.name for t in ask.tools] == ["a", "b"] and ask.choice == "auto"
    assert [c.name if (c := decide_call(ask, k, 4, "p")) else None for k in range(6)] == [
        "a",
        "b",
        "a",
        "b",
        None,
        None,
    ]
    assert decide_call(read_tools({**body, "tool_choice": "none"}), 0, 4, "p") is None
    assert decide_call(read_tools({**body, "tool_choice": "required"}), 9, 4, "p") is not None
    named = read_tools({**body, "tool_choice": {"type": "function", "function": {"name": "b"}}})
    assert (c := decide_call(named, 0, 4, "p")) is not None and c.name == "b"
    flat = read_tools({**body, "tool_choice": {"type": "function", "name": "b"}})
    assert flat is not None and flat.named == "b"
    with pytest.raises(BadRequest, match="'zzz'"):
        read_tools({**body, "tool_choice": {"type": "function", "name": "zzz"}})
    with pytest.raises(BadRequest, match=r"tools\[0\]"):
        read_tools({"tools": [{"type": "web_search"}]})
    c1, c2 = decide_call(ask, 0, 4, "same prompt"), decide_call(ask, 0, 4, "same prompt")
    assert c1 is not None and c2 is not None and c1.arguments == c2.arguments and c1.call_id != c2.call_id
    assert c1.tokens == -(-len(c1.arguments) * 2 // 7)  # ceil(len / 3.5)
    assert "".join(c1.piece(i, 1) for i in range(c1.tokens)) == c1.arguments


@pytest.mark.parametrize("seed", range(20))
def test_sampled_arguments_satisfy_the_schema(seed: int) -> None:
    value = json.loads(json.dumps(sample_value(SCHEMA, random.Random(seed))))
    assert set(value) >= {"city", "extra", "days", "ratio", "metric", "unit", "tags", "where", "note", "pick"}
    assert isinstance(value["city"], str) and 0 < len(value["city"]) <= 12
    assert isinstance(value["days"], int) and 1 <= value["days"] <= 7
    assert isinstance(value["ratio"], float) and 0 <= value["ratio"] <= 1
    assert isinstance(value["metric"], bool) and value["unit"] in ("c", "f")
    assert 1 <= len(value["tags"]) <= 2 and all(isinstance(t, str) for t in value["tags"])
    assert isinstance(value["where"]["lat"], float) and "alt" in value["where"]
    assert isinstance(value["note"], str) and isinstance(value["pick"], int)
