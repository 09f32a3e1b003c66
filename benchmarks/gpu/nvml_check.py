"""NVML check on a machine with an NVIDIA GPU: power, energy counter and clocks while a matmul runs.

Samples one GPU (``--gpu``, default 0) through loadgen's own NVML sampler at 20 Hz over three
phases -- idle, load (back-to-back bf16 matrix multiplies with torch, else cupy), cool-down -- and
prints per phase: samples/s achieved, instantaneous and averaged power (mean/p95/max), energy from
the counter vs the integral of instantaneous power, the shortest interval at which the power
reading changed (the driver's update period), SM clock, utilisation, temperature and clock-event
reasons. Without torch or cupy the load phase is skipped and says so. Finishes in about 75 s.

    python benchmarks/gpu/nvml_check.py [--gpu 0] [--idle 10] [--load 35] [--cool 20] [--out result.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from loadgen.analysis.telemetry import step_telemetry
from loadgen.telemetry.base import SamplerUnavailable
from loadgen.telemetry.nvml import NvmlSampler


def make_load(gpu: int, n: int) -> tuple[str, Callable[[], float] | None]:
    """A function running matmuls for ~0.5 s and returning the TFLOP/s achieved, and its backend."""
    try:
        import torch

        if torch.cuda.is_available():
            dev = torch.device(f"cuda:{gpu}")
            a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
            b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)

            def run_torch() -> float:
                t0 = time.perf_counter()
                k = 0
                while time.perf_counter() - t0 < 0.5:
                    for _ in range(10):
                        torch.matmul(a, b)
                    torch.cuda.synchronize(dev)
                    k += 10
                return 2 * n**3 * k / (time.perf_counter() - t0) / 1e12

            return "torch", run_torch
    except ImportError:
        pass
    try:
        import cupy

        with cupy.cuda.Device(gpu):
            ca = cupy.random.standard_normal((n, n), dtype=cupy.float32)
            cb = cupy.random.standard_normal((n, n), dtype=cupy.float32)

        def run_cupy() -> float:
            with cupy.cuda.Device(gpu):
                t0 = time.perf_counter()
                k = 0
                while time.perf_counter() - t0 < 0.5:
                    for _ in range(4):
                        ca @ cb
                    cupy.cuda.Stream.null.synchronize()
                    k += 4
                return 2 * n**3 * k / (time.perf_counter() - t0) / 1e12

        return "cupy", run_cupy
    except ImportError:
        pass
    return "none (install torch or cupy for the load phase)", None


def _f(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def update_period_ms(t_ns: np.ndarray, p: np.ndarray) -> float | None:
    changes = t_ns[1:][np.diff(p) != 0]
    if len(changes) < 3:
        return None
    return float(np.min(np.diff(changes))) / 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--hz", type=float, default=20.0)
    ap.add_argument("--idle", type=float, default=10.0)
    ap.add_argument("--load", type=float, default=35.0)
    ap.add_argument("--cool", type=float, default=20.0)
    ap.add_argument("--size", type=int, default=8192, help="matrix size")
    ap.add_argument("--out", type=Path, default=None, help="also write the figures as JSON here")
    args = ap.parse_args(argv)

    events: list[dict[str, Any]] = []
    sampler = NvmlSampler(1.0 / args.hz, [args.gpu])
    try:
        sampler.open(events.append)
    except SamplerUnavailable as exc:
        print(f"nvml_check: {exc}")
        return 2
    samples: list[dict[str, Any]] = []
    stop = threading.Event()

    def sample_loop() -> None:
        period = 1.0 / args.hz
        nxt = time.monotonic()
        while not stop.is_set():
            samples.extend(sampler.sample())
            nxt += period
            stop.wait(max(0.0, nxt - time.monotonic()))

    backend, load = make_load(args.gpu, args.size)
    print(f"GPU {args.gpu}: {events[0].get('gpus') if events else '?'}; load backend: {backend}")
    thread = threading.Thread(target=sample_loop, daemon=True)
    thread.start()
    phases: list[tuple[str, int, int]] = []
    tflops: list[float] = []
    t = time.time_ns()
    time.sleep(args.idle)
    phases.append(("idle", t, time.time_ns()))
    if load is not None:
        t = time.time_ns()
        deadline = time.monotonic() + args.load
        while time.monotonic() < deadline:
            tflops.append(load())
        phases.append(("load", t, time.time_ns()))
    t = time.time_ns()
    time.sleep(args.cool)
    phases.append(("cool-down", t, time.time_ns()))
    stop.set()
    thread.join(5)
    sampler.close()

    rows = step_telemetry(samples, events, [(a, b) for _, a, b in phases], [1] * len(phases))
    report: dict[str, Any] = {"gpu": args.gpu, "backend": backend, "hz": args.hz, "phases": {}}
    report["field_not_supported"] = [e["field"] for e in events if e["kind"] == "field_not_supported"]
    for (name, a, b), row in zip(phases, rows, strict=True):
        mine = [s for s in samples if a <= s["t_ns"] < b]
        t_ns = np.array([s["t_ns"] for s in mine], dtype=np.int64)
        inst = np.array([s["power_w"] if s["power_w"] is not None else np.nan for s in mine])
        avg = np.array([s["power_avg_w"] if s["power_avg_w"] is not None else np.nan for s in mine])
        integral_j = float(np.nansum(inst[:-1] * np.diff(t_ns) / 1e9)) if len(mine) > 1 else None
        counter_j = row["energy_j"] if row["energy_method"] == "counter" else None
        temps = [s["temp_c"] for s in mine if s["temp_c"] is not None]
        figures = {
            "seconds": round((b - a) / 1e9, 2),
            "samples_per_s": round(len(mine) / ((b - a) / 1e9), 1),
            "power_kind": mine[0]["power_kind"] if mine else None,
            "power_w": row["gpu_power_w"],
            "power_avg_w_mean": float(np.nanmean(avg)) if len(avg) and not np.isnan(avg).all() else None,
            "power_limit_w": row["gpu_power_limit_w"],
            "frac_of_limit": row["gpu_power_frac_of_limit"],
            "energy_counter_j": counter_j,
            "energy_power_integral_j": integral_j,
            "counter_over_integral": (counter_j / integral_j) if counter_j and integral_j else None,
            "power_update_period_ms": update_period_ms(t_ns, inst) if len(mine) > 3 else None,
            "sm_clock_mhz": row["sm_clock_mhz"],
            "util_gpu": row["util_gpu"],
            "temp_c_max": max(temps) if temps else None,
            "clock_reasons": row["clock_reasons"],
        }
        if name == "load":
            figures["matmul_tflops"] = round(float(np.median(tflops)), 1) if tflops else None
        report["phases"][name] = figures
        pw = figures["power_w"] or {}
        sm = figures["sm_clock_mhz"] or {}
        util = figures["util_gpu"] or {}
        print(
            f"{name:>9}: {figures['samples_per_s']:5.1f} samples/s | power ({figures['power_kind']}) "
            f"mean {_f(pw.get('mean'))} p95 {_f(pw.get('p95'))} max {_f(pw.get('max'))} W"
            f" | averaged reading {_f(figures['power_avg_w_mean'])} W"
            f" | energy counter {_f(counter_j)} J vs power integral {_f(integral_j)} J"
            f" | reading changes every >= {_f(figures['power_update_period_ms'])} ms"
            f" | SM {_f(sm.get('mean'), 0)} MHz (min {_f(sm.get('min'), 0)})"
            f" | util {_f(util.get('mean'))} % | clock reasons {figures['clock_reasons']}"
        )
    if tflops:
        print(f"matmul: {report['phases']['load']['matmul_tflops']} TFLOP/s ({backend}, n={args.size})")
    if report["field_not_supported"]:
        print(f"not supported on this GPU: {report['field_not_supported']}")
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
