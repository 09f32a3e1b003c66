"""Transports: send one OpenAI-style request, time every chunk as its bytes arrive.

Two implementations behind one small interface (``Transport``):

* ``FastTransport`` (default): geventhttpclient with one kept-alive connection per user, opened
  when the transport is made. After the response headers it reads the kernel socket itself,
  takes ``perf_counter_ns()`` right after each read (before any parsing) and, on Linux, moves it
  back by the delay since the kernel received those bytes (``SO_TIMESTAMPNS``), so a busy process
  that reads late still records when the bytes arrived. geventhttpclient's C parser undoes
  chunked transfer encoding and the body bytes go to the SSE decoder. All events completed by one
  read share its timestamp. A stream silent for ``stall_s`` is failed by one watchdog per process.
  The send time is stamped when the call begins; the socket stamps the moment the request's first
  bytes go to the kernel, and the difference (``CallResult.send_late_ns``: building the request, a
  connect when none was ready, and any time the process was descheduled in between) is recorded,
  so that a TTFT the load generator itself made long is marked (analysis folds it into the first
  output time's bound), not taken as the server's.
* ``OpenAITransport`` (``--transport openai``, ``load.sdk``): the ``openai`` SDK's own HTTP stack
  (httpx, made cooperative by gevent), as applications call servers; its raw bytes feed the same
  decoder.

Neither raises for a failed call: failures come back as ``CallResult.error_class`` / ``error``.

A hostile or broken server cannot make a call hold unbounded memory or time (docs/lifecycle.md):
the status line and headers are at most ``MAX_HEAD_BYTES`` (64 KiB), a body at most
``MAX_BODY_BYTES`` (128 MiB, streamed or not), the bytes read without completing an SSE event (a
line that never ends, an event that never closes) at most ``MAX_EVENT_BYTES`` (8 MiB), a stream at
most ``MAX_STREAM_EVENTS`` events; past any of them the call ends with ``response_too_large`` and
a message naming the bound. These are a few integer compares per read, never per byte or chunk.
A read loop that never has to wait (a server flooding the socket) yields to the other users every
``_YIELD_EVERY_FULL_READS`` full reads, so ``--request-timeout`` still ends it. Redirects are never
followed: a 3xx is ``http_3xx`` and nothing is sent to the host it names.
"""

from __future__ import annotations

import platform
import socket
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import gevent
import gevent.queue
import gevent.socket
from geventhttpclient import HTTPClient

from loadgen.load.hubclock import POLLS
from loadgen.parse.errors import classify_exception, classify_http, http_error, short
from loadgen.parse.pooling import parse_pooling_body
from loadgen.parse.responses import ResponsesDecoder, parse_responses_body
from loadgen.parse.sse import SSEDecoder
from loadgen.parse.stream import ChunkAccumulator, StreamResult, parse_completion_body
from loadgen.rundir.clock import perf_ns
from loadgen.spec.calls import Decoder, assert_never
from loadgen.spec.options import Timeouts
from loadgen.spec.request import split_base_url

ERROR_BODY_LIMIT = 4096

# Bounds on one response (module doc). Generous for real answers: a 128k-token stream with usage
# in every chunk is ~50 MB and ~130k events; one chunk of a real stream is a few KB.
MAX_HEAD_BYTES = 64 << 10
MAX_BODY_BYTES = 128 << 20
MAX_EVENT_BYTES = 8 << 20
MAX_STREAM_EVENTS = 1 << 19


class ResponseTooLarge(Exception):
    """A response went past one of the bounds above; the message names it."""


@dataclass(slots=True)
class CallResult:
    status: int
    sent_perf_ns: int
    end_perf_ns: int
    stream: StreamResult | None
    error_class: str | None = None
    error: str | None = None
    # how long after ``sent_perf_ns`` the request's bytes began to go out (0: not measured, as
    # over TLS): the process's own time, a deschedule between the stamp and the write included
    send_late_ns: int = 0
    # when the response's last bytes reached the kernel (its receive time, perf clock; 0: not known,
    # then ``end_perf_ns``, when this process read them): a closed-loop user's next request is due then
    done_perf_ns: int = 0


class Transport(Protocol):
    def call(
        self, path: str, body: bytes, headers: dict[str, str], stream: bool, decode: Decoder = Decoder.CHAT
    ) -> CallResult: ...

    def close(self) -> None: ...

    def ready(self) -> None:
        """Make the next call's connection ready now, off its timed path (an open-loop dispatcher
        calls it while it waits for the call's time): open it, or replace one idle too long."""
        ...


class RequestTimeout(Exception):
    """The whole call outlasted ``Timeouts.request_s``."""


# A kept-alive connection idle this long is replaced, before the call's send time, by a new one:
# servers close idle connections after a few seconds (uvicorn's default, which vLLM and SGLang run
# under, is 5 s), and a request sent as that close is on its way meets a closed connection; a POST
# is not sent again after that (RFC 9110 section 9.2.2: it may have been processed), so it fails.
IDLE_REUSE_S = 4.0


class FastTransport:
    """geventhttpclient, one persistent connection, timestamps taken at ``recv``. A connection idle
    for ``idle_reuse_s`` is replaced by a new one before the next call is timed (``IDLE_REUSE_S``)."""

    def __init__(
        self,
        base_url: str,
        timeouts: Timeouts,
        read_size: int = 65536,
        preconnect: bool = True,
        turn: Callable[[], None] | None = None,
        idle_reuse_s: float = IDLE_REUSE_S,
    ) -> None:
        scheme, host, port, prefix = split_base_url(base_url)
        self._idle_reuse_ns = int(idle_reuse_s * 1e9)
        self._last_ns = 0  # when the last call ended (0: none yet)
        self._prefix = prefix
        self._turn = turn or no_turn
        self._timeouts = timeouts
        self._read_size = read_size
        self._stall_ns = int(timeouts.stall_s * 1e9)
        # when the current call's request began to go out (its socket stamps it; 0: not yet, or a
        # socket that does not stamp: TLS). One call at a time per transport (concurrency=1).
        self._written = [0]
        # the kernel's receive time of the current call's last head read and a time its bytes came
        # after (``_RxSocket``): kept here because a response that arrived whole with its head (read
        # late, all at once) has its connection back in the pool before its body is read
        self._received = [0, 0]
        self._client = HTTPClient(
            host,
            port,
            ssl=scheme == "https",
            concurrency=1,
            connection_timeout=timeouts.connect_s,
            network_timeout=timeouts.stall_s,
        )
        pool: Any = self._client._connection_pool
        # geventhttpclient checks a pooled connection with select(), which under gevent also
        # yields to every other ready greenlet: between the call's send time and the send, so
        # under a burst of synchronized requests the send (and the TTFT) would be late by the
        # whole burst. The check below asks the kernel directly and never yields.
        pool._is_socket_alive = _socket_alive
        POLLS.start()
        if scheme == "http":
            # plain TCP: the pool's sockets bound the response head and (Linux) report when the
            # kernel received their bytes
            kind = _RxSocket if KERNEL_RX_TIMESTAMPS else _HeadBoundSocket
            written, received = self._written, self._received

            def make(family: int, socktype: int, proto: int) -> _HeadBoundSocket:
                sock = kind(family, socktype, proto)
                sock.written = written  # where its writes are stamped: this transport's one call
                if isinstance(sock, _RxSocket):
                    sock.received = received  # and when its head reads' bytes arrived
                return sock

            pool._create_tcp_socket = make
        if preconnect:
            self._preconnect(pool, min(timeouts.connect_s, _PRECONNECT_MAX_S))

    @staticmethod
    def _preconnect(pool: Any, limit_s: float) -> None:
        """Open the connection now (a user's start), not inside its first call: when many users
        start at once, a connect inside the call waits for every other user's start before the
        request goes out, which would add that wait to the first TTFT of every user. A failure
        is left for the first call to meet and report."""
        try:
            with gevent.Timeout(limit_s, RequestTimeout):
                sock = pool.get_socket()
        except (RequestTimeout, OSError, RuntimeError):
            return
        pool.return_socket(sock)

    def close(self) -> None:
        self._client.close()

    def _renew(self) -> None:
        """Close the idle kept-alive connection and open a new one (untimed: before the send time)."""
        pool: Any = self._client._connection_pool
        queue = pool._socket_queue
        while not queue.empty():
            try:
                sock = queue.get(block=False)
            except gevent.queue.Empty:
                break
            try:
                sock.close()
            except OSError:
                pass
        self._preconnect(pool, min(self._timeouts.connect_s, _PRECONNECT_MAX_S))

    def ready(self) -> None:
        if self._last_ns and perf_ns() - self._last_ns > self._idle_reuse_ns:
            self._renew()
            self._last_ns = perf_ns()
        elif not self._last_ns and self._client._connection_pool._socket_queue.empty():
            self._preconnect(self._client._connection_pool, min(self._timeouts.connect_s, _PRECONNECT_MAX_S))

    def call(
        self, path: str, body: bytes, headers: dict[str, str], stream: bool, decode: Decoder = Decoder.CHAT
    ) -> CallResult:
        if self._last_ns and perf_ns() - self._last_ns > self._idle_reuse_ns:
            self._renew()
        try:
            return self._call(path, body, headers, stream, decode)
        finally:
            self._last_ns = perf_ns()

    def _call(self, path: str, body: bytes, headers: dict[str, str], stream: bool, decode: Decoder) -> CallResult:
        written = self._written
        written[0] = 0
        self._received[0] = 0
        sent = perf_ns()
        send_late = 0
        resp: Any = None
        timer = gevent.Timeout(self._timeouts.request_s, RequestTimeout)
        timer.start()
        try:
            resp = self._client.request("POST", self._prefix + path, body=body, headers=headers)
            if isinstance(resp._sock, _HeadBoundSocket):
                resp._sock.head_left = -1  # the head is read: the body has its own bounds
            if written[0] >= sent:
                send_late = written[0] - sent
            status = resp.status_code
            if 300 <= status < 400:
                end = perf_ns()
                _discard(resp)
                where = short(str(resp.get("location") or "no Location header"), 200)
                return CallResult(
                    status, sent, end, None, "http_3xx", f"HTTP {status}: redirect to {where} not followed"
                )
            if status != 200:
                data = resp.read(ERROR_BODY_LIMIT) if not resp.message_complete else resp.read()
                end = perf_ns()
                _discard(resp)
                text = data[:ERROR_BODY_LIMIT]
                return CallResult(
                    status,
                    sent,
                    end,
                    None,
                    classify_http(status, text),
                    http_error(status, text),
                )
            if not stream or decode is Decoder.POOLING:
                data = _read_body(resp)
                end = perf_ns()
                return CallResult(status, sent, end, parse_body(decode, data, end), send_late_ns=send_late)
            res = self._read_stream(resp, sent, decode is Decoder.RESPONSES)
            res.send_late_ns = send_late
            return res
        except ResponseTooLarge as exc:
            return _broken_off(resp, sent, "response_too_large", str(exc))
        except RequestTimeout:
            return _broken_off(
                resp, sent, "read_timeout", f"no complete response within {self._timeouts.request_s:g} s"
            )
        except gevent.GreenletExit:
            _discard(resp)
            raise
        except Exception as exc:  # a failed call is a result, not a crash of the user
            return _broken_off(
                resp,
                sent,
                classify_exception(exc, connected=resp is not None),
                short(f"{type(exc).__name__}: {exc}"),
            )
        finally:
            timer.close()

    def _read_stream(self, resp: Any, sent: int, responses: bool = False) -> CallResult:
        decoder = SSEDecoder()
        acc: Any = ResponsesSink() if responses else ChunkAccumulator()
        feed = decoder.feed
        add_all = acc.add_all
        named = decoder.named
        buf: bytearray = resp._body_buffer  # filled by the C parser as bytes are fed
        sock = resp._sock
        read_size = self._read_size
        # Plain TCP: read the kernel socket directly and wait on gevent's own read watcher, with
        # no socket timeout (a stalled body is caught by the one stall watchdog of the process,
        # not by a timer armed and cancelled per read). TLS and anything else: gevent's recv.
        raw_recv: Any = None
        raw_recvmsg: Any = None
        wait: Any = None
        watcher: Any = None
        if sock is not None and (
            type(sock) is _RxSocket or type(sock) is _HeadBoundSocket or type(sock) is gevent.socket.socket
        ):
            raw_recv = sock._sock.recv
            watcher = sock._read_event
            wait = sock.hub.wait
            if type(sock) is _RxSocket:
                raw_recvmsg = sock._sock.recvmsg
        recv = sock.recv if sock is not None else None
        watch = _Active(gevent.getcurrent(), self._stall_ns)
        _WATCHDOG.add(watch)
        polls = POLLS
        note_read = acc.note_read
        wait_first = False
        rx_wall_ns, rx_low_ns = self._received
        kernel_clock = raw_recvmsg is not None or (sock is None and rx_wall_ns > 0)
        wall = time_ns()
        t = perf_ns()
        watch.last_ns = t
        # The bytes of a read arrived after ``low``: after the previous read's bytes, and after the
        # start of the poll before the one that woke this reader (its socket was watched and not
        # ready then). A read that completes several events, or ends inside one, may hold pieces
        # the kernel merged: its earlier events are marked late by at most ``t - low``.
        low = sent
        # the bounds of one response (module doc): a few compares per read
        body_bytes = 0
        pending = 0  # bytes read since the last read that completed an event
        events = 0
        full_reads = 0
        if buf and rx_wall_ns:
            # body bytes that came with the headers: when the kernel received them
            t = _arrival(t, wall, rx_wall_ns)
            if rx_low_ns > low:
                low = rx_low_ns
        try:
            while True:
                if buf:
                    data = bytes(buf)
                    del buf[:]
                    payloads = feed(data)
                    add_all(payloads, t)
                    n = len(payloads)
                    if kernel_clock and (n > 1 or (n and decoder.partial)):
                        note_read(t, t - low, decoder.partial)
                    if named:
                        n += len(named)
                        for name, payload in named:
                            acc.add_named(name, payload, t)
                        named.clear()
                    size = len(data)
                    body_bytes += size
                    if n:
                        events += n
                        pending = size  # the read may end inside the next event
                    else:
                        pending += size
                    if pending > MAX_EVENT_BYTES or body_bytes > MAX_BODY_BYTES or events > MAX_STREAM_EVENTS:
                        raise ResponseTooLarge(stream_bound(pending, body_bytes, events))
                if resp.message_complete:
                    break
                low = t
                if raw_recvmsg is not None:
                    # After a short read the next bytes are usually not there yet: wait for them
                    # first instead of paying a failed recv (a syscall and an exception).
                    if wait_first:
                        wait(watcher)
                        if polls.before_last_ns > low:
                            low = polls.before_last_ns
                    while True:
                        try:
                            chunk, anc, _, _ = raw_recvmsg(read_size, _CMSG_SPACE)
                            break
                        except BlockingIOError:
                            wait(watcher)
                            if polls.before_last_ns > low:
                                low = polls.before_last_ns
                    # wall clock first: a pause between the two reads can only make t later
                    wall = time_ns()
                    t = perf_ns()
                    watch.last_ns = t
                    if anc:
                        # the kernel's receive time of these bytes (its wall clock): the delay
                        # since then is subtracted from the perf clock read just now
                        sec, nsec = _TIMESPEC(anc[0][2])
                        late = wall - (sec * 1_000_000_000 + nsec)
                        if 0 <= late < _MAX_RX_LATE_NS:
                            t -= late
                        else:
                            kernel_clock = False
                    elif chunk:
                        kernel_clock = False
                elif raw_recv is not None:
                    if wait_first:
                        wait(watcher)
                    while True:
                        try:
                            chunk = raw_recv(read_size)
                            break
                        except BlockingIOError:
                            wait(watcher)
                    t = perf_ns()
                    watch.last_ns = t
                elif recv is not None:
                    chunk = recv(read_size)
                    t = perf_ns()
                    watch.last_ns = t
                else:
                    break
                if not chunk:
                    break
                wait_first = len(chunk) < _WAIT_FIRST_BELOW
                if wait_first:
                    full_reads = 0  # only an unbroken run of full reads is a flood
                else:
                    # a socket that is never drained never waits: let the hub run a whole loop
                    # (timers, so the request timeout; the other users) now and then. sleep(0)
                    # would only run callbacks, not timers
                    full_reads += 1
                    if full_reads >= _YIELD_EVERY_FULL_READS:
                        full_reads = 0
                        gevent.idle()
                resp.feed(chunk)
        except ResponseTooLarge as exc:
            # the held bytes are what the bound is about: they are dropped, not decoded
            end = perf_ns()
            watch.armed = False
            _discard(resp)
            result = acc.finish(end)
            result.chunk_clock = "kernel" if kernel_clock else "read"
            return CallResult(
                200, sent, end, result, "response_too_large", f"{exc} after {len(result.chunk_times_ns)} chunks"
            )
        except Exception as exc:
            end = perf_ns()
            watch.armed = False
            add_all(decoder.flush(), end)
            _discard(resp)
            result = acc.finish(end)
            result.chunk_clock = "kernel" if kernel_clock else "read"
            return CallResult(
                200,
                sent,
                end,
                result,
                classify_exception(exc, connected=True),
                short(f"{type(exc).__name__} after {len(result.chunk_times_ns)} chunks: {exc}"),
            )
        finally:
            watch.armed = False
        end = perf_ns()
        self._turn()  # decoding is bulk work: the reads of other streams go first
        add_all(decoder.flush(), end)
        if not resp.message_complete:
            _discard(resp)
        result = acc.finish(end)
        result.chunk_clock = "kernel" if kernel_clock else "read"
        return CallResult(200, sent, end, result, done_perf_ns=t if kernel_clock else 0)


class ResponsesSink:
    """The Responses API's decoder behind the accumulator's interface: the SSE events of a read go to
    ``ResponsesDecoder.event`` with the read's time (its events are named; unnamed ones are taken
    too). Reads the kernel merged are not marked late (``note_read``): chat streams only."""

    __slots__ = ("_dec",)

    def __init__(self) -> None:
        self._dec = ResponsesDecoder()

    def add_all(self, payloads: list[bytes], t_ns: int) -> bool:
        event = self._dec.event
        for payload in payloads:
            event(payload, t_ns)
        return not self._dec.res.done

    def add_named(self, name: str, payload: bytes, t_ns: int) -> None:
        self._dec.event(payload, t_ns, name)

    def note_read(self, t_ns: int, early_ns: int, partial: bool) -> None:
        pass

    def finish(self, end_ns: int) -> StreamResult:
        return self._dec.finish(end_ns)


def stream_bound(pending: int, body_bytes: int, events: int) -> str:
    """The message of a stream past one of its bounds."""
    if pending > MAX_EVENT_BYTES:
        return f"{pending} bytes without completing an SSE event (bound: {MAX_EVENT_BYTES >> 20} MiB per event or line)"
    if body_bytes > MAX_BODY_BYTES:
        return f"stream body over {MAX_BODY_BYTES >> 20} MiB (the bound per response)"
    return f"{events} SSE events (bound: {MAX_STREAM_EVENTS} per response)"


_BODY_STEP = 65536


def _read_body(resp: Any) -> bytes:
    """A whole (non-streamed) body, read in steps so that no buffer is sized by what the server
    announces; ``ResponseTooLarge`` past ``MAX_BODY_BYTES``."""
    parts: list[bytes] = []
    n = 0
    while True:
        part = resp.read(_BODY_STEP)
        if not part:
            return b"".join(parts)
        n += len(part)
        if n > MAX_BODY_BYTES:
            raise ResponseTooLarge(f"response body over {MAX_BODY_BYTES >> 20} MiB (the bound per response)")
        parts.append(part)


def parse_body(decode: Decoder, data: bytes, end_ns: int) -> StreamResult:
    """A whole (non-streamed) answer body, decoded for its API."""
    match decode:
        case Decoder.POOLING:
            return parse_pooling_body(data, end_ns)
        case Decoder.RESPONSES:
            return parse_responses_body(data, end_ns, end_ns)
        case Decoder.CHAT:
            return parse_completion_body(data, end_ns, end_ns)
        case unknown:
            assert_never(unknown)


# a connection that cannot be opened within this is left for the first call to time out on
_PRECONNECT_MAX_S = 2.0

# a read shorter than this leaves the socket drained: wait for readiness before the next recv
_WAIT_FIRST_BELOW = 4096
# full reads in a row (64 KiB each: 1 MiB) after which a stream's reader yields to the hub
_YIELD_EVERY_FULL_READS = 16

# Kernel receive timestamps (Linux SO_TIMESTAMPNS; Python's socket module lacks the constant):
# every read also returns when the kernel received its last bytes, so a chunk's time is its
# arrival even when this process was busy and read it late (a burst of synchronized streams, a
# neighbour on the core). Only the delay "now - kernel time" is used, so the wall clock's own
# drift against the perf clock does not matter; an implausible delay (a clock step) falls back
# to the time of the read.
# The option's number is the asm-generic one (x86-64, arm64, riscv64); other architectures, and
# other systems, read without kernel timestamps.
KERNEL_RX_TIMESTAMPS = sys.platform.startswith("linux") and platform.machine() in ("x86_64", "aarch64", "riscv64")
_SO_TIMESTAMPNS = 35
_CMSG_SPACE = socket.CMSG_SPACE(16) if KERNEL_RX_TIMESTAMPS else 0
_TIMESPEC = struct.Struct("@qq").unpack_from
_MAX_RX_LATE_NS = 10_000_000_000
time_ns = time.time_ns


def no_turn() -> None:
    pass


def _socket_alive(sock: Any) -> bool:
    """An idle kept-alive connection is usable when it has nothing to read and is not closed."""
    if sock is None:
        return False
    try:
        if sock.fileno() < 0:
            return False
        raw = getattr(sock, "_sock", None)
        if raw is None or not isinstance(raw, socket.socket) or isinstance(sock, _ssl_socket_types()):
            return True  # TLS: the bytes are the TLS layer's; let the request find out
        raw.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return True  # nothing to read: open and clean
    except (OSError, ValueError):
        return False
    return False  # readable while idle: the server closed it (EOF) or sent bytes nobody asked for


def _ssl_socket_types() -> tuple[type, ...]:
    import gevent.ssl

    return (gevent.ssl.SSLSocket,)


def _arrival(t_perf: int, t_wall: int, rx_wall_ns: int) -> int:
    """``t_perf`` (a perf-clock time read just after the wall clock gave ``t_wall``) moved back to
    a kernel receive time."""
    if rx_wall_ns:
        late = t_wall - rx_wall_ns
        if 0 <= late < _MAX_RX_LATE_NS:
            return t_perf - late
    return t_perf


class _HeadBoundSocket(gevent.socket.socket):
    """A gevent TCP socket that bounds a response head: from each ``sendall`` (a request going out)
    until the transport sets ``head_left = -1`` (the head is parsed), ``recv`` (which
    geventhttpclient uses for the status line and headers) raises ``ResponseTooLarge`` once more
    than ``MAX_HEAD_BYTES`` came in. geventhttpclient itself has no such bound (and joins a long
    header value piece by piece). Each ``sendall`` also stamps its start into ``written``, a cell
    its transport reads (``CallResult.send_late_ns``)."""

    __slots__ = ("head_left", "written")

    def __init__(self, family: int = -1, socktype: int = -1, proto: int = -1) -> None:
        super().__init__(family, socktype, proto)
        self.head_left = -1
        self.written: list[int] | None = None

    def sendall(self, data: Any, flags: int = 0) -> None:
        # a request goes out now (the transport writes each one in one sendall; a retry on a new
        # connection writes it again, and that is when it went out): module doc, send_late_ns
        if self.written is not None:
            self.written[0] = perf_ns()
        self.head_left = MAX_HEAD_BYTES
        super().sendall(data, flags)

    def recv(self, size: int, flags: int = 0) -> bytes:
        data: bytes = super().recv(size, flags)
        if self.head_left >= 0:
            self._count_head(len(data))
        return data

    def _count_head(self, n: int) -> None:
        self.head_left -= n
        if self.head_left < 0:
            self.head_left = -1
            raise ResponseTooLarge(f"response status line and headers over {MAX_HEAD_BYTES >> 10} KiB")


class _RxSocket(_HeadBoundSocket):
    """A gevent TCP socket with kernel receive timestamps; ``recv`` (which geventhttpclient uses
    for the response headers) keeps the receive time of its last read in ``received[0]``, and in
    ``received[1]`` a time its bytes arrived after (``POLLS.before_last_ns`` when it last waited):
    a cell of its transport's, like ``written``."""

    __slots__ = ("received", "rx_low_ns")

    def __init__(self, family: int = -1, socktype: int = -1, proto: int = -1) -> None:
        super().__init__(family, socktype, proto)
        self.received = [0, 0]
        self.rx_low_ns = 0
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        except OSError:
            pass  # no timestamps: reads are timed when they return

    def recv(self, size: int, flags: int = 0) -> bytes:
        while True:
            try:
                data, anc, _, _ = self._sock.recvmsg(size, _CMSG_SPACE, flags)
                break
            except BlockingIOError:
                if self.timeout == 0.0:
                    raise
                self._wait(self._read_event)
                self.rx_low_ns = POLLS.before_last_ns
        received = self.received
        if anc:
            sec, nsec = _TIMESPEC(anc[0][2])
            received[0] = sec * 1_000_000_000 + nsec
        else:
            received[0] = 0
        received[1] = self.rx_low_ns
        if self.head_left >= 0:
            self._count_head(len(data))
        return bytes(data)


class _Active:
    """One stream being read: its greenlet and when its last bytes arrived."""

    __slots__ = ("armed", "greenlet", "last_ns", "stall_ns")

    def __init__(self, greenlet: Any, stall_ns: int) -> None:
        self.greenlet = greenlet
        self.stall_ns = stall_ns
        self.last_ns = 0
        self.armed = True


class _StallWatchdog:
    """Fails streams that receive no bytes for their stall timeout; one greenlet per process.

    Streams register once and update ``last_ns`` at every read (an attribute store), so stall
    detection costs nothing per chunk; the watchdog wakes a few times per stall timeout (4 per
    second at most), and raises ``TimeoutError`` in a stalled stream's greenlet from the hub, as
    ``gevent.Timeout`` does. The greenlet is then inside its read wait, so the read loop's handler
    turns the error into a ``stall`` result.
    """

    def __init__(self) -> None:
        self.active: list[_Active] = []
        self.period_s = 0.25
        self._greenlet: Any = None

    def add(self, watch: _Active) -> None:
        self.active.append(watch)
        period = min(0.25, max(0.005, watch.stall_ns / 4e9))
        if period < self.period_s:
            self.period_s = period
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)

    def _run(self) -> None:
        try:
            while self.active:
                gevent.sleep(self.period_s)
                now = perf_ns()
                keep = []
                for w in self.active:
                    if not w.armed:
                        continue
                    if now - w.last_ns > w.stall_ns:
                        gevent.get_hub().loop.run_callback(_throw_stall, w)
                        continue
                    keep.append(w)
                self.active = keep
        finally:
            self._greenlet = None


def _throw_stall(watch: _Active) -> None:
    # runs in the hub: the stream's greenlet is parked in a switch inside its read loop, or done
    if watch.armed and not watch.greenlet.dead:
        watch.armed = False
        watch.greenlet.throw(TimeoutError(f"no bytes for {watch.stall_ns / 1e9:g} s"))


_WATCHDOG = _StallWatchdog()


def _broken_off(resp: Any, sent: int, error_class: str, error: str) -> CallResult:
    """A call that failed before its answer was whole: its connection closed (:func:`_discard`), its
    status the one the head gave (0 before any), ended now."""
    _discard(resp)
    return CallResult(resp.status_code if resp is not None else 0, sent, perf_ns(), None, error_class, error)


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
