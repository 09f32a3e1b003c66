"""End to end against the simulated server: its DCGM-style /gpu/metrics, SGLang /metrics and log
file are real HTTP and a real file; the side process samples them while load rises in steps, and
the per-step join shows queue/running, KV fill and power rising, and the idle step invalid."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from loadgen.analysis.telemetry import step_telemetry
from loadgen.rundir.records import read_jsonl
from loadgen.telemetry import TelemetryOptions, start_side_process

ROOT = Path(__file__).resolve().parents[2]


def load_phase(port: int, users: int, seconds: float) -> int:
    """``users`` closed-loop clients for ``seconds``; returns the requests that succeeded."""
    ok = [0] * users
    deadline = time.monotonic() + seconds
    if users == 0:
        time.sleep(seconds)
        return 0
    body = json.dumps(
        {"model": "tiny", "messages": [{"role": "user", "content": "hello " * 200}], "max_tokens": 128, "stream": False}
    )

    def user(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        while time.monotonic() < deadline:
            conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            ok[i] += resp.status == 200
        conn.close()

    threads = [threading.Thread(target=user, args=(i,)) for i in range(users)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(ok)


@pytest.mark.slow
def test_per_step_telemetry_rises_with_load_against_the_simulator(tmp_path: Path) -> None:
    port_file, sim_log = tmp_path / "sim.port", tmp_path / "sim.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    sim = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loadgen.sim",
            "--profile",
            "tiny",
            "--port",
            "0",
            "--port-file",
            str(port_file),
            "--log-file",
            str(sim_log),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (port_file.exists() and port_file.read_text().strip()):
            time.sleep(0.05)
        port = int(port_file.read_text())
        run_dir = tmp_path / "run"
        side = start_side_process(
            run_dir,
            TelemetryOptions(
                gpu_source=f"http://127.0.0.1:{port}/gpu/metrics",
                gpu_hz=10.0,
                metrics_url=f"http://127.0.0.1:{port}/metrics",
                metrics_hz=10.0,
                server_log_file=str(sim_log),
                log_from_start=True,
            ),
        )
        assert side.wait_ready(15.0)
        windows, ok = [], []
        for users, seconds in ((0, 1.5), (1, 2.0), (24, 2.5)):
            a = time.time_ns()
            ok.append(load_phase(port, users, seconds))
            windows.append((a, time.time_ns()))
        assert side.stop(10.0) == 0
    finally:
        sim.terminate()
        sim.wait(10)
    samples = read_jsonl(run_dir / "samples.jsonl")
    events = read_jsonl(run_dir / "events.jsonl")
    assert ok[1] > 0 and ok[2] > ok[1]
    idle, low, high = step_telemetry(samples, events, windows, ok)
    assert idle["power_valid"] is False and idle["power_invalid_reason"] == "idle: no request served"
    assert low["power_valid"] and high["power_valid"]
    assert high["running"]["max"] > low["running"]["max"]
    assert high["kv_usage"]["max"] > low["kv_usage"]["max"]
    assert high["gpu_power_w"]["mean"] > low["gpu_power_w"]["mean"] > 0
    assert high["energy_method"] == "counter" and high["energy_j"] > 0
    assert {e["pattern"] for e in events if e["kind"] == "log_match"} >= {"sglang_ready"}
