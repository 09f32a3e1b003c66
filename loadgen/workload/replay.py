"""``loadgen ramp --workload FILE``: a workload file sent exactly as it is written.

:class:`FileWorkload` stands where a scenario's :class:`~loadgen.workload.traffic.Workload` stands.
Its steps are the file's (``plan``); a closed-loop user of rank ``r`` in step ``s`` sends the file's
stream of user ``r`` of step ``s`` in order, each after its ``think_s``; an open-loop step sends
the step's lines at their ``at_s`` from the step's start. Bodies go as the file has them (the run's
``--model`` set), so two replays of one file send the same bytes but for the model.

A line that continues a conversation or an agent task (``cont``) is rebuilt from the server's
answer as the replay got it: the previous request's messages, the answer (its text, and its tool
calls), then the line's own messages; tool results take the ids of the answer's calls in order (a
result per call: the file's results in turn, again from the first when the answer made more calls).
When the previous request failed, or an agent's answer called no tool, the chain is over and its
remaining lines are passed over, as a live run would end it. A user whose stream runs out sends
nothing more in the step (``exhausted``), which the run records.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from loadgen.spec.options import StepPlan
from loadgen.spec.request import DEFAULT_MAX_TOKENS, Reply, RequestSpec
from loadgen.workload.corpus import _prose_text
from loadgen.workload.scenario import Scenario
from loadgen.workload.scenario_types import LoadSpec
from loadgen.workload.traffic import Workload
from loadgen.workload.wfile import BlockText, WorkloadFile, open_workload, unredact_body


class FileWorkload(Workload):
    """The requests of a workload file (module docstring)."""

    def __init__(self, wf: WorkloadFile) -> None:
        h = wf.header
        name = (h.scenario or {}).get("name") or wf.path.stem
        scenario = Scenario(
            name=f"{name} (workload file)",
            path=str(wf.path),
            description=f"{wf.requests} requests from {wf.path.name}, sha256 {wf.sha256[:12]}",
            seed=int((h.scenario or {}).get("seed") or 0),
            endpoint=h.endpoint,  # type: ignore[arg-type]  # checked by read_header
            load=LoadSpec(mode=h.mode),  # type: ignore[arg-type]
        )
        super().__init__(scenario)
        self.file = wf
        self._block_text = BlockText(_prose_text()) if h.redacted else None

    @classmethod
    def open(cls, path: str | Path) -> FileWorkload:
        return cls(open_workload(path))

    def plan(self) -> list[StepPlan]:
        """The file's steps as a run's step plan."""
        out = []
        closed = self.file.header.mode == "closed"
        for i, d in enumerate(self.file.header.steps):
            tenants = d.get("tenants")
            loads = tuple((str(k), float(v)) for k, v in tenants.items()) if isinstance(tenants, dict) else None
            duration = d.get("duration_s")
            requests = d.get("requests")
            rate = d.get("rate")
            if self.file.header.mode == "open" and rate is None:
                # a trace's step: its own rate (what the step table shows), its span as its time
                n = self.file.streams.get((i, 0))
                span = self._last_at(i) - float(d.get("warmup_s") or 0.0)
                rate = round(n.count / max(span, 1e-3), 3) if n is not None else 0.0
                duration = duration if duration is not None else max(span, 1.0)
            out.append(
                StepPlan(
                    concurrency=int(d.get("concurrency") or (self.file.users(i) if closed else 1)),
                    context_tokens=None,
                    warmup_s=float(d.get("warmup_s") or 0.0),
                    duration_s=float(duration) if duration is not None else None,
                    requests=int(requests) if requests is not None else None,
                    rate=float(rate) if rate is not None else None,
                    repeat=d.get("repeat"),
                    tenants=loads,
                )
            )
        return out

    def _last_at(self, step: int) -> float:
        last = 0.0
        for line in self.file.lines(step):
            last = float(line["at_s"])
        return last

    def for_context(self, context_tokens: int) -> Workload:
        return self

    def session_at(self, step: int, rank: int) -> FileSession:
        """The stream of the user of ``rank`` in ``step``."""
        return FileSession(self, self.file.lines(step, rank))

    def arrivals(
        self,
        start_ns: int,
        rate_or_trace: Any,
        duration_s: float,
        *,
        step: int = 0,
        warmup_s: float = 0.0,
    ) -> Iterator[tuple[int, RequestSpec]]:
        """The step's lines at their intended times (``rate_or_trace`` and ``duration_s`` are the
        file's own: its lines are the schedule)."""
        for line in self.file.lines(step):
            intended = start_ns + round(float(line["at_s"]) * 1e9)
            spec = self.spec_of(line)
            spec.intended_ns = intended
            yield intended, spec

    def spec_of(self, line: dict[str, Any], messages: list[dict[str, Any]] | None = None) -> RequestSpec:
        """The RequestSpec that sends ``line``'s body (with ``messages`` in place of its own)."""
        body = line["body"]
        if self._block_text is not None:
            body = unredact_body(body, self._block_text)
        if messages is not None:
            body = {**body, "messages": messages}
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens", body.get("max_output_tokens")))
        inputs = body.get("input")
        return RequestSpec(
            endpoint=line.get("endpoint", self.scenario.endpoint),
            messages=body.get("messages") if isinstance(body.get("messages"), list) else None,
            prompt=body.get("prompt") if isinstance(body.get("prompt"), str) else None,
            max_tokens=int(max_tokens) if isinstance(max_tokens, int) else DEFAULT_MAX_TOKENS,
            stream=bool(body.get("stream", False)),
            context_tokens=line.get("context_tokens"),
            source=str(line.get("source") or "workload-file"),
            conversation=line.get("conversation"),
            turn=int(line.get("turn") or 0),
            inputs=inputs if isinstance(inputs, list) else [inputs] if isinstance(inputs, str) else None,
            query=body.get("query") if isinstance(body.get("query"), str) else None,
            documents=body.get("documents") if isinstance(body.get("documents"), list) else None,
            tenant=line.get("tenant"),
            headers=line.get("headers"),
            body=body,
        )


class FileSession:
    """One closed-loop user's stream of a workload file; the same calls as a
    :class:`~loadgen.workload.session.Session` (``next``, ``record_reply``)."""

    def __init__(self, workload: FileWorkload, lines: Iterator[dict[str, Any]]) -> None:
        self.workload = workload
        self._lines = lines
        self._ahead: dict[str, Any] | None = None
        self._last: RequestSpec | None = None
        self._reply: Reply | None = None
        self._ok = False
        self.sent = 0
        self.exhausted = False

    @property
    def conversations_started(self) -> int:
        return self.sent

    def next(self, warmup: bool = False) -> tuple[RequestSpec | None, float]:
        """The next request and its think time; (None, 0) when the stream has run out."""
        while True:
            line = self._ahead if self._ahead is not None else next(self._lines, None)
            self._ahead = None
            if line is None:
                self.exhausted = True
                return None, 0.0
            if not line.get("cont"):
                spec = self.workload.spec_of(line)
                break
            prev, reply = self._last, self._reply
            if prev is None or prev.messages is None or not self._ok or reply is None:
                continue  # the chain ended with a failure: its other turns are not sent
            added = list(line["body"].get("messages") or [])
            if any(m.get("role") == "tool" for m in added if isinstance(m, dict)):
                if not reply.tool_calls:
                    continue  # the agent's answer called no tool: the task is over
                added = _answer_calls(added, reply)
            answer: dict[str, Any] = {"role": "assistant", "content": reply.text or ""}
            if reply.tool_calls:
                answer["content"] = reply.text or None
                answer["tool_calls"] = [
                    {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in reply.tool_calls
                ]
            spec = self.workload.spec_of(line, [*prev.messages, answer, *self._fill(added)])
            break
        self._last, self._reply, self._ok = spec, None, False
        self.sent += 1
        return spec, float(line.get("think_s") or 0.0)

    def _fill(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        text = self.workload._block_text
        if text is None:
            return messages
        return list(unredact_body({"messages": messages}, text)["messages"])

    def record_reply(self, text: str | None, ok: bool, reply: Reply | None = None) -> None:
        self._ok = ok
        if reply is None:
            reply = Reply(text=text)
        elif text is not None and reply.text is None:
            reply = replace(reply, text=text)
        if reply.text is None:
            # no text kept: the answer's place is held by text of its length, as a live run's session does
            spec = self._last
            n = spec.max_tokens if spec is not None else DEFAULT_MAX_TOKENS
            rng = random.Random(f"stand-in:{spec.conversation if spec else ''}:{spec.turn if spec else 0}")
            reply = replace(reply, text=" ".join(rng.choice(("the", "a", "of", "and", "to")) for _ in range(n)))
        self._reply = reply


def _answer_calls(results: list[dict[str, Any]], reply: Reply) -> list[dict[str, Any]]:
    """The file's tool results answered to the live answer's calls: one per call, in order (the
    file's results in turn), each with its call's id."""
    tools = [m for m in results if isinstance(m, dict) and m.get("role") == "tool"]
    others = [m for m in results if not (isinstance(m, dict) and m.get("role") == "tool")]
    paired = zip(reply.tool_calls, itertools.cycle(tools), strict=False)
    out = [{**m, "tool_call_id": call.call_id} for call, m in paired]
    return [*out, *others]
