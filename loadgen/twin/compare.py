"""Measured run against twin run, step by step (pure: two loaded runs in, rows and text out).

Steps are matched by load (concurrency or rate, and context tokens). Each figure is the analysis's
own: the step statistics of ``analysis.steps`` and the telemetry join of ``analysis.telemetry``
(KV fill, queue, retractions and GPU power from each run's ``samples.jsonl``). Errors are relative,
(twin - measured) / measured, for throughput, latency and power; absolute, twin - measured, for KV
fill (percentage points), queue (requests) and retractions (requests per step), which are often 0.
A figure whose source the measured run never sampled (no ``--metrics-url``, no GPU telemetry) is
"not measured", never a 0.

A twin step with no measured counterpart is a what-if prediction: it says how far outside the
measured range its load (and context length) lies. The onsets, per run: the lowest load whose KV fill
peaks at ``KV_FULL`` or more, the lowest with any retraction, the lowest whose mean queue exceeds
``QUEUE_ONSET`` (the knee verdict's thresholds, docs/knee-and-planning.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from loadgen.analysis.formats import fixed, percent
from loadgen.analysis.knee import KneeOptions
from loadgen.analysis.load import Run
from loadgen.analysis.sampling import combined_noise, relative_half_width, step_sampling
from loadgen.analysis.steps import StepAnalysis
from loadgen.analysis.summary import manifest_value
from loadgen.analysis.telemetry import telemetry_enricher

_KNEE = KneeOptions()
KV_FULL = _KNEE.kv_full_frac
"""KV fill (fraction of the pool, a step's peak) read as a full pool: the knee verdict's own."""
QUEUE_ONSET = _KNEE.queue_threshold
"""Mean waiting requests above which a queue has formed: the knee verdict's own."""

Source = Literal["client", "server", "gpu"]
_BANDS = "_sampling"  # the key a compared step row keeps its sampling bands under


@dataclass(frozen=True)
class Metric:
    """One compared figure: ``label`` (the twin.json key and the column), where it sits in a step
    row (``key``, ``sub``), whether its error is relative, and its source (what a run must have
    sampled for it to be measured)."""

    label: str
    key: str
    sub: str | None
    relative: bool
    source: Source
    percent: bool = False  # a fraction shown as a percentage; its absolute error in points
    band: str | None = None  # its key in ``analysis.sampling.StepSampling``: a percentile's sampling band


LATENCY = (
    Metric("throughput tok/s", "output_tok_s", None, True, "client"),
    Metric("TTFT p50 ms", "ttft_ms", "p50", True, "client", band="ttft_p50_ms"),
    Metric("TTFT p99 ms", "ttft_ms", "p99", True, "client", band="ttft_p99_ms"),
    Metric("TPOT p50 ms", "tpot_ms", "p50", True, "client", band="tpot_p50_ms"),
    Metric("TPOT p99 ms", "tpot_ms", "p99", True, "client", band="tpot_p99_ms"),
)
SERVER = (
    Metric("KV fill mean", "kv_usage", "mean", False, "server", percent=True),
    Metric("KV fill max", "kv_usage", "max", False, "server", percent=True),
    Metric("queue mean", "queue_len", "mean", False, "server"),
    Metric("retractions", "preemptions", None, False, "server"),
    Metric("power W mean", "gpu_power_w", "mean", True, "gpu"),
)
METRICS = LATENCY + SERVER

_NOT_SAMPLED = {
    "server": "no server /metrics samples in its samples.jsonl (the run had no --metrics-url)",
    "gpu": "no GPU samples in its samples.jsonl (the run had no GPU telemetry)",
}


def _value(row: Any, m: Metric) -> float | None:
    if m.source == "gpu" and not row.get("power_valid"):
        return None  # idle, gaps, lost GPUs: the analysis says the step's power is not a reading
    v = row.get(m.key)
    if m.sub is not None:
        v = v.get(m.sub) if isinstance(v, dict) else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _load(row: Any) -> tuple[float | None, int | None]:
    load = row.get("concurrency") if row.get("concurrency") is not None else row.get("rate")
    return (float(load) if load is not None else None, row.get("context_tokens"))


def load_label(load: float | None, rate: bool) -> str:
    if load is None:
        return "–"
    return f"{load:g} req/s" if rate else f"C={load:g}"


def _sources(run: Run) -> set[Source]:
    have: set[Source] = {"client"}
    for s in run.samples:
        have.add(s["src"])
    return have


def _rows(run: Run) -> list[Any]:
    analysis = StepAnalysis(run)
    rows: list[Any] = [analysis.row(step) for step in run.steps]
    telemetry_enricher(run, rows)
    bands = step_sampling(run, analysis)
    for row in rows:
        row[_BANDS] = bands.get(row["step"])
    return rows


def _noise(m_row: Any, t_row: Any, metric: Metric, mv: float | None, tv: float | None) -> float | None:
    """The 95 % sampling band of the relative error (both windows' own, ``analysis.sampling``)."""
    if metric.band is None or m_row is None:
        return None
    m_band, t_band = ((r.get(_BANDS) or {}).get(metric.band) for r in (m_row, t_row))
    return combined_noise(relative_half_width(m_band, mv), relative_half_width(t_band, tv))


def _outside(
    load: float | None, ctx: int | None, loads: list[float], contexts: list[int], max_tokens: tuple[Any, Any]
) -> dict[str, Any]:
    """How far a step the run never measured lies from what it did measure (``max_tokens``: the
    measured run's and the twin's)."""
    words: list[str] = []
    out: dict[str, Any] = {"load_factor": None, "context_factor": None, "max_tokens_factor": None}
    if load is not None and loads:
        lo, hi = min(loads), max(loads)
        if load > hi:
            out["load_factor"] = load / hi
            words.append(f"{load / hi:.2g}x the highest measured load ({hi:g})")
        elif load < lo:
            out["load_factor"] = load / lo
            words.append(f"{lo / load:.2g}x below the lowest measured load ({lo:g})")
    if ctx is not None and contexts and ctx not in contexts:
        lo_c, hi_c = min(contexts), max(contexts)
        if ctx > hi_c:
            out["context_factor"] = ctx / hi_c
            words.append(f"context {ctx / hi_c:.2g}x the longest measured ({hi_c})")
        elif ctx < lo_c:
            out["context_factor"] = ctx / lo_c
            words.append(f"context {lo_c / ctx:.2g}x below the shortest measured ({lo_c})")
        else:
            words.append(f"context {ctx} between measured lengths (interpolated)")
    elif ctx is not None and not contexts and loads:
        words.append(f"context {ctx} (the run sent its default prompts)")
    m_max, t_max = max_tokens
    if m_max != t_max and isinstance(m_max, int) and isinstance(t_max, int) and m_max > 0:
        out["max_tokens_factor"] = t_max / m_max
        words.append(f"max_tokens {t_max}, {t_max / m_max:.2g}x the measured {m_max}")
    out["text"] = "; ".join(words) or "inside the measured range (interpolated)"
    return out


def _onset(rows: list[dict[str, Any]], label: str, hit: Any) -> dict[str, Any] | None:
    """The lowest-load step (per context length, the shortest first) whose ``label`` figure ``hit``s."""
    order = sorted(rows, key=lambda r: (r["context_tokens"] or 0, r["load"] if r["load"] is not None else 0.0))
    for r in order:
        v = r[label]["twin"]
        if v is not None and hit(v):
            return {
                "load": r["load"],
                "context_tokens": r["context_tokens"],
                "value": v,
                "kv_fill_max": r["KV fill max"]["twin"],
                "queue_mean": r["queue mean"]["twin"],
                "predicted": r["predicted"],
                "outside": r.get("outside"),
            }
    return None


def _measured_onset(rows: list[Any], key: str, sub: str | None, hit: Any) -> dict[str, Any] | None:
    m = Metric(key, key, sub, False, "server")
    order = sorted(rows, key=lambda r: (r.get("context_tokens") or 0, _load(r)[0] or 0.0))
    for r in order:
        v = _value(r, m)
        if v is not None and hit(v):
            return {"load": _load(r)[0], "context_tokens": r.get("context_tokens"), "value": v}
    return None


def compare_runs(measured: Run, twin: Run, what_if: Run | None = None) -> dict[str, Any]:
    """Per twin step: each figure measured (if that load was measured and the source sampled), the
    twin's, and the error; plus the measured range, the onsets and which sources were not measured.
    ``what_if``: a second replay of the twin (the loads the run never measured, as a ramp of their
    own); its steps at loads ``twin`` has are left out, ``twin``'s are the ones compared.

    Keys of each step: ``load``, ``context_tokens``, ``measured`` (the run has this step),
    ``predicted`` (it does not: a what-if), ``outside``/``distance`` for predicted steps, one dict
    ``{"measured", "twin", "rel_error", "abs_error", "noise"}`` per metric label, ``twin_valid``.
    ``noise``: for a percentile at a measured step, the 95 % sampling band of ``rel_error`` from the
    two windows' own requests (``analysis.sampling``: an error inside it is no evidence that the twin
    differs); None for other figures and where a window is too small to bound its percentile.
    """
    m_rows = _rows(measured)
    t_rows = _rows(twin)
    m_have, t_have = _sources(measured), _sources(twin)
    if what_if is not None:
        seen = {_load(r) for r in t_rows}
        t_rows += [r for r in _rows(what_if) if _load(r) not in seen]
        t_rows.sort(key=lambda r: (r.get("context_tokens") or 0, _load(r)[0] or 0.0))
        t_have &= _sources(what_if)
    max_tokens = (manifest_value(measured.manifest, "max_tokens"), manifest_value(twin.manifest, "max_tokens"))
    # another max_tokens is another workload: no step of the twin's was measured then
    by_load = {_load(r): r for r in m_rows} if max_tokens[0] == max_tokens[1] else {}
    loads = [x for x in (_load(r)[0] for r in m_rows) if x is not None]
    contexts = sorted({c for c in (r.get("context_tokens") for r in m_rows) if c is not None})
    lo, hi = (min(loads), max(loads)) if loads else (None, None)
    rows: list[dict[str, Any]] = []
    for t in t_rows:
        key = _load(t)
        m = by_load.get(key)
        row: dict[str, Any] = {
            "load": key[0],
            "context_tokens": key[1],
            "measured": m is not None,
            "predicted": m is None,
        }
        if m is None:
            row["distance"] = _outside(key[0], key[1], loads, contexts, max_tokens)
            row["outside"] = row["distance"]["text"]
        for metric in METRICS:
            tv = _value(t, metric) if metric.source in t_have else None
            mv = _value(m, metric) if m is not None and metric.source in m_have else None
            rel = (tv - mv) / mv if tv is not None and mv is not None and mv != 0.0 else None
            diff = tv - mv if tv is not None and mv is not None else None
            noise = _noise(m, t, metric, mv, tv)
            row[metric.label] = {"measured": mv, "twin": tv, "rel_error": rel, "abs_error": diff, "noise": noise}
        row["twin_valid"] = bool(t.get("valid", True))
        rows.append(row)
    open_loop = any(r.get("concurrency") is None and r.get("rate") is not None for r in t_rows)
    axis = "rate" if open_loop else "concurrency"
    onsets: dict[str, Any] = {
        "kv_full": _onset(rows, "KV fill max", lambda v: v >= KV_FULL),
        "retractions": _onset(rows, "retractions", lambda v: v > 0),
        "measured_kv_full": _measured_onset(m_rows, "kv_usage", "max", lambda v: v >= KV_FULL),
        "measured_retractions": _measured_onset(m_rows, "preemptions", None, lambda v: v > 0),
        "queue": _onset(rows, "queue mean", lambda v: v > QUEUE_ONSET),
        "measured_queue": _measured_onset(m_rows, "queue_len", "mean", lambda v: v > QUEUE_ONSET),
        "queue_threshold": QUEUE_ONSET,
        "kv_full_threshold": KV_FULL,
    }
    return {
        "steps": rows,
        "measured_range": [lo, hi],
        "measured_contexts": contexts,
        "axis": axis,
        "not_measured": {s: _NOT_SAMPLED[s] for s in ("server", "gpu") if s not in m_have},
        "twin_not_sampled": {s: _NOT_SAMPLED[s] for s in ("server", "gpu") if s not in t_have},
        "onset": onsets,
    }


# ---------------------------------------------------------------------------------------------- text


def _fmt(v: float | None, m: Metric | None = None) -> str:
    if m is not None and m.percent:
        return percent(v, 1)
    return fixed(None if v is None else float(v), 1)  # a whole count too gets its decimal here


def _err(d: dict[str, Any], m: Metric) -> str:
    if m.relative:
        v = d["rel_error"]
        if v is None:
            return "–"
        noise = d.get("noise")
        return f"{v * 100:+.1f}%" + ("" if noise is None else f" (±{noise * 100:.0f})")
    v = d["abs_error"]
    if v is None:
        return "–"
    return f"{v * 100:+.1f} pt" if m.percent else f"{v:+,.1f}"


def _range_cell(r: dict[str, Any]) -> str:
    return "measured" if r["measured"] else f"**predicted**: {r.get('outside', 'outside the run')}"


def _table(result: dict[str, Any], metrics: tuple[Metric, ...], not_measured: dict[str, str]) -> list[str]:
    rate = result.get("axis") == "rate"
    head = ["load", "ctx"]
    for m in metrics:
        head += [f"{m.label} measured", "twin", "error"]
    head.append("range")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["steps"]:
        cells = [load_label(r["load"], rate), str(r["context_tokens"] or "–")]
        for m in metrics:
            d = r[m.label]
            shown = "not measured" if m.source in not_measured and r["measured"] else _fmt(d["measured"], m)
            cells += [shown, _fmt(d["twin"], m), _err(d, m)]
        cells.append(_range_cell(r))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def onset_lines(result: dict[str, Any]) -> list[str]:
    """Where the twin's KV pool fills, retractions start and a queue forms, against the measured run."""
    rate = result.get("axis") == "rate"
    onset = result.get("onset") or {}
    if "server" in result.get("twin_not_sampled", {}):
        return ["- The twin's replay has no /metrics samples: no KV fill, retraction or queue onset to report."]

    def where(o: dict[str, Any]) -> str:
        ctx = f", context {o['context_tokens']}" if o.get("context_tokens") else ""
        tag = f" (**predicted**: {o['outside']})" if o.get("predicted") else " (a measured load)"
        return f"{load_label(o['load'], rate)}{ctx}{tag}"

    kv_pct = f"{onset.get('kv_full_threshold', KV_FULL) * 100:.0f}%"
    q_min = f"{onset.get('queue_threshold', QUEUE_ONSET):g}"
    kv, ret, queue = onset.get("kv_full"), onset.get("retractions"), onset.get("queue")
    lines = [
        f"- KV pool full (peak fill ≥ {kv_pct}): "
        + (f"from {where(kv)}, peak {kv['value'] * 100:.1f}%" if kv else "at no replayed load"),
        "- Retractions start: "
        + (f"{where(ret)}, {ret['value']:g} in the step's window" if ret else "at no replayed load"),
        f"- Queue forms (mean waiting > {q_min}): "
        + (
            f"{where(queue)}, {queue['value']:.1f} waiting on average with the KV pool at "
            f"{_fmt(queue.get('kv_fill_max'), SERVER[1])} at its peak"
            if queue
            else "at no replayed load"
        ),
    ]
    if "server" in result.get("not_measured", {}):
        lines.append("- Measured run: not measured (no /metrics samples).")
    else:
        mkv, mret, mq = onset.get("measured_kv_full"), onset.get("measured_retractions"), onset.get("measured_queue")
        lines.append(
            "- Measured run: KV pool "
            + (f"full from {load_label(mkv['load'], rate)}" if mkv else "never full")
            + ", retractions "
            + (f"from {load_label(mret['load'], rate)}" if mret else "never")
            + ", queue "
            + (f"from {load_label(mq['load'], rate)}" if mq else "never")
            + "."
        )
    return lines


def markdown(result: dict[str, Any], fit_summary: list[str], cannot_fit: list[str]) -> str:
    not_measured: dict[str, str] = result.get("not_measured", {})
    lines = [
        "# Twin against the measured run",
        "",
        "Each step of the measured ramp replayed against the calibrated twin (`loadgen twin`). Relative",
        "errors are (twin - measured) / measured; KV fill, queue and retractions show twin - measured",
        "(percentage points, requests). Steps the run never measured are **predicted**: `range` says how",
        "far outside the measured loads and context lengths they lie.",
        "",
        "(±N) after a percentile's error: the error's 95 % sampling band in percent, from the requests of",
        "the two steady windows (distribution-free, from their order statistics; docs/twin.md). An error",
        "inside it is no evidence that the twin differs: the windows are too short to tell. Throughput",
        "has no band (its tokens are not independent draws); `--repeat N` measures run-to-run noise.",
        "",
    ]
    what_if = result.get("what_if") or {}
    if what_if.get("text"):
        lines += [f"What-if: {what_if['text']}.", ""]
    runs = result.get("twin_runs") or []
    if len(runs) > 1:
        lines += [
            f"The measured ramp was replayed as it ran (`{runs[0]}`), and the what-if loads as a ramp of",
            f"their own (`{runs[1]}`): a step followed by a heavier one ends differently, so each is",
            "compared where it ran as the run measured it.",
            "",
        ]
    lines += ["## Throughput and latency", "", *_table(result, LATENCY, not_measured), ""]
    lines += ["## KV cache, queue, retractions, power", "", *_table(result, SERVER, not_measured), ""]
    lines += [
        "Per step over its steady window, from each run's samples.jsonl (the report's own telemetry join):",
        "KV fill = time-weighted mean and peak of the server's KV usage; queue = mean waiting requests;",
        "retractions = the server's retraction/preemption counter's increase; power = mean GPU power,",
        "all GPUs summed (only where the analysis holds the step's power valid).",
    ]
    for source, why in not_measured.items():
        lines.append(f"Not measured ({source}): the measured run has {why}.")
    for source, why in result.get("twin_not_sampled", {}).items():
        lines.append(f"Twin not sampled ({source}): the replay has {why}.")
    lines += ["", "## Where the KV pool overflows", "", *onset_lines(result), ""]
    plan = result.get("plan")
    if isinstance(plan, dict):
        lines += ["## Planning from the twin", "", *plan.get("lines", []), ""]
    lines += ["## Fitted parameters", ""]
    lines += [f"- {s}" for s in fit_summary]
    if cannot_fit:
        lines += ["", "## What the run could not determine", ""]
        lines += [f"- {s}" for s in cannot_fit]
    return "\n".join(lines) + "\n"
