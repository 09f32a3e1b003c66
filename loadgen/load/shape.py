"""Load shapes: a staged concurrency ramp whose steps are timed from when they were actually reached.

Locust calls ``tick()`` about once a second and blocks inside ``runner.start()`` while users
spawn; a shape that keyed its stages to the time since the test began would silently skip a stage
shorter than the spawn that precedes it. Here each step starts its warm-up only once the runner
reports the step's user count (``spawning_complete``, or the next tick that sees it), and ends
``duration_s`` after its warm-up ended (or once ``requests`` requests finished in its steady
window), so every step gets its full steady window whatever the spawn took. The actual transition
times go to ``steps.jsonl``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from locust import LoadTestShape

from loadgen.rundir.clock import ANCHOR
from loadgen.spec.options import StepPlan


class StepSink:
    """Where a ramp reports its transitions; ``RunState`` implements it."""

    def step_started(self, index: int, plan: StepPlan, t_ns: int) -> None: ...

    def step_steady(self, index: int, t_ns: int) -> None: ...

    def step_ended(self, index: int, t_ns: int, reason: str) -> None: ...

    def requests_in_window(self, index: int) -> int:
        return 0


class RampShape(LoadTestShape):
    """Walks a list of ``StepPlan``s; ``now_ns`` is injectable (wall-clock ns) for exact tests."""

    abstract = True  # constructed with arguments; not picked up by ``locust -f`` on its own

    def __init__(
        self,
        plan: list[StepPlan],
        sink: StepSink,
        now_ns: Callable[[], int] = ANCHOR.now_wall_ns,
        spawn_rate: float = 10_000.0,
        closed_classes: list[Any] | None = None,
        open_classes: list[Any] | None = None,
        extend: Callable[[int], StepPlan | None] | None = None,
    ) -> None:
        super().__init__()
        if not plan:
            raise ValueError("a ramp needs at least one step")
        self.plan = plan
        self.sink = sink
        self.now_ns = now_ns
        self.spawn_rate = spawn_rate
        self.closed_classes = closed_classes
        self.extend = extend  # asked for one more step when the plan runs out (knee search)
        self.open_classes = open_classes
        self.index = -1
        self.reached_ns: int | None = None
        self.steady_ns: int | None = None
        self.steady_logged = False
        self.finished = False
        self.holding = False

    def reset_time(self) -> None:
        super().reset_time()
        if self.index >= 0 and not self.finished:
            return  # a master calls this again at its first start: the ramp is already under way
        self.index = -1
        self.finished = False
        self.holding = False

    # Locust calls this when every user of a start() call is running.
    def on_spawning_complete(self, user_count: int) -> None:
        if (
            0 <= self.index < len(self.plan)
            and self.reached_ns is None
            and user_count == self.plan[self.index].concurrency
        ):
            self._reached(self.now_ns())

    def _reached(self, t: int) -> None:
        self.reached_ns = t
        self.steady_ns = t + int(self.plan[self.index].warmup_s * 1e9)

    def _begin(self, index: int, t: int) -> None:
        self.index = index
        self.reached_ns = None
        self.steady_ns = None
        self.steady_logged = False
        self.sink.step_started(index, self.plan[index], t)
        runner = self.runner
        if runner is not None and runner.user_count == self.plan[index].concurrency and index > 0:
            self._reached(t)

    def current(self) -> StepPlan | None:
        return self.plan[self.index] if 0 <= self.index < len(self.plan) else None

    def stop(self, reason: str) -> None:
        """End the current step now (Ctrl-C, server down); the ramp returns None next tick."""
        if not self.finished and not self.holding and 0 <= self.index < len(self.plan):
            self.sink.step_ended(self.index, self.now_ns(), reason)
        self.finished = True

    def abort_step(self, reason: str) -> None:
        """End the current step now and hold the load at zero users until ``resume()``."""
        if self.finished or self.holding or not 0 <= self.index < len(self.plan):
            return
        self.sink.step_ended(self.index, self.now_ns(), reason)
        self.holding = True

    def resume(self) -> None:
        """After ``abort_step``: go on with the next step (or end the ramp when there is none)."""
        if not self.holding:
            return
        self.holding = False
        if not self._advance(self.now_ns()):
            self.finished = True

    def _advance(self, now: int) -> bool:
        """Begin the step after the current one; False when the ramp is over."""
        if self.index + 1 >= len(self.plan) and self.extend is not None:
            nxt = self.extend(self.index)
            if nxt is not None:
                self.plan.append(nxt)
        if self.index + 1 >= len(self.plan):
            return False
        self._begin(self.index + 1, now)
        return True

    def tick(self) -> tuple[int, float] | tuple[int, float, list[Any]] | None:
        if self.finished:
            return None
        if self.holding:
            return 0, self.spawn_rate
        now = self.now_ns()
        if self.index < 0:
            self._begin(0, now)
        step = self.plan[self.index]
        if self.reached_ns is None and self.runner is not None and self.runner.user_count == step.concurrency:
            self._reached(now)
        if self.steady_ns is not None and not self.steady_logged and now >= self.steady_ns:
            self.sink.step_steady(self.index, self.steady_ns)
            self.steady_logged = True
        if self.steady_logged and self.steady_ns is not None:
            reason = None
            if step.duration_s is not None and now >= self.steady_ns + int(step.duration_s * 1e9):
                reason = "duration"
            elif step.requests is not None and self.sink.requests_in_window(self.index) >= step.requests:
                reason = "requests"
            if reason is not None:
                self.sink.step_ended(self.index, now, reason)
                if not self._advance(now):
                    self.finished = True
                    return None
                step = self.plan[self.index]
        classes = self.open_classes if step.open_loop else self.closed_classes
        if classes is None:
            return step.concurrency, max(self.spawn_rate, float(step.concurrency))
        return step.concurrency, max(self.spawn_rate, float(step.concurrency)), classes
