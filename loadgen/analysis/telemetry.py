"""Telemetry joined per load step: GPU power and energy, server gauges and counters, log events.

``step_telemetry(samples, events, windows, ok_requests_per_step)`` takes the records of
``samples.jsonl``/``events.jsonl`` (schema in ``loadgen.telemetry.base``) and one ``(start_ns,
end_ns)`` window per step, and returns one ``TelemetryRow`` per step: the window's index and length
and the keys of ``analysis.contracts.StepTelemetry``.

How values are joined (all times wall-clock ns):
  * Gauges (power, utilisation, clocks, KV fill, queue) are step functions: the value in effect at
    time t is the last sample at or before t. A step's statistics cover the value in effect at its
    start plus every sample inside it; means are time-weighted over the window. Total GPU power is
    the sum over GPUs of each one's last value at every sample instant; a GPU whose last sample is
    older than the gap threshold counts as missing there.
  * Counters (energy mJ, preemptions, drafts/accepted tokens, prefix hits) are differenced: the sum
    of positive increments over the samples bracketing the window (a counter reset counts from 0).
    The energy counter is interpolated linearly at the window edges (it is continuous; its samples
    are not at the edges). Where a GPU has no counter, its energy is the integral of its power step
    function; ``energy_method`` says which ("counter", "power_integral" or "mixed").
  * Validity: a step that served no successful request is idle, whatever the GPUs drew: its power
    is kept for reference but ``power_valid`` is False with ``power_invalid_reason`` "idle: no
    request served", and ``tokens_per_joule`` is None. Telemetry gaps (no GPU sample for longer than
    ``max(5 x the median sampling interval, 1 s)``; server scrapes: ``max(5 x median, 5 s)``) are
    listed in ``telemetry_gaps``; gaps over a quarter of the window, missing GPUs (lost mid-run) or
    no GPU telemetry at all also make power invalid, with the reason.
  * ``memory_bound`` is True when power is valid, mean GPU utilisation is at least 80 % and mean
    power stays below 60 % of the power limit (the GPUs are busy waiting on memory, not computing).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from loadgen.analysis.contracts import (
    EnergyMethod,
    GpuPower,
    GpuTelemetry,
    MeanMax,
    PowerStats,
    ServerTelemetry,
    StepSummary,
    StepTelemetry,
    TelemetryGap,
)
from loadgen.analysis.load import Run
from loadgen.rundir.samples import GpuSample, Sample, ServerSample, gpu_samples, samples_of, server_samples

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

MEMORY_BOUND_UTIL = 80.0
MEMORY_BOUND_POWER_FRAC = 0.6
GAP_INVALID_FRAC = 0.25

CLOCK_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}

_GPU_COLS = (
    "power_w",
    "energy_mj",
    "power_limit_w",
    "util_gpu",
    "util_mem",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "clock_reasons",
)
_SERVER_GAUGES = ("running", "queued", "kv_usage", "spec_accept_len", "prefix_hit")
_SERVER_COUNTERS = (
    "preemptions_total",
    "spec_drafts_total",
    "spec_accepted_total",
    "prefix_hits_total",
    "prefix_queries_total",
    "gen_tokens_total",
)


@dataclass
class _Series:
    """One source's samples as columns, sorted by time; NaN where a sample lacked the field."""

    t: I64
    cols: dict[str, F64]

    @classmethod
    def of(cls, recs: Sequence[GpuSample] | Sequence[ServerSample], names: Sequence[str]) -> _Series:
        rows: list[Mapping[str, object]] = sorted(recs, key=lambda r: r["t_ns"])
        t = np.array([r["t_ns"] for r in rows], dtype=np.int64)
        cols = {}
        for name in names:
            cols[name] = np.array([_num(r.get(name)) for r in rows], dtype=np.float64)
        return cls(t, cols)

    def window_idx(self, a: int, b: int, counters: bool = False) -> tuple[int, int]:
        """[lo, hi): the last sample at or before ``a`` (if any) through the last before ``b`` (gauges:
        a value taken at ``b`` holds after the window) or at ``b`` (counters: it counts what went before)."""
        lo = int(np.searchsorted(self.t, a, side="right")) - 1
        hi = int(np.searchsorted(self.t, b, side="right" if counters else "left"))
        return max(lo, 0), hi


def _num(v: object) -> float:
    """A reading as a float; NaN for no reading (None, a bool, text from a hand-edited file)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return math.nan
    return float(v)


def _median_interval_s(series: Sequence[_Series]) -> float | None:
    return median_interval_s([s.t for s in series])


def median_interval_s(times: Sequence[npt.NDArray[Any]]) -> float | None:
    """The median gap between consecutive samples, over every series."""
    diffs = [np.diff(t) for t in times if len(t) > 1]
    if not diffs:
        return None
    d = np.concatenate(diffs)
    d = d[d > 0]
    return float(np.median(d)) / 1e9 if len(d) else None


def gpu_stale_ns(times: Sequence[npt.NDArray[Any]]) -> int:
    """How long a GPU reading holds: 5 median sampling intervals (0.2 s assumed), at least 1 s.
    The one rule for the step figures and the report's power plot."""
    return int(max(5 * (median_interval_s(times) or 0.2), 1.0) * 1e9)


def as_of(t: npt.NDArray[Any], values: F64, grid: npt.NDArray[Any], stale_ns: int, until_ns: int | None = None) -> F64:
    """Each grid time's last reading at or before it; NaN before the first, when the last is older
    than ``stale_ns``, or from ``until_ns`` on (a lost GPU's last reading does not hold after)."""
    out = np.full(len(grid), np.nan)
    if not len(t):
        return out
    idx = np.searchsorted(t, grid, side="right") - 1
    fresh = (idx >= 0) & ((grid - t[np.maximum(idx, 0)]) <= stale_ns)
    if until_ns is not None:
        fresh &= grid < until_ns
    out[fresh] = values[idx[fresh]]
    return out


def _stats(values: F64, weights: F64 | None = None) -> PowerStats | None:
    ok = ~np.isnan(values)
    if not ok.any():
        return None
    v = values[ok]
    if weights is not None and float(weights[ok].sum()) > 0:
        mean = float(np.average(v, weights=weights[ok]))
    else:
        mean = float(v.mean())
    return {"mean": mean, "p95": float(np.percentile(v, 95)), "max": float(v.max())}


def _mean_max(values: F64, weights: F64 | None = None) -> MeanMax | None:
    s = _stats(values, weights)
    return None if s is None else {"mean": s["mean"], "max": s["max"]}


def _durations(t: I64, a: int, b: int) -> F64:
    """How long each sample's value holds inside [a, b] (the first from ``a``)."""
    if len(t) == 0:
        return np.zeros(0)
    starts = np.clip(t, a, b)
    ends = np.append(starts[1:], b)
    return np.maximum(ends - starts, 0).astype(np.float64) / 1e9


def _counter_increase(values: F64) -> float | None:
    v = values[~np.isnan(values)]
    if len(v) == 0:
        return None
    d = np.diff(v)
    # a negative step is a restart from zero: the new value is what was counted since
    return float(np.where(d >= 0, d, v[1:]).sum()) if len(d) else 0.0


def _gaps(times: I64, a: int, b: int, threshold_ns: int) -> list[tuple[int, int]]:
    """Intervals longer than ``threshold_ns`` with no sample, clipped to [a, b]; a window edge with
    no sample beyond it (before the first sample, after the last) counts as a sample."""
    before = times[times <= a]
    after = times[times >= b]
    inside = times[(times > a) & (times < b)]
    start = int(before[-1]) if len(before) else None
    end = int(after[0]) if len(after) else None
    pts = [start if start is not None else a, *(int(x) for x in inside), end if end is not None else b]
    out = []
    for p, q in itertools.pairwise(pts):
        if q - p > threshold_ns:
            out.append((max(p, a), min(q, b)))
    return [(p, q) for p, q in out if q > p]


def _energy_counter_j(s: _Series, a: int, b: int, max_edge_ns: int) -> float | None:
    """Energy from the mJ counter between a and b, interpolated at the edges; None if unusable."""
    e = s.cols["energy_mj"]
    ok = ~np.isnan(e)
    t, e = s.t[ok], e[ok]
    if len(t) < 2:
        return None

    def at(x: int) -> float | None:
        i = int(np.searchsorted(t, x, side="right"))
        if 0 < i < len(t):
            t0, t1 = int(t[i - 1]), int(t[i])
            if t1 - t0 > 2 * max_edge_ns:
                return None
            return float(e[i - 1] + (e[i] - e[i - 1]) * (x - t0) / (t1 - t0))
        if i == len(t) and x - int(t[-1]) <= max_edge_ns:
            return float(e[-1])
        if i == 0 and int(t[0]) - x <= max_edge_ns:
            return float(e[0])
        return None

    ea, eb = at(a), at(b)
    if ea is None or eb is None:
        return None
    lo, hi = int(np.searchsorted(t, a, side="right")), int(np.searchsorted(t, b, side="left"))
    inner = e[lo:hi]
    if len(inner) and (np.diff(np.concatenate(([ea], inner, [eb]))) < 0).any():
        return None  # counter reset inside the window (driver reload): fall back to the power integral
    return (eb - ea) / 1000.0


def _power_integral_j(s: _Series, a: int, b: int, stale_ns: int) -> float | None:
    lo, hi = s.window_idx(a, b)
    t, p = s.t[lo:hi], s.cols["power_w"][lo:hi]
    if len(t) == 0 or np.isnan(p).all():
        return None
    # a value holds until the next sample, but not across a gap longer than the stale limit
    starts = np.clip(t, a, b)
    ends = np.minimum(np.append(starts[1:], b), t + stale_ns)
    dur = np.maximum(ends - starts, 0).astype(np.float64) / 1e9
    ok = ~np.isnan(p)
    return float((p[ok] * dur[ok]).sum())


def _gpu_series(samples: Sequence[GpuSample]) -> dict[int, _Series]:
    by_source: dict[str, dict[int, list[GpuSample]]] = {}
    for r in samples:
        by_source.setdefault(r["source"], {}).setdefault(r["gpu"], []).append(r)
    if not by_source:
        return {}
    # several sources may describe the same GPUs (NVML here, DCGM there): use the richest one
    best = max(by_source.values(), key=lambda g: sum(len(v) for v in g.values()))
    return {gpu: _Series.of(recs, _GPU_COLS) for gpu, recs in sorted(best.items())}


def _reasons(values: F64) -> dict[str, float] | None:
    v = values[~np.isnan(values)].astype(np.int64)
    if len(v) == 0:
        return None
    out = {}
    for bit, name in CLOCK_REASONS.items():
        frac = float(((v & bit) != 0).mean())
        if frac > 0:
            out[name] = round(frac, 4)
    return out


def _gpu_part(
    gpus: dict[int, _Series], a: int, b: int, stale_ns: int, lost: dict[int, int]
) -> tuple[GpuTelemetry, float]:
    """The GPU keys of a step, and for how many seconds of it some GPU had no reading."""
    window_s = (b - a) / 1e9
    grid_parts = [s.t[(s.t >= a) & (s.t < b)] for s in gpus.values()]
    grid = np.unique(np.concatenate([np.array([a], dtype=np.int64), *grid_parts]))
    totals = np.zeros(len(grid))
    present = np.zeros(len(grid), dtype=np.int64)
    per_gpu: list[GpuPower] = []
    limit_sum = 0.0
    energy_sum = 0.0
    methods: set[EnergyMethod] = set()
    energy_ok = True
    rows: list[_GpuRows] = []
    for gpu, s in gpus.items():
        vals = as_of(s.t, s.cols["power_w"], grid, stale_ns, lost.get(gpu))
        good = ~np.isnan(vals)
        totals[good] += vals[good]
        present += good
        lo, hi = s.window_idx(a, b)
        lim = s.cols["power_limit_w"][lo:hi]
        lim = lim[~np.isnan(lim)]
        if len(lim) and gpu not in lost:
            limit_sum += float(lim[-1])
        # a lost GPU's energy after the loss is unknown, so is the step's total
        e = None if gpu in lost else _gpu_energy_j(s, a, b, stale_ns, methods)
        if e is None:
            energy_ok = False
        else:
            energy_sum += e
        w = _durations(s.t[lo:hi], a, b)
        per_gpu.append(
            {
                "gpu": gpu,
                "power_w": _stats(s.cols["power_w"][lo:hi], w),
                "energy_j": e,
                "power_limit_w": float(lim[-1]) if len(lim) else None,
                "lost": gpu in lost,
            }
        )
        rows.append((s.cols, lo, hi, w))
    full = present == len(gpus)
    weights = _durations(grid, a, b)
    power = _stats(np.where(present > 0, totals, np.nan), weights)
    mean_w = power["mean"] if power else None
    energy = energy_sum if energy_ok and methods else None
    out: GpuTelemetry = {
        "gpu_count": len(gpus),
        "gpu_power_w": power,
        "gpu_power_limit_w": limit_sum or None,
        "gpu_power_frac_of_limit": (mean_w / limit_sum) if (mean_w is not None and limit_sum > 0) else None,
        "energy_j": energy,
        "energy_method": (methods.pop() if len(methods) == 1 else "mixed") if energy is not None else None,
        "gpus": per_gpu,
    }
    out.update(_gpu_activity(rows))
    incomplete_s = float(weights[~full].sum()) if len(weights) else window_s
    return out, incomplete_s


_GpuRows = tuple[dict[str, F64], int, int, F64]
"""One GPU's columns, the [lo, hi) rows of a window and how long each row's value holds in it (s)."""


def _gpu_energy_j(s: _Series, a: int, b: int, stale_ns: int, methods: set[EnergyMethod]) -> float | None:
    """A GPU's energy in [a, b]: from its counter, else its power integral (None: neither); adds the
    method used to ``methods``."""
    e = _energy_counter_j(s, a, b, stale_ns)
    if e is not None:
        methods.add("counter")
        return e
    e = _power_integral_j(s, a, b, stale_ns)
    if e is not None:
        methods.add("power_integral")
    return e


def _gpu_activity(rows: list[_GpuRows]) -> GpuTelemetry:
    """Utilisation, clocks and clock reasons of a window, pooled over the GPUs, time-weighted."""

    def pooled(name: str) -> tuple[F64, F64]:
        if not rows:
            return np.zeros(0), np.zeros(0)
        return np.concatenate([cols[name][lo:hi] for cols, lo, hi, _ in rows]), np.concatenate([w for *_, w in rows])

    sm_v, sm_w = pooled("sm_clock_mhz")
    sm_stats = _stats(sm_v, sm_w)
    reasons = [cols["clock_reasons"][lo:hi] for cols, lo, hi, _ in rows]
    return {
        "util_gpu": _mean_max(*pooled("util_gpu")),
        "util_mem": _mean_max(*pooled("util_mem")),
        "sm_clock_mhz": None if sm_stats is None else {"mean": sm_stats["mean"], "min": float(np.nanmin(sm_v))},
        "mem_clock_mhz": _mean_max(*pooled("mem_clock_mhz")),
        "clock_reasons": _reasons(np.concatenate(reasons)) if reasons else None,
    }


def _server_part(server: _Series, a: int, b: int) -> ServerTelemetry:
    out: ServerTelemetry = {}
    lo, hi = server.window_idx(a, b)
    t = server.t[lo:hi]
    w = _durations(t, a, b)
    c = {k: v[lo:hi] for k, v in server.cols.items()}
    clo, chi = server.window_idx(a, b, counters=True)
    for k in _SERVER_COUNTERS:
        c[k] = server.cols[k][clo:chi]
    out["running"] = _mean_max(c["running"], w)
    out["queue_len"] = _mean_max(c["queued"], w)
    out["kv_usage"] = _mean_max(c["kv_usage"], w)
    out["preemptions"] = _counter_increase(c["preemptions_total"])
    drafts = _counter_increase(c["spec_drafts_total"])
    accepted = _counter_increase(c["spec_accepted_total"])
    if drafts and accepted is not None:
        out["spec_accept_len"] = 1.0 + accepted / drafts
    else:
        g = _mean_max(c["spec_accept_len"], w)
        out["spec_accept_len"] = None if g is None else g["mean"]
    hits, queries = _counter_increase(c["prefix_hits_total"]), _counter_increase(c["prefix_queries_total"])
    if queries and hits is not None:
        out["prefix_hit"] = hits / queries
    else:
        g = _mean_max(c["prefix_hit"], w)
        out["prefix_hit"] = None if g is None else g["mean"]
    gen = _counter_increase(c["gen_tokens_total"])
    out["server_gen_tok_s"] = gen / ((b - a) / 1e9) if gen is not None and b > a else None
    return out


def _empty_server() -> ServerTelemetry:
    return {
        "running": None,
        "queue_len": None,
        "kv_usage": None,
        "preemptions": None,
        "spec_accept_len": None,
        "prefix_hit": None,
        "server_gen_tok_s": None,
    }


def _no_gpu() -> GpuTelemetry:
    return {
        "gpu_count": 0,
        "gpu_power_w": None,
        "gpu_power_limit_w": None,
        "gpu_power_frac_of_limit": None,
        "energy_j": None,
        "energy_method": None,
        "gpus": [],
        "util_gpu": None,
        "util_mem": None,
        "sm_clock_mhz": None,
        "mem_clock_mhz": None,
        "clock_reasons": None,
    }


class TelemetryRow(StepTelemetry):
    """One row of :func:`step_telemetry`: the window's index and length, and its telemetry."""

    step: int
    window_s: float


def step_telemetry(
    samples: Iterable[object],
    events: list[dict[str, Any]],
    windows: list[tuple[int, int]],
    ok_requests_per_step: list[int],
    output_tokens_per_step: Sequence[int | float | None] | None = None,
) -> list[TelemetryRow]:
    """One row per window (see the module docstring for the join rules and validity); ``samples``
    are the parsed lines of samples.jsonl."""
    joined = _join(samples_of(samples), events, windows, ok_requests_per_step, output_tokens_per_step)
    return [
        {"step": i, "window_s": (b - a) / 1e9, **tel}
        for i, ((a, b), tel) in enumerate(zip(windows, joined, strict=True))
    ]


def _join(
    samples: Sequence[Sample],
    events: list[dict[str, Any]],
    windows: list[tuple[int, int]],
    ok_requests_per_step: list[int],
    output_tokens_per_step: Sequence[int | float | None] | None,
) -> list[StepTelemetry]:
    if len(ok_requests_per_step) != len(windows):
        raise ValueError(f"{len(windows)} windows but {len(ok_requests_per_step)} ok-request counts")
    if output_tokens_per_step is not None and len(output_tokens_per_step) != len(windows):
        raise ValueError(f"{len(windows)} windows but {len(output_tokens_per_step)} output-token counts")
    sources = _Sources.of(samples, events)
    tokens = output_tokens_per_step if output_tokens_per_step is not None else [None] * len(windows)
    return [sources.window(a, b, ok_requests_per_step[i], tokens[i]) for i, (a, b) in enumerate(windows)]


@dataclass(frozen=True, slots=True)
class _Sources:
    """A run's samples and events, prepared once for every window's join."""

    gpus: dict[int, _Series]
    gpu_gap_ns: int
    all_gpu_t: I64
    server: _Series | None
    server_gap_ns: int
    engine: str | None
    events: list[dict[str, Any]]  # those with a time, in time order
    event_t: I64
    lost_at: dict[int, int]  # GPU -> when it was lost

    @classmethod
    def of(cls, samples: Sequence[Sample], events: list[dict[str, Any]]) -> _Sources:
        gpus = _gpu_series(gpu_samples(samples))
        all_gpu_t = np.unique(np.concatenate([s.t for s in gpus.values()])) if gpus else np.zeros(0, np.int64)
        server_recs = server_samples(samples)
        server = _Series.of(server_recs, _SERVER_GAUGES + _SERVER_COUNTERS) if server_recs else None
        server_interval = _median_interval_s([server]) if server is not None else None
        engines = {r.get("engine") for r in server_recs if r.get("engine")}
        evs = sorted((e for e in events if "t_ns" in e), key=lambda e: e["t_ns"])
        return cls(
            gpus=gpus,
            gpu_gap_ns=gpu_stale_ns([s.t for s in gpus.values()]),
            all_gpu_t=all_gpu_t,
            server=server,
            server_gap_ns=int(max(5 * (server_interval or 1.0), 5.0) * 1e9),
            engine=(",".join(sorted(str(e) for e in engines)) or None) if server is not None else None,
            events=evs,
            event_t=np.array([e["t_ns"] for e in evs], dtype=np.int64),
            lost_at={int(e["gpu"]): int(e["t_ns"]) for e in evs if e.get("kind") == "gpu_lost" and "gpu" in e},
        )

    def window(self, a: int, b: int, ok_requests: int, output_tokens: int | float | None) -> StepTelemetry:
        """The telemetry of the window [a, b] (see the module docstring for the rules)."""
        gaps: list[TelemetryGap] = []
        if self.gpus:
            lost = {g: t for g, t in self.lost_at.items() if t <= b}
            gpu, incomplete_s = _gpu_part(self.gpus, a, b, self.gpu_gap_ns, lost)
            for p, q in _gaps(self.all_gpu_t, a, b, self.gpu_gap_ns):
                gaps.append({"src": "gpu", "start_ns": p, "end_ns": q, "s": (q - p) / 1e9})
        else:
            gpu, incomplete_s = _no_gpu(), 0.0
        if self.server is not None:
            srv = _server_part(self.server, a, b)
            for p, q in _gaps(self.server.t, a, b, self.server_gap_ns):
                gaps.append({"src": "server", "start_ns": p, "end_ns": q, "s": (q - p) / 1e9})
        else:
            srv = _empty_server()
        log_events, tel_events = self.event_counts(a, b)
        row: StepTelemetry = {
            **gpu,
            **srv,
            "engine": self.engine,
            "log_events": log_events,
            "telemetry_events": tel_events,
            "telemetry_gaps": gaps,
        }
        invalid = self.power_invalid(row, a, b, ok_requests, incomplete_s)
        row["power_valid"] = power_valid = not invalid
        row["power_invalid_reason"] = "; ".join(invalid) if invalid else None
        energy = row["energy_j"]
        row["tokens_per_joule"] = (
            float(output_tokens) / energy
            if output_tokens is not None and energy and energy > 0 and power_valid
            else None
        )
        util = row["util_gpu"]
        util_mean = util["mean"] if util else None
        frac = row["gpu_power_frac_of_limit"]
        if power_valid and util_mean is not None and frac is not None:
            row["memory_bound"] = util_mean >= MEMORY_BOUND_UTIL and frac < MEMORY_BOUND_POWER_FRAC
        else:
            row["memory_bound"] = None
        return row

    def event_counts(self, a: int, b: int) -> tuple[dict[str, int], dict[str, int]]:
        """Log pattern matches and telemetry events (not start, stop or the GPU list) in [a, b], by name."""
        lo, hi = int(np.searchsorted(self.event_t, a, side="left")), int(np.searchsorted(self.event_t, b, side="right"))
        log_events: dict[str, int] = {}
        tel_events: dict[str, int] = {}
        for e in self.events[lo:hi]:
            if e.get("src") == "log" and e.get("pattern"):
                log_events[e["pattern"]] = log_events.get(e["pattern"], 0) + 1
            elif e.get("src") == "telemetry" and e.get("kind") not in ("started", "stopped", "gpus"):
                tel_events[e["kind"]] = tel_events.get(e["kind"], 0) + 1
        return log_events, tel_events

    def power_invalid(self, row: StepTelemetry, a: int, b: int, ok_requests: int, incomplete_s: float) -> list[str]:
        """Why the window's power figures are not valid ([] when they are)."""
        invalid: list[str] = []
        window_s = (b - a) / 1e9
        gpu_gap_s = sum(g["s"] for g in row["telemetry_gaps"] if g["src"] == "gpu")
        if ok_requests <= 0:
            invalid.append("idle: no request served")
        if not self.gpus or row["gpu_power_w"] is None:
            invalid.append("no GPU telemetry")
        elif window_s > 0 and gpu_gap_s > GAP_INVALID_FRAC * window_s:
            invalid.append(f"telemetry gap: {gpu_gap_s:.1f} s of {window_s:.1f} s without GPU samples")
        elif window_s > 0 and incomplete_s > GAP_INVALID_FRAC * window_s:
            missing = sorted(g for g in self.lost_at if self.lost_at[g] <= b) or "some"
            invalid.append(f"GPU {missing} missing for {incomplete_s:.1f} s of {window_s:.1f} s (lost or not sampled)")
        return invalid


def telemetry_enricher(run: Run, steps: list[StepSummary]) -> None:
    """A step enricher for ``analysis.summary``: adds the ``StepTelemetry`` keys to each step row.

    The window is the step's steady part (``steady_ns`` .. ``end_ns``), the ok count its
    ``requests_ok`` and the tokens its ``output_tokens_in_window``; ``run`` needs ``samples`` and
    ``events`` (the loaded JSONL lines).
    """
    if not steps:
        return
    windows = [(int(s["steady_ns"]), int(s["end_ns"])) for s in steps]
    ok = [int(s.get("requests_ok") or 0) for s in steps]
    tokens = [s.get("output_tokens_in_window") for s in steps]
    rows = _join(run.samples, run.events, windows, ok, tokens)
    for step, row in zip(steps, rows, strict=True):
        step.update({**row})  # unpacked: mypy then knows it holds StepTelemetry's keys and no others
