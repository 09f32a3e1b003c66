"""Weight and KV-cache formats: bytes by difference from what the model part records, each class of
FLOPs at its own peak (FP8 on Hopper, FP4 on Blackwell, weight-only where the GPU has no such math),
and errors that name the field."""

from __future__ import annotations

import pytest

from loadgen.sim.hfconfig import CONFIG_DIR, read_config
from loadgen.sim.memory import memory_plan
from loadgen.sim.model import StepModel
from loadgen.sim.profile import ProfileError, apply_overrides, load_profile
from loadgen.sim.quant import FORMATS, serve_as

LLAMA70 = "llama-3.3-70b-instruct"
H200_FP8 = {"hardware.fp8_tflops": "1979"}  # NVIDIA's H200 sheet: 3,958 TFLOPS FP8 with sparsity
B200_PEAKS = {"hardware.fp8_tflops": "4500", "hardware.fp4_tflops": "9000"}


def served(fmt: str, hardware: str = "h200x8", tp: int = 8, **extra: str) -> StepModel:
    peaks = B200_PEAKS if hardware.startswith("b200") else H200_FP8
    p = load_profile("h200-llama-8b", model=LLAMA70, hardware=hardware)
    return StepModel(apply_overrides(p, {"server.tp": tp, "server.quantization": fmt, **peaks, **extra}))


def test_bytes_follow_the_format_for_the_linear_weights_and_leave_the_rest_bf16() -> None:
    hf = read_config(CONFIG_DIR / f"{LLAMA70}.json")
    base = hf.model_config(LLAMA70)
    rest = hf.streamed_params - hf.linear_params  # lm_head, norms: BF16 whatever the format
    for name, fmt in FORMATS.items():
        m = serve_as(base, name, "auto")
        assert m.streamed_dense_bytes == pytest.approx(hf.linear_params * fmt.bits / 8 + rest * 2, rel=1e-12)
        assert m.weight_bytes == pytest.approx(
            hf.linear_params * fmt.bits / 8 + (hf.total_params - hf.linear_params) * 2, rel=1e-12
        )
        assert (m.linear_format, m.linear_bits) == (name, fmt.bits)
    # FP8 Llama-3.3-70B: 70.6 B parameters, 68.5 B of them in linear layers at ~1 B, the input table
    # and lm_head (2 x 1.05 B) at 2 B: about 72.7 GB, the size of the published FP8 checkpoints
    fp8 = serve_as(base, "fp8", "auto")
    assert 72e9 < fp8.weight_bytes < 73.5e9


def test_serving_in_a_format_is_relative_to_the_recorded_one_and_idempotent() -> None:
    base = read_config(CONFIG_DIR / f"{LLAMA70}.json").model_config(LLAMA70)
    via_int4 = serve_as(serve_as(base, "int4", "auto"), "fp8", "auto")
    direct = serve_as(base, "fp8", "auto")
    assert via_int4.weight_bytes == pytest.approx(direct.weight_bytes, rel=1e-12)
    assert serve_as(direct, "fp8", "auto") == direct
    assert serve_as(base, "", "auto") == base  # empty: the checkpoint's own


def test_a_checkpoints_own_format_is_read_from_its_quantization_config() -> None:
    ds = read_config(CONFIG_DIR / "deepseek-v3.json")
    assert (ds.linear_format.key, ds.expert_format.key) == ("fp8", "fp8")  # no ignore list: all linear in FP8
    # 671 B parameters in FP8 but embeddings, lm_head, norms and routers: the published checkpoint is
    # 688.6 GB with its 14 B multi-token-prediction layer, which hfconfig does not count (MTP_NOT_COUNTED)
    assert 660e9 < ds.weight_bytes < 688.6e9 - 14e9 * 0.99
    oss = read_config(CONFIG_DIR / "gpt-oss-120b.json")
    assert (oss.linear_format.key, oss.expert_format.key) == ("bf16", "mxfp4")  # attention skipped
    k25 = read_config(CONFIG_DIR / "kimi-k2.5.json")
    assert (k25.linear_format.key, k25.expert_format.key) == ("bf16", "int4-g32")
    assert k25.model_config("k").expert_bytes == pytest.approx(24.77e6, rel=0.001)


def test_fp8_kv_cache_halves_the_bytes_per_token_and_doubles_the_pool() -> None:
    p = load_profile("h200-llama-8b", model=LLAMA70, hardware="h200x8")
    p = apply_overrides(p, {"server.tp": 8})
    p8 = apply_overrides(p, {"server.kv_cache_dtype": "fp8"})
    assert p8.model.kv_bytes_per_token * 2 == p.model.kv_bytes_per_token == 327680
    assert memory_plan(p8).kv_pool_tokens == pytest.approx(2 * memory_plan(p).kv_pool_tokens, rel=0.01)
    # attention reads half the bytes: a long-context decode step is faster
    slow, fast = StepModel(p).decode(64, 64 * 32000), StepModel(p8).decode(64, 64 * 32000)
    assert fast.duration_s < 0.8 * slow.duration_s


def test_decode_moves_fewer_bytes_and_prefill_runs_at_the_formats_peak() -> None:
    """C=1 decode is bound by the weights' bytes; a 16k-token prefill by the matmuls' peak."""
    bf16, fp8, int4 = served("bf16"), served("fp8"), served("int4")
    d = {k: m.decode(1, 1000).duration_s for k, m in (("bf16", bf16), ("fp8", fp8), ("int4", int4))}
    assert d["int4"] < d["fp8"] < d["bf16"]
    p = {k: m.prefill(16384, 16384 * 8192).duration_s for k, m in (("bf16", bf16), ("fp8", fp8), ("int4", int4))}
    assert p["fp8"] < 0.75 * p["bf16"]  # FP8 tensor math at twice the BF16 peak on Hopper
    assert p["int4"] > p["bf16"]  # weight-only: dequantized into BF16 math at weight_only_eff of it


def test_fp4_runs_at_the_fp4_peak_on_blackwell_and_weight_only_on_hopper() -> None:
    prefill = 16384, 16384 * 8192
    b_fp8, b_fp4 = served("fp8", "b200x8", 4).prefill(*prefill), served("nvfp4", "b200x8", 4).prefill(*prefill)
    assert b_fp4.duration_s < 0.75 * b_fp8.duration_s
    h_bf16, h_fp4 = served("bf16").prefill(*prefill), served("nvfp4").prefill(*prefill)
    assert h_fp4.duration_s > h_bf16.duration_s  # no FP4 tensor cores before Blackwell
    # without an FP8 peak (an Ampere-like entry) FP8 weights are weight-only too
    no_fp8 = served("fp8", **{"hardware.fp8_tflops": "0"}).prefill(*prefill)
    assert no_fp8.duration_s > h_bf16.duration_s


def test_tensor_utilisation_is_busy_time_so_fp8_power_is_not_counted_double() -> None:
    bf16, fp8 = served("bf16").prefill(16384, 16384 * 8192), served("fp8").prefill(16384, 16384 * 8192)
    assert 0.3 < fp8.u_tc <= 1.0 and 0.3 < bf16.u_tc <= 1.0
    assert fp8.power_w <= bf16.power_w * 1.05


def test_unknown_formats_and_parts_without_counts_name_the_field() -> None:
    p = load_profile("h200-llama-8b")
    with pytest.raises(ProfileError, match=r"server.quantization 'fp6'.*bf16, fp8, nvfp4"):
        apply_overrides(p, {"server.quantization": "fp6"})
    with pytest.raises(ProfileError, match=r"server.kv_cache_dtype 'int2'.*fp8_e4m3"):
        apply_overrides(p, {"server.kv_cache_dtype": "int2"})
    kimi = load_profile("b300x8-kimi-k2.6-ar")
    with pytest.raises(ProfileError, match=r"'kimi-k2.6'.*model.linear_params.*--model-config"):
        apply_overrides(kimi, {"server.quantization": "nvfp4"})
    # the calibrated entries keep their figures: no format set, nothing re-sized
    assert load_profile("h200-llama-8b").model.weight_bytes == 16.06e9
    assert load_profile("h200-llama-8b").model.linear_params > 0  # but it can be served as fp8
    # 6.98 B linear parameters at ~1 B, the input table and lm_head (2 x 0.53 B) at 2 B: 9.08 GB
    fp8 = apply_overrides(load_profile("h200-llama-8b"), {"server.quantization": "fp8"}).model
    assert 9.0e9 < fp8.weight_bytes < 9.2e9


def test_a_gpu_whose_measured_gemm_reaches_less_of_its_spec_runs_its_matmuls_that_much_slower() -> None:
    """AMD's measured MI300X GEMMs reach 54 % (BF16) and 49 % (FP8) of the spec where the calibration
    H200's reach 79 % and 72 %: a compute-bound prefill takes the ratio longer, a bandwidth-bound
    decode is untouched, and an entry with no measurement keeps the spec's peak."""
    from loadgen.sim.quant import CALIBRATION_GEMM_SHARE, gemm_share, peak_tflops

    mi = load_profile("generic", model=LLAMA70, hardware="mi300xx8").hardware
    assert (mi.gemm_bf16_tflops, mi.gemm_fp8_tflops) == (708.0, 1273.0)
    assert gemm_share(mi, "bf16") == pytest.approx((708 / 1307.4) / (783 / 989), rel=1e-9)
    assert gemm_share(mi, "fp8") == pytest.approx((1273 / 2614.9) / (1419 / 1979), rel=1e-9)
    assert peak_tflops(mi, "fp8", 1.0) == pytest.approx(1273 / CALIBRATION_GEMM_SHARE["fp8"], rel=1e-9)
    h200 = load_profile("generic", model=LLAMA70, hardware="h200x8").hardware
    assert gemm_share(h200, "bf16") == gemm_share(h200, "fp8") == 1.0
    assert peak_tflops(h200, "fp8", 1.0) == h200.fp8_tflops

    def model(**hw: str) -> StepModel:
        p = load_profile("generic", model=LLAMA70, hardware="mi300xx8")
        return StepModel(apply_overrides(p, {"server.tp": 8, "server.quantization": "fp8", **hw}))

    measured, unmeasured = model(), model(**{"hardware.gemm_bf16_tflops": "0", "hardware.gemm_fp8_tflops": "0"})
    big = 32768, 32768 * 16384
    ratio = measured.prefill(*big).duration_s / unmeasured.prefill(*big).duration_s
    assert 1.25 < ratio < 1.0 / gemm_share(mi, "fp8") + 0.01  # compute-bound: close to 1/0.68, never past it
    assert measured.decode(1, 1000).duration_s == pytest.approx(unmeasured.decode(1, 1000).duration_s, rel=0.02)
