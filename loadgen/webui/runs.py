"""Past runs: the run directories under the UI's output folder, their verdicts, and comparisons.

``list_runs(out)`` reads each directory's ``manifest.json`` and, when the run has a report,
``summary.json`` (what ``loadgen report`` wrote: the knee verdict, the thresholds' verdict, the
steps and their validity). A directory whose report is missing (the run is going on, or it was
killed before writing one) is listed as such, with the command that writes it. Nothing here
computes a figure: the verdict is the report's own text.

``compare(out, run_ids)`` writes ``loadgen compare``'s page for the chosen runs into a new
directory under ``out`` (``report.compare.write_comparison``, the command's own code) and returns it.
Run ids are names of directories directly under ``out``; anything else is refused, so the page
cannot make the server read or write elsewhere.
"""

from __future__ import annotations

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


def list_runs(out: Path, current: Path | None = None) -> list[dict[str, Any]]:
    """Every run directory directly under ``out`` (newest first). ``current``: the run going on now."""
    rows: list[dict[str, Any]] = []
    if not out.is_dir():
        return rows
    for d in out.iterdir():
        manifest = _read_json(d / "manifest.json") if d.is_dir() else None
        if manifest is None:
            continue
        summary = _read_json(d / "summary.json")
        running = current is not None and d.resolve() == current.resolve()
        rows.append(
            {
                "id": d.name,
                "label": manifest.get("label") or "",
                "kind": manifest.get("kind") or "",
                "created": (summary or {}).get("created") or manifest.get("created") or "",
                "status": "running" if running else ("reported" if summary is not None else "no report"),
                "hint": "" if summary is not None or running else f"loadgen report {d}",
                "url": (manifest.get("options") or {}).get("url") or "",
                "model": (manifest.get("options") or {}).get("model") or "",
                "verdict": _verdict(summary) if summary is not None else None,
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
