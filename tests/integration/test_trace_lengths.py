"""A trace replay's prompts are served at the trace's lengths.

Without a tokenizer: ``loadgen ramp`` replays a slice of the Azure conversation trace against the
simulator over HTTP, and the prompt tokens the simulator served (its ``usage.prompt_tokens``) land on
the trace's ContextTokens once the first responses have taught the prompt builder how the server
counts. The simulator can be given no tokenizer (it counts ``ceil(characters / chars_per_token)``
plus 4 per message), so the tokenizer path is replayed against a small OpenAI-compatible server in
this file that counts with the tokenizer the scenario names, trained here from the built-in corpora.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadgen.workload.datasets import load_trace
from tests.conftest import REPO, run_dir_of, run_loadgen, run_records

pytestmark = pytest.mark.slow

TRACE = REPO.parent / "shared" / "data" / "traces" / "azure-llm-2023-conv.csv"
# The trace's first 90 s (332 rows), replayed 20x faster: 4.5 s.
TRACE_SECONDS = 90.0
TIME_SCALE = 0.05
WARMUP_REQUESTS = 20  # sent before the first responses could have come back

needs_trace = pytest.mark.skipif(not TRACE.exists(), reason=f"no trace at {TRACE}")


def _scenario(tmp_path: Path, tokenizer: Path | None = None) -> Path:
    path = tmp_path / "replay.toml"
    head = f'tokenizer = "{tokenizer}"\n' if tokenizer else ""
    path.write_text(
        head
        + f"""
name = "azure replay lengths"
seed = 5
context_limit = 32768
[prompt]
source = "trace"
[trace]
path = "{TRACE}"
format = "azure"
[output]
max_tokens = 2
from_dataset = false
[load]
mode = "open"
arrival = "trace"
time_scales = [{TIME_SCALE}]
step_seconds = {TRACE_SECONDS * TIME_SCALE}
warmup_seconds = 0
"""
    )
    return path


def _replay(url: str, scenario: Path, out: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Requested, served and trace lengths of the replay's successful requests, in send order."""
    proc = run_loadgen("ramp", "--url", url, "--scenario", str(scenario), "--no-telemetry", "--out", str(out))
    recs = sorted(run_records(run_dir_of(proc)), key=lambda r: r["intended_ns"])
    rows = load_trace(TRACE, "azure").rows
    # every row of the span, however late a busy machine sent them (the last test here)
    assert len(recs) == sum(1 for row in rows if row.offset_s < TRACE_SECONDS), len(recs)
    assert all(r["error_class"] is None for r in recs), {r["error_class"] for r in recs}
    trace_tokens = np.array([row.input_tokens for row in rows[: len(recs)]], dtype=float)
    requested = np.array([r["context_tokens"] for r in recs], dtype=float)
    served = np.array([r["prompt_tokens"] for r in recs], dtype=float)
    return requested, served, trace_tokens


def _errors(served: np.ndarray, wanted: np.ndarray) -> tuple[float, float, float]:
    rel = served / wanted - 1.0
    p10, p50, p90 = np.percentile(rel, [10, 50, 90])
    return float(p10), float(p50), float(p90)


@needs_trace
@pytest.mark.parametrize("chars_per_token", ["4.0", "3.1"])
def test_replay_without_tokenizer_serves_the_traces_lengths(
    sim_factory: Any, tmp_path: Path, chars_per_token: str
) -> None:
    # 4.0 is the simulator's default count; 3.1 stands for a server whose tokenizer splits finer
    sim = sim_factory("--profile", "tiny", "--set", f"server.chars_per_token={chars_per_token}")
    requested, served, trace_tokens = _replay(sim.url, _scenario(tmp_path), tmp_path / "runs")
    # what the record calls requested is the trace's length, not the corrected size of the text
    assert np.array_equal(requested, trace_tokens)
    p10, p50, p90 = _errors(served[WARMUP_REQUESTS:], trace_tokens[WARMUP_REQUESTS:])
    assert abs(p50) <= 0.02, (p10, p50, p90)
    assert abs(p10) <= 0.05 and abs(p90) <= 0.05, (p10, p50, p90)


class _TokenizerServer(ThreadingHTTPServer):
    daemon_threads = True
    # a replayed burst opens many connections at once: the default backlog of 5 drops SYNs, and a
    # dropped SYN is retried a second later (a connect timeout on a busy machine)
    request_queue_size = 256

    def __init__(self, tokenizer_file: Path) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(tokenizer_file))
        super().__init__(("127.0.0.1", 0), _TokenizerHandler)


class _TokenizerHandler(BaseHTTPRequestHandler):
    """/v1/chat/completions that streams one word and counts prompt tokens with a real tokenizer."""

    protocol_version = "HTTP/1.1"
    server: _TokenizerServer

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text = "".join(str(m.get("content", "")) for m in body["messages"])
        prompt_tokens = len(self.server.tokenizer.encode(text, add_special_tokens=False).ids)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 1, "total_tokens": prompt_tokens + 1}
        chunks = [
            {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": " ok"}}]},
            {
                "id": "x",
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
            },
            {"id": "x", "object": "chat.completion.chunk", "choices": [], "usage": usage},
        ]
        payload = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:  # /v1/models, for the model name
        payload = json.dumps({"object": "list", "data": [{"id": "tokenizer-test", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def tokenizer_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    pytest.importorskip("tokenizers")
    from tests.unit.test_prompt_lengths import train_tokenizer

    file = train_tokenizer(tmp_path / "tok")
    server = _TokenizerServer(file)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", file
    finally:
        server.shutdown()
        server.server_close()


@needs_trace
def test_replay_with_the_servers_tokenizer_serves_the_traces_lengths_exactly(
    tokenizer_server: tuple[str, Path], tmp_path: Path
) -> None:
    url, file = tokenizer_server
    requested, served, trace_tokens = _replay(url, _scenario(tmp_path, file), tmp_path / "runs")
    assert np.array_equal(requested, trace_tokens)
    # every prompt, the first ones too: nothing to learn when the counts agree
    assert np.array_equal(served, trace_tokens), np.flatnonzero(served != trace_tokens)[:10]


@needs_trace
def test_a_replay_whose_load_generator_stalls_sends_the_whole_span_late_and_says_so(
    sim_factory: Any, tmp_path: Path
) -> None:
    """A load generator that falls behind the trace (here stopped for 3 s, a starved or paused host)
    sends the trace's tail late instead of ending the step at its duration without it."""
    import signal
    import subprocess
    import time

    from tests.conftest import loadgen_cmd

    sim = sim_factory("--profile", "tiny")
    scale, span_s = 0.02, 90.0  # the first 90 s of the trace in 1.8 s
    scenario = _scenario(tmp_path)
    scenario.write_text(
        scenario.read_text()
        .replace(f"time_scales = [{TIME_SCALE}]", f"time_scales = [{scale}]")
        .replace(f"step_seconds = {TRACE_SECONDS * TIME_SCALE}", f"step_seconds = {span_s * scale}")
    )
    out = tmp_path / "runs"
    args = ["ramp", "--url", sim.url, "--scenario", str(scenario), "--no-telemetry", "--out", str(out)]
    proc = subprocess.Popen(loadgen_cmd(*args), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not list(out.glob("*/requests-w0.jsonl")) or not next(out.glob("*/requests-w0.jsonl")).stat().st_size:
            assert proc.poll() is None and time.monotonic() < deadline, "the replay never sent"
            time.sleep(0.02)
        proc.send_signal(signal.SIGSTOP)
        time.sleep(3.0)  # past the step's duration and the tick after it
        proc.send_signal(signal.SIGCONT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr[-3000:]
    run_dir = Path(stdout.strip().splitlines()[-1])
    recs = run_records(run_dir)
    rows = [row for row in load_trace(TRACE, "azure").rows if row.offset_s < span_s]
    assert len(recs) == len(rows) and all(r["error_class"] is None for r in recs)
    assert sorted(r["context_tokens"] for r in recs) == sorted(row.input_tokens for row in rows)
    # the step ran past its duration to send them, and its schedule lag says how late they went
    (step,) = json.loads((run_dir / "summary.json").read_text())["steps"]
    assert step["window_s"] > span_s * scale + 2.0
    assert step["schedule_lag_ms"]["max"] > 2_000
