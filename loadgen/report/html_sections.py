"""report.html's sections after the verdict's: the plots, then the evidence and the setup.

The Pareto section (its plot and its points) and the other plots (charts first, the no-data panels
together after them); the call-type, output, agent and image tables (``report.calltables``);
errors by class with a sample message each; the server log lines the telemetry captured (at most
400, with the step each fell in); the scenario (the options the run set, those left empty or off
counted, not listed) and the environment from ``manifest.json``. Every text is escaped.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from loadgen.analysis.contracts import RunSummary, StepSummary
from loadgen.analysis.pareto import UNKNOWN_NOTE
from loadgen.analysis.values import as_dict, number, steps_of, summary_axis
from loadgen.report.calltables import Table
from loadgen.report.html_common import PLOTS_DIR, clip, figure, fmt_num
from loadgen.report.plots_common import Plot, load_label
from loadgen.report.plots_pareto import pareto_of
from loadgen.report.svg import esc

MAX_LOG_LINES = 400


def plots_html(plots: Sequence[Plot]) -> str:
    """Charts in reading order, then the no-data panels together (small, so they do not break the grid).
    The Pareto plot has its own section (``pareto_html``)."""
    plots = [p for p in plots if p.slug != "pareto"]
    figs = [figure(p) for p in [p for p in plots if p.has_data] + [p for p in plots if not p.has_data]]
    return f"<h2 id=plots>Plots</h2><div class=plots>{''.join(figs)}</div>"


def pareto_html(summary: RunSummary, plots: Sequence[Plot]) -> str:
    """Throughput per GPU against per-user tok/s: the plot and its points (``analysis.pareto``)."""
    plot = next((p for p in plots if p.slug == "pareto"), None)
    if plot is None:
        return ""
    pareto = pareto_of(summary)
    axis = summary_axis(summary)
    gpus, source = pareto.get("gpus"), pareto.get("gpus_source")
    if source == "unknown":
        per = "per node"
        how = f"<b>{esc(pareto.get('note') or UNKNOWN_NOTE)}</b>."
    else:
        per = "per GPU"
        how = f"{esc(gpus)} GPUs, from {'--gpu-count' if source == 'option' else 'the GPU telemetry'}."
    out = [
        "<h2 id=pareto>Throughput per GPU vs interactivity</h2>",
        f"<p class=note>The Pareto plot: output tok/s {per} against per-user output tok/s "
        f"(1000 / TPOT p50, the median request's decode speed). {how} "
        f"Also in {PLOTS_DIR}/pareto.svg and summary.json (<code>pareto</code>).</p>",
        f'<div class="plots single">{figure(plot)}</div>',
    ]
    rows = []
    for p in pareto["points"]:
        if p.get("per_user_tok_s") is None and p.get("tok_s_per_gpu") is None and p.get("valid"):
            continue
        if not p.get("valid"):
            tag = "<span class='tag bad'>INVALID</span>"
        elif p.get("on_frontier"):
            tag = "<span class='tag ok'>frontier</span>"
        else:
            tag = "<span class='tag off'>dominated</span>"
        ctx = p.get("context_tokens")
        rows.append(
            f"<tr><td class=n>{esc(p.get('step', '?'))}</td><td class=n>{esc(load_label(number(p.get(axis)), axis))}"
            f"{esc(f', {ctx:,} ctx') if ctx is not None else ''}</td>"
            f"<td class=n>{fmt_num(p.get('per_user_tok_s'), 1)}</td>"
            f"<td class=n>{fmt_num(p.get('tok_s_per_gpu'), 1)}</td>"
            f"<td>{tag}</td></tr>"
        )
    if rows:
        out.append(
            "<details id=pareto-points><summary>the points</summary><div class=scroll><table><thead><tr>"
            f"<th class=n>step</th><th class=n>load</th><th class=n>tok/s per user</th><th class=n>tok/s {per}</th>"
            f"<th>frontier</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div></details>"
        )
    return "".join(out)


def table_html(table: Table) -> str:
    """One of ``report.calltables``' tables (by call type, kinds of output, agent tasks, images)."""
    out = [f"<h2 id={table.anchor}>{esc(table.title)}</h2>"]
    if table.note:
        out.append(f"<p class=note>{esc(table.note)}</p>")
    if table.head:
        ths = "".join(
            f"<th{'' if i in table.text_columns else ' class=n'}>{esc(h)}</th>" for i, h in enumerate(table.head)
        )
        trs = "".join(
            "<tr>"
            + "".join(
                f"<td{'' if i in table.text_columns else ' class=n'}>{esc(cell)}</td>" for i, cell in enumerate(row)
            )
            + "</tr>"
            for row in table.rows
        )
        out.append(f"<div class=scroll><table><thead><tr>{ths}</tr></thead><tbody>{trs}</tbody></table></div>")
    if table.lines:
        out.append("<ul>" + "".join(f"<li>{esc(line)}</li>" for line in table.lines) + "</ul>")
    return "".join(out)


def errors_html(summary: RunSummary) -> str:
    totals = as_dict(summary.get("totals"))
    errors = as_dict(totals.get("errors"))
    samples = as_dict(totals.get("error_samples"))
    if not isinstance(errors, dict) or not errors:
        return "<h2 id=errors>Errors</h2><p>No request failed.</p>"
    rows = "".join(
        f"<tr><td><code>{esc(name)}</code></td><td class=n>{fmt_num(count)}</td>"
        f"<td><code>{esc(clip(samples.get(name, '–')))}</code></td></tr>"
        for name, count in errors.items()
    )
    by_step = []
    axis = summary_axis(summary)
    for s in steps_of(summary):
        e = s.get("errors")
        if isinstance(e, dict) and e:
            parts = ", ".join(f"{k} ×{v}" for k, v in e.items())
            by_step.append(
                f"<li>step {esc(s.get('step', '?'))} ({esc(load_label(number(s.get(axis)), axis))}): {esc(parts)}</li>"
            )
    steps_html = f"<h3>By step (steady windows)</h3><ul>{''.join(by_step)}</ul>" if by_step else ""
    return (
        "<h2 id=errors>Errors</h2><div class=scroll><table><thead><tr><th>class</th><th class=n>requests</th>"
        f"<th>sample message (first of its class)</th></tr></thead><tbody>{rows}</tbody></table></div>{steps_html}"
    )


def _step_at(steps: Sequence[StepSummary], t_ns: float) -> int | None:
    for s in steps:
        a, b = number(s.get("start_ns")), number(s.get("end_ns"))
        if a is not None and b is not None and a <= t_ns < b:
            return s.get("step")
    return None


def logs_html(summary: RunSummary, events: Sequence[dict[str, Any]]) -> str:
    steps = steps_of(summary)
    starts = [v for s in steps if (v := number(s.get("start_ns"))) is not None]
    t0 = min(starts) if starts else None
    logs = sorted((e for e in events if e.get("src") == "log"), key=lambda e: number(e.get("t_ns")) or 0.0)
    tele = [e for e in events if e.get("src") == "telemetry"]
    out = ["<h2 id=logs>Server log lines</h2>"]
    if not events:
        out.append("<p>No events.jsonl: the server's logs were not captured for this run.</p>")
        return "".join(out)

    def when(e: dict[str, Any]) -> str:
        t = number(e.get("t_ns"))
        if t is None:
            return "–"
        return f"{(t - t0) / 1e9:+,.1f} s" if t0 is not None else f"{t / 1e9:,.1f}"

    if not logs:
        out.append("<p>No server log line matched a known failure pattern.</p>")
    else:
        shown = logs[:MAX_LOG_LINES]
        cells = []
        for e in shown:
            t = number(e.get("t_ns"))
            step = _step_at(steps, t) if t is not None else None
            cells.append(
                f"<tr><td class=n>{when(e)}</td><td class=n>{esc('–' if step is None else step)}</td>"
                f"<td><code>{esc(e.get('pattern') or e.get('kind') or '')}</code></td>"
                f"<td>{esc(e.get('severity') or '')}</td><td><code>{esc(clip(e.get('line') or ''))}</code></td></tr>"
            )
        rows = "".join(cells)
        more = (
            f"<p class=note>{len(logs) - len(shown):,} more lines in events.jsonl.</p>"
            if len(logs) > len(shown)
            else ""
        )
        out.append(
            "<div class=scroll><table><thead><tr><th class=n>time</th><th class=n>step</th><th>pattern</th>"
            f"<th>severity</th><th>line</th></tr></thead><tbody>{rows}</tbody></table></div>{more}"
        )
    notable = [e for e in tele if e.get("kind") not in ("started", "stopped")]
    if notable:
        items = []
        for e in notable[:MAX_LOG_LINES]:
            extra = {k: v for k, v in e.items() if k not in ("t_ns", "src", "kind")}
            detail = ", ".join(f"{k}={v}" for k, v in extra.items())
            items.append(f"<li>{when(e)} <code>{esc(e.get('kind'))}</code> {esc(clip(detail, 400))}</li>")
        out.append(f"<h3>Telemetry events</h3><ul class=note>{''.join(items)}</ul>")
    return "".join(out)


def _json_block(title: str, data: object, anchor: str, open_: bool = False) -> str:
    text = json.dumps(data, indent=2, sort_keys=False, default=str, ensure_ascii=False)
    attrs = f"id={anchor}" + (" open" if open_ else "")
    return f"<details {attrs}><summary>{esc(title)}</summary><pre>{esc(text)}</pre></details>"


# options whose value turns their feature off: the row would only say "not used"
_OFF_VALUES: dict[str, object] = {"repeat": 1, "workers": 0, "wait_ready_s": 0}


def _unused_option(key: str, value: object, options: dict[str, Any]) -> bool:
    """Whether a scenario or option row says nothing about this run: empty (None, "", [], false),
    a feature's off value, or a knee-search setting of a run without ``--find-knee``."""
    if value is None or value is False or value == "" or value == [] or value == {}:
        return True
    if key in _OFF_VALUES and value == _OFF_VALUES[key]:
        return True
    return key.startswith("search_") and not options.get("find_knee")


def scenario_env_html(manifest: dict[str, Any]) -> str:
    out = ["<h2 id=scenario>Scenario</h2>"]
    if not manifest:
        out.append("<p>No manifest.json in the run directory.</p>")
        return "".join(out)
    env_keys = ("host", "versions", "created_ns")
    scenario = {k: v for k, v in manifest.items() if k not in env_keys}
    opts = manifest.get("options") if isinstance(manifest.get("options"), dict) else {}
    argv = opts.get("argv") if isinstance(opts, dict) else None
    if isinstance(argv, list) and argv:
        out.append(f"<p>Command: <code>loadgen {esc(' '.join(str(a) for a in argv))}</code></p>")
    facts: dict[str, str] = {}
    left_out = 0
    for section in ("scenario", "options"):
        part = manifest.get(section)
        if not isinstance(part, dict):
            continue
        for key, value in part.items():
            if key == "argv" or key in facts:
                continue
            if _unused_option(key, value, opts if isinstance(opts, dict) else {}):
                left_out += 1
            elif isinstance(value, (str, int, float)):
                facts[key] = str(value)
            elif isinstance(value, list) and len(value) <= 32 and all(isinstance(v, (str, int, float)) for v in value):
                facts[key] = ", ".join(str(v) for v in value)
    if facts:
        rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(clip(v, 300))}</td></tr>" for k, v in facts.items())
        out.append(f"<table class=kv><tbody>{rows}</tbody></table>")
    if left_out:
        out.append(
            f"<p class=note>{left_out} options the run left empty or off (none, false, a feature not used) are not "
            "listed; manifest.json below has them all.</p>"
        )
    out.append(_json_block("everything in manifest.json (scenario, options, step plan)", scenario, "scenario-json"))
    out.append("<h2 id=environment>Environment</h2>")
    env: dict[str, Any] = {}
    for key in ("host", "versions"):
        part = manifest.get(key)
        if isinstance(part, dict):
            env.update(part)
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in env.items())
    out.append(f"<table class=kv><tbody>{rows}</tbody></table>" if rows else "<p>No host or version information.</p>")
    return "".join(out)


__all__ = ["errors_html", "logs_html", "pareto_html", "plots_html", "scenario_env_html", "table_html"]
