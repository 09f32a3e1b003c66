"""Analysis of run directories: the only reader of them (load, steps, summary; knee, USL, plan).

``load_run`` reads a run directory into columns (``columns``) and a run model (``load``);
``build_summary`` turns it into the ``RunSummary`` of ``contracts`` (summary.json) that
``loadgen.report`` renders.
"""

from __future__ import annotations

from loadgen.analysis.load import Run, RunLoadError, Step, load_run
from loadgen.analysis.steps import mark_invalid
from loadgen.analysis.summary import StepEnricher, build_summary

__all__ = ["Run", "RunLoadError", "Step", "StepEnricher", "build_summary", "load_run", "mark_invalid"]
