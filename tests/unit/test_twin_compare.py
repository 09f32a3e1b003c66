"""The twin's side-by-side table (``loadgen.twin.compare``) and the predicted mark of a twin's replay
(report and plan), on synthetic run directories with known per-step telemetry."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from loadgen.analysis.load import load_run
from loadgen.analysis.pipeline import make_plan, predicted_mark, summarise
from loadgen.analysis.synthetic import at_ms, make_record, step_lines, write_run_dir
from loadgen.report.markdown import render_markdown
from loadgen.report.sections import render_plan_md
from loadgen.twin.compare import KV_FULL, compare_runs, markdown

STEP_MS = 3000.0
WARMUP_MS = 500.0


@dataclass
class StepSpec:
    """One step of a synthetic run: its load and the server/GPU gauges it holds all along."""

    concurrency: int
    kv: float = 0.2
    queued: float = 0.0
    retractions: int = 0
    power_w: float = 200.0
    chunk_ms: float = 20.0  # gap between chunks: sets TPOT and throughput
    spread_ms: float = 0.0  # request k of the window has gaps of chunk_ms + k * spread_ms
    context_tokens: int | None = 100


def _run(
    path: Path,
    steps: list[StepSpec],
    *,
    server: bool = True,
    gpu: bool = True,
    max_tokens: int = 10,
    manifest: dict[str, Any] | None = None,
) -> Path:
    lines: list[dict[str, Any]] = []
    records = []
    samples: list[dict[str, Any]] = []
    retracted = 0
    for i, s in enumerate(steps):
        start = i * STEP_MS
        steady = start + WARMUP_MS
        lines += step_lines(
            i, start, steady, start + STEP_MS, concurrency=s.concurrency, context_tokens=s.context_tokens
        )
        for k in range(10):  # one request every 200 ms of the window, 10 tokens each
            gap = s.chunk_ms + k * s.spread_ms
            chunks = [gap * (j + 1) for j in range(10)]
            records.append(make_record(f"r{i}-{k}", i, steady + 200 * k, chunks, context_tokens=s.context_tokens))
        for t in range(0, int(STEP_MS), 100):
            at = start + t
            if at >= steady + 1000 and s.retractions and retracted < sum(x.retractions for x in steps[: i + 1]):
                retracted += s.retractions  # the counter steps up 1 s into the window
            if server:
                samples.append(
                    {
                        "t_ns": at_ms(at),
                        "src": "server",
                        "engine": "sglang",
                        "running": s.concurrency,
                        "queued": s.queued,
                        "kv_usage": s.kv,
                        "preemptions_total": float(retracted),
                    }
                )
            if gpu:
                samples.append(
                    {
                        "t_ns": at_ms(at),
                        "src": "gpu",
                        "source": "dcgm",
                        "gpu": 0,
                        "power_w": s.power_w,
                        "power_limit_w": 300.0,
                    }
                )
    options = {"max_tokens": max_tokens, "concurrency": [s.concurrency for s in steps]}
    run = write_run_dir(
        path,
        steps=lines,
        records={"requests-w0.jsonl": records},
        manifest={"kind": "ramp", "run_id": path.name, "options": options, **(manifest or {})},
    )
    (run / "samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in samples))
    return run


MEASURED = [StepSpec(2, kv=0.2, power_w=200.0), StepSpec(4, kv=0.4, queued=0.5, power_w=300.0)]
TWIN = [
    StepSpec(2, kv=0.22, power_w=210.0),
    StepSpec(4, kv=0.38, queued=0.5, power_w=270.0, chunk_ms=22.0),
    StepSpec(8, kv=0.97, queued=6.0, retractions=3, power_w=330.0, chunk_ms=30.0),
]


def _by_load(table: dict[str, Any]) -> dict[float, dict[str, Any]]:
    return {r["load"]: r for r in table["steps"]}


def test_columns_measured_twin_and_error(tmp_path: Path) -> None:
    table = compare_runs(load_run(_run(tmp_path / "m", MEASURED)), load_run(_run(tmp_path / "t", TWIN)))
    rows = _by_load(table)
    c2, c4, c8 = rows[2.0], rows[4.0], rows[8.0]
    assert c2["measured"] and not c2["predicted"]
    # gauges held all step long: the time-weighted mean and the peak are the value itself
    assert c2["KV fill mean"]["measured"] == pytest.approx(0.2)
    assert c2["KV fill mean"]["twin"] == pytest.approx(0.22)
    assert c2["KV fill mean"]["abs_error"] == pytest.approx(0.02)
    assert c4["KV fill max"] == pytest.approx(
        {"measured": 0.4, "twin": 0.38, "rel_error": -0.05, "abs_error": -0.02, "noise": None}
    )
    assert c4["queue mean"]["measured"] == pytest.approx(0.5) and c4["queue mean"]["abs_error"] == pytest.approx(0.0)
    assert c4["retractions"]["measured"] == 0.0 and c4["retractions"]["twin"] == 0.0
    assert c4["power W mean"]["measured"] == pytest.approx(300.0)
    assert c4["power W mean"]["rel_error"] == pytest.approx(-0.1)
    # client figures: 10 tokens at 20 ms vs 22 ms gaps
    assert c4["TPOT p50 ms"]["measured"] == pytest.approx(20.0)
    assert c4["TPOT p50 ms"]["rel_error"] == pytest.approx(0.1)
    assert c4["TPOT p50 ms"]["noise"] == 0.0  # every request alike: the windows pin their medians exactly
    assert c4["throughput tok/s"]["noise"] is None  # no band for throughput (analysis.sampling)
    # the what-if step: no measured values, its distance said, its telemetry the twin's
    assert c8["predicted"] and not c8["measured"]
    assert c8["outside"] == "2x the highest measured load (4)"
    assert c8["distance"]["load_factor"] == pytest.approx(2.0)
    assert c8["KV fill max"] == {
        "measured": None,
        "twin": pytest.approx(0.97),
        "rel_error": None,
        "abs_error": None,
        "noise": None,
    }
    assert c8["TPOT p50 ms"]["noise"] is None  # nothing measured to compare
    assert c8["retractions"]["twin"] == 3.0
    assert c8["power W mean"]["twin"] == pytest.approx(330.0)
    assert table["not_measured"] == {} and table["twin_not_sampled"] == {}


def test_a_percentiles_error_comes_with_both_windows_sampling_band(tmp_path: Path) -> None:
    """Ten requests per window with TPOTs 10..19 ms (measured) and 11..20 ms (twin): the median's
    95 % order-statistic interval of ten values is [x(2), x(9)], so the measured band is ±3.5/14.5
    and the twin's ±3.5/15.5, combined √(a² + b²); twin.md prints it after the error."""
    measured = load_run(_run(tmp_path / "m", [StepSpec(2, chunk_ms=10.0, spread_ms=1.0)]))
    twin = load_run(_run(tmp_path / "t", [StepSpec(2, chunk_ms=11.0, spread_ms=1.0)]))
    table = compare_runs(measured, twin)
    tpot = _by_load(table)[2.0]["TPOT p50 ms"]
    assert tpot["measured"] == pytest.approx(14.5) and tpot["twin"] == pytest.approx(15.5)
    band = (3.5 / 14.5) ** 2 + (3.5 / 15.5) ** 2
    assert tpot["noise"] == pytest.approx(band**0.5)
    # 10 values bound no p99 (that needs 368)
    assert _by_load(table)[2.0]["TPOT p99 ms"]["noise"] is None
    md = markdown(table, [], [])
    assert f"{tpot['rel_error'] * 100:+.1f}% (±{band**0.5 * 100:.0f})" in md  # +6.9% (±34)
    assert "(±N) after a percentile's error" in md


def test_onsets_of_kv_overflow_retractions_and_queue(tmp_path: Path) -> None:
    table = compare_runs(load_run(_run(tmp_path / "m", MEASURED)), load_run(_run(tmp_path / "t", TWIN)))
    onset = table["onset"]
    assert KV_FULL == 0.95  # the knee verdict's kv_saturation threshold
    assert onset["kv_full"]["load"] == 8.0 and onset["kv_full"]["predicted"]
    assert onset["retractions"]["load"] == 8.0 and onset["retractions"]["value"] == 3.0
    assert onset["queue"]["load"] == 8.0  # C=4's 0.5 waiting is not a queue (> 1)
    assert onset["measured_kv_full"] is None and onset["measured_retractions"] is None
    md = markdown(table, [], [])
    assert "## KV cache, queue, retractions, power" in md
    assert (
        "- KV pool full (peak fill ≥ 95%): from C=8, context 100 (**predicted**: 2x the highest measured load (4)), "
        "peak 97.0%" in md
    )
    assert "- Retractions start: C=8, context 100 (**predicted**: 2x the highest measured load (4)), 3" in md
    assert "- Measured run: KV pool never full, retractions never, queue never." in md
    row = next(line for line in md.splitlines() if line.startswith("| C=4 |") and "%" in line and "pt" in line)
    assert "| 40.0% | 38.0% | -2.0 pt |" in row and "| 300.0 | 270.0 | -10.0% |" in row


def test_a_run_without_telemetry_says_not_measured(tmp_path: Path) -> None:
    measured = load_run(_run(tmp_path / "m", MEASURED, server=False, gpu=False))
    table = compare_runs(measured, load_run(_run(tmp_path / "t", TWIN)))
    c4 = _by_load(table)[4.0]
    assert c4["measured"] and c4["KV fill mean"]["measured"] is None and c4["power W mean"]["measured"] is None
    assert c4["KV fill mean"]["twin"] == pytest.approx(0.38)
    assert set(table["not_measured"]) == {"server", "gpu"}
    md = markdown(table, [], [])
    row = next(line for line in md.splitlines() if line.startswith("| C=4 |") and "not measured" in line)
    assert row.count("not measured") == 5  # KV mean, KV max, queue, retractions, power
    assert "| not measured | 38.0% | – |" in row
    assert "- Measured run: not measured (no /metrics samples)." in md
    assert "Not measured (server): the measured run has no server /metrics samples" in md


def test_another_max_tokens_or_context_is_a_prediction(tmp_path: Path) -> None:
    measured = load_run(_run(tmp_path / "m", MEASURED))
    longer = [StepSpec(2, context_tokens=200), StepSpec(4, context_tokens=200)]
    table = compare_runs(measured, load_run(_run(tmp_path / "ctx", longer)))
    c2 = _by_load(table)[2.0]
    assert c2["predicted"] and c2["outside"] == "context 2x the longest measured (100)"
    assert c2["distance"]["context_factor"] == pytest.approx(2.0)
    table = compare_runs(measured, load_run(_run(tmp_path / "max", MEASURED, max_tokens=40)))
    assert all(r["predicted"] for r in table["steps"])
    assert _by_load(table)[4.0]["outside"] == "max_tokens 40, 4x the measured 10"


TWIN_MARK = {
    "twin": {
        "predicted": True,
        "source_run": "/runs/20261202-run",
        "source_run_id": "20261202-run",
        "overrides": {"max_running_requests": "256"},
        "concurrency": [128, 256, 512],
        "context_tokens": None,
        "max_tokens": None,
    }
}


def test_report_and_plan_of_a_twin_replay_are_marked_predicted(tmp_path: Path) -> None:
    mark = (
        "Predicted by the twin of 20261202-run (what-if: max_running_requests=256; concurrency 128,256,512), "
        "not measured."
    )
    assert predicted_mark(TWIN_MARK) == mark
    assert predicted_mark({"options": {}}) is None
    run_dir = _run(tmp_path / "t", TWIN, manifest=TWIN_MARK)
    _, summary = summarise(run_dir)
    assert summary["predicted"] == mark
    report = render_markdown(summary)
    assert report.splitlines()[2] == f"> **PREDICTED.** {mark} Every figure in this report is the twin's."
    plan = make_plan(summary, {"slo": {"tpot_p99_ms": 25.0}})
    assert plan["predicted"] == mark
    text = render_plan_md(plan)
    assert f"> **PREDICTED.** {mark} Every figure of this plan is the twin's." in text
    assert "**Predicted highest load per replica that meets the SLO: C=4" in text
    _, measured = summarise(_run(tmp_path / "m", MEASURED))
    assert "predicted" not in measured
    assert "PREDICTED" not in render_markdown(measured) + render_plan_md(
        make_plan(measured, {"slo": {"tpot_p99_ms": 25.0}})
    )
