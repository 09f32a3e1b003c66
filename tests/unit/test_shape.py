"""The ramp shape on a fake clock: steps get their full windows whatever the spawn took."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.load.shape import RampShape, StepSink
from loadgen.spec.options import StepPlan, build_plan

S = 1_000_000_000


class Clock:
    """The shape's clock: ``t`` in ns, where the test moves it (it starts at 1000 s)."""

    def __init__(self) -> None:
        self.t = 1_000 * S

    def __call__(self) -> int:
        return self.t


class Runner:
    """Locust's runner as the shape sees it: the users it runs."""

    def __init__(self) -> None:
        self.user_count = 0


class Sink(StepSink):
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.window: dict[int, int] = {}
        self.sending: set[int] = set()  # replay steps whose dispatcher has arrivals left to hand out

    def step_started(self, index: int, plan: StepPlan, t_ns: int) -> None:
        self.events.append(("start", index, plan.concurrency, t_ns))

    def step_steady(self, index: int, t_ns: int) -> None:
        self.events.append(("steady", index, t_ns))

    def steady_due(self, index: int, t_ns: int) -> None:
        self.events.append(("due", index, t_ns))

    def step_ended(self, index: int, t_ns: int, reason: str) -> None:
        self.events.append(("end", index, t_ns, reason))

    def requests_in_window(self, index: int) -> int:
        return self.window.get(index, 0)

    def replay_sending(self, index: int) -> bool:
        return index in self.sending


def make(plan: list[StepPlan]) -> tuple[RampShape, Clock, Runner, Sink]:
    clock, runner, sink = Clock(), Runner(), Sink()
    shape = RampShape(plan, sink, now_ns=clock)
    shape.runner = runner  # type: ignore[assignment]
    return shape, clock, runner, sink


def test_slow_spawn_does_not_shorten_or_skip_a_step() -> None:
    shape, clock, runner, sink = make(build_plan([2, 4], None, warmup_s=2, duration_s=3, requests=None))
    t0 = clock.t
    assert shape.tick() == (2, 10_000.0)
    # the spawn takes 10 s (longer than warm-up + duration): Locust blocks, then ticks again
    clock.t += 10 * S
    runner.user_count = 2
    shape.on_spawning_complete(2)
    assert shape.tick() == (2, 10_000.0)
    clock.t += 2 * S
    assert shape.tick() == (2, 10_000.0)  # steady now, window runs 3 s from here
    clock.t += 2 * S
    assert shape.tick() == (2, 10_000.0)
    clock.t += 1 * S
    assert shape.tick() == (4, 10_000.0)  # step 1 begins
    assert sink.events[:5] == [
        ("start", 0, 2, t0),
        ("due", 0, t0 + 12 * S),
        ("steady", 0, t0 + 12 * S),
        ("end", 0, t0 + 15 * S, "duration"),
        ("start", 1, 4, t0 + 15 * S),
    ]


def test_steady_time_is_reached_plus_warmup_not_tick_time() -> None:
    shape, clock, runner, sink = make([StepPlan(3, None, 1.5, 2.0, None)])
    shape.tick()
    clock.t += S // 3
    runner.user_count = 3
    shape.on_spawning_complete(3)
    reached = clock.t
    clock.t += 2 * S  # ticks are a second apart: the tick is late, the record is not
    shape.tick()
    assert ("steady", 0, reached + int(1.5 * S)) in sink.events


def test_the_steady_time_is_told_when_the_step_reaches_its_load_before_the_tick() -> None:
    """The users tell warm-up from window by it (a request drawn as warm-up but sent in the window
    would be the warm-up stream's): known at the spawn's end, a second before the tick that logs it."""
    shape, clock, runner, sink = make([StepPlan(3, None, 1.0, 2.0, None)])
    shape.tick()
    clock.t += S // 4
    runner.user_count = 3
    shape.on_spawning_complete(3)
    assert sink.events[-1] == ("due", 0, clock.t + S) and not [e for e in sink.events if e[0] == "steady"]


def test_requests_per_step_ends_the_step() -> None:
    shape, clock, runner, sink = make([StepPlan(1, None, 0.0, None, 5), StepPlan(2, None, 0.0, None, 5)])
    shape.tick()
    runner.user_count = 1
    shape.on_spawning_complete(1)
    clock.t += S
    shape.tick()
    sink.window[0] = 4
    clock.t += S
    assert shape.tick() == (1, 10_000.0)
    sink.window[0] = 5
    clock.t += S
    assert shape.tick() == (2, 10_000.0)
    assert ("end", 0, clock.t, "requests") in sink.events


def test_last_step_ends_the_test_and_stop_records_reason() -> None:
    shape, clock, runner, sink = make([StepPlan(1, None, 0.0, 1.0, None)])
    shape.tick()
    runner.user_count = 1
    shape.on_spawning_complete(1)
    clock.t += 2 * S
    assert shape.tick() is None
    assert sink.events[-1][0] == "end" and sink.events[-1][3] == "duration"

    shape2, clock2, _runner2, sink2 = make([StepPlan(1, None, 0.0, 60.0, None)])
    shape2.tick()
    clock2.t += S
    shape2.stop("stopped")
    assert shape2.tick() is None
    assert sink2.events[-1] == ("end", 0, clock2.t, "stopped")


def test_same_concurrency_next_step_is_reached_at_once() -> None:
    plan = build_plan([4], [100, 2000], warmup_s=1, duration_s=1, requests=None)
    assert [(p.concurrency, p.context_tokens) for p in plan] == [(4, 100), (4, 2000)]
    shape, clock, runner, sink = make(plan)
    shape.tick()
    runner.user_count = 4
    shape.on_spawning_complete(4)
    start = clock.t
    clock.t += 2 * S
    shape.tick()  # steady logged at start + 1 s, window ends at start + 2 s: step 1 begins
    assert ("start", 1, 4, clock.t) in sink.events
    clock.t += 1 * S
    shape.tick()
    assert ("steady", 1, start + 3 * S) in sink.events


def test_plan_needs_a_length() -> None:
    with pytest.raises(ValueError, match="--step-seconds or --requests-per-step"):
        build_plan([1], None, 1.0, None, None)


def test_a_replay_step_ends_at_its_duration_only_once_its_span_is_sent() -> None:
    from dataclasses import replace

    from loadgen.workload.datasets import Trace
    from loadgen.workload.traffic import TraceReplay

    replay = TraceReplay(Trace("t.jsonl", "jsonl", ()), 0.5)
    step = replace(StepPlan(1, None, 0.0, 2.0, None), replay=replay)
    shape, clock, runner, sink = make([step, StepPlan(2, None, 0.0, 2.0, None)])
    t0 = clock.t
    shape.tick()
    runner.user_count = 1
    shape.on_spawning_complete(1)
    sink.sending.add(0)  # the load generator fell behind the trace
    clock.t += 5 * S
    assert shape.tick() == (1, 10_000.0) and not [e for e in sink.events if e[0] == "end"]
    sink.sending.clear()  # the dispatcher handed out its last arrival
    clock.t += S // 2
    assert shape.tick() == (2, 10_000.0)
    assert ("end", 0, t0 + int(5.5 * S), "duration") in sink.events
    # a rate or a concurrency step is not held by it: its arrivals go on until the step ends
    shape2, clock2, runner2, sink2 = make([StepPlan(1, None, 0.0, 2.0, None), StepPlan(2, None, 0.0, 2.0, None)])
    shape2.tick()
    runner2.user_count = 1
    shape2.on_spawning_complete(1)
    sink2.sending.add(0)
    clock2.t += 2 * S
    assert shape2.tick() == (2, 10_000.0)
