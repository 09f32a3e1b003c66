"""Tensor, pipeline, expert and attention-data parallelism: what each layout does to the step and to
start-up memory, from the physics parallel.py names (bubbles, all-reduce latency on PCIe, expert
imbalance, the MLA cache split by DP attention), and the errors that name the field."""

from __future__ import annotations

import pytest

from loadgen.predict.deploy import failure_words
from loadgen.sim.memory import FAIL_DEVICES, memory_plan
from loadgen.sim.model import StepModel
from loadgen.sim.parallel import ep_imbalance, layout_of
from loadgen.sim.profile import Profile, ProfileError, apply_overrides, load_profile

# A PCIe node made from the H200 entry by overrides, so the test does not lean on a shipped PCIe
# entry: no NVLink, Gen5 x16 with peer-to-peer, NCCL's ring over it, 30 us a collective
PCIE = {
    "hardware.interconnect": "pcie5",
    "hardware.nvlink_uni_gb_s": "0",
    "hardware.allreduce_ring_gb_s": "20",
    "hardware.allreduce_nvls_gb_s": "0",
    "hardware.collective_latency_us": "30",
}


def deploy(model: str, hardware: str = "h200x8", **fields: object) -> Profile:
    p = load_profile("h200-llama-8b", model=model, hardware=hardware)
    return apply_overrides(p, {k.replace("__", "."): v for k, v in fields.items()})


def tok_s(p: Profile, c: int, ctx: int = 1500) -> float:
    """Decode tokens per second of ``c`` running requests holding ``ctx`` tokens each."""
    return c / StepModel(p).decode(c, c * ctx).duration_s


def test_layouts_that_cannot_be_built_name_the_field() -> None:
    llama = deploy("llama-3.1-70b")
    for fields, says in (
        ({"server.tp": 8, "server.ep": 3}, r"server.ep 3 must divide server.tp 8"),
        ({"server.tp": 8, "server.ep": 2}, r"server.ep 2: model .* has no routed experts"),
        ({"server.tp": 8, "server.dp_attention": 3}, r"server.dp_attention 3 must divide server.tp 8"),
        ({"server.pp": 81}, r"server.pp 81 exceeds the model's 80 layers"),
    ):
        with pytest.raises(ProfileError, match=says):
            StepModel(apply_overrides(llama, fields))
    too_many = apply_overrides(llama, {"server.tp": 4, "server.pp": 4})
    plan = memory_plan(too_many)
    assert plan.failure == FAIL_DEVICES
    assert failure_words(plan) == "tensor parallelism 4 x pipeline 4 needs 16 GPUs, the hardware part has 8"


def test_pipeline_stages_hold_a_share_of_the_weights_and_of_the_cache() -> None:
    tp8 = deploy("llama-3.1-70b", server__tp=8)
    tp4pp2 = deploy("llama-3.1-70b", server__tp=4, server__pp=2)
    a, b = memory_plan(tp8), memory_plan(tp4pp2)
    assert b.weight_bytes == pytest.approx(a.weight_bytes, rel=1e-9)  # 1/8 of the weights either way
    assert b.kv_pool_tokens == pytest.approx(a.kv_pool_tokens, rel=0.01)
    pp8 = memory_plan(deploy("llama-3.1-70b", server__tp=1, server__pp=8))
    assert pp8.weight_bytes == pytest.approx(a.weight_bytes, rel=1e-9)


def test_pipeline_bubbles_cost_one_user_the_whole_model_and_fill_with_concurrency() -> None:
    tp8, pp8 = deploy("llama-3.1-70b", server__tp=8), deploy("llama-3.1-70b", server__pp=8)
    tp1 = deploy("llama-3.1-70b", "h200", server__quantization="fp8", hardware__fp8_tflops="1979")
    # one request crosses 8 stages of one GPU each: the whole model at one GPU's bandwidth, in FP8
    # on one GPU for comparison (the BF16 model does not fit one), so within a factor of 2.5 of it
    assert 1.5 * tok_s(pp8, 1) < tok_s(tp8, 1)
    one_gpu = tok_s(tp1, 1)
    assert one_gpu / 2.5 < tok_s(pp8, 1) < one_gpu
    # eight micro-batches keep every stage busy: PP8 closes most of the gap
    gap_1 = tok_s(tp8, 1) / tok_s(pp8, 1)
    gap_256 = tok_s(tp8, 256) / tok_s(pp8, 256)
    assert gap_256 < gap_1 / 2
    busy_1, busy_64 = StepModel(pp8).decode(1, 1500), StepModel(pp8).decode(64, 64 * 1500)
    assert busy_1.u_bw < busy_64.u_bw  # the bubble shows in the power model too
    assert busy_1.power_w < busy_64.power_w


def test_pcie_pays_the_all_reduce_on_every_layer_and_pipelines_do_not() -> None:
    nv = {"tp8": deploy("llama-3.1-70b", server__tp=8), "pp8": deploy("llama-3.1-70b", server__pp=8)}
    pcie = {k: apply_overrides(p, PCIE) for k, p in nv.items()}
    for c in (1, 64):
        # 160 all-reduces a step of 30 us and more: TP8 loses far more on PCIe than PP8 does
        tp_loss = tok_s(nv["tp8"], c) / tok_s(pcie["tp8"], c)
        pp_loss = tok_s(nv["pp8"], c) / tok_s(pcie["pp8"], c)
        assert tp_loss > 1.3 and pp_loss < 1.1
    # with 256 users (32 a micro-batch) the pipeline is ahead of tensor parallelism over PCIe, far
    # behind it over NVLink; with 64 it re-reads its weights for each of 8 micro-batches and is behind
    assert tok_s(pcie["pp8"], 256) > tok_s(pcie["tp8"], 256)
    assert tok_s(nv["pp8"], 256) < tok_s(nv["tp8"], 256) / 2
    assert tok_s(pcie["pp8"], 64) < tok_s(pcie["tp8"], 64)
    # small all-reduces on NVLink are folded into t_fix, as the calibrated profiles assume
    assert StepModel(nv["tp8"])._collectives(1)[0] == 0.0
    assert StepModel(pcie["tp8"])._collectives(1)[0] == pytest.approx(160 * (30e-6 + 8192 * 2 / 20e9), rel=1e-6)


def test_expert_imbalance_is_the_statistics_of_the_draw() -> None:
    assert ep_imbalance(8, 1) == 1.0
    assert 2.5 < ep_imbalance(8, 8) < 3.5  # one token's 8 experts over 8 ranks: the busiest has ~3
    assert ep_imbalance(8 * 4096, 8) < 1.05  # a 4k-token prefill: nearly even
    assert ep_imbalance(1, 8) == 8.0  # capped: every route on one rank
    ep8 = deploy("qwen3-235b-a22b", server__tp=8, server__ep=8)
    tp8 = deploy("qwen3-235b-a22b", server__tp=8)
    assert layout_of(ep8).moe_tp == 1 and layout_of(tp8).moe_tp == 8
    # one user: the busiest EP rank reads ~3 whole experts where every TP rank reads 1/8 of 8
    assert tok_s(ep8, 1) < tok_s(tp8, 1)
    # a large prefill spreads evenly: EP within 5 % of TP
    pe, pt = StepModel(ep8).prefill(8192, 8192 * 4096), StepModel(tp8).prefill(8192, 8192 * 4096)
    assert pe.duration_s == pytest.approx(pt.duration_s, rel=0.05)


def test_dp_attention_splits_the_mla_cache_and_replicates_attention_weights() -> None:
    tp8 = deploy("kimi-k2.5", "b300x8", server__tp=8)
    dp8 = deploy("kimi-k2.5", "b300x8", server__tp=8, server__dp_attention=8)
    a, b = memory_plan(tp8), memory_plan(dp8)
    assert a.failure is None and b.failure is None
    attn = tp8.model.attention_params * 2.0  # BF16 attention in Kimi K2.5 (its INT4 is experts only)
    assert b.weight_bytes - a.weight_bytes == pytest.approx(attn * (1 - 1 / 8), rel=1e-6)
    # each GPU keeps only its own requests' latent cache: ~8 pools where TP kept one replicated 8 times
    assert b.kv_pool_tokens > 6 * a.kv_pool_tokens
    # and a long-context decode reads 1/8 of the cache per GPU
    assert tok_s(dp8, 64, ctx=30000) > 1.5 * tok_s(tp8, 64, ctx=30000)


def test_expert_parallel_all_to_all_moves_fewer_bytes_than_tensor_parallel_all_reduces() -> None:
    tp8 = apply_overrides(deploy("kimi-k2.5", "b300x8", server__tp=8), PCIE)
    ep8 = apply_overrides(deploy("kimi-k2.5", "b300x8", server__tp=8, server__ep=8, server__dp_attention=8), PCIE)
    assert layout_of(ep8).all_to_all and not layout_of(tp8).all_to_all
    n = 512
    assert StepModel(ep8)._collectives(n)[0] < StepModel(tp8)._collectives(n)[0] / 2
    assert memory_plan(ep8).runtime_bytes == pytest.approx(memory_plan(tp8).runtime_bytes + 1e9)


def test_calibrated_layouts_are_unchanged_by_the_new_terms() -> None:
    """tp only, NVLink: the seed profiles' steps are what they were fitted as (a spot value)."""
    p = load_profile("b300x8-kimi-k2.6-ddtree")
    assert layout_of(p).describe() == "TP8"
    ref = apply_overrides(p, {"server.pp": 1, "server.ep": 1, "server.dp_attention": 1})
    assert StepModel(p).decode(64, 64 * 600) == StepModel(ref).decode(64, 64 * 600)
