"""The side process started and stopped for real: server /metrics over HTTP, a followed log file,
log and nvidia-smi commands, server-down and recovery, SIGTERM, and its parent going away."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from loadgen.rundir.records import read_jsonl
from loadgen.telemetry import SideProcess, TelemetryOptions, start_side_process

ROOT = Path(__file__).resolve().parents[2]
VLLM_PAGE = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 17.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 3.0
"""


@pytest.fixture
def metrics() -> Iterator[tuple[str, dict[str, int]]]:
    state = {"code": 200}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

        def do_GET(self) -> None:
            body = VLLM_PAGE.encode() if state["code"] == 200 else b"down"
            self.send_response(state["code"])
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/metrics", state
    httpd.shutdown()
    httpd.server_close()


def wait_for(path: Path, pred: Callable[[list[dict[str, Any]]], bool], timeout_s: float = 10.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    recs: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        recs = read_jsonl(path) if path.exists() else []
        if pred(recs):
            return recs
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting on {path}: {recs[-5:]}")


def started(run_dir: Path, options: TelemetryOptions) -> SideProcess:
    side = start_side_process(run_dir, options)
    assert side.wait_ready(15.0), (run_dir / "telemetry.log").read_text()
    return side


def test_metrics_and_log_file_are_sampled_then_stopped_cleanly(
    tmp_path: Path, metrics: tuple[str, dict[str, int]]
) -> None:
    url, state = metrics
    log = tmp_path / "server.out"
    log.write_text("Capture cuda graph failed: an old line before the run\n")
    run_dir = tmp_path / "run"
    side = started(
        run_dir, TelemetryOptions(gpu_source="none", metrics_url=url, metrics_hz=10.0, server_log_file=str(log))
    )
    assert side.alive()
    wait_for(
        run_dir / "events.jsonl", lambda r: any(e["kind"] == "started" and e["sampler"] == "server_log_file" for e in r)
    )
    with open(log, "a") as fh:
        fh.write("[TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_token_ratio: 0.5 -> 0.6\n")
        fh.write("Capture cuda graph begin.\n")
    events = wait_for(run_dir / "events.jsonl", lambda r: any(e["kind"] == "log_match" for e in r))
    samples = wait_for(run_dir / "samples.jsonl", lambda r: len(r) >= 3)
    state["code"] = 503  # the server goes down...
    events = wait_for(run_dir / "events.jsonl", lambda r: any(e["kind"] == "sampler_error" for e in r))
    state["code"] = 200  # ...and comes back
    events = wait_for(run_dir / "events.jsonl", lambda r: any(e["kind"] == "sampler_recovered" for e in r))
    assert side.stop(10.0) == 0
    assert not side.alive()
    events = read_jsonl(run_dir / "events.jsonl")
    samples = read_jsonl(run_dir / "samples.jsonl")
    matches = [e for e in events if e["kind"] == "log_match"]
    assert [m["pattern"] for m in matches] == ["sglang_kv_full"]  # the old line is before the run; begin is no match
    errors = [e for e in events if e["kind"] == "sampler_error"]
    assert len(errors) == 1 and "HTTP 503" in errors[0]["message"]  # repeated failures are one event
    assert samples[0] == {
        **samples[0],
        "src": "server",
        "engine": "vllm",
        "running": 17,
        "queued": 2,
        "kv_usage": 0.42,
        "preemptions_total": 3.0,
    }
    assert events[-1]["kind"] == "stopped" and events[-1]["reason"] == "stop_file"
    assert (run_dir / "server.log").read_text().splitlines()[-1] == "Capture cuda graph begin."
    assert not (run_dir / "telemetry.pid").exists()


def test_log_command_and_streaming_smi_command(tmp_path: Path) -> None:
    fake_smi = tmp_path / "fake_smi.py"
    fake_smi.write_text(
        textwrap.dedent("""\
        import sys, time
        print("index, power.draw [W], utilization.gpu [%]", flush=True)
        for k in range(1000):
            print(f"{k % 2}, {300 + k % 2}.00 W, 97 %", flush=True)
            time.sleep(0.05)
    """)
    )
    smi_cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(fake_smi))} --query-gpu=index,power.draw -lms 50"
    log_cmd = f"{shlex.quote(sys.executable)} -c \"print('Exception: Capture cuda graph failed: out of memory')\""
    run_dir = tmp_path / "run"
    side = started(run_dir, TelemetryOptions(gpu_source=smi_cmd, server_logs=log_cmd))
    wait_for(run_dir / "events.jsonl", lambda r: any(e["kind"] == "source_ended" for e in r))
    samples = wait_for(run_dir / "samples.jsonl", lambda r: len(r) >= 6)
    assert side.stop(10.0) == 0
    events = read_jsonl(run_dir / "events.jsonl")
    (match,) = [e for e in events if e["kind"] == "log_match"]
    assert match["pattern"] == "cuda_graph_capture_failed" and match["severity"] == "fatal"
    (ended,) = [e for e in events if e["kind"] == "source_ended" and e["sampler"] == "server_logs"]
    assert ended["returncode"] == 0  # it ended by itself; the smi command was ended by stop()
    assert {(s["gpu"], s["power_w"], s["source"]) for s in samples} == {(0, 300.0, "smi"), (1, 301.0, "smi")}


def test_a_bad_command_string_is_a_clear_error(tmp_path: Path) -> None:
    side = start_side_process(tmp_path / "run", TelemetryOptions(gpu_source="none", server_logs="tail -f 'open"))
    assert side.proc.wait(15) == 2
    (ev,) = [e for e in read_jsonl(tmp_path / "run" / "events.jsonl") if e["kind"] == "source_unavailable"]
    assert ev["message"].startswith("--server-logs: cannot split")
    missing = start_side_process(
        tmp_path / "run2", TelemetryOptions(gpu_source="none", server_logs="/no/such/binary -f")
    )
    assert missing.wait_ready(15.0)
    events = wait_for(tmp_path / "run2" / "events.jsonl", lambda r: any(e["kind"] == "source_unavailable" for e in r))
    assert "cannot run '/no/such/binary'" in events[-1]["message"]
    assert missing.alive() and missing.stop(10.0) == 0


def test_sigterm_stops_it_cleanly(tmp_path: Path) -> None:
    side = started(tmp_path / "run", TelemetryOptions(gpu_source="none"))
    side.proc.terminate()
    assert side.proc.wait(10) == 0
    events = read_jsonl(tmp_path / "run" / "events.jsonl")
    assert events[-1]["kind"] == "stopped" and events[-1]["reason"] == "signal"


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return any(line.startswith("State:") and "Z" in line for line in fh)
    except FileNotFoundError:
        return True


def test_it_stops_when_its_parent_is_killed(tmp_path: Path) -> None:
    code = textwrap.dedent(f"""\
        import os, sys
        from pathlib import Path
        from loadgen.telemetry import TelemetryOptions, start_side_process
        side = start_side_process(Path({str(tmp_path / "run")!r}), TelemetryOptions(gpu_source="none"))
        assert side.wait_ready(15.0)
        print(side.pid, flush=True)
        os._exit(0)  # like kill -9: no cleanup, no stop file
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=30, check=True)
    pid = int(out.stdout.strip())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not _gone(pid):
        time.sleep(0.05)
    assert _gone(pid)
    events = read_jsonl(tmp_path / "run" / "events.jsonl")
    assert events[-1]["kind"] == "stopped" and events[-1]["reason"] == "parent_exited"


def test_the_side_process_never_imports_gevent_locust_or_pynvml_without_nvml(tmp_path: Path) -> None:
    code = (
        "import sys, threading\n"
        "from loadgen.telemetry.runner import run, RunConfig\n"
        "from pathlib import Path\n"
        f"cfg = RunConfig(run_dir=Path({str(tmp_path)!r}), gpu_source='none',\n"
        f"                stop_file=Path({str(tmp_path / 's')!r}))\n"
        f"Path({str(tmp_path / 's')!r}).touch()\n"
        "run(cfg, install_signals=False)\n"
        "print(sorted(m for m in ('gevent', 'locust', 'pynvml') if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=30, check=True)
    assert out.stdout.strip() == "[]"


class _Good:
    name, period_s = "good", 0.02

    def open(self, emit: Any) -> None:
        pass

    def sample(self) -> list[dict[str, Any]]:
        return [{"t_ns": time.time_ns(), "src": "gpu", "gpu": 0}]

    def close(self) -> None:
        pass


class _Broken(_Good):
    name = "broken"

    def sample(self) -> list[dict[str, Any]]:
        raise RuntimeError("device wedged")


class _Unopenable(_Good):
    name = "unopenable"

    def open(self, emit: Any) -> None:
        raise OSError("no such device")


def test_a_failing_sampler_keeps_the_others_alive(tmp_path: Path) -> None:
    from loadgen.telemetry.runner import Sink, run_periodic

    sink = Sink(tmp_path)
    stop = threading.Event()
    threads = [threading.Thread(target=run_periodic, args=(s, sink, stop)) for s in (_Good(), _Broken(), _Unopenable())]
    t0 = time.monotonic()
    for th in threads:
        th.start()
    # the good one goes on beside the broken ones: 15 samples (0.3 s at 50 Hz, however long a busy
    # machine takes to give them; the 60 s only catch a hang)
    deadline = t0 + 60
    while sink.n_samples < 15 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    for th in threads:
        th.join(5)
    took_s = time.monotonic() - t0
    sink.close()
    samples = read_jsonl(tmp_path / "samples.jsonl")
    events = read_jsonl(tmp_path / "events.jsonl")
    # on a fixed schedule: never more than its 50 Hz in the time it ran (missed ticks are skipped)
    assert 15 <= len(samples) <= took_s * 50 + 2, (len(samples), took_s)
    assert sorted((e["sampler"], e["kind"], e["message"]) for e in events) == [
        ("broken", "sampler_error", "device wedged"),  # once, not once per tick
        ("unopenable", "source_unavailable", "OSError: no such device"),
    ]


def test_beside_a_load_generator_it_runs_nicer_than_its_parent(tmp_path: Path) -> None:
    """Its polls and writes wait for the load generator's reads on a small machine, not the reverse."""
    from loadgen.telemetry import SIDE_NICE

    side = started(tmp_path / "run", TelemetryOptions(gpu_source="none"))
    try:
        stat = Path(f"/proc/{side.pid}/stat").read_text()
        child_nice = int(stat[stat.rfind(")") + 2 :].split()[16])  # field 19 of proc(5)
        assert child_nice == min(19, os.getpriority(os.PRIO_PROCESS, 0) + SIDE_NICE)
    finally:
        assert side.stop(10.0) == 0
