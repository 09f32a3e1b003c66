"""The live view (``loadgen.webui.live``) shows the report's figures: a run directory written here
with known timings, read as it grows, against ``summarise`` of the same directory."""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.analysis.contracts import StepSummary
from loadgen.analysis.pipeline import summarise
from loadgen.report.markdown import _ms, _num
from loadgen.rundir.records import LAG_EDGES_MS, RequestRecord
from loadgen.webui.blueprint import TABLE, LiveSource, fmt_ms, fmt_num, table_rows
from loadgen.webui.live import LiveRun
from loadgen.webui.livejson import empty_payload, live_step

MS = 1_000_000
S = 1_000_000_000
T0 = 1_700_000_000_000_000_000
STEP_S = 4  # each step: 1 s warm-up, 3 s steady
WORKERS = ("w0", "w1")


def _jsonl(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in rows)


def _append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


def make_records(seed: int = 7) -> dict[str, list[bytes]]:
    """Three steps at concurrency 2, 4, 8 from two workers: streamed records with jittered chunk
    gaps (some requests straddle a step edge), a few failures with messages, late chunks in step 2
    (timing uncertain there), and only 3 requests in the window of step 0 (INVALID: too few)."""
    rnd = random.Random(seed)
    out: dict[str, list[bytes]] = {w: [] for w in WORKERS}
    i = 0
    for step, conc in enumerate((2, 4, 8)):
        start = T0 + step * STEP_S * S
        n = 4 if step == 0 else 30 * conc
        for k in range(n):
            w = WORKERS[k % 2]
            sent = start + (k * 3_900 * MS) // n + rnd.randint(0, 5 * MS)
            if step == 0:  # one in warm-up, three in the window
                sent = start + (300 if k == 0 else 1_200 + 600 * k) * MS
            i += 1
            if k % 17 == 5:
                cls = "http_5xx" if k % 2 else "stall"
                rec = RequestRecord(
                    id=f"r{i}", worker=w, step=step, intended_ns=sent, sent_ns=sent, end_ns=sent + 40 * MS,
                    status=500 if cls == "http_5xx" else 200, error_class=cls, error=f"{cls} number {k}",
                )  # fmt: skip
            else:
                tokens = rnd.randint(3, 40)
                offsets = [rnd.randint(20, 90) * MS]
                for _ in range(tokens - 1):
                    offsets.append(offsets[-1] + rnd.randint(4_000_000, 12_000_000))
                late = [[j, 3 * MS] for j in range(1, len(offsets), 2)] if step == 2 else []
                rec = RequestRecord(
                    id=f"r{i}", worker=w, step=step, intended_ns=sent, sent_ns=sent,
                    first_chunk_ns=sent + offsets[0], end_ns=sent + offsets[-1] + MS,
                    chunk_offsets_ns=offsets, chunk_tokens=[1] * tokens, output_tokens=tokens,
                    prompt_tokens=100, tokens_source="usage", chunk_late_ns=late, chunk_clock="kernel",
                )  # fmt: skip
            out[w].append(rec.to_json())
    return out


def step_lines() -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for step, conc in enumerate((2, 4, 8)):
        start = T0 + step * STEP_S * S
        lines += [
            {"step": step, "event": "start", "t_ns": start, "concurrency": conc, "warmup_s": 1.0},
            {"step": step, "event": "steady", "t_ns": start + S},
            {"step": step, "event": "end", "t_ns": start + STEP_S * S, "reason": "duration"},
        ]
    return lines


def samples() -> list[dict[str, Any]]:
    """Two GPUs at 4 Hz (GPU 1 draws 100 W more), server metrics at 2 Hz with a growing KV fill,
    queue and a retraction counter."""
    out: list[dict[str, Any]] = []
    for q in range(3 * STEP_S * 4 + 1):
        t = T0 + q * 250 * MS
        for gpu in (0, 1):
            out.append(
                {"t_ns": t + gpu, "src": "gpu", "source": "dcgm", "gpu": gpu, "power_w": 300.0 + 100 * gpu + q,
                 "power_limit_w": 700.0, "util_gpu": 90.0, "energy_mj": None}
            )  # fmt: skip
        if q % 2 == 0:
            out.append(
                {"t_ns": t + 5, "src": "server", "engine": "sglang", "running": q, "queued": q // 4,
                 "kv_usage": min(q / 48, 1.0), "preemptions_total": q // 8}
            )  # fmt: skip
    return out


def events() -> list[dict[str, Any]]:
    return [
        {"t_ns": T0 + 9 * S, "src": "log", "kind": "log_match", "pattern": "sglang_kv_full", "severity": "warning",
         "line": "KV cache pool is full. Retract requests."},
        {"t_ns": T0 + 10 * S, "src": "log", "kind": "log_match", "pattern": "cuda_oom", "severity": "error",
         "line": "torch.OutOfMemoryError: CUDA out of memory"},
        {"t_ns": T0 + 10 * S, "src": "telemetry", "kind": "started"},
    ]  # fmt: skip


def client_lines(worker: str) -> list[dict[str, Any]]:
    """4 Hz self-measurement; w1 is busier, with a 30 ms loop lag during step 2."""
    out = []
    for q in range(3 * STEP_S * 4):
        t = T0 + q * 250 * MS + 3
        busy = worker == "w1" and q >= 2 * STEP_S * 4
        hist = [0] * (len(LAG_EDGES_MS) + 1)
        hist[7 if busy else 1] = 50
        out.append(
            {"t_ns": t, "src": "client", "worker": worker, "pid": 1, "cpu_frac": 0.6 if busy else 0.2,
             "loop_lag_ms": 30.0 if busy else 0.4, "lag_max_ms": 35.0 if busy else 0.5, "lag_hist": hist,
             "in_flight": 3}
        )  # fmt: skip
    return out


def write_run(d: Path, *, gpu_count: int | None = None) -> None:
    d.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {"kind": "ramp", "run_id": d.name, "host": {"cpus": 16}}
    if gpu_count is not None:
        manifest["options"] = {"gpu_count": gpu_count}
    (d / "manifest.json").write_bytes(orjson.dumps(manifest))
    (d / "steps.jsonl").write_bytes(_jsonl(step_lines()))
    for w, lines in make_records().items():
        (d / f"requests-{w}.jsonl").write_bytes(b"".join(lines))
        (d / f"client-{w}.jsonl").write_bytes(_jsonl(client_lines(w)))
    (d / "samples.jsonl").write_bytes(_jsonl(samples()))
    (d / "events.jsonl").write_bytes(_jsonl(events()))


def after_end(now_s: float = 3 * STEP_S + 5) -> Any:
    return lambda: T0 + int(now_s * S)


# the figures the page and the table show, as the report names them
FIGURES = {
    "tok_s": ("output_tok_s", None),
    "req_tok_s": ("per_request_tok_s", None),
    "ttft_p50": ("ttft_ms", "p50"),
    "ttft_p99": ("ttft_ms", "p99"),
    "tpot_p50": ("tpot_ms", "p50"),
    "tpot_p99": ("tpot_ms", "p99"),
    "itl_p50": ("itl_ms", "p50"),
    "itl_p99": ("itl_ms", "p99"),
    "e2e_p99": ("e2e_ms", "p99"),
    "requests_ok": ("requests_ok", None),
    "requests_failed": ("requests_failed", None),
    "valid": ("valid", None),
    "invalid_reason": ("invalid_reason", None),
    "kv_usage_mean": ("kv_usage", "mean"),
    "queue_len_mean": ("queue_len", "mean"),
    "preemptions": ("preemptions", None),
    "gpu_power_w": ("gpu_power_w", "mean"),
    "power_valid": ("power_valid", None),
    "client_cpu": ("client_cpu", "mean"),
    "loop_lag_p99_ms": ("loop_lag_ms", "p99"),
}


def report_value(row: StepSummary, key: str, part: str | None) -> Any:
    v: Any = row.get(key)
    return v.get(part) if part is not None and isinstance(v, dict) else v


def assert_same_as_report(live_steps: list[dict[str, Any]], report_steps: list[StepSummary]) -> None:
    assert [s["step"] for s in live_steps] == [r["step"] for r in report_steps]
    for live, row in zip(live_steps, report_steps, strict=True):
        for name, (key, part) in FIGURES.items():
            assert live[name] == report_value(row, key, part), (row["step"], name)
        assert live["timing_uncertain"] == row["timing"]["uncertain"]
        assert live["timing_reason"] == row["timing"]["reason"]
        assert live["errors"] == row["errors"]


def test_an_ended_run_reads_exactly_as_its_report(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_run(run)
    p = LiveRun(run, now_ns=after_end(), prefer_report=False).payload()
    _, summary = summarise(run)
    assert p["source"] == "live"
    assert_same_as_report(p["steps"], summary["steps"])
    # the validity and timing marks this run was built to have, with the report's reasons
    s0, s1, s2 = p["steps"]
    assert not s0["valid"] and s0["invalid_reason"] == "too few requests (3 < 5)"
    assert s1["valid"] and not s1["timing_uncertain"]
    # step 2: w1's loop lag (p90 over 20 ms) makes it INVALID; its late chunks make it timing uncertain
    assert not s2["valid"] and s2["invalid_reason"].startswith("load generator bound (event-loop lag p90 35 ms)")
    assert s2["timing_uncertain"] and s2["timing_reason"].startswith("timing uncertain: ")
    assert "loop lag p99" in s2["timing_reason"]
    assert s2["loop_lag_p99_ms"] == 35.0  # the bucket edge (50 ms), capped at the largest lag seen
    assert s2["client_processes"] == 2
    # the Pareto points are the report's: x = 1000 / TPOT p50, y = tok/s per GPU (2 GPUs seen)
    assert p["pareto"]["points"] == summary["pareto"]["points"]
    assert p["pareto"]["gpus"] == 2 and p["pareto"]["gpus_source"] == "telemetry"
    assert p["pareto"]["points"][0]["on_frontier"] is False  # INVALID: never on it
    for s, pt in zip(p["steps"], p["pareto"]["points"], strict=True):
        assert s["per_user_tok_s"] == pt["per_user_tok_s"] and s["tok_s_per_gpu"] == pt["tok_s_per_gpu"]
    # errors over the whole run, as the report's totals count them, with their messages
    assert p["errors"] == summary["totals"]["errors"]
    for cls, first in summary["totals"]["error_samples"].items():
        assert first in p["error_samples"][cls] and len(p["error_samples"][cls]) <= 3


def test_the_written_report_is_shown_once_it_is_newer_than_the_last_step(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_run(run, gpu_count=8)
    from loadgen.report.pipeline import rebuild

    summary = rebuild(run)
    live = LiveRun(run, now_ns=after_end())
    p = live.payload()
    assert p["source"] == "report"
    assert_same_as_report(p["steps"], summary["steps"])
    assert p["pareto"]["gpus"] == 8 and p["pareto"]["points"] == summary["pareto"]["points"]
    assert p["knee"]["reason"] == summary["knee"]["reason"]
    assert set(p["reports"]) >= {"summary.json", "report.md", "report.html"}
    # computed and read agree: one definition of each figure
    computed = LiveRun(run, now_ns=after_end(), prefer_report=False).payload()
    assert_same_as_report(computed["steps"], summary["steps"])
    assert computed["pareto"]["points"] == p["pareto"]["points"]
    # the knee judged live over the ended steps is the report's verdict
    assert computed["knee"] == p["knee"]
    # the run's request counts: summary.json's totals, read or computed by the same rule
    want = {
        "requests_ok": summary["totals"]["requests_ok"],
        "requests_failed": summary["totals"]["requests_failed"],
        "requests_cancelled": summary["totals"]["errors"].get("cancelled", 0),
    }
    assert p["totals"] == want and computed["totals"] == want
    assert want["requests_failed"] > 0  # the fixture has failures: the check compares something


def test_growing_run_gives_the_same_rows_as_one_read(tmp_path: Path) -> None:
    """Lines arrive in pieces (half lines too) while steps run, telemetry and client lines with them;
    each poll parses only what is new, recomputes the steps those lines touch, and ends with the
    report's rows (validity, timing marks and telemetry included)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_bytes(orjson.dumps({"kind": "ramp", "run_id": "g", "host": {"cpus": 16}}))
    clock = {"now": T0}
    live = LiveRun(run, now_ns=lambda: clock["now"], prefer_report=False)
    records = make_records()
    lines = step_lines()
    data = {w: b"".join(recs) for w, recs in records.items()}
    ends = {w: [orjson.loads(r)["end_ns"] for r in recs] for w, recs in records.items()}
    written = {w: 0 for w in WORKERS}
    seen_phases = set()
    for tick in range(0, 3 * STEP_S * 2 + 3):
        now = T0 + tick * S // 2
        clock["now"] = now
        (run / "steps.jsonl").write_bytes(_jsonl([x for x in lines if x["t_ns"] <= now]))
        # telemetry and the processes' own load arrive as they are taken (files only grow)
        (run / "samples.jsonl").write_bytes(_jsonl([x for x in samples() if x["t_ns"] <= now]))
        (run / "events.jsonl").write_bytes(_jsonl([x for x in events() if x["t_ns"] <= now]))
        for w in WORKERS:
            (run / f"client-{w}.jsonl").write_bytes(_jsonl([x for x in client_lines(w) if x["t_ns"] <= now]))
        for w in WORKERS:
            n = sum(1 for e in ends[w] if e <= now)
            upto = len(b"".join(records[w][:n]))
            cut = upto + (7 if n < len(records[w]) else 0)  # and the start of the next line
            _append(run / f"requests-{w}.jsonl", data[w][written[w] : cut])
            written[w] = cut
        p = live.payload()
        seen_phases |= {s["phase"] for s in p["steps"]}
        if p["current"] is not None:
            assert p["current"]["step"] == max(x["step"] for x in lines if x["t_ns"] <= now)
    for w in WORKERS:
        _append(run / f"requests-{w}.jsonl", data[w][written[w] :])
    (run / "samples.jsonl").write_bytes(_jsonl(samples()))
    assert seen_phases == {"warm-up", "steady", "ended"}
    clock["now"] = T0 + 20 * S
    p = live.payload()
    _, summary = summarise(run)
    assert_same_as_report(p["steps"], summary["steps"])
    # no step was left counting twice or missing: whole-step counts are every record of the step
    total = sum(len(r) for r in records.values())
    assert sum(s["ok"] + s["failed"] for s in p["steps"]) == total == summary["totals"]["records"]


def test_a_long_run_forgets_settled_steps_and_reads_them_back_when_needed(tmp_path: Path) -> None:
    """Samples and request columns that only long-ended steps read are dropped from memory; a late
    record of such a step makes its row be computed again from the files, still the report's row."""
    run = tmp_path / "run"
    write_run(run)
    clock = {"now": T0 + 3 * STEP_S * S + 5 * S}
    live = LiveRun(run, now_ns=lambda: clock["now"], prefer_report=False)
    before = live.payload()["steps"]
    clock["now"] += 200 * S  # every step ended more than SETTLE_NS ago
    assert live.payload()["steps"] == before
    assert live.telemetry.samples == [] and all(b.req is None for b in live.records.blocks)
    late_sent = T0 + STEP_S * S + 2 * S
    late = RequestRecord(
        id="late", worker="w0", step=1, intended_ns=late_sent, sent_ns=late_sent, first_chunk_ns=late_sent + 50 * MS,
        end_ns=late_sent + 7 * S, chunk_offsets_ns=[50 * MS, 7 * S - MS], chunk_tokens=[1, 1], output_tokens=2,
        tokens_source="usage", chunk_clock="kernel",
    )  # fmt: skip
    _append(run / "requests-w0.jsonl", late.to_json())
    after = live.payload()["steps"]
    _, summary = summarise(run)
    assert after[1]["requests_ok"] == before[1]["requests_ok"] + 1
    assert_same_as_report(after, summary["steps"])  # telemetry of step 1 read back from samples.jsonl


def test_a_step_in_warm_up_has_no_window_figures_yet(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_run(run)
    lines = [x for x in step_lines() if x["step"] < 2 or x["event"] == "start"]
    (run / "steps.jsonl").write_bytes(_jsonl(lines))
    p = LiveRun(run, now_ns=lambda: T0 + (2 * STEP_S * S) + S // 2, prefer_report=False).payload()
    cur = p["current"]
    assert cur["step"] == 2 and cur["phase"] == "warm-up"
    assert cur["tok_s"] is None and cur["window_s"] is None and cur["ok"] > 0
    # Locust's table does not judge a step still warming up (it said INVALID where the page said warm-up)
    assert table_rows(p)[-1]["valid"] == "warm-up"


def test_telemetry_series_errors_logs_and_workers(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_run(run)
    p = LiveRun(run, now_ns=after_end()).payload()
    # power: one point a second per GPU (the last reading of that second), the total, the limits
    assert sorted(p["power"]) == ["gpu0", "gpu1"]
    assert p["power"]["gpu0"][:3] == [[0.0, 303.0], [1.0, 307.0], [2.0, 311.0]]
    assert p["power"]["gpu1"][0] == [0.0, 403.0]
    assert p["power_total"][0] == [0.0, 303.0 + 403.0]
    assert p["power_limit_w"] == {"gpu0": 700.0, "gpu1": 700.0} and p["power_limit_total_w"] == 1400.0
    # server metrics: KV fill (0-1), queue, running, retractions since the first sample
    assert p["server_samples"] is True
    assert p["kv"][:2] == [[0.0, round(2 / 48, 4)], [1.0, round(6 / 48, 4)]]
    assert p["queue"][-1] == [12.0, 12.0] and p["running"][-1] == [12.0, 48.0]
    assert p["preemptions"][0] == [0.0, 0.0] and p["preemptions"][-1] == [12.0, 6.0]
    # errors by class, up to three distinct messages each
    assert set(p["errors"]) == {"http_5xx", "stall"}
    for msgs in p["error_samples"].values():
        assert 1 <= len(msgs) <= 3 and len(set(msgs)) == len(msgs)
    assert all(m.startswith("stall number") for m in p["error_samples"]["stall"])
    # server log matches as they came, telemetry's own events left out
    assert [(e["pattern"], e["t_s"]) for e in p["logs"]] == [("sglang_kv_full", 9.0), ("cuda_oom", 10.0)]
    assert p["logs"][1]["severity"] == "error" and "out of memory" in p["logs"][1]["line"]
    assert p["log_counts"] == {"sglang_kv_full": 1, "cuda_oom": 1}
    # each worker's CPU and loop lag, and the requests it recorded
    assert sorted(p["workers"]) == ["w0", "w1"]
    w0, w1 = p["workers"]["w0"], p["workers"]["w1"]
    assert w0["cpu_frac"] == 0.2 and w1["cpu_frac"] == 0.6 and w1["lag_max_ms"] == 35.0
    assert w1["lag_ms"][0] == [0.0, 0.5] and w1["lag_ms"][-1][1] == 35.0
    assert len(w0["cpu"]) == 12
    assert w0["requests_ok"] + w0["requests_failed"] + w1["requests_ok"] + w1["requests_failed"] == sum(
        s["ok"] + s["failed"] for s in p["steps"]
    )


def test_a_process_without_a_client_file_is_listed_by_its_records(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_run(run)
    (run / "client-w1.jsonl").unlink()
    w1 = LiveRun(run, now_ns=after_end()).payload()["workers"]["w1"]
    assert w1["cpu"] == [] and w1["cpu_frac"] is None and w1["requests_ok"] > 0


def test_payload_keys_match_the_empty_payload(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_run(run)
    for prefer_report in (True, False):
        p = LiveRun(run, now_ns=after_end(), prefer_report=prefer_report).payload()
        assert set(p) == set(empty_payload())
        assert orjson.loads(orjson.dumps(p)) == p  # plain JSON: no numpy scalars, no tuples
    assert LiveSource(lambda: None).payload() == empty_payload()


def test_table_rows_show_marks_and_the_reports_rounding(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_run(run)
    p = LiveRun(run, now_ns=after_end(), prefer_report=False).payload()
    rows = table_rows(p)
    assert {k for k, _ in TABLE} <= set(rows[0])
    assert dict(TABLE)["req_tok_s"] == "Per-request tok/s"  # tab.js finds the table by this title
    assert [r["valid"] for r in rows] == ["INVALID", "VALID", "INVALID"]
    assert [r["timing"] for r in rows] == ["", "", "uncertain"]
    assert rows[0]["reasons"] == "too few requests (3 < 5)"
    assert rows[2]["reasons"].startswith("load generator bound") and "; timing uncertain: " in rows[2]["reasons"]
    _, summary = summarise(run)
    for row, s in zip(rows, summary["steps"], strict=True):
        # the same text the report's step table prints
        assert row["tok_s"] == _num(s["output_tok_s"])
        assert row["ttft_p50"] == _ms(s["ttft_ms"]["p50"]) and row["tpot_p99"] == _ms(s["tpot_ms"]["p99"])
    for v in (0.0, 3.14159, 9.999, 12.345, 1234.5678):
        assert fmt_ms(v) == _ms(v) and fmt_num(v) == _num(v)
    assert fmt_num(None) == fmt_ms(None) == ""


def test_live_step_reads_older_or_hand_edited_rows() -> None:
    row: Any = {"step": 3, "output_tok_s": "n/a", "ttft_ms": 12.5, "timing": None, "valid": False}
    s = live_step(row, "ended", 1, 0, None)
    assert s["tok_s"] is None and s["ttft_p50"] is None and s["valid"] is False and not s["timing_uncertain"]


def test_live_source_serves_one_payload_to_both_pollers(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_run(run)
    src = LiveSource(lambda: run, reuse_s=60)
    first = src.payload()
    assert src.payload() is first  # /stats/requests and live.json within reuse_s: computed once
    other = tmp_path / "other"
    shutil.copytree(run, other)
    src2 = LiveSource(lambda: other, reuse_s=0)
    assert src2.payload()["run_id"] == "other"


@pytest.mark.slow
def test_a_poll_reads_only_what_was_appended(tmp_path: Path) -> None:
    """10k records over 20 steps (and 8 GPUs' telemetry at 10 Hz): the first read parses them once;
    a poll after more records arrived counts exactly them in (the time each takes is printed, not
    held: speed is the benchmarks' business)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_bytes(orjson.dumps({"kind": "ramp", "run_id": "big"}))
    rnd = random.Random(1)
    n_steps, per_step, step_s = 20, 500, 30
    lines: list[dict[str, Any]] = []
    recs: dict[str, list[bytes]] = {"w0": [], "w1": []}
    for step in range(n_steps):
        start = T0 + step * step_s * S
        lines += [
            {"step": step, "event": "start", "t_ns": start, "concurrency": 8 * (step + 1)},
            {"step": step, "event": "steady", "t_ns": start + 5 * S},
            {"step": step, "event": "end", "t_ns": start + step_s * S, "reason": "duration"},
        ]
        for k in range(per_step):
            sent = start + k * (step_s * S // per_step)
            offsets = [50 * MS + j * 8 * MS for j in range(rnd.randint(20, 120))]
            rec = RequestRecord(
                id=f"{step}-{k}", worker=f"w{k % 2}", step=step, intended_ns=sent, sent_ns=sent,
                first_chunk_ns=sent + offsets[0], end_ns=sent + offsets[-1], chunk_offsets_ns=offsets,
                chunk_tokens=[1] * len(offsets), output_tokens=len(offsets), tokens_source="usage",
            )  # fmt: skip
            recs[f"w{k % 2}"].append(rec.to_json())
    # telemetry: 8 GPUs at 10 Hz and the server's metrics at 2 Hz over the whole run
    tel: list[dict[str, Any]] = []
    for q in range(n_steps * step_s * 10):
        t_ns = T0 + q * S // 10
        tel += [{"t_ns": t_ns, "src": "gpu", "gpu": g, "power_w": 400.0, "power_limit_w": 700.0} for g in range(8)]
        if q % 5 == 0:
            tel.append({"t_ns": t_ns, "src": "server", "kv_usage": 0.5, "queued": 2, "preemptions_total": q // 100})
    (run / "samples.jsonl").write_bytes(_jsonl(tel))
    last_step = lines[-3:]
    (run / "steps.jsonl").write_bytes(_jsonl(lines[:-1]))
    tail = {w: r[-40:] for w, r in recs.items()}
    for w, r in recs.items():
        (run / f"requests-{w}.jsonl").write_bytes(b"".join(r[:-40]))
    now = int(last_step[0]["t_ns"]) + 29 * S
    live = LiveRun(run, now_ns=lambda: now, prefer_report=False, knee=lambda d: None)
    t = time.perf_counter()
    live.payload()
    first_s = time.perf_counter() - t
    for w in recs:
        _append(run / f"requests-{w}.jsonl", b"".join(tail[w]))
    t = time.perf_counter()
    p = live.payload()
    poll_s = time.perf_counter() - t
    assert len(p["steps"]) == n_steps and sum(s["ok"] for s in p["steps"]) == n_steps * per_step
    print(f"first read {first_s:.2f} s, a poll {poll_s * 1000:.0f} ms")
