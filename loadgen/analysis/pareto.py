"""The Pareto frontier of a ramp: throughput per GPU against what one user sees (interactivity).

Each step is one point, as InferenceX, AIPerf's ``plot`` and vLLM's ``plot_pareto`` draw it:

- ``per_user_tok_s`` (x, interactivity) = 1000 / the step's TPOT p50 (ms): the decode speed of the
  median request, in output tokens per second per user. It leaves the wait for the first token
  out, unlike the report's "Per-req tok/s" (``per_request_tok_s``: the mean over requests of output
  tokens / end-to-end time, TTFT included), so it is the higher of the two; both are in the report.
- ``tok_s_per_gpu`` (y) = the step's aggregate output tok/s (``output_tok_s``, steady window) /
  the GPU count.

The GPU count comes from the run's ``--gpu-count`` (manifest options, ``gpus_source`` "option"),
else the most GPUs the telemetry saw in any step (``gpu_count`` of the telemetry join,
"telemetry"), else 1 ("unknown": the y axis is then throughput per node, and ``note`` says so).

A point is on the frontier when it is VALID, has both figures, and no other such point of the same
context length is at least as good on both axes and better on one (higher interactivity and higher
throughput per GPU are both better). Two points equal on both axes do not dominate each other, so
both are on it. Context lengths are separate workloads: each gets its own frontier. INVALID steps
and steps without one of the figures are listed, never on the frontier.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loadgen.analysis.contracts import GpusSource, ParetoPoint, ParetoSummary, StepSummary
from loadgen.analysis.values import number, stat

UNKNOWN_NOTE = "per GPU unknown: per node (give --gpu-count, or record GPU telemetry)"


def gpu_count(option: object, steps: Sequence[Mapping[str, Any]]) -> tuple[int, GpusSource]:
    """(GPUs, where the count came from): ``option`` (a positive int) first, then the telemetry's
    largest per-step ``gpu_count``, else (1, "unknown")."""
    if isinstance(option, int) and not isinstance(option, bool) and option >= 1:
        return option, "option"
    seen = [int(n) for s in steps if (n := number(s.get("gpu_count"))) is not None and n >= 1]
    if seen:
        return max(seen), "telemetry"
    return 1, "unknown"


def per_user_tok_s(step: Mapping[str, Any]) -> float | None:
    """1000 / TPOT p50 (ms): output tok/s of the step's median request after its first token."""
    tpot = stat(step, "tpot_ms", "p50")
    return 1000.0 / tpot if tpot is not None and tpot > 0 else None


def frontier(points: Sequence[tuple[float, float]]) -> list[bool]:
    """For each (x, y) point, whether no other point is >= on both and > on one (both axes: higher
    is better). Equal points are all kept."""
    out = []
    for i, (x, y) in enumerate(points):
        dominated = any((qx >= x and qy >= y) and (qx > x or qy > y) for j, (qx, qy) in enumerate(points) if j != i)
        out.append(not dominated)
    return out


def pareto_summary(steps: Sequence[StepSummary], gpus_option: object = None) -> ParetoSummary:
    """``summary["pareto"]``: every step as a point, its frontier flag, and the GPU count used."""
    gpus, source = gpu_count(gpus_option, steps)
    points: list[ParetoPoint] = []
    for s in steps:
        tok_s = number(s.get("output_tok_s"))
        ctx = s.get("context_tokens")
        points.append(
            {
                "step": s.get("step", len(points)),
                "concurrency": s.get("concurrency"),
                "rate": s.get("rate"),
                "context_tokens": ctx if isinstance(ctx, int) and not isinstance(ctx, bool) else None,
                "tok_s_per_gpu": tok_s / gpus if tok_s is not None else None,
                "per_user_tok_s": per_user_tok_s(s),
                "on_frontier": False,
                "valid": s.get("valid", True) is not False,
            }
        )
    groups: dict[int | None, list[int]] = {}
    for i, p in enumerate(points):
        if p["valid"] and p["per_user_tok_s"] is not None and p["tok_s_per_gpu"] is not None:
            groups.setdefault(p["context_tokens"], []).append(i)
    for members in groups.values():
        xy = [(points[i]["per_user_tok_s"] or 0.0, points[i]["tok_s_per_gpu"] or 0.0) for i in members]
        for i, on in zip(members, frontier(xy), strict=True):
            points[i]["on_frontier"] = on
    return {
        "gpus": gpus,
        "gpus_source": source,
        "note": UNKNOWN_NOTE if source == "unknown" else None,
        "per_user": "1000 / tpot_ms.p50",
        "points": points,
    }


__all__ = ["UNKNOWN_NOTE", "frontier", "gpu_count", "pareto_summary", "per_user_tok_s"]
