"""Embeddings and rerank bodies (parse/pooling.py), from the servers' documented shapes."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.parse.pooling import parse_pooling_body

FIXTURES = Path(__file__).parent.parent / "fixtures" / "pooling"


def parse(name: str):  # type: ignore[no-untyped-def]
    return parse_pooling_body((FIXTURES / name).read_bytes(), 123)


@pytest.mark.parametrize(
    ("name", "items", "prompt_tokens"),
    [
        ("openai-embeddings-float.json", 2, 8),
        ("vllm-embeddings-base64.json", 1, 12),
        ("vllm-rerank.json", 3, 57),  # usage.total_tokens: a pooling call generates nothing
        ("sglang-rerank.json", 2, 39),  # a bare list: the items' meta_info.prompt_tokens summed
        ("cohere-rerank.json", 2, None),  # billed units only: no token count
    ],
)
def test_items_and_prompt_tokens(name: str, items: int, prompt_tokens: int | None) -> None:
    r = parse(name)
    assert r.items == items and r.prompt_tokens == prompt_tokens
    assert r.done and r.error is None and r.malformed == 0 and r.error_class() is None
    assert r.chunk_times_ns == [] and r.completion_tokens is None and r.end_ns == 123


def test_an_error_object_is_a_stream_error_with_its_message() -> None:
    r = parse("vllm-error.json")
    assert r.error is not None and "maximum context length is 8192" in r.error["message"]
    assert r.error_class() == "stream_error" and r.items is None


@pytest.mark.parametrize("raw", [b"<html>502</html>", b'{"object":"list"}', b"[1", b'"text"'])
def test_a_body_without_a_list_of_results_is_malformed(raw: bytes) -> None:
    r = parse_pooling_body(raw, 5)
    assert r.malformed == 1 and r.items is None and r.error_class() == "malformed_stream"
    assert r.first_malformed == raw.decode()
