"""Workloads: prompt corpora, datasets and traces, length distributions, arrival processes.

``from loadgen.workload import Workload`` is the entry point (see :mod:`loadgen.workload.traffic`);
it is imported lazily so that :mod:`loadgen.scenario` can use the submodules without a cycle.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Session", "TraceReplay", "Workload"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from loadgen.workload import traffic

        return getattr(traffic, name)
    raise AttributeError(f"module 'loadgen.workload' has no attribute {name!r}")
