"""The simulator's server process: one asyncio event loop that drives the engine and answers HTTP.

The engine runs on ``loop.time()``; each step ends with a ``call_at`` timer and its chunks are
written right then (by :class:`~loadgen.sim.streams.Responder`, the hot path). The default epoll
selector only waits in whole milliseconds, which alone would make steps up to 1 ms late, so the
loop uses :class:`PreciseEpollSelector`, which waits on the epoll descriptor with ``select()``
(microsecond timeout) before harvesting it.

Routes: ``/v1/chat/completions`` and ``/v1/completions`` (POST; 503 until start-up is done),
``/v1/responses`` (POST; the Responses API, :mod:`loadgen.sim.responses_api`: the same engine
request as a chat call with the same messages, its own events, earlier turns kept for
``previous_response_id``),
the pooling routes ``/v1/embeddings``, ``/v1/rerank`` and ``/v1/score`` (POST, :data:`POOLING_PATHS`;
bodies :mod:`loadgen.sim.pooling`, each input one prefill-only engine sequence),
``/health`` and ``/health_generate`` (200 once ready, else 503), ``/v1/models``, ``/metrics``
(SGLang's or vLLM's names), ``/gpu/metrics`` (DCGM's), ``/server_info``, and the simulator's own
``/sim/stats`` (step lateness) and ``/sim/stats/reset``. The ``X-Request-Id`` request header
becomes the response id. The wire protocol is :mod:`loadgen.sim.http`, what a request asks for
:mod:`loadgen.sim.params`, the response bytes :mod:`loadgen.sim.bodies`, the start-up and other
log lines of the imitated server :mod:`loadgen.sim.serverlog`.

Faults (:class:`Faults`, all off by default): a crash (exit 1 with the real server's last lines)
after a time or a number of requests, 429/503 reject windows after ready, and for a ``fault_rate``
share of requests a stream that stalls, carries one malformed chunk, or ends with an error event
after K content chunks (a pooling response's whole body counts as one chunk).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import math
import os
import select
import selectors
import signal
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import orjson

from loadgen.sim.acceptance import request_source
from loadgen.sim.bodies import error_body, models_body, server_info_body, sim_stats_body
from loadgen.sim.engine import Engine, RejectError, SimRequest, natural_length
from loadgen.sim.http import Connection
from loadgen.sim.logsink import LogSink
from loadgen.sim.output_plan import (
    DEFAULT_TOOL_ROUNDS,
    OutputPlan,
    ToolCall,
    count_tool_results,
    decide_call,
    plan_output,
    read_effort,
    read_tools,
)
from loadgen.sim.params import BadRequest, body_priority, read_params
from loadgen.sim.pooling import (
    MAX_EMBEDDING_DIM,
    embeddings_body,
    read_embeddings,
    read_rerank,
    read_score,
    rerank_body,
    score_body,
)
from loadgen.sim.profile import Profile
from loadgen.sim.prom import GpuTelemetry, render_sglang, render_vllm
from loadgen.sim.ratelimit import RateLimits
from loadgen.sim.responses_api import (
    ResponsesFraming,
    ResponseStore,
    UnknownResponse,
    read_responses_request,
    unknown_response_body,
)
from loadgen.sim.serverlog import CHILD_FAILED, VllmStats, say, start_up
from loadgen.sim.streams import PooledResponse, Responder, Response
from loadgen.sim.text import TextSource, prompt_block_hashes

PROM_TYPE = b"text/plain; version=0.0.4; charset=utf-8"
# pooling routes (vLLM serves each with and without /v1, rerank also as /v2) -> request kind
POOLING_PATHS = {
    "/v1/embeddings": "embeddings",
    "/v1/rerank": "rerank",
    "/rerank": "rerank",
    "/v2/rerank": "rerank",
    "/v1/score": "score",
    "/score": "score",
}
RID_PREFIX = {"embeddings": "embd-", "rerank": "rerank-", "score": "score-"}
GENERATE_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/responses")
GET_PATHS = ("/health", "/health_generate", "/v1/models", "/metrics", "/gpu/metrics", "/server_info", "/openapi.json")


def openapi_body(model_name: str) -> bytes:
    """The routes served, as FastAPI servers (vLLM, SGLang) list them at /openapi.json: a client
    that got a 404 reads what the server does serve here."""
    paths: dict[str, dict[str, dict[str, str]]] = {
        p: {"post": {"summary": p}} for p in (*GENERATE_PATHS, *POOLING_PATHS)
    }
    paths.update({p: {"get": {"summary": p}} for p in GET_PATHS})
    doc = {"openapi": "3.1.0", "info": {"title": f"loadgen sim ({model_name})", "version": "1"}, "paths": paths}
    return json.dumps(doc).encode()


class PreciseEpollSelector(selectors.EpollSelector):
    """epoll with sub-millisecond timeouts: wait with select() on the epoll fd, then poll it."""

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout > 0:
            select.select([self.fileno()], [], [], timeout)
            timeout = 0
        return super().select(timeout)


@dataclass
class Faults:
    """Fault injection settings (all off by default)."""

    crash_after_s: float = 0.0
    crash_after_requests: int = 0
    stall_after_chunks: int = -1
    malformed_after_chunks: int = -1
    error_after_chunks: int = -1
    fault_rate: float = 1.0  # share of requests the stream faults apply to
    reject_status: int = 0  # 429 or 503 during reject windows
    reject_start_s: float = 0.0
    reject_duration_s: float = 0.0
    reject_period_s: float = 0.0
    ready_delay_s: float = 0.0


@dataclass
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 0
    port_file: str | None = None
    emission_log: str | None = None
    body_log: str | None = None  # one line per request received: path, X-Request-Id, the body
    log_file: str | None = None
    metrics_style: str = "sglang"
    seed: int = 0
    tool_rounds: int = DEFAULT_TOOL_ROUNDS  # tool_choice "auto" calls until this many tool results
    faults: Faults = field(default_factory=Faults)
    rate_limits: RateLimits = field(default_factory=lambda: RateLimits({}))


class SimServer:
    """The simulator process's server (the :class:`~loadgen.sim.http.App` of its connections).
    Create, then ``await serve()``."""

    def __init__(self, profile: Profile, options: ServerOptions) -> None:
        self.profile = profile
        self.opts = options
        self.log = LogSink(options.log_file, options.metrics_style)
        engine_log = self.log.info if options.metrics_style == "sglang" else (lambda line: None)
        self.engine = Engine(profile, seed=options.seed, log=engine_log)
        self._taus_by_source = profile.spec.taus_by_source() if profile.spec.enabled else {}
        self.gpu = GpuTelemetry(self.engine, options.seed)
        self.model_name = profile.model.served_name
        self.rng = np.random.default_rng(options.seed + 1)
        self.fault_rng = np.random.default_rng(options.seed + 2)
        self.ready = False
        self.ready_at = 0.0
        self.started_at = 0.0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._kick_pending = False
        self._scheduled: float | None = None
        self.lateness: list[float] = []  # seconds each step callback ran after its scheduled time
        self._stopping: asyncio.Future[int] | None = None
        self.requests_seen = 0
        self.created = int(time.time())
        self.responder = Responder(
            self.engine, TextSource(options.seed + 3), self.model_name, self.created, options.metrics_style,
            options.emission_log, self._now,
        )  # fmt: skip
        self.responses_api = ResponsesFraming(self.responder, ResponseStore())
        self._startup_task: asyncio.Task[None] | None = None
        self._vllm_stats_line = VllmStats(self.engine, self.log)
        self._bodylog = open(options.body_log, "ab") if options.body_log else None  # noqa: SIM115

    # -- lifecycle ------------------------------------------------------------------------------

    async def serve(self) -> int:
        """Listen, run start-up, serve until SIGTERM/SIGINT or a simulated crash; return the exit code."""
        loop = asyncio.get_running_loop()
        self.loop = loop
        self._stopping = loop.create_future()
        server = await loop.create_server(
            lambda: Connection(self), self.opts.host, self.opts.port, reuse_address=True, backlog=1024
        )
        sock = server.sockets[0]
        host, port = sock.getsockname()[:2]
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self._request_stop, 0)
        if self.opts.port_file:
            tmp = self.opts.port_file + ".tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(f"{port}\n")
            os.replace(tmp, self.opts.port_file)
        print(f"listening on http://{host}:{port}", flush=True)
        self.started_at = loop.time()
        self._startup_task = loop.create_task(self._startup(host, port))
        loop.call_later(0.2, self._flush_tick)
        if self.opts.faults.crash_after_s > 0:
            loop.call_later(self.opts.faults.crash_after_s, self._crash, "crash-after-s")
        if self.opts.metrics_style == "vllm":
            loop.call_later(5.0, self._vllm_stats)
        code = await self._stopping
        server.close()
        self.close()
        return code

    def _request_stop(self, code: int) -> None:
        if self._stopping is not None and not self._stopping.done():
            self._stopping.set_result(code)

    def _log_body(self, path: str, headers: dict[str, str], body: bytes) -> None:
        """One body-log line: the request as received (a body that is not JSON is kept as text)."""
        assert self._bodylog is not None
        try:
            parsed = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            parsed = body.decode("utf-8", "replace")
        line = {"t_ns": time.time_ns(), "path": path, "request_id": headers.get("x-request-id"), "body": parsed}
        self._bodylog.write(orjson.dumps(line) + b"\n")
        self._bodylog.flush()

    def close(self) -> None:
        if self._bodylog is not None:
            self._bodylog.close()
        self.responder.close()
        self.log.close()

    def _now(self) -> float:
        return self.loop.time() if self.loop else 0.0

    def _flush_tick(self) -> None:
        self.responder.flush()
        self.log.flush()
        assert self.loop is not None
        self.loop.call_later(0.2, self._flush_tick)

    def _crash(self, why: str) -> None:
        self.log.error(f"Scheduler hit an exception: RuntimeError: simulated crash ({why})")
        self.log.error(CHILD_FAILED)
        self.responder.flush()
        self.log.flush()
        os._exit(1)

    async def _startup(self, host: str, port: int) -> None:
        ready_delay_s = self.opts.faults.ready_delay_s
        if not await start_up(self.log, self.profile, self.engine, host, port, ready_delay_s, self._mark_ready):
            self._fail(1)

    def _mark_ready(self) -> None:
        self.ready = True
        assert self.loop is not None
        self.ready_at = self.loop.time()

    def _fail(self, code: int) -> None:
        say(self.log, "error", CHILD_FAILED, "")
        self.log.flush()
        self._request_stop(code)

    def _vllm_stats(self) -> None:
        assert self.loop is not None
        self._vllm_stats_line.write(self.loop.time())
        self.loop.call_later(5.0, self._vllm_stats)

    # -- engine driving -------------------------------------------------------------------------

    def kick(self) -> None:
        """Start the engine if it is idle (coalesced to one call per loop iteration)."""
        if self.engine.busy or self._kick_pending:
            return
        self._kick_pending = True
        assert self.loop is not None
        self.loop.call_soon(self._tick)

    def _tick(self) -> None:
        loop = self.loop
        assert loop is not None
        now = loop.time()
        self._kick_pending = False
        if self._scheduled is not None:
            self.lateness.append(now - self._scheduled)
            if len(self.lateness) > 200_000:
                del self.lateness[:100_000]
            self._scheduled = None
        try:
            emissions = self.engine.advance(now)
            if emissions:
                self.responder.deliver(emissions)
        except Exception:  # a bug must not leave a server that accepts but never answers
            self.log.error(f"Scheduler hit an exception: {traceback.format_exc().rstrip()}")
            self._fail(1)
            return
        nxt = self.engine.next_event_s
        if nxt is not None:
            self._scheduled = nxt
            self._timer = loop.call_at(nxt, self._tick)

    # -- request handling -----------------------------------------------------------------------

    def _error_body(self, status: int, message: str, err_type: str) -> bytes:
        return error_body(self.opts.metrics_style, status, message, err_type)

    def handle(self, conn: Connection, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        if self._bodylog is not None and method == "POST":
            self._log_body(path, headers, body)
        if path in ("/v1/chat/completions", "/v1/completions"):
            if method != "POST":
                conn.send_json(405, self._error_body(405, "Method Not Allowed", "BadRequestError"))
                return
            self._generate(conn, path == "/v1/chat/completions", body, headers)
            return
        if path == "/v1/responses":
            if method != "POST":
                conn.send_json(405, self._error_body(405, "Method Not Allowed", "BadRequestError"))
                return
            self._respond(conn, body, headers)
            return
        kind = POOLING_PATHS.get(path)
        if kind is not None:
            if method != "POST":
                conn.send_json(405, self._error_body(405, "Method Not Allowed", "BadRequestError"))
                return
            self._pool(conn, kind, body, headers)
            return
        if method not in ("GET", "HEAD"):
            conn.send_json(405, self._error_body(405, "Method Not Allowed", "BadRequestError"))
            return
        style = self.opts.metrics_style
        if path in ("/health", "/health_generate"):
            conn.send(200 if self.ready else 503, b"", b"text/plain; charset=utf-8")
        elif path == "/v1/models":
            conn.send_json(200, models_body(style, self.model_name, self.created, self.profile.context_length))
        elif path == "/metrics":
            text = (render_vllm if style == "vllm" else render_sglang)(self.engine, self.model_name)
            conn.send(200, text.encode(), PROM_TYPE)
        elif path == "/gpu/metrics":
            assert self.loop is not None
            conn.send(200, self.gpu.render(self.loop.time()).encode(), PROM_TYPE)
        elif path in ("/server_info", "/get_server_info"):
            conn.send_json(200, server_info_body(self.profile, self.engine))
        elif path == "/openapi.json":
            conn.send_json(200, openapi_body(self.model_name))
        elif path == "/sim/stats":
            conn.send_json(200, sim_stats_body(self.lateness, self.engine, self.ready))
        elif path == "/sim/stats/reset":
            self.lateness.clear()
            conn.send_json(200, b"{}")
        else:
            conn.send_json(404, self._error_body(404, f"Not Found: {path}", "NotFoundError"))

    def abandon(self, response: object) -> None:
        """The client left mid-response: abort its request so its KV-cache slot frees now."""
        assert isinstance(response, Response)
        if not response.done and self.loop is not None:
            response.done = True
            if isinstance(response, PooledResponse):
                for req in response.seqs:
                    self.engine.abort(req.rid, self.loop.time(), "client disconnected")
            else:
                self.engine.abort(response.rid, self.loop.time(), "client disconnected")

    def _rejecting(self, now: float) -> bool:
        f = self.opts.faults
        if f.reject_status <= 0 or f.reject_duration_s <= 0:
            return False
        t = now - self.ready_at - f.reject_start_s
        if t < 0:
            return False
        if f.reject_period_s > 0:
            t = t % f.reject_period_s
        return t < f.reject_duration_s

    def _refused(self, conn: Connection, now: float, headers: dict[str, str]) -> bool:
        """Answer and return True if the server turns a request away before reading it (not ready,
        a reject window, its tenant over its rate limit); counts it towards ``--crash-after-requests``."""
        if not self.ready:
            conn.send_json(
                503, self._error_body(503, "The server is not ready yet (starting up).", "ServiceUnavailableError")
            )
            return True
        f = self.opts.faults
        self.requests_seen += 1
        if f.crash_after_requests and self.requests_seen > f.crash_after_requests:
            self._crash("crash-after-requests")
        if self._rejecting(now):
            if f.reject_status == 429:
                conn.send_json(
                    429,
                    self._error_body(429, "Too many requests. Please retry later.", "RateLimitError"),
                    extra=b"Retry-After: 1\r\n",
                )
            else:
                conn.send_json(
                    f.reject_status,
                    self._error_body(f.reject_status, "The request queue is full.", "ServiceUnavailableError"),
                )
            return True
        limits = self.opts.rate_limits
        tenant = headers.get(limits.header) if limits.per_s else None
        if tenant is not None:
            wait_s = limits.take(tenant, now)
            if wait_s > 0:
                conn.send_json(
                    429,
                    self._error_body(429, f"Rate limit exceeded for {limits.header} {tenant}.", "RateLimitError"),
                    extra=f"Retry-After: {max(1, math.ceil(wait_s))}\r\n".encode(),
                )
                return True
        return False

    def _generate(self, conn: Connection, chat: bool, body_raw: bytes, headers: dict[str, str]) -> None:
        assert self.loop is not None
        now = self.loop.time()
        if self._refused(conn, now, headers):
            return
        f = self.opts.faults
        effort, ask = None, None
        try:
            params = read_params(body_raw, chat, self.profile.server.chars_per_token, self.opts.metrics_style)
            if chat:
                effort = read_effort(params.body, responses=False)
                ask = read_tools(params.body)
        except BadRequest as exc:
            conn.send_json(400, self._error_body(400, exc.message, "BadRequestError"))
            return
        prompt_tokens, max_tokens = params.prompt_tokens, params.max_tokens
        engine = self.engine
        try:
            engine.check(prompt_tokens, max_tokens)
        except RejectError as exc:
            conn.send_json(exc.status, self._error_body(exc.status, exc.message, exc.err_type))
            return
        call = None
        if chat and ask is not None:
            n_results = count_tool_results(params.body["messages"])
            call = decide_call(ask, n_results, self.opts.tool_rounds, params.text)
        limit, target, reason, plan = self._output_length(
            prompt_tokens, max_tokens, params.ignore_eos, params.min_tokens, effort, call
        )
        rid = headers.get("x-request-id") or ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        if rid in engine.requests:
            rid = f"{rid}-{uuid.uuid4().hex[:8]}"
        faulty = f.fault_rate >= 1.0 or self.fault_rng.random() < f.fault_rate
        st = self.responder.open(
            conn,
            rid,
            chat,
            params.stream,
            prompt_tokens,
            include_usage=params.include_usage,
            continuous_usage=params.continuous_usage,
            stall_at=f.stall_after_chunks if faulty else -1,
            malformed_at=f.malformed_after_chunks if faulty else -1,
            error_at=f.error_after_chunks if faulty else -1,
            plan=plan,
        )
        req = SimRequest(
            rid=rid,
            prompt_tokens=prompt_tokens,
            max_new_tokens=limit,
            target_tokens=target,
            stop_reason=reason,
            source=request_source(self._taus_by_source, headers.get("x-loadgen-source"), params.text),
            priority=body_priority(params.body),
        )
        if engine.cache is not None:
            s = self.profile.server
            req.block_hashes = prompt_block_hashes(params.body, chat, s.chars_per_token, s.prefix_block_tokens)
            if plan is None:  # reasoning and calls are not what the next turn's prompt holds
                req.continued_block_hashes = self.responder.continuation(
                    st, params.body, s.chars_per_token, s.prefix_block_tokens
                )
        req.context = st
        st.req = req
        conn.active = st
        if params.stream:
            conn.start_stream(rid)
        engine.submit(req, now)
        self.kick()

    def _output_length(
        self,
        prompt_tokens: int,
        max_tokens: int | None,
        ignore_eos: bool,
        min_tokens: int,
        effort: str | None = None,
        call: ToolCall | None = None,
    ) -> tuple[int, int, str, OutputPlan | None]:
        """(the request's token cap, the tokens it will generate, its finish reason, its plan:
        reasoning and/or a tool call, :mod:`loadgen.sim.output_plan`)."""
        limit = max_tokens if max_tokens is not None else self.profile.context_length - prompt_tokens
        natural = 0
        if not ignore_eos and call is None:
            s = self.profile.server
            natural = max(natural_length(self.rng, s.natural_len_median, s.natural_len_sigma), min_tokens)
        target, reason, plan = plan_output(limit, max_tokens, natural, ignore_eos, effort, call)
        return limit, target, reason, plan

    def _respond(self, conn: Connection, body_raw: bytes, headers: dict[str, str]) -> None:
        """A Responses API call: one engine request, as a chat call with the same messages."""
        assert self.loop is not None
        now = self.loop.time()
        if self._refused(conn, now, headers):
            return
        s = self.profile.server
        try:
            request = read_responses_request(body_raw, s.chars_per_token, self.responses_api.store)
        except BadRequest as exc:
            conn.send_json(400, self._error_body(400, exc.message, "BadRequestError"))
            return
        except UnknownResponse as exc:
            conn.send_json(exc.status, unknown_response_body(self.opts.metrics_style, exc))
            return
        engine = self.engine
        prompt_tokens = request.prompt_tokens
        try:
            engine.check(prompt_tokens, request.max_output_tokens)
        except RejectError as exc:
            conn.send_json(exc.status, self._error_body(exc.status, exc.message, exc.err_type))
            return
        n_results = count_tool_results(request.conversation)
        call = decide_call(request.tools, n_results, self.opts.tool_rounds, request.text)
        limit, target, reason, plan = self._output_length(
            prompt_tokens, request.max_output_tokens, request.ignore_eos, request.min_tokens, request.effort, call
        )
        given = headers.get("x-request-id")
        rid = given or "resp_" + uuid.uuid4().hex
        if rid in engine.requests:
            rid = f"{rid}-{uuid.uuid4().hex[:8]}"
        resp_id = "resp_" + rid if given else rid
        f = self.opts.faults
        faulty = f.fault_rate >= 1.0 or self.fault_rng.random() < f.fault_rate
        st = self.responses_api.open(
            conn,
            rid,
            resp_id,
            request,
            stall_at=f.stall_after_chunks if faulty else -1,
            malformed_at=f.malformed_after_chunks if faulty else -1,
            error_at=f.error_after_chunks if faulty else -1,
            plan=plan,
        )
        source = request_source(self._taus_by_source, headers.get("x-loadgen-source"), request.text)
        req = SimRequest(rid, prompt_tokens, limit, target, reason, source=source)
        if engine.cache is not None:
            chat_body = {"messages": request.messages, "tools": request.tools_raw}
            req.block_hashes = prompt_block_hashes(chat_body, True, s.chars_per_token, s.prefix_block_tokens)
            if plan is None:
                req.continued_block_hashes = self.responder.continuation(
                    st, chat_body, s.chars_per_token, s.prefix_block_tokens
                )
            st.keep_text = True  # the stored turn and the final events need the text, cached or not
        req.context = st
        st.req = req
        conn.active = st
        self.responses_api.start(st)
        engine.submit(req, now)
        self.kick()

    def _pool(self, conn: Connection, kind: str, body_raw: bytes, headers: dict[str, str]) -> None:
        """A pooling request (``kind``: embeddings, rerank, score): each input is one prefill-only
        engine sequence; the response is written when the last one ends."""
        assert self.loop is not None
        now = self.loop.time()
        if self._refused(conn, now, headers):
            return
        cpt = self.profile.server.chars_per_token
        rid = headers.get("x-request-id") or RID_PREFIX[kind] + uuid.uuid4().hex
        if rid in self.engine.requests or f"{rid}-0" in self.engine.requests:
            rid = f"{rid}-{uuid.uuid4().hex[:8]}"
        model, created = self.model_name, self.created
        render: Callable[[], bytes]
        try:
            if kind == "embeddings":
                full_dim = embedding_dim(self.profile)
                emb = read_embeddings(body_raw, cpt, full_dim)
                seqs = emb.inputs
                render = partial(embeddings_body, rid, created, model, emb, full_dim)
            elif kind == "rerank":
                rr = read_rerank(body_raw, cpt)
                seqs = rr.pairs
                render = partial(rerank_body, rid, model, rr)
            else:
                sc = read_score(body_raw, cpt)
                seqs = sc.sequences
                render = partial(score_body, rid, created, model, sc)
        except BadRequest as exc:
            conn.send_json(400, self._error_body(400, exc.message, "BadRequestError"))
            return
        engine = self.engine
        longest = max(range(len(seqs)), key=lambda i: seqs[i].tokens)
        try:
            engine.check(seqs[longest].tokens, 0)
        except RejectError as exc:
            where = f"input[{longest}]: " if len(seqs) > 1 else ""
            conn.send_json(exc.status, self._error_body(exc.status, where + exc.message, exc.err_type))
            return
        f = self.opts.faults
        faulty = f.fault_rate >= 1.0 or self.fault_rng.random() < f.fault_rate
        st = PooledResponse()
        st.conn, st.rid, st.chat, st.stream, st.render = conn, rid, False, False, render
        st.prompt_tokens = sum(s.tokens for s in seqs)
        st.fault = ""
        if faulty:
            if f.stall_after_chunks == 0:
                st.fault = "stall"
            elif f.error_after_chunks == 0:
                st.fault = "error"
            elif f.malformed_after_chunks == 0:
                st.fault = "malformed"
        st.seqs = [
            SimRequest(f"{rid}-{i}", seq.tokens, 0, 0, "stop", prefill_only=True, context=st)
            for i, seq in enumerate(seqs)
        ]
        st.left = len(st.seqs)
        conn.active = st
        for req in st.seqs:
            engine.submit(req, now)
        self.kick()


def embedding_dim(profile: Profile) -> int:
    """The simulated model's embedding size: its hidden size, at most MAX_EMBEDDING_DIM."""
    return max(1, min(profile.model.hidden, MAX_EMBEDDING_DIM))


def run_server(profile: Profile, options: ServerOptions) -> int:
    """Run the simulator until stopped; returns the process exit code."""
    # Cyclic GC pauses of several ms would show up as late steps; the hot path allocates no cycles,
    # so collect rarely (start-up objects are frozen out of the collector's view).
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 1000)
    loop = asyncio.SelectorEventLoop(PreciseEpollSelector())
    asyncio.set_event_loop(loop)
    server = SimServer(profile, options)
    try:
        return loop.run_until_complete(server.serve())
    finally:
        loop.close()
