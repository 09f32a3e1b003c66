"""report.html: one self-contained page per run, readable by someone who was not there.

Order, for a 1280x800 window first: the knee verdict (with how it weighs its detectors) and the
headline figures, then the step table (every step VALID or INVALID with its reason; grouped columns,
none that the run left empty, so it fits the window's width), all three above the fold; the
detectors side by side; the capacity plan when the summary has one; throughput per GPU against
per-user tok/s (the Pareto plot); the plots (``loadgen.report.plots``, inline SVG); the tables of
the call types, kinds of output, agents, images, goodput and repeats the run used; errors by class
with a sample message each; the server log lines the telemetry captured; the scenario (the options
the run set) and the environment from ``manifest.json``.

The page needs nothing from outside: styles inline, no scripts, no fonts, no network. Every text
that came from a server, a prompt, a log or a manifest is escaped (``svg.esc``). ``write_html``
also writes each plot as ``plots/<slug>.svg`` beside the page.

Inputs: the summary (``summary.json``; any per-step key may be absent or None) and the run
directory, from which ``manifest.json``, ``samples.jsonl`` and ``events.jsonl`` are read (each may
be missing). Pass an already loaded ``Run`` to reuse its lines and to mark failed requests on the
time plots (the request records are not re-read without it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.analysis.contracts import LatencyKey, LoadAxis, RunSummary, StepSummary
from loadgen.analysis.knee import deciding_detectors, rule_text
from loadgen.analysis.load import MISSING, Run, RunLoadError
from loadgen.analysis.pareto import UNKNOWN_NOTE
from loadgen.analysis.steps import failure_class_names, ok_mask
from loadgen.analysis.values import as_axis, as_dict, as_list, number, stat, steps_of, summary_axis
from loadgen.report.calltables import Table, tables_of
from loadgen.report.markdown import stopped_early
from loadgen.report.plots import Failure, Plot, build_plots, knee_load, load_label, pareto_of
from loadgen.report.svg import esc, format_value
from loadgen.rundir.layout import read_manifest
from loadgen.rundir.records import read_jsonl

MAX_LOG_LINES = 400
MAX_MESSAGE_CHARS = 2000
PLOTS_DIR = "plots"

PAGE_CSS = """
:root{--ink:#1f2933;--muted:#616e7c;--faint:#9aa5b1;--line:#e4e7eb;--bg:#f7f8fa;--card:#fff;
--bad:#b03a2e;--bad-bg:#fbe9e7;--warn:#9a6700;--warn-bg:#fff4d6;--good:#1e7b4f;--good-bg:#e6f4ec;--accent:#0b6fa4}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,
"Helvetica Neue",Arial,sans-serif;-webkit-font-smoothing:antialiased}
main{max-width:1240px;margin:0 auto;padding:28px 28px 60px}
h1{font-size:24px;margin:0 0 4px;letter-spacing:-.01em}
h2{font-size:18px;margin:36px 0 10px;padding-bottom:6px;border-bottom:1px solid var(--line)}
h3{font-size:15px;margin:18px 0 6px}
.meta{color:var(--muted);font-size:13.5px;margin:0 0 20px}
.meta span+span:before{content:"·";margin:0 8px;color:var(--faint)}
.stopped{border-left:4px solid var(--bad);padding:8px 12px;margin:0 0 20px;background:var(--bad-bg)}
.verdict{background:var(--card);border:1px solid var(--line);border-left:6px solid var(--accent);border-radius:8px;
padding:18px 22px;margin:0 0 16px}
.verdict.hard{border-left-color:var(--bad)}.verdict.none{border-left-color:var(--faint)}
.verdict .head{font-size:22px;font-weight:650;margin:0 0 6px}
.verdict .reason{font-size:16px;margin:0}
.verdict .rule{color:var(--muted);font-size:13px;margin:8px 0 0}
.figures{display:grid;grid-template-columns:repeat(auto-fit,minmax(140px,1fr));gap:10px;margin:0 0 8px}
.figure{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 14px}
.figure b{display:block;font-size:20px;font-variant-numeric:tabular-nums}
.figure small{color:var(--muted);font-size:12.5px}
.figure.bad b{color:var(--bad)}
.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(520px,100%),1fr));gap:16px}
.plots.single{grid-template-columns:minmax(0,820px)}
figure{margin:0;background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 12px 8px}
figure svg{display:block;width:100%;height:auto}
figcaption{color:var(--muted);font-size:12.5px;margin:4px 4px 2px}
figure.empty{padding:0;border:none;background:none;align-self:start}
table{border-collapse:collapse;background:var(--card);font-size:13px;width:100%}
th,td{padding:5px 8px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{font-weight:600;color:var(--muted);background:#fafbfc;position:sticky;top:0}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.invalid td{background:var(--bad-bg)}
table.steps{font-size:12.5px}table.steps th,table.steps td{padding:4px 6px}
table.steps thead{position:sticky;top:0;z-index:1}table.steps thead th{position:static}
table.steps th.group{text-align:center;color:var(--ink);border-bottom:none;padding-bottom:0}
table.steps th.group+th.group{border-left:1px solid var(--line)}
table.steps td.status{min-width:0;max-width:190px}
.scroll{overflow-x:auto;border:1px solid var(--line);border-radius:8px;max-height:640px}
.tag{display:inline-block;font-size:11.5px;font-weight:650;padding:1px 7px;border-radius:10px;white-space:nowrap}
.tag.ok{background:var(--good-bg);color:var(--good)}.tag.bad{background:var(--bad-bg);color:var(--bad)}
.tag.off{background:#eef0f3;color:var(--muted)}.tag.warn{background:var(--warn-bg);color:var(--warn)}
.tag.decide{background:var(--accent);color:#fff}.tag.decide.hard{background:var(--bad)}
.tag.flag{background:#fff;color:var(--ink);border:1px solid var(--faint);font-weight:600}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
pre{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:12px;overflow:auto;max-height:480px;
white-space:pre-wrap;word-break:break-word;margin:6px 0}
td code{white-space:pre-wrap;word-break:break-word}
td.name code{white-space:nowrap}
td.status{min-width:150px}
td.status small{display:block;color:var(--bad);font-size:12px}
table.kv{width:auto;min-width:420px;border:1px solid var(--line);border-radius:8px}
table.kv th{position:static;background:none;padding-right:24px}
.verdict ul{margin:4px 0 0;padding-left:20px}.verdict li{margin:1px 0}
.verdict .weigh{font-size:15px;margin:6px 0 0}
.verdict ul.evidence{list-style:none;padding:0;margin:8px 0 0;font-size:13.5px;color:var(--muted)}
.verdict ul.evidence li{display:inline;margin:0}.verdict ul.evidence li.label{font-style:italic;margin-right:5px}
.verdict ul.evidence li:not(.label):not(:last-child):after{content:" · ";color:var(--faint)}
.note{color:var(--muted);font-size:13.5px}
details>summary{cursor:pointer;color:var(--accent);margin:6px 0}
footer{color:var(--faint);font-size:12px;margin-top:40px}
"""


_n = number


def _num(v: float | None, digits: int | None = None) -> str:
    f = _n(v)
    if f is None:
        return "–"
    if digits is not None:
        return f"{f:,.{digits}f}"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    return format_value(f)


def _pct(v: float | None) -> str:
    f = _n(v)
    return "–" if f is None else f"{f * 100:.0f}%"


def _clip(text: object, limit: int = MAX_MESSAGE_CHARS) -> str:
    s = str(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


# ------------------------------------------------------------------------------------ inputs


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    try:
        return [r for r in read_jsonl(path) if isinstance(r, dict)]
    except OSError:
        return []


def _failures(run: Run) -> list[Failure]:
    """Failed requests of a loaded run, by the analysis's rule and names (analysis/steps.py)."""
    req = run.requests
    if req.n == 0:
        return []
    rows = np.flatnonzero(~ok_mask(req))
    if not len(rows):
        return []
    t = req.end_ns[rows]
    t = np.where(t == MISSING, req.sent_ns[rows], t)
    return [
        Failure(int(t_ns), name)
        for t_ns, name in zip(t.tolist(), failure_class_names(req, rows), strict=True)
        if t_ns != MISSING
    ]


def _inputs(
    run_dir: Path, run: Run | None
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], list[Failure]]:
    if run is not None:
        return run.manifest, list(run.samples), list(run.events), _failures(run)
    manifest = read_manifest(run_dir)
    return (
        manifest if isinstance(manifest, dict) else {},
        _lines(run_dir / "samples.jsonl"),
        _lines(run_dir / "events.jsonl"),
        [],
    )


# ----------------------------------------------------------------------------------- sections


def _header(summary: RunSummary) -> str:
    title = summary.get("label") or summary.get("run_id") or "run"
    facts = [
        ("run", summary.get("run_id")),
        ("server", summary.get("url")),
        ("model", summary.get("model")),
        ("transport", summary.get("transport")),
        ("started", summary.get("created")),
    ]
    meta = "".join(f"<span>{esc(k)} <b>{esc(v)}</b></span>" for k, v in facts if v is not None)
    stop = stopped_early(summary)
    stopped = f"\n<p class=stopped id=stopped><b>Stopped early:</b> {esc(stop)}</p>" if stop else ""
    return (
        f"<h1>Load test report: {esc(title)}</h1>\n<p class=meta>{meta}</p>"
        + stopped
        + _predicted(summary.get("predicted"))
    )


def _predicted(mark: str | None) -> str:
    """The banner of a twin's replay (``summary["predicted"]``): no figure on the page was measured."""
    if not mark:
        return ""
    return (
        '<section class="verdict none" id="predicted"><p class=head>PREDICTED, not measured</p>'
        f"<p class=reason>{esc(mark)} Every figure on this page is the twin's.</p></section>"
    )


def _verdict(summary: RunSummary) -> str:
    knee = summary.get("knee")
    axis = summary_axis(summary)
    if not isinstance(knee, dict):
        return (
            '<section class="verdict none" id="verdict"><p class=head>No knee verdict</p>'
            "<p class=reason>This summary has no knee analysis (no <code>knee</code> object in summary.json), "
            "so no saturation point is stated. Rebuild the report with <code>loadgen report RUN_DIR</code> "
            "to add one.</p></section>"
        )
    k = knee_load(summary)
    rule = str(knee.get("rule") or "none")
    reason = str(knee.get("reason") or "no reason given")
    if k is not None:
        head = f"Knee: {load_label(k, axis)}"
        ctx = knee.get("context_tokens")
        if ctx is not None:
            head += f" at {esc(ctx)} context tokens"
    elif rule == "hard limit":
        head = "No load meets the limits"
    else:
        head = "No knee in the measured range"
    css = "hard" if rule == "hard limit" else ("none" if k is None else "")
    # the rule in words, from the verdict's own detectors and thresholds (analysis.knee.rule_text)
    rule_txt = rule_text(knee)
    call = summary.get("knee_call_type")
    if isinstance(call, str):
        rule_txt += f" About the {call} calls (their throughput and latencies)."
    stability = as_dict(as_dict(summary.get("repeats")).get("knee"))
    if stability.get("text"):
        rule_txt += f" Judged on the means of the repeats; each repeat on its own: {stability['text']}."
    return (
        f'<section class="verdict {css}" id="verdict"><p class=head>{esc(head)}</p>'
        f"{_reason_html(knee, reason)}<p class=rule>{esc(rule_txt)}</p></section>"
    )


def _reason_html(knee: Mapping[str, Any], reason: str) -> str:
    """The verdict's sentence, its clauses in two kinds: what decides and how the others are weighed
    (paragraphs), then the other detectors' own phrases and the ignored steps (one compact line of
    evidence). The words are the summary's ``reason``, clause by clause."""
    clauses = [c.strip() for c in reason.split("; ") if c.strip()]
    dets = as_dict(knee.get("detectors"))
    deciding = set(deciding_detectors(knee))
    evidence_phrases = {
        d.get("phrase") for n, d in dets.items() if isinstance(d, dict) and n not in deciding and d.get("phrase")
    }
    main = [c for c in clauses if c not in evidence_phrases and not c.startswith("ignored ")]
    other = [c for c in clauses if c not in main]
    if not main:
        main, other = other[:1], other[1:]
    main = [c[:1].upper() + c[1:] for c in main]  # each its own sentence on the page
    out = f"<p class=reason>{esc(main[0])}</p>" if main else ""
    out += "".join(f"<p class=weigh>{esc(c)}</p>" for c in main[1:])
    if other:
        out += "<ul class=evidence><li class=label>also:</li>" + "".join(f"<li>{esc(c)}</li>" for c in other) + "</ul>"
    return out


def _thresholds(summary: RunSummary) -> str:
    """The --fail-on / --abort-on verdict, first thing on the page (what a pipeline gated on)."""
    v = summary.get("thresholds")
    if not isinstance(v, dict) or not v.get("results"):
        return ""
    from loadgen.analysis.thresholds import verdict_lines

    head, *rest = verdict_lines(v)
    css = "hard" if v.get("verdict") == "fail" else "none"
    items = "".join(f"<li>{esc(line)}</li>" for line in rest)
    return f'<section class="verdict {css}" id="thresholds"><p class=head>{esc(head)}</p><ul>{items}</ul></section>'


def _figures(summary: RunSummary) -> str:
    """The headline cards. Each is ``div.figure`` with a ``data-figure`` name; the request counts
    also carry ``data-count="ok"`` / ``data-count="failed"`` (tests read them: keep them stable)."""
    totals = as_dict(summary.get("totals"))
    steps = steps_of(summary)
    axis = summary_axis(summary)
    items: list[tuple[str, str, str]] = []  # (name, value, label)
    if _n(totals.get("peak_output_tok_s")) is not None:
        at = totals.get("peak_concurrency")
        where = f"at C={at}" if at is not None else f"at step {totals.get('peak_step')}"
        items.append(("peak", f"{_num(totals['peak_output_tok_s'], 0)} tok/s", f"peak throughput {where}"))
    items.append(("ok", _num(totals.get("requests_ok", 0)), "successful requests"))
    failed = totals.get("requests_failed", 0)
    items.append(("failed", _num(failed), "failed requests"))
    valid = f"{_num(totals.get('valid_steps', 0))} / {_num(totals.get('steps', len(steps)))}"
    items.append(("valid-steps", valid, "valid steps"))
    if (duration_s := _n(totals.get("duration_s"))) is not None:
        items.append(("duration", f"{duration_s:,.0f} s", "duration"))
    energies = [e for s in steps if (e := _n(s.get("energy_j"))) is not None]
    if energies:
        items.append(("energy", f"{sum(energies) / 3.6e6 * 1000:,.1f} Wh", "GPU energy, steady windows"))
    tpj = [(t, s) for s in steps if (t := _n(s.get("tokens_per_joule"))) is not None and s.get("power_valid", True)]
    if tpj:
        best, s = max(tpj, key=lambda p: p[0])
        items.append(("tokens-per-joule", f"{best:.2f} tok/J", f"best efficiency, {load_label(_n(s.get(axis)), axis)}"))
    cards = []
    for name, value, label in items:
        bad = " bad" if name == "failed" and _n(failed) else ""
        count = f' data-count="{name}"' if name in ("ok", "failed") else ""
        cards.append(
            f"<div class='figure{bad}' data-figure=\"{name}\"{count}><b>{value}</b><small>{esc(label)}</small></div>"
        )
    return f'<div class=figures id="figures">{"".join(cards)}</div>'


def _detectors(summary: RunSummary) -> str:
    """Each detector's finding. Only the detectors that decide the verdict are styled as the verdict
    ("decides", coloured); one that fired without deciding is evidence ("flagged C=64", neutral)."""
    knee = summary.get("knee")
    if not isinstance(knee, dict) or not isinstance(knee.get("detectors"), dict) or not knee["detectors"]:
        return ""
    axis = summary_axis(summary)
    deciding = set(deciding_detectors(knee))
    hard = knee.get("rule") == "hard limit"
    rows = []
    for name, d in knee["detectors"].items():
        if not isinstance(d, dict):
            continue
        load = _n(d.get("load")) if d.get("load") is not None else _n(d.get(axis))
        knee_at = _n(d.get("knee"))
        where = f" {load_label(load, axis)}" if load is not None else ""
        if not d.get("has_data", True):
            finding, tag = "no-data", "<span class='tag off'>no data</span>"
        elif name in deciding:
            finding, tag = "decides", f"<span class='tag decide{' hard' if hard else ''}'>decides</span>"
        elif d.get("triggered"):
            finding, tag = "flagged", f"<span class='tag flag'>flagged{esc(where)}</span>"
        else:
            finding, tag = "clear", "<span class='tag ok'>not triggered</span>"
        rows.append(
            f'<tr data-detector="{esc(name)}" data-finding="{finding}"><td class=name><code>{esc(name)}</code></td>'
            f"<td>{tag}</td>"
            f"<td class=n>{esc(load_label(load, axis)) if load is not None else '–'}</td>"
            f"<td class=n>{esc(load_label(knee_at, axis)) if knee_at is not None else '–'}</td>"
            f"<td>{esc(d.get('evidence') or '')}</td></tr>"
        )
    ignored = as_list(knee.get("ignored_steps"))
    note = ""
    if ignored:
        parts = []
        for s in ignored:
            if isinstance(s, dict):
                parts.append(
                    f"step {s.get('step', '?')} ({load_label(_n(s.get(axis)), axis)}): {s.get('invalid_reason')}"
                )
        note = f"<p class=note>Left out as INVALID: {esc('; '.join(parts))}</p>" if parts else ""
    return (
        "<h2 id=detectors>Detectors</h2><p class=note>Each detector reads the step table on its own; "
        "<i>at</i> is where its signal appears, <i>proposes</i> the knee it votes for. Only the ones marked "
        "<i>decides</i> make the verdict; a <i>flagged</i> one is evidence, weighed in the verdict's words.</p>"
        "<div class=scroll><table><thead><tr><th>detector</th><th>finding</th><th class=n>at</th>"
        f"<th class=n>proposes</th><th>evidence</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>{note}"
    )


def _plan(summary: RunSummary) -> str:
    plan = summary.get("plan")
    if not isinstance(plan, dict):
        return ""
    axis = as_axis(plan.get("axis")) or summary_axis(summary)
    op = plan.get("operating_point")
    out = ["<h2 id=plan>Capacity plan</h2>", _predicted(plan.get("predicted"))]
    if not isinstance(op, dict):
        out.append(f"<p>{esc(plan.get('reason') or 'no operating point found')}</p>")
    else:
        per = as_dict(plan.get("per_replica"))
        energy = as_dict(plan.get("energy"))
        cost = as_dict(plan.get("cost"))
        facts = [
            (
                "operating point",
                f"{load_label(_n(op.get(axis)), axis)}" + (" (interpolated)" if op.get("interpolated") else ""),
            ),
            ("goodput", f"{_num(op.get('goodput_req_s'))} req/s, {_num(op.get('goodput_tok_s'))} tok/s"),
            (
                f"per replica ({_pct(plan.get('headroom'))} headroom)",
                f"{_num(per.get('req_s'))} req/s, {_num(per.get('tok_s'))} tok/s",
            ),
        ]
        if plan.get("replicas") is not None:
            facts.append(("replicas", f"{_num(plan.get('replicas'))} ({_num(plan.get('gpus'))} GPUs)"))
        if energy:
            facts.append(("energy", f"{_num(energy.get('kwh_per_million_tokens'))} kWh per million tokens"))
        if cost:
            facts.append(
                (
                    "cost",
                    f"{_num(cost.get('per_million_tokens'))} per million tokens "
                    f"(at {_num(cost.get('gpu_hour_cost'))} per GPU-hour)",
                )
            )
        out.append(
            "<table class=kv><tbody>"
            + "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in facts)
            + "</tbody></table>"
        )
    notes = as_list(plan.get("notes"))
    if notes:
        out.append("<ul class=note>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
    return "".join(out)


def figure(p: Plot) -> str:
    """One plot as a ``<figure>`` (its SVG inline, its caption below; a no-data panel bare)."""
    return (
        f'<figure id="plot-{esc(p.slug)}" data-plot="{esc(p.slug)}" data-has-data="{str(p.has_data).lower()}"'
        f"{'' if p.has_data else ' class=empty'}>{p.svg}"
        f"{f'<figcaption>{esc(p.caption)}</figcaption>' if p.has_data and p.caption else ''}</figure>"
    )


def _plots(plots: Sequence[Plot]) -> str:
    """Charts in reading order, then the no-data panels together (small, so they do not break the grid).
    The Pareto plot has its own section (``_pareto``)."""
    plots = [p for p in plots if p.slug != "pareto"]
    figs = [figure(p) for p in [p for p in plots if p.has_data] + [p for p in plots if not p.has_data]]
    return f"<h2 id=plots>Plots</h2><div class=plots>{''.join(figs)}</div>"


def _pareto(summary: RunSummary, plots: Sequence[Plot]) -> str:
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
            f"<tr><td class=n>{esc(p.get('step', '?'))}</td><td class=n>{esc(load_label(_n(p.get(axis)), axis))}"
            f"{esc(f', {ctx:,} ctx') if ctx is not None else ''}</td>"
            f"<td class=n>{_num(p.get('per_user_tok_s'), 1)}</td><td class=n>{_num(p.get('tok_s_per_gpu'), 1)}</td>"
            f"<td>{tag}</td></tr>"
        )
    if rows:
        out.append(
            "<details id=pareto-points><summary>the points</summary><div class=scroll><table><thead><tr>"
            f"<th class=n>step</th><th class=n>load</th><th class=n>tok/s per user</th><th class=n>tok/s {per}</th>"
            f"<th>frontier</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div></details>"
        )
    return "".join(out)


@dataclass(frozen=True)
class _Column:
    """One column of the step table: its group (the header's first row), its title, its cell."""

    group: str
    title: str
    cell: Callable[[StepSummary], str]  # the inner HTML of the cell
    text: bool = False  # left-aligned text, not a number
    tip: str = ""


def _pair(s: StepSummary, key: LatencyKey) -> str:
    return f"{_num(stat(s, key, 'p50'))} / {_num(stat(s, key, 'p99'))}"


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
    w = _num(stat(s, "gpu_power_w", "mean"), 0)
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
        cols.append(_Column("Load", "context", lambda s: _num(s.get("context_tokens"))))
    cols.append(_Column("Load", "C" if axis == "concurrency" else "req/s", lambda s: _num(s.get(axis))))
    cols.append(_Column("", "status", _status, text=True))
    cols += [
        _Column("Output tok/s", "total", lambda s: _num(s.get("output_tok_s"), 0), tip="output tok/s of the step"),
        _Column("Output tok/s", "per req", lambda s: _num(s.get("per_request_tok_s"), 1)),
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
        _Column("Requests", "ok", lambda s: _num(s.get("requests_ok"))),
        _Column("Requests", "failed", lambda s: _num(s.get("requests_failed"))),
    ]
    notes: list[str] = []
    if has(lambda s: stat(s, "kv_usage", "max")):
        cols.append(_Column("Server", "KV max", lambda s: _pct(stat(s, "kv_usage", "max"))))
    if has(lambda s: stat(s, "queue_len", "mean")):
        cols.append(_Column("Server", "queue", lambda s: _num(stat(s, "queue_len", "mean"), 1), tip="mean waiting"))
    preempt = [v for s in steps if (v := _n(s.get("preemptions"))) is not None]
    if any(preempt):
        cols.append(_Column("Server", "preempt.", lambda s: _num(s.get("preemptions"))))
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
    if has(lambda s: _n(s.get("tokens_per_joule"))):
        cols.append(_Column("Power", "tok/J", lambda s: _num(s.get("tokens_per_joule"), 2)))
    return cols, notes


def _title_attr(tip: str) -> str:
    return f' title="{esc(tip)}"' if tip else ""


def _steps_table(summary: RunSummary) -> str:
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


def _table(table: Table) -> str:
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


def _errors(summary: RunSummary) -> str:
    totals = as_dict(summary.get("totals"))
    errors = as_dict(totals.get("errors"))
    samples = as_dict(totals.get("error_samples"))
    if not isinstance(errors, dict) or not errors:
        return "<h2 id=errors>Errors</h2><p>No request failed.</p>"
    rows = "".join(
        f"<tr><td><code>{esc(name)}</code></td><td class=n>{_num(count)}</td>"
        f"<td><code>{esc(_clip(samples.get(name, '–')))}</code></td></tr>"
        for name, count in errors.items()
    )
    by_step = []
    axis = summary_axis(summary)
    for s in steps_of(summary):
        e = s.get("errors")
        if isinstance(e, dict) and e:
            parts = ", ".join(f"{k} ×{v}" for k, v in e.items())
            by_step.append(
                f"<li>step {esc(s.get('step', '?'))} ({esc(load_label(_n(s.get(axis)), axis))}): {esc(parts)}</li>"
            )
    steps_html = f"<h3>By step (steady windows)</h3><ul>{''.join(by_step)}</ul>" if by_step else ""
    return (
        "<h2 id=errors>Errors</h2><div class=scroll><table><thead><tr><th>class</th><th class=n>requests</th>"
        f"<th>sample message (first of its class)</th></tr></thead><tbody>{rows}</tbody></table></div>{steps_html}"
    )


def _step_at(steps: Sequence[StepSummary], t_ns: float) -> int | None:
    for s in steps:
        a, b = _n(s.get("start_ns")), _n(s.get("end_ns"))
        if a is not None and b is not None and a <= t_ns < b:
            return s.get("step")
    return None


def _logs(summary: RunSummary, events: Sequence[dict[str, Any]]) -> str:
    steps = steps_of(summary)
    starts = [v for s in steps if (v := _n(s.get("start_ns"))) is not None]
    t0 = min(starts) if starts else None
    logs = sorted((e for e in events if e.get("src") == "log"), key=lambda e: _n(e.get("t_ns")) or 0.0)
    tele = [e for e in events if e.get("src") == "telemetry"]
    out = ["<h2 id=logs>Server log lines</h2>"]
    if not events:
        out.append("<p>No events.jsonl: the server's logs were not captured for this run.</p>")
        return "".join(out)

    def when(e: dict[str, Any]) -> str:
        t = _n(e.get("t_ns"))
        if t is None:
            return "–"
        return f"{(t - t0) / 1e9:+,.1f} s" if t0 is not None else f"{t / 1e9:,.1f}"

    if not logs:
        out.append("<p>No server log line matched a known failure pattern.</p>")
    else:
        shown = logs[:MAX_LOG_LINES]
        cells = []
        for e in shown:
            t = _n(e.get("t_ns"))
            step = _step_at(steps, t) if t is not None else None
            cells.append(
                f"<tr><td class=n>{when(e)}</td><td class=n>{esc('–' if step is None else step)}</td>"
                f"<td><code>{esc(e.get('pattern') or e.get('kind') or '')}</code></td>"
                f"<td>{esc(e.get('severity') or '')}</td><td><code>{esc(_clip(e.get('line') or ''))}</code></td></tr>"
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
            items.append(f"<li>{when(e)} <code>{esc(e.get('kind'))}</code> {esc(_clip(detail, 400))}</li>")
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


def _scenario_env(manifest: dict[str, Any]) -> str:
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
        rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(_clip(v, 300))}</td></tr>" for k, v in facts.items())
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


# ---------------------------------------------------------------------------------------- API


def render_html(run_dir: Path, summary: RunSummary, *, run: Run | None = None) -> str:
    """The report page of a run as one HTML string (inline SVG plots, inline CSS, no scripts).

    ``run_dir``: the run directory (``manifest.json``, ``samples.jsonl``, ``events.jsonl`` are read
    from it unless ``run`` is given; any may be missing).
    """
    manifest, samples, events, failures = _inputs(Path(run_dir), run)
    return _page(summary, manifest, events, build_plots(summary, samples, events, failures))


def _page(
    summary: RunSummary, manifest: dict[str, Any], events: Sequence[dict[str, Any]], plots: Sequence[Plot]
) -> str:
    title = summary.get("label") or summary.get("run_id") or "run"
    version = (
        (manifest.get("versions") or {}).get("llm-loadgen") if isinstance(manifest.get("versions"), dict) else None
    )
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)} · load test report</title>",
        f"<style>{PAGE_CSS}</style></head><body><main>",
        _header(summary),
        _thresholds(summary),
        _verdict(summary),
        _figures(summary),
        _steps_table(summary),
        _detectors(summary),
        _plan(summary),
        _pareto(summary, plots),
        _plots(plots),
        *(_table(t) for t in tables_of(summary)),
        _errors(summary),
        _logs(summary, events),
        _scenario_env(manifest),
        f"<footer>llm-loadgen {esc(version or '')} · summary schema {esc(summary.get('schema_version', '?'))} · "
        f"plots also in {PLOTS_DIR}/*.svg</footer>",
        "</main></body></html>\n",
    ]
    return "\n".join(parts)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink(missing_ok=True)  # a disk that filled mid-file: leave no half file behind
        except OSError:
            pass  # read-only: nothing was written
        raise


def write_html(run_dir: Path, summary: RunSummary, *, run: Run | None = None) -> list[Path]:
    """Write ``report.html`` and ``plots/<slug>.svg`` (one per plot, no-data panels included)
    into ``run_dir``; returns their paths, the page first.

    Raises RunLoadError (naming the file) when the folder is not writable.
    """
    run_dir = Path(run_dir)
    manifest, samples, events, failures = _inputs(run_dir, run)
    plots = build_plots(summary, samples, events, failures)
    page = _page(summary, manifest, events, plots)
    plot_dir = run_dir / PLOTS_DIR
    paths = [run_dir / "report.html"]
    target = plot_dir
    try:
        plot_dir.mkdir(exist_ok=True)
        target = paths[0]
        _write_atomic(paths[0], page)
        for p in plots:
            target = plot_dir / f"{p.slug}.svg"
            _write_atomic(target, '<?xml version="1.0" encoding="UTF-8"?>\n' + p.svg + "\n")
            paths.append(target)
    except OSError as exc:
        raise RunLoadError(
            f"cannot write {target}: {exc.strerror or exc}; check the run folder's permissions and free space"
        ) from exc
    return paths


__all__ = ["PAGE_CSS", "PLOTS_DIR", "figure", "render_html", "write_html"]
