"""Repeated steps (``analysis.repeats``): intervals checked against exact values and, with the
simulator's engine on a virtual clock as the oracle, against the throughput it really has."""

from __future__ import annotations

import math
from typing import Any

import pytest

from loadgen.analysis.repeats import (
    knee_stability,
    mean_ci,
    merged_steps,
    ratio_ci,
    repeat_groups,
    repeat_of,
)


def test_mean_ci_is_students_t_over_the_samples() -> None:
    ci = mean_ci([10.0, 12.0, 14.0])
    # mean 12, s = 2, t(0.975, 2) = 4.302653: half-width 4.302653 * 2 / sqrt(3) = 4.968275
    assert ci["mean"] == 12.0 and ci["n"] == 3 and ci["sd"] == pytest.approx(2.0)
    assert ci["low"] == pytest.approx(12 - 4.968275, abs=1e-5) and ci["high"] == pytest.approx(12 + 4.968275, abs=1e-5)
    one = mean_ci([5.0])
    assert (one["mean"], one["low"], one["high"], one["n"]) == (5.0, None, None, 1)
    assert mean_ci([])["n"] == 0


def test_the_interval_covers_the_simulators_throughput_in_19_of_20_seeded_trials() -> None:
    # the oracle: the tiny profile's engine on a virtual clock, requests stopping at natural lengths;
    # its long-run throughput at C=16 is the truth each trial's interval (5 repeats of a 4-s window,
    # each its own seed) must cover
    from loadgen.sim.profile import load_profile
    from loadgen.sim.virtual import closed_loop

    profile = load_profile("tiny")

    def window(seed: int, window_s: float) -> float:
        r = closed_loop(profile, 16, prompt_tokens=200, output_tokens=256, warmup_s=2.0, window_s=window_s,
                        seed=seed, natural_lengths=True)  # fmt: skip
        return r.output_tok_s

    truth = window(10_000, 1500.0)
    covered = 0
    widths = []
    for trial in range(20):
        ci = mean_ci([window(100 * trial + r, 4.0) for r in range(5)])
        assert ci["low"] is not None and ci["high"] is not None
        covered += ci["low"] <= truth <= ci["high"]
        widths.append((ci["high"] - ci["low"]) / truth)
    assert covered >= 19, (covered, truth)
    # and the intervals are informative, not trivially wide: a few percent of the throughput
    assert 0.005 < sorted(widths)[10] < 0.10, widths


def _step(i: int, c: int, r: int | None, tok_s: float, ttft_p50: float, valid: bool = True) -> dict[str, Any]:
    s: dict[str, Any] = {
        "step": i,
        "concurrency": c,
        "context_tokens": None,
        "rate": None,
        "valid": valid,
        "output_tok_s": tok_s,
        "per_request_tok_s": tok_s / c,
        "ttft_ms": {"mean": ttft_p50, "p50": ttft_p50, "p90": ttft_p50, "p99": 2 * ttft_p50},
        "requests_ok": 10,
        "requests_failed": 0,
    }
    if r is not None:
        s["step_fields"] = {"repeat": r}
    return s


def test_groups_and_merged_steps() -> None:
    steps = [
        _step(0, 1, 0, 100.0, 20.0),
        _step(1, 1, 1, 110.0, 22.0),
        _step(2, 1, 2, 90.0, 18.0),
        _step(3, 8, 0, 700.0, 40.0),
        _step(4, 8, 1, 0.0, 0.0, valid=False),
        _step(5, 8, 2, 740.0, 44.0),
    ]
    assert [repeat_of(s) for s in steps] == [0, 1, 2, 0, 1, 2]
    groups = repeat_groups(steps)  # type: ignore[arg-type]
    assert [(g["concurrency"], g["steps"], g["repeats"], g["valid_repeats"]) for g in groups] == [
        (1, [0, 1, 2], 3, 3),
        (8, [3, 4, 5], 3, 2),
    ]
    tok = groups[1]["figures"]["output_tok_s"]
    assert tok["mean"] == 720.0 and tok["n"] == 2  # the INVALID repeat is left out
    merged = merged_steps(steps, groups)  # type: ignore[arg-type]
    assert [m["concurrency"] for m in merged] == [1, 8]
    assert merged[0]["output_tok_s"] == pytest.approx(100.0) and merged[0]["ttft_ms"]["p50"] == pytest.approx(20.0)
    assert merged[0]["ttft_ms"]["p99"] == pytest.approx(40.0) and merged[1]["requests_ok"] == 20


def test_knee_stability_names_the_agreement() -> None:
    s = knee_stability([64.0, 64.0, 128.0])
    assert s["mode"] == 64.0 and s["agree"] == 2 and not s["stable"]
    assert s["text"] == "C=64 in 2 of 3 repeats (C=128 in 1)"
    assert knee_stability([None, None])["text"] == "no knee in 2 of 2 repeats"


def test_ratio_ci_by_the_delta_method() -> None:
    spec = [2100.0, 2080.0, 2120.0]
    ar = [1000.0, 990.0, 1010.0]
    r = ratio_ci(spec, ar)
    assert r["ratio"] == pytest.approx(2.1) and r["beyond_noise"] is True
    se = math.sqrt((20.0**2 / 3) / 2100**2 + (10.0**2 / 3) / 1000**2)
    assert r["low"] < 2.1 < r["high"] and math.log(r["high"] / 2.1) == pytest.approx(math.log(2.1 / r["low"]))
    assert math.log(r["high"] / 2.1) > 2 * se  # t with few degrees of freedom is wider than 2 se
    same = ratio_ci([100.0, 104.0, 96.0], [101.0, 97.0, 103.0])
    assert same["beyond_noise"] is False and same["low"] < 1.0 < same["high"]
    assert ratio_ci([1.0], [2.0])["low"] is None


def test_compare_says_whether_a_ratio_is_beyond_the_noise() -> None:
    from loadgen.report.compare import compare_runs, render_compare_md

    def run(scale: float, jitter: tuple[float, ...]) -> dict[str, Any]:
        steps = [
            _step(3 * i + r, c, r, c * 100.0 * scale * j, 20.0)
            for i, c in enumerate((1, 64))
            for r, j in enumerate(jitter)
        ]
        return {"steps": steps}

    ar = run(1.0, (1.0, 0.99, 1.01))
    spec = run(2.1, (1.0, 0.99, 1.01))
    same = run(1.0, (1.01, 0.98, 1.0))
    cmp = compare_runs([ar, spec, same], ["ar", "spec", "again"])
    row = next(r for r in cmp["rows"] if r["concurrency"] == 64)
    assert row["values"]["spec"]["output_tok_s"] == pytest.approx(64 * 210.0)  # the mean of the repeats
    assert row["noise"]["spec"]["output_tok_s"]["beyond_noise"] is True
    assert row["noise"]["again"]["output_tok_s"]["beyond_noise"] is False
    md = render_compare_md(cmp)
    assert "spec vs ar at C=64: tok/s 2.10x, 95% CI 2.0" in md and "(beyond the noise)" in md
    assert "again vs ar at C=64: tok/s 1.00x" in md and "(within the noise)" in md
