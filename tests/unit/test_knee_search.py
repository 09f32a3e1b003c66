"""--find-knee's search against synthetic servers whose capacity is known."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from loadgen.analysis.knee import SearchBudget, search_next, search_state


def usl(c: float, sigma: float, kappa: float) -> float:
    return 300.0 * c / (1 + sigma * (c - 1) + kappa * c * (c - 1))


def kv_server(kv_capacity: float) -> Callable[[float, int], dict[str, Any]]:
    """Throughput from a USL (sigma 0.01, kappa 1e-6: still +43% per doubling at C=128) up to the KV
    capacity, flat past it; KV fill = C / capacity (capped at 1); preemptions past capacity."""

    def measure(c: float, i: int) -> dict[str, Any]:
        served = min(c, kv_capacity)
        return {
            "step": i,
            "concurrency": c,
            "context_tokens": 1024,
            "output_tok_s": usl(served, 0.01, 1e-6),
            "requests_ok": 100,
            "requests_failed": 0,
            "errors": {},
            "kv_usage": {"mean": min(1.0, c / kv_capacity) * 0.95, "max": min(1.0, c / kv_capacity)},
            "preemptions": max(0, int(c - kv_capacity)),
            "valid": True,
        }

    return measure


def run_search(
    measure: Callable[[float, int], dict[str, Any]], budget: SearchBudget, step_s: float = 0.0
) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = []
    while (nxt := search_next(history, budget, elapsed_s=step_s * len(history))) is not None:
        assert nxt not in [h["concurrency"] for h in history], "the search measured a load twice"
        history.append(measure(nxt, len(history)))
        assert len(history) <= budget.max_steps
    return history


def test_converges_on_the_kv_limit_within_budget() -> None:
    # KV reaches the 95% threshold at C = 0.95 * 150 = 142.5: the true capacity.
    # Expected path: 1, 2, 4, ..., 128 good, 256 saturated, then 192, 160, 144 saturated, 136 good;
    # 144 - 136 = 8 <= 10% of 136: converged after 13 steps.
    budget = SearchBudget(max_steps=14, max_load=1024)
    history = run_search(kv_server(150.0), budget)
    state = search_state(history, budget)
    assert state.phase == "done" and state.stop_reason.startswith("converged")
    assert state.last_good is not None and state.first_saturated is not None
    assert 0.9 * 142.5 <= state.last_good <= 142.5 < state.first_saturated
    assert state.first_saturated - state.last_good <= 0.1 * state.last_good
    assert len(history) == 13
    assert "KV cache" in state.saturated[state.first_saturated]


def test_finer_precision_gets_closer_with_more_steps() -> None:
    budget = SearchBudget(max_steps=20, max_load=1024, rel_precision=0.0, min_gap=1)
    history = run_search(kv_server(150.0), budget)
    state = search_state(history, budget)
    assert (state.last_good, state.first_saturated) == (142, 143)
    assert len(history) <= 17  # 9 raising steps + at most ceil(log2(128)) = 7 bisections


def test_stops_when_the_step_budget_is_used() -> None:
    budget = SearchBudget(max_steps=6)
    history = run_search(kv_server(150.0), budget)
    state = search_state(history, budget)
    assert len(history) == 6 and [h["concurrency"] for h in history] == [1, 2, 4, 8, 16, 32]
    assert state.stop_reason == "step budget of 6 used"
    assert state.first_saturated is None and state.last_good == 32


def test_stops_when_the_time_budget_would_be_passed() -> None:
    # 60 s per step, 400 s allowed: after 6 steps (360 s) a 7th would end at 420 s.
    budget = SearchBudget(max_steps=50, max_time_s=400, step_time_s=60)
    history = run_search(kv_server(150.0), budget, step_s=60)
    assert len(history) == 6
    assert search_state(history, budget, elapsed_s=360).stop_reason.startswith("time budget of 400 s used")


def test_marginal_gain_stops_the_raise_before_the_usl_peak() -> None:
    # No KV limit; USL sigma 0.05, kappa 1e-4 peaks at N* = 97.5. The local gain per doubling falls
    # under 10% between C=32 (+34% to 64) and C=64 (64 -> 128 is -3%).
    def measure(c: float, i: int) -> dict[str, Any]:
        return {"step": i, "concurrency": c, "output_tok_s": usl(c, 0.05, 1e-4), "requests_ok": 100, "valid": True}

    budget = SearchBudget(max_steps=15)
    history = run_search(measure, budget)
    state = search_state(history, budget)
    assert state.stop_reason.startswith("converged")
    assert state.last_good is not None and 32 <= state.last_good < 97.5
    assert "throughput" in state.saturated[state.first_saturated or 0]
    # The last good step still gains >= 10% per doubling over its reference, the first saturated less.
    x_good, x_sat = usl(state.last_good, 0.05, 1e-4), usl(state.first_saturated or 0, 0.05, 1e-4)
    assert x_sat / x_good < 2 ** (math.log2((state.first_saturated or 0) / state.last_good))


def test_slo_breach_saturates_a_step() -> None:
    def measure(c: float, i: int) -> dict[str, Any]:
        return {
            "step": i,
            "concurrency": c,
            "output_tok_s": 100.0 * c,
            "requests_ok": 100,
            "ttft_ms": {"p99": 10.0 * c},  # ttft_p99 <= 500 ms up to C=50
            "valid": True,
        }

    budget = SearchBudget(max_steps=20, slo={"ttft_p99_ms": 500}, rel_precision=0.0)
    state = search_state(run_search(measure, budget), budget)
    assert (state.last_good, state.first_saturated) == (50, 51)


def test_server_down_at_the_start_searches_downwards() -> None:
    def measure(c: float, i: int) -> dict[str, Any]:
        ok = 100 if c <= 4 else 0
        return {
            "step": i,
            "concurrency": c,
            "output_tok_s": 10.0 * c if ok else 0.0,
            "requests_ok": ok,
            "requests_failed": 100 - ok,
            "valid": ok > 0,
        }

    budget = SearchBudget(start=32, max_steps=10, rel_precision=0.0)
    history = run_search(measure, budget)
    assert [h["concurrency"] for h in history][:4] == [32, 16, 8, 4]
    state = search_state(history, budget)
    assert (state.last_good, state.first_saturated) == (4, 5)
    assert "nothing served" in state.saturated[32]


def test_saturated_at_the_lowest_load_stops() -> None:
    budget = SearchBudget(start=1)
    history = [{"step": 0, "concurrency": 1, "requests_ok": 0, "requests_failed": 10, "valid": False}]
    state = search_state(history, budget)
    assert state.next_load is None and state.stop_reason == "saturated already at the lowest load C=1"


def test_no_saturation_up_to_the_maximum_load() -> None:
    def measure(c: float, i: int) -> dict[str, Any]:
        return {"step": i, "concurrency": c, "output_tok_s": 100.0 * c, "requests_ok": 100, "valid": True}

    budget = SearchBudget(max_load=100)
    history = run_search(measure, budget)
    assert [h["concurrency"] for h in history] == [1, 2, 4, 8, 16, 32, 64, 100]
    assert search_state(history, budget).stop_reason == "no saturation up to the maximum load C=100"


@pytest.mark.parametrize("capacity", [7.5, 23.0])
def test_open_loop_rate_search(capacity: float) -> None:
    # An open-loop server errors once the offered rate passes its capacity (req/s).
    def measure(rate: float, i: int) -> dict[str, Any]:
        failed = 0 if rate <= capacity else 50
        return {
            "step": i,
            "concurrency": None,
            "rate": rate,
            "output_tok_s": 200.0 * min(rate, capacity),
            "requests_ok": 100,
            "requests_failed": failed,
            "valid": True,
        }

    budget = SearchBudget(axis="rate", start=0.5, rel_precision=0.05, max_steps=20)  # min_gap 0.1 req/s
    history: list[dict[str, Any]] = []
    while (nxt := search_next(history, budget)) is not None:
        history.append(measure(nxt, len(history)))
    state = search_state(history, budget)
    assert state.last_good is not None and state.first_saturated is not None
    assert 0.95 * capacity <= state.last_good <= capacity < state.first_saturated
    assert isinstance(history[1]["rate"], float)
