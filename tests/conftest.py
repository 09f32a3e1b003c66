"""Shared fixtures: real servers on 127.0.0.1, started and stopped by the tests that use them.

The suite runs on two pytest-xdist workers (pyproject's addopts), one file at a time each: most
tests wait on real servers and real steps, not on the CPU. A test marked ``exclusive`` (it measures
timing that another test's CPU would move: a twin against its profile, the story's figures, the
client's clock against the server's truth) runs alone: it waits until the other worker's test
has ended, and no test starts beside it (``_alone``).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


@contextmanager
def _alone(exclusive: bool) -> Iterator[None]:
    """Under xdist, a readers-writer lock shared by the run's workers (two files under the temp
    dir, named by the run's id): every test holds ``tests`` shared, an exclusive one holds it alone.
    ``turnstile`` keeps tests from starting while an exclusive one waits for the running ones."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:  # one process: every test runs alone already
        yield
        return
    base = Path(tempfile.gettempdir()) / f"loadgen-tests-{run}"
    base.mkdir(exist_ok=True)
    with open(base / "turnstile", "a") as turnstile, open(base / "tests", "a") as tests:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if exclusive:
            fcntl.flock(tests, fcntl.LOCK_EX)
        else:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            fcntl.flock(tests, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(tests, fcntl.LOCK_UN)
            if exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)


def _keep_the_hub_waiting() -> None:
    """In an xdist worker: a test that imports Locust monkey-patches threading, and the worker's main
    thread then waits for its next test on a gevent lock that execnet's receiver (a native thread)
    releases. gevent hands such a release over to the waiting hub, but a hub with nothing else to
    watch gives up first (LoopExit, pytest-xdist issue #254); an idle repeating timer keeps it
    waiting."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return
    import gevent

    timer = gevent.get_hub().loop.timer(0.5, 0.5)
    timer.start(lambda: None)
    _KEEP.append(timer)


_KEEP: list[object] = []
_keep_the_hub_waiting()


def pytest_unconfigure(config: pytest.Config) -> None:
    """A worker with no tests left removes the lock files (the other worker, still running, makes
    them anew for its next test: nobody else is left to share them with)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is not None and os.environ.get("PYTEST_XDIST_WORKER") is not None:
        shutil.rmtree(Path(tempfile.gettempdir()) / f"loadgen-tests-{run}", ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    with _alone(item.get_closest_marker("exclusive") is not None):
        yield


@dataclass
class SimServer:
    url: str
    proc: subprocess.Popen[bytes]
    emission_log: Path
    log_file: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_sim(tmp: Path, *args: str, wait_ready: bool = True, timeout_s: float = 30.0) -> SimServer:
    """Start ``python -m loadgen.sim`` on an ephemeral port; return once /health answers 200."""
    port_file = tmp / f"sim-{time.monotonic_ns()}.port"
    emission = tmp / "emission.jsonl"
    log_file = tmp / "sim.log"
    cmd = [
        sys.executable,
        "-m",
        "loadgen.sim",
        "--port",
        "0",
        "--port-file",
        str(port_file),
        "--emission-log",
        str(emission),
        "--log-file",
        str(log_file),
        *args,
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout_s
    while not (port_file.exists() and port_file.read_text().strip()):
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise RuntimeError(f"simulator exited with {proc.returncode}: {err}")
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("simulator did not write its port file")
        time.sleep(0.02)
    url = f"http://127.0.0.1:{int(port_file.read_text().strip())}"
    server = SimServer(url, proc, emission, log_file)
    if wait_ready:
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                server.stop()
                raise RuntimeError("simulator did not become ready")
            time.sleep(0.05)
    return server


@pytest.fixture
def sim_factory(tmp_path: Path) -> Iterator[object]:
    servers: list[SimServer] = []

    def factory(*args: str, wait_ready: bool = True) -> SimServer:
        sub = tmp_path / f"sim{len(servers)}"
        sub.mkdir()
        s = start_sim(sub, *args, wait_ready=wait_ready)
        servers.append(s)
        return s

    yield factory
    for s in servers:
        s.stop()


def loadgen_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "loadgen.cli", *args]


def run_loadgen(
    *args: str, timeout: float = 120.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(loadgen_cmd(*args), cwd=REPO, capture_output=True, text=True, timeout=timeout, env=full_env)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Return once ``url`` answers (any status); fail if ``proc`` exits or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout_s} s")


def run_dir_of(proc: subprocess.CompletedProcess[str]) -> Path:
    """The run directory a finished ``loadgen ramp`` printed last (it must have exited 0)."""
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = Path(proc.stdout.strip().splitlines()[-1])
    assert path.is_dir(), path
    return path


def run_records(run_dir: Path) -> list[dict[str, Any]]:
    """Every request record of a run directory (all workers' files, in file order)."""
    out: list[dict[str, Any]] = []
    for f in sorted(run_dir.glob("requests*.jsonl")):
        out += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return out
