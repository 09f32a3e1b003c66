"""The "load generator bound" verdict from the client's own CPU and loop-lag samples."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from loadgen.analysis.client_load import client_load_enricher
from loadgen.analysis.load import load_run
from loadgen.analysis.synthetic import at_ms, step_lines, write_run_dir


def _run(tmp_path: Path, samples: list[tuple[float, float, float]]) -> dict:
    run_dir = write_run_dir(tmp_path / "run", steps=step_lines(0, 0, 1000, 11000, concurrency=4))
    lines = [
        {"t_ns": at_ms(t), "src": "client", "worker": "w0", "cpu_frac": cpu, "loop_lag_ms": lag}
        for t, cpu, lag in samples
    ]
    (run_dir / "client-w0.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    step = {"steady_ns": at_ms(1000), "end_ns": at_ms(11000), "valid": True, "invalid_reason": None}
    client_load_enricher(load_run(run_dir), [step])
    return step


def test_one_late_wakeup_does_not_flag_a_step(tmp_path: Path) -> None:
    samples = [(1000 + 250 * i, 0.3, 0.5) for i in range(40)]
    samples[7] = (samples[7][0], 0.3, 80.0)  # one 80 ms hiccup
    step = _run(tmp_path, samples)
    assert step["client_bound"] is False and step["valid"] is True
    assert step["loop_lag_ms"]["max"] == 80.0


def test_a_saturated_client_flags_the_step_and_says_what_to_do(tmp_path: Path) -> None:
    step = _run(tmp_path, [(1000 + 250 * i, 0.97, 35.0) for i in range(40)])
    assert step["client_bound"] is True and step["valid"] is False
    assert "load generator bound" in step["invalid_reason"] and "--workers" in step["invalid_reason"]
    assert "CPU 97%" in step["invalid_reason"] and "lag p90 35 ms" in step["invalid_reason"]
    # 97 % of a core at 50 % a worker: two processes at least (a saturated process used what it
    # could, not what the load asked for), said with the flag to use
    assert "at least 2 worker processes (--workers 2)" in step["invalid_reason"] and step["workers_advised"] == 2
    assert step["client_cpu"]["total"] == step["client_cpu"]["mean"] and step["client_cpu"]["processes"] == 1


def test_worker_advice_adds_the_cpu_of_every_process() -> None:
    from loadgen.analysis.client_load import workers_needed

    assert workers_needed({"mean": 0.9, "total": 2.6, "processes": 3}) == 6  # 2.6 / 0.5 -> 6
    assert workers_needed({"mean": 0.3, "total": 0.6, "processes": 2}) == 3  # always one more than it had
    assert workers_needed({"mean": 0.7}) == 2  # older runs: one process's mean
    assert workers_needed({}) is None


def test_samples_outside_the_window_are_ignored(tmp_path: Path) -> None:
    step = _run(tmp_path, [(500, 1.0, 500.0)] + [(1000 + 250 * i, 0.2, 1.0) for i in range(40)])
    assert step["client_cpu"]["mean"] < 0.25 and step["client_bound"] is False


def test_open_loop_step_behind_its_schedule_is_flagged(tmp_path: Path) -> None:
    run_dir = write_run_dir(tmp_path / "run", steps=step_lines(0, 0, 1000, 11000, rate=50.0))
    late = {"rate": 50.0, "schedule_lag_ms": {"mean": 42.0, "max": 300.0}, "valid": True, "invalid_reason": None}
    on_time = {"rate": 50.0, "schedule_lag_ms": {"mean": 0.8, "max": 6.0}, "valid": True, "invalid_reason": None}
    closed = {"rate": None, "schedule_lag_ms": {"mean": 42.0, "max": 300.0}, "valid": True, "invalid_reason": None}
    client_load_enricher(load_run(run_dir), [late, on_time, closed])
    assert late["valid"] is False and "lagging" in late["invalid_reason"] and "42 ms" in late["invalid_reason"]
    assert on_time["valid"] is True and closed["valid"] is True


def _timed_run(
    tmp_path: Path, late_every: int, lag_hist: list[int], cpu: float = 0.4, cpus: int = 16, send_late_every: int = 0
) -> dict:
    """40 requests of 10 chunks; every ``late_every``-th one has its first chunk marked as an upper
    bound 30 ms wide (``chunk_late_ns``), as the transport writes it after a merged read; every
    ``send_late_every``-th one went out 12 ms after its send stamp (``send_late_ns``), the others
    40 µs after it (building the request)."""
    from loadgen.analysis.synthetic import make_record
    from loadgen.report.pipeline import rebuild

    recs = []
    for i in range(40):
        r = make_record(f"r{i}", 0, 1500 + 200 * i, [50 + 20 * k for k in range(10)])
        r.chunk_clock = "kernel"
        if late_every and i % late_every == 0:
            r.chunk_late_ns = [[0, 30_000_000], [1, 10_000_000]]
        if send_late_every:
            r.send_late_ns = 12_000_000 if i % send_late_every == 0 else 40_000
        recs.append(r)
    run_dir = write_run_dir(
        tmp_path / f"run{late_every}-{send_late_every}",
        steps=step_lines(0, 0, 1000, 11000, concurrency=4),
        records={"requests-w0.jsonl": recs},
        manifest={"kind": "ramp", "run_id": "t", "host": {"cpus": cpus}},
    )
    lines = [
        {
            "t_ns": at_ms(1000 + 250 * i),
            "src": "client",
            "worker": "w0",
            "cpu_frac": cpu,
            "loop_lag_ms": 0.1,
            "lag_max_ms": 40.0 if i == 3 else 0.3,
            "lag_hist": lag_hist,
        }
        for i in range(40)
    ]
    (run_dir / "client-w0.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    summary = rebuild(run_dir)
    summary["_report_md"] = (run_dir / "report.md").read_text()
    return summary


def test_late_bounded_ttfts_mark_the_step_timing_uncertain_and_say_why(tmp_path: Path) -> None:
    hist = [40, 5, 3, 1, 0, 0, 0, 1, 0, 0, 0, 0]  # 50 beats per sample; one beat 20-50 ms late
    summary = _timed_run(tmp_path, late_every=4, lag_hist=hist)
    step = summary["steps"][0]
    timing = step["timing"]
    assert timing["ttft_late_share"] == 10 / 40 and timing["ttft_late_max_ms"] == 30.0
    # chunk 0 (30 ms) touches gap 1; chunk 1 (10 ms) touches gaps 1 and 2: 2 of 9 gaps, 10 requests
    assert timing["itl_late_share"] == 20 / (40 * 9)
    assert timing["uncertain"] is True and step["valid"] is True  # marked, not invalid
    assert "25.0% of TTFTs may be late by more than 1 ms (up to 30 ms)" in timing["reason"]
    assert step["loop_lag_ms"]["max"] == 40.0 and step["loop_lag_ms"]["p99"] == 40.0
    assert "loop lag p99 40 ms, max 40 ms" in timing["reason"]
    assert "## Timing uncertain" in summary["_report_md"] and "timing uncertain" in summary["_report_md"]
    # at 40 % of a core the process was not the cause: no worker advice, the machine is named
    assert "other processes on this machine delayed its reads" in timing["reason"]
    assert "a scheduling group of its own: docs/metrics-and-reports.md" in timing["reason"]
    assert "--workers" not in timing["reason"] and "workers_advised" not in step


def test_a_late_send_counts_with_the_first_chunks_bound(tmp_path: Path) -> None:
    """A request written 12 ms after its send stamp (the process descheduled before its write) may
    read its TTFT 12 ms long: it is marked like a late-read first chunk, and both add up; the 40 µs
    of building a request is within the tolerance, and a send does not touch the ITL gaps."""
    hist = [50] + [0] * 11
    step = _timed_run(tmp_path, late_every=4, lag_hist=hist, send_late_every=5)["steps"][0]
    timing = step["timing"]
    # late reads on i % 4 == 0 (10), late sends on i % 5 == 0 (8), both on i % 20 == 0 (2)
    assert timing["ttft_late_share"] == 16 / 40
    assert timing["ttft_late_max_ms"] == 42.0  # 30 ms of read bound + 12 ms of send
    assert timing["itl_late_share"] == 20 / (40 * 9)  # as without the late sends
    assert timing["uncertain"] is True
    assert "40.0% of TTFTs may be late by more than 1 ms (up to 42 ms)" in timing["reason"]
    only_sends = _timed_run(tmp_path, late_every=0, lag_hist=hist, send_late_every=5)["steps"][0]["timing"]
    assert only_sends["ttft_late_share"] == 8 / 40 and only_sends["ttft_late_max_ms"] == 12.0
    assert only_sends["itl_late_share"] == 0


def test_a_busy_client_with_uncertain_timing_is_told_how_many_workers(tmp_path: Path) -> None:
    hist = [40, 5, 3, 1, 0, 0, 0, 1, 0, 0, 0, 0]
    step = _timed_run(tmp_path, late_every=4, lag_hist=hist, cpu=0.8, cpus=2)["steps"][0]
    assert step["timing"]["uncertain"] is True and step["valid"] is True
    reason = step["timing"]["reason"]
    assert "client CPU 80%" in reason and "about 2 worker processes (--workers 2)" in reason
    assert "this machine has 2 CPUs" in reason  # 2 workers and the rest do not fit on 2 CPUs
    assert step["workers_advised"] == 2


def test_exact_timing_is_not_marked(tmp_path: Path) -> None:
    summary = _timed_run(tmp_path, late_every=0, lag_hist=[50] + [0] * 11)
    step = summary["steps"][0]
    assert step["timing"]["ttft_late_share"] == 0 and step["timing"]["itl_late_share"] == 0
    assert step["timing"]["uncertain"] is False and step["timing"]["reason"] is None
    assert step["loop_lag_ms"]["p99"] == 0.25  # every beat within the first bucket
    assert "Timing uncertain" not in summary["_report_md"]


def test_a_saturated_master_is_named_and_more_workers_are_not_advised(tmp_path: Path) -> None:
    """A distributed run whose master (it takes every record, relays every step) used a whole core
    while its workers idled: the step names the master, and the advice is not "add workers"."""
    run_dir = write_run_dir(tmp_path / "run", steps=step_lines(0, 0, 1000, 11000, concurrency=4))
    for worker, cpu in (("master", 0.96), ("w0", 0.35), ("w1", 0.3)):
        lines = [
            {"t_ns": at_ms(1000 + 250 * i), "src": "client", "worker": worker, "cpu_frac": cpu, "loop_lag_ms": 1.0}
            for i in range(40)
        ]
        (run_dir / f"client-{worker}.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    step = {"steady_ns": at_ms(1000), "end_ns": at_ms(11000), "valid": True, "invalid_reason": None}
    client_load_enricher(load_run(run_dir), [step])
    assert step["client_bound"] is True and step["valid"] is False
    reason = step["invalid_reason"]
    assert "the master's CPU 96% of a core, over 2 workers" in reason and "more workers cannot help" in reason
    assert "--workers" not in reason
    assert step["client_cpu"]["processes"] == 3
    # the same run with a master at half a core: the workers' figures judge the step, which passes
    (run_dir / "client-master.jsonl").write_bytes(
        (run_dir / "client-master.jsonl").read_bytes().replace(b'"cpu_frac":0.96', b'"cpu_frac":0.5')
    )
    step = {"steady_ns": at_ms(1000), "end_ns": at_ms(11000), "valid": True, "invalid_reason": None}
    client_load_enricher(load_run(run_dir), [step])
    assert step["client_bound"] is False and step["valid"] is True


def _closed_loop_run(tmp_path: Path, late_ms: dict[int, float]) -> dict:
    """4 users, each sending 10 requests of 200 ms back to back from the start of a 10-s window (the
    step names 4 users); request ``i`` of user 0 went out ``late_ms[i]`` after it was due (``user_late_ns``), and
    every other request 1 ms after (building it)."""
    from loadgen.analysis.synthetic import make_record
    from loadgen.report.pipeline import rebuild

    recs = []
    for u in range(4):
        t = 1000.0
        for i in range(10):
            late = late_ms.get(i, 1.0) if u == 0 and i else (1.0 if i else 0.0)
            t += late
            r = make_record(f"u{u}r{i}", 0, t, [50 + 15 * k for k in range(10)], end_ms=t + 200)
            r.user = u
            r.user_late_ns = int(late * 1e6)
            recs.append(r)
            t += 200
    run_dir = write_run_dir(
        tmp_path / f"run{len(late_ms)}",
        steps=step_lines(0, 0, 1000, 11000, concurrency=4),
        records={"requests-w0.jsonl": recs},
        manifest={"kind": "ramp", "run_id": "t", "host": {"cpus": 2}},
    )
    return rebuild(run_dir)["steps"][0]


def test_users_that_sent_late_mark_the_steps_load_and_say_by_how_much(tmp_path: Path) -> None:
    # user 0's 3rd and 6th requests went out 1.5 s and 0.7 s after they were due (its process
    # descheduled): 2.2 s of the users' 4 x 10 s in the window, 5.5 %; 1-ms sends (building) do not count
    step = _closed_loop_run(tmp_path, {3: 1500.0, 6: 700.0})
    timing = step["timing"]
    assert timing["users_late_share"] == pytest.approx(2.2 / 40) and timing["users_late_max_ms"] == 1500.0
    assert timing["uncertain"] is True and step["valid"] is True
    assert "the users sent 5.5% of their time late (up to 1500 ms after a request was due)" in timing["reason"]
    assert "fewer requests were in flight than the step's 4 users" in timing["reason"]
    # less than 5 % lost (0.7 s of 40 s): the figure is kept, the step is not marked for it
    step = _closed_loop_run(tmp_path, {6: 700.0})
    assert step["timing"]["users_late_share"] == pytest.approx(0.7 / 40) and step["timing"]["uncertain"] is False
    assert _closed_loop_run(tmp_path, {})["timing"]["users_late_share"] == 0.0
