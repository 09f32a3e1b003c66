"""Fit the simulator's generic engine constants to a step probe measured on a real GPU, and print
the step model beside every measured step.

``benchmarks/gpu/step_probe.py`` timed bare forwards of Llama-3.1-8B (BF16) and Llama-3.3-70B (FP8)
shapes on an H200: decode steps of 1-256 requests at 256-16,384 tokens of context under CUDA graphs,
and prefills of 512-8,192 tokens. This fits the four constants of the step model
(loadgen/sim/model.py) that are the GPU's and its kernels' rather than an engine's -- ``eta_bw``,
``eta_attn``, ``eta_c``, ``t_fix_per_layer_us`` and ``roofline_k`` (how far memory and compute time
overlap) -- by least squares on the log of the step
times, through the step model itself (StepModel, the shipped model and hardware parts), and prints
them with each step's error. The ``generic`` profile (loadgen/sim/profiles/generic.toml) holds the
result, frozen; ``loadgen predict`` starts from it.

    PYTHONPATH=. .venv/bin/python benchmarks/gpu/fit_step_probe.py [RESULT.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from loadgen.sim.model import StepModel
from loadgen.sim.profile import Profile, apply_overrides, load_profile

DEFAULT = Path(__file__).parent / "results" / "step_probe_h200_2026-12-04.json"
HOLDOUT = Path(__file__).parent / "results" / "step_probe_h200_holdout_2026-12-04.json"
PARTS = {
    "qwen3-32b-bf16": ("qwen3-32b", {}),
    "llama-8b-bf16": ("llama-3.1-8b", {}),
    "llama-70b-fp8": ("llama-3.3-70b-instruct", {"server.quantization": "fp8"}),
}
NAMES = ("eta_bw", "eta_attn", "eta_c", "t_fix_per_layer_us", "roofline_k")


def profiles(hardware: str) -> dict[str, Profile]:
    out = {}
    for key, (model, fields) in PARTS.items():
        p = load_profile("generic", model=model, hardware=hardware)
        out[key] = apply_overrides(p, dict(fields))
    return out


def step_s(p: Profile, x: np.ndarray, point: dict) -> float:
    fields = dict(zip(NAMES, (float(v) for v in x), strict=True))
    fields["t_fix_ms"] = 0.0
    fields["t_fix_prefill_ms"] = 0.0
    return model_s(StepModel(apply_overrides(p, {f"server.{k}": v for k, v in fields.items()})), point)


def model_s(m: StepModel, point: dict) -> float:
    """The step model's time for one probed step (a decode of ``batch`` requests at ``ctx`` tokens
    each, or a causal prefill of ``tokens``)."""
    if point["kind"] == "decode":
        return m.decode(point["batch"], point["batch"] * point["ctx"]).duration_s
    t = point["tokens"]
    return m.prefill(t, t * (t + 1) / 2).duration_s


def fit(result: dict, hardware: str = "h200") -> tuple[np.ndarray, list[tuple[dict, float]]]:
    parts = profiles(hardware)
    points = result["points"]

    def residuals(x: np.ndarray) -> list[float]:
        return [float(np.log(step_s(parts[p["model"]], x, p) / (p["ms_median"] / 1e3))) for p in points]

    sol = least_squares(
        residuals, [0.8, 0.8, 0.5, 30.0, 4.0], bounds=([0.3, 0.3, 0.2, 0.0, 1.0], [1.0, 1.2, 1.0, 200.0, 50.0])
    )
    return sol.x, [(p, step_s(parts[p["model"]], sol.x, p)) for p in points]


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    result = json.loads(path.read_text())
    x, rows = fit(result)
    print(
        f"probe: {path.name} on {result['gpu']} (torch {result['torch']}): copy {result['copy_tb_s']:.2f} TB/s, "
        f"BF16 GEMM {result['bf16_gemm_tflops']:.0f} TFLOP/s, FP8 GEMM {result.get('fp8_gemm_tflops', 0):.0f} TFLOP/s"
    )
    print("fit: " + ", ".join(f"{n} = {v:.3g}" for n, v in zip(NAMES, x, strict=True)))
    print(
        f"{'model':14s} {'kind':7s} {'batch':>5s} {'ctx/tok':>7s} {'measured ms':>11s} {'model ms':>9s} {'error':>7s}"
    )
    errs = []
    for p, pred in rows:
        e = pred / (p["ms_median"] / 1e3) - 1
        errs.append(abs(e))
        print(
            f"{p['model']:14s} {p['kind']:7s} {p['batch']:5d} {p['ctx']:7d} {p['ms_median']:11.2f}"
            f" {pred * 1e3:9.2f} {e:+7.1%}"
        )
    print(f"median |error| {np.median(errs):.1%}, max {max(errs):.1%} over {len(errs)} steps")
    if HOLDOUT.exists() and path == DEFAULT:
        # steps the fit never saw (Qwen3-32B's shape, step_probe.py --holdout-only), under the shipped
        # generic constants as they are
        held = json.loads(HOLDOUT.read_text())
        parts = profiles("h200")
        print(f"held out: {HOLDOUT.name}, the shipped generic profile")
        for p in held["points"]:
            t = model_s(StepModel(parts[p["model"]]), p)
            e = t / (p["ms_median"] / 1e3) - 1
            print(
                f"{p['model']:14s} {p['kind']:7s} {p['batch']:5d} {p['ctx']:7d} {p['ms_median']:11.2f}"
                f" {t * 1e3:9.2f} {e:+7.1%}"
            )


if __name__ == "__main__":
    main()
