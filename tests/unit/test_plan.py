"""Capacity plan arithmetic on a hand-checked example, and SLO parsing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from loadgen.analysis.plan import capacity_plan
from loadgen.spec.gates import SLOError, parse_slo

SLO = {"ttft_p99_ms": 2000.0, "tpot_p99_ms": 50.0}


def step(i: int, c: float, *, ttft99: float, tpot99: float, e2e_mean: float, tok_s: float, **extra: Any) -> dict:
    s: dict[str, Any] = {
        "step": i,
        "concurrency": c,
        "context_tokens": 1024,
        "rate": None,
        "output_tok_s": tok_s,
        "requests_ok": 500,
        "requests_failed": 0,
        "errors": {},
        "ttft_ms": {"mean": ttft99 / 3, "p50": ttft99 / 4, "p90": ttft99 / 2, "p99": ttft99},
        "tpot_ms": {"mean": tpot99 / 2, "p50": tpot99 / 2, "p90": tpot99 * 0.8, "p99": tpot99},
        "e2e_ms": {"mean": e2e_mean, "p50": e2e_mean, "p90": None, "p99": None},
        "valid": True,
        "invalid_reason": None,
    }
    s.update(extra)
    return s


def ramp() -> list[dict[str, Any]]:
    return [
        step(0, 16, ttft99=400, tpot99=30, e2e_mean=5000, tok_s=1600, tokens_per_joule=1.0),
        step(
            1,
            32,
            ttft99=900,
            tpot99=40,
            e2e_mean=6400,
            tok_s=2560,
            tokens_per_joule=1.6,
            gpu_power_w={"mean": 1600.0, "p95": 1700.0, "max": 1750.0},
        ),
        step(2, 64, ttft99=2600, tpot99=48, e2e_mean=9000, tok_s=3600, tokens_per_joule=1.9),
        step(3, 128, ttft99=900, tpot99=40, e2e_mean=6400, tok_s=0, valid=False, invalid_reason="server down"),
    ]


def test_hand_checked_plan() -> None:
    # Hand computation:
    #   C=16 and C=32 meet ttft_p99 <= 2000 ms and tpot_p99 <= 50 ms; C=64 has ttft_p99 2600 ms.
    #   Operating point C=32. Little's law: 32 users / 6.4 s mean E2E = 5.0 req/s.
    #   Both limits are p99: at most 1% miss each, so at least 1 - 0.01 - 0.01 = 98% meet both.
    #   goodput = 5.0 * 1.0 (no failures) * 0.98 = 4.9 req/s; 2560 tok/s * 0.98 = 2508.8 tok/s.
    #   Headroom 20%: per replica 4.9 * 0.8 = 3.92 req/s, 2508.8 * 0.8 = 2007.04 tok/s, 25.6 users.
    #   40 req/s / 3.92 = 10.2 -> 11 replicas; 300 users / 25.6 = 11.7 -> 12 replicas; plan = 12, 96 GPUs.
    #   Energy: 1e6 tokens / 1.6 tok/J = 625,000 J = 0.17361 kWh per million tokens.
    #   Cost: 8 GPUs * $2.50 = $20 per replica-hour; 2007.04 tok/s * 3600 = 7,225,344 tok/h;
    #   $20 / 7.225344 Mtok = $2.7680 per million tokens; 12 replicas = $240 per hour.
    plan = capacity_plan(ramp(), SLO, target_rps=40, target_users=300, headroom=0.2, gpu_hour_cost=2.5)
    op = plan["operating_point"]
    assert op["step"] == 1 and op["concurrency"] == 32 and not op["interpolated"]
    assert op["ok_req_s"] == pytest.approx(5.0)
    assert op["goodput_frac"] == pytest.approx(0.98)
    assert op["goodput_req_s"] == pytest.approx(4.9)
    assert op["goodput_tok_s"] == pytest.approx(2508.8)
    assert op["next_step_fails"] == {"concurrency": 64, "why": ["ttft_p99_ms 2600 > 2000"]}
    assert plan["per_replica"] == pytest.approx({"req_s": 3.92, "tok_s": 2007.04, "concurrency": 25.6})
    assert plan["replicas"] == 12 and plan["gpus"] == 96
    assert plan["energy"]["kwh_per_million_tokens"] == pytest.approx(0.173611, rel=1e-5)
    assert plan["energy"]["gpu_power_w_mean"] == 1600.0
    assert plan["cost"]["per_million_tokens"] == pytest.approx(2.76803, rel=1e-5)
    assert plan["cost"]["total_hour_cost"] == pytest.approx(240.0)
    assert any("union bound" in n for n in plan["notes"])
    assert any("1 invalid step" in n for n in plan["notes"])
    json.dumps(plan, allow_nan=False)


def test_steady_window_gives_the_request_rate_directly() -> None:
    steps = ramp()
    steps[1]["window_s"] = 125.0  # 500 successful requests in 125 s = 4.0 req/s (Little's law said 5.0)
    op = capacity_plan(steps, SLO)["operating_point"]
    assert op["ok_req_s"] == pytest.approx(4.0)
    assert op["goodput_req_s"] == pytest.approx(4.0 * 0.98)


def test_target_rps_alone_and_no_cost_without_price() -> None:
    plan = capacity_plan(ramp(), SLO, target_rps=40)
    assert plan["replicas"] == 11 and plan["gpus"] == 88  # 40 / 3.92 = 10.2 -> 11
    assert plan["cost"] is None
    plan = capacity_plan(ramp(), SLO, target_rps=39.2)  # exactly 10 replicas' worth: no rounding up
    assert plan["replicas"] == 10


def test_measured_goodput_fraction_replaces_the_bound() -> None:
    plan = capacity_plan(ramp(), SLO, target_rps=40, goodput_frac={1: 0.9})
    op = plan["operating_point"]
    assert op["goodput_req_s"] == pytest.approx(4.5)  # 5.0 req/s * 0.9
    assert plan["replicas"] == 12  # 40 / (4.5 * 0.8 = 3.6) = 11.1 -> 12
    assert "goodput fraction measured per request" in plan["notes"]


def test_interpolation_is_linear_on_the_binding_percentile() -> None:
    # ttft_p99 900 ms at C=32, 2600 ms at C=64: 2000 ms at t = 1100/1700 = 0.647 -> C = 52.7,
    # rounded down to 52 (t = 0.625). tok/s 2560 + 0.625 * 1040 = 3210; E2E 6400 + 0.625 * 2600 =
    # 8025 ms -> 52 / 8.025 = 6.4798 req/s.
    plan = capacity_plan(ramp(), SLO, interpolate=True)
    op = plan["operating_point"]
    assert op["interpolated"] and op["concurrency"] == 52
    assert op["output_tok_s"] == pytest.approx(3210.0)
    assert op["ok_req_s"] == pytest.approx(52 / 8.025)
    assert op["slo_values"]["ttft_p99_ms"] == pytest.approx(900 + 0.625 * 1700)


def test_errors_above_the_threshold_end_the_compliant_range() -> None:
    steps = ramp()
    steps[1]["requests_failed"] = 10  # 10 / 510 = 2% > 1%
    plan = capacity_plan(steps, SLO, target_rps=10)
    assert plan["operating_point"]["concurrency"] == 16
    assert plan["operating_point"]["next_step_fails"]["why"] == ["2.0% of requests failed"]


def test_no_step_meets_the_slo() -> None:
    plan = capacity_plan(ramp(), {"ttft_p99_ms": 100.0}, target_rps=40)
    assert plan["operating_point"] is None and plan["replicas"] is None
    assert plan["reason"] == "no valid step meets the SLO; the lowest, concurrency=16, has ttft_p99_ms 400 > 100"


def test_open_loop_rate_uses_the_offered_rate() -> None:
    steps = [
        dict(
            step(0, 0, ttft99=300, tpot99=20, e2e_mean=4000, tok_s=900),
            concurrency=None,
            rate=4.0,
            requests_ok=99,
            requests_failed=1,
        ),
        dict(step(1, 0, ttft99=3000, tpot99=20, e2e_mean=4000, tok_s=1500), concurrency=None, rate=8.0),
    ]
    plan = capacity_plan(steps, SLO, target_rps=10, target_users=50)
    op = plan["operating_point"]
    assert plan["axis"] == "rate" and op["rate"] == 4.0
    assert op["ok_req_s"] == pytest.approx(3.96)  # 4 req/s * 99% success
    assert op["goodput_req_s"] == pytest.approx(3.96 * 0.98)
    assert any("target users needs a closed-loop" in n for n in plan["notes"])


def test_largest_context_is_planned_by_default() -> None:
    long = [dict(s, context_tokens=8192, output_tok_s=s["output_tok_s"] / 2) for s in ramp()]
    plan = capacity_plan(ramp() + long, SLO)
    assert plan["context_tokens"] == 8192
    assert plan["operating_point"]["output_tok_s"] == 1280.0
    assert capacity_plan(ramp() + long, SLO, context_tokens=1024)["operating_point"]["output_tok_s"] == 2560.0


@pytest.mark.parametrize("bad", [{"headroom": 1.0}, {"headroom": -0.1}, {"gpus_per_replica": 0}])
def test_bad_plan_arguments(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        capacity_plan(ramp(), SLO, **bad)


# --------------------------------------------------------------------------------------- parse_slo


def test_parse_slo_good_inputs() -> None:
    assert parse_slo("ttft_p99=2s,tpot_p99=50ms") == {"ttft_p99_ms": 2000.0, "tpot_p99_ms": 50.0}
    assert parse_slo(" e2e_p90 = 1.5s , itl_p50=800us,") == {"e2e_p90_ms": 1500.0, "itl_p50_ms": 0.8}
    assert parse_slo("TTFT_MEAN=250ms") == {"ttft_mean_ms": 250.0}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ttft_p95=2s", "unknown SLO name 'ttft_p95' in 'ttft_p95=2s': use ttft, itl, tpot, e2e"),
        ("ttft_p99=2", "no unit in SLO part 'ttft_p99=2': use ms, s or us"),
        ("ttft_p99=2h", "unknown unit 'h' in SLO part 'ttft_p99=2h'"),
        ("ttft_p99=2s,latency", "cannot read SLO part 'latency'"),
        ("", "empty SLO"),
        ("ttft_p99=2s,ttft_p99=1s", "given twice"),
        ("tpot_p99=0ms", "must be > 0"),
    ],
)
def test_parse_slo_errors_name_the_bad_part(text: str, message: str) -> None:
    with pytest.raises(SLOError) as err:
        parse_slo(text)
    assert message in str(err.value)


def test_plan_rejects_an_unknown_slo_key() -> None:
    with pytest.raises(SLOError, match="ttft_p95_ms"):
        capacity_plan(ramp(), {"ttft_p95_ms": 10.0})
