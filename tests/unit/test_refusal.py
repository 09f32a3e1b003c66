"""Request ids every server accepts, and a run that cannot succeed stopping with one line (issue 34).

No server here: RunState is given prepared results (a real server's journey is in
tests/integration/test_request_ids.py)."""

from __future__ import annotations

import uuid
from pathlib import Path

import orjson
import pytest

from loadgen.load.client import CallResult
from loadgen.load.refusal import (
    EMPTY_BODY,
    FAILED_STREAK,
    REFUSED_STREAK,
    Refusal,
    RefusalWatch,
    describe_body,
    describe_headers,
)
from loadgen.load.runtime import RunState, TargetOptions
from loadgen.parse.errors import http_error
from loadgen.parse.stream import ChunkAccumulator
from loadgen.spec.options import OptionError, StepPlan, parse_request_id_header
from loadgen.spec.request import RequestSpec

T0 = 1_000_000_000


class _Answers:
    """A transport that answers calls with prepared results in turn (the last one repeats) and keeps
    the headers and body of each call."""

    def __init__(self, *results: CallResult) -> None:
        self.results = list(results)
        self.sent: list[tuple[dict[str, str], bytes]] = []

    def call(self, path: str, body: bytes, headers: dict[str, str], stream: bool, decode: str = "chat") -> CallResult:
        self.sent.append((dict(headers), body))
        return self.results.pop(0) if len(self.results) > 1 else self.results[0]

    def close(self) -> None:
        pass


def _ok() -> CallResult:
    acc = ChunkAccumulator()
    acc.add(orjson.dumps({"choices": [{"index": 0, "delta": {"content": "hi"}}]}), T0 + 5)
    acc.add(orjson.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}), T0 + 6)
    acc.add(b"[DONE]", T0 + 7)
    return CallResult(200, T0, T0 + 8, acc.finish(T0 + 8))


def _refused(status: int = 400, body: bytes = b"") -> CallResult:
    from loadgen.parse.errors import classify_http

    return CallResult(status, T0, T0 + 1, None, classify_http(status, body), http_error(status, body))


def _state(tmp_path: Path, **target: object) -> tuple[RunState, list[Refusal]]:
    state = RunState(
        tmp_path, TargetOptions(url="http://127.0.0.1:1", model="m", api_key="sk-secret-123", **target), lambda p: None
    )
    state.step_started(0, StepPlan(concurrency=1), T0)
    refusals: list[Refusal] = []
    state.on_refused = refusals.append
    return state, refusals


def test_the_request_id_on_the_wire_is_a_uuid_and_the_record_keeps_both(tmp_path: Path) -> None:
    state, _ = _state(tmp_path)
    transport = _Answers(_ok())
    recs = [state.execute(transport, RequestSpec(), 0)[0] for _ in range(3)]  # type: ignore[arg-type]
    sent = [headers["X-Request-Id"] for headers, _ in transport.sent]
    assert [str(uuid.UUID(s)) for s in sent] == sent  # canonical UUIDs
    assert len(set(sent)) == 3
    assert [r.header_id for r in recs] == sent  # the mapping to the server's logs
    assert len({r.id for r in recs}) == 3 and all(r.id not in sent for r in recs)  # our own ids stay
    lines = [orjson.loads(x) for x in (tmp_path / "requests-w0.jsonl").read_bytes().splitlines()]
    assert [x["header_id"] for x in lines] == sent and [x["id"] for x in lines] == [r.id for r in recs]
    state.close()


def test_the_id_header_can_be_renamed_or_left_out(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    renamed, _ = _state(tmp_path / "a", request_id_header="X-Correlation-Id")
    transport = _Answers(_ok())
    rec, _ = renamed.execute(transport, RequestSpec(), 0)  # type: ignore[arg-type]
    headers = transport.sent[0][0]
    assert "X-Request-Id" not in headers and headers["X-Correlation-Id"] == rec.header_id
    none, _ = _state(tmp_path / "b", request_id_header=None)
    transport = _Answers(_ok())
    rec, _ = none.execute(transport, RequestSpec(), 0)  # type: ignore[arg-type]
    assert not any(k.lower().endswith("request-id") for k in transport.sent[0][0]) and rec.header_id is None
    renamed.close()
    none.close()


def test_parse_request_id_header_names_the_flag_and_value() -> None:
    assert parse_request_id_header(None) == "X-Request-Id" == parse_request_id_header(" ")
    assert parse_request_id_header("none") is None and parse_request_id_header("NONE") is None
    assert parse_request_id_header("X-Trace-Id") == "X-Trace-Id"
    with pytest.raises(OptionError, match=r"--request-id-header 'X Request': not an HTTP header name"):
        parse_request_id_header("X Request")
    with pytest.raises(OptionError, match=r"--lg-request-id-header 'Authorization': that header carries"):
        parse_request_id_header("Authorization", "--lg-request-id-header")


def test_the_first_requests_refused_alike_stop_the_run_once(tmp_path: Path) -> None:
    state, refusals = _state(tmp_path)
    transport = _Answers(_refused(400))
    for _ in range(REFUSED_STREAK - 1):
        state.execute(transport, RequestSpec(context_tokens=60), 0)  # type: ignore[arg-type]
    assert refusals == []
    for _ in range(3):  # the streak is reached once; later refusals say nothing more
        state.execute(transport, RequestSpec(context_tokens=60), 0)  # type: ignore[arg-type]
    [r] = refusals
    assert (r.status, r.answer, r.path, r.count) == (400, EMPTY_BODY, "/v1/chat/completions", REFUSED_STREAK)
    line = r.message()
    assert "\n" not in line
    assert "all of the first 5 requests, each with HTTP 400 and an empty body" in line
    assert "X-Request-Id: " in line and "Authorization: Bearer <redacted>" in line
    assert "sk-secret-123" not in line  # never the API key
    assert 'model: "m"' in line and "messages: [1 item]" in line and "max_tokens: " in line
    assert "Try: " in line and "--request-id-header none" in line
    # the record's sample says the body was empty, not "HTTP 400: " and nothing
    rec = orjson.loads((tmp_path / "requests-w0.jsonl").read_bytes().splitlines()[0])
    assert rec["error"] == "HTTP 400: (empty body)" and rec["error_class"] == "http_4xx"
    state.close()


def test_no_stop_once_a_call_succeeded_nor_for_rate_limits_or_mixed_failures(tmp_path: Path) -> None:
    for i, results in enumerate(
        [
            (_ok(), _refused(400)),  # answered once: later 400s are answers to those requests
            (_refused(429, b'{"error":"slow down"}'),),  # a rate limit passes
            (_refused(400), _refused(503), _refused(400), _refused(503), _refused(400), _refused(503)),
        ]
    ):
        (tmp_path / str(i)).mkdir()
        state, refusals = _state(tmp_path / str(i))
        transport = _Answers(*results)
        for _ in range(3 * REFUSED_STREAK):
            state.execute(transport, RequestSpec(), 0)  # type: ignore[arg-type]
        assert refusals == [], i
        state.close()


def test_the_streak_counts_one_status_in_a_row() -> None:
    watch = RefusalWatch(streak=3)
    args = ("/v1/completions", {"Content-Type": "application/json"}, b"{}")
    assert watch.observe(400, "http_4xx", "HTTP 400: (empty body)", *args) is None
    assert watch.observe(422, "http_4xx", "HTTP 422: bad", *args) is None  # another status: starts over
    assert watch.observe(422, "http_4xx", "HTTP 422: bad", *args) is None
    got = watch.observe(422, "http_4xx", 'HTTP 422: {"detail":"extra fields not permitted"}', *args)
    assert got is not None and got.status == 422 and got.answer == '{"detail":"extra fields not permitted"}'
    assert "--extra-body" in got.message()  # 422: a body field
    assert watch.observe(422, "http_4xx", "HTTP 422: bad", *args) is None  # once


def test_the_same_server_error_every_time_stops_the_run_too() -> None:
    # llama-cpp-python answers a body field it cannot parse with 500 and a validation message
    answer = 'HTTP 500: {"error":{"message":"1 validation error: temperature: Input should be a valid number"}}'
    args = ("/v1/chat/completions", {"Content-Type": "application/json"}, b'{"temperature": "hot"}')
    watch = RefusalWatch()
    assert [watch.observe(500, "http_5xx", answer, *args) for _ in range(FAILED_STREAK - 1)] == [None] * 19
    got = watch.observe(500, "http_5xx", answer, *args)
    assert got is not None and got.count == FAILED_STREAK == 20 and got.status == 500
    line = got.message()
    assert "the server failed all of the first 20 requests, each with HTTP 500" in line
    assert "valid number" in line and "--extra-body" in line and 'temperature: "hot"' in line
    # answers that differ (an overload, a request's own id in the text) are measured, not stopped
    watch = RefusalWatch()
    seen = [watch.observe(503, "http_5xx", f"HTTP 503: overloaded, request {i}", *args) for i in range(60)]
    assert seen == [None] * 60


def test_hints_follow_the_status() -> None:
    def line(status: int, cls: str = "http_4xx", answer: str = "x") -> str:
        return Refusal(status, cls, answer, "/v1/chat/completions", "{}", "{}", 5).message()

    assert "--api-key" in line(401) and "--api-key" in line(403)
    assert "--context-tokens or --max-tokens" in line(400, "http_400_context_length", "maximum context length")
    assert "--url" in line(405)
    assert "larger than the server takes" in line(413)
    assert "the server's answer names what it rejected" in line(400, answer='{"error":"bad model"}')


def test_headers_hide_credentials_and_bodies_hide_text() -> None:
    text = describe_headers({"Authorization": "Bearer sk-1", "X-Api-Key": "k2", "Cookie": "c=3", "X-Request-Id": "abc"})
    assert text == "{Authorization: Bearer <redacted>, X-Api-Key: <redacted>, Cookie: <redacted>, X-Request-Id: abc}"
    prompt = "a long secret prompt " * 10
    body = orjson.dumps({"model": "tiny", "prompt": prompt, "max_tokens": 8, "stream": True, "logit_bias": {"2": -1}})
    shape = describe_body(body)
    assert shape == '{model: "tiny", prompt: <text, 210 chars>, max_tokens: 8, stream: true, logit_bias: {2}}'
    assert describe_body(b"\x00\x01") == "<2 bytes, not JSON>"


def test_a_404_on_a_path_the_server_lists_names_the_model_not_the_endpoint() -> None:
    from loadgen.lifecycle import endpoint_missing_message

    answer = 'HTTP 404: {"error":{"message":"The model `big` does not exist.","code":404}}'
    line = endpoint_missing_message("chat", "/v1/chat/completions", answer, ["/v1/chat/completions", "/v1/models"])
    assert "though the server lists it" in line and "check --model" in line and "does not exist" in line
    line = endpoint_missing_message("rerank", "/v1/rerank", answer, ["/v1/chat/completions"])
    assert "does not serve --endpoint rerank" in line and "it lists POST /v1/chat/completions" in line
