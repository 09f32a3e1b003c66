"""A lean HTTP/1.1 OpenAI-compatible server around :class:`~loadgen.sim.engine.Engine`.

One asyncio event loop, one process: a hand-written HTTP/1.1 parser (keep-alive, pipelined
requests served in order, Content-Length or chunked request bodies), streaming responses with
chunked transfer encoding (or connection-close streaming for HTTP/1.0 clients), Content-Length for
everything else. The engine runs on ``loop.time()``; each step ends with a ``call_at`` timer and
its chunks are written right then. The default epoll selector only waits in whole milliseconds,
which alone would make steps up to 1 ms late, so the loop uses :class:`PreciseEpollSelector`, which
waits on the epoll descriptor with ``select()`` (microsecond timeout) before harvesting it.

Chunks look like SGLang's: a role-only first chunk (chat), content chunks carrying every token a
step committed, a finish chunk with ``finish_reason``, the usage chunk (``choices: []``) when
``stream_options.include_usage`` is set, then ``data: [DONE]``. ``continuous_usage_stats`` puts
usage in every chunk, as vLLM does. The ``X-Request-Id`` request header becomes the response id.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import select
import selectors
import signal
import socket
import time
import traceback
import uuid
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np
import orjson

from loadgen.sim.engine import ABORTED, Emission, Engine, RejectError, SimRequest, natural_length
from loadgen.sim.logsink import LogSink
from loadgen.sim.profile import Profile
from loadgen.sim.prom import GpuTelemetry, render_sglang, render_vllm
from loadgen.sim.text import TextSource, classify_source, count_prompt_tokens, prompt_block_hashes, prompt_text


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
    log_file: str | None = None
    metrics_style: str = "sglang"
    seed: int = 0
    faults: Faults = field(default_factory=Faults)


REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Payload Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
MAX_BODY = 64 << 20
GRAPH_BS_LADDER = (1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 288, 320,
                   352, 384, 416, 448, 480, 512)  # fmt: skip
EOS_TOKEN_ID = 163586


class _Stream:
    """Per-request response state (the engine request's ``context``)."""

    __slots__ = (
        "chat", "chunks", "conn", "continuous_usage", "done", "error_at", "head", "id_json", "include_usage",
        "malformed_at", "pieces", "prompt_tokens", "req", "rid", "sent", "stall_at", "stream", "tail",
    )  # fmt: skip

    conn: _Conn
    req: SimRequest
    rid: str
    id_json: bytes
    chat: bool
    stream: bool
    prompt_tokens: int
    include_usage: bool
    continuous_usage: bool
    stall_at: int
    malformed_at: int
    error_at: int
    head: bytes
    tail: bytes

    def __init__(self) -> None:
        self.chunks = 0
        self.done = False
        self.pieces: list[bytes] = []
        self.sent = 0


class SimServer:
    """The simulator process's server. Create, then ``await serve()``."""

    def __init__(self, profile: Profile, options: ServerOptions) -> None:
        self.profile = profile
        self.opts = options
        self.log = LogSink(options.log_file, options.metrics_style)
        engine_log = self.log.info if options.metrics_style == "sglang" else (lambda line: None)
        self.engine = Engine(profile, seed=options.seed, log=engine_log)
        self.gpu = GpuTelemetry(self.engine, options.seed)
        self.model_name = profile.model.served_name
        self.model_json = orjson.dumps(self.model_name)
        self.rng = np.random.default_rng(options.seed + 1)
        self.fault_rng = np.random.default_rng(options.seed + 2)
        self.text = TextSource(options.seed + 3)
        self.ready = False
        self.ready_at = 0.0
        self.started_at = 0.0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._kick_pending = False
        self._scheduled: float | None = None
        self.lateness: list[float] = []  # seconds each step callback ran after its scheduled time
        self._emlog: IO[bytes] | None = open(options.emission_log, "ab") if options.emission_log else None  # noqa: SIM115
        self._stopping: asyncio.Future[int] | None = None
        self.requests_seen = 0
        self.created = int(time.time())
        self._startup_task: asyncio.Task[None] | None = None
        self._vllm_last = (0.0, 0, 0, 0, 0)

    # -- lifecycle ------------------------------------------------------------------------------

    async def serve(self) -> int:
        """Listen, run start-up, serve until SIGTERM/SIGINT or a simulated crash; return the exit code."""
        loop = asyncio.get_running_loop()
        self.loop = loop
        self._stopping = loop.create_future()
        server = await loop.create_server(
            lambda: _Conn(self), self.opts.host, self.opts.port, reuse_address=True, backlog=1024
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

    def close(self) -> None:
        if self._emlog is not None:
            self._emlog.flush()
            self._emlog.close()
            self._emlog = None
        self.log.close()

    def _flush_tick(self) -> None:
        if self._emlog is not None:
            self._emlog.flush()
        self.log.flush()
        assert self.loop is not None
        self.loop.call_later(0.2, self._flush_tick)

    def _crash(self, why: str) -> None:
        self.log.error(f"Scheduler hit an exception: RuntimeError: simulated crash ({why})")
        self.log.error("Received sigquit from a child process. It usually means the child failed.")
        if self._emlog is not None:
            self._emlog.flush()
        self.log.flush()
        os._exit(1)

    def _say(self, level: str, sglang: str, vllm: str | None = None) -> None:
        """Log a start-up line in the imitated server's wording (``vllm`` None: SGLang's text)."""
        text = vllm if self.opts.metrics_style == "vllm" and vllm is not None else sglang
        if text:
            (self.log.error if level == "error" else self.log.info)(text)

    async def _startup(self, host: str, port: int) -> None:
        """Simulated start-up: memory accounting, graph capture; fail like the real server when it
        does not fit, with its messages, after the (scaled-down) time it would have taken."""
        p = self.profile
        s = p.server
        plan = self.engine.plan
        total_s = max(0.0, s.startup_s)
        gib = 2**30
        self._say(
            "info",
            f"server_args=ServerArgs(model_path='{self.model_name}', tp_size={s.tp}, "
            f"mem_fraction_static={s.mem_fraction_static}, max_running_requests={p.max_running_requests}, "
            f"max_queued_requests={s.max_queued_requests or None}, chunked_prefill_size={s.chunked_prefill_size}, "
            f"cuda_graph_max_bs={s.cuda_graph_max_bs}, context_length={p.context_length}, "
            f"disable_radix_cache={s.disable_radix_cache}, "
            f"speculative_algorithm={p.spec.name.upper() if p.spec.enabled else None!r}, "
            f"speculative_num_draft_tokens={p.verify_width if p.spec.enabled else None}, "
            f"host='{host}', port={port})",
            f"non-default args: {{'model': '{self.model_name}', 'host': '{host}', 'port': {port}, "
            f"'tensor_parallel_size': {s.tp}, 'gpu_memory_utilization': {s.mem_fraction_static}, "
            f"'max_num_seqs': {p.max_running_requests}, 'max_model_len': {p.context_length}}}",
        )
        avail = plan.total_bytes / gib
        self._say(
            "info", f"Load weight begin. avail mem={avail:.2f} GB", f"Starting to load model {self.model_name}..."
        )
        await asyncio.sleep(total_s * 0.6)
        if plan.weight_bytes > plan.total_bytes:
            oom = (
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                f"{(plan.weight_bytes - plan.total_bytes) / gib + 1:.2f} GiB. GPU 0 has a total capacity of "
                f"{avail:.2f} GiB of which 0 bytes is free."
            )
            self._say("error", f"Scheduler hit an exception: {oom}", f"{oom}\nRuntimeError: Engine core "
                      "initialization failed. See root cause above. Failed core proc(s): {}")  # fmt: skip
            self._fail(1)
            return
        avail -= plan.weight_bytes / gib
        self._say(
            "info",
            f"Load weight end. type=SimulatedForCausalLM, dtype=torch.bfloat16, "
            f"avail mem={avail:.2f} GB, mem usage={plan.weight_bytes / gib:.2f} GB.",
            f"Model loading took {plan.weight_bytes / gib:.4f} GiB and {total_s * 0.6:.6f} seconds",
        )
        if plan.kv_pool_tokens <= 0:
            self._say(
                "error",
                "Scheduler hit an exception: RuntimeError: Not enough memory. Please try to increase "
                f"--mem-fraction-static. Current value: mem_fraction_static={s.mem_fraction_static}",
                "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                "when initializing the engine.\nRuntimeError: Engine core initialization failed. See root cause "
                "above. Failed core proc(s): {}",
            )
            self._fail(1)
            return
        self._say(
            "info",
            f"KV Cache is allocated. #tokens: {plan.kv_pool_tokens}, KV size: {plan.kv_pool_bytes / gib:.2f} GB",
            f"GPU KV cache size: {plan.kv_pool_tokens:,} tokens",
        )
        self._say(
            "info",
            f"Memory pool end. avail mem={plan.headroom_bytes / gib:.2f} GB",
            f"Maximum concurrency for {p.context_length:,} tokens per request: "
            f"{plan.kv_pool_tokens / p.context_length:.2f}x",
        )
        avail = plan.headroom_bytes / gib
        max_bs = min(s.cuda_graph_max_bs, p.max_running_requests)
        ladder = [b for b in GRAPH_BS_LADDER if b <= max_bs]
        if not ladder or ladder[-1] != max_bs:
            ladder.append(max_bs)
        self._say(
            "info",
            f"Capture cuda graph begin. This can take up to several minutes. avail mem={avail:.2f} GB",
            "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)",
        )
        self._say("info", f"Capture cuda graph bs {ladder}", f"cudagraph sizes specified by model runner {ladder}")
        if not plan.graph_fits:
            await asyncio.sleep(total_s * 0.3)
            need = (plan.graph_bytes - plan.headroom_bytes) / gib
            oom = (
                f"CUDA out of memory. Tried to allocate {max(need, 0.01):.2f} GiB. GPU 0 has a total capacity of "
                f"{plan.total_bytes / gib:.2f} GiB of which {max(0.0, avail - plan.graph_bytes / gib + need):.2f} "
                "GiB is free."
            )
            self._say(
                "error",
                f"Scheduler hit an exception: Exception: Capture cuda graph failed: {oom}\n"
                "Possible solutions:\n"
                "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
                "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
                "3. disable torch compile by not using --enable-torch-compile\n"
                "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
                "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose",
                f"torch.OutOfMemoryError: {oom}\nRuntimeError: Engine core initialization failed. See root cause "
                "above. Failed core proc(s): {}",
            )
            self._fail(1)
            return
        await asyncio.sleep(total_s * 0.4)
        graph_gb = (plan.graph_bytes - s.graph_headroom_gb * 1e9) / gib
        self._say(
            "info",
            f"Capture cuda graph end. Time elapsed: {total_s * 0.4:.2f} s. mem usage={graph_gb:.2f} GB. "
            f"avail mem={avail - graph_gb:.2f} GB.",
            f"Graph capturing finished in {total_s * 0.4:.0f} secs, took {graph_gb:.2f} GiB",
        )
        self._say(
            "info",
            f"max_total_num_tokens={self.engine.pool_tokens}, chunked_prefill_size="
            f"{s.chunked_prefill_size}, max_prefill_tokens=16384, max_running_requests="
            f"{p.max_running_requests}, context_len={p.context_length}, "
            f"available_gpu_mem={avail - graph_gb:.2f} GB",
            f"init engine (profile, create kv cache, warmup model) took {total_s:.2f} seconds",
        )
        self._say(
            "info",
            f"Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)",
            f"Starting vLLM API server 0 on http://{host}:{port}",
        )
        delay = self.opts.faults.ready_delay_s
        if delay > 0:
            await asyncio.sleep(delay)
        self.ready = True
        assert self.loop is not None
        self.ready_at = self.loop.time()
        self._say("info", "The server is fired up and ready to roll!", "Application startup complete.")
        self.log.flush()

    def _fail(self, code: int) -> None:
        self._say("error", "Received sigquit from a child process. It usually means the child failed.", "")
        self.log.flush()
        self._request_stop(code)

    def _vllm_stats(self) -> None:
        assert self.loop is not None
        now = self.loop.time()
        t0, p0, g0, q0, h0 = self._vllm_last
        c, e = self.engine.counters, self.engine
        queries = c.prefix_queries - q0
        hit_pct = 100.0 * (c.cached_tokens - h0) / queries if queries else 0.0
        dt = now - t0 if t0 else 5.0
        usage = 100.0 * e.used_tokens / e.pool_tokens if e.pool_tokens else 0.0
        self.log.info(
            f"Engine 000: Avg prompt throughput: {(c.prompt_tokens - p0) / dt:.1f} tokens/s, Avg generation "
            f"throughput: {(c.generation_tokens - g0) / dt:.1f} tokens/s, Running: {len(e.running)} reqs, "
            f"Waiting: {len(e.waiting)} reqs, GPU KV cache usage: {usage:.1f}%, Prefix cache hit rate: {hit_pct:.1f}%"
        )
        if e.spec is not None and c.spec_cycles:
            self.log.info(
                f"SpecDecoding metrics: Mean acceptance length: "
                f"{1 + c.spec_accepted_tokens / c.spec_cycles:.2f}, Accepted: {c.spec_accepted_tokens} "
                f"tokens, Drafted: {c.spec_draft_tokens} tokens"
            )
        self._vllm_last = (now, c.prompt_tokens, c.generation_tokens, c.prefix_queries, c.cached_tokens)
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
                self._deliver(emissions)
        except Exception:  # a bug must not leave a server that accepts but never answers
            self.log.error(f"Scheduler hit an exception: {traceback.format_exc().rstrip()}")
            self._fail(1)
            return
        nxt = self.engine.next_event_s
        if nxt is not None:
            self._scheduled = nxt
            self._timer = loop.call_at(nxt, self._tick)

    def _deliver(self, emissions: list[Emission]) -> None:
        emlog = self._emlog
        for em in emissions:
            st: _Stream = em.req.context  # type: ignore[assignment]
            if st is None or st.done:
                continue
            if not st.stream:
                if em.tokens:
                    st.pieces.append(self.text.take(em.tokens))
                if em.finished:
                    st.conn.finish_plain(st, em.req)
                continue
            conn = st.conn
            if conn.closed:
                continue
            if em.req.state == ABORTED:
                self._stream_error(st, em.req.abort_message or "The request was aborted.", "InternalServerError", 500)
                continue
            if em.tokens:
                st.chunks += 1
                if st.stall_at >= 0 and st.chunks > st.stall_at:
                    if em.finished:
                        st.done = True
                    continue
                if st.error_at >= 0 and st.chunks > st.error_at:
                    self._stream_error(
                        st,
                        "Simulated internal error while generating (--error-after-chunks).",
                        "InternalServerError",
                        500,
                    )
                    self.engine.abort(st.rid, self.loop.time() if self.loop else 0.0, "fault")
                    continue
                text = self.text.take(em.tokens)
                if st.malformed_at >= 0 and st.chunks == st.malformed_at + 1:
                    payload = b'data: {"id":' + st.id_json + b',"object":"chat.completion.chu\n\n'
                elif st.continuous_usage:
                    n = em.req.generated
                    usage = self._usage(st.prompt_tokens, n, em.req.cached_tokens)
                    payload = st.head + text + st.tail[:-7] + usage + b"}\n\n"
                else:
                    payload = st.head + text + st.tail
                if st.chunks == 1 and st.chat:
                    role = self._role_chunk(st)
                    if emlog is not None:
                        self._emit_log(st, 0, "role")
                    if emlog is not None:
                        self._emit_log(st, em.tokens, "content")
                    conn.write_chunk(role + payload)
                else:
                    if emlog is not None:
                        self._emit_log(st, em.tokens, "content")
                    conn.write_chunk(payload)
            if em.finished:
                self._finish_stream(st, em.req)

    def _emit_log(self, st: _Stream, tokens: int, kind: str) -> None:
        assert self._emlog is not None
        self._emlog.write(
            orjson.dumps(
                {"request_id": st.rid, "index": st.sent, "tokens": tokens, "emit_ns": time.time_ns(), "kind": kind}
            )
            + b"\n"
        )
        st.sent += 1

    def _usage(self, prompt: int, completion: int, cached: int) -> bytes:
        return (
            b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,'
            b'"prompt_tokens_details":{"cached_tokens":%d}}' % (prompt, prompt + completion, completion, cached)
        )

    def _role_chunk(self, st: _Stream) -> bytes:
        usage = self._usage(st.prompt_tokens, 0, st.req.cached_tokens) if st.continuous_usage else b"null"
        return (
            b'data: {"id":'
            + st.id_json
            + b',"object":"chat.completion.chunk","created":%d,"model":' % self.created
            + self.model_json
            + b',"choices":[{"index":0,"delta":{"role":"assistant",'
            b'"content":"","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,'
            b'"matched_stop":null}],"usage":' + usage + b"}\n\n"
        )

    def _finish_stream(self, st: _Stream, req: SimRequest) -> None:
        reason = req.finish_reason or "stop"
        matched = b"%d" % EOS_TOKEN_ID if reason == "stop" else b"null"
        usage_all = self._usage(st.prompt_tokens, req.generated, req.cached_tokens)
        usage = usage_all if st.continuous_usage else b"null"
        if st.chat:
            fin = (
                b'data: {"id":'
                + st.id_json
                + b',"object":"chat.completion.chunk","created":%d,"model":' % self.created
                + self.model_json
                + b',"choices":[{"index":0,"delta":{"role":null,"content":null,'
                b'"reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":"'
                + reason.encode()
                + b'","matched_stop":'
                + matched
                + b'}],"usage":'
                + usage
                + b"}\n\n"
            )
            obj = b"chat.completion.chunk"
        else:
            fin = (
                b'data: {"id":'
                + st.id_json
                + b',"object":"text_completion","created":%d,"model":' % self.created
                + self.model_json
                + b',"choices":[{"index":0,"text":"","logprobs":null,'
                b'"finish_reason":"'
                + reason.encode()
                + b'","matched_stop":'
                + matched
                + b'}],"usage":'
                + usage
                + b"}\n\n"
            )
            obj = b"text_completion"
        out = fin
        emlog = self._emlog
        if emlog is not None:
            self._emit_log(st, 0, "finish")
        if st.include_usage:
            out += (
                b'data: {"id":'
                + st.id_json
                + b',"object":"'
                + obj
                + b'","created":%d,"model":' % self.created
                + self.model_json
                + b',"choices":[],"usage":'
                + usage_all
                + b"}\n\n"
            )
            if emlog is not None:
                self._emit_log(st, 0, "usage")
        out += b"data: [DONE]\n\n"
        st.done = True
        st.conn.write_chunk(out)
        st.conn.end_response()

    def _stream_error(self, st: _Stream, message: str, err_type: str, code: int) -> None:
        body = orjson.dumps({"error": {"message": message, "type": err_type, "param": None, "code": code}})
        if self._emlog is not None:
            self._emit_log(st, 0, "error")
        st.done = True
        st.conn.write_chunk(b"data: " + body + b"\n\ndata: [DONE]\n\n")
        st.conn.end_response()

    # -- request handling -----------------------------------------------------------------------

    def error_body(self, status: int, message: str, err_type: str) -> bytes:
        if self.opts.metrics_style == "vllm":
            return orjson.dumps({"error": {"message": message, "type": err_type, "param": None, "code": status}})
        return orjson.dumps({"object": "error", "message": message, "type": err_type, "param": None, "code": status})

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

    def handle_generate(self, conn: _Conn, chat: bool, body_raw: bytes, headers: dict[str, str]) -> None:
        assert self.loop is not None
        now = self.loop.time()
        if not self.ready:
            conn.send_json(
                503, self.error_body(503, "The server is not ready yet (starting up).", "ServiceUnavailableError")
            )
            return
        f = self.opts.faults
        self.requests_seen += 1
        if f.crash_after_requests and self.requests_seen > f.crash_after_requests:
            self._crash("crash-after-requests")
        if self._rejecting(now):
            if f.reject_status == 429:
                conn.send_json(
                    429,
                    self.error_body(429, "Too many requests. Please retry later.", "RateLimitError"),
                    extra=b"Retry-After: 1\r\n",
                )
            else:
                conn.send_json(
                    f.reject_status,
                    self.error_body(f.reject_status, "The request queue is full.", "ServiceUnavailableError"),
                )
            return
        try:
            body = orjson.loads(body_raw)
            if not isinstance(body, dict):
                raise ValueError("the request body must be a JSON object")
        except (orjson.JSONDecodeError, ValueError) as exc:
            conn.send_json(400, self.error_body(400, f"Invalid JSON body: {exc}", "BadRequestError"))
            return
        if chat and not isinstance(body.get("messages"), list):
            conn.send_json(
                400, self.error_body(400, "Field 'messages' is required and must be a list.", "BadRequestError")
            )
            return
        if not chat and "prompt" not in body:
            conn.send_json(400, self.error_body(400, "Field 'prompt' is required.", "BadRequestError"))
            return
        text, n_msgs = prompt_text(body, chat)
        prompt_tokens = count_prompt_tokens(text, n_msgs, self.profile.server.chars_per_token)
        max_tokens = body.get("max_completion_tokens")
        if max_tokens is None:
            max_tokens = body.get("max_tokens")
        if max_tokens is not None and (
            not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 0
        ):
            conn.send_json(
                400,
                self.error_body(
                    400, f"max_tokens must be a non-negative integer, got {max_tokens!r}", "BadRequestError"
                ),
            )
            return
        engine = self.engine
        try:
            engine.check(prompt_tokens, max_tokens)
        except RejectError as exc:
            conn.send_json(exc.status, self.error_body(exc.status, exc.message, exc.err_type))
            return
        ctx = self.profile.context_length
        limit = max_tokens if max_tokens is not None else ctx - prompt_tokens
        min_tokens = body.get("min_tokens") or 0
        if not isinstance(min_tokens, int):
            min_tokens = 0
        if body.get("ignore_eos"):
            target, reason = limit, "length"
        else:
            s = self.profile.server
            natural = max(natural_length(self.rng, s.natural_len_median, s.natural_len_sigma), min_tokens)
            target, reason = (natural, "stop") if natural < limit else (limit, "length")
        rid = headers.get("x-request-id") or ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        if rid in engine.requests:
            rid = f"{rid}-{uuid.uuid4().hex[:8]}"
        stream = bool(body.get("stream"))
        st = _Stream()
        st.conn = conn
        st.rid = rid
        st.chat = chat
        st.stream = stream
        st.prompt_tokens = prompt_tokens
        st.id_json = orjson.dumps(rid)
        opts = body.get("stream_options") if isinstance(body.get("stream_options"), dict) else {}
        assert isinstance(opts, dict)
        # SGLang: the client must ask; vLLM: include_usage defaults to true once stream_options is sent
        default_usage = self.opts.metrics_style == "vllm" and isinstance(body.get("stream_options"), dict)
        st.include_usage = bool(opts.get("include_usage", default_usage))
        st.continuous_usage = bool(opts.get("continuous_usage_stats"))
        faulty = f.fault_rate >= 1.0 or self.fault_rng.random() < f.fault_rate
        st.stall_at = f.stall_after_chunks if faulty else -1
        st.malformed_at = f.malformed_after_chunks if faulty else -1
        st.error_at = f.error_after_chunks if faulty else -1
        if chat:
            st.head = (
                b'data: {"id":'
                + st.id_json
                + b',"object":"chat.completion.chunk","created":%d,"model":' % self.created
                + self.model_json
                + b',"choices":[{"index":0,"delta":{"role":null,"content":"'
            )
            st.tail = (
                b'","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,'
                b'"matched_stop":null}],"usage":null}\n\n'
            )
        else:
            st.head = (
                b'data: {"id":'
                + st.id_json
                + b',"object":"text_completion","created":%d,"model":' % self.created
                + self.model_json
                + b',"choices":[{"index":0,"text":"'
            )
            st.tail = b'","logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}\n\n'
        req = SimRequest(
            rid=rid,
            prompt_tokens=prompt_tokens,
            max_new_tokens=limit,
            target_tokens=target,
            stop_reason=reason,
            source=classify_source(text),
        )
        if engine.cache is not None:
            s = self.profile.server
            req.block_hashes = prompt_block_hashes(body, chat, s.chars_per_token, s.prefix_block_tokens)
        req.context = st
        st.req = req
        conn.active = st
        if stream:
            conn.start_stream(rid)
        engine.submit(req, now)
        self.kick()

    def abort_stream(self, st: _Stream) -> None:
        if not st.done and self.loop is not None:
            st.done = True
            self.engine.abort(st.rid, self.loop.time(), "client disconnected")

    def server_info(self) -> dict[str, Any]:
        """SGLang's /server_info subset: settings and ``internal_states`` (acceptance since start)."""
        p, c = self.profile, self.engine.counters
        accept = (c.spec_accepted_tokens + c.spec_cycles) / c.spec_cycles if c.spec_cycles else None
        return {
            "model_path": self.model_name,
            "served_model_name": self.model_name,
            "tp_size": p.server.tp,
            "max_running_requests": p.max_running_requests,
            "max_queued_requests": p.server.max_queued_requests or None,
            "mem_fraction_static": p.server.mem_fraction_static,
            "cuda_graph_max_bs": p.server.cuda_graph_max_bs,
            "chunked_prefill_size": p.server.chunked_prefill_size,
            "context_length": p.context_length,
            "disable_radix_cache": self.engine.cache is None,
            "speculative_algorithm": p.spec.name.upper() if p.spec.enabled else None,
            "speculative_num_draft_tokens": p.verify_width if p.spec.enabled else None,
            "max_total_num_tokens": self.engine.pool_tokens,
            "internal_states": [
                {"avg_spec_accept_length": accept, "last_gen_throughput": self.engine.gauges.gen_throughput}
            ],
            "version": "loadgen-sim",
        }

    def stats(self) -> dict[str, Any]:
        late = np.array(self.lateness[-100_000:]) * 1e3 if self.lateness else np.zeros(1)
        c = self.engine.counters
        return {
            "steps": len(self.lateness),
            "step_lateness_ms": {
                "p50": float(np.percentile(late, 50)),
                "p99": float(np.percentile(late, 99)),
                "max": float(late.max()),
                "mean": float(late.mean()),
            },
            "generation_tokens": c.generation_tokens,
            "requests": c.requests,
            "finished": c.finished,
            "aborted": c.aborted,
            "retracted": c.retracted_reqs,
            "kv_pool_tokens": self.engine.pool_tokens,
            "ready": self.ready,
        }


class _Conn(asyncio.Protocol):
    """One client connection: parse requests, write responses, one request at a time."""

    def __init__(self, server: SimServer) -> None:
        self.server = server
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.active: _Stream | None = None
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
            self.server.abort_stream(self.active)
            self.active = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.active is None:
            self._parse()

    def _parse(self) -> None:
        while self.active is None and not self.closed:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > 65536:
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
            self._dispatch(method, target.split("?", 1)[0], headers, body)

    def _dechunk(self, start: int) -> tuple[bytes, int] | None:
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

    def _dispatch(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        srv = self.server
        if path in ("/v1/chat/completions", "/v1/completions"):
            if method != "POST":
                self.send_json(405, srv.error_body(405, "Method Not Allowed", "BadRequestError"))
                return
            srv.handle_generate(self, path == "/v1/chat/completions", body, headers)
            return
        if method not in ("GET", "HEAD"):
            self.send_json(405, srv.error_body(405, "Method Not Allowed", "BadRequestError"))
            return
        if path in ("/health", "/health_generate"):
            if srv.ready:
                self.send(200, b"", b"text/plain; charset=utf-8")
            else:
                self.send(503, b"", b"text/plain; charset=utf-8")
        elif path == "/v1/models":
            ctx = srv.profile.context_length
            self.send_json(
                200,
                orjson.dumps(
                    {
                        "object": "list",
                        "data": [
                            {
                                "id": srv.model_name,
                                "object": "model",
                                "created": srv.created,
                                "owned_by": "vllm" if srv.opts.metrics_style == "vllm" else "sglang",
                                "root": srv.model_name,
                                "max_model_len": ctx,
                            }
                        ],
                    }
                ),
            )
        elif path == "/metrics":
            text = (render_vllm if srv.opts.metrics_style == "vllm" else render_sglang)(srv.engine, srv.model_name)
            self.send(200, text.encode(), b"text/plain; version=0.0.4; charset=utf-8")
        elif path == "/gpu/metrics":
            assert srv.loop is not None
            self.send(200, srv.gpu.render(srv.loop.time()).encode(), b"text/plain; version=0.0.4; charset=utf-8")
        elif path in ("/server_info", "/get_server_info"):
            self.send_json(200, orjson.dumps(srv.server_info()))
        elif path == "/sim/stats":
            self.send_json(200, orjson.dumps(srv.stats()))
        elif path == "/sim/stats/reset":
            srv.lateness.clear()
            self.send_json(200, b"{}")
        else:
            self.send_json(404, srv.error_body(404, f"Not Found: {path}", "NotFoundError"))

    # -- writing --------------------------------------------------------------------------------

    def _head(self, status: int, ctype: bytes, length: int | None, extra: bytes = b"") -> bytes:
        conn = b"keep-alive" if self.keep_alive else b"close"
        h = b"HTTP/1.1 %d %s\r\nserver: loadgen-sim\r\ncontent-type: %s\r\nconnection: %s\r\n" % (
            status,
            REASONS.get(status, "Unknown").encode(),
            ctype,
            conn,
        )
        if length is not None:
            h += b"content-length: %d\r\n" % length
        return h + extra + b"\r\n"

    def send(self, status: int, body: bytes, ctype: bytes, extra: bytes = b"", close: bool = False) -> None:
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
        assert self.transport is not None
        extra = b"x-request-id: " + rid.encode("latin-1", "replace") + b"\r\ncache-control: no-cache\r\n"
        if self.chunked:
            extra += b"transfer-encoding: chunked\r\n"
        else:
            self.keep_alive = False
        self.transport.write(self._head(200, b"text/event-stream; charset=utf-8", None, extra))

    def write_chunk(self, payload: bytes) -> None:
        if self.closed or self.transport is None:
            return
        if self.chunked:
            self.transport.write(b"%x\r\n" % len(payload) + payload + b"\r\n")
        else:
            self.transport.write(payload)

    def end_response(self) -> None:
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

    def finish_plain(self, st: _Stream, req: SimRequest) -> None:
        srv = self.server
        st.done = True
        self.active = None
        if req.state == ABORTED:
            self.send_json(500, srv.error_body(500, req.abort_message or "aborted", "InternalServerError"))
        else:
            text = b"".join(st.pieces).decode()
            usage = {
                "prompt_tokens": st.prompt_tokens,
                "total_tokens": st.prompt_tokens + req.generated,
                "completion_tokens": req.generated,
                "prompt_tokens_details": {"cached_tokens": req.cached_tokens},
            }
            reason = req.finish_reason or "stop"
            matched = EOS_TOKEN_ID if reason == "stop" else None
            if st.chat:
                obj: dict[str, Any] = {
                    "id": st.rid,
                    "object": "chat.completion",
                    "created": srv.created,
                    "model": srv.model_name,
                    "choices": [
                        {
                            "index": 0,
                            "message": {
                                "role": "assistant",
                                "content": text,
                                "reasoning_content": None,
                                "tool_calls": None,
                            },
                            "logprobs": None,
                            "finish_reason": reason,
                            "matched_stop": matched,
                        }
                    ],
                    "usage": usage,
                }
            else:
                obj = {
                    "id": st.rid,
                    "object": "text_completion",
                    "created": srv.created,
                    "model": srv.model_name,
                    "choices": [
                        {"index": 0, "text": text, "logprobs": None, "finish_reason": reason, "matched_stop": matched}
                    ],
                    "usage": usage,
                }
            self.send_json(
                200, orjson.dumps(obj), extra=b"x-request-id: " + st.rid.encode("latin-1", "replace") + b"\r\n"
            )
        if not self.closed and self.buf:
            self._parse()


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
