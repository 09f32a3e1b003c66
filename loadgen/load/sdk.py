"""``--transport openai``: the ``openai`` SDK's own HTTP stack (httpx, made cooperative by gevent),
as applications call servers. Its raw bytes feed the same decoders as ``load.client``'s
``FastTransport``, within the same bounds per response; it never raises for a failed call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent

from loadgen.load.client import (
    ERROR_BODY_LIMIT,
    MAX_BODY_BYTES,
    MAX_EVENT_BYTES,
    MAX_STREAM_EVENTS,
    CallResult,
    RequestTimeout,
    ResponsesSink,
    ResponseTooLarge,
    no_turn,
    parse_body,
    stream_bound,
)
from loadgen.parse.errors import classify_exception, classify_http, http_error, short
from loadgen.parse.sse import SSEDecoder
from loadgen.parse.stream import ChunkAccumulator
from loadgen.rundir.clock import perf_ns
from loadgen.spec.calls import Decoder
from loadgen.spec.options import Timeouts
from loadgen.spec.request import split_base_url

# One TLS context per process for every SDK client: the SDK's default builds one per client
# (loading the CA bundle, ~75 ms), so 1,024 users would spend over a minute starting. Each user
# keeps its own client and connection pool (one connection: httpx's pool scans its connections
# per request, so one shared pool of C connections costs O(C) per request; measured 11 -> 26 µs
# per chunk from C=64 to C=256 when shared).
_TLS_CONTEXT: list[Any] = []


def _shared_tls_context() -> Any:
    if not _TLS_CONTEXT:
        import ssl

        _TLS_CONTEXT.append(ssl.create_default_context())
    return _TLS_CONTEXT[0]


class OpenAITransport:
    """The ``openai`` SDK's HTTP stack (raw bytes of its streaming response into our decoder).

    Costs more CPU per chunk than ``FastTransport`` (httpx and the SDK's request machinery);
    use it to see what an application built on the SDK sees. As cheap as the SDK allows: one TLS
    context per process (building an SDK client costs ~1 ms instead of ~75 ms), one client and
    connection per user, the SDK's raw byte stream (no pydantic object per chunk), each chunk
    timed when the SDK hands its bytes over.
    """

    def __init__(
        self, base_url: str, timeouts: Timeouts, api_key: str | None, turn: Callable[[], None] | None = None
    ) -> None:
        try:
            import openai
        except ImportError as exc:
            msg = "--transport openai needs the openai package, an optional extra: pip install 'llm-loadgen[openai]'"
            raise RuntimeError(msg) from exc

        scheme, host, port, prefix = split_base_url(base_url)
        self._timeouts = timeouts
        self._turn = turn or no_turn
        self._client = openai.OpenAI(
            base_url=f"{scheme}://{host}:{port}{prefix}/v1",
            api_key=api_key or "EMPTY",
            max_retries=0,
            timeout=openai.Timeout(timeouts.request_s, connect=timeouts.connect_s, read=timeouts.stall_s),
            # never follow a redirect (the SDK's default does): nothing goes off the target host
            http_client=openai.DefaultHttpxClient(verify=_shared_tls_context(), follow_redirects=False),
        )

    def ready(self) -> None:
        """The SDK's client keeps its own connections: nothing to do ahead of a call."""

    def close(self) -> None:
        self._client.close()

    def call(
        self, path: str, body: bytes, headers: dict[str, str], stream: bool, decode: Decoder = Decoder.CHAT
    ) -> CallResult:
        import orjson

        sent = perf_ns()
        payload = orjson.loads(body)
        api = self._api(path)
        extra_headers = {k: v for k, v in headers.items() if k.lower() not in ("content-type", "authorization")}
        timer = gevent.Timeout(self._timeouts.request_s, RequestTimeout)
        timer.start()
        status = 0
        try:
            with api.with_streaming_response.create(**payload, extra_headers=extra_headers) as response:
                status = response.status_code
                if not stream or decode is Decoder.POOLING:
                    return _whole(response, status, sent, decode)
                return self._stream(response, status, sent, decode)
        except RequestTimeout:
            why = f"no complete response within {self._timeouts.request_s:g} s"
            return CallResult(status, sent, perf_ns(), None, "read_timeout", why)
        except ResponseTooLarge as exc:
            return CallResult(status, sent, perf_ns(), None, "response_too_large", str(exc))
        except gevent.GreenletExit:
            raise
        except Exception as exc:
            return _failed(exc, status, sent)
        finally:
            timer.close()

    def _stream(self, response: Any, status: int, sent: int, decode: Decoder) -> CallResult:
        """A streamed answer: each chunk timed when the SDK hands its bytes over, within the bounds."""
        decoder = SSEDecoder()
        acc: Any = ResponsesSink() if decode is Decoder.RESPONSES else ChunkAccumulator()
        body_bytes = pending = events = 0
        for chunk in response.iter_bytes():
            t = perf_ns()
            payloads = decoder.feed(chunk)
            acc.add_all(payloads, t)
            n = len(payloads) + len(decoder.named)
            for name, item in decoder.named:
                acc.add_named(name, item, t)
            decoder.named.clear()
            body_bytes += len(chunk)
            events += n
            pending = len(chunk) if n else pending + len(chunk)
            if pending > MAX_EVENT_BYTES or body_bytes > MAX_BODY_BYTES or events > MAX_STREAM_EVENTS:
                raise ResponseTooLarge(stream_bound(pending, body_bytes, events))
        end = perf_ns()
        self._turn()
        acc.add_all(decoder.flush(), end)
        return CallResult(status, sent, end, acc.finish(end))

    def _api(self, path: str) -> Any:
        """The SDK resource for an endpoint path (the SDK has none for rerank: ``OPENAI_PATHS``)."""
        c = self._client
        for suffix, api in (
            ("chat/completions", c.chat.completions),
            ("/completions", c.completions),
            ("/responses", c.responses),
            ("/embeddings", c.embeddings),
        ):
            if path.endswith(suffix):
                return api
        raise ValueError(f"--transport openai: the openai SDK has no API for {path}; use --transport fast")


def _whole(response: Any, status: int, sent: int, decode: Decoder) -> CallResult:
    """A non-streamed answer, one body of at most ``MAX_BODY_BYTES``, decoded for its API."""
    parts: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ResponseTooLarge(f"response body over {MAX_BODY_BYTES >> 20} MiB (the bound per response)")
        parts.append(chunk)
    end = perf_ns()
    return CallResult(status, sent, end, parse_body(decode, b"".join(parts), end))


def _failed(exc: Exception, status: int, sent: int) -> CallResult:
    """What the SDK raised, as the fast transport would class it: a redirect not followed, an HTTP
    error status with its body, else a connection or protocol failure."""
    end = perf_ns()
    code = getattr(exc, "status_code", None)
    if isinstance(code, int) and 300 <= code < 400:
        headers = getattr(getattr(exc, "response", None), "headers", None) or {}
        where = short(str(headers.get("location") or "no Location header"), 200)
        return CallResult(code, sent, end, None, "http_3xx", f"HTTP {code}: redirect to {where} not followed")
    if isinstance(code, int):
        raw = getattr(getattr(exc, "response", None), "content", b"") or b""
        head = raw[:ERROR_BODY_LIMIT]
        return CallResult(code, sent, end, None, classify_http(code, head), http_error(code, head))
    why = short(f"{type(exc).__name__}: {exc}")
    return CallResult(status, sent, end, None, classify_exception(exc, connected=status != 0), why)
