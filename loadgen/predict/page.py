"""``loadgen predict --html``: the deployments side by side on one self-contained page.

Every deployment that starts is drawn on the report's comparison plots (``report.plots_overlay.overlay_plots``:
throughput, TTFT p99, TPOT p99, GPU power and tokens per joule against load, and one Pareto plot of
output tok/s per GPU against per-user tok/s), one colour each; then the choice (with ``--slo``), the
start-up checks and each deployment's rows. Every figure on it is predicted, and the page says so
first. Inline SVG and CSS, no scripts; all text escaped.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from loadgen.analysis.values import load_axis
from loadgen.report.html_common import PAGE_CSS, figure
from loadgen.report.plots_overlay import overlay_plots
from loadgen.report.svg import PALETTE

_CSS = """
ul.runs{list-style:none;padding:0;margin:0 0 8px;display:flex;flex-wrap:wrap;gap:6px 18px;font-size:14px}
ul.runs li{display:flex;align-items:center;gap:6px}
.swatch{display:inline-block;width:22px;height:4px;border-radius:2px}
.predicted{border-left:4px solid var(--accent);padding:6px 10px;background:var(--card,#f5f7f9)}
table.rows td{text-align:right;font-variant-numeric:tabular-nums}
table.rows td:first-child,table.rows td.text{text-align:left}
"""

e = html.escape


def _n(v: object, digits: int = 0) -> str:
    if v is None or not isinstance(v, (int, float)):
        return "–"
    return f"{v:,.{digits}f}"


def _ms(v: object) -> str:
    if not isinstance(v, (int, float)):
        return "–"
    return f"{v:,.2f}" if abs(v) < 10 else f"{v:,.1f}" if abs(v) < 1000 else f"{v:,.0f}"


def _load(r: Mapping[str, Any]) -> str:
    return f"C={r['concurrency']:g}" if r.get("concurrency") is not None else f"{r['rate']:g} req/s"


ROW_HEAD = ["load", "tok/s", "tok/s per GPU", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms"]
ROW_HEAD += ["E2E p50 ms", "GPU W", "tok/J"]


def _td(cell: str) -> str:
    """A cell: figures right-aligned (the table's rule), words left."""
    text = cell.replace(",", "").replace(".", "").replace("C=", "").replace(" req/s", "")
    return f"<td>{e(cell)}</td>" if text in ("", "–") or text.isdigit() else f"<td class=text>{e(cell)}</td>"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "rows") -> str:
    th = "".join(f"<th>{e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(_td(c) for c in row) + "</tr>" for row in rows)
    return f'<div class=scroll><table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table></div>'


def _choice(choice: Mapping[str, Any]) -> str:
    slo = ", ".join(f"{k.removesuffix('_ms')} ≤ {v:g} ms" for k, v in choice["slo"].items())
    target = f"{choice['target_rps']:g} req/s" if choice.get("target_rps") is not None else "no target rate"
    best = choice.get("best")
    head = f"{best} serves it for the least" if best else "No deployment meets the SLO"
    rows = []
    for p in choice["plans"]:
        if "reason" in p:
            rows.append([p["deployment"], str(p["reason"]), "", "", "", "", "", ""])
            continue
        rows.append(
            [
                p["deployment"],
                _load(p["operating_point"]),
                _n(p["tok_s_per_gpu"]),
                _n(p.get("replicas")),
                _n(p.get("gpus")),
                _n(p.get("gpu_hour_cost"), 2),
                _n(p.get("total_hour_cost"), 2),
                _n(p.get("cost_per_million_tokens"), 3),
            ]
        )
    return (
        f'<section class="verdict{"" if best else " none"}" id=choice><p class=head>{e(head)}</p>'
        f"<p>Within {e(slo)}, {e(target)}, {choice['headroom']:.0%} headroom; ranked by {e(choice['ranked_by'])}."
        "</p></section>"
        + _table(
            ["deployment", "operating load", "tok/s per GPU", "replicas", "GPUs", "$/GPU-h", "$/h", "$ per M tokens"],
            rows,
        )
    )


def render_page(result: Mapping[str, Any], slo: Mapping[str, float] | None = None) -> str:
    """The page for ``predict``'s result (with ``choice`` when it has one)."""
    deps = list(result["deployments"])
    rows = list(result["rows"])
    starting = [d["deployment"] for d in deps if d["starts"]]
    runs = [
        (label, {"label": label, "steps": [r for r in rows if r["deployment"] == label], "slo": dict(slo or {})})
        for label in starting
    ]
    title = "Predicted: " + " vs ".join(d["deployment"] for d in deps)
    legend = "".join(
        f'<li><span class="swatch" style="background:{PALETTE[i % len(PALETTE)]}"></span>{e(label)}</li>'
        for i, label in enumerate(starting)
    )
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(title)}</title>",
        f"<style>{PAGE_CSS}{_CSS}</style></head><body><main>",
        f"<h1>{e(title)}</h1>",
        "<p class=predicted id=predicted><strong>Predicted, not measured.</strong> Every figure here is loadgen "
        "sim's model of each deployment on the virtual clock; <code>loadgen sim</code> serves the same deployment "
        "over HTTP for a real <code>loadgen ramp</code> to measure.</p>",
        f"<ul class=runs id=runs>{legend}</ul>",
    ]
    if result.get("choice"):
        parts += ["<h2>Choice</h2>", _choice(result["choice"])]
    if runs:
        axis = load_axis([r for _, s in runs for r in s["steps"]])
        plots = overlay_plots(runs, axis)  # type: ignore[arg-type]
        shown = [p for p in plots if p.has_data] + [p for p in plots if not p.has_data]
        parts += ["<h2 id=plots>Plots</h2>", f"<div class=plots>{''.join(figure(p) for p in shown)}</div>"]
    parts.append("<h2 id=startup>Start-up</h2>")
    parts.append(
        _table(
            ["deployment", "starts", "GPUs", "weights GB per GPU", "KV pool tokens", "knee"],
            [
                [
                    d["deployment"],
                    "yes" if d["starts"] else f"no: {d['failure']}",
                    str(d["gpus"]),
                    _n(d["weights_gb_per_gpu"], 1),
                    _n(d["kv_pool_tokens"]),
                    "–" if not d.get("knee") else str(d["knee"].get("knee") or "none"),
                ]
                for d in deps
            ],
        )
    )
    for label in starting:
        mine = [r for r in rows if r["deployment"] == label]
        parts.append(f"<h2>{e(label)}</h2>")
        knee = next((d.get("knee") for d in deps if d["deployment"] == label), None)
        if knee and knee.get("reason"):
            parts.append(f"<p class=note>Knee: {e(str(knee.get('knee') or 'none'))}: {e(str(knee['reason']))}</p>")
        parts.append(
            _table(
                ROW_HEAD,
                [
                    [
                        _load(r),
                        _n(r["output_tok_s"]),
                        _n(r["tok_s_per_gpu"]),
                        _ms(r["ttft_ms"]["p50"]),
                        _ms(r["ttft_ms"]["p99"]),
                        _ms(r["tpot_ms"]["p50"]),
                        _ms(r["tpot_ms"]["p99"]),
                        _ms(r["e2e_ms"]["p50"]),
                        _n(r["gpu_power_w"]["mean"]),
                        _n(r["tokens_per_joule"], 2),
                    ]
                    for r in mine
                ],
            )
        )
    parts.append("</main></body></html>\n")
    return "\n".join(parts)
