"""Servers that are strict about what they are sent (issue 34).

``_StrictServer`` behaves as llama.cpp's OpenAI-compatible server (llama-cpp-python's
``llama_cpp.server``) does at its door: a request whose ``X-Request-Id`` is not a UUID gets 400 with
an empty body, before the body is read. It streams one token per chunk and sends usage only when
asked (``stream_options.include_usage``), and it keeps every request id it served. With
``refuse_all`` it answers 400 with an empty body to everything (a header it wants is missing): a
run that cannot succeed, which must stop within seconds with one line, exit 2 and a partial report.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_loadgen, run_records

pytestmark = pytest.mark.slow

SECRET = "sk-test-never-shown-0123"


class _StrictServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, refuse_all: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.refuse_all = refuse_all
        self.served_ids: list[str] = []
        self.rejected = 0
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _StrictServer

    def do_GET(self) -> None:
        if self.path in ("/health", "/v1/models"):
            self._send(200, b'{"object":"list","data":[{"id":"tiny","object":"model"}]}')
        else:
            self._send(404, b'{"detail":"Not Found"}')

    def do_POST(self) -> None:
        rid = self.headers.get("X-Request-Id")
        valid = True
        if rid is not None:
            try:
                uuid.UUID(rid)
            except ValueError:
                valid = False
        length = int(self.headers.get("Content-Length", 0))
        if self.server.refuse_all or not valid:
            with self.server.lock:
                self.server.rejected += 1
            self._send(400, b"", close=True)  # as llama.cpp's middleware: no body, the request unread
            return
        body = json.loads(self.rfile.read(length))
        with self.server.lock:
            self.server.served_ids.append(rid or "")
        n = int(body.get("max_tokens") or 16)
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(n):  # one token a chunk, as llama.cpp sends them
            last = i == n - 1
            chunk = {
                "id": "chatcmpl-x",
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": "length" if last else None}],
            }
            self._chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        if usage:
            tail = {"id": "chatcmpl-x", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": n}}
            self._chunk(b"data: " + json.dumps(tail).encode() + b"\n\n")
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _send(self, code: int, body: bytes, close: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _serve(refuse_all: bool) -> Iterator[_StrictServer]:
    server = _StrictServer(refuse_all)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def strict() -> Iterator[_StrictServer]:
    yield from _serve(False)


@pytest.fixture
def refusing() -> Iterator[_StrictServer]:
    yield from _serve(True)


def _ramp(url: str, out: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    # --requests-per-step ends each step by its work; the long --step-seconds only catches a hang
    return run_loadgen(
        "ramp", "--url", url, "--max-tokens", "6", "--warmup-seconds", "0", "--step-seconds", "120",
        "--no-telemetry", "--drain-seconds", "10", "--out", str(out), *args, timeout=120, env=env,
    )  # fmt: skip


def test_a_server_that_validates_request_ids_answers_every_request(strict: _StrictServer, tmp_path: Path) -> None:
    proc = _ramp(strict.url, tmp_path / "fast", "--concurrency", "1,3", "--requests-per-step", "6")
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = run_records(Path(proc.stdout.strip().splitlines()[-1]))
    assert recs and all(r["error_class"] is None for r in recs), {r["error"] for r in recs}
    assert strict.rejected == 0
    # the id on the wire is the record's header_id: each record maps to the request the server saw
    assert sorted(r["header_id"] for r in recs) == sorted(strict.served_ids)
    assert all(str(uuid.UUID(r["header_id"])) == r["header_id"] for r in recs)
    assert len({r["id"] for r in recs}) == len(recs)
    # one token a chunk, counted by the server's usage (asked for) and agreeing with the chunks
    assert all(r["output_tokens"] == 6 == len(r["chunk_offsets_ns"]) for r in recs)
    assert {r["tokens_source"] for r in recs} == {"usage_per_chunk"} or {r["tokens_source"] for r in recs} == {"usage"}
    assert {r["finish_reason"] for r in recs} == {"length"}


def test_the_openai_transport_and_no_id_header_are_accepted_too(strict: _StrictServer, tmp_path: Path) -> None:
    proc = _ramp(strict.url, tmp_path / "sdk", "--concurrency", "2", "--requests-per-step", "4",
                 "--transport", "openai")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = run_records(Path(proc.stdout.strip().splitlines()[-1]))
    assert recs and all(r["error_class"] is None for r in recs)
    assert sorted(r["header_id"] for r in recs) == sorted(strict.served_ids)
    before = len(strict.served_ids)
    proc = _ramp(strict.url, tmp_path / "none", "--concurrency", "2", "--requests-per-step", "4",
                 "--request-id-header", "none")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = run_records(Path(proc.stdout.strip().splitlines()[-1]))
    assert recs and all(r["error_class"] is None and r["header_id"] is None for r in recs)
    assert strict.served_ids[before:] == [""] * (len(strict.served_ids) - before)  # no id header came
    assert strict.rejected == 0


def _check_stopped(proc: Any, server: _StrictServer) -> Path:
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    line = errors[0]
    assert "refused all of the first 5 requests, each with HTTP 400 and an empty body" in line
    assert "POST /v1/chat/completions" in line and "X-Request-Id: " in line
    assert "Authorization: Bearer <redacted>" in line and 'model: "tiny"' in line and "messages: [1 item]" in line
    assert "Try: " in line and "--request-id-header none" in line
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    # nothing the run wrote or printed holds the key
    assert SECRET not in proc.stderr + proc.stdout
    assert not [f.name for f in run_dir.rglob("*") if f.is_file() and SECRET in f.read_text(errors="replace")]
    # the records taken stay, each refused; the partial report says why the run stopped
    recs = run_records(run_dir)
    answered = [r for r in recs if r["error_class"] != "cancelled"]  # a user stopped mid-call: no answer
    assert len(answered) >= 5 and all(r["status"] == 400 and r["error"] == "HTTP 400: (empty body)" for r in answered)
    assert len(answered) <= server.rejected <= len(recs)
    ends = [json.loads(x) for x in (run_dir / "steps.jsonl").read_text().splitlines()]
    assert [e["reason"] for e in ends if e["event"] == "end"] == ["requests_refused"]  # the first step ended it
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    [refused] = [e for e in events if e.get("kind") == "requests_refused"]
    assert refused["status"] == 400 and refused["answer"] == "(empty body)"
    report = (run_dir / "report.md").read_text()
    assert "**Stopped early**: the server refused all of the first 5 requests" in report
    assert "HTTP 400: (empty body)" in report  # the error sample
    assert "Stopped early:" in (run_dir / "report.html").read_text()
    return run_dir


def test_a_run_whose_every_request_is_refused_stops_with_one_line(refusing: _StrictServer, tmp_path: Path) -> None:
    # two steps of 120 s: only the stop ends this within the test's time limit
    proc = _ramp(refusing.url, tmp_path / "out", "--concurrency", "4,8", env={"OPENAI_API_KEY": SECRET})
    _check_stopped(proc, refusing)


def test_a_worker_process_stops_the_run_the_same_way(refusing: _StrictServer, tmp_path: Path) -> None:
    proc = _ramp(refusing.url, tmp_path / "out", "--concurrency", "2,4", "--workers", "1",
                 env={"OPENAI_API_KEY": SECRET})  # fmt: skip
    _check_stopped(proc, refusing)
