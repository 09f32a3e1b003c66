"""The simulator's response bytes (loadgen.sim.bodies): every shape parses and says what SGLang says."""

from __future__ import annotations

import json

import orjson
import pytest

from loadgen.sim.bodies import (
    DONE,
    EOS_TOKEN_ID,
    chunk_prefix,
    completion_body,
    content_template,
    error_body,
    finish_chunk,
    malformed_chunk,
    models_body,
    role_chunk,
    sim_stats_body,
    stream_error,
    usage_chunk,
    usage_json,
)
from loadgen.sim.engine import Engine
from loadgen.sim.profile import load_profile

MODEL = orjson.dumps("org/model")


def _event(chunk: bytes) -> dict:
    assert chunk.startswith(b"data: ") and chunk.endswith(b"\n\n")
    return json.loads(chunk[6:-2])


@pytest.mark.parametrize("chat", [True, False])
def test_stream_chunks_parse_with_the_requests_id_object_and_model(chat: bool) -> None:
    prefix = chunk_prefix(orjson.dumps("rid-1"), chat, 1700000000, MODEL)
    head, tail = content_template(prefix, chat)
    usage = usage_json(10, 3, 4)
    chunks = [
        head + b" the cat" + tail,
        # continuous usage stats splice the usage into the tail in place of its final null
        head + b" sat" + tail[:-7] + usage + b"}\n\n",
        finish_chunk(prefix, chat, "stop", b"null"),
        usage_chunk(prefix, usage),
    ]
    if chat:
        chunks.insert(0, role_chunk(prefix, b"null"))
    events = [_event(c) for c in chunks]
    obj = "chat.completion.chunk" if chat else "text_completion"
    assert all(e["id"] == "rid-1" and e["object"] == obj and e["model"] == "org/model" for e in events)
    assert all(e["created"] == 1700000000 for e in events)
    content = events[1:3] if chat else events[0:2]
    texts = [e["choices"][0]["delta"]["content"] if chat else e["choices"][0]["text"] for e in content]
    assert texts == [" the cat", " sat"]
    assert content[0]["usage"] is None
    assert content[1]["usage"] == {
        "prompt_tokens": 10,
        "total_tokens": 13,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 4},
    }
    finish, last = events[-2], events[-1]
    assert finish["choices"][0]["finish_reason"] == "stop" and finish["choices"][0]["matched_stop"] == EOS_TOKEN_ID
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 3
    if chat:
        assert events[0]["choices"][0]["delta"] == {
            "role": "assistant",
            "content": "",
            "reasoning_content": None,
            "tool_calls": None,
        }


def test_length_finish_has_no_matched_stop() -> None:
    prefix = chunk_prefix(b'"r"', True, 0, MODEL)
    event = _event(finish_chunk(prefix, True, "length", usage_json(1, 2, 0)))
    assert event["choices"][0]["finish_reason"] == "length" and event["choices"][0]["matched_stop"] is None
    assert event["usage"]["total_tokens"] == 3


def test_stream_error_and_malformed_chunk() -> None:
    payload = stream_error("boom", "InternalServerError", 500)
    assert payload.endswith(DONE)
    error = _event(payload[: -len(DONE)])
    assert error == {"error": {"message": "boom", "type": "InternalServerError", "param": None, "code": 500}}
    broken = malformed_chunk(b'"r"')
    with pytest.raises(json.JSONDecodeError):
        _event(broken)


def test_error_bodies_follow_the_imitated_server() -> None:
    assert json.loads(error_body("sglang", 400, "bad", "BadRequestError")) == {
        "object": "error",
        "message": "bad",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    assert json.loads(error_body("vllm", 429, "slow down", "RateLimitError")) == {
        "error": {"message": "slow down", "type": "RateLimitError", "param": None, "code": 429}
    }


@pytest.mark.parametrize("chat", [True, False])
def test_completion_body(chat: bool) -> None:
    obj = json.loads(completion_body(chat, "r9", 5, "m", " a b", "stop", 7, 2, 0))
    assert obj["id"] == "r9" and obj["object"] == ("chat.completion" if chat else "text_completion")
    choice = obj["choices"][0]
    assert (choice["message"]["content"] if chat else choice["text"]) == " a b"
    assert choice["matched_stop"] == EOS_TOKEN_ID
    assert obj["usage"] == {
        "prompt_tokens": 7,
        "total_tokens": 9,
        "completion_tokens": 2,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


def test_models_body_names_the_imitated_owner() -> None:
    for style in ("sglang", "vllm"):
        (model,) = json.loads(models_body(style, "m", 3, 4096))["data"]
        assert model["id"] == model["root"] == "m" and model["max_model_len"] == 4096 and model["owned_by"] == style


def test_sim_stats_body_in_ms() -> None:
    engine = Engine(load_profile("tiny"))
    stats = json.loads(sim_stats_body([0.001, 0.002, 0.003], engine, True))
    assert stats["steps"] == 3 and stats["ready"] is True
    assert stats["step_lateness_ms"] == pytest.approx({"p50": 2.0, "p99": 2.98, "max": 3.0, "mean": 2.0})
    assert stats["kv_pool_tokens"] == engine.pool_tokens and stats["requests"] == 0
    empty = json.loads(sim_stats_body([], engine, False))
    assert empty["steps"] == 0 and empty["step_lateness_ms"]["max"] == 0.0 and empty["ready"] is False
