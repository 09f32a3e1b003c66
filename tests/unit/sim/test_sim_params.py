"""Reading a completions or chat request body (loadgen.sim.params)."""

from __future__ import annotations

import json

import pytest

from loadgen.sim.params import BadRequest, read_params

MSG = [{"role": "user", "content": "x" * 40}]


@pytest.mark.parametrize(
    ("raw", "chat", "message"),
    [
        (b"{not json", True, "Invalid JSON body: "),
        (b"[1, 2]", True, "Invalid JSON body: the request body must be a JSON object"),
        (b'{"messages": "hi"}', True, "Field 'messages' is required and must be a list."),
        (b'{"messages": []}', False, "Field 'prompt' is required."),
        (b'{"prompt": "a", "max_tokens": -1}', False, "max_tokens must be a non-negative integer, got -1"),
        (b'{"prompt": "a", "max_tokens": true}', False, "max_tokens must be a non-negative integer, got True"),
        (b'{"prompt": "a", "max_tokens": "5"}', False, "max_tokens must be a non-negative integer, got '5'"),
    ],
)
def test_bad_bodies_raise_the_message_the_client_gets(raw: bytes, chat: bool, message: str) -> None:
    with pytest.raises(BadRequest) as info:
        read_params(raw, chat, 4.0, "sglang")
    assert info.value.message.startswith(message)


def test_fields_and_defaults() -> None:
    p = read_params(json.dumps({"messages": MSG}).encode(), True, 4.0, "sglang")
    assert p.prompt_tokens == 10 + 4  # 40 chars / 4, plus 4 for the message's role markers
    assert p.max_tokens is None and p.min_tokens == 0
    assert not (p.ignore_eos or p.stream or p.include_usage or p.continuous_usage)
    p = read_params(
        json.dumps(
            {"prompt": "abcd", "max_tokens": 9, "max_completion_tokens": 5, "min_tokens": "3", "ignore_eos": 1}
        ).encode(),
        False,
        4.0,
        "sglang",
    )
    assert p.text == "abcd" and p.prompt_tokens == 1
    assert p.max_tokens == 5  # max_completion_tokens wins
    assert p.min_tokens == 0  # not an integer
    assert p.ignore_eos


@pytest.mark.parametrize(
    ("style", "stream_options", "include_usage"),
    [
        ("sglang", None, False),
        ("sglang", {}, False),  # SGLang: only when asked
        ("sglang", {"include_usage": True}, True),
        ("vllm", None, False),
        ("vllm", {}, True),  # vLLM: once stream_options is sent
        ("vllm", {"include_usage": False}, False),
        ("vllm", "yes", False),  # not an object: as if absent
    ],
)
def test_include_usage_follows_the_imitated_server(style: str, stream_options: object, include_usage: bool) -> None:
    body: dict[str, object] = {"messages": MSG, "stream": True}
    if stream_options is not None:
        body["stream_options"] = stream_options
    p = read_params(json.dumps(body).encode(), True, 4.0, style)
    assert p.stream and p.include_usage is include_usage and not p.continuous_usage


def test_continuous_usage_stats() -> None:
    body = {"messages": MSG, "stream": True, "stream_options": {"continuous_usage_stats": True}}
    assert read_params(json.dumps(body).encode(), True, 4.0, "sglang").continuous_usage
