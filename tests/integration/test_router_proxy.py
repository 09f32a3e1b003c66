"""``loadgen router`` in front of real ``loadgen sim`` processes on loopback (issue 32): a ramp through
it as through one server, streams and whole answers passed through, each policy's choice seen in the
backends' own counters, a backend that dies taken out of the rotation, bad flags refused."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from loadgen.analysis.load import load_run
from loadgen.analysis.steps import step_rows
from tests.conftest import REPO, loadgen_cmd, run_loadgen

pytestmark = pytest.mark.slow


class RouterProc:
    def __init__(self, *backends: str, policy: str, extra: tuple[str, ...] = ()) -> None:
        argv = loadgen_cmd("router", "--port", "0", "--policy", policy, "--health-s", "0.2", *extra)
        for b in backends:
            argv += ["--backend", b]
        self.proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        m = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
        assert m, line + (self.proc.stderr.read() if self.proc.stderr else "")
        self.url = m.group(1)

    def stats(self) -> dict[str, Any]:
        return _get_json(self.url + "/router/stats")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        data: dict[str, Any] = json.loads(resp.read())
    return data


def _post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read(), {k.lower(): v for k, v in resp.headers.items()}
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), {}


def _counter(url: str, name: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(float(m.group(1)) for m in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})?\s+(\S+)$", text, re.M))


@pytest.fixture
def router_factory() -> Any:
    started: list[RouterProc] = []

    def factory(*backends: str, policy: str, extra: tuple[str, ...] = ()) -> RouterProc:
        r = RouterProc(*backends, policy=policy, extra=extra)
        started.append(r)
        return r

    yield factory
    for r in started:
        r.stop()


def test_a_ramp_through_the_router_reaches_every_backend_and_every_request_completes(
    sim_factory: Any, router_factory: Any, tmp_path: Path
) -> None:
    sims = [sim_factory("--profile", "h100-llama-8b", "--startup-s", "0") for _ in range(2)]
    router = router_factory(*(s.url for s in sims), policy="round-robin")
    done = run_loadgen(
        "ramp", "--url", router.url, "--concurrency", "4", "--step-seconds", "3", "--warmup-seconds", "0",
        "--max-tokens", "32", "--out", str(tmp_path / "runs"), timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (row,) = step_rows(load_run(done.stdout.strip().splitlines()[-1]))
    assert row["requests_failed"] == 0 and row["requests_ok"] > 10 and row["ttft_ms"]["p50"] is not None
    served = [_counter(s.url, "sglang:num_requests_total") for s in sims]
    stats = router.stats()["backends"]
    assert [b["routed"] for b in stats] == served  # what each backend was sent, it served
    assert abs(served[0] - served[1]) <= 1  # in turn
    assert all(b["outstanding"] == 0 and b["failed"] == 0 for b in stats)


def test_streams_and_whole_answers_pass_through(sim_factory: Any, router_factory: Any) -> None:
    sim = sim_factory("--profile", "h100-llama-8b", "--startup-s", "0")
    router = router_factory(sim.url, policy="least-requests")
    body = {"model": "x", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 12}
    status, data, headers = _post(router.url + "/v1/chat/completions", body, {"x-request-id": "abc-1"})
    whole = json.loads(data)
    assert status == 200 and whole["usage"]["completion_tokens"] == 12 and headers["server"] == "loadgen-router"
    status, data, headers = _post(router.url + "/v1/chat/completions", {**body, "stream": True})
    events = [line for line in data.decode().split("\n\n") if line.startswith("data:")]
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    assert events[-1] == "data: [DONE]" and len(events) >= 13
    assert _post(router.url + "/v1/chat/completions", {"model": "x", "max_tokens": 5})[0] == 400  # the server's 400
    with urllib.request.urlopen(router.url + "/v1/models", timeout=5) as resp:
        assert json.loads(resp.read())["data"]
    assert _counter(router.url, "loadgen_router_requests_total") == 3  # the model list is not routed


def test_prefix_aware_keeps_each_shared_prompt_on_one_backend_and_session_keeps_each_session(
    sim_factory: Any, router_factory: Any
) -> None:
    sims = [sim_factory("--profile", "h100-llama-8b", "--startup-s", "0") for _ in range(3)]
    families = [f"You are assistant {k}. " + " ".join(f"rule{k}-{i}" for i in range(400)) for k in range(3)]

    def ask(url: str, system: str, i: int, headers: dict[str, str] | None = None) -> None:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": f"question {i}"}]
        body = {"model": "x", "max_tokens": 2, "messages": messages}
        assert _post(url + "/v1/chat/completions", body, headers)[0] == 200

    router = router_factory(*(s.url for s in sims), policy="prefix-aware")
    before = [_counter(s.url, "sglang:cached_tokens_total") for s in sims]
    for i in range(8):
        for fam in families:
            ask(router.url, fam, i)
    routed = [b["routed"] for b in router.stats()["backends"]]
    hits = [_counter(s.url, "sglang:cached_tokens_total") - b for s, b in zip(sims, before, strict=True)]
    prompt = [_counter(s.url, "sglang:prompt_tokens_total") for s in sims]
    # each family went to one backend: every request after a family's first found its prompt cached
    assert sorted(routed) == [8, 8, 8], routed
    assert sum(hits) / sum(prompt) > 0.8, (hits, prompt)

    router.stop()
    router = router_factory(*(s.url for s in sims), policy="session")
    for i in range(12):
        ask(router.url, families[0], i, {"x-session-id": f"conv-{i % 4}"})
    per_backend = [b["routed"] for b in router.stats()["backends"]]
    assert sum(per_backend) == 12 and all(n % 3 == 0 for n in per_backend)  # each session's 3 turns together


def test_a_backend_that_dies_is_taken_out_and_the_rest_serve(sim_factory: Any, router_factory: Any) -> None:
    sims = [sim_factory("--profile", "h100-llama-8b", "--startup-s", "0") for _ in range(2)]
    router = router_factory(*(s.url for s in sims), policy="round-robin")
    body = {"model": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    assert all(_post(router.url + "/v1/chat/completions", body)[0] == 200 for _ in range(4))
    sims[1].stop()
    deadline = time.monotonic() + 10
    while router.stats()["backends"][1]["up"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not router.stats()["backends"][1]["up"]
    statuses = [_post(router.url + "/v1/chat/completions", body)[0] for _ in range(6)]
    assert statuses == [200] * 6
    sims[0].stop()
    deadline = time.monotonic() + 10
    while router.stats()["backends"][0]["up"] and time.monotonic() < deadline:
        time.sleep(0.1)
    status, data, _ = _post(router.url + "/v1/chat/completions", body)
    assert status == 503 and b"no backend is up" in data
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(router.url + "/health", timeout=5)
    assert err.value.code == 503


def test_router_refuses_bad_flags_naming_them() -> None:
    done = run_loadgen("router", "--backend", "https://example.invalid:1", "--port", "0")
    assert done.returncode == 2 and "give an http://HOST:PORT URL" in done.stderr
    done = run_loadgen("router", "--backend", "http://127.0.0.1:1", "--policy", "fastest", "--port", "0")
    assert done.returncode == 2 and "unknown router policy 'fastest'" in done.stderr
