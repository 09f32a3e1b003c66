"""Measured run against twin run, step by step (pure: two loaded runs in, rows and text out).

Steps are matched by load (concurrency or rate, and context tokens). A twin step with no measured
counterpart is a what-if prediction: it says how far outside the measured range its load lies.
"""

from __future__ import annotations

from typing import Any

from loadgen.analysis.load import Run
from loadgen.analysis.steps import step_rows

METRICS = (
    ("output_tok_s", "throughput tok/s", None),
    ("ttft_ms", "TTFT p50 ms", "p50"),
    ("ttft_ms", "TTFT p99 ms", "p99"),
    ("tpot_ms", "TPOT p50 ms", "p50"),
    ("tpot_ms", "TPOT p99 ms", "p99"),
)


def _value(row: Any, key: str, sub: str | None) -> float | None:
    v = row.get(key)
    if sub is not None:
        v = v.get(sub) if isinstance(v, dict) else None
    return float(v) if isinstance(v, (int, float)) else None


def _load(row: Any) -> tuple[float | None, int | None]:
    load = row.get("concurrency") if row.get("concurrency") is not None else row.get("rate")
    return (float(load) if load is not None else None, row.get("context_tokens"))


def compare_runs(measured: Run, twin: Run) -> dict[str, Any]:
    """Per twin step: the measured value (if that load was measured), the twin's, the relative error."""
    m_rows = step_rows(measured)
    t_rows = step_rows(twin)
    by_load = {_load(r): r for r in m_rows}
    loads = [x for x, _ in by_load if x is not None]
    lo, hi = (min(loads), max(loads)) if loads else (None, None)
    rows: list[dict[str, Any]] = []
    for t in t_rows:
        key = _load(t)
        m = by_load.get(key)
        row: dict[str, Any] = {"load": key[0], "context_tokens": key[1], "measured": m is not None}
        if m is None and key[0] is not None and hi is not None and lo is not None:
            if key[0] > hi:
                row["outside"] = f"{key[0] / hi:.2g}x the highest measured load ({hi:g})"
            elif key[0] < lo:
                row["outside"] = f"{lo / key[0]:.2g}x below the lowest measured load ({lo:g})"
            else:
                row["outside"] = "inside the measured range (interpolated)"
        for key_name, label, sub in METRICS:
            tv = _value(t, key_name, sub)
            mv = _value(m, key_name, sub) if m is not None else None
            err = (tv - mv) / mv if (tv is not None and mv not in (None, 0.0)) else None
            row[label] = {"measured": mv, "twin": tv, "rel_error": err}
        row["twin_valid"] = bool(t.get("valid", True))
        rows.append(row)
    return {"steps": rows, "measured_range": [lo, hi]}


def _fmt(v: float | None, pct: bool = False) -> str:
    if v is None:
        return "–"
    return f"{v * 100:+.1f}%" if pct else f"{v:,.1f}"


def markdown(result: dict[str, Any], fit_summary: list[str], cannot_fit: list[str]) -> str:
    head = ["load", "ctx"]
    for _, label, _ in METRICS:
        head += [f"{label} measured", "twin", "error"]
    head.append("range")
    lines = [
        "# Twin against the measured run",
        "",
        "Each step of the measured ramp replayed against the calibrated twin (`loadgen twin`). The error is",
        "(twin - measured) / measured. Steps the run never measured are predictions; `range` says how far",
        "outside the measured loads they lie.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in result["steps"]:
        cells = [_fmt(r["load"]), str(r["context_tokens"] or "–")]
        for _, label, _ in METRICS:
            d = r[label]
            cells += [_fmt(d["measured"]), _fmt(d["twin"]), _fmt(d["rel_error"], pct=True)]
        cells.append("measured" if r["measured"] else r.get("outside", "predicted"))
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Fitted parameters", ""]
    lines += [f"- {s}" for s in fit_summary]
    if cannot_fit:
        lines += ["", "## What the run could not determine", ""]
        lines += [f"- {s}" for s in cannot_fit]
    return "\n".join(lines) + "\n"
