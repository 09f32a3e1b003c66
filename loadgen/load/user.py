"""The Locust users: one LLM call -> one request event, fired after the stream ends.

Locust's own HTTP users fire their request event when the response headers arrive; for a stream
that is before the first token, so LLM calls never go through them. A user times the call with a
transport, writes the RequestRecord, and fires exactly one ``request`` event (E2E as the response
time, output tokens as the length). TTFT and mean inter-chunk latency are logged into Locust's
statistics as their own rows (types ``TTFT`` and ``ITL``) without firing further request events.

* ``LLMUser``: closed loop. Each user sends its next request when the previous one ended (after
  the workload's think time); the record says how long after that it went out (``user_late_ns``).
* ``OpenLoopUser``: open loop. One dispatcher per process sends each request at its scheduled
  (intended) time in a greenlet of its own, whatever is still in flight, so a slow server cannot
  slow the arrivals down (no coordinated omission). Latencies count from the intended time; the
  lag between intended and actual send is recorded, and a step whose lag grows is flagged. The wait
  before a send builds the requests due after it (up to ``BUILD_AHEAD_S`` ahead, at most
  ``BUILD_AHEAD_MAX``), so a burst of requests due at one instant (a trace's coarse timestamps:
  Mooncake's put up to 17 at one millisecond) goes out back to back, in its order, instead of each
  waiting for the ones after it to be built; and each finds a connection opened (or renewed) ahead.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import gevent
from gevent.pool import Pool
from locust import User, constant, task

from loadgen.load.client import Transport
from loadgen.load.runtime import RunState, state_of
from loadgen.rundir.clock import ANCHOR
from loadgen.spec.request import RequestSpec

FAILURE_PAUSE_S = 0.1
BUILD_AHEAD_S = 0.5  # an open-loop request is built up to this long before it is due...
BUILD_AHEAD_MAX = 128  # ...and no more than this many are held built
BUILD_MARGIN_NS = 3_000_000  # no building ahead this close to the next send (one build can take ~2 ms)

T = TypeVar("T")


def _state(user: User) -> RunState:
    state = state_of(user.environment)
    if state is None:
        raise RuntimeError("the loadgen users need the run state; start Locust with -f loadgen/locustfile.py")
    return state


class LLMUser(User):
    wait_time = constant(0)

    def on_start(self) -> None:
        self.state = _state(self)
        self.state.turns.turn()  # a burst of user starts must not hold up the streams in flight
        self.index = self.state.next_user_index()
        self.state.user_started(self.index)
        self.transport = self.state.make_transport()
        self._session: Any = None
        self._session_plan: Any = None
        self._ran_out: Any = None  # the step plan whose workload-file stream this user sent to its end
        self._last_end_ns: int | None = None  # when this user's previous answer of the step ended

    def on_stop(self) -> None:
        self.state.user_stopped(self.index)
        self.transport.close()

    @task
    def call(self) -> None:
        state = self.state
        plan = state.step_plan
        if (plan is not None and plan.open_loop) or state.benched:
            self._last_end_ns = None
            gevent.sleep(0.05)  # an open-loop step (the dispatcher sends), or a worker out of the step
            return
        state.turns.turn()  # building and sending the next request (free inside the turn of the last end)
        if self._session is None or plan is not self._session_plan:
            self._session = state.session_for(plan, self.index)
            self._session_plan = plan
            self._last_end_ns = None  # a new step: its first request is due when the step starts
        warmup = state.in_warmup()
        spec, think_s = self._session.next(warmup=warmup)
        if spec is None:  # a workload file's stream ran out: nothing more to send in this step
            self._last_end_ns = None
            if self._ran_out is not plan:
                self._ran_out = plan
                state.stream_exhausted(self.index, self._session.sent)
            gevent.sleep(0.05)  # a task that returns: Locust can stop this user at the run's end
            return
        if think_s:
            gevent.sleep(think_s)
            state.turns.turn()
            if warmup and state.step_plan is plan and not state.in_warmup():
                # the steady window began during the think time: send the steady stream's request,
                # so that a window holds the same requests however long its warm-up's took (a twin
                # replay, or an A/B of two servers, then compares like with like)
                spec, _ = self._session.next(warmup=False)
        due = None if self._last_end_ns is None else self._last_end_ns + round(think_s * 1e9)
        rec, reply = state.execute(self.transport, spec, self.index, due_ns=due)
        ok = rec.error_class is None
        self._session.record_reply(reply.text, ok, reply)
        self._last_end_ns = reply.done_ns if ok else None
        if not ok:
            # a failed call returns at once; without a pause a closed loop turns into a hot loop
            # against a server that is down, and floods the run with identical records
            gevent.sleep(FAILURE_PAUSE_S)


def paced(
    arrivals: Iterator[tuple[int, T]],
    now: Callable[[], int],
    sleep: Callable[[float], object],
    ahead_s: float = BUILD_AHEAD_S,
    most: int = BUILD_AHEAD_MAX,
    margin_ns: int = BUILD_MARGIN_NS,
    prepare: Callable[[int, int | None], object] | None = None,
) -> Iterator[T]:
    """``arrivals`` ((due time in ns, item), in time order; drawing one builds it) handed out each at
    its time. While it waits for the next, it draws the ones due within ``ahead_s`` after it (at most
    ``most``, none once the next is ``margin_ns`` away), calling ``sleep(0)`` between draws so that
    what was handed out runs first; the others due at the next one's instant it draws in any case (a
    burst at a step's start is late already: it is built whole, then sent in order). Then
    ``prepare(held, until_ns)``: the caller readies what the first ``held`` items will need, stopping
    by ``until_ns`` (None: a burst that is due already, readied whole)."""
    built: deque[tuple[int, T]] = deque()
    ahead_ns = round(ahead_s * 1e9)
    more = True
    while True:
        if not built:
            nxt = next(arrivals, None)
            if nxt is None:
                return
            built.append(nxt)
        due = built[0][0]
        while more and len(built) < most:
            last = built[-1][0]
            if last != due and (last - due > ahead_ns or due - now() <= margin_ns):
                break
            sleep(0)
            nxt = next(arrivals, None)
            if nxt is None:
                more = False
            else:
                built.append(nxt)
        if prepare is not None:
            if due - now() > margin_ns:
                prepare(len(built), due - margin_ns)
            else:
                prepare(sum(1 for t, _ in built if t == due), None)
        delay_ns = due - now()
        if delay_ns > 0:
            sleep(delay_ns / 1e9)
        yield built.popleft()[1]


class OpenLoopUser(User):
    """Dispatches one open-loop step's arrivals; ``max_in_flight`` bounds the greenlets alive."""

    wait_time = constant(0)
    max_in_flight = 10_000

    def on_start(self) -> None:
        self.state = _state(self)
        self.index = self.state.next_user_index()
        self._idle: list[Transport] = []
        self._pool = Pool(self.max_in_flight)

    def on_stop(self) -> None:
        self._pool.join(timeout=self.environment.stop_timeout or 0)
        self._pool.kill()
        for t in self._idle:
            t.close()

    def _ready(self, held: int, until_ns: int | None) -> None:
        """While the dispatcher waits: a connection, open and fresh, for each request it holds built,
        so that a burst sends in its order (a connection opened inside a send lets the ones after it
        overtake it) and no connect is timed. Idle connections past their reuse limit are renewed
        one by one (rare: a gap of seconds); the new ones a burst needs are opened side by side (to a
        distant server each is a round trip: the burst waits one, not one a request). The wait ends by
        ``until_ns`` (None: when all are open); a connection still opening then joins the idle list
        when it is. A single request already due opens its own in its send, as it always did: a high
        rate never waits on connects here."""
        if held <= 0 or (until_ns is None and held == 1):
            return
        now = ANCHOR.now_wall_ns
        for t in self._idle[-held:]:
            if until_ns is not None and now() >= until_ns:
                return
            t.ready()
        missing = held - len(self._idle)
        if missing <= 0:
            return
        jobs = [gevent.spawn(self.state.make_transport) for _ in range(missing)]
        gevent.joinall(jobs, timeout=None if until_ns is None else max(0.0, (until_ns - now()) / 1e9))
        idle = self._idle
        for job in jobs:
            if not job.ready():
                job.link_value(lambda g: idle.append(g.value))
            elif job.successful():
                idle.append(job.value)

    def _send(self, spec: RequestSpec) -> None:
        transport = self._idle.pop() if self._idle else self.state.make_transport()
        try:
            self.state.execute(transport, spec, self.index)
        finally:
            self._idle.append(transport)

    @task
    def dispatch(self) -> None:
        state = self.state
        plan, index = state.step_plan, state.step_index
        share = state.open_share
        idle = state.benched or state.open_dispatching == index
        if plan is None or not plan.open_loop or not state.step_live or share is None or idle:
            gevent.sleep(0.05)  # one dispatcher a process a step: another would send the share twice
            return
        state.open_dispatching = index
        rank, of = share
        target = plan.replay if plan.replay is not None else plan.rate
        start_ns = state.counters[index].first_ns
        # a rate's arrivals go on until the step ends (at its duration or count, later when it was reached
        # late or is held): the loop stops at the step's end; a trace replays its span once
        replay_span = plan.replay is not None and plan.duration_s is not None
        horizon_s = plan.warmup_s + plan.duration_s if replay_span and plan.duration_s is not None else 86_400.0
        spawn = self._pool.spawn
        now = ANCHOR.now_wall_ns
        arrivals = state.arrivals_for(plan, start_ns, target, horizon_s, index)
        # another worker's share of the same process is drawn all the same (same specs) and skipped
        mine = (a for i, a in enumerate(arrivals) if i % of == rank)
        for spec in paced(mine, now, gevent.sleep, prepare=self._ready):
            if state.step_index != index or not state.step_live or state.benched:
                break
            spawn(self._send, spec)  # blocks only when max_in_flight greenlets are alive
        else:
            state.open_sent_all = index  # a replay's step may end now (RampShape: its duration passed)
        while state.step_index == index and state.step_live:
            gevent.sleep(0.05)  # schedule exhausted: wait for the step to end
