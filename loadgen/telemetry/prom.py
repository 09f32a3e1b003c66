"""A parser for the Prometheus text exposition format (version 0.0.4), as served at ``/metrics``.

``parse(text)`` returns every sample as ``(name, labels, value)`` plus the declared ``# TYPE`` of
each family. Handles metric names with colons (``vllm:num_requests_running``), counters exposed with
``_total``, histogram series (``_bucket{le=...}``, ``_sum``, ``_count``), optional timestamps,
``NaN``/``+Inf``/``-Inf`` and escaped label values (``\\\\``, ``\\"``, ``\\n``). Lines that do not parse
are counted in ``bad_lines`` and skipped: one odd line must not lose a scrape.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple


class PromSample(NamedTuple):
    name: str
    labels: dict[str, str]
    value: float


@dataclass
class Exposition:
    samples: list[PromSample] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)
    bad_lines: int = 0

    def series(self, name: str) -> list[PromSample]:
        return [s for s in self.samples if s.name == name]

    def names(self) -> set[str]:
        return {s.name for s in self.samples}

    def histogram(self, family: str) -> Histogram | None:
        """Buckets (cumulative counts by upper bound), sum and count of a histogram, summed over labels."""
        buckets: dict[float, float] = {}
        total_sum = total_count = 0.0
        seen = False
        for s in self.samples:
            if s.name == family + "_bucket" and "le" in s.labels:
                try:
                    le = _parse_value(s.labels["le"])
                except ValueError:  # a bucket without a numeric bound cannot be placed: skip it
                    continue
                buckets[le] = buckets.get(le, 0.0) + s.value
                seen = True
            elif s.name == family + "_sum":
                total_sum += s.value
                seen = True
            elif s.name == family + "_count":
                total_count += s.value
                seen = True
        if not seen:
            return None
        return Histogram(sorted(buckets.items()), total_sum, total_count)


@dataclass(frozen=True)
class Histogram:
    buckets: list[tuple[float, float]]
    sum: float
    count: float


class PromParseError(ValueError):
    pass


def _parse_value(text: str) -> float:
    t = text.strip()
    if t in ("+Inf", "Inf", "+inf", "inf"):
        return math.inf
    if t in ("-Inf", "-inf"):
        return -math.inf
    if t in ("NaN", "nan"):
        return math.nan
    return float(t)


def _parse_labels(line: str, i: int) -> tuple[dict[str, str], int]:
    """Parse ``{a="x",b="y"}`` starting at ``line[i] == '{'``; return labels and the index after ``}``."""
    labels: dict[str, str] = {}
    n = len(line)
    i += 1
    while True:
        while i < n and line[i] in " \t,":
            i += 1
        if i >= n:
            raise PromParseError("unterminated label set")
        if line[i] == "}":
            return labels, i + 1
        eq = line.find("=", i)
        if eq < 0:
            raise PromParseError("label without '='")
        key = line[i:eq].strip()
        i = eq + 1
        while i < n and line[i] in " \t":
            i += 1
        if i >= n or line[i] != '"':
            raise PromParseError(f"label {key} value is not quoted")
        i += 1
        chars: list[str] = []
        while True:
            if i >= n:
                raise PromParseError(f"unterminated value of label {key}")
            c = line[i]
            if c == "\\" and i + 1 < n:
                nxt = line[i + 1]
                chars.append("\n" if nxt == "n" else nxt)
                i += 2
                continue
            if c == '"':
                i += 1
                break
            chars.append(c)
            i += 1
        labels[key] = "".join(chars)


def parse_line(line: str) -> PromSample:
    """One sample line (no comments); raises PromParseError."""
    n = len(line)
    i = 0
    while i < n and line[i] not in "{ \t":
        i += 1
    name = line[:i]
    if not name:
        raise PromParseError("missing metric name")
    labels: dict[str, str] = {}
    if i < n and line[i] == "{":
        labels, i = _parse_labels(line, i)
    rest = line[i:].split()
    if not rest:
        raise PromParseError(f"{name}: missing value")
    try:
        value = _parse_value(rest[0])
    except ValueError:
        raise PromParseError(f"{name}: value {rest[0]!r} is not a number") from None
    return PromSample(name, labels, value)


def parse(text: str, wanted: Callable[[str], bool] | None = None) -> Exposition:
    """Parse an exposition; keep only samples whose name passes ``wanted`` (all when None)."""
    out = Exposition()
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line[0] == "#":
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                out.types[parts[2]] = parts[3].strip()
            continue
        if wanted is not None:
            end = 0
            while end < len(line) and line[end] not in "{ \t":
                end += 1
            if not wanted(line[:end]):
                continue
        try:
            out.samples.append(parse_line(line))
        except PromParseError:
            out.bad_lines += 1
    return out


def total(samples: Iterable[PromSample]) -> float | None:
    """Sum of the values (None when there are none): counters and counts across label sets."""
    vals = [s.value for s in samples if not math.isnan(s.value)]
    return sum(vals) if vals else None
