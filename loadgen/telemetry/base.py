"""What every telemetry source shares: the sampler contract, event helper, and the sample schema.

Sample records (one JSON object per line of ``samples.jsonl``; ``None`` where a source cannot say)::

    GPU     {"t_ns", "src": "gpu", "source": "nvml"|"smi"|"dcgm", "gpu": 0, "uuid",
             "power_w",        instantaneous power where the source has it, else the averaged reading
             "power_kind",     "instant" | "average": which one power_w is
             "power_avg_w",    the driver's averaged reading (1 s window on Ampere and newer)
             "energy_mj",      cumulative energy counter (mJ since driver load; differences only)
             "power_limit_w", "util_gpu", "util_mem" (percent), "mem_used_b", "mem_total_b",
             "sm_clock_mhz", "mem_clock_mhz", "clock_reasons" (NVML clock-event bitmask), "temp_c"}
    server  {"t_ns", "src": "server", "engine": "sglang"|"vllm"|"custom",
             "running", "queued", "kv_usage" (0-1), "preemptions_total" (vLLM preemptions or SGLang
             retractions, a counter), "prefix_hit" (0-1 gauge, SGLang), "prefix_hits_total",
             "prefix_queries_total", "spec_accept_len" (gauge), "spec_drafts_total",
             "spec_accepted_total", "prompt_tokens_total", "gen_tokens_total", plus any user-mapped
             names}

``t_ns`` is wall-clock epoch nanoseconds (for NVML, the midpoint of that GPU's reads). Counters
(``*_total``, ``energy_mj``) are cumulative: consumers take differences.

Event records (``events.jsonl``): ``{"t_ns", "src", "kind", ...}``; ``src`` is "telemetry" for the
samplers' own outcomes (kinds: started, stopped, source_unavailable, field_not_supported, gpu_lost,
sampler_error, sampler_recovered, source_ended) and "log" for server log matches
(``kind: "log_match"``, ``pattern``, ``severity``, ``line``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

Record = dict[str, Any]
Emit = Callable[[Record], None]


class SamplerUnavailable(Exception):
    """The source cannot be used at all (no driver, bad URL); the message says what to do."""


class SamplerDone(Exception):
    """The source has nothing more to give (every GPU lost, the command ended for good)."""


class Sampler(Protocol):
    """A periodic telemetry source. ``sample`` blocks (NVML, HTTP): it runs on its own thread."""

    name: str
    period_s: float

    def open(self, emit: Emit) -> None: ...

    def sample(self) -> list[Record]: ...

    def close(self) -> None: ...


def event(kind: str, src: str = "telemetry", t_ns: int | None = None, **fields: Any) -> Record:
    return {"t_ns": time.time_ns() if t_ns is None else t_ns, "src": src, "kind": kind, **fields}


GPU_FIELDS = (
    "power_w",
    "power_kind",
    "power_avg_w",
    "energy_mj",
    "power_limit_w",
    "util_gpu",
    "util_mem",
    "mem_used_b",
    "mem_total_b",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "clock_reasons",
    "temp_c",
)


def gpu_sample(t_ns: int, source: str, gpu: int, uuid: str | None = None) -> Record:
    rec: Record = {"t_ns": t_ns, "src": "gpu", "source": source, "gpu": gpu, "uuid": uuid}
    for name in GPU_FIELDS:
        rec[name] = None
    return rec
