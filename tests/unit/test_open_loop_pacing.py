"""The open-loop dispatcher's pacing (``loadgen.load.user.paced``) on a fake clock: every request is
handed out at its time, never early, and a burst due at one instant is built while the dispatcher
waits for it, not one by one after it is due (Mooncake's trace puts up to 17 requests at one
millisecond; building each took the ones after it 0.2-2 ms later)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import gevent

from loadgen.load.user import OpenLoopUser, paced
from loadgen.rundir.clock import ANCHOR

MS = 1_000_000


class Clock:
    def __init__(self) -> None:
        self.t = 0
        self.yields = 0

    def now(self) -> int:
        return self.t

    def sleep(self, s: float) -> None:
        if s == 0:
            self.yields += 1
        self.t += round(s * 1e9)


def _arrivals(
    clock: Clock, times_ms: list[int], built: list[tuple[int, int]], build_ms: int = 0
) -> Iterator[tuple[int, int]]:
    """Items 0.. due at ``times_ms``; drawing one records (item, clock) and costs ``build_ms``."""
    for i, t in enumerate(times_ms):
        built.append((i, clock.t))
        clock.t += build_ms * MS
        yield t * MS, i


def test_a_burst_is_built_before_it_is_due_and_each_goes_out_at_its_time() -> None:
    clock = Clock()
    built: list[tuple[int, int]] = []
    times = [0] + [1000] * 10 + [1200, 2600, 2700]
    sent: list[tuple[int, int, int]] = []  # (item, when, how many drawn by then)
    for item in paced(_arrivals(clock, times, built, build_ms=1), clock.now, clock.sleep):
        sent.append((item, clock.t, len(built)))
    assert [i for i, _, _ in sent] == list(range(len(times)))
    for i, t, _ in sent:
        assert t >= times[i] * MS  # never early
    when_built = dict(built)
    # the burst at 1,000 ms and the request at 1,200 ms (within 0.5 s of it) were built while waiting
    assert all(when_built[i] < 1000 * MS for i in range(1, 12))
    # so the whole burst left at its instant, not 1 ms a build later each
    assert [t for i, t, _ in sent if times[i] == 1000] == [1000 * MS] * 10
    # the wait drew up to the first one past the 0.5 s bound (its time is known once it is drawn), no
    # further: the one at 2,600 ms, not the one at 2,700 ms
    assert sent[1][2] == 13
    assert clock.yields >= 11  # what was handed out runs between builds


def test_building_ahead_stops_at_its_bound_and_near_the_next_send() -> None:
    clock = Clock()
    built: list[tuple[int, int]] = []
    times = [100] + [200] * 300
    out = paced(_arrivals(clock, times, built), clock.now, clock.sleep, most=50)
    assert next(out) == 0
    # waiting for 0 at 100 ms drew the ones after it in 0.5 s, at most 50 held
    assert len(built) == 50
    assert list(out) == list(range(1, 301))
    # no building ahead once the next is within the margin: only one more is drawn, to see whether it
    # is due at the same instant (it is not), and the draws then happen as each is due
    clock2 = Clock()
    built2: list[tuple[int, int]] = []
    out2 = paced(_arrivals(clock2, [1, 2, 3], built2), clock2.now, clock2.sleep, margin_ns=5 * MS)
    assert next(out2) == 0 and len(built2) == 2


def test_a_burst_due_already_is_built_and_readied_whole_before_its_first_goes() -> None:
    # a step's first burst is due at the step's start: late before anything could be built
    clock = Clock()
    built: list[tuple[int, int]] = []
    calls: list[tuple[int, int | None]] = []
    out = paced(
        _arrivals(clock, [0] * 8 + [500], built, build_ms=1),
        clock.now,
        clock.sleep,
        prepare=lambda h, u: calls.append((h, u)),
    )
    assert next(out) == 0
    assert len(built) == 9  # the eight of the burst, and the next (drawn to see it is not of the burst)
    assert calls == [(8, None)]  # connections for the whole burst, whatever it takes
    assert list(out) == list(range(1, 9))


def test_the_wait_readies_what_the_held_requests_need_before_they_are_due() -> None:
    clock = Clock()
    built: list[tuple[int, int]] = []
    calls: list[tuple[int, int | None, int]] = []  # (held, until, when)

    def prepare(held: int, until_ns: int | None) -> None:
        calls.append((held, until_ns, clock.t))
        clock.t += 2 * MS  # opening connections takes time

    times = [1000] * 5 + [3000]
    out = list(paced(_arrivals(clock, times, built), clock.now, clock.sleep, prepare=prepare))
    assert out == list(range(6))
    held, until, when = calls[0]
    # waiting for the burst: all five held (and the next drawn), readied before the burst, by its margin
    assert held == 6 and when < 1000 * MS and until == 1000 * MS - 3 * MS
    # readying ahead stops by the margin; the rest of the burst, due by then, is readied as it goes
    assert all(u is None or u - w > 0 for _, u, w in calls)
    assert [(h, u) for h, u, _ in calls[1:5]] == [(4, None), (3, None), (2, None), (1, None)]


class _Connects:
    """A fake run state whose transports take a round trip (``rtt_s``) to open; counts how many open
    at once."""

    def __init__(self, rtt_s: float) -> None:
        self.rtt_s = rtt_s
        self.opening = 0
        self.most = 0
        self.made = 0

    def make_transport(self) -> object:
        self.opening += 1
        self.most = max(self.most, self.opening)
        gevent.sleep(self.rtt_s)
        self.opening -= 1
        self.made += 1
        return _Fresh()


class _Fresh:
    def __init__(self) -> None:
        self.readied = 0

    def ready(self) -> None:
        self.readied += 1


def _dispatcher(state: _Connects, idle: list[object]) -> SimpleNamespace:
    return SimpleNamespace(_idle=idle, state=state)


def test_a_burst_opens_its_connections_side_by_side_and_a_lone_late_request_opens_none() -> None:
    # to a distant server a connect is a round trip: a burst of 6 waits one, not six
    state = _Connects(0.05)
    d = _dispatcher(state, [])
    OpenLoopUser._ready(d, 6, None)  # type: ignore[arg-type]
    assert state.made == 6 and state.most == 6 and len(d._idle) == 6
    # the idle ones are readied (renewed if idle too long), no new one opened when there are enough
    OpenLoopUser._ready(d, 4, None)  # type: ignore[arg-type]
    assert state.made == 6 and sum(t.readied for t in d._idle) == 4
    # one request already due opens its own connection in its send: the dispatcher never waits on it
    lone = _Connects(0.05)
    d2 = _dispatcher(lone, [])
    OpenLoopUser._ready(d2, 1, None)  # type: ignore[arg-type]
    assert lone.made == 0 and d2._idle == []


def test_readying_stops_by_its_deadline_and_late_connections_join_the_idle_list() -> None:
    state = _Connects(0.05)
    d = _dispatcher(state, [])
    OpenLoopUser._ready(d, 3, ANCHOR.now_wall_ns())  # type: ignore[arg-type]  # no time left
    assert d._idle == []  # returned at once, the connects still opening
    gevent.sleep(0.2)
    assert state.made == 3 and len(d._idle) == 3
