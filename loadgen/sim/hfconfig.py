"""A model part from a Hugging Face ``config.json``: every ``ModelConfig`` field, by formula.

``--model-config`` (``load_profile(..., model=...)``) takes a ``models.toml`` entry, the name of a
config shipped in ``profiles/configs/<name>.json`` (the published config.json cut to the fields read
here, with its sources under ``_source``), or the path of a local ``config.json`` or of the folder
holding one. Nothing is downloaded. The family is ``architectures[0]``, else ``model_type``:

* GQA, dense: ``LlamaForCausalLM``, ``MistralForCausalLM``, ``Qwen2ForCausalLM``, ``Qwen3ForCausalLM``;
* GQA, MoE: ``Qwen2MoeForCausalLM``, ``Qwen3MoeForCausalLM``, ``MixtralForCausalLM``, ``GptOssForCausalLM``;
* MLA, MoE: ``DeepseekV3ForCausalLM`` (DeepSeek-V3; Kimi K2, ``model_type`` ``kimi_k2``).

A wrapper whose own architecture is unknown but whose ``text_config`` is known (Kimi K2.5/K2.6:
``KimiK25ForConditionalGeneration``) is read through its ``text_config``; see ``TOWERS_NOT_COUNTED``.

Notation (config.json fields): h ``hidden_size``, L ``num_hidden_layers``, H ``num_attention_heads``,
K ``num_key_value_heads`` (default H), d ``head_dim`` (default h/H), V ``vocab_size``, I
``intermediate_size``. MoE: E routed experts (``n_routed_experts`` | ``num_experts`` |
``num_local_experts``), k ``num_experts_per_tok`` (gpt-oss also ``experts_per_token``), Ie
``moe_intermediate_size`` (Mixtral and gpt-oss: I). MLA: q ``q_lora_rank`` (may be null), c
``kv_lora_rank``, dr ``qk_rope_head_dim``, dn ``qk_nope_head_dim``, dv ``v_head_dim``.

Parameters, per layer unless said::

    attention, GQA  h*H*d + 2*h*K*d + H*d*h       q, k, v, o projections
                    + H*d + 2*K*d + h             their biases when attention_bias (gpt-oss)
                    + H*d + 2*K*d                 q, k, v biases (Qwen2, Qwen2-MoE: always, no field)
                    + 2*d                         q and k RMSNorm (Qwen3, Qwen3-MoE)
                    + H                           attention sinks (gpt-oss)
    attention, MLA  h*q + q + q*H*(dn+dr)         q down-projection, its norm, q up-projection
                                                  (h*H*(dn+dr) when q_lora_rank is null)
                    + h*(c+dr) + c + c*H*(dn+dv)  joint KV down-projection, its norm, KV up-projection
                    + H*dv*h                      o projection
    norms           2*h                           (and h once: the final norm)
    dense MLP       3*h*I                         gated: gate, up, down (+ 2*I + h when mlp_bias)
    routed expert   3*h*Ie                        (+ 2*Ie + h biases: gpt-oss)
    shared experts  n_shared_experts * 3*h*Ie     DeepSeek; Qwen2-MoE: 3*h*Is + h, Is =
                                                  shared_expert_intermediate_size, with its gate
    router          h*E                           (+ E: gpt-oss bias, DeepSeek noaux_tc correction bias)
    embeddings      V*h input table, + V*h lm_head unless tie_word_embeddings (once)

Which layers are MoE: DeepSeek, ``i >= first_k_dense_replace and i % moe_layer_freq == 0``;
Qwen-MoE, ``i not in mlp_only_layers and (i+1) % decoder_sparse_step == 0``; Mixtral and gpt-oss,
every layer. The others carry the dense MLP. From the counts, for ``ModelConfig``::

    total_params         every parameter above
    active_params        total - V*h (input table) - moe_layers*(E-k)*expert     (ACTIVE_PARAMS)
    streamed params      attention + norms + dense MLP + shared experts + routers + V*h (lm_head)
    expert_bytes         3*h*Ie * bits/8 (+ biases * 2 B); bits from quantization_config (below)
    linear params        attention + dense MLP + shared experts (what a weight format quantizes)
    streamed_dense_bytes streamed params * 2 B - linear * (2 B - linear bits/8)   (WEIGHT_BYTES)
    weight_bytes         (total - moe_layers*E*expert) * 2 B - linear * (2 B - linear bits/8)
                         + moe_layers*E*expert_bytes
    replicated_weight_bytes  2 B * (MLA: L*h*(q+c+dr), or L*h*(c+dr) without q_lora_rank;
                         MoE: + moe_layers*h*E)                               (REPLICATED_WEIGHTS)
    kv_bytes_per_token   GQA: 2*K*d*L*2 B; MLA: (c+dr)*L*2 B and kv_replicated (KV_BYTES; Llama-3.1-8B
                         131,072; DeepSeek-V3 and Kimi K2 70,272)
    attn_flops_per_ctx   per (query token, context token, layer). GQA: 4*H*d (QK^T and PV, 2 FLOPs
                         per multiply-add). MLA in the absorbed form SGLang decodes with: scores over
                         the c+dr latent and values over the c latent, 2*H*(c+dr) + 2*H*c
                         (Kimi K2: 2*64*(512+64+512) = 139,264, the shipped kimi-k2.6 figure)
    hidden, layers, vocab, experts (E), experts_active (k), moe_layers, moe_intermediate (Ie);
    intermediate         I when some layer is dense, else 0
    context_length       max_position_embeddings
    served_name          _name_or_path, else the file's stem (its folder's name for config.json)

Quantization: ``quantization_config`` sizes the routed experts, and the linear weights (attention,
dense MLP, shared experts) unless its ``ignore``/``modules_to_not_convert`` list skips attention
(``CHECKPOINT_LINEAR``); everything else is BF16 (``WEIGHT_BYTES``). ``loadgen sim --set
server.quantization=FORMAT`` serves the model in another format (``sim/quant.py``). Bits per
weight, scales included: ``fp8`` with ``weight_block_size`` [a, b]: 8 + 32/(a*b) (one FP32 scale
per block; DeepSeek-V3, Kimi-K2-Instruct); ``compressed-tensors`` (its first config group's
``weights``): num_bits + scale bits/group_size, scale BF16 for integers (Kimi K2.5 INT4, group 32:
4.5 bits, 24.77 MB an expert) and FP8 for 4-bit floats, plus a zero point per group when not
symmetric (``GROUP_SCALE_BITS``); ``mxfp4``: 4 + 8/32 = 4.25 (E2M1 values, one E8M0 scale per 32;
gpt-oss). Any other method: BF16 (``UNKNOWN_QUANT``).

Sliding-window attention: ``windowed_layers`` of the L layers keep only the last ``sliding_window``
tokens. From ``layer_types`` (entries ``sliding_attention``; gpt-oss: 18 of 36, window 128), else,
for Qwen2/Qwen3 families with ``use_sliding_window``, the layers ``i >= max_window_layers``, else,
for Mistral/Mixtral with a non-null ``sliding_window``, every layer. ``kv_bytes_per_token`` stays the
full-context figure; ``HFModel.kv_bytes_for_context`` gives the windowed one (``WINDOW_NOT_MODELLED``).

Failure modes: ``ProfileError`` naming the file for unreadable or invalid JSON, an unknown
architecture (with the ``ModelConfig`` fields to give instead), fields a formula needs that are
missing or null (all of them named), and values that are not integers (or are 0 where a size must be
positive).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import Enum
from pathlib import Path
from typing import Any, NoReturn

from loadgen.sim.shapes import ModelConfig, ProfileError

CONFIG_DIR = Path(__file__).parent / "profiles" / "configs"

WEIGHT_BYTES = 2
"""ASSUMPTION: every weight ``quantization_config`` does not size is BF16 (2 B), the dtype the
published checkpoints declare (``torch_dtype``/``dtype`` bfloat16) and SGLang serves unquantized
layers in."""

CHECKPOINT_LINEAR = (
    "ASSUMPTION: a checkpoint's quantization_config covers its attention, dense-MLP and shared-expert "
    "projections too unless its ignore (compressed-tensors) or modules_to_not_convert (mxfp4) list names "
    "attention: DeepSeek-V3's and Kimi-K2-Instruct's FP8 has no such list and stores them in FP8; Kimi "
    "K2.5's INT4 and gpt-oss's MXFP4 skip them."
)

KV_BYTES = 2
"""Bytes of one cached K or V element: BF16, SGLang's ``--kv-cache-dtype auto`` for a BF16 model."""

ACTIVE_PARAMS = (
    "ASSUMPTION: active_params counts what a token multiplies by (ModelConfig: 2 FLOPs each), so not "
    "the input embedding table, a gather; lm_head counts. Model cards differ: Llama, Qwen and Mistral "
    "count the table (Llama-3.1-8B 8.03 B = 7.50 B here + 0.53 B), OpenAI does not (gpt-oss-120b 5.1 B)."
)

REPLICATED_WEIGHTS = (
    "ASSUMPTION: the weights every TP rank holds whole are SGLang's ReplicatedLinear layers: the MLA "
    "down-projection (fused_qkv_a_proj_with_mqa) and the MoE router gates; norms are taken as 0 and "
    "KV heads duplicated when TP exceeds num_key_value_heads are not counted (it depends on TP)."
)

WINDOW_NOT_MODELLED = (
    "ASSUMPTION: the step model and the start-up memory plan use kv_bytes_per_token, the full-context "
    "figure, for windowed layers too (an upper bound on their KV bytes and attention FLOPs)."
)

MTP_NOT_COUNTED = (
    "ASSUMPTION: multi-token-prediction layers (num_nextn_predict_layers; DeepSeek-V3: one, 14 B) are "
    "not counted: SGLang loads them only as the draft model of speculative decoding (a spec part)."
)

TOWERS_NOT_COUNTED = (
    "ASSUMPTION: a multimodal wrapper is sized by its text_config; the vision tower and projector "
    "(Kimi K2.5: MoonViT, ~0.4 B parameters, <0.2 % of the weights) are not counted."
)

UNKNOWN_QUANT = "ASSUMPTION: a quant_method other than fp8, compressed-tensors and mxfp4 is sized as BF16."

GROUP_SCALE_BITS = {"int": 16, "float": 8}
"""Bits of one group scale in compressed-tensors checkpoints: BF16 for integer weights (Kimi K2.5's
INT4, group 32: 4 + 16/32 = 4.5 bits a weight, the "~4.5 bpp" of its quantized derivatives), FP8
E4M3 for 4-bit floats (NVFP4, group 16). ASSUMPTION: a non-symmetric scheme adds a zero point of the
scale's size per group."""


class Attention(Enum):
    GQA = "GQA"  # grouped-query attention (multi-head and multi-query as its limits)
    MLA = "MLA"  # multi-head latent attention (DeepSeek-V2/V3, Kimi K2)


class MoeLayout(Enum):
    DENSE = "dense"  # no routed experts
    EVERY_LAYER = "every layer"  # Mixtral, gpt-oss
    DEEPSEEK = "first_k_dense_replace, moe_layer_freq"
    QWEN = "decoder_sparse_step, mlp_only_layers"


class Window(Enum):
    """Which layers a non-null ``sliding_window`` applies to when the config has no ``layer_types``."""

    NONE = "none"
    QWEN = "use_sliding_window, layers from max_window_layers on"
    EVERY_LAYER = "every layer"


@dataclass(frozen=True)
class Family:
    """What the formulas need to know about one architecture beyond its config fields."""

    attention: Attention
    moe: MoeLayout
    qkv_bias: bool = False  # q, k, v biases whatever attention_bias says (Qwen2)
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3)
    sinks: bool = False  # one learned attention sink per head (gpt-oss)
    expert_biases: bool = False  # routed experts and router carry biases (gpt-oss)
    expert_width: str = "moe_intermediate_size"  # config field of one routed expert's width
    window: Window = Window.NONE


FAMILIES: dict[str, Family] = {
    "LlamaForCausalLM": Family(Attention.GQA, MoeLayout.DENSE),
    "MistralForCausalLM": Family(Attention.GQA, MoeLayout.DENSE, window=Window.EVERY_LAYER),
    "Qwen2ForCausalLM": Family(Attention.GQA, MoeLayout.DENSE, qkv_bias=True, window=Window.QWEN),
    "Qwen3ForCausalLM": Family(Attention.GQA, MoeLayout.DENSE, qk_norm=True, window=Window.QWEN),
    "Qwen2MoeForCausalLM": Family(Attention.GQA, MoeLayout.QWEN, qkv_bias=True, window=Window.QWEN),
    "Qwen3MoeForCausalLM": Family(Attention.GQA, MoeLayout.QWEN, qk_norm=True, window=Window.QWEN),
    "MixtralForCausalLM": Family(
        Attention.GQA, MoeLayout.EVERY_LAYER, expert_width="intermediate_size", window=Window.EVERY_LAYER
    ),
    "GptOssForCausalLM": Family(
        Attention.GQA, MoeLayout.EVERY_LAYER, sinks=True, expert_biases=True, expert_width="intermediate_size"
    ),
    "DeepseekV3ForCausalLM": Family(Attention.MLA, MoeLayout.DEEPSEEK),
}
MODEL_TYPES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "gpt_oss": "GptOssForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
    "kimi_k2": "DeepseekV3ForCausalLM",
}


@dataclass(frozen=True)
class ExpertFormat:
    """How routed-expert weights are stored: ``bits_per_weight`` includes the scales."""

    name: str
    bits_per_weight: float
    key: str = "bf16"  # the format's name in sim/quant.py (what it computes in), or a name of its own


BF16 = ExpertFormat("bf16", 16.0)


@dataclass(frozen=True)
class HFModel:
    """A model derived from a config.json: parameter counts by part, and the ``ModelConfig`` fields.

    Counts are whole-model parameters; ``expert_params`` and ``expert_bias_params`` are one routed
    expert's. ``embedding_params`` is the input table (V*h), ``lm_head_params`` the separate output
    matrix (0 when tied)."""

    source: str
    architecture: str
    served_name: str
    attention: Attention
    layers: int
    moe_layers: int
    hidden: int
    vocab: int
    heads: int
    experts: int
    experts_active: int
    intermediate: int
    moe_intermediate: int
    context_length: int
    attention_params: int
    norm_params: int
    dense_mlp_params: int
    shared_expert_params: int
    router_params: int
    expert_params: int
    expert_bias_params: int
    embedding_params: int
    lm_head_params: int
    replicated_params: int
    expert_format: ExpertFormat
    kv_bytes_per_layer_token: int
    attn_flops_per_ctx: float
    windowed_layers: int = 0
    sliding_window: int = 0
    linear_format: ExpertFormat = BF16  # attention, dense MLP and shared-expert weights (CHECKPOINT_LINEAR)

    @property
    def linear_params(self) -> int:
        """The non-expert weights a format quantizes: attention projections, dense MLPs, shared experts."""
        return self.attention_params + self.dense_mlp_params + self.shared_expert_params

    @property
    def _linear_saving(self) -> float:
        """Bytes the linear weights' format saves against BF16."""
        return self.linear_params * (WEIGHT_BYTES - self.linear_format.bits_per_weight / 8)

    @property
    def routed_params(self) -> int:
        return self.moe_layers * self.experts * (self.expert_params + self.expert_bias_params)

    @property
    def total_params(self) -> int:
        return self.non_expert_params + self.routed_params

    @property
    def non_expert_params(self) -> int:
        """Everything but the routed experts: resident in BF16 (``WEIGHT_BYTES``)."""
        return self.streamed_params - self.hidden * self.vocab + self.embedding_params + self.lm_head_params

    @property
    def streamed_params(self) -> int:
        """What every forward reads whatever the routing: all but the routed experts and the input
        table, of which a step reads only its tokens' rows; lm_head is V*h, tied or not."""
        return (
            self.attention_params
            + self.norm_params
            + self.dense_mlp_params
            + self.shared_expert_params
            + self.router_params
            + self.vocab * self.hidden
        )

    @property
    def active_params(self) -> int:
        """Parameters a token multiplies by (``ACTIVE_PARAMS``)."""
        return self.streamed_params + self.moe_layers * self.experts_active * (
            self.expert_params + self.expert_bias_params
        )

    @property
    def expert_bytes(self) -> float:
        return self.expert_params * self.expert_format.bits_per_weight / 8 + self.expert_bias_params * WEIGHT_BYTES

    @property
    def weight_bytes(self) -> float:
        return (
            self.non_expert_params * WEIGHT_BYTES
            - self._linear_saving
            + self.moe_layers * self.experts * self.expert_bytes
        )

    @property
    def kv_replicated(self) -> bool:
        return self.attention is Attention.MLA

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes of one token held at full context, every layer (``WINDOW_NOT_MODELLED``)."""
        return self.kv_bytes_per_layer_token * self.layers

    def kv_bytes_for_context(self, tokens: int) -> int:
        """KV bytes of one request holding ``tokens`` tokens: windowed layers keep at most
        ``sliding_window`` of them."""
        windowed = min(tokens, self.sliding_window) if self.windowed_layers else 0
        full = self.layers - self.windowed_layers
        return self.kv_bytes_per_layer_token * (full * tokens + self.windowed_layers * windowed)

    def model_config(self, name: str) -> ModelConfig:
        """The ``ModelConfig`` the simulator uses; ``name`` is the part's name."""
        return ModelConfig(
            name=name,
            served_name=self.served_name,
            layers=self.layers,
            moe_layers=self.moe_layers,
            hidden=self.hidden,
            vocab=self.vocab,
            experts=self.experts,
            experts_active=self.experts_active,
            expert_bytes=self.expert_bytes,
            streamed_dense_bytes=float(self.streamed_params * WEIGHT_BYTES - self._linear_saving),
            weight_bytes=self.weight_bytes,
            active_params=float(self.active_params),
            kv_bytes_per_token=self.kv_bytes_per_token,
            kv_replicated=self.kv_replicated,
            attn_flops_per_ctx=self.attn_flops_per_ctx,
            context_length=self.context_length,
            replicated_weight_bytes=float(self.replicated_params * WEIGHT_BYTES),
            intermediate=self.intermediate,
            moe_intermediate=self.moe_intermediate,
            linear_params=float(self.linear_params),
            attention_params=float(self.attention_params),
            expert_params=float(self.expert_params) if self.experts else 0.0,
            linear_format=self.linear_format.key,
            linear_bits=self.linear_format.bits_per_weight,
            expert_format=self.expert_format.key if self.experts else "bf16",
            expert_bits=self.expert_format.bits_per_weight if self.experts else 16.0,
        )


def shipped_config_names() -> list[str]:
    """Names of the configs shipped in ``profiles/configs/`` (``<name>.json``)."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.json"))


def model_from_file(path: str | Path, *, name: str | None = None) -> ModelConfig:
    """The ``ModelConfig`` of the config.json at ``path`` (a folder means its ``config.json``);
    ``name`` defaults to the path as given. Raises ProfileError naming the file."""
    return read_config(path).model_config(name or str(path))


def read_config(path: str | Path) -> HFModel:
    """Derive an ``HFModel`` from the config.json at ``path`` (see the module docstring)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ProfileError(f"{path}: file not found; give the path of a Hugging Face config.json") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProfileError(f"{path}: not a readable JSON file: {exc}") from exc
    if not isinstance(cfg, dict):
        raise ProfileError(f"{path}: expected a JSON object (a Hugging Face config.json)")
    fallback = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return derive(cfg, where=str(path), served_name=str(cfg.get("_name_or_path") or fallback))


def derive(cfg: Mapping[str, Any], *, where: str, served_name: str) -> HFModel:
    """Derive an ``HFModel`` from a parsed config.json; ``where`` names it in errors."""
    arch, family, text = _family(cfg, where)
    r = _Reader(text, where, arch)
    h = r.need("hidden_size")
    layers = r.need("num_hidden_layers")
    heads = r.need("num_attention_heads")
    vocab = r.need("vocab_size")
    context = r.need("max_position_embeddings")
    moe = family.moe is not MoeLayout.DENSE
    experts = r.need_any("n_routed_experts", "num_experts", "num_local_experts") if moe else 0
    k = r.need_any("num_experts_per_tok", "experts_per_token") if moe else 0
    ie = r.need(family.expert_width) if moe else 0
    moe_layers = sum(_moe_flags(r, family.moe, layers))
    dense_width = r.need("intermediate_size") if moe_layers < layers else 0
    shared, shared_replicated = _shared_experts(r, family, h, ie)
    attn, attn_replicated, kv_per_layer, attn_flops = _attention(r, family, h, heads)
    r.check()  # every formula's fields were read above: one error names all that are missing
    sizes = {"hidden_size": h, "num_hidden_layers": layers, "num_attention_heads": heads, "vocab_size": vocab}
    for key, value in sizes.items():
        if value <= 0:
            raise ProfileError(f"{where}: field {key!r} is {value}; expected a positive integer")
    if moe and not 0 < k <= experts:
        raise ProfileError(f"{where}: num_experts_per_tok {k} must be between 1 and the {experts} routed experts")
    tied = bool(text.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False)))
    mlp_bias = 2 * dense_width + h if text.get("mlp_bias") else 0
    router_bias = experts if family.expert_biases or text.get("topk_method") == "noaux_tc" else 0
    windowed, window = _windowed_layers(text, family, layers)
    quant = text.get("quantization_config") or cfg.get("quantization_config")
    fmt = _expert_format(quant)
    return HFModel(
        source=where,
        architecture=arch,
        served_name=served_name,
        attention=family.attention,
        layers=layers,
        moe_layers=moe_layers,
        hidden=h,
        vocab=vocab,
        heads=heads,
        experts=experts,
        experts_active=k,
        intermediate=dense_width,
        moe_intermediate=ie,
        context_length=context,
        attention_params=layers * attn,
        norm_params=2 * h * layers + h,
        dense_mlp_params=(layers - moe_layers) * (3 * h * dense_width + mlp_bias),
        shared_expert_params=moe_layers * shared,
        router_params=moe_layers * (h * experts + router_bias),
        expert_params=3 * h * ie,
        expert_bias_params=(2 * ie + h) if family.expert_biases and moe else 0,
        embedding_params=vocab * h,
        lm_head_params=0 if tied else vocab * h,
        replicated_params=layers * attn_replicated + moe_layers * (h * experts + shared_replicated),
        expert_format=fmt if moe else BF16,
        linear_format=fmt if _quantizes_linear(quant) else BF16,
        kv_bytes_per_layer_token=kv_per_layer,
        attn_flops_per_ctx=attn_flops,
        windowed_layers=windowed,
        sliding_window=window,
    )


class _Reader:
    """Reads integer fields of one config, collecting every missing one for a single error."""

    def __init__(self, cfg: Mapping[str, Any], where: str, arch: str) -> None:
        self.cfg, self.where, self.arch = cfg, where, arch
        self.missing: list[str] = []

    def need(self, key: str, default: int | None = None) -> int:
        value = self.cfg.get(key)
        if value is None:
            if default is not None:
                return default
            self.missing.append(key)
            return 1
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ProfileError(f"{self.where}: field {key!r} is {value!r}; expected a non-negative integer")
        return value

    def need_any(self, *keys: str) -> int:
        for key in keys:
            if self.cfg.get(key) is not None:
                return self.need(key)
        self.missing.append(" or ".join(keys))
        return 1

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def check(self) -> None:
        if self.missing:
            raise ProfileError(
                f"{self.where}: {self.arch} needs {', '.join(self.missing)} (missing or null); give these fields "
                "in the file, or use a models.toml entry and give the model's shape with --set model.FIELD=VALUE"
            )


def _family(cfg: Mapping[str, Any], where: str) -> tuple[str, Family, Mapping[str, Any]]:
    """The architecture, its family and the mapping holding its fields (``text_config`` for a wrapper)."""
    archs = cfg.get("architectures") or []
    names = [str(a) for a in archs] if isinstance(archs, list) else [str(archs)]
    for arch in names:
        if arch in FAMILIES:
            return arch, FAMILIES[arch], cfg
    model_type = str(cfg.get("model_type", ""))
    if model_type in MODEL_TYPES:
        arch = MODEL_TYPES[model_type]
        return arch, FAMILIES[arch], cfg
    text = cfg.get("text_config")
    if isinstance(text, dict):
        try:
            arch, family, _ = _family(text, where)
        except ProfileError:
            pass
        else:
            return arch, family, text
    shown = ", ".join(names) or "none"
    given = [f.name for f in fields(ModelConfig) if f.name not in ("name", "served_name")]
    raise ProfileError(
        f"{where}: architecture {shown} (model_type {model_type or 'none'!r}) is not one loadgen derives a "
        f"model from; known: {', '.join(FAMILIES)}. Use the models.toml entry closest to it and give this "
        f"model's fields with --set model.FIELD=VALUE: {', '.join(given)}"
    )


def _moe_flags(r: _Reader, layout: MoeLayout, layers: int) -> list[bool]:
    """Per layer: does it carry routed experts (module docstring, "Which layers are MoE")."""
    if layout is MoeLayout.DENSE:
        return [False] * layers
    if layout is MoeLayout.EVERY_LAYER:
        return [True] * layers
    if layout is MoeLayout.DEEPSEEK:
        first, freq = r.need("first_k_dense_replace"), max(1, r.need("moe_layer_freq", 1))
        return [i >= first and i % freq == 0 for i in range(layers)]
    if layout is MoeLayout.QWEN:
        step = max(1, r.need("decoder_sparse_step", 1))
        dense = r.cfg.get("mlp_only_layers") or []
        return [i not in dense and (i + 1) % step == 0 for i in range(layers)]
    _unreachable(layout)


def _shared_experts(r: _Reader, family: Family, h: int, ie: int) -> tuple[int, int]:
    """Shared-expert parameters of one MoE layer, and how many of them are replicated (a gate)."""
    if family.moe is MoeLayout.DEEPSEEK:
        return r.need("n_shared_experts") * 3 * h * ie, 0
    if r.has("shared_expert_intermediate_size"):  # Qwen2-MoE: one wide shared expert behind a sigmoid gate
        width = r.need("shared_expert_intermediate_size")
        return (3 * h * width + h, h) if width else (0, 0)
    return 0, 0


def _attention(r: _Reader, family: Family, h: int, heads: int) -> tuple[int, int, int, float]:
    """One layer's attention: parameters, replicated parameters, KV bytes per token, FLOPs per
    (query, context token)."""
    kind = family.attention
    if kind is Attention.GQA:
        kv = r.need("num_key_value_heads", heads)
        d = r.need("head_dim", h // heads if heads else 1)
        params = h * heads * d + 2 * h * kv * d + heads * d * h
        if r.cfg.get("attention_bias"):
            params += heads * d + 2 * kv * d + h
        elif family.qkv_bias:
            params += heads * d + 2 * kv * d
        params += 2 * d if family.qk_norm else 0
        params += heads if family.sinks else 0
        return params, 0, 2 * kv * d * KV_BYTES, 4.0 * heads * d
    if kind is Attention.MLA:
        c, dr = r.need("kv_lora_rank"), r.need("qk_rope_head_dim")
        dn, dv = r.need("qk_nope_head_dim"), r.need("v_head_dim")
        if "q_lora_rank" not in r.cfg:
            r.missing.append("q_lora_rank (null when q is not low-rank)")
        q = r.need("q_lora_rank", 0)
        q_params = h * q + q + q * heads * (dn + dr) if q else h * heads * (dn + dr)
        params = q_params + h * (c + dr) + c + c * heads * (dn + dv) + heads * dv * h
        replicated = h * (q + c + dr)  # SGLang's fused_qkv_a_proj_with_mqa (kv_a_proj_with_mqa without q)
        return params, replicated, (c + dr) * KV_BYTES, 2.0 * heads * (2 * c + dr)
    _unreachable(kind)


def _windowed_layers(cfg: Mapping[str, Any], family: Family, layers: int) -> tuple[int, int]:
    """How many layers use sliding-window attention, and the window (tokens); (0, 0) for none."""
    window = cfg.get("sliding_window")
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        return 0, 0
    types = cfg.get("layer_types")
    if isinstance(types, list):
        count = sum(1 for t in types if t == "sliding_attention")
    elif family.window is Window.NONE:
        count = 0
    elif family.window is Window.QWEN:
        start = min(layers, int(cfg.get("max_window_layers") or 0))
        count = layers - start if cfg.get("use_sliding_window") else 0
    elif family.window is Window.EVERY_LAYER:
        count = layers
    else:
        _unreachable(family.window)
    return (count, window) if count else (0, 0)


def _expert_format(quant: Any) -> ExpertFormat:
    """Bits per routed-expert weight from ``quantization_config`` (module docstring)."""
    if not isinstance(quant, dict) or not quant:
        return BF16
    method = str(quant.get("quant_method", ""))
    if method == "fp8":
        block = quant.get("weight_block_size")
        if isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block):
            return ExpertFormat(
                f"fp8, fp32 scale per {block[0]}x{block[1]} block", 8 + 32 / (block[0] * block[1]), "fp8"
            )
        return ExpertFormat("fp8, per-tensor scale", 8.0, "fp8")
    if method == "mxfp4":
        return ExpertFormat("mxfp4 (e2m1, e8m0 scale per 32)", 4 + 8 / 32, "mxfp4")
    if method == "compressed-tensors":
        groups = quant.get("config_groups") or {}
        for group in groups.values() if isinstance(groups, dict) else []:
            weights = group.get("weights") if isinstance(group, dict) else None
            if isinstance(weights, dict) and isinstance(weights.get("num_bits"), int):
                bits, kind = weights["num_bits"], str(weights.get("type", "int"))
                size = weights.get("group_size")
                known: dict[tuple[str, int, Any], str] = {
                    ("int", 4, 32): "int4-g32",
                    ("int", 4, 128): "int4",
                    ("float", 4, 16): "nvfp4",
                }
                key = known.get((kind, bits, size), f"{kind}{bits}")
                if not isinstance(size, int) or size <= 0:
                    return ExpertFormat(f"{kind}{bits} (compressed-tensors)", float(bits), key)
                scale = GROUP_SCALE_BITS.get(kind, 16) * (1 if weights.get("symmetric", True) else 2)
                return ExpertFormat(f"{kind}{bits}, group {size} (compressed-tensors)", bits + scale / size, key)
    return BF16


def _quantizes_linear(quant: Any) -> bool:
    """Does the checkpoint store attention, dense and shared-expert weights in its format too
    (``CHECKPOINT_LINEAR``)?"""
    if not isinstance(quant, dict) or not quant:
        return False
    skipped = quant.get("ignore") or quant.get("modules_to_not_convert") or []
    return not any("attn" in str(pattern) for pattern in (skipped if isinstance(skipped, list) else []))


def _unreachable(value: NoReturn) -> NoReturn:
    raise AssertionError(f"unhandled member {value!r}")
