"""Pass/fail thresholds of a run (``--fail-on``, ``--abort-on``): parsed once, judged from summary.json.

Syntax: comma-separated ``[run:]METRIC OP VALUE[UNIT]``, each one a *breach* condition (the run
fails when it holds), e.g. ``ttft_p99>2s,tpot_p99>50ms,error_rate>1%,invalid_steps>0``.

=====================  ==========  ============  ===============================================
metric                 unit        scope         value judged
=====================  ==========  ============  ===============================================
``ttft|itl|tpot|e2e``  ms, s, us   step          the step's latency (``_mean``, ``_p50``, ``_p90``
``_mean|_p50|..p99``   (required)                or ``_p99``; the names and units of ``--slo``)
``error_rate``         %           step or run   failed / (ok + failed) requests; a cancelled call
                                                 (Ctrl-C, a user stopped) is not a failure
``output_tok_s``       none        step or run   aggregate output tok/s; ``run:``: the peak over
                                                 the valid steps
``goodput_share``      %           step          the step's ``goodput_frac`` (requests meeting
                                                 every ``--slo`` limit); skipped when the summary
                                                 has none (no ``--slo``)
``invalid_steps``      none        run           steps marked INVALID
=====================  ==========  ============  ===============================================

Operators: ``>``, ``>=``, ``<``, ``<=``. Scope: a step threshold is judged on every *valid* step
and is breached when any of them breaches (the worst step is named); ``run:`` judges the whole run
(warm-up included, as ``totals``). A threshold with nothing to judge (no valid step, a latency
the run did not measure) counts as breached in the final verdict, so a run that measured nothing
cannot pass a gate; during the ramp (``--abort-on``) it is left alone until a value exists.

The text is read in ``spec.gates`` (where it enters: a flag, a scenario's [gate], a manifest);
here a summary and :class:`Threshold` items go in, JSON-ready results come out. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, TypedDict

from loadgen.analysis.values import number, stat
from loadgen.spec.gates import Op, Scope, Threshold, Thresholds, is_latency, parse_thresholds

Source = Literal["fail_on", "abort_on"]
Status = Literal["pass", "fail", "no_data", "skipped"]
ABORT_EVENT = "aborted"  # the events.jsonl kind written when an --abort-on threshold stops the ramp

# ------------------------------------------------------------------------------------ evaluation


class StepJudgement(TypedDict):
    """One (step, threshold) pair: the step's value and whether it breaches (JUnit: one testcase)."""

    step: int | None
    where: str  # "C=64", "rate=2/s", with ", context 4000" in a matrix
    value: float | None
    breached: bool
    margin: float | None  # value - limit, in the threshold's unit
    margin_rel: float | None  # value / limit - 1 (None when the limit is 0)
    message: str


class ThresholdResult(TypedDict):
    """One threshold judged over the run: ``value``/``step``/``where`` of its worst step (step
    scope) or of the run; ``status`` pass, fail, no_data (nothing to judge: fails the verdict) or
    skipped (``goodput_share`` without goodput figures: left out of the verdict)."""

    threshold: str
    source: Source
    metric: str
    op: Op
    limit: float
    unit: str
    scope: Scope
    status: Status
    breached: bool
    value: float | None
    step: int | None
    where: str | None
    margin: float | None
    margin_rel: float | None
    message: str
    steps: list[StepJudgement]


class ThresholdVerdict(TypedDict):
    """``summary["thresholds"]``: ``verdict`` "pass" or "fail"; ``breached``: how many thresholds;
    ``aborted_by``: the ``--abort-on`` threshold that stopped the ramp (and the step it judged)."""

    verdict: Literal["pass", "fail"]
    breached: int
    results: list[ThresholdResult]
    aborted_by: str | None
    aborted_step: int | None


def where(step: Mapping[str, Any]) -> str:
    """A step named by its load: ``C=64``, ``rate=2/s``; ``, context 4000`` in a matrix."""
    if step.get("concurrency") is not None:
        text = f"C={step['concurrency']}"
    elif step.get("rate") is not None:
        text = f"rate={number(step['rate']) or 0:g}/s"
    else:
        text = f"step {step.get('step')}"
    if step.get("context_tokens") is not None:
        text += f", context {step['context_tokens']}"
    return text


def _error_pct(ok: Any, failed: Any) -> float | None:
    n_ok, n_failed = number(ok) or 0.0, number(failed) or 0.0
    return 100.0 * n_failed / (n_ok + n_failed) if n_ok + n_failed > 0 else None


def step_value(t: Threshold, step: Mapping[str, Any]) -> float | None:
    """The value ``t`` judges in one step summary, in ``t.unit``; None when not measured. A tenant's
    threshold (``tenant:chat:ttft_p99>2s``) reads that tenant's figures of the step (``tenants``),
    its goodput share at its own SLO."""
    if t.tenant is not None:
        tenant = (step.get("tenants") or {}).get(t.tenant)
        if not isinstance(tenant, Mapping) or not tenant.get("demand"):
            return None  # the tenant sent nothing in this step
        if t.metric == "goodput_share":
            frac = number((tenant.get("goodput") or {}).get("frac"))
            return None if frac is None else 100.0 * frac
        step = tenant
    if is_latency(t.metric):
        name, part = t.metric.rsplit("_", 1)
        return stat(step, f"{name}_ms", part)
    if t.metric == "error_rate":
        return _error_pct(step.get("requests_ok"), step.get("requests_failed"))
    if t.metric == "output_tok_s":
        return number(step.get("output_tok_s"))
    if t.metric == "goodput_share":
        frac = number(step.get("goodput_frac"))
        return None if frac is None else 100.0 * frac
    raise ValueError(f"{t.metric} is not judged per step")


def run_value(t: Threshold, summary: Mapping[str, Any]) -> float | None:
    """The value a ``run:`` threshold judges, from the summary's steps and totals."""
    steps: Sequence[Mapping[str, Any]] = summary.get("steps") or []
    totals: Mapping[str, Any] = summary.get("totals") or {}
    if t.metric == "invalid_steps":
        return float(sum(1 for s in steps if s.get("valid") is False))
    if t.metric == "error_rate":
        cancelled = number((totals.get("errors") or {}).get("cancelled")) or 0.0
        ok = number(totals.get("requests_ok")) or 0.0
        failed = (number(totals.get("requests_failed")) or 0.0) - cancelled
        return _error_pct(ok, failed)
    if t.metric == "output_tok_s":
        rated = [v for s in steps if s.get("valid") and (v := number(s.get("output_tok_s"))) is not None]
        return max(rated) if rated else None
    raise ValueError(f"{t.metric} is not judged over the run")


def _fmt(value: float, unit: str) -> str:
    if unit == "%":
        return f"{value:,.2f}%" if abs(value) < 10 else f"{value:,.1f}%"
    if unit == "steps":
        n = int(value)
        return f"{n} step" if n == 1 else f"{n} steps"
    digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2
    return f"{value:,.{digits}f} {unit}"


def _margin(t: Threshold, value: float) -> tuple[float, float | None, str]:
    """value - limit, value / limit - 1, and how a person reads it: "+21.6%", "+2.2 pp", "+2"."""
    margin = value - t.limit
    rel = value / t.limit - 1 if t.limit else None
    if t.unit == "%":
        text = f"{margin:+.2f} pp" if abs(margin) < 10 else f"{margin:+.1f} pp"
    elif t.unit == "steps":
        text = f"{margin:+g}"
    elif rel is not None:
        text = f"{rel:+.1%}"
    else:
        text = f"{margin:+g} {t.unit}"
    return margin, rel, text


def message(t: Threshold, value: float | None, at: str | None) -> str:
    """``ttft_p99 2,431 ms > 2,000 ms (+21.6%) at C=64`` (the operator is the threshold's own when
    it holds, its opposite when it does not: ``ttft_p99 1,200 ms <= 2,000 ms``)."""
    suffix = f" at {at}" if at else ""
    name = t.metric if t.tenant is None else f"tenant {t.tenant} {t.metric}"
    if value is None:
        return f"{name} not measured{suffix}"
    margin = _margin(t, value)[2]
    shown_op = t.op if t.breached_by(value) else {">": "<=", ">=": "<", "<": ">=", "<=": ">"}[t.op]
    return f"{name} {_fmt(value, t.unit)} {shown_op} {_fmt(t.limit, t.unit)} ({margin}){suffix}"


def _judge_step(t: Threshold, step: Mapping[str, Any]) -> StepJudgement:
    value = step_value(t, step)
    at = where(step)
    margin, rel = (None, None) if value is None else _margin(t, value)[:2]
    return {
        "step": step.get("step"),
        "where": at,
        "value": value,
        "breached": value is not None and t.breached_by(value),
        "margin": margin,
        "margin_rel": rel,
        "message": message(t, value, at),
    }


def _worst(t: Threshold, judged: Sequence[StepJudgement]) -> StepJudgement | None:
    """The step furthest on the breaching side of the limit (closest to it when none breaches)."""
    measured = [j for j in judged if j["value"] is not None]
    if not measured:
        return None
    sign = 1.0 if t.op in (">", ">=") else -1.0
    return max(measured, key=lambda j: sign * (j["value"] or 0.0))


def evaluate(
    summary: Mapping[str, Any],
    thresholds: Iterable[Threshold],
    source: Source = "fail_on",
    *,
    steps: Sequence[Mapping[str, Any]] | None = None,
) -> list[ThresholdResult]:
    """Judge each threshold on ``summary`` (``steps``: the step summaries to judge, default every
    step of the summary; only the valid ones count). See the module docstring for the rules."""
    all_steps: Sequence[Mapping[str, Any]] = (summary.get("steps") or []) if steps is None else steps
    valid = [s for s in all_steps if s.get("valid")]
    out: list[ThresholdResult] = []
    for t in thresholds:
        judged: list[StepJudgement] = []
        if t.scope == "run":
            value = run_value(t, summary)
            at: str | None = None
            step_no = None
        else:
            judged = [_judge_step(t, s) for s in valid]
            worst = _worst(t, judged)
            value = worst["value"] if worst else None
            at = worst["where"] if worst else None
            step_no = worst["step"] if worst else None
        if value is None:
            skipped = t.metric == "goodput_share"
            status: Status = "skipped" if skipped else "no_data"
            why = (
                "the summary has no goodput figures (give --slo); skipped"
                if skipped
                else ("no valid step to judge" if t.scope == "step" and not valid else f"{t.metric} not measured")
            )
            if t.tenant is not None and not any(t.tenant in (s.get("tenants") or {}) for s in all_steps):
                names = sorted({n for s in all_steps for n in (s.get("tenants") or {})})
                status, skipped = "no_data", False
                why = f"no tenant {t.tenant!r} in this run" + (f" (its tenants: {', '.join(names)})" if names else "")
            elif t.tenant is not None and skipped:
                why = f"tenant {t.tenant} has no SLO of its own (slo = ... in its [[tenants]] table); skipped"
            margin = rel = None
            text = f"{t.text}: {why}"
        else:
            status = "fail" if t.breached_by(value) else "pass"
            margin, rel, _ = _margin(t, value)
            text = message(t, value, at)
        out.append(
            {
                "threshold": t.text,
                "source": source,
                "metric": t.metric,
                "op": t.op,
                "limit": t.limit,
                "unit": t.unit,
                "scope": t.scope,
                "status": status,
                "breached": status in ("fail", "no_data"),
                "value": value,
                "step": step_no,
                "where": at,
                "margin": margin,
                "margin_rel": rel,
                "message": text,
                "steps": judged,
            }
        )
    return out


def first_breach(results: Iterable[ThresholdResult]) -> ThresholdResult | None:
    """The first threshold measured past its limit (no_data does not count: ``--abort-on`` waits
    for a value)."""
    return next((r for r in results if r["status"] == "fail"), None)


def verdict(
    results: list[ThresholdResult], aborted_by: str | None = None, aborted_step: int | None = None
) -> ThresholdVerdict:
    breached = sum(1 for r in results if r["breached"])
    return {
        "verdict": "fail" if breached or aborted_by else "pass",
        "breached": breached,
        "results": results,
        "aborted_by": aborted_by,
        "aborted_step": aborted_step,
    }


def judge(
    summary: Mapping[str, Any],
    fail_on: Thresholds | str | None,
    abort_on: Thresholds | str | None,
    events: Iterable[Mapping[str, Any]],
) -> ThresholdVerdict | None:
    """The verdict of a run's ``--fail-on`` and ``--abort-on`` on its summary: thresholds already
    read, or the text a manifest keeps; the ``aborted`` event among ``events`` (the run's own,
    events.jsonl) names what stopped the ramp. None when the run has no thresholds. Raises
    ThresholdError for a text that does not read."""
    results: list[ThresholdResult] = []
    if fail_on:
        results += evaluate(summary, _read(fail_on, "--fail-on"), "fail_on")
    if abort_on:
        results += evaluate(summary, _read(abort_on, "--abort-on"), "abort_on")
    aborted = next((e for e in events if e.get("kind") == ABORT_EVENT), None)
    if not results and aborted is None:
        return None
    if aborted is None:
        return verdict(results)
    step = aborted.get("step")
    return verdict(results, str(aborted.get("threshold")), step if isinstance(step, int) else None)


def _read(thresholds: Thresholds | str, flag: str) -> tuple[Threshold, ...]:
    return (thresholds if isinstance(thresholds, Thresholds) else parse_thresholds(thresholds, flag)).items


def verdict_lines(v: Mapping[str, Any]) -> list[str]:
    """The verdict in plain lines (the console, report.md, the GitHub step summary): a headline,
    then one line per threshold, breached first."""
    results: list[Mapping[str, Any]] = v.get("results") or []
    n = len(results)
    breached = int(v.get("breached") or 0)
    if v.get("verdict") == "fail":
        head = f"FAIL: {breached} of {n} threshold{'s' if n != 1 else ''} breached"
    else:
        head = f"PASS: {n} threshold{'s' if n != 1 else ''} met"
    if v.get("aborted_by"):
        head += f"; the ramp was aborted by --abort-on {v['aborted_by']}"
    lines = [head]
    for r in sorted(results, key=lambda r: not r.get("breached")):
        mark = {"fail": "BREACHED", "no_data": "BREACHED", "pass": "ok", "skipped": "skipped"}.get(
            str(r.get("status")), "?"
        )
        scope = "run" if r.get("scope") == "run" else "worst step"
        flag = "--abort-on" if r.get("source") == "abort_on" else "--fail-on"
        lines.append(f"{mark} {r.get('threshold')} ({flag}, {scope}): {r.get('message')}")
    return lines


__all__ = [
    "ABORT_EVENT",
    "StepJudgement",
    "ThresholdResult",
    "ThresholdVerdict",
    "evaluate",
    "first_breach",
    "judge",
    "message",
    "verdict",
    "verdict_lines",
    "where",
]
