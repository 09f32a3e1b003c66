"""Error classes of one LLM call (README, "Error classes"), from HTTP statuses, bodies and exceptions.

Bodies are matched on the phrases the engines use (SGLang, vLLM: research notes, failure-message
table): a KV-cache or out-of-memory abort is ``kv_cache`` whatever its status, a 400 naming the
context length is ``http_400_context_length``. Exceptions are classified by type, errno, or, for
the wrappers the ``openai`` SDK and httpx raise, by the exception they wrap.
"""

from __future__ import annotations

import errno
import re
import socket

_CONTEXT_LENGTH = re.compile(
    rb"context length|context_length|maximum context|max_model_len|too long|exceeds the max|"
    rb"longer than the model|input_ids.*exceed",
    re.IGNORECASE,
)
_KV_CACHE = re.compile(
    rb"kv[ _-]?cache|out of memory|cuda oom|no available memory|not enough memory|"
    rb"token_to_kv_pool|memory pool",
    re.IGNORECASE,
)

# errno values of a connection the peer broke, and of one that could not be made in time
_RESET_ERRNOS = frozenset({errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED})
_TIMEOUT_ERRNOS = frozenset({errno.ETIMEDOUT})
# wrapper exceptions (openai SDK, httpx) whose cause says more than their own type
_WRAPPERS = frozenset(
    {"APIConnectionError", "APITimeoutError", "ConnectError", "ReadError", "WriteError", "NetworkError"}
)


def classify_http(status: int, body: bytes) -> str:
    """Error class of a non-200 response from its status and (the start of) its body."""
    if _KV_CACHE.search(body):
        return "kv_cache"
    if status == 400 and _CONTEXT_LENGTH.search(body):
        return "http_400_context_length"
    if status == 429:
        return "http_429"
    if 300 <= status < 400:
        return "http_3xx"  # a redirect: never followed (nothing is sent off the target host)
    if 400 <= status < 500:
        return "http_4xx"
    return "http_5xx"


def classify_stream_error(message: str) -> str:
    """Error class of an error object or event inside a 200 stream."""
    data = message.encode("utf-8", "replace")
    if _KV_CACHE.search(data):
        return "kv_cache"
    if _CONTEXT_LENGTH.search(data):
        return "http_400_context_length"
    return "stream_error"


def classify_exception(exc: BaseException, *, connected: bool) -> str:
    """Error class of a transport exception. ``connected``: the TCP connection had been established."""
    name = type(exc).__name__
    if name in _WRAPPERS:
        cause = exc.__cause__ or exc.__context__
        if cause is not None and cause is not exc:
            inner = classify_exception(cause, connected=connected)
            if inner != "other":
                return inner
    if isinstance(exc, ConnectionRefusedError):
        return "connection_refused"
    if isinstance(exc, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
        return "connection_reset"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "stall" if connected else "connect_timeout"
    if name in ("HTTPConnectionClosed", "RemoteProtocolError", "IncompleteRead", "ReadError", "WriteError"):
        return "connection_reset"
    if name in ("ConnectTimeout", "PoolTimeout"):
        return "connect_timeout"
    if name in ("ReadTimeout", "WriteTimeout"):
        return "stall"
    if name == "APITimeoutError":  # without its cause: whether the connection was made decides
        return "stall" if connected else "connect_timeout"
    if name in ("ConnectError", "APIConnectionError"):
        text = str(exc).lower()
        if "refused" in text:
            return "connection_refused"
        return "connection_reset"
    if isinstance(exc, OSError):
        if exc.errno == errno.ECONNREFUSED:
            return "connection_refused"
        if exc.errno in _RESET_ERRNOS:
            return "connection_reset"
        if exc.errno in _TIMEOUT_ERRNOS:
            return "stall" if connected else "connect_timeout"
    return "other"


def short(message: object, limit: int = 300) -> str:
    text = str(message)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def http_error(status: int, body: bytes) -> str:
    """A failed call's ``error`` text: ``HTTP 400: <the body, shortened>``, or ``HTTP 400: (empty body)``
    when the server sent none (a sample that reads "HTTP 400: " says nothing)."""
    text = body.decode("utf-8", "replace").strip()
    return f"HTTP {status}: " + (short(text) if text else "(empty body)")
