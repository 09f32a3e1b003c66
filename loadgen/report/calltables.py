"""The report's tables for runs that mix call types, stream kinds of output, run agent loops or
send images (``analysis.calltypes``): built once as plain text cells, rendered by report.md
(:func:`markdown_sections`) and report.html (``html``). Each table exists only when the run used
what it shows (a plain chat run has none of them), and a column the run left empty is left out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loadgen.analysis.contracts import LatencyStats, RunSummary, StepSummary
from loadgen.analysis.formats import fixed
from loadgen.analysis.values import as_dict, as_list, number, stat, steps_of
from loadgen.report.markdown import Section, escape_cell


@dataclass(frozen=True)
class Table:
    """A titled table of text cells; ``text_columns`` are left-aligned, the rest are numbers."""

    title: str
    anchor: str
    head: list[str]
    rows: list[list[str]]
    note: str = ""
    lines: list[str] = field(default_factory=list)  # sentences shown after the table
    text_columns: frozenset[int] = frozenset()


def _num(value: float | None, digits: int = 1) -> str:
    return fixed(value, digits)


def _ms(value: float | None) -> str:
    v = number(value)
    if v is None:
        return "–"
    return f"{v:,.2f}" if abs(v) < 10 else f"{v:,.1f}"


def _s(ms: float | None) -> str:
    v = number(ms)
    return "–" if v is None else f"{v / 1000:,.2f}"


def _pair(dist: LatencyStats | None) -> str:
    d = as_dict(dist)
    if number(d.get("p50")) is None and number(d.get("p99")) is None:
        return "–"
    return f"{_ms(d.get('p50'))} / {_ms(d.get('p99'))}"


def _load(step: StepSummary) -> str:
    if number(step.get("concurrency")) is not None:
        return f"C={step['concurrency']}"
    if number(step.get("rate")) is not None:
        return f"{step['rate']:g} req/s"
    return "–"


def call_type_table(summary: RunSummary) -> Table | None:
    """One row per step and call type: requests, throughput, TTFT and E2E."""
    steps = [s for s in steps_of(summary) if isinstance(s.get("by_call"), dict) and s["by_call"]]
    if not steps:
        return None
    knee_call = summary.get("knee_call_type")
    rows: list[list[str]] = []
    for s in steps:
        for name, c in as_dict(s.get("by_call")).items():
            if not isinstance(c, Mapping):
                continue
            pooling = c.get("kind") == "pooling"
            work = (
                f"{_num(c.get('inputs_s'))} inputs/s, {_num(c.get('prompt_tok_s'))} prompt tok/s"
                if pooling
                else f"{_num(c.get('output_tok_s'))} output tok/s"
            )
            rows.append(
                [
                    _num(s.get("step")),
                    _load(s),
                    escape_cell(name) + (" (knee)" if name == knee_call else ""),
                    "pooling" if pooling else "generative",
                    f"{_num(c.get('requests_ok', 0))} / {_num(c.get('requests_failed', 0))}",
                    work,
                    "–" if pooling else _pair(c.get("ttft_ms")),
                    _pair(c.get("e2e_ms")),
                ]
            )
    note = (
        "Each call type over its own requests of the step's steady window. Output tok/s: its output tokens that "
        "arrived in the window / window length. Pooling calls (embeddings, rerank) have no TTFT: their work is "
        "their inputs and prompt tokens, of successful calls that ended in the window, per second."
    )
    lines = []
    if knee_call:
        lines.append(
            f"The knee verdict and the plan are about the {escape_cell(knee_call)} calls (named with --call-type, "
            "else the call type that served the most prompt + output tokens)."
        )
    return Table(
        "By call type",
        "by-call",
        ["Step", "Load", "Call type", "Kind", "OK / failed", "Throughput", "TTFT p50/p99 ms", "E2E p50/p99 ms"],
        rows,
        note,
        lines,
        frozenset({2, 3}),
    )


def tenant_table(summary: RunSummary) -> Table | None:
    """One row per step and tenant (a ``[[tenants]]`` run): its load, requests, throughput and share,
    latencies, goodput at its own SLO and what of it broke; fairness and the tenant the knee is about."""
    steps = [s for s in steps_of(summary) if isinstance(s.get("tenants"), dict) and s.get("tenants")]
    if not steps:
        return None
    rows: list[list[str]] = []
    for s in steps:
        tenants: dict[str, Any] = s.get("tenants")  # type: ignore[assignment]
        for name, t in tenants.items():
            if not isinstance(t, Mapping):
                continue
            good: dict[str, Any] = as_dict(t.get("goodput"))
            frac = number(good.get("frac"))
            breaks: list[str] = as_list(t.get("slo_breaks"))
            if t.get("slo") is None or (not breaks and not t.get("requests_ok")):
                slo = "–"  # no SLO, or no request to judge
            else:
                slo = "breaks: " + "; ".join(map(str, breaks)) if breaks else "held"
            share = number(t.get("token_share"))
            rows.append(
                [
                    _num(s.get("step")),
                    _load(s),
                    escape_cell(name),
                    _num(t.get("demand"), 0 if number(s.get("concurrency")) is not None else 2),
                    f"{_num(t.get('requests_ok', 0))} / {_num(t.get('requests_failed', 0))}",
                    _num(t.get("output_tok_s")),
                    "–" if share is None else f"{share * 100:.0f}%",
                    _pair(t.get("ttft_ms")),
                    _pair(t.get("tpot_ms")),
                    _pair(t.get("e2e_ms")),
                    "–" if frac is None else f"{frac * 100:.0f}%",
                    escape_cell(slo),
                ]
            )
    lines = []
    fair = [f"{_load(s)} {number(s.get('fairness')):.2f}" for s in steps if number(s.get("fairness")) is not None]
    if fair:
        lines.append(
            "Fairness (Jain's index of each tenant's goodput per unit of its demand; 1 = all served alike): "
            + ", ".join(fair)
        )
    knee = summary.get("tenant_knee")
    if isinstance(knee, dict) and knee.get("reason"):
        lines.append(f"Knee: {escape_cell(knee['reason'])}.")
    note = (
        "Each tenant over its own requests of the step's steady window. Demand: its users (closed loop) or "
        "requests/s (open loop) in the step's plan. Share: of the step's output tok/s. Goodput: its successful "
        "requests that met every limit of its own SLO; the SLO column names each limit its step figure broke."
    )
    return Table(
        "By tenant",
        "by-tenant",
        [
            "Step",
            "Load",
            "Tenant",
            "Demand",
            "OK / failed",
            "Output tok/s",
            "Share",
            "TTFT p50/p99 ms",
            "TPOT p50/p99 ms",
            "E2E p50/p99 ms",
            "Goodput",
            "SLO",
        ],
        rows,
        note,
        lines,
        frozenset({2, 11}),
    )


EMPTY_CELLS = frozenset({"–", "0", "0.0%"})


def drop_empty_columns(head: list[str], rows: list[list[str]], keep: int = 2) -> tuple[list[str], list[list[str]]]:
    """``head`` and ``rows`` without the columns (after the first ``keep``) that are empty or zero in
    every row: a feature the run did not use is not a column of dashes."""
    cols = [i for i in range(len(head)) if i < keep or any(row[i] not in EMPTY_CELLS for row in rows)]
    return [head[i] for i in cols], [[row[i] for i in cols] for row in rows]


def _used_kinds(s: StepSummary) -> bool:
    """Whether a step saw output other than a plain answer: reasoning or tool calls."""
    first = (stat(s, "ttft_reasoning_ms", "p50"), stat(s, "ttft_tool_ms", "p50"))
    return any(v is not None for v in first) or bool(
        number(s.get("reasoning_tokens_mean")) or number(s.get("tool_calls"))
    )


def output_kinds_table(summary: RunSummary) -> Table | None:
    """Per step: time to the first reasoning, answer and tool-call output; reasoning and tools. None
    for a run whose answers were all plain text (the answer's TTFT is then the TTFT of the step
    table); columns of a kind the run never saw are left out."""
    steps = [s for s in steps_of(summary) if "ttft_reasoning_ms" in s]
    if not any(_used_kinds(s) for s in steps):
        return None
    rows = [
        [
            _num(s.get("step")),
            _load(s),
            _pair(s.get("ttft_ms")),
            _pair(s.get("ttft_reasoning_ms")),
            _pair(s.get("ttft_answer_ms")),
            _pair(s.get("ttft_tool_ms")),
            _num(s.get("reasoning_tokens_mean")),
            "–" if (share := number(s.get("reasoning_share"))) is None else f"{100 * share:.1f}%",
            _num(s.get("tool_calls")),
            _num(s.get("tool_args_chars_mean")),
        ]
        for s in steps
    ]
    head, rows = drop_empty_columns(
        [
            "Step",
            "Load",
            "TTFT p50/p99 ms",
            "Reasoning p50/p99 ms",
            "Answer p50/p99 ms",
            "Tool call p50/p99 ms",
            "Reasoning tok mean",
            "Reasoning share",
            "Tool calls",
            "Tool args chars",
        ],
        rows,
    )
    note = (
        "From the intended send time to the first output of each kind (over the requests that had one); TTFT is "
        "the first output of any kind. Reasoning share: the server's reasoning tokens / output tokens of the "
        "requests that reported them. Tool args: characters of the calls' arguments per request that made one."
    )
    return Table("Kinds of output", "kinds", head, rows, note)


def agent_table(summary: RunSummary) -> Table | None:
    """Per step and turn: TTFT and prompt tokens; per step: task time and complete / cut tasks."""
    steps = [s for s in steps_of(summary) if isinstance(s.get("agent"), dict)]
    if not steps:
        return None
    rows: list[list[str]] = []
    lines: list[str] = []
    for s in steps:
        agent = as_dict(s.get("agent"))
        for t in as_list(agent.get("turns")):
            if isinstance(t, Mapping):
                rows.append(
                    [
                        _num(s.get("step")),
                        _load(s),
                        _num(t.get("turn")),
                        _num(t.get("requests")),
                        _pair(t.get("ttft_ms")),
                        _num(t.get("prompt_tokens_mean"), 0),
                    ]
                )
        task = as_dict(agent.get("task_ms"))
        lines.append(
            f"Step {s.get('step')} ({_load(s)}): {_num(agent.get('tasks_complete'))} tasks complete "
            f"({_num(agent.get('tasks_failed'))} ended by a failure), {_num(agent.get('tasks_cut'))} cut; "
            f"time per task p50 / p99 {_s(task.get('p50'))} / {_s(task.get('p99'))} s."
        )
    note = (
        "Turns: the successful agent requests sent in each step's window, by turn (the task's context grows each "
        "turn). Tasks are counted in the step their first turn was sent in; a task is complete when a turn made no "
        "tool call, failed, or was the last allowed; time per task = last end - first intended send of a complete "
        "task. Cut tasks (the run or step ended first) are counted apart, never in the time."
    )
    return Table(
        "Agent tasks",
        "agent",
        ["Step", "Load", "Turn", "Requests", "TTFT p50/p99 ms", "Prompt tok mean"],
        rows,
        note,
        lines,
    )


def images_lines(summary: RunSummary) -> Table | None:
    """One line per step: image tokens per image, against the text tokens asked for."""
    steps = [s for s in steps_of(summary) if isinstance(s.get("images"), dict)]
    if not steps:
        return None
    lines = []
    for s in steps:
        im = as_dict(s.get("images"))
        est = " (estimate: the text tokens asked were estimated, no tokenizer)" if im.get("estimate") else ""
        lines.append(
            f"Step {s.get('step')} ({_load(s)}): {_num(im.get('requests'))} requests with "
            f"{_num(im.get('images'))} images; prompt tokens served {_num(im.get('prompt_tokens_mean'), 0)} vs text "
            f"tokens asked {_num(im.get('context_tokens_mean'), 0)} per request: "
            f"≈{_num(im.get('image_tokens_per_image_mean'), 0)} tokens per image{est}."
        )
    note = "Image tokens per image = (prompt tokens served - text tokens asked) / images, the mean over the requests."
    return Table("Images", "images", [], [], note, lines)


def goodput_table(summary: RunSummary) -> Table | None:
    """Requests that met every SLO limit, per step, counted from the records (``analysis.goodput``)."""
    steps = [s for s in steps_of(summary) if s.get("goodput")]
    slo = as_dict(summary.get("slo"))
    if not steps or not slo:
        return None
    keys = list(slo)
    rows = []
    for s in steps:
        g = as_dict(s.get("goodput"))
        missed = as_dict(g.get("missed_by_limit"))
        frac = number(g.get("frac"))
        rows.append(
            [
                str(s.get("step")),
                _load(s),
                _num(g.get("requests")),
                _num(g.get("met")),
                "–" if frac is None else f"{100 * frac:.1f}%",
                _num(g.get("req_s"), 2),
                _num(g.get("tok_s")),
                *(_num(missed.get(k, 0)) for k in keys),
            ]
        )
    limits = ", ".join(f"{k} ≤ {v:g}" for k, v in slo.items())
    return Table(
        "Goodput",
        "goodput",
        [
            "Step",
            "Load",
            "Requests",
            "Met all",
            "Share",
            "Goodput req/s",
            "Goodput tok/s",
            *(f"Missed {k}" for k in keys),
        ],
        rows,
        note=f"Requests sent in the steady window that met every limit ({escape_cell(limits)}), each judged on "
        "its own TTFT, TPOT, E2E and inter-chunk gaps (not bounded from percentiles). Goodput tok/s: the "
        "step's aggregate tok/s times the met requests' share of the output tokens.",
    )


def _ci(ci: dict[str, float | None] | None, digits: int = 1) -> str:
    c: dict[str, float | None] = as_dict(ci)
    mean, low, high = (number(c.get(k)) for k in ("mean", "low", "high"))
    if mean is None:
        return "–"
    if low is None or high is None:
        return f"{mean:,.{digits}f}"
    return f"{mean:,.{digits}f} [{low:,.{digits}f}–{high:,.{digits}f}]"


def repeats_table(summary: RunSummary) -> Table | None:
    """Each repeated load's figures with their 95 % intervals, and the knee's stability."""
    rep = as_dict(summary.get("repeats"))
    groups = as_list(rep.get("groups"))
    if not groups:
        return None
    rows = []
    for g in groups:
        gd = as_dict(g)
        f = as_dict(gd.get("figures"))
        rows.append(
            [
                _load(gd),
                f"{gd.get('valid_repeats')} / {gd.get('repeats')}",
                _ci(f.get("output_tok_s")),
                _ci(f.get("per_request_tok_s")),
                _ci(f.get("ttft_p50_ms")),
                _ci(f.get("ttft_p99_ms")),
                _ci(f.get("tpot_p50_ms"), 2),
                _ci(f.get("tpot_p99_ms"), 2),
                _ci(f.get("e2e_p50_ms"), 0),
            ]
        )
    knee = as_dict(rep.get("knee"))
    lines = [f"Knee verdict of each repeat on its own: {knee.get('text')}."] if knee.get("text") else []
    return Table(
        "Repeats",
        "repeats",
        [
            "Load",
            "Valid / repeats",
            "Agg tok/s",
            "Per-req tok/s",
            "TTFT p50 ms",
            "TTFT p99 ms",
            "TPOT p50 ms",
            "TPOT p99 ms",
            "E2E p50 ms",
        ],
        rows,
        note=f"Mean [95% interval] over the VALID repeats of each load: {rep.get('method')}; the repeats are "
        "the samples (one figure each), not the requests inside them. The verdict above is judged on these "
        "means, one point per load.",
        lines=lines,
    )


TABLES = (
    tenant_table,
    call_type_table,
    output_kinds_table,
    agent_table,
    images_lines,
    goodput_table,
    repeats_table,
)


def tables_of(summary: RunSummary) -> list[Table]:
    return [t for build in TABLES if (t := build(summary)) is not None]


def render_table_md(table: Table) -> str:
    lines = [f"## {table.title}", ""]
    if table.head:
        lines.append("| " + " | ".join(table.head) + " |")
        lines.append(
            "|" + "|".join("---" if i in table.text_columns or i < 2 else "---:" for i in range(len(table.head))) + "|"
        )
        lines += ["| " + " | ".join(row) + " |" for row in table.rows]
        lines.append("")
    lines += [f"- {line}" for line in table.lines]
    if table.lines:
        lines.append("")
    if table.note:
        lines += [table.note, ""]
    return "\n".join(lines)


def _section(build: Callable[[RunSummary], Table | None]) -> Section:
    def section(summary: RunSummary) -> str | None:
        table = build(summary)
        return render_table_md(table) if table is not None else None

    return section


def markdown_sections() -> Sequence[Section]:
    """The report.md sections of these tables, in order (each None when the run has no such data)."""
    return tuple(_section(build) for build in TABLES)


__all__ = [
    "TABLES",
    "Table",
    "agent_table",
    "call_type_table",
    "drop_empty_columns",
    "images_lines",
    "markdown_sections",
    "output_kinds_table",
    "render_table_md",
    "tables_of",
    "tenant_table",
]
