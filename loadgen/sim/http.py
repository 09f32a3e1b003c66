"""HTTP/1.1 for one client connection of the simulator: parse requests, frame responses.

Requests: a request line and headers (at most 64 KiB before the blank line, else 413 and close),
then a body by ``Content-Length`` (at most :data:`MAX_BODY` bytes, else 413 and close) or by
chunked transfer encoding. A malformed request line, ``Content-Length`` or chunk size answers 400
and closes. Pipelined requests are served in order, one at a time: while a response is in progress
(``Connection.active`` is set) later requests wait in the buffer and are parsed when it ends.

Responses: whole bodies carry ``Content-Length``; streams use chunked transfer encoding for
HTTP/1.1 clients and are delimited by closing the connection for HTTP/1.0 ones. The connection is
kept alive for HTTP/1.1 unless the client sends ``Connection: close``, and for HTTP/1.0 only when it
sends ``Connection: keep-alive``. Writes to a closed connection are dropped.

What a request means is the :class:`App`'s business; this module knows no paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Protocol

REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Payload Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}
MAX_BODY = 64 << 20
MAX_HEAD = 65536


class App(Protocol):
    """What a connection needs from the server behind it."""

    def handle(self, conn: Connection, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        """Answer one request (``path`` without its query, header names lower-case): send a whole
        response now, or set ``conn.active`` and end it later with ``end_response``/``end_plain``."""

    def abandon(self, response: object) -> None:
        """The client went away while ``response`` (what ``conn.active`` held) was in progress."""


class Connection(asyncio.Protocol):
    """One client connection: parse requests, write responses, one request at a time."""

    SERVER = b"loadgen-sim"  # the Server header of every response

    def __init__(self, app: App) -> None:
        self.app = app
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.active: object | None = None  # the app's handle on the response in progress
        self.closed = False
        self.keep_alive = True
        self.chunked = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.active is not None:
            self.app.abandon(self.active)
            self.active = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.active is None:
            self._parse()

    def _parse(self) -> None:
        while self.active is None and not self.closed:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEAD:
                    self.send_json(413, b'{"error":"request headers too large"}', close=True)
                return
            head = bytes(self.buf[:end]).decode("latin-1")
            lines = head.split("\r\n")
            try:
                method, target, version = lines[0].split(" ", 2)
            except ValueError:
                self.send_json(400, b'{"error":"malformed request line"}', close=True)
                return
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            body_start = end + 4
            if "chunked" in headers.get("transfer-encoding", "").lower():
                parsed = self._dechunk(body_start)
                if parsed is None:
                    return
                body, consumed = parsed
            else:
                try:
                    length = int(headers.get("content-length", "0"))
                except ValueError:
                    self.send_json(400, b'{"error":"bad Content-Length"}', close=True)
                    return
                if length > MAX_BODY:
                    self.send_json(413, b'{"error":"request body too large"}', close=True)
                    return
                if len(self.buf) < body_start + length:
                    return
                body = bytes(self.buf[body_start : body_start + length])
                consumed = body_start + length
            del self.buf[:consumed]
            conn_hdr = headers.get("connection", "").lower()
            self.keep_alive = (version == "HTTP/1.1" and conn_hdr != "close") or (
                version == "HTTP/1.0" and conn_hdr == "keep-alive"
            )
            self.chunked = version == "HTTP/1.1"
            self.app.handle(self, method, target.split("?", 1)[0], headers, body)

    def _dechunk(self, start: int) -> tuple[bytes, int] | None:
        """The chunked body starting at ``start`` and the bytes it spans; None: incomplete (or a
        bad chunk size, answered)."""
        pos = start
        out = bytearray()
        buf = self.buf
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                return None
            try:
                size = int(bytes(buf[pos:eol]).split(b";")[0], 16)
            except ValueError:
                self.send_json(400, b'{"error":"bad chunk size"}', close=True)
                return None
            if size == 0:
                trailer_end = buf.find(b"\r\n\r\n", eol)
                if trailer_end < 0:
                    return None
                return bytes(out), trailer_end + 4
            if len(buf) < eol + 2 + size + 2:
                return None
            out += buf[eol + 2 : eol + 2 + size]
            pos = eol + 2 + size + 2

    # -- writing --------------------------------------------------------------------------------

    def _head(self, status: int, ctype: bytes, length: int | None, extra: bytes = b"") -> bytes:
        conn = b"keep-alive" if self.keep_alive else b"close"
        h = b"HTTP/1.1 %d %s\r\nserver: %s\r\ncontent-type: %s\r\nconnection: %s\r\n" % (
            status,
            REASONS.get(status, "Unknown").encode(),
            self.SERVER,
            ctype,
            conn,
        )
        if length is not None:
            h += b"content-length: %d\r\n" % length
        return h + extra + b"\r\n"

    def send(self, status: int, body: bytes, ctype: bytes, extra: bytes = b"", close: bool = False) -> None:
        """A whole response (``extra``: more header lines, each ending in CRLF)."""
        if self.closed or self.transport is None:
            return
        if close:
            self.keep_alive = False
        self.transport.write(self._head(status, ctype, len(body), extra) + body)
        if not self.keep_alive:
            self.transport.close()
            self.closed = True

    def send_json(self, status: int, body: bytes, extra: bytes = b"", close: bool = False) -> None:
        self.send(status, body, b"application/json", extra, close)

    def start_stream(self, rid: str) -> None:
        """The head of a 200 event stream; its body follows by ``write_chunk``, then ``end_response``."""
        extra = b"x-request-id: " + rid.encode("latin-1", "replace") + b"\r\ncache-control: no-cache\r\n"
        self.start_body(200, b"text/event-stream; charset=utf-8", extra)

    def start_body(self, status: int, ctype: bytes, extra: bytes = b"") -> None:
        """The head of a response whose body follows by ``write_chunk``, then ``end_response`` (chunked
        for HTTP/1.1 clients, else delimited by closing the connection)."""
        if self.closed or self.transport is None:
            return
        if self.chunked:
            extra += b"transfer-encoding: chunked\r\n"
        else:
            self.keep_alive = False
        self.transport.write(self._head(status, ctype, None, extra))

    def write_chunk(self, payload: bytes) -> None:
        if self.closed or self.transport is None:
            return
        if self.chunked:
            self.transport.write(b"%x\r\n" % len(payload) + payload + b"\r\n")
        else:
            self.transport.write(payload)

    def end_response(self) -> None:
        """End the stream in progress, then serve any pipelined request."""
        self.active = None
        if self.closed or self.transport is None:
            return
        if self.chunked:
            self.transport.write(b"0\r\n\r\n")
        if not self.keep_alive:
            self.transport.close()
            self.closed = True
            return
        if self.buf:
            self._parse()

    def end_plain(self, status: int, body: bytes, extra: bytes = b"") -> None:
        """Answer the request in progress with a whole JSON response, then serve any pipelined one."""
        self.active = None
        self.send_json(status, body, extra)
        if not self.closed and self.buf:
            self._parse()
