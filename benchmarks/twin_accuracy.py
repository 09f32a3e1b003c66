"""How close the digital twin comes to the profile it was calibrated from, with steps long enough
that the profile reproduces itself (issue 16's figures; docs/twin.md, "Accuracy measured").

    PYTHONPATH=. python benchmarks/twin_accuracy.py                 # both cases, 3 reps, 8-s steps
    PYTHONPATH=. python benchmarks/twin_accuracy.py --case seed --reps 5 --step-seconds 12

The recovery tests (benchmarks/accuracy/test_twin_recovery.py) run 3-s steps to stay
within about a minute each; at C=1 such a window holds a dozen requests of the seed, whose own figures then move
by ±7 % between simulator seeds, so no twin can be held to 5 % there. This benchmark runs the same
two cases with longer steps and, in the same run, measures the **floor**: the profile against
itself, the same ramp on a fresh server under another simulator seed. Per rep (simulator seed = rep;
the twin's own seed, ``loadgen twin --seed``, 200 + rep):

* ``seed``: b300x8-kimi-k2.6-ddtree (speculative, max running 128) at C=1, 32, 128; the twin with
  ``--set max_running_requests=256 --concurrency 256`` against the seed at 256 running requests
  (CUDA graphs to 128, so that it starts).
* ``h100``: h100-llama-8b with a 4,374-token KV pool at C=1, 4, 16; the twin predicts C=32 (2x)
  and C=64 (above the overflow) against the profile measured there, cold.

The workload is the tests' (60-token chat prompts, max_tokens uniform 16-112) with an exponential
think time (``--think-ms``, default 50; 0 for none): a user that comes back the instant its last
chunk arrives meets a long decode step (the seed's ~130 ms) at the same phase every time, and
whether it makes the next prefill turns on the client's turnaround (docs/twin.md); a think time
spreads the returns over the step as real users' are.

Prints, per case, step and figure: the twin's error (twin / measured - 1) and the floor's, median
and range over the reps, and whether the median lies within issue 16's figure (5 % throughput and
TPOT p50, 10 % TTFT p50 at measured steps; 10 % at the predicted steps). Last line: one JSON object.
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadgen.analysis.load import load_run  # noqa: E402
from loadgen.analysis.steps import step_rows  # noqa: E402
from tests.conftest import run_loadgen, start_sim  # noqa: E402

FIGURES = {"throughput": "output_tok_s", "TPOT p50": "tpot_ms", "TTFT p50": "ttft_ms"}
MEASURED_LIMITS = {"throughput": 0.05, "TPOT p50": 0.05, "TTFT p50": 0.10}
PREDICTED_LIMIT = 0.10
SEED = ("--profile", "b300x8-kimi-k2.6-ddtree", "--startup-s", "0")
H100 = ("--profile", "h100-llama-8b", "--startup-s", "0", "--mem-fraction-static", "0.2165")
CASES: dict[str, dict[str, Any]] = {
    "seed": {
        "server": SEED,
        "measured": "1,32,128",
        "truth_server": (*SEED, "--max-running-requests", "256", "--cuda-graph-max-bs", "128"),
        "what_if": "256",
        "twin": ("--set", "max_running_requests=256"),
    },
    "h100": {"server": H100, "measured": "1,4,16", "truth_server": H100, "what_if": "32,64", "twin": ()},
}


def _scenario(path: Path, think_ms: float) -> str:
    text = (
        'name = "twin-accuracy"\nseed = 0\n[prompt]\nsource = "chat"\ninput_tokens = 60\n'
        '[output]\nmax_tokens = { dist = "uniform", low = 16, high = 112 }\n'
    )
    if think_ms > 0:
        text += f'[load]\nmode = "closed"\nthink_time_s = {{ dist = "exponential", mean = {think_ms / 1000:g} }}\n'
    path.write_text(text)
    return str(path)


class _Servers:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.n = 0

    def ramp(self, server: tuple[str, ...], sim_seed: int, conc: str, scenario: str, ramp: list[str]) -> str:
        self.n += 1
        sub = self.tmp / f"sim{self.n}"
        sub.mkdir()
        sim = start_sim(sub, *server, "--seed", str(sim_seed))
        try:
            out = self.tmp / f"runs{self.n}"
            done = run_loadgen(
                "ramp", "--url", sim.url, "--concurrency", conc, *ramp, "--scenario", scenario, "--out", str(out),
                timeout=600,
            )  # fmt: skip
            if done.returncode != 0:
                raise SystemExit(f"loadgen ramp failed:\n{done.stdout}\n{done.stderr}")
            return done.stdout.strip().splitlines()[-1]
        finally:
            sim.stop()


def _figures(run_dir: str) -> dict[float, dict[str, float]]:
    out: dict[float, dict[str, float]] = {}
    for r in step_rows(load_run(run_dir)):
        row = {}
        for label, key in FIGURES.items():
            row[label] = r[key] if key == "output_tok_s" else (r[key] or {}).get("p50")
        out[float(r["concurrency"])] = row
    return out


def _rel(a: dict[float, dict[str, float]], b: dict[float, dict[str, float]]) -> dict[tuple[float, str], float]:
    """(load, figure) -> a / b - 1 where both have the step."""
    return {(c, k): a[c][k] / b[c][k] - 1.0 for c in a if c in b for k in FIGURES if a[c].get(k) and b[c].get(k)}


def _twin(run_dir: str, out: Path, what_if: str, extra: tuple[str, ...], seed: int) -> tuple[str, str]:
    code = "import sys; from loadgen.twin.cli import twin_main; sys.exit(twin_main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", code, run_dir, "--out", str(out), *extra, "--concurrency", what_if, "--seed", str(seed)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise SystemExit(f"loadgen twin failed:\n{done.stdout}\n{done.stderr}")
    replayed, predicted = json.loads((out / "twin.json").read_text())["twin_runs"]
    return replayed, predicted


Errors = dict[tuple[float, str], float]


def one_rep(case: str, rep: int, tmp: Path, scenario: str, ramp: list[str]) -> dict[str, Errors]:
    spec = CASES[case]
    servers = _Servers(tmp)
    measured = servers.ramp(spec["server"], rep, spec["measured"], scenario, ramp)
    again = servers.ramp(spec["server"], rep + 100, spec["measured"], scenario, ramp)
    truth = servers.ramp(spec["truth_server"], rep, spec["what_if"], scenario, ramp)
    # the twin under a seed of its own each rep: at C=1 an 8-s step holds ~27 requests, and one seed's
    # acceptance draws for them would be the same luck in every rep
    replayed, predicted = _twin(measured, tmp / "twin", spec["what_if"], spec["twin"], rep + 200)
    m = _figures(measured)
    return {
        "twin": {**_rel(_figures(replayed), m), **_rel(_figures(predicted), _figures(truth))},
        "floor": _rel(_figures(again), m),
    }


def _span(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values) * 100:+.1f} % ({min(values) * 100:+.1f} … {max(values) * 100:+.1f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", choices=("seed", "h100", "both"), default="both")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--step-seconds", type=float, default=8.0)
    ap.add_argument("--warmup-seconds", type=float, default=2.0)
    ap.add_argument("--think-ms", type=float, default=50.0)
    ap.add_argument("--keep", type=Path, help="keep every run directory (and the twins) under this folder")
    args = ap.parse_args()
    ramp = ["--step-seconds", f"{args.step_seconds:g}", "--warmup-seconds", f"{args.warmup_seconds:g}"]
    ramp += ["--drain-seconds", "30"]
    cases = ["seed", "h100"] if args.case == "both" else [args.case]
    summary: dict[str, Any] = {"step_seconds": args.step_seconds, "think_ms": args.think_ms, "reps": args.reps}
    for case in cases:
        twin: dict[tuple[float, str], list[float]] = {}
        floor: dict[tuple[float, str], list[float]] = {}
        for rep in range(args.reps):
            t0 = time.monotonic()
            if args.keep is not None:
                kept = args.keep / f"{case}-{rep}"
                kept.mkdir(parents=True)
                got = one_rep(case, rep, kept, _scenario(kept / "spread.toml", args.think_ms), ramp)
            else:
                with tempfile.TemporaryDirectory(prefix=f"twin-acc-{case}-") as tmp:
                    scenario = _scenario(Path(tmp) / "spread.toml", args.think_ms)
                    got = one_rep(case, rep, Path(tmp), scenario, ramp)
            for key, v in got["twin"].items():
                twin.setdefault(key, []).append(v)
            for key, v in got["floor"].items():
                floor.setdefault(key, []).append(v)
            print(f"{case} rep {rep + 1}/{args.reps}: {time.monotonic() - t0:.0f} s", flush=True)
        measured_loads = {float(c) for c in CASES[case]["measured"].split(",")}
        print(f"\n{case}: twin / measured - 1 and the floor (the profile / itself - 1, another simulator seed)")
        print("| step | figure | twin: median (range) | floor: median (range) | issue 16's figure | twin within |")
        print("|---|---|---|---|---|---|")
        rows = []
        for (load, fig), values in sorted(twin.items()):
            is_measured = load in measured_loads
            limit = MEASURED_LIMITS[fig] if is_measured else PREDICTED_LIMIT
            ok = abs(statistics.median(values)) <= limit
            step = f"C={load:g}" + ("" if is_measured else " (predicted)")
            print(f"| {step} | {fig} | {_span(values)} | {_span(floor.get((load, fig), []))} | {limit:.0%} | {ok} |")
            rows.append({"load": load, "figure": fig, "predicted": not is_measured, "twin": values,
                         "floor": floor.get((load, fig), []), "limit": limit, "within": ok})  # fmt: skip
        summary[case] = rows
        print(flush=True)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
