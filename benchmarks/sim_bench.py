"""Capacity of one simulator process: streamed tok/s in real time and the engine's step timing error.

    PYTHONPATH=. python benchmarks/sim_bench.py [--profile tiny] [--concurrency 256] [--seconds 10]
        [--max-tokens 512] [--extra-flags "--itl-ms 5 --itl-growth 0"] [--server-cpu 1 --client-cpu 0]

Starts ``python -m loadgen.sim`` pinned to ``--server-cpu`` (``taskset``-style affinity set by the
child before exec), then runs ``--concurrency`` closed-loop streaming users from this process,
pinned to ``--client-cpu``, with a lean asyncio client (raw HTTP/1.1 keep-alive, no JSON decoding
per chunk: it counts ``data:`` events and reads ``usage`` from the last chunk of each stream).
After ``--warmup`` seconds it resets the server's step statistics (``GET /sim/stats/reset``) and
measures for ``--seconds``:

* client side: content chunks received per second, output tokens per second (usage of the
  requests that finished in the window, and chunk count);
* server side: ``sglang:generation_tokens_total`` delta per second, its CPU time per chunk
  (``/proc/PID/stat``), and the step timing error
  (how late each engine step's timer callback ran after the step's scheduled end) p50/p99/max
  from ``/sim/stats``.

A control follows: a bare 5-ms timer loop (``select`` sleeps, no work) pinned to the server's CPU
for ``--noise-seconds``; its lateness is what the machine alone adds (other processes, timer
slack), so the simulator's own share of the step error is the difference.

The throughput the schedule asks for is printed too (for fixed timing: concurrency / step time),
so a server that cannot keep up shows as tok/s below schedule and a growing step error. The last
line is one JSON object with all figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
USAGE_RE = re.compile(rb'"completion_tokens":(\d+)')


class _User(asyncio.Protocol):
    """One keep-alive connection sending the same streaming request again and again."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.bench.request)

    def data_received(self, data: bytes) -> None:
        b = self.bench
        b.chunks += data.count(b"data: {")
        self.buf += data
        if self.buf.endswith(b"0\r\n\r\n") and b"data: [DONE]" in self.buf:
            m = USAGE_RE.findall(self.buf)
            if m:
                b.tokens_done += int(m[-1])
                b.requests_done += 1
            self.buf.clear()
            if b.running and self.transport is not None:
                self.transport.write(b.request)

    def connection_lost(self, exc: Exception | None) -> None:
        self.bench.lost += 1


class Bench:
    def __init__(self, port: int, max_tokens: int) -> None:
        body = json.dumps(
            {
                "model": "sim",
                "messages": [{"role": "user", "content": "Write a long story about a lighthouse keeper. " * 20}],
                "max_tokens": max_tokens,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        ).encode()
        self.request = (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body
        )
        self.port = port
        self.running = True
        self.chunks = 0
        self.tokens_done = 0
        self.requests_done = 0
        self.lost = 0


def _get(port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return bytes(r.read())


def _gen_tokens(port: int) -> float:
    for line in _get(port, "/metrics").decode().splitlines():
        if line.startswith(("sglang:generation_tokens_total{", "vllm:generation_tokens_total{")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _run(port: int, pid: int, args: argparse.Namespace) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    bench = Bench(port, args.max_tokens)
    transports = []
    for i in range(args.concurrency):
        t, _ = await loop.create_connection(lambda: _User(bench), "127.0.0.1", port)
        transports.append(t)
        if args.stagger_s > 0 and i < args.concurrency - 1:
            await asyncio.sleep(args.stagger_s)
    await asyncio.sleep(args.warmup)
    await loop.run_in_executor(None, _get, port, "/sim/stats/reset")
    g0 = await loop.run_in_executor(None, _gen_tokens, port)
    c0, d0, r0, t0 = bench.chunks, bench.tokens_done, bench.requests_done, time.monotonic()
    cpu0 = _cpu_s(pid)
    await asyncio.sleep(args.seconds)
    c1, d1, r1, t1 = bench.chunks, bench.tokens_done, bench.requests_done, time.monotonic()
    cpu1 = _cpu_s(pid)
    g1 = await loop.run_in_executor(None, _gen_tokens, port)
    stats = json.loads(await loop.run_in_executor(None, _get, port, "/sim/stats"))
    bench.running = False
    for t in transports:
        t.close()
    span = t1 - t0
    late = stats["step_lateness_ms"]
    return {
        "window_s": round(span, 2),
        "client_chunks_per_s": round((c1 - c0) / span, 1),
        "client_usage_tok_s": round((d1 - d0) / span, 1),
        "requests_per_s": round((r1 - r0) / span, 2),
        "server_tok_s": round((g1 - g0) / span, 1),
        "server_cpu_share": round((cpu1 - cpu0) / span, 3),
        "server_cpu_us_per_chunk": round((cpu1 - cpu0) / max(1, c1 - c0) * 1e6, 2),
        "steps": stats["steps"],
        "step_error_p50_ms": round(late["p50"], 3),
        "step_error_p99_ms": round(late["p99"], 3),
        "step_error_max_ms": round(late["max"], 3),
        "connections_lost": bench.lost,
    }


_NOISE = """
import os, select, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
late = []
end = time.monotonic() + float(sys.argv[2])
target = time.monotonic()
while target < end:
    target += 0.005
    delay = target - time.monotonic()
    if delay > 0:
        select.select([], [], [], delay)
    late.append(time.monotonic() - target)
late.sort()
print(late[len(late) // 2] * 1e3, late[int(len(late) * 0.99)] * 1e3)
"""


def timer_noise(cpu: int, seconds: float, realtime: bool) -> tuple[float, float]:
    """p50/p99 lateness (ms) of a bare 5-ms timer loop on ``cpu``: what the machine alone costs."""

    def fifo() -> None:
        if realtime:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))

    out = subprocess.run(
        [sys.executable, "-c", _NOISE, str(cpu), str(seconds)], capture_output=True, check=True, preexec_fn=fifo
    )
    p50, p99 = out.stdout.split()
    return float(p50), float(p99)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--stagger-s", type=float, default=0.002, help="delay between opening users")
    ap.add_argument("--extra-flags", default="", help="more simulator flags, shell-quoted")
    ap.add_argument("--server-cpu", type=int, default=1)
    ap.add_argument("--client-cpu", type=int, default=0)
    ap.add_argument(
        "--realtime",
        action="store_true",
        help="run the simulator (and the control loop) under SCHED_FIFO priority 10 (needs root): shows the "
        "server's own timing precision on a busy shared machine",
    )
    ap.add_argument("--noise-seconds", type=float, default=3.0, help="control: bare timer loop on the server CPU")
    args = ap.parse_args()

    ncpu = os.cpu_count() or 1
    server_cpu = args.server_cpu % ncpu
    client_cpu = args.client_cpu % ncpu
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        cmd = [sys.executable, "-m", "loadgen.sim", "--profile", args.profile, "--port", "0", "--port-file",
               str(port_file), "--startup-s", "0", "--log-file", str(Path(tmp) / "sim.log"),
               *shlex.split(args.extra_flags)]  # fmt: skip
        env = dict(os.environ, PYTHONPATH=str(REPO))

        def pin() -> None:
            os.sched_setaffinity(0, {server_cpu})
            if args.realtime:
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))

        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, preexec_fn=pin)
        try:
            deadline = time.monotonic() + 20
            while not port_file.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    print(f"simulator did not start (rc={proc.returncode})", file=sys.stderr)
                    return 1
                time.sleep(0.05)
            port = int(port_file.read_text())
            while True:
                try:
                    if _get(port, "/health") == b"":
                        break
                except OSError:
                    pass
                time.sleep(0.05)
            os.sched_setaffinity(0, {client_cpu})
            result = asyncio.run(_run(port, proc.pid, args))
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    noise_p50, noise_p99 = (
        timer_noise(server_cpu, args.noise_seconds, args.realtime) if args.noise_seconds > 0 else (0.0, 0.0)
    )
    result.update(
        bare_timer_p50_ms=round(noise_p50, 3),
        bare_timer_p99_ms=round(noise_p99, 3),
        profile=args.profile,
        concurrency=args.concurrency,
        extra_flags=args.extra_flags,
        realtime=args.realtime,
        server_cpu=server_cpu,
        client_cpu=client_cpu,
        cpus=ncpu,
    )
    print(
        f"profile {args.profile} {args.extra_flags} C={args.concurrency}: server {result['server_tok_s']:.0f} tok/s, "
        f"client {result['client_chunks_per_s']:.0f} chunks/s, {result['client_usage_tok_s']:.0f} tok/s by usage; "
        f"server CPU {result['server_cpu_share']:.0%} = {result['server_cpu_us_per_chunk']:.1f} us/chunk; "
        f"step error p50 {result['step_error_p50_ms']:.3f} ms p99 {result['step_error_p99_ms']:.3f} ms "
        f"max {result['step_error_max_ms']:.3f} ms over {result['steps']} steps; bare timer loop on the same CPU: "
        f"p50 {noise_p50:.3f} ms p99 {noise_p99:.3f} ms"
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
