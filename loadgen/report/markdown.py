"""report.md: the human report of one run, rendered from its summary alone.

Title with the label; the run's server URL, model, transport and date; the step table (the
matrix-benchmark layout: context, concurrency, aggregate and per-request tok/s, wall time, prompt
tokens, then TTFT/ITL/TPOT/E2E p50/p99, ok/failed); errors by class with one sample message each;
invalid steps with their reasons. Every server-provided text is escaped for a table cell.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from loadgen.analysis.contracts import LatencyStats, RunSummary, StepSummary
from loadgen.analysis.formats import fixed
from loadgen.analysis.thresholds import verdict_lines

Section = Callable[[RunSummary], "str | None"]
"""An extra report section: summary -> Markdown text (with its own heading), or None to skip."""

MAX_MESSAGE_CHARS = 300
_ENTITY = re.compile(r"&(?=#?\w+;)")
_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")


def escape_cell(text: object, limit: int | None = MAX_MESSAGE_CHARS) -> str:
    """One-line text safe inside a Markdown table cell: pipes escaped, newlines and runs of white
    space made one space, HTML tags and entities neutralised, cut at ``limit`` characters (None:
    never, for the report's own sentences such as the verdict)."""
    s = str(text)
    s = s.replace("\\", "\\\\").replace("|", "\\|")
    s = _ENTITY.sub("&amp;", s)
    s = _TAG_START.sub("&lt;", s)  # "<b", "</", "<!": would be read as HTML; "3 < 5" stays
    s = " ".join(s.split())  # newlines, tabs and runs of spaces -> one space
    if limit is not None and len(s) > limit:
        s = s[: limit - 1] + "…"
    return s


def _num(value: float | str | None, digits: int = 1) -> str:
    return escape_cell(value) if isinstance(value, str) else fixed(value, digits)


def _ms(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:,.2f}" if abs(value) < 10 else f"{value:,.1f}"


def _pair(dist: LatencyStats | None) -> str:
    if not isinstance(dist, dict):
        return "–"
    return f"{_ms(dist.get('p50'))} / {_ms(dist.get('p99'))}"


def _load(step: StepSummary) -> str:
    if step.get("concurrency") is not None:
        return _num(step["concurrency"])
    if step.get("rate") is not None:
        return f"{_num(step['rate'], 2)} req/s"
    return "–"


def _header(summary: RunSummary) -> list[str]:
    title = summary.get("label") or summary.get("run_id") or "run"
    lines = [f"# Load test report: {escape_cell(title)}", ""]
    lines += predicted_block(summary)
    facts = [
        ("Run", summary.get("run_id")),
        ("Server", summary.get("url")),
        ("Model", summary.get("model")),
        ("Transport", summary.get("transport")),
        ("Date", summary.get("created")),
    ]
    for name, value in facts:
        if value is not None:
            lines.append(f"- {name}: {escape_cell(value)}")
    totals = summary.get("totals", {})
    lines.append(
        f"- Requests: {_num(totals.get('records', 0))} recorded, {_num(totals.get('requests_ok', 0))} ok, "
        f"{_num(totals.get('requests_failed', 0))} failed; steps: {_num(totals.get('steps', 0))} "
        f"({_num(totals.get('valid_steps', 0))} valid)"
    )
    pooling_peak = _pooling_peak(summary)
    if pooling_peak:
        lines.append(pooling_peak)
    elif totals.get("peak_output_tok_s") is not None:
        where = (
            f"C={totals['peak_concurrency']}"
            if totals.get("peak_concurrency") is not None
            else (f"step {totals.get('peak_step')}")
        )
        lines.append(f"- Peak aggregate throughput: {_num(totals['peak_output_tok_s'])} tok/s at {where}")
    if totals.get("skipped_lines"):
        lines.append(f"- Skipped {totals['skipped_lines']} unreadable line(s) (a torn last line after a kill)")
    stop = stopped_early(summary)
    if stop:
        lines.append(f"- **Stopped early**: {escape_cell(stop)}")
    lines.append("")
    return lines


# run events that end a ramp because it cannot succeed (loadgen.run.ramp's guard)
STOP_EVENTS = ("endpoint_missing", "requests_refused")


def stopped_early(summary: RunSummary) -> str | None:
    """Why the ramp stopped before its plan ended, when it could not succeed (the event's one line)."""
    for e in summary.get("run_events") or []:
        if e.get("kind") in STOP_EVENTS and e.get("detail"):
            return str(e["detail"])
    return None


def _pooling_peak(summary: RunSummary) -> str | None:
    """The headline of a run whose knee is about a pooling call type (embeddings, rerank): its peak
    prompt tok/s over the valid steps, not the output tok/s it does not produce."""
    call = summary.get("knee_call_type")
    if not call:
        return None
    best: tuple[float, StepSummary] | None = None
    for s in summary.get("steps", []):
        c = (s.get("by_call") or {}).get(call)
        if not s.get("valid") or not isinstance(c, dict) or c.get("kind") != "pooling":
            continue
        rate = c.get("prompt_tok_s")
        if rate is not None and (best is None or rate > best[0]):
            best = (rate, s)
    if best is None:
        return None
    rate, s = best
    where = f"C={s['concurrency']}" if s.get("concurrency") is not None else f"step {s.get('step')}"
    return f"- Peak {escape_cell(call)} throughput: {_num(rate)} prompt tok/s at {where}"


_STEP_COLUMNS = (
    "Step",
    "Context",
    "C",
    "Agg tok/s",
    "Per-req tok/s",
    "Wall s",
    "Prompt tok asked / served",
    "Tok/chunk",
    "TTFT p50/p99 ms",
    "ITL p50/p99 ms",
    "TPOT p50/p99 ms",
    "E2E p50/p99 ms",
    "OK / failed",
    "Valid",
)


def predicted_block(summary: RunSummary) -> list[str]:
    """A twin's replay (``summary["predicted"]``): one quoted line saying that no figure below was
    measured; [] for a measured run."""
    mark = summary.get("predicted")
    if not mark:
        return []
    return [f"> **PREDICTED.** {escape_cell(mark)} Every figure in this report is the twin's.", ""]


def verdict_block(summary: RunSummary) -> list[str]:
    """The ``--fail-on`` / ``--abort-on`` verdict (``summary["thresholds"]``) as a quoted block; []
    without thresholds."""
    verdict = summary.get("thresholds")
    if not verdict:
        return []
    head, *rest = verdict_lines(verdict)
    lines = [f"> **Thresholds: {escape_cell(head)}**", ">"]
    lines += [f"> - {escape_cell(line)}" for line in rest]
    return [*lines, ""]


def step_table(steps: Sequence[StepSummary]) -> str:
    """The report's step table with its notes, as Markdown (also the GitHub step summary's)."""
    return "\n".join(_step_table(steps))


def _step_table(steps: Sequence[StepSummary]) -> list[str]:
    lines = ["## Steps", ""]
    lines.append("| " + " | ".join(_STEP_COLUMNS) + " |")
    lines.append("|" + "|".join("---" if i < 1 else "---:" for i in range(len(_STEP_COLUMNS))) + "|")
    for s in steps:
        cells = [
            _num(s.get("step")),
            _num(s.get("context_tokens")),
            _load(s),
            _num(s.get("output_tok_s")),
            _num(s.get("per_request_tok_s")),
            _num(s.get("wall_s")),
            f"{_num(s.get('prompt_tokens_requested_mean'), 0)} / {_num(s.get('prompt_tokens_mean'), 0)}",
            _num(s.get("tokens_per_chunk_mean"), 2),
            _pair(s.get("ttft_ms")),
            _pair(s.get("itl_ms")),
            _pair(s.get("tpot_ms")),
            _pair(s.get("e2e_ms")),
            f"{_num(s.get('requests_ok', 0))} / {_num(s.get('requests_failed', 0))}",
            ("yes" if s.get("valid") else "**no**")
            + (" (timing uncertain)" if (s.get("timing") or {}).get("uncertain") else ""),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    unfinished = [str(s.get("step")) for s in steps if s.get("end_reason") is None]
    if unfinished:
        lines += [
            "",
            f"Step {', '.join(unfinished)}: no end line (the run was stopped or killed); "
            "the step ends at its last finished request.",
        ]
    lines += [
        "",
        "Agg tok/s: output tokens that arrived inside the step's steady window (warm-up excluded) / "
        "window length. Latencies: successful requests sent inside the window; TTFT and E2E from the "
        "intended send time; ITL is the gap between successive text chunks; percentiles by linear "
        "interpolation (numpy's default). Wall s: the step's whole length, warm-up included. Prompt tokens: "
        "the length the workload asked for (estimated) / the server's usage (the truth). Tok/chunk: output "
        "tokens per streamed chunk (above 1 on speculative servers).",
        "",
    ]
    return lines


def _errors(summary: RunSummary) -> list[str]:
    totals = summary.get("totals", {})
    errors: dict[str, int] = totals.get("errors") or {}
    if not errors:
        return []
    samples: dict[str, str] = totals.get("error_samples") or {}
    in_windows: dict[str, int] = {}
    for step in summary.get("steps", []):
        for name, count in (step.get("errors") or {}).items():
            in_windows[name] = in_windows.get(name, 0) + count
    lines = ["## Errors", "", "| Class | Count | In steady windows | Sample message |", "|---|---:|---:|---|"]
    for name, count in errors.items():
        sample = samples.get(name)
        lines.append(
            f"| {escape_cell(name)} | {_num(count)} | {_num(in_windows.get(name, 0))} | "
            f"{escape_cell(sample) if sample else '–'} |"
        )
    lines.append("")
    return lines


def _where(s: StepSummary) -> str:
    where = f"C={s['concurrency']}" if s.get("concurrency") is not None else _load(s)
    return where + (f", context {s['context_tokens']}" if s.get("context_tokens") is not None else "")


def _invalid(steps: Sequence[StepSummary]) -> list[str]:
    bad = [s for s in steps if not s.get("valid")]
    if not bad:
        return []
    lines = ["## Invalid steps", ""]
    for s in bad:
        lines.append(f"- Step {s.get('step')} ({_where(s)}): {escape_cell(s.get('invalid_reason') or 'invalid')}")
    lines.append("")
    return lines


def _timing(steps: Sequence[StepSummary]) -> list[str]:
    """Steps whose latency figures the load generator cannot vouch for (they stay valid)."""
    marked = [s for s in steps if (s.get("timing") or {}).get("uncertain")]
    if not marked:
        return []
    lines = ["## Timing uncertain", ""]
    for s in marked:
        lines.append(f"- Step {s.get('step')} ({_where(s)}): {escape_cell(s['timing'].get('reason') or '')}")
    lines += [
        "",
        "Chunk times are the kernel's receive times; bytes that queued up unread while the load generator's "
        "event loop was busy were merged by the kernel, so those chunks' times are upper bounds (each record "
        "says by how much at most in `chunk_late_ns`). Fewer users per process (`--workers N`) or a quieter "
        "machine make such steps exact.",
        "",
    ]
    return lines


def render_markdown(summary: RunSummary, sections: Sequence[Section] = (), lead: Sequence[Section] = ()) -> str:
    """The report.md text for ``summary`` (from ``build_summary``): ``lead`` sections right after
    the header (the verdict comes first), the step table, errors, invalid steps, then ``sections``."""
    lines = _header(summary)
    lines[2:2] = verdict_block(summary)  # the pass/fail verdict right under the title
    for section in lead:
        text = section(summary)
        if text:
            lines += [text.rstrip("\n"), ""]
    steps = summary.get("steps", [])
    totals = summary.get("totals", {})
    if totals.get("empty", not steps):
        lines += [
            "**No requests were recorded in this run.** The load generator sent nothing or was stopped "
            "before any request ended; check the server URL and the run's console output.",
            "",
        ]
    if steps:
        lines += _step_table(steps)
    lines += _errors(summary)
    lines += _invalid(steps)
    lines += _timing(steps)
    for section in sections:
        text = section(summary)
        if text:
            lines += [text.rstrip("\n"), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


__all__ = [
    "Section",
    "escape_cell",
    "predicted_block",
    "render_markdown",
    "step_table",
    "stopped_early",
    "verdict_block",
]
