"""Runs side by side: steps matched by (context_tokens, load), ratios against the first run.

``compare_runs`` takes parsed summaries (``summary.json`` dicts, or bare step lists) and returns
rows keyed by (context_tokens, concurrency) — or rate, for open-loop runs — with each run's values
and each later run's ratio to the first (the baseline): e.g. speculative / autoregressive output
tok/s at every concurrency. A ratio is None when either step is invalid or a value is missing;
steps found in only some runs are listed under ``unmatched``.

The comparison opens with a *headline* (``Comparison["headline"]``): for each later run against the
baseline, which is better on the primary figures, peak valid output tok/s and TTFT p50 at the
highest load both ran validly, by what ratio, and whether the difference is beyond the noise. The
noise is the one the runs measured: with ``--repeat`` on both sides, the ratio's 95 % interval over
the repeats (``analysis.repeats.ratio_ci``); otherwise it is unknown and the headline says so (one
run each has no spread to judge by; the analysis has no per-step interval), never claiming a
difference it cannot show: a run is "better" only beyond the noise, else "ahead". A peak each run
found at a load the other did not measure is not like for like ("higher", ``like_for_like``
false); the page's title is then the figure at a load both ran.

``render_compare_page`` is compare.html: the headline, the main plots with every run overlaid (one
colour per run; INVALID steps as open markers, never joined), then the table.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict, cast

from loadgen.analysis.contracts import AxisLoad, LoadAxis, RunSummary, StepSummary
from loadgen.analysis.formats import ratio as as_ratio
from loadgen.analysis.formats import sig3
from loadgen.analysis.repeats import has_repeats, merged_steps, ratio_ci, repeat_groups, repeat_of
from loadgen.analysis.values import at_axis, load_axis, number, stat
from loadgen.report.html_common import PAGE_CSS, figure
from loadgen.report.plots_overlay import overlay_plots
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


class Headline(TypedDict):
    """One primary figure of one later run against the baseline (``Comparison["headline"]``).

    ``better``: the label of the better run, None when equal; ``ratio``: run / baseline;
    ``noise``: "repeats" (``low``/``high``: the ratio's 95 % interval, ``beyond_noise``) or "unknown"
    (``beyond_noise`` None, ``noise_note`` says why); ``where``: [context_tokens, load] of the
    figure in each run; ``text``: the finding in one sentence."""

    metric: str  # "peak_output_tok_s" | "ttft_p50_ms"
    title: str
    run: str
    baseline: str
    value: float
    baseline_value: float
    where: dict[str, list[Any]]
    ratio: float
    higher_is_better: bool
    better: str | None
    noise: str
    low: float | None
    high: float | None
    beyond_noise: bool | None
    noise_note: str
    like_for_like: bool  # False: a peak each run found at a load the other did not measure
    text: str


class _ComparisonRequired(TypedDict):
    labels: list[str]
    baseline: str
    axis: LoadAxis
    metrics: list[Metric]
    rows: list[CompareRow]
    unmatched: dict[str, list[list[Any]]]  # label -> [context_tokens, load] of its steps no other run has


class Comparison(_ComparisonRequired, total=False):
    """What ``compare_runs`` returns (compare.json); ``headline`` (see :class:`Headline`) is absent
    from comparisons written before it existed."""

    headline: list[Headline]


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


_Key = tuple[int | None, float]
_Samples = dict[_Key, dict[str, list[float]]]


def _key(step: StepSummary, axis: LoadAxis) -> _Key | None:
    load = number(step.get(axis))
    if load is None:
        return None
    return step.get("context_tokens"), (int(load) if load.is_integer() else load)


def _labels_of(summaries: Sequence[RunSummary | Sequence[StepSummary]], labels: Sequence[str] | None) -> Sequence[str]:
    """The runs' labels: those given (one per run, all distinct; ValueError otherwise), else each
    summary's ``label``, else ``run<i>``."""
    if labels is None:
        labels = [
            str(s.get("label") or f"run{i + 1}") if isinstance(s, Mapping) else f"run{i + 1}"
            for i, s in enumerate(summaries)
        ]
    if len(labels) != len(summaries):
        raise ValueError(f"{len(labels)} labels for {len(summaries)} runs")
    if len(set(labels)) != len(labels):
        raise ValueError(f"labels must be distinct, got {list(labels)}")
    return labels


def _noise_samples(raw_runs: Sequence[Sequence[StepSummary]], axis: LoadAxis) -> list[_Samples]:
    """Per run, per load: each valid repeat's figures of ``NOISE_METRICS`` (the samples of the noise)."""
    samples: list[_Samples] = []
    for run in raw_runs:
        per: _Samples = {}
        for s in run:
            k = _key(s, axis)
            if k is None or repeat_of(s) is None or s.get("valid", True) is False:
                continue
            for m, sub in NOISE_METRICS:
                v = _value(s, m, sub)
                if v is not None:
                    per.setdefault(k, {}).setdefault(m, []).append(v)
        samples.append(per)
    return samples


def _indexed(runs: Sequence[Sequence[StepSummary]], axis: LoadAxis) -> list[dict[_Key, StepSummary]]:
    """Per run, its steps by (context_tokens, load)."""
    indexed: list[dict[_Key, StepSummary]] = []
    for run in runs:
        idx: dict[_Key, StepSummary] = {}
        for s in run:
            k = _key(s, axis)
            if k is not None:
                idx[k] = s  # without --repeat, a load measured twice keeps its last measurement
        indexed.append(idx)
    return indexed


def _matched(
    labels: Sequence[str], indexed: Sequence[Mapping[_Key, StepSummary]]
) -> tuple[list[_Key], dict[str, list[list[Any]]]]:
    """The loads every run measured (by context length, then load), and per run those only some have."""
    keys = set(indexed[0])
    for idx in indexed[1:]:
        keys &= set(idx)
    everywhere = sorted(keys, key=lambda k: (k[0] is None, k[0] if k[0] is not None else 0, k[1]))
    unmatched = {
        label: sorted(([k[0], k[1]] for k in idx if k not in keys), key=lambda k: (str(k[0]), k[1]))
        for label, idx in zip(labels, indexed, strict=True)
    }
    return everywhere, unmatched


def _ratios(
    labels: Sequence[str], values: Mapping[str, Mapping[str, float | None]], valid: Mapping[str, bool]
) -> dict[str, dict[str, float | None]]:
    """Each later run's value over the baseline's, per metric; None unless both steps are valid and
    both values present (the baseline's above 0)."""
    base = labels[0]
    ratios: dict[str, dict[str, float | None]] = {}
    for label in labels[1:]:
        r: dict[str, float | None] = {}
        for m, *_ in METRICS:
            a, b = values[base][m], values[label][m]
            ok = valid[base] and valid[label] and a is not None and b is not None and a > 0
            r[m] = b / a if ok and a is not None and b is not None else None
        ratios[label] = r
    return ratios


def _row(
    k: _Key,
    axis: LoadAxis,
    labels: Sequence[str],
    indexed: Sequence[Mapping[_Key, StepSummary]],
    samples: Sequence[_Samples],
) -> CompareRow:
    """One load every run measured: each run's values and validity, the ratios to the baseline, and
    the ratios' noise where both sides have two repeats or more."""
    values: dict[str, dict[str, float | None]] = {}
    valid: dict[str, bool] = {}
    for label, idx in zip(labels, indexed, strict=True):
        s = idx[k]
        valid[label] = s.get("valid", True) is not False
        values[label] = {m: _value(s, m, sub) for m, sub, _, _ in METRICS}
    row: CompareRow = {
        "context_tokens": k[0],
        **at_axis(axis, k[1]),
        "valid": valid,
        "values": values,
        "ratios": _ratios(labels, values, valid),
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
    return row


def compare_runs(
    summaries: Sequence[RunSummary | Sequence[StepSummary]], labels: Sequence[str] | None = None
) -> Comparison:
    """Match steps across runs and compute each run's ratio to the first, per step and metric."""
    if len(summaries) < 2:
        raise ValueError(f"compare needs at least two runs, got {len(summaries)}")
    labels = _labels_of(summaries, labels)
    raw_runs = [_steps(s) for s in summaries]
    all_steps = [s for run in raw_runs for s in run]
    axis = load_axis(all_steps)
    # a run with --repeat compares by its means over the repeats, and keeps each repeat's figures
    # (the samples of the noise)
    runs = [merged_steps(run, repeat_groups(run)) if has_repeats(run) else run for run in raw_runs]
    samples = _noise_samples(raw_runs, axis)
    indexed = _indexed(runs, axis)
    everywhere, unmatched = _matched(labels, indexed)
    rows = [_row(k, axis, labels, indexed, samples) for k in everywhere]
    repeated = {label: has_repeats(run) for label, run in zip(labels, raw_runs, strict=True)}
    return {
        "labels": list(labels),
        "baseline": labels[0],
        "axis": axis,
        "metrics": [{"key": m, "stat": sub, "title": t, "higher_is_better": h} for m, sub, t, h in METRICS],
        "rows": rows,
        "unmatched": unmatched,
        "headline": _headline(labels, indexed, samples, repeated, rows, axis),
    }


def where_label(axis: LoadAxis, load: float, ctx: object) -> str:
    """A matched step in words: ``C=64``, ``C=64, 8,192 ctx``, ``2.5 req/s`` (never ``64@None``)."""
    at = f"C={_load(load)}" if axis == "concurrency" else f"{_load(load)} req/s"
    if ctx is None:
        return at
    return f"{at}, {ctx:,} ctx" if isinstance(ctx, int) else f"{at}, {ctx} ctx"


def _noise(
    label: str, base: str, run_samples: list[float], base_samples: list[float], repeated: dict[str, bool]
) -> tuple[str, dict[str, Any] | None, str]:
    """("repeats", ratio_ci, "") when both sides have two valid repeats or more, else ("unknown",
    None, why)."""
    if len(run_samples) >= 2 and len(base_samples) >= 2:
        return "repeats", ratio_ci(run_samples, base_samples), ""
    if not repeated[label] and not repeated[base]:
        return "unknown", None, "one run each (no --repeat), so no spread to judge it by"
    if repeated[label] != repeated[base]:
        only = label if repeated[label] else base
        return "unknown", None, f"only {only} was repeated, so the other's spread is not known"
    return "unknown", None, "fewer than two valid repeats of that step on one side"


def _headline_one(
    metric: str,
    title: str,
    higher: bool,
    label: str,
    base: str,
    found: tuple[tuple[float, _Key], tuple[float, _Key]],
    noise: tuple[str, dict[str, Any] | None, str],
    axis: LoadAxis,
    unit: str,
    reach: tuple[float, float] | None = None,
) -> Headline:
    """``reach``: the highest load each side measured validly (label's, base's), for a peak: peaks
    found at different loads by runs that did not measure the same loads are not like for like."""
    (value, at), (base_value, base_at) = found
    ratio = value / base_value
    better = None if ratio == 1.0 else (label if (ratio > 1.0) == higher else base)
    kind, ci, why = noise
    low = high = None
    beyond: bool | None = None
    if ci is not None and ci.get("low") is not None:
        low, high, beyond = float(ci["low"]), float(ci["high"]), bool(ci["beyond_noise"])
    same_load = at == base_at

    def fig(v: float, k: _Key) -> str:
        return f"{_fmt(v)} {unit}" + ("" if same_load else f" ({where_label(axis, k[1], k[0])})")

    head = f"{title}: {label} {fig(value, at)} vs {base} {fig(base_value, base_at)}"
    pct = (ratio - 1) * 100
    change = f"{pct:+.0f}%" if abs(pct) >= 1 else f"{pct:+.1f}%"
    change += f", {'higher' if higher else 'lower'} is better"
    # "better" only beyond the noise; within it, or with the noise unknown, a run is only ahead
    better_word = "better" if beyond else "ahead"
    unlike = reach is not None and not same_load and reach[0] != reach[1]
    if unlike:
        better_word = "higher"  # a peak the other run never had the chance to reach: no winner either
    if better is None:
        verdict = "the same"
    elif better == label:
        verdict = f"{label} is {better_word}, {ratio:.2f}x {base}'s ({change})"
    else:
        verdict = f"{base} is {better_word}: {label} at {ratio:.2f}x {base}'s ({change})"
    if beyond is None:
        tail = f"noise unknown: {why}; the difference is not shown to be beyond the noise"
        if kind == "repeats":  # two samples but no interval (a zero mean)
            tail = "noise unknown: the repeats give no interval"
    elif beyond:
        tail = f"beyond the noise (95% CI {low:.2f}-{high:.2f}x over the repeats)"
    else:
        tail = f"within the noise (95% CI {low:.2f}-{high:.2f}x over the repeats): no clear winner"
    if unlike and reach is not None:
        tail += (
            f"; the runs measured different loads ({label} up to {where_label(axis, reach[0], None)}, {base} up to "
            f"{where_label(axis, reach[1], None)}): compare at a load both ran (below)"
        )
    return {
        "metric": metric,
        "title": title,
        "run": label,
        "baseline": base,
        "value": value,
        "baseline_value": base_value,
        "where": {label: [at[0], at[1]], base: [base_at[0], base_at[1]]},
        "ratio": ratio,
        "higher_is_better": higher,
        "better": better,
        "noise": kind if beyond is not None else "unknown",
        "low": low,
        "high": high,
        "beyond_noise": beyond,
        "noise_note": why,
        "like_for_like": not unlike,
        "text": f"{head}: {verdict}" + ("." if better is None and beyond is None else f"; {tail}."),
    }


def _peak(idx: Mapping[_Key, StepSummary]) -> tuple[float, _Key] | None:
    rated = [
        (v, k) for k, s in idx.items() if s.get("valid", True) is not False and (v := number(s.get("output_tok_s")))
    ]
    return max(rated, key=lambda r: (r[0], r[1][1]), default=None)


def _reach(idx: Mapping[_Key, StepSummary]) -> float:
    """The highest load a run measured validly (0 when none)."""
    return max((float(k[1]) for k, s in idx.items() if s.get("valid", True) is not False), default=0.0)


def _headline(
    labels: Sequence[str],
    indexed: Sequence[Mapping[_Key, StepSummary]],
    samples: Sequence[_Samples],
    repeated: dict[str, bool],
    rows: Sequence[CompareRow],
    axis: LoadAxis,
) -> list[Headline]:
    """Each later run against the baseline on the primary figures (see the module doc)."""
    base = labels[0]
    out: list[Headline] = []
    base_peak = _peak(indexed[0])
    for i, label in enumerate(labels[1:], start=1):
        peak = _peak(indexed[i])
        if peak is not None and base_peak is not None:
            noise = _noise(
                label,
                base,
                samples[i].get(peak[1], {}).get("output_tok_s", []),
                samples[0].get(base_peak[1], {}).get("output_tok_s", []),
                repeated,
            )
            found = (peak, base_peak)
            reach = (_reach(indexed[i]), _reach(indexed[0]))
            out.append(
                _headline_one(
                    "peak_output_tok_s",
                    "Peak valid output throughput",
                    True,
                    label,
                    base,
                    found,
                    noise,
                    axis,
                    "tok/s",
                    reach,
                )
            )
        both = [
            r
            for r in rows
            if r["valid"][label] and r["valid"][base] and r["values"][label]["ttft_ms"] and r["values"][base]["ttft_ms"]
        ]
        if both:
            r = max(both, key=lambda r: (r[axis] or 0.0, r["context_tokens"] or 0))
            load = float(r[axis] or 0.0)
            k: _Key = (r["context_tokens"], int(load) if load.is_integer() else load)
            v, bv = r["values"][label]["ttft_ms"], r["values"][base]["ttft_ms"]
            assert v is not None and bv is not None
            noise = _noise(
                label,
                base,
                samples[i].get(k, {}).get("ttft_ms", []),
                samples[0].get(k, {}).get("ttft_ms", []),
                repeated,
            )
            title = f"TTFT p50 at {where_label(axis, load, k[0])}, the highest load both ran validly"
            out.append(_headline_one("ttft_p50_ms", title, False, label, base, ((v, k), (bv, k)), noise, axis, "ms"))
    return out


def _fmt(v: float | None, ratio: bool = False) -> str:
    # the comparison's tables mark a figure a run lacks with an em dash, apart from "–" (not measured)
    return as_ratio(v, missing="—") if ratio else sig3(v, missing="—")


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
    lines = [f"**{_esc(' vs '.join(labels))}** (baseline {_esc(base)}):", ""]
    lines += [f"- {_esc(t)}" for t in headline_lines(cmp)]
    lines += ["", "| " + " | ".join(_esc(h) for h in header) + " |", "|" + "---|" * len(header)]
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
        parts = [_esc(f"{label}: {_unmatched(cmp, ks)}") for label, ks in missing.items()]
        out += "\nSteps in only some runs: " + "; ".join(parts) + "\n"
    return out


def _unmatched(cmp: Comparison, keys: Sequence[Sequence[Any]]) -> str:
    return ", ".join(where_label(cmp["axis"], float(k[1]), k[0]) for k in keys)


def headline_lines(cmp: Comparison) -> list[str]:
    """The headline's sentences (``Comparison["headline"]``), or one saying why there is none."""
    found = [h["text"] for h in cmp.get("headline", [])]
    return found or ["No headline: no run has a valid step with output throughput to compare."]


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
        _headline_html(cmp),
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
        items = "".join(f"<li>{e(label)}: {e(_unmatched(cmp, ks))}</li>" for label, ks in missing.items())
        parts.append(f"<p class=note>Steps in only some runs:</p><ul class=note>{items}</ul>")
    parts.append("</main></body></html>\n")
    return "\n".join(parts)


def _headline_html(cmp: Comparison) -> str:
    """The headline as the page's verdict box: the first finding's winner as its title, every
    finding as a line, each marked beyond / within the noise or noise unknown."""
    e = html.escape
    found = cmp.get("headline", [])
    if not found:
        return f'<section class="verdict none" id="headline"><p class=head>{e(headline_lines(cmp)[0])}</p></section>'
    # the title is the first like-for-like finding (a peak each run found at a load the other did not
    # measure names no winner)
    first = next((h for h in found if h.get("like_for_like", True)), found[0])
    if first["better"] is None:
        head = f"{first['title']}: the same"
    else:
        word = "better" if first["beyond_noise"] else "ahead"
        if not first.get("like_for_like", True):
            word = "higher"
        head = f"{first['title']}: {first['better']} is {word}"
        head += (
            f", {first['ratio']:.2f}x"
            if first["better"] == first["run"]
            else f" ({first['run']} {first['ratio']:.2f}x)"
        )
    noise = {True: "beyond the noise", False: "within the noise", None: "noise unknown"}
    head += f" ({noise[first['beyond_noise']]})"
    items = "".join(
        f'<li data-metric="{e(h["metric"])}" data-noise="{e(h["noise"])}">{e(h["text"])}</li>' for h in found
    )
    css = "" if first["beyond_noise"] else " none"
    return f'<section class="verdict{css}" id="headline"><p class=head>{e(head)}</p><ul>{items}</ul></section>'


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

    from loadgen.analysis.pipeline import summarise
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
