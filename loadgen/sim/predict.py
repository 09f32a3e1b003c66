"""What the step model predicts for each model part on each hardware part, on the virtual clock.

``python -m loadgen.sim.predict`` prints the table of docs/simulator.md ("Predictions by
hardware"): for every model (and speculative) configuration on every shipped GPU, a closed loop of
``C`` users with prompts of ``ctx`` tokens and 512 output tokens (ignore_eos), and per cell the
per-user decode speed (output tokens / E2E of a request), the aggregate tok/s and the mean TTFT.
Only the hardware part changes along a row group: the server settings (efficiencies, fixed step
cost) come from the named profile the model belongs to, so every difference between two GPUs is
bandwidth, compute, NVLink or memory capacity. A deployment that does not start is printed with
the start-up failure the memory model gives; a cell where requests queue in the server (for
their prefill or for KV space) says how many ran on average. Users start 0.25 s apart and warm-up
and window are 60 s each, so that TTFT is the steady state's, not the first wave's.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from loadgen.sim.memory import memory_plan
from loadgen.sim.profile import load_profile
from loadgen.sim.virtual import closed_loop

# (label, named profile the server settings come from, hardware parts to run it on)
DEPLOYMENTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Kimi K2.6 INT4, TP8, AR", "b300x8-kimi-k2.6-ar", ("h100x8", "h200x8", "b200x8", "b300x8")),
    ("Kimi K2.6 INT4, TP8, DDTree", "b300x8-kimi-k2.6-ddtree", ("h100x8", "h200x8", "b200x8", "b300x8")),
    ("Llama-3.1-8B BF16, TP1", "h200-llama-8b", ("h100", "h200", "b200", "b300")),
)
CONTEXTS = (60, 8000)
CONCURRENCIES = (1, 64)
OUTPUT_TOKENS = 512
# users start this far apart, so that C users spread over about one request's lifetime: with fixed
# output lengths and no speculative randomness a closed loop keeps the phase it started with, and
# users that all start together stay a wave whose prompts queue behind each other's prefills
STAGGER_S = 0.25


@dataclass(frozen=True)
class Cell:
    deployment: str
    hardware: str
    context_tokens: int
    concurrency: int
    per_user_tok_s: float | None  # None: does not start
    aggregate_tok_s: float | None
    ttft_ms: float | None
    mean_running: float = 0.0
    note: str = ""


def predict(
    deployments: tuple[tuple[str, str, tuple[str, ...]], ...] = DEPLOYMENTS,
    contexts: tuple[int, ...] = CONTEXTS,
    concurrencies: tuple[int, ...] = CONCURRENCIES,
    warmup_s: float = 60.0,
    window_s: float = 60.0,
) -> list[Cell]:
    """Every cell of the table (deterministic: the virtual clock, seed 0)."""
    cells: list[Cell] = []
    for label, profile_name, hardware in deployments:
        for hw in hardware:
            profile = load_profile(profile_name, hardware=hw)
            failure = memory_plan(profile).failure
            for ctx in contexts:
                for c in concurrencies:
                    if failure is not None:
                        cells.append(Cell(label, hw, ctx, c, None, None, None, note=failure or "memory check"))
                        continue
                    r = closed_loop(
                        profile,
                        c,
                        prompt_tokens=ctx,
                        output_tokens=OUTPUT_TOKENS,
                        stagger_s=STAGGER_S,
                        warmup_s=warmup_s,
                        window_s=window_s,
                    )
                    per_user = OUTPUT_TOKENS / r.mean_e2e_s if r.mean_e2e_s > 0 else None
                    cells.append(Cell(label, hw, ctx, c, per_user, r.output_tok_s, r.mean_ttft_s * 1e3, r.mean_running))
    return cells


def markdown(cells: list[Cell]) -> str:
    """The cells as a markdown table, one row per (deployment, hardware, context), C side by side."""
    concurrencies = sorted({c.concurrency for c in cells})
    head = ["deployment", "GPU", "ctx"]
    for c in concurrencies:
        head += [f"C={c} tok/s per user", f"C={c} tok/s total", f"C={c} TTFT ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 3 + "---:|" * (3 * len(concurrencies))]
    rows: dict[tuple[str, str, int], dict[int, Cell]] = {}
    for cell in cells:
        rows.setdefault((cell.deployment, cell.hardware, cell.context_tokens), {})[cell.concurrency] = cell
    for (label, hw, ctx), by_c in rows.items():
        out = [label, hw, f"{ctx:,}"]
        for c in concurrencies:
            cell = by_c[c]
            if cell.per_user_tok_s is None or cell.aggregate_tok_s is None or cell.ttft_ms is None:
                out += [f"does not start ({cell.note})", "–", "–"]
            else:
                total = f"{cell.aggregate_tok_s:,.0f}"
                if cell.mean_running < 0.95 * c:  # requests wait (for prefill or KV space), not the clients
                    total += f" ({cell.mean_running:.0f} running)"
                out += [f"{cell.per_user_tok_s:,.0f}", total, f"{cell.ttft_ms:,.0f}"]
        lines.append("| " + " | ".join(out) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadgen.sim.predict", description=__doc__.split("\n")[0])
    parser.add_argument("--window-s", type=float, default=60.0, help="measured window per cell (default 60)")
    ns = parser.parse_args(argv)
    print(markdown(predict(window_s=ns.window_s)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
