"""A fleet at scale (issue 32): a day-long trace of about a million requests over 64 replicas, on one
core, each run a process of its own (its CPU time, wall time and peak memory, the kernel's max RSS);
then the cost per simulated request at 8, 16, 32 and 64 replicas on a shorter part of the same day.

    PYTHONPATH=. python benchmarks/fleet_scale.py [--trace FILE] [--requests 1000000] [--runs 3]

The requests: the Azure 2023 conversation trace (../shared/data/traces; a path of your own with
--trace), looped over a day of the ``diurnal`` shape at the scale that gives ``--requests`` in 24 h.
The deployment: h100-llama-8b (Llama-3.1-8B on one H100), least-requests routing. Pinned to one core
with ``taskset`` where it is present (the target is one core of this machine: under 2 minutes).
Prints each run and the median with the range.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRACE = REPO.parent / "shared" / "data" / "traces" / "azure-llm-2023-conv.csv"

CHILD = """
import json, resource, sys, time
from loadgen.fleet.router import Policy
from loadgen.fleet.sim import run_fleet
from loadgen.fleet.traffic import from_trace, parse_shape
from loadgen.sim.profile import load_profile
from loadgen.workload.datasets import load_trace
trace, scale, replicas, hours = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
t0 = time.perf_counter()
reqs = from_trace(load_trace(trace), scale=scale, shape=parse_shape("diurnal"), duration_s=hours * 3600)
r = run_fleet(load_profile("h100-llama-8b"), reqs, replicas=replicas, policy=Policy.LEAST_REQUESTS, window_s=3600)
wall = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = r.total
print(json.dumps({"requests": r.requests, "cpu_s": r.wall_s, "wall_s": wall, "rss_mb": rss,
                  "finished": t.finished, "ttft_p50_ms": t.hist["ttft"].percentile(50) * 1e3}))
"""


def _child(trace: str, scale: float, replicas: int, hours: float) -> dict[str, float]:
    argv = [sys.executable, "-c", CHILD, trace, str(scale), str(replicas), str(hours)]
    if shutil.which("taskset"):
        argv = ["taskset", "-c", "0", *argv]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the fleet run failed:\n{done.stderr}")
    out: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _rows_per_hour(trace: str) -> float:
    from loadgen.workload.datasets import load_trace

    t = load_trace(trace)
    return len(t.rows) / max(t.duration_s, 1.0) * 3600.0


def _med(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default=str(TRACE))
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=64)
    ap.add_argument("--sweep-hours", type=float, default=2.0, help="hours of the day for the replica sweep")
    ns = ap.parse_args()
    if not Path(ns.trace).is_file():
        print(f"error: no trace at {ns.trace}; give --trace FILE (an Azure, BurstGPT or Mooncake trace)")
        return 2
    scale = ns.requests / (_rows_per_hour(ns.trace) * 24.0)
    print(f"{ns.requests:,} requests a day: the trace at {scale:.2f}x its rate, diurnal, {ns.replicas} replicas")
    runs = []
    for i in range(ns.runs):
        r = _child(ns.trace, scale, ns.replicas, 24.0)
        runs.append(r)
        print(
            f"  run {i + 1}: {r['requests']:,.0f} requests, CPU {r['cpu_s']:.1f} s, wall {r['wall_s']:.1f} s, "
            f"max RSS {r['rss_mb']:.0f} MB, {r['cpu_s'] / r['requests'] * 1e6:.0f} µs/request"
        )
    print(
        f"median (range): CPU {_med([r['cpu_s'] for r in runs])} s, wall {_med([r['wall_s'] for r in runs])} s, "
        f"max RSS {_med([r['rss_mb'] for r in runs])} MB"
    )
    # how the cost grows with the replicas, on the first hours of the same day
    print(f"cost per simulated request, {ns.sweep_hours:g} h of the day's start, by replicas:")
    for replicas in (8, 16, 32, 64):
        cpu = []
        for _ in range(max(1, ns.runs)):
            r = _child(ns.trace, scale, replicas, ns.sweep_hours)
            cpu.append(r["cpu_s"] / r["requests"] * 1e6)
        print(f"  {replicas:>3} replicas: {_med(cpu)} µs/request ({r['requests']:,.0f} requests)")
    return 0


if __name__ == "__main__":
    t0 = time.perf_counter()
    code = main()
    print(f"({time.perf_counter() - t0:.0f} s)")
    sys.exit(code)
