"""The wire as a second truth: TTFT as loopback packets show it, per request, for the peers' harness.

The peers' mock server stamps its truth from when *it* has read a request to when it wrote the first
token. A server that reads requests late (a busy Node event loop, a cold JIT) charges that delay to
every client as error, and no client can see or mark it. The packets cannot lie about it: on
loopback, a request packet's kernel timestamp is when the client sent it and the first response
packet's is when the server wrote the first token, so ``first response packet - request packet`` is
the TTFT any client could at best measure.

``capture`` runs ``tcpdump`` on ``lo`` (pinned to the server's CPU, nanosecond stamps) while the
harness runs; ``read_calls`` finds each request (its ``X-Request-Id`` header, which our client sets
to the record's id) and the first response bytes on the same connection; ``compare_run`` matches a
run directory's records to them one by one. Needs ``tcpdump`` and the right to capture (root or
CAP_NET_RAW); without either, ``capture`` says why and yields None.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

SNAPLEN = 256  # the request line and headers up to X-Request-Id; response bytes are only timed


@dataclass(slots=True)
class WireCall:
    request_ns: int  # kernel stamp of the request's first packet (the client's send)
    first_response_ns: int | None = None  # kernel stamp of the first response bytes on its connection


@contextlib.contextmanager
def capture(port: int, path: Path, cpu: int | None = None, snaplen: int = SNAPLEN) -> Iterator[str | None]:
    """Capture TCP port ``port`` on loopback into ``path`` for the duration of the block; yields None
    when capturing, else the reason it cannot. ``snaplen``: bytes kept of each packet (enough for
    the request's headers; more to read into response events, as ``read_calls(output_only=True)``
    does)."""
    exe = shutil.which("tcpdump")
    if exe is None:
        yield "tcpdump is not installed (apt-get install tcpdump)"
        return
    cmd = [exe, "-i", "lo", "-s", str(snaplen), "-B", "65536", "--time-stamp-precision=nano", "-U", "-w", str(path)]
    cmd.append(f"tcp port {port}")
    if cpu is not None and shutil.which("taskset"):
        cmd = ["taskset", "-c", str(cpu), *cmd]
    log = path.with_suffix(".log")
    with open(log, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 5
    while b"listening on" not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            yield f"tcpdump could not capture: {log.read_text(errors='replace').strip()[:200]}"
            return
        time.sleep(0.05)
    try:
        yield None
    finally:
        proc.send_signal(signal.SIGINT)  # flushes its buffer
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _packets(path: Path) -> Iterator[tuple[int, bytes]]:
    """(kernel stamp ns, link-layer frame) of every packet of a pcap file (Ethernet, or Linux
    cooked v1/v2 frames)."""
    data = path.read_bytes()
    magic, _, _, _, _, _, link = struct.unpack("<IHHiIII", data[:24])
    if magic not in (0xA1B2C3D4, 0xA1B23C4D):
        raise ValueError(f"{path}: not a little-endian pcap file (magic {magic:#x})")
    scale = 1 if magic == 0xA1B23C4D else 1000
    skip = {1: 14, 113: 16, 276: 20}.get(link)
    if skip is None:
        raise ValueError(f"{path}: link type {link} not read here (Ethernet, Linux cooked only)")
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack_from("<IIII", data, off)
        off += 16
        yield sec * 1_000_000_000 + frac * scale, data[off + skip : off + incl]
        off += incl


def _carries_output(payload: bytes) -> bool:
    """A chat stream's packet with output text: a non-empty ``"content":"`` delta."""
    at = payload.find(b'"content":"')
    return at >= 0 and payload[at + 11 : at + 12] not in (b'"', b"")


def read_calls(path: Path, port: int, output_only: bool = False) -> dict[str, WireCall]:
    """Every request to ``port`` that carries an ``X-Request-Id``, with its first response packet.
    ``output_only``: the first response packet that carries output text of a chat stream instead;
    where a server writes its head and a role-only chunk before the first token (vLLM), the first
    response bytes are not the first token. Capture with a ``snaplen`` that reaches the delta (512
    for vLLM's chunks)."""
    calls: dict[str, WireCall] = {}
    pending: dict[int, WireCall] = {}  # client port -> the call waiting for its first response bytes
    for t_ns, ip in _packets(path):
        if len(ip) < 20 or ip[0] >> 4 != 4:
            continue
        tcp = ip[(ip[0] & 15) * 4 :]
        sport, dport = struct.unpack_from(">HH", tcp)
        payload = tcp[(tcp[12] >> 4) * 4 :]
        if not payload:
            continue
        if dport == port and payload.startswith(b"POST "):
            head = payload.split(b"\r\n\r\n", 1)[0]
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"x-request-id":
                    call = WireCall(t_ns)
                    calls[value.strip().decode("latin-1")] = call
                    pending[sport] = call
                    break
        elif sport == port and dport in pending and (not output_only or _carries_output(payload)):
            pending.pop(dport).first_response_ns = t_ns
    return calls


def stats(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "mean": None, "p50": None, "p99": None, "max": None}
    v = sorted(values)
    n = len(v)
    return {
        "n": n,
        "mean": sum(v) / n,
        "p50": v[n // 2],
        "p99": v[min(n - 1, max(0, -(-99 * n // 100) - 1))],  # nearest rank, as the mock's truth
        "max": v[-1],
    }


def compare_run(run_dir: Path, calls: dict[str, WireCall]) -> dict[str, Any]:
    """Our TTFT per request next to the wire's, from a run directory's records (ms): ``ours`` and
    ``wire`` TTFT statistics over the matched requests, ``error`` = ours - wire per request, and
    ``send_lag`` = request packet - our send stamp (how late the request left the process)."""
    ours: list[float] = []
    wire: list[float] = []
    error: list[float] = []
    send_lag: list[float] = []
    unmatched = 0
    for f in sorted(run_dir.glob("requests*.jsonl")):
        for line in f.read_bytes().splitlines():
            rec = orjson.loads(line)
            first = rec.get("first_chunk_ns")
            if not first or rec.get("error_class"):
                continue
            call = calls.get(rec.get("header_id") or rec["id"])
            if call is None or call.first_response_ns is None:
                unmatched += 1
                continue
            sent = rec.get("intended_ns") or rec["sent_ns"]
            mine = (first - sent) / 1e6
            theirs = (call.first_response_ns - call.request_ns) / 1e6
            ours.append(mine)
            wire.append(theirs)
            error.append(mine - theirs)
            send_lag.append((call.request_ns - rec["sent_ns"]) / 1e6)
    return {
        "ours": stats(ours),
        "wire": stats(wire),
        "error": stats(error),
        "send_lag": stats(send_lag),
        "unmatched": unmatched,
    }


def main(argv: list[str] | None = None) -> int:
    """``python benchmarks/wire.py CAPTURE.pcap PORT RUN_DIR...``: the comparison of each run."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3:
        print(main.__doc__)
        return 2
    calls = read_calls(Path(args[0]), int(args[1]))
    for d in args[2:]:
        print(d, orjson.dumps(compare_run(Path(d), calls)).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["WireCall", "capture", "compare_run", "read_calls"]
