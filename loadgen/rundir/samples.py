"""The telemetry samples of ``samples.jsonl``: one typed record per source, written and read here.

A line is one JSON object; ``src`` says which kind it is (``None`` where a source cannot say)::

    GPU     {"t_ns", "src": "gpu", "source": "nvml"|"smi"|"dcgm", "gpu": 0, "uuid",
             "power_w",        instantaneous power where the source has it, else the averaged reading
             "power_kind",     "instant" | "average": which one power_w is
             "power_avg_w",    the driver's averaged reading (1 s window on Ampere and newer)
             "energy_mj",      cumulative energy counter (mJ since driver load; differences only)
             "power_limit_w", "util_gpu", "util_mem" (percent), "mem_used_b", "mem_total_b",
             "sm_clock_mhz", "mem_clock_mhz", "clock_reasons" (NVML clock-event bitmask), "temp_c"}
    server  {"t_ns", "src": "server", "engine": "sglang"|"vllm"|"custom",
             "running", "queued", "kv_usage" (0-1), "kv_capacity_tokens", "kv_block_tokens",
             "preemptions_total" (vLLM preemptions or SGLang retractions, a counter), "prefix_hit"
             (0-1 gauge, SGLang), "prefix_hits_total", "prefix_queries_total", "spec_accept_len"
             (gauge), "spec_accept_rate", "spec_drafts_total", "spec_draft_tokens_total",
             "spec_accepted_total", "prompt_tokens_total", "gen_tokens_total", "requests_total",
             "aborted_total"; read from a log line instead of /metrics: "source": "log", and
             SGLang's "kv_tokens" and "gen_throughput"}

``t_ns`` is wall-clock epoch nanoseconds (for NVML, the midpoint of that GPU's reads). Counters
(``*_total``, ``energy_mj``) are cumulative: consumers take differences. A GPU sample carries every
GPU field (``None`` for what its source did not read); a server sample carries the fields its
engine has. ``--metrics-map`` names only server fields (``SERVER_FIELDS``), so nothing else lands
in a server sample.

The writers (the telemetry samplers) build them with :func:`gpu_sample` and :class:`ServerSample`;
every reader (the analysis, the report's plots, the twin, the live page) takes lines through
:func:`sample_of`, which keeps only lines that are one of the two kinds with a whole ``t_ns``, and
gives a GPU sample every GPU field, so the types hold for what was read back from a file too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, TypedDict, TypeGuard

PowerKind = Literal["instant", "average"]


class GpuSample(TypedDict):
    t_ns: int
    src: Literal["gpu"]
    source: str
    gpu: int
    uuid: str | None
    power_w: float | None
    power_kind: PowerKind | None
    power_avg_w: float | None
    energy_mj: float | None
    power_limit_w: float | None
    util_gpu: float | None
    util_mem: float | None
    mem_used_b: float | None
    mem_total_b: float | None
    sm_clock_mhz: float | None
    mem_clock_mhz: float | None
    clock_reasons: int | None
    temp_c: float | None


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


class _ServerKind(TypedDict):
    t_ns: int
    src: Literal["server"]


class ServerSample(_ServerKind, total=False):
    """A server sample: the kind and time always, the fields its engine has."""

    engine: str
    source: Literal["log"]
    running: float | None
    queued: float | None
    kv_usage: float | None
    kv_capacity_tokens: float | None
    kv_block_tokens: int | None
    kv_tokens: float | None
    gen_throughput: float | None
    preemptions_total: float | None
    prefix_hit: float | None
    prefix_hits_total: float | None
    prefix_queries_total: float | None
    spec_accept_len: float | None
    spec_accept_rate: float | None
    spec_drafts_total: float | None
    spec_draft_tokens_total: float | None
    spec_accepted_total: float | None
    prompt_tokens_total: float | None
    gen_tokens_total: float | None
    requests_total: float | None
    aborted_total: float | None


# the numeric fields a server sample may carry: what --metrics-map may name
SERVER_FIELDS = tuple(k for k in ServerSample.__annotations__ if k not in ("t_ns", "src", "engine", "source"))

Sample = GpuSample | ServerSample


def gpu_sample(t_ns: int, source: str, gpu: int, uuid: str | None = None) -> GpuSample:
    """A GPU sample with every reading ``None``, for a source to fill in."""
    return {
        "t_ns": t_ns,
        "src": "gpu",
        "source": source,
        "gpu": gpu,
        "uuid": uuid,
        "power_w": None,
        "power_kind": None,
        "power_avg_w": None,
        "energy_mj": None,
        "power_limit_w": None,
        "util_gpu": None,
        "util_mem": None,
        "mem_used_b": None,
        "mem_total_b": None,
        "sm_clock_mhz": None,
        "mem_clock_mhz": None,
        "clock_reasons": None,
        "temp_c": None,
    }


def _whole(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _as_int(v: object) -> int | None:
    if _whole(v):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            return None
    return None


def sample_of(line: object) -> Sample | None:
    """One parsed line of samples.jsonl as a typed sample, or None when it is neither kind or has no
    time (a line from a newer writer, a hand edit): those are left out by every reader alike. A
    GPU sample without a ``gpu`` index is GPU 0 and one without ``source`` has ``""``, as the readers
    always took them; the readings are as written (``None`` where missing)."""
    if not isinstance(line, dict) or "t_ns" not in line:
        return None
    src = line.get("src")
    if src not in ("gpu", "server"):
        return None
    t_ns = _as_int(line["t_ns"])
    if t_ns is None:
        return None
    line["t_ns"] = t_ns
    if src == "server":
        return line  # type: ignore[return-value]  # the kind and the time checked; the rest as written
    line["gpu"] = _as_int(line.get("gpu", 0)) or 0
    if not isinstance(line.get("source"), str):
        line["source"] = ""
    for name in ("uuid", *GPU_FIELDS):
        line.setdefault(name, None)
    return line  # type: ignore[return-value]


def samples_of(lines: Iterable[object]) -> list[Sample]:
    """The typed samples among parsed lines, in their order."""
    return [s for line in lines if (s := sample_of(line)) is not None]


def gpu_samples(samples: Iterable[Sample]) -> list[GpuSample]:
    return [s for s in samples if s["src"] == "gpu"]


def server_samples(samples: Iterable[Sample]) -> list[ServerSample]:
    return [s for s in samples if s["src"] == "server"]
