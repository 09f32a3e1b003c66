"""What every telemetry source shares: the sampler contract and the event helper.

Samples (``samples.jsonl``) are typed per source in ``loadgen.rundir.samples`` (``GpuSample``,
``ServerSample``), where their schema is written down.

Event records (``events.jsonl``): ``{"t_ns", "src", "kind", ...}``; ``src`` is "telemetry" for the
samplers' own outcomes (kinds: started, stopped, source_unavailable, field_not_supported, gpu_lost,
sampler_error, sampler_recovered, source_ended) and "log" for server log matches
(``kind: "log_match"``, ``pattern``, ``severity``, ``line``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, cast

from loadgen.rundir.samples import GPU_FIELDS, GpuSample, Sample

# one line of events.jsonl: a time, a src and a kind, and fields of the kind's own
Event = dict[str, Any]
Emit = Callable[[Event], None]


class SamplerUnavailable(Exception):
    """The source cannot be used at all (no driver, bad URL); the message says what to do."""


class SamplerDone(Exception):
    """The source has nothing more to give (every GPU lost, the command ended for good)."""


class Sampler(Protocol):
    """A periodic telemetry source. ``sample`` blocks (NVML, HTTP): it runs on its own thread."""

    name: str
    period_s: float

    def open(self, emit: Emit) -> None: ...

    def sample(self) -> Sequence[Sample]: ...

    def close(self) -> None: ...


def event(kind: str, src: str = "telemetry", t_ns: int | None = None, **fields: Any) -> Event:
    return {"t_ns": time.time_ns() if t_ns is None else t_ns, "src": src, "kind": kind, **fields}


def set_readings(rec: GpuSample, values: Mapping[str, float], whole: frozenset[str] = frozenset()) -> None:
    """Copy readings named by their GPU field onto ``rec``, as ints for the fields in ``whole``
    (counts of bytes, MHz, percent, mJ). A name that is no GPU field is a bug of the source's table."""
    fields = cast("dict[str, object]", rec)
    for key, v in values.items():
        if key not in GPU_FIELDS:
            raise KeyError(f"{key!r} is not a GPU sample field (loadgen.rundir.samples.GPU_FIELDS)")
        fields[key] = int(v) if key in whole else v


def settle_power(rec: GpuSample, instant_w: float | None) -> None:
    """``power_w``: the instantaneous reading where the source has one, else its averaged one."""
    if instant_w is not None:
        rec["power_w"], rec["power_kind"] = instant_w, "instant"
    elif rec["power_avg_w"] is not None:
        rec["power_w"], rec["power_kind"] = rec["power_avg_w"], "average"
