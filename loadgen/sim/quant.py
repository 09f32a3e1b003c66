"""Weight and KV-cache formats: how many bytes a served model moves, and at which peak its math runs.

The server flags are SGLang's and vLLM's own: ``server.quantization`` (``--quantization``; empty = the
checkpoint's formats, as the config.json's ``quantization_config`` gives them) and
``server.kv_cache_dtype`` (``--kv-cache-dtype``: ``auto`` keeps the model's BF16 cache, ``fp8``,
``fp8_e4m3`` or ``fp8_e5m2`` halve it). A format applies to the weights a model part names as
quantizable: ``linear_params`` (attention projections, dense MLPs, shared experts) and
``expert_params`` (one routed expert); the input table, ``lm_head``, norms and router gates stay BF16
(``UNQUANTIZED``). The model part records the formats its bytes are in (``linear_format``/``linear_bits``,
``expert_format``/``expert_bits``, ``kv_bits``), so :func:`serve_as` re-sizes it by difference and any part that
gives those counts can be served in any format.

Formats (bits per weight, scales included; ``math``: the tensor-core precision the matmul runs in
when the GPU has it, else the weights are dequantized to BF16 in the kernel, ``WEIGHT_ONLY``):

    bf16      16                                         math bf16
    fp8       8 + 32/(128*128) (FP32 scale per 128x128 block; per-channel scales are as small)
                                                         math fp8 (Hopper and later)
    nvfp4     4 + 8/16 (E4M3 scale per 16 values)        math fp4 (Blackwell)
    mxfp4     4 + 8/32 (E8M0 scale per 32 values)        math fp4 (Blackwell, MI355X)
    int4      4 + 16/128 (BF16 scale per group of 128: AWQ/GPTQ, W4A16)   always weight-only
    int4-g32  4 + 16/32 (Kimi K2's QAT experts, compressed-tensors)       always weight-only
    int8      8 + 16/128 (W8A16)                                            always weight-only

The step model (``model.py``) runs each class of FLOPs at its own peak: routed experts and the
linear layers at their format's, attention, ``lm_head`` and routers at BF16. A weight-only format
reads its packed bytes and computes at ``eta_c * bf16_tflops * server.weight_only_eff``.

A peak is the spec sheet's, scaled by :func:`gemm_share` where the GPU's largest GEMM was measured
(``gemm_bf16_tflops``, ``gemm_fp8_tflops`` in hardware.toml): ``eta_c`` was fitted on an H200 whose
cuBLAS GEMMs reach 79 % (BF16) and 72 % (FP8) of the spec, and a GPU whose own library reaches a
smaller share of its spec (the MI300X: 54 % and 49 %, AMD's measurement) runs its matmuls that much
slower. A GPU with no measurement keeps the H200's share (ASSUMPTION).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from loadgen.sim.shapes import ModelConfig, ProfileError

if TYPE_CHECKING:  # pragma: no cover
    from loadgen.sim.profile import Hardware


@dataclass(frozen=True)
class Format:
    name: str
    bits: float  # per weight, scales included
    math: str  # "bf16", "fp8", "fp4" (tensor-core precision when the GPU has it) or "int" (none)
    what: str


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("bf16", 16.0, "bf16", "BF16 (unquantized)"),
        Format("fp8", 8.0 + 32.0 / (128 * 128), "fp8", "FP8 E4M3, W8A8, block or per-channel scales"),
        Format("nvfp4", 4.0 + 8.0 / 16, "fp4", "NVFP4: E2M1 values, an E4M3 scale per 16 (W4A4)"),
        Format("mxfp4", 4.0 + 8.0 / 32, "fp4", "MXFP4: E2M1 values, an E8M0 scale per 32"),
        Format("int4", 4.0 + 16.0 / 128, "int", "INT4 weight-only, group 128 (AWQ/GPTQ, W4A16)"),
        Format("int4-g32", 4.0 + 16.0 / 32, "int", "INT4 weight-only, group 32 (compressed-tensors)"),
        Format("int8", 8.0 + 16.0 / 128, "int", "INT8 weight-only, group 128 (W8A16)"),
    )
}
ALIASES = {"": "", "none": "bf16", "bfloat16": "bf16", "fp16": "bf16", "w4a16": "int4", "awq": "int4", "gptq": "int4"}

KV_DTYPES = {"auto": 16.0, "bf16": 16.0, "bfloat16": 16.0, "fp8": 8.0, "fp8_e4m3": 8.0, "fp8_e5m2": 8.0}

UNQUANTIZED = (
    "ASSUMPTION: --quantization quantizes the linear layers (attention projections, dense MLPs, shared "
    "and routed experts); the input table, lm_head, norms and MoE router gates stay BF16, as SGLang's and "
    "vLLM's fp8 and AWQ/GPTQ paths leave them."
)
WEIGHT_ONLY = (
    "ASSUMPTION: a format without tensor-core math on the GPU (INT4/INT8 weight-only anywhere, FP8 on "
    "Ampere, FP4 before Blackwell) is dequantized to BF16 inside the GEMM (Marlin-class kernels): it "
    "moves its packed bytes, and its FLOPs run at server.weight_only_eff of the BF16 rate (the kernels "
    "overlap dequantization with the loads, so decode keeps the bandwidth gain; large batches pay the "
    "vector-unit work)."
)
SAME_ETA = "ASSUMPTION: FP8 and FP4 GEMMs reach the same share (eta_c) of their peak as BF16 ones."


def format_of(name: str, where: str = "server.quantization") -> Format:
    key = ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in FORMATS:
        raise ProfileError(
            f"{where} {name!r}: not a weight format loadgen knows; give one of {', '.join(FORMATS)} "
            "(or leave it empty for the checkpoint's own)"
        )
    return FORMATS[key]


def kv_bits(dtype: str) -> float:
    key = dtype.strip().lower()
    if key not in KV_DTYPES:
        raise ProfileError(f"server.kv_cache_dtype {dtype!r}: give one of {', '.join(KV_DTYPES)}")
    return KV_DTYPES[key]


# The calibration GPU's largest measured GEMM over its spec: the H200 of benchmarks/gpu/step_probe.py
# (2026-12-04, cuBLAS through PyTorch at 8192^3: BF16 783 of 989, FP8 1,419 of 1,979 TFLOP/s), on
# which the generic profile's eta_c was fitted (docs/simulator.md, "One set of constants").
CALIBRATION_GEMM_SHARE = {"bf16": 783.0 / 989.0, "fp8": 1419.0 / 1979.0}


def gemm_share(hw: Hardware, math: str) -> float:
    """How much of the calibration GPU's share of the spec a GEMM in ``math`` reaches on ``hw``: its
    measured largest GEMM over its spec, over the H200's (1.0 where ``hw`` has no measurement)."""
    measured, spec = {
        "bf16": (hw.gemm_bf16_tflops, hw.bf16_tflops),
        "fp8": (hw.gemm_fp8_tflops, hw.fp8_tflops),
    }.get(math, (0.0, 0.0))
    if measured <= 0 or spec <= 0:
        return 1.0
    return measured / spec / CALIBRATION_GEMM_SHARE[math]


def peak_tflops(hw: Hardware, math: str, weight_only_eff: float) -> float:
    """Dense tensor FLOP/s (1e12) a GEMM in ``math`` reaches at peak on ``hw`` (``WEIGHT_ONLY``), the
    spec sheet's scaled by :func:`gemm_share`."""
    if math == "fp8" and hw.fp8_tflops > 0:
        return hw.fp8_tflops * gemm_share(hw, "fp8")
    if math == "fp4" and hw.fp4_tflops > 0:
        return hw.fp4_tflops
    if math == "bf16":
        return hw.bf16_tflops * gemm_share(hw, "bf16")
    return hw.bf16_tflops * gemm_share(hw, "bf16") * weight_only_eff


def serve_as(model: ModelConfig, quantization: str, kv_cache_dtype: str) -> ModelConfig:
    """``model`` with its quantizable weights in ``quantization`` (empty: as they are) and its KV
    cache in ``kv_cache_dtype``; byte counts re-sized by difference from the formats it records."""
    kv = kv_bits(kv_cache_dtype)
    changes: dict[str, object] = {}
    if kv != model.kv_bits:
        changes["kv_bytes_per_token"] = round(model.kv_bytes_per_token * kv / model.kv_bits)
        changes["kv_bits"] = kv
    if quantization.strip():
        fmt = format_of(quantization)
        if model.linear_params <= 0 and model.expert_params <= 0:
            raise ProfileError(
                f"model part {model.name!r} does not say which of its weights a format quantizes (model.linear_params, "
                "model.expert_params); serve a model derived from its config.json (--model-config NAME or PATH) or "
                "give those two fields"
            )
        d_lin = model.linear_params * (fmt.bits - model.linear_bits) / 8.0
        d_exp = model.expert_params * (fmt.bits - model.expert_bits) / 8.0 if model.experts else 0.0
        changes.update(
            streamed_dense_bytes=model.streamed_dense_bytes + d_lin,
            expert_bytes=model.expert_bytes + d_exp,
            weight_bytes=model.weight_bytes + d_lin + model.moe_layers * model.experts * d_exp,
            linear_format=fmt.name,
            linear_bits=fmt.bits,
        )
        if model.experts:
            changes.update(expert_format=fmt.name, expert_bits=fmt.bits)
    return replace(model, **changes) if changes else model  # type: ignore[arg-type]


def math_of(format_name: str) -> str:
    """The tensor-core precision a recorded format computes in (``int`` for one loadgen does not
    name: weight-only)."""
    fmt = FORMATS.get(format_name)
    return fmt.math if fmt else "int"


def describe(model: ModelConfig) -> str:
    """The formats a served model part is in, in words: ``weights fp8 (experts int4-g32), KV 8-bit``."""
    experts = (
        f" (routed experts {model.expert_format})"
        if model.experts and model.expert_format != model.linear_format
        else ""
    )
    return f"weights {model.linear_format}{experts}, KV cache {int(model.kv_bits)}-bit"
