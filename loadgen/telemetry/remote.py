"""Client side of ``loadgen monitor --serve``: pull samples and events since a cursor.

``RemoteSampler`` runs in the local side process like any periodic source: each pull returns the
remote samples (their ``t_ns`` are the GPU host's wall clock, kept as they are) and passes the
remote events on. The first pull records the clock offset between the hosts (``remote_clock``
event, ``offset_ns`` = local minus remote, +/- half the round trip) so a report can warn when NTP
is off.
"""

from __future__ import annotations

import time

import orjson

from loadgen.rundir.samples import Sample, samples_of
from loadgen.telemetry.base import Emit, Event, event
from loadgen.telemetry.fetch import get


def pull(
    base_url: str, what: str, since: int, token: str | None = None, timeout_s: float = 5.0
) -> tuple[list[Event], int, int | None]:
    """One pull of ``what`` ("samples" or "events"): (JSON objects, next cursor, remote time ns)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body, resp_headers = get(f"{base_url.rstrip('/')}/v1/{what}?since={since}", timeout_s, headers)
    recs: list[Event] = []
    for line in body.split(b"\n"):
        if line.strip():
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(rec, dict):
                recs.append(rec)
    cursor = int(resp_headers.get("x-next-cursor", since))
    remote_ns = resp_headers.get("x-server-time-ns")
    return recs, cursor, int(remote_ns) if remote_ns else None


class RemoteSampler:
    def __init__(self, url: str, token: str | None, period_s: float, emit: Emit) -> None:
        self.name = "remote_monitor"
        self.url = url
        self.token = token
        self.period_s = period_s
        self._emit = emit
        self.cursors = {"samples": 0, "events": 0}
        self._clock_done = False

    def open(self, emit: Emit) -> None:
        self._emit = emit

    def sample(self) -> list[Sample]:
        t0 = time.time_ns()
        lines, self.cursors["samples"], remote_ns = pull(self.url, "samples", self.cursors["samples"], self.token)
        t1 = time.time_ns()
        if not self._clock_done and remote_ns is not None:
            self._clock_done = True
            self._emit(
                event(
                    "remote_clock",
                    sampler=self.name,
                    url=self.url,
                    offset_ns=(t0 + t1) // 2 - remote_ns,
                    round_trip_ns=t1 - t0,
                )
            )
        events, self.cursors["events"], _ = pull(self.url, "events", self.cursors["events"], self.token)
        for ev in events:
            ev["remote"] = True
            self._emit(ev)
        return samples_of(lines)  # the monitor's samples, kept to the two kinds like every reader

    def close(self) -> None:
        pass
