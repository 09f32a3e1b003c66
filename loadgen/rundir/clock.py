"""One wall-clock anchor per process.

Durations come from ``perf_counter_ns`` differences (monotonic, fine-grained); records also need
wall-clock epoch nanoseconds to join with telemetry from other processes and hosts. Reading both
clocks per event costs two syscalls and lets them drift apart, so a process reads the pair once
and converts: ``wall_ns = WALL0 + (perf_ns - PERF0)``. Any drift between the two clocks over a run
(NTP slews) is far below the millisecond resolution the analysis reports.
"""

from __future__ import annotations

import time

perf_ns = time.perf_counter_ns


class Anchor:
    """A (wall, perf) pair taken at one instant; converts perf_counter_ns readings to epoch ns."""

    __slots__ = ("perf0_ns", "wall0_ns")

    def __init__(self) -> None:
        self.perf0_ns = time.perf_counter_ns()
        self.wall0_ns = time.time_ns()

    def wall_ns(self, perf: int) -> int:
        return self.wall0_ns + (perf - self.perf0_ns)

    def now_wall_ns(self) -> int:
        return self.wall0_ns + (time.perf_counter_ns() - self.perf0_ns)

    def perf_of_wall(self, wall: int) -> int:
        return self.perf0_ns + (wall - self.wall0_ns)

    def follow(self, offset_ns: int) -> None:
        """Put this process on another host's clock: ``offset_ns`` is this host's wall clock minus
        that one's (a distributed worker takes its master's, measured when it connected)."""
        self.wall0_ns -= offset_ns


ANCHOR = Anchor()
