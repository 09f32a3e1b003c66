"""The model part's shape and the profile error, on their own so that ``profile`` (which resolves a
model part) and ``hfconfig`` (which derives one from a config.json) both import them and not each
other. ``loadgen.sim.profile`` re-exports both."""

from __future__ import annotations

from dataclasses import dataclass


class ProfileError(ValueError):
    """A profile file, part name or override is wrong; the message says which and what to do."""


@dataclass(frozen=True)
class ModelConfig:
    """A model's shape as the step model needs it. Byte counts are for the whole (unsharded) model."""

    name: str = "custom"
    served_name: str = "custom"
    layers: int = 32
    moe_layers: int = 0
    hidden: int = 4096
    vocab: int = 128256
    experts: int = 0  # routed experts per MoE layer (0 = dense)
    experts_active: int = 0  # routed experts per token
    expert_bytes: float = 0.0  # bytes of one routed expert
    streamed_dense_bytes: float = 16.06e9  # non-expert weights read by every forward step
    weight_bytes: float = 16.06e9  # whole checkpoint resident in HBM (node total)
    active_params: float = 8.03e9  # parameters used per token (2 FLOPs each)
    kv_bytes_per_token: int = 131072  # KV cache bytes per token, all layers, whole model
    kv_replicated: bool = False  # True for MLA under TP: each rank keeps the whole latent cache
    attn_flops_per_ctx: float = 16384.0  # attention FLOPs per (query token, context token, layer)
    context_length: int = 131072
    replicated_weight_bytes: float = 0.0  # part of weight_bytes every TP rank holds whole
    intermediate: int = 14336  # dense MLP intermediate size (0 = no dense layer)
    moe_intermediate: int = 0  # intermediate size of one routed expert
    # what a weight format quantizes, and the formats the byte counts above are in (sim/quant.py)
    linear_params: float = 0.0  # attention projections, dense MLPs, shared experts (whole model)
    attention_params: float = 0.0  # the attention projections among them (replicated by DP attention)
    expert_params: float = 0.0  # one routed expert
    linear_format: str = "bf16"
    linear_bits: float = 16.0  # per weight, scales included
    expert_format: str = "bf16"
    expert_bits: float = 16.0
    kv_bits: float = 16.0  # bits of one cached K or V element behind kv_bytes_per_token
