"""Profiles are data: every shipped profile loads, parts combine, overrides and errors are precise."""

from __future__ import annotations

import pytest

from loadgen.sim.cli import build_parser, list_profiles, main
from loadgen.sim.memory import memory_plan
from loadgen.sim.model import StepModel
from loadgen.sim.profile import ProfileError, apply_overrides, load_profile, part_names, profile_names

NAMED = ["b300x8-kimi-k2.6-ar", "b300x8-kimi-k2.6-ddtree", "generic", "h100-llama-8b", "h200-llama-8b", "tiny"]


def test_shipped_profiles_and_parts() -> None:
    assert profile_names() == NAMED
    assert {"h100", "h200", "b200", "b300", "h100x8", "h200x8", "b200x8", "b300x8"} <= set(part_names("hardware"))
    assert {"kimi-k2.6", "llama-8b"} <= set(part_names("model"))
    assert {"none", "dflash", "ddtree"} <= set(part_names("spec"))
    text = list_profiles()
    assert all(name in text for name in NAMED)


@pytest.mark.parametrize("name", NAMED)
def test_every_profile_loads_and_its_memory_fits(name: str) -> None:
    p = load_profile(name)
    assert p.description and p.sources
    plan = memory_plan(p)
    assert plan.kv_pool_tokens > 0 and plan.graph_fits and plan.failure is None


def test_parts_combine_freely() -> None:
    p = load_profile("b300x8-kimi-k2.6-ddtree", hardware="b200x8", spec="none")
    assert p.hardware.name == "b200x8" and p.model.name == "kimi-k2.6" and not p.spec.enabled
    # same deployment on B200 (179 GB): smaller KV pool than on B300 (275 GB)
    b300 = memory_plan(load_profile("b300x8-kimi-k2.6-ddtree", spec="none")).kv_pool_tokens
    assert 0 < memory_plan(p).kv_pool_tokens < b300


def test_overrides_parse_and_nvls_switches_allreduce() -> None:
    base = load_profile("b300x8-kimi-k2.6-ddtree")
    ring = apply_overrides(base, {"server.nvls": "false", "server.max_running_requests": "64"})
    assert ring.server.nvls is False and ring.max_running_requests == 64
    assert StepModel(ring).decode(64, 64 * 1500).duration_s > StepModel(base).decode(64, 64 * 1500).duration_s


def test_bad_names_and_values_say_what_to_do() -> None:
    with pytest.raises(ProfileError, match="unknown profile 'nope'; choose one of: b300x8"):
        load_profile("nope")
    with pytest.raises(ProfileError, match=r"hardware.toml: no hardware entry 'a100'; choose one of"):
        load_profile("tiny", hardware="a100")
    with pytest.raises(ProfileError, match=r"server.tp: 'eight' is not a valid int"):
        apply_overrides(load_profile("tiny"), {"server.tp": "eight"})
    with pytest.raises(ProfileError, match="unknown field 'warp'"):
        apply_overrides(load_profile("tiny"), {"server.warp": 1})


def test_cli_flags_cover_every_field_and_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(
        [
            "--max-running-requests",
            "256",
            "--no-nvls",
            "--hw-hbm-gb",
            "141",
            "--spec-tau",
            "5",
            "--ttft-ms",
            "30",
            "--model-layers",
            "40",
        ]
    )
    assert args.ovr__server__max_running_requests == 256 and args.ovr__server__nvls is False
    assert args.ovr__hardware__hbm_gb == 141.0 and args.ovr__spec__tau == 5.0
    assert args.ovr__timing__ttft_ms == 30.0 and args.ovr__model__layers == 40
    assert main(["--profile", "nope"]) == 2
    assert "unknown profile 'nope'" in capsys.readouterr().err
    assert main(["--set", "server.tp"]) == 2


def test_ttft_override_switches_to_fixed_timing() -> None:
    p = apply_overrides(load_profile("h200-llama-8b"), {"timing.ttft_ms": 50, "timing.itl_ms": 10})
    assert p.timing is not None and p.timing.ttft_ms == 50 and p.timing.itl_ms == 10
