"""The Pareto frontier (``analysis.pareto``): dominance on exact points, ties, INVALID steps, one
frontier per context length, where the GPU count comes from, and ``pareto`` in a built summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadgen.analysis.contracts import StepSummary
from loadgen.analysis.load import load_run
from loadgen.analysis.pareto import UNKNOWN_NOTE, frontier, gpu_count, pareto_summary, per_user_tok_s
from loadgen.analysis.summary import build_summary
from loadgen.analysis.synthetic import make_record, step_lines, write_run_dir


def step(
    i: int,
    c: int,
    tok_s: float | None,
    tpot_p50: float | None,
    *,
    valid: bool = True,
    ctx: int | None = None,
    **kw: Any,
) -> StepSummary:
    """A step with just what the Pareto reads."""
    s: dict[str, Any] = {
        "step": i,
        "concurrency": c,
        "rate": None,
        "context_tokens": ctx,
        "output_tok_s": tok_s,
        "tpot_ms": {"mean": tpot_p50, "p50": tpot_p50, "p90": tpot_p50, "p99": tpot_p50},
        "valid": valid,
        "invalid_reason": None if valid else "too few requests",
        **kw,
    }
    return s  # type: ignore[return-value]


def on(pareto: Any) -> list[int]:
    return [p["step"] for p in pareto["points"] if p["on_frontier"]]


def test_dominance_on_exact_points() -> None:
    # (x, y): b beats a on both; c trades speed for throughput; d is beaten by c on both
    a, b, c, d = (10.0, 100.0), (20.0, 200.0), (5.0, 400.0), (4.0, 300.0)
    assert frontier([a, b, c, d]) == [False, True, True, False]
    # better on one axis and equal on the other dominates
    assert frontier([(10.0, 100.0), (10.0, 150.0), (12.0, 100.0)]) == [False, True, True]
    assert frontier([]) == []
    assert frontier([(1.0, 1.0)]) == [True]


def test_equal_points_are_both_on_the_frontier() -> None:
    assert frontier([(10.0, 100.0), (10.0, 100.0), (5.0, 50.0)]) == [True, True, False]


def test_per_user_is_1000_over_tpot_p50_and_throughput_is_per_gpu() -> None:
    steps = [step(0, 1, 100.0, 10.0), step(1, 8, 640.0, 12.5), step(2, 16, 600.0, 20.0)]
    pareto = pareto_summary(steps, 4)
    xs = [p["per_user_tok_s"] for p in pareto["points"]]
    ys = [p["tok_s_per_gpu"] for p in pareto["points"]]
    assert xs == [100.0, 80.0, 50.0]
    assert ys == [25.0, 160.0, 150.0]
    assert on(pareto) == [0, 1]  # C=16 is slower per user and lower per GPU than C=8
    assert pareto["gpus"] == 4 and pareto["gpus_source"] == "option" and pareto["note"] is None
    assert pareto["per_user"] == "1000 / tpot_ms.p50"
    assert per_user_tok_s({"tpot_ms": {"p50": 0.0}}) is None
    assert per_user_tok_s({}) is None


def test_invalid_steps_are_listed_never_on_the_frontier() -> None:
    # the invalid step would dominate everything; it must not push the valid ones off
    steps = [step(0, 1, 100.0, 10.0), step(1, 8, 640.0, 12.5), step(2, 64, 9999.0, 1.0, valid=False)]
    pareto = pareto_summary(steps, 1)
    assert on(pareto) == [0, 1]
    bad = pareto["points"][2]
    assert bad["valid"] is False and bad["on_frontier"] is False
    assert bad["per_user_tok_s"] == 1000.0 and bad["tok_s_per_gpu"] == 9999.0


def test_steps_without_a_figure_are_listed_with_none() -> None:
    pareto = pareto_summary([step(0, 1, None, None), step(1, 2, 200.0, 10.0)], 1)
    first = pareto["points"][0]
    assert first["tok_s_per_gpu"] is None and first["per_user_tok_s"] is None and not first["on_frontier"]
    assert on(pareto) == [1]


def test_each_context_length_has_its_own_frontier() -> None:
    steps = [
        step(0, 1, 100.0, 10.0, ctx=1000),
        step(1, 8, 400.0, 20.0, ctx=1000),
        step(2, 1, 50.0, 20.0, ctx=8000),  # dominated by step 1, but another workload
        step(3, 8, 40.0, 25.0, ctx=8000),
    ]
    pareto = pareto_summary(steps, 1)
    assert on(pareto) == [0, 1, 2]
    assert [p["context_tokens"] for p in pareto["points"]] == [1000, 1000, 8000, 8000]


@pytest.mark.parametrize(
    ("option", "steps", "expected"),
    [
        (8, [{"gpu_count": 2}], (8, "option")),  # --gpu-count wins over the telemetry
        (None, [{"gpu_count": 2}, {"gpu_count": 4}, {"gpu_count": 0}], (4, "telemetry")),
        (None, [{"gpu_count": 0}, {}], (1, "unknown")),
        (0, [], (1, "unknown")),
        (True, [], (1, "unknown")),  # a JSON true is not a count
        ("8", [{"gpu_count": 2}], (2, "telemetry")),
    ],
)
def test_gpu_count_sources(option: object, steps: list[dict[str, Any]], expected: tuple[int, str]) -> None:
    assert gpu_count(option, steps) == expected


def test_unknown_gpu_count_is_per_node_with_a_note() -> None:
    pareto = pareto_summary([step(0, 1, 300.0, 10.0)])
    assert pareto["gpus"] == 1 and pareto["gpus_source"] == "unknown"
    assert pareto["note"] == UNKNOWN_NOTE and "per node" in UNKNOWN_NOTE
    assert pareto["points"][0]["tok_s_per_gpu"] == 300.0


def _run(path: Path, options: dict[str, Any]) -> Path:
    steps: list[dict[str, Any]] = []
    recs = []
    for s, c in enumerate((1, 4)):
        t0 = s * 12_000
        steps += step_lines(s, t0, t0 + 1000, t0 + 11_000, concurrency=c)
        recs += [make_record(f"r{s}-{i}", s, t0 + 1000 + 450 * i, [50 + 20 * k for k in range(5)]) for i in range(20)]
    return write_run_dir(
        path,
        steps=steps,
        records={"requests-w0.jsonl": recs},
        manifest={"run_id": "p", "options": {"url": "http://127.0.0.1:9", **options}},
    )


@pytest.mark.parametrize(("options", "gpus", "source"), [({"gpu_count": 2}, 2, "option"), ({}, 1, "unknown")])
def test_build_summary_writes_pareto(tmp_path: Path, options: dict[str, Any], gpus: int, source: str) -> None:
    summary = build_summary(load_run(_run(tmp_path / "run", options)))
    pareto = summary["pareto"]
    assert (pareto["gpus"], pareto["gpus_source"]) == (gpus, source)
    assert [p["step"] for p in pareto["points"]] == [s["step"] for s in summary["steps"]]
    for p, s in zip(pareto["points"], summary["steps"], strict=True):
        assert p["concurrency"] == s["concurrency"]
        assert p["tok_s_per_gpu"] == pytest.approx((s["output_tok_s"] or 0) / gpus)
        assert p["per_user_tok_s"] == pytest.approx(1000.0 / (s["tpot_ms"]["p50"] or 1))
        assert p["valid"] == s["valid"]
