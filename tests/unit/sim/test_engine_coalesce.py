"""Coalesced decode runs (``Engine.coalesce``, the fleet's engines): as many decode steps as nothing can
change, planned as one, ended early by an arrival; what they commit, when, and the energy they spend,
against the same engine stepping one step at a time."""

from __future__ import annotations

import pytest

from loadgen.fleet.sim import run_fleet
from loadgen.fleet.traffic import poisson
from loadgen.sim.engine import Engine, SimRequest
from loadgen.sim.profile import load_profile


def _req(rid: str, prompt: int, out: int) -> SimRequest:
    return SimRequest(rid=rid, prompt_tokens=prompt, max_new_tokens=out, target_tokens=out, stop_reason="length")


def _drive(engine: Engine, arrivals: list[tuple[float, SimRequest]]) -> dict[str, tuple[float, float, int]]:
    """Run the engine on a virtual clock to the end; each request's (first token, finish, tokens)."""
    pending = sorted(arrivals, key=lambda a: a[0])
    done: dict[str, tuple[float, float, int]] = {}
    while pending or engine.busy:
        nxt = engine.next_event_s
        if pending and (nxt is None or pending[0][0] <= nxt):
            t, req = pending.pop(0)
            engine.submit(req, t)
            if engine.busy:
                engine.interrupt(t)
            else:
                engine.advance(t)
            continue
        assert nxt is not None
        for em in engine.advance(nxt):
            if em.finished:
                done[em.req.rid] = (em.req.first_token_s, em.req.finish_s, em.req.generated)
        engine.check_invariants()
    return done


def test_a_coalesced_engine_commits_the_same_tokens_at_the_same_times() -> None:
    profile = load_profile("h100-llama-8b")
    arrivals = [(0.0, 500, 200), (0.05, 800, 120), (0.3, 300, 400), (1.2, 1500, 60), (1.21, 100, 30)]
    results = {}
    for coalesce in (False, True):
        engine = Engine(profile, seed=0)
        engine.coalesce = coalesce
        reqs = [(t, _req(f"r{i}", p, o)) for i, (t, p, o) in enumerate(arrivals)]
        results[coalesce] = (_drive(engine, reqs), engine.counters.decode_steps, engine.energy_j)
    (single, steps1, energy1), (runs, steps2, energy2) = results[False], results[True]
    assert steps1 == steps2 and set(single) == set(runs)
    for rid, (first, finish, tokens) in single.items():
        c_first, c_finish, c_tokens = runs[rid]
        assert c_tokens == tokens and c_first == pytest.approx(first, abs=1e-9)
        assert c_finish == pytest.approx(finish, rel=1e-6), rid  # interpolated step times: linear in the context
    assert energy2 == pytest.approx(energy1, rel=1e-5)


def test_an_arrival_ends_a_run_with_the_step_running_when_it_came() -> None:
    profile = load_profile("h100-llama-8b")
    engine = Engine(profile, seed=0)
    engine.coalesce = True
    engine.submit(_req("a", 500, 300), 0.0)
    engine.advance(0.0)  # the prefill
    prefill_end = engine.next_event_s
    assert prefill_end is not None
    engine.advance(prefill_end)  # the first token; the run of the other 299 is planned
    step = engine.current
    assert step is not None and step.kind == "run" and len(step.ends) == 299
    ends = list(step.ends)
    t = (ends[9] + ends[10]) / 2  # inside the run's 11th step
    engine.submit(_req("b", 200, 10), t)
    engine.interrupt(t)
    assert engine.next_event_s == pytest.approx(ends[10]) and len(engine.current.ends) == 11  # type: ignore[union-attr]
    emissions = engine.advance(ends[10])
    assert [(e.req.rid, e.tokens) for e in emissions] == [("a", 11)]
    assert engine.current is not None and engine.current.kind == "prefill"  # b is admitted next, as it would be


def test_speculative_runs_draw_what_single_cycles_draw() -> None:
    """DDTree's acceptance drawn for a whole run at once: the fleet's figures stay within the spread of
    the engine's own seeds (the draws differ; their distribution does not)."""
    profile = load_profile("b300x8-kimi-k2.6-ddtree")

    def tpot_p50(coalesce: bool, seed: int) -> float:
        r = run_fleet(profile, poisson(1.5, 400, 2000, 300, seed=seed), replicas=1, window_s=400, coalesce=coalesce)
        value = r.total.hist["tpot"].percentile(50)
        assert value is not None and r.total.finished == r.requests
        return value

    single = [tpot_p50(False, s) for s in (0, 1, 2)]
    coalesced = [tpot_p50(True, s) for s in (0, 1, 2)]
    mid = sorted(single)[1]
    assert all(abs(v / mid - 1) < 0.04 for v in coalesced), (single, coalesced)
