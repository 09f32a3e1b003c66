"""forecast.run_ramp: a ramp's steps one after another on one engine, as ``loadgen ramp`` runs them."""

from __future__ import annotations

import pytest

from loadgen.sim.forecast import run_point, run_ramp
from loadgen.sim.profile import load_profile

KW = dict(input_tokens=1000, output_tokens=128, warmup_s=2.0, window_s=8.0, client_gap_s=0.002)


def test_one_step_is_run_point() -> None:
    p = load_profile("h200-llama-8b")
    (ramp,) = run_ramp(p, [8], **KW)
    point = run_point(p, concurrency=8, **KW)
    assert ramp.ttft_s == point.ttft_s and ramp.output_tokens == point.output_tokens


def test_a_user_carried_over_from_the_last_step_runs_out_of_phase_with_the_new_ones() -> None:
    p = load_profile("h200-llama-8b")
    alone = run_ramp(p, [8], **KW)[0]
    after_one = run_ramp(p, [1, 8], **KW)[1]
    # from an idle server the eight stay in step: every prefill is one batch of eight
    assert min(alone.ttft_s) == pytest.approx(max(alone.ttft_s), rel=1e-6)
    # after a step of one, that user is mid-request when the seven start: its next prompt is
    # prefilled alone, the seven's together, and prefills fall inside the others' decodes
    assert min(after_one.ttft_s) < 0.2 * max(after_one.ttft_s)
    assert sorted(after_one.tpot_s)[len(after_one.tpot_s) // 2] > 1.02 * sorted(alone.tpot_s)[0]


def test_a_smaller_step_retires_users_and_an_open_loop_switches_rate() -> None:
    p = load_profile("h200-llama-8b")
    down = run_ramp(p, [16, 2, 16], **KW)
    assert max(down[0].running) == 16
    assert max(down[1].running) <= 2  # the warm-up let the retired users' last requests finish
    assert max(down[2].running) == 16  # and the retired users come back when the load does
    rates = run_ramp(p, None, [1.0, 4.0], input_tokens=500, output_tokens=64, warmup_s=5.0, window_s=40.0, drain_s=30.0)
    # below saturation an open loop serves what arrives: rate x output tokens
    assert rates[0].output_tok_s == pytest.approx(1.0 * 64, rel=0.35)
    assert rates[1].output_tok_s == pytest.approx(4.0 * 64, rel=0.2)
    with pytest.raises(ValueError, match="not both"):
        run_ramp(p, [1], [1.0])


def test_a_clients_jittery_turns_move_its_users_out_of_step() -> None:
    # the same eight users from an idle server: with a constant turn they stay in step (every prefill
    # a batch of eight); with turns of 1-6 ms, as a real client's, the first to send is prefilled
    # alone and the others' first tokens come sooner or later than the batch's
    p = load_profile("h200-llama-8b")
    steady = run_ramp(p, [8], **KW)[0]
    jitter = run_ramp(p, [8], **{**KW, "client_gaps_s": [0.001, 0.003, 0.006]})[0]
    assert len(set(round(t, 6) for t in steady.ttft_s)) == 1
    assert min(jitter.ttft_s) < 0.5 * max(jitter.ttft_s)
    assert sum(jitter.tpot_s) / len(jitter.tpot_s) > sum(steady.tpot_s) / len(steady.tpot_s)
