"""CPU cost of the telemetry side process: NVML at 20 Hz against the fake libnvidia-ml (no GPU needed).

Starts the real side process (``start_side_process``) with the unmodified nvidia-ml-py loading
tests/fakenvml, lets it warm up, then reads its user+system CPU time from /proc over a window.
Target: under 3 % of one core at 20 Hz on 8 GPUs.

    python benchmarks/telemetry_bench.py [--gpus 8] [--hz 20] [--seconds 10]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadgen.rundir.records import read_jsonl  # noqa: E402
from loadgen.telemetry import TelemetryOptions, start_side_process  # noqa: E402


def _fakenvml() -> Any:
    spec = importlib.util.spec_from_file_location("fakenvml_build", ROOT / "tests" / "fakenvml" / "build.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def count_lines(path: Path) -> int:
    with open(path, "rb") as fh:
        return sum(1 for _ in fh)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--hz", type=float, default=20.0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=2.0)
    args = p.parse_args(argv)
    fakenvml = _fakenvml()
    with tempfile.TemporaryDirectory(prefix="telemetry-bench-") as tmp:
        lib = fakenvml.build_fake_nvml(Path(tmp) / "lib")
        script = Path(tmp) / "power.txt"
        script.write_text("0 150000\n1 450000\n5 300000\n")
        env = fakenvml.fake_nvml_env(lib, gpus=str(args.gpus), script=str(script))
        run_dir = Path(tmp) / "run"
        side = start_side_process(run_dir, TelemetryOptions(gpu_source="nvml", gpu_hz=args.hz), env=env)
        try:
            if not side.wait_ready(30.0):
                print((run_dir / "telemetry.log").read_text(), file=sys.stderr)
                return 1
            time.sleep(args.warmup)
            c0, t0 = cpu_seconds(side.pid), time.monotonic()
            n0 = count_lines(run_dir / "samples.jsonl")
            time.sleep(args.seconds)
            c1, t1 = cpu_seconds(side.pid), time.monotonic()
            n1 = count_lines(run_dir / "samples.jsonl")
        finally:
            rc = side.stop(10.0)
        errors = [
            e for e in read_jsonl(run_dir / "events.jsonl") if e["kind"] in ("sampler_error", "source_unavailable")
        ]
    wall = t1 - t0
    result = {
        "gpus": args.gpus,
        "hz": args.hz,
        "window_s": round(wall, 2),
        "cpu_pct_of_core": round(100 * (c1 - c0) / wall, 2),
        "samples_per_s": round((n1 - n0) / wall, 1),
        "expected_samples_per_s": args.gpus * args.hz,
        "errors": len(errors),
        "exit_status": rc,
        "target_pct": 3.0,
    }
    print(json.dumps(result))
    return 0 if result["cpu_pct_of_core"] < 3.0 and not errors and rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
