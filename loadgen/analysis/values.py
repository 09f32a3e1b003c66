"""Reading a summary's values: one rule for what counts as a number, a statistic of a step, the
load axis of a run. The analysis, the report, compare and the web UI all read summaries through
these, so a figure one of them shows is the figure the others show.

Summaries may be hand-edited or come from an older version: anything that is not what it should
be reads as missing (None, or an empty dict or list), never as an exception. The types are those of
``analysis.contracts``: a value read under a key the contract does not declare is ``object`` to
mypy, and these helpers do not take it, so a misspelt key is a type error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, cast

import numpy as np

from loadgen.analysis.contracts import AxisLoad, LoadAxis, RunSummary, StepSummary

M = TypeVar("M", bound=Mapping[str, object])
T = TypeVar("T")


def number(v: object) -> float | None:
    """``v`` as a finite float, or None: bools, strings, None, nan and inf are not numbers here,
    numpy scalars are (an enricher may leave np.int64 or np.float64 in the summary)."""
    t = type(v)
    if t is float:
        f = cast(float, v)
        return f if math.isfinite(f) else None
    if t is int:
        return float(cast(int, v))
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        return None
    g = float(v)
    return g if math.isfinite(g) else None


def stat(step: Mapping[str, Any], key: str, part: str) -> float | None:
    """``step[key][part]`` as a number (e.g. ``ttft_ms`` / ``p99``); a bare number under ``key``
    is its ``mean`` (older summaries stored some figures that way)."""
    d = step.get(key)
    if isinstance(d, Mapping):
        return number(d.get(part))
    return number(d) if part == "mean" else None


def as_dict(v: M | None) -> M:
    """``v`` when it is a dict, else an empty one (a hand-edited or older summary.json): read the
    result with ``.get``."""
    return v if isinstance(v, dict) else cast(M, {})


def as_list(v: list[T] | None) -> list[T]:
    return v if isinstance(v, list) else []


def steps_of(summary: RunSummary) -> list[StepSummary]:
    """The summary's step dicts (anything else in the list is skipped)."""
    return [s for s in as_list(summary.get("steps")) if isinstance(s, dict)]


def as_axis(v: object) -> LoadAxis | None:
    """``v`` when it names a load axis, else None."""
    return "concurrency" if v == "concurrency" else "rate" if v == "rate" else None


def at_axis(axis: LoadAxis, load: float) -> AxisLoad:
    """``{axis: load}``, the way a plan or a comparison names a load."""
    return {"concurrency": load} if axis == "concurrency" else {"rate": load}


def load_axis(steps: Sequence[Mapping[str, Any]]) -> LoadAxis:
    """ "concurrency" when every step has one (closed loop), else "rate" when a step has a rate
    (open loop), else "concurrency"."""
    if all(number(s.get("concurrency")) is not None for s in steps):
        return "concurrency"
    return "rate" if any(number(s.get("rate")) is not None for s in steps) else "concurrency"


def summary_axis(summary: RunSummary) -> LoadAxis:
    """The run's load axis: the knee verdict's when it has one, else the steps'."""
    knee = summary.get("knee")
    return (as_axis(knee.get("axis")) if isinstance(knee, Mapping) else None) or load_axis(steps_of(summary))


def per_request_tok_s(output_tokens: float, e2e_ns: float) -> float | None:
    """One request's output speed as the report defines it (analysis/steps.py): output tokens /
    E2E (intended send to end of stream); None without tokens or time."""
    return output_tokens / (e2e_ns / 1e9) if output_tokens > 0 and e2e_ns > 0 else None
