"""The run summary (``summary.json``): one dict per step plus run totals.

``build_summary(run)`` gives the required keys of ``analysis.contracts.RunSummary``. Other
analyses add their own per-step keys without this module knowing them: each *step enricher* is a
callable ``(run, steps) -> None`` that updates the step dicts in place (telemetry join: power,
energy, KV-cache fill; knee detectors), and may call ``mark_invalid(step, reason)``. Enrichers run in
the order given, after the built-in statistics and before the totals are computed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from loadgen.analysis.calltypes import CallTypes, resolve_call_type
from loadgen.analysis.contracts import RunSummary, RunTotals, StepSummary
from loadgen.analysis.load import Run
from loadgen.analysis.pareto import pareto_summary
from loadgen.analysis.steps import DEFAULT_MIN_OK_REQUESTS, PERCENTILE_METHOD, StepAnalysis

StepEnricher = Callable[[Run, list[StepSummary]], None]

SCHEMA_VERSION = 1


def manifest_value(manifest: dict[str, Any], key: str) -> Any:
    """``key`` from the manifest's top level, else from its ``options`` (the one shape every run
    directory is written in: ``loadgen.spec.options.run_manifest``), else from ``args``/``scenario``
    (run directories of older versions, which wrote three shapes)."""
    if manifest.get(key) is not None:
        return manifest[key]
    for section in ("options", "args", "scenario"):
        sub = manifest.get(section)
        if isinstance(sub, dict) and sub.get(key) is not None:
            return sub[key]
    return None


def _error_samples(analysis: StepAnalysis) -> tuple[dict[str, int], dict[str, str]]:
    """Failures of the whole run by class (warm-up included), and the first message of each class."""
    req = analysis.req
    failed = np.flatnonzero(~analysis.ok)
    classes = analysis.failure_classes(failed)
    counts: dict[str, int] = {}
    samples: dict[str, str] = {}
    for row, name in zip(failed.tolist(), classes, strict=True):
        counts[name] = counts.get(name, 0) + 1
        if name not in samples and row in req.errors:
            text = req.errors[row]
            # records written before "(empty body)" was said: "HTTP 400: " and nothing more
            empty = text.startswith("HTTP ") and text.rstrip().endswith(":")
            samples[name] = text.rstrip() + " (empty body)" if empty else text
    ordered = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return ordered, samples


def _totals(run: Run, analysis: StepAnalysis, steps: list[StepSummary]) -> RunTotals:
    req = run.requests
    errors, samples = _error_samples(analysis)
    rated = [(tok_s, s) for s in steps if s.get("valid") and (tok_s := s.get("output_tok_s")) is not None]
    peak_tok_s, peak = max(rated, key=lambda r: r[0], default=(None, None))
    first_start = min((s["start_ns"] for s in steps), default=None)
    last_end = max((s["end_ns"] for s in steps), default=None)
    return {
        "records": req.n,
        "requests_ok": int(analysis.ok.sum()),
        "requests_failed": int(req.n - analysis.ok.sum()),
        "errors": errors,
        "error_samples": samples,
        "output_tokens_total": int(analysis.out_eff[analysis.ok].sum()),
        "steps": len(steps),
        "valid_steps": sum(1 for s in steps if s.get("valid")),
        "peak_output_tok_s": peak_tok_s,
        "peak_step": peak["step"] if peak else None,
        "peak_concurrency": peak["concurrency"] if peak else None,
        "duration_s": (last_end - first_start) / 1e9 if first_start is not None and last_end else None,
        "skipped_lines": run.skipped_lines,
        "empty": req.n == 0,
    }


def build_summary(
    run: Run,
    step_enrichers: Sequence[StepEnricher] = (),
    *,
    min_ok_requests: int = DEFAULT_MIN_OK_REQUESTS,
    call_type: str | None = None,
) -> RunSummary:
    """Summarise a loaded run: ``{"label", "run_id", ..., "steps": [...], "totals": {...}}``.

    A run that mixes call types (or has any that is not chat) gets ``by_call`` per step and
    ``knee_call_type``: ``call_type`` when given, else the manifest's ``call_type``, else the call
    type that served the most tokens (``analysis.calltypes``). Raises CallTypeError when the call
    type asked for is not in the run.
    """
    manifest = run.manifest
    analysis = StepAnalysis(run, min_ok_requests)
    types = CallTypes(analysis, tokenizer=bool(manifest_value(manifest, "tokenizer")))
    knee_call = resolve_call_type(types, call_type or _str_or_none(manifest_value(manifest, "call_type")))
    steps = []
    for step in run.steps:
        row = analysis.row(step)
        types.add_to(row, step)
        steps.append(row)
    for enrich in step_enrichers:
        enrich(run, steps)
    created_ns = manifest.get("created_ns")
    created = (
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created_ns / 1e9))
        if isinstance(created_ns, (int, float))
        else None
    )
    summary: RunSummary = {
        "schema_version": SCHEMA_VERSION,
        "label": manifest_value(manifest, "label"),
        "run_id": run.run_id,
        "url": manifest_value(manifest, "url"),
        "model": manifest_value(manifest, "model"),
        "transport": manifest_value(manifest, "transport"),
        "created": created,
        "request_files": [p.name for p in run.request_files],
        "percentile_method": PERCENTILE_METHOD,
        "min_ok_requests": min_ok_requests,
        "steps": steps,
        "totals": _totals(run, analysis, steps),
    }
    summary["pareto"] = pareto_summary(steps, manifest_value(manifest, "gpu_count"))
    if knee_call is not None:
        summary["knee_call_type"] = knee_call
    return summary


def _str_or_none(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


__all__ = ["SCHEMA_VERSION", "StepEnricher", "build_summary", "manifest_value"]
