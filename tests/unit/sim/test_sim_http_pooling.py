"""/v1/embeddings, /v1/rerank and /v1/score over real HTTP against a `loadgen sim` process."""

from __future__ import annotations

import base64
import json
import math
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sim_testutil import SimProc, by_name, parse_prometheus

EMB = "/v1/embeddings"
RERANK = "/v1/rerank"
TINY_DIM = 1024  # the tiny model's hidden size
DOCS = [
    "Stock prices fell sharply on Monday.",
    "The giant panda is a bear species endemic to China; pandas eat bamboo.",
    "Pandas eat bamboo.",
    "A recipe for bread with flour, water and salt.",
]
QUERY = "what do pandas eat in China"


def tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimProc, Path]]:
    tmp = tmp_path_factory.mktemp("simpool")
    emlog = tmp / "emission.jsonl"
    proc = SimProc(
        tmp, "--profile", "tiny", "--emission-log", str(emlog), "--log-file", str(tmp / "sim.log"), "--seed", "7"
    )
    yield proc, emlog
    assert proc.stop() == 0


def post_json(proc: SimProc, path: str, body: dict[str, Any], rid: str | None = None) -> tuple[int, Any]:
    status, headers, raw = proc.post(path, body, headers={"X-Request-Id": rid} if rid else None)
    if rid and status == 200:
        assert headers["x-request-id"] == rid
    return status, json.loads(raw)


def emission_lines(emlog: Path, rid: str, timeout_s: float = 3.0) -> list[dict[str, Any]]:
    """The emission log's lines for ``rid`` (the log is flushed every 0.2 s)."""
    deadline = time.monotonic() + timeout_s
    while True:
        lines = [json.loads(x) for x in emlog.read_text().splitlines()] if emlog.exists() else []
        mine = [x for x in lines if x["request_id"] == rid]
        if mine or time.monotonic() > deadline:
            return mine
        time.sleep(0.05)


def test_embeddings_shape_usage_and_determinism(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    inputs = ["hello there, general", "the second input is a little longer than the first one"]
    status, obj = post_json(proc, EMB, {"model": "sim-tiny", "input": inputs}, rid="emb-shape-1")
    assert status == 200
    assert obj["object"] == "list" and obj["id"] == "emb-shape-1" and obj["model"] == "sim-tiny"
    assert [(d["object"], d["index"]) for d in obj["data"]] == [("embedding", 0), ("embedding", 1)]
    vecs = [np.array(d["embedding"]) for d in obj["data"]]
    assert all(len(v) == TINY_DIM and np.linalg.norm(v) == pytest.approx(1.0, abs=1e-5) for v in vecs)
    n = sum(tokens(t) for t in inputs)
    assert obj["usage"]["prompt_tokens"] == n and obj["usage"]["total_tokens"] == n
    # the same text gives the same vector, alone or in another batch; another text another vector
    _, again = post_json(proc, EMB, {"model": "sim-tiny", "input": inputs[1]})
    assert again["data"][0]["embedding"] == obj["data"][1]["embedding"]
    assert float(vecs[0] @ vecs[1]) < 0.9
    # token-id input counts one token per id
    _, ids = post_json(proc, EMB, {"input": [[101, 2023, 2003, 102], [7, 8]]})
    assert ids["usage"]["prompt_tokens"] == 6 and len(ids["data"]) == 2


def test_embeddings_base64_and_dimensions(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    _, full = post_json(proc, EMB, {"input": "matryoshka dolls", "dimensions": 32})
    status, b64 = post_json(proc, EMB, {"input": "matryoshka dolls", "dimensions": 32, "encoding_format": "base64"})
    assert status == 200
    vec = np.frombuffer(base64.b64decode(b64["data"][0]["embedding"]), dtype="<f4")
    assert len(vec) == 32 and vec == pytest.approx(np.array(full["data"][0]["embedding"]), abs=1e-7)


def test_rerank_sorted_top_n_documents_and_usage(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    status, obj = post_json(proc, RERANK, {"model": "m", "query": QUERY, "documents": DOCS}, rid="rr-1")
    assert status == 200 and obj["id"] == "rr-1" and obj["model"] == "sim-tiny"
    res = obj["results"]
    assert sorted(r["index"] for r in res) == [0, 1, 2, 3]
    scores = [r["relevance_score"] for r in res]
    assert scores == sorted(scores, reverse=True) and all(0 < s < 1 for s in scores)
    assert {r["index"] for r in res[:2]} == {1, 2}  # the panda documents share the query's words
    assert all(r["document"] == {"text": DOCS[r["index"]]} for r in res)
    n = sum(tokens(QUERY) + tokens(d) for d in DOCS)  # each document is read with the query
    assert obj["usage"]["prompt_tokens"] == n and obj["usage"]["total_tokens"] == n
    body = {"query": QUERY, "documents": DOCS, "top_n": 2, "return_documents": False}
    _, top = post_json(proc, RERANK, body)
    assert top["results"] == [{"index": r["index"], "relevance_score": r["relevance_score"]} for r in res[:2]]
    for alias in ("/rerank", "/v2/rerank"):
        status, other = post_json(proc, alias, body)
        assert status == 200 and other["results"] == top["results"]


def test_score_pairs(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    status, obj = post_json(proc, "/v1/score", {"text_1": QUERY, "text_2": DOCS[:2]})
    assert status == 200 and obj["object"] == "list"
    assert [(d["index"], d["object"]) for d in obj["data"]] == [(0, "score"), (1, "score")]
    assert obj["data"][1]["score"] > obj["data"][0]["score"]
    assert obj["usage"]["prompt_tokens"] == sum(tokens(QUERY) + tokens(d) for d in DOCS[:2])


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        (EMB, {"input": ""}, "input[0] is an empty string"),
        (EMB, {"input": []}, "Field 'input' is required"),
        (EMB, {"input": ["ok", "x" * 140_000]}, "input[1]: The input (35000 tokens) is longer than the model's"),
        (EMB, {"input": "ok", "dimensions": TINY_DIM + 1}, f"dimensions must be an integer from 1 to {TINY_DIM}"),
        (RERANK, {"query": "q", "documents": ["a", 3]}, "Field 'documents' must be a list of strings"),
        (RERANK, {"query": "q", "documents": "not a list"}, "Field 'documents' is required"),
        (RERANK, {"documents": ["a"]}, "Field 'query' is required"),
        (RERANK, {"query": "q" * 100_000, "documents": ["d" * 40_000]}, "The input (35000 tokens) is longer"),
    ],
)
def test_bad_input_gets_400_with_a_clear_message(
    sim: tuple[SimProc, Path], path: str, body: dict[str, Any], message: str
) -> None:
    proc, _ = sim
    status, obj = post_json(proc, path, body)
    assert status == 400
    assert obj["object"] == "error" and obj["code"] == 400 and obj["type"] == "BadRequestError"
    assert message in obj["message"]


def test_get_is_405(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    assert proc.get(EMB)[0] == 405


def test_emission_log_line_when_the_body_is_written(sim: tuple[SimProc, Path]) -> None:
    proc, emlog = sim
    t0 = time.time_ns()
    status, _ = post_json(proc, RERANK, {"query": QUERY, "documents": DOCS}, rid="rr-emit-1")
    t1 = time.time_ns()
    assert status == 200
    lines = emission_lines(emlog, "rr-emit-1")
    assert len(lines) == 1
    line = lines[0]
    assert (line["index"], line["tokens"], line["kind"]) == (0, 0, "body")
    # written after one prefill step (at least tiny's 20 ms) and before the client had the body
    assert t0 + 20_000_000 <= line["emit_ns"] <= t1


def test_latency_grows_with_input_tokens_and_metrics_count_sequences(sim: tuple[SimProc, Path]) -> None:
    proc, emlog = sim
    before = parse_prometheus(proc.get("/metrics")[1].decode())
    t0 = time.time_ns()
    status, obj = post_json(proc, EMB, {"input": ["y" * 80_000, "z" * 40_000]}, rid="emb-big-1")
    assert status == 200 and obj["usage"]["prompt_tokens"] == 30_000
    [line] = emission_lines(emlog, "emb-big-1")
    # both inputs in one prefill step of 30,000 tokens: 20 ms + 2 ms per 1k = 80 ms at least
    assert line["emit_ns"] - t0 >= 80_000_000
    after = parse_prometheus(proc.get("/metrics")[1].decode())

    def delta(name: str) -> float:
        return by_name(after, name)[0] - by_name(before, name)[0]

    assert delta("sglang:prompt_tokens_total") == 30_000
    assert delta("sglang:num_requests_total") == 2  # one per input (engine sequence)
    assert delta("sglang:generation_tokens_total") == 0
    assert delta("sglang:time_to_first_token_seconds_count") == 0
    assert delta("sglang:e2e_request_latency_seconds_count") == 2


def test_rejects_and_faults_apply(tmp_path: Path) -> None:
    proc = SimProc(tmp_path, "--profile", "tiny", "--reject-status", "429", "--reject-duration-s", "60")
    try:
        status, headers, raw = proc.post(EMB, {"input": "hello"})
        assert status == 429 and headers["retry-after"] == "1"
        assert json.loads(raw)["message"] == "Too many requests. Please retry later."
        assert proc.post(RERANK, {"query": "q", "documents": ["a"]})[0] == 429
    finally:
        proc.stop()

    emlog = tmp_path / "faults.jsonl"
    proc = SimProc(tmp_path, "--profile", "tiny", "--error-after-chunks", "0", "--emission-log", str(emlog))
    try:
        status, _, raw = proc.post(RERANK, {"query": "q", "documents": ["a", "b"]}, headers={"X-Request-Id": "rr-e"})
        assert status == 500 and json.loads(raw)["type"] == "InternalServerError"
        assert [x["kind"] for x in emission_lines(emlog, "rr-e")] == ["error"]
    finally:
        proc.stop()

    # a body counts as one chunk: a fault after 1 chunk leaves it alone, one after 0 hits it
    proc = SimProc(tmp_path, "--profile", "tiny", "--malformed-after-chunks", "0", "--error-after-chunks", "1")
    try:
        status, _, raw = proc.post(EMB, {"input": "hello world"})
        assert status == 200 and raw.startswith(b'{"id":')
        with pytest.raises(json.JSONDecodeError):
            json.loads(raw)
    finally:
        proc.stop()

    proc = SimProc(tmp_path, "--profile", "tiny", "--stall-after-chunks", "0")
    try:
        with socket.create_connection(("127.0.0.1", proc.port), timeout=0.5) as sock:
            payload = b'{"input": "hello"}'
            sock.sendall(
                b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload
            )
            with pytest.raises(TimeoutError):
                sock.recv(1)  # nothing comes, the connection stays open
        status, _, raw = proc.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
        assert status == 200  # the server carries on
    finally:
        proc.stop()


def test_vectors_do_not_depend_on_the_server_seed(tmp_path: Path, sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    other = SimProc(tmp_path, "--profile", "tiny", "--seed", "99")
    try:
        body = {"input": ["same text, other server"], "dimensions": 64}
        assert post_json(other, EMB, body)[1]["data"] == post_json(proc, EMB, body)[1]["data"]
    finally:
        other.stop()


def test_client_disconnect_aborts_every_input_and_vllm_error_bodies(tmp_path: Path) -> None:
    proc = SimProc(tmp_path, "--profile", "tiny", "--ttft-ms", "1000", "--metrics-style", "vllm")
    try:
        status, _, raw = proc.post(EMB, {"input": []})
        err = json.loads(raw)["error"]
        assert status == 400 and err["code"] == 400 and "Field 'input' is required" in err["message"]
        payload = json.dumps({"input": ["a", "b", "c"]}).encode()
        with socket.create_connection(("127.0.0.1", proc.port), timeout=2) as sock:
            sock.sendall(
                b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload
            )
            time.sleep(0.1)  # queued and in its (1-s) prefill step
        deadline = time.monotonic() + 3
        while json.loads(proc.get("/sim/stats")[1])["aborted"] < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        stats = json.loads(proc.get("/sim/stats")[1])
        assert stats["aborted"] == 3 and stats["finished"] == 0
    finally:
        proc.stop()
