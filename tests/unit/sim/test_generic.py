"""The generic engine constants (profiles/generic.toml): measured once on a real H200 and frozen.

The probe's steps are on disk (benchmarks/gpu/results/); the step model with the shipped constants
must reproduce them as the fit said it did, so a change to the step model that moves them shows
here. Also the pieces the generic profile added: the soft roofline, the all-reduce latency when
t_fix holds none, the per-layer fixed cost, ITL in predicted rows, and the published-results
benchmark's reading of its set-ups."""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest

from loadgen.predict.deploy import parse_deployment, predict
from loadgen.sim.model import StepModel, roofline
from loadgen.sim.profile import apply_overrides, load_profile

ROOT = Path(__file__).resolve().parents[3]
PROBE = ROOT / "benchmarks" / "gpu" / "results" / "step_probe_h200_2026-12-04.json"
HOLDOUT = ROOT / "benchmarks" / "gpu" / "results" / "step_probe_h200_holdout_2026-12-04.json"


def _bench(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _error(m: StepModel, point: dict[str, Any]) -> float:
    """The step model's time for one probed step over the time measured, less 1."""
    if point["kind"] == "decode":
        t = m.decode(point["batch"], point["batch"] * point["ctx"]).duration_s
    else:
        n = point["tokens"]
        t = m.prefill(n, n * (n + 1) / 2).duration_s
    return float(t / (point["ms_median"] / 1e3) - 1)


def test_the_frozen_constants_reproduce_the_h200_probe_they_were_fitted_on() -> None:
    probe = json.loads(PROBE.read_text())
    parts = {
        "llama-8b-bf16": load_profile("generic", model="llama-3.1-8b", hardware="h200"),
        "llama-70b-fp8": apply_overrides(
            load_profile("generic", model="llama-3.3-70b-instruct", hardware="h200"), {"server.quantization": "fp8"}
        ),
    }
    errors = [_error(StepModel(parts[point["model"]]), point) for point in probe["points"]]
    assert len(errors) == 17
    assert statistics.median(abs(e) for e in errors) < 0.025
    assert max(abs(e) for e in errors) < 0.08


def test_the_frozen_constants_predict_a_model_the_fit_never_saw() -> None:
    # Qwen3-32B's shape in BF16 (64 layers, hidden 5120), timed on the same H200 after the fit
    held = json.loads(HOLDOUT.read_text())
    m = StepModel(load_profile("generic", model="qwen3-32b", hardware="h200"))
    errors = [_error(m, point) for point in held["points"]]
    assert len(errors) == 7
    assert max(abs(e) for e in errors) < 0.10


def test_the_attention_reads_its_cache_apart_from_the_matmuls() -> None:
    """Generic's step: the weights' roofline plus the KV's, not one roofline of both. One request's
    short cache costs next to nothing either way; 256 requests' 34 GB of cache is a kernel of its own
    that the matmuls' math does not hide, as the probe's 256-request step shows (17.07 ms)."""
    p = load_profile("generic", model="llama-3.1-8b", hardware="h200")
    apart, together = StepModel(p), StepModel(apply_overrides(p, {"server.attention_apart": False}))
    assert p.server.attention_apart
    one = apart.decode(1, 1024).duration_s / together.decode(1, 1024).duration_s
    assert one == pytest.approx(1.0, abs=0.02)
    big_apart, big_together = apart.decode(256, 256 * 1024).duration_s, together.decode(256, 256 * 1024).duration_s
    assert big_apart > 1.1 * big_together
    assert big_apart == pytest.approx(17.07e-3, rel=0.03)


def test_roofline_is_the_larger_time_or_a_norm_between_the_larger_and_the_sum() -> None:
    assert roofline(3.0, 5.0, 0.0) == 5.0
    soft = roofline(3.0, 5.0, 1.86)
    assert 5.0 < soft < 8.0
    assert roofline(1.0, 100.0, 1.86) == pytest.approx(100.0, rel=1e-3)  # far apart: the larger
    assert roofline(0.0, 0.0, 1.86) == 0.0


def test_tp_on_nvlink_pays_one_exchange_per_all_reduce_when_t_fix_holds_none() -> None:
    generic = StepModel(parse_deployment("model=llama-3.1-70b,hardware=h200x8,server.tp=8").profile)
    calibrated = StepModel(
        parse_deployment("profile=h200-llama-8b,model=llama-3.1-70b,hardware=h200x8,server.tp=8").profile
    )
    comm, _ = generic._collectives(1.0)
    # 80 layers x 2 all-reduces of one token's hidden state (8,192 x 2 B): the latency and the bytes
    assert comm == pytest.approx(160 * (5.6e-6 + 8192 * 2 / generic.ar_bw), rel=1e-6)
    assert calibrated._collectives(1.0)[0] == 0.0  # folded into the calibrated t_fix
    # the per-layer fixed cost scales with depth: 80 layers, not the 8B's 32
    assert generic.t_fix == pytest.approx(80 * 30.2e-6)


def test_predicted_rows_carry_itl_and_one_user_sees_one_decode_step_between_chunks() -> None:
    dep = parse_deployment("model=llama-3.1-8b,hardware=h200")
    (row,) = predict([dep], concurrencies=[1], input_tokens=1000, output_tokens=256)["rows"]
    step = StepModel(dep.profile).decode(1, 1000 + 128).duration_s * 1e3
    assert row["itl_ms"]["p50"] == pytest.approx(step, rel=0.01)
    assert row["itl_ms"]["p50"] == pytest.approx(row["tpot_ms"]["p50"], rel=0.01)


def test_the_published_benchmark_serves_each_set_up_as_its_source_ran_it() -> None:
    bench = _bench("predict_published")
    data = bench.tomllib.loads(bench.DATA.read_text())
    by_id = {s["id"]: s for s in data["setup"]}
    trt = bench.build(by_id["trtllm-perfoverview-llama33-70b-h100-tp2-1000-1000"])
    assert trt.kind == "offline" and trt.loads == [bench.OFFLINE_USERS]
    for item in ("model=llama-3.3-70b-instruct", "hardware=h100x8", "server.tp=2", "server.quantization=fp8"):
        assert item in trt.deployment
    assert "server.kv_cache_dtype=fp8" in trt.deployment  # a ModelOpt checkpoint's cache
    static = bench.build(by_id["lmdeploy-a100-llama2-70b-tp4-static-128-2048"])
    assert static.kind == "batch_size" and static.loads == [1, 16, 32, 64]
    assert "llama-2-70b.json" in static.deployment and "quantization" not in static.deployment
    # LMDeploy v0.1.0a1's TurboMind as its benchmark script configured it: vLLM's scheduling rules
    # with no budget across iterations (every prompt admitted runs in the iteration: max_batch_size x
    # session_len), blocks of 128, its pool of 4,000 blocks, 256 sequences
    for item in (
        "engine=vllm",
        f"server.chunked_prefill_size={256 * 4104}",
        "server.prefix_block_tokens=128",
        "server.kv_pool_tokens=512000",
        "server.max_running_requests=256",
    ):
        assert item in static.deployment
    # TensorRT-LLM v0.5's first-token table: one request's context phase with the FP8 cache its
    # build commands ask for, and the 70B row maps to the 70B config (the methodology text names both)
    ftl = bench.build(by_id["trtllm-perfmd-ftl-llama70b-h100-tp4-128"])
    assert ftl.kind == "batch_size" and ftl.loads == [1] and ftl.raw["output_tokens"] == 1
    for item in ("llama-2-70b.json", "hardware=h100x8", "server.tp=4", "server.kv_cache_dtype=fp8"):
        assert item in ftl.deployment
    # TensorRT-LLM v0.9.0's static batch (gptSessionBenchmark): the batch's prompts in one context
    # phase, a cache for exactly the batch at full length, no more running; the per-GPU figure x TP
    st = bench.build(by_id["trtllm-perfv09-llama70b-h100-tp4-128-2048"])
    assert st.kind == "static" and st.loads == [512]
    for item in (
        "server.chunked_prefill_size=65536",
        "server.kv_pool_tokens=1114112",
        "server.max_running_requests=512",
        "server.kv_cache_dtype=fp8",
        "server.tp=4",
    ):
        assert item in st.deployment
    assert st.points[0]["output_tok_s"] == 4 * st.points[0]["output_tok_s_per_gpu"]
    # an offline run as trtllm-bench runs it: all requests at t = 0, output tokens over the time the
    # last one ends; for one request that is its prefill and its decode steps, worked by hand
    dep = parse_deployment("profile=generic,model=llama-3.1-8b,hardware=h200,server.quantization=fp8")
    isl, osl = 1000, 50
    m = StepModel(dep.profile)
    by_hand = m.prefill(isl, isl * (isl + 1) / 2).duration_s + sum(
        m.decode(1, isl + k).duration_s for k in range(1, osl)
    )
    assert bench.offline(dep, 1, isl, osl)["output_tok_s"] == pytest.approx(osl / by_hand, rel=1e-4)
    two = bench.offline(dep, 2, isl, osl)
    assert osl / by_hand < two["output_tok_s"] < 2 * osl / by_hand  # batched: faster, not twice
    assert set(bench.OFFLINE_REQUESTS) == {tuple(map(int, p.split("-"))) for p in bench.TRT_PAIRS}
    # the gpu_conc client as its code ran: one request every 0.5 s into a queue its workers drain; a
    # server faster than that is fed 2 requests a second, whatever the users
    gpt = bench.build(by_id["gpuconc-h200-gpt-oss-20b-c1-16-1000-1000"])
    assert gpt.raw["client"] == "gpu_conc-995b194" and gpt.raw["feed_gap_s"] == 0.5
    fast = parse_deployment("profile=generic,model=llama-3.1-8b,hardware=h200,server.quantization=fp8")
    row = bench.gpu_conc_client(fast, 4, gpt.raw, 128, 64)
    assert row["output_tok_s"] == pytest.approx(64 / 0.5, rel=0.05)
    m_fast = StepModel(fast.profile)
    one = m_fast.prefill(128, 128 * 129 / 2).duration_s + sum(
        m_fast.decode(1, 128 + k).duration_s for k in range(1, 64)
    )
    assert row["e2e_ms"]["p50"] == pytest.approx(one * 1e3, rel=0.01)  # each served alone
    # every selected set-up is in the data, maps to parts, and its first load starts
    for sid in bench.SELECTED:
        setup = bench.build(by_id[sid])
        assert memory_starts(setup.deployment), sid
    res = bench.run(["gpuconc-h200-gpt-oss-20b-c1-16-1000-1000"])
    metrics = {c["metric"] for c in res["cells"]}
    assert metrics == {"output_tok_s", "ttft_ms", "e2e_ms"}
    assert all(c["predicted"] and c["error"] is not None for c in res["cells"])
    assert res["curves"] and res["curves"][0]["loads"] == [1, 4, 8, 16]


def memory_starts(deployment: str) -> bool:
    from loadgen.predict.deploy import startup

    return bool(startup(parse_deployment(deployment))["starts"])
