"""The Locust user: one LLM call per task iteration, reported once, after the stream ends.

Locust's own HTTP users fire their request event when the response headers arrive; for a stream
that is before the first token, so LLM calls never go through them. ``LLMUser`` times the call with
a transport, writes the RequestRecord, and fires exactly one ``request`` event (E2E as the response
time, output tokens as the length). TTFT and mean inter-chunk latency are logged into Locust's
statistics as their own rows (types ``TTFT`` and ``ITL``) without firing further request events.
"""

from __future__ import annotations

from typing import Any

import gevent
from locust import User, constant, task

from loadgen.runtime import RunState


class LLMUser(User):
    wait_time = constant(0)

    def on_start(self) -> None:
        state: RunState | None = getattr(self.environment, "loadgen", None)
        if state is None:
            raise RuntimeError("LLMUser needs the loadgen run state; start Locust with -f loadgen/locustfile.py")
        self.state = state
        self.index = state.next_user_index()
        self.transport = state.make_transport()
        self._session: Any = None
        self._session_plan: Any = None

    def on_stop(self) -> None:
        self.transport.close()

    @task
    def call(self) -> None:
        state = self.state
        plan = state.step_plan
        if self._session is None or plan is not self._session_plan:
            self._session = state.workload_for(plan).session(self.index)
            self._session_plan = plan
        spec, think_s = self._session.next()
        rec, text = state.execute(self.transport, spec, self.index)
        self._session.record_reply(text, rec.error_class is None)
        if think_s:
            gevent.sleep(think_s)
