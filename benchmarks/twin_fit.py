"""Fit time of `loadgen calibrate` on a 5-step ramp with about 10,000 synthetic records (target < 10 s).

    PYTHONPATH=. python benchmarks/twin_fit.py [--records 10000]

The run directory is made once by the synthetic engine of tests/unit/test_twin_fit.py (exact times,
64 chunks a request); the timed part is what `loadgen calibrate` does: load_run + observe + fit +
writing the profile. Prints each run and the median of 3.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _synth():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("twin_synth", ROOT / "tests" / "unit" / "test_twin_fit.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["twin_synth"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=10_000)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from loadgen.analysis.load import load_run
    from loadgen.twin.emit import write_twin
    from loadgen.twin.fit import fit
    from loadgen.twin.observe import observe

    synth = _synth()
    conc = [8, 16, 32, 64, 128]
    # closed loop, 64 tokens a request at ~5-11 ms a step: pick the step length that gives ~N records
    per_s = sum(c / (0.020 + 64 * (5.0 + 0.05 * c) / 1e3) for c in conc)
    step_s = args.records / per_s
    with tempfile.TemporaryDirectory() as tmp:
        run = synth.synth_run(Path(tmp) / "run", synth.Truth(), conc, step_s=step_s, prompt_tokens=[60, 500])
        n = sum(1 for _ in (run / "requests-w0.jsonl").open())
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            result = fit(observe([load_run(run)]))
            write_twin(result, Path(tmp) / "twin.toml", served_name="m")
            times.append(time.perf_counter() - t0)
            print(f"fit of {n} records, 5 steps: {times[-1]:.3f} s")
    print(f"median of 3: {statistics.median(times):.3f} s (target < 10 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
