"""The Prometheus exporter and the live view read a run directory as it grows; numbers are checked
against records written here with known timings."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest

from loadgen.rundir.records import RequestRecord
from loadgen.webui.live import LiveRun
from loadgen.webui.promexport import CONTENT_TYPE, LoadgenMetrics, start_exporter

MS = 1_000_000
T0 = 1_700_000_000_000_000_000


def rec(
    i: int, step: int, sent_ms: int, ttft_ms: int, gaps_ms: list[int], tokens: int, error: str | None = None
) -> bytes:
    offsets = [ttft_ms * MS]
    for g in gaps_ms:
        offsets.append(offsets[-1] + g * MS)
    sent = T0 + sent_ms * MS
    r = RequestRecord(
        id=f"r{i}",
        worker="w0",
        step=step,
        intended_ns=sent,
        sent_ns=sent,
        first_chunk_ns=None if error else sent + offsets[0],
        end_ns=sent + offsets[-1] + 1 * MS,
        chunk_offsets_ns=[] if error else offsets,
        output_tokens=None if error else tokens,
        error_class=error,
    )
    return r.to_json()


def write_run(d: Path) -> None:
    steps = [
        {"step": 0, "event": "start", "t_ns": T0, "concurrency": 2},
        {"step": 0, "event": "steady", "t_ns": T0 + 1000 * MS},
        {"step": 0, "event": "end", "t_ns": T0 + 3000 * MS, "reason": "duration"},
        {"step": 1, "event": "start", "t_ns": T0 + 3000 * MS, "concurrency": 8},
    ]
    (d / "steps.jsonl").write_bytes(b"".join(orjson.dumps(s) + b"\n" for s in steps))
    lines = [
        rec(0, 0, 500, 30, [10, 10], 3),  # warm-up: counted, not in the window
        rec(1, 0, 1000, 40, [10, 20, 30], 4),
        rec(2, 0, 2000, 200, [5], 2),
        rec(3, 0, 2500, 0, [], 0, error="timeout"),
    ]
    (d / "requests-w0.jsonl").write_bytes(b"".join(lines))


def samples(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_counters_histograms_and_gauges_from_the_records(tmp_path: Path) -> None:
    write_run(tmp_path)
    m = LoadgenMetrics(lambda: tmp_path, users=lambda: 8, in_flight=lambda: 5)
    text = m.render()
    s = samples(text)
    assert s["loadgen_requests_ok_total"] == 3
    assert s['loadgen_requests_failed_total{error_class="timeout"}'] == 1
    assert s["loadgen_output_tokens_total"] == 3 + 4 + 2
    # TTFT 30, 40, 200 ms: two at or under 50 ms, all three at or under 250 ms
    assert s['loadgen_ttft_seconds_bucket{le="0.025"}'] == 0
    assert s['loadgen_ttft_seconds_bucket{le="0.05"}'] == 2
    assert s['loadgen_ttft_seconds_bucket{le="0.1"}'] == 2
    assert s['loadgen_ttft_seconds_bucket{le="0.25"}'] == 3
    assert s['loadgen_ttft_seconds_bucket{le="+Inf"}'] == s["loadgen_ttft_seconds_count"] == 3
    assert s["loadgen_ttft_seconds_sum"] == pytest.approx(0.27)
    # every chunk gap: 10, 10 | 10, 20, 30 | 5 ms
    assert s["loadgen_itl_seconds_count"] == 6
    assert s['loadgen_itl_seconds_bucket{le="0.005"}'] == 1
    assert s['loadgen_itl_seconds_bucket{le="0.01"}'] == 4
    assert s['loadgen_itl_seconds_bucket{le="0.02"}'] == 5
    assert s["loadgen_itl_seconds_sum"] == pytest.approx(0.085)
    assert s["loadgen_step"] == 1 and s["loadgen_step_concurrency"] == 8
    assert s["loadgen_users"] == 8 and s["loadgen_in_flight"] == 5
    assert s[f'loadgen_run_info{{run_id="{tmp_path.name}"}}'] == 1
    # each family: HELP then TYPE, before its samples, once
    families = re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M)
    assert len(families) == len({f for f, _ in families})
    for fam, kind in families:
        assert kind in ("counter", "gauge", "histogram")
        assert (kind == "counter") == fam.endswith("_total")
        help_at = text.index(f"# HELP {fam} ")
        type_at = text.index(f"# TYPE {fam} ")
        assert help_at < type_at
        first_sample = re.search(rf"^{fam}(_bucket|_sum|_count)?[ {{]", text, re.M)
        if first_sample:
            assert first_sample.start() > type_at


def test_only_new_complete_lines_are_read(tmp_path: Path) -> None:
    write_run(tmp_path)
    m = LoadgenMetrics(lambda: tmp_path)
    m.update()
    assert m.ok == 3
    line = rec(9, 1, 4000, 50, [10], 7)
    with (tmp_path / "requests-w0.jsonl").open("ab") as f:
        f.write(line[:20])  # a writer caught mid-line
    m.update()
    assert m.ok == 3 and m.tokens == 9
    with (tmp_path / "requests-w0.jsonl").open("ab") as f:
        f.write(line[20:])
    (tmp_path / "requests-w1.jsonl").write_bytes(rec(10, 1, 4100, 60, [10], 5))  # a worker's file appears
    m.update()
    assert m.ok == 5 and m.tokens == 9 + 7 + 5
    m.update()
    assert m.ok == 5  # nothing counted twice


def test_exporter_serves_text_format_over_http(tmp_path: Path) -> None:
    write_run(tmp_path)
    stop = start_exporter(SimpleNamespace(run_dir=tmp_path), 0, host="127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{stop.port}/metrics", timeout=5) as resp:
            assert resp.headers["Content-Type"] == CONTENT_TYPE
            body = resp.read().decode()
        assert samples(body)["loadgen_requests_ok_total"] == 3
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{stop.port}/other", timeout=5)
        assert err.value.code == 404
    finally:
        stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{stop.port}/metrics", timeout=2)


def test_live_view_splits_warmup_from_the_steady_window(tmp_path: Path) -> None:
    write_run(tmp_path)
    live = LiveRun(tmp_path, now_ns=lambda: T0 + 4000 * MS, knee=lambda d: {"concurrency": None, "reason": "test"})
    p = live.payload()
    s0, s1 = p["steps"]
    assert (s0["phase"], s1["phase"]) == ("ended", "warm-up")
    assert s0["ok"] == 3 and s0["failed"] == 1 and s0["errors"] == {"timeout": 1}
    # window: steady (1 s) to end (3 s): requests 1 and 2 (and the failed one), 6 tokens over 2 s
    assert s0["window_requests"] == 3
    assert s0["tok_s"] == pytest.approx(3.0)
    assert s0["ttft_p50"] == pytest.approx(120.0)  # median of 40 and 200 ms
    # per-request tok/s as the report defines it, output tokens / E2E: 4 over 101 ms, 2 over 206 ms
    assert s0["req_tok_s"] == pytest.approx((4 / 0.101 + 2 / 0.206) / 2)
    assert p["current"]["step"] == 1 and p["current"]["concurrency"] == 8
    assert p["errors"] == {"timeout": 1}
    assert p["knee"] == {"concurrency": None, "reason": "test"}
    assert p["reports"] == {}


def test_live_view_and_report_agree_on_an_ended_step(tmp_path: Path) -> None:
    """One definition of each figure: the live tab reads what the report will say."""
    from loadgen.analysis.pipeline import summarise

    write_run(tmp_path)
    (tmp_path / "manifest.json").write_bytes(orjson.dumps({"kind": "ramp", "run_id": "t"}))
    live = LiveRun(tmp_path, now_ns=lambda: T0 + 4000 * MS, knee=lambda d: {}).payload()["steps"][0]
    step = summarise(tmp_path)[1]["steps"][0]
    assert live["req_tok_s"] == pytest.approx(step["per_request_tok_s"])
    assert live["ok"] == step["requests_ok"] + 1  # the live count includes the warm-up request
