"""RunState turns a transport's result into a RequestRecord (no server needed: results built by hand)."""

from __future__ import annotations

from pathlib import Path

import orjson

from loadgen.load.client import CallResult
from loadgen.load.runtime import RunState, TargetOptions
from loadgen.parse.stream import ChunkAccumulator
from loadgen.spec.calls import Decoder
from loadgen.spec.options import StepPlan
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


# ------------------------------------------------------------------ call types (issue 15)

RESPONSES = Path(__file__).parent.parent / "fixtures" / "responses"


class _Fixed:
    """A transport that answers every call with one prepared result (and remembers the calls)."""

    def __init__(self, result: CallResult) -> None:
        self.result = result
        self.calls: list[tuple[str, bytes, bool, str]] = []

    def call(self, path: str, body: bytes, headers: dict[str, str], stream: bool, decode: str = "chat") -> CallResult:
        self.calls.append((path, body, stream, decode))
        return self.result

    def close(self) -> None:
        pass


def _events(name: str) -> CallResult:
    from loadgen.parse.responses import ResponsesDecoder

    dec = ResponsesDecoder()
    data = (RESPONSES / name).read_bytes()
    t = T0
    for i in range(0, len(data), 64):  # reads 64 bytes apart, 1 ms apart
        t += 1_000_000
        dec.feed(data[i : i + 64], t)
    return CallResult(200, T0, t + 1, dec.finish(t + 1))


def _reporting_state(tmp_path: Path) -> tuple[RunState, list[tuple[str, str]], list[dict]]:
    state = _state(tmp_path)
    rows: list[tuple[str, str]] = []
    fired: list[dict] = []
    state.log_metric = lambda kind, name, ms: rows.append((kind, name))
    state.fire_request = lambda **kw: fired.append(kw)
    state.step_started(0, StepPlan(concurrency=1), T0)
    return state, rows, fired


def test_a_responses_answer_records_its_kinds_and_reports_a_row_per_kind(tmp_path: Path) -> None:
    state, rows, fired = _reporting_state(tmp_path)
    transport = _Fixed(_events("reasoning_then_answer.sse"))
    rec, reply = state.execute(transport, RequestSpec(endpoint="responses", max_tokens=64), 0)  # type: ignore[arg-type]
    path, body, stream, decode = transport.calls[0]
    assert (path, stream, decode) == ("/v1/responses", True, Decoder.RESPONSES)
    assert orjson.loads(body)["max_output_tokens"] == 64
    assert rec.error_class is None and rec.endpoint == "responses"
    assert rec.first_reasoning_ns is not None and rec.first_answer_ns is not None
    assert rec.first_chunk_ns == rec.first_reasoning_ns < rec.first_answer_ns
    assert rec.reasoning_tokens is not None and 0 < rec.reasoning_tokens <= (rec.output_tokens or 0)
    assert rec.server_request_id is not None and reply.response_id == rec.server_request_id
    assert fired[0]["request_type"] == "LLM" and fired[0]["name"] == "responses"
    assert ("TTFT", "responses") in rows and ("TTFT reasoning", "responses") in rows
    assert ("TTFT answer", "responses") in rows and ("TTFT tool", "responses") not in rows
    state.close()


def test_a_function_call_goes_back_to_the_workload_as_a_tool_call(tmp_path: Path) -> None:
    state, rows, _ = _reporting_state(tmp_path)
    rec, reply = state.execute(_Fixed(_events("function_call.sse")), RequestSpec(endpoint="responses"), 0)  # type: ignore[arg-type]
    assert rec.tool_calls == len(reply.tool_calls) >= 1 and rec.first_tool_ns is not None
    call = reply.tool_calls[0]
    assert call.name and call.call_id and rec.tool_args_chars == sum(len(c.arguments) for c in reply.tool_calls)
    assert orjson.loads(call.arguments) is not None  # the arguments the model wrote, whole
    assert ("TTFT tool", "responses") in rows
    state.close()


def test_pooling_calls_record_inputs_and_prompt_tokens_without_ttft(tmp_path: Path) -> None:
    from loadgen.parse.pooling import parse_pooling_body

    state, rows, fired = _reporting_state(tmp_path)
    body = (
        b'{"object":"list","data":[{"index":0,"embedding":[0.1]},{"index":1,"embedding":[0.2]}],'
        b'"usage":{"prompt_tokens":9,"total_tokens":9}}'
    )
    transport = _Fixed(CallResult(200, T0, T0 + 5_000_000, parse_pooling_body(body, T0 + 5_000_000)))
    spec = RequestSpec(endpoint="embeddings", inputs=["a", "b"])
    rec, _ = state.execute(transport, spec, 0)  # type: ignore[arg-type]
    assert transport.calls[0][2:] == (False, Decoder.POOLING)  # never streamed
    assert (rec.error_class, rec.inputs, rec.prompt_tokens, rec.first_chunk_ns, rec.stream) == (None, 2, 9, None, False)
    assert fired[0]["name"] == "embeddings" and rows == []  # E2E only: no TTFT row
    # a server that returns fewer results than inputs is caught
    rec, _ = state.execute(transport, RequestSpec(endpoint="embeddings", inputs=["a", "b", "c"]), 0)  # type: ignore[arg-type]
    assert rec.error_class == "malformed_stream" and rec.error == "2 embeddings results for 3 inputs"
    state.close()


def test_a_404_before_any_success_says_the_endpoint_is_missing_once_answered_never(tmp_path: Path) -> None:
    state, _, _ = _reporting_state(tmp_path)
    missing: list[tuple[str, str, str]] = []
    state.on_endpoint_missing = lambda *a: missing.append(a)
    not_found = _Fixed(CallResult(404, T0, T0 + 1, None, "http_4xx", 'HTTP 404: {"detail":"Not Found"}'))
    state.execute(not_found, RequestSpec(endpoint="rerank", query="q", documents=["d"]), 0)  # type: ignore[arg-type]
    assert missing == [("rerank", "/v1/rerank", 'HTTP 404: {"detail":"Not Found"}')]
    # once a call succeeded, a later 404 is the server's answer to that request, not a missing endpoint
    (tmp_path / "b").mkdir()
    state2, _, _ = _reporting_state(tmp_path / "b")
    missing.clear()
    state2.on_endpoint_missing = lambda *a: missing.append(a)
    state2.execute(_Fixed(_stream(["ok"], usage={"prompt_tokens": 1, "completion_tokens": 1})), RequestSpec(), 0)  # type: ignore[arg-type]
    state2.execute(not_found, RequestSpec(), 0)  # type: ignore[arg-type]
    assert missing == []
    state.close()
    state2.close()
