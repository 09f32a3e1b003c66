"""The simulator over real HTTP on 127.0.0.1: API shape, emission truth, metrics, start-up."""

from __future__ import annotations

import itertools
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sim_testutil import SimProc, by_name, parse_prometheus

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "Tell me about the weather in spring, in a few words please."}]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimProc, Path]]:
    tmp = tmp_path_factory.mktemp("sim")
    emlog = tmp / "emission.jsonl"
    proc = SimProc(
        tmp, "--profile", "tiny", "--emission-log", str(emlog), "--log-file", str(tmp / "sim.log"), "--seed", "7"
    )
    yield proc, tmp
    assert proc.stop() == 0


def test_port_file_and_listening_line(sim: tuple[SimProc, Path]) -> None:
    proc, tmp = sim
    log = (tmp / "sim.log").read_text()
    assert re.search(
        r"max_total_num_tokens=(\d+), chunked_prefill_size=(-?\d+), max_prefill_tokens=(\d+), "
        r"max_running_requests=(\d+), context_len=(\d+), available_gpu_mem=([\d.]+) GB",
        log,
    )
    assert "The server is fired up and ready to roll" in log
    # journal-like: ISO time with offset, host, unit[pid]: [date time TP0] message
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}[+-]\d\d:\d\d \S+ sglang\[\d+\]: \[[\d -:]+ TP0\] ", log)
    assert proc.proc.stdout is not None
    line = proc.proc.stdout.readline().decode()
    assert line == f"listening on http://127.0.0.1:{proc.port}\n"


def test_stream_chat_shape_usage_and_request_id(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    status, events = proc.stream(
        CHAT,
        {
            "model": "x",
            "messages": MSG,
            "max_tokens": 12,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        headers={"X-Request-Id": "req-shape-1"},
    )
    assert status == 200
    assert events[-1][1] == b"[DONE]"
    chunks = [json.loads(e) for _, e in events[:-1]]
    assert all(c["id"] == "req-shape-1" and c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[0]["choices"][0]["delta"]["content"] == ""
    content = [c for c in chunks[1:] if c["choices"] and c["choices"][0]["delta"]["content"]]
    words = sum(len(c["choices"][0]["delta"]["content"].split()) for c in content)
    assert words == 12 and len(content) == 12  # tiny has no speculative decoding: one token per chunk
    finish = chunks[-2]
    assert finish["choices"][0]["finish_reason"] == "length"
    usage = chunks[-1]
    assert usage["choices"] == []
    assert usage["usage"]["completion_tokens"] == 12
    # prompt estimate: ceil(chars / 4) + 4 per message
    assert usage["usage"]["prompt_tokens"] == -(-len(MSG[0]["content"]) // 4) + 4


def test_non_streaming_and_completions(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    status, headers, body = proc.post(
        CHAT, {"messages": MSG, "max_tokens": 9, "ignore_eos": True}, headers={"X-Request-Id": "plain-1"}
    )
    assert status == 200 and int(headers["content-length"]) == len(body)
    obj = json.loads(body)
    assert obj["id"] == "plain-1" and obj["object"] == "chat.completion"
    assert len(obj["choices"][0]["message"]["content"].split()) == 9 == obj["usage"]["completion_tokens"]
    status, _, body = proc.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 4, "ignore_eos": True})
    obj = json.loads(body)
    assert status == 200 and obj["object"] == "text_completion"
    assert obj["usage"] == {
        "prompt_tokens": 4,
        "completion_tokens": 4,
        "total_tokens": 8,
        "prompt_tokens_details": {"cached_tokens": 0},  # 4 tokens: no full 64-token block to cache
    }


def test_natural_length_stops_before_max_tokens_sometimes(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    reasons = []
    for _ in range(8):
        _, _, body = proc.post(CHAT, {"messages": MSG, "max_tokens": 150, "max_completion_tokens": 150})
        obj = json.loads(body)
        reasons.append(obj["choices"][0]["finish_reason"])
        n = obj["usage"]["completion_tokens"]
        assert (n < 150) == (reasons[-1] == "stop") and n <= 150
    assert "stop" in reasons


def test_continuous_usage_stats(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    _, events = proc.stream(
        CHAT,
        {
            "messages": MSG,
            "max_tokens": 3,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"continuous_usage_stats": True},
        },
    )
    chunks = [json.loads(e) for _, e in events[:-1]]
    assert [c["usage"]["completion_tokens"] for c in chunks] == [0, 1, 2, 3, 3]


def test_emission_log_matches_what_the_client_received(sim: tuple[SimProc, Path]) -> None:
    proc, tmp = sim
    rid = "emission-check-1"
    _, events = proc.stream(
        CHAT,
        {
            "messages": MSG,
            "max_tokens": 20,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        headers={"X-Request-Id": rid},
    )
    time.sleep(0.35)  # the log is flushed every 0.2 s
    lines = [json.loads(x) for x in (tmp / "emission.jsonl").read_text().splitlines()]
    mine = [x for x in lines if x["request_id"] == rid]
    assert [x["index"] for x in mine] == list(range(len(events) - 1))  # every data event but [DONE]
    received_tokens = []
    for _, payload in events[:-1]:
        c = json.loads(payload)
        text = c["choices"][0]["delta"]["content"] if c["choices"] else None
        received_tokens.append(len(text.split()) if text else 0)
    assert [x["tokens"] for x in mine] == received_tokens
    for (arrived_ns, _), sent in zip(events, mine, strict=False):
        lag_ms = (arrived_ns - sent["emit_ns"]) / 1e6
        assert -1.0 < lag_ms < 200.0
    content = [x["emit_ns"] for x in mine if x["tokens"]]
    gaps_ms = [(b - a) / 1e6 for a, b in itertools.pairwise(content)]
    assert sum(gaps_ms) / len(gaps_ms) == pytest.approx(5.0, abs=1.0)  # tiny: ~5 ms per step


def test_keep_alive_serves_several_requests_on_one_connection(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    c = proc.conn()
    try:
        socks = []
        for i in range(3):
            c.request(
                "POST",
                CHAT,
                body=json.dumps({"messages": MSG, "max_tokens": 2, "stream": i % 2 == 0, "ignore_eos": True}),
            )
            r = c.getresponse()
            body = r.read()
            assert r.status == 200 and body
            assert (r.getheader("connection") or "").lower() != "close"
            # http.client reconnects silently when a server closes: the same socket object, still
            # open, is the proof that one connection carried all three
            assert c.sock is not None
            socks.append((c.sock, c.sock.getsockname()))
        assert all(s is socks[0][0] and name == socks[0][1] for s, name in socks)
    finally:
        c.close()


def test_errors_have_real_bodies(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    status, _, body = proc.post(CHAT, {"messages": [{"role": "user", "content": "x" * 140000}], "max_tokens": 5})
    obj = json.loads(body)
    assert status == 400 and obj["object"] == "error" and obj["code"] == 400
    assert "is longer than the model's context length (32768 tokens)" in obj["message"]
    status, _, body = proc.post(CHAT, {"messages": MSG, "max_tokens": 40000})
    assert status == 400 and "maximum context length of 32768 tokens" in json.loads(body)["message"]
    status, _, _ = proc.post(CHAT, {"max_tokens": 5})
    assert status == 400
    assert proc.get("/nope")[0] == 404


def test_models_and_metrics(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    status, body = proc.get("/v1/models")
    assert status == 200 and json.loads(body)["data"][0]["id"] == "sim-tiny"
    before = parse_prometheus(proc.get("/metrics")[1].decode())
    proc.post(CHAT, {"messages": MSG, "max_tokens": 7, "ignore_eos": True})
    after = parse_prometheus(proc.get("/metrics")[1].decode())
    assert by_name(after, "sglang:num_requests_total")[0] == by_name(before, "sglang:num_requests_total")[0] + 1
    gen = by_name(after, "sglang:generation_tokens_total")[0] - by_name(before, "sglang:generation_tokens_total")[0]
    assert gen == 7
    for name in (
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:gen_throughput",
        "sglang:max_total_num_tokens",
        "sglang:spec_accept_length",
        "sglang:num_retracted_requests_total",
    ):
        assert by_name(after, name), name
    assert by_name(after, "sglang:time_to_first_token_seconds_count")[0] >= 1
    bucket = [
        v for k, v in after.items() if k.startswith("sglang:time_to_first_token_seconds_bucket") and 'le="0.04"' in k
    ]
    assert bucket and bucket[0] >= 1  # tiny's TTFT is ~20 ms


def test_gpu_metrics_use_dcgm_names(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    samples = parse_prometheus(proc.get("/gpu/metrics")[1].decode())
    for name in (
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
    ):
        values = by_name(samples, name)
        assert len(values) == 1, name
    assert any('gpu="0"' in k for k in samples)
    e1 = by_name(samples, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")[0]
    time.sleep(0.2)
    e2 = by_name(parse_prometheus(proc.get("/gpu/metrics")[1].decode()), "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")[0]
    assert 0.2 * 40 * 1000 * 0.9 <= e2 - e1 <= 0.5 * 300 * 1000  # mJ; idle 40 W at least


def test_client_disconnect_aborts_the_request(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    before = by_name(parse_prometheus(proc.get("/metrics")[1].decode()), "sglang:num_aborted_requests_total")[0]
    s = socket.create_connection(("127.0.0.1", proc.port))
    body = json.dumps({"messages": MSG, "max_tokens": 2000, "ignore_eos": True, "stream": True}).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    assert s.recv(4096).startswith(b"HTTP/1.1 200 OK")
    s.close()
    time.sleep(0.1)
    after = by_name(parse_prometheus(proc.get("/metrics")[1].decode()), "sglang:num_aborted_requests_total")[0]
    assert after == before + 1


@pytest.mark.parametrize("flag", ["--metrics-style", "--engine"])
def test_vllm_metric_style(tmp_path: Path, flag: str) -> None:
    # --engine vllm brings vLLM's names with its defaults (sim/engines.py)
    proc = SimProc(tmp_path, "--profile", "tiny", flag, "vllm")
    try:
        proc.post(CHAT, {"messages": MSG, "max_tokens": 3, "ignore_eos": True})
        samples = parse_prometheus(proc.get("/metrics")[1].decode())
        for name in (
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc",
            "vllm:num_preemptions_total",
            "vllm:generation_tokens_total",
        ):
            assert by_name(samples, name), name
        assert by_name(samples, "vllm:generation_tokens_total") == [3.0]
        assert not any(k.startswith("sglang:") for k in samples)
        status, _, body = proc.post(CHAT, {"messages": MSG, "max_tokens": 40000})
        assert status == 400 and json.loads(body)["error"]["code"] == 400
        # vLLM: include_usage defaults to true once stream_options is sent
        _, events = proc.stream(CHAT, {"messages": MSG, "max_tokens": 2, "stream": True, "stream_options": {}})
        assert json.loads(events[-2][1])["choices"] == []
    finally:
        assert proc.stop() == 0


def test_health_is_503_while_starting_then_200(tmp_path: Path) -> None:
    proc = SimProc(tmp_path, "--profile", "tiny", "--ready-delay-s", "0.8", wait_ready=False)
    try:
        assert proc.get("/health")[0] == 503
        status, _, _ = proc.post(CHAT, {"messages": MSG, "max_tokens": 2})
        assert status == 503
        proc.wait_ready(5.0)
        assert proc.get("/health")[0] == 200
    finally:
        proc.stop()


@pytest.mark.slow
def test_seed_startup_128_serves_and_256_fails_with_graph_capture_oom(tmp_path: Path) -> None:
    ok = SimProc(
        tmp_path, "--profile", "b300x8-kimi-k2.6-ddtree", "--max-running-requests", "128", "--startup-s", "0.3"
    )
    try:
        assert ok.get("/health")[0] == 200
        samples = parse_prometheus(ok.get("/gpu/metrics")[1].decode())
        assert len(by_name(samples, "DCGM_FI_DEV_POWER_USAGE")) == 8
        assert 180 <= by_name(samples, "DCGM_FI_DEV_POWER_USAGE")[0] <= 190  # idle 186 W
    finally:
        ok.stop()
    log = tmp_path / "fail.log"
    bad = SimProc(
        tmp_path,
        "--profile",
        "b300x8-kimi-k2.6-ddtree",
        "--max-running-requests",
        "256",
        "--startup-s",
        "0.3",
        "--log-file",
        str(log),
        wait_ready=False,
    )
    assert bad.get("/health")[0] == 503
    assert bad.proc.wait(timeout=10) != 0
    bad.stop()
    text = log.read_text()
    assert "Capture cuda graph failed: CUDA out of memory" in text
    assert "2. set --cuda-graph-max-bs to a smaller value" in text
    assert "The server is fired up" not in text


def test_server_info_reports_settings(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    status, body = proc.get("/server_info")
    info = json.loads(body)
    assert status == 200 and info["max_running_requests"] == 64 and info["tp_size"] == 1
    assert info["internal_states"][0]["avg_spec_accept_length"] is None  # tiny has no speculative decoding


def test_kv_pool_full_retracts_over_http_and_streams_still_complete(tmp_path: Path) -> None:
    log = tmp_path / "kv.log"
    # pool = (0.5 * 2.08 GB - 1 GB) / 32 KiB = 1220 tokens: six 150-token answers do not fit at once
    proc = SimProc(
        tmp_path, "--profile", "tiny", "--hw-hbm-gb", "2.08", "--mem-fraction-static", "0.5", "--log-file", str(log)
    )
    try:
        results: list[int] = []

        def one(i: int) -> None:
            # distinct prompts: a shared one would be prefix-cached and need less KV
            content = chr(ord("a") + i) * 400
            body = {"messages": [{"role": "user", "content": content}], "max_tokens": 150, "ignore_eos": True}
            status, _, reply = proc.post(CHAT, {**body, "stream": False}, headers={"X-Request-Id": f"kv-{i}"})
            assert status == 200
            results.append(json.loads(reply)["usage"]["completion_tokens"])

        threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=20)
        assert results == [150] * 6
        samples = parse_prometheus(proc.get("/metrics")[1].decode())
        assert by_name(samples, "sglang:num_retracted_requests_total")[0] >= 1
    finally:
        proc.stop()
    assert re.search(
        r"KV cache pool is full\. Retract requests\. #retracted_reqs: \d+, #new_token_ratio: ", log.read_text()
    )


def _read_responses(s: socket.socket, n: int) -> bytes:
    data = b""
    s.settimeout(5)
    while data.count(b"HTTP/1.1 200 OK") < n or not data.endswith((b"}", b"0\r\n\r\n")):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_pipelined_and_chunked_request_bodies(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    body = json.dumps({"messages": MSG, "max_tokens": 3, "ignore_eos": True}).encode()
    plain = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    half = len(body) // 2
    chunked = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n" % half
        + body[:half]
        + b"\r\n"
        + b"%x\r\n" % (len(body) - half)
        + body[half:]
        + b"\r\n0\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", proc.port)) as s:
        s.sendall(plain + chunked)  # two requests before reading: answered in order
        data = _read_responses(s, 2)
    replies = [json.loads(part.split(b"\r\n\r\n", 1)[1]) for part in data.split(b"HTTP/1.1 ")[1:]]
    assert [r["usage"]["completion_tokens"] for r in replies] == [3, 3]
