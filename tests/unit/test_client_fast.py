"""FastTransport against a scripted HTTP/1.1 server on 127.0.0.1 (a gevent StreamServer in-process).

Each test's server writes exact bytes with exact pauses, so arrival times, keep-alive and every
failure path are checked against what was really sent: chunks are timed when they arrive (not
when they are parsed), failures come back as error classes (never raised), a healthy connection
is reused and a failed one is not, and a stalled body is caught by the stall watchdog.
"""

from __future__ import annotations

import itertools
import json
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import gevent
import pytest
from gevent import monkey
from gevent.server import StreamServer

from loadgen.load.client import FastTransport
from loadgen.spec.options import Timeouts

Script = Callable[[Any, int], None]  # (socket, request number on this server) -> None


def _event(text: str, first: bool = False) -> bytes:
    delta: dict[str, str] = {"content": text}
    if first:
        delta = {"role": "assistant", **delta}
    obj = {"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


_FINAL = (
    b'data: {"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b'data: {"id":"c1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d}}\n\n'
    b"data: [DONE]\n\n"
)
_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _read_request(sock: Any) -> bool:
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            return False
        buf += data
    head, _, body = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    while len(body) < length:
        body += sock.recv(65536)
    return True


class Server:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests = 0
        self._srv = StreamServer(("127.0.0.1", 0), self._handle)
        self._srv.start()
        self.url = f"http://127.0.0.1:{self._srv.server_port}"

    def _handle(self, sock: Any, _addr: Any) -> None:
        self.connections += 1
        try:
            while _read_request(sock):
                self.requests += 1
                self.script(sock, self.requests)
        except OSError:
            pass

    def stop(self) -> None:
        self._srv.stop(timeout=1)


@pytest.fixture
def serve() -> Iterator[Callable[[Script], Server]]:
    servers: list[Server] = []

    def start(script: Script) -> Server:
        s = Server(script)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


def _paced(gap_s: float, n: int) -> Script:
    def script(sock: Any, _n: int) -> None:
        sock.sendall(_HEAD)
        for i in range(n):
            gevent.sleep(gap_s)
            sock.sendall(_chunk(_event(f" w{i}", first=i == 0)))
        sock.sendall(_chunk(_FINAL % n) + b"0\r\n\r\n")

    return script


def _call(t: FastTransport) -> Any:
    return t.call("/v1/chat/completions", b'{"stream":true}', {"Content-Type": "application/json"}, True)


def _call_once(url: str, timeouts: Timeouts | None = None) -> Any:
    """One call on a transport of its own, closed after it (``timeouts``: default ``Timeouts()``)."""
    t = FastTransport(url, timeouts or Timeouts())
    try:
        return _call(t)
    finally:
        t.close()


def test_paced_chunks_are_timed_at_arrival_and_the_connection_is_reused(serve: Any) -> None:
    srv = serve(_paced(0.03, 5))
    t = FastTransport(srv.url, Timeouts())
    try:
        for _ in range(2):
            res = _call(t)
            assert res.error_class is None, res.error
            s = res.stream
            assert s is not None and s.done and s.completion_tokens == 5
            assert s.text == " w0 w1 w2 w3 w4"
            gaps = [(b - a) / 1e6 for a, b in itertools.pairwise(s.chunk_times_ns)]
            assert len(gaps) == 4
            assert all(10 < g < 100 for g in gaps), gaps  # 30 ms apart on the wire (one process: loose)
            assert 20 < (s.chunk_times_ns[0] - res.sent_perf_ns) / 1e6 < 200
    finally:
        t.close()
    assert srv.requests == 2 and srv.connections == 1


def _closes_idle_connections(idle_s: float) -> Script:
    """A server that drops a kept-alive connection idle for ``idle_s`` at the instant the next
    request arrives, without answering it: the race of a server's keep-alive timeout (uvicorn's
    5 s) with a request on its way, made certain."""
    last: dict[int, tuple[Any, float]] = {}  # id -> (the socket, kept so that its id is not reused; time)

    def script(sock: Any, _n: int) -> None:
        key = id(sock)
        if key in last and time.monotonic() - last[key][1] > idle_s:
            sock.close()
            raise OSError("closed idle")
        _paced(0.0, 2)(sock, _n)
        last[key] = (sock, time.monotonic())

    return script


def test_a_connection_idle_for_longer_than_a_servers_keep_alive_is_renewed_before_the_send(serve: Any) -> None:
    srv = serve(_closes_idle_connections(0.3))
    renewing, keeping = FastTransport(srv.url, Timeouts(), idle_reuse_s=0.2), FastTransport(srv.url, Timeouts())
    try:
        for t in (renewing, keeping):
            assert _call(t).error_class is None
        time.sleep(0.4)
        assert _call(renewing).error_class is None  # a new connection, opened before the send time
        res = _call(keeping)  # the old one: the server had closed it, and a POST is not sent twice
        assert res.error_class == "connection_reset", (res.error_class, res.error)
        # a connection in use more often than that is kept
        assert [_call(renewing).error_class for _ in range(3)] == [None] * 3
    finally:
        renewing.close()
        keeping.close()
    assert srv.connections == 3  # the two first, the renewed one


def test_ready_renews_an_idle_connection_ahead_of_the_call(serve: Any) -> None:
    # an open-loop dispatcher readies a request's connection while it waits for the request's time:
    # the renewal (a connect) is then not inside the send, where the requests behind it would overtake
    srv = serve(_closes_idle_connections(0.3))
    t = FastTransport(srv.url, Timeouts(), idle_reuse_s=0.2)
    try:
        t.ready()  # fresh: nothing to do
        gevent.sleep(0.05)  # the server's accept runs
        assert srv.connections == 1
        assert _call(t).error_class is None
        time.sleep(0.4)
        t.ready()  # idle past its reuse limit: a new connection now
        gevent.sleep(0.05)
        assert srv.connections == 2
        assert _call(t).error_class is None  # on the renewed connection, no second renewal
        assert srv.connections == 2
    finally:
        t.close()


def test_one_write_of_many_events_shares_one_arrival_time(serve: Any) -> None:
    def script(sock: Any, _n: int) -> None:
        body = b"".join(_event(f" t{i}", first=i == 0) for i in range(200)) + _FINAL % 200
        sock.sendall(_HEAD + _chunk(body) + b"0\r\n\r\n")

    srv = serve(script)
    res = _call_once(srv.url)
    s = res.stream
    assert res.error_class is None and s is not None
    assert len(s.chunk_times_ns) == 200 and s.completion_tokens == 200
    assert s.chunk_times_ns[-1] - s.chunk_times_ns[0] < 5_000_000  # read in one or a few recvs


def test_a_stalled_body_is_a_stall_result_and_the_connection_is_dropped(serve: Any) -> None:
    def script(sock: Any, n: int) -> None:
        if n == 1:
            sock.sendall(_HEAD + _chunk(_event(" a", first=True)))
            gevent.sleep(5)  # silence: the client must give up after its stall timeout
            return
        _paced(0.0, 2)(sock, n)

    srv = serve(script)
    t = FastTransport(srv.url, Timeouts(stall_s=0.3))
    try:
        t0 = time.monotonic()
        res = _call(t)
        waited = time.monotonic() - t0
        assert res.error_class == "stall", res.error
        assert res.stream is not None and len(res.stream.chunk_times_ns) == 1
        assert 0.25 < waited < 2.0
        again = _call(t)  # a fresh connection: the stalled one is not reused
        assert again.error_class is None, again.error
    finally:
        t.close()
    assert srv.connections == 2


def test_http_error_is_classified_not_raised_and_the_body_is_kept(serve: Any) -> None:
    def script(sock: Any, _n: int) -> None:
        body = b'{"error":{"message":"boom"}}'
        sock.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    srv = serve(script)
    res = _call_once(srv.url)
    assert res.status == 503 and res.error_class == "http_5xx"
    assert res.error is not None and "boom" in res.error


def test_connection_closed_mid_stream_keeps_the_chunks_received(serve: Any) -> None:
    def script(sock: Any, _n: int) -> None:
        sock.sendall(_HEAD + _chunk(_event(" a", first=True) + _event(" b")))
        gevent.sleep(0.05)
        sock.close()

    srv = serve(script)
    res = _call_once(srv.url)
    assert res.stream is not None and res.stream.text == " a b"
    assert res.error_class is not None or res.stream.error_class() == "truncated"


def test_refused_connection_is_a_result() -> None:
    srv = Server(_paced(0.0, 1))
    url = srv.url
    srv.stop()
    res = _call_once(url, Timeouts(connect_s=1.0))
    assert res.error_class == "connection_refused" and res.stream is None


_LATE_SERVER = r"""
import socket, sys, time
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen()
print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept()
buf = b""
while b"\r\n\r\n" not in buf:
    buf += conn.recv(65536)
print("request", flush=True)
time.sleep(float(sys.argv[1]))
head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
events = sys.stdin.buffer.read().split(b"\0")
conn.sendall(head)
sent = []
for ev in events[:-1]:
    time.sleep(0.05)
    conn.sendall(b"%x\r\n%s\r\n" % (len(ev), ev))
    sent.append(time.perf_counter_ns())
time.sleep(0.05)
conn.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(events[-1]), events[-1]))
sent.append(time.perf_counter_ns())
print("sent", *sent, flush=True)
time.sleep(1)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="kernel receive timestamps are Linux's")
@pytest.mark.parametrize("head_after_s", [0.0, 0.05])
def test_chunks_read_late_keep_their_kernel_arrival_times(tmp_path: Any, head_after_s: float) -> None:
    """The client's whole process is blocked while the server (another process) sends three chunks
    50 ms apart and the end, and for 50 ms after. With ``head_after_s`` 0.05 the response head too
    comes during the block, so the whole response is read with its head, and the connection is back
    in the pool before the body is parsed (once in a suite, with 0 too, on a busy machine: the chunks
    then read the time of the read, 56 ms late). They are read together after the block, yet carry
    the time the kernel received them, not the read's. (Segments that queue up unread are merged by
    the kernel and keep the newest one's time: the end's.) The server says when it sent each piece
    (the perf clock is CLOCK_MONOTONIC, one clock for both processes), so a server that a busy
    machine runs late moves the expected times with it."""
    events = [_event(" a", first=True), _event(" b"), _event(" c"), _FINAL % 3]
    proc = subprocess.Popen(
        [sys.executable, "-c", _LATE_SERVER, str(head_after_s)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"\0".join(events))
    proc.stdin.close()
    port = int(proc.stdout.readline())
    t = FastTransport(f"http://127.0.0.1:{port}", Timeouts(), preconnect=False)
    try:
        g = gevent.spawn(_call, t)
        # wait (without blocking the hub) until the server has the request and starts its 50 ms
        # schedule: on a loaded machine the connect and send can take longer than any fixed sleep
        deadline = time.monotonic() + 10
        while not select.select([proc.stdout], [], [], 0)[0] and time.monotonic() < deadline:
            gevent.sleep(0.002)
        assert proc.stdout.readline().strip() == b"request"
        # block the hub until the server has sent the end, and 50 ms more: every chunk (and the
        # end) arrives while nobody reads. The original time.sleep and select: an earlier test's
        # `import locust` may have monkey-patched them to yield
        sleep = monkey.get_original("time", "sleep")
        ready = monkey.get_original("select", "select")
        deadline = time.monotonic() + 10
        while not ready([proc.stdout], [], [], 0)[0] and time.monotonic() < deadline:
            sleep(0.02)
        line = proc.stdout.readline().split()
        assert line[:1] == [b"sent"], line
        sleep(0.05)
        unblocked = time.perf_counter_ns()
        res = g.get(timeout=10)
    finally:
        t.close()
        proc.kill()
        proc.wait()
    s = res.stream
    assert res.error_class is None and s is not None and s.text == " a b c"
    sent = [int(x) for x in line[1:]]
    assert len(sent) == 4 and res.end_perf_ns >= unblocked  # the bytes were read only after the block
    # on the wire, not at the read: at the end's arrival (sent, then timed by the server), >= 50 ms
    # before the block ended
    late = [(c - sent[0]) / 1e6 for c in s.chunk_times_ns]
    # (2 ms either side: the kernel stamps a piece just before the server's clock reads after its
    # send, and the client reads the wall and perf clocks one after the other)
    slack = 2_000_000
    assert all(sent[0] - slack <= c <= sent[-1] + slack for c in s.chunk_times_ns), (late, sent)
    assert all(unblocked - c >= 45_000_000 for c in s.chunk_times_ns), (late, (unblocked - sent[0]) / 1e6)
    assert s.chunk_clock == "kernel"
