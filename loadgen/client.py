"""Transports: send one OpenAI-style request, time every chunk as its bytes arrive.

Two implementations behind one small interface (``Transport``):

* ``FastTransport`` (default): geventhttpclient with one kept-alive connection per user. After the
  response headers it reads the socket itself, takes ``perf_counter_ns()`` right after each
  ``recv`` (before any parsing), lets geventhttpclient's C parser undo chunked transfer encoding,
  and feeds the body bytes to the SSE decoder. All events completed by one ``recv`` share its
  timestamp: that is when their bytes arrived.
* ``OpenAITransport`` (``--transport openai``): the ``openai`` SDK's own HTTP stack (httpx, made
  cooperative by gevent), as applications call servers; its raw bytes feed the same decoder.

Neither raises for a failed call: failures come back as ``CallResult.error_class`` / ``error``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import gevent
from geventhttpclient import HTTPClient

from loadgen.clock import perf_ns
from loadgen.errors import classify_exception, classify_http, short
from loadgen.sse import SSEDecoder
from loadgen.stream import ChunkAccumulator, StreamResult, parse_completion_body

_ERROR_BODY_LIMIT = 4096


@dataclass(slots=True)
class Timeouts:
    """Seconds. ``stall_s``: longest silence (no bytes) tolerated once the request is sent;
    ``request_s``: the whole call, send to end of stream."""

    connect_s: float = 10.0
    stall_s: float = 60.0
    request_s: float = 600.0


@dataclass(slots=True)
class CallResult:
    status: int
    sent_perf_ns: int
    end_perf_ns: int
    stream: StreamResult | None
    error_class: str | None = None
    error: str | None = None


class Transport(Protocol):
    def call(self, path: str, body: bytes, headers: dict[str, str], stream: bool) -> CallResult: ...

    def close(self) -> None: ...


class _RequestTimeout(Exception):
    """The whole call outlasted ``Timeouts.request_s``."""


def split_base_url(url: str) -> tuple[str, str, int, str]:
    """``http://h:p/prefix`` -> (scheme, host, port, prefix without trailing slash).

    A trailing ``/v1`` is dropped from the prefix: endpoint paths already carry it.
    """
    parts = urlsplit(url if "://" in url else "http://" + url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"--url {url!r}: the scheme must be http or https")
    if not parts.hostname:
        raise ValueError(f"--url {url!r}: no host name; expected e.g. http://127.0.0.1:30000")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    prefix = parts.path.rstrip("/")
    if prefix.endswith("/v1"):
        prefix = prefix[:-3]
    return parts.scheme, parts.hostname, port, prefix


class FastTransport:
    """geventhttpclient, one persistent connection, timestamps taken at ``recv``."""

    def __init__(self, base_url: str, timeouts: Timeouts, read_size: int = 65536) -> None:
        scheme, host, port, prefix = split_base_url(base_url)
        self._prefix = prefix
        self._timeouts = timeouts
        self._read_size = read_size
        self._client = HTTPClient(
            host,
            port,
            ssl=scheme == "https",
            concurrency=1,
            connection_timeout=timeouts.connect_s,
            network_timeout=timeouts.stall_s,
        )

    def close(self) -> None:
        self._client.close()

    def call(self, path: str, body: bytes, headers: dict[str, str], stream: bool) -> CallResult:
        sent = perf_ns()
        resp: Any = None
        timer = gevent.Timeout(self._timeouts.request_s, _RequestTimeout)
        timer.start()
        try:
            resp = self._client.request("POST", self._prefix + path, body=body, headers=headers)
            status = resp.status_code
            if status != 200:
                data = resp.read(_ERROR_BODY_LIMIT) if not resp.message_complete else resp.read()
                end = perf_ns()
                _discard(resp)
                text = data[:_ERROR_BODY_LIMIT]
                return CallResult(
                    status,
                    sent,
                    end,
                    None,
                    classify_http(status, text),
                    f"HTTP {status}: " + short(text.decode("utf-8", "replace")),
                )
            if not stream:
                data = resp.read()
                end = perf_ns()
                return CallResult(status, sent, end, parse_completion_body(data, end, end))
            return self._read_stream(resp, sent)
        except _RequestTimeout:
            _discard(resp)
            return CallResult(
                resp.status_code if resp is not None else 0,
                sent,
                perf_ns(),
                None,
                "read_timeout",
                f"no complete response within {self._timeouts.request_s:g} s",
            )
        except gevent.GreenletExit:
            _discard(resp)
            raise
        except Exception as exc:  # a failed call is a result, not a crash of the user
            _discard(resp)
            return CallResult(
                resp.status_code if resp is not None else 0,
                sent,
                perf_ns(),
                None,
                classify_exception(exc, connected=resp is not None),
                short(f"{type(exc).__name__}: {exc}"),
            )
        finally:
            timer.close()

    def _read_stream(self, resp: Any, sent: int) -> CallResult:
        decoder = SSEDecoder()
        acc = ChunkAccumulator()
        feed = decoder.feed
        add_all = acc.add_all
        named = decoder.named
        buf: bytearray = resp._body_buffer  # filled by the C parser as bytes are fed
        sock = resp._sock
        recv = sock.recv if sock is not None else None
        read_size = self._read_size
        t = perf_ns()
        try:
            while True:
                if buf:
                    data = bytes(buf)
                    del buf[:]
                    add_all(feed(data), t)
                    if named:
                        for name, payload in named:
                            acc.add_named(name, payload, t)
                        named.clear()
                if resp.message_complete:
                    break
                if recv is None:
                    break
                chunk = recv(read_size)
                t = perf_ns()
                if not chunk:
                    break
                resp.feed(chunk)
        except Exception as exc:
            end = perf_ns()
            add_all(decoder.flush(), end)
            _discard(resp)
            result = acc.finish(end)
            return CallResult(
                200,
                sent,
                end,
                result,
                classify_exception(exc, connected=True),
                short(f"{type(exc).__name__} after {len(result.chunk_times_ns)} chunks: {exc}"),
            )
        end = perf_ns()
        add_all(decoder.flush(), end)
        if not resp.message_complete:
            _discard(resp)
        return CallResult(200, sent, end, acc.finish(end))


def _discard(resp: Any) -> None:
    """Close a response's connection instead of returning it to the pool (its state is unknown)."""
    if resp is None:
        return
    sock = getattr(resp, "_sock", None)
    pool = getattr(resp, "_pool", None)
    if sock is not None and pool is not None:
        pool.release_socket(sock)
    resp._sock = None
    resp._pool = None


class OpenAITransport:
    """The ``openai`` SDK's HTTP stack (raw bytes of its streaming response into our decoder).

    Costs more CPU per chunk than ``FastTransport`` (httpx and the SDK's request machinery);
    use it to see what an application built on the SDK sees.
    """

    def __init__(self, base_url: str, timeouts: Timeouts, api_key: str | None) -> None:
        import openai

        scheme, host, port, prefix = split_base_url(base_url)
        self._timeouts = timeouts
        self._client = openai.OpenAI(
            base_url=f"{scheme}://{host}:{port}{prefix}/v1",
            api_key=api_key or "EMPTY",
            max_retries=0,
            timeout=openai.Timeout(timeouts.request_s, connect=timeouts.connect_s, read=timeouts.stall_s),
        )

    def close(self) -> None:
        self._client.close()

    def call(self, path: str, body: bytes, headers: dict[str, str], stream: bool) -> CallResult:
        import orjson

        sent = perf_ns()
        payload = orjson.loads(body)
        api = self._client.chat.completions if path.endswith("chat/completions") else self._client.completions
        extra_headers = {k: v for k, v in headers.items() if k.lower() not in ("content-type", "authorization")}
        timer = gevent.Timeout(self._timeouts.request_s, _RequestTimeout)
        timer.start()
        status = 0
        try:
            with api.with_streaming_response.create(**payload, extra_headers=extra_headers) as response:
                status = response.status_code
                if not stream:
                    data = response.read()
                    end = perf_ns()
                    return CallResult(status, sent, end, parse_completion_body(data, end, end))
                decoder = SSEDecoder()
                acc = ChunkAccumulator()
                for chunk in response.iter_bytes():
                    t = perf_ns()
                    acc.add_all(decoder.feed(chunk), t)
                    for name, item in decoder.named:
                        acc.add_named(name, item, t)
                    decoder.named.clear()
                end = perf_ns()
                acc.add_all(decoder.flush(), end)
                return CallResult(status, sent, end, acc.finish(end))
        except _RequestTimeout:
            return CallResult(
                status,
                sent,
                perf_ns(),
                None,
                "read_timeout",
                f"no complete response within {self._timeouts.request_s:g} s",
            )
        except gevent.GreenletExit:
            raise
        except Exception as exc:
            end = perf_ns()
            code = getattr(exc, "status_code", None)
            if isinstance(code, int):
                raw = getattr(getattr(exc, "response", None), "content", b"") or b""
                return CallResult(
                    code,
                    sent,
                    end,
                    None,
                    classify_http(code, raw[:_ERROR_BODY_LIMIT]),
                    f"HTTP {code}: " + short(raw[:_ERROR_BODY_LIMIT].decode("utf-8", "replace")),
                )
            return CallResult(
                status,
                sent,
                end,
                None,
                classify_exception(exc, connected=status != 0),
                short(f"{type(exc).__name__}: {exc}"),
            )
        finally:
            timer.close()


def make_transport(kind: str, base_url: str, timeouts: Timeouts, api_key: str | None) -> Transport:
    if kind == "fast":
        return FastTransport(base_url, timeouts)
    if kind == "openai":
        return OpenAITransport(base_url, timeouts, api_key)
    raise ValueError(f"--transport {kind!r}: choose fast or openai")
