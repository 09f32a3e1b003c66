"""The campaign report: ``campaign.json`` (everything) and ``campaign.md`` (variants side by side).

:func:`brief` keeps what the report shows of one ramp's ``summary.json`` (per-step rows, the peak
output tokens/s and the load it was reached at, request counts, the knee); the runner stores it in
the variant's result. :func:`build_report` compares the variants that produced a run, the first one
being the baseline (:mod:`loadgen.report.compare`); :func:`render_markdown` adds each failure's
reason and matched log lines. Figures keep the summary's units (tok/s, ms, W).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

from loadgen.analysis.formats import sig3
from loadgen.campaign.file import Campaign


def brief(summary: dict[str, Any]) -> dict[str, Any]:
    steps = summary.get("steps") or []
    valid = [s for s in steps if s.get("valid", True) and s.get("output_tok_s") is not None]
    best = max(valid, key=lambda s: s["output_tok_s"], default=None)
    knee = summary.get("knee") or {}
    rows = [
        {
            "concurrency": s.get("concurrency"),
            "rate": s.get("rate"),
            "context_tokens": s.get("context_tokens"),
            "output_tok_s": s.get("output_tok_s"),
            "ttft_p50_ms": (s.get("ttft_ms") or {}).get("p50"),
            "tpot_p50_ms": (s.get("tpot_ms") or {}).get("p50"),
            "gpu_power_w_mean": (s.get("gpu_power_w") or {}).get("mean"),
            "requests_ok": s.get("requests_ok"),
            "requests_failed": s.get("requests_failed"),
            "valid": s.get("valid", True),
            "invalid_reason": s.get("invalid_reason"),
            "end_reason": s.get("end_reason"),
        }
        for s in steps
    ]
    return {
        "step_rows": rows,
        "steps": len(steps),
        "valid_steps": len(valid),
        "peak_output_tok_s": best["output_tok_s"] if best else None,
        "peak_at": {"concurrency": best.get("concurrency"), "rate": best.get("rate")} if best else None,
        "requests_ok": sum(int(s.get("requests_ok") or 0) for s in steps),
        "requests_failed": sum(int(s.get("requests_failed") or 0) for s in steps),
        "knee": {"concurrency": knee.get("concurrency"), "rate": knee.get("rate"), "reason": knee.get("reason")},
    }


def build_report(
    campaign: Campaign, campaign_dir: Path, results: list[dict[str, Any]], interrupted: bool
) -> dict[str, Any]:
    """campaign.json's content; compares the variants that produced a run (first one is the baseline)."""
    from loadgen.analysis.contracts import RunSummary
    from loadgen.analysis.pipeline import summarise
    from loadgen.report.compare import compare_runs

    summaries: list[RunSummary] = []
    labels: list[str] = []
    for r in results:
        if r.get("run_dir") and r.get("summary"):
            _, summary = summarise(campaign_dir / r["run_dir"])
            summaries.append(summary)
            labels.append(r["name"])
    comparison = compare_runs(summaries, labels) if len(summaries) >= 2 else None
    return {
        "kind": "campaign",
        "name": campaign.name,
        "file": campaign.path,
        "description": campaign.description,
        "interrupted": interrupted,
        "variants": results,
        "comparison": comparison,
    }


_LOG_PREFIX = re.compile(r"^\S+T\S+ \S+ [\w.@-]+\[\d+\]: ")  # journal: "<iso time> <host> <unit>[<pid>]: "
_SGLANG_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:]+(?: [A-Z]+\d+)*\] ")


def short_line(line: str, limit: int = 160) -> str:
    """A log line without its journal and SGLang prefixes, shortened for a table cell."""
    text = _SGLANG_PREFIX.sub("", _LOG_PREFIX.sub("", line))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _num(v: Any) -> str:
    return sig3(v, missing="—")  # as loadgen compare's tables


def render_markdown(report: dict[str, Any]) -> str:
    from loadgen.report.compare import render_compare_md

    lines = [f"# Campaign: {report['name']}", ""]
    if report.get("description"):
        lines += [report["description"], ""]
    lines += [
        f"File: `{report['file']}`" + ("  \n**Interrupted: a partial report.**" if report["interrupted"] else ""),
        "",
    ]
    lines += [
        "| variant | status | peak tok/s | at load | requests ok / failed | knee | why |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report["variants"]:
        s = r.get("summary") or {}
        at = s.get("peak_at") or {}
        load = (
            f"C={at['concurrency']}"
            if at.get("concurrency") is not None
            else (f"{at['rate']:g} req/s" if at.get("rate") else "—")
        )
        knee = s.get("knee") or {}
        knee_at = knee.get("concurrency") or knee.get("rate")
        reqs = f"{s['requests_ok']} / {s['requests_failed']}" if s else "—"
        why = short_line(r["matches"][0]["line"]) if r.get("matches") else (r["reason"] or "")
        lines.append(
            f"| {_cell(r['name'])} | {r['status']} | {_num(s.get('peak_output_tok_s'))} | {load} | {reqs} | "
            f"{_cell(knee_at) if knee_at is not None else '—'} | {_cell(why)} |"
        )
    lines.append("")
    for r in report["variants"]:
        if r["status"] == "ok":
            continue
        lines += [f"## {r['name']}: {r['status']}", "", r["reason"] or "", ""]
        if r.get("matches"):
            lines += ["Matched failure lines of the server's log:", "", "```"]
            lines += [m["line"] for m in r["matches"][:20]]
            lines += ["```", ""]
            if r.get("context") and len(r["context"]) > 1:
                lines += ["The log from the first failure on:", "", "```", *r["context"], "```", ""]
        elif r.get("log_tail"):
            lines += ["No known failure line matched; the log ends with:", "", "```", *r["log_tail"], "```", ""]
        if r.get("captured_log"):
            lines += [f"Captured log: `{r['captured_log']}`", ""]
    for r in report["variants"]:
        rows = (r.get("summary") or {}).get("step_rows") or []
        if not rows:
            continue
        lines += [
            f"## {r['name']}: steps",
            "",
            "| load | context | tok/s | TTFT p50 ms | TPOT p50 ms | GPU power W | ok / failed | valid |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in rows:
            load = f"C={row['concurrency']}" if row.get("concurrency") is not None else f"{row.get('rate')} req/s"
            valid = "yes" if row.get("valid", True) else f"no: {_cell(row.get('invalid_reason') or '')}"
            lines.append(
                f"| {load} | {row.get('context_tokens') or '—'} | {_num(row.get('output_tok_s'))} | "
                f"{_num(row.get('ttft_p50_ms'))} | {_num(row.get('tpot_p50_ms'))} | "
                f"{_num(row.get('gpu_power_w_mean'))} | "
                f"{row.get('requests_ok')} / {row.get('requests_failed')} | {valid} |"
            )
        lines.append("")
    cmp = report.get("comparison")
    if cmp is not None:
        lines += [f"## Comparison (baseline: {cmp['baseline']})", "", render_compare_md(cmp)]
    for r in report["variants"]:
        s = r.get("summary")
        if s and s.get("knee", {}).get("reason"):
            lines += [f"- {r['name']} knee: {s['knee']['reason']}"]
    lines += ["", "Run directories: " + ", ".join(f"`{r['run_dir']}`" for r in report["variants"] if r.get("run_dir"))]
    return "\n".join(lines).rstrip() + "\n"


def write_report(campaign_dir: Path, report: dict[str, Any]) -> None:
    (campaign_dir / "campaign.json").write_bytes(
        orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"
    )
    (campaign_dir / "campaign.md").write_text(render_markdown(report), encoding="utf-8")
