"""Calibration regression: the seed deployment's measured figures, on the virtual clock.

Workload as the product sends it by default and as the seed's matrix benchmark did: 60-token
prompts (``loadgen ramp``'s default context), 512 output tokens (ignore_eos), closed loop of C users
spawned 50 ms apart; throughput over a 60-s steady window after 30 s. The prompts carry no text
here, so they take the acceptance of the default workload's class mix (``tau``; that it is that
mix is checked in test_sim_calibration_defaults.py, and through HTTP with the real prompts in
benchmarks/accuracy/test_sim_http_calibration.py).
"""

from __future__ import annotations

import pytest

from loadgen.sim.engine import Engine
from loadgen.sim.memory import FAIL_GRAPHS, FAIL_KV_POOL, memory_plan
from loadgen.sim.profile import Profile, apply_overrides, load_profile
from loadgen.sim.virtual import LoopResult, closed_loop
from loadgen.spec.options import DEFAULT_CONTEXT_TOKENS

AR = "b300x8-kimi-k2.6-ar"
DDTREE = "b300x8-kimi-k2.6-ddtree"


def seed_loop(profile: Profile, c: int, *, window_s: float = 60.0, source: str = "default") -> LoopResult:
    """``c`` users on ``profile`` as the seed's matrix benchmark ran them (the module's docstring):
    default-context prompts, 512 output tokens, users 50 ms apart, the window after 30 s."""
    return closed_loop(
        profile,
        c,
        prompt_tokens=DEFAULT_CONTEXT_TOKENS,
        output_tokens=512,
        stagger_s=0.05,
        warmup_s=30.0,
        window_s=window_s,
        source=source,
    )


def _run(name: str, c: int, nvls: bool = True, window_s: float = 60.0) -> LoopResult:
    return seed_loop(apply_overrides(load_profile(name), {"server.nvls": nvls}), c, window_s=window_s)


@pytest.mark.parametrize(
    ("name", "c", "nvls", "measured"),
    [
        (AR, 1, True, 132.7),
        (DDTREE, 1, True, 303.2),
        (DDTREE, 64, False, 3795.0),
        (DDTREE, 64, True, 4006.7),
        (DDTREE, 128, True, 4723.2),
    ],
)
def test_seed_throughput_within_5_percent(name: str, c: int, nvls: bool, measured: float) -> None:
    r = _run(name, c, nvls)
    assert r.output_tok_s == pytest.approx(measured, rel=0.05)
    assert r.mean_running == pytest.approx(c, rel=0.05)  # the closed loop really held C requests


def test_nvls_gain_at_c64_about_5_6_percent() -> None:
    ring = _run(DDTREE, 64, nvls=False, window_s=150.0)
    nvls = _run(DDTREE, 64, nvls=True, window_s=150.0)
    gain = nvls.output_tok_s / ring.output_tok_s - 1
    assert 0.03 <= gain <= 0.085, gain


def test_speculative_gain_shrinks_with_concurrency() -> None:
    g1 = _run(DDTREE, 1).output_tok_s / _run(AR, 1).output_tok_s
    g128 = _run(DDTREE, 128).output_tok_s / _run(AR, 128).output_tok_s
    assert g1 > 2.0
    assert g128 < 1.2


@pytest.mark.parametrize("c", [64, 128])
def test_power_per_gpu_in_seed_band_under_load(c: int) -> None:
    r = _run(DDTREE, c)
    assert 360.0 <= r.power_w <= 450.0
    assert r.busy_share > 0.99  # "100 % utilisation" while far below the 1100 W cap


def test_idle_power_is_186_w() -> None:
    engine = Engine(load_profile(DDTREE))
    engine.advance(0.0)
    assert engine.energy_at(10.0) / 10.0 == pytest.approx(186.0)
    assert engine.power_w(10.0) == pytest.approx(186.0)


def _plan(max_running: int) -> tuple[Profile, bool]:
    p = apply_overrides(load_profile(DDTREE), {"server.max_running_requests": max_running})
    return p, memory_plan(p).graph_fits


def test_startup_128_fits_256_fails_graph_capture() -> None:
    p128, fits128 = _plan(128)
    _, fits256 = _plan(256)
    assert fits128 and not fits256
    plan = memory_plan(p128)
    assert plan.failure is None and memory_plan(_plan(256)[0]).failure == FAIL_GRAPHS
    # the KV pool is untouched by max_running_requests and holds ~2.4 M tokens of 70 KB
    assert 2.2e6 < plan.kv_pool_tokens < 2.6e6
    assert plan.graph_tokens == 128 * 65


def test_kimi_does_not_fit_on_h100x8() -> None:
    p = load_profile(DDTREE, hardware="h100x8")
    assert memory_plan(p).kv_pool_tokens == 0 and memory_plan(p).failure == FAIL_KV_POOL
