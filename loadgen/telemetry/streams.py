"""Line sources that run on their own thread: a command's output (an argument list, never a shell)
and a followed file (``tail -F`` semantics).

Each calls ``on_line(line, t_ns)`` for every complete line, with the wall-clock time it was read.
A command that ends is reported (``source_ended`` event with its exit status) and not restarted: a
re-run of ``docker logs -f`` would replay old lines as new events.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from loadgen.telemetry.base import Emit, event

OnLine = Callable[[str, int], None]


def split_command(command: str, what: str) -> list[str]:
    """``shlex.split`` with an error that names the option and the value."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ValueError(f"{what}: cannot split {command!r} into arguments ({exc}); check the quoting") from None
    if not argv:
        raise ValueError(f"{what}: the command is empty")
    return argv


class CommandLines:
    """Runs ``argv`` (stdout and stderr merged) and feeds its lines until it ends or ``stop()``."""

    def __init__(self, name: str, argv: list[str], on_line: OnLine, emit: Emit) -> None:
        self.name = name
        self.argv = argv
        self.on_line = on_line
        self.emit = emit
        self.proc: subprocess.Popen[bytes] | None = None
        self.thread = threading.Thread(target=self._run, name=f"telemetry-{name}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() ends the command and its children
            )
        except OSError as exc:
            self.emit(
                event(
                    "source_unavailable",
                    sampler=self.name,
                    argv=self.argv,
                    message=f"cannot run {self.argv[0]!r}: {exc.strerror}; check the command",
                )
            )
            return
        self.emit(event("started", sampler=self.name, argv=self.argv, pid=self.proc.pid))
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                self.on_line(raw.decode("utf-8", errors="replace"), time.time_ns())
            except Exception as exc:  # one bad line must not end the reader
                self.emit(event("sampler_error", sampler=self.name, message=f"{type(exc).__name__}: {exc}"))
        rc = self.proc.wait()
        self.emit(event("source_ended", sampler=self.name, argv=self.argv, returncode=rc))

    def stop(self, timeout_s: float = 2.0) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout_s)
        self.thread.join(timeout_s)


class FileLines:
    """Follows ``path``: from its end (or its start with ``from_start``), across truncation and
    rotation (a new inode is read from its start); a file that does not exist yet is waited for and
    then read from its start."""

    def __init__(
        self,
        name: str,
        path: Path,
        on_line: OnLine,
        emit: Emit,
        stop: threading.Event,
        from_start: bool = False,
        poll_s: float = 0.2,
    ) -> None:
        self.name = name
        self.path = Path(path)
        self.on_line = on_line
        self.emit = emit
        self.stop_event = stop
        self.from_start = from_start
        self.poll_s = poll_s
        self.thread = threading.Thread(target=self._run, name=f"telemetry-{name}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        fh = None
        inode = None
        pending = b""
        first = True
        waiting_reported = False
        while not self.stop_event.is_set():
            if fh is None:
                try:
                    fh = open(self.path, "rb")  # noqa: SIM115 -- held open across loop iterations
                except OSError as exc:
                    first = False  # a file that appears later is read from its start
                    if not waiting_reported:
                        self.emit(
                            event(
                                "source_unavailable",
                                sampler=self.name,
                                path=str(self.path),
                                message=f"{self.path}: {exc.strerror}; waiting for it to appear",
                            )
                        )
                        waiting_reported = True
                    self.stop_event.wait(self.poll_s)
                    continue
                st = os.fstat(fh.fileno())
                inode = st.st_ino
                if first and not self.from_start:
                    fh.seek(0, os.SEEK_END)
                first = False
                self.emit(event("started", sampler=self.name, path=str(self.path)))
            chunk = fh.read(1 << 16)
            if chunk:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                now = time.time_ns()
                for raw in lines:
                    self.on_line(raw.decode("utf-8", errors="replace"), now)
                continue
            try:
                st = os.stat(self.path)
                rotated = st.st_ino != inode
                truncated = st.st_size < fh.tell()
            except OSError:
                rotated, truncated = True, False
            if rotated:
                fh.close()
                fh = None
                pending = b""
                continue
            if truncated:
                fh.seek(0)
                pending = b""
                continue
            self.stop_event.wait(self.poll_s)
        if fh is not None:
            fh.close()

    def stop(self, timeout_s: float = 2.0) -> None:
        self.stop_event.set()
        self.thread.join(timeout_s)
