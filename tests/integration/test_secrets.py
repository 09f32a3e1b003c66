"""An API key never leaves the Authorization header (issue 18): a real ramp against the simulator
with a sentinel key, its Prometheus export read while it runs; the sentinel must be in no file of the
run directory, not in stdout/stderr, and not in /metrics."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO, free_port, loadgen_cmd, start_sim

pytestmark = pytest.mark.slow

SENTINEL = "sk-SENTINEL-4b1d9e0c7a"


def test_the_api_key_is_in_no_artifact_of_a_run(tmp_path: Path) -> None:
    sim = start_sim(tmp_path, "--profile", "tiny")
    port = free_port()
    out = tmp_path / "out"
    metrics = b""
    try:
        cmd = loadgen_cmd(
            "ramp",
            "--url",
            sim.url,
            "--api-key",
            SENTINEL,
            "--concurrency",
            "2",
            "--step-seconds",
            "2",
            "--warmup-seconds",
            "0.2",
            "--max-tokens",
            "8",
            "--no-telemetry",
            "--prometheus-port",
            str(port),
            "--out",
            str(out),
        )
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and b"loadgen_requests_ok_total" not in metrics:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
                    metrics = resp.read()
            except OSError:
                time.sleep(0.1)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        sim.stop()
    assert proc.returncode == 0, stderr[-2000:]
    assert b"loadgen_requests_ok_total" in metrics
    run_dir = Path(stdout.strip().splitlines()[-1])
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert len(files) >= 4
    leaked = [str(p) for p in files if SENTINEL.encode() in p.read_bytes()]
    assert leaked == []
    assert SENTINEL not in stdout and SENTINEL not in stderr
    assert SENTINEL.encode() not in metrics
