"""Analysis and report of a large run: wall seconds, CPU seconds and peak memory (issue 9 target:
1,000,000 request records analysed and reported in < 10 s and < 2 GB).

    python benchmarks/analysis_bench.py [--records 1000000] [--chunks 64] [--keep DIR] [--workers N]

Writes a synthetic ramp (5 steps at C=1..128, 4 worker files, ``--chunks`` text chunks of 1-3 tokens
per request, one request in 500 failing) into a temporary directory (not timed), then, in a fresh
process, times ``load_run``, ``build_summary`` and writing summary.json, steps.csv and report.md.
Prints wall seconds per phase, CPU seconds (that process and its parsing workers), peak RSS of that
process and of its largest worker, the load average when it started, and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def measure(run_dir: Path, workers: int | None) -> dict[str, float]:
    from loadgen.analysis.load import load_run
    from loadgen.analysis.summary import build_summary
    from loadgen.report.outputs import write_run_outputs

    load_avg = os.getloadavg()[0]
    c0 = time.process_time()
    t0 = time.perf_counter()
    run = load_run(run_dir, workers=workers)
    t1 = time.perf_counter()
    summary = build_summary(run)
    t2 = time.perf_counter()
    write_run_outputs(run, summary)
    t3 = time.perf_counter()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "records": run.requests.n,
        "chunks": len(run.requests.chunk_offsets_ns),
        "load_s": round(t1 - t0, 2),
        "summary_s": round(t2 - t1, 2),
        "report_s": round(t3 - t2, 2),
        "total_s": round(t3 - t0, 2),
        "cpu_s": round(time.process_time() - c0 + children.ru_utime + children.ru_stime, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "worker_peak_rss_mb": round(children.ru_maxrss / 1024),
        "load_avg_at_start": round(load_avg, 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--chunks", type=int, default=64, help="text chunks per request")
    ap.add_argument("--keep", type=Path, help="write the run here and keep it (default: a temp dir)")
    ap.add_argument("--workers", type=int, help="parsing processes (default: load_run's choice)")
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # the timed child process
    args = ap.parse_args(argv)

    if args.measure:
        print(json.dumps(measure(args.measure, args.workers)))
        return 0

    from loadgen.analysis.synthetic import write_bulk_run

    tmp = None
    if args.keep:
        run_dir = args.keep
    else:
        tmp = tempfile.mkdtemp(prefix="loadgen-analysis-bench-")
        run_dir = Path(tmp) / "run"
    try:
        t = time.perf_counter()
        if not (run_dir / "steps.jsonl").exists():
            write_bulk_run(run_dir, args.records, chunks=args.chunks)
        size_mb = sum(p.stat().st_size for p in run_dir.glob("*.jsonl")) / 1e6
        print(
            f"run of {args.records:,} records x {args.chunks} chunks: {size_mb:,.0f} MB of JSONL "
            f"({time.perf_counter() - t:.1f} s to write, not timed)"
        )
        cmd = [sys.executable, __file__, "--measure", str(run_dir)]
        if args.workers:
            cmd += ["--workers", str(args.workers)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            print(out.stderr, file=sys.stderr)
            return 1
        result = json.loads(out.stdout.strip().splitlines()[-1])
        result["jsonl_mb"] = round(size_mb)
        print(
            f"load {result['load_s']} s + summary {result['summary_s']} s + report {result['report_s']} s "
            f"= {result['total_s']} s wall, {result['cpu_s']} s CPU; peak RSS {result['peak_rss_mb']} MB "
            f"(largest worker {result['worker_peak_rss_mb']} MB); load average {result['load_avg_at_start']}"
        )
        print(json.dumps(result))
        return 0
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
