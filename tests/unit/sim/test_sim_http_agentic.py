"""Reasoning, tool calls and images on /v1/chat/completions and /v1/responses, over real HTTP
against a `loadgen sim` process (rules: loadgen/sim/output_plan.py, loadgen/sim/images.py)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sim_media import data_url, jpeg, png
from sim_testutil import SimProc
from test_sim_http_responses import emission_lines, raw_stream, sse_events

CHAT = "/v1/chat/completions"
RESP = "/v1/responses"
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "unit": {"type": "string", "enum": ["c", "f"]},
        "hourly": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["city", "days"],
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
]
FLAT_TOOLS = [{"type": "function", **t["function"]} for t in TOOLS]  # the Responses form


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimProc, Path]]:
    tmp = tmp_path_factory.mktemp("simagent")
    emlog = tmp / "emission.jsonl"
    proc = SimProc(
        tmp, "--profile", "tiny", "--emission-log", str(emlog), "--log-file", str(tmp / "sim.log"),
        "--ttft-per-1k-ms", "50", "--seed", "3",
    )  # fmt: skip
    yield proc, emlog
    assert proc.stop() == 0


def chat_stream(proc: SimProc, body: dict[str, Any], rid: str | None = None) -> list[dict[str, Any]]:
    status, events = proc.stream(
        CHAT,
        {**body, "stream": True, "stream_options": {"include_usage": True}},
        {"X-Request-Id": rid} if rid else None,
    )
    assert status == 200
    assert events[-1][1] == b"[DONE]"
    return [json.loads(e) for _, e in events[:-1]]


def chat_body(proc: SimProc, body: dict[str, Any]) -> dict[str, Any]:
    status, _, raw = proc.post(CHAT, {**body, "stream": False})
    assert status == 200, raw
    out: dict[str, Any] = json.loads(raw)
    return out


def check_weather(arguments: str) -> dict[str, Any]:
    args: dict[str, Any] = json.loads(arguments)
    assert set(args) == {"city", "days", "unit", "hourly", "tags"}
    assert isinstance(args["city"], str) and args["city"]
    assert isinstance(args["days"], int) and 1 <= args["days"] <= 7
    assert args["unit"] in ("c", "f") and isinstance(args["hourly"], bool)
    assert 1 <= len(args["tags"]) <= 2
    return args


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def agent_turns(n_results: int) -> list[dict[str, Any]]:
    """A chat conversation that already holds ``n_results`` tool calls and their results."""
    msgs = user("What is the weather in Paris?")
    for i in range(n_results):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"x"}'}}
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": "sunny, 21 C"},
        ]
    return msgs


# -- reasoning ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ask", "n_reasoning"),
    [
        ({"reasoning_effort": "low"}, 10),
        ({"reasoning_effort": "medium"}, 20),
        ({"reasoning_effort": "high"}, 30),
        ({"chat_template_kwargs": {"enable_thinking": True}}, 20),
        ({"chat_template_kwargs": {"thinking": True}}, 20),
    ],
)
def test_chat_stream_reasons_first_then_answers(
    sim: tuple[SimProc, Path], ask: dict[str, Any], n_reasoning: int
) -> None:
    proc, _ = sim
    chunks = chat_stream(proc, {"messages": user("Why is the sky blue?"), "max_tokens": 40, "ignore_eos": True, **ask})
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    kinds = ["r" if d["reasoning_content"] else "t" if d["content"] else "-" for d in deltas]
    body = "".join(kinds).strip("-")
    assert body == "r" * body.count("r") + "t" * body.count("t")  # all reasoning, then all text
    reasoning = "".join(d["reasoning_content"] or "" for d in deltas)
    text = "".join(d["content"] or "" for d in deltas)
    assert len(reasoning.split()) == n_reasoning and len(text.split()) == 40 - n_reasoning
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    usage = chunks[-1]["usage"]
    assert usage["completion_tokens"] == 40
    assert usage["completion_tokens_details"] == {"reasoning_tokens": n_reasoning}


def test_chat_body_carries_reasoning_content_and_usage(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    obj = chat_body(proc, {"messages": user("Think."), "max_tokens": 8, "ignore_eos": True, "reasoning_effort": "high"})
    msg = obj["choices"][0]["message"]
    assert len(msg["reasoning_content"].split()) == 6 and len(msg["content"].split()) == 2
    assert obj["usage"]["completion_tokens_details"] == {"reasoning_tokens": 6}
    plain = chat_body(proc, {"messages": user("No thinking."), "max_tokens": 8, "ignore_eos": True})
    assert plain["choices"][0]["message"]["reasoning_content"] is None
    assert "completion_tokens_details" not in plain["usage"]


def test_responses_reasoning_item_comes_first(sim: tuple[SimProc, Path]) -> None:
    proc, emlog = sim
    body = {"input": "Think, then answer.", "reasoning": {"effort": "low"}, "max_output_tokens": 20, "ignore_eos": True}
    status, _, reads = raw_stream(proc, body, rid="agent-rsp-reason")
    assert status == 200
    events = [(n, json.loads(d)) for n, d in sse_events(b"".join(d for _, d in reads))]
    names = [n for n, _ in events]
    first_text = names.index("response.output_text.delta")
    assert names.index("response.reasoning_text.delta") < names.index("response.reasoning_text.done") < first_text
    reasoning = "".join(o["delta"] for n, o in events if n == "response.reasoning_text.delta")
    text = "".join(o["delta"] for n, o in events if n == "response.output_text.delta")
    assert len(reasoning.split()) == 5 and len(text.split()) == 15
    final = events[-1][1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message"]
    assert final["output"][0]["content"][0] == {"type": "reasoning_text", "text": reasoning}
    assert final["usage"]["output_tokens"] == 20
    assert final["usage"]["output_tokens_details"] == {"reasoning_tokens": 5}
    added = [o for n, o in events if n == "response.output_item.added"]
    assert [(a["output_index"], a["item"]["type"]) for a in added] == [(0, "reasoning"), (1, "message")]
    lines = emission_lines(emlog, "agent-rsp-reason", len(events))
    out = [x for x in lines if x.get("output_kind")]
    assert [x["output_kind"] for x in out] == ["reasoning"] * 5 + ["text"] * 15
    obj = json.loads(proc.post(RESP, {**body, "stream": False})[2])
    assert [item["type"] for item in obj["output"]] == ["reasoning", "message"]
    assert obj["usage"]["output_tokens_details"]["reasoning_tokens"] == 5


# -- tool calls ---------------------------------------------------------------------------------


def test_chat_stream_tool_call_chunks_and_emission_kinds(sim: tuple[SimProc, Path]) -> None:
    proc, emlog = sim
    body = {"messages": user("Weather in Paris?"), "tools": TOOLS, "reasoning_effort": "low", "max_tokens": 400}
    chunks = chat_stream(proc, body, rid="agent-chat-tool")
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    calls = [d["tool_calls"] for d in deltas if d["tool_calls"]]
    head = calls[0][0]
    assert head["index"] == 0 and head["id"].startswith("call_") and head["type"] == "function"
    # the call opens with its id, name and the first piece of its arguments, in one delta (one
    # chunk per step); the pieces that follow carry arguments only
    assert head["function"]["name"] == "get_weather" and head["function"]["arguments"]
    assert all(c[0]["index"] == 0 and set(c[0]) == {"index", "function"} for c in calls[1:])
    arguments = "".join(c[0]["function"]["arguments"] for c in calls)
    check_weather(arguments)
    assert not any(d["content"] for d in deltas)
    last_reasoning = max(i for i, d in enumerate(deltas) if d["reasoning_content"])
    assert last_reasoning < min(i for i, d in enumerate(deltas) if d["tool_calls"])
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    n_args = math.ceil(len(arguments) / 3.5)
    usage = chunks[-1]["usage"]
    assert usage["completion_tokens"] == 100 + n_args  # low effort: a quarter of max_tokens, then the call
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 100}
    lines = emission_lines(emlog, "agent-chat-tool", len(chunks))
    out = [x for x in lines if x.get("output_kind")]
    assert {x["kind"] for x in out} == {"content"}
    kinds = [x["output_kind"] for x in out]
    assert kinds == ["reasoning"] * kinds.count("reasoning") + ["tool"] * kinds.count("tool")
    assert sum(x["tokens"] for x in out if x["output_kind"] == "reasoning") == 100
    assert sum(x["tokens"] for x in out if x["output_kind"] == "tool") == n_args
    first_reasoning = min(x["emit_ns"] for x in out if x["output_kind"] == "reasoning")
    assert first_reasoning <= min(x["emit_ns"] for x in out if x["output_kind"] == "tool")


def test_chat_body_tool_call(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    obj = chat_body(proc, {"messages": user("Weather?"), "tools": TOOLS, "tool_choice": "required"})
    choice = obj["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "get_weather"
    check_weather(call["function"]["arguments"])
    assert obj["usage"]["completion_tokens"] == math.ceil(len(call["function"]["arguments"]) / 3.5)


@pytest.mark.parametrize(
    ("n_results", "choice", "expect"),
    [
        (0, "none", None),
        (0, "auto", "get_weather"),
        (1, "auto", "get_time"),  # the next tool after each result
        (3, "auto", "get_time"),
        (4, "auto", None),  # --tool-rounds 4 reached: the final answer
        (4, "required", "get_weather"),
        (9, {"type": "function", "function": {"name": "get_time"}}, "get_time"),
    ],
)
def test_tool_choice_and_tool_rounds(
    sim: tuple[SimProc, Path], n_results: int, choice: Any, expect: str | None
) -> None:
    proc, _ = sim
    obj = chat_body(
        proc, {"messages": agent_turns(n_results), "tools": TOOLS, "tool_choice": choice, "max_tokens": 200}
    )
    choice_out = obj["choices"][0]
    calls = choice_out["message"]["tool_calls"]
    if expect is None:
        assert calls is None and choice_out["message"]["content"]
        assert choice_out["finish_reason"] in ("stop", "length")
    else:
        assert [c["function"]["name"] for c in calls] == [expect] and choice_out["finish_reason"] == "tool_calls"


def test_responses_agent_loop_calls_four_times_then_answers(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    body: dict[str, Any] = {"input": "Plan my trip.", "tools": FLAT_TOOLS, "max_output_tokens": 200}
    seen = []
    for _turn in range(5):
        obj = json.loads(proc.post(RESP, {**body, "stream": False})[2])
        item = obj["output"][-1]
        seen.append(item["type"])
        if item["type"] == "function_call":
            assert obj["status"] == item["status"] == "completed" and item["call_id"].startswith("call_")
            json.loads(item["arguments"])
        body = {
            "previous_response_id": obj["id"],
            "input": [{"type": "function_call_output", "call_id": item.get("call_id", ""), "output": "done"}],
            "tools": FLAT_TOOLS,
            "max_output_tokens": 200,
        }
    assert seen == ["function_call"] * 4 + ["message"]


def test_responses_stream_function_call_events(sim: tuple[SimProc, Path]) -> None:
    proc, emlog = sim
    body = {
        "input": "Weather?", "tools": FLAT_TOOLS, "tool_choice": {"type": "function", "name": "get_weather"},
        "reasoning": {"effort": "high"}, "max_output_tokens": 8,
    }  # fmt: skip
    status, _, reads = raw_stream(proc, {**body, "max_output_tokens": 400}, rid="agent-rsp-tool")
    assert status == 200
    events = [(n, json.loads(d)) for n, d in sse_events(b"".join(d for _, d in reads))]
    names = [n for n, _ in events]
    n_args = names.count("response.function_call_arguments.delta")
    assert n_args >= 1 and "response.output_text.delta" not in names
    tail = [
        "response.function_call_arguments.done", "response.output_item.done", "response.completed",
    ]  # fmt: skip
    assert names[-3:] == tail
    added = [o for n, o in events if n == "response.output_item.added"]
    assert [(a["output_index"], a["item"]["type"]) for a in added] == [(0, "reasoning"), (1, "function_call")]
    call = added[1]["item"]
    assert call["name"] == "get_weather" and call["arguments"] == "" and call["status"] == "in_progress"
    deltas = [o for n, o in events if n == "response.function_call_arguments.delta"]
    arguments = "".join(d["delta"] for d in deltas)
    assert all(d["item_id"] == call["id"] and d["output_index"] == 1 for d in deltas)
    check_weather(arguments)
    assert events[-3][1]["arguments"] == arguments and events[-3][1]["name"] == "get_weather"
    final = events[-1][1]["response"]
    assert [i["type"] for i in final["output"]] == ["reasoning", "function_call"]
    assert final["output"][1]["arguments"] == arguments and final["output"][1]["call_id"] == call["call_id"]
    assert final["usage"]["output_tokens"] == 300 + math.ceil(len(arguments) / 3.5)
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] == 300
    lines = emission_lines(emlog, "agent-rsp-tool", len(events))
    tool_lines = [x for x in lines if x.get("output_kind") == "tool"]
    assert tool_lines[0]["kind"] == "output_item.added" and tool_lines[0]["tokens"] == 0
    assert sum(x["tokens"] for x in tool_lines) == math.ceil(len(arguments) / 3.5)
    # cut by max_output_tokens: reasoning 6, arguments 2 tokens, incomplete
    obj = json.loads(proc.post(RESP, {**body, "stream": False})[2])
    assert obj["status"] == "incomplete" and obj["usage"]["output_tokens"] == 8
    assert obj["output"][1]["type"] == "function_call" and len(obj["output"][1]["arguments"]) < len(arguments)


def test_bad_tool_fields_are_400(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    status, _, raw = proc.post(
        CHAT, {"messages": user("x"), "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}
    )
    assert status == 400 and b"'nope'" in raw
    status, _, raw = proc.post(CHAT, {"messages": user("x"), "reasoning_effort": "extreme"})
    assert status == 400 and b"reasoning_effort" in raw
    status, _, raw = proc.post(RESP, {"input": "x", "tools": [{"type": "web_search"}]})
    assert status == 400 and b"tools[0]" in raw


# -- images -------------------------------------------------------------------------------------


def image_message(url: str, text: str = "What is in this picture?") -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]}
    ]


def test_image_tokens_by_resolution(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    text_only = chat_body(proc, {"messages": user("What is in this picture?"), "max_tokens": 1})["usage"][
        "prompt_tokens"
    ]
    for url, tokens in [
        (data_url(png(448, 448)), 258),
        (data_url(jpeg(448, 448), "image/jpeg"), 258),
        (data_url(jpeg(1000, 500, progressive=True), "image/jpeg"), 36 * 18 + 2),
        (data_url(png(4000, 4000)), 35 * 35 + 2),
    ]:
        usage = chat_body(proc, {"messages": image_message(url), "max_tokens": 1})["usage"]
        assert usage["prompt_tokens"] == text_only + tokens
    content = [
        {"type": "input_text", "text": "What is in this picture?"},
        {"type": "input_image", "image_url": data_url(png(448, 448))},
    ]
    obj = json.loads(proc.post(RESP, {"input": [{"role": "user", "content": content}], "max_output_tokens": 1})[2])
    assert obj["usage"]["input_tokens"] == text_only + 258


def test_bigger_image_longer_ttft_and_images_keyed_in_prefix_cache(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim

    def ttft_s(url: str) -> float:
        t0 = time.perf_counter()
        chat_stream(proc, {"messages": image_message(url, "Describe it."), "max_tokens": 1})
        return time.perf_counter() - t0

    small = min(ttft_s(data_url(png(28 + i, 28))) for i in range(3))
    big = min(ttft_s(data_url(png(3000 + i, 3000))) for i in range(3))
    assert big > small + 0.03  # ~1,280 more prefill tokens at 50 ms per 1k
    long_text = "A long shared preamble. " * 40
    a, b = data_url(png(900, 900)), data_url(png(901, 900))
    first = chat_body(proc, {"messages": image_message(a, long_text), "max_tokens": 1})["usage"]
    same = chat_body(proc, {"messages": image_message(a, long_text), "max_tokens": 1})["usage"]
    other = chat_body(proc, {"messages": image_message(b, long_text), "max_tokens": 1})["usage"]
    assert same["prompt_tokens_details"]["cached_tokens"] > other["prompt_tokens_details"]["cached_tokens"] + 500
    assert other["prompt_tokens_details"]["cached_tokens"] <= first["prompt_tokens"] - 1000


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("https://example.com/cat.png", "image URLs are not fetched by the simulator; send data URLs"),
        ("file:///tmp/cat.png", "image URLs are not fetched by the simulator; send data URLs"),
        (data_url(b"GIF89a not an image"), "not a PNG or JPEG image"),
        (data_url(b"\x89PNG\r\n\x1a\n\x00\x00"), "IHDR"),
    ],
)
def test_bad_images_are_400_naming_the_part(sim: tuple[SimProc, Path], url: str, message: str) -> None:
    proc, _ = sim
    status, _, raw = proc.post(CHAT, {"messages": [{"role": "system", "content": "s"}, *image_message(url)]})
    err = json.loads(raw)
    assert status == 400 and "messages[1].content[1]" in err["message"] and message in err["message"]
    content = [{"type": "input_image", "image_url": url}]
    status, _, raw = proc.post(RESP, {"input": [{"role": "user", "content": content}]})
    assert status == 400 and b"input[0].content[0]" in raw and message.encode() in raw


# -- faults -------------------------------------------------------------------------------------


def test_faults_cut_reasoning_and_tool_streams(tmp_path: Path) -> None:
    proc = SimProc(tmp_path, "--profile", "tiny", "--error-after-chunks", "3", "--log-file", str(tmp_path / "log"))
    try:
        body = {"messages": user("x"), "tools": TOOLS, "reasoning_effort": "low", "max_tokens": 8, "stream": True}
        status, events = proc.stream(CHAT, body)
        assert status == 200 and events[-1][1] == b"[DONE]"
        payloads = [json.loads(e) for _, e in events[:-1]]
        assert "error" in payloads[-1]
        assert sum(1 for p in payloads if "choices" in p and p["choices"][0]["delta"].get("reasoning_content")) == 2
        rbody = {"input": "x", "tools": FLAT_TOOLS, "reasoning": {"effort": "low"}, "max_output_tokens": 8}
        status, _, reads = raw_stream(proc, rbody)
        names = [n for n, _ in sse_events(b"".join(d for _, d in reads))]
        assert names[-1] == "response.failed" and names.count("response.reasoning_text.delta") == 2
        assert names.count("response.function_call_arguments.delta") == 1
    finally:
        assert proc.stop() == 0


def test_openapi_lists_the_routes_served(sim: tuple[SimProc, Path]) -> None:
    status, raw = sim[0].get("/openapi.json")
    assert status == 200
    doc = json.loads(raw)
    posts = {p for p, ops in doc["paths"].items() if "post" in ops}
    assert {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings", "/v1/rerank"} <= posts
    assert "get" in doc["paths"]["/v1/models"]
