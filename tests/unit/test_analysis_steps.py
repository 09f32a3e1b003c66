"""Per-step statistics against hand-computed truths (synthetic run directories, exact timings)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from loadgen.analysis.load import MISSING, load_run
from loadgen.analysis.steps import dist_ms, step_rows
from loadgen.analysis.summary import build_summary
from loadgen.analysis.synthetic import at_ms, make_record, step_lines, write_run_dir


def scenario(path: Path) -> Path:
    """Step 0: window [1000, 11000) ms. Step 1: killed in warm-up. Times in ms after T0."""
    w0 = [
        # sent in warm-up: latency excluded; chunks at 1100 and 1400 ms arrive in the window
        make_record("A", 0, 500, [100, 300, 600, 900], prompt_tokens=90),
        # TTFT 2050-1990=60, E2E 2200-1990=210, gaps 20,30,60, TPOT 150/7, 8 tokens in 4 chunks
        make_record(
            "B",
            0,
            2000,
            [50, 70, 100, 160],
            [2, 1, 3, 2],
            end_ms=200,
            intended_ms=1990,
            prompt_tokens=100,
            context_tokens=100,
        ),
        # TTFT 100, E2E 130, gaps 10,20, TPOT 15
        make_record("C", 0, 3000, [100, 110, 130], prompt_tokens=120, context_tokens=100),
    ]
    w1 = [
        # sent inside, streams past the end: TTFT 50, E2E 300, gaps 100,100, TPOT 125; 1 token inside
        make_record("D", 0, 10900, [50, 150, 250], end_ms=300, prompt_tokens=110, context_tokens=100, worker="w1"),
        make_record(
            "E",
            0,
            4000,
            [],
            end_ms=1,
            status=0,
            error_class="connection_refused",
            error="Connection refused|\nsecond line",
            output_tokens=None,
            worker="w1",
        ),
        make_record(
            "F",
            0,
            5000,
            [],
            end_ms=5,
            status=503,
            error_class="http_5xx",
            error="<html>503</html>",
            output_tokens=None,
            worker="w1",
        ),
        make_record(
            "G",
            0,
            6000,
            [],
            end_ms=5,
            status=503,
            error_class="http_5xx",
            error="busy",
            output_tokens=None,
            worker="w1",
        ),
        # step 1 never got past its warm-up (no steady line, warmup_s 5, no end line: killed)
        make_record("H", 1, 11500, [100, 200], end_ms=500, worker="w1"),
    ]
    steps = [
        *step_lines(0, 0, 1000, 11000, concurrency=2, context_tokens=100, warmup_s=1.0),
        *step_lines(1, 11000, None, None, concurrency=4, context_tokens=100, warmup_s=5.0),
    ]
    manifest = {"label": "B300 | TP8", "url": "http://127.0.0.1:9/v1", "model": "m", "transport": "fast"}
    return write_run_dir(
        path, steps=steps, records={"requests-w0.jsonl": w0, "requests-w1.jsonl": w1}, manifest=manifest
    )


def linear(values: list[float], q: float) -> float:
    """Linear-interpolation percentile, written out (rank = q/100 * (n-1))."""
    s = sorted(values)
    rank = q / 100 * (len(s) - 1)
    lo = int(rank)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (rank - lo) * (s[hi] - s[lo])


def check(dist: dict[str, float | None], values: list[float]) -> None:
    assert dist["mean"] == pytest.approx(sum(values) / len(values), abs=1e-9)
    for q in (50, 90, 99):
        assert dist[f"p{q}"] == pytest.approx(linear(values, q), abs=1e-9)


def test_latency_statistics_match_hand_computed_truth(tmp_path: Path) -> None:
    row = step_rows(load_run(scenario(tmp_path)), min_ok_requests=3)[0]
    check(row["ttft_ms"], [60, 100, 50])
    check(row["e2e_ms"], [210, 130, 300])
    check(row["itl_ms"], [20, 30, 60, 10, 20, 100, 100])
    check(row["tpot_ms"], [150 / 7, 15, 125])
    assert row["ttft_ms"]["p90"] == pytest.approx(92.0)  # the method, not only self-consistency


def test_throughput_counts_tokens_arriving_inside_the_window(tmp_path: Path) -> None:
    row = step_rows(load_run(scenario(tmp_path)), min_ok_requests=3)[0]
    # A: 2 of 4 chunks after 1000 ms; B: 8; C: 3; D: 1 of 3 before 11000 ms -> 14 tokens / 10 s
    assert row["output_tokens_in_window"] == pytest.approx(14)
    assert row["output_tok_s"] == pytest.approx(1.4)
    assert row["window_s"] == pytest.approx(10.0)
    assert row["wall_s"] == pytest.approx(11.0)
    assert row["per_request_tok_s"] == pytest.approx((8 / 0.21 + 3 / 0.13 + 3 / 0.3) / 3)


def test_counts_errors_and_token_figures(tmp_path: Path) -> None:
    row = step_rows(load_run(scenario(tmp_path)), min_ok_requests=3)[0]
    assert row["requests_ok"] == 3
    assert row["requests_failed"] == 3
    assert row["requests_warmup"] == 1
    assert row["errors"] == {"http_5xx": 2, "connection_refused": 1}
    assert row["output_tokens_total"] == 14
    assert row["tokens_per_chunk_mean"] == pytest.approx(14 / 10)
    assert row["prompt_tokens_mean"] == pytest.approx(110)
    assert row["prompt_tokens_requested_mean"] == pytest.approx(100)
    assert row["output_tokens_source"] == {"usage": 3}
    assert row["schedule_lag_ms"]["mean"] == pytest.approx(10 / 6)
    assert row["schedule_lag_ms"]["max"] == pytest.approx(10)
    assert (row["concurrency"], row["context_tokens"], row["end_reason"]) == (2, 100, "duration")
    assert row["valid"] is True and row["invalid_reason"] is None


def test_validity_rules(tmp_path: Path) -> None:
    run = load_run(scenario(tmp_path))
    rows = step_rows(run)  # default minimum: 5 ok requests
    assert rows[0]["valid"] is False
    assert rows[0]["invalid_reason"] == "too few requests (3 < 5)"
    # step 1: steady would be 11000 + 5000 ms, but the killed step ends at its last record (12000 ms)
    assert rows[1]["end_reason"] is None
    assert rows[1]["invalid_reason"] == "not steady"
    assert rows[1]["output_tok_s"] is None


def test_server_served_nothing(tmp_path: Path) -> None:
    recs = [
        make_record(
            f"r{i}",
            0,
            2000 + i,
            [],
            end_ms=1,
            status=0,
            error_class="connection_refused",
            error="Connection refused",
            output_tokens=None,
        )
        for i in range(4)
    ]
    write_run_dir(tmp_path, steps=step_lines(0, 0, 1000, 5000, concurrency=8), records={"requests-w0.jsonl": recs})
    row = step_rows(load_run(tmp_path))[0]
    assert row["invalid_reason"] == "server served nothing"
    assert row["errors"] == {"connection_refused": 4}
    assert row["ttft_ms"] == {"mean": None, "p50": None, "p90": None, "p99": None}
    assert row["output_tok_s"] == 0.0
    assert row["per_request_tok_s"] is None


def test_chunk_tokens_are_scaled_to_usage_and_plain_requests_count_at_end(tmp_path: Path) -> None:
    recs = [
        # the parser counted 1 per chunk, usage says 8: each chunk carries 2; all 4 inside
        make_record("a", 0, 1000, [10, 20, 30, 40], [1, 1, 1, 1], output_tokens=8),
        # straddles the end (5000 ms): chunks at 4900, 4950 inside, 5050, 5100 outside -> 4 tokens
        make_record("b", 0, 4800, [100, 150, 250, 300], [1, 1, 1, 1], output_tokens=8),
        # non-streaming: 5 tokens delivered at its end (3000 ms)
        make_record("c", 0, 2000, [], end_ms=1000, output_tokens=5),
        # usage missing: the chunk sum is used, source "chunks"
        make_record("d", 0, 2500, [10, 20], [2, 3], output_tokens=None, tokens_source="none"),
    ]
    write_run_dir(tmp_path, steps=step_lines(0, 0, 1000, 5000, concurrency=4), records={"requests-w0.jsonl": recs})
    row = step_rows(load_run(tmp_path), min_ok_requests=1)[0]
    assert row["output_tokens_in_window"] == pytest.approx(8 + 4 + 5 + 5)
    assert row["output_tok_s"] == pytest.approx(22 / 4)
    assert row["output_tokens_total"] == 8 + 8 + 5 + 5
    assert row["output_tokens_source"] == {"usage": 3, "chunks": 1}
    # TPOT: a (40-10)/7, b (300-100)/7, d (20-10)/4; c has no first chunk
    check(row["tpot_ms"], [30 / 7, 200 / 7, 2.5])


def test_dist_ms_of_nothing_and_of_one_value() -> None:
    assert dist_ms(np.empty(0, dtype=np.int64))["p99"] is None
    one = dist_ms(np.array([2_500_000], dtype=np.int64))
    assert one == {"mean": 2.5, "p50": 2.5, "p90": 2.5, "p99": 2.5}


def test_summary_has_the_issue_schema_and_totals(tmp_path: Path) -> None:
    summary = build_summary(load_run(scenario(tmp_path)), min_ok_requests=3)
    assert summary["label"] == "B300 | TP8"
    assert summary["run_id"] == tmp_path.name
    required = {
        "step",
        "concurrency",
        "context_tokens",
        "output_tok_s",
        "per_request_tok_s",
        "requests_ok",
        "requests_failed",
        "errors",
        "ttft_ms",
        "itl_ms",
        "tpot_ms",
        "e2e_ms",
        "prompt_tokens_mean",
        "output_tokens_total",
        "valid",
        "invalid_reason",
    }
    for step in summary["steps"]:
        assert required <= step.keys()
        for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
            assert set(step[key]) == {"mean", "p50", "p90", "p99"}
    totals = summary["totals"]
    assert totals["records"] == 8
    assert totals["requests_ok"] == 5  # A, B, C, D, H (warm-up and other steps included)
    assert totals["errors"] == {"http_5xx": 2, "connection_refused": 1}
    assert totals["error_samples"]["http_5xx"] == "<html>503</html>"
    assert totals["valid_steps"] == 1
    assert totals["peak_output_tok_s"] == pytest.approx(1.4)


def test_enrichers_add_keys_and_can_invalidate(tmp_path: Path) -> None:
    from loadgen.analysis import mark_invalid

    seen: list[int] = []

    def power(run: object, steps: list[dict[str, object]]) -> None:
        for s in steps:
            seen.append(int(s["step"]))  # type: ignore[call-overload]
            s["gpu_power_w"] = {"mean": 400.0, "max": 450.0}
        mark_invalid(steps[0], "load generator bound")

    summary = build_summary(load_run(scenario(tmp_path)), [power], min_ok_requests=3)
    assert seen == [0, 1]
    assert summary["steps"][0]["gpu_power_w"] == {"mean": 400.0, "max": 450.0}
    assert summary["steps"][0]["invalid_reason"] == "load generator bound"
    assert summary["steps"][1]["invalid_reason"] == "not steady"
    assert summary["totals"]["valid_steps"] == 0


def random_run(path: Path, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    recs = []
    for i in range(400):
        n = int(rng.integers(0, 6))
        chunk_ms = np.cumsum(rng.integers(1, 400, size=n)).tolist()
        toks = rng.integers(1, 4, size=n).tolist()
        usage = None if i % 7 == 0 else int(sum(toks) * rng.integers(1, 3))
        failed = i % 11 == 0
        recs.append(
            make_record(
                f"r{i}",
                int(i >= 200),
                float(rng.integers(0, 20_000)),
                chunk_ms,
                toks,
                end_ms=(chunk_ms[-1] if n else 5.0),
                output_tokens=usage,
                error_class="stall" if failed else None,
                worker=f"w{i % 3}",
            )
        )
    steps = [*step_lines(0, 0, 3000, 10_000), *step_lines(1, 10_000, 12_000, 20_000)]
    by_worker = {f"requests-w{w}.jsonl": [r for r in recs if r.worker == f"w{w}"] for w in range(3)}
    return write_run_dir(path, steps=steps, records=by_worker)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_chunk_gaps_and_tokens_arrived_against_brute_force(tmp_path: Path, seed: int) -> None:
    from loadgen.analysis.steps import StepAnalysis

    run = load_run(random_run(tmp_path, seed))
    analysis = StepAnalysis(run)
    req = run.requests
    rng = np.random.default_rng(seed)
    long_runs = np.flatnonzero(np.arange(req.n) % 10 != 0)  # 41 runs of consecutive rows
    scattered = np.flatnonzero(rng.random(req.n) < 0.7)  # too many runs: gathered
    for rows in (long_runs, scattered):
        naive_gaps: list[int] = []
        for r in rows.tolist():
            offs, _ = req.chunks_of(r)
            naive_gaps += np.diff(offs).tolist()
        assert analysis.chunk_gaps(rows).tolist() == naive_gaps
        assert analysis._gathered_gaps(rows).tolist() == naive_gaps
        expected = dist_ms(np.array(naive_gaps))
        assert analysis.itl_ms(rows) == pytest.approx(expected, rel=1e-12)
    for a_ms, b_ms in ((3000, 10_000), (12_000, 20_000), (0, 40_000)):
        a, b = at_ms(a_ms), at_ms(b_ms)
        truth = 0.0
        for r in range(req.n):
            offs, toks = req.chunks_of(r)
            out = int(req.output_tokens[r])
            total = int(toks.sum())
            out = total if out == MISSING else out
            scale = out / total if total > 0 and out > 0 else 1.0
            if len(offs) == 0:
                truth += out if a <= req.end_ns[r] < b else 0
            for off, tok in zip(offs.tolist(), toks.tolist(), strict=True):
                if a <= req.sent_ns[r] + off < b:
                    truth += tok * scale
        assert analysis.tokens_arrived(a, b) == pytest.approx(truth)


def test_cancelled_requests_are_counted_apart_from_failures(tmp_path: Path) -> None:
    """A user stopped by the client mid-request is not a failure of the server."""
    recs = [
        make_record("ok1", 0, 1500, [50, 60]),
        make_record("ok2", 0, 1600, [40, 55]),
        make_record("cut", 0, 1700, [], end_ms=10, error_class="cancelled", status=0),
        make_record("bad", 0, 1800, [], end_ms=5, error_class="http_5xx", status=500),
    ]
    run_dir = write_run_dir(
        tmp_path / "run",
        steps=step_lines(0, 0, 1000, 3000, concurrency=2),
        records={"requests-w0.jsonl": recs},
    )
    row = build_summary(load_run(run_dir), min_ok_requests=1)["steps"][0]
    assert (row["requests_ok"], row["requests_failed"], row["requests_cancelled"]) == (2, 1, 1)
    assert row["errors"] == {"http_5xx": 1}


def test_prefix_cached_share_comes_from_the_servers_usage(tmp_path: Path) -> None:
    recs = [
        make_record("a", 0, 1500, [50, 60], prompt_tokens=1000),
        make_record("b", 0, 1600, [40], prompt_tokens=3000),
    ]
    recs[0].cached_tokens = 0
    recs[1].cached_tokens = 2000
    run_dir = write_run_dir(
        tmp_path / "run", steps=step_lines(0, 0, 1000, 3000, concurrency=2), records={"requests-w0.jsonl": recs}
    )
    row = build_summary(load_run(run_dir), min_ok_requests=1)["steps"][0]
    assert row["prefix_cached_frac"] == pytest.approx(2000 / 4000)
