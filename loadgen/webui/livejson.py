"""What ``/loadgen/live.json`` holds, as the LLM tab draws it: its types, one step's row in the
page's names (``live_step``, from a row as ``summary.json`` holds it), the knee and Pareto parts,
and the payload before any run (``empty_payload``, every key, empty).

The figures are the report's, renamed and unwrapped for the page (tok/s; latencies in ms); nothing
here computes one. Nothing here imports Flask or Locust.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from loadgen.analysis.contracts import KneeRule, KneeVerdict, LoadAxis, ParetoSummary, StepSummary
from loadgen.analysis.load import Step
from loadgen.analysis.values import as_dict, number, stat

REPORT_FILES = ("report.html", "report.md", "summary.json", "steps.csv")  # linked once they exist


class _LiveKneeRequired(TypedDict):
    concurrency: float | None
    rate: float | None
    reason: str | None


class LiveKnee(_LiveKneeRequired, total=False):
    """The knee the tab shows: the verdict's load and reason, or only a reason it has none yet."""

    axis: LoadAxis | None
    rule: KneeRule | None


class LiveStep(TypedDict):
    """One step as the page draws it: the report's figures of the step (tok/s; latencies in ms)
    over what has arrived, and how far it is."""

    step: int
    concurrency: int | None
    rate: float | None
    context_tokens: int | None
    phase: str  # "warm-up", "steady" or "ended"
    window_s: float | None  # the steady window so far (the report's window_s once ended)
    ok: int  # every request of the step so far, warm-up included (progress)
    failed: int
    requests_ok: int  # the report's: sent inside the steady window
    requests_failed: int
    requests_cancelled: int
    window_requests: int
    tok_s: float | None  # output_tok_s
    req_tok_s: float | None  # per_request_tok_s
    ttft_p50: float | None
    ttft_p90: float | None
    ttft_p99: float | None
    itl_p50: float | None
    itl_p90: float | None
    itl_p99: float | None
    tpot_p50: float | None
    tpot_p90: float | None
    tpot_p99: float | None
    e2e_p50: float | None
    e2e_p99: float | None
    errors: dict[str, int]  # failures in the window by class (the report's)
    valid: bool
    invalid_reason: str | None
    timing_uncertain: bool
    timing_reason: str | None
    client_cpu: float | None  # the busiest process's mean share of a core
    client_processes: int | None
    loop_lag_p99_ms: float | None
    kv_usage_mean: float | None  # 0-1
    kv_usage_max: float | None
    queue_len_mean: float | None
    preemptions: float | None
    gpu_power_w: float | None  # mean total over the window
    gpu_power_limit_w: float | None
    power_valid: bool | None
    power_invalid_reason: str | None
    tokens_per_joule: float | None
    per_user_tok_s: float | None  # the Pareto x: 1000 / TPOT p50
    tok_s_per_gpu: float | None  # the Pareto y
    tenants: dict[str, LiveTenant] | None  # a [[tenants]] run: each tenant's figures of the step
    fairness: float | None


class LiveTenant(TypedDict):
    """One tenant of a step on the page (the report's "By tenant" row)."""

    demand: float | None
    ok: int
    failed: int
    tok_s: float | None
    share: float | None
    ttft_p50: float | None
    ttft_p99: float | None
    tpot_p99: float | None
    e2e_p99: float | None
    goodput_frac: float | None
    slo_breaks: list[str] | None  # None: no SLO of its own


def live_tenants(row: StepSummary) -> dict[str, LiveTenant] | None:
    tenants = row.get("tenants")
    if not tenants:
        return None
    out: dict[str, LiveTenant] = {}
    for name, t in tenants.items():
        good = t.get("goodput")
        out[name] = {
            "demand": number(t.get("demand")),
            "ok": int(t.get("requests_ok") or 0),
            "failed": int(t.get("requests_failed") or 0),
            "tok_s": number(t.get("output_tok_s")),
            "share": number(t.get("token_share")),
            "ttft_p50": stat(t, "ttft_ms", "p50"),
            "ttft_p99": stat(t, "ttft_ms", "p99"),
            "tpot_p99": stat(t, "tpot_ms", "p99"),
            "e2e_p99": stat(t, "e2e_ms", "p99"),
            "goodput_frac": number(good["frac"]) if good is not None else None,
            "slo_breaks": list(t["slo_breaks"]) if "slo_breaks" in t else None,
        }
    return out


def live_step(row: StepSummary, phase: str, ok: int, failed: int, point: dict[str, Any] | None) -> LiveStep:
    """The page's view of one report step row (``row`` as ``summary.json`` holds it)."""
    timing = as_dict(row.get("timing"))
    cpu = as_dict(row.get("client_cpu"))
    kv = as_dict(row.get("kv_usage"))
    queue = as_dict(row.get("queue_len"))
    power = as_dict(row.get("gpu_power_w"))
    requests_ok = int(row.get("requests_ok") or 0)
    requests_failed = int(row.get("requests_failed") or 0)
    cancelled = int(row.get("requests_cancelled") or 0)
    window_s = number(row.get("window_s"))
    return {
        "step": int(row["step"]),
        "concurrency": row.get("concurrency"),
        "rate": row.get("rate"),
        "context_tokens": row.get("context_tokens"),
        "phase": phase,
        "window_s": window_s if window_s is not None and window_s > 0 else None,
        "ok": ok,
        "failed": failed,
        "requests_ok": requests_ok,
        "requests_failed": requests_failed,
        "requests_cancelled": cancelled,
        "window_requests": requests_ok + requests_failed + cancelled,
        "tok_s": number(row.get("output_tok_s")),
        "req_tok_s": number(row.get("per_request_tok_s")),
        "ttft_p50": stat(row, "ttft_ms", "p50"),
        "ttft_p90": stat(row, "ttft_ms", "p90"),
        "ttft_p99": stat(row, "ttft_ms", "p99"),
        "itl_p50": stat(row, "itl_ms", "p50"),
        "itl_p90": stat(row, "itl_ms", "p90"),
        "itl_p99": stat(row, "itl_ms", "p99"),
        "tpot_p50": stat(row, "tpot_ms", "p50"),
        "tpot_p90": stat(row, "tpot_ms", "p90"),
        "tpot_p99": stat(row, "tpot_ms", "p99"),
        "e2e_p50": stat(row, "e2e_ms", "p50"),
        "e2e_p99": stat(row, "e2e_ms", "p99"),
        "errors": dict(as_dict(row.get("errors"))),
        "valid": row.get("valid") is not False,
        "invalid_reason": row.get("invalid_reason"),
        "timing_uncertain": bool(timing.get("uncertain")),
        "timing_reason": timing.get("reason"),
        "client_cpu": number(cpu.get("mean")),
        "client_processes": cpu.get("processes"),
        "loop_lag_p99_ms": stat(row, "loop_lag_ms", "p99"),
        "kv_usage_mean": number(kv.get("mean")),
        "kv_usage_max": number(kv.get("max")),
        "queue_len_mean": number(queue.get("mean")),
        "preemptions": number(row.get("preemptions")),
        "gpu_power_w": number(power.get("mean")),
        "gpu_power_limit_w": number(row.get("gpu_power_limit_w")),
        "power_valid": row.get("power_valid"),
        "power_invalid_reason": row.get("power_invalid_reason"),
        "tokens_per_joule": number(row.get("tokens_per_joule")),
        "per_user_tok_s": number(point.get("per_user_tok_s")) if point else None,
        "tok_s_per_gpu": number(point.get("tok_s_per_gpu")) if point else None,
        "tenants": live_tenants(row),
        "fairness": number(row.get("fairness")),
    }


def empty_payload() -> dict[str, Any]:
    """What live.json answers before any run: every key, empty."""
    return {
        "run_id": None,
        "source": "live",
        "elapsed_s": 0.0,
        "current": None,
        "totals": {"requests_ok": 0, "requests_failed": 0, "requests_cancelled": 0},
        "steps": [],
        "pareto": pareto_payload({}),
        "errors": {},
        "error_samples": {},
        "power": {},
        "power_total": [],
        "power_limit_w": {},
        "power_limit_total_w": None,
        "kv": [],
        "queue": [],
        "running": [],
        "preemptions": [],
        "server_samples": False,
        "logs": [],
        "log_counts": {},
        "workers": {},
        "problems": [],
        "knee": None,
        "reports": {},
    }


def step_phase(step: Step, now: int) -> str:
    """Where ``step`` is at ``now`` (ns): "warm-up", "steady" or "ended"."""
    if step.end_reason is not None:
        return "ended"
    return "steady" if step.steady_logged and now >= step.steady_ns else "warm-up"


def pareto_payload(pareto: ParetoSummary | dict[str, Any]) -> dict[str, Any]:
    """The Pareto part of the payload from a summary's ``pareto`` (every key; no points if empty)."""
    return {
        "gpus": pareto.get("gpus"),
        "gpus_source": pareto.get("gpus_source"),
        "note": pareto.get("note"),
        "per_user": pareto.get("per_user"),
        "points": [dict(p) for p in pareto.get("points", [])],
    }


def knee_from_run_dir(run_dir: Path) -> LiveKnee | None:
    """The knee verdict of the run so far as the report computes it (loads the whole run)."""
    from loadgen.analysis.pipeline import summarise

    try:
        _, summary = summarise(run_dir)
    except Exception as exc:  # a run directory mid-write: say why, try again after the next step
        return {"concurrency": None, "rate": None, "reason": f"not available yet: {exc}"}
    return knee_fields(as_dict(summary.get("knee")))


def knee_fields(knee: KneeVerdict) -> LiveKnee:
    """The page's knee from a report's verdict (its load, axis, rule and reason)."""
    return {
        "concurrency": knee.get("concurrency"),
        "rate": knee.get("rate"),
        "axis": knee.get("axis"),
        "rule": knee.get("rule"),
        "reason": knee.get("reason"),
    }
