"""Live view of a run directory while it grows: the report's per-step figures over what has arrived.

Each poll reads only the bytes appended since the last one to ``steps.jsonl``, ``requests*.jsonl``,
``samples.jsonl``, ``events.jsonl`` and ``client-*.jsonl`` (a half-written last line waits for the
next poll), so it works the same in a single process, on a Locust master that receives its
workers' records, and on a run directory copied from elsewhere. Nothing here imports Flask or Locust.

One definition of each figure: the step rows are the analysis's own (``analysis.steps.StepAnalysis
.row``, then the report's enrichers: telemetry join, client load with its INVALID and "timing
uncertain" verdicts, server down), the Pareto points ``analysis.pareto.pareto_summary`` of those
rows. Incrementally: request lines are parsed into columns once, block by block, as
``analysis.columns`` parses a whole file; a step's row is recomputed only when records that it
reads arrived (or it is the current step), from the rows the report would read for it, taken in
the report's order (its records and the records streaming into its window), so an ended step's
row is the report's row. The current step's window ends now; it counts the requests that have
ended (in-flight requests are not recorded yet), so its figures settle once its last requests end.
Each step is joined with the telemetry timed from ``TELEMETRY_MARGIN_NS`` before its window to as
long after it (the readings in effect at its edges, the counters bracketing it), not the whole
run's, so a poll costs the current step's samples; the join reads the same readings as the
report's (its gap threshold comes from the median sampling interval of that stretch, the report's
from the whole run's: the same for a steady sampler). The knee is ``knee_verdict`` over the ended
steps (repeats merged as the report merges them; a run mixing call types is judged on all calls).
Once the run's ``summary.json`` is written after the last step, the rows, Pareto points and knee
are read from it: the live page then shows the report.

Memory stays that of the recent steps: samples and request columns that only steps ended more than
``SETTLE_NS`` ago read are dropped, their rows kept; a late record of such a step makes its row be
computed again from the files.

Time series (for the charts; at most one point a second, ``SERIES_POINTS`` each): GPU power per GPU
and in total (the sum of each GPU's last reading, as the analysis sums it), the power limits; the
server's KV-cache fill, queue, running requests and preemptions (retractions) since the first
sample; each worker's CPU share and event-loop lag from its ``client-<worker>.jsonl``.
"""

from __future__ import annotations

import copy
import itertools
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import numpy.typing as npt
import orjson

from loadgen.analysis.client_load import client_load_enricher
from loadgen.analysis.columns import Requests, RunLoadError, parse_request_block, take_requests
from loadgen.analysis.contracts import KneeRule, KneeVerdict, LoadAxis, ParetoSummary, RunSummary, StepSummary
from loadgen.analysis.knee import knee_verdict
from loadgen.analysis.load import Run, Step, fold_steps
from loadgen.analysis.pareto import pareto_summary
from loadgen.analysis.repeats import add_repeats
from loadgen.analysis.server_down import server_down_enricher
from loadgen.analysis.steps import DEFAULT_MIN_OK_REQUESTS, StepAnalysis, failure_class_names, ok_mask
from loadgen.analysis.summary import manifest_value
from loadgen.analysis.telemetry import telemetry_enricher
from loadgen.analysis.values import as_dict, number, stat, steps_of
from loadgen.rundir.layout import read_manifest

SERIES_POINTS = 1800  # points kept per time series (30 min at one a second)
KNEE_EVERY_S = 10.0
ERROR_SAMPLES = 3  # distinct messages kept per error class
LOG_LINES = 50  # the latest server log matches kept
GPU_STALE_NS = 5_000_000_000  # a GPU reading older than this is left out of the live total
TELEMETRY_MARGIN_NS = 20_000_000_000  # samples joined to a step: its window and 20 s either side
SETTLE_NS = 120_000_000_000  # a step ended this long ago gets no more records or samples (memory is freed)
FORGET_EVERY_NS = 60_000_000_000  # free memory once its horizon moved on by this much

I64 = npt.NDArray[np.int64]


class JsonlTail:
    """One JSONL file read from where the last read stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self._partial = b""

    def read_block(self) -> tuple[bytes, int]:
        """The complete lines appended since the last read (ending at a newline; b"" if none), and
        the byte offset in the file where they start."""
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return b"", self.offset
        if not data:
            return b"", self.offset
        start = self.offset - len(self._partial)
        self.offset += len(data)
        buf = self._partial + data
        cut = buf.rfind(b"\n") + 1
        self._partial = buf[cut:]
        return buf[:cut], start

    def read(self) -> list[dict[str, Any]]:
        return json_lines(self.read_block()[0])


def json_lines(data: bytes) -> list[dict[str, Any]]:
    """The JSON objects of complete JSONL lines; anything else is skipped, as the report's loader does."""
    out: list[dict[str, Any]] = []
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a torn line from a killed writer: the report's loader says so; the live view skips it
        if isinstance(obj, dict):
            out.append(obj)
    return out


class RecordTail:
    """Every ``requests*.jsonl`` of a run directory (one per worker; new ones appear mid-run)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._tails: dict[str, JsonlTail] = {}

    def read(self) -> list[dict[str, Any]]:
        for path in sorted(self.run_dir.glob("requests*.jsonl")):
            if path.name not in self._tails:
                self._tails[path.name] = JsonlTail(path)
        out: list[dict[str, Any]] = []
        for tail in self._tails.values():
            out.extend(tail.read())
        return out


def ttft_ms(rec: dict[str, Any]) -> float | None:
    first = rec.get("first_chunk_ns")
    if first is None:
        return None
    return float((first - rec["intended_ns"]) / 1e6)


def chunk_gaps_s(rec: dict[str, Any]) -> list[float]:
    offs = rec.get("chunk_offsets_ns") or []
    return [(b - a) / 1e9 for a, b in itertools.pairwise(offs)]


# ---------------------------------------------------------------------------------------------
# request records as column blocks


@dataclass(slots=True)
class _Block:
    """One poll's new lines of one request file: where they are, what they span, and their columns
    (None once released: read again from the file when asked for)."""

    seq: int
    path: Path
    offset: int
    size: int
    req: Requests | None
    steps: frozenset[int]
    min_sent_ns: int
    max_end_ns: int


def _reads(req: Requests, step: Step) -> npt.NDArray[np.bool_]:
    """The rows of ``req`` that ``StepAnalysis.row(step)`` reads: the step's own records, and every
    record that may have streamed tokens into its window (sent before its end, ended after its start)."""
    mask: npt.NDArray[np.bool_] = (req.step == step.step) | (
        (req.sent_ns < step.end_ns) & (req.end_ns >= step.steady_ns)
    )
    return mask


class RecordBlocks:
    """Every ``requests*.jsonl`` of a run directory, parsed block by block into columns."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.seq = 0
        self.files: dict[str, list[_Block]] = {}
        self.blocks: list[_Block] = []  # every block, in read order (``blocks[k].seq == k + 1``)
        self._tails: dict[str, JsonlTail] = {}
        self.problems: list[str] = []

    def read(self) -> list[_Block]:
        """Parse what was appended since the last read; return the new blocks."""
        for path in sorted(self.run_dir.glob("requests*.jsonl")):
            if path.name not in self._tails:
                self._tails[path.name] = JsonlTail(path)
                self.files[path.name] = []
        new: list[_Block] = []
        for name, tail in self._tails.items():
            data, start = tail.read_block()
            if not data:
                continue
            try:
                req, _ = parse_request_block(data, tail.path, start)
            except RunLoadError as exc:  # the report will name it too; the live view goes on without it
                self.problems = [*self.problems[-4:], str(exc)]
                continue
            if not req.n:
                continue
            self.seq += 1
            block = _Block(
                seq=self.seq,
                path=tail.path,
                offset=start,
                size=len(data),
                req=req,
                steps=frozenset(np.unique(req.step).tolist()),
                min_sent_ns=int(req.sent_ns.min()),
                max_end_ns=int(req.end_ns.max()),
            )
            self.files[name].append(block)
            self.blocks.append(block)
            new.append(block)
        return new

    def columns(self, block: _Block) -> Requests:
        """The block's columns; a released block is parsed again from its file (not kept)."""
        if block.req is not None:
            return block.req
        with block.path.open("rb") as f:
            f.seek(block.offset)
            data = f.read(block.size)
        req, _ = parse_request_block(data, block.path, block.offset)
        return req

    def release(self, before_ns: int) -> None:
        """Drop the columns of blocks whose records all ended before ``before_ns`` (memory stays
        that of the recent records; an old step that needs them again reads them back)."""
        for block in self.blocks:
            if block.req is not None and block.max_end_ns < before_ns:
                block.req = None

    def touches(self, block: _Block, step: Step) -> bool:
        if step.step in block.steps:
            return True
        if block.min_sent_ns >= step.end_ns or block.max_end_ns < step.steady_ns:
            return False
        return bool(_reads(self.columns(block), step).any())

    def rows_for(self, step: Step) -> Requests:
        """The records ``step``'s row reads, in the report's order (files by name, then lines)."""
        parts: list[tuple[Requests, I64]] = []
        for name in sorted(self.files):
            for block in self.files[name]:
                if step.step in block.steps or not (
                    block.min_sent_ns >= step.end_ns or block.max_end_ns < step.steady_ns
                ):
                    req = self.columns(block)
                    rows = np.flatnonzero(_reads(req, step))
                    if len(rows):
                        parts.append((req, rows))
        return take_requests(parts)


# ---------------------------------------------------------------------------------------------
# the payload's types


class _LiveKneeRequired(TypedDict):
    concurrency: float | None
    rate: float | None
    reason: str | None


class LiveKnee(_LiveKneeRequired, total=False):
    """The knee the tab shows: the verdict's load and reason, or only a reason it has none yet."""

    axis: LoadAxis | None
    rule: KneeRule | None


class LiveStep(TypedDict):
    """One step as the page draws it: the report's figures of the step (tok/s; latencies in ms)
    over what has arrived, and how far it is."""

    step: int
    concurrency: int | None
    rate: float | None
    context_tokens: int | None
    phase: str  # "warm-up", "steady" or "ended"
    window_s: float | None  # the steady window so far (the report's window_s once ended)
    ok: int  # every request of the step so far, warm-up included (progress)
    failed: int
    requests_ok: int  # the report's: sent inside the steady window
    requests_failed: int
    requests_cancelled: int
    window_requests: int
    tok_s: float | None  # output_tok_s
    req_tok_s: float | None  # per_request_tok_s
    ttft_p50: float | None
    ttft_p90: float | None
    ttft_p99: float | None
    itl_p50: float | None
    itl_p90: float | None
    itl_p99: float | None
    tpot_p50: float | None
    tpot_p90: float | None
    tpot_p99: float | None
    e2e_p50: float | None
    e2e_p99: float | None
    errors: dict[str, int]  # failures in the window by class (the report's)
    valid: bool
    invalid_reason: str | None
    timing_uncertain: bool
    timing_reason: str | None
    client_cpu: float | None  # the busiest process's mean share of a core
    client_processes: int | None
    loop_lag_p99_ms: float | None
    kv_usage_mean: float | None  # 0-1
    kv_usage_max: float | None
    queue_len_mean: float | None
    preemptions: float | None
    gpu_power_w: float | None  # mean total over the window
    gpu_power_limit_w: float | None
    power_valid: bool | None
    power_invalid_reason: str | None
    tokens_per_joule: float | None
    per_user_tok_s: float | None  # the Pareto x: 1000 / TPOT p50
    tok_s_per_gpu: float | None  # the Pareto y


def live_step(row: StepSummary, phase: str, ok: int, failed: int, point: dict[str, Any] | None) -> LiveStep:
    """The page's view of one report step row (``row`` as ``summary.json`` holds it)."""
    timing = as_dict(row.get("timing"))
    cpu = as_dict(row.get("client_cpu"))
    kv = as_dict(row.get("kv_usage"))
    queue = as_dict(row.get("queue_len"))
    power = as_dict(row.get("gpu_power_w"))
    requests_ok = int(row.get("requests_ok") or 0)
    requests_failed = int(row.get("requests_failed") or 0)
    cancelled = int(row.get("requests_cancelled") or 0)
    window_s = number(row.get("window_s"))
    return {
        "step": int(row["step"]),
        "concurrency": row.get("concurrency"),
        "rate": row.get("rate"),
        "context_tokens": row.get("context_tokens"),
        "phase": phase,
        "window_s": window_s if window_s is not None and window_s > 0 else None,
        "ok": ok,
        "failed": failed,
        "requests_ok": requests_ok,
        "requests_failed": requests_failed,
        "requests_cancelled": cancelled,
        "window_requests": requests_ok + requests_failed + cancelled,
        "tok_s": number(row.get("output_tok_s")),
        "req_tok_s": number(row.get("per_request_tok_s")),
        "ttft_p50": stat(row, "ttft_ms", "p50"),
        "ttft_p90": stat(row, "ttft_ms", "p90"),
        "ttft_p99": stat(row, "ttft_ms", "p99"),
        "itl_p50": stat(row, "itl_ms", "p50"),
        "itl_p90": stat(row, "itl_ms", "p90"),
        "itl_p99": stat(row, "itl_ms", "p99"),
        "tpot_p50": stat(row, "tpot_ms", "p50"),
        "tpot_p90": stat(row, "tpot_ms", "p90"),
        "tpot_p99": stat(row, "tpot_ms", "p99"),
        "e2e_p50": stat(row, "e2e_ms", "p50"),
        "e2e_p99": stat(row, "e2e_ms", "p99"),
        "errors": dict(as_dict(row.get("errors"))),
        "valid": row.get("valid") is not False,
        "invalid_reason": row.get("invalid_reason"),
        "timing_uncertain": bool(timing.get("uncertain")),
        "timing_reason": timing.get("reason"),
        "client_cpu": number(cpu.get("mean")),
        "client_processes": cpu.get("processes"),
        "loop_lag_p99_ms": stat(row, "loop_lag_ms", "p99"),
        "kv_usage_mean": number(kv.get("mean")),
        "kv_usage_max": number(kv.get("max")),
        "queue_len_mean": number(queue.get("mean")),
        "preemptions": number(row.get("preemptions")),
        "gpu_power_w": number(power.get("mean")),
        "gpu_power_limit_w": number(row.get("gpu_power_limit_w")),
        "power_valid": row.get("power_valid"),
        "power_invalid_reason": row.get("power_invalid_reason"),
        "tokens_per_joule": number(row.get("tokens_per_joule")),
        "per_user_tok_s": number(point.get("per_user_tok_s")) if point else None,
        "tok_s_per_gpu": number(point.get("tok_s_per_gpu")) if point else None,
    }


# ---------------------------------------------------------------------------------------------
# time series


Series = deque[tuple[float, float]]


def _series() -> Series:
    return deque(maxlen=SERIES_POINTS)


def _append_thinned(series: Series, t: float, v: float) -> None:
    """Keep at most one point a second: a new point within a second of the last replaces it."""
    if series and t - series[-1][0] < 1.0:
        if t >= series[-1][0]:
            series[-1] = (series[-1][0], v)
        return
    series.append((t, v))


@dataclass
class _Worker:
    """One load-generator process's own load, from its ``client-<worker>.jsonl``."""

    cpu: Series = field(default_factory=_series)
    lag: Series = field(default_factory=_series)
    last: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _StepCache:
    step: Step
    seq: int
    row: StepSummary


class LiveRun:
    """The live state of one run directory; ``payload()`` is what the LLM tab draws.

    ``knee``: a function of the run directory giving the verdict (tests); default: the analysis's
    ``knee_verdict`` over the live rows, recomputed when a step ended. ``prefer_report``: once the
    run's summary.json is written after its last step, show its rows (False: always compute)."""

    def __init__(
        self,
        run_dir: Path,
        now_ns: Callable[[], int] = time.time_ns,
        knee: Callable[[Path], LiveKnee | None] | None = None,
        prefer_report: bool = True,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.now_ns = now_ns
        self.prefer_report = prefer_report
        self.t0_ns: int | None = None
        self.manifest: dict[str, Any] = {}
        self._step_lines: list[dict[str, Any]] = []
        self._step_tail = JsonlTail(self.run_dir / "steps.jsonl")
        self._sample_tail = JsonlTail(self.run_dir / "samples.jsonl")
        self._event_tail = JsonlTail(self.run_dir / "events.jsonl")
        self._client_tails: dict[str, JsonlTail] = {}
        self.records = RecordBlocks(self.run_dir)
        self._cache: dict[int, _StepCache] = {}
        self._empty, _ = parse_request_block(b"", self.run_dir / "requests.jsonl")
        # whole steps so far (warm-up included), by step: [ok, failed]
        self.step_counts: dict[int, list[int]] = {}
        # every record of the run so far, warm-ups included: summary.json's totals, counted as it counts
        self.requests_ok = 0
        self.requests_failed = 0
        self.errors: dict[str, int] = {}
        self.error_samples: dict[str, list[str]] = {}
        self.samples: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.logs: deque[dict[str, Any]] = deque(maxlen=LOG_LINES)
        self.log_counts: dict[str, int] = {}
        self.power: dict[str, Series] = {}
        self.power_total: Series = _series()
        self.power_limit_w: dict[str, float] = {}
        self._gpu_last: dict[str, tuple[int, float]] = {}
        self.kv: Series = _series()
        self.queue: Series = _series()
        self.running: Series = _series()
        self.preemptions: Series = _series()
        self._preempt: tuple[float, float] | None = None  # (last counter value, increase so far)
        self.workers: dict[str, _Worker] = {}
        self._client_lines: dict[str, list[dict[str, Any]]] = {}
        self.server_seen = False
        self._sample_t: I64 = np.empty(0, dtype=np.int64)
        self._sample_index: list[tuple[int, int, int, int]] = []  # per read: first, last t_ns; offset, bytes
        self._samples_from_ns = 0  # memory holds every sample timed at or after this
        self._latest_sample_ns = 0
        self._latest_client_ns = 0
        # step -> (core row, telemetry seen then, enriched row, settled)
        self._enrich_cache: dict[int, tuple[StepSummary, tuple[int, int, int], StepSummary, bool]] = {}
        self.worker_requests: dict[str, list[int]] = {}
        self._knee_fn = knee
        self._knee: LiveKnee | None = None
        self._knee_at = 0.0
        self._knee_seen = -1
        self._report: tuple[int, RunSummary] | None = None

    # -- reading ------------------------------------------------------------------------------
    def poll(self) -> None:
        if not self.manifest:
            self.manifest = read_manifest(self.run_dir)
        self._step_lines += self._step_tail.read()
        for block in self.records.read():
            self._count(self.records.columns(block))
        data, start = self._sample_tail.read_block()
        times = [t for s in json_lines(data) if (t := self._sample(s)) is not None]
        if times:
            self._sample_index.append((min(times), max(times), start, len(data)))
        for e in self._event_tail.read():
            self._event(e)
        for path in sorted(self.run_dir.glob("client-*.jsonl")):
            tail = self._client_tails.setdefault(path.name, JsonlTail(path))
            for row in tail.read():
                self._client(path.name, row)

    def _count(self, req: Requests) -> None:
        ok = ok_mask(req)
        n_ok = int(ok.sum())
        self.requests_ok += n_ok
        self.requests_failed += len(ok) - n_ok
        steps, ok_n = np.unique(req.step[ok], return_counts=True)
        for s, n in zip(steps.tolist(), ok_n.tolist(), strict=True):
            self.step_counts.setdefault(s, [0, 0])[0] += n
        failed = np.flatnonzero(~ok)
        steps, bad_n = np.unique(req.step[failed], return_counts=True)
        for s, n in zip(steps.tolist(), bad_n.tolist(), strict=True):
            self.step_counts.setdefault(s, [0, 0])[1] += n
        for name, c_ok, c_bad in zip(
            req.worker.names,
            np.bincount(req.worker.codes[ok], minlength=len(req.worker.names)).tolist(),
            np.bincount(req.worker.codes[failed], minlength=len(req.worker.names)).tolist(),
            strict=True,
        ):
            counts = self.worker_requests.setdefault(str(name or "-"), [0, 0])
            counts[0] += c_ok
            counts[1] += c_bad
        # failures of the whole run by class, as the report's totals name them
        for row, cls in zip(failed.tolist(), failure_class_names(req, failed), strict=True):
            self.errors[cls] = self.errors.get(cls, 0) + 1
            msg = req.errors.get(row)
            kept = self.error_samples.setdefault(cls, [])
            if msg is not None and len(kept) < ERROR_SAMPLES and msg not in kept:
                kept.append(msg)

    def _sample(self, s: dict[str, Any]) -> int | None:
        """Keep one telemetry sample and add it to the series; its time (None: not a sample)."""
        t = s.get("t_ns")
        if not isinstance(t, int):
            return None
        self.samples.append(s)
        self._latest_sample_ns = max(self._latest_sample_ns, t)
        if self.t0_ns is None:
            self.t0_ns = t
        self._chart(s, t)
        return t

    def _chart(self, s: dict[str, Any], t: int) -> None:
        """Add a sample to the page's time series (power, KV fill, queue, preemptions)."""
        src = s.get("src")
        if src == "gpu":
            key = f"gpu{s.get('gpu', 0)}"
            limit = number(s.get("power_limit_w"))
            if limit is not None:
                self.power_limit_w[key] = limit
            power = number(s.get("power_w"))
            if power is None:
                return
            _append_thinned(self.power.setdefault(key, _series()), t / 1e9, power)
            self._gpu_last[key] = (t, power)
            total = sum(w for t_g, w in self._gpu_last.values() if t - t_g <= GPU_STALE_NS)
            _append_thinned(self.power_total, t / 1e9, total)
        elif src == "server":
            self.server_seen = True
            for key, series in (("kv_usage", self.kv), ("queued", self.queue), ("running", self.running)):
                v = number(s.get(key))
                if v is not None:
                    _append_thinned(series, t / 1e9, v)
            count = number(s.get("preemptions_total"))
            if count is not None:
                if self._preempt is None:
                    self._preempt = (count, 0.0)
                else:
                    last, so_far = self._preempt
                    # a counter that went down restarted from zero: its value is what it counted since
                    self._preempt = (count, so_far + (count - last if count >= last else count))
                _append_thinned(self.preemptions, t / 1e9, self._preempt[1])

    def _event(self, e: dict[str, Any]) -> None:
        if not isinstance(e.get("t_ns"), int):
            return
        self.events.append(e)
        if e.get("src") == "log" and e.get("pattern"):
            pattern = str(e["pattern"])
            self.log_counts[pattern] = self.log_counts.get(pattern, 0) + 1
            self.logs.append(
                {
                    "t_ns": e["t_ns"],
                    "pattern": pattern,
                    "severity": e.get("severity"),
                    "line": e.get("line"),
                }
            )

    def _client(self, file: str, row: dict[str, Any]) -> None:
        t = row.get("t_ns")
        if not isinstance(t, int):
            return
        name = str(row.get("worker") or file.removeprefix("client-").removesuffix(".jsonl"))
        w = self.workers.setdefault(name, _Worker())
        self._latest_client_ns = max(self._latest_client_ns, t)
        self._client_lines.setdefault(file, []).append(row)
        cpu, lag = number(row.get("cpu_frac")), number(row.get("lag_max_ms", row.get("loop_lag_ms")))
        if cpu is not None:
            _append_thinned(w.cpu, t / 1e9, cpu)
        if lag is not None:
            # the largest lag of each second, not the last one's: a hold between samples shows
            if w.lag and t / 1e9 - w.lag[-1][0] < 1.0:
                lag = max(lag, w.lag[-1][1])
            _append_thinned(w.lag, t / 1e9, lag)
        w.last = {
            "t_ns": t,
            "cpu_frac": cpu,
            "loop_lag_ms": number(row.get("loop_lag_ms")),
            "lag_max_ms": number(row.get("lag_max_ms")),
            "in_flight": row.get("in_flight"),
        }

    def _client_rows(self) -> list[dict[str, Any]]:
        """Every client line, in the report's order (file name, then line)."""
        out: list[dict[str, Any]] = []
        for name in sorted(self._client_lines):
            out += self._client_lines[name]
        return out

    # -- the steps ------------------------------------------------------------------------------
    def live_steps(self, now: int) -> list[Step]:
        """The steps as the report folds them; a step still running ends now."""
        steps = fold_steps(self._step_lines, self._empty)
        if steps and steps[-1].end_reason is None:
            last = steps[-1]
            end = max(now, last.start_ns)
            # no steady line yet: still warming up (the report derives one only for a killed run)
            steps[-1] = replace(last, end_ns=end, steady_ns=last.steady_ns if last.steady_logged else end)
        if steps and self.t0_ns is None:
            self.t0_ns = steps[0].start_ns
        elif steps:
            self.t0_ns = min(self.t0_ns or steps[0].start_ns, steps[0].start_ns)
        return steps

    def _core_row(self, step: Step) -> StepSummary:
        """``StepAnalysis.row`` over the records it reads; recomputed only when they changed."""
        cached = self._cache.get(step.step)
        if (
            cached is not None
            and cached.step == step
            and not any(self.records.touches(b, step) for b in self.records.blocks[cached.seq :])
        ):
            cached.seq = self.records.seq  # still the row: later polls look only at newer blocks
            return cached.row
        run = Run(self.run_dir, self.manifest, [step], self.records.rows_for(step), [], [], [])
        row = StepAnalysis(run, DEFAULT_MIN_OK_REQUESTS).row(step)
        self._cache[step.step] = _StepCache(step, self.records.seq, row)
        return row

    def rows(self, steps: Sequence[Step]) -> list[StepSummary]:
        """The report's step rows (statistics, then its enrichers) over what has arrived."""
        return [self._enriched(s, self._core_row(s)) for s in steps]

    def _enriched(self, step: Step, core: StepSummary) -> StepSummary:
        """``core`` with the report's enrichers applied (telemetry join, client load, server down).

        Each step is joined with the samples from ``TELEMETRY_MARGIN_NS`` before its window to as
        long after it (the readings in effect at its edges, the counters bracketing it, the gaps
        next to it), not the whole run's: the join then costs the window's samples, not the run's.
        Recomputed while the step's figures or that stretch of telemetry still change."""
        a, b = step.steady_ns, step.end_ns
        hi = b + TELEMETRY_MARGIN_NS
        seen = (self._latest_sample_ns, self._latest_client_ns, len(self.events))
        cached = self._enrich_cache.get(step.step)
        if cached is not None and cached[0] is core and (cached[1] == seen or cached[3]):
            return cached[2]
        row = copy.deepcopy(core)
        lo = min(a, step.start_ns) - TELEMETRY_MARGIN_NS
        run = Run(self.run_dir, self.manifest, [step], self._empty, self._samples_between(lo, hi), self.events, [])
        telemetry_enricher(run, [row])
        clients = [r for r in self._client_rows() if a <= r["t_ns"] <= b]
        client_load_enricher(run, [row], client_rows=clients)
        server_down_enricher(run, [row])
        # every stream that has data is past the stretch: later lines do not change this row
        settled = all(latest > hi for latest in seen[:2] if latest)
        self._enrich_cache[step.step] = (core, seen, row, settled)
        return row

    def _sample_times(self) -> I64:
        if len(self._sample_t) != len(self.samples):
            new = np.fromiter((s["t_ns"] for s in self.samples[len(self._sample_t) :]), dtype=np.int64)
            self._sample_t = np.concatenate([self._sample_t, new])
        return self._sample_t

    def _samples_between(self, lo: int, hi: int) -> list[dict[str, Any]]:
        """The samples timed in ``[lo, hi]``, in file order: from memory, or read back from
        samples.jsonl for a stretch older than what memory keeps (``_forget``)."""
        if lo >= self._samples_from_ns:
            t = self._sample_times()
            return [self.samples[i] for i in np.flatnonzero((t >= lo) & (t <= hi))]
        out: list[dict[str, Any]] = []
        with self._sample_tail.path.open("rb") as f:
            for first, last, offset, size in self._sample_index:
                if last < lo or first > hi:
                    continue
                f.seek(offset)
                out += [
                    s for s in json_lines(f.read(size)) if isinstance(t_ns := s.get("t_ns"), int) and lo <= t_ns <= hi
                ]
        return out

    def _forget(self, steps: Sequence[Step], now: int) -> None:
        """Bound memory on a long run: drop the samples and the request columns that only steps
        ended more than ``SETTLE_NS`` ago read (their rows are kept; a late record that changes one
        reads them back from the files)."""
        open_starts = [s.start_ns for s in steps if s.end_reason is None or s.end_ns > now - SETTLE_NS]
        horizon = min(open_starts, default=now - SETTLE_NS) - TELEMETRY_MARGIN_NS
        if horizon - self._samples_from_ns < FORGET_EVERY_NS:
            return
        keep = np.flatnonzero(self._sample_times() >= horizon)
        self.samples = [self.samples[i] for i in keep]
        self._sample_t = self._sample_t[keep]
        self._samples_from_ns = horizon
        self.records.release(horizon)

    # -- the written report ---------------------------------------------------------------------
    def report(self, steps: Sequence[Step]) -> RunSummary | None:
        """The run's summary.json when it was written after the last step ended, else None."""
        if not self.prefer_report or not steps or any(s.end_reason is None for s in steps):
            return None
        path = self.run_dir / "summary.json"
        try:
            mtime_ns = path.stat().st_mtime_ns
        except FileNotFoundError:
            return None
        if mtime_ns < max(s.end_ns for s in steps):
            return None  # a summary from before the last step: the live rows are computed instead
        if self._report is not None and self._report[0] == mtime_ns:
            return self._report[1]
        try:
            summary: RunSummary = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        self._report = (mtime_ns, summary)
        return summary

    # -- the knee -------------------------------------------------------------------------------
    def knee(self, rows: list[StepSummary], steps: Sequence[Step]) -> LiveKnee | None:
        """The current verdict, recomputed when a step ended since the last time, at most every
        ``KNEE_EVERY_S`` seconds."""
        ended = sum(1 for s in steps if s.end_reason is not None)
        now = time.monotonic()
        if ended != self._knee_seen and (now - self._knee_at >= KNEE_EVERY_S or self._knee is None):
            self._knee_seen = ended
            self._knee_at = now
            if not ended:
                self._knee = None
            elif self._knee_fn is not None:
                self._knee = self._knee_fn(self.run_dir)
            else:
                slo = self.manifest.get("slo") or None
                ended_rows = [copy.deepcopy(r) for r, s in zip(rows, steps, strict=True) if s.end_reason is not None]
                try:
                    # as the report judges (analysis/pipeline): one point per load when steps repeat
                    judged = add_repeats({"steps": ended_rows}, ended_rows, slo)
                    self._knee = _knee_fields(knee_verdict(judged, slo))
                except Exception as exc:  # a detector that cannot judge these steps yet: say why
                    self._knee = {"concurrency": None, "rate": None, "reason": f"not available yet: {exc}"}
        return self._knee

    # -- output ---------------------------------------------------------------------------------
    def payload(self) -> dict[str, Any]:
        self.poll()
        now = self.now_ns()
        steps = self.live_steps(now)
        summary = self.report(steps)
        if summary is not None:
            rows = steps_of(summary)
            pareto = as_dict(summary.get("pareto"))
            knee: LiveKnee | None = _knee_fields(as_dict(summary.get("knee")))
        else:
            rows = self.rows(steps)
            pareto = pareto_summary(rows, manifest_value(self.manifest, "gpu_count"))
            knee = self.knee(rows, steps)
        self._forget(steps, now)
        phase = {s.step: _phase(s, now) for s in steps}
        points = {p.get("step"): p for p in pareto.get("points", [])}
        live_rows = []
        for r in rows:
            sid = int(r["step"])
            ok, failed = self.step_counts.get(sid, [0, 0])
            live_rows.append(live_step(r, phase.get(sid, "ended"), ok, failed, dict(points.get(sid) or {})))
        t0 = self.t0_ns if self.t0_ns is not None else now
        reports = {name: f"run/{name}" for name in REPORT_FILES if (self.run_dir / name).exists()}

        def pts(series: Series, digits: int) -> list[list[float]]:
            return [[round(t - t0 / 1e9, 2), round(v, digits)] for t, v in series]

        return {
            "run_id": self.run_dir.name,
            "source": "report" if summary is not None else "live",
            "elapsed_s": round((now - t0) / 1e9, 3) if self.t0_ns is not None else 0.0,
            "current": live_rows[-1] if live_rows else None,
            "totals": self._totals(summary),
            "steps": live_rows,
            "pareto": _pareto_payload(pareto),
            "errors": dict(sorted(self.errors.items(), key=lambda kv: (-kv[1], kv[0]))),
            "error_samples": {k: list(v) for k, v in self.error_samples.items()},
            "power": {k: pts(v, 1) for k, v in sorted(self.power.items())},
            "power_total": pts(self.power_total, 1),
            "power_limit_w": dict(sorted(self.power_limit_w.items())),
            "power_limit_total_w": sum(self.power_limit_w.values()) if self.power_limit_w else None,
            "kv": pts(self.kv, 4),
            "queue": pts(self.queue, 1),
            "running": pts(self.running, 1),
            "preemptions": pts(self.preemptions, 1),
            "server_samples": self.server_seen,
            "logs": [{**e, "t_s": round(e["t_ns"] / 1e9 - t0 / 1e9, 2)} for e in self.logs],
            "log_counts": dict(self.log_counts),
            "workers": self._workers_payload(pts),
            "problems": list(self.records.problems),
            "knee": knee,
            "reports": reports,
        }

    def _totals(self, summary: RunSummary | None) -> dict[str, int]:
        """The run's request counts: summary.json's totals once written, else the same rule
        (``ok_mask`` over every record so far); ``requests_failed`` holds the cancelled ones too."""
        if summary is not None:
            totals = as_dict(summary.get("totals"))
            errors = as_dict(totals.get("errors"))
            return {
                "requests_ok": int(totals.get("requests_ok") or 0),
                "requests_failed": int(totals.get("requests_failed") or 0),
                "requests_cancelled": int(errors.get("cancelled") or 0),
            }
        return {
            "requests_ok": self.requests_ok,
            "requests_failed": self.requests_failed,
            "requests_cancelled": self.errors.get("cancelled", 0),
        }

    def _workers_payload(self, pts: Callable[[Series, int], list[list[float]]]) -> dict[str, dict[str, Any]]:
        """Each process: its last self-measurement, its CPU and lag series, the requests it recorded
        (a process seen only in records, or only in its client file, is listed too)."""
        out: dict[str, dict[str, Any]] = {}
        for name in sorted(set(self.workers) | set(self.worker_requests)):
            w = self.workers.get(name) or _Worker()
            ok, failed = self.worker_requests.get(name, [0, 0])
            last = w.last or {
                "t_ns": None,
                "cpu_frac": None,
                "loop_lag_ms": None,
                "lag_max_ms": None,
                "in_flight": None,
            }
            out[name] = {
                **last,
                "cpu": pts(w.cpu, 4),
                "lag_ms": pts(w.lag, 2),
                "requests_ok": ok,
                "requests_failed": failed,
            }
        return out


REPORT_FILES = ("report.html", "report.md", "summary.json", "steps.csv")


def empty_payload() -> dict[str, Any]:
    """What live.json answers before any run: every key, empty."""
    return {
        "run_id": None,
        "source": "live",
        "elapsed_s": 0.0,
        "current": None,
        "totals": {"requests_ok": 0, "requests_failed": 0, "requests_cancelled": 0},
        "steps": [],
        "pareto": _pareto_payload({}),
        "errors": {},
        "error_samples": {},
        "power": {},
        "power_total": [],
        "power_limit_w": {},
        "power_limit_total_w": None,
        "kv": [],
        "queue": [],
        "running": [],
        "preemptions": [],
        "server_samples": False,
        "logs": [],
        "log_counts": {},
        "workers": {},
        "problems": [],
        "knee": None,
        "reports": {},
    }


def _phase(step: Step, now: int) -> str:
    if step.end_reason is not None:
        return "ended"
    return "steady" if step.steady_logged and now >= step.steady_ns else "warm-up"


def _pareto_payload(pareto: ParetoSummary | dict[str, Any]) -> dict[str, Any]:
    return {
        "gpus": pareto.get("gpus"),
        "gpus_source": pareto.get("gpus_source"),
        "note": pareto.get("note"),
        "per_user": pareto.get("per_user"),
        "points": [dict(p) for p in pareto.get("points", [])],
    }


def knee_from_run_dir(run_dir: Path) -> LiveKnee | None:
    """The knee verdict of the run so far as the report computes it (loads the whole run)."""
    from loadgen.analysis.pipeline import summarise

    try:
        _, summary = summarise(run_dir)
    except Exception as exc:  # a run directory mid-write: say why, try again after the next step
        return {"concurrency": None, "rate": None, "reason": f"not available yet: {exc}"}
    return _knee_fields(as_dict(summary.get("knee")))


def _knee_fields(knee: KneeVerdict) -> LiveKnee:
    return {
        "concurrency": knee.get("concurrency"),
        "rate": knee.get("rate"),
        "axis": knee.get("axis"),
        "rule": knee.get("rule"),
        "reason": knee.get("reason"),
    }
