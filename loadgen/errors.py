"""Error classes of one LLM call (README, "Error classes"), from HTTP statuses, bodies and exceptions."""

from __future__ import annotations

import re

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


def classify_http(status: int, body: bytes) -> str:
    """Error class of a non-200 response from its status and (the start of) its body."""
    if _KV_CACHE.search(body):
        return "kv_cache"
    if status == 400 and _CONTEXT_LENGTH.search(body):
        return "http_400_context_length"
    if status == 429:
        return "http_429"
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
    import socket

    if isinstance(exc, ConnectionRefusedError):
        return "connection_refused"
    if isinstance(exc, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
        return "connection_reset"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "stall" if connected else "connect_timeout"
    name = type(exc).__name__
    if name in ("HTTPConnectionClosed", "RemoteProtocolError", "IncompleteRead"):
        return "connection_reset"
    if name in ("ConnectTimeout",):
        return "connect_timeout"
    if name in ("ReadTimeout",):
        return "stall"
    if name in ("ConnectError", "APIConnectionError"):
        text = str(exc).lower()
        if "refused" in text:
            return "connection_refused"
        return "connection_reset"
    if isinstance(exc, OSError) and exc.errno == 111:
        return "connection_refused"
    return "other"


def short(message: object, limit: int = 300) -> str:
    text = str(message)
    return text if len(text) <= limit else text[: limit - 3] + "..."
