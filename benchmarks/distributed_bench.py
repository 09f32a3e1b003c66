"""What a distributed ramp's master costs per record, and how far one master goes.

A real ``loadgen ramp --workers N`` with ``LOADGEN_RECORDS_VIA_MASTER=1``: every record travels to
the master in the acknowledged batches a worker on another machine sends, and the master writes it
(the path of ``loadgen worker --master``). The server is ../shared/bench-peers/mock_server.js
(node, short answers: ``--max-tokens`` chunks each, no pacing), so requests come fast. Over the
steady middle of one step the harness samples, every 0.5 s, the user+system CPU of the master
process (its own, not its children's) and of each worker, and the records on the master's disk:

* master µs per record = master CPU seconds / records written, over that window;
* workers' µs per record likewise (each worker's CPU over its own records);
* the records/s one master can take at 100 % of one core = 1e6 / (master µs per record).

N = 1, 2 and 4 by default (on a 2-vCPU machine 4 workers share the same two cores: the master's
cost per record still reads true, the records/s do not grow); the figures for more are the
per-worker and per-master costs multiplied out on paper. Each run's own report is read back: its
verdict on the step says whether the load generator (a worker, or the master) bounded it. Medians of
``--reps`` runs with (min–max).

    python benchmarks/distributed_bench.py [--workers 1,2,4] [--reps 3] [--concurrency 64] [--seconds 12]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadgen.analysis.client_load import CPU_BOUND_FRAC  # noqa: E402

MOCK = ROOT.parent / "shared" / "bench-peers" / "mock_server.js"


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def lines(path: Path) -> int:
    try:
        with open(path, "rb") as fh:
            return sum(1 for _ in fh)
    except OSError:
        return 0


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except OSError:
        return []


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def start_mock(port: int) -> subprocess.Popen[bytes]:
    if shutil.which("node") is None or not MOCK.is_file():
        raise SystemExit(f"needs node and {MOCK}")
    proc = subprocess.Popen(
        ["node", str(MOCK)],
        env={**os.environ, "MOCK_PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the mock server did not start")


def one_run(n: int, url: str, out: Path, concurrency: int, seconds: float, max_tokens: int) -> dict[str, Any]:
    argv = [
        sys.executable,
        "-m",
        "loadgen.cli",
        "ramp",
        "--url",
        url,
        "--model",
        "mock-model",
        "--workers",
        str(n),
        "--concurrency",
        str(concurrency),
        "--step-seconds",
        str(seconds),
        "--warmup-seconds",
        "2",
        "--max-tokens",
        str(max_tokens),
        "--no-telemetry",
        "--drain-seconds",
        "5",
        "--out",
        str(out),
    ]
    env = {**os.environ, "LOADGEN_RECORDS_VIA_MASTER": "1", "PYTHONPATH": str(ROOT)}
    master = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    samples: list[tuple[float, float, dict[int, float], int]] = []
    run_dir: Path | None = None
    while master.poll() is None:
        time.sleep(0.5)
        if run_dir is None:
            dirs = sorted(out.glob("*-run"))
            run_dir = dirs[-1] if dirs else None
            continue
        workers = [c for c in children(master.pid) if "loadgen.run.worker" in cmdline(c)]
        try:
            cpu_master = cpu_s(master.pid)
            cpu_workers = {w: cpu_s(w) for w in workers}
        except OSError:
            break
        records = sum(lines(f) for f in run_dir.glob("requests-w*.jsonl"))
        samples.append((time.monotonic(), cpu_master, cpu_workers, records))
    _, err = master.communicate()
    if master.returncode != 0:
        raise SystemExit(f"loadgen ramp failed: {err[-2000:]}")
    # the steady middle: from a quarter into the step's records to three quarters
    total = samples[-1][3] if samples else 0
    mid = [s for s in samples if 0.25 * total <= s[3] <= 0.75 * total]
    if len(mid) < 3:
        raise SystemExit("too few samples in the steady window: give --seconds more")
    a, b = mid[0], mid[-1]
    records = b[3] - a[3]
    workers_cpu = sum(b[2].get(w, 0.0) - a[2].get(w, 0.0) for w in b[2])
    assert run_dir is not None
    step = json.loads((run_dir / "summary.json").read_text())["steps"][0]
    return {
        "workers": n,
        "records_s": records / (b[0] - a[0]),
        "master_us_per_record": (b[1] - a[1]) / records * 1e6,
        "workers_us_per_record": workers_cpu / records * 1e6,
        "master_cpu_share": (b[1] - a[1]) / (b[0] - a[0]),
        # what the run's own report says of its load generator: valid, or why not
        "report": "valid" if step["valid"] else str(step["invalid_reason"]),
    }


def summary(values: list[float], digits: int = 1) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", default="1,2,4")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--seconds", type=float, default=12.0)
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--port", type=int, default=8009)
    args = p.parse_args(argv)
    mock = start_mock(args.port)
    rows: dict[int, list[dict[str, Any]]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="dist-bench-") as tmp:
            for rep in range(args.reps):
                for n in (int(x) for x in args.workers.split(",")):
                    row = one_run(
                        n,
                        f"http://127.0.0.1:{args.port}",
                        Path(tmp) / f"{n}-{rep}",
                        args.concurrency,
                        args.seconds,
                        args.max_tokens,
                    )
                    rows.setdefault(n, []).append(row)
                    print(json.dumps(row), flush=True)
    finally:
        mock.kill()
    print()
    print(
        "| workers | records/s | master µs/record | master CPU (share of a core) | workers µs/record | "
        "records/s one master takes at 100 % of a core |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for n, rs in sorted(rows.items()):
        cells = [
            summary([r["records_s"] for r in rs], 0),
            summary([r["master_us_per_record"] for r in rs]),
            summary([r["master_cpu_share"] for r in rs], 2),
            summary([r["workers_us_per_record"] for r in rs]),
            summary([1e6 / r["master_us_per_record"] for r in rs], 0),
        ]
        print(f"| {n} | " + " | ".join(cells) + " |")
    print()
    for n, rs in sorted(rows.items()):
        said = sorted({r["report"][:160] for r in rs})
        print(f"{n} workers, the report's verdict on the step: " + " | ".join(said))
    bound = statistics.median(1e6 / r["master_us_per_record"] for rs in rows.values() for r in rs)
    print(
        f"\none master takes about {bound * CPU_BOUND_FRAC:,.0f} records/s before the report marks its steps "
        f"(the master's CPU over {CPU_BOUND_FRAC:.0%} of a core: 'load generator bound (the master's CPU ...)')"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
