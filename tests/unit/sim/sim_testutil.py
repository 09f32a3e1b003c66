"""Start the simulator as a real subprocess on 127.0.0.1 and talk HTTP to it (stdlib client)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]


class SimProc:
    """``python -m loadgen.sim --port 0 --port-file F ...``; the port is read from F."""

    def __init__(self, tmp_path: Path, *args: str, wait_ready: bool = True) -> None:
        self.port_file = tmp_path / f"sim-{time.monotonic_ns()}.port"
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "loadgen.sim", "--port", "0", "--port-file", str(self.port_file), *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 15
        while not self.port_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                _, err = self.proc.communicate(timeout=5)
                raise RuntimeError(f"simulator did not start: rc={self.proc.returncode} {err.decode()[-2000:]}")
            time.sleep(0.02)
        self.port = int(self.port_file.read_text())
        if wait_ready:
            self.wait_ready()

    def wait_ready(self, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.get("/health")[0] == 200:
                return
            time.sleep(0.02)
        raise RuntimeError("simulator not ready")

    def conn(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)

    def get(self, path: str) -> tuple[int, bytes]:
        c = self.conn()
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def post(
        self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        c = self.conn()
        try:
            c.request(
                "POST", path, body=json.dumps(body), headers={"Content-Type": "application/json", **(headers or {})}
            )
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def stream(
        self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None, timeout_s: float = 10.0
    ) -> tuple[int, list[tuple[int, bytes]]]:
        """POST a streaming request; return the status and (arrival time_ns, event payload) pairs."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout_s)
        events: list[tuple[int, bytes]] = []
        try:
            c.request(
                "POST", path, body=json.dumps(body), headers={"Content-Type": "application/json", **(headers or {})}
            )
            r = c.getresponse()
            buf = b""
            for now, data in timed_reads(r):
                buf += data
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    if event.startswith(b"data: "):
                        events.append((now, event[6:]))
            return r.status, events
        finally:
            c.close()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        if self.proc.stderr:
            self.proc.stderr.close()
        return self.proc.returncode


def timed_reads(r: http.client.HTTPResponse) -> Iterator[tuple[int, bytes]]:
    """Each read of a response's body with the time (ns) it returned, until the server ends the
    body or the connection's timeout passes with nothing to read."""
    while True:
        try:
            data = r.read1(65536)
        except TimeoutError:
            return
        if not data:
            return
        yield time.time_ns(), data


def parse_prometheus(text: str) -> dict[str, float]:
    """``name{labels}`` -> value for every sample line (labels kept verbatim in the key)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        out[key] = float(value)
    return out


def by_name(samples: dict[str, float], name: str) -> list[float]:
    return [v for k, v in samples.items() if k.split("{", 1)[0] == name]
