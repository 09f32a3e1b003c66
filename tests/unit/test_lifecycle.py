"""lifecycle: readiness against real local HTTP servers, real status/log commands and processes."""

from __future__ import annotations

import io
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from loadgen.lifecycle import (
    NOT_READY_LOG,
    NotReady,
    ServerProcess,
    capture_logs,
    match_failures,
    readiness_gate,
    split_command,
    status_says_failed,
    wait_ready,
)

PY = sys.executable
GRAPH_OOM = (
    "2026-11-29T20:00:01.000000+00:00 host sglang[42]: [2026-11-29 20:00:01 TP0] Scheduler hit an exception: "
    "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 3.10 GiB."
)
NEAR_MISS = [
    "[2026-11-29 20:00:00 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=9.1 GB",
    "GPU KV cache usage: 97.0%",
    "the word Traceback (most recent call last): inside a sentence",
    "[2026-11-29 20:00:02 TP0] The server is fired up and ready to roll!",
]


class _Health(BaseHTTPRequestHandler):
    """/health: 503 for the first ``unready`` polls, then 200; ``no_health``: 404 there, models on /v1/models."""

    unready = 0
    no_health = False
    polls = 0
    auth: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        cls = type(self)
        cls.auth.append(self.headers.get("Authorization"))
        if self.path == "/health":
            cls.polls += 1
            if cls.no_health:
                self._send(404, b"not found")
            elif cls.polls <= cls.unready:
                self._send(503, b"starting up")
            else:
                self._send(200, b"ok")
        elif self.path == "/v1/models":
            self._send(200, json.dumps({"data": [{"id": "m1"}]}).encode())
        else:
            self._send(404, b"")

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[tuple[str, type[_Health]]]:
    handler = type("H", (_Health,), {"unready": 0, "no_health": False, "polls": 0, "auth": []})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", handler
    srv.shutdown()
    srv.server_close()


def _closed_port() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def test_wait_ready_returns_once_health_turns_200(health_server: tuple[str, type[_Health]]) -> None:
    url, handler = health_server
    handler.unready = 3
    seen: list[str] = []
    wait_ready(url, 10, api_key="sk-abc", progress=seen.append, interval_s=0.01)
    assert handler.polls == 4
    assert len(seen) == 3 and all("HTTP 503 from /health: starting up" in s for s in seen)
    assert handler.auth[0] == "Bearer sk-abc"


def test_wait_ready_uses_models_where_there_is_no_health(health_server: tuple[str, type[_Health]]) -> None:
    url, handler = health_server
    handler.no_health = True
    wait_ready(url, 2, interval_s=0.01)
    assert handler.polls == 1


def test_wait_ready_times_out_with_the_last_thing_seen() -> None:
    url = _closed_port()
    t0 = time.monotonic()
    with pytest.raises(NotReady) as err:
        wait_ready(url, 0.3, interval_s=0.05)
    assert time.monotonic() - t0 < 3
    assert "not ready after 0.3 s" in str(err.value) and "Connection" in str(err.value)


def test_alive_callback_stops_the_wait_at_once() -> None:
    t0 = time.monotonic()
    with pytest.raises(NotReady, match="process ended"):
        wait_ready(_closed_port(), 30, alive=lambda: "the server process ended (exit code 1)")
    assert time.monotonic() - t0 < 1


def test_status_command_saying_failed_stops_the_wait_at_once() -> None:
    cmd = [PY, "-c", "import sys; print('failed'); sys.exit(3)"]
    t0 = time.monotonic()
    with pytest.raises(NotReady) as err:
        wait_ready(_closed_port(), 30, status_cmd=cmd, interval_s=0.05)
    assert time.monotonic() - t0 < 5
    assert "says 'failed' (exit 3)" in err.value.reason


def test_status_command_activating_keeps_waiting(health_server: tuple[str, type[_Health]]) -> None:
    url, handler = health_server
    handler.unready = 2
    wait_ready(url, 10, status_cmd=[PY, "-c", "print('activating')"], interval_s=0.01)
    assert handler.polls == 3
    assert status_says_failed([PY, "-c", "print('active')"]) is None
    assert status_says_failed([PY, "-c", "print('inactive')"]) is not None


def test_status_command_that_cannot_run_is_a_usage_error() -> None:
    with pytest.raises(ValueError, match="command not found"):
        status_says_failed(["/nonexistent/systemctl", "is-active", "x"])


def test_split_command_keeps_shell_syntax_literal(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    argv = split_command(f"echo hello; touch {marker}", "--server-logs")
    assert argv == ["echo", "hello;", "touch", str(marker)]
    lines = capture_logs(argv, None)
    assert lines == [f"hello; touch {marker}"]
    assert not marker.exists()
    with pytest.raises(ValueError, match="check the quoting"):
        split_command("journalctl -u 'unit", "--server-logs")


def test_capture_logs_tails_a_file_within_bounds(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("".join(f"line {i}\n" for i in range(50_000)))
    lines = capture_logs(None, log, max_lines=300)
    assert lines == [f"line {i}" for i in range(49_700, 50_000)]
    assert capture_logs(None, tmp_path / "missing.log") == [f"(no log file at {tmp_path / 'missing.log'})"]


def test_capture_logs_stops_a_following_command(tmp_path: Path) -> None:
    # one write a line (print's pieces each a write under -u: a kill between them left a line "n")
    follow = [PY, "-u", "-c", "import time\nfor i in range(10**6):\n    print(f'n {i}')\n    time.sleep(0.01)"]
    t0 = time.monotonic()
    lines = capture_logs(follow, None, max_lines=5, timeout_s=1.0)
    assert time.monotonic() - t0 < 4
    assert len(lines) == 5
    nums = [int(x.split()[1]) for x in lines]
    assert nums == list(range(nums[0], nums[0] + 5)) and nums[0] > 0
    assert capture_logs(["/nonexistent/journalctl"], None) == ["(log command not found: '/nonexistent/journalctl')"]


def test_match_failures_finds_the_reason_and_ignores_near_misses() -> None:
    lines = [*NEAR_MISS[:2], GRAPH_OOM, *NEAR_MISS[2:]]
    found = match_failures(lines)
    assert len(found) == 1
    assert found[0]["pattern"] == "cuda_graph_capture_failed" and found[0]["index"] == 2
    assert set(found[0]["patterns"]) == {"cuda_graph_capture_failed", "cuda_oom", "sglang_fatal"}
    assert found[0]["severity"] == "fatal" and found[0]["line"] == GRAPH_OOM
    kv_full = "[TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_token_ratio: 0.5 -> 0.7"
    assert match_failures([kv_full])[0]["severity"] == "warning"
    assert match_failures(NEAR_MISS) == []


def test_readiness_gate_keeps_the_reason_in_the_run_dir(tmp_path: Path) -> None:
    log = tmp_path / "sglang.log"
    log.write_text("\n".join([*NEAR_MISS[:2], GRAPH_OOM, "Received sigquit from a child process."]) + "\n")
    run_dir = tmp_path / "run"
    made: list[Path] = []

    def make() -> Path:
        run_dir.mkdir()
        made.append(run_dir)
        return run_dir

    out = io.StringIO()
    with pytest.raises(NotReady) as err:
        readiness_gate(
            _closed_port(),
            0.3,
            api_key=None,
            status_cmd=None,
            log_cmd=None,
            log_file=log,
            run_dir=make,
            out=out,
        )
    text = str(err.value)
    assert "not ready after 0.3 s" in text and GRAPH_OOM in text
    assert "waiting for http://127.0.0.1:" in out.getvalue()
    assert made == [run_dir]
    assert (run_dir / NOT_READY_LOG).read_text().splitlines()[2] == GRAPH_OOM
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    assert len(events) == 1 and events[0]["kind"] == "server_not_ready"
    assert events[0]["matches"][0] == {"pattern": "cuda_graph_capture_failed", "severity": "fatal", "line": GRAPH_OOM}


def test_readiness_gate_without_matches_shows_the_log_tail(tmp_path: Path) -> None:
    cmd = f"{PY} -c \"print('starting'); print('bye')\""
    with pytest.raises(NotReady) as err:
        readiness_gate(
            _closed_port(),
            0,
            api_key=None,
            status_cmd=None,
            log_cmd=cmd,
            log_file=None,
            run_dir=None,
            out=io.StringIO(),
        )
    assert "no known failure line matched; the log ends with:\n  starting\n  bye" in str(err.value)


def test_readiness_gate_passes_and_creates_nothing(health_server: tuple[str, type[_Health]]) -> None:
    url, _ = health_server
    called: list[bool] = []

    def make() -> Path:
        called.append(True)
        return Path(".")

    readiness_gate(
        url,
        5,
        api_key=None,
        status_cmd=f"{PY} -c \"print('active')\"",
        log_cmd=None,
        log_file=None,
        run_dir=make,
        out=io.StringIO(),
    )
    assert called == []


def test_server_process_captures_output_and_reports_exit(tmp_path: Path) -> None:
    log = tmp_path / "srv.log"
    code = "import sys; print('hello out'); print('hello err', file=sys.stderr); sys.exit(3)"
    srv = ServerProcess([PY, "-c", code], log)
    deadline = time.monotonic() + 10
    while srv.alive() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    reason = srv.alive()
    assert reason is not None and "exit code 3" in reason
    assert srv.returncode == 3
    assert sorted(log.read_text().splitlines()) == ["hello err", "hello out"]


@pytest.mark.parametrize("child_ignores_term", [False, True])
def test_server_process_stop_ends_its_whole_group(tmp_path: Path, child_ignores_term: bool) -> None:
    child_pid = tmp_path / "child.pid"
    child = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    if not child_ignores_term:
        child = "import time; time.sleep(60)"
    code = (
        "import subprocess, sys, time\n"
        f"c = subprocess.Popen([sys.executable, '-c', {child!r}])\n"
        "time.sleep(0.3)\n"  # the child has set up its signal handling
        f"open({str(child_pid)!r}, 'w').write(str(c.pid))\n"
        "time.sleep(60)\n"
    )
    with ServerProcess([PY, "-c", code], tmp_path / "srv.log") as srv:
        deadline = time.monotonic() + 10
        while not (child_pid.exists() and child_pid.read_text()) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert srv.alive() is None
        pid = int(child_pid.read_text())
        t0 = time.monotonic()
        code_ = srv.stop(timeout_s=5)
        assert time.monotonic() - t0 < 4
    assert code_ == -15
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        # an orphan is reaped by init, if ever; a zombie still answers kill(0) until then
        with open(f"/proc/{pid}/stat") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.05)
    else:
        pytest.fail(f"child {pid} of the server outlived stop()")


def test_server_process_rejects_missing_command(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not found"):
        ServerProcess(["/nonexistent/sglang"], tmp_path / "x.log")


def test_progress_line_is_quiet_off_a_terminal() -> None:
    from loadgen.lifecycle import _ProgressLine

    out = io.StringIO()
    with pytest.raises(NotReady):
        readiness_gate(
            _closed_port(), 1.2, api_key=None, status_cmd=None, log_cmd=None, log_file=None, run_dir=None, out=out
        )
    assert len(out.getvalue().splitlines()) == 1  # ~6 polls, the same answer each time: one line
    line = _ProgressLine("http://x", 10, out := io.StringIO())
    line("HTTP 503 from /health: loading 10%")
    line("HTTP 503 from /health: loading 20%")  # changed, but within a second of the last line
    time.sleep(1.05)
    line("HTTP 503 from /health: loading 30%")
    assert [x.split(": ", 1)[1] for x in out.getvalue().splitlines()] == [
        "HTTP 503 from /health: loading 10%",
        "HTTP 503 from /health: loading 30%",
    ]
