"""The text of a run's limits, read once where it enters: the SLO (``--slo``) and the pass/fail
thresholds (``--fail-on``, ``--abort-on``, a scenario's ``[gate]``, a campaign's ``[ramp]``).

Pure: text in, values out, every error naming the flag (or key), the bad part and what is allowed,
so a typo fails before any request is sent. What the values mean for a measured run is judged
downstream: the knee against the SLO (``analysis.knee``), the capacity plan (``analysis.plan``),
the thresholds' verdict (``analysis.thresholds``, whose docstring holds the table of metrics).

SLO: ``name=value`` pairs, ``ttft_p99=2s,tpot_p99=50ms`` -> ``{"ttft_p99_ms": 2000.0, ...}``;
names ttft, itl, tpot, e2e with _mean, _p50, _p90 or _p99; a unit (ms, s, us) is required.

Thresholds: comma-separated ``[run:]METRIC OP VALUE[UNIT]``, each a *breach* condition:
``ttft_p99>2s,error_rate>1%,invalid_steps>0`` -> :class:`Thresholds` (the text as written, kept in
the manifest, and the parsed :class:`Threshold` items, judged by the ramp's ``--abort-on`` guard
without reading the text again).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal, cast

Op = Literal[">", ">=", "<", "<="]
Scope = Literal["step", "run"]

# ---------------------------------------------------------------------------------------------- SLO

SLO_KEY = re.compile(r"^(ttft|itl|tpot|e2e)_(mean|p50|p90|p99)_ms$")
SLO_NAMES = "ttft, itl, tpot, e2e with _mean, _p50, _p90 or _p99 (e.g. ttft_p99)"
UNITS_MS = {"ms": 1.0, "s": 1000.0, "us": 0.001, "µs": 0.001}
_SLO_PART = re.compile(r"^\s*([A-Za-z0-9_]+)\s*=\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-zµ]*)\s*$")


class SLOError(ValueError):
    """An SLO string or mapping that cannot be used; the message names the bad part."""


def parse_slo_key(key: str) -> tuple[str, str]:
    """(metric, stat) of an SLO key such as ``ttft_p99_ms``; ValueError naming the accepted keys."""
    m = SLO_KEY.match(key)
    if not m:
        raise ValueError(
            f"unknown SLO key {key!r}: use <metric>_<stat>_ms with metric in ttft, itl, tpot, e2e "
            "and stat in mean, p50, p90, p99 (e.g. ttft_p99_ms)"
        )
    return m.group(1), m.group(2)


def parse_slo(text: str) -> dict[str, float]:
    """Parse "ttft_p99=2s,tpot_p99=50ms" into {"ttft_p99_ms": 2000.0, "tpot_p99_ms": 50.0}.

    Names: ttft, itl, tpot, e2e followed by _mean, _p50, _p90 or _p99. Units: ms, s, us (a unit is
    required). Raises :class:`SLOError` naming the bad part and what is allowed.
    """
    out: dict[str, float] = {}
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise SLOError(f"empty SLO {text!r}: give name=value pairs like ttft_p99=2s,tpot_p99=50ms")
    for part in parts:
        m = _SLO_PART.match(part)
        if not m:
            raise SLOError(f"cannot read SLO part {part.strip()!r}: write name=value with a unit, e.g. ttft_p99=2s")
        name, value, unit = m.group(1).lower(), float(m.group(2)), m.group(3)
        key = f"{name}_ms"
        if not SLO_KEY.match(key):
            raise SLOError(f"unknown SLO name {name!r} in {part.strip()!r}: use {SLO_NAMES}")
        if unit not in UNITS_MS:
            what = f"unknown unit {unit!r}" if unit else "no unit"
            raise SLOError(f"{what} in SLO part {part.strip()!r}: use ms, s or us (e.g. {name}=2s or {name}=2000ms)")
        if value <= 0:
            raise SLOError(f"SLO limit must be > 0 in {part.strip()!r}")
        if key in out:
            raise SLOError(f"SLO name {name!r} given twice")
        out[key] = value * UNITS_MS[unit]
    return out


# --------------------------------------------------------------------------------------- thresholds

METRICS = (
    "ttft|itl|tpot|e2e with _mean, _p50, _p90 or _p99 (ms, s, us), error_rate (%), output_tok_s, "
    "goodput_share (%), invalid_steps"
)
ALLOWED = (
    "write [run:|tenant:NAME:]METRIC OP VALUE with OP one of > >= < <=, e.g. ttft_p99>2s, run:error_rate>1% or "
    f"tenant:chat:ttft_p99>2s; metrics: {METRICS}"
)
_PART = re.compile(
    r"^\s*(?:tenant\s*:\s*(?P<tenant>[A-Za-z0-9][A-Za-z0-9_-]*)\s*:)?"
    r"\s*(?:(?P<scope>[A-Za-z]+)\s*:)?\s*(?P<metric>[A-Za-z0-9_]+)\s*(?P<op>>=|<=|>|<)\s*"
    r"(?P<value>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<unit>[A-Za-zµ%/]*)\s*$"
)
# metric -> (unit the value is written in, scopes it takes)
_PLAIN: dict[str, tuple[str, tuple[Scope, ...]]] = {
    "error_rate": ("%", ("step", "run")),
    "goodput_share": ("%", ("step",)),
    "output_tok_s": ("tok/s", ("step", "run")),
    "invalid_steps": ("steps", ("run",)),
}
OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}


class ThresholdError(ValueError):
    """A threshold that cannot be read; the message names it and says what is allowed."""


@dataclass(frozen=True, slots=True)
class Threshold:
    """One breach condition. ``limit`` is in ``unit``: ms for latencies, percent for ``error_rate``
    and ``goodput_share``, tok/s, or a count of steps."""

    text: str
    metric: str
    op: Op
    limit: float
    unit: str
    scope: Scope
    tenant: str | None = None  # ``tenant:NAME:``: judged on that tenant's figures of each step

    def breached_by(self, value: float) -> bool:
        return OPS[self.op](value, self.limit)


@dataclass(frozen=True, slots=True)
class Thresholds:
    """A ``--fail-on``/``--abort-on`` value: ``text`` as written (stripped; what the manifest and a
    child ramp's argv carry) and its ``items`` in the order written."""

    text: str
    items: tuple[Threshold, ...]

    def __str__(self) -> str:
        return self.text

    def __iter__(self) -> Iterator[Threshold]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Threshold:
        return self.items[i]


def is_latency(metric: str) -> bool:
    """``ttft_p99`` and the other names ``--slo`` takes (its pattern, without the ``_ms``)."""
    return SLO_KEY.match(f"{metric}_ms") is not None


def parse_thresholds(text: str, flag: str = "--fail-on") -> Thresholds:
    """``"ttft_p99>2s,run:error_rate>1%"`` -> thresholds, in the order written. Raises
    :class:`ThresholdError` naming ``flag``, the bad threshold and what is allowed."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise ThresholdError(f"{flag} {text!r}: no threshold given; {ALLOWED}")
    out = [_parse_one(part, flag) for part in parts]
    seen: set[tuple[str | None, str, str, str]] = set()
    for t in out:
        key = (t.tenant, t.scope, t.metric, t.op)
        if key in seen:
            raise ThresholdError(f"{flag}: threshold {t.text!r} given twice ({t.scope} {t.metric} {t.op})")
        seen.add(key)
    return Thresholds(text.strip(), tuple(out))


def _parse_one(part: str, flag: str) -> Threshold:
    m = _PART.match(part)
    if not m:
        raise ThresholdError(f"{flag} threshold {part!r}: cannot read it; {ALLOWED}")
    metric, op, unit = m["metric"].lower(), cast(Op, m["op"]), m["unit"]
    value = float(m["value"])
    scope_text = (m["scope"] or "").lower()
    tenant = m["tenant"]
    if tenant is not None:
        if scope_text:
            raise ThresholdError(
                f"{flag} threshold {part!r}: a tenant's threshold is judged per step; drop '{scope_text}:'"
            )
        if metric in _PLAIN and "step" not in _PLAIN[metric][1]:
            raise ThresholdError(f"{flag} threshold {part!r}: {metric} counts over the run, not per tenant")
        plain = _parse_one(part.split(":", 2)[2], flag)
        return Threshold(part, plain.metric, plain.op, plain.limit, plain.unit, "step", tenant)
    if scope_text not in ("", "run", "step"):
        raise ThresholdError(f"{flag} threshold {part!r}: unknown scope {m['scope']!r}: use run: or nothing (per step)")
    if is_latency(metric):
        if scope_text == "run":
            raise ThresholdError(
                f"{flag} threshold {part!r}: latency percentiles are judged per step; drop 'run:' "
                f"(scope run takes error_rate, output_tok_s, invalid_steps)"
            )
        if unit not in UNITS_MS:
            what = f"unknown unit {unit!r}" if unit else "no unit"
            raise ThresholdError(
                f"{flag} threshold {part!r}: {what}; use ms, s or us (e.g. {metric}{op}2s or {metric}{op}2000ms)"
            )
        return Threshold(part, metric, op, value * UNITS_MS[unit], "ms", "step")
    if metric not in _PLAIN:
        raise ThresholdError(f"{flag} threshold {part!r}: unknown metric {m['metric']!r}; metrics: {METRICS}")
    want_unit, scopes = _PLAIN[metric]
    scope: Scope = "run" if scope_text == "run" or scopes == ("run",) else "step"
    if scope not in scopes:
        raise ThresholdError(f"{flag} threshold {part!r}: {metric} is judged per step only; drop 'run:'")
    if scope_text == "step" and "step" not in scopes:
        raise ThresholdError(f"{flag} threshold {part!r}: {metric} counts over the run; drop 'step:'")
    if want_unit == "%":
        if unit != "%":
            raise ThresholdError(f"{flag} threshold {part!r}: write {metric} in percent, e.g. {metric}{op}1%")
        if value > 100:
            raise ThresholdError(f"{flag} threshold {part!r}: a share above 100% can never be reached")
    elif unit not in ("", want_unit):
        raise ThresholdError(f"{flag} threshold {part!r}: {metric} takes a bare number, e.g. {metric}{op}{value:g}")
    if metric == "invalid_steps" and not value.is_integer():
        raise ThresholdError(f"{flag} threshold {part!r}: invalid_steps is a count; give a whole number")
    return Threshold(part, metric, op, value, want_unit, scope)


__all__ = [
    "OPS",
    "SLO_KEY",
    "SLO_NAMES",
    "UNITS_MS",
    "Op",
    "SLOError",
    "Scope",
    "Threshold",
    "ThresholdError",
    "Thresholds",
    "is_latency",
    "parse_slo",
    "parse_slo_key",
    "parse_thresholds",
]
