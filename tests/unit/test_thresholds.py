"""--fail-on / --abort-on: the syntax, the judgement of a summary, the verdict and where it goes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadgen.analysis.thresholds import evaluate, first_breach, judge, message, verdict_lines
from loadgen.spec.gates import Threshold, ThresholdError, parse_thresholds


def _lat(p99: float, mean: float = 1.0) -> dict[str, float]:
    return {"mean": mean, "p50": mean, "p90": p99, "p99": p99}


def _step(i: int, c: int, *, ttft_p99: float, ok: int = 100, failed: int = 0, tok_s: float = 1000.0,
          valid: bool = True, **extra: Any) -> dict[str, Any]:  # fmt: skip
    return {
        "step": i,
        "concurrency": c,
        "context_tokens": None,
        "rate": None,
        "requests_ok": ok,
        "requests_failed": failed,
        "output_tok_s": tok_s,
        "ttft_ms": _lat(ttft_p99),
        "tpot_ms": _lat(20.0),
        "itl_ms": _lat(15.0),
        "e2e_ms": _lat(3000.0),
        "valid": valid,
        "invalid_reason": None if valid else "too few requests (2 < 5)",
        "wall_s": 31.5,
        "end_reason": "duration",
        **extra,
    }


def _summary(*steps: dict[str, Any], cancelled: int = 0) -> dict[str, Any]:
    ok = sum(s["requests_ok"] for s in steps)
    failed = sum(s["requests_failed"] for s in steps) + cancelled
    return {
        "run_id": "r1",
        "label": "gate test",
        "steps": list(steps),
        "totals": {
            "records": ok + failed,
            "requests_ok": ok,
            "requests_failed": failed,
            "errors": {"cancelled": cancelled} if cancelled else {},
            "duration_s": 95.0,
        },
    }


RUN = _summary(
    _step(0, 1, ttft_p99=120.0),
    _step(1, 8, ttft_p99=900.0, failed=3),
    _step(2, 64, ttft_p99=2431.0, ok=97, failed=3, tok_s=4100.0),
    _step(3, 128, ttft_p99=9000.0, ok=2, failed=0, valid=False),
)


# -- syntax ------------------------------------------------------------------------------------


def test_the_issue_example_parses_with_units_scopes_and_operators() -> None:
    got = parse_thresholds(" ttft_p99>2s,tpot_p99>50ms,error_rate>1%,invalid_steps>0 ")
    assert got.text == "ttft_p99>2s,tpot_p99>50ms,error_rate>1%,invalid_steps>0"  # what the manifest keeps
    assert list(got) == [
        Threshold("ttft_p99>2s", "ttft_p99", ">", 2000.0, "ms", "step"),
        Threshold("tpot_p99>50ms", "tpot_p99", ">", 50.0, "ms", "step"),
        Threshold("error_rate>1%", "error_rate", ">", 1.0, "%", "step"),
        Threshold("invalid_steps>0", "invalid_steps", ">", 0.0, "steps", "run"),
    ]
    more = parse_thresholds(" run:error_rate >= 0.5% , output_tok_s<1000, e2e_mean<=250us, goodput_share<95%")
    assert [(t.metric, t.op, t.limit, t.unit, t.scope) for t in more] == [
        ("error_rate", ">=", 0.5, "%", "run"),
        ("output_tok_s", "<", 1000.0, "tok/s", "step"),
        ("e2e_mean", "<=", 0.25, "ms", "step"),
        ("goodput_share", "<", 95.0, "%", "step"),
    ]
    assert parse_thresholds("run:output_tok_s<2000tok/s")[0].scope == "run"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("ttft_p99=2s", "cannot read it; write [run:|tenant:NAME:]METRIC OP VALUE"),
        ("ttft_p95>2s", "unknown metric 'ttft_p95'"),
        ("ttft_p99>2", "no unit; use ms, s or us"),
        ("ttft_p99>2min", "unknown unit 'min'"),
        ("run:ttft_p99>2s", "latency percentiles are judged per step; drop 'run:'"),
        ("error_rate>0.01", "write error_rate in percent, e.g. error_rate>1%"),
        ("error_rate>101%", "above 100%"),
        ("invalid_steps>0.5", "invalid_steps is a count"),
        ("output_tok_s<10ms", "output_tok_s takes a bare number"),
        ("run:goodput_share<90%", "goodput_share is judged per step only"),
        ("node:error_rate>1%", "unknown scope 'node'"),
        ("ttft_p99>2s,ttft_p99>3s", "given twice"),
        (" , ", "no threshold given"),
    ],
)
def test_bad_thresholds_name_themselves_and_what_is_allowed(text: str, fragment: str) -> None:
    with pytest.raises(ThresholdError) as exc:
        parse_thresholds(text, "--fail-on")
    assert str(exc.value).startswith("--fail-on")
    assert fragment in str(exc.value)


# -- judgement ---------------------------------------------------------------------------------


def test_step_thresholds_name_the_worst_valid_step_and_say_by_how_much() -> None:
    (r,) = evaluate(RUN, parse_thresholds("ttft_p99>2s"))
    assert r["status"] == "fail" and r["breached"]
    assert (r["value"], r["step"], r["where"]) == (2431.0, 2, "C=64")  # the invalid C=128 step is not judged
    assert r["margin"] == pytest.approx(431.0)
    assert r["margin_rel"] == pytest.approx(0.2155)
    assert r["message"] == "ttft_p99 2,431 ms > 2,000 ms (+21.6%) at C=64"
    assert [(j["step"], j["breached"]) for j in r["steps"]] == [(0, False), (1, False), (2, True)]
    assert r["steps"][0]["message"] == "ttft_p99 120 ms <= 2,000 ms (-94.0%) at C=1"


def test_error_rate_per_step_and_over_the_run() -> None:
    step, run = evaluate(RUN, parse_thresholds("error_rate>2%,run:error_rate>2%"))
    assert step["value"] == pytest.approx(3.0)  # C=64: 3 of 100
    assert step["where"] == "C=64" and step["status"] == "fail"
    assert step["message"] == "error_rate 3.00% > 2.00% (+1.00 pp) at C=64"
    # the run: 6 failed of 305 (the invalid step's requests count too)
    assert run["value"] == pytest.approx(100 * 6 / 305)
    assert run["status"] == "pass" and run["scope"] == "run" and run["step"] is None
    assert run["message"] == "error_rate 1.97% <= 2.00% (-0.03 pp)"


def test_cancelled_calls_are_not_failures_of_the_run() -> None:
    summary = _summary(_step(0, 1, ttft_p99=1.0, ok=99, failed=1), cancelled=50)
    (r,) = evaluate(summary, parse_thresholds("run:error_rate>=1%"))
    assert r["value"] == pytest.approx(1.0) and r["status"] == "fail"


def test_invalid_steps_output_and_minimums() -> None:
    invalid, low, peak = evaluate(RUN, parse_thresholds("invalid_steps>0,output_tok_s<1500,run:output_tok_s<5000"))
    assert (invalid["value"], invalid["status"]) == (1.0, "fail")
    assert invalid["message"] == "invalid_steps 1 step > 0 steps (+1)"
    assert (low["value"], low["where"], low["status"]) == (1000.0, "C=1", "fail")  # the lowest step is the worst
    assert low["message"] == "output_tok_s 1,000 tok/s < 1,500 tok/s (-33.3%) at C=1"
    assert (peak["value"], peak["status"]) == (4100.0, "fail")  # run: the peak over the valid steps


def test_nothing_to_judge_fails_the_verdict_but_goodput_without_figures_is_skipped() -> None:
    nothing = _summary(_step(0, 1, ttft_p99=1.0, valid=False))
    lat, goodput = evaluate(nothing, parse_thresholds("ttft_p99>2s,goodput_share<90%"))
    assert (lat["status"], lat["breached"], lat["message"]) == ("no_data", True, "ttft_p99>2s: no valid step to judge")
    assert (goodput["status"], goodput["breached"]) == ("skipped", False)
    assert "no goodput figures" in goodput["message"]
    with_goodput = _summary(_step(0, 1, ttft_p99=1.0, goodput_frac=0.875))
    (g,) = evaluate(with_goodput, parse_thresholds("goodput_share<90%"))
    assert (g["value"], g["status"]) == (87.5, "fail")
    assert first_breach([lat, goodput]) is None  # --abort-on waits for a value


def test_open_loop_and_matrix_steps_are_named_by_their_load() -> None:
    s = _step(0, 1, ttft_p99=3000.0, context_tokens=4000)
    s["concurrency"], s["rate"] = None, 2.5
    (r,) = evaluate(_summary(s), parse_thresholds("ttft_p99>2s"))
    assert r["where"] == "rate=2.5/s, context 4000"


def test_judge_combines_fail_on_abort_on_and_the_abort_event() -> None:
    assert judge(RUN, None, None, []) is None
    v = judge(RUN, "error_rate>5%", "ttft_p99>2s", [{"kind": "aborted", "threshold": "ttft_p99>2s", "step": 2}])
    assert v is not None
    assert (v["verdict"], v["breached"], v["aborted_by"], v["aborted_step"]) == ("fail", 1, "ttft_p99>2s", 2)
    assert [r["source"] for r in v["results"]] == ["fail_on", "abort_on"]
    lines = verdict_lines(v)
    assert lines[0] == "FAIL: 1 of 2 thresholds breached; the ramp was aborted by --abort-on ttft_p99>2s"
    assert lines[1] == "BREACHED ttft_p99>2s (--abort-on, worst step): ttft_p99 2,431 ms > 2,000 ms (+21.6%) at C=64"
    assert lines[2].startswith("ok error_rate>5% (--fail-on, worst step): error_rate 3.00% <= 5.00%")
    passing = judge(RUN, "ttft_p99>10s", None, [])
    assert passing is not None and verdict_lines(passing)[0] == "PASS: 1 threshold met"


def test_message_of_a_value_not_measured() -> None:
    t = parse_thresholds("itl_p99>50ms")[0]
    assert message(t, None, "C=8") == "itl_p99 not measured at C=8"


# -- where the verdict goes ------------------------------------------------------------------


def _judged() -> dict[str, Any]:
    summary = dict(RUN)
    v = judge(RUN, "ttft_p99>2s,run:error_rate>1%,goodput_share<90%", None, [])
    summary["thresholds"] = v
    return summary


def test_report_md_opens_with_the_verdict() -> None:
    from loadgen.report.markdown import render_markdown

    md = render_markdown(_judged())  # type: ignore[arg-type]
    lines = md.splitlines()
    assert lines[0] == "# Load test report: gate test"
    assert lines[2] == "> **Thresholds: FAIL: 2 of 3 thresholds breached**"
    assert "> - BREACHED ttft_p99>2s (--fail-on, worst step): ttft_p99 2,431 ms > 2,000 ms (+21.6%) at C=64" in lines
    assert not render_markdown(RUN).splitlines()[2].startswith(">")  # type: ignore[arg-type]


def test_github_step_summary_is_appended_and_junit_written(tmp_path: Path) -> None:
    from loadgen.report.ci import write_ci_outputs

    target = tmp_path / "summary.md"
    target.write_text("earlier step\n")
    junit = tmp_path / "out" / "junit.xml"
    written = write_ci_outputs(_judged(), junit, {"GITHUB_STEP_SUMMARY": str(target)})  # type: ignore[arg-type]
    assert written == [junit, target]
    text = target.read_text()
    assert text.startswith("earlier step\n## loadgen ramp: gate test\n")
    assert "> **Thresholds: FAIL: 2 of 3 thresholds breached**" in text
    assert "### Steps" in text and "| Step | Context | C |" in text
    assert junit.read_bytes().startswith(b"<?xml")
    assert write_ci_outputs(_judged(), None, {}) == []  # type: ignore[arg-type]
