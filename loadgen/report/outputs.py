"""Rebuild a run's rendered outputs (summary.json, steps.csv, report.md) from its directory alone.

Works on what a killed run leaves behind (torn last line, steps without an end line, no summary
yet) and on an empty run (the report says nothing was recorded). Each file is written to a
temporary name and renamed, so a reader never sees half a report.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import orjson

from loadgen.analysis.contracts import RunSummary
from loadgen.analysis.load import Run, RunLoadError, load_run
from loadgen.analysis.steps import DEFAULT_MIN_OK_REQUESTS
from loadgen.analysis.summary import StepEnricher, build_summary
from loadgen.report.markdown import Section, render_markdown
from loadgen.report.tables import steps_csv

OUTPUT_FILES = ("summary.json", "steps.csv", "report.md", "report.html")


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            tmp.unlink(missing_ok=True)  # a disk that filled mid-file: leave no half file behind
        except OSError:
            pass
        raise RunLoadError(
            f"cannot write {path}: {exc.strerror}; check the folder's permissions and free space"
        ) from exc


def summary_json(summary: RunSummary) -> bytes:
    return orjson.dumps(summary, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY, default=str) + b"\n"


def write_run_outputs(
    run: Run, summary: RunSummary, sections: Sequence[Section] = (), lead: Sequence[Section] = ()
) -> list[Path]:
    """Write summary.json, steps.csv, report.md and report.html (with plots/*.svg) of an already
    summarised run; their paths."""
    from loadgen.report.html import write_html

    paths = [run.path / name for name in OUTPUT_FILES[:3]]
    _write_atomic(paths[0], summary_json(summary))
    _write_atomic(paths[1], steps_csv(summary["steps"]).encode())
    _write_atomic(paths[2], render_markdown(summary, sections, lead).encode())
    paths += write_html(run.path, summary, run=run)
    return paths


def write_outputs(
    run_dir: str | os.PathLike[str],
    enrichers: Sequence[StepEnricher] = (),
    *,
    sections: Sequence[Section] = (),
    min_ok_requests: int = DEFAULT_MIN_OK_REQUESTS,
) -> RunSummary:
    """Load ``run_dir``, summarise it (with ``enrichers``), write the outputs, return the summary.

    Raises RunLoadError (message names the path and what to do) when the directory cannot be read
    or written.
    """
    run = load_run(run_dir)
    summary = build_summary(run, enrichers, min_ok_requests=min_ok_requests)
    write_run_outputs(run, summary, sections)
    return summary


__all__ = ["OUTPUT_FILES", "summary_json", "write_outputs", "write_run_outputs"]
