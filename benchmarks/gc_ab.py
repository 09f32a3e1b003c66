"""Does Python's cyclic GC cost timing accuracy? ``loadgen ramp`` at C=256 against the paced mock,
alternating the product as it is (``loadgen.load.runtime.quiet_gc``: ``gc.freeze()`` after start-up,
generation 0 100x less often) with the interpreter's default GC (``quiet_gc`` made a no-op).

    PYTHONPATH=. python benchmarks/gc_ab.py [--pairs 3] [--seconds 6]

Prints one line per run (TTFT/ITL error against the server's truth, as ``run.py`` computes it)
and, last, one JSON object with the medians.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as bench  # the harness next to this file

_DEFAULT_GC = (
    "import sys; import loadgen.run.ramp, loadgen.load.runtime as rt; from loadgen.cli import main; "
    "rt.quiet_gc = lambda: None; loadgen.run.ramp.quiet_gc = lambda: None; sys.exit(main(sys.argv[1:]))"
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--client-cpu", type=int, default=0)
    ap.add_argument("--server-cpu", type=int, default=1)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="loadgen-gc-ab-"))
    server = bench.Server(args.server_cpu, work)
    if server.paced is None:
        print("needs node (the paced mock server records the emission truth)", file=sys.stderr)
        server.stop()
        return 1
    rows: dict[str, list[dict[str, float]]] = {"default": [], "frozen": []}
    try:
        for _ in range(args.pairs):
            for mode in ("default", "frozen"):
                out = work / f"{mode}-{time.monotonic_ns()}"
                out.mkdir()
                cmd = bench.ramp_cmd(f"http://127.0.0.1:{server.paced}", [256], 0.0, args.seconds, 128, out, drain=30)
                if mode == "default":
                    cmd = [sys.executable, "-c", _DEFAULT_GC, *cmd[cmd.index("ramp") :]]
                server.reset_truth()
                run_dir, _, foreign = bench.run_ramp(cmd, args.client_cpu, work, None)
                ttft: list[float] = []
                itl: list[float] = []
                for f in run_dir.glob("requests-*.jsonl"):
                    for line in f.read_text().splitlines():
                        r = json.loads(line)
                        offs = r.get("chunk_offsets_ns") or []
                        if r.get("error_class") or not offs:
                            continue
                        ttft.append((r["first_chunk_ns"] - r["intended_ns"]) / 1e6)
                        itl.extend((b - a) / 1e6 for a, b in itertools.pairwise(offs))
                err = bench.errors({"ttft": bench.summary(ttft), "itl": bench.summary(itl)}, server.truth())
                rows[mode].append(err)
                print(
                    f"{mode:8s} TTFT err mean {err['ttft_err_mean_ms']:+.2f} p99 {err['ttft_err_p99_ms']:+.2f} ms, "
                    f"ITL err p99 {err['itl_err_p99_ms']:+.2f} ms ({err['requests']} requests), "
                    f"other load on the client core {foreign:.0f} %",
                    flush=True,
                )
                shutil.rmtree(out, ignore_errors=True)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    result = {
        f"{mode}_{key}": round(statistics.median(r[key] for r in rs), 2)
        for mode, rs in rows.items()
        for key in ("ttft_err_mean_ms", "ttft_err_p99_ms", "itl_err_p99_ms")
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
