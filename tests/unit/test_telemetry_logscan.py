"""The server log scanner: known failure lines match with the right pattern; near-misses do not."""

from __future__ import annotations

import pytest

from loadgen.telemetry.logscan import LogScanner

MATCHES = [
    (
        "[2026-11-29 10:01:02 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, "
        "#new_token_ratio: 0.4567 -> 0.7000",
        "sglang_kv_full",
        "warning",
    ),
    (
        "[2026-11-29 10:01:02 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
        "#new_tokens_gained: 812, #new_token_ratio: 0.5 -> 0.6",
        "sglang_kv_full",
        "warning",
    ),
    (
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
        "mem_fraction_static=0.88",
        "sglang_not_enough_memory",
        "fatal",
    ),
    ("Exception: Capture cuda graph failed: CUDA error: out of memory", "cuda_graph_capture_failed", "fatal"),
    ("[2026-11-29 10:00:00] Scheduler hit an exception: Traceback (most recent call last):", "sglang_fatal", "fatal"),
    ("The server is fired up and ready to roll!", "sglang_ready", "info"),
    ("[2026-11-29 10:00:00] The request queue is full.", "sglang_queue_full", "warning"),
    (
        "max_total_num_tokens=665690, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=4096, "
        "context_len=65536, available_gpu_mem=13.50 GB",
        "sglang_capacity",
        "info",
    ),
    (
        "ValueError: No available memory for the cache blocks. Try increasing gpu_memory_utilization when "
        "initializing the engine.",
        "vllm_no_kv_blocks",
        "fatal",
    ),
    (
        "ValueError: To serve at least one request with the model's max seq len (131072), (16.00 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (9.31 GiB). Based on the available memory, the "
        "estimated maximum model length is 76240.",
        "vllm_kv_too_small",
        "fatal",
    ),
    (
        "ValueError: To serve at least one request with the models's max seq len (8192), (1.00 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (0.50 GiB).",
        "vllm_kv_too_small",
        "fatal",
    ),
    (
        "ValueError: Free memory on device (10.2/79.1 GiB) on startup is less than desired GPU memory utilization "
        "(0.9, 71.2 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
        "vllm_free_memory",
        "fatal",
    ),
    ("RuntimeError: Engine core initialization failed. See root cause above.", "vllm_engine_init_failed", "fatal"),
    (
        "WARNING 11-29 10:00:00 scheduler.py:1560] Sequence group 42 is preempted by PreemptionMode.RECOMPUTE mode "
        "because there is not enough KV cache space.",
        "vllm_preempted",
        "warning",
    ),
    (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "139.81 GiB",
        "cuda_oom",
        "fatal",
    ),
    ("RuntimeError: CUDA error: out of memory", "cuda_oom", "fatal"),
    ("Traceback (most recent call last):", "traceback", "error"),
    ("[rank0]: Traceback (most recent call last):", "traceback", "error"),
    ("INFO 11-29 10:00:00 kv_cache_utils.py:716] GPU KV cache size: 34,952 tokens", "vllm_kv_size", "info"),
]

NEAR_MISSES = [
    "Capture cuda graph begin. This can take up to several minutes. avail mem=20.1 GB",
    "Capture cuda graph end. Time elapsed: 12.3 s. mem usage=1.2 GB. avail mem=18.9 GB.",
    "KV cache pool is full",  # without the retraction sentence
    "The KV cache pool is fully allocated at startup",
    "INFO: Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 500.0 tokens/s, Running: 8 reqs, "
    "Waiting: 0 reqs, GPU KV cache usage: 97.0%, Prefix cache hit rate: 0.0%",
    "Not enough memory for logging buffers, continuing",
    "hint: to avoid out-of-memory errors lower --max-running-requests",
    "Sequence group 42 was finished",
    "See the Traceback section of the docs",
    "The server is starting",
    "request queue length: 5",
    "engine core initialization succeeded",
    "free memory on device is fine",
]


@pytest.mark.parametrize(("line", "pattern", "severity"), MATCHES)
def test_known_failure_lines_match(line: str, pattern: str, severity: str) -> None:
    events, _ = LogScanner().scan(line + "\n", 123)
    names = [e["pattern"] for e in events]
    assert pattern in names
    ev = next(e for e in events if e["pattern"] == pattern)
    assert ev == {**ev, "t_ns": 123, "src": "log", "kind": "log_match", "severity": severity, "line": line}


def test_groups_carry_the_numbers() -> None:
    events, _ = LogScanner().scan(MATCHES[0][0], 1)
    assert events[0]["groups"] == ["3", None, "0.4567", "0.7000"]


@pytest.mark.parametrize("line", NEAR_MISSES)
def test_near_misses_do_not_match(line: str) -> None:
    events, _ = LogScanner().scan(line, 1)
    assert events == []


def test_statistics_lines_become_server_samples() -> None:
    scanner = LogScanner()
    _, (dec,) = scanner.scan(
        "[2026-11-29 10:00:00 TP0] Decode batch, #running-req: 57, #token: 620000, token usage: 0.93, "
        "accept len: 3.41, accept rate: 0.80, cuda graph: True, gen throughput (token/s): 4723.20, #queue-req: 12,",
        5,
    )
    assert dec == {
        "t_ns": 5,
        "src": "server",
        "source": "log",
        "engine": "sglang",
        "running": 57,
        "kv_tokens": 620000,
        "kv_usage": 0.93,
        "gen_throughput": 4723.2,
        "queued": 12,
        "spec_accept_len": 3.41,
    }
    _, (old,) = scanner.scan(
        "Decode batch. #running-req: 2, #token: 100, token usage: 0.01, gen throughput (token/s): 132.70, "
        "#queue-req: 0,",
        6,
    )
    assert old["running"] == 2 and "spec_accept_len" not in old
    _, (vl,) = scanner.scan(NEAR_MISSES[4], 7)
    assert (vl["running"], vl["queued"], vl["kv_usage"], vl["prefix_hit"]) == (8, 0, 0.97, 0.0)
    _, (spec,) = scanner.scan("SpecDecoding metrics: Mean acceptance length: 2.75, Accepted throughput: 1.0", 8)
    assert spec["spec_accept_len"] == 2.75
