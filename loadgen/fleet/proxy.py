"""``loadgen router``: a small OpenAI-compatible HTTP proxy in front of several servers, routing each
request by one of :mod:`loadgen.fleet.router`'s policies (the code ``loadgen fleet`` simulates).

Every ``POST /v1/...`` (chat, completions, responses, embeddings, ...) goes to one backend, chosen at
arrival: the router reads the body's prompt (its text cut into ``block_tokens`` blocks of estimated
tokens and hashed in a chain, as the simulator's prefix cache names them), its length, and its session
(the ``x-session-id`` header, else the body's ``user``). The backend's answer comes back as it comes:
its status, content type and ``x-request-id``; a stream chunk by chunk. A client that goes away
closes the upstream connection (the server aborts the request).

What the router watches: each backend's ``/health`` every ``health_s`` (one that does not answer 200
takes no new request until it does) and, for ``least-kv``, its KV-cache use from ``/metrics`` every
``kv_poll_s`` (``sglang:token_usage``, ``vllm:kv_cache_usage_perc`` or ``vllm:gpu_cache_usage_perc``):
the lag a real router's view has. A connection refused before the request was sent is retried on
another backend once; a failure after that answers 502 naming the backend (or ends the stream).

Its own routes: ``/health`` (200 while a backend is up), ``/v1/models`` (the first healthy backend's),
``/metrics`` (requests routed and outstanding per backend, the KV use it last read), ``/router/stats``
(the same as JSON).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import sys
import threading
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from loadgen.fleet.router import Policy, RouteInfo, Router
from loadgen.sim.http import Connection
from loadgen.sim.params import BadRequest, body_prompt_tokens
from loadgen.sim.text import count_prompt_tokens, prompt_block_hashes, prompt_text

FORWARD_HEADERS = ("content-type", "authorization", "accept", "x-request-id", "x-session-id")
KV_METRICS = (b"sglang:token_usage", b"vllm:kv_cache_usage_perc", b"vllm:gpu_cache_usage_perc")
IDLE_PER_BACKEND = 64


class RouterConnection(Connection):
    SERVER = b"loadgen-router"


@dataclass
class Backend:
    url: str
    host: str
    port: int
    base: str  # the URL's path prefix ("" for the root)
    up: bool = True
    kv_usage: float = 0.0
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = field(default_factory=list)


def parse_backend(url: str) -> Backend:
    """A backend's URL (``http://host:port[/prefix]``); ValueError naming it."""
    u = urllib.parse.urlsplit(url.strip())
    if u.scheme != "http" or not u.hostname:
        raise ValueError(f"--backend {url!r}: give an http://HOST:PORT URL (https is not proxied)")
    return Backend(url.rstrip("/"), u.hostname, u.port or 80, u.path.rstrip("/"))


def route_info(body: bytes, headers: dict[str, str], block_tokens: int, chars_per_token: float) -> RouteInfo:
    """What the router reads of a request (module docstring); a body that is not JSON routes as empty."""
    try:
        data = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    chat = "messages" in data
    session = headers.get("x-session-id") or (data.get("user") if isinstance(data.get("user"), str) else None)
    if not chat and "prompt" not in data:
        return RouteInfo((), 0, session, block_tokens)
    try:
        tokens = body_prompt_tokens(data, chat, chars_per_token)
    except BadRequest:  # an image the backend will refuse: route it by its text alone
        tokens = count_prompt_tokens(*prompt_text(data, chat), chars_per_token)
    blocks = prompt_block_hashes(data, chat, chars_per_token, block_tokens)
    return RouteInfo(blocks, tokens, session, block_tokens)


def kv_usage_of(metrics: bytes) -> float | None:
    """The KV-cache use a server's /metrics reports (the mean over its label sets), None if it has none."""
    for name in KV_METRICS:
        values = [
            float(m.group(1))
            for m in re.finditer(rb"^" + re.escape(name) + rb"(?:\{[^}]*\})?\s+([-+0-9.eE]+)\s*$", metrics, re.M)
        ]
        if values:
            return sum(values) / len(values)
    return None


class RouterApp:
    """The proxy: one router over ``backends``, on the running event loop."""

    def __init__(
        self,
        backends: Sequence[Backend],
        policy: Policy,
        *,
        block_tokens: int = 64,
        chars_per_token: float = 4.0,
        kv_poll_s: float = 1.0,
        health_s: float = 2.0,
        timeout_s: float = 600.0,
    ) -> None:
        self.backends = list(backends)
        self.router = Router(policy, len(self.backends), kv_usage=lambda i: self.backends[i].kv_usage)
        self.block_tokens = block_tokens
        self.chars_per_token = chars_per_token
        self.kv_poll_s = kv_poll_s
        self.health_s = health_s
        self.timeout_s = timeout_s
        self.failed = [0] * len(self.backends)
        self._tasks: set[asyncio.Task[None]] = set()

    # -- the client side (loadgen.sim.http.App) -------------------------------------------------

    def handle(self, conn: Connection, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        if method == "GET" and path == "/health":
            up = any(b.up for b in self.backends)
            conn.send_json(200 if up else 503, b'{"status":"ok"}' if up else b'{"error":"no backend is up"}')
            return
        if method == "GET" and path in ("/metrics", "/router/stats"):
            if path == "/metrics":
                conn.send(200, self.metrics_text(), b"text/plain; version=0.0.4")
            else:
                conn.send_json(200, orjson.dumps(self.stats()))
            return
        if not path.startswith("/v1/") or method not in ("GET", "POST"):
            conn.send_json(404, b'{"error":"not found: the router serves /v1/..., /health, /metrics"}')
            return
        counted = method == "POST"  # a request to serve; a GET (the model list) goes to the first one up
        try:
            if counted:
                i = self.router.pick(route_info(body, headers, self.block_tokens, self.chars_per_token))
            else:
                i = next(j for j, b in enumerate(self.backends) if b.up)
        except (ValueError, StopIteration):
            conn.send_json(503, b'{"error":{"message":"no backend is up","type":"ServiceUnavailableError"}}')
            return
        task = asyncio.get_running_loop().create_task(self._forward(i, conn, method, path, headers, body, counted))
        conn.active = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def abandon(self, response: object) -> None:
        if isinstance(response, asyncio.Task):
            response.cancel()

    # -- the backend side -----------------------------------------------------------------------

    async def _connect(self, b: Backend) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        while b.idle:
            reader, writer = b.idle.pop()
            if not reader.at_eof() and not writer.is_closing():
                return reader, writer
            writer.close()
        return await asyncio.open_connection(b.host, b.port)

    def _release(self, b: Backend, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, keep: bool) -> None:
        if keep and len(b.idle) < IDLE_PER_BACKEND and not reader.at_eof():
            b.idle.append((reader, writer))
        else:
            writer.close()

    async def _forward(
        self, i: int, conn: Connection, method: str, path: str, headers: dict[str, str], body: bytes, counted: bool
    ) -> None:
        """Send the request to backend ``i`` and its answer back to ``conn`` (``counted``: the router
        counts it outstanding there until it ends)."""
        tried = {i}
        started = False
        writer: asyncio.StreamWriter | None = None
        try:
            while True:
                b = self.backends[i]
                try:
                    reader, writer = await self._connect(b)
                    break
                except OSError:
                    self.failed[i] += 1
                    b.up = False
                    self.router.set_active(i, False)
                    if not counted or not any(o.up and j not in tried for j, o in enumerate(self.backends)):
                        raise
                    self.router.done(i)
                    i = self.router.pick(RouteInfo((), 0, None, self.block_tokens))
                    tried.add(i)
            b = self.backends[i]
            lines = [f"{method} {b.base}{path} HTTP/1.1", f"host: {b.host}:{b.port}", f"content-length: {len(body)}"]
            lines += [f"{h}: {headers[h]}" for h in FORWARD_HEADERS if h in headers]
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.timeout_s)
            status, reply = _parse_head(head)
            ctype = reply.get("content-type", "application/json").encode("latin-1")
            extra = b"".join(
                f"{h}: {reply[h]}\r\n".encode("latin-1") for h in ("x-request-id", "cache-control") if h in reply
            )
            keep = reply.get("connection", "").lower() != "close"
            if "chunked" in reply.get("transfer-encoding", "").lower():
                conn.start_body(status, ctype, extra)
                started = True
                while True:
                    size_line = await asyncio.wait_for(reader.readuntil(b"\r\n"), self.timeout_s)
                    size = int(size_line.split(b";")[0], 16)
                    if size == 0:
                        await reader.readuntil(b"\r\n")
                        break
                    data = await reader.readexactly(size + 2)
                    conn.write_chunk(data[:-2])
                self._release(b, reader, writer, keep)
                writer = None
                conn.end_response()
            elif "content-length" in reply:
                data = await asyncio.wait_for(reader.readexactly(int(reply["content-length"])), self.timeout_s)
                self._release(b, reader, writer, keep)
                writer = None
                conn.active = None
                conn.send(status, data, ctype, extra)
                if not conn.closed and conn.buf:
                    conn._parse()
            else:  # delimited by the backend closing
                conn.start_body(status, ctype, extra)
                started = True
                while data := await asyncio.wait_for(reader.read(65536), self.timeout_s):
                    conn.write_chunk(data)
                conn.end_response()
        except asyncio.CancelledError:
            if writer is not None:
                writer.close()  # the client went away: the backend sees its request abandoned
            raise
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ValueError):
            self.failed[i] += 1
            if writer is not None:
                writer.close()
            if started:
                if conn.transport is not None:
                    conn.transport.close()
                conn.closed = True
                conn.active = None
            else:
                msg = {"error": {"message": f"backend {self.backends[i].url} failed", "type": "BadGatewayError"}}
                conn.end_plain(502, orjson.dumps(msg))
        finally:
            if counted:
                self.router.done(i)

    # -- watching the backends ------------------------------------------------------------------

    async def _get(self, b: Backend, path: str) -> tuple[int, bytes]:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(b.host, b.port), 2.0)
        try:
            writer.write(f"GET {b.base}{path} HTTP/1.1\r\nhost: {b.host}\r\nconnection: close\r\n\r\n".encode())
            raw = await asyncio.wait_for(reader.read(-1), 5.0)
        finally:
            writer.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        status, reply = _parse_head(head + b"\r\n\r\n")
        if "chunked" in reply.get("transfer-encoding", "").lower():
            body = _dechunk(body)
        return status, body

    async def watch(self) -> None:
        """Poll every backend's health (and KV use, for least-kv) until cancelled."""
        loop = asyncio.get_running_loop()
        next_health = next_kv = loop.time()
        while True:
            now = loop.time()
            if now >= next_health:
                next_health = now + self.health_s
                for i, b in enumerate(self.backends):
                    try:
                        status, _ = await self._get(b, "/health")
                        up = status == 200
                    except (OSError, asyncio.TimeoutError, ValueError):
                        up = False
                    b.up = up
                    self.router.set_active(i, up)
            if self.router.policy is Policy.LEAST_KV and now >= next_kv:
                next_kv = now + self.kv_poll_s
                for b in self.backends:
                    with contextlib.suppress(OSError, asyncio.TimeoutError, ValueError):
                        status, body = await self._get(b, "/metrics")
                        usage = kv_usage_of(body) if status == 200 else None
                        if usage is not None:
                            b.kv_usage = usage
            await asyncio.sleep(0.05)

    # -- the router's own figures ---------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        r = self.router
        return {
            "policy": r.policy.value,
            "backends": [
                {
                    "url": b.url,
                    "up": b.up,
                    "routed": r.routed[i],
                    "outstanding": r.outstanding[i],
                    "failed": self.failed[i],
                    "kv_usage": b.kv_usage,
                    "tree_blocks": r.tree_size(i),
                }
                for i, b in enumerate(self.backends)
            ],
        }

    def metrics_text(self) -> bytes:
        lines = []
        for name, key, what in (
            ("loadgen_router_requests_total", "routed", "requests sent to the backend"),
            ("loadgen_router_outstanding", "outstanding", "requests sent and not yet ended"),
            ("loadgen_router_failed_total", "failed", "requests that failed at the backend"),
            ("loadgen_router_kv_usage", "kv_usage", "the backend's KV-cache use as last read"),
        ):
            lines.append(f"# HELP {name} {what}")
            lines.append(f"# TYPE {name} {'counter' if name.endswith('_total') else 'gauge'}")
            for b in self.stats()["backends"]:
                lines.append(f'{name}{{backend="{b["url"]}"}} {b[key]}')
        return ("\n".join(lines) + "\n").encode()


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise ValueError(f"not an HTTP response: {lines[0][:80]!r}")
    reply: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            reply[name.strip().lower()] = value.strip()
    return int(parts[1]), reply


def _dechunk(body: bytes) -> bytes:
    out = bytearray()
    pos = 0
    while True:
        eol = body.find(b"\r\n", pos)
        if eol < 0:
            return bytes(out)
        size = int(body[pos:eol].split(b";")[0], 16)
        if size == 0:
            return bytes(out)
        out += body[eol + 2 : eol + 2 + size]
        pos = eol + 2 + size + 2


async def serve(app: RouterApp, host: str, port: int, ready: asyncio.Event | None = None) -> None:
    """Serve until SIGINT or SIGTERM (or cancellation); prints where it listens."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: RouterConnection(app), host, port)
    bound = server.sockets[0].getsockname()[1]
    print(
        f"loadgen router ({app.router.policy.value}) on http://{host}:{bound} over {len(app.backends)} "
        + ("backend" if len(app.backends) == 1 else "backends"),
        flush=True,
    )
    stop = asyncio.Event()
    # a loop takes signal handlers only in the main thread of a Unix process; elsewhere (a test's
    # thread, Windows) the router is stopped by cancelling serve() or by Ctrl-C's KeyboardInterrupt
    # out of asyncio.run, which the finally below cleans up after all the same
    if threading.current_thread() is threading.main_thread() and sys.platform != "win32":
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    watcher = loop.create_task(app.watch())
    if ready is not None:
        ready.set()
    try:
        await stop.wait()
    finally:
        watcher.cancel()
        server.close()
        for task in list(app._tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await server.wait_closed()


DESCRIPTION = """\
A small OpenAI-compatible HTTP proxy in front of several servers (real ones, or loadgen sim replicas),
routing each request by the policy loadgen fleet simulates: round-robin, least-requests, least-kv (KV
use read from each backend's /metrics), prefix-aware (SGLang's cache-aware rule over the prompt's
chained block hashes) or session (the x-session-id header, else the body's user). Streams pass
through chunk by chunk; a backend that fails its /health takes no new request. Its own /metrics and
/router/stats count what each backend was sent."""

EPILOG = """\
examples:
  # four simulated replicas behind a prefix-aware router on port 8000
  loadgen router --backend http://127.0.0.1:30001 --backend http://127.0.0.1:30002 \\
      --backend http://127.0.0.1:30003 --backend http://127.0.0.1:30004 --policy prefix-aware --port 8000
  # least KV-cache use over two vLLM servers, read from their /metrics every half second
  loadgen router --backend http://127.0.0.1:8001 --backend http://127.0.0.1:8002 --policy least-kv --kv-poll-s 0.5
  # then ramp against the router as against one server
  loadgen ramp --url http://127.0.0.1:8000 --concurrency 8,32,128"""


def build_parser() -> Any:
    import argparse

    from loadgen.fleet.router import POLICY_NAMES

    p = argparse.ArgumentParser(
        prog="loadgen router",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--backend", action="append", required=True, help="required: a server's URL (repeat for each)")
    p.add_argument(
        "--policy",
        default="least-requests",
        help=f"routing policy: {', '.join(POLICY_NAMES)} (default: least-requests)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on, 0 for any free one (default: 8000)")
    p.add_argument(
        "--block-tokens", type=int, default=64, help="prefix-aware: tokens per hashed prompt block (default: 64)"
    )
    p.add_argument(
        "--chars-per-token", type=float, default=4.0, help="characters per token of the estimate (default: 4.0)"
    )
    p.add_argument("--kv-poll-s", type=float, default=1.0, help="least-kv: /metrics poll period (default: 1.0)")
    p.add_argument("--health-s", type=float, default=2.0, help="/health poll period (default: 2.0)")
    return p


def main(argv: list[str] | None = None) -> int:
    import sys

    from loadgen.fleet.router import parse_policy

    ns = build_parser().parse_args(argv)
    try:
        policy = parse_policy(ns.policy)
        backends = [parse_backend(u) for u in ns.backend]
        if ns.block_tokens < 1 or ns.chars_per_token <= 0 or ns.kv_poll_s <= 0 or ns.health_s <= 0:
            raise ValueError("--block-tokens, --chars-per-token, --kv-poll-s and --health-s must be > 0")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    app = RouterApp(
        backends,
        policy,
        block_tokens=ns.block_tokens,
        chars_per_token=ns.chars_per_token,
        kv_poll_s=ns.kv_poll_s,
        health_s=ns.health_s,
    )
    try:
        asyncio.run(serve(app, ns.host, ns.port))
    except OSError as exc:
        print(f"error: cannot listen on {ns.host}:{ns.port}: {exc.strerror}", file=sys.stderr)
        return 2
    return 0
