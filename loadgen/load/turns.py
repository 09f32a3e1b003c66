"""Turns for bulk work, so that no piece of it holds the gevent hub while chunks wait to be read.

Why: the hub runs every callback that one poll made ready before it polls again. When 256
synchronized streams end together, each reader greenlet used to decode its stream, write its
record, report to Locust and build and send its next request (~0.3-0.5 ms on a small core) before
yielding, all inside one loop iteration: 100 ms during which the streams that had just been sent
got their first and second chunks. The kernel merges segments that queue up unread into one and
keeps only the newest one's receive time, so those first chunks read one inter-token gap late, and
the TTFT p99 with them. User starts (a burst of 256 on_start) do the same.

How: such work first asks for a turn (``WorkTurns.turn()``). Turns are handed out by a libev
*check* watcher at the lowest priority, so in every loop iteration the I/O callbacks (the reads)
run first; then waiting greenlets get turns, in arrival order, until ``budget_ns`` of this
iteration has been spent; then the loop polls again. Reads are therefore never more than about
one budget plus one piece of work behind, whatever the burst; bulk work waits in line instead
(a closed-loop user sends its next request a little later, which the records show as it is: the
send time is taken at the send). While the line is not empty an idle watcher keeps the poll from
blocking. A greenlet that already holds the current turn and asks again inside the budget goes on
at once, so a request end followed by the next request's send is one turn.

``turn()`` must be called from a greenlet other than the hub. ``waits`` counts the turns that had
to wait, ``max_queue`` the longest line.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import gevent
from gevent.hub import Waiter

from loadgen.rundir.clock import perf_ns

DEFAULT_BUDGET_NS = 1_000_000  # bulk work per loop iteration before the loop polls for reads again
_LOWEST_PRIORITY = -2  # libev's EV_MINPRI: after every I/O and timer callback of the iteration


class WorkTurns:
    def __init__(self, budget_ns: int = DEFAULT_BUDGET_NS, loop: Any = None) -> None:
        self.budget_ns = budget_ns
        self._loop = loop
        self._line: deque[Waiter[None]] = deque()
        self._check: Any = None
        self._idle: Any = None
        self._granting = False
        self._slice_end_ns = 0
        self.waits = 0
        self.max_queue = 0

    def turn(self) -> None:
        """Wait for a turn to do a piece of bulk work (returns at once inside the current turn)."""
        if self._granting and perf_ns() < self._slice_end_ns:
            return
        waiter: Waiter[None] = Waiter()
        line = self._line
        line.append(waiter)
        if len(line) > self.max_queue:
            self.max_queue = len(line)
        self.waits += 1
        if self._check is None:
            self._start()
        waiter.get()

    def _start(self) -> None:
        loop = self._loop if self._loop is not None else gevent.get_hub().loop
        self._loop = loop
        check = loop.check(ref=False)
        check.priority = _LOWEST_PRIORITY
        idle = loop.idle(ref=False)  # an active idle watcher makes the poll return at once
        idle.priority = _LOWEST_PRIORITY
        self._check, self._idle = check, idle
        check.start(self._grant)
        idle.start(_nothing)

    def _stop(self) -> None:
        for w in (self._check, self._idle):
            if w is not None:
                w.stop()
                w.close()
        self._check = self._idle = None

    def _grant(self) -> None:
        # runs in the hub, once per loop iteration, after that iteration's reads
        line = self._line
        end = perf_ns() + self.budget_ns
        self._slice_end_ns = end
        self._granting = True
        try:
            while line:
                # a greenlet killed while in line is no longer waiting: its Waiter just keeps the value
                line.popleft().switch(None)
                if perf_ns() >= end:
                    break
        finally:
            self._granting = False
        if not line:
            self._stop()


def _nothing() -> None:
    pass
