"""Open-loop send lateness under bursts: how late a trace's requests leave when many are due at one
instant and their prompts are long (Mooncake's timestamps put up to 17 requests at one millisecond,
~13 k tokens each).

    PYTHONPATH=. python benchmarks/open_loop_bursts.py [--runs 3] [--burst 10] [--tokens 12000]

A trace written here (Mooncake form, prefix blocks and all, so each prompt is built as a Mooncake
replay builds it): every second, ``--burst`` requests at the same timestamp, each ``--tokens`` prompt
tokens and 8 output tokens, for ``--seconds``. ``loadgen ramp`` replays it open-loop
against ``loadgen sim`` (the tiny profile, no pacing: the server's own time stays out of the way), each
run a fresh pair of processes. Lateness = a record's ``sent_ns - intended_ns`` (what TTFT and E2E,
counted from the intended time, carry on top of the server's time). Prints each run's p50/p90/p99 over
all requests and the first of each burst, the share of bursts sent in the trace's order, then the
medians with ranges. Run it with ``PYTHONPATH`` set
to each tree to compare two versions in one session.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent


def write_trace(path: Path, burst: int, tokens: int, seconds: int, output: int) -> None:
    """Mooncake form: every request shares its first 512-token block (a system prompt) and has blocks
    of its own after it, as the real trace's first turns do."""
    blocks = -(-tokens // 512)
    lines, next_id = [], 1
    for s in range(seconds):
        for k in range(burst):
            ids = [0, *range(next_id, next_id + blocks - 1)]
            next_id += blocks - 1
            # lengths rise through a burst: the order the requests left in shows in their lengths
            row = {"timestamp": s * 1000, "input_length": tokens + 8 * k, "output_length": output, "hash_ids": ids}
            lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n")


SCENARIO = """name = "bursts"
seed = 1
context_limit = {limit}
[prompt]
source = "trace"
[trace]
path = "{trace}"
format = "mooncake"
[output]
ignore_eos = true
[load]
mode = "open"
arrival = "trace"
time_scales = [1.0]
step_seconds = {seconds}
warmup_seconds = 0
"""


def one_run(work: Path, args: argparse.Namespace) -> dict[str, float]:
    trace = work / "bursts.jsonl"
    write_trace(trace, args.burst, args.tokens, args.seconds, args.output)
    scenario = work / "bursts.toml"
    scenario.write_text(SCENARIO.format(trace=trace, seconds=args.seconds, limit=args.tokens * 2 + 64))
    port_file = work / "sim.port"
    sim = subprocess.Popen(
        [sys.executable, "-m", "loadgen.sim", "--profile", "tiny", "--ttft-ms", "0", "--itl-ms", str(args.itl_ms),
         "--context-length", str(args.tokens * 2 + 64), "--port", "0", "--port-file", str(port_file)],
        cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            if sim.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the simulator did not start")
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port_file.read_text().strip()}"
        out = work / "run"
        done = subprocess.run(
            [sys.executable, "-m", "loadgen.cli", "ramp", "--url", url, "--scenario", str(scenario),
             "--no-telemetry", "--drain-seconds", "30", "--out", str(out)],
            cwd=work, capture_output=True, text=True, timeout=args.seconds + 300,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(done.stderr[-2000:])
    finally:
        sim.terminate()
        sim.wait(10)
    run_dir = Path(done.stdout.strip().splitlines()[-1])
    recs = [json.loads(x) for f in run_dir.glob("requests-*.jsonl") for x in f.read_text().splitlines() if x]
    late = np.array([(r["sent_ns"] - r["intended_ns"]) / 1e6 for r in recs])
    firsts: dict[int, float] = {}
    for r in recs:
        t = r["intended_ns"]
        firsts[t] = min(firsts.get(t, float("inf")), (r["sent_ns"] - t) / 1e6)
    first = np.array(list(firsts.values()))
    bursts: dict[int, list[tuple[int, int]]] = {}
    for r in recs:
        bursts.setdefault(r["intended_ns"], []).append((r["sent_ns"], r["context_tokens"]))
    in_order = sum(1 for b in bursts.values() if [c for _, c in sorted(b)] == sorted(c for _, c in b))
    failed = sum(1 for r in recs if r["error_class"])
    return {
        "requests": float(len(recs)),
        "failed": float(failed),
        "p50": float(np.percentile(late, 50)),
        "p90": float(np.percentile(late, 90)),
        "p99": float(np.percentile(late, 99)),
        "first p50": float(np.percentile(first, 50)),
        "bursts in order": in_order / len(bursts),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--burst", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=12000)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--output", type=int, default=64, help="output tokens a request (default 64)")
    ap.add_argument(
        "--itl-ms",
        type=float,
        default=25.0,
        help="the simulator's ms a token (default 25: a request\n"
        "outlasts the next burst, so bursts meet requests in flight and need new connections)",
    )
    args = ap.parse_args()
    import loadgen

    print(f"loadgen from {Path(loadgen.__file__).parent}; bursts of {args.burst} x {args.tokens} tokens every 1 s")
    rows = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            row = one_run(Path(tmp), args)
        rows.append(row)
        print(f"run {i + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()), flush=True)
    print("lateness (ms) and bursts in order (share): median (range) of the runs")
    for k in ("p50", "p90", "p99", "first p50", "bursts in order"):
        vals = [r[k] for r in rows]
        print(f"  {k:>9}: {statistics.median(vals):.2f} ({min(vals):.2f}-{max(vals):.2f})")


if __name__ == "__main__":
    main()
