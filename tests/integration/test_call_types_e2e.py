"""Every kind of call, end to end: `loadgen ramp` (a real process) against `loadgen sim` over HTTP,
checked against the simulator's emission log (issue 15). The simulator and the load side share no
code: they meet only on the wire."""

from __future__ import annotations

import itertools
import json
import statistics
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from loadgen.spec.calls import Inputs, taking
from tests.conftest import emissions_by_request, run_dir_of, run_loadgen, run_records

pytestmark = pytest.mark.slow

FAST = ["--profile", "tiny"]


def _ramp(url: str, out: Path, *extra: str, requests: int = 10) -> Path:
    """One step that ends once ``requests`` requests finished (the work its checks need, at any speed
    of the machine); its 60 s only catch a hang."""
    proc = run_loadgen(
        "ramp",
        "--url",
        url,
        "--concurrency",
        "2",
        "--warmup-seconds",
        "0",
        "--requests-per-step",
        str(requests),
        "--step-seconds",
        "60",
        "--no-telemetry",
        "--out",
        str(out),
        *extra,
    )
    return run_dir_of(proc)


def _check_lags(lags_ms: list[float]) -> None:
    """Arrival times against the server's emission stamps: never before (the clocks are one), most
    within the loopback hop and one read. A few reach further: a simulator descheduled between its
    stamp and its write (50.4 ms was seen in a suite on this 2-core machine); a late client would move
    the median."""
    lags = sorted(lags_ms)
    assert lags and lags[0] > -0.5, lags[:3]
    assert statistics.median(lags) < 5.0, lags
    assert sum(x < 50.0 for x in lags) >= 0.9 * len(lags), lags[-5:]


def _scenario(tmp_path: Path, text: str) -> str:
    p = tmp_path / "scenario.toml"
    p.write_text(text)
    return str(p)


@pytest.mark.exclusive  # alone: event times against the server's
def test_responses_endpoint_streams_events_timed_against_the_emission_log(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory(*FAST)
    run_dir = _ramp(sim.url, tmp_path / "r", "--endpoint", "responses", "--max-tokens", "24")
    recs = [r for r in run_records(run_dir) if r["error_class"] is None]
    assert len(recs) >= 5
    emitted = emissions_by_request(sim.emission_log)
    lags: list[float] = []
    for r in recs:
        assert r["endpoint"] == "responses" and r["stream"] is True
        assert r["server_request_id"].startswith("resp_")
        assert r["tokens_source"] == "usage" and 0 < r["output_tokens"] <= 24
        sent = emitted[r["header_id"]]
        assert sum(e["tokens"] for e in sent) == r["output_tokens"]
        assert len(r["chunk_offsets_ns"]) == len(sent)
        # the first output event arrives after its emission, by the loopback hop and one read
        lags.append((r["first_chunk_ns"] - sent[0]["emit_ns"]) / 1e6)
        assert r["first_answer_ns"] == r["first_chunk_ns"] and r["first_reasoning_ns"] is None
    _check_lags(lags)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"][0]["valid"] and summary["steps"][0]["output_tok_s"] > 0


@pytest.mark.parametrize("endpoint", taking(Inputs.BATCH) + taking(Inputs.QUERY_DOCUMENTS))
def test_pooling_endpoints_record_inputs_and_prompt_tokens(sim_factory: Any, tmp_path: Path, endpoint: str) -> None:
    sim = sim_factory(*FAST)
    run_dir = _ramp(sim.url, tmp_path / endpoint, "--endpoint", endpoint)
    recs = run_records(run_dir)
    ok = [r for r in recs if r["error_class"] is None]
    assert len(ok) >= 5 and len(ok) == len(recs), [r["error"] for r in recs if r["error_class"]][:3]
    for r in ok:
        assert r["endpoint"] == endpoint and r["stream"] is False
        assert r["inputs"] >= 1 and r["prompt_tokens"] > 0
        assert r["first_chunk_ns"] is None and r["output_tokens"] is None
    summary = json.loads((run_dir / "summary.json").read_text())
    step = summary["steps"][0]
    assert step["valid"], step.get("invalid_reason")
    by_call = step["by_call"][endpoint]
    window = [r for r in ok if r["sent_ns"] >= 0]
    assert by_call["requests_ok"] <= len(window) and by_call["inputs_s"] > 0 and by_call["prompt_tok_s"] > 0


AGENT = """
name = "agent-e2e"
endpoint = "{endpoint}"
seed = 7

[prompt]
source = "prose"
input_tokens = 40

[output]
max_tokens = 48

[[tools.function]]
name = "search"
description = "Search the knowledge base"
[tools.function.parameters]
type = "object"
required = ["query"]
properties = {{ query = {{ type = "string" }}, top_k = {{ type = "integer" }} }}

[agent]
max_turns = 5
tool_result_tokens = 120
tool_latency_s = 0.05
"""


@pytest.mark.exclusive  # alone: tool-call times against the server's
@pytest.mark.parametrize("endpoint", ["chat", "responses"])
def test_a_five_step_tool_loop(sim_factory: Any, tmp_path: Path, endpoint: str) -> None:
    sim = sim_factory(*FAST)
    scenario = _scenario(tmp_path, AGENT.format(endpoint=endpoint))
    # one user's first 10 requests: two whole tasks of 5 turns
    run_dir = _ramp(sim.url, tmp_path / "a", "--scenario", scenario, "--concurrency", "1")
    recs = sorted(run_records(run_dir), key=lambda r: r["sent_ns"])
    tasks: dict[str, list[dict[str, Any]]] = {}
    for r in recs:
        assert r["error_class"] is None, r["error"]
        tasks.setdefault(r["conversation"], []).append(r)
    done = [t for t in tasks.values() if len(t) == 5]
    assert done, {k: len(v) for k, v in tasks.items()}
    emitted = emissions_by_request(sim.emission_log)
    lags: list[float] = []
    for task in done:
        assert [r["turn"] for r in task] == [0, 1, 2, 3, 4]
        assert all(r["max_turns"] == 5 for r in task)
        # four tool calls, then the answer (the simulator's default --tool-rounds 4)
        assert [r["tool_calls"] for r in task] == [1, 1, 1, 1, 0]
        assert all(r["tool_args_chars"] > 0 for r in task[:4])
        # the prompt grows by each tool result (120 tokens asked) and the call before it
        served = [r["prompt_tokens"] for r in task]
        # the Responses API chains with previous_response_id: its usage counts the stored turns too
        if endpoint == "chat":
            assert all(b - a >= 100 for a, b in itertools.pairwise(served)), served
        else:
            assert all(b > a for a, b in itertools.pairwise(served)), served
        for r in task[:4]:
            tool_emits = [e for e in emitted[r["header_id"]] if e.get("output_kind") == "tool"]
            lags.append((r["first_tool_ns"] - tool_emits[0]["emit_ns"]) / 1e6)
        assert task[4]["first_tool_ns"] is None and task[4]["first_answer_ns"] is not None
    _check_lags(lags)


VISION = """
name = "vision-e2e"
seed = 3

[prompt]
source = "prose"
input_tokens = 20

[output]
max_tokens = 4

[images]
count = 1
width = {side}
height = {side}
"""


@pytest.mark.exclusive  # alone: TTFT to +-12 ms
def test_image_prefill_cost_grows_with_resolution(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory(*FAST)
    got: dict[int, tuple[float, float]] = {}
    for side in (224, 1344):
        scenario = _scenario(tmp_path, VISION.format(side=side))
        run_dir = _ramp(sim.url, tmp_path / f"v{side}", "--scenario", scenario, "--concurrency", "1", requests=6)
        recs = [r for r in run_records(run_dir) if r["error_class"] is None]
        assert len(recs) >= 3 and all(r["images"] == 1 for r in recs)
        image_tokens = sorted(r["prompt_tokens"] - r["context_tokens"] for r in recs)[len(recs) // 2]
        ttft = sorted(r["first_chunk_ns"] - r["intended_ns"] for r in recs)[len(recs) // 2] / 1e6
        got[side] = (image_tokens, ttft)
    # the simulator's rule (Qwen2-VL, docs/simulator.md): 224 px -> (224/28)^2 + 2 = 66 tokens;
    # 1344 px (1.81 MP) is past the cap of 1,003,520 px, scaled by 0.745 and floored to 28-px
    # patches: 35 x 35 + 2 = 1227. The text's own tokens are an estimate (context_tokens), off by a
    # few tokens either way.
    assert got[224][0] == pytest.approx(66, abs=12), got
    assert got[1344][0] == pytest.approx(1227, abs=12), got
    assert got[1344][1] > got[224][1], got


class _NoResponses(BaseHTTPRequestHandler):
    """A server that lists its endpoints in /openapi.json and has no /v1/responses."""

    def do_GET(self) -> None:
        if self.path == "/openapi.json":
            paths = {"/v1/chat/completions": {"post": {}}, "/v1/completions": {"post": {}}, "/health": {"get": {}}}
            doc = {"paths": paths}
            self._send(200, json.dumps(doc).encode())
        elif self.path in ("/health", "/v1/models"):
            self._send(200, b'{"data":[{"id":"m"}]}')
        else:
            self._send(404, b'{"detail":"Not Found"}')

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._send(404, b'{"detail":"Not Found"}')

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def no_responses_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NoResponses)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_endpoint_the_server_does_not_serve_stops_with_one_line(no_responses_server: str, tmp_path: Path) -> None:
    proc = run_loadgen(
        "ramp",
        "--url",
        no_responses_server,
        "--endpoint",
        "responses",
        "--concurrency",
        "2,4",
        "--step-seconds",
        "20",
        "--warmup-seconds",
        "0",
        "--no-telemetry",
        "--out",
        str(tmp_path / "out"),
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr[-2000:]
    assert "does not serve --endpoint responses: POST /v1/responses answered 404" in errors[0]
    assert "it lists POST /v1/chat/completions, /v1/completions" in errors[0]
    # the records taken stay, and the partial run still has its report
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    assert (run_dir / "report.md").exists()
    assert run_records(run_dir) and all(r["status"] == 404 for r in run_records(run_dir))


REASONING = """
name = "reasoning-e2e"
endpoint = "{endpoint}"
seed = 5

[prompt]
input_tokens = 30

[output]
max_tokens = 40
ignore_eos = true

[reasoning]
effort = "medium"
"""


@pytest.mark.exclusive  # alone: event times against the server's (55 ms seen beside a compile)
@pytest.mark.parametrize("endpoint", ["chat", "responses"])
def test_reasoning_and_answer_times_apart(sim_factory: Any, tmp_path: Path, endpoint: str) -> None:
    sim = sim_factory(*FAST)
    scenario = _scenario(tmp_path, REASONING.format(endpoint=endpoint))
    run_dir = _ramp(sim.url, tmp_path / "r", "--scenario", scenario, requests=6)
    recs = [r for r in run_records(run_dir) if r["error_class"] is None]
    assert len(recs) >= 4
    emitted = emissions_by_request(sim.emission_log)
    lags: dict[str, list[float]] = {"reasoning": [], "text": []}
    for r in recs:
        # medium effort: half of max_tokens is reasoning (the simulator's rule), the rest the answer
        assert r["output_tokens"] == 40 and r["reasoning_tokens"] == 20
        assert r["first_chunk_ns"] == r["first_reasoning_ns"] < r["first_answer_ns"]
        for kind, field in (("reasoning", "first_reasoning_ns"), ("text", "first_answer_ns")):
            first = next(e for e in emitted[r["header_id"]] if e.get("output_kind") == kind)
            lags[kind].append((r[field] - first["emit_ns"]) / 1e6)
    for kind_lags in lags.values():
        _check_lags(kind_lags)
    step = json.loads((run_dir / "summary.json").read_text())["steps"][0]
    assert step["ttft_reasoning_ms"]["p50"] < step["ttft_answer_ms"]["p50"]
