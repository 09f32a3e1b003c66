"""The report's plots, in reading order: what report.html shows and writes as ``plots/<slug>.svg``.

The Pareto plot first (``plots_pareto``), then the load plots (``plots_load``: throughput with the
USL curve and the knee, per-request speed, TTFT, TPOT, E2E, tokens per joule) and the time plots
(``plots_time``: GPU power in total and per GPU, KV-cache fill, the server's queue). Every slug in
``PLOT_SLUGS`` is always present: a plot whose input was not measured is a "no data: <why>" panel.
The comparison's overlays are ``plots_overlay``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loadgen.analysis.contracts import RunSummary
from loadgen.report.plots_common import Plot
from loadgen.report.plots_load import latency_plots, per_request_plot, throughput_plot, tokens_per_joule_plot
from loadgen.report.plots_pareto import pareto_plot
from loadgen.report.plots_time import Failure, power_plots, server_plots
from loadgen.rundir.samples import Sample


def build_plots(
    summary: RunSummary,
    samples: Sequence[Sample] = (),
    events: Sequence[dict[str, Any]] = (),
    failures: Sequence[Failure] = (),
) -> list[Plot]:
    """Every plot of the report, in reading order; a plot without data is a no-data panel."""
    return [
        pareto_plot(summary),
        throughput_plot(summary),
        per_request_plot(summary),
        *latency_plots(summary),
        tokens_per_joule_plot(summary),
        *power_plots(summary, samples, events, failures),
        *server_plots(summary, samples, events, failures),
    ]


PLOT_SLUGS = (
    "pareto",
    "throughput",
    "per_request",
    "ttft",
    "tpot",
    "e2e",
    "tokens_per_joule",
    "power_total",
    "power_per_gpu",
    "kv_cache",
    "queue",
)


__all__ = ["PLOT_SLUGS", "build_plots"]
