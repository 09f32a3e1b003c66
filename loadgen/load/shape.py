"""Load shapes: a staged concurrency ramp whose steps are timed from when they were actually reached.

Locust calls ``tick()`` about once a second and blocks inside ``runner.start()`` while users
spawn; a shape that keyed its stages to the time since the test began would silently skip a stage
shorter than the spawn that precedes it. Here each step starts its warm-up only once the runner
reports the step's user count (``spawning_complete``, or the next tick that sees it), and ends
``duration_s`` after its warm-up ended (or once ``requests`` requests finished in its steady
window), so every step gets its full steady window whatever the spawn took. A trace replay's step
ends at its duration (the trace's span at its time scale) only once its dispatcher has sent the
whole span: a load generator that fell behind the trace sends its tail late (each request's
lateness is the step's ``schedule_lag_ms``) rather than dropping it. The actual transition times go
to ``steps.jsonl``.

Steering (the web UI's control routes, ``loadgen.webui.control``): a running ramp can be held
(``hold``: the current step does not end by its duration or request count until ``release``;
not a trace replay, whose arrivals end with the trace's span),
skipped (``skip``: the current step ends now, the next begins), extended (``add_step``: one
more step at the end of the plan) and re-targeted (``set_load``: the current step ends now and a
step at the new user count or rate, otherwise like it, is inserted right after it and begins at
once). Every change is a step boundary written to the sink with who asked for it (``ended_by`` on
the end line, ``origin`` on the start line of a step steering created, ``holds`` on the end line of
a held step; the schema is ``RunState``'s). The operations run in the gevent hub that runs
``tick()`` (Locust's web handlers are greenlets of the same process), so they need no lock; while
one writes its lines (a master's step message to its workers may yield) ``tick`` leaves the steps
alone. They validate their arguments and raise :class:`SteerError` with a message for the user, and
repeating one is harmless where it can be (``hold``/``release`` twice, ``set_load`` to the current
load, ``skip`` or ``set_load`` naming a step that already ended).

Locust lowers a user count by stopping users of any class, so a step of the other kind than the
users running (closed loop after open loop, or back) first gets a tick at zero users, then its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from locust import LoadTestShape

from loadgen.rundir.clock import ANCHOR
from loadgen.spec.options import StepPlan


class StepSink:
    """Where a ramp reports its transitions; ``RunState`` implements it. ``fields``: extra keys of
    the step line (steering: ``origin`` on a start, ``ended_by`` / ``holds`` on an end); the shape
    passes it only when there is something to say."""

    def step_started(self, index: int, plan: StepPlan, t_ns: int, fields: Mapping[str, Any] | None = None) -> None: ...

    def step_steady(self, index: int, t_ns: int) -> None: ...

    def steady_due(self, index: int, t_ns: int) -> None:
        """The step reached its load: its steady window opens at ``t_ns`` (``step_steady`` says so
        at the first tick after, up to a second late)."""

    def step_ended(self, index: int, t_ns: int, reason: str, fields: Mapping[str, Any] | None = None) -> None: ...

    def requests_in_window(self, index: int) -> int:
        return 0

    def replay_sending(self, index: int) -> bool:
        """Step ``index`` replays a trace and this process has not yet sent all of its span."""
        return False


class SteerError(ValueError):
    """A steering request that cannot be done now; the message says why and what to do instead."""


def load_of(plan: StepPlan) -> dict[str, Any]:
    """The load of a step as steering lines write it: ``{"concurrency": n}`` or ``{"rate": r}``."""
    if plan.replay is not None:
        return {"time_scale": getattr(plan.replay, "time_scale", None)}
    return {"rate": plan.rate} if plan.rate is not None else {"concurrency": plan.concurrency}


def load_label(plan: StepPlan) -> str:
    if plan.replay is not None:
        return f"trace x{getattr(plan.replay, 'time_scale', 1):g}"
    if plan.rate is not None:
        return f"{plan.rate:g} req/s"
    return f"{plan.concurrency} user" + ("" if plan.concurrency == 1 else "s")


def derive_step(base: StepPlan, concurrency: Any = None, rate: Any = None) -> StepPlan:
    """A step like ``base`` (context length, warm-up, duration, request count) at another load: a
    user count (closed loop) or a rate in req/s (open loop, one dispatching user). Exactly one of
    the two; raises SteerError naming the bad value."""
    if (concurrency is None) == (rate is None):
        raise SteerError("give either a concurrency (users) or a rate (req/s), not both and not neither")
    if concurrency is not None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise SteerError(f"concurrency {concurrency!r}: give a whole number of users, 1 or more")
        return replace(base, concurrency=concurrency, rate=None, replay=None, repeat=None)
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
        raise SteerError(f"rate {rate!r}: give a number of requests per second above 0")
    return replace(base, concurrency=1, rate=float(rate), replay=None, repeat=None)


# a trace replay's arrivals end with the trace's span at its time scale (loadgen.load.user); a rate's
# arrivals go on until the step ends, held or not
_NO_OPEN_HOLD = (
    "step {i} replays a trace: its arrivals end with the trace's span, so it cannot be held; "
    "add a step at this time scale instead"
)


@dataclass(slots=True)
class _Hold:
    by: str
    since_ns: int


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
        self.holding = False  # at zero users after abort_step (server down), until resume()
        self.held: _Hold | None = None  # the operator's hold of the current step (steering)
        self._holds: list[dict[str, Any]] = []  # the current step's finished holds, for its end line
        self.origins: list[dict[str, Any] | None] = [None] * len(plan)  # beside plan: steering's origin
        self._steering = False  # an operation is writing its lines (tick leaves the steps alone meanwhile)
        # a distributed master that lost a worker: whether every user its live workers run is running
        # (the step then runs at that load, below plan and marked so, instead of waiting for users
        # that left with the worker)
        self.short_handed: Callable[[], bool] | None = None
        self._classes_out: list[Any] | None = None  # user classes of the last target with users tick returned

    def reset_time(self) -> None:
        super().reset_time()
        if self.index >= 0 and not self.finished:
            return  # a master calls this again at its first start: the ramp is already under way
        self.index = -1
        self.finished = False
        self.holding = False
        self.held = None
        self._holds = []

    # Locust calls this when every user of a start() call is running.
    def on_spawning_complete(self, user_count: int) -> None:
        if (
            0 <= self.index < len(self.plan)
            and self.reached_ns is None
            and self._at_load(self.plan[self.index], user_count)
            and self._own_users(self.plan[self.index])
        ):
            self._reached(self.now_ns())

    def _reached(self, t: int) -> None:
        self.reached_ns = t
        self.steady_ns = t + int(self.plan[self.index].warmup_s * 1e9)
        self.sink.steady_due(self.index, self.steady_ns)

    def _begin(self, index: int, t: int) -> None:
        self.index = index
        self.reached_ns = None
        self.steady_ns = None
        self.steady_logged = False
        origin = self.origins[index] if index < len(self.origins) else None
        if origin is not None:
            self.sink.step_started(index, self.plan[index], t, {"origin": origin})
        else:
            self.sink.step_started(index, self.plan[index], t)
        runner = self.runner
        plan = self.plan[index]
        if runner is not None and self._at_load(plan, runner.user_count) and index > 0 and self._own_users(plan):
            self._reached(t)

    def _end(self, t: int, reason: str, by: str | None = None) -> None:
        """End the current step at ``t``: its end line, with who ended it and its holds."""
        fields: dict[str, Any] = {}
        if by is not None:
            fields["ended_by"] = by
        if self.held is not None:
            self._holds.append({"by": self.held.by, "from_ns": self.held.since_ns, "to_ns": t, "released_by": None})
        if self._holds:
            fields["holds"] = self._holds
        self._holds = []
        if fields:
            self.sink.step_ended(self.index, t, reason, fields)
        else:
            self.sink.step_ended(self.index, t, reason)

    def current(self) -> StepPlan | None:
        return self.plan[self.index] if 0 <= self.index < len(self.plan) else None

    def stop(self, reason: str) -> None:
        """End the current step now (Ctrl-C, server down); the ramp returns None next tick."""
        if not self.finished and not self.holding and 0 <= self.index < len(self.plan):
            self._end(self.now_ns(), reason)
        self.held = None
        self.finished = True

    def abort_step(self, reason: str) -> None:
        """End the current step now and hold the load at zero users until ``resume()``."""
        if self.finished or self.holding or not 0 <= self.index < len(self.plan):
            return
        self._end(self.now_ns(), reason)
        self.held = None
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

    def _due(self, step: StepPlan, now: int) -> str | None:
        """Why the current step ends now by its own plan (duration, requests), or None."""
        if not self.steady_logged or self.steady_ns is None:
            return None
        if step.duration_s is not None and now >= self.steady_ns + int(step.duration_s * 1e9):
            if step.replay is not None and self.sink.replay_sending(self.index):
                return None  # a load generator behind the trace sends its span whole, late (schedule_lag_ms)
            return "duration"
        if step.requests is not None and self.sink.requests_in_window(self.index) >= step.requests:
            return "requests"
        return None

    def tick(self) -> tuple[int, float] | tuple[int, float, list[Any]] | None:
        if self.finished:
            return None
        if self.holding:
            self._classes_out = None
            return 0, self.spawn_rate
        if self._steering and 0 <= self.index < len(self.plan):
            # a step line being written may yield (a master tells its workers): one tick later
            return self._target(self.plan[self.index])
        now = self.now_ns()
        if self.index < 0:
            self._begin(0, now)
        step = self.plan[self.index]
        runner = self.runner
        if (
            self.reached_ns is None
            and runner is not None
            and self._at_load(step, runner.user_count)
            and self._own_users(step)
        ):
            self._reached(now)
        if self.steady_ns is not None and not self.steady_logged and now >= self.steady_ns:
            self.sink.step_steady(self.index, self.steady_ns)
            self.steady_logged = True
        reason = None if self.held is not None else self._due(step, now)
        if reason is not None:
            self._end(now, reason)
            if not self._advance(now):
                self.finished = True
                return None
            step = self.plan[self.index]
        return self._target(step)

    def _classes(self, step: StepPlan) -> list[Any] | None:
        return self.open_classes if step.open_loop else self.closed_classes

    def _at_load(self, step: StepPlan, user_count: int) -> bool:
        """The step's users all run: as many as it plans, or after a lost worker, as many as the
        live workers carry."""
        return user_count == step.concurrency or (
            self.short_handed is not None and 0 < user_count < step.concurrency and self.short_handed()
        )

    def _own_users(self, step: StepPlan) -> bool:
        """The runner's users are of the step's kind (closed-loop users or the open-loop dispatcher)."""
        classes = self._classes(step)
        return classes is None or self._classes_out == classes

    def _target(self, step: StepPlan) -> tuple[int, float] | tuple[int, float, list[Any]]:
        classes = self._classes(step)
        if classes is None:
            return step.concurrency, max(self.spawn_rate, float(step.concurrency))
        if self._classes_out is not None and self._classes_out != classes:
            # Locust lowers a count by stopping users of any class: from closed loop to open loop (or
            # back) every user of the other kind stops first, this step's start at the next tick
            self._classes_out = None
            return 0, self.spawn_rate, classes
        self._classes_out = classes
        return step.concurrency, max(self.spawn_rate, float(step.concurrency)), classes

    # -- steering -------------------------------------------------------------------------------

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        self._steering = True
        try:
            yield
        finally:
            self._steering = False

    def _live_index(self, action: str, step: int | None = None) -> int:
        """The current step's index, or SteerError saying why ``action`` cannot act on one now.
        ``step``: the step the caller saw (a repeated or late request names one that ended)."""
        if self.finished:
            raise SteerError(f"the ramp has finished: there is no step to {action} (start a new ramp from the form)")
        if self.index < 0:
            raise SteerError(f"the ramp has not begun yet: nothing to {action}; try again in a second")
        if self.holding:
            raise SteerError(
                f"step {self.index} ended and the ramp waits at 0 users (the server is down): nothing to {action} "
                "until it goes on"
            )
        if step is not None and step != self.index:
            raise SteerError(f"step {step} is not running (the ramp is at step {self.index}): nothing done")
        return self.index

    def _check_classes(self, plan: StepPlan) -> None:
        if plan.open_loop and self.open_classes is None and self.closed_classes is not None:
            raise SteerError(f"a rate ({plan.rate:g} req/s): this ramp runs closed-loop users only; give a concurrency")
        if not plan.open_loop and self.closed_classes is None and self.open_classes is not None:
            raise SteerError(f"{plan.concurrency} users: this ramp runs open-loop steps only; give a rate")

    def hold(self, who: str, step: int | None = None) -> str:
        """Keep the current step running past its duration / request count until ``release``."""
        i = self._live_index("hold", step)
        if self.held is not None:
            return f"step {i} is already held (by {self.held.by})"
        if self.plan[i].replay is not None:
            raise SteerError(_NO_OPEN_HOLD.format(i=i))
        self.held = _Hold(who, self.now_ns())
        return f"step {i} ({load_label(self.plan[i])}) held: it keeps running until Release"

    def _cut(self, now: int, reason: str, who: str, insert: tuple[StepPlan, dict[str, Any]] | None = None) -> str:
        """End the current step at ``now`` for ``who`` and begin the next one (``insert``: a new
        step and its origin, put right after the current one first); says what happened."""
        i = self.index
        with self._exclusive():
            self._end(now, reason, who)
            self.held = None
            if insert is not None:
                self._pad_origins()
                self.plan.insert(i + 1, insert[0])
                self.origins.insert(i + 1, insert[1])
            if not self._advance(now):
                self.finished = True
                return "it was the last: the ramp ends"
        return f"step {self.index} ({load_label(self.plan[self.index])}) begins"

    def release(self, who: str) -> str:
        """End a hold; a step already past its planned end ends now (reason ``released``)."""
        if self.held is None or self.finished or self.index < 0:
            return "nothing is held"
        now = self.now_ns()
        i = self.index
        self._holds.append({"by": self.held.by, "from_ns": self.held.since_ns, "to_ns": now, "released_by": who})
        self.held = None
        if self._due(self.plan[i], now) is None:
            return f"step {i} released: it ends by its plan"
        return f"step {i} released and ended; " + self._cut(now, "released", who)

    def skip(self, who: str, step: int | None = None) -> str:
        """End the current step now (reason ``skipped``) and begin the next (a hold ends with it)."""
        i = self._live_index("skip", step)
        return f"step {i} skipped; " + self._cut(self.now_ns(), "skipped", who)

    def add_step(self, plan: StepPlan, who: str) -> str:
        """Append ``plan`` to the ramp (it runs after every step planned now)."""
        if self.finished:
            raise SteerError("the ramp has finished: there is nothing to add a step to (start a new ramp)")
        if plan.replay is not None:
            raise SteerError("a trace replay cannot be added from here; give a concurrency or a rate")
        derive_step(plan, None if plan.open_loop else plan.concurrency, plan.rate)  # validates the load
        self._check_classes(plan)
        self._pad_origins()
        self.plan.append(plan)
        self.origins.append({"action": "add_step", "by": who, "t_ns": self.now_ns(), "to": load_of(plan)})
        return f"step {len(self.plan) - 1} ({load_label(plan)}) added at the end of the ramp"

    def add_load(self, who: str, concurrency: int | None = None, rate: float | None = None) -> str:
        """``add_step`` of a step like the last one planned (context, warm-up, duration) at this load."""
        return self.add_step(derive_step(self.plan[-1], concurrency, rate), who)

    def set_load(
        self, who: str, concurrency: int | None = None, rate: float | None = None, step: int | None = None
    ) -> str:
        """End the current step now (reason ``changed``) and begin a step at the new load, otherwise
        like it, inserted right after it; a hold carries over to the new step."""
        i = self._live_index("change", step)
        current = self.plan[i]
        new = derive_step(current, concurrency, rate)
        self._check_classes(new)
        if load_of(new) == load_of(current):
            return f"step {i} already runs at {load_label(current)}: nothing changed"
        now = self.now_ns()
        held = self.held
        origin = {
            "action": "set_load",
            "by": who,
            "t_ns": now,
            "from": load_of(current),
            "to": load_of(new),
            "after": i,
        }
        self._cut(now, "changed", who, (new, origin))
        message = f"step {i} ended; step {i + 1} at {load_label(new)} begins"
        if held is None:
            return message
        if new.replay is not None:
            return f"{message}; the hold ended: {_NO_OPEN_HOLD.format(i=i + 1)}"
        self.held = _Hold(held.by, now)
        return f"{message}, held"

    def _pad_origins(self) -> None:
        # the knee search appends to the plan on its own
        self.origins += [None] * (len(self.plan) - len(self.origins))

    def _phase(self) -> str:
        if self.holding:
            return "paused"
        if self.reached_ns is None:
            return "starting"
        return "steady" if self.steady_logged else "warm-up"

    def snapshot(self) -> dict[str, Any]:
        """The ramp as the control routes show it: the plan with each step's status, the current
        step, whether it is held, and seconds until the current step ends by its plan."""
        now = self.now_ns()
        self._pad_origins()
        steps = []
        for k, plan in enumerate(self.plan):
            if k < self.index or (k == self.index and self.finished):
                status = "ended"
            elif k == self.index:
                status = self._phase()
            else:
                status = "not run" if self.finished else "planned"
            row: dict[str, Any] = {"index": k, "status": status, "load": load_label(plan), **plan.describe()}
            if self.origins[k] is not None:
                row["origin"] = self.origins[k]
            steps.append(row)
        ends_in_s = None
        live = 0 <= self.index < len(self.plan) and not self.finished and not self.holding
        if live and self.held is None and self.steady_ns is not None:
            duration = self.plan[self.index].duration_s
            if duration is not None:
                ends_in_s = max(self.steady_ns + duration * 1e9 - now, 0) / 1e9
        return {
            "index": self.index if live else None,
            "finished": self.finished,
            "paused": self.holding,
            "held": self.held is not None,
            "held_by": self.held.by if self.held is not None else None,
            "ends_in_s": ends_in_s,
            "steps": steps,
        }
