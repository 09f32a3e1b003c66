"""Workloads: what a run sends. Scenario files (``scenario``), prompt corpora, datasets and traces,
length distributions, arrival processes, and the ``Workload`` that turns them into requests.

``from loadgen.workload import Workload`` is the entry point (see :mod:`loadgen.workload.traffic`).
"""

from __future__ import annotations

from loadgen.workload.session import Session
from loadgen.workload.traffic import TraceReplay, Workload

__all__ = ["Session", "TraceReplay", "Workload"]
