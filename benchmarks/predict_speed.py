"""``loadgen predict`` speed (issue 28's target: 4 deployments x 8 loads in under 10 s on this machine).

Runs the command's own function, ``loadgen.predict.deploy.predict``, on four deployments (Llama-3.3-70B
on 8x H200 TP8 and on 4x B200 TP4 from the shipped config.json, the two Kimi seed deployments) at
C=1..128 (8 loads, 30-s windows after 10-s warm-ups, 1,000-token prompts, 512 output tokens), ``--repeats``
times, and prints the median wall time with its range and the CPU time. The result is deterministic
(virtual clock, seed 0): each repeat must give the same rows.

    PYTHONPATH=. .venv/bin/python benchmarks/predict_speed.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from loadgen.predict.deploy import parse_deployment, predict

DEPLOYMENTS = (
    "label=Llama-3.3-70B 8xH200 TP8,model=llama-3.3-70b-instruct,hardware=h200x8,server.tp=8",
    "label=Llama-3.3-70B 4xB200 TP4,model=llama-3.3-70b-instruct,hardware=b200x8,server.tp=4",
    "label=Kimi K2.6 8xB300 DDTree,profile=b300x8-kimi-k2.6-ddtree",
    "label=Kimi K2.6 8xB300 AR,profile=b300x8-kimi-k2.6-ar",
)
LOADS = [1, 2, 4, 8, 16, 32, 64, 128]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    ns = parser.parse_args()
    walls, cpus, first = [], [], None
    for _ in range(ns.repeats):
        deps = [parse_deployment(t) for t in DEPLOYMENTS]
        w0, c0 = time.perf_counter(), time.process_time()
        result = predict(deps, concurrencies=LOADS, input_tokens=1000, output_tokens=512)
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
        rows = [(r["deployment"], r["concurrency"], round(r["output_tok_s"], 6)) for r in result["rows"]]
        assert first is None or rows == first, "the virtual clock gave different rows on a repeat"
        first = rows
    assert first is not None and len(first) == len(DEPLOYMENTS) * len(LOADS)
    print(
        f"loadgen predict, {len(DEPLOYMENTS)} deployments x {len(LOADS)} loads ({len(first)} rows), {ns.repeats} runs:"
    )
    print(f"  wall median {statistics.median(walls):.2f} s (range {min(walls):.2f}-{max(walls):.2f}), "
          f"CPU median {statistics.median(cpus):.2f} s; target < 10 s")  # fmt: skip
    return 0 if statistics.median(walls) < 10.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
