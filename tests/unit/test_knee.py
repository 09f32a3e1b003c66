"""Knee detectors, each on a curve made to trigger it and one made not to, and the verdict."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from loadgen.analysis.knee import (
    KneeOptions,
    deciding_detectors,
    detect_error_onset,
    detect_kleinrock,
    detect_kneedle,
    detect_kv_saturation,
    detect_marginal_gain,
    detect_power_plateau,
    detect_preemption,
    detect_queue_onset,
    detect_server_log,
    detect_slo_breach,
    detect_usl,
    knee_verdict,
    kneedle,
    make_curve,
    rule_text,
)

LOADS = [1, 2, 4, 8, 16, 32, 64, 128, 256]
OPTS = KneeOptions()


def step(i: int, c: float, tok_s: float, **extra: Any) -> dict[str, Any]:
    """A summary step; E2E is what a closed loop of c users making 256-token requests would see."""
    e2e = c * 256 / tok_s * 1000 if tok_s > 0 else None
    s: dict[str, Any] = {
        "step": i,
        "concurrency": c,
        "context_tokens": 1024,
        "rate": None,
        "output_tok_s": tok_s,
        "per_request_tok_s": tok_s / c,
        "requests_ok": 200,
        "requests_failed": 0,
        "errors": {},
        "ttft_ms": {"mean": 100.0, "p50": 90.0, "p90": 150.0, "p99": 200.0},
        "itl_ms": {"mean": 20.0, "p50": 20.0, "p90": 25.0, "p99": 30.0},
        "tpot_ms": {"mean": 20.0, "p50": 20.0, "p90": 25.0, "p99": 30.0},
        "e2e_ms": {"mean": e2e, "p50": e2e, "p90": None, "p99": None},
        "valid": True,
        "invalid_reason": None,
    }
    s.update(extra)
    return s


def ramp(curve: Any, loads: Sequence[float] = LOADS, **per_step: Any) -> list[dict[str, Any]]:
    """Steps over ``loads`` with throughput ``curve(c)``; ``per_step[key](c)`` fills other keys."""
    out = []
    for i, c in enumerate(loads):
        extra = {k: f(c) for k, f in per_step.items()}
        out.append(step(i, c, float(curve(c)), **extra))
    return out


def linear(c: float) -> float:
    return 150.0 * c


def capped(c: float) -> float:  # linear up to C=64, flat after: the knee is exactly C=64
    return 150.0 * min(c, 64)


def usl_peak(c: float) -> float:  # sigma 0.05, kappa 1e-4: N* = sqrt(0.95 / 1e-4) = 97.5
    return 300.0 * c / (1 + 0.05 * (c - 1) + 1e-4 * c * (c - 1))


# ------------------------------------------------------------------------------------------ kneedle


def test_kneedle_finds_the_corner_of_a_capped_line() -> None:
    ys = [capped(c) for c in LOADS]
    assert LOADS[kneedle(LOADS, ys) or 0] == 64


def test_kneedle_with_noise_still_lands_on_the_corner() -> None:
    rng = np.random.default_rng(3)
    ys = [capped(c) * (1 + 0.01 * rng.standard_normal()) for c in LOADS]
    assert LOADS[kneedle(LOADS, ys) or 0] == 64


@pytest.mark.parametrize("curve", [linear, lambda c: 2.0 * c * c])
def test_kneedle_finds_nothing_on_straight_or_convex_curves(curve: Any) -> None:
    assert kneedle(LOADS, [curve(c) for c in LOADS]) is None


def test_kneedle_sensitivity_makes_it_more_conservative() -> None:
    # A soft bend: S=1 finds it, a very large S waits for more flat points than there are.
    ys = [usl_peak(c) for c in LOADS]
    assert kneedle(LOADS, ys, 1.0) is not None
    assert kneedle(LOADS, ys, 20.0) is None


def test_kneedle_needs_three_points() -> None:
    assert kneedle([1, 2], [1, 2]) is None


# --------------------------------------------------------------------------- curve detectors


def test_detect_kneedle_reports_the_knee_step() -> None:
    f = detect_kneedle(make_curve(ramp(capped)), OPTS)
    assert f.triggered and f.load == 64 and "C=64" in f.evidence
    g = detect_kneedle(make_curve(ramp(linear)), OPTS)
    assert not g.triggered and g.has_data and g.load is None


def test_usl_detector_triggers_when_the_peak_is_inside_the_range() -> None:
    f = detect_usl(make_curve(ramp(usl_peak)), OPTS)
    assert f.triggered
    assert f.load == pytest.approx(97.5, rel=0.02)
    assert f.knee == 64  # last measured step at or below N*
    assert f.numbers["sigma"] == pytest.approx(0.05, rel=0.01)


def test_usl_detector_does_not_trigger_when_the_peak_is_past_the_last_step() -> None:
    f = detect_usl(make_curve(ramp(usl_peak, loads=[1, 2, 4, 8, 16, 32])), OPTS)
    assert not f.triggered
    assert "past the last step" in f.evidence
    assert f.load == pytest.approx(97.5, rel=0.05)


def test_usl_detector_says_no_data_with_two_steps() -> None:
    f = detect_usl(make_curve(ramp(linear, loads=[1, 2])), OPTS)
    assert not f.has_data and f.evidence.startswith("no data")


def test_marginal_gain_names_the_gain_and_the_step() -> None:
    # 128 -> 256: 150*128*... capped: +0% for +100% past C=64.
    f = detect_marginal_gain(make_curve(ramp(capped)), OPTS)
    assert f.triggered and f.load == 64
    assert f.phrase == "throughput +0% for +100% concurrency past C=64"
    g = detect_marginal_gain(make_curve(ramp(linear)), OPTS)
    assert not g.triggered and "+100% for +100%" in g.evidence


def test_marginal_gain_threshold_is_per_doubling() -> None:
    # +8% for +100% is below 10% per doubling; +12% is not, nor the story's +18% from C=64 to C=128.
    for gain, expected in ((1.08, True), (1.12, False), (1.18, False)):
        steps = [step(0, 64, 1000.0), step(1, 128, 1000.0 * gain)]
        assert detect_marginal_gain(make_curve(steps), OPTS).triggered is expected


def test_kleinrock_power_peaks_at_the_knee_of_a_capped_curve() -> None:
    # X/R with R = c*256/X: power = X^2 / (256 c), rising as c up to 64, falling as 1/c after.
    f = detect_kleinrock(make_curve(ramp(capped)), OPTS)
    assert f.triggered and f.load == 64
    g = detect_kleinrock(make_curve(ramp(linear)), OPTS)
    assert not g.triggered  # still rising at the last step


# -------------------------------------------------------------------------------- hard limits


def _ttft(limit_from: float) -> Any:
    return lambda c: {"mean": 100.0, "p50": 100.0, "p90": 300.0, "p99": 3000.0 if c >= limit_from else 500.0}


def test_slo_breach_onset_and_last_good_step() -> None:
    steps = ramp(linear, ttft_ms=_ttft(128))
    f = detect_slo_breach(make_curve(steps), {"ttft_p99_ms": 2000})
    assert f.triggered and f.load == 128 and f.knee == 64
    assert "TTFT p99 3000 ms > 2000 ms" in f.evidence
    g = detect_slo_breach(make_curve(steps), {"ttft_p99_ms": 5000})
    assert not g.triggered and g.has_data


def test_slo_breach_without_slo_or_percentiles_is_no_data() -> None:
    steps = ramp(linear)
    assert not detect_slo_breach(make_curve(steps), None).has_data
    assert not detect_slo_breach(make_curve(steps), {"e2e_p99_ms": 10_000}).has_data  # e2e p99 None


def test_slo_key_errors_name_the_key() -> None:
    with pytest.raises(ValueError, match="ttft_p95_ms"):
        knee_verdict(ramp(linear), {"ttft_p95_ms": 10})


def test_error_onset_names_classes_and_ignores_small_rates() -> None:
    def failed(c: float) -> int:
        return 40 if c >= 128 else (1 if c == 32 else 0)  # 1/201 = 0.5% at C=32 stays under 1%

    steps = ramp(
        linear,
        requests_failed=failed,
        errors=lambda c: {"http_5xx": failed(c) // 4, "read_timeout": 3 * failed(c) // 4},
    )
    f = detect_error_onset(make_curve(steps), OPTS)
    assert f.triggered and f.load == 128 and f.knee == 64
    assert "read_timeout 30, http_5xx 10" in f.evidence
    assert not detect_error_onset(make_curve(ramp(linear)), OPTS).triggered


def test_kv_saturation_and_preemption() -> None:
    steps = ramp(
        capped,
        kv_usage=lambda c: {"mean": min(1.0, c / 70) * 0.9, "max": min(1.0, c / 66)},
        preemptions=lambda c: 12 if c >= 128 else 0,
    )
    kv = detect_kv_saturation(make_curve(steps), OPTS)
    assert kv.triggered and kv.load == 64 and "KV cache 97% full at C=64" in kv.evidence
    pre = detect_preemption(make_curve(steps))
    assert pre.triggered and pre.load == 128 and pre.knee == 64
    calm = ramp(linear, kv_usage=lambda c: {"mean": 0.2, "max": 0.5}, preemptions=lambda c: 0)
    assert not detect_kv_saturation(make_curve(calm), OPTS).triggered
    assert not detect_preemption(make_curve(calm)).triggered


def test_telemetry_detectors_say_no_data_without_telemetry() -> None:
    curve = make_curve(ramp(linear, kv_usage=lambda c: None, queue_len=lambda c: {"mean": None, "max": None}))
    for f in (
        detect_kv_saturation(curve, OPTS),
        detect_preemption(curve),
        detect_queue_onset(curve, OPTS),
        detect_power_plateau(curve, OPTS),
        detect_server_log(curve),
    ):
        assert not f.has_data and not f.triggered and f.evidence.startswith("no data"), f.name


# ------------------------------------------------------------------------------ supporting


def test_queue_onset() -> None:
    steps = ramp(capped, queue_len=lambda c: {"mean": max(0.0, c - 128), "max": max(0.0, c - 100)})
    f = detect_queue_onset(make_curve(steps), OPTS)
    assert f.triggered and f.load == 256 and f.knee == 128
    calm = ramp(linear, queue_len=lambda c: {"mean": 0.3, "max": 2})
    assert not detect_queue_onset(make_curve(calm), OPTS).triggered


def _power(watts: Any) -> dict[str, Any]:
    return {
        "gpu_power_w": lambda c: {"mean": watts(c), "p95": watts(c), "max": watts(c)},
        "gpu_power_frac_of_limit": lambda c: watts(c) / 8800,
        "power_valid": lambda c: True,
    }


def test_power_plateau_says_memory_bound_when_far_below_the_limit() -> None:
    steps = ramp(capped, **_power(lambda c: 1500 + 40 * min(c, 64)))  # 4060 W flat from C=64; 46% of 8800
    f = detect_power_plateau(make_curve(steps), OPTS)
    assert f.triggered and f.load == 64
    assert "46% of the power limit" in f.evidence and "not power-bound" in f.evidence
    rising = ramp(linear, **_power(lambda c: 1500 + 25 * c))
    assert not detect_power_plateau(make_curve(rising), OPTS).triggered


def test_power_plateau_ignores_invalid_power() -> None:
    p = _power(lambda c: 3000.0)
    p["power_valid"] = lambda c: False
    assert not detect_power_plateau(make_curve(ramp(linear, **p)), OPTS).has_data


def test_server_log_onset() -> None:
    steps = ramp(linear, log_events=lambda c: {"kv_cache_full": 3} if c >= 128 else {})
    f = detect_server_log(make_curve(steps))
    assert f.triggered and f.load == 128 and "kv_cache_full x3" in f.evidence
    assert not detect_server_log(make_curve(ramp(linear, log_events=lambda c: {}))).triggered


# ------------------------------------------------------------------------------------- verdict


def story_steps() -> list[dict[str, Any]]:
    """The DESIGN story, shaped: KV full at C=128, retraction at 192, +24% for 64->128, C=256 down."""
    tput = {1: 303.0, 2: 550.0, 4: 900.0, 8: 1500.0, 16: 2200.0, 32: 2900.0, 64: 3795.0, 128: 4723.0, 192: 4650.0}
    kv = {1: 0.01, 2: 0.02, 4: 0.04, 8: 0.06, 16: 0.12, 32: 0.25, 64: 0.5, 128: 0.97, 192: 1.0}
    steps = [
        step(i, c, x, kv_usage={"mean": kv[c] * 0.9, "max": kv[c]}, preemptions=12 if c == 192 else 0)
        for i, (c, x) in enumerate(tput.items())
    ]
    down = step(len(steps), 256, 0.0, requests_ok=0, requests_failed=300, valid=False, invalid_reason="server down")
    down["errors"] = {"connection_refused": 300}
    return [*steps, down]


def test_verdict_on_the_story_names_every_signal() -> None:
    v = knee_verdict(story_steps())
    assert v["concurrency"] == 128
    assert v["rule"] == "hard limit"
    reason = v["reason"]
    assert reason.startswith("KV cache 97% full at C=128")
    assert "first retraction at C=192" in reason
    assert "throughput -2% for +50% concurrency past C=128" in reason
    assert "ignored 1 invalid step (C=256: server down)" in reason
    assert set(v["detectors"]) >= {"kneedle", "usl", "slo_breach", "kv_saturation", "error_onset", "power_plateau"}
    assert v["detectors"]["slo_breach"]["has_data"] is False
    json.dumps(v, allow_nan=False)


def test_invalid_steps_do_not_count_as_errors() -> None:
    v = knee_verdict(story_steps())
    assert v["detectors"]["error_onset"]["triggered"] is False
    assert v["ignored_steps"] == [
        {"step": 9, "concurrency": 256, "context_tokens": 1024, "invalid_reason": "server down"}
    ]


def test_slo_breach_earlier_than_kv_decides() -> None:
    steps = story_steps()
    for s in steps:
        if s["concurrency"] >= 32:
            s["tpot_ms"] = {"mean": 60.0, "p50": 60.0, "p90": 70.0, "p99": 80.0}
    v = knee_verdict(steps, {"tpot_p99_ms": 50})
    assert v["concurrency"] == 16
    assert v["reason"].startswith("SLO breached at C=32 (TPOT p99 80 ms > 50 ms)")
    assert "KV cache 97% full at C=128" in v["reason"]


def test_breach_at_the_first_step_means_no_load_qualifies() -> None:
    steps = ramp(linear, ttft_ms=_ttft(1))
    v = knee_verdict(steps, {"ttft_p99_ms": 2000})
    assert v["concurrency"] is None and v["rule"] == "hard limit"
    assert v["reason"].startswith("no load meets the limits (already at C=1)")


def test_throughput_curve_without_hard_limits() -> None:
    v = knee_verdict(ramp(capped))
    assert v["rule"] == "throughput curve"
    assert v["concurrency"] == 64
    assert "throughput +0% for +100% concurrency past C=64" in v["reason"]


def test_no_knee_on_a_linear_ramp() -> None:
    v = knee_verdict(ramp(linear))
    assert v["concurrency"] is None and v["rule"] == "none"
    assert v["reason"].startswith("no saturation up to C=256")


def test_steps_without_throughput_say_no_data() -> None:
    steps = [step(i, c, 1.0, output_tok_s=None) for i, c in enumerate([1, 2, 4])]
    v = knee_verdict(steps)
    assert v["concurrency"] is None
    assert v["reason"] == "no knee found, throughput has no data: 0 valid steps with throughput, need >= 2"


def test_too_few_valid_steps() -> None:
    steps = ramp(linear, loads=[1, 2, 4])
    steps[1]["valid"] = False
    steps[1]["invalid_reason"] = "too few requests"
    v = knee_verdict(steps)
    assert v["concurrency"] is None
    assert "insufficient data: 2 valid steps" not in v["reason"]  # two remain valid: enough
    steps[2]["valid"] = False
    v = knee_verdict(steps)
    assert v["reason"].startswith("insufficient data: 1 valid step,")
    assert knee_verdict([])["reason"] == "insufficient data: no steps"


def test_several_context_lengths_report_the_lowest_knee() -> None:
    short = ramp(capped)
    long = [dict(s, context_tokens=8192, output_tok_s=150.0 * min(s["concurrency"], 16)) for s in ramp(capped)]
    v = knee_verdict(short + long)
    assert v["concurrency"] == 16 and v["context_tokens"] == 8192
    assert v["reason"].startswith("at 8192 context tokens:")
    assert v["by_context"]["1024"]["knee"] == 64


def test_open_loop_rate_axis() -> None:
    steps = [dict(s, concurrency=None, rate=s["concurrency"] / 4) for s in ramp(capped)]
    v = knee_verdict(steps)
    assert v["axis"] == "rate" and v["concurrency"] is None and v["rate"] == 16
    assert "rate=16 req/s" in v["reason"]
    assert v["detectors"]["usl"]["has_data"] is False


@pytest.mark.parametrize("c64", [3795.0, 4006.7])
def test_the_storys_own_figures_have_no_knee_below_c128(c64: float) -> None:
    # 303.2 tok/s at C=1, 3795 (ring) or 4006.7 (NVLS) at C=64, 4723.2 at C=128: +24% / +18% for
    # +100% concurrency is a server still worth pushing (its engineer tried 256), not a knee at 64.
    steps = [step(0, 1, 303.2), step(1, 64, c64), step(2, 128, 4723.2)]
    v = knee_verdict(steps)
    assert v["knee"] is None and v["rule"] == "none"
    assert v["reason"].startswith("no saturation up to C=128: throughput +")
    # a C=256 step that gains only +6% puts the knee at C=128
    v = knee_verdict([*steps, step(3, 256, 4723.2 * 1.06)])
    assert v["knee"] == 128 and v["rule"] == "throughput curve"


# ------------------------------------------------------------------------- how the verdict weighs


def demo_steps() -> list[dict[str, Any]]:
    """The demo's measured ramp (C=1, 8, 64, 128 on the simulated B300 server): Kneedle and Kleinrock
    fire at C=64, GPU power is flat from C=8 at a third of its limit, and C=64 -> 128 still buys +18%."""
    tput = {1: 290.1, 8: 1417.8, 64: 4040.9, 128: 4770.5}
    watts = {1: 2014.5, 8: 2992.8, 64: 3231.5, 128: 3208.9}
    return [
        step(i, c, x, gpu_power_w={"mean": watts[c]}, power_valid=True, gpu_power_frac_of_limit=watts[c] / 8800)
        for i, (c, x) in enumerate(tput.items())
    ]


def test_no_knee_beside_detectors_that_fired_says_why_they_do_not_decide() -> None:
    v = knee_verdict(demo_steps())
    assert v["knee"] is None and v["rule"] == "none"
    fired = {n for n, d in v["detectors"].items() if d["triggered"]}
    assert fired == {"kneedle", "kleinrock", "power_plateau"}
    gain = 4770.5 / 4040.9 - 1  # the weakest doubling, from the figures
    assert f"{gain:+.0%}" == "+18%"
    assert v["reason"].split("; ")[1] == (
        "Kneedle and Kleinrock flag C=64 and the power plateau C=8, but throughput still gained at least +18% "
        "per doubling of concurrency (the least from C=64 to C=128), above the rule's 10% floor: no knee"
    )
    assert v["reason"].startswith("no saturation up to C=128: throughput +18%")
    assert deciding_detectors(v) == []
    # the floor is the rule's own, not a fixed 10%
    strict = knee_verdict(demo_steps(), options=KneeOptions(min_gain_per_doubling=0.15))
    assert "above the rule's 15% floor: no knee" in strict["reason"]
    assert "buys under 15% more throughput" in rule_text(strict)


def test_no_detector_fired_means_nothing_to_weigh() -> None:
    v = knee_verdict(ramp(linear))
    assert " flag" not in v["reason"] and "floor" not in v["reason"]
    assert rule_text(v).startswith("No rule was met: a knee needs a hard limit")


def test_a_knee_names_the_evidence_that_disagrees_or_stays_quiet() -> None:
    # the curve decides C=64; Kleinrock's best point is lower, GPU power keeps rising
    steps = ramp(usl_peak, gpu_power_w=lambda c: {"mean": 100.0 + 10.0 * c}, power_valid=lambda c: True)
    v = knee_verdict(steps)
    assert (v["rule"], v["knee"]) == ("throughput curve", 64)
    assert deciding_detectors(v) == ["marginal_gain", "kneedle", "usl"]
    assert (
        "Kleinrock flags C=16, but it adds evidence only: the knee is the last load before a doubling that "
        "bought under 10%" in v["reason"]
    )
    assert (
        "the power plateau does not fire, but it adds evidence only: one doubling under 10% is enough" in (v["reason"])
    )
    text = rule_text(v)
    assert text.startswith("Decided by the throughput curve (the gain per doubling, Kneedle and the USL fit)")
    assert "buys under 10% more throughput" in text


def test_a_hard_limit_weighs_the_throughput_that_still_scales() -> None:
    # errors from C=64 on, while every doubling still gains +100%
    steps = ramp(linear, requests_failed=lambda c: 50 if c >= 64 else 0)
    v = knee_verdict(steps)
    assert (v["rule"], v["knee"]) == ("hard limit", 32)
    assert deciding_detectors(v) == ["error_onset"]
    assert (
        "throughput still gained at least +100% per doubling of concurrency (the least from C=1 to C=2), but a "
        "hard limit decides whatever the throughput does" in v["reason"]
    )
    assert rule_text(v).startswith("Decided by a hard limit (the error rate)")


def test_deciding_detectors_of_the_story_and_an_older_summary() -> None:
    v = knee_verdict(story_steps())
    assert deciding_detectors(v) == ["kv_saturation", "preemption"]
    assert "Kneedle flags C=64 and Kleinrock C=16, but the lowest hard limit decides" in v["reason"]
    assert deciding_detectors({"rule": "none", "knee": None}) == []  # no detectors: nothing decides
    old = json.loads(json.dumps(v))  # as read back from summary.json
    assert deciding_detectors(old) == ["kv_saturation", "preemption"]
