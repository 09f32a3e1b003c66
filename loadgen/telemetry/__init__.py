"""The telemetry side process and its controller.

The load generator calls ``start_side_process(run_dir, TelemetryOptions(...))``: it starts
``python -m loadgen.telemetry run`` as a separate process (NVML calls block, and nothing may block
the gevent hub), and the two talk only through files in the run directory -- the child appends
``samples.jsonl``/``events.jsonl``, the parent asks it to stop by creating a stop file
(multiprocessing queues hang under gevent's monkey-patching). The child also stops by itself when
its parent goes away, so a ``kill -9`` of the load generator leaves no orphan sampling forever.
Importing this package imports neither gevent, locust nor pynvml.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from loadgen.telemetry.options import TOKEN_ENV, TelemetryOptions
from loadgen.telemetry.runner import PID_FILE

STOP_FILE = ".telemetry-stop"
LOG_FILE = "telemetry.log"


class SideProcess:
    """A running side process; ``stop()`` ends it (stop file, then SIGTERM, then SIGKILL)."""

    def __init__(self, proc: subprocess.Popen[bytes], run_dir: Path, stop_file: Path) -> None:
        self.proc = proc
        self.run_dir = run_dir
        self.stop_file = stop_file

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, timeout_s: float = 10.0) -> bool:
        """True once the child has started its samplers; False if it exited or timed out."""
        deadline = time.monotonic() + timeout_s
        pid_file = self.run_dir / PID_FILE
        while time.monotonic() < deadline:
            if pid_file.exists():
                return True
            if not self.alive():
                return False
            time.sleep(0.05)
        return False

    def stop(self, timeout: float = 5.0) -> int | None:
        """Ask the child to stop and wait; returns its exit status (None if it could not be reaped)."""
        if self.alive():
            try:
                self.stop_file.touch()
            except OSError:
                pass
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(2.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                try:
                    return self.proc.wait(2.0)
                except subprocess.TimeoutExpired:
                    return None
        return self.proc.returncode


# The side process beside a load generator runs this much nicer than it: on a small machine its
# polls and writes (NVML, /metrics parsing, JSONL) then wait for the load generator's reads instead
# of preempting them. Its samples carry their own times, so a few ms of delay costs them nothing.
SIDE_NICE = 5


def start_side_process(
    run_dir: Path, options: TelemetryOptions, python: str | None = None, env: dict[str, str] | None = None
) -> SideProcess:
    """Start the side process writing into ``run_dir``; its stdout/stderr go to ``telemetry.log``."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    stop_file = run_dir / STOP_FILE
    if stop_file.exists():
        stop_file.unlink()
    argv = [
        python or sys.executable,
        "-m",
        "loadgen.telemetry",
        "run",
        "--run-dir",
        str(run_dir),
        "--stop-file",
        str(stop_file),
        "--parent-pid",
        str(os.getpid()),
        "--nice",
        str(SIDE_NICE),
        *options.to_argv(),
    ]
    child_env = dict(os.environ if env is None else env)
    package_root = str(Path(__file__).resolve().parents[2])
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, child_env.get("PYTHONPATH", "")) if p)
    if options.monitor_token:
        child_env[TOKEN_ENV] = options.monitor_token
    with open(run_dir / LOG_FILE, "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=child_env)
    return SideProcess(proc, run_dir, stop_file)


__all__ = ["SIDE_NICE", "SideProcess", "TelemetryOptions", "start_side_process"]
