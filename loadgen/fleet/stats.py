"""What a fleet's window measured, in memory that does not grow with the requests.

Latencies go into :class:`LogHistogram` (sparse bins 0.5 % wide: a percentile read from it is within
0.25 % of the sample's), so a day of a million requests keeps a few thousand counters per window and
figure, never the samples. A request is counted in the window it *arrived* in (the analysis' rule for a
ramp step: a request belongs to the step it was sent in); output tokens and energy in the window they
were produced in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

GROWTH = 1.005  # bin width: a percentile is read to within half of it
_LOG_GROWTH = math.log(GROWTH)
FLOOR_S = 1e-7  # shorter values share the lowest bin


class LogHistogram:
    """Counts of positive values in logarithmic bins; percentiles to within 0.25 %."""

    __slots__ = ("bins", "count", "total")

    def __init__(self) -> None:
        self.bins: dict[int, int] = {}
        self.count = 0
        self.total = 0.0

    def add(self, value: float) -> None:
        k = int(math.log(value / FLOOR_S) / _LOG_GROWTH) if value > FLOOR_S else 0
        bins = self.bins
        bins[k] = bins.get(k, 0) + 1
        self.count += 1
        self.total += value

    def merge(self, other: LogHistogram) -> None:
        for k, n in other.bins.items():
            self.bins[k] = self.bins.get(k, 0) + n
        self.count += other.count
        self.total += other.total

    def percentile(self, q: float) -> float | None:
        """The ``q``-th percentile (0-100), the middle of its bin; None when empty."""
        if not self.count:
            return None
        rank = q / 100.0 * (self.count - 1)
        seen = 0
        for k in sorted(self.bins):
            seen += self.bins[k]
            if seen > rank:
                return float(FLOOR_S * GROWTH ** (k + 0.5))
        return float(FLOOR_S * GROWTH ** (max(self.bins) + 0.5))

    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def share_at_most(self, limit: float) -> float | None:
        """The share of values at or below ``limit`` (to within a bin)."""
        if not self.count:
            return None
        top = int(math.log(limit / FLOOR_S) / _LOG_GROWTH) if limit > FLOOR_S else 0
        return sum(n for k, n in self.bins.items() if k <= top) / self.count


FIGURES = ("ttft", "tpot", "e2e", "queue")


@dataclass
class Window:
    """One window of the fleet's clock, ``[start_s, end_s)``."""

    start_s: float
    end_s: float
    arrived: int = 0
    finished: int = 0  # of the requests that arrived in it
    failed: int = 0  # of the requests that arrived in it: refused or aborted by the server
    slo_ok: int = 0  # finished within every per-request limit
    good_tokens: int = 0  # output tokens of those
    output_tokens: int = 0  # produced in the window, by any request
    prompt_tokens: int = 0  # of the requests that arrived in it
    cached_tokens: int = 0  # of those prompts, found in a replica's prefix cache
    energy_j: float = 0.0  # all GPUs of all replicas, in the window
    busy_s: float = 0.0  # replica-seconds with a step running
    replica_s: float = 0.0  # replica-seconds serving (active or draining)
    replicas_max: int = 0
    retracted: int = 0
    hist: dict[str, LogHistogram] = field(default_factory=lambda: {f: LogHistogram() for f in FIGURES})

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def row(self, gpus_per_replica: int, price_per_gpu_hour: float | None, slo: dict[str, float]) -> dict[str, Any]:
        """The window's figures (times in ms), as fleet.json and fleet.md carry them."""
        d = self.duration_s
        out: dict[str, Any] = {
            "start_s": self.start_s,
            "end_s": self.end_s,
            "arrived": self.arrived,
            "arrival_rps": self.arrived / d if d > 0 else None,
            "finished": self.finished,
            "failed": self.failed,
            "output_tok_s": self.output_tokens / d if d > 0 else None,
            "replicas": self.replica_s / d if d > 0 else None,
            "replicas_max": self.replicas_max,
            "replicas_busy": self.busy_s / d if d > 0 else None,
            "busy_share": self.busy_s / self.replica_s if self.replica_s > 0 else None,
            "cache_hit_share": self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None,
            "retracted": self.retracted,
            "energy_kwh": self.energy_j / 3.6e6,
            "power_kw": self.energy_j / d / 1e3 if d > 0 else None,
            "gpu_hours": self.replica_s * gpus_per_replica / 3600.0,
        }
        for f in FIGURES:
            h = self.hist[f]
            out[f"{f}_ms"] = {
                "p50": _ms(h.percentile(50)),
                "p90": _ms(h.percentile(90)),
                "p99": _ms(h.percentile(99)),
                "mean": _ms(h.mean()),
            }
        done = self.finished + self.failed
        out["slo_attainment"] = self.slo_ok / done if slo and done else None
        out["goodput_rps"] = self.slo_ok / d if slo and d > 0 else None
        out["goodput_tok_s"] = self.good_tokens / d if slo and d > 0 else None
        out["slo_held"] = holds(out, slo, self.failed) if slo else None
        out["cost_usd"] = out["gpu_hours"] * price_per_gpu_hour if price_per_gpu_hour is not None else None
        return out


def holds(row: dict[str, Any], slo: dict[str, float], failed: int = 0) -> bool | None:
    """Whether the window's percentiles are within every SLO limit (None: nothing finished in it to
    judge). A window whose requests failed does not hold it."""
    if failed:
        return False
    for key, limit in slo.items():
        metric, _, stat = key.removesuffix("_ms").partition("_")
        value = (row.get(f"{metric}_ms") or {}).get(stat)
        if value is None:
            return None
        if value > limit:
            return False
    return True


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1e3
