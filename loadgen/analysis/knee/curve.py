"""What the knee detectors, the verdict and the search share: the options, a detector's
:class:`Finding`, the :class:`Curve` of one context length, and how loads and gains are written.

A step is a summary step dict (see ``loadgen report``); every value is read through
:mod:`loadgen.analysis.values`, so a missing or malformed figure reads as None, never raises.
Loads are concurrencies (closed loop) or request rates in req/s (open loop), per ``axis``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loadgen.analysis.contracts import DetectorFinding
from loadgen.analysis.values import load_axis, number, stat

Step = Mapping[str, Any]


@dataclass(frozen=True)
class KneeOptions:
    """Thresholds of the detectors; the defaults are the documented ones."""

    sensitivity: float = 1.0  # Kneedle S
    # a doubling of the load that buys less than this much throughput is past the knee (10 %: the
    # story's server still gains +18..24 % from C=64 to C=128, and its engineer rightly pushed on)
    min_gain_per_doubling: float = 0.10
    max_error_frac: float = 0.01
    kv_full_frac: float = 0.95
    queue_threshold: float = 1.0
    power_flat_per_doubling: float = 0.05
    usl_min_r2: float = 0.9


@dataclass
class Finding:
    """One detector's answer.

    ``load`` is the detector's own point (the onset step for signals, the knee for curve
    detectors); ``knee`` is the knee it proposes to the verdict (the last good load), or None.
    """

    name: str
    triggered: bool
    load: float | None
    knee: float | None
    evidence: str
    phrase: str = ""  # short clause for the verdict's sentence; "" when not triggered
    has_data: bool = True
    numbers: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, axis: str = "concurrency") -> DetectorFinding:
        load = as_number(self.load)
        return {
            "name": self.name,
            "triggered": self.triggered,
            "load": load,
            "knee": as_number(self.knee),
            "evidence": self.evidence,
            "phrase": self.phrase,
            "has_data": self.has_data,
            "numbers": dict(self.numbers),
            "concurrency": load if axis == "concurrency" else None,
            "rate": load if axis == "rate" else None,
        }


def as_number(v: float | None) -> float | int | None:
    """Whole numbers as int (C=128, not 128.0) for JSON; fractions unchanged; None, nan, inf -> None."""
    if v is None or not math.isfinite(v):
        return None
    return int(v) if float(v).is_integer() else v


def no_data(name: str, why: str) -> Finding:
    """A detector's answer when its input is missing: not triggered, evidence "no data: <why>"."""
    return Finding(name, False, None, None, f"no data: {why}", has_data=False)


# ---------------------------------------------------------------------------------------------- SLOs

# --------------------------------------------------------------------------------------------- steps


def fmt_load(load: float | None, axis: str) -> str:
    """``C=64`` or ``rate=2.5 req/s``; ``none`` for None."""
    if load is None:
        return "none"
    text = f"{load:g}" if load != int(load) else str(int(load))
    return f"C={text}" if axis == "concurrency" else f"rate={text} req/s"


def pct(frac: float) -> str:
    """A relative change as a signed percentage: 0.24 -> ``+24%``."""
    return f"{frac * 100:+.0f}%"


@dataclass(frozen=True)
class Curve:
    """Valid steps of one context length, sorted by load (one step per load: the last measured)."""

    axis: str
    loads: list[float]
    steps: list[Step]

    def where(self, load: float) -> str:
        return fmt_load(load, self.axis)

    def before(self, i: int) -> float | None:
        return self.loads[i - 1] if i > 0 else None


def make_curve(steps: Sequence[Step], axis: str | None = None) -> Curve:
    """The valid steps on ``axis`` (default: the steps' own load axis); a later step replaces an
    earlier one at the same load."""
    axis = axis or load_axis(steps)
    by_load: dict[float, Step] = {}
    for s in steps:
        load = number(s.get(axis))
        if load is not None and s.get("valid", True) is not False:
            by_load[load] = s
    loads = sorted(by_load)
    return Curve(axis, loads, [by_load[x] for x in loads])


def series(curve: Curve, key: str, sub: str | None = None) -> list[tuple[int, float]]:
    """(index into the curve, value) of every step that has ``step[key]`` (or ``[key][sub]``)."""
    out = []
    for i, s in enumerate(curve.steps):
        v = stat(s, key, sub) if sub else number(s.get(key))
        if v is not None:
            out.append((i, v))
    return out


def failed_frac(step: Step) -> float | None:
    """Failed / (ok + failed) requests of a step; None when it counted none."""
    ok = number(step.get("requests_ok")) or 0.0
    failed = number(step.get("requests_failed")) or 0.0
    return failed / (ok + failed) if ok + failed > 0 else None


def gain_per_doubling(x1: float, x2: float, l1: float, l2: float) -> float:
    """Relative gain of x per doubling of load from (l1, x1) to (l2, x2): (x2/x1) ** (1/log2(l2/l1)) - 1.

    Needs x1 > 0, x2 >= 0 and l2 > l1 > 0."""
    return float((x2 / x1) ** (1.0 / math.log2(l2 / l1)) - 1.0)
