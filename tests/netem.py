"""A host's way out delayed, jittered and lossy, for kernels without the ``netem`` scheduler.

``tc qdisc ... netem`` is the usual way; where the kernel lacks it (``Specified qdisc kind is
unknown``) this does the same thing one layer up, on the same IP packets: run inside a host's network
namespace (tests/netns.py, ``Hosts.emulate``), it makes a TUN device, routes the host's outgoing
subnet traffic into it, holds every packet for ``delay ± jitter`` (uniform, like netem without a
distribution table), drops each with probability ``loss``, and writes the rest back into the
namespace, where a policy rule sends what comes from the TUN device out of ``eth0``. Packets keep
their order (a jittered packet waits for the one before it), so TCP sees delay and loss, never
reordering. The process runs at real-time priority where it may: netem's timers run in the
kernel, above every process, and this plays their part.

    python -m tests.netem --subnet 10.231.7.0/24 --delay-ms 20 [--jitter-ms 2] [--loss 0.01]

It prints ``ready`` once the routes are in place and runs until killed; ``--stats FILE`` gets the
counts of packets forwarded and dropped when it is stopped with SIGTERM.
"""

from __future__ import annotations

import argparse
import fcntl
import heapq
import json
import os
import random
import select
import signal
import struct
import subprocess
import sys
import time

_TUNSETIFF = 0x400454CA
_IFF_TUN = 0x0001
_IFF_NO_PI = 0x1000
_TABLE = "4242"


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if proc.returncode != 0:
        raise SystemExit(f"netem: ip {' '.join(args)}: {proc.stderr.strip()}")


def _sysctl(key: str, value: str) -> None:
    with open(f"/proc/sys/{key.replace('.', '/')}", "w") as f:
        f.write(value)


def open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", name.encode(), _IFF_TUN | _IFF_NO_PI))
    return fd


def route_through(dev: str, subnet: str, out: str = "eth0") -> None:
    """The namespace's packets for ``subnet`` into ``dev``; what ``dev`` gives back, out of ``out``."""
    _ip("link", "set", dev, "up")
    for key in ("all", "default", dev, out):
        _sysctl(f"net.ipv4.conf.{key}.rp_filter", "0")
        _sysctl(f"net.ipv4.conf.{key}.accept_local", "1")  # our own source address, back from dev
    _sysctl("net.ipv4.ip_forward", "1")
    _sysctl(f"net.ipv4.conf.{out}.send_redirects", "0")
    _sysctl("net.ipv4.conf.all.send_redirects", "0")
    _ip("route", "add", subnet, "dev", out, "table", _TABLE)
    _ip("rule", "add", "iif", dev, "lookup", _TABLE, "priority", "100")
    _ip("route", "replace", subnet, "dev", dev)


def _realtime() -> None:
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
    except (OSError, AttributeError):
        pass  # held at normal priority: the delay is then as good as the scheduler's


TICK_S = 0.001  # how often the loop wakes, packets or not, to see its own stalls
STALL_S = 0.002  # a wake-up this much later than asked for is a stall


def forward(fd: int, delay_s: float, jitter_s: float, loss: float, seed: int) -> dict[str, object]:
    """Holds, drops and writes back packets until SIGTERM. Gives the counts, and the stalls: the
    spans (wall clock, ns) in which this process was not running when it should have been (the
    scheduler or the hypervisor took its CPU away), so packets read or written then were late by
    up to the span; a check of timing to the millisecond leaves those spans out."""
    rng = random.Random(seed)
    held: list[tuple[float, int, bytes]] = []
    counts = {"forwarded": 0, "dropped": 0, "write_errors": 0}
    stalls: list[tuple[int, int]] = []
    last_release = 0.0
    n = 0
    stop = False

    def _stop(_sig: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)

    def stalled(since: float, now: float) -> None:
        wall = time.time_ns()
        stalls.append((wall - int((now - since) * 1e9), wall))

    while not stop:
        now = time.monotonic()
        if held and now - held[0][0] > STALL_S:  # held past its time since the last wake-up
            stalled(held[0][0], now)
        while held and held[0][0] <= now:
            _, _, pkt = heapq.heappop(held)
            try:
                os.write(fd, pkt)
                counts["forwarded"] += 1
            except OSError:
                counts["dropped"] += 1
                counts["write_errors"] += 1
        timeout = min(max(0.0, held[0][0] - now), TICK_S) if held else TICK_S
        due = now + timeout
        try:
            ready, _, _ = select.select([fd], [], [], timeout)
        except InterruptedError:
            continue
        arrived = time.monotonic()
        if arrived - due > STALL_S:  # back later than asked: a packet may have waited unread since
            stalled(due, arrived)
        if not ready:
            continue
        while True:
            try:
                pkt = os.read(fd, 65535)
            except BlockingIOError:
                break
            if loss and rng.random() < loss:
                counts["dropped"] += 1
                continue
            wait = delay_s + (rng.uniform(-jitter_s, jitter_s) if jitter_s else 0.0)
            release = max(arrived + max(wait, 0.0), last_release)
            last_release = release
            n += 1
            heapq.heappush(held, (release, n, pkt))
    return {**counts, "stalls": [list(s) for s in stalls]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.netem", description=__doc__.split("\n\n")[0])
    p.add_argument("--subnet", required=True, help="the hosts' subnet, e.g. 10.231.7.0/24")
    p.add_argument("--dev", default="emu0")
    p.add_argument("--out", default="eth0", help="the interface the packets leave by")
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--jitter-ms", type=float, default=0.0)
    p.add_argument("--loss", type=float, default=0.0, help="probability of dropping a packet, 0..1")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--stats", help="write the packet counts here as JSON on exit")
    a = p.parse_args(argv)
    if not 0.0 <= a.loss < 1.0 or a.delay_ms < 0 or a.jitter_ms < 0 or a.jitter_ms > a.delay_ms:
        p.error("need 0 <= loss < 1 and 0 <= jitter <= delay")
    fd = open_tun(a.dev)
    route_through(a.dev, a.subnet, a.out)
    _realtime()
    print("ready", flush=True)
    counts = forward(fd, a.delay_ms / 1e3, a.jitter_ms / 1e3, a.loss, a.seed)
    if a.stats:
        with open(a.stats, "w") as f:
            json.dump(counts, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
