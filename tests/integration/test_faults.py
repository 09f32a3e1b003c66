"""The fault matrix (issue 7): each fault against a real server on 127.0.0.1, each with what the run
must do (go on or stop), what must be on disk, and what the report must say.

Servers: the simulator with its fault flags (crash, slow/never ready, start-up failure) and
``FaultServer`` (below) for HTTP errors with bodies, broken streams and connection resets,
which knows the truth (which request got which fault) for every request id.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, loadgen_cmd, run_dir_of, run_loadgen, run_records, start_sim

pytestmark = pytest.mark.slow

SECRET = "sk-SECRET-lifecycle-7f3a9c"
QUICK = ["--warmup-seconds", "0.2", "--max-tokens", "8", "--drain-seconds", "5"]


def _summary(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
    return data


# -- the fault server ----------------------------------------------------------------------

CTX_BODY = (
    b'{"object":"error","message":"The input (9000 tokens) is longer than the model\'s context length '
    b'(8192 tokens).","type":"BadRequestError","param":null,"code":400}'
)
BODIES = {
    "ctx400": (400, CTX_BODY),
    "r429": (429, b'{"object":"error","message":"Too many requests. Please retry later.","code":429}'),
    "kv500": (
        500,
        b'{"error":{"message":"Request r1 cannot fit in the KV cache pool (9000 tokens needed).","code":500}}',
    ),
    "oom500": (500, b'{"error":{"message":"CUDA out of memory. Tried to allocate 2.00 GiB","code":500}}'),
    "e500": (500, b'{"object":"error","message":"Internal server error: scheduler exploded","code":500}'),
    "q503": (503, b'{"object":"error","message":"The request queue is full.","type":"ServiceUnavailable","code":503}'),
}
EXPECTED_CLASS = {
    "ok": None,
    "ctx400": "http_400_context_length",
    "r429": "http_429",
    "kv500": "kv_cache",
    "oom500": "kv_cache",
    "e500": "http_5xx",
    "q503": "http_5xx",
    "err_event": "stream_error",
    "truncated": "truncated",
    "bad_json": "malformed_stream",
    "bad_sse": "malformed_stream",
    "reset": "connection_reset",
    "stall": "stall",
}


def _chunk(rid: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    obj = {
        "id": rid,
        "object": "chat.completion.chunk",
        "model": "fault",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class FaultServer:
    """A small OpenAI-style server on 127.0.0.1 that misbehaves on purpose, one way per request.

    Request ``n`` (counted from 0 in arrival order) gets behaviour ``kinds[n % len(kinds)]``; the
    server keeps ``{X-Request-Id: kind}``, the Authorization headers and the X-Loadgen-Source header
    (the workload's label) it saw, so a test can check the client's classification of every request
    against the truth. Behaviours:

    ``ok``            a normal stream: role chunk, 3 content chunks, finish, usage, [DONE]
    ``ctx400``        HTTP 400 with SGLang's context-length body
    ``r429``          HTTP 429 with a rate-limit body
    ``kv500``         HTTP 500 whose body names the KV cache (SGLang's abort)
    ``oom500``        HTTP 500 with a CUDA out-of-memory body
    ``e500``          HTTP 500 with a plain body
    ``q503``          HTTP 503 with SGLang's queue-full body
    ``err_event``     200 stream, 2 content chunks, then an error object inside the stream, [DONE]
    ``truncated``     200 stream, 2 content chunks, then the connection is closed (no [DONE])
    ``bad_json``      200 stream whose second content chunk is truncated JSON, then [DONE]
    ``bad_sse``       200 event stream whose payloads are not JSON (``data: <garbage>``), then [DONE]
    ``not_sse``       200 with an HTML page instead of an event stream
    ``reset``         the request is read, then the connection is reset (RST)
    ``stall``         200 stream, 2 content chunks, then silence for ``stall_s`` seconds

    Not part of loadgen: it lives with the tests that use it."""

    def __init__(self, kinds: list[str], stall_s: float = 3.0) -> None:
        self.kinds = kinds
        self.stall_s = stall_s
        self.seen: dict[str, str] = {}
        self.auth: list[str | None] = []
        self.sources: dict[str, str | None] = {}
        self.count = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.path in ("/health", "/v1/models"):
                    body = b'{"data":[{"id":"fault"}]}' if self.path == "/v1/models" else b"ok"
                    self._send(200, body)
                else:
                    self._send(404, b"{}")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                rid = self.headers.get("X-Request-Id") or "?"
                with server.lock:
                    kind = server.kinds[server.count % len(server.kinds)]
                    server.count += 1
                    server.seen[rid] = kind
                    server.auth.append(self.headers.get("Authorization"))
                    server.sources[rid] = self.headers.get("X-Loadgen-Source")
                server.respond(self, kind, rid)

            def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FaultServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def respond(self, h: BaseHTTPRequestHandler, kind: str, rid: str) -> None:
        if kind in BODIES:
            code, body = BODIES[kind]
            h.send_response(code)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return
        if kind == "reset":
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.close_connection = True
            h.connection.close()
            return
        if kind == "not_sse":
            body = b"<html><body>502 Bad Gateway</body></html>"
            h.send_response(200)
            h.send_header("Content-Type", "text/html")
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        def send(data: bytes) -> None:
            h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            h.wfile.flush()

        send(_chunk(rid, {"role": "assistant", "content": ""}))
        for i in range(2):
            time.sleep(0.01)
            send(_chunk(rid, {"content": f" word{i}"}))
        if kind == "err_event":
            error = {
                "error": {"message": "internal error in the scheduler", "type": "InternalServerError", "code": 500}
            }
            send(b"data: " + json.dumps(error).encode() + b"\n\n")
            send(b"data: [DONE]\n\n")
        elif kind == "truncated":
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)
            return
        elif kind == "stall":
            time.sleep(self.stall_s)
            h.close_connection = True
            return
        elif kind == "bad_sse":
            send(b"data: <<not json at all>>\nevent without a colon\n\n: a comment\n\ndata: still not json\n\n")
            send(b"data: [DONE]\n\n")
        elif kind == "bad_json":
            send(b'data: {"id":"x","choices":[{"index":0,"delta":{"content":" wo\n\n')
            send(b"data: [DONE]\n\n")
        else:
            send(_chunk(rid, {"content": " word2"}))
            send(_chunk(rid, {}, "stop"))
            usage = {
                "id": rid,
                "choices": [],
                "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
            }
            send(b"data: " + json.dumps(usage).encode() + b"\n\n")
            send(b"data: [DONE]\n\n")
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()


# -- HTTP errors, broken streams, resets: one ramp, every request checked against the truth ---------


@pytest.fixture(scope="module")
def fault_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[FaultServer, subprocess.CompletedProcess[str]]]:
    kinds = list(EXPECTED_CLASS)
    out = tmp_path_factory.mktemp("faults")
    with FaultServer(kinds, stall_s=2.0) as server:
        proc = run_loadgen(
            "ramp",
            "--url",
            server.url,
            "--model",
            "fault",
            "--concurrency",
            "4",
            # ends once 26 requests of its window finished: every kind of fault twice over (13 kinds
            # in turn), however fast the machine; the 60 s only catch a hang
            "--requests-per-step",
            "26",
            "--step-seconds",
            "60",
            "--stall-timeout",
            "0.5",
            "--no-telemetry",
            "--api-key",
            SECRET,
            "--out",
            str(out),
            *QUICK,
            env={"OPENAI_API_KEY": SECRET + "-env"},
        )
        yield server, proc


def test_every_fault_is_classified_and_every_request_is_on_disk(
    fault_run: tuple[FaultServer, subprocess.CompletedProcess[str]],
) -> None:
    server, proc = fault_run
    run_dir = run_dir_of(proc)  # the run kept going through all of them
    records = run_records(run_dir)
    # every request the server answered (or broke) is a record, with the class its fault implies
    assert {r["header_id"] for r in records} == set(server.seen)
    # each request told the server its workload label, the one its record keeps
    assert all(r["source"] and server.sources[r["header_id"]] == r["source"] for r in records)
    mismatched = [
        (server.seen[r["header_id"]], r["error_class"])
        for r in records
        if EXPECTED_CLASS[server.seen[r["header_id"]]] != r["error_class"]
    ]
    assert mismatched == []
    kinds_seen = Counter(server.seen.values())
    assert set(kinds_seen) == set(EXPECTED_CLASS)  # each fault happened at least once
    by_kind = {server.seen[r["header_id"]]: r for r in records}
    assert "longer than the model's context length" in by_kind["ctx400"]["error"]
    assert by_kind["ctx400"]["status"] == 400 and by_kind["r429"]["status"] == 429
    assert "KV cache pool" in by_kind["kv500"]["error"] and by_kind["kv500"]["status"] == 500
    assert "internal error in the scheduler" in by_kind["err_event"]["error"]
    assert by_kind["stall"]["chunk_offsets_ns"] and len(by_kind["stall"]["chunk_offsets_ns"]) == 2
    assert by_kind["ok"]["output_tokens"] == 3 and by_kind["ok"]["finish_reason"] == "stop"

    # the report states what happened: errors by class, counted as the records say
    summary = _summary(run_dir)
    (step,) = summary["steps"]
    in_window = [r for r in records if r["sent_ns"] >= step["steady_ns"] and r["sent_ns"] < step["end_ns"]]
    expected = Counter(r["error_class"] for r in in_window if r["error_class"])
    assert step["errors"] == dict(expected)
    assert step["requests_ok"] == sum(1 for r in in_window if r["error_class"] is None)
    report = (run_dir / "report.md").read_text()
    for cls in ("http_400_context_length", "http_429", "kv_cache", "stream_error", "truncated", "stall"):
        assert cls in report


def test_api_key_never_reaches_run_dir_or_output(
    fault_run: tuple[FaultServer, subprocess.CompletedProcess[str]],
) -> None:
    server, proc = fault_run
    run_dir = run_dir_of(proc)
    assert set(server.auth) == {f"Bearer {SECRET}"}  # the flag was used (and wins over the env)
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"manifest.json", "summary.json", "report.md", "steps.jsonl"}
    for p in files:
        data = p.read_bytes()
        assert SECRET.encode() not in data, p
    assert SECRET not in proc.stdout and SECRET not in proc.stderr
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["options"]["api_key_set"] is True


# -- the simulator's faults -----------------------------------------------------------------------


def test_crash_mid_step_keeps_finished_requests(tmp_path: Path) -> None:
    sim = start_sim(tmp_path, "--profile", "tiny", "--crash-after-requests", "24")
    try:
        proc = run_loadgen(
            "ramp",
            "--url",
            sim.url,
            "--concurrency",
            "4,4",
            # the crash (24 requests in) ends the ramp, however long they take (server down: stop);
            # the 60 s only catch a hang
            "--step-seconds",
            "60",
            "--no-telemetry",
            "--out",
            str(tmp_path / "out"),
            *QUICK,
        )
    finally:
        sim.stop()
    assert sim.proc.returncode == 1  # it crashed, as told
    run_dir = run_dir_of(proc)
    records = run_records(run_dir)
    ok = [r for r in records if r["error_class"] is None]
    failed = Counter(r["error_class"] for r in records if r["error_class"])
    # the server finished these streams before it died: each is on disk, complete
    emitted = [json.loads(x) for x in sim.emission_log.read_text().splitlines()]
    finished = {e["request_id"] for e in emitted if e["kind"] == "usage"}
    assert {r["header_id"] for r in ok} <= finished
    assert len(ok) >= len(finished) - 4  # at most the in-flight ones lost their last bytes
    assert len(ok) >= 16 and all(r["output_tokens"] and r["finish_reason"] for r in ok)
    assert set(failed) <= {"connection_refused", "connection_reset", "truncated"} and failed
    # the report names every failure class the steps counted
    summary = _summary(run_dir)
    counted = {cls for s in summary["steps"] for cls in s["errors"]}
    assert counted
    report = (run_dir / "report.md").read_text()
    assert all(cls in report for cls in counted)


def test_server_that_never_becomes_ready_exits_3(tmp_path: Path) -> None:
    sim = start_sim(tmp_path, "--profile", "tiny", "--ready-delay-s", "600", wait_ready=False)
    try:
        t0 = time.monotonic()
        proc = run_loadgen(
            "ramp",
            "--url",
            sim.url,
            "--model",
            "m",
            "--wait-ready",
            "1.5",
            "--no-telemetry",
            "--out",
            str(tmp_path / "o"),
        )
        took = time.monotonic() - t0
    finally:
        sim.stop()
    assert proc.returncode == 3, proc.stderr
    assert "not ready" in proc.stderr and "HTTP 503" in proc.stderr
    assert "waiting for" in proc.stderr  # the progress line
    assert took < 30


def test_slow_readiness_waits_then_runs_clean(tmp_path: Path) -> None:
    sim = start_sim(tmp_path, "--profile", "tiny", "--ready-delay-s", "1.5", wait_ready=False)
    try:
        proc = run_loadgen(
            "ramp",
            "--url",
            sim.url,
            "--wait-ready",
            "30",
            "--concurrency",
            "2",
            "--step-seconds",
            "1",
            "--no-telemetry",
            "--out",
            str(tmp_path / "o"),
            *QUICK,
        )
    finally:
        sim.stop()
    run_dir = run_dir_of(proc)
    assert "waiting for" in proc.stderr
    records = run_records(run_dir)
    assert records and all(r["error_class"] is None for r in records)  # nothing was sent before ready


def test_telemetry_dying_mid_run_leaves_the_run_going_and_flags_the_gap(tmp_path: Path) -> None:
    sim = start_sim(tmp_path, "--profile", "tiny")
    out = tmp_path / "o"
    try:
        cmd = loadgen_cmd(
            "ramp",
            "--url",
            sim.url,
            "--concurrency",
            "2,2",
            "--step-seconds",
            "2",
            "--gpu-source",
            f"{sim.url}/gpu/metrics",
            "--gpu-hz",
            "10",
            "--out",
            str(out),
            *QUICK,
        )
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        pid_file = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and pid_file is None:
            found = list(out.glob("*/telemetry.pid"))
            pid_file = found[0] if found and found[0].read_text().strip() else None
            time.sleep(0.05)
        assert pid_file is not None, "the telemetry process never started"
        steps_file = pid_file.parent / "steps.jsonl"
        while time.monotonic() < deadline and '"steady"' not in (steps_file.read_text() if steps_file.exists() else ""):
            time.sleep(0.05)
        time.sleep(0.5)
        os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)  # the side process this ramp started
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sim.stop()
    assert proc.returncode == 0, stderr[-2000:]
    run_dir = Path(stdout.strip().splitlines()[-1])
    summary = _summary(run_dir)
    first, second = summary["steps"]
    assert first["requests_ok"] > 0 and second["requests_ok"] > 0  # the load went on
    # the gap is flagged: it covers the second step's window, whose power is invalid, not idle or load
    gpu_gaps = [g for g in second["telemetry_gaps"] if g["src"] == "gpu"]
    assert gpu_gaps and sum(g["s"] for g in gpu_gaps) >= 0.9 * second["window_s"]
    assert second["power_valid"] is False and second["power_invalid_reason"]
    assert first["telemetry_gaps"] and "gap" in (first["power_invalid_reason"] or "")  # the kill was mid-first-step
    report = (run_dir / "report.md").read_text()
    assert "telemetry gap" in report


def _sigint_default() -> None:
    # as at a terminal: a child of a background job would inherit SIGINT ignored (and keep it)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_ramp(sim_url: str, out: Path, seconds: str = "8") -> subprocess.Popen[str]:
    cmd = loadgen_cmd(
        "ramp",
        "--url",
        sim_url,
        "--concurrency",
        "4",
        "--step-seconds",
        seconds,
        "--no-telemetry",
        "--out",
        str(out),
        *QUICK,
    )
    return subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_default
    )


def _wait_for_records(out: Path, n: int, timeout_s: float = 30) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for f in out.glob("*/requests*.jsonl"):
            if f.read_bytes().count(b"\n") >= n:
                return f.parent
        time.sleep(0.05)
    raise AssertionError(f"fewer than {n} records after {timeout_s} s")


def test_sigkill_loses_no_finished_request_and_the_report_rebuilds(tmp_path: Path) -> None:
    sim = start_sim(tmp_path, "--profile", "tiny")
    out = tmp_path / "o"
    try:
        proc = _start_ramp(sim.url, out)
        run_dir = _wait_for_records(out, 20)
        time.sleep(0.5)
        proc.kill()
        proc.communicate(timeout=30)
        kill_ns = time.time_ns()
        time.sleep(0.3)  # the simulator flushes its emission log every 0.2 s
    finally:
        if proc.poll() is None:
            proc.kill()
        sim.stop()
    assert proc.returncode == -signal.SIGKILL
    records = run_records(run_dir)
    emitted = [json.loads(x) for x in sim.emission_log.read_text().splitlines()]
    # streams the server completed well before the kill reached the client: each must be on disk
    done_early = {e["request_id"] for e in emitted if e["kind"] == "usage" and e["emit_ns"] < kill_ns - 200_000_000}
    on_disk = {r["header_id"] for r in records if r["error_class"] is None}
    assert done_early and done_early <= on_disk
    rebuilt = run_loadgen("report", str(run_dir))
    assert rebuilt.returncode == 0, rebuilt.stderr
    summary = _summary(run_dir)
    assert summary["steps"][0]["requests_ok"] + summary["steps"][0]["requests_warmup"] >= len(done_early) - 4
    assert (run_dir / "report.md").exists()


def test_sigint_writes_a_partial_report(tmp_path: Path) -> None:
    sim = start_sim(tmp_path, "--profile", "tiny")
    out = tmp_path / "o"
    try:
        proc = _start_ramp(sim.url, out, seconds="30")
        run_dir = _wait_for_records(out, 20)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
        sim.stop()
    assert took < 20  # it did not run the 30 s step to its end
    assert "interrupted" in stderr
    assert (run_dir / "report.md").exists() and (run_dir / "summary.json").exists()
    ends = [json.loads(x) for x in (run_dir / "steps.jsonl").read_text().splitlines() if '"end"' in x]
    assert ends and ends[-1]["reason"] == "stopped"
    summary = _summary(run_dir)
    records = run_records(run_dir)
    assert summary["steps"][0]["requests_ok"] + summary["steps"][0]["requests_warmup"] >= 1
    assert sum(1 for r in records if r["error_class"] is None) >= 20


def test_unwritable_run_dir_fails_at_start_with_exit_4(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with FaultServer(["ok"]) as server:
        for out in (str(blocker / "reports"), "/proc/loadgen-cannot-write-here"):
            proc = run_loadgen("ramp", "--url", server.url, "--model", "m", "--no-telemetry", "--out", out, *QUICK)
            assert proc.returncode == 4, proc.stderr
            assert "cannot create the output folder" in proc.stderr and "--out" in proc.stderr
            assert "Traceback" not in proc.stderr
        assert server.count == 0  # it stopped before sending anything
