"""Separate hosts on one machine, for tests that need real network hops: one network namespace per
host, each with an ``eth0`` on a bridge of its own (in a switch namespace), addresses in
10.231.N.0/24, and netem for delay, jitter and loss on a host's way out (the kernel's, or
tests/netem.py's in user space where the kernel has none).

Every namespace a ``Hosts`` makes, it removes (and with them their links and processes' sockets);
processes started with ``Hosts.popen`` are killed first. ``hosts_or_skip`` skips a test, with the
reason, where namespaces cannot be made (not root, no ``ip``, a container without the rights).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip()}")


class Hosts:
    """Namespaces named ``<prefix>-<host>``; ``addr[host]`` is the host's address."""

    def __init__(self, names: Sequence[str]) -> None:
        tag = os.getpid() % 100_000
        self.prefix = f"lg{tag}"
        self.subnet = f"10.231.{tag % 250}"
        self.switch = f"{self.prefix}-sw"
        self.names = list(names)
        self.addr = {name: f"{self.subnet}.{i + 1}" for i, name in enumerate(self.names)}
        self.made: list[str] = []
        self.procs: list[subprocess.Popen[Any]] = []
        self.emulators: dict[str, subprocess.Popen[Any]] = {}

    def ns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def up(self) -> None:
        _ip("netns", "add", self.switch)
        self.made.append(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i, host in enumerate(self.names):
            ns = self.ns(host)
            _ip("netns", "add", ns)
            self.made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            a, b = f"{self.prefix}h{i}", f"{self.prefix}s{i}"
            _ip("link", "add", a, "type", "veth", "peer", "name", b)
            _ip("link", "set", a, "netns", ns)
            _ip("link", "set", b, "netns", self.switch)
            _ip("-n", ns, "link", "set", a, "name", "eth0")
            _ip("-n", ns, "addr", "add", f"{self.addr[host]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", self.switch, "link", "set", b, "master", "br0")
            _ip("-n", self.switch, "link", "set", b, "up")

    def netem(self, host: str, delay_ms: float, jitter_ms: float = 0.0, loss: float = 0.0) -> str:
        """The host's way out delayed by ``delay_ms ± jitter_ms`` (uniform) with each packet lost at
        probability ``loss``: ``tc netem`` where the kernel has it, else the same in user space on a
        TUN device (tests/netem.py). Returns which, for the test's output."""
        spec = ["delay", f"{delay_ms:g}ms"] + ([f"{jitter_ms:g}ms"] if jitter_ms else [])
        spec += ["loss", f"{loss * 100:g}%"] if loss else []
        proc = subprocess.run(
            ["ip", "netns", "exec", self.ns(host), "tc", "qdisc", "replace", "dev", "eth0", "root", "netem", *spec],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if proc.returncode == 0:
            return f"tc netem {' '.join(spec)} on {host}"
        argv = [sys.executable, "-m", "tests.netem", "--subnet", f"{self.subnet}.0/24", "--delay-ms", f"{delay_ms}"]
        argv += ["--jitter-ms", f"{jitter_ms}", "--loss", f"{loss}", "--stats", f"/tmp/{self.ns(host)}-netem.json"]
        emu = self.popen(host, argv, cwd=Path(__file__).parent.parent, stdout=subprocess.PIPE, text=True)
        self.emulators[host] = emu
        line = emu.stdout.readline().strip() if emu.stdout else ""
        if line != "ready":
            raise RuntimeError(f"the user-space netem did not start on {host}: {line!r}")
        return f"netem in user space ({proc.stderr.strip()}): {' '.join(spec)} on {host}"

    def netem_counts(self, host: str) -> dict[str, Any]:
        """Stops the user-space netem on ``host`` and gives its packets forwarded and dropped, and
        its stalls (wall-clock spans, ns, when it was not running: packets then were late by up to
        the span); {} where the kernel's netem ran."""
        emu = self.emulators.pop(host, None)
        if emu is None:
            return {}
        emu.terminate()
        emu.wait(10)
        path = Path(f"/tmp/{self.ns(host)}-netem.json")
        counts = dict(json.loads(path.read_text()))
        path.unlink()
        return counts

    def link(self, host: str, up: bool) -> None:
        """Cut a host off the network (its eth0 down), or put it back."""
        _ip("-n", self.ns(host), "link", "set", "eth0", "up" if up else "down")

    def popen(self, host: str, argv: Sequence[str], **kw: Any) -> subprocess.Popen[Any]:
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns(host), *argv], **kw)
        self.procs.append(proc)
        return proc

    def run(self, host: str, argv: Sequence[str], **kw: Any) -> subprocess.CompletedProcess[Any]:
        return subprocess.run(["ip", "netns", "exec", self.ns(host), *argv], **kw)

    def down(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    pass
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
        self.made = []


def _why_not() -> str | None:
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux's"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "needs iproute2 (ip, tc)"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    return None


@contextmanager
def hosts_or_skip(*names: str) -> Iterator[Hosts]:
    why = _why_not()
    if why is not None:
        pytest.skip(why)
    hosts = Hosts(names)
    try:
        try:
            hosts.up()
        except RuntimeError as exc:
            pytest.skip(f"cannot make network namespaces here: {exc}")
        yield hosts
    finally:
        hosts.down()
