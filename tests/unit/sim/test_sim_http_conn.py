"""The simulator's HTTP/1.1 connection (loadgen.sim.http) fed bytes by hand: a fake transport and a
fake app stand in for the socket and the server."""

from __future__ import annotations

import asyncio
from typing import Any

from loadgen.sim.http import MAX_BODY, Connection


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.out = bytearray()
        self.closed = False

    def write(self, data: Any) -> None:
        self.out += data

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


class FakeApp:
    """Answers GETs at once; POSTs start a stream that stays active until the test ends it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []
        self.abandoned: list[object] = []

    def handle(self, conn: Connection, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        self.seen.append((method, path, headers, body))
        if method == "POST":
            conn.active = ("stream", len(self.seen))
            conn.start_stream(f"r{len(self.seen)}")
        else:
            conn.send_json(200, b"{}")

    def abandon(self, response: object) -> None:
        self.abandoned.append(response)


def _conn() -> tuple[Connection, FakeTransport, FakeApp]:
    app = FakeApp()
    conn = Connection(app)
    transport = FakeTransport()
    conn.connection_made(transport)
    return conn, transport, app


def test_a_request_in_pieces_with_query_and_headers() -> None:
    conn, transport, app = _conn()
    request = b"GET /v1/models?x=1 HTTP/1.1\r\nHost: a\r\nX-Request-Id:  Abc \r\n\r\n"
    for i in range(len(request)):  # one byte at a time
        conn.data_received(request[i : i + 1])
    assert app.seen == [("GET", "/v1/models", {"host": "a", "x-request-id": "Abc"}, b"")]
    assert transport.out.startswith(b"HTTP/1.1 200 OK\r\n") and b"connection: keep-alive\r\n" in transport.out
    assert transport.out.endswith(b"content-length: 2\r\n\r\n{}") and not transport.closed


def test_content_length_and_chunked_bodies() -> None:
    conn, _, app = _conn()
    conn.data_received(b"PUT /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhel")
    assert app.seen == []
    conn.data_received(b"lo")
    conn.data_received(b"PUT /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;ext\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
    assert [(path, body) for _, path, _, body in app.seen] == [("/a", b"hello"), ("/b", b"abcde")]


def test_pipelined_requests_wait_for_the_active_stream() -> None:
    conn, transport, app = _conn()
    conn.data_received(b"POST /s HTTP/1.1\r\n\r\nGET /one HTTP/1.1\r\n\r\nPOST /s2 HTTP/1.1\r\n\r\n")
    assert [path for _, path, _, _ in app.seen] == ["/s"]
    conn.write_chunk(b"data: x\n\n")
    assert transport.out.endswith(b"transfer-encoding: chunked\r\n\r\n9\r\ndata: x\n\n\r\n")
    conn.end_response()
    assert [path for _, path, _, _ in app.seen] == ["/s", "/one", "/s2"]  # the GET answered, then the next stream
    conn.end_plain(200, b"[]", extra=b"x-a: 1\r\n")
    assert transport.out.endswith(b"x-a: 1\r\n\r\n[]") and conn.active is None


def test_http10_streams_end_by_closing() -> None:
    conn, transport, _ = _conn()
    conn.data_received(b"POST /s HTTP/1.0\r\n\r\n")
    conn.write_chunk(b"data: x\n\n")
    assert b"connection: close\r\n" in transport.out and b"transfer-encoding" not in transport.out
    assert transport.out.endswith(b"\r\n\r\ndata: x\n\n")
    conn.end_response()
    assert transport.closed and conn.closed
    conn.write_chunk(b"late")  # dropped
    assert not transport.out.endswith(b"late")


def test_malformed_requests_answer_and_close() -> None:
    for raw, status in (
        (b"GARBAGE\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY + 1), b"413"),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", b"400"),
        (b"GET / HTTP/1.1\r\nX: " + b"a" * 70000, b"413"),
    ):
        conn, transport, app = _conn()
        conn.data_received(raw)
        assert transport.out.startswith(b"HTTP/1.1 " + status) and transport.closed and app.seen == [], raw[:40]


def test_a_client_that_leaves_mid_stream_abandons_it() -> None:
    conn, _, app = _conn()
    conn.data_received(b"POST /s HTTP/1.1\r\n\r\n")
    conn.connection_lost(None)
    assert app.abandoned == [("stream", 1)] and conn.active is None and conn.closed
