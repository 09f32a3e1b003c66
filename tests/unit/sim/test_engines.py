"""``--engine sglang|vllm``: each engine's defaults, from its source (sim/engines.py), as a deployment
part; the user's own settings win; what they change in timing and memory."""

from __future__ import annotations

import pytest

from loadgen.predict.deploy import parse_deployment, predict, startup
from loadgen.sim.engines import sglang_defaults, vllm_defaults, with_engine
from loadgen.sim.memory import memory_plan
from loadgen.sim.profile import ProfileError, apply_overrides, load_profile


def server(hardware: str, **fields: object):  # type: ignore[no-untyped-def]
    p = load_profile("generic", model="llama-3.1-8b", hardware=hardware)
    return apply_overrides(p, {f"server.{k}": v for k, v in fields.items()})


@pytest.mark.parametrize(
    ("hardware", "tp", "chunk", "graph_bs"),
    [
        ("l40s", 1, 4096, 32),  # 45 GB: under 60 GiB
        ("l40sx8", 8, 4096, 160),
        ("h100", 1, 8192, 256),  # 80 GB: under 90 GiB
        ("h100x8", 8, 8192, 512),
        ("h200", 1, 8192, 256),  # 141 GB: under 160 GiB
        ("b200", 1, 16384, 512),  # 180 GB and more
        ("mi300x", 1, 16384, 512),
    ],
)
def test_sglang_sizes_its_prefill_chunk_and_graphs_by_the_gpus_memory(
    hardware: str, tp: int, chunk: int, graph_bs: int
) -> None:
    d = sglang_defaults(server(hardware, tp=tp))
    assert d["server.chunked_prefill_size"] == chunk
    assert d["server.cuda_graph_max_bs"] == graph_bs
    assert d["server.max_running_requests"] == 0  # the KV pool's cap only


def test_sglang_keeps_what_activations_and_graphs_need_out_of_the_static_share() -> None:
    h100 = sglang_defaults(server("h100"))
    mem = load_profile("generic", hardware="h100").hardware.hbm_gb * 1024
    # 512 + 8192 * 1.5 + 256 * 2 + 1/8 * 1024 MiB = 13,440 MiB, above the 10 GiB floor of a >60 GiB GPU
    assert h100["server.mem_fraction_static"] == pytest.approx(round((mem - 13440) / mem, 3))
    l40s = sglang_defaults(server("l40s"))  # 512 + 6144 + 64 + 128 = 6,848 MiB, no floor under 60 GiB
    mem = load_profile("generic", hardware="l40s").hardware.hbm_gb * 1024
    assert l40s["server.mem_fraction_static"] == pytest.approx(round((mem - 6848) / mem, 3))
    dp = sglang_defaults(server("h200x8", tp=8, dp_attention=8))
    plain = sglang_defaults(server("h200x8", tp=8))
    assert dp["server.mem_fraction_static"] < plain["server.mem_fraction_static"]  # DP attention pads more


def test_vllm_gives_big_gpus_a_larger_budget_except_the_a100() -> None:
    assert vllm_defaults(server("h100"))["server.chunked_prefill_size"] == 8192
    assert vllm_defaults(server("h100"))["server.max_running_requests"] == 1024
    a100 = vllm_defaults(server("a100-sxm"))  # 80 GB, but vLLM keeps the A100 on the small defaults
    assert a100["server.chunked_prefill_size"] == 2048 and a100["server.max_running_requests"] == 256
    l40s = vllm_defaults(server("l40s"))
    assert l40s["server.chunked_prefill_size"] == 2048 and l40s["server.mem_fraction_static"] == 0.9


def test_the_users_own_settings_win_and_an_unknown_engine_is_named() -> None:
    dep = parse_deployment("model=llama-3.1-8b,hardware=a100-sxm,engine=vllm,server.max_running_requests=64")
    s = dep.profile.server
    assert s.engine == "vllm" and s.max_running_requests == 64 and s.chunked_prefill_size == 2048
    with pytest.raises(ProfileError, match=r"engine 'trt': choose one of sglang, vllm"):
        with_engine(server("h100"), "trt")


def test_an_engines_caps_change_the_timing_of_the_same_deployment() -> None:
    # 300 users on an 80 GB A100: vLLM keeps the A100 on its small defaults, 256 sequences, so 44 wait;
    # SGLang caps running requests only by the KV pool, which holds all 300 (1,200 tokens each)
    deps = [
        parse_deployment("label=vllm,model=llama-3.1-8b,hardware=a100-sxm,engine=vllm"),
        parse_deployment("label=sglang,model=llama-3.1-8b,hardware=a100-sxm,engine=sglang"),
    ]
    assert all(startup(d)["starts"] for d in deps)
    rows = predict(deps, concurrencies=[300], input_tokens=1000, output_tokens=200, window_s=20)["rows"]
    by = {r["deployment"]: r for r in rows}
    assert by["vllm"]["running"]["max"] == 256
    assert by["vllm"]["queue_len"]["mean"] > 20
    assert by["sglang"]["running"]["max"] > 256
    # a long prompt on vLLM's 2,048-token budget takes three prefill steps where SGLang's 8,192 takes
    # one: each step pays its fixed costs, so the first token comes later, if only by a few ms
    one = predict(deps, concurrencies=[1], input_tokens=6000, output_tokens=16, window_s=10)["rows"]
    ttft = {r["deployment"]: r["ttft_ms"]["p50"] for r in one}
    assert ttft["sglang"] < ttft["vllm"] < ttft["sglang"] * 1.05


def test_a_pool_the_engine_was_told_is_taken_as_given_and_binds_the_batch() -> None:
    # vLLM's --num-gpu-blocks-override and TurboMind's cache_max_entry_count in blocks fix the pool
    # whatever the memory share: 32 users of 1,000 + 1,000 tokens need 64,000 tokens at the end, so a
    # 20,480-token pool preempts (vLLM's rules: admit on the prompt, recompute the newest) where the
    # sized pool of an 80 GB A100 (~400,000 tokens of Llama-3.1-8B) never does
    base = "model=llama-3.1-8b,hardware=a100-sxm,engine=vllm"
    sized, told = (
        parse_deployment(f"label=sized,{base}"),
        parse_deployment(f"label=told,{base},server.kv_pool_tokens=20480"),
    )
    s, t = startup(sized), startup(told)
    assert t["starts"] and t["kv_pool_tokens"] == 20480 and s["kv_pool_tokens"] > 300_000
    assert memory_plan(told.profile).kv_pool_bytes == pytest.approx(20480 * memory_plan(sized.profile).kv_cell_bytes)
    rows = predict([sized, told], concurrencies=[32], input_tokens=1000, output_tokens=1000, window_s=30)["rows"]
    by = {r["deployment"]: r for r in rows}
    assert by["sized"]["running"]["mean"] > 31.5 and by["sized"]["kv_usage"]["max"] < 0.2
    assert by["sized"]["preemptions"] == 0 and by["told"]["preemptions"] > 0
    # 20,480 tokens hold at most 20 requests of ~1,000 tokens
    assert by["told"]["kv_usage"]["max"] > 0.95 and by["told"]["running"]["max"] <= 20
    assert by["told"]["output_tok_s"] < 0.7 * by["sized"]["output_tok_s"]
    with pytest.raises(ProfileError, match=r"server.kv_pool_tokens -5: give the pool in tokens"):
        parse_deployment(f"{base},server.kv_pool_tokens=-5")
