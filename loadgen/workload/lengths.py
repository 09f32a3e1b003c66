"""Distributions of lengths (tokens) and durations (seconds), drawn with a ``random.Random``.

In a scenario a distribution is a number (fixed) or an inline table with ``dist`` and its
parameters; every kind also takes ``min`` and ``max`` (values outside are clamped to them):

==============  =====================================  ===========================================
``dist``        parameters                             draws
==============  =====================================  ===========================================
``fixed``       ``value``                              always ``value``
``uniform``     ``low``, ``high``                      uniform on [low, high] (integers: each
                                                       integer equally likely)
``normal``      ``mean``, ``std``                      Gaussian
``lognormal``   ``median``, ``sigma``                  ``median * exp(sigma * N(0, 1))``
``exponential`` ``mean``                               exponential (think times)
``empirical``   ``values`` or ``path``, ``format``,    a value of the list or of the dataset's
                ``field`` (``input``/``output``)       input/output lengths, equally likely
``mixture``     ``components``: array of tables with   a component chosen by weight, then its draw
                ``weight`` and a distribution
==============  =====================================  ===========================================

Token lengths are rounded to integers and clamped to ``[1, context limit]`` by the workload.
Invalid parameters raise :class:`~loadgen.workload.errors.TableError` naming the key and value.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any, Protocol

from loadgen.workload.datasets import PROMPT_FORMATS, TRACE_FORMATS, length_values
from loadgen.workload.errors import NO_VALUE, DatasetError, TableError
from loadgen.workload.tables import Table, type_name

DIST_KINDS = ("fixed", "uniform", "normal", "lognormal", "exponential", "empirical", "mixture")


class Distribution(Protocol):
    def sample(self, rng: random.Random) -> float:
        """One draw."""
        ...

    def describe(self) -> str:
        """The distribution as a short human-readable string."""
        ...


@dataclass(frozen=True, slots=True)
class Fixed:
    value: float

    def sample(self, rng: random.Random) -> float:
        return self.value

    def describe(self) -> str:
        return f"fixed {self.value:g}"


@dataclass(frozen=True, slots=True)
class Uniform:
    low: float
    high: float
    integer: bool = False

    def sample(self, rng: random.Random) -> float:
        if self.integer:
            return float(rng.randint(int(self.low), int(self.high)))
        return rng.uniform(self.low, self.high)

    def describe(self) -> str:
        return f"uniform [{self.low:g}, {self.high:g}]"


@dataclass(frozen=True, slots=True)
class Normal:
    mean: float
    std: float

    def sample(self, rng: random.Random) -> float:
        return rng.gauss(self.mean, self.std)

    def describe(self) -> str:
        return f"normal mean {self.mean:g} std {self.std:g}"


@dataclass(frozen=True, slots=True)
class LogNormal:
    median: float
    sigma: float

    def sample(self, rng: random.Random) -> float:
        return self.median * math.exp(self.sigma * rng.gauss(0.0, 1.0))

    def describe(self) -> str:
        return f"lognormal median {self.median:g} sigma {self.sigma:g}"


@dataclass(frozen=True, slots=True)
class Exponential:
    mean: float

    def sample(self, rng: random.Random) -> float:
        return rng.expovariate(1.0 / self.mean)

    def describe(self) -> str:
        return f"exponential mean {self.mean:g}"


@dataclass(frozen=True, slots=True)
class Empirical:
    values: tuple[float, ...]
    source: str = "values"

    def sample(self, rng: random.Random) -> float:
        return self.values[int(rng.random() * len(self.values))]

    def describe(self) -> str:
        return f"empirical {len(self.values)} values from {self.source}"


@dataclass(frozen=True, slots=True)
class Mixture:
    weights: tuple[float, ...]
    components: tuple[Distribution, ...]

    def sample(self, rng: random.Random) -> float:
        cum = list(accumulate(self.weights))
        i = bisect.bisect_right(cum, rng.random() * cum[-1])
        return self.components[min(i, len(self.components) - 1)].sample(rng)

    def describe(self) -> str:
        total = sum(self.weights)
        parts = [f"{w / total:.0%} {c.describe()}" for w, c in zip(self.weights, self.components, strict=True)]
        return "mixture of " + " + ".join(parts)


@dataclass(frozen=True, slots=True)
class Clamped:
    inner: Distribution
    low: float
    high: float

    def sample(self, rng: random.Random) -> float:
        return min(self.high, max(self.low, self.inner.sample(rng)))

    def describe(self) -> str:
        high = "inf" if math.isinf(self.high) else f"{self.high:g}"
        return f"{self.inner.describe()}, clamped to [{self.low:g}, {high}]"


def sample_length(dist: Distribution, rng: random.Random, limit: int) -> int:
    """A token length from ``dist``: rounded and clamped to ``[1, limit]``."""
    return min(limit, max(1, round(dist.sample(rng))))


def parse_distribution(
    value: Any, key: str, *, integer: bool, base_dir: Path | None = None, floor: float = 0.0
) -> Distribution:
    """A distribution from a scenario value (a number or an inline table), validated.

    ``key`` is the value's dotted path for messages; ``integer`` marks token lengths (fixed values
    must be whole numbers); ``floor`` is the smallest value that makes sense (0 for lengths and
    seconds): parameters that put every draw below it are rejected. Relative dataset paths are
    resolved from ``base_dir``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, dict)):
        raise TableError(key, value, f"must be a number or a table with dist = ..., not {type_name(value)}")
    if not isinstance(value, dict):
        return _fixed(value, key, integer, floor)
    t = Table(value, key)
    kind = t.get_choice("dist", DIST_KINDS)
    dist = _parse_kind(kind, t, integer, base_dir, floor)
    low = t.get_float("min", floor, min_value=floor)
    high = t.get_float("max", math.inf)
    if high < low:
        raise TableError(t.key("max"), high, f"must be >= min ({low:g})")
    t.finish()
    _check_reachable(dist, t, low, high)
    if low > floor or not math.isinf(high) or kind in ("normal",):
        dist = Clamped(dist, low, high)
    return dist


def _check_reachable(dist: Distribution, t: Table, low: float, high: float) -> None:
    """Reject min/max that every draw of ``dist`` falls outside (a distribution that cannot be)."""
    if isinstance(dist, Fixed):
        span = (dist.value, dist.value)
    elif isinstance(dist, Uniform):
        span = (dist.low, dist.high)
    elif isinstance(dist, Empirical):
        span = (min(dist.values), max(dist.values))
    else:
        return
    if span[1] < low:
        raise TableError(t.key("min"), low, f"is above every value the distribution gives (at most {span[1]:g})")
    if span[0] > high:
        raise TableError(t.key("max"), high, f"is below every value the distribution gives (at least {span[0]:g})")


def _fixed(value: float, key: str, integer: bool, floor: float) -> Fixed:
    if isinstance(value, int) and abs(value) > 2**53:
        raise TableError(key, value, "is too large")  # past a float's whole numbers (TOML allows 64-bit)
    if not math.isfinite(value):
        raise TableError(key, value, "must be a finite number")
    if integer and float(value) != int(value):
        raise TableError(key, value, "must be a whole number of tokens")
    if value < floor:
        raise TableError(key, value, f"must be >= {floor:g}")
    return Fixed(float(value))


def _parse_kind(kind: str, t: Table, integer: bool, base_dir: Path | None, floor: float) -> Distribution:
    if kind == "fixed":
        return _fixed(t.get_float("value"), t.key("value"), integer, floor)
    if kind == "uniform":
        low = t.get_float("low", min_value=floor)
        high = t.get_float("high", min_value=floor)
        if high < low:
            raise TableError(t.key("high"), high, f"must be >= low ({low:g})")
        if integer and (low != int(low) or high != int(high)):
            raise TableError(t.key("low"), low, "low and high must be whole numbers of tokens")
        return Uniform(low, high, integer)
    if kind == "normal":
        mean = t.get_float("mean", min_value=floor)
        std = t.get_float("std", min_value=0.0)
        return Normal(mean, std)
    if kind == "lognormal":
        median = t.get_float("median", positive=True)
        sigma = t.get_float("sigma", min_value=0.0)
        return LogNormal(median, sigma)
    if kind == "exponential":
        return Exponential(t.get_float("mean", positive=True))
    if kind == "empirical":
        return _parse_empirical(t, base_dir, floor)
    components = t.get_list("components")
    weights: list[float] = []
    dists: list[Distribution] = []
    for i, comp in enumerate(components):
        ckey = f"{t.key('components')}[{i}]"
        if not isinstance(comp, dict):
            raise TableError(ckey, comp, f"must be a table with weight and dist, not {type_name(comp)}")
        ct = Table(dict(comp), ckey)
        weights.append(ct.get_float("weight", positive=True))
        rest = {k: v for k, v in comp.items() if k != "weight"}
        dists.append(parse_distribution(rest, ckey, integer=integer, base_dir=base_dir, floor=floor))
    return Mixture(tuple(weights), tuple(dists))


def _parse_empirical(t: Table, base_dir: Path | None, floor: float) -> Empirical:
    if t.has("values"):
        raw = t.get_list("values")
        for i, v in enumerate(raw):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < floor:
                raise TableError(f"{t.key('values')}[{i}]", v, f"must be a number >= {floor:g}")
            if not v <= 2**53:  # nan, inf, or an integer past a float's whole numbers
                raise TableError(f"{t.key('values')}[{i}]", v, "must be a finite number")
        return Empirical(tuple(float(v) for v in raw))
    if not t.has("path"):
        raise TableError(t.key("values"), NO_VALUE, 'empirical needs values = [...] or path = "..."')
    path = Path(t.get_str("path"))
    if base_dir is not None and not path.is_absolute():
        path = base_dir / path
    fmt = t.get_choice("format", (*TRACE_FORMATS, *PROMPT_FORMATS))
    field = t.get_choice("field", ("input", "output"))
    try:
        values = length_values(path, fmt, field)
    except DatasetError as exc:
        raise TableError(t.key("path"), str(path), f"cannot read it: {exc}") from None
    return Empirical(tuple(float(v) for v in values), f"{path.name} ({field})")
