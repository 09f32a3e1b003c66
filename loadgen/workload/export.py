"""``loadgen workload export``: every request a run would send, written as a workload file.

The requests are drawn exactly as a ramp draws them: each closed-loop step's users by rank (with
``[[tenants]]``, the first tenant's users first), each user's stream from its own session of the
step; each open-loop step's arrivals (every tenant's at its rate, merged), at their times from the
step's start. What a live run takes from the server's answers, the file cannot hold: a
conversation's next turn and an agent's tool results are written as the messages they add
(``cont``), and the replay puts the server's answer before them. To draw them here the session is
told a stand-in answer (corpus text of the requested length; for an agent, one call of its first
tool), as it is when a transport keeps no text.

A closed-loop user sends as many requests as the server lets it in a step, which the file cannot
know: each user's stream holds ``per_user`` requests (by default two a second of the step's time),
and a replay user that reaches the end of its stream waits for the next step, which the report
marks (load below plan).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from loadgen import __version__
from loadgen.spec.calls import request_fields
from loadgen.spec.options import StepPlan
from loadgen.spec.request import Reply, RequestSpec, ToolCall
from loadgen.workload.errors import WorkloadError
from loadgen.workload.tenants import tenant_of_rank
from loadgen.workload.traffic import Workload
from loadgen.workload.wfile import Header, file_sha256, header_line, redact_body, request_line

REQUESTS_PER_SECOND_OF_STEP = 2.0  # the default stream of a closed-loop user: two requests a second


@dataclass(slots=True)
class ExportOptions:
    per_user: int | None = None  # closed loop: requests in each user's stream (None: from the step's time)
    redact: bool = False
    model: str = ""
    source: str = "export"


def per_user_default(plan: StepPlan) -> int:
    """Requests a closed-loop user's stream holds by default: two a second of the step's time, or
    twice its share of a step's request count (at least 8)."""
    if plan.requests:
        n = 2 * math.ceil(plan.requests / max(plan.concurrency, 1)) + 2 * math.ceil(plan.warmup_s)
    else:
        n = math.ceil(REQUESTS_PER_SECOND_OF_STEP * (plan.warmup_s + (plan.duration_s or 60.0)))
    return max(8, n)


def export_workload(
    out: IO[bytes],
    base: Workload,
    plan: list[StepPlan],
    workload_for: Callable[[StepPlan | None], Workload],
    tenants: Mapping[str, Workload],
    opts: ExportOptions,
) -> int:
    """Write the header and every request of ``plan`` to ``out``; returns the number of requests."""
    s = base.scenario
    open_loop = any(p.open_loop for p in plan)
    if open_loop and not all(p.open_loop for p in plan):
        raise WorkloadError("a workload file is all closed loop or all open loop; this plan mixes them")
    scenario = None
    if s.path:
        scenario = {"name": s.name, "path": s.path, "seed": s.seed, "sha256": file_sha256(s.path)}
    header = Header(
        mode="open" if open_loop else "closed",
        steps=[_step(p, opts) for p in plan],
        endpoint=s.endpoint,
        model=opts.model,
        tenants=[t.describe() for t in s.tenants],
        redacted=opts.redact,
        scenario=scenario,
        source=opts.source,
        created_by=f"loadgen {__version__}",
    )
    out.write(header_line(header))
    n = 0
    write = out.write
    for i, p in enumerate(plan):
        if p.open_loop:
            lines = _open_step(i, p, workload_for, tenants)
        else:
            lines = _closed_step(i, p, workload_for, tenants, opts)
        for line in lines:
            if opts.redact:
                line["body"] = redact_body(line["body"])
                if line.get("headers"):
                    line["headers"] = dict.fromkeys(line["headers"], "<redacted>")
            write(request_line(line))
            n += 1
    return n


def export_to(path: str | Path, *args: Any, **kw: Any) -> int:
    """:func:`export_workload` into a file at ``path`` (written beside it, then moved in place)."""
    p = Path(path)
    tmp = p.with_name(p.name + ".part")
    with open(tmp, "wb", buffering=1 << 20) as f:
        n = export_workload(f, *args, **kw)
    tmp.replace(p)
    return n


def _step(p: StepPlan, opts: ExportOptions) -> dict[str, Any]:
    d = p.describe()
    if not p.open_loop:
        d["per_user"] = opts.per_user or per_user_default(p)
    return d


def _line(spec: RequestSpec, step: int, head: dict[str, Any]) -> dict[str, Any]:
    line: dict[str, Any] = {"step": step, **head, "endpoint": spec.endpoint, "body": request_fields(spec)}
    line["context_tokens"] = spec.context_tokens
    line["source"] = spec.source
    if spec.tenant is not None:
        line["tenant"] = spec.tenant
    if spec.headers:
        line["headers"] = dict(spec.headers)
    if spec.conversation is not None:
        line["conversation"] = spec.conversation
        line["turn"] = spec.turn
    return line


def _closed_step(
    index: int,
    p: StepPlan,
    workload_for: Callable[[StepPlan | None], Workload],
    tenants: Mapping[str, Workload],
    opts: ExportOptions,
) -> Iterator[dict[str, Any]]:
    n = opts.per_user or per_user_default(p)
    for rank in range(p.concurrency):
        if p.tenants and tenants:
            name = tenant_of_rank(p.tenants, rank) or p.tenants[-1][0]
            wl = tenants[name]
        else:
            wl = workload_for(p)
        session = wl.session(rank)
        prev: RequestSpec | None = None
        for order in range(n):
            spec, think = session.next(warmup=False)
            head: dict[str, Any] = {"user": rank, "order": order, "think_s": round(think, 6)}
            line = _line(spec, index, head)
            if prev is not None and spec.turn > 0 and spec.conversation == prev.conversation:
                line["cont"] = True
                line["body"]["messages"] = _added(prev, spec)
            yield line
            session.record_reply(*_stand_in(wl, spec))
            prev = spec


def _added(prev: RequestSpec, spec: RequestSpec) -> list[dict[str, Any]]:
    """The messages ``spec`` adds to ``prev``'s after the answer: the next user turn, or the tool
    results (the chat form only: the other endpoints send the history in other shapes)."""
    if spec.endpoint != "chat" or spec.messages is None or prev.messages is None:
        raise WorkloadError(
            f"a {spec.endpoint} conversation cannot go in a workload file yet: its turns are rebuilt from the "
            'server\'s answers in the chat form only; export it with endpoint = "chat"'
        )
    k = len(prev.messages)
    if spec.messages[:k] != prev.messages:
        raise WorkloadError(f"conversation {spec.conversation}: turn {spec.turn} does not extend turn {prev.turn}")
    return spec.messages[k + 1 :]


def _stand_in(wl: Workload, spec: RequestSpec) -> tuple[str | None, bool, Reply | None]:
    """What the session is told of the answer at export: no text (it stands in corpus text of the
    requested length), and for an agent one call of its first tool, so that its loop goes on."""
    agent = wl.scenario.agent
    if agent is None:
        return None, True, None
    tools = wl.scenario.tools.tools if wl.scenario.tools else ()
    name = str(tools[0].get("function", {}).get("name", "tool")) if tools else "tool"
    call = ToolCall(f"call_{spec.turn}", name, "{}")
    return "", True, Reply(text="", tool_calls=[call])


def _open_step(
    index: int,
    p: StepPlan,
    workload_for: Callable[[StepPlan | None], Workload],
    tenants: Mapping[str, Workload],
) -> Iterator[dict[str, Any]]:
    horizon = p.warmup_s + p.duration_s if p.duration_s is not None else 86_400.0
    if p.tenants and tenants:
        streams = [
            tenants[name].arrivals(0, rate, horizon, step=index, warmup_s=p.warmup_s)
            for name, rate in p.tenants
            if rate > 0
        ]
        arrivals: Iterator[tuple[int, RequestSpec]] = heapq.merge(*streams, key=lambda a: a[0])
    else:
        target = p.replay if p.replay is not None else p.rate
        assert target is not None
        arrivals = workload_for(p).arrivals(0, target, horizon, step=index, warmup_s=p.warmup_s)
    warmup_ns = round(p.warmup_s * 1e9)
    counted = 0
    for t_ns, spec in arrivals:
        if p.requests is not None and t_ns >= warmup_ns:
            if counted >= p.requests:
                return
            counted += 1
        yield _line(spec, index, {"at_s": round(t_ns / 1e9, 6)})
