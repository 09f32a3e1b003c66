"""Load a run directory: ``load_run(path)`` returns a :class:`Run`.

A Run is the manifest, one :class:`Step` per step id folded from ``steps.jsonl``, every request
record of every ``requests*.jsonl`` file as numpy columns (:class:`Requests`, parsed by
:mod:`loadgen.analysis.columns_load`), and the raw telemetry ``samples.jsonl`` / ``events.jsonl`` lines.

Robust to a killed load generator: a torn last line (or any line that is not a JSON object) is
skipped and counted in ``Run.skipped_lines``; a step without an ``end`` line ends at the last end
time of its records (or at the next step's start); a step without a ``steady`` line becomes steady
``warmup_s`` after its start; a missing ``steps.jsonl`` gives one step per step id seen in records.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.analysis.columns import (
    MISSING,
    TIMING_TOLERANCE_NS,
    Categorical,
    Requests,
    RunLoadError,
)
from loadgen.analysis.columns_load import load_requests
from loadgen.rundir.layout import read_manifest
from loadgen.rundir.records import read_jsonl
from loadgen.rundir.samples import Sample, samples_of


@dataclass(slots=True)
class Step:
    """One step of the load shape, folded from its ``start``/``steady``/``end`` lines.

    ``end_reason`` is None when the step has no ``end`` line (the run was killed): then ``end_ns``
    is the last end time of the step's records. ``steady_logged`` is False when the ``steady``
    line is missing and ``steady_ns`` was derived as ``start_ns + warmup_s``. ``fields`` keeps every
    other key of the step's lines (e.g. ``duration_s``, or client CPU use written at the end).
    """

    step: int
    concurrency: int | None
    context_tokens: int | None
    rate: float | None
    warmup_s: float | None
    start_ns: int
    steady_ns: int
    end_ns: int
    end_reason: str | None
    steady_logged: bool = True
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Run:
    """Everything a run directory holds, as loaded by :func:`load_run`."""

    path: Path
    manifest: dict[str, Any]
    steps: list[Step]
    requests: Requests
    samples: list[Sample]
    events: list[dict[str, Any]]
    request_files: list[Path]
    skipped_lines: int = 0

    @property
    def run_id(self) -> str:
        rid = self.manifest.get("run_id")
        return str(rid) if rid else self.path.name


# ---------------------------------------------------------------------------------------------
# steps.jsonl


def _opt_int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _opt_float(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def fold_steps(lines: Sequence[dict[str, Any]], requests: Requests) -> list[Step]:
    """Fold step transition lines into one Step per step id (ordered by start time).

    The first ``start`` and the last ``steady``/``end`` of a step id count. Missing ``end``: the
    step ends at the next step's start if there is one, else at the last ``end_ns`` of its records
    (else it has zero length). Missing ``steady``: ``start_ns + warmup_s`` (0 when unknown).
    Missing ``start`` (only ``steady``/``end`` lines survive): the step starts at its first line.
    Records whose step has no line at all get a step spanning their send and end times.
    """
    by_step = _step_entries(lines)
    last_end = _add_record_steps(by_step, requests)
    for entry in by_step.values():
        if "start" not in entry:
            entry["start"] = min(entry.get("steady", entry.get("end", 0)), entry.get("end", 1 << 62))
    ordered = sorted(by_step.items(), key=lambda kv: (kv[1]["start"], kv[0]))
    steps: list[Step] = []
    for k, (sid, entry) in enumerate(ordered):
        start = int(entry["start"])
        if "end" in entry:
            end = int(entry["end"])
        elif k + 1 < len(ordered):
            end = int(ordered[k + 1][1]["start"])
        else:
            end = max(last_end.get(sid, start), start)
        steps.append(_step(sid, entry, start, end))
    return steps


def _step_entries(lines: Sequence[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Step id -> its ``start``/``steady``/``end`` times (those it has a line for) and ``fields``,
    every other key of its lines (a later line's value wins)."""
    by_step: dict[int, dict[str, Any]] = {}
    for line in lines:
        sid = _opt_int(line.get("step"))
        t = _opt_int(line.get("t_ns"))
        event = line.get("event")
        if sid is None or t is None or event not in ("start", "steady", "end"):
            continue
        entry = by_step.setdefault(sid, {"fields": {}})
        extra = {k: v for k, v in line.items() if k not in ("step", "event", "t_ns")}
        if event == "start":
            if "start" in entry:
                continue
            entry["start"] = t
        else:
            entry[event] = t
        entry["fields"].update(extra)
    return by_step


def _add_record_steps(by_step: dict[int, dict[str, Any]], requests: Requests) -> dict[int, int]:
    """Add an entry spanning their records for the step ids that records have and no line does;
    return the last ``end_ns`` of each step id's records."""
    req_steps = requests.step
    last_end: dict[int, int] = {}
    first_sent: dict[int, int] = {}
    if requests.n:
        order = np.argsort(req_steps, kind="stable")
        sorted_steps = req_steps[order]
        uniq, first_idx = np.unique(sorted_steps, return_index=True)
        ends = np.maximum.reduceat(requests.end_ns[order], first_idx)
        sents = np.minimum.reduceat(requests.sent_ns[order], first_idx)
        for s, e, t in zip(uniq.tolist(), ends.tolist(), sents.tolist(), strict=True):
            last_end[s] = e
            first_sent[s] = t
        for s in uniq.tolist():
            if s not in by_step and s != MISSING:
                by_step[s] = {
                    "start": first_sent[s],
                    "steady": first_sent[s],
                    "end": last_end[s],
                    "fields": {"reason": "unknown"},
                }
    return last_end


def _step(sid: int, entry: dict[str, Any], start: int, end: int) -> Step:
    """The Step of one entry, given its start and end; without an ``end`` line its ``end_reason`` is
    None, without a ``steady`` line it is steady ``warmup_s`` after its start."""
    f: dict[str, Any] = entry["fields"]
    warmup_s = _opt_float(f.get("warmup_s"))
    steady_logged = "steady" in entry
    steady = int(entry["steady"]) if steady_logged else start + int((warmup_s or 0.0) * 1e9)
    end_reason: str | None = None
    if "end" in entry:
        reason = f.get("reason")
        end_reason = str(reason) if reason is not None else "unknown"
    return Step(
        step=sid,
        concurrency=_opt_int(f.get("concurrency")),
        context_tokens=_opt_int(f.get("context_tokens")),
        rate=_opt_float(f.get("rate")),
        warmup_s=warmup_s,
        start_ns=start,
        steady_ns=steady,
        end_ns=end,
        end_reason=end_reason,
        steady_logged=steady_logged,
        fields={k: v for k, v in f.items() if k not in ("concurrency", "context_tokens", "rate", "warmup_s", "reason")},
    )


# ---------------------------------------------------------------------------------------------


def request_files(path: Path) -> list[Path]:
    """The run's request logs: ``requests.jsonl`` and ``requests-*.jsonl``, in name order."""
    return sorted(p for p in path.glob("requests*.jsonl") if p.is_file())


def _read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    try:
        return [r for r in read_jsonl(path) if isinstance(r, dict)]
    except OSError as exc:
        raise RunLoadError(f"cannot read {path}: {exc.strerror}") from exc


def load_run(path: str | os.PathLike[str], *, workers: int | None = None) -> Run:
    """Read a run directory (see ``loadgen/rundir/layout.py`` for its layout).

    ``workers``: how many processes parse the request files (see :func:`load_requests`; default:
    worker processes for large runs only; 1: none).
    Raises RunLoadError when ``path`` is not a readable run directory or a record has a field of
    the wrong type. Unparsable lines (a torn last line after kill -9) are skipped and counted.
    """
    run_path = Path(path)
    if not run_path.is_dir():
        raise RunLoadError(f"{run_path} is not a directory: pass the run directory printed on the last line of the run")
    files = request_files(run_path)
    has_manifest = (run_path / "manifest.json").is_file()
    has_steps = (run_path / "steps.jsonl").is_file()
    if not (files or has_manifest or has_steps):
        raise RunLoadError(
            f"{run_path} is not a run directory: it has none of manifest.json, steps.jsonl, "
            "requests*.jsonl; pass the folder printed on the last line of the run"
        )
    requests, skipped = load_requests(files, workers)
    step_lines = _read_lines(run_path / "steps.jsonl")
    return Run(
        path=run_path,
        manifest=read_manifest(run_path),
        steps=fold_steps(step_lines, requests),
        requests=requests,
        samples=samples_of(_read_lines(run_path / "samples.jsonl")),
        events=_read_lines(run_path / "events.jsonl"),
        request_files=files,
        skipped_lines=skipped,
    )


__all__ = [
    "MISSING",
    "TIMING_TOLERANCE_NS",
    "Categorical",
    "Requests",
    "Run",
    "RunLoadError",
    "Step",
    "fold_steps",
    "load_run",
    "request_files",
]
