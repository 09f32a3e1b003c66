"""Workload files at scale (issue 31): export a 1,000,000-request workload file, then load it (read and
check every line, index its streams) and read every line back as a replay does; each part in a
process of its own, with its wall time and peak memory (the kernel's max RSS of that process).

    PYTHONPATH=. python benchmarks/workload_files.py [--requests 1000000] [--runs 3] [--closed]

The requests: chat prompts of 128 tokens and 64 output tokens, open loop (a rate of 1000/s for the
step's seconds) or, with ``--closed``, 256 users with their streams. The target: export plus load
(each process's wall time, start-up included; the read-back, a replay's cost, apart) under 30 s,
memory bounded (flat in the number of requests). Prints each run and the median with the range.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

LOAD = """
import sys, time
from loadgen.workload.wfile import open_workload
t = time.perf_counter()
wf = open_workload(sys.argv[1])
load_s = time.perf_counter() - t
t = time.perf_counter()
n = sum(1 for key in wf.streams for _ in wf.lines(*key))
print(wf.requests, n, load_s, time.perf_counter() - t)
"""


def _run(argv: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MB) and stdout of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    out = proc.stdout.read() if proc.stdout else ""
    err = proc.stderr.read() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv[:4]} failed: {err[-2000:]}")
    return wall, usage.ru_maxrss / 1024, out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--closed", action="store_true", help="256 users' streams instead of an open-loop rate")
    a = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.jsonl"
        if a.closed:
            users = 256
            load = ["--concurrency", str(users), "--requests-per-user", str(-(-a.requests // users))]
        else:
            load = ["--rate", "1000", "--step-seconds", str(a.requests / 1000)]
        export = [sys.executable, "-m", "loadgen.cli", "workload", "export", "--context-tokens", "128",
                  "--max-tokens", "64", "--warmup-seconds", "0", *load, "-o", str(path)]  # fmt: skip
        for i in range(a.runs):
            e_wall, e_rss, _ = _run(export)
            size = path.stat().st_size / 1e6
            l_wall, l_rss, out = _run([sys.executable, "-c", LOAD, str(path)])
            n, read, load_s, read_s = out.split()
            assert int(n) == int(read), (n, read)
            rows.append((e_wall, e_rss, l_wall, l_rss, float(load_s), float(read_s)))
            print(
                f"run {i + 1}: {int(n):,} requests, {size:,.0f} MB; export {e_wall:.1f} s (peak {e_rss:.0f} MB); "
                f"load {l_wall:.1f} s (open and index {float(load_s):.1f} s, peak {l_rss:.0f} MB); every line read "
                f"back {float(read_s):.1f} s; export + load {e_wall + l_wall - float(read_s):.1f} s",
                flush=True,
            )

    def med(k: int) -> str:
        vals = [r[k] for r in rows]
        return f"{statistics.median(vals):.1f} ({min(vals):.1f}-{max(vals):.1f})"

    total = [r[0] + r[2] - r[5] for r in rows]  # the read-back is the replay's, not the load's
    print(
        f"\nmedian (range) of {len(rows)}: export {med(0)} s, peak {med(1)} MB; load {med(2)} s, peak {med(3)} MB; "
        f"read back {med(5)} s; export + load {statistics.median(total):.1f} ({min(total):.1f}-{max(total):.1f}) s "
        f"[target < 30 s]"
    )
    return 0 if statistics.median(total) < 30 else 1


if __name__ == "__main__":
    sys.exit(main())
