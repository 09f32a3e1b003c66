"""Rendered outputs of a run: summary.json, steps.csv, report.md (report.html and comparisons too)."""

from __future__ import annotations

from loadgen.report.outputs import OUTPUT_FILES, write_outputs, write_run_outputs

__all__ = ["OUTPUT_FILES", "write_outputs", "write_run_outputs"]
