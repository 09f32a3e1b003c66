"""Prometheus text exposition of the engine's state: SGLang names, vLLM names, DCGM exporter names.

SGLang gauges are the values last published by the engine (refreshed at prefill batches and every
``decode_log_interval`` decode steps, as SGLang does); vLLM gauges are read live at scrape time
(vLLM updates them every engine step). Counters and histograms are live in both styles.
"""

from __future__ import annotations

import uuid

from loadgen.sim.engine import Engine
from loadgen.sim.stats import Histogram


def _fmt(value: float) -> str:
    if isinstance(value, bool):
        return "1.0" if value else "0.0"
    if isinstance(value, int):
        return f"{value}.0"
    return repr(float(value))


class _Writer:
    def __init__(self, labels: str) -> None:
        self.labels = labels
        self.parts: list[str] = []

    def metric(self, name: str, kind: str, help_text: str, value: float, extra: str = "") -> None:
        labels = self.labels + ("," + extra if extra else "")
        self.parts.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n{name}{{{labels}}} {_fmt(value)}\n")

    def counter(self, name: str, help_text: str, value: float) -> None:
        # prometheus_client declares counters without _total and exposes samples with it
        base = name[:-6] if name.endswith("_total") else name
        self.parts.append(
            f"# HELP {base} {help_text}\n# TYPE {base} counter\n{base}_total{{{self.labels}}} {_fmt(value)}\n"
        )

    def labelled_counter(self, name: str, help_text: str, values: dict[str, float], label: str) -> None:
        base = name[:-6] if name.endswith("_total") else name
        lines = [f"# HELP {base} {help_text}\n# TYPE {base} counter\n"]
        for key, value in values.items():
            lines.append(f'{base}_total{{{self.labels},{label}="{key}"}} {_fmt(value)}\n')
        self.parts.append("".join(lines))

    def histogram(self, name: str, help_text: str, h: Histogram) -> None:
        lines = [f"# HELP {name} {help_text}\n# TYPE {name} histogram\n"]
        cum = 0
        for bound, count in zip(h.bounds, h.counts, strict=False):
            cum += count
            lines.append(f'{name}_bucket{{{self.labels},le="{bound}"}} {cum}.0\n')
        lines.append(f'{name}_bucket{{{self.labels},le="+Inf"}} {h.count}.0\n')
        lines.append(f"{name}_count{{{self.labels}}} {h.count}.0\n")
        lines.append(f"{name}_sum{{{self.labels}}} {_fmt(h.total)}\n")
        self.parts.append("".join(lines))

    def text(self) -> str:
        return "".join(self.parts)


def render_sglang(engine: Engine, model_name: str) -> str:
    w = _Writer(f'model_name="{model_name}",engine_type="unified",tp_rank="0",pp_rank="0"')
    g, c = engine.gauges, engine.counters
    w.metric("sglang:num_running_reqs", "gauge", "The number of running requests.", g.num_running_reqs)
    w.metric("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", g.num_queue_reqs)
    w.metric("sglang:num_used_tokens", "gauge", "The number of used tokens.", g.num_used_tokens)
    w.metric("sglang:token_usage", "gauge", "The token usage.", g.token_usage)
    w.metric(
        "sglang:max_total_num_tokens",
        "gauge",
        "Maximum total number of tokens in the KV cache pool.",
        engine.pool_tokens,
    )
    w.metric("sglang:gen_throughput", "gauge", "The generation throughput (token/s).", g.gen_throughput)
    w.metric("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", g.cache_hit_rate)
    w.metric(
        "sglang:spec_accept_length",
        "gauge",
        "The average acceptance length of speculative decoding.",
        g.spec_accept_length,
    )
    w.metric(
        "sglang:spec_accept_rate",
        "gauge",
        "The acceptance rate of speculative decoding (accepted / draft tokens).",
        g.spec_accept_rate,
    )
    w.metric("sglang:num_retracted_reqs", "gauge", "The number of retracted requests.", g.num_retracted_reqs)
    w.metric(
        "sglang:is_cuda_graph",
        "gauge",
        "Whether the batch is using CUDA graph.",
        1.0 if g.num_running_reqs <= engine.profile.server.cuda_graph_max_bs else 0.0,
    )
    w.counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", c.prompt_tokens)
    w.counter("sglang:generation_tokens_total", "Number of generation tokens processed.", c.generation_tokens)
    w.counter("sglang:cached_tokens_total", "Number of cached prompt tokens.", c.cached_tokens)
    w.counter("sglang:num_requests_total", "Number of requests processed.", c.requests)
    w.counter("sglang:num_aborted_requests_total", "Number of requests aborted.", c.aborted)
    w.counter("sglang:num_retracted_requests_total", "Number of retracted requests.", c.retracted_reqs)
    w.counter(
        "sglang:num_retracted_input_tokens_total", "Input tokens of retracted requests.", c.retracted_input_tokens
    )
    w.counter(
        "sglang:num_retracted_output_tokens_total", "Output tokens of retracted requests.", c.retracted_output_tokens
    )
    w.histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", engine.ttft)
    w.histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", engine.itl)
    w.histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", engine.e2e)
    w.histogram("sglang:queue_time_seconds", "Histogram of queueing time in seconds.", engine.queue_time)
    return w.text()


def render_vllm(engine: Engine, model_name: str) -> str:
    w = _Writer(f'engine="0",model_name="{model_name}"')
    c = engine.counters
    usage = engine.used_tokens / engine.pool_tokens if engine.pool_tokens else 0.0
    w.metric(
        "vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", len(engine.running)
    )
    w.metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", len(engine.waiting))
    w.metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", usage)
    block = max(1, engine.profile.server.prefix_block_tokens)
    w.metric(
        "vllm:cache_config_info",
        "gauge",
        "Information of the LLMEngine CacheConfig",
        1.0,
        # as vLLM counts it: the pool's blocks and its null block
        f'block_size="{block}",enable_prefix_caching="{engine.cache is not None}",'
        f'num_gpu_blocks="{engine.pool_tokens // block + 1}"',
    )
    w.counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", c.retracted_reqs)
    w.counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", c.prompt_tokens)
    w.counter("vllm:generation_tokens_total", "Number of generation tokens processed.", c.generation_tokens)
    w.counter(
        "vllm:prefix_cache_queries_total",
        "Prefix cache queries, in terms of number of queried tokens.",
        c.prefix_queries,
    )
    w.counter(
        "vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", c.cached_tokens
    )
    w.labelled_counter(
        "vllm:request_success_total",
        "Count of successfully processed requests.",
        {"stop": c.finished_stop, "length": c.finished_length, "abort": c.aborted},
        "finished_reason",
    )
    if engine.spec is not None:
        w.counter("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.", c.spec_cycles)
        w.counter("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.", c.spec_draft_tokens)
        w.counter("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.", c.spec_accepted_tokens)
    w.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", engine.ttft)
    w.histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", engine.itl)
    w.histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", engine.e2e)
    w.histogram(
        "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", engine.queue_time
    )
    return w.text()


class GpuTelemetry:
    """Per-GPU DCGM-exporter style metrics derived from the engine's power and busy accounting."""

    def __init__(self, engine: Engine, seed: int) -> None:
        self.engine = engine
        hw = engine.profile.hardware
        self.uuids = [str(uuid.UUID(int=(seed * 1_000_003 + i + 1) & ((1 << 128) - 1))) for i in range(hw.gpus)]
        self.energy_base_mj = 10_000_000_000 + seed * 7919  # "since the driver was last reloaded"
        plan = engine.plan
        # allocated once started: the static fraction (runtime, weights, KV pool) and the graphs' memory
        used = plan.static_bytes + min(plan.graph_bytes, plan.headroom_bytes)
        self.fb_used_mib = int(min(used, plan.total_bytes) / 2**20)
        self.fb_free_mib = int(max(0.0, plan.total_bytes / 2**20 - self.fb_used_mib))

    def render(self, now: float) -> str:
        e = self.engine
        hw = e.profile.hardware
        power = e.power_w(now)
        step = e.current
        instant = step.cost.power_w if step is not None and step.start_s <= now else hw.idle_w
        energy_mj = self.energy_base_mj + int(e.energy_at(now) * 1000)
        busy = e.busy_share(now)
        util = round(100 * busy)
        u_bw = e.last_cost.u_bw if e.last_cost is not None else 0.0
        sm_clock = hw.sm_clock_mhz if util > 0 else hw.sm_clock_idle_mhz
        # clock event reasons: GpuIdle (0x1) when idle, SwPowerCap (0x4) when the model hits the limit
        reasons = 0x1 if util == 0 else (0x4 if power >= hw.power_limit_w - 1e-6 else 0)
        # ASSUMPTION: 25 C inlet plus 0.1 K per watt of 1-s average power, at most 85 C
        temp = min(85, round(25 + 0.1 * power))
        rows = [
            ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", sm_clock),
            ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", hw.mem_clock_mhz),
            ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", temp),
            ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", round(power, 3)),
            (
                "DCGM_FI_DEV_POWER_USAGE_INSTANT",
                "gauge",
                "Current instantaneous power usage (in W).",
                round(instant, 3),
            ),
            ("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "gauge", "Enforced power limit (in W).", hw.power_limit_w),
            (
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                "counter",
                "Total energy consumption since boot (in mJ).",
                energy_mj,
            ),
            ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", util),
            ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", round(100 * busy * u_bw)),
            ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", self.fb_free_mib),
            ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", self.fb_used_mib),
            ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "Current clock event reasons (bitmask).", reasons),
        ]
        out: list[str] = []
        for name, kind, help_text, value in rows:
            out.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
            for i, gpu_uuid in enumerate(self.uuids):
                out.append(
                    f'{name}{{gpu="{i}",UUID="GPU-{gpu_uuid}",device="nvidia{i}",'
                    f'modelName="{hw.gpu_name}",Hostname="sim"}} {value}\n'
                )
        return "".join(out)
