"""The "load generator bound" verdict from the client's own CPU and loop-lag samples."""

from __future__ import annotations

from pathlib import Path

import orjson

from loadgen.analysis.client_load import client_load_enricher
from loadgen.analysis.load import load_run
from loadgen.analysis.synthetic import at_ms, step_lines, write_run_dir


def _run(tmp_path: Path, samples: list[tuple[float, float, float]]) -> dict:
    run_dir = write_run_dir(tmp_path / "run", steps=step_lines(0, 0, 1000, 11000, concurrency=4))
    lines = [
        {"t_ns": at_ms(t), "src": "client", "worker": "w0", "cpu_frac": cpu, "loop_lag_ms": lag}
        for t, cpu, lag in samples
    ]
    (run_dir / "client-w0.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    step = {"steady_ns": at_ms(1000), "end_ns": at_ms(11000), "valid": True, "invalid_reason": None}
    client_load_enricher(load_run(run_dir), [step])
    return step


def test_one_late_wakeup_does_not_flag_a_step(tmp_path: Path) -> None:
    samples = [(1000 + 250 * i, 0.3, 0.5) for i in range(40)]
    samples[7] = (samples[7][0], 0.3, 80.0)  # one 80 ms hiccup
    step = _run(tmp_path, samples)
    assert step["client_bound"] is False and step["valid"] is True
    assert step["loop_lag_ms"]["max"] == 80.0


def test_a_saturated_client_flags_the_step_and_says_what_to_do(tmp_path: Path) -> None:
    step = _run(tmp_path, [(1000 + 250 * i, 0.97, 35.0) for i in range(40)])
    assert step["client_bound"] is True and step["valid"] is False
    assert "load generator bound" in step["invalid_reason"] and "--workers" in step["invalid_reason"]
    assert "CPU 97%" in step["invalid_reason"] and "lag p90 35 ms" in step["invalid_reason"]


def test_samples_outside_the_window_are_ignored(tmp_path: Path) -> None:
    step = _run(tmp_path, [(500, 1.0, 500.0)] + [(1000 + 250 * i, 0.2, 1.0) for i in range(40)])
    assert step["client_cpu"]["mean"] < 0.25 and step["client_bound"] is False


def test_open_loop_step_behind_its_schedule_is_flagged(tmp_path: Path) -> None:
    run_dir = write_run_dir(tmp_path / "run", steps=step_lines(0, 0, 1000, 11000, rate=50.0))
    late = {"rate": 50.0, "schedule_lag_ms": {"mean": 42.0, "max": 300.0}, "valid": True, "invalid_reason": None}
    on_time = {"rate": 50.0, "schedule_lag_ms": {"mean": 0.8, "max": 6.0}, "valid": True, "invalid_reason": None}
    closed = {"rate": None, "schedule_lag_ms": {"mean": 42.0, "max": 300.0}, "valid": True, "invalid_reason": None}
    client_load_enricher(load_run(run_dir), [late, on_time, closed])
    assert late["valid"] is False and "lagging" in late["invalid_reason"] and "42 ms" in late["invalid_reason"]
    assert on_time["valid"] is True and closed["valid"] is True
