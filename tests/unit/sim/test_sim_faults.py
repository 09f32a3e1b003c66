"""Each fault-injection flag, against a real simulator process."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from sim_testutil import SimProc

CHAT = "/v1/chat/completions"
BODY = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 10, "ignore_eos": True, "stream": True}


def content_chunks(events: list[tuple[int, bytes]]) -> list[dict[str, object]]:
    out = []
    for _, payload in events:
        if payload == b"[DONE]":
            continue
        obj = json.loads(payload)
        if obj.get("choices") and obj["choices"][0]["delta"].get("content"):
            out.append(obj)
    return out


def test_crash_after_requests_exits_nonzero(tmp_path: Path) -> None:
    log = tmp_path / "crash.log"
    proc = SimProc(tmp_path, "--profile", "tiny", "--crash-after-requests", "2", "--log-file", str(log))
    assert proc.post(CHAT, {**BODY, "stream": False})[0] == 200
    assert proc.post(CHAT, {**BODY, "stream": False})[0] == 200
    try:
        proc.post(CHAT, {**BODY, "stream": False})
    except (ConnectionError, OSError):
        pass
    assert proc.proc.wait(timeout=5) == 1
    proc.stop()
    assert "Scheduler hit an exception" in log.read_text()


def test_crash_after_seconds(tmp_path: Path) -> None:
    proc = SimProc(tmp_path, "--profile", "tiny", "--crash-after-s", "0.5")
    assert proc.proc.wait(timeout=5) == 1
    proc.stop()


def test_stall_after_chunks_keeps_connection_silent(tmp_path: Path) -> None:
    proc = SimProc(tmp_path, "--profile", "tiny", "--stall-after-chunks", "3")
    try:
        t0 = time.monotonic()
        status, events = proc.stream(CHAT, BODY, timeout_s=0.6)
        assert status == 200
        assert len(content_chunks(events)) == 3
        assert all(p != b"[DONE]" for _, p in events)
        assert time.monotonic() - t0 >= 0.6  # the client had to time out
    finally:
        proc.stop()


def test_malformed_chunk_then_stream_carries_on(tmp_path: Path) -> None:
    proc = SimProc(tmp_path, "--profile", "tiny", "--malformed-after-chunks", "2")
    try:
        _, events = proc.stream(CHAT, BODY)
        bad = []
        for i, (_, payload) in enumerate(events):
            if payload == b"[DONE]":
                continue
            try:
                json.loads(payload)
            except json.JSONDecodeError:
                bad.append(i)
        assert bad == [3]  # role chunk, two good content chunks, then the broken one
        assert events[-1][1] == b"[DONE]"
    finally:
        proc.stop()


def test_error_event_inside_200_stream(tmp_path: Path) -> None:
    proc = SimProc(tmp_path, "--profile", "tiny", "--error-after-chunks", "4")
    try:
        status, events = proc.stream(CHAT, BODY)
        assert status == 200
        assert len(content_chunks(events)) == 4
        err = json.loads(events[-2][1])
        assert err["error"]["code"] == 500 and err["error"]["type"] == "InternalServerError"
        assert events[-1][1] == b"[DONE]"
    finally:
        proc.stop()


def _fault_pattern(tmp_path: Path, seed: str, n: int) -> list[bool]:
    tmp_path.mkdir()
    proc = SimProc(tmp_path, "--profile", "tiny", "--error-after-chunks", "0", "--fault-rate", "0.5", "--seed", seed)
    try:
        out = []
        for _ in range(n):
            _, events = proc.stream(CHAT, {**BODY, "max_tokens": 2})
            out.append(any(b'"error"' in p for _, p in events))
        return out
    finally:
        proc.stop()


def test_fault_rate_applies_to_a_share_of_requests(tmp_path: Path) -> None:
    """Which requests fault is drawn from the seeded generator, one draw per request: the same
    seed gives the same requests, another seed others, and the share is the rate's."""
    first = _fault_pattern(tmp_path / "a", "1", 40)
    assert first == _fault_pattern(tmp_path / "b", "1", 40)  # exactly reproducible
    assert first != _fault_pattern(tmp_path / "c", "2", 40)
    # binomial(40, 0.5): mean 20, sd 3.2; 4 sd either side
    assert 7 <= sum(first) <= 33, sum(first)


def test_reject_bursts_429_then_recover(tmp_path: Path) -> None:
    proc = SimProc(
        tmp_path, "--profile", "tiny", "--reject-status", "429", "--reject-start-s", "0", "--reject-duration-s", "0.5"
    )
    try:
        status, headers, body = proc.post(CHAT, {**BODY, "stream": False})
        assert status == 429 and headers.get("retry-after") == "1"
        assert json.loads(body)["code"] == 429
        time.sleep(0.6)
        assert proc.post(CHAT, {**BODY, "stream": False})[0] == 200
    finally:
        proc.stop()


def test_reject_bursts_503_periodic(tmp_path: Path) -> None:
    proc = SimProc(
        tmp_path,
        "--profile",
        "tiny",
        "--reject-status",
        "503",
        "--reject-start-s",
        "0.3",
        "--reject-duration-s",
        "0.3",
        "--reject-period-s",
        "100",
    )
    try:
        assert proc.post(CHAT, {**BODY, "stream": False})[0] == 200
        time.sleep(0.35)
        status, _, body = proc.post(CHAT, {**BODY, "stream": False})
        assert status == 503 and json.loads(body)["message"] == "The request queue is full."
    finally:
        proc.stop()


def test_queue_limit_returns_503_with_sglang_message(tmp_path: Path) -> None:
    proc = SimProc(tmp_path, "--profile", "tiny", "--max-running-requests", "1", "--max-queued-requests", "1")
    try:
        body = json.dumps({**BODY, "max_tokens": 400}).encode()
        raw = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        held = [socket.create_connection(("127.0.0.1", proc.port)) for _ in range(2)]
        for s in held:  # one runs, one waits in the queue
            s.sendall(raw)
            time.sleep(0.05)
        status, _, reply = proc.post(CHAT, {**BODY, "stream": False})
        assert status == 503 and json.loads(reply)["message"] == "The request queue is full."
        for s in held:
            s.close()
    finally:
        proc.stop()


@pytest.mark.parametrize(
    ("style", "message"),
    [
        ("sglang", "Not enough memory. Please try to increase --mem-fraction-static"),
        ("vllm", "No available memory for the cache blocks"),
    ],
)
def test_not_enough_memory_exits_nonzero_with_the_servers_message(tmp_path: Path, style: str, message: str) -> None:
    log = tmp_path / "oom.log"
    proc = SimProc(
        tmp_path,
        "--profile", "b300x8-kimi-k2.6-ddtree", "--hardware", "h100x8", "--startup-s", "0.1",
        "--log-file", str(log), "--metrics-style", style,
        wait_ready=False,
    )  # fmt: skip
    assert proc.proc.wait(timeout=10) == 1
    proc.stop()
    assert message in log.read_text()
