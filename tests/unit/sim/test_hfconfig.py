"""Models from a Hugging Face config.json: derived parameter counts against the published ones, KV
and attention figures exact, agreement with the hand-written models.toml entries, precise errors."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from loadgen.sim import hfconfig
from loadgen.sim.hfconfig import CONFIG_DIR, read_config, shipped_config_names
from loadgen.sim.memory import memory_plan
from loadgen.sim.profile import ProfileError, load_part, load_profile, load_profile_file


@dataclass(frozen=True)
class Published:
    total: float
    active: float | None  # None: not published (dense models: all of them)
    # Model cards differ on whether the input embedding table counts as active (it is a gather, so
    # hfconfig leaves it out, ACTIVE_PARAMS): Qwen and Mistral count it, OpenAI does not (its card
    # lists embedding and unembedding apart and 5.13 B = 4/128 experts + attention + unembedding).
    # DeepSeek and Moonshot do not say; 37 B and 32 B are the roundings of the count without it
    # (36.6 B, 31.7 B), not with it (37.6 B, 32.9 B).
    active_counts_table: bool
    source: str


K2_TOTAL = "https://lambda.ai/inference-models/moonshotai/kimi-k2.6 (the shared K2 backbone: 1.04T)"
PUBLISHED = {
    "llama-3.1-8b": Published(8.03e9, None, True, "https://huggingface.co/meta-llama/Llama-3.1-8B"),
    "llama-3.1-70b": Published(70.6e9, None, True, "https://huggingface.co/meta-llama/Llama-3.1-70B"),
    "llama-3.1-405b": Published(405e9, None, True, "https://huggingface.co/meta-llama/Llama-3.1-405B"),
    "llama-3.3-70b-instruct": Published(70.6e9, None, True, "https://huggingface.co/meta-llama/Llama-3.3-70B-Instruct"),
    "qwen3-32b": Published(32.8e9, None, True, "https://huggingface.co/Qwen/Qwen3-32B"),
    "qwen3-235b-a22b": Published(235e9, 22e9, True, "https://huggingface.co/Qwen/Qwen3-235B-A22B"),
    "qwen2.5-72b-instruct": Published(72.7e9, None, True, "https://huggingface.co/Qwen/Qwen2.5-72B-Instruct"),
    "deepseek-v3": Published(671e9, 37e9, False, "https://huggingface.co/deepseek-ai/DeepSeek-V3"),
    "kimi-k2-instruct": Published(
        1.04e12,
        32e9,
        False,
        "https://huggingface.co/moonshotai/Kimi-K2-Instruct (32B); " + K2_TOTAL,
    ),
    "kimi-k2.5": Published(
        1.04e12,
        32e9,
        False,
        "https://huggingface.co/moonshotai/Kimi-K2.5 (32B); " + K2_TOTAL,
    ),
    "gpt-oss-120b": Published(116.8e9, 5.1e9, False, "https://arxiv.org/abs/2508.10925"),
    "gpt-oss-20b": Published(20.9e9, 3.6e9, False, "https://arxiv.org/abs/2508.10925"),
    "mixtral-8x7b": Published(46.7e9, 12.9e9, True, "https://mistral.ai/news/mixtral-of-experts"),
    "mistral-7b-instruct-v0.3": Published(
        7.25e9, None, True, "https://huggingface.co/mistralai/Mistral-7B-Instruct-v0.3"
    ),
}


def shipped(name: str) -> hfconfig.HFModel:
    return read_config(CONFIG_DIR / f"{name}.json")


def rel(derived: float, reference: float) -> float:
    return abs(derived - reference) / reference


def test_every_shipped_config_has_a_published_count_and_its_sources() -> None:
    names = shipped_config_names()
    assert len(names) >= 12 and set(names) == set(PUBLISHED)
    for name in names:
        data = json.loads((CONFIG_DIR / f"{name}.json").read_text())
        assert data["_source"]["config_json"].endswith("/config.json") and data["_source"]["parameter_count"]
        assert data["architectures"] and data["model_type"]


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_derived_parameter_counts_match_the_published_ones(name: str) -> None:
    m, pub = shipped(name), PUBLISHED[name]
    assert rel(m.total_params, pub.total) < 0.02, f"{name}: {m.total_params / 1e9:.2f} B total"
    if pub.active is not None:
        active = m.active_params + (m.embedding_params if pub.active_counts_table else 0)
        assert rel(active, pub.active) < 0.02, f"{name}: {active / 1e9:.2f} B active"


def test_exact_counts_where_the_checkpoint_is_known() -> None:
    # tensor sizes summed over the published safetensors
    assert shipped("llama-3.1-8b").total_params == 8_030_261_248
    assert shipped("qwen2.5-72b-instruct").total_params == 72_706_203_648


def test_kv_bytes_per_token_gqa_and_mla_exact() -> None:
    llama = shipped("llama-3.1-8b")
    assert llama.kv_bytes_per_token == 2 * 8 * 128 * 32 * 2 == 131_072 and not llama.kv_replicated
    for name in ("deepseek-v3", "kimi-k2-instruct", "kimi-k2.5"):
        mla = shipped(name)
        assert mla.layers == 61 and mla.kv_bytes_per_token == (512 + 64) * 61 * 2 == 70_272 and mla.kv_replicated
    # MLA decode attention in the absorbed form: 2 * heads * (2 * kv_lora_rank + qk_rope_head_dim)
    assert shipped("kimi-k2.5").attn_flops_per_ctx == 2 * 64 * (2 * 512 + 64) == 139_264
    assert shipped("deepseek-v3").attn_flops_per_ctx == 2 * 128 * (2 * 512 + 64)
    assert llama.attn_flops_per_ctx == 4 * 32 * 128


def test_sliding_window_layers_are_counted_apart() -> None:
    oss = shipped("gpt-oss-120b")
    per_layer = 2 * 8 * 64 * 2
    assert (oss.windowed_layers, oss.sliding_window) == (18, 128)
    assert oss.kv_bytes_per_token == per_layer * 36  # full context: what the step model uses
    assert oss.kv_bytes_for_context(10_000) == per_layer * (18 * 10_000 + 18 * 128)
    # Qwen2.5 names a window but does not use it; Mistral v0.3 has none
    assert shipped("qwen2.5-72b-instruct").windowed_layers == 0
    assert shipped("mistral-7b-instruct-v0.3").windowed_layers == 0


def test_quantized_experts_are_sized_from_the_config() -> None:
    assert shipped("kimi-k2.5").expert_format.bits_per_weight == 4 + 16 / 32  # INT4, BF16 scale per 32
    assert shipped("gpt-oss-120b").expert_format.bits_per_weight == 4 + 8 / 32  # MXFP4
    assert shipped("deepseek-v3").expert_format.bits_per_weight == 8 + 32 / (128 * 128)  # FP8 blocks
    assert shipped("qwen3-235b-a22b").expert_format.bits_per_weight == 16  # BF16
    # gpt-oss-120b: MXFP4 experts and BF16 rest make the ~65 GB checkpoint that fits one 80 GB GPU
    assert 64e9 < shipped("gpt-oss-120b").weight_bytes < 66e9


def test_derived_llama_agrees_with_the_shipped_llama_8b_entry() -> None:
    entry = load_part("model", "llama-8b")
    m = shipped("llama-3.1-8b")
    derived = m.model_config("llama-3.1-8b")
    assert derived.kv_bytes_per_token == entry.kv_bytes_per_token
    assert derived.attn_flops_per_ctx == entry.attn_flops_per_ctx
    assert (derived.hidden, derived.layers, derived.vocab) == (entry.hidden, entry.layers, entry.vocab)
    assert (derived.intermediate, derived.context_length) == (entry.intermediate, entry.context_length)
    assert rel(derived.weight_bytes, entry.weight_bytes) < 0.01
    assert rel(derived.streamed_dense_bytes, entry.streamed_dense_bytes) < 0.01
    # the entry counts the input table as active (the model card's 8.03 B); hfconfig does not
    assert rel(m.active_params + m.embedding_params, entry.active_params) < 0.01
    assert rel(derived.active_params, entry.active_params) > 0.06


def test_derived_kimi_agrees_with_the_shipped_kimi_k26_entry() -> None:
    entry = load_part("model", "kimi-k2.6")
    derived = shipped("kimi-k2.5").model_config("kimi-k2.5")  # K2.5 and K2.6 share the backbone
    assert derived.kv_bytes_per_token == entry.kv_bytes_per_token and derived.kv_replicated
    assert derived.attn_flops_per_ctx == entry.attn_flops_per_ctx
    for field in ("expert_bytes", "streamed_dense_bytes", "weight_bytes", "replicated_weight_bytes", "active_params"):
        assert rel(getattr(derived, field), getattr(entry, field)) < 0.05, field
    same = ("layers", "moe_layers", "hidden", "vocab", "experts", "experts_active", "context_length")
    assert all(getattr(derived, f) == getattr(entry, f) for f in same)
    assert (derived.intermediate, derived.moe_intermediate) == (entry.intermediate, entry.moe_intermediate)


def test_a_qwen2_moe_shape_with_a_shared_expert() -> None:
    # Qwen1.5-MoE-A2.7B config.json fields; card: 14.3 B total, 2.7 B activated (table included)
    # https://huggingface.co/Qwen/Qwen1.5-MoE-A2.7B
    cfg = {
        "architectures": ["Qwen2MoeForCausalLM"],
        "model_type": "qwen2_moe",
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "vocab_size": 151936,
        "max_position_embeddings": 8192,
        "tie_word_embeddings": False,
    }
    m = hfconfig.derive(cfg, where="qwen1.5-moe", served_name="Qwen/Qwen1.5-MoE-A2.7B")
    assert m.moe_layers == 24 and m.intermediate == 0 and m.shared_expert_params == 24 * (3 * 2048 * 5632 + 2048)
    assert rel(m.total_params, 14.3e9) < 0.02 and rel(m.active_params + m.embedding_params, 2.7e9) < 0.02
    sparse = hfconfig.derive({**cfg, "decoder_sparse_step": 2, "mlp_only_layers": [1]}, where="x", served_name="x")
    assert sparse.moe_layers == 11 and sparse.intermediate == 5632  # odd layers but 1 are MoE


def test_unknown_architecture_says_which_fields_to_give(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": 4544}))
    with pytest.raises(ProfileError) as err:
        read_config(path)
    msg = str(err.value)
    assert str(path) in msg and "FalconForCausalLM" in msg and "LlamaForCausalLM" in msg
    assert "--set model.FIELD=VALUE" in msg
    assert all(f in msg for f in ("layers", "hidden", "kv_bytes_per_token", "attn_flops_per_ctx", "weight_bytes"))


def test_missing_fields_are_all_named(tmp_path: Path) -> None:
    cfg = json.loads((CONFIG_DIR / "deepseek-v3.json").read_text())
    for key in ("kv_lora_rank", "qk_rope_head_dim", "first_k_dense_replace"):
        del cfg[key]
    cfg["vocab_size"] = None
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ProfileError) as err:
        read_config(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: DeepseekV3ForCausalLM needs ")
    assert all(k in msg for k in ("vocab_size", "kv_lora_rank", "qk_rope_head_dim", "first_k_dense_replace"))
    assert "--set model.FIELD=VALUE" in msg
    path.write_text(json.dumps({**json.loads((CONFIG_DIR / "qwen3-32b.json").read_text()), "hidden_size": "5120"}))
    with pytest.raises(ProfileError, match="field 'hidden_size' is '5120'; expected a non-negative integer"):
        read_config(path)
    path.write_text("{not json")
    with pytest.raises(ProfileError, match="not a readable JSON file"):
        read_config(path)


def test_a_config_path_and_a_shipped_name_work_through_the_profile_loader(tmp_path: Path) -> None:
    folder = tmp_path / "Qwen3-32B"
    folder.mkdir()
    cfg = json.loads((CONFIG_DIR / "qwen3-32b.json").read_text())
    del cfg["_name_or_path"], cfg["_source"]
    (folder / "config.json").write_text(json.dumps(cfg))
    for ref in (str(folder / "config.json"), str(folder)):
        p = load_profile("h200-llama-8b", model=ref)
        assert p.model.name == ref and p.model.served_name == "Qwen3-32B"  # the folder names it
        assert (p.model.layers, p.model.kv_bytes_per_token, p.model.context_length) == (64, 262_144, 40_960)
        assert p.hardware.name == "h200" and memory_plan(p).failure is None  # 65.5 GB fits one H200
    by_name = load_profile("h200-llama-8b", model="qwen3-32b")
    assert by_name.model.name == "qwen3-32b" and by_name.model.served_name == "Qwen/Qwen3-32B"
    assert load_profile("h200-llama-8b", model="llama-8b").model.streamed_dense_bytes == 15.0e9  # models.toml first
    profile = tmp_path / "oss.toml"
    shutil.copy(CONFIG_DIR / "gpt-oss-20b.json", tmp_path / "oss-config.json")
    profile.write_text(f'hardware = "h200"\nmodel = "{tmp_path / "oss-config.json"}"\n[model_overrides]\nlayers = 12\n')
    loaded = load_profile_file(profile)
    assert loaded.model.experts == 32 and loaded.model.layers == 12 and loaded.model.served_name == "openai/gpt-oss-20b"


def test_an_unknown_model_part_lists_what_was_tried() -> None:
    with pytest.raises(ProfileError) as err:
        load_profile("tiny", model="llama-9b")
    msg = str(err.value)
    assert "no model part 'llama-9b'" in msg and "kimi-k2.6" in msg and "qwen3-32b" in msg and "config.json" in msg
