"""Shared fixtures: real servers on 127.0.0.1, started and stopped by the tests that use them.

The suite runs on four pytest-xdist workers on two cores (pyproject's addopts): most tests wait on
real servers and real steps, not on the CPU. Each file is one unit of work for one worker
(``--dist loadfile``), except the tests marked ``exclusive`` (they measure
timing that another test's CPU would move: a twin against its profile, the client's clock against
the server's truth, a browser racing a ramp): those are one unit of their own, taken last, and run
alone: the worker waits until the others' running tests have ended, no test starts beside them, and
it keeps the others out from the first exclusive test to the last (``_Alone``, ``_Scheduling``).
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
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]

# The suite starts hundreds of Python processes (servers, ``loadgen`` runs) and four workers that
# each rewrite the asserts of every test module. With PYTHONDONTWRITEBYTECODE set (containers and CI
# images often set it) each of them compiled its modules from source every time: on two cores the
# suite took 385 s, and 362 s on a fresh checkout with this (331-347 s once compiled; 325-340 s on a
# fresh one with ``_compile_ahead`` too). The compiled files go to the __pycache__ folders .gitignore skips.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


class _Alone:
    """Under xdist, a readers-writer lock shared by the run's workers (two files under the temp dir,
    named by the run's id): every test holds ``tests`` shared, an exclusive one holds it alone.
    ``turnstile`` keeps tests from starting while an exclusive one waits for the running ones. A
    worker keeps both from one exclusive test to the next, so that no test of another worker slips
    in between and makes the next exclusive one wait it out."""

    def __init__(self) -> None:
        self._held: tuple[Any, Any] | None = None  # (turnstile, tests) while exclusive tests run

    @contextmanager
    def __call__(self, exclusive: bool, next_exclusive: bool) -> Iterator[None]:
        run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
        if run is None:  # one process: every test runs alone already
            yield
            return
        if exclusive and self._held is None:
            self._held = self._open(run)
            fcntl.flock(self._held[0], fcntl.LOCK_EX)
            fcntl.flock(self._held[1], fcntl.LOCK_EX)
        if exclusive:
            try:
                yield
            finally:
                if not next_exclusive:
                    self.release()
            return
        turnstile, tests = self._open(run)
        with turnstile, tests:
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            fcntl.flock(tests, fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(tests, fcntl.LOCK_UN)

    @staticmethod
    def _open(run: str) -> tuple[Any, Any]:
        base = _lock_dir(run)
        base.mkdir(exist_ok=True)
        return open(base / "turnstile", "a"), open(base / "tests", "a")  # closed in release()

    def release(self) -> None:
        if self._held is not None:
            turnstile, tests = self._held
            self._held = None
            fcntl.flock(tests, fcntl.LOCK_UN)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            tests.close()
            turnstile.close()


_alone = _Alone()


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


def pytest_configure(config: pytest.Config) -> None:
    """In xdist's controller: name the run (``--testrunuid``, which the workers are given) so that
    the controller can remove the lock files once every worker has ended."""
    if not hasattr(config, "workerinput") and getattr(config.option, "testrunuid", "unset") is None:
        config.option.testrunuid = uuid.uuid4().hex
        if config.getvalue("dist") != "no":
            _compile_ahead(config.args, config.invocation_params.dir)


def _compile_ahead(paths: list[str], where: Path) -> None:
    """In xdist's controller, before the workers start: compile once, in two processes side by side,
    what each worker and each process a test starts would otherwise compile on its own at the same
    moment on a fresh clone (the test modules with their asserts rewritten, which a collection caches;
    loadgen's modules). Errors are the real run's to report. It runs before pytest's clock starts:
    its 6-11 s are in the wall time, not in the closing line's."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    collect = ["-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider", *paths]
    compiles = [
        subprocess.Popen(
            [sys.executable, *args], cwd=where, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for args in (collect, ["-m", "compileall", "-q", str(REPO / "loadgen")])
    ]
    for proc in compiles:
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller removes the lock files after the last worker has ended (a worker that ends
    early must not: another may be holding them alone)."""
    run = getattr(config.option, "testrunuid", None)
    if run and not hasattr(config, "workerinput"):
        shutil.rmtree(_lock_dir(run), ignore_errors=True)


def _lock_dir(run: str) -> Path:
    return Path(tempfile.gettempdir()) / f"loadgen-tests-{run}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The order of the units of work (pyproject's ``--no-loadscope-reorder`` keeps it): the files
    with ``slow`` tests first, so that the longest work starts first; the many short files next,
    where they even out the workers' ends; all ``exclusive`` tests last, as one unit
    (``_Scheduling``), run back to back by one worker while the others wait. A worker writes the
    exclusive tests' ids where the controller's scheduler reads them."""

    def rank(item: pytest.Item) -> int:
        return 2 if item.get_closest_marker("exclusive") else 0 if item.get_closest_marker("slow") else 1

    first: dict[str, int] = {}
    for item in items:
        if rank(item) < 2:
            path = item.nodeid.split("::", 1)[0]
            first[path] = min(first.get(path, 1), rank(item))
    items.sort(key=lambda item: 2 if rank(item) == 2 else first[item.nodeid.split("::", 1)[0]])  # stable
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is not None:
        _lock_dir(run).mkdir(exist_ok=True)
        ids = _lock_dir(run) / "exclusive"
        part = ids.with_name(f"exclusive.{os.getpid()}")
        part.write_text("".join(item.nodeid + "\n" for item in items if rank(item) == 2))
        part.replace(ids)  # whole, whichever worker writes it last (they collect the same tests)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadFileScheduling

    class _Scheduling(LoadFileScheduling):
        """``--dist loadfile`` with one more unit: every ``exclusive`` test, whatever its file (the
        ids the workers wrote while collecting, read when the controller splits the collection)."""

        _exclusive: frozenset[str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._exclusive is None:
                ids = _lock_dir(config.option.testrunuid) / "exclusive"
                self._exclusive = frozenset(ids.read_text().splitlines()) if ids.exists() else frozenset()
            return "exclusive" if nodeid in self._exclusive else str(super()._split_scope(nodeid))

    if config.getvalue("dist") != "loadfile":
        return None
    return _Scheduling(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    exclusive = item.get_closest_marker("exclusive") is not None
    with _alone(exclusive, nextitem is not None and nextitem.get_closest_marker("exclusive") is not None):
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


def emissions_by_request(emission_log: Path) -> dict[str, list[dict[str, Any]]]:
    """The simulator's ``--emission-log`` by request id: each request's emissions that carried
    tokens, in the order it sent them."""
    by_req: dict[str, list[dict[str, Any]]] = {}
    for line in emission_log.read_text().splitlines():
        e = json.loads(line)
        if e.get("tokens", 0) > 0:
            by_req.setdefault(e["request_id"], []).append(e)
    return by_req
