"""Live view of a run directory while it grows: the report's per-step figures over what has arrived.

Each poll reads only the bytes appended since the last one to ``steps.jsonl``, ``requests*.jsonl``,
``samples.jsonl``, ``events.jsonl`` and ``client-*.jsonl`` (a half-written last line waits for the
next poll), so it works the same in a single process, on a Locust master that receives its
workers' records, and on a run directory copied from elsewhere. Nothing here imports Flask or Locust.

One definition of each figure: the step rows are the analysis's own (``analysis.steps.StepAnalysis
.row``, then the report's enrichers: telemetry join, client load with its INVALID and "timing
uncertain" verdicts, server down), the Pareto points ``analysis.pareto.pareto_summary`` of those
rows. Incrementally: request lines are parsed into columns once, block by block, as
``analysis.columns_load`` parses a whole file; a step's row is recomputed only when records that it
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

The files are read by ``tail`` (request records, block by block into columns) and ``livetelemetry``
(samples, events and the processes' own load, with the charts' time series); the payload's shape
is ``livejson``'s.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from loadgen.analysis.client_load import client_load_enricher
from loadgen.analysis.columns import Requests
from loadgen.analysis.columns_parse import parse_request_block
from loadgen.analysis.contracts import RunSummary, StepSummary
from loadgen.analysis.knee import knee_verdict
from loadgen.analysis.load import Run, Step, fold_steps
from loadgen.analysis.pareto import pareto_summary
from loadgen.analysis.repeats import add_repeats
from loadgen.analysis.server_down import server_down_enricher
from loadgen.analysis.steps import DEFAULT_MIN_OK_REQUESTS, StepAnalysis, failure_class_names, ok_mask
from loadgen.analysis.summary import manifest_value
from loadgen.analysis.telemetry import telemetry_enricher
from loadgen.analysis.tenants import add_tenants
from loadgen.analysis.values import as_dict, steps_of
from loadgen.analysis.worker_loss import worker_loss_enricher
from loadgen.rundir.layout import read_manifest
from loadgen.webui.livejson import REPORT_FILES, LiveKnee, knee_fields, live_step, pareto_payload, step_phase
from loadgen.webui.livetelemetry import LiveTelemetry
from loadgen.webui.tail import JsonlTail, RecordBlocks

KNEE_EVERY_S = 10.0
ERROR_SAMPLES = 3  # distinct messages kept per error class
TELEMETRY_MARGIN_NS = 20_000_000_000  # samples joined to a step: its window and 20 s either side
SETTLE_NS = 120_000_000_000  # a step ended this long ago gets no more records or samples (memory is freed)
FORGET_EVERY_NS = 60_000_000_000  # free memory once its horizon moved on by this much


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
        self.records = RecordBlocks(self.run_dir)
        self.telemetry = LiveTelemetry(self.run_dir)
        self._cache: dict[int, _StepCache] = {}
        self._empty, _ = parse_request_block(b"", self.run_dir / "requests.jsonl")
        # whole steps so far (warm-up included), by step: [ok, failed]
        self.step_counts: dict[int, list[int]] = {}
        # every record of the run so far, warm-ups included: summary.json's totals, counted as it counts
        self.requests_ok = 0
        self.requests_failed = 0
        self.errors: dict[str, int] = {}
        self.error_samples: dict[str, list[str]] = {}
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
        self.telemetry.read()
        if self.t0_ns is None:  # the first sample read starts the clock unless a step did (live_steps)
            self.t0_ns = self.telemetry.first_sample_ns

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
        add_tenants(run, [row])  # a [[tenants]] run: each tenant's figures, as the report has them
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
        tel = self.telemetry
        seen = (tel.latest_sample_ns, tel.latest_client_ns, len(tel.events))
        cached = self._enrich_cache.get(step.step)
        if cached is not None and cached[0] is core and (cached[1] == seen or cached[3]):
            return cached[2]
        row = copy.deepcopy(core)
        lo = min(a, step.start_ns) - TELEMETRY_MARGIN_NS
        run = Run(self.run_dir, self.manifest, [step], self._empty, tel.samples_between(lo, hi), tel.events, [])
        telemetry_enricher(run, [row])
        clients = [r for r in tel.client_rows() if a <= r["t_ns"] <= b]
        client_load_enricher(run, [row], client_rows=clients)
        server_down_enricher(run, [row])
        worker_loss_enricher(run, [row])
        # every stream that has data is past the stretch: later lines do not change this row
        settled = all(latest > hi for latest in seen[:2] if latest)
        self._enrich_cache[step.step] = (core, seen, row, settled)
        return row

    def _forget(self, steps: Sequence[Step], now: int) -> None:
        """Bound memory on a long run: drop the samples and the request columns that only steps
        ended more than ``SETTLE_NS`` ago read (their rows are kept; a late record that changes one
        reads them back from the files)."""
        open_starts = [s.start_ns for s in steps if s.end_reason is None or s.end_ns > now - SETTLE_NS]
        horizon = min(open_starts, default=now - SETTLE_NS) - TELEMETRY_MARGIN_NS
        if horizon - self.telemetry.samples_from_ns < FORGET_EVERY_NS:
            return
        self.telemetry.forget_before(horizon)
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
                    self._knee = knee_fields(knee_verdict(judged, slo))
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
            knee: LiveKnee | None = knee_fields(as_dict(summary.get("knee")))
        else:
            rows = self.rows(steps)
            pareto = pareto_summary(rows, manifest_value(self.manifest, "gpu_count"))
            knee = self.knee(rows, steps)
        self._forget(steps, now)
        phase = {s.step: step_phase(s, now) for s in steps}
        points = {p.get("step"): p for p in pareto.get("points", [])}
        live_rows = []
        for r in rows:
            sid = int(r["step"])
            ok, failed = self.step_counts.get(sid, [0, 0])
            live_rows.append(live_step(r, phase.get(sid, "ended"), ok, failed, dict(points.get(sid) or {})))
        t0 = self.t0_ns if self.t0_ns is not None else now
        reports = {name: f"run/{name}" for name in REPORT_FILES if (self.run_dir / name).exists()}
        return {
            "run_id": self.run_dir.name,
            "source": "report" if summary is not None else "live",
            "elapsed_s": round((now - t0) / 1e9, 3) if self.t0_ns is not None else 0.0,
            "current": live_rows[-1] if live_rows else None,
            "totals": self._totals(summary),
            "steps": live_rows,
            "pareto": pareto_payload(pareto),
            "errors": dict(sorted(self.errors.items(), key=lambda kv: (-kv[1], kv[0]))),
            "error_samples": {k: list(v) for k, v in self.error_samples.items()},
            **self.telemetry.charts(t0, self.worker_requests),
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
