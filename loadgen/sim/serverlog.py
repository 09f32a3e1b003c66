"""What the imitated server says in its own log, beyond the engine's per-step lines.

Every line is worded as SGLang words it, or as vLLM does when the log's style is "vllm" (the
journal framing of each line is :mod:`loadgen.sim.logsink`'s business).

Start-up (:func:`start_up`) replays the real server's sequence over ``server.startup_s`` seconds:
the arguments line, weight loading (60 % of the time), KV-cache allocation, CUDA-graph capture (the
other 40 %), then readiness. Where the memory plan (:mod:`loadgen.sim.memory`) does not fit it
fails where the real server does, with its messages: more TP ranks than GPUs, weights larger than
the GPUs, no memory left for a KV pool, graphs larger than the headroom after the pool (``CUDA out
of memory`` during capture).

vLLM also writes a throughput line every few seconds (:class:`VllmStats`); SGLang's per-step
lines come from the engine itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from loadgen.sim.engine import Engine
from loadgen.sim.logsink import LogSink
from loadgen.sim.memory import FAIL_DEVICES, FAIL_GRAPHS, FAIL_KV_POOL, FAIL_WEIGHTS, MemoryPlan
from loadgen.sim.profile import Profile

GRAPH_BS_LADDER = (1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 288, 320,
                   352, 384, 416, 448, 480, 512)  # fmt: skip
CHILD_FAILED = "Received sigquit from a child process. It usually means the child failed."
GIB = 2**30


def say(log: LogSink, level: str, sglang: str, vllm: str | None = None) -> None:
    """Log a line in the imitated server's wording (``vllm`` None: SGLang's text; "": nothing)."""
    text = vllm if log.style == "vllm" and vllm is not None else sglang
    if text:
        (log.error if level == "error" else log.info)(text)


async def start_up(
    log: LogSink,
    profile: Profile,
    engine: Engine,
    host: str,
    port: int,
    ready_delay_s: float,
    on_ready: Callable[[], None],
) -> bool:
    """Log the start-up and call ``on_ready`` once the server would accept requests (after a further
    ``ready_delay_s``). False: it failed like the real server (its error lines written); the caller
    ends the process."""
    plan = engine.plan
    total_s = max(0.0, profile.server.startup_s)
    _say_args(log, profile, host, port)
    if plan.failure == FAIL_DEVICES:
        say(
            log,
            "error",
            "Scheduler hit an exception: RuntimeError: CUDA error: invalid device ordinal "
            f"(tp_size={plan.tp}, pp_size={plan.pp}, {plan.gpus} GPU(s) visible)",
            f"ValueError: World size ({plan.tp * plan.pp}) is larger than the number of available GPUs ({plan.gpus}) "
            "in this node.",
        )
        return False
    if not await _load_weights(log, profile, plan, total_s):
        return False
    if plan.failure == FAIL_KV_POOL:
        say(
            log,
            "error",
            "Scheduler hit an exception: RuntimeError: Not enough memory. Please try to increase "
            f"--mem-fraction-static. Current value: mem_fraction_static={profile.server.mem_fraction_static}",
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
            "when initializing the engine.\nRuntimeError: Engine core initialization failed. See root cause "
            "above. Failed core proc(s): {}",
        )
        return False
    _say_kv_pool(log, profile, plan)
    if not await _capture_graphs(log, profile, plan, total_s):
        return False
    _say_serving(log, profile, engine, host, port, total_s)
    if ready_delay_s > 0:
        await asyncio.sleep(ready_delay_s)
    on_ready()
    say(log, "info", "The server is fired up and ready to roll!", "Application startup complete.")
    log.flush()
    return True


def _say_args(log: LogSink, p: Profile, host: str, port: int) -> None:
    """The first line: the server's arguments (SGLang's ``server_args``, vLLM's non-default ones)."""
    s = p.server
    name = p.model.served_name
    say(
        log,
        "info",
        f"server_args=ServerArgs(model_path='{name}', tp_size={s.tp}, pp_size={s.pp}, ep_size={s.ep}, "
        f"enable_dp_attention={s.dp_attention > 1}, dp_size={s.dp_attention}, "
        f"quantization={s.quantization or None!r}, kv_cache_dtype={s.kv_cache_dtype!r}, "
        f"mem_fraction_static={s.mem_fraction_static}, max_running_requests={p.max_running_requests}, "
        f"max_queued_requests={s.max_queued_requests or None}, chunked_prefill_size={s.chunked_prefill_size}, "
        f"cuda_graph_max_bs={s.cuda_graph_max_bs}, context_length={p.context_length}, "
        f"disable_radix_cache={s.disable_radix_cache}, "
        f"speculative_algorithm={p.spec.name.upper() if p.spec.enabled else None!r}, "
        f"speculative_num_draft_tokens={p.verify_width if p.spec.enabled else None}, "
        f"host='{host}', port={port})",
        f"non-default args: {{'model': '{name}', 'host': '{host}', 'port': {port}, "
        f"'tensor_parallel_size': {s.tp}, 'gpu_memory_utilization': {s.mem_fraction_static}, "
        f"'max_num_seqs': {p.max_running_requests}, 'max_model_len': {p.context_length}}}",
    )


async def _load_weights(log: LogSink, p: Profile, plan: MemoryPlan, total_s: float) -> bool:
    """Weight loading: 60 % of the start-up time. False: the weights do not fit (error logged)."""
    name = p.model.served_name
    avail = (plan.total_bytes - plan.runtime_bytes) / GIB
    say(log, "info", f"Load weight begin. avail mem={avail:.2f} GB", f"Starting to load model {name}...")
    await asyncio.sleep(total_s * 0.6)
    weights = plan.weight_bytes + plan.drafter_bytes
    if plan.failure == FAIL_WEIGHTS:
        oom = (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
            f"{(weights - avail * GIB) / GIB + 1:.2f} GiB. GPU 0 has a total capacity of "
            f"{plan.total_bytes / GIB:.2f} GiB of which 0 bytes is free."
        )
        say(log, "error", f"Scheduler hit an exception: {oom}", f"{oom}\nRuntimeError: Engine core "
            "initialization failed. See root cause above. Failed core proc(s): {}")  # fmt: skip
        return False
    avail -= weights / GIB
    say(
        log,
        "info",
        f"Load weight end. type=SimulatedForCausalLM, dtype=torch.bfloat16, "
        f"avail mem={avail:.2f} GB, mem usage={weights / GIB:.2f} GB.",
        f"Model loading took {weights / GIB:.4f} GiB and {total_s * 0.6:.6f} seconds",
    )
    return True


def _say_kv_pool(log: LogSink, p: Profile, plan: MemoryPlan) -> None:
    """The KV pool allocated: its size in tokens and bytes, and the memory left after it."""
    say(
        log,
        "info",
        f"KV Cache is allocated. #tokens: {plan.kv_pool_tokens}, KV size: {plan.kv_pool_bytes / GIB:.2f} GB",
        f"GPU KV cache size: {plan.kv_pool_tokens:,} tokens",
    )
    say(
        log,
        "info",
        f"Memory pool end. avail mem={plan.headroom_bytes / GIB:.2f} GB",
        f"Maximum concurrency for {p.context_length:,} tokens per request: "
        f"{plan.kv_pool_tokens / p.context_length:.2f}x",
    )


async def _capture_graphs(log: LogSink, p: Profile, plan: MemoryPlan, total_s: float) -> bool:
    """CUDA-graph capture: the other 40 % of the start-up time. False: the graphs do not fit in the
    headroom after the KV pool (PyTorch's out-of-memory error logged, 30 % of the time in)."""
    s = p.server
    avail = plan.headroom_bytes / GIB
    max_bs = min(s.cuda_graph_max_bs, p.max_running_requests)
    ladder = [b for b in GRAPH_BS_LADDER if b <= max_bs]
    if not ladder or ladder[-1] != max_bs:
        ladder.append(max_bs)
    say(
        log,
        "info",
        f"Capture cuda graph begin. This can take up to several minutes. avail mem={avail:.2f} GB",
        "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)",
    )
    say(log, "info", f"Capture cuda graph bs {ladder}", f"cudagraph sizes specified by model runner {ladder}")
    if plan.failure == FAIL_GRAPHS:
        await asyncio.sleep(total_s * 0.3)
        tried, free = _failing_allocation(plan.graph_bytes / GIB, avail, ladder)
        oom = (
            f"CUDA out of memory. Tried to allocate {tried:.2f} GiB. GPU 0 has a total capacity of "
            f"{plan.total_bytes / GIB:.2f} GiB of which {free:.2f} GiB is free."
        )
        say(
            log,
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
        return False
    await asyncio.sleep(total_s * 0.4)
    graph_gb = plan.graph_bytes / GIB
    say(
        log,
        "info",
        f"Capture cuda graph end. Time elapsed: {total_s * 0.4:.2f} s. mem usage={graph_gb:.2f} GB. "
        f"avail mem={avail - graph_gb:.2f} GB.",
        f"Graph capturing finished in {total_s * 0.4:.0f} secs, took {graph_gb:.2f} GiB",
    )
    return True


def _say_serving(log: LogSink, p: Profile, engine: Engine, host: str, port: int, total_s: float) -> None:
    """The engine's limits once initialised, and the HTTP server's address."""
    s = p.server
    left_gb = engine.plan.headroom_bytes / GIB - engine.plan.graph_bytes / GIB  # after the graphs
    say(
        log,
        "info",
        f"max_total_num_tokens={engine.pool_tokens}, chunked_prefill_size="
        f"{s.chunked_prefill_size}, max_prefill_tokens=16384, max_running_requests="
        f"{p.max_running_requests}, context_len={p.context_length}, "
        f"available_gpu_mem={left_gb:.2f} GB",
        f"init engine (profile, create kv cache, warmup model) took {total_s:.2f} seconds",
    )
    say(
        log,
        "info",
        f"Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)",
        f"Starting vLLM API server 0 on http://{host}:{port}",
    )


class VllmStats:
    """vLLM's periodic ``Engine 000: Avg prompt throughput ...`` line (and its ``SpecDecoding
    metrics`` line when drafting): rates over the time since the previous line (5 s for the first)."""

    def __init__(self, engine: Engine, log: LogSink) -> None:
        self.engine = engine
        self.log = log
        self._last = (0.0, 0, 0, 0, 0)  # time, prompt, generation, prefix-queried and cached tokens

    def write(self, now: float) -> None:
        t0, p0, g0, q0, h0 = self._last
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
        self._last = (now, c.prompt_tokens, c.generation_tokens, c.prefix_queries, c.cached_tokens)


def _failing_allocation(graph_gib: float, avail_gib: float, ladder: list[int]) -> tuple[float, float]:
    """The allocation that fails in graph capture, and what was free then (GiB). Graphs are captured
    largest batch first, each taking a share of the graph memory that grows with its batch size; the
    first share that no longer fits is the one PyTorch reports."""
    total = sum(ladder) or 1
    used = 0.0
    for bs in sorted(ladder, reverse=True):
        share = graph_gib * bs / total
        if used + share > avail_gib:
            return share, max(0.0, avail_gib - used)
        used += share
    return max(graph_gib - avail_gib, 0.01), 0.0
