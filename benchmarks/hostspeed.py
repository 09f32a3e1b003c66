"""How far this machine's own speed moves: a fixed pure-Python loop timed over and over, alone.

A twin calibrated minutes before its truth can be held no closer than the host holds its speed. On
the 2-core host of 2026-12-06 (nothing else running): 60 s of repetitions read 19.8 ms at p10 and
30.8 at p90 (max 38.6), and the 5-s medians over two minutes 19.9-30.6 ms, 1.54x (benchmarks/RESULTS.md,
issue 33). Run it before a long benchmark, or beside nothing.

    python3 benchmarks/hostspeed.py [--seconds 120] [--window 5]
"""

from __future__ import annotations

import argparse
import statistics
import time


def work(n: int = 300_000) -> int:
    x = 0
    for i in range(n):
        x += i * i % 7
    return x


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=120.0, help="how long to time (default: 120)")
    ap.add_argument("--window", type=float, default=5.0, help="seconds per window median (default: 5)")
    args = ap.parse_args()
    t0 = time.monotonic()
    reps: list[float] = []
    windows: dict[int, list[float]] = {}
    while time.monotonic() - t0 < args.seconds:
        t = time.perf_counter()
        work()
        ms = (time.perf_counter() - t) * 1e3
        reps.append(ms)
        windows.setdefault(int((time.monotonic() - t0) // args.window), []).append(ms)
    reps.sort()
    n = len(reps)
    print(
        f"{n} repetitions, ms each: min {reps[0]:.1f} p10 {reps[n // 10]:.1f} median {reps[n // 2]:.1f} "
        f"p90 {reps[9 * n // 10]:.1f} max {reps[-1]:.1f}"
    )
    meds = [statistics.median(v) for _, v in sorted(windows.items())]
    print(f"{args.window:g}-s medians: " + " ".join(f"{m:.1f}" for m in meds))
    print(f"slowest window over fastest: {max(meds) / min(meds):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
