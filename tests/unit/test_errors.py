"""Error classification: engines' real error bodies, and real exceptions from real sockets and clients."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator

import pytest

openai = pytest.importorskip("openai")  # an optional extra (in [dev])

from loadgen.parse.errors import classify_exception, classify_http, classify_stream_error, short  # noqa: E402

# (status, body, class): bodies as SGLang and vLLM send them (research notes, failure-message table)
BODIES = [
    (
        400,
        b'{"object":"error","message":"The input (9000 tokens) is longer than the model\'s context length '
        b'(8192 tokens).","type":"BadRequestError","param":null,"code":400}',
        "http_400_context_length",
    ),
    (
        400,
        b'{"object":"error","message":"Requested token count exceeds the model\'s maximum context length of 8192 '
        b'tokens. You requested a total of 9000 tokens","type":"BadRequestError","param":null,"code":400}',
        "http_400_context_length",
    ),
    (
        400,
        b'{"error":{"message":"This model\'s maximum context length is 4096 tokens. However, you requested 5000 '
        b'tokens (4000 in the messages, 1000 in the completion).","type":"BadRequestError","code":400}}',
        "http_400_context_length",
    ),
    (400, b'{"error":{"message":"temperature must be non-negative","code":400}}', "http_4xx"),
    (429, b'{"object":"error","message":"Too many requests. Please retry later.","code":429}', "http_429"),
    (408, b'{"error":"queue timeout"}', "http_4xx"),
    (
        500,
        b'{"error":{"message":"Request r1 cannot fit in the KV cache pool (9000 tokens needed).","code":500}}',
        "kv_cache",
    ),
    (500, b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "kv_cache"),
    (503, b'{"object":"error","message":"The request queue is full.","code":503}', "http_5xx"),
    (503, b'{"object":"error","message":"Request waiting timeout reached.","code":503}', "http_5xx"),
    (502, b"<html><body>502 Bad Gateway</body></html>", "http_5xx"),
    (500, b"", "http_5xx"),
]


@pytest.mark.parametrize(("status", "body", "cls"), BODIES)
def test_http_bodies(status: int, body: bytes, cls: str) -> None:
    assert classify_http(status, body) == cls


def test_context_phrases_only_count_on_400() -> None:
    # a proxy's 414 "URI too long" is not a context-length error
    assert classify_http(414, b"Request-URI Too Long") == "http_4xx"
    assert classify_http(413, b"payload too long") == "http_4xx"


def test_stream_error_messages() -> None:
    assert classify_stream_error("KV cache pool is full. Retract requests.") == "kv_cache"
    assert classify_stream_error("The input (9000 tokens) is longer than the model's context length (8192).") == (
        "http_400_context_length"
    )
    assert classify_stream_error("internal error in the scheduler") == "stream_error"


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()
    return port


class _Listener:
    """Accepts connections; ``mode``: "reset" (RST after reading a little) or "silent" (hold it open)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port: int = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.mode == "reset":
                conn.recv(65536)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()
            else:
                self.conns.append(conn)

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.fixture
def resetter() -> Iterator[_Listener]:
    srv = _Listener("reset")
    yield srv
    srv.close()


@pytest.fixture
def silent() -> Iterator[_Listener]:
    srv = _Listener("silent")
    yield srv
    srv.close()


def _raised(fn: Callable[[], object]) -> BaseException:
    try:
        fn()
    except BaseException as exc:
        return exc
    raise AssertionError("nothing was raised")


def test_socket_refused_reset_and_timeout(resetter: _Listener, silent: _Listener) -> None:
    refused = _raised(lambda: socket.create_connection(("127.0.0.1", _closed_port()), timeout=2))
    assert classify_exception(refused, connected=False) == "connection_refused"

    def reset() -> None:
        s = socket.create_connection(("127.0.0.1", resetter.port), timeout=2)
        s.sendall(b"POST / HTTP/1.1\r\n\r\n")
        time.sleep(0.2)
        s.recv(10)

    assert classify_exception(_raised(reset), connected=True) == "connection_reset"

    def quiet() -> None:
        s = socket.create_connection(("127.0.0.1", silent.port), timeout=2)
        s.settimeout(0.2)
        s.recv(10)

    timeout = _raised(quiet)
    assert classify_exception(timeout, connected=True) == "stall"
    assert classify_exception(timeout, connected=False) == "connect_timeout"
    assert classify_exception(ValueError("odd"), connected=True) == "other"


def test_openai_wrappers_are_classified_by_their_cause(silent: _Listener) -> None:
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{_closed_port()}/v1", api_key="x", max_retries=0, timeout=2)
    api_refused = _raised(lambda: client.models.list())
    assert type(api_refused).__name__ == "APIConnectionError"
    assert classify_exception(api_refused, connected=False) == "connection_refused"
    cause = api_refused.__cause__
    assert cause is not None and type(cause).__name__ == "ConnectError"  # httpx's, wrapping the OS error
    assert classify_exception(cause, connected=False) == "connection_refused"

    slow = openai.OpenAI(base_url=f"http://127.0.0.1:{silent.port}/v1", api_key="x", max_retries=0, timeout=0.3)
    api_timeout = _raised(lambda: slow.models.list())
    assert type(api_timeout).__name__ == "APITimeoutError"
    # connected, request sent, no answer: a stall, even though no response status was seen
    assert classify_exception(api_timeout, connected=False) == "stall"


def test_errno_only_oserrors() -> None:
    import errno

    assert classify_exception(OSError(errno.ECONNRESET, "reset"), connected=True) == "connection_reset"
    assert classify_exception(OSError(errno.ECONNREFUSED, "refused"), connected=False) == "connection_refused"
    assert classify_exception(OSError(errno.ETIMEDOUT, "timed out"), connected=False) == "connect_timeout"


def test_short() -> None:
    assert short("x" * 10) == "x" * 10
    assert short("y" * 400) == "y" * 297 + "..."
    assert len(short("z" * 1000, limit=50)) == 50
