"""Live view of a run directory while it grows: per-step throughput and latency, telemetry, errors.

Reads ``steps.jsonl``, ``requests*.jsonl`` and ``samples.jsonl`` incrementally (each poll reads
only the bytes appended since the last one; a half-written last line waits for the next poll), so
it works the same in a single process, on a Locust master that receives its workers' records, and
on a run directory copied from elsewhere. Nothing here imports Flask or Locust.

Definitions (the report's, computed over what has arrived so far):

* a request belongs to the steady window of its step when it was sent at or after the step's
  warm-up end and before the step's end;
* aggregate tok/s: output tokens of the window's successful requests / the window's length so far
  (during warm-up: every request of the step / time since the step started);
* per-request tok/s: output tokens / E2E (intended send to end), the report's definition
  (``loadgen.analysis.values.per_request_tok_s``);
* TTFT: first chunk - intended send; ITL: a request's mean gap between output chunks.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import orjson

from loadgen.analysis.contracts import KneeRule, KneeVerdict, LoadAxis, RunSummary
from loadgen.analysis.values import as_dict, per_request_tok_s

SERIES_POINTS = 1800  # points kept per time series (30 min at one a second)
KNEE_EVERY_S = 10.0


class JsonlTail:
    """One JSONL file read from where the last read stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self._partial = b""

    def read(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        if not data:
            return []
        self.offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        out: list[dict[str, Any]] = []
        for line in lines:
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


def mean_itl_ms(rec: dict[str, Any]) -> float | None:
    offs = rec.get("chunk_offsets_ns") or []
    if len(offs) < 2:
        return None
    return float((offs[-1] - offs[0]) / (len(offs) - 1) / 1e6)


def chunk_gaps_s(rec: dict[str, Any]) -> list[float]:
    offs = rec.get("chunk_offsets_ns") or []
    return [(b - a) / 1e9 for a, b in itertools.pairwise(offs)]


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default), on a sorted copy."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


class _LiveKneeRequired(TypedDict):
    concurrency: float | None
    rate: float | None
    reason: str | None


class LiveKnee(_LiveKneeRequired, total=False):
    """The knee the tab shows: the verdict's load and reason, or only a reason it has none yet."""

    axis: LoadAxis | None
    rule: KneeRule | None


class LiveStep(TypedDict):
    """One step as the tab draws it, over what has arrived so far (tok/s; latencies in ms)."""

    step: int
    concurrency: int | None
    rate: float | None
    context_tokens: int | None
    phase: str  # "warm-up", "steady" or "ended"
    window_s: float
    ok: int
    failed: int
    window_requests: int
    tok_s: float
    req_tok_s: float | None
    ttft_p50: float | None
    ttft_p90: float | None
    ttft_p99: float | None
    itl_p50: float | None
    itl_p90: float | None
    itl_p99: float | None
    errors: dict[str, int]


@dataclass(slots=True)
class _Req:
    sent_ns: int
    ok: bool
    tokens: int
    ttft_ms: float | None
    itl_ms: float | None
    tok_s: float | None


@dataclass
class StepLive:
    index: int
    concurrency: int | None = None
    rate: float | None = None
    context_tokens: int | None = None
    start_ns: int | None = None
    steady_ns: int | None = None
    end_ns: int | None = None
    reason: str | None = None
    requests: list[_Req] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    def in_window(self, r: _Req) -> bool:
        if self.steady_ns is None or r.sent_ns < self.steady_ns:
            return False
        return self.end_ns is None or r.sent_ns < self.end_ns

    def row(self, now_ns: int) -> LiveStep:
        steady = self.steady_ns is not None and now_ns >= self.steady_ns
        if self.end_ns is not None:
            phase = "ended"
        elif steady:
            phase = "steady"
        else:
            phase = "warm-up"
        if steady:
            reqs = [r for r in self.requests if self.in_window(r)]
            t0 = self.steady_ns or 0
        else:
            reqs = self.requests
            t0 = self.start_ns or now_ns
        t1 = self.end_ns if self.end_ns is not None else now_ns
        span_s = max((t1 - t0) / 1e9, 1e-9)
        ok = [r for r in reqs if r.ok]
        ttft = [r.ttft_ms for r in ok if r.ttft_ms is not None]
        itl = [r.itl_ms for r in ok if r.itl_ms is not None]
        tok_s = [r.tok_s for r in ok if r.tok_s is not None]
        return {
            "step": self.index,
            "concurrency": self.concurrency,
            "rate": self.rate,
            "context_tokens": self.context_tokens,
            "phase": phase,
            "window_s": round(span_s, 3),
            "ok": sum(1 for r in self.requests if r.ok),
            "failed": sum(1 for r in self.requests if not r.ok),
            "window_requests": len(reqs),
            "tok_s": sum(r.tokens for r in ok) / span_s if ok else 0.0,
            "req_tok_s": sum(tok_s) / len(tok_s) if tok_s else None,
            "ttft_p50": percentile(ttft, 50),
            "ttft_p90": percentile(ttft, 90),
            "ttft_p99": percentile(ttft, 99),
            "itl_p50": percentile(itl, 50),
            "itl_p90": percentile(itl, 90),
            "itl_p99": percentile(itl, 99),
            "errors": dict(self.errors),
        }


class LiveRun:
    """The live state of one run directory; ``payload()`` is what the LLM tab draws."""

    def __init__(
        self,
        run_dir: Path,
        now_ns: Callable[[], int] = time.time_ns,
        knee: Callable[[Path], LiveKnee | None] | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.now_ns = now_ns
        self.steps: dict[int, StepLive] = {}
        self.power: dict[str, deque[tuple[float, float]]] = {}
        self.kv: deque[tuple[float, float]] = deque(maxlen=SERIES_POINTS)
        self.t0_ns: int | None = None
        self._step_tail = JsonlTail(self.run_dir / "steps.jsonl")
        self._sample_tail = JsonlTail(self.run_dir / "samples.jsonl")
        self._records = RecordTail(self.run_dir)
        self._knee_fn = knee if knee is not None else knee_from_run_dir
        self._knee: LiveKnee | None = None
        self._knee_at = 0.0
        self._knee_seen = -1

    # -- reading ------------------------------------------------------------------------------
    def poll(self) -> None:
        for ev in self._step_tail.read():
            self._step_event(ev)
        for rec in self._records.read():
            self._record(rec)
        for s in self._sample_tail.read():
            self._sample(s)

    def _step(self, index: int) -> StepLive:
        if index not in self.steps:
            self.steps[index] = StepLive(index)
        return self.steps[index]

    def _step_event(self, ev: dict[str, Any]) -> None:
        index = ev.get("step")
        t = ev.get("t_ns")
        if not isinstance(index, int) or not isinstance(t, int):
            return
        st = self._step(index)
        kind = ev.get("event")
        if kind == "start":
            st.start_ns = t
            st.concurrency = ev.get("concurrency")
            st.rate = ev.get("rate")
            st.context_tokens = ev.get("context_tokens")
            if self.t0_ns is None:
                self.t0_ns = t
        elif kind == "steady":
            st.steady_ns = t
        elif kind == "end":
            st.end_ns = t
            st.reason = ev.get("reason")

    def _record(self, rec: dict[str, Any]) -> None:
        try:
            st = self._step(int(rec["step"]))
            ok = rec.get("error_class") is None
            req = _Req(
                sent_ns=int(rec["sent_ns"]),
                ok=ok,
                tokens=int(rec.get("output_tokens") or 0) if ok else 0,
                ttft_ms=ttft_ms(rec) if ok else None,
                itl_ms=mean_itl_ms(rec) if ok else None,
                tok_s=per_request_tok_s(rec.get("output_tokens") or 0, rec["end_ns"] - rec["intended_ns"])
                if ok
                else None,
            )
        except (KeyError, TypeError, ValueError):
            return
        st.requests.append(req)
        if not ok:
            cls = str(rec.get("error_class"))
            st.errors[cls] = st.errors.get(cls, 0) + 1

    def _sample(self, s: dict[str, Any]) -> None:
        t = s.get("t_ns")
        if not isinstance(t, int):
            return
        if s.get("src") == "gpu" and s.get("power_w") is not None:
            key = f"gpu{s.get('gpu', 0)}"
            series = self.power.setdefault(key, deque(maxlen=SERIES_POINTS))
            _append_thinned(series, t / 1e9, float(s["power_w"]))
        elif s.get("src") == "server" and s.get("kv_usage") is not None:
            _append_thinned(self.kv, t / 1e9, float(s["kv_usage"]))

    # -- the knee -------------------------------------------------------------------------------
    def knee(self) -> LiveKnee | None:
        """The current verdict, recomputed when a step ended since the last time, at most every
        ``KNEE_EVERY_S`` seconds (it reads the whole run directory)."""
        final = self._final_knee()
        if final is not None:
            return final
        ended = sum(1 for s in self.steps.values() if s.end_ns is not None)
        now = time.monotonic()
        if ended != self._knee_seen and (now - self._knee_at >= KNEE_EVERY_S or self._knee is None):
            self._knee_seen = ended
            self._knee_at = now
            self._knee = self._knee_fn(self.run_dir) if ended else None
        return self._knee

    def _final_knee(self) -> LiveKnee | None:
        """The written report's verdict once the run has finished (summary.json after the last step)."""
        path = self.run_dir / "summary.json"
        if not self.steps or any(s.end_ns is None for s in self.steps.values()):
            return None
        try:
            mtime_ns = path.stat().st_mtime_ns
        except FileNotFoundError:
            return None
        last_end = max(s.end_ns or 0 for s in self.steps.values())
        if mtime_ns < last_end:
            return None  # a summary from before the last step: the knee is recomputed instead
        try:
            summary: RunSummary = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        return _knee_fields(as_dict(summary.get("knee")))

    # -- output ---------------------------------------------------------------------------------
    def payload(self) -> dict[str, Any]:
        self.poll()
        now = self.now_ns()
        t0 = (self.t0_ns or now) / 1e9
        rows = [self.steps[i].row(now) for i in sorted(self.steps) if self.steps[i].start_ns is not None]
        errors: dict[str, int] = {}
        for st in self.steps.values():
            for k, v in st.errors.items():
                errors[k] = errors.get(k, 0) + v
        current = rows[-1] if rows else None
        reports = {name: f"run/{name}" for name in REPORT_FILES if (self.run_dir / name).exists()}
        return {
            "run_id": self.run_dir.name,
            "elapsed_s": round(now / 1e9 - t0, 3) if self.t0_ns is not None else 0.0,
            "current": current,
            "steps": rows,
            "errors": errors,
            "power": {k: [[round(t - t0, 2), round(v, 1)] for t, v in pts] for k, pts in sorted(self.power.items())},
            "kv": [[round(t - t0, 2), round(v, 4)] for t, v in self.kv],
            "knee": self.knee(),
            "reports": reports,
        }


REPORT_FILES = ("report.html", "report.md", "summary.json", "steps.csv")


def _append_thinned(series: deque[tuple[float, float]], t: float, v: float) -> None:
    """Keep at most one point a second: a new point within a second of the last replaces it."""
    if series and t - series[-1][0] < 1.0:
        if t >= series[-1][0]:
            series[-1] = (series[-1][0], v)
        return
    series.append((t, v))


def knee_from_run_dir(run_dir: Path) -> LiveKnee | None:
    """The knee verdict of the run so far (as the report will compute it), or a reason it has none."""
    from loadgen.report.pipeline import summarise

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
