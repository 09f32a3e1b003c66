"""RunState turns a transport's result into a RequestRecord (no server needed: results built by hand)."""

from __future__ import annotations

from pathlib import Path

import orjson

from loadgen.load.client import CallResult
from loadgen.load.runtime import RunState, TargetOptions
from loadgen.parse.stream import ChunkAccumulator
from loadgen.spec.request import RequestSpec

T0 = 1_000_000_000


def _stream(texts: list[str], usage: dict | None = None, error: dict | None = None) -> CallResult:
    acc = ChunkAccumulator()
    t = T0
    for text in texts:
        t += 10_000_000
        acc.add(orjson.dumps({"id": "x", "choices": [{"index": 0, "delta": {"content": text}}]}), t)
    if error is not None:
        acc.add(orjson.dumps({"error": error}), t + 1)
    else:
        acc.add(orjson.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}), t + 1)
    if usage is not None:
        acc.add(orjson.dumps({"choices": [], "usage": usage}), t + 2)
    acc.add(b"[DONE]", t + 3)
    return CallResult(200, T0, t + 4, acc.finish(t + 4))


class WordCounter:
    name = "words"

    def count(self, text: str) -> int:
        return len(text.split())


def _state(tmp_path: Path) -> RunState:
    return RunState(tmp_path, TargetOptions(url="http://127.0.0.1:1", model="m"), lambda plan: None)


def test_without_usage_a_given_tokenizer_counts_the_output(tmp_path: Path) -> None:
    state = _state(tmp_path)
    res = _stream(["one two three", " four five", " six"])
    rec = state._record("r1", 0, RequestSpec(), res, 0)
    assert (rec.tokens_source, rec.output_tokens, len(rec.chunk_offsets_ns)) == ("chunks", 3, 3)
    state.token_counter = WordCounter()
    rec = state._record("r2", 0, RequestSpec(), res, 0)
    assert (rec.tokens_source, rec.output_tokens) == ("tokenizer", 6)
    assert sum(rec.chunk_tokens) == 6 and len(rec.chunk_tokens) == 3 and min(rec.chunk_tokens) >= 1
    assert rec.chunk_offsets_ns == [10_000_000, 20_000_000, 30_000_000]
    state.close()


def test_the_servers_usage_wins_over_any_tokenizer(tmp_path: Path) -> None:
    state = _state(tmp_path)
    state.token_counter = WordCounter()
    res = _stream(["a b", " c"], usage={"prompt_tokens": 12, "completion_tokens": 5})
    rec = state._record("r3", 0, RequestSpec(), res, 0)
    assert (rec.tokens_source, rec.output_tokens, rec.prompt_tokens) == ("usage", 5, 12)
    assert rec.error_class is None and rec.finish_reason == "stop"
    state.close()


def test_an_error_inside_a_200_stream_is_classified_by_its_message(tmp_path: Path) -> None:
    state = _state(tmp_path)
    res = _stream(["a"], error={"message": "KV cache pool is full; request aborted", "code": 500})
    rec = state._record("r4", 0, RequestSpec(), res, 0)
    assert rec.error_class == "kv_cache" and "KV cache pool is full" in (rec.error or "")
    assert rec.chunk_offsets_ns == [10_000_000]  # the text before the error is kept
    state.close()
