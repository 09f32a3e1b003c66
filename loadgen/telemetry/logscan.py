"""Server log lines -> events (failure signatures) and, when metrics are off, server samples.

The patterns are the stable parts of the messages SGLang, vLLM and PyTorch print (research notes,
section 3.4). They are case-sensitive and anchored on whole phrases so that near-misses (the
``Capture cuda graph begin`` progress line, ``GPU KV cache usage: 97%`` statistics, a ``Traceback``
mentioned mid-sentence) do not match. Each match becomes one event with the whole line::

    {"t_ns", "src": "log", "kind": "log_match", "pattern": "sglang_kv_full", "severity": "warning",
     "line": "...", "groups": [...]}

Severity: "fatal" (the server will not come up or has died), "error", "warning" (pressure:
retraction, preemption, queue full) and "info" (readiness, capacity lines).
Statistics lines (SGLang ``Decode batch``/``Prefill batch``, vLLM ``Avg prompt throughput``,
``SpecDecoding metrics``) become server samples with ``"source": "log"``.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from loadgen.rundir.samples import ServerSample
from loadgen.telemetry.base import Event


@dataclass(frozen=True)
class LogPattern:
    name: str
    severity: str
    regex: re.Pattern[str]


def _p(name: str, severity: str, pattern: str) -> LogPattern:
    return LogPattern(name, severity, re.compile(pattern))


PATTERNS: tuple[LogPattern, ...] = (
    # SGLang runtime
    _p(
        "sglang_kv_full",
        "warning",
        r"KV cache pool is full\. Retract requests\. #retracted_reqs: (\d+)(?:, #new_tokens_gained: (\d+))?, "
        r"#new_token_ratio: ([\d.]+) -> ([\d.]+)",
    ),
    _p("sglang_queue_full", "warning", r"The request queue is full\."),
    _p("sglang_wait_timeout", "warning", r"Request waiting timeout reached\."),
    # SGLang startup / fatal
    _p("sglang_not_enough_memory", "fatal", r"Not enough memory\. Please try to increase --mem-fraction-static"),
    _p("cuda_graph_capture_failed", "fatal", r"Capture cuda graph failed"),
    _p("sglang_fatal", "fatal", r"(Scheduler|TokenizerManager) hit an exception|Watchdog timeout|SIGQUIT received"),
    _p("sglang_ready", "info", r"The server is fired up and ready to roll"),
    _p(
        "sglang_capacity",
        "info",
        r"max_total_num_tokens=(\d+), chunked_prefill_size=(-?\d+), max_prefill_tokens=(\d+), "
        r"max_running_requests=(\d+), context_len=(\d+), available_gpu_mem=([\d.]+) GB",
    ),
    # vLLM
    _p("vllm_no_kv_blocks", "fatal", r"No available memory for the cache blocks"),
    _p(
        "vllm_kv_too_small",
        "fatal",
        r"To serve at least one request with the models?'s? max seq len \((\d+)\), \(?([\d.]+) GiB KV cache "
        r"is needed, which is larger than the available KV cache memory \(([\d.]+) GiB\)",
    ),
    _p("vllm_free_memory", "fatal", r"Free memory on device.*on startup is less than desired GPU memory utilization"),
    _p("vllm_engine_init_failed", "fatal", r"Engine core initialization failed"),
    _p("vllm_preempted", "warning", r"Sequence group (\S+) is preempted by PreemptionMode\.(RECOMPUTE|SWAP)"),
    _p("vllm_kv_size", "info", r"GPU KV cache size: ([\d,]+) tokens"),
    # any engine
    _p(
        "cuda_oom",
        "fatal",
        r"(torch\.OutOfMemoryError|torch\.cuda\.OutOfMemoryError|CUDA out of memory|CUDA error: out of memory"
        r"|CUDA driver error: out of memory)",
    ),
    _p("traceback", "error", r"(?:^|\]:? ?)Traceback \(most recent call last\):"),
)

_SGL_DECODE = re.compile(
    r"Decode batch(?: \[\d+\])?[.,] #running-req: (\d+), #token: (\d+), token usage: ([\d.]+), "
    r"(?:accept len: ([\d.]+), accept rate: ([\d.]+), )?.*?gen throughput \(token/s\): ([\d.]+), #queue-req: (\d+)"
)
_SGL_PREFILL = re.compile(
    r"Prefill batch(?: \[\d+\])?[.,] #new-seq: (\d+), #new-token: (\d+), #cached-token: (\d+), "
    r".*?#running-req: (\d+), #queue-req: (\d+)"
)
_VLLM_STATS = re.compile(
    r"Avg prompt throughput: ([\d.]+) tokens/s, Avg generation throughput: ([\d.]+) tokens/s, "
    r"Running: (\d+) reqs, Waiting: (\d+) reqs, GPU KV cache usage: ([\d.]+)%, Prefix cache hit rate: ([\d.]+)%"
)
_VLLM_SPEC = re.compile(r"SpecDecoding metrics: Mean acceptance length: ([\d.]+)")

MAX_LINE = 4000
# cheap pre-filter: a line without any of these substrings cannot match a pattern or a stats line
_HINTS = (
    "KV cache",
    "queue is full",
    "timeout",
    "memory",
    "cuda graph",
    "hit an exception",
    "SIGQUIT",
    "fired up",
    "max_total_num_tokens",
    "cache blocks",
    "max seq len",
    "Engine core",
    "preempted",
    "out of memory",
    "OutOfMemoryError",
    "Traceback",
    "batch",
    "throughput",
    "SpecDecoding",
)


class LogScanner:
    """Turns one log line into events and samples; pure (the time comes in)."""

    def __init__(self, patterns: tuple[LogPattern, ...] = PATTERNS, stats: bool = True) -> None:
        self.patterns = patterns
        self.stats = stats

    def scan(self, line: str, t_ns: int | None = None) -> tuple[list[Event], list[ServerSample]]:
        """Return (events, samples) found in ``line``."""
        line = line.rstrip("\r\n")
        if not any(h in line for h in _HINTS):
            return [], []
        t = time.time_ns() if t_ns is None else t_ns
        events: list[Event] = []
        for pat in self.patterns:
            m = pat.regex.search(line)
            if m:
                events.append(
                    {
                        "t_ns": t,
                        "src": "log",
                        "kind": "log_match",
                        "pattern": pat.name,
                        "severity": pat.severity,
                        "line": line[:MAX_LINE],
                        "groups": [g for g in m.groups()],
                    }
                )
        samples: list[ServerSample] = []
        if self.stats:
            try:
                samples = self._stats(line, t)
            except ValueError:  # a stats line whose [\d.]+ slot is no number ("token usage: ."): no sample
                samples = []
        return events, samples

    @staticmethod
    def _stats(line: str, t: int) -> list[ServerSample]:
        m = _SGL_DECODE.search(line)
        if m:
            rec: ServerSample = {
                "t_ns": t,
                "src": "server",
                "source": "log",
                "engine": "sglang",
                "running": int(m[1]),
                "kv_tokens": int(m[2]),
                "kv_usage": float(m[3]),
                "gen_throughput": float(m[6]),
                "queued": int(m[7]),
            }
            if m[4] is not None:
                rec["spec_accept_len"] = float(m[4])
            return [rec]
        m = _SGL_PREFILL.search(line)
        if m:
            return [
                {
                    "t_ns": t,
                    "src": "server",
                    "source": "log",
                    "engine": "sglang",
                    "running": int(m[4]),
                    "queued": int(m[5]),
                }
            ]
        m = _VLLM_STATS.search(line)
        if m:
            return [
                {
                    "t_ns": t,
                    "src": "server",
                    "source": "log",
                    "engine": "vllm",
                    "running": int(m[3]),
                    "queued": int(m[4]),
                    "kv_usage": float(m[5]) / 100.0,
                    "prefix_hit": float(m[6]) / 100.0,
                }
            ]
        m = _VLLM_SPEC.search(line)
        if m:
            return [{"t_ns": t, "src": "server", "source": "log", "engine": "vllm", "spec_accept_len": float(m[1])}]
        return []
