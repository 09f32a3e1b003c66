"""When the gevent hub last began to poll for I/O.

A libev *prepare* watcher at the lowest priority runs right before every poll (after gevent's own
callbacks) and stamps ``perf_counter_ns``. A reader woken by the poll of iteration k knows that
its socket was watched and not ready when the poll of iteration k-1 began (else it would have been
woken then), or that it drained the socket itself after that: either way its new bytes arrived
after ``before_last_ns``. That turns "how late may this read be" into a bound that is as tight as
the loop is responsive (see ``client.FastTransport._read_stream``). One Python callback per loop
iteration; it never yields.
"""

from __future__ import annotations

from typing import Any

import gevent

from loadgen.rundir.clock import perf_ns

_LOWEST_PRIORITY = -2


class PollClock:
    """``last_ns``: the start of the most recent poll; ``before_last_ns``: of the one before."""

    __slots__ = ("_watcher", "before_last_ns", "last_ns")

    def __init__(self) -> None:
        self.last_ns = 0
        self.before_last_ns = 0
        self._watcher: Any = None

    def start(self) -> None:
        """Start stamping (idempotent); must run in the thread whose hub is to be watched."""
        if self._watcher is not None:
            return
        w = gevent.get_hub().loop.prepare(ref=False)
        w.priority = _LOWEST_PRIORITY
        w.start(self._stamp)
        self._watcher = w
        self.last_ns = self.before_last_ns = perf_ns()

    def _stamp(self) -> None:
        self.before_last_ns = self.last_ns
        self.last_ns = perf_ns()


POLLS = PollClock()
