"""report.html's step table: every step VALID or INVALID with its reason, in grouped columns.

Two header rows (Load | status | Output tok/s | Latency p50 / p99 | Requests | Server | Power); a
column no step has a figure for is left out and said in a note instead, so the table fits a
1280 px window without scrolling sideways.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from loadgen.analysis.contracts import LatencyKey, LoadAxis, RunSummary, StepSummary
from loadgen.analysis.values import as_dict, number, stat, steps_of, summary_axis
from loadgen.report.html_common import fmt_num, fmt_pct
from loadgen.report.svg import esc


@dataclass(frozen=True)
class _Column:
    """One column of the step table: its group (the header's first row), its title, its cell."""

    group: str
    title: str
    cell: Callable[[StepSummary], str]  # the inner HTML of the cell
    text: bool = False  # left-aligned text, not a number
    tip: str = ""


def _pair(s: StepSummary, key: LatencyKey) -> str:
    return f"{fmt_num(stat(s, key, 'p50'))} / {fmt_num(stat(s, key, 'p99'))}"


def _latency(key: LatencyKey) -> Callable[[StepSummary], str]:
    return lambda s: _pair(s, key)


def _status(s: StepSummary) -> str:
    valid = s.get("valid", True) is not False
    status = (
        "<span class='tag ok'>VALID</span>"
        if valid
        else f"<span class='tag bad'>INVALID</span><small>{esc(s.get('invalid_reason') or 'no reason given')}</small>"
    )
    timing = as_dict(s.get("timing"))
    if timing.get("uncertain"):
        status += f"<span class='tag bad'>TIMING</span><small>{esc(timing.get('reason') or '')}</small>"
    return status


def _power_cell(s: StepSummary) -> str:
    w = fmt_num(stat(s, "gpu_power_w", "mean"), 0)
    if s.get("power_valid") is False:
        why = esc(s.get("power_invalid_reason") or "invalid")
        w = f"<span title=\"{why}\">{w} <span class='tag warn'>invalid</span></span>"
    return w


def _step_columns(steps: Sequence[StepSummary], axis: LoadAxis) -> tuple[list[_Column], list[str]]:
    """The step table's columns, and a note for each left out because every step has the same
    nothing in it (a run without GPU telemetry has no power columns, one without server metrics no
    KV or queue column; no preemption anywhere is said in words, not as a column of zeros)."""

    def has(get: Callable[[StepSummary], float | None]) -> bool:
        return any(get(s) is not None for s in steps)

    cols = [_Column("Load", "step", lambda s: esc(s.get("step", "?")))]
    if any(s.get("context_tokens") is not None for s in steps):
        cols.append(_Column("Load", "context", lambda s: fmt_num(s.get("context_tokens"))))
    cols.append(_Column("Load", "C" if axis == "concurrency" else "req/s", lambda s: fmt_num(s.get(axis))))
    cols.append(_Column("", "status", _status, text=True))
    cols += [
        _Column("Output tok/s", "total", lambda s: fmt_num(s.get("output_tok_s"), 0), tip="output tok/s of the step"),
        _Column("Output tok/s", "per req", lambda s: fmt_num(s.get("per_request_tok_s"), 1)),
    ]
    latencies: tuple[tuple[LatencyKey, str], ...] = (
        ("ttft_ms", "TTFT"),
        ("itl_ms", "ITL"),
        ("tpot_ms", "TPOT"),
        ("e2e_ms", "E2E"),
    )
    for key, title in latencies:
        # TTFT and E2E always (a run where nothing succeeded shows dashes); ITL and TPOT when measured
        if key in ("ttft_ms", "e2e_ms") or any(stat(s, key, "p50") is not None for s in steps):
            cols.append(_Column("Latency p50 / p99, ms", title, _latency(key)))
    cols += [
        _Column("Requests", "ok", lambda s: fmt_num(s.get("requests_ok"))),
        _Column("Requests", "failed", lambda s: fmt_num(s.get("requests_failed"))),
    ]
    notes: list[str] = []
    if has(lambda s: stat(s, "kv_usage", "max")):
        cols.append(_Column("Server", "KV max", lambda s: fmt_pct(stat(s, "kv_usage", "max"))))
    if has(lambda s: stat(s, "queue_len", "mean")):
        cols.append(_Column("Server", "queue", lambda s: fmt_num(stat(s, "queue_len", "mean"), 1), tip="mean waiting"))
    preempt = [v for s in steps if (v := number(s.get("preemptions"))) is not None]
    if any(preempt):
        cols.append(_Column("Server", "preempt.", lambda s: fmt_num(s.get("preemptions"))))
    elif preempt:
        notes.append("No step had a retraction or preemption.")
    if any(isinstance(s.get("log_events"), dict) and s["log_events"] for s in steps):

        def events(s: StepSummary) -> str:
            return esc(", ".join(f"{k} ×{v}" for k, v in as_dict(s.get("log_events")).items()))

        cols.append(_Column("Server", "log events", events, text=True))
    if has(lambda s: stat(s, "gpu_power_w", "mean")):
        cols.append(_Column("Power", "GPU W", _power_cell, tip="all GPUs, steady-window mean"))
    else:
        notes.append("No GPU telemetry: no power columns.")
    if has(lambda s: number(s.get("tokens_per_joule"))):
        cols.append(_Column("Power", "tok/J", lambda s: fmt_num(s.get("tokens_per_joule"), 2)))
    return cols, notes


def _title_attr(tip: str) -> str:
    return f' title="{esc(tip)}"' if tip else ""


def steps_table_html(summary: RunSummary) -> str:
    """Every step, VALID or INVALID with its reason, in columns grouped under a two-row header
    (Load | status | Throughput | Latency p50 / p99 | Requests | Server | Power); a column no step has
    a figure for is left out, so the table fits a 1280 px window without scrolling sideways."""
    steps = steps_of(summary)
    if not steps:
        return "<h2 id=steps>Steps</h2><p>No steps were recorded.</p>"
    axis = summary_axis(summary)
    cols, notes = _step_columns(steps, axis)
    groups: list[tuple[str, int]] = []
    for c in cols:
        if groups and groups[-1][0] == c.group and c.group:
            groups[-1] = (c.group, groups[-1][1] + 1)
        else:
            groups.append((c.group, 1))
    top = "".join(f"<th colspan={n} class=group>{esc(g)}</th>" if g else "<th class=group></th>" for g, n in groups)
    sub = "".join(f"<th{'' if c.text else ' class=n'}{_title_attr(c.tip)}>{esc(c.title)}</th>" for c in cols)
    rows = []
    for s in steps:
        valid = s.get("valid", True) is not False
        cells = "".join(
            f"<td class={'status' if c.title == 'status' else 'txt' if c.text else 'n'}>{c.cell(s)}</td>" for c in cols
        )
        rows.append(f"<tr class={'valid' if valid else 'invalid'}>{cells}</tr>")
    note = " ".join(notes)
    return (
        "<h2 id=steps>Steps</h2><p class=note>Latencies over the successful requests sent in each step's steady "
        "window (ITL: the gap between successive chunks that carry text); a step is INVALID when its numbers "
        f"cannot be trusted (the reason is given).{' ' + esc(note) if note else ''}</p>"
        f"<div class=scroll id=steps-table><table class=steps><thead><tr class=groups>{top}</tr><tr>{sub}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


__all__ = ["steps_table_html"]
