"""report.md sections beyond the step table: the knee verdict, power and server signals, the plan.

Each is a ``Section`` (summary -> Markdown or None): it renders what the summary holds and
nothing when the data is absent.
"""

from __future__ import annotations

import time

from loadgen.analysis.contracts import CapacityPlan, RunSummary, StepSummary
from loadgen.analysis.formats import fixed, percent
from loadgen.analysis.knee import deciding_detectors, rule_text
from loadgen.analysis.values import as_dict
from loadgen.report.calltables import markdown_sections
from loadgen.report.markdown import escape_cell


def _f(value: float | str | None, digits: int = 1, pct: bool = False) -> str:
    if isinstance(value, str):
        return escape_cell(value)
    return percent(value, digits) if pct else fixed(value, digits)


def _load(step: StepSummary) -> str:
    if step.get("concurrency") is not None:
        return f"C={step['concurrency']}"
    if step.get("rate") is not None:
        return f"{step['rate']:g} req/s"
    return "–"


def knee_section(summary: RunSummary) -> str | None:
    knee = summary.get("knee")
    if not isinstance(knee, dict):
        return None
    axis = knee.get("axis", "concurrency")
    where = knee.get("knee")
    head = (
        f"**Knee: {'C=' if axis == 'concurrency' else ''}{_f(where)}{' req/s' if axis == 'rate' else ''}.**"
        if where is not None
        else ("**No knee in the measured range.**" if knee.get("rule") == "none" else "**No knee located.**")
    )
    lines = ["## Saturation verdict", "", f"{head} {escape_cell(knee.get('reason', ''), limit=None)}", ""]
    stability = (summary.get("repeats") or {}).get("knee") or {}
    if stability.get("text"):
        lines += [
            f"Judged on the means of {summary['repeats']['repeats']} repeats of each load; each repeat on its own: "
            f"{escape_cell(stability['text'])}.",
            "",
        ]
    call = summary.get("knee_call_type")
    if isinstance(call, str):
        lines += [f"Call type: {escape_cell(call)} (its throughput and latencies feed the verdict and the plan).", ""]
    slo = summary.get("slo")
    if slo:
        lines += ["SLO: " + ", ".join(f"{k} ≤ {v:g}" for k, v in slo.items()), ""]
    detectors = knee.get("detectors") or {}
    if detectors:
        deciding = deciding_detectors(knee)
        lines += [
            f"{escape_cell(rule_text(knee), limit=None)} Each detector on its own (only *decides* makes the verdict; "
            "*flagged* is evidence):",
            "",
            "| Detector | Finding | At | Evidence |",
            "|---|---|---:|---|",
        ]
        for name, d in detectors.items():
            if not d.get("has_data", True):
                finding = "no data"
            elif name in deciding:
                finding = "**decides**"
            else:
                finding = "flagged" if d.get("triggered") else "no"
            lines.append(f"| {name} | {finding} | {_f(d.get('load'))} | {escape_cell(d.get('evidence', ''))} |")
        lines.append("")
    return "\n".join(lines)


def telemetry_section(summary: RunSummary) -> str | None:
    steps = summary.get("steps") or []
    keys = ("gpu_power_w", "kv_usage", "queue_len", "preemptions", "spec_accept_len", "energy_j")
    if not any(s.get(k) is not None for s in steps for k in keys):
        return None
    lines = [
        "## Power and server signals per step",
        "",
        "| Step | Load | GPU W mean / p95 | of limit | Energy J | tok/J | Power valid | KV mean / max "
        "| Queue mean / max | Preemptions | Accept len | Log events |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for s in steps:
        pw = as_dict(s.get("gpu_power_w"))
        kv = as_dict(s.get("kv_usage"))
        q = as_dict(s.get("queue_len"))
        valid = "yes" if s.get("power_valid") else f"no: {escape_cell(s.get('power_invalid_reason') or '')}"
        if s.get("gpu_power_w") is None:
            valid = "–"
        events = s.get("log_events") or {}
        ev = ", ".join(f"{escape_cell(k)}×{v}" for k, v in events.items()) or "–"
        lines.append(
            f"| {s.get('step')} | {_load(s)} | {_f(pw.get('mean'), 0)} / {_f(pw.get('p95'), 0)} "
            f"| {_f(s.get('gpu_power_frac_of_limit'), 0, pct=True)} | {_f(s.get('energy_j'), 0)} "
            f"| {_f(s.get('tokens_per_joule'), 3)} | {valid} | {_f(kv.get('mean'), 1, pct=True)} / "
            f"{_f(kv.get('max'), 1, pct=True)} | {_f(q.get('mean'))} / {_f(q.get('max'))} "
            f"| {_f(s.get('preemptions'))} | {_f(s.get('spec_accept_len'), 2)} | {ev} |"
        )
    lines += [
        "",
        "Power: all GPUs summed at each reading; the mean is time-weighted over the steady window, p95 is over "
        "the readings. Energy from the GPUs' energy counters where available, else the integral of power. A "
        "step that served no successful request has its power marked invalid (idle), never read as load.",
        "",
    ]
    skewed = power_p95_below_mean(steps)
    if skewed:
        lines += [skewed, ""]
    return "\n".join(lines)


def power_p95_below_mean(steps: list[StepSummary]) -> str:
    """A word for the steps whose GPU power p95 is below their mean, which is true of a skewed
    series, not an error: fewer than one reading in twenty is above the mean (else the p95 would be
    too), and those few spikes lift the mean past the bulk. "" when no step shows it."""
    parts = []
    for s in steps:
        pw = as_dict(s.get("gpu_power_w"))
        mean, p95, top = (pw.get(k) for k in ("mean", "p95", "max"))
        if isinstance(mean, (int, float)) and isinstance(p95, (int, float)) and p95 < mean:
            spike = f" (max {_f(top, 0)} W)" if isinstance(top, (int, float)) else ""
            parts.append(f"step {s.get('step')} ({_load(s)}): p95 {_f(p95, 0)} W < mean {_f(mean, 0)} W{spike}")
    if not parts:
        return ""
    return (
        "GPU W p95 below the mean at " + "; ".join(parts) + ". Not an error: fewer than one reading in twenty "
        "is above the mean there, so the p95 sits in the bulk, while those few short spikes are high enough to "
        "lift the mean above it."
    )


def render_plan_md(plan: CapacityPlan) -> str:
    """The capacity plan in words and numbers (``loadgen plan``, and the report's plan section)."""
    slo = plan.get("slo") or {}
    lines = ["## Capacity plan", ""]
    predicted = plan.get("predicted")
    if predicted:
        lines += [f"> **PREDICTED.** {escape_cell(predicted)} Every figure of this plan is the twin's.", ""]
    lines += ["SLO: " + (", ".join(f"{k} ≤ {v:g}" for k, v in slo.items()) or "–"), ""]
    op = plan.get("operating_point")
    if not op:
        none = "No predicted load meets the SLO." if predicted else "No measured load meets the SLO."
        lines += [f"**{none}** {escape_cell(plan.get('reason', ''))}", ""]
    else:
        axis = plan.get("axis", "concurrency")
        load = f"C={_f(op.get(axis))}" if axis == "concurrency" else f"{_f(op.get(axis), 2)} req/s"
        lines += [
            f"**{'Predicted h' if predicted else 'H'}ighest load per replica that meets the SLO: {load}** "
            f"(step {op.get('step')}{', interpolated' if op.get('interpolated') else ''}): "
            f"{_f(op.get('ok_req_s'), 2)} req/s, {_f(op.get('output_tok_s'), 0)} output tok/s; "
            f"goodput {_f(op.get('goodput_req_s'), 2)} req/s ({_f(op.get('goodput_frac'), 1, pct=True)} of requests "
            "meet every limit).",
            "",
        ]
        nxt = op.get("next_step_fails")
        if isinstance(nxt, dict):
            why = "; ".join(escape_cell(w) for w in nxt.get("why", []))
            lines += [f"The next step fails: {why}.", ""]
        per = as_dict(plan.get("per_replica"))
        headroom = plan.get("headroom")
        lines.append(
            f"- Per replica with {_f(headroom, 0, pct=True)} headroom: {_f(per.get('req_s'), 2)} req/s, "
            f"{_f(per.get('tok_s'), 0)} tok/s, {_f(per.get('concurrency'))} concurrent users"
        )
        if plan.get("replicas") is not None:
            target = (
                f"{_f(plan.get('target_rps'))} req/s"
                if plan.get("target_rps") is not None
                else f"{_f(plan.get('target_users'))} users"
            )
            lines.append(
                f"- For {target}: **{plan['replicas']} replicas, {plan.get('gpus')} GPUs** "
                f"({plan.get('gpus_per_replica')} per replica)"
            )
        energy = as_dict(plan.get("energy"))
        if energy.get("tokens_per_joule") is not None:
            lines.append(
                f"- Energy: {_f(energy.get('tokens_per_joule'), 3)} tokens/J, "
                f"{_f(energy.get('kwh_per_million_tokens'), 3)} kWh per million tokens"
            )
        cost = as_dict(plan.get("cost"))
        if cost.get("per_million_tokens") is not None:
            lines.append(
                f"- Cost: {_f(cost.get('per_million_tokens'), 3)} per million tokens at "
                f"{_f(cost.get('gpu_hour_cost'), 2)} per GPU-hour"
            )
        lines.append("")
    notes = plan.get("notes")
    if isinstance(notes, list) and notes:
        lines += ["Notes:", "", *[f"- {escape_cell(n)}" for n in notes], ""]
    return "\n".join(lines)


def plan_section(summary: RunSummary) -> str | None:
    plan = summary.get("plan")
    return render_plan_md(plan) if isinstance(plan, dict) else None


def run_events_section(summary: RunSummary) -> str | None:
    """What happened to the run itself: server down and back, workers lost."""
    events = summary.get("run_events") or []
    if not events:
        return None
    lines = ["## Run events", "", "| Time (UTC) | Event | Step | Detail |", "|---|---|---:|---|"]
    for e in events:
        when = time.strftime("%H:%M:%S", time.gmtime(e.get("t_ns", 0) / 1e9))
        step = e.get("step")
        shown = "–" if step is None else str(step)
        detail = e.get("detail") or e.get("worker") or ""
        lines.append(f"| {when} | {escape_cell(e.get('kind', ''))} | {shown} | {escape_cell(detail)} |")
    lines.append("")
    return "\n".join(lines)


LEAD_SECTIONS = (knee_section,)
TRAILING_SECTIONS = (*markdown_sections(), run_events_section, telemetry_section, plan_section)
