"""A malicious server (issue 18): the client's memory per request stays bounded, every call ends with
a clear error class, nothing is sent off the target host, and a ramp against it completes.

The server (``hostile_server.py``) is its own process on 127.0.0.1; the transport runs here, so its
allocations during one call are measured with ``tracemalloc`` (peak of the Python heap, which holds
every buffer the transport and decoders make). The bounds are ``loadgen.load.client``'s
``MAX_HEAD_BYTES`` (64 KiB), ``MAX_EVENT_BYTES`` (8 MiB), ``MAX_BODY_BYTES`` (128 MiB) and
``MAX_STREAM_EVENTS``; usage counts over ``MAX_PLAUSIBLE_TOKENS`` are refused.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.load.client import (
    MAX_BODY_BYTES,
    MAX_EVENT_BYTES,
    MAX_HEAD_BYTES,
    MAX_STREAM_EVENTS,
    CallResult,
    FastTransport,
)
from loadgen.spec.options import Timeouts
from tests.conftest import REPO, run_dir_of, run_loadgen, run_records
from tests.integration.hostile_server import TINY_CHUNKS, TINY_EVENTS

MiB = 1 << 20


class Hostile:
    def __init__(self, tmp: Path, kinds: str | None = None) -> None:
        self.port_file = tmp / "hostile.port"
        cmd = [sys.executable, str(REPO / "tests/integration/hostile_server.py"), "--port-file", str(self.port_file)]
        if kinds:
            cmd += ["--kinds", kinds]
        self.proc = subprocess.Popen(cmd, cwd=REPO)
        deadline = time.monotonic() + 20
        while not (self.port_file.exists() and self.port_file.read_text().endswith("\n")):
            assert self.proc.poll() is None and time.monotonic() < deadline, "the hostile server did not start"
            time.sleep(0.02)
        port, trap = self.port_file.read_text().split()
        self.url = f"http://127.0.0.1:{port}"
        self.trap_port = int(trap)

    def trap_connections(self) -> int:
        trap = Path(str(self.port_file) + ".trap")
        return len(trap.read_text().splitlines()) if trap.exists() else 0

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    server = Hostile(tmp_path_factory.mktemp("hostile"))
    yield server
    server.stop()


def _call(url: str, kind: str, stream: bool = True, request_s: float = 30.0) -> tuple[CallResult, int, float]:
    """One call with ``X-Hostile: kind``; returns the result, the peak Python heap growth during it
    (bytes) and its wall time (s)."""
    t = FastTransport(url, Timeouts(connect_s=5, stall_s=5, request_s=request_s))
    try:
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        t0 = time.monotonic()
        res = t.call(
            "/v1/chat/completions", b'{"stream":true}', {"Content-Type": "application/json", "X-Hostile": kind}, stream
        )
        took = time.monotonic() - t0
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
        t.close()
    return res, peak, took


def test_endless_headers_stop_at_64_kib(hostile: Hostile) -> None:
    res, peak, took = _call(hostile.url, "endless_headers")
    assert res.error_class == "response_too_large", res.error
    assert res.error is not None and "headers over 64 KiB" in res.error
    assert peak < 4 * MAX_HEAD_BYTES + MiB and took < 5


_PEAK_RSS_CALL = """
import json, os, sys, time
import gevent
from loadgen.load.client import FastTransport
from loadgen.spec.options import Timeouts
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * page
peak = [rss()]
def sample():
    while True:
        peak.append(rss())
        gevent.sleep(0.005)
t = FastTransport(sys.argv[1], Timeouts(connect_s=5, stall_s=5, request_s=30))
base = rss()
g = gevent.spawn(sample)
t0 = time.monotonic()
res = t.call("/v1/chat/completions", b"{}", {"X-Hostile": sys.argv[2]}, True)
took = time.monotonic() - t0
g.kill()
grew = max(peak + [rss()]) - base
n = res.stream.n_payloads if res.stream else 0
out = {"cls": res.error_class, "error": res.error, "n": n, "took": took, "grew": grew, "samples": len(peak)}
print(json.dumps(out))
"""


def test_a_10_gb_chunk_is_never_allocated_and_the_stream_stops_at_its_event_bound(hostile: Hostile) -> None:
    # half a million events: tracemalloc would slow this call 5x, so the peak is the resident size
    # of a fresh process, sampled every 5 ms during the call (the reader yields every 1 MiB)
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK_RSS_CALL, hostile.url, "huge_chunk"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["cls"] == "response_too_large", out
    assert f"bound: {MAX_STREAM_EVENTS} per response" in out["error"]
    assert out["n"] >= MAX_STREAM_EVENTS
    assert out["samples"] > 10 and out["grew"] < 64 * MiB and out["took"] < 20, out


def test_a_line_that_never_ends_stops_at_8_mib(hostile: Hostile) -> None:
    res, peak, took = _call(hostile.url, "endless_line")
    assert res.error_class == "response_too_large", res.error
    assert res.error is not None and "without completing an SSE event (bound: 8 MiB" in res.error
    assert peak < 2 * MAX_EVENT_BYTES + 4 * MiB, peak / MiB
    assert took < 10


def test_a_body_announced_as_10_gb_stops_at_128_mib(hostile: Hostile) -> None:
    res, peak, took = _call(hostile.url, "huge_body", stream=False)
    assert res.error_class == "response_too_large", res.error
    assert res.error is not None and "body over 128 MiB" in res.error
    assert peak < MAX_BODY_BYTES + 16 * MiB, peak / MiB  # never the announced 10 GB
    assert took < 20


def test_many_tiny_chunks_decode_correctly_in_bounded_time_and_memory(hostile: Hostile) -> None:
    res, peak, took = _call(hostile.url, "tiny_chunks")
    assert TINY_CHUNKS > 100_000
    assert res.error_class is None, res.error
    assert res.stream is not None and len(res.stream.chunk_times_ns) == TINY_EVENTS
    assert res.stream.completion_tokens == TINY_EVENTS
    assert peak < 16 * MiB and took < 20


def test_invalid_utf8_deep_json_and_absurd_usage_are_malformed_not_crashes(hostile: Hostile) -> None:
    res, _, _ = _call(hostile.url, "bad_utf8")
    assert res.error_class is None and res.stream is not None  # the transport's part; the class is the record's
    assert res.stream.error_class() == "malformed_stream" and res.stream.malformed == 2
    assert res.stream.text == " fine"
    res, _, _ = _call(hostile.url, "deep_json")
    assert res.stream is not None and res.stream.error_class() == "malformed_stream"
    res, _, _ = _call(hostile.url, "usage_huge")
    s = res.stream
    assert s is not None and s.error_class() == "malformed_stream"
    assert s.completion_tokens is None and s.prompt_tokens is None  # not taken
    assert s.first_malformed is not None and "usage.prompt_tokens = 1000000000000" in s.first_malformed
    assert s.token_split()[1:] == (3, "chunks")


@pytest.mark.parametrize("code", [301, 302, 307])
def test_redirects_are_an_http_error_and_never_followed(hostile: Hostile, code: int) -> None:
    res, _, _ = _call(hostile.url, f"redirect{code}")
    assert res.status == code and res.error_class == "http_3xx"
    assert res.error is not None and "not followed" in res.error and str(hostile.trap_port) in res.error
    assert hostile.trap_connections() == 0


@pytest.mark.slow
def test_a_ramp_against_the_hostile_server_completes_with_records_and_a_report(tmp_path: Path) -> None:
    kinds = "ok,endless_headers,huge_chunk,endless_line,tiny_chunks,bad_utf8,usage_huge,deep_json,redirect302"
    server = Hostile(tmp_path, kinds)
    try:
        proc = run_loadgen(
            "ramp",
            "--url",
            server.url,
            "--model",
            "hostile",
            "--concurrency",
            "2",
            # ends once 18 requests finished: each of the 9 behaviours twice, however long their
            # limits take to trip on this machine; the 60 s only catch a hang
            "--requests-per-step",
            "18",
            "--step-seconds",
            "60",
            "--warmup-seconds",
            "0",
            "--max-tokens",
            "8",
            "--drain-seconds",
            "10",
            "--no-telemetry",
            "--out",
            str(tmp_path / "out"),
            timeout=120,
        )
    finally:
        server.stop()
    run_dir = run_dir_of(proc)
    records = run_records(run_dir)
    classes = Counter(r["error_class"] for r in records)
    assert {None, "response_too_large", "malformed_stream", "http_3xx"} <= set(classes), classes
    assert server.trap_connections() == 0
    huge = [
        r for r in records if "usage.completion_tokens" in (r["error"] or "") or "usage.prompt" in (r["error"] or "")
    ]
    assert huge and all(r["output_tokens"] == 3 and r["error_class"] == "malformed_stream" for r in huge)
    summary = json.loads((run_dir / "summary.json").read_text())
    (step,) = summary["steps"]
    numbers = [v for v in step.values() if isinstance(v, float)]
    assert numbers and all(math.isfinite(v) for v in numbers)
    assert step["requests_ok"] > 0 and (run_dir / "report.md").exists()
    # aggregate tokens: the ok requests' 3 each and tiny_chunks' 2000, never the claimed 10^12
    assert all(r["output_tokens"] is None or r["output_tokens"] < 10**6 for r in records)
