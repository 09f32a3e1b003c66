"""What every HTML page of the report shares: the stylesheet, a plot's figure, the cell formats.

``PAGE_CSS`` styles report.html, compare.html and ``loadgen predict --html`` alike (inline, no
fonts, no network); ``figure`` puts one ``Plot`` on a page (its SVG inline, its caption below; a
no-data panel bare). The formatters turn a missing value into "–" and clip long messages; text is
escaped by the caller (``svg.esc``).
"""

from __future__ import annotations

import numpy as np

from loadgen.analysis.formats import MISSING, fixed, percent, prose
from loadgen.analysis.values import number
from loadgen.report.plots_common import Plot
from loadgen.report.svg import esc

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


def fmt_num(v: float | None, digits: int | None = None) -> str:
    """A number for a cell: ``digits`` decimals when given, else integers whole and the rest to three
    significant figures, with thousands separators; "–" when missing."""
    if digits is not None:
        return fixed(number(v), digits)  # a whole number too gets its decimals here
    if isinstance(v, (int, np.integer)):
        return fixed(v)
    f = number(v)
    return MISSING if f is None else prose(f)


def fmt_pct(v: float | None) -> str:
    """A fraction as a whole percentage ("–" when missing)."""
    return percent(v)


def clip(text: object, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` cut to ``limit`` characters, the last one an ellipsis when it was longer."""
    s = str(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def figure(p: Plot) -> str:
    """One plot as a ``<figure>`` (its SVG inline, its caption below; a no-data panel bare)."""
    return (
        f'<figure id="plot-{esc(p.slug)}" data-plot="{esc(p.slug)}" data-has-data="{str(p.has_data).lower()}"'
        f"{'' if p.has_data else ' class=empty'}>{p.svg}"
        f"{f'<figcaption>{esc(p.caption)}</figcaption>' if p.has_data and p.caption else ''}</figure>"
    )


__all__ = ["MAX_MESSAGE_CHARS", "PAGE_CSS", "PLOTS_DIR", "clip", "figure", "fmt_num", "fmt_pct"]
