"""Per-process run state shared by the Locust users and the load shape.

One ``RunState`` is bound to the Locust ``Environment`` (``bind``, ``state_of``). It owns this process's
request-record file, the current step, the live counters of the progress line, and the one function
that turns a ``RequestSpec`` into a timed call and a ``RequestRecord`` (``execute``). Users only
call ``execute`` and report through Locust's event; nothing else shares mutable state.

When a record or step line cannot be written (disk full, read-only folder), the first
:class:`RunDirWriteError` is kept in ``write_failure`` and ``on_write_failed`` is told once (the
ramp stops sending); from then on records are not written but counted in ``records_lost``, so the
file stays a clean prefix of the run rather than a file with holes.

``steps.jsonl`` (written here, by the process that runs the shape): one JSON object a line, as
each transition happens. Every line has ``step`` (the index in the order steps began), ``event``
and ``t_ns`` (wall clock):

* ``start``: the step's plan (``StepPlan.describe``: ``concurrency`` or ``rate``/``time_scale``,
  ``context_tokens``, ``warmup_s``, ``duration_s``, ``requests``, ``repeat``). A step created by
  steering (``RampShape.set_load`` / ``add_step``, the web UI's Steer panel) adds ``origin``:
  ``{"action": "set_load"|"add_step", "by": "web UI (127.0.0.1)", "t_ns": when asked,
  "to": {"concurrency": n} | {"rate": r}, "from": {...}, "after": i}`` (``from`` and ``after``,
  the step it replaced the load of, for ``set_load`` only).
* ``steady``: the end of its warm-up (absent when the step ended during its warm-up).
* ``end``: ``reason``: ``duration``, ``requests``, ``stopped``, ``server_down``, ... and from
  steering ``skipped``, ``changed`` (a ``set_load``: the next step is the new load) or ``released``
  (a held step past its planned end, ended by Release); steering adds ``ended_by`` (who); a step
  that was held has ``holds``: ``[{"by", "from_ns", "to_ns", "released_by"}]`` (``released_by``
  null when the step ended while held).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import os
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent

from loadgen.load.client import CallResult, FastTransport, Transport
from loadgen.load.refusal import Refusal, RefusalWatch
from loadgen.load.shape import StepSink
from loadgen.load.turns import WorkTurns
from loadgen.parse.errors import classify_stream_error, short
from loadgen.parse.responses import ResponsesResult
from loadgen.parse.stream import TOKENS_CHUNKS, distribute_tokens
from loadgen.rundir.clock import ANCHOR
from loadgen.rundir.layout import StepLog
from loadgen.rundir.records import JsonlAppender, RequestRecord, RunDirError
from loadgen.spec.calls import CALLS, Answer, assert_never, items_of, prompt_chars, request_body
from loadgen.spec.options import DEFAULT_REQUEST_ID_HEADER, StepPlan, Timeouts
from loadgen.spec.request import Reply, RequestSpec, ToolCall
from loadgen.workload.calibration import LengthFeedback
from loadgen.workload.tenants import tenant_of_rank


@dataclass(slots=True)
class TargetOptions:
    """How to reach the server and shape each request's body."""

    url: str
    model: str
    api_key: str | None = None
    transport: str = "fast"
    timeouts: Timeouts = field(default_factory=Timeouts)
    stream: bool = True
    extra_headers: dict[str, str] = field(default_factory=dict)
    request_id_header: str | None = DEFAULT_REQUEST_ID_HEADER  # None: send no id header


@dataclass(slots=True)
class StepCounters:
    ok: int = 0
    failed: int = 0
    output_tokens: int = 0
    in_window: int = 0
    first_ns: int = 0
    late_ttft: int = 0  # successful requests whose TTFT may read long by more than 1 ms (late read or send)
    errors: dict[str, int] = field(default_factory=dict)


# failures that say the server is not there at all (as opposed to a server that answers with an error)
CONNECTION_CLASSES = frozenset({"connection_refused", "connection_reset", "connect_timeout"})
SERVER_SUSPECT_STREAK = 3
LATE_NS = 1_000_000  # the analysis's timing tolerance (loadgen.analysis.load.TIMING_TOLERANCE_NS)


class LLMError(Exception):
    """Carried by Locust's request event for a failed LLM call (its message is the error class)."""


class RunState(StepSink):
    def __init__(
        self,
        run_dir: Path,
        target: TargetOptions,
        workload_for: Callable[[StepPlan | None], Any],
        worker: str = "w0",
        fire_request: Callable[..., None] | None = None,
        log_metric: Callable[[str, str, float], None] | None = None,
        record_sink: Callable[[bytes], None] | None = None,
        step_log: bool = True,
        user_offset: int = 0,
    ) -> None:
        """``record_sink``: where each record's JSON line goes (default: this process's
        ``requests-<worker>.jsonl``); ``step_log``: this process writes steps.jsonl (the one that runs
        the shape); ``user_offset``: first user index (distinct per worker, so no two users of a
        distributed run send the same prompts)."""
        self.run_dir = run_dir
        self.target = target
        self.worker = worker
        self.workload_for = workload_for
        self.records: JsonlAppender | None = None
        self._events: JsonlAppender | None = None
        if record_sink is None:
            self.records = JsonlAppender(run_dir / f"requests-{worker}.jsonl")
            record_sink = self.records.write_bytes
        self.record_sink = record_sink
        self.write_failure: RunDirError | None = None
        self.records_kept = 0
        self.records_lost = 0
        self.on_write_failed: Callable[[RunDirError], None] | None = None
        self.steps = StepLog(run_dir) if step_log else None
        self.on_step: Callable[[dict[str, Any]], None] | None = None  # the master tells its workers
        self.fire_request = fire_request
        self.log_metric = log_metric
        self._seq = itertools.count()
        self._users = itertools.count(user_offset)
        # [[tenants]]: each tenant's workload (compose), and the closed-loop users alive here in
        # index order, whose rank says whose user each is in a step (``session_for``)
        self.tenants: dict[str, Any] = {}
        self._live: list[int] = []
        self._prefix = f"{run_dir.name[-12:]}-{worker}-{os.getpid()}"
        self.step_index = -1
        self.step_plan: StepPlan | None = None
        self.step_live = False
        # an open-loop step's arrivals this process sends: the i-th of the process when i % of == rank
        # (a distributed run's workers each send their share of one process; 0 of 1: all of it)
        self.open_share: tuple[int, int] | None = (0, 1)  # None: this process sends none of it
        self.open_dispatching = -1  # the step whose arrivals a dispatcher of this process sends
        self.open_sent_all = -1  # the last step whose arrivals that dispatcher has all handed out
        # a distributed worker that lost its master sends nothing until the master's next step
        self.benched = False
        self.in_flight = 0
        self.conn_streak = 0  # consecutive connection-level failures
        self.on_server_suspect: Callable[[], None] | None = None
        self.on_count: Callable[[int, str | None, int, int], None] | None = None  # a worker reports counts
        # a 404 before any call succeeded: the server does not serve the endpoint (endpoint, path, error)
        self.on_endpoint_missing: Callable[[str, str, str], None] | None = None
        # the first calls all refused with one client error (loadgen.load.refusal): the run cannot succeed
        self.on_refused: Callable[[Refusal], None] | None = None
        self._refusals = RefusalWatch()
        self._answered = False
        # a local tokenizer (anything with count(text) -> int) for servers that send no usage
        self.token_counter: Any = None
        # the workload learns the server's prompt token count from each response (one calibrator
        # shared by every step's workload: they all talk to this server)
        self.lengths: LengthFeedback | None = getattr(workload_for(None), "lengths", None)
        self.steady_ns: int | None = None
        # when the current step's steady window opens, known once the step reached its load (before
        # ``steady_ns``, which the shape sets at its first tick after): ``in_warmup``
        self.steady_due_ns: int | None = None
        self.counters: list[StepCounters] = []
        self.started_ns = ANCHOR.now_wall_ns()
        # bulk work (a request's end, a user's start, a closed-loop send) waits for its turn, so
        # that the reads of other streams are never held up behind a burst of it
        self.turns = WorkTurns()
        headers = {"Content-Type": "application/json", **target.extra_headers}
        if target.api_key:
            headers["Authorization"] = f"Bearer {target.api_key}"
        self._headers = headers

    # -- StepSink -----------------------------------------------------------------------------
    def step_started(self, index: int, plan: StepPlan, t_ns: int, fields: Mapping[str, Any] | None = None) -> None:
        self._apply_start(index, plan, t_ns)
        if self.steps is not None:
            self._step_line(self.steps.start, index, t_ns, **plan.describe(), **(fields or {}))
        if self.on_step is not None:
            self.on_step({"event": "start", "step": index, "t_ns": t_ns, "plan": plan_to_dict(plan)})

    def _apply_start(self, index: int, plan: StepPlan, t_ns: int) -> None:
        self.step_index = index
        self.step_plan = plan
        self.steady_ns = None
        self.steady_due_ns = None
        self.step_live = True
        while len(self.counters) <= index:
            self.counters.append(StepCounters())
        self.counters[index].first_ns = t_ns

    def step_steady(self, index: int, t_ns: int) -> None:
        self.steady_ns = t_ns
        if self.steps is not None:
            self._step_line(self.steps.steady, index, t_ns)
        self._tell({"event": "steady", "step": index, "t_ns": t_ns})

    def steady_due(self, index: int, t_ns: int) -> None:
        if index == self.step_index:
            self.steady_due_ns = t_ns
        self._tell({"event": "steady_due", "step": index, "t_ns": t_ns})

    def in_warmup(self) -> bool:
        """Whether a request sent now is the current step's warm-up (before its steady window)."""
        steady = self.steady_ns if self.steady_ns is not None else self.steady_due_ns
        return steady is None or ANCHOR.now_wall_ns() < steady

    def step_ended(self, index: int, t_ns: int, reason: str, fields: Mapping[str, Any] | None = None) -> None:
        self.step_live = False
        if self.steps is not None:
            self._step_line(self.steps.end, index, t_ns, reason, **(fields or {}))
        self._tell({"event": "end", "step": index, "t_ns": t_ns, "reason": reason})

    def _step_line(self, write: Callable[..., None], *args: Any, **fields: Any) -> None:
        if self.write_failure is not None:
            return
        try:
            write(*args, **fields)
        except RunDirError as exc:
            self._write_failed(exc)

    def keep(self, line: bytes) -> None:
        """Write one record line, or count it lost once a write has failed."""
        if self.write_failure is None:
            try:
                self.record_sink(line)
                self.records_kept += 1
                return
            except RunDirError as exc:
                self._write_failed(exc)
        self.records_lost += 1

    def _write_failed(self, exc: RunDirError) -> None:
        if self.write_failure is None:
            self.write_failure = exc
            if self.on_write_failed is not None:
                self.on_write_failed(exc)
            else:  # the web UI: its users hold (send nothing) until Stop
                import logging

                logging.getLogger("loadgen").error("%s; sending stopped (press Stop)", exc)

    def _tell(self, message: dict[str, Any]) -> None:
        if self.on_step is not None:
            self.on_step(message)

    def apply_step_message(self, message: dict[str, Any]) -> None:
        """A worker follows the master's step transitions (``on_step`` messages)."""
        event = message["event"]
        if event == "start":
            self._apply_start(message["step"], plan_from_dict(message["plan"]), message["t_ns"])
        elif event == "steady":
            self.steady_ns = message["t_ns"]
        elif event == "steady_due":
            if message["step"] == self.step_index:
                self.steady_due_ns = message["t_ns"]
        elif event == "end":
            self.step_live = False

    def requests_in_window(self, index: int) -> int:
        return self.counters[index].in_window if index < len(self.counters) else 0

    def replay_sending(self, index: int) -> bool:
        """Step ``index`` replays a trace whose dispatcher here has begun and not yet handed out its
        last arrival (a load generator behind the trace's schedule is still sending its span)."""
        plan = self.step_plan
        return (
            self.step_index == index
            and plan is not None
            and plan.replay is not None
            and self.open_dispatching == index
            and self.open_sent_all != index
        )

    # -- users ----------------------------------------------------------------------------------
    def next_user_index(self) -> int:
        return next(self._users)

    def user_started(self, index: int) -> None:
        bisect.insort(self._live, index)

    def user_stopped(self, index: int) -> None:
        k = bisect.bisect_left(self._live, index)
        if k < len(self._live) and self._live[k] == index:
            del self._live[k]

    def session_for(self, plan: StepPlan | None, index: int) -> Any:
        """The closed-loop request stream of user ``index`` in ``plan``'s step: with tenants, the
        stream of the tenant whose users the user's rank falls in (the first tenant's users come
        first: a step's tenants get exactly their users)."""
        workload = self.workload_for(plan)
        if hasattr(workload, "session_at"):  # a workload file: the stream of this rank in this step
            return workload.session_at(max(self.step_index, 0), bisect.bisect_left(self._live, index))
        if plan is not None and plan.tenants and self.tenants:
            rank = bisect.bisect_left(self._live, index)
            name = tenant_of_rank(plan.tenants, rank) or plan.tenants[-1][0]
            return self.tenants[name].session(index)
        return workload.session(index)

    def arrivals_for(
        self, plan: StepPlan, start_ns: int, target: Any, horizon_s: float, step: int
    ) -> Iterator[tuple[int, RequestSpec]]:
        """An open-loop step's requests in intended-time order: the workload's, or with tenants
        every tenant's own arrivals at its rate, merged."""
        if plan.tenants and self.tenants:
            streams = [
                self.tenants[name].arrivals(start_ns, rate, horizon_s, step=step, warmup_s=plan.warmup_s)
                for name, rate in plan.tenants
                if rate > 0
            ]
            return heapq.merge(*streams, key=lambda a: a[0])
        arrivals: Iterator[tuple[int, RequestSpec]] = self.workload_for(plan).arrivals(
            start_ns, target, horizon_s, step=step, warmup_s=plan.warmup_s
        )
        return arrivals

    def stream_exhausted(self, index: int, sent: int) -> None:
        """A workload file's user ran out of requests in the current step: an event the analysis
        reads (that step below plan from then on)."""
        rank = bisect.bisect_left(self._live, index)
        self.event("workload_exhausted", step=self.step_index, user=rank, sent=sent)

    def event(self, kind: str, **fields: Any) -> None:
        """One line of events.jsonl from the load side (nothing once the run directory failed)."""
        if self.write_failure is not None:
            return
        if self._events is None:
            self._events = JsonlAppender(self.run_dir / "events.jsonl")
        try:
            self._events.write({"t_ns": ANCHOR.now_wall_ns(), "src": "loadgen", "kind": kind, **fields})
        except RunDirError as exc:
            self._write_failed(exc)

    def make_transport(self) -> Transport:
        t = self.target
        return make_transport(t.transport, t.url, t.timeouts, t.api_key, turn=self.turns.turn)

    def body(self, spec: RequestSpec) -> bytes:
        return request_body(spec, self.target.model)

    def execute(
        self, transport: Transport, spec: RequestSpec, user: int, due_ns: int | None = None
    ) -> tuple[RequestRecord, Reply]:
        """Send one request, record it, report it. Returns the record and what the answer said.
        ``due_ns``: when a closed-loop user meant to send it (its previous answer's last bytes reached
        this host, ``Reply.done_ns``, plus the think time); the record keeps how long after that it
        went out (``user_late_ns``)."""
        if self.write_failure is not None:
            # nothing more can be kept: send nothing, wait for the ramp to stop this user (<= 1 s)
            gevent.sleep(3600.0)
        step = self.step_index
        call = CALLS[spec.endpoint]
        if not self.target.stream or call.answer is not Answer.TEXT:
            spec.stream = False
        rid = f"{self._prefix}-{next(self._seq)}"
        headers = dict(self._headers)
        # the id on the wire is a UUID, the widest form servers accept (llama.cpp's server answers
        # 400 to anything else); the record keeps it as ``header_id`` beside our own ``id``
        header_id = None
        if self.target.request_id_header is not None:
            header_id = str(uuid.uuid4())
            headers[self.target.request_id_header] = header_id
        if spec.source and spec.source.isascii() and spec.source.isprintable():
            headers["X-Loadgen-Source"] = spec.source  # the workload's label (a twin keys acceptance by it)
        if spec.headers:
            headers.update(spec.headers)  # a tenant's own headers
        body = self.body(spec)
        path = call.path
        self.in_flight += 1
        try:
            result = transport.call(path, body, headers, spec.stream, call.decoder)
        except gevent.GreenletExit:
            self.in_flight -= 1
            now = ANCHOR.now_wall_ns()
            rec = self._new_record(
                rid,
                step,
                spec,
                user,
                intended_ns=spec.intended_ns or now,
                sent_ns=now,
                end_ns=now,
                error_class="cancelled",
                error="the user was stopped mid-request",
            )
            rec.header_id = header_id
            self.keep(rec.to_json())
            raise
        self.in_flight -= 1
        rec = self._record(rid, step, spec, result, user)
        rec.header_id = header_id
        if due_ns is not None and rec.sent_ns > due_ns:
            rec.user_late_ns = rec.sent_ns - due_ns
        self.keep(rec.to_json())
        if (
            self.lengths is not None
            and rec.prompt_tokens
            and rec.error_class is None
            and call.answer is Answer.TEXT
            and not spec.images  # image tokens are not text
            and spec.previous_response_id is None  # the stored turns count, but were not sent
        ):
            chars, messages = prompt_size(spec)
            self.lengths.observe(chars, messages, rec.prompt_tokens)
        if rec.error_class is None:
            self._answered = True
        elif not self._answered:
            if rec.status == 404:
                if self.on_endpoint_missing is not None:
                    self.on_endpoint_missing(spec.endpoint, path, rec.error or "")
            elif self.on_refused is not None:
                refusal = self._refusals.observe(rec.status, rec.error_class, rec.error, path, headers, body)
                if refusal is not None:
                    self.on_refused(refusal)
        self._report(rec, spec)
        reply = reply_of(result)
        reply.done_ns = ANCHOR.wall_ns(result.done_perf_ns) if result.done_perf_ns else rec.end_ns
        return rec, reply

    def _new_record(
        self,
        rid: str,
        step: int,
        spec: RequestSpec,
        user: int,
        *,
        intended_ns: int,
        sent_ns: int,
        end_ns: int,
        error_class: str | None,
        error: str | None,
        status: int = 0,
    ) -> RequestRecord:
        """The record of ``spec`` sent by ``user`` in ``step``: what was asked and how it ended; the
        answer's own fields (tokens, chunk times) are the caller's to fill in."""
        return RequestRecord(
            id=rid,
            worker=self.worker,
            step=step,
            intended_ns=intended_ns,
            sent_ns=sent_ns,
            end_ns=end_ns,
            status=status,
            error_class=error_class,
            error=error,
            endpoint=spec.endpoint,
            stream=spec.stream,
            max_tokens=spec.max_tokens,
            context_tokens=spec.context_tokens,
            source=spec.source,
            user=user,
            conversation=spec.conversation,
            turn=spec.turn,
            max_turns=spec.max_turns,
            inputs=items_of(spec),
            images=spec.images,
            tenant=spec.tenant,
        )

    def _record(self, rid: str, step: int, spec: RequestSpec, res: CallResult, user: int) -> RequestRecord:
        sent_ns = ANCHOR.wall_ns(res.sent_perf_ns)
        rec = self._new_record(
            rid,
            step,
            spec,
            user,
            intended_ns=spec.intended_ns if spec.intended_ns is not None else sent_ns,
            sent_ns=sent_ns,
            end_ns=ANCHOR.wall_ns(res.end_perf_ns),
            status=res.status,
            error_class=res.error_class,
            error=res.error,
        )
        rec.send_late_ns = res.send_late_ns
        s = res.stream
        if s is None:
            return rec
        match CALLS[spec.endpoint].answer:
            case Answer.ITEMS:
                return self._pooling(rec, s, spec)
            case Answer.TEXT:
                pass
            case unknown:
                assert_never(unknown)
        sent_perf = res.sent_perf_ns
        offsets = [t - sent_perf for t in s.chunk_times_ns]
        rec.chunk_offsets_ns = offsets
        if offsets:
            rec.first_chunk_ns = sent_ns + offsets[0]
        rec.prompt_tokens = s.prompt_tokens
        rec.cached_tokens = s.cached_tokens
        rec.finish_reason = s.finish_reason
        rec.reasoning_chunks = s.reasoning_chunks
        rec.server_request_id = s.server_id
        rec.chunk_clock = s.chunk_clock
        if s.late_ns:
            rec.chunk_late_ns = s.late_ns
        rec.chunk_tokens, rec.output_tokens, rec.tokens_source = s.token_split()
        wall = ANCHOR.wall_ns
        if s.first_reasoning_ns is not None:
            rec.first_reasoning_ns = wall(s.first_reasoning_ns)
        if s.first_text_ns is not None:
            rec.first_answer_ns = wall(s.first_text_ns)
        if s.first_tool_ns is not None:
            rec.first_tool_ns = wall(s.first_tool_ns)
        rec.reasoning_tokens = s.reasoning_tokens
        if s.function_calls:
            rec.tool_calls = len(s.function_calls)
            rec.tool_args_chars = sum(len(c.arguments) for c in s.function_calls)
        if rec.tokens_source == TOKENS_CHUNKS and self.token_counter is not None and s.text:
            # no usage from the server: count the text with the tokenizer we were given (the chunk
            # count undercounts a speculative server, which puts several tokens in a chunk)
            n = max(self.token_counter.count(s.text), len(offsets))
            rec.chunk_tokens, rec.output_tokens, rec.tokens_source = distribute_tokens(s.chunk_chars, n), n, "tokenizer"
        if rec.error_class is None:
            _stream_failure(rec, s, len(offsets))
        return rec

    @staticmethod
    def _pooling(rec: RequestRecord, s: Any, spec: RequestSpec) -> RequestRecord:
        """An embeddings or rerank answer: prompt tokens and items, no output."""
        rec.prompt_tokens = s.prompt_tokens
        rec.server_request_id = s.server_id
        rec.finish_reason = s.finish_reason
        rec.tokens_source = "none"
        if rec.error_class is not None:
            return rec
        if s.error is not None:
            msg = str(s.error.get("message") or s.error)
            rec.error_class = classify_stream_error(msg)
            rec.error = short("error in a 200 body: " + msg)
        elif s.malformed:
            rec.error_class = "malformed_stream"
            rec.error = short(f"the {spec.endpoint} body has no list of results: {s.first_malformed}")
        elif s.items is not None and rec.inputs is not None and s.items != rec.inputs:
            rec.error_class = "malformed_stream"
            rec.error = f"{s.items} {spec.endpoint} results for {rec.inputs} inputs"
        return rec

    def count(self, step: int, error_class: str | None, output_tokens: int, sent_ns: int) -> None:
        """Live counters of the progress line and of ``--requests-per-step``."""
        if not 0 <= step < len(self.counters):
            return
        c = self.counters[step]
        if error_class is None:
            c.ok += 1
            c.output_tokens += output_tokens
        else:
            c.failed += 1
            c.errors[error_class] = c.errors.get(error_class, 0) + 1
        steady = self.steady_ns if self.steady_ns is not None else self.steady_due_ns
        if steady is not None and step == self.step_index and sent_ns >= steady:
            c.in_window += 1
        if self.on_count is not None:
            self.on_count(step, error_class, output_tokens, sent_ns)

    def _report(self, rec: RequestRecord, spec: RequestSpec) -> None:
        ok = rec.error_class is None
        if rec.error_class in CONNECTION_CLASSES:
            self.conn_streak += 1
            if self.conn_streak >= SERVER_SUSPECT_STREAK and self.on_server_suspect is not None:
                self.on_server_suspect()
        elif rec.error_class != "cancelled":
            self.conn_streak = 0
        idx = rec.step
        self.count(idx, rec.error_class, rec.output_tokens or 0, rec.sent_ns)
        late = rec.chunk_late_ns
        first_late = rec.send_late_ns + (late[0][1] if late and late[0][0] == 0 else 0)
        if ok and first_late > LATE_NS and 0 <= idx < len(self.counters):
            self.counters[idx].late_ttft += 1
        e2e_ms = (rec.end_ns - rec.intended_ns) / 1e6
        name = spec.endpoint
        if self.fire_request is not None:
            self.fire_request(
                request_type="LLM",
                name=name,
                response_time=e2e_ms,
                response_length=rec.output_tokens or 0,
                exception=None if ok else LLMError(f"{rec.error_class}: {rec.error}"),
                context={"step": idx},
            )
        if ok and self.log_metric is not None and rec.first_chunk_ns is not None:
            log = self.log_metric
            t0 = rec.intended_ns
            log("TTFT", name, (rec.first_chunk_ns - t0) / 1e6)
            offs = rec.chunk_offsets_ns
            if len(offs) > 1:
                log("ITL", name, (offs[-1] - offs[0]) / (len(offs) - 1) / 1e6)
            # the kinds of output apart, when an answer has more than plain text
            if rec.first_reasoning_ns is not None:
                log("TTFT reasoning", name, (rec.first_reasoning_ns - t0) / 1e6)
                if rec.first_answer_ns is not None:
                    log("TTFT answer", name, (rec.first_answer_ns - t0) / 1e6)
            if rec.first_tool_ns is not None:
                log("TTFT tool", name, (rec.first_tool_ns - t0) / 1e6)

    def close(self) -> None:
        if self.records is not None:
            self.records.close()
        if self.steps is not None:
            self.steps.close()
        if self._events is not None:
            self._events.close()


def _stream_failure(rec: RequestRecord, s: Any, chunks: int) -> None:
    """A 200 stream that still failed: an error event inside it, no end, or payloads that do not read."""
    cls = s.error_class()
    if cls == "stream_error" and s.error is not None:
        msg = str(s.error.get("message") or s.error)
        rec.error_class = classify_stream_error(msg)
        rec.error = short("error inside a 200 stream: " + msg)
    elif cls == "truncated":
        rec.error_class = cls
        rec.error = (
            f"the server ended the stream ([DONE]) after {chunks} output chunks without a finish_reason"
            if s.done
            else f"stream ended after {chunks} output chunks without finish_reason or [DONE]"
        )
    elif cls == "malformed_stream":
        rec.error_class = cls
        rec.error = short(f"{s.malformed} malformed payload(s), first: {s.first_malformed}")


def make_transport(
    kind: str, base_url: str, timeouts: Timeouts, api_key: str | None, turn: Callable[[], None] | None = None
) -> Transport:
    """The transport ``--transport`` names: ``fast`` (``load.client``) or ``openai`` (``load.sdk``, which
    imports the SDK). ``turn``: called after a stream ended, before it is decoded
    (``loadgen.load.turns.WorkTurns.turn``)."""
    if kind == "fast":
        return FastTransport(base_url, timeouts, turn=turn)
    if kind == "openai":
        from loadgen.load.sdk import OpenAITransport

        return OpenAITransport(base_url, timeouts, api_key, turn=turn)
    raise ValueError(f"--transport {kind!r}: choose fast or openai")


def reply_of(result: CallResult) -> Reply:
    """What the workload is told of an answer: its text, tool calls and Responses id."""
    s = result.stream
    if s is None:
        return Reply()
    calls = [
        ToolCall(c.call_id or c.item_id or f"call_{i}", c.name or "", c.arguments)
        for i, c in enumerate(s.function_calls)
    ]
    return Reply(s.text, calls, s.server_id if isinstance(s, ResponsesResult) else None)


def quiet_gc() -> None:
    """Keep Python's cyclic collector out of the measurement.

    Everything allocated while setting up (corpora, Locust, the workload) is frozen out of the
    collector's reach, and generation 0 runs 100x less often: a default gen-2 collection paused
    a C=256 ramp for 70 ms (gen-0 up to 10 ms), stalling every stream's reads at once. Records are
    plain data without cycles; what little cyclic garbage the run makes waits a little longer.
    """
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 1000)


def plan_to_dict(plan: StepPlan) -> dict[str, Any]:
    if plan.replay is not None:
        raise ValueError("a trace replay step cannot be sent to workers; run trace replays in one process")
    return {
        "concurrency": plan.concurrency,
        "context_tokens": plan.context_tokens,
        "warmup_s": plan.warmup_s,
        "duration_s": plan.duration_s,
        "requests": plan.requests,
        "rate": plan.rate,
        "repeat": plan.repeat,
        "tenants": [list(t) for t in plan.tenants] if plan.tenants is not None else None,
    }


def plan_from_dict(data: dict[str, Any]) -> StepPlan:
    tenants = data.get("tenants")
    return StepPlan(**{**data, "tenants": tuple((str(n), float(v)) for n, v in tenants) if tenants else None})


def prompt_size(spec: RequestSpec) -> tuple[int, int]:
    """Characters of the prompt as sent and the number of messages or items: what
    :class:`LengthFeedback` is told (see ``spec.request.prompt_chars``)."""
    return prompt_chars(spec)


_STATES: weakref.WeakKeyDictionary[Any, RunState] = weakref.WeakKeyDictionary()


def bind(env: Any, state: RunState) -> None:
    """Wire a RunState to a Locust ``Environment``, the same way for ``loadgen ramp``, the web UI's
    locustfile and a worker: users find it (``state_of``), each request is reported to Locust
    (its request event), and TTFT and ITL go to Locust's statistics tab as their own rows."""
    _STATES[env] = state
    state.fire_request = env.events.request.fire
    # Locust keeps float response times as given (its own users pass float ms; its hint says int)
    log_request: Callable[[str, str, float, int], None] = env.stats.log_request
    state.log_metric = lambda kind, name, ms: log_request(kind, name, ms, 0)


def state_of(env: Any) -> RunState | None:
    """The RunState ``bind`` gave this Environment, or None."""
    return _STATES.get(env)
