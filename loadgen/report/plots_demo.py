"""A synthetic run with every signal the HTML report can show, for tests and design previews.

``write_demo_run(run_dir)`` writes ``manifest.json``, ``samples.jsonl`` and ``events.jsonl`` and
returns the matching ``RunSummary``: a closed-loop ramp C = 1, 2, 4, ... 256 whose throughput
follows the USL (lambda 60 tok/s, sigma 0.02, kappa 1e-4: peak near C = 99), latencies that grow
with load, an SLO, a knee verdict, the Pareto points and a capacity plan from the real analysis code, 8 GPUs sampled
at ``gpu_hz`` with power that follows load, server KV fill and queue at 1 Hz, server log matches,
and a last step where the server is down (INVALID, every request refused, power invalid).
Server-provided texts (an error message, a log line, the label) carry markup on purpose, so a test
can check that it shows as text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from loadgen.analysis.contracts import LatencyStats, RunSummary, StepSummary
from loadgen.analysis.knee import knee_verdict
from loadgen.analysis.pareto import pareto_summary
from loadgen.analysis.plan import capacity_plan
from loadgen.analysis.steps import DEFAULT_MIN_OK_REQUESTS, PERCENTILE_METHOD
from loadgen.rundir.samples import Sample, gpu_sample

T0_NS = 1_700_000_000_000_000_000
STEP_S = 20.0
WARMUP_S = 5.0
LOADS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
LAMBDA, SIGMA, KAPPA = 60.0, 0.02, 1e-4
GPUS = 8
POWER_LIMIT_W = 1100.0
MARKUP_ERROR = 'upstream said <b class="pwn">boom</b> & <script>alert("x")</script>'
MARKUP_LOG = "KV cache full <img src=x onerror=alert(1)> evicting 12 requests"
SLO = {"ttft_p99_ms": 2000.0, "tpot_p99_ms": 50.0}


def usl(n: float) -> float:
    return LAMBDA * n / (1 + SIGMA * (n - 1) + KAPPA * n * (n - 1))


def _dist(p50: float, spread: float) -> LatencyStats:
    return {"mean": p50 * 1.05, "p50": p50, "p90": p50 * (1 + spread * 0.6), "p99": p50 * (1 + spread)}


def _no_latency() -> LatencyStats:
    return {"mean": None, "p50": None, "p90": None, "p99": None}


def _steps(rng: np.random.Generator, telemetry: bool) -> list[StepSummary]:
    steps: list[StepSummary] = []
    for i, c in enumerate(LOADS):
        start = T0_NS + int(i * STEP_S * 1e9)
        down = c == LOADS[-1]
        x = usl(c) * (1 + rng.normal(0, 0.015))
        per_req = x / c
        tpot = 1000.0 / per_req / 1.0
        ttft = 45.0 * (1 + (c / 40.0) ** 2)
        e2e = ttft + tpot * 256
        ok = 0 if down else max(6, int(STEP_S - WARMUP_S) * int(x / 256 + 1))
        step: StepSummary = {
            "step": i,
            "concurrency": c,
            "context_tokens": None,
            "rate": None,
            "start_ns": start,
            "steady_ns": start + int(WARMUP_S * 1e9),
            "end_ns": start + int(STEP_S * 1e9),
            "end_reason": "duration",
            "wall_s": STEP_S,
            "window_s": STEP_S - WARMUP_S,
            "output_tok_s": None if down else x,
            "per_request_tok_s": None if down else per_req,
            "requests_ok": ok,
            "requests_failed": 340 if down else 0,
            "requests_cancelled": 0,
            "requests_warmup": 0 if down else int(WARMUP_S * x / 256),
            "errors": {"connection_refused": 340} if down else {},
            "ttft_ms": _no_latency() if down else _dist(ttft, 0.8),
            "itl_ms": _no_latency() if down else _dist(tpot * 0.9, 1.5),
            "tpot_ms": _no_latency() if down else _dist(tpot, 0.5),
            "e2e_ms": _no_latency() if down else _dist(e2e, 0.6),
            "tokens_per_chunk_mean": None if down else 1.0,
            "prompt_tokens_mean": None if down else 512.0,
            "prompt_tokens_requested_mean": None if down else 512.0,
            "prefix_cached_frac": None,
            "output_tokens_total": ok * 256,
            "output_tokens_mean": None if down else 256.0,
            "output_tokens_in_window": 0.0 if down else x * (STEP_S - WARMUP_S),
            "output_tokens_source": {} if down else {"usage": ok},
            "timing": {
                "tolerance_ms": 1.0,
                "ttft_late_share": None if down else 0.0,
                "itl_late_share": None if down else 0.0,
                "ttft_late_max_ms": None if down else 0.0,
                "read_clock_requests": 0,
                "users_late_share": 0.0,
                "users_late_max_ms": 0.0,
                "uncertain": False,
                "reason": None,
            },
            "schedule_lag_ms": {"mean": 0.2, "max": 2.5},
            "valid": not down,
            "invalid_reason": "server served nothing" if down else None,
        }
        if telemetry:
            util = min(1.0, x / usl(99))
            power = GPUS * (140 + 700 * util)
            step.update(
                {
                    "gpu_count": GPUS,
                    "gpu_power_w": {"mean": power, "p95": power * 1.04, "max": power * 1.08},
                    "gpu_power_frac_of_limit": power / (GPUS * POWER_LIMIT_W),
                    "energy_j": power * (STEP_S - WARMUP_S),
                    "tokens_per_joule": None if down else x / power,
                    "power_valid": not down,
                    "power_invalid_reason": "idle: no request served" if down else None,
                    "kv_usage": {"mean": min(0.99, c / 140), "max": min(1.0, c / 130)},
                    "queue_len": {"mean": max(0.0, c - 110.0), "max": max(0.0, c - 100.0)},
                    "preemptions": 7 if c == 128 else 0,
                    "spec_accept_len": 2.4,
                    "log_events": {"kv_cache_full": 3} if c == 128 else {},
                }
            )
        steps.append(step)
    return steps


def _samples(steps: list[StepSummary], rng: np.random.Generator, gpu_hz: float) -> list[Sample]:
    out: list[Sample] = []
    dt = int(1e9 / gpu_hz)
    for s, c in zip(steps, LOADS, strict=True):
        down = not s["valid"]
        util = 0.0 if down else min(1.0, usl(c) / usl(99))
        for t in range(s["start_ns"], s["end_ns"], dt):
            ramp = min(1.0, (t - s["start_ns"]) / 2e9)
            for g in range(GPUS):
                w = 120 + (700 * util * ramp + 20 * (util > 0)) * (1 + 0.03 * g) + rng.normal(0, 12)
                rec = gpu_sample(t + g * 1000, "nvml", g)
                rec["power_w"], rec["power_limit_w"], rec["util_gpu"] = round(w, 1), POWER_LIMIT_W, round(util * 100)
                out.append(rec)
        for t in range(s["start_ns"], s["end_ns"], int(1e9)):
            if down:
                continue  # the server is down: no /metrics scrape succeeds
            kv = min(1.0, c / 130 * min(1.0, (t - s["start_ns"]) / 4e9)) + rng.normal(0, 0.01)
            out.append(
                {
                    "t_ns": t,
                    "src": "server",
                    "engine": "sglang",
                    "running": min(c, 110),
                    "queued": max(0, c - 110 + int(rng.integers(-3, 4))),
                    "kv_usage": round(min(max(kv, 0.0), 1.0), 3),
                }
            )
    return out


def _events(steps: list[StepSummary]) -> list[dict[str, Any]]:
    s128 = next(s for s in steps if s["concurrency"] == 128)
    down = steps[-1]
    ev: list[dict[str, Any]] = [
        {
            "t_ns": s128["start_ns"] + int(k * 4e9 + 6e9),
            "src": "log",
            "kind": "log_match",
            "pattern": "kv_cache_full",
            "severity": "warning",
            "line": MARKUP_LOG,
        }
        for k in range(3)
    ]
    ev.append(
        {
            "t_ns": down["start_ns"] + int(0.5e9),
            "src": "log",
            "kind": "log_match",
            "pattern": "oom",
            "severity": "error",
            "line": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        }
    )
    ev.append(
        {
            "t_ns": down["start_ns"] + int(1e9),
            "src": "telemetry",
            "kind": "source_unavailable",
            "source": "prometheus",
            "error": "connection refused",
        }
    )
    return ev


def write_demo_run(run_dir: Path, *, telemetry: bool = True, knee: bool = True, gpu_hz: float = 2.0) -> RunSummary:
    """Write the demo run's manifest, samples and events into ``run_dir``; return its summary."""
    rng = np.random.default_rng(7)
    run_dir.mkdir(parents=True, exist_ok=True)
    steps = _steps(rng, telemetry)
    manifest: dict[str, Any] = {
        "created_ns": T0_NS,
        "host": {"hostname": "bench-01", "platform": "Linux-6.8-x86_64", "python": "3.11.7", "cpus": 64},
        "versions": {"llm-loadgen": "0.1.0", "locust": "2.47.0", "numpy": "2.4.6"},
        "kind": "ramp",
        "label": "demo <ramp> & co",
        "run_id": "20231114-221320-demo",
        "options": {
            "url": "http://gpu-host:30000",
            "model": "demo/model",
            "concurrency": list(LOADS),
            "step_seconds": STEP_S - WARMUP_S,
            "warmup_seconds": WARMUP_S,
            "argv": ["ramp", "--demo"],
        },
    }
    (run_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    if telemetry:
        samples = _samples(steps, rng, gpu_hz)
        (run_dir / "samples.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in samples))
        (run_dir / "events.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in _events(steps)))
    ok = sum(s["requests_ok"] for s in steps)
    failed = sum(s["requests_failed"] for s in steps)
    valid = [s for s in steps if s["valid"]]
    peak = max(valid, key=lambda s: s["output_tok_s"] or 0.0)
    summary: RunSummary = {
        "schema_version": 1,
        "label": manifest["label"],
        "run_id": manifest["run_id"],
        "url": manifest["options"]["url"],
        "model": manifest["options"]["model"],
        "transport": "fast",
        "created": "2023-11-14T22:13:20Z",
        "request_files": [],
        "percentile_method": PERCENTILE_METHOD,
        "min_ok_requests": DEFAULT_MIN_OK_REQUESTS,
        "steps": steps,
        "slo": dict(SLO),
        "totals": {
            "records": ok + failed,
            "requests_ok": ok,
            "requests_failed": failed,
            "errors": {"connection_refused": failed},
            "error_samples": {"connection_refused": MARKUP_ERROR},
            "output_tokens_total": sum(s["output_tokens_total"] for s in steps),
            "steps": len(steps),
            "valid_steps": len(valid),
            "peak_output_tok_s": peak["output_tok_s"],
            "peak_step": peak["step"],
            "peak_concurrency": peak["concurrency"],
            "duration_s": len(steps) * STEP_S,
            "skipped_lines": 0,
            "empty": False,
        },
    }
    summary["pareto"] = pareto_summary(steps)
    if knee:
        summary["knee"] = knee_verdict(steps, SLO)
        summary["plan"] = capacity_plan(steps, SLO, target_rps=40.0, gpu_hour_cost=2.5)
    return summary


__all__ = ["MARKUP_ERROR", "MARKUP_LOG", "SLO", "write_demo_run"]
