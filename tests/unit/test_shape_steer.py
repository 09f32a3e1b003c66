"""Steering a running ramp (hold, release, skip, add a step, set the load) on a fake clock: every
change is a step boundary at the exact time it was asked for, with who asked."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from loadgen.load.shape import RampShape, SteerError, StepSink, derive_step
from loadgen.spec.options import StepPlan, build_plan
from tests.unit.test_shape import Clock, Runner, S

T0 = 1_000 * S  # where a Clock starts
WHO = "web UI (127.0.0.1)"


class Sink(StepSink):
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def step_started(self, index: int, plan: StepPlan, t_ns: int, fields: Mapping[str, Any] | None = None) -> None:
        self.lines.append({"step": index, "event": "start", "t_ns": t_ns, **plan.describe(), **(fields or {})})

    def step_steady(self, index: int, t_ns: int) -> None:
        self.lines.append({"step": index, "event": "steady", "t_ns": t_ns})

    def step_ended(self, index: int, t_ns: int, reason: str, fields: Mapping[str, Any] | None = None) -> None:
        self.lines.append({"step": index, "event": "end", "t_ns": t_ns, "reason": reason, **(fields or {})})

    def brief(self) -> list[tuple[Any, ...]]:
        return [
            (ln["event"], ln["step"], ln["t_ns"] - T0, ln.get("reason", ln.get("concurrency"))) for ln in self.lines
        ]


class Ramp:
    """A shape on a fake clock whose runner reaches every user count at once."""

    def __init__(self, plan: list[StepPlan], closed: bool = True, open_: bool = True) -> None:
        self.clock, self.runner, self.sink = Clock(), Runner(), Sink()
        self.shape = RampShape(
            plan,
            self.sink,
            now_ns=self.clock,
            closed_classes=["closed"] if closed else None,
            open_classes=["open"] if open_ else None,
        )
        self.shape.runner = self.runner  # type: ignore[assignment]

    def tick(self, after_s: float = 0.0) -> Any:
        self.clock.t += int(after_s * S)
        out = self.shape.tick()
        if out is not None:
            self.runner.user_count = out[0]
            self.shape.on_spawning_complete(out[0])
        return out


def plan(*users: int, warmup_s: float = 1.0, duration_s: float = 4.0) -> list[StepPlan]:
    return build_plan(list(users), [500], warmup_s, duration_s, None)


def test_set_load_ends_the_step_and_inserts_one_like_it_at_the_new_load() -> None:
    r = Ramp(plan(2, 8))
    r.tick()
    r.tick(1.0)  # steady at 1 s
    r.clock.t += int(2.5 * S)
    message = r.shape.set_load(WHO, concurrency=5)
    assert message == "step 0 ended; step 1 at 5 users begins"
    assert r.shape.index == 1 and [p.concurrency for p in r.shape.plan] == [2, 5, 8]
    assert r.tick() == (5, 10_000.0, ["closed"])  # the runner gets the new count at the next tick
    r.tick(1.0)
    r.tick(4.0)  # the inserted step runs its own warm-up and duration
    assert r.sink.brief() == [
        ("start", 0, 0, 2),
        ("steady", 0, 1 * S, None),
        ("end", 0, int(3.5 * S), "changed"),
        ("start", 1, int(3.5 * S), 5),
        ("steady", 1, int(4.5 * S), None),
        ("end", 1, int(8.5 * S), "duration"),
        ("start", 2, int(8.5 * S), 8),
    ]
    end, start = r.sink.lines[2], r.sink.lines[3]
    assert end["ended_by"] == WHO
    assert start["context_tokens"] == 500 and start["warmup_s"] == 1.0 and start["duration_s"] == 4.0
    assert start["origin"] == {
        "action": "set_load",
        "by": WHO,
        "t_ns": T0 + int(3.5 * S),
        "from": {"concurrency": 2},
        "to": {"concurrency": 5},
        "after": 0,
    }
    assert "origin" not in r.sink.lines[6]  # a planned step says nothing of steering


def test_set_load_to_a_rate_switches_to_the_open_loop_users() -> None:
    r = Ramp(plan(4))
    r.tick()
    r.clock.t += 2 * S
    r.shape.set_load(WHO, rate=2.5)
    # Locust would stop any one of the 4 closed-loop users: all of them stop first
    assert r.tick() == (0, 10_000.0, ["open"])
    assert r.shape.reached_ns is None
    assert r.tick(1.0) == (1, 10_000.0, ["open"])  # then the dispatcher starts; its warm-up from here
    assert r.shape.reached_ns == T0 + 3 * S
    r.tick(1.0)
    assert r.sink.lines[-1] == {"step": 1, "event": "steady", "t_ns": T0 + 4 * S}
    start = r.sink.lines[-2]
    assert start["rate"] == 2.5 and start["concurrency"] is None
    assert start["origin"]["from"] == {"concurrency": 4} and start["origin"]["to"] == {"rate": 2.5}


def test_set_load_is_validated_and_idempotent() -> None:
    r = Ramp(plan(4))
    r.tick()
    for bad, text in [
        ({"concurrency": 0}, "concurrency 0: give a whole number of users, 1 or more"),
        ({"concurrency": -3}, "concurrency -3"),
        ({"concurrency": 2.5}, "concurrency 2.5"),
        ({"rate": 0.0}, "rate 0.0: give a number of requests per second above 0"),
        ({"rate": float("nan")}, "rate nan"),
        ({}, "give either a concurrency (users) or a rate (req/s)"),
        ({"concurrency": 2, "rate": 1.0}, "not both"),
    ]:
        with pytest.raises(SteerError, match=None) as err:
            r.shape.set_load(WHO, **bad)
        assert text in str(err.value)
    assert r.shape.set_load(WHO, concurrency=4) == "step 0 already runs at 4 users: nothing changed"
    r.clock.t += S
    r.shape.set_load(WHO, concurrency=6, step=0)
    # the same request again (a double click, a retry) names a step that already ended
    with pytest.raises(SteerError, match="step 0 is not running \\(the ramp is at step 1\\): nothing done"):
        r.shape.set_load(WHO, concurrency=6, step=0)
    assert [ln["event"] for ln in r.sink.lines] == ["start", "end", "start"]


def test_closed_loop_only_ramp_refuses_a_rate() -> None:
    r = Ramp(plan(4), open_=False)
    r.tick()
    with pytest.raises(SteerError, match="closed-loop users only; give a concurrency"):
        r.shape.set_load(WHO, rate=3.0)
    with pytest.raises(SteerError, match="closed-loop users only"):
        r.shape.add_step(derive_step(r.shape.plan[0], rate=3.0), WHO)


def test_skip_ends_the_step_now_and_the_last_skip_ends_the_ramp() -> None:
    r = Ramp(plan(1, 2))
    r.tick()
    r.clock.t += int(0.25 * S)  # during warm-up
    assert r.shape.skip(WHO, step=0) == "step 0 skipped; step 1 (2 users) begins"
    r.tick()
    r.tick(1.0)
    r.clock.t += S
    assert r.shape.skip(WHO) == "step 1 skipped; it was the last: the ramp ends"
    assert r.tick() is None
    assert r.sink.brief() == [
        ("start", 0, 0, 1),
        ("end", 0, S // 4, "skipped"),  # no steady line: it ended during its warm-up
        ("start", 1, S // 4, 2),
        ("steady", 1, int(1.25 * S), None),
        ("end", 1, int(2.25 * S), "skipped"),
    ]
    assert r.sink.lines[1]["ended_by"] == WHO
    with pytest.raises(SteerError, match="the ramp has finished: there is no step to skip"):
        r.shape.skip(WHO)
    assert r.shape.snapshot()["index"] is None and r.shape.snapshot()["finished"]


def test_steering_before_the_first_tick_says_so() -> None:
    r = Ramp(plan(1))
    with pytest.raises(SteerError, match="has not begun yet"):
        r.shape.skip(WHO)
    with pytest.raises(SteerError, match="has not begun yet"):
        r.shape.hold(WHO)


def test_hold_keeps_the_step_running_until_release_ends_it() -> None:
    r = Ramp(plan(3, 6))
    r.tick()
    r.tick(1.0)  # steady at 1 s; planned end at 5 s
    r.clock.t += S
    assert r.shape.hold(WHO) == "step 0 (3 users) held: it keeps running until Release"
    assert r.shape.hold("someone else") == f"step 0 is already held (by {WHO})"
    r.tick(10.0)  # well past the planned end: still step 0
    assert r.shape.index == 0 and r.shape.snapshot()["ends_in_s"] is None
    r.clock.t += S
    message = r.shape.release("web UI (10.0.0.2)")
    assert message == "step 0 released and ended; step 1 (6 users) begins"
    assert r.shape.release(WHO) == "nothing is held"
    end = r.sink.lines[2]
    assert (end["reason"], end["t_ns"], end["ended_by"]) == ("released", T0 + 13 * S, "web UI (10.0.0.2)")
    assert end["holds"] == [
        {"by": WHO, "from_ns": T0 + 2 * S, "to_ns": T0 + 13 * S, "released_by": "web UI (10.0.0.2)"}
    ]
    assert r.sink.lines[3]["event"] == "start" and r.sink.lines[3]["t_ns"] == T0 + 13 * S


def test_release_before_the_planned_end_lets_the_step_end_by_its_plan() -> None:
    r = Ramp(plan(3, 6))
    r.tick()
    r.tick(1.0)
    r.shape.hold(WHO)
    r.clock.t += S
    assert r.shape.release(WHO) == "step 0 released: it ends by its plan"
    r.tick(2.0)  # 4 s: not yet
    assert r.shape.index == 0
    r.tick(1.0)  # 5 s: the planned end
    end = r.sink.lines[2]
    assert (end["reason"], end["t_ns"]) == ("duration", T0 + 5 * S)
    assert end["holds"] == [{"by": WHO, "from_ns": T0 + 1 * S, "to_ns": T0 + 2 * S, "released_by": WHO}]
    assert "ended_by" not in end


def test_a_hold_carries_over_a_set_load_and_ends_with_a_skip() -> None:
    r = Ramp(plan(3, 6))
    r.tick()
    r.tick(1.0)
    r.shape.hold(WHO)
    r.clock.t += 9 * S
    r.shape.set_load(WHO, concurrency=4)
    r.tick()
    r.tick(30.0)
    assert r.shape.index == 1 and r.shape.snapshot()["held"]  # the new step is held too
    r.shape.skip("web UI (10.0.0.2)")
    assert r.shape.snapshot()["held"] is False and r.shape.index == 2
    ends = [ln for ln in r.sink.lines if ln["event"] == "end"]
    assert ends[0]["reason"] == "changed" and ends[0]["holds"][0]["released_by"] is None
    assert ends[1]["reason"] == "skipped" and ends[1]["holds"] == [
        {"by": WHO, "from_ns": T0 + 10 * S, "to_ns": T0 + 40 * S, "released_by": None}
    ]


def test_add_step_appends_a_step_that_says_who_added_it() -> None:
    r = Ramp(plan(1))
    r.tick()
    r.clock.t += S // 2
    message = r.shape.add_step(derive_step(r.shape.plan[-1], concurrency=3), WHO)
    assert message == "step 1 (3 users) added at the end of the ramp"
    snap = r.shape.snapshot()
    assert [(s["index"], s["status"], s["load"]) for s in snap["steps"]] == [
        (0, "warm-up", "1 user"),
        (1, "planned", "3 users"),
    ]
    r.tick(0.5)
    r.tick(4.0)  # step 0 ends by its duration, the added step begins
    start = r.sink.lines[-1]
    assert (start["step"], start["concurrency"], start["context_tokens"]) == (1, 3, 500)
    assert start["origin"] == {"action": "add_step", "by": WHO, "t_ns": T0 + S // 2, "to": {"concurrency": 3}}
    with pytest.raises(SteerError, match="concurrency 0"):
        r.shape.add_step(derive_step(r.shape.plan[-1], concurrency=0), WHO)


def test_snapshot_shows_the_plan_and_the_time_left() -> None:
    r = Ramp(plan(2, 4))
    r.tick()
    r.tick(1.0)
    r.clock.t += int(1.5 * S)
    snap = r.shape.snapshot()
    assert snap["index"] == 0 and snap["ends_in_s"] == 2.5 and not snap["held"] and not snap["finished"]
    assert [s["status"] for s in snap["steps"]] == ["steady", "planned"]
    r.shape.stop("stopped")
    assert [s["status"] for s in r.shape.snapshot()["steps"]] == ["ended", "not run"]


def test_the_report_reads_steered_steps_from_steps_jsonl(tmp_path: Path) -> None:
    """Steps written by RunState as steering made them: each keeps its own window and figures; one
    skipped in its warm-up is invalid and says why, and nothing downstream breaks on it."""
    from loadgen.analysis.load import load_run
    from loadgen.analysis.synthetic import T0_NS, make_record, write_run_dir
    from loadgen.load.runtime import RunState, TargetOptions
    from loadgen.report.pipeline import rebuild

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    state = RunState(run_dir, TargetOptions(url="http://127.0.0.1:1", model="m"), lambda plan: None)
    clock = Clock()
    clock.t = T0_NS
    shape = RampShape(build_plan([2, 8], None, 1.0, 4.0, None), state, now_ns=clock)
    runner = Runner()
    shape.runner = runner  # type: ignore[assignment]

    def tick(after_ms: int) -> None:
        clock.t += after_ms * 1_000_000
        out = shape.tick()
        if out is not None:
            runner.user_count = out[0]
            shape.on_spawning_complete(out[0])

    tick(0)
    tick(1000)  # step 0 steady at 1 s
    clock.t += 2000 * 1_000_000
    shape.set_load(WHO, concurrency=4)  # 3 s: step 0 ends "changed", step 1 (4 users) begins
    tick(0)
    clock.t += 500 * 1_000_000
    shape.skip(WHO)  # 3.5 s: step 1 skipped in its warm-up; step 2 (8 users) begins
    tick(0)
    tick(1000)  # steady at 4.5 s
    tick(4000)  # ends at 8.5 s by its duration: the ramp is over
    state.close()
    # requests: step 0 sends in its window [1, 3) s, step 1 one in its warm-up, step 2 in [4.5, 8.5) s
    records = [make_record(f"a{i}", 0, 1000 + 300 * i, [50, 100, 150]) for i in range(6)]
    records.append(make_record("b", 1, 3100, [50, 100]))
    records += [make_record(f"c{i}", 2, 4600 + 500 * i, [40, 80]) for i in range(7)]
    write_run_dir(run_dir, records={"requests-w0.jsonl": records}, manifest={"kind": "locust-ramp", "run_id": "r"})

    steps = load_run(run_dir).steps
    assert [(s.step, s.concurrency, s.end_reason) for s in steps] == [
        (0, 2, "changed"),
        (1, 4, "skipped"),
        (2, 8, "duration"),
    ]
    assert steps[0].fields["ended_by"] == WHO and steps[1].fields["origin"]["to"] == {"concurrency": 4}
    summary = rebuild(run_dir)
    rows = summary["steps"]
    assert [(r["step"], r["requests_ok"], r["window_s"], r["valid"]) for r in rows] == [
        (0, 6, 2.0, True),
        (1, 0, 0.0, False),
        (2, 7, 4.0, True),
    ]
    assert rows[1]["invalid_reason"] == "not steady: ended during its warm-up (skipped)"
    assert rows[1]["requests_warmup"] == 1 and rows[1]["output_tok_s"] is None
    assert rows[1]["step_fields"]["origin"]["action"] == "set_load"
    assert "ended during its warm-up (skipped)" in (run_dir / "report.md").read_text()


def test_back_from_a_rate_to_one_user_is_not_reached_by_the_dispatcher() -> None:
    r = Ramp([StepPlan(1, None, 1.0, 4.0, None, rate=3.0)])
    assert r.tick() == (1, 10_000.0, ["open"])
    r.clock.t += 2 * S
    r.shape.set_load(WHO, concurrency=1)  # one user, as the one dispatcher: not the same users
    assert r.shape.reached_ns is None
    assert r.tick() == (0, 10_000.0, ["closed"])
    assert r.tick(0.5) == (1, 10_000.0, ["closed"])
    assert r.shape.reached_ns == T0 + int(2.5 * S)


def test_the_ramp_is_what_the_control_routes_steer() -> None:
    from loadgen.webui.control import Steerable

    r = Ramp(plan(2))
    assert isinstance(r.shape, Steerable)
    r.tick()
    assert r.shape.add_load(WHO, rate=1.5) == "step 1 (1.5 req/s) added at the end of the ramp"
    added = r.shape.plan[-1]
    assert (added.rate, added.concurrency, added.context_tokens, added.warmup_s) == (1.5, 1, 500, 1.0)


def test_an_open_loop_rate_step_can_be_held_a_trace_replay_cannot() -> None:
    from loadgen.workload.datasets import Trace
    from loadgen.workload.traffic import TraceReplay

    r = Ramp(plan(2))
    r.tick()
    r.shape.hold(WHO)
    message = r.shape.set_load(WHO, rate=4.0)
    assert message == "step 0 ended; step 1 at 4 req/s begins, held"  # a rate's arrivals go on until it ends
    assert r.shape.snapshot()["held"]
    replay = replace(plan(1)[0], rate=None, replay=TraceReplay(Trace("t.jsonl", "jsonl", ()), 2.0))
    r = Ramp([replay])
    r.tick()
    with pytest.raises(SteerError, match="step 0 replays a trace: its arrivals end with the trace's span"):
        r.shape.hold(WHO)


def test_a_tick_while_a_change_writes_its_lines_changes_nothing() -> None:
    """A master's step message may yield to the tick greenlet in the middle of a change."""
    r = Ramp(plan(2, 8))
    seen: list[Any] = []

    class Yielding(Sink):
        def step_ended(self, index: int, t_ns: int, reason: str, fields: Mapping[str, Any] | None = None) -> None:
            super().step_ended(index, t_ns, reason, fields)
            if fields:  # the changed step's end: the ramp's tick runs now, past that step's planned end
                r.clock.t += 10 * S
                seen.append(r.shape.tick())

    r.shape.sink = r.sink = Yielding()
    r.tick()
    r.tick(1.0)
    r.shape.set_load(WHO, concurrency=3)
    assert seen == [(2, 10_000.0, ["closed"])]  # the old target, one tick longer; no second end
    assert [(ln["event"], ln["step"]) for ln in r.sink.lines] == [
        ("start", 0), ("steady", 0), ("end", 0), ("start", 1)
    ]  # fmt: skip
