"""report.html: one self-contained page per run, readable by someone who was not there.

Order, for a 1280x800 window first: the knee verdict (with how it weighs its detectors) and the
headline figures, then the step table (every step VALID or INVALID with its reason; grouped columns,
none that the run left empty, so it fits the window's width), all three above the fold; the
detectors side by side; the capacity plan when the summary has one; throughput per GPU against
per-user tok/s (the Pareto plot); the plots (``loadgen.report.plots``, inline SVG); the tables of
the call types, kinds of output, agents, images, goodput and repeats the run used; errors by class
with a sample message each; the server log lines the telemetry captured; the scenario (the options
the run set) and the environment from ``manifest.json``.

The page needs nothing from outside: styles inline, no scripts, no fonts, no network. Every text
that came from a server, a prompt, a log or a manifest is escaped (``svg.esc``). ``write_html``
also writes each plot as ``plots/<slug>.svg`` beside the page.

This module is the page's shell: its inputs, the order of its sections, and the files it writes. The
sections are ``html_verdict`` (the verdict), ``html_steps`` (the step table) and ``html_sections`` (the
plots and everything below them); the stylesheet and the cell formats are ``html_common``.

Inputs: the summary (``summary.json``; any per-step key may be absent or None) and the run
directory, from which ``manifest.json``, ``samples.jsonl`` and ``events.jsonl`` are read (each may
be missing). Pass an already loaded ``Run`` to reuse its lines and to mark failed requests on the
time plots (the request records are not re-read without it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.analysis.contracts import RunSummary
from loadgen.analysis.load import MISSING, Run, RunLoadError
from loadgen.analysis.steps import failure_class_names, ok_mask
from loadgen.report.calltables import tables_of
from loadgen.report.html_common import PAGE_CSS, PLOTS_DIR
from loadgen.report.html_sections import (
    errors_html,
    logs_html,
    pareto_html,
    plots_html,
    scenario_env_html,
    table_html,
)
from loadgen.report.html_steps import steps_table_html
from loadgen.report.html_verdict import (
    detectors_html,
    figures_html,
    header_html,
    plan_html,
    thresholds_html,
    verdict_html,
)
from loadgen.report.plots import build_plots
from loadgen.report.plots_common import Plot
from loadgen.report.plots_time import Failure
from loadgen.report.svg import esc
from loadgen.rundir.layout import read_manifest
from loadgen.rundir.records import read_jsonl
from loadgen.rundir.samples import Sample, samples_of

# ------------------------------------------------------------------------------------ inputs


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    try:
        return [r for r in read_jsonl(path) if isinstance(r, dict)]
    except OSError:
        return []


def _failures(run: Run) -> list[Failure]:
    """Failed requests of a loaded run, by the analysis's rule and names (analysis/steps.py)."""
    req = run.requests
    if req.n == 0:
        return []
    rows = np.flatnonzero(~ok_mask(req))
    if not len(rows):
        return []
    t = req.end_ns[rows]
    t = np.where(t == MISSING, req.sent_ns[rows], t)
    return [
        Failure(int(t_ns), name)
        for t_ns, name in zip(t.tolist(), failure_class_names(req, rows), strict=True)
        if t_ns != MISSING
    ]


def _inputs(run_dir: Path, run: Run | None) -> tuple[dict[str, Any], list[Sample], list[dict[str, Any]], list[Failure]]:
    if run is not None:
        return run.manifest, run.samples, run.events, _failures(run)
    manifest = read_manifest(run_dir)
    return (
        manifest if isinstance(manifest, dict) else {},
        samples_of(_lines(run_dir / "samples.jsonl")),
        _lines(run_dir / "events.jsonl"),
        [],
    )


# ---------------------------------------------------------------------------------------- API


def render_html(run_dir: Path, summary: RunSummary, *, run: Run | None = None) -> str:
    """The report page of a run as one HTML string (inline SVG plots, inline CSS, no scripts).

    ``run_dir``: the run directory (``manifest.json``, ``samples.jsonl``, ``events.jsonl`` are read
    from it unless ``run`` is given; any may be missing).
    """
    manifest, samples, events, failures = _inputs(Path(run_dir), run)
    return _page(summary, manifest, events, build_plots(summary, samples, events, failures))


def _page(
    summary: RunSummary, manifest: dict[str, Any], events: Sequence[dict[str, Any]], plots: Sequence[Plot]
) -> str:
    title = summary.get("label") or summary.get("run_id") or "run"
    version = (
        (manifest.get("versions") or {}).get("llm-loadgen") if isinstance(manifest.get("versions"), dict) else None
    )
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)} · load test report</title>",
        f"<style>{PAGE_CSS}</style></head><body><main>",
        header_html(summary),
        thresholds_html(summary),
        verdict_html(summary),
        figures_html(summary),
        steps_table_html(summary),
        detectors_html(summary),
        plan_html(summary),
        pareto_html(summary, plots),
        plots_html(plots),
        *(table_html(t) for t in tables_of(summary)),
        errors_html(summary),
        logs_html(summary, events),
        scenario_env_html(manifest),
        f"<footer>llm-loadgen {esc(version or '')} · summary schema {esc(summary.get('schema_version', '?'))} · "
        f"plots also in {PLOTS_DIR}/*.svg</footer>",
        "</main></body></html>\n",
    ]
    return "\n".join(parts)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink(missing_ok=True)  # a disk that filled mid-file: leave no half file behind
        except OSError:
            pass  # read-only: nothing was written
        raise


def write_html(run_dir: Path, summary: RunSummary, *, run: Run | None = None) -> list[Path]:
    """Write ``report.html`` and ``plots/<slug>.svg`` (one per plot, no-data panels included)
    into ``run_dir``; returns their paths, the page first.

    Raises RunLoadError (naming the file) when the folder is not writable.
    """
    run_dir = Path(run_dir)
    manifest, samples, events, failures = _inputs(run_dir, run)
    plots = build_plots(summary, samples, events, failures)
    page = _page(summary, manifest, events, plots)
    plot_dir = run_dir / PLOTS_DIR
    paths = [run_dir / "report.html"]
    target = plot_dir
    try:
        plot_dir.mkdir(exist_ok=True)
        target = paths[0]
        _write_atomic(paths[0], page)
        for p in plots:
            target = plot_dir / f"{p.slug}.svg"
            _write_atomic(target, '<?xml version="1.0" encoding="UTF-8"?>\n' + p.svg + "\n")
            paths.append(target)
    except OSError as exc:
        raise RunLoadError(
            f"cannot write {target}: {exc.strerror or exc}; check the run folder's permissions and free space"
        ) from exc
    return paths


__all__ = ["render_html", "write_html"]
