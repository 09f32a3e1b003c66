"""From a run directory to every output: the one place that decides what a report contains.

``loadgen ramp``, ``loadgen demo``, ``loadgen report`` and the Locust wiring all call
``rebuild(run_dir)``, so a report rebuilt after a crash is the same report the run would have
written: per-step statistics, the telemetry join, the knee verdict, the outputs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from loadgen.analysis.telemetry import telemetry_enricher
from loadgen.report import write_outputs


def rebuild(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Summarise ``run_dir`` and write its outputs; return the summary."""
    return write_outputs(Path(run_dir), enrichers=[telemetry_enricher])
