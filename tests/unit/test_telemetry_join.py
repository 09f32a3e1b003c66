"""The per-step join on synthetic telemetry whose answers are known by construction."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.analysis.telemetry import step_telemetry

BASE = 1_800_000_000_000_000_000
S = 1_000_000_000


def t(sec: float) -> int:
    return BASE + round(sec * S)


def gpu_power(sec: float, gpu: int) -> float:
    base = 200.0 if sec < 10 else 500.0 if sec < 20 else 100.0
    return base + 10 * gpu


def gpu_energy_mj(sec: float, gpu: int) -> int:
    e = 0.0
    for a, b, p in ((0, 10, 200.0), (10, 20, 500.0), (20, 1e9, 100.0)):
        if sec > a:
            e += (p + 10 * gpu) * (min(sec, b) - a)
    return 5_000_000 + round(e * 1000)


def make_samples(skip: tuple[float, float] | None = None, energy: bool = True) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for k in range(0, 301):
        sec = k / 10
        if skip and skip[0] < sec < skip[1]:
            continue
        for gpu in (0, 1):
            out.append(
                {
                    "t_ns": t(sec),
                    "src": "gpu",
                    "source": "nvml",
                    "gpu": gpu,
                    "power_w": gpu_power(sec, gpu),
                    "power_kind": "instant",
                    "energy_mj": gpu_energy_mj(sec, gpu) if energy or gpu == 0 else None,
                    "power_limit_w": 700.0,
                    "util_gpu": 100 if sec < 20 else 0,
                    "util_mem": 40,
                    "sm_clock_mhz": 1980 if sec < 20 else 345,
                    "mem_clock_mhz": 3201,
                    "clock_reasons": 0x4 if 10 <= sec < 20 and k % 2 == 0 else (0x1 if sec >= 20 else 0),
                }
            )
    for k in range(0, 31):
        sec = float(k)
        out.append(
            {
                "t_ns": t(sec),
                "src": "server",
                "engine": "vllm",
                "running": 8 if sec < 10 else 64 if sec < 20 else 0,
                "queued": 0 if sec < 10 else (k - 10) if sec < 20 else 0,
                "kv_usage": 0.2 if sec < 10 else 0.95 if sec < 20 else 0.0,
                "preemptions_total": 0 if sec < 10 else min(k - 9, 5) if sec < 20 else 5,
                "spec_drafts_total": 100 * k,
                "spec_accepted_total": 150 * min(k, 10) + 250 * max(0, min(k, 20) - 10),
            }
        )
    return out


WINDOWS = [(t(0), t(10)), (t(10), t(20)), (t(20), t(30))]
EVENTS = [
    {"t_ns": t(12.5), "src": "log", "kind": "log_match", "pattern": "vllm_preempted", "line": "x"},
    {"t_ns": t(13.5), "src": "log", "kind": "log_match", "pattern": "vllm_preempted", "line": "x"},
    {"t_ns": t(14.0), "src": "log", "kind": "log_match", "pattern": "cuda_oom", "line": "x"},
    {"t_ns": t(25.0), "src": "telemetry", "kind": "sampler_error", "sampler": "server_metrics", "message": "m"},
]


def test_power_energy_and_validity_per_step() -> None:
    rows = step_telemetry(make_samples(), EVENTS, WINDOWS, [40, 90, 0], output_tokens_per_step=[8000, 30000, 0])
    r0, r1, r2 = rows
    assert r0["gpu_power_w"] == pytest.approx({"mean": 410.0, "p95": 410.0, "max": 410.0})
    assert r1["gpu_power_w"]["mean"] == pytest.approx(1010.0)
    assert r0["energy_j"] == pytest.approx(4100.0, abs=0.01) and r0["energy_method"] == "counter"
    assert r1["energy_j"] == pytest.approx(10100.0, abs=0.01)
    assert r0["gpu_power_frac_of_limit"] == pytest.approx(410 / 1400)
    assert r1["gpu_power_frac_of_limit"] == pytest.approx(1010 / 1400)
    assert r0["tokens_per_joule"] == pytest.approx(8000 / 4100)
    assert [g["energy_j"] for g in r1["gpus"]] == pytest.approx([5000.0, 5100.0])
    assert r0["power_valid"] and r1["power_valid"]
    assert r0["power_invalid_reason"] is None
    # the idle step keeps its numbers for reference but is not valid load power
    assert r2["power_valid"] is False and r2["power_invalid_reason"] == "idle: no request served"
    assert r2["gpu_power_w"]["mean"] == pytest.approx(210.0)
    assert r2["tokens_per_joule"] is None
    # busy at 29 % of the limit is memory-bound; busy at 72 % is not; idle is not judged
    assert (r0["memory_bound"], r1["memory_bound"], r2["memory_bound"]) == (True, False, None)
    assert r1["util_gpu"]["mean"] == pytest.approx(100.0) and r2["util_gpu"]["mean"] == pytest.approx(0.0)
    assert r1["sm_clock_mhz"] == {"mean": pytest.approx(1980.0), "min": 1980.0}
    assert r1["clock_reasons"]["sw_power_cap"] == pytest.approx(0.5, abs=0.05)
    assert r2["clock_reasons"] == {"gpu_idle": pytest.approx(1.0, abs=0.05)}
    assert all(r["telemetry_gaps"] == [] for r in rows)


def test_server_gauges_counters_and_events_per_step() -> None:
    r0, r1, r2 = step_telemetry(make_samples(), EVENTS, WINDOWS, [40, 90, 0])
    assert r0["engine"] == "vllm"
    assert r0["running"] == {"mean": pytest.approx(8.0), "max": 8.0}
    assert r1["kv_usage"]["max"] == 0.95 and r1["kv_usage"]["mean"] == pytest.approx(0.95, abs=1e-6)
    assert r1["queue_len"]["max"] == 9.0
    # the first preemption is counted by the sample taken at 10 s: it happened in step 0
    assert (r0["preemptions"], r1["preemptions"], r2["preemptions"]) == (1.0, 4.0, 0.0)
    # accepted +150/s for 100 drafts/s in step 0 and +250/s in step 1
    assert r0["spec_accept_len"] == pytest.approx(2.5)
    assert r1["spec_accept_len"] == pytest.approx(3.5)
    assert r1["log_events"] == {"vllm_preempted": 2, "cuda_oom": 1}
    assert r0["log_events"] == {} and r2["telemetry_events"] == {"sampler_error": 1}


def test_a_telemetry_gap_is_flagged_and_invalidates_power() -> None:
    rows = step_telemetry(make_samples(skip=(12.0, 16.5)), [], WINDOWS, [40, 90, 10])
    r0, r1, r2 = rows
    assert [(g["src"], g["start_ns"], g["end_ns"]) for g in r1["telemetry_gaps"]] == [("gpu", t(12.0), t(16.5))]
    assert r1["power_valid"] is False
    assert r1["power_invalid_reason"] == "telemetry gap: 4.5 s of 10.0 s without GPU samples"
    assert r0["power_valid"] and r2["power_valid"]
    # the counter still gives the energy across the gap
    assert r1["energy_j"] == pytest.approx(10100.0, abs=0.01)


def test_a_short_gap_is_flagged_but_power_stays_valid() -> None:
    (r0, *_) = step_telemetry(make_samples(skip=(3.0, 5.0)), [], WINDOWS, [40, 90, 10])
    assert len(r0["telemetry_gaps"]) == 1 and r0["telemetry_gaps"][0]["s"] == pytest.approx(2.0)
    assert r0["power_valid"] is True


def test_without_a_counter_energy_is_the_power_integral_and_the_method_is_named() -> None:
    r0, r1, _ = step_telemetry(make_samples(energy=False), [], WINDOWS, [1, 1, 1])
    assert r0["energy_method"] == "mixed"
    assert r0["energy_j"] == pytest.approx(4100.0, abs=0.01)
    assert r1["energy_j"] == pytest.approx(10100.0, abs=0.01)
    assert [g["energy_j"] for g in r1["gpus"]] == pytest.approx([5000.0, 5100.0])


def test_counter_reset_and_no_telemetry() -> None:
    samples = [{"t_ns": t(x), "src": "server", "preemptions_total": v} for x, v in ((0, 10), (1, 12), (2, 0), (3, 3))]
    (row,) = step_telemetry(samples, [], [(t(0.5), t(3.5))], [3])
    assert row["preemptions"] == 5.0  # +2, then a restart counted 3
    assert row["power_valid"] is False and row["power_invalid_reason"] == "no GPU telemetry"
    assert row["gpu_power_w"] is None and row["energy_j"] is None and row["memory_bound"] is None
    with pytest.raises(ValueError, match="1 windows but 2"):
        step_telemetry(samples, [], [(t(0), t(1))], [1, 2])


def test_the_summary_enricher_adds_the_keys_to_step_rows() -> None:
    from types import SimpleNamespace

    from loadgen.analysis.telemetry import telemetry_enricher

    run = SimpleNamespace(samples=make_samples(), events=EVENTS)
    steps = [
        {
            "step": 0,
            "steady_ns": t(0),
            "end_ns": t(10),
            "requests_ok": 40,
            "output_tokens_in_window": 4100.0,
            "window_s": 10.0,
            "valid": True,
        },
        {
            "step": 1,
            "steady_ns": t(20),
            "end_ns": t(30),
            "requests_ok": 0,
            "output_tokens_in_window": 0.0,
            "window_s": 10.0,
            "valid": False,
        },
    ]
    telemetry_enricher(run, steps)
    assert steps[0]["tokens_per_joule"] == pytest.approx(1.0)
    assert steps[0]["power_valid"] and steps[0]["valid"] is True and steps[0]["step"] == 0
    assert steps[1]["power_invalid_reason"] == "idle: no request served"
    assert steps[1]["gpu_power_w"]["mean"] == pytest.approx(210.0)
