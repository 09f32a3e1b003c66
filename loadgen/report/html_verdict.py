"""report.html's verdict: what the run concluded, and why.

Above the step table: the title and the run's facts (with "Stopped early" and the twin's PREDICTED
banner when they apply), the ``--fail-on`` / ``--abort-on`` verdict, the knee verdict (its clauses
split into what decides and the evidence) and the headline figures (``data-figure`` /
``data-count`` attributes that tests read). After it: each detector's finding (only the deciding
ones styled as the verdict) and the capacity plan when the summary has one. Every text from the
summary is escaped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loadgen.analysis.contracts import RunSummary
from loadgen.analysis.knee import deciding_detectors, rule_text
from loadgen.analysis.values import as_axis, as_dict, as_list, number, steps_of, summary_axis
from loadgen.report.html_common import fmt_num, fmt_pct
from loadgen.report.markdown import stopped_early
from loadgen.report.plots_common import knee_load, load_label
from loadgen.report.svg import esc


def header_html(summary: RunSummary) -> str:
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


def verdict_html(summary: RunSummary) -> str:
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


def thresholds_html(summary: RunSummary) -> str:
    """The --fail-on / --abort-on verdict, first thing on the page (what a pipeline gated on)."""
    v = summary.get("thresholds")
    if not isinstance(v, dict) or not v.get("results"):
        return ""
    from loadgen.analysis.thresholds import verdict_lines

    head, *rest = verdict_lines(v)
    css = "hard" if v.get("verdict") == "fail" else "none"
    items = "".join(f"<li>{esc(line)}</li>" for line in rest)
    return f'<section class="verdict {css}" id="thresholds"><p class=head>{esc(head)}</p><ul>{items}</ul></section>'


def figures_html(summary: RunSummary) -> str:
    """The headline cards. Each is ``div.figure`` with a ``data-figure`` name; the request counts
    also carry ``data-count="ok"`` / ``data-count="failed"`` (tests read them: keep them stable)."""
    totals = as_dict(summary.get("totals"))
    steps = steps_of(summary)
    axis = summary_axis(summary)
    items: list[tuple[str, str, str]] = []  # (name, value, label)
    if number(totals.get("peak_output_tok_s")) is not None:
        at = totals.get("peak_concurrency")
        where = f"at C={at}" if at is not None else f"at step {totals.get('peak_step')}"
        items.append(("peak", f"{fmt_num(totals['peak_output_tok_s'], 0)} tok/s", f"peak throughput {where}"))
    items.append(("ok", fmt_num(totals.get("requests_ok", 0)), "successful requests"))
    failed = totals.get("requests_failed", 0)
    items.append(("failed", fmt_num(failed), "failed requests"))
    valid = f"{fmt_num(totals.get('valid_steps', 0))} / {fmt_num(totals.get('steps', len(steps)))}"
    items.append(("valid-steps", valid, "valid steps"))
    if (duration_s := number(totals.get("duration_s"))) is not None:
        items.append(("duration", f"{duration_s:,.0f} s", "duration"))
    energies = [e for s in steps if (e := number(s.get("energy_j"))) is not None]
    if energies:
        items.append(("energy", f"{sum(energies) / 3.6e6 * 1000:,.1f} Wh", "GPU energy, steady windows"))
    tpj = [(t, s) for s in steps if (t := number(s.get("tokens_per_joule"))) is not None and s.get("power_valid", True)]
    if tpj:
        best, s = max(tpj, key=lambda p: p[0])
        items.append(
            ("tokens-per-joule", f"{best:.2f} tok/J", f"best efficiency, {load_label(number(s.get(axis)), axis)}")
        )
    cards = []
    for name, value, label in items:
        bad = " bad" if name == "failed" and number(failed) else ""
        count = f' data-count="{name}"' if name in ("ok", "failed") else ""
        cards.append(
            f"<div class='figure{bad}' data-figure=\"{name}\"{count}><b>{value}</b><small>{esc(label)}</small></div>"
        )
    return f'<div class=figures id="figures">{"".join(cards)}</div>'


def detectors_html(summary: RunSummary) -> str:
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
        load = number(d.get("load")) if d.get("load") is not None else number(d.get(axis))
        knee_at = number(d.get("knee"))
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
                    f"step {s.get('step', '?')} ({load_label(number(s.get(axis)), axis)}): {s.get('invalid_reason')}"
                )
        note = f"<p class=note>Left out as INVALID: {esc('; '.join(parts))}</p>" if parts else ""
    return (
        "<h2 id=detectors>Detectors</h2><p class=note>Each detector reads the step table on its own; "
        "<i>at</i> is where its signal appears, <i>proposes</i> the knee it votes for. Only the ones marked "
        "<i>decides</i> make the verdict; a <i>flagged</i> one is evidence, weighed in the verdict's words.</p>"
        "<div class=scroll><table><thead><tr><th>detector</th><th>finding</th><th class=n>at</th>"
        f"<th class=n>proposes</th><th>evidence</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>{note}"
    )


def plan_html(summary: RunSummary) -> str:
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
                f"{load_label(number(op.get(axis)), axis)}" + (" (interpolated)" if op.get("interpolated") else ""),
            ),
            ("goodput", f"{fmt_num(op.get('goodput_req_s'))} req/s, {fmt_num(op.get('goodput_tok_s'))} tok/s"),
            (
                f"per replica ({fmt_pct(plan.get('headroom'))} headroom)",
                f"{fmt_num(per.get('req_s'))} req/s, {fmt_num(per.get('tok_s'))} tok/s",
            ),
        ]
        if plan.get("replicas") is not None:
            facts.append(("replicas", f"{fmt_num(plan.get('replicas'))} ({fmt_num(plan.get('gpus'))} GPUs)"))
        if energy:
            facts.append(("energy", f"{fmt_num(energy.get('kwh_per_million_tokens'))} kWh per million tokens"))
        if cost:
            facts.append(
                (
                    "cost",
                    f"{fmt_num(cost.get('per_million_tokens'))} per million tokens "
                    f"(at {fmt_num(cost.get('gpu_hour_cost'))} per GPU-hour)",
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


__all__ = ["detectors_html", "figures_html", "header_html", "plan_html", "thresholds_html", "verdict_html"]
