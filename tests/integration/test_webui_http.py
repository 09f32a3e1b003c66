"""The web UI's endpoints over HTTP (no browser): the form's Start, the live JSON, the report files,
Locust's extended stats for the LLM tab, /loadgen/metrics; headless --lg-prometheus-port."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, free_port, run_records, wait_http

pytestmark = pytest.mark.slow


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as resp:
        body: bytes = resp.read()
        return body


def _post(url: str, form: dict[str, str]) -> dict[str, Any]:
    data = urllib.parse.urlencode(form).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=30) as resp:
        result: dict[str, Any] = json.load(resp)
        return result


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in:\n{text}")


def _wait_ok_records(out: Path, n: int, timeout_s: float = 90) -> None:
    """Until a run under ``out`` recorded ``n`` successful requests (the work a step needs, however
    long a busy machine takes to do it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for f in out.glob("*/requests*.jsonl"):
            whole = f.read_bytes().split(b"\n")[:-1]  # a line being written has no newline yet
            if sum(json.loads(line)["error_class"] is None for line in whole) >= n:
                return
        time.sleep(0.1)
    raise AssertionError(f"fewer than {n} successful requests under {out} after {timeout_s} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_form_start_live_json_reports_and_metrics(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory("--profile", "tiny")
    port = free_port()
    out = tmp_path / "reports"
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    # a trace of 40 arrivals 0.1 s apart, replayed as it is: the start form's trace replay
    trace = scenarios / "trace.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"2023-11-16 18:15:{i // 10:02d}.{i % 10}000000,60,8\n" for i in range(40)
    ))  # fmt: skip
    (scenarios / "replay.toml").write_text(
        f'name = "replay"\n[prompt]\nsource = "trace"\n[trace]\npath = "{trace}"\nformat = "azure"\n'
        "[output]\nmax_tokens = 8\nfrom_dataset = false\n"
        '[load]\nmode = "open"\narrival = "trace"\ntime_scales = [1.0]\nstep_seconds = 2\nwarmup_seconds = 0\n'
    )
    locust = subprocess.Popen(
        [
            sys.executable, "-m", "locust", "-f", "loadgen/locustfile.py", "--host", sim.url,
            "--web-host", "127.0.0.1", "--web-port", str(port), "--lg-out", str(out), "--no-telemetry",
            "--lg-scenarios", str(scenarios),
        ],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=(tmp_path / "locust.log").open("wb"),
    )  # fmt: skip
    ui = f"http://127.0.0.1:{port}"
    try:
        wait_http(ui + "/", locust, 30)
        before = json.loads(_get(ui + "/loadgen/live.json"))
        assert before["run_id"] is None and before["steps"] == []
        base = {"user_count": "1", "spawn_rate": "1", "host": sim.url, "lg_max_tokens": "12"}
        bad = _post(ui + "/swarm", {**base, "lg_steps": "1,x"})
        # the form's label, not the hidden field's flag
        assert bad["success"] is False and "\u201cClosed loop: users per step\u201d '1,x'" in bad["message"]
        bad = _post(ui + "/swarm", {**base, "lg_steps": "", "lg_extra_body": "nope"})  # manual mode checks too
        assert bad["success"] is False and "\u201cExtra body fields\u201d 'nope': expected key=value" in bad["message"]
        assert not out.exists() or not list(out.iterdir())  # a rejected Start leaves no run behind

        # manual mode first: Locust's user count, one step, a report on Stop
        assert _post(ui + "/swarm", {**base, "user_count": "2", "lg_steps": ""})["success"]
        _wait_ok_records(out, 5)
        _post(ui + "/stop", {})
        (manual,) = list(out.iterdir())
        deadline = time.monotonic() + 20
        while not (manual / "summary.json").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert json.loads((manual / "summary.json").read_text())["steps"][0]["concurrency"] == 2
        manual_ok = len([r for r in run_records(manual) if r["error_class"] is None])
        assert _metric(_get(ui + "/loadgen/metrics").decode(), "loadgen_requests_ok_total") == manual_ok > 0

        # then a ramp from the form: a run directory of its own
        started = _post(ui + "/swarm", {**base, "lg_steps": "1,2", "lg_step_seconds": "1", "lg_warmup_seconds": "0.5"})
        assert started["success"] and "UIRampShape" in started["message"]
        edit = _post(ui + "/swarm", {**base, "lg_steps": "4"})  # Locust's "Edit" while the ramp runs
        assert edit["success"] is False and "Stop it" in edit["message"]
        deadline = time.monotonic() + 30
        live: dict[str, Any] = {}
        while time.monotonic() < deadline:
            live = json.loads(_get(ui + "/loadgen/live.json"))
            if live["run_id"] != manual.name and "summary.json" in live["reports"]:
                break
            time.sleep(0.3)
        assert [s["concurrency"] for s in live["steps"]] == [1, 2]
        assert all(s["phase"] == "ended" and s["ok"] > 0 for s in live["steps"])
        ramp = out / live["run_id"]
        assert sorted(p.name for p in out.iterdir()) == sorted([manual.name, ramp.name])
        # the report files of the current run are served; nothing outside it is
        summary = json.loads(_get(ui + "/loadgen/" + live["reports"]["summary.json"]))
        assert summary == json.loads((ramp / "summary.json").read_text())
        html = _get(ui + "/loadgen/" + live["reports"]["report.html"]).decode()
        assert html == (ramp / "report.html").read_text()
        plot = sorted((ramp / "plots").iterdir())[0]  # report.md's pictures: a file in a subfolder of the run
        assert _get(ui + "/loadgen/run/plots/" + plot.name) == plot.read_bytes()
        with pytest.raises(urllib.error.HTTPError) as err:
            _get(ui + "/loadgen/run/..%2f" + manual.name + "/manifest.json")
        assert err.value.code == 404
        # the LLM tab's table rows ride on Locust's own /stats/requests
        stats = json.loads(_get(ui + "/stats/requests"))
        (ext,) = stats["extended_stats"]
        assert ext["key"] == "llm" and [r["load"] for r in ext["data"]] == ["1", "2"]
        # Prometheus: counters keep counting across both runs, and match the records
        text = _get(ui + "/loadgen/metrics").decode()
        ramp_ok = len([r for r in run_records(ramp) if r["error_class"] is None])
        assert _metric(text, "loadgen_requests_ok_total") == manual_ok + ramp_ok
        assert _metric(text, "loadgen_step_concurrency") == 2
        page = _get(ui + "/loadgen/").decode()
        assert "static/llm.js" in page and "<svg" in page
        assert b"loadgen/static/tab.js" in _get(ui + "/") and b"loadgen/static/start.js" in _get(ui + "/")

        # thresholds from the form, as loadgen ramp's: --abort-on stops the ramp after the step that
        # breaches it, --fail-on is judged in the report
        # (a step ends once 10 requests finished: only a valid step is judged; 60 s only catches a hang)
        started = _post(
            ui + "/swarm",
            {**base, "lg_steps": "1,2,4", "lg_step_seconds": "60", "lg_requests_per_step": "10",
             "lg_warmup_seconds": "0.5", "lg_abort_on": "output_tok_s<1000000", "lg_fail_on": "ttft_p99>1ms",
             "lg_label": "gated"},
        )  # fmt: skip
        assert started["success"], started
        deadline = time.monotonic() + 90
        gated = None
        while time.monotonic() < deadline:
            gated = next((d for d in out.iterdir() if d.name.endswith("-gated")), None)
            if gated is not None and (gated / "summary.json").exists():
                break
            time.sleep(0.3)
        assert gated is not None
        verdict = json.loads((gated / "summary.json").read_text())
        # judged when step 0 ended: the step under way then (C=2) ends "aborted", C=4 never runs
        assert [(s["concurrency"], s["end_reason"]) for s in verdict["steps"]] == [(1, "requests"), (2, "aborted")]
        assert verdict["thresholds"]["verdict"] == "fail"
        assert verdict["thresholds"]["aborted_by"] == "output_tok_s<1000000"
        events = [json.loads(line) for line in (gated / "events.jsonl").read_text().splitlines()]
        assert any(e["kind"] == "aborted" and e["threshold"] == "output_tok_s<1000000" for e in events)

        # a trace scenario from the scenario folder: its time scales are the steps (no users, no rates)
        replay_form = {"lg_steps": "", "lg_rates": "", "lg_max_tokens": "512", "lg_label": "trace",
                       "lg_step_seconds": "1", "lg_requests_per_step": ""}  # fmt: skip
        started = _post(ui + "/swarm", {**base, **replay_form, "lg_scenario": str(scenarios / "replay.toml")})
        assert started["success"] and "UIRampShape" in started["message"], started
        deadline = time.monotonic() + 30
        replay = None
        while time.monotonic() < deadline:
            replay = next((d for d in out.iterdir() if d.name.endswith("-trace")), None)
            if replay is not None and (replay / "summary.json").exists():
                break
            time.sleep(0.3)
        assert replay is not None
        (step,) = json.loads((replay / "summary.json").read_text())["steps"]
        assert step["rate"] is None and step["concurrency"] is None and step["requests_ok"] >= 5
    finally:
        _stop(locust)


def test_headless_prometheus_port_serves_while_running(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory("--profile", "tiny")
    port = free_port()
    out = tmp_path / "reports"
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "locust", "-f", "loadgen/locustfile.py", "--headless", "--host", sim.url,
            "-u", "2", "-r", "2", "-t", "120s", "--lg-max-tokens", "12", "--lg-out", str(out), "--no-telemetry",
            "--lg-prometheus-port", str(port), "--only-summary",
        ],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=(tmp_path / "locust.log").open("wb"),
    )  # fmt: skip
    try:
        # served while the test runs: polled until 5 requests succeeded, then stopped as a user stops
        # it (-t only catches a hang; a window of seconds was eaten by start-up on a busy machine)
        wait_http(f"http://127.0.0.1:{port}/metrics", proc, 60)
        deadline = time.monotonic() + 90
        seen = 0.0
        while time.monotonic() < deadline and seen < 5 and proc.poll() is None:
            seen = _metric(_get(f"http://127.0.0.1:{port}/metrics").decode(), "loadgen_requests_ok_total")
            time.sleep(0.3)
        assert seen >= 5
        proc.terminate()
        assert proc.wait(60) == 0
    finally:
        _stop(proc)
    # stopped by SIGTERM mid-step, the run still ends as a run: its step ends "stopped" and the
    # report is written (Locust tells `quitting` before `test_stop` then)
    (run,) = list(out.iterdir())
    summary = json.loads((run / "summary.json").read_text())
    assert summary["totals"]["requests_ok"] >= 5 and (run / "report.md").exists()
    assert [s["end_reason"] for s in summary["steps"]] == ["stopped"]
