"""Runs side by side: steps matched by (context_tokens, load), ratios against the first run.

``compare_runs`` takes parsed summaries (``summary.json`` dicts, or bare step lists) and returns
rows keyed by (context_tokens, concurrency) — or rate, for open-loop runs — with each run's values
and each later run's ratio to the first (the baseline): e.g. speculative / autoregressive output
tok/s at every concurrency. A ratio is None when either step is invalid or a value is missing;
steps found in only some runs are listed under ``unmatched``.

``render_compare_page`` is compare.html: the main plots with every run overlaid (one colour per
run), then the table.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict, cast

from loadgen.analysis.contracts import AxisLoad, LoadAxis, RunSummary, StepSummary
from loadgen.analysis.repeats import has_repeats, merged_steps, ratio_ci, repeat_groups, repeat_of
from loadgen.analysis.values import at_axis, load_axis, number, stat
from loadgen.report.html import PAGE_CSS, figure
from loadgen.report.plots import overlay_plots
from loadgen.report.svg import PALETTE
from loadgen.rundir.records import RunDirError

# (key, sub-key or None, column title, higher is better)
METRICS: tuple[tuple[str, str | None, str, bool], ...] = (
    ("output_tok_s", None, "tok/s", True),
    ("per_request_tok_s", None, "tok/s/req", True),
    ("ttft_ms", "p50", "TTFT p50 ms", False),
    ("tpot_ms", "p50", "TPOT p50 ms", False),
    ("e2e_ms", "p99", "E2E p99 ms", False),
)


# the figures whose run-to-run noise the repeats measure, for "beyond the noise"
NOISE_METRICS: tuple[tuple[str, str | None], ...] = (("output_tok_s", None), ("tpot_ms", "p50"), ("ttft_ms", "p50"))


class Metric(TypedDict):
    key: str
    stat: str | None
    title: str
    higher_is_better: bool


class _RowRequired(TypedDict):
    context_tokens: int | None
    valid: dict[str, bool]  # run label -> its step is valid
    values: dict[str, dict[str, float | None]]  # run label -> metric key -> value
    ratios: dict[str, dict[str, float | None]]  # later run's label -> metric key -> its value / baseline's


class CompareRow(_RowRequired, AxisLoad, total=False):
    """One load measured in every run. ``noise`` (runs with ``--repeat``): later run's label ->
    metric -> the ratio to the baseline with its 95 % interval over the repeats and whether it is
    beyond the noise (``analysis.repeats.ratio_ci``)."""

    noise: dict[str, dict[str, dict[str, Any]]]


class Comparison(TypedDict):
    """What ``compare_runs`` returns (compare.json)."""

    labels: list[str]
    baseline: str
    axis: LoadAxis
    metrics: list[Metric]
    rows: list[CompareRow]
    unmatched: dict[str, list[list[Any]]]  # label -> [context_tokens, load] of its steps no other run has


def load_summary(run_dir: str | os.PathLike[str]) -> RunSummary:
    """Read ``run_dir/summary.json``; :class:`RunDirError` names the file and what to do."""
    path = Path(run_dir) / "summary.json"
    if not Path(run_dir).is_dir():
        raise RunDirError(f"{run_dir} is not a run directory (no such folder): pass a folder under reports/")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunDirError(f"no summary.json in {run_dir}: run `loadgen report {run_dir}` first") from None
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RunDirError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
            f"rebuild it with `loadgen report {run_dir}`"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list):
        raise RunDirError(f"{path} has no 'steps' list; rebuild it with `loadgen report {run_dir}`")
    return cast(RunSummary, data)  # of any version: its readers take what does not match as missing


def _steps(summary: RunSummary | Sequence[StepSummary]) -> list[StepSummary]:
    if isinstance(summary, Mapping):
        steps = summary.get("steps")
        return list(steps) if isinstance(steps, list) else []
    return list(summary)


def _value(step: Mapping[str, Any], key: str, sub: str | None) -> float | None:
    return stat(step, key, sub) if sub is not None else number(step.get(key))


def _key(step: StepSummary, axis: LoadAxis) -> tuple[int | None, float] | None:
    load = number(step.get(axis))
    if load is None:
        return None
    return step.get("context_tokens"), (int(load) if load.is_integer() else load)


def compare_runs(
    summaries: Sequence[RunSummary | Sequence[StepSummary]], labels: Sequence[str] | None = None
) -> Comparison:
    """Match steps across runs and compute each run's ratio to the first, per step and metric."""
    if len(summaries) < 2:
        raise ValueError(f"compare needs at least two runs, got {len(summaries)}")
    if labels is None:
        labels = [
            str(s.get("label") or f"run{i + 1}") if isinstance(s, Mapping) else f"run{i + 1}"
            for i, s in enumerate(summaries)
        ]
    if len(labels) != len(summaries):
        raise ValueError(f"{len(labels)} labels for {len(summaries)} runs")
    if len(set(labels)) != len(labels):
        raise ValueError(f"labels must be distinct, got {list(labels)}")
    raw_runs = [_steps(s) for s in summaries]
    all_steps = [s for run in raw_runs for s in run]
    axis = load_axis(all_steps)
    # a run with --repeat compares by its means over the repeats, and keeps each repeat's figures
    # (the samples of the noise)
    runs = [merged_steps(run, repeat_groups(run)) if has_repeats(run) else run for run in raw_runs]
    samples: list[dict[tuple[int | None, float], dict[str, list[float]]]] = []
    for run in raw_runs:
        per: dict[tuple[int | None, float], dict[str, list[float]]] = {}
        for s in run:
            k = _key(s, axis)
            if k is None or repeat_of(s) is None or s.get("valid", True) is False:
                continue
            for m, sub in NOISE_METRICS:
                v = _value(s, m, sub)
                if v is not None:
                    per.setdefault(k, {}).setdefault(m, []).append(v)
        samples.append(per)

    indexed: list[dict[tuple[int | None, float], StepSummary]] = []
    for run in runs:
        idx: dict[tuple[int | None, float], StepSummary] = {}
        for s in run:
            k = _key(s, axis)
            if k is not None:
                idx[k] = s  # without --repeat, a load measured twice keeps its last measurement
        indexed.append(idx)

    keys = set(indexed[0])
    for idx in indexed[1:]:
        keys &= set(idx)
    everywhere = sorted(keys, key=lambda k: (k[0] is None, k[0] if k[0] is not None else 0, k[1]))
    unmatched = {
        label: sorted(([k[0], k[1]] for k in idx if k not in keys), key=lambda k: (str(k[0]), k[1]))
        for label, idx in zip(labels, indexed, strict=True)
    }

    base = labels[0]
    rows: list[CompareRow] = []
    for k in everywhere:
        values: dict[str, dict[str, float | None]] = {}
        valid: dict[str, bool] = {}
        for label, idx in zip(labels, indexed, strict=True):
            s = idx[k]
            valid[label] = s.get("valid", True) is not False
            values[label] = {m: _value(s, m, sub) for m, sub, _, _ in METRICS}
        ratios: dict[str, dict[str, float | None]] = {}
        for label in labels[1:]:
            r: dict[str, float | None] = {}
            for m, *_ in METRICS:
                a, b = values[base][m], values[label][m]
                ok = valid[base] and valid[label] and a is not None and b is not None and a > 0
                r[m] = b / a if ok and a is not None and b is not None else None
            ratios[label] = r
        row: CompareRow = {
            "context_tokens": k[0],
            **at_axis(axis, k[1]),
            "valid": valid,
            "values": values,
            "ratios": ratios,
        }
        noise: dict[str, dict[str, dict[str, Any]]] = {}
        for i, label in enumerate(labels[1:], start=1):
            for m, _ in NOISE_METRICS:
                base_samples = samples[0].get(k, {}).get(m, [])
                run_samples = samples[i].get(k, {}).get(m, [])
                if len(base_samples) >= 2 and len(run_samples) >= 2:
                    noise.setdefault(label, {})[m] = ratio_ci(run_samples, base_samples)
        if noise:
            row["noise"] = noise
        rows.append(row)
    return {
        "labels": list(labels),
        "baseline": base,
        "axis": axis,
        "metrics": [{"key": m, "stat": sub, "title": t, "higher_is_better": h} for m, sub, t, h in METRICS],
        "rows": rows,
        "unmatched": unmatched,
    }


def _fmt(v: float | None, ratio: bool = False) -> str:
    if v is None:
        return "—"
    if ratio:
        return f"{v:.2f}x"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _load(v: float) -> str:
    return str(int(v)) if v == int(v) else f"{v:g}"


def render_compare_md(cmp: Comparison, metrics: Sequence[str] = ("output_tok_s", "tpot_ms")) -> str:
    """A Markdown table of ``compare_runs``'s result: values per run, then ratios to the baseline."""
    labels: list[str] = list(cmp["labels"])
    base = cmp["baseline"]
    titles = {m["key"]: m["title"] for m in cmp["metrics"]}
    axis_title = "C" if cmp["axis"] == "concurrency" else "rate (req/s)"
    header = ["context", axis_title]
    for m in metrics:
        header += [f"{label} {titles[m]}" for label in labels]
        header += [f"{label}/{base} {titles[m]}" for label in labels[1:]]
    lines = ["| " + " | ".join(_esc(h) for h in header) + " |", "|" + "---|" * len(header)]
    invalid_seen = False
    for row in cmp["rows"]:
        cells = [str(row["context_tokens"]) if row["context_tokens"] is not None else "—", _load(row[cmp["axis"]])]
        for m in metrics:
            for label in labels:
                mark = "" if row["valid"][label] else " (invalid)"
                invalid_seen |= bool(mark)
                cells.append(_fmt(row["values"][label][m]) + mark)
            cells += [_fmt(row["ratios"][label][m], ratio=True) for label in labels[1:]]
        lines.append("| " + " | ".join(cells) + " |")
    out = "\n".join(lines) + "\n"
    if not cmp["rows"]:
        out += "\nNo step was measured at the same context length and load in every run.\n"
    if invalid_seen:
        out += "\nRatios are left out (—) where either step is INVALID.\n"
    noisy = [row for row in cmp["rows"] if row.get("noise")]
    if noisy:
        out += "\nRatios with their 95% interval over the repeats (delta method on the log ratio, Welch's t):\n\n"
        for row in noisy:
            where = ("C=" if cmp["axis"] == "concurrency" else "") + _load(row[cmp["axis"]])
            if row["context_tokens"] is not None:
                where += f" at {row['context_tokens']} context tokens"
            for label, by_metric in row.get("noise", {}).items():
                parts = []
                for m, r in by_metric.items():
                    if r.get("low") is None:
                        continue
                    verdict = "beyond the noise" if r["beyond_noise"] else "within the noise"
                    parts.append(f"{titles[m]} {r['ratio']:.2f}x, 95% CI {r['low']:.2f}-{r['high']:.2f} ({verdict})")
                if parts:
                    out += f"- {_esc(label)} vs {_esc(base)} at {where}: " + "; ".join(parts) + "\n"
    missing = {label: ks for label, ks in cmp["unmatched"].items() if ks}
    if missing:
        parts = [f"{_esc(label)}: " + ", ".join(f"{_load(k[1])}@{k[0]}" for k in ks) for label, ks in missing.items()]
        out += "\nSteps in only some runs (load@context): " + "; ".join(parts) + "\n"
    return out


def _esc(text: str) -> str:
    return text.replace("|", "\\|")


def render_compare_page(
    cmp: Comparison,
    summaries: Sequence[RunSummary],
    metrics: Sequence[str] = ("output_tok_s", "tpot_ms"),
) -> str:
    """compare.html: every run overlaid on the main plots (throughput, TTFT p99, TPOT p99, GPU
    power, tokens per joule against load, and the Pareto plot), one colour per run with a legend,
    then the table of :func:`render_compare_html`. ``summaries`` in the order of ``cmp["labels"]``.
    One self-contained page (inline SVG and CSS, no scripts); every run's text is escaped."""
    labels: list[str] = list(cmp["labels"])
    if len(summaries) != len(labels):
        raise ValueError(f"{len(summaries)} summaries for {len(labels)} labels")
    plots = overlay_plots(list(zip(labels, summaries, strict=True)), cmp["axis"])
    e = html.escape
    title = "Comparison: " + " vs ".join(labels)
    legend = "".join(
        f'<li><span class="swatch" style="background:{PALETTE[i % len(PALETTE)]}"></span>{e(label)}'
        f"{' <small>(baseline)</small>' if label == cmp['baseline'] else ''}</li>"
        for i, label in enumerate(labels)
    )
    shown = [p for p in plots if p.has_data] + [p for p in plots if not p.has_data]
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(title)}</title>",
        f"<style>{PAGE_CSS}{_COMPARE_CSS}</style></head><body><main>",
        f"<h1>{e(title)}</h1>",
        f"<ul class=runs id=runs>{legend}</ul>",
        "<h2 id=plots>Plots</h2><p class=note>Every run on the same axes: one colour per run (circle, square, "
        "diamond markers in turn), one dash per context length; open grey markers are INVALID steps. Hover a "
        "point for its run, step and value.</p>",
        f"<div class=plots>{''.join(figure(p) for p in shown)}</div>",
        f"<h2 id=table>Step by step</h2><p class=note>Steps matched by context length and load; ratios are each "
        f"run's value over the baseline's ({e(cmp['baseline'])}).</p>",
        f"<div class=scroll>{render_compare_html(cmp, metrics)}</div>",
    ]
    missing = {label: ks for label, ks in cmp["unmatched"].items() if ks}
    if missing:
        items = "".join(
            f"<li>{e(label)}: " + e(", ".join(f"{_load(k[1])}@{k[0]}" for k in ks)) + "</li>"
            for label, ks in missing.items()
        )
        parts.append(f"<p class=note>Steps in only some runs (load@context):</p><ul class=note>{items}</ul>")
    parts.append("</main></body></html>\n")
    return "\n".join(parts)


_COMPARE_CSS = """
ul.runs{list-style:none;padding:0;margin:0 0 8px;display:flex;flex-wrap:wrap;gap:6px 18px;font-size:14px}
ul.runs li{display:flex;align-items:center;gap:6px}
.swatch{display:inline-block;width:22px;height:4px;border-radius:2px}
table.compare td{text-align:right;font-variant-numeric:tabular-nums}
table.compare td.invalid{background:var(--bad-bg)}
table.compare td.ratio{color:var(--accent)}
"""


def render_compare_html(cmp: Comparison, metrics: Sequence[str] = ("output_tok_s", "tpot_ms")) -> str:
    """The same table as :func:`render_compare_md` as an HTML ``<table>`` fragment; all text escaped."""
    labels: list[str] = list(cmp["labels"])
    base = cmp["baseline"]
    titles = {m["key"]: m["title"] for m in cmp["metrics"]}
    e = html.escape
    head = ["context", "C" if cmp["axis"] == "concurrency" else "rate (req/s)"]
    for m in metrics:
        head += [f"{label} {titles[m]}" for label in labels]
        head += [f"{label}/{base} {titles[m]}" for label in labels[1:]]
    out = ['<table class="compare">', "<thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr></thead>"]
    out.append("<tbody>")
    for row in cmp["rows"]:
        ctx = row["context_tokens"]
        cells = [e(str(ctx)) if ctx is not None else "—", e(_load(row[cmp["axis"]]))]
        for m in metrics:
            for label in labels:
                invalid = "" if row["valid"][label] else ' class="invalid" title="INVALID step"'
                cells.append(f"<td{invalid}>{e(_fmt(row['values'][label][m]))}</td>")
            cells += [f'<td class="ratio">{e(_fmt(row["ratios"][label][m], ratio=True))}</td>' for label in labels[1:]]
        first = "".join(f"<td>{c}</td>" for c in cells[:2])
        out.append(f"<tr>{first}{''.join(cells[2:])}</tr>")
    out.append("</tbody></table>")
    return "\n".join(out) + "\n"


def write_comparison(run_dirs: Sequence[str | os.PathLike[str]], out: str) -> tuple[Path, str]:
    """``loadgen compare``: summarise each run, write compare.md/.html/.json into a new directory
    under ``out``; returns (that directory, the Markdown). Labels repeated across runs are numbered."""
    import orjson

    from loadgen.report.pipeline import summarise
    from loadgen.rundir.layout import create_run_dir

    summaries = [summarise(d)[1] for d in run_dirs]
    labels: list[str] = []
    for summary, d in zip(summaries, run_dirs, strict=True):
        label = str(summary.get("label") or summary.get("run_id") or Path(d).name)
        while label in labels:  # the same label twice (e.g. a run against itself): number them
            label += f" #{len(labels) + 1}"
        labels.append(label)
    cmp = compare_runs(summaries, labels)
    target = create_run_dir(out, "compare")
    md = render_compare_md(cmp)
    (target / "compare.md").write_text(md)
    (target / "compare.html").write_text(render_compare_page(cmp, summaries), encoding="utf-8")
    (target / "compare.json").write_bytes(orjson.dumps(cmp, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    return target, md
