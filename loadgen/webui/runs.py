"""Past runs: the run directories under the UI's output folder, their verdicts, and comparisons.

``list_runs(out)`` reads each directory's ``manifest.json`` and, when the run has a report,
``summary.json`` (what ``loadgen report`` wrote: the knee verdict, the thresholds' verdict, the
steps and their validity, the request counts). A directory whose report is missing (the run is
going on, or it was killed before writing one) is listed as such, with the command that writes
it; a run is "running" only until its report is written. The comparisons written there are
listed too. Nothing here computes a figure: the verdict and counts are the report's own.

``compare(out, run_ids)`` writes ``loadgen compare``'s page for the chosen runs into a new
directory under ``out`` (``report.compare.write_comparison``, the command's own code) and returns it.
Run ids are names of directories directly under ``out``; anything else is refused, so the page
cannot make the server read or write elsewhere.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson

REPORT_FILES = ("report.html", "report.md", "summary.json", "twin.md", "compare.html")


class RunListError(ValueError):
    """A request for runs that are not there (the message names them)."""


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _verdict(summary: dict[str, Any]) -> dict[str, Any]:
    knee = summary.get("knee") or {}
    steps = summary.get("steps") or []
    valid = sum(1 for s in steps if s.get("valid", True))
    loads = [s.get("concurrency") if s.get("rate") is None else s.get("rate") for s in steps]
    peak = max((float(s.get("output_tok_s") or 0.0) for s in steps if s.get("valid", True)), default=None)
    thresholds = summary.get("thresholds") or None
    return {
        "knee": knee.get("knee"),
        "axis": knee.get("axis"),
        "rule": knee.get("rule"),
        "text": knee.get("reason") or "",
        "steps": len(steps),
        "valid_steps": valid,
        "loads": loads,
        "peak_tok_s": peak,
        "thresholds": None
        if thresholds is None
        else {
            "verdict": thresholds.get("verdict"),
            "breached": thresholds.get("breached", 0),
            "aborted_by": thresholds.get("aborted_by"),
        },
    }


def _counts(summary: dict[str, Any]) -> dict[str, int]:
    """The run's request counts as summary.json's totals give them (the report's cards, the live page)."""
    totals = summary.get("totals") or {}
    errors = totals.get("errors") or {}
    return {
        "requests_ok": int(totals.get("requests_ok") or 0),
        "requests_failed": int(totals.get("requests_failed") or 0),
        "requests_cancelled": int(errors.get("cancelled") or 0),
    }


def _comparison(d: Path) -> dict[str, Any] | None:
    """A directory ``loadgen compare`` (or Compare selected) wrote: a row of its own."""
    if not (d / "compare.html").is_file():
        return None
    cmp = _read_json(d / "compare.json") or {}
    labels = [str(x) for x in (cmp.get("labels") or [])]
    mtime = d.stat().st_mtime
    return {
        "id": d.name,
        "label": " vs ".join(labels),
        "kind": "comparison",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mtime)),
        "status": "comparison",
        "hint": "",
        "why_not": "a comparison, not a run",
        "url": "",
        "model": "",
        "verdict": None,
        "counts": None,
        "files": [f for f in ("compare.html", "compare.md", "compare.json") if (d / f).is_file()],
        "mtime": mtime,
    }


def list_runs(out: Path, current: Path | None = None) -> list[dict[str, Any]]:
    """Every run directory directly under ``out``, and every comparison written there (newest first).
    ``current``: the run going on now (None once its report is written: it can be compared then)."""
    rows: list[dict[str, Any]] = []
    if not out.is_dir():
        return rows
    for d in out.iterdir():
        if not d.is_dir():
            continue
        manifest = _read_json(d / "manifest.json")
        if manifest is None:
            cmp = _comparison(d)
            if cmp is not None:
                rows.append(cmp)
            continue
        summary = _read_json(d / "summary.json")
        running = current is not None and d.resolve() == current.resolve()
        status = "running" if running else ("reported" if summary is not None else "no report")
        why_not = {
            "running": "still running: it can be compared once its report is written",
            "no report": f"no report yet: run loadgen report {d}",
        }.get(status, "")
        rows.append(
            {
                "id": d.name,
                "label": manifest.get("label") or "",
                "kind": manifest.get("kind") or "",
                "created": (summary or {}).get("created") or manifest.get("created") or "",
                "status": status,
                "hint": "" if summary is not None or running else f"loadgen report {d}",
                "why_not": why_not,
                "url": (manifest.get("options") or {}).get("url") or "",
                "model": (manifest.get("options") or {}).get("model") or "",
                "verdict": _verdict(summary) if summary is not None else None,
                "counts": _counts(summary) if summary is not None else None,
                "files": [f for f in REPORT_FILES if (d / f).is_file()],
                "mtime": d.stat().st_mtime,
            }
        )
    rows.sort(key=lambda r: (r["mtime"], r["id"]), reverse=True)
    return rows


def run_path(out: Path, run_id: str) -> Path:
    """``out/run_id`` when ``run_id`` names a directory directly under ``out`` (a run, a comparison);
    RunListError else."""
    if not run_id or "/" in run_id or "\\" in run_id or run_id in (".", ".."):
        raise RunListError(f"{run_id!r} is not a run id (a directory name under {out})")
    d = out / run_id
    if not d.is_dir():
        raise RunListError(f"no run {run_id!r} under {out}")
    return d


def compare(out: Path, run_ids: list[str]) -> Path:
    """``loadgen compare`` of these runs into a new directory under ``out``; returns it."""
    from loadgen.report.compare import write_comparison

    if len(run_ids) < 2:
        raise RunListError("choose two runs or more to compare")
    missing = [r for r in run_ids if not (out / r / "summary.json").is_file()] if out.is_dir() else run_ids
    dirs = [run_path(out, r) for r in run_ids]
    if missing:
        raise RunListError(f"no report yet for {', '.join(missing)}: run loadgen report on it first")
    return write_comparison(dirs, str(out))[0]
