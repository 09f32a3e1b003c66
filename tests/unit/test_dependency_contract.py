"""The private parts of gevent and geventhttpclient that ``loadgen.load.client.FastTransport`` relies on.

The fast transport reads the kernel socket under gevent's socket, waits on gevent's own read
watcher, takes the response body from geventhttpclient's parser buffer and replaces two methods of
its connection pool. An upgrade that renames any of them must fail here, by name, rather than
make the transport fall back silently (slower reads, read-time clocks) or break mid-run. The
versions allowed are bounded in pyproject.toml for the same reason.
"""

from __future__ import annotations

import inspect
from typing import Any

import gevent
import gevent.socket
import pytest
from gevent.server import StreamServer
from geventhttpclient import HTTPClient
from geventhttpclient.connectionpool import ConnectionPool
from geventhttpclient.response import HTTPSocketPoolResponse

from loadgen.load.client import _RxSocket


def test_the_pool_calls_the_two_methods_the_transport_replaces() -> None:
    src = inspect.getsource(ConnectionPool)
    # FastTransport sets pool._is_socket_alive (a check that never yields) and
    # pool._create_tcp_socket (sockets with kernel receive timestamps): the pool must call them
    assert "self._is_socket_alive(" in src
    assert "self._create_tcp_socket(" in src
    client = HTTPClient("127.0.0.1", 9, concurrency=1)
    try:
        pool: Any = client._connection_pool
        assert isinstance(pool, ConnectionPool)
        for name in ("get_socket", "return_socket", "release_socket"):
            assert callable(getattr(pool, name)), name
    finally:
        client.close()


def test_gevent_sockets_expose_the_kernel_socket_its_watcher_and_hub() -> None:
    s = gevent.socket.socket()
    try:
        assert hasattr(s._sock, "recvmsg") and hasattr(s._sock, "recv")
        assert s._read_event is not None and callable(s.hub.wait)
        assert callable(s._wait)
        assert isinstance(_RxSocket(), gevent.socket.socket)
    finally:
        s.close()


@pytest.fixture
def server() -> Any:
    def handle(sock: Any, _addr: Any) -> None:
        sock.recv(65536)
        sock.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"d\r\ndata: hello\n\n\r\n"
        )
        gevent.sleep(0.1)  # the stream goes on: the response holds its socket meanwhile
        sock.sendall(b"0\r\n\r\n")
        gevent.sleep(0.2)

    srv = StreamServer(("127.0.0.1", 0), handle)
    srv.start()
    yield srv
    srv.stop()


def test_a_response_exposes_its_body_buffer_socket_and_pool(server: Any) -> None:
    client = HTTPClient("127.0.0.1", server.server_port, concurrency=1)
    try:
        resp = client.request("GET", "/", body=b"", headers={})
        assert isinstance(resp, HTTPSocketPoolResponse)
        assert isinstance(resp._body_buffer, bytearray)
        assert isinstance(resp._sock, gevent.socket.socket)
        assert resp._pool is client._connection_pool
        while not resp.message_complete:  # the transport's loop, in small: feed what the socket gives
            resp.feed(resp._sock.recv(65536))
        assert bytes(resp._body_buffer) == b"data: hello\n\n"
    finally:
        client.close()
