"""Is the load generator ever the bottleneck? Our client next to the bare Locust loop, in one run.

    PYTHONPATH=. python benchmarks/run.py [--quick] [--reps 3] [--client-cpu 0 --server-cpu 1]
        [--peers-venvs DIR --peers-tokenizer DIR] [--no-sim] [--no-analysis] [--no-openai]
    PYTHONPATH=. python benchmarks/run.py --truth-sim [--reps 3] [--truth-conc 256,1024]
    PYTHONPATH=. python benchmarks/run.py --peers-only --peers-venvs DIR [--peers-suite accuracy]
        [--peers-acc-conc 256] [--peers-reps 5] [--peers-clients llm-loadgen,locust-fast-orjson]

What runs (client pinned to ``--client-cpu``, server to ``--server-cpu``, this harness next to the
server; every client is a real process):

* server: the Node mock of ``../shared/bench-peers/mock_server.js`` when ``node`` is installed
  (two instances: unpaced, and paced at TTFT 50 ms / ITL 20 ms, which records the real emission
  time of every token); otherwise our simulator, unpaced only (no emission truth: no accuracy rows).
* throughput: one ``loadgen ramp`` process with every feature of a real run (per-chunk
  timestamps, records written to a run directory, Locust statistics, the telemetry side process
  with ``--gpu-source none`` and a /metrics probe) steps through concurrency 1, 64, 256, 1024 at
  256 tokens per response. For each step's steady window (from ``steps.jsonl``, trimmed 10 % at
  both ends) the server's counters give requests/s and chunks/s, ``/proc/PID/stat`` gives the CPU
  of the load-generator process and of its telemetry child separately, and ``/proc/stat`` the
  other load on the client core (runs above ``--max-foreign`` % are excluded from the medians).
* reference: the bare Locust FastHttpUser + orjson loop (``locustfile_llm.py FastSSEUser``, the
  peers' baseline), measured the same way at the same concurrencies (quick: 256 only).
* accuracy: ``loadgen ramp`` at concurrency 1 and 256 against the paced server (128 tokens, all
  users start together, so the 256 streams are synchronized); TTFT and per-gap ITL (mean, p99)
  from the run's records minus the server's truth for the same requests; the baseline likewise.
* openai transport (full mode): ``loadgen ramp --transport openai`` at 64 and 256.
* truth-sim (full mode, or alone with ``--truth-sim``): steady state against our simulator
  (``--profile h200-llama-8b --emission-log``): ``loadgen ramp`` at 256 and 1024 users (5 s warm-up
  excluded, 128 tokens, ignore_eos, one process); per request sent in the steady window, the first
  chunk's arrival minus the simulator's stamp just before it wrote that chunk (p50/mean/p99/max),
  how many first chunks the records mark as upper bounds, and whether the step was marked timing
  uncertain. Target: p99 <= 5 ms and max <= 20 ms, or the step marked.
* peers (full mode, or alone with ``--peers-only``): ``../shared/bench-peers/runner.py`` with our
  ``loadgen ramp`` (``llm-loadgen``) and the bare Locust loop (``locust-fast-orjson``) side by side
  with every peer whose environment is in ``--peers-venvs``; its Node mocks are started and warmed
  here first (the harness reuses them).

Every Node mock is warmed before it is measured against (a cold one is slow for its first ~1,500
requests, and its truth would charge that to the client). Client and server run at ``--nice``
(default -20, as the peers' runner; ignored without the privilege), never real-time unless
``--realtime``.
* simulator capacity (``benchmarks/sim_bench.py``) and analysis + report of a 1,000,000-record run
  (``benchmarks/analysis_bench.py``; quick mode: 100,000 records).

``--quick`` runs one repetition of short steps (about 80 s); its last line is one JSON object with
``ours_us_per_chunk``, ``baseline_us_per_chunk`` (C=256), ``ttft_err_mean_ms``,
``ttft_err_p99_ms``, ``itl_err_p99_ms`` (C=256 paced), ``sim_tok_s`` and more. Full mode repeats
every point ``--reps`` times (interleaved) and prints medians with (min-max) ranges. Linux only.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import wire  # benchmarks/wire.py, beside this file

REPO = Path(__file__).resolve().parents[1]
PEERS = REPO.parent / "shared" / "bench-peers"
CLK = os.sysconf("SC_CLK_TCK")
OSL_THROUGHPUT = 256
OSL_ACCURACY = 128
TTFT_MS = 50.0
ITL_MS = 20.0
MODEL = "mock-model"

Row = dict[str, Any]


# ------------------------------------------------------------------------------------ /proc
def proc_cpu_s(pid: int) -> float:
    """utime + stime of one process (its threads included, its children not)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            s = fh.read()
    except OSError:
        return math.nan
    f = s[s.rfind(")") + 2 :].split()
    return (int(f[11]) + int(f[12])) / CLK


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                s = fh.read()
        except OSError:
            continue
        if int(s[s.rfind(")") + 2 :].split()[1]) == pid:
            out.append(int(entry))
    return out


def cpu_busy_s(cpu: int) -> float:
    with open("/proc/stat") as fh:
        for line in fh:
            if line.startswith(f"cpu{cpu} "):
                f = [int(x) for x in line.split()[1:]]
                return (sum(f[:8]) - f[3] - f[4]) / CLK
    return math.nan


# ------------------------------------------------------------------------------------ HTTP
def http_json(url: str, method: str = "GET") -> Any:
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


NICE = [0]  # niceness of the client and server processes (--nice)
REALTIME = [False]  # accuracy clients under SCHED_FIFO (--realtime)


def pinned(cpu: int, realtime: bool = False) -> Callable[[], None]:
    nice = NICE[0]
    rt = realtime and REALTIME[0]

    def pin() -> None:
        os.sched_setaffinity(0, {cpu})
        if nice:
            try:
                os.nice(nice)
            except OSError:
                pass  # not permitted (not root): run at the default priority
        if rt:
            try:
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
            except OSError:
                pass

    return pin


class Server:
    """The fast local server: Node mock (unpaced + paced) or, without node, our simulator (unpaced)."""

    def __init__(self, cpu: int, work: Path) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.cpu = cpu
        self.work = work
        self.kind = "node" if shutil.which("node") and (PEERS / "mock_server.js").exists() else "sim"
        self.unpaced = free_port()
        self.paced: int | None = None
        if self.kind == "node":
            self.paced = free_port()
            for port, ttft, itl in ((self.unpaced, 0.0, 0.0), (self.paced, TTFT_MS, ITL_MS)):
                env = dict(os.environ, MOCK_PORT=str(port), MOCK_TTFT_MS=str(ttft), MOCK_ITL_MS=str(itl))
                self._start(["node", str(PEERS / "mock_server.js")], env, f"mock-{port}.log")
        else:
            cmd = [sys.executable, "-m", "loadgen.sim", "--profile", "tiny", "--port", str(self.unpaced),
                   "--startup-s", "0", "--ttft-ms", "0", "--itl-ms", "0"]  # fmt: skip
            self._start(cmd, dict(os.environ, PYTHONPATH=str(REPO)), "sim.log")
        deadline = time.monotonic() + 20
        for port in self.ports():
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
                    break
                except OSError as exc:
                    if time.monotonic() > deadline:
                        msg = f"the {self.kind} server on port {port} did not start; see the logs in {self.work}"
                        raise SystemExit(msg) from exc
                    time.sleep(0.05)

    def describe(self) -> str:
        if self.kind == "node":
            return f"Node mock server ({PEERS / 'mock_server.js'}), node {_version(['node', '--version'])}"
        return "our simulator (python -m loadgen.sim --profile tiny --ttft-ms 0 --itl-ms 0); no emission truth"

    def ports(self) -> list[int]:
        return [p for p in (self.unpaced, self.paced) if p is not None]

    def _start(self, cmd: list[str], env: dict[str, str], log: str) -> None:
        fh = open(self.work / log, "wb")  # noqa: SIM115 - lives as long as the server
        pin = pinned(self.cpu)
        self.procs.append(subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, preexec_fn=pin))

    def stats(self) -> tuple[int, int]:
        """(completed requests, chunks) so far on the unpaced server."""
        if self.kind == "node":
            st = http_json(f"http://127.0.0.1:{self.unpaced}/_mock/stats")
            return int(st["completed"]), int(st["chunks"])
        with urllib.request.urlopen(f"http://127.0.0.1:{self.unpaced}/metrics", timeout=5) as r:
            text = r.read().decode()
        req = tok = 0.0
        for line in text.splitlines():
            if line.startswith(("sglang:num_requests_total", "vllm:request_success_total")):
                req += float(line.rsplit(" ", 1)[1])
            elif line.startswith(("sglang:generation_tokens_total", "vllm:generation_tokens_total")):
                tok += float(line.rsplit(" ", 1)[1])
        return int(req), int(tok)

    def reset_truth(self) -> None:
        http_json(f"http://127.0.0.1:{self.paced}/_mock/reset", method="POST")

    def truth(self) -> Any:
        return http_json(f"http://127.0.0.1:{self.paced}/_mock/truth")

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()


def _version(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"


# ------------------------------------------------------------------------------------ sampling
class Sampler(threading.Thread):
    """Every ``period`` s: wall ns, server (completed, chunks), CPU s of the client process, of its
    children (the telemetry side process), and busy s of the client core."""

    def __init__(self, server: Server, pid: int, client_cpu: int, period: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.server, self.pid, self.client_cpu, self.period = server, pid, client_cpu, period
        self.samples: list[tuple[int, int, int, float, float, float]] = []
        self.stop_event = threading.Event()
        self._dead: dict[int, float] = {}

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                done, chunks = self.server.stats()
                kids = 0.0
                for c in children(self.pid):
                    v = proc_cpu_s(c)
                    if not math.isnan(v):
                        self._dead[c] = v
                kids = sum(self._dead.values())
                self.samples.append(
                    (time.time_ns(), done, chunks, proc_cpu_s(self.pid), kids, cpu_busy_s(self.client_cpu))
                )
            except (OSError, ValueError, KeyError):
                pass
            self.stop_event.wait(self.period)

    def finish(self) -> None:
        self.stop_event.set()
        self.join(timeout=5)

    def window(self, t0_ns: int, t1_ns: int) -> Row | None:
        """Rates over the samples inside [t0, t1]: server req/s and chunks/s, client CPU."""
        idx = [i for i, s in enumerate(self.samples) if t0_ns <= s[0] <= t1_ns]
        if len(idx) < 3:
            return None
        a, b = self.samples[idx[0]], self.samples[idx[-1]]
        dt = (b[0] - a[0]) / 1e9
        dreq, dch, dcpu, dkid, dbusy = b[1] - a[1], b[2] - a[2], b[3] - a[3], b[4] - a[4], b[5] - a[5]
        if dch <= 0 or dt <= 0:
            return None
        return {
            "window_s": dt,
            "req_s": dreq / dt,
            "chunks_s": dch / dt,
            "cpu_pct": 100 * dcpu / dt,
            "us_per_chunk": 1e6 * dcpu / dch,
            "telemetry_cpu_pct": 100 * dkid / dt,
            "foreign_pct": 100 * (dbusy - dcpu - dkid) / dt,
        }


def middle(t0: int, t1: int, skip: float = 0.1) -> tuple[int, int]:
    d = t1 - t0
    return t0 + int(skip * d), t1 - int(skip * d)


# ------------------------------------------------------------------------------------ our client
def ramp_cmd(url: str, concs: Sequence[int], warmup: float, step: float, max_tokens: int, out: Path,
             transport: str = "fast", drain: float = 0.0) -> list[str]:  # fmt: skip
    return [
        sys.executable, "-m", "loadgen.cli", "ramp", "--url", url, "--model", MODEL,
        "--concurrency", ",".join(map(str, concs)), "--warmup-seconds", f"{warmup:g}",
        "--step-seconds", f"{step:g}", "--max-tokens", str(max_tokens), "--drain-seconds", f"{drain:g}",
        "--transport", transport, "--gpu-source", "none", "--wait-ready", "5", "--out", str(out),
        "--label", "bench",
    ]  # fmt: skip


class ForeignLoad:
    """Other processes' share of one CPU while our child processes ran (whole run): the CPU's busy
    time minus what our reaped children (the client and its own children) used."""

    def __init__(self, cpu: int) -> None:
        self.cpu = cpu
        self.t0 = time.monotonic()
        self.busy0 = cpu_busy_s(cpu)
        self.children0 = _children_cpu_s()

    def pct(self) -> float:
        dt = time.monotonic() - self.t0
        mine = _children_cpu_s() - self.children0
        return 100 * (cpu_busy_s(self.cpu) - self.busy0 - mine) / dt if dt > 0 else math.nan


def _children_cpu_s() -> float:
    t = os.times()
    return t.children_user + t.children_system


def run_ramp(
    cmd: list[str], cpu: int, work: Path, sampler_server: Server | None, realtime: bool = False
) -> tuple[Path, Sampler | None, float]:
    """Run ``loadgen ramp`` pinned to ``cpu``; sample it when ``sampler_server`` is given.
    Returns its run directory, the sampler, and the other load on ``cpu`` over the whole run (%)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    log = open(work / "ramp.log", "ab")  # noqa: SIM115
    pin = pinned(cpu, realtime)
    foreign = ForeignLoad(cpu)
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=pin)
    sampler = None
    if sampler_server is not None:
        sampler = Sampler(sampler_server, proc.pid, cpu)
        sampler.start()
    try:
        rc = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
        if sampler is not None:
            sampler.finish()
        log.close()
    out = Path(cmd[cmd.index("--out") + 1])
    runs = sorted(p for p in out.iterdir() if p.is_dir())
    if rc != 0 or not runs:
        tail = (work / "ramp.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"loadgen ramp failed (exit {rc}); its output ends with:\n{tail}")
    return runs[-1], sampler, foreign.pct()


def step_windows(run_dir: Path) -> list[tuple[int, int, int]]:
    """(step, steady start ns, end ns) of every step that reached its steady window."""
    steady: dict[int, int] = {}
    out = []
    for line in (run_dir / "steps.jsonl").read_text().splitlines():
        ev = json.loads(line)
        if ev["event"] == "steady":
            steady[ev["step"]] = ev["t_ns"]
        elif ev["event"] == "end" and ev["step"] in steady:
            out.append((ev["step"], steady[ev["step"]], ev["t_ns"]))
    return out


def ours_throughput(server: Server, args: argparse.Namespace, work: Path, transport: str = "fast") -> list[Row]:
    out = work / f"runs-{transport}-{time.monotonic_ns()}"
    out.mkdir()
    concs = args.conc if transport == "fast" else args.openai_conc
    cmd = ramp_cmd(f"http://127.0.0.1:{server.unpaced}", concs, args.warmup, args.step, OSL_THROUGHPUT, out,
                   transport)  # fmt: skip
    run_dir, sampler, _ = run_ramp(cmd, args.client_cpu, work, server)
    assert sampler is not None
    rows = []
    for step, t0, t1 in step_windows(run_dir):
        w = sampler.window(*middle(t0, t1))
        if w is not None:
            w.update(client=f"ours-{transport}", conc=concs[step], run_dir=str(run_dir))
            rows.append(w)
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    return rows


def pct(sorted_vals: Sequence[float], p: float) -> float:
    """Nearest rank, as the mock server computes its truth."""
    k = min(len(sorted_vals) - 1, max(0, math.ceil(p / 100 * len(sorted_vals)) - 1))
    return sorted_vals[k]


def summary(vals: list[float]) -> Row:
    s = sorted(vals)
    return {"n": len(s), "mean": statistics.fmean(s), "p99": pct(s, 99)} if s else {"n": 0}


def errors(reported: Row, truth: Any) -> Row:
    t, i = truth["ttft_ms"], truth["itl_ms"]
    return {
        "requests": reported["ttft"]["n"],
        "truth_requests": t.get("n"),
        "ttft_err_mean_ms": reported["ttft"]["mean"] - t["mean"],
        "ttft_err_p99_ms": reported["ttft"]["p99"] - t["p99"],
        "itl_err_mean_ms": reported["itl"]["mean"] - i["mean"],
        "itl_err_p99_ms": reported["itl"]["p99"] - i["p99"],
        "truth_ttft_mean_ms": t["mean"],
        "truth_ttft_p99_ms": t["p99"],
        "truth_itl_p99_ms": i["p99"],
    }


def ours_accuracy(server: Server, conc: int, args: argparse.Namespace, work: Path) -> Row:
    from loadgen.rundir.records import read_jsonl

    out = work / f"acc-{conc}-{time.monotonic_ns()}"
    out.mkdir()
    server.reset_truth()
    seconds = args.acc_seconds_1 if conc == 1 else args.acc_seconds
    cmd = ramp_cmd(f"http://127.0.0.1:{server.paced}", [conc], 0.0, seconds, OSL_ACCURACY, out, drain=30.0)
    run_dir, _, foreign_pct = run_ramp(cmd, args.client_cpu, work, None, realtime=True)
    truth = server.truth()
    ttft: list[float] = []
    itl: list[float] = []
    bad = 0
    for f in run_dir.glob("requests-*.jsonl"):
        for r in read_jsonl(f):
            offs = r.get("chunk_offsets_ns") or []
            if r.get("error_class") or not offs:
                bad += 1
                continue
            ttft.append((r["first_chunk_ns"] - r["intended_ns"]) / 1e6)
            itl.extend((b - a) / 1e6 for a, b in itertools.pairwise(offs))
    verdict: Row = {}
    try:
        step = json.loads((run_dir / "summary.json").read_text())["steps"][0]
        cpu = step.get("client_cpu") or {}
        verdict = {"client_cpu_pct": 100 * cpu["mean"] if cpu.get("mean") is not None else None,
                   "client_bound": step.get("client_bound"), "valid": step.get("valid")}  # fmt: skip
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        pass
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    row = errors({"ttft": summary(ttft), "itl": summary(itl)}, truth)
    row.update(client="ours-fast", conc=conc, failed=bad, foreign_pct=foreign_pct, **verdict)
    return row


# ------------------------------------------------------------------------------------ truth-sim
TRUTH_P99_MS = 5.0  # issue 12's steady-state targets: per-request first-chunk error p99 and max,
TRUTH_MAX_MS = 20.0  # or the step is marked timing uncertain


def truth_sim(conc: int, args: argparse.Namespace, work: Path) -> Row:
    """Steady state against our simulator (``--profile h200-llama-8b``, its emission log the truth):
    ``loadgen ramp`` at ``conc`` users (5 s warm-up, ``--truth-seconds`` steady, 128 tokens with
    ignore_eos); for every request sent in the steady window, the first chunk's arrival (the
    record's sent_ns + first offset) minus the simulator's stamp just before it wrote that chunk.
    The harness never stands between the two clocks: both are the same machine's wall clock."""
    from loadgen.rundir.records import read_jsonl

    out = work / f"truth-{conc}-{time.monotonic_ns()}"
    out.mkdir()
    emlog = out / "emission.jsonl"
    port = free_port()
    cmd = [sys.executable, "-m", "loadgen.sim", "--profile", "h200-llama-8b", "--port", str(port),
           "--served-model-name", MODEL, "--startup-s", "0", "--emission-log", str(emlog),
           "--log-file", str(out / "sim.log")]  # fmt: skip
    sim = subprocess.Popen(cmd, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.DEVNULL,
                           stderr=subprocess.STDOUT, preexec_fn=pinned(args.server_cpu))  # fmt: skip
    try:
        ramp = ramp_cmd(f"http://127.0.0.1:{port}", [conc], 5.0, args.truth_seconds, OSL_ACCURACY, out / "runs")
        (out / "runs").mkdir()
        ramp += ["--extra-body", "ignore_eos=true"]
        run_dir, _, foreign_pct = run_ramp(ramp, args.client_cpu, work, None)
    finally:
        sim.terminate()
        try:
            sim.wait(timeout=10)  # it flushes its emission log on the way out
        except subprocess.TimeoutExpired:
            sim.kill()
    first_emit: dict[str, int] = {}
    for e in read_jsonl(emlog):
        if e.get("tokens", 0) > 0 and e["request_id"] not in first_emit:
            first_emit[e["request_id"]] = e["emit_ns"]
    [(_, lo, hi)] = step_windows(run_dir) or [(0, 0, 0)]
    err: list[float] = []
    flagged = missing = 0
    for f in run_dir.glob("requests-*.jsonl"):
        for r in read_jsonl(f):
            offs = r.get("chunk_offsets_ns") or []
            if r.get("error_class") or not offs or not lo <= r["sent_ns"] <= hi:
                continue
            emit = first_emit.get(r.get("header_id") or r["id"])
            if emit is None:
                missing += 1
                continue
            err.append((r["sent_ns"] + offs[0] - emit) / 1e6)
            flagged += any(i == 0 for i, _ in r.get("chunk_late_ns") or [])
    step = json.loads((run_dir / "summary.json").read_text())["steps"][0]
    timing = step.get("timing") or {}
    lag = step.get("loop_lag_ms") or {}
    cpu = (step.get("client_cpu") or {}).get("mean")
    s = sorted(err)
    row: Row = {"client": "ours-fast", "conc": conc, "requests": len(s), "unmatched": missing,
                "foreign_pct": foreign_pct, "first_flagged": flagged,
                "timing_uncertain": bool(timing.get("uncertain")), "timing_reason": timing.get("reason"),
                "ttft_late_share": timing.get("ttft_late_share"), "valid": step.get("valid"),
                "loop_lag_p99_ms": lag.get("p99"), "loop_lag_max_ms": lag.get("max"),
                "client_cpu_pct": 100 * cpu if cpu is not None else None}  # fmt: skip
    if s:
        row.update(err_min_ms=s[0], err_p50_ms=pct(s, 50), err_mean_ms=statistics.fmean(s), err_p99_ms=pct(s, 99),
                   err_max_ms=s[-1])  # fmt: skip
        met = row["err_p99_ms"] <= TRUTH_P99_MS and row["err_max_ms"] <= TRUTH_MAX_MS
        row["verdict"] = "met" if met else ("marked" if row["timing_uncertain"] else "MISSED")
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    return row


def truth_table(rows: list[Row]) -> list[str]:
    lines = [
        "| conc | n | requests | first-chunk err p50 | mean | p99 | max | first chunk late-bounded | step marked "
        "timing uncertain | loop lag p99 / max | client CPU % | target (p99 <= 5, max <= 20 ms, or marked) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for conc in sorted({r["conc"] for r in rows}):
        rs = [r for r in rows if r["conc"] == conc and r.get("requests")]
        if not rs:
            continue
        marked = sum(r["timing_uncertain"] for r in rs)
        verdicts = ", ".join(r["verdict"] for r in rs)
        lines.append(
            f"| {conc} | {len(rs)} | {med(rs, 'requests')} | {med(rs, 'err_p50_ms', 2)} | {med(rs, 'err_mean_ms', 2)} "
            f"| {med(rs, 'err_p99_ms', 2)} | {med(rs, 'err_max_ms', 1)} | {med(rs, 'first_flagged')} | "
            f"{marked} of {len(rs)} | {med(rs, 'loop_lag_p99_ms', 1)} / {med(rs, 'loop_lag_max_ms', 1)} | "
            f"{med(rs, 'client_cpu_pct')} | {verdicts} |"
        )
    return lines


# ------------------------------------------------------------------------------------ baseline
def locust_baseline(server: Server, conc: int, args: argparse.Namespace, work: Path, accuracy: bool) -> Row | None:
    """The bare Locust FastHttpUser + orjson loop of the peers' harness, pinned like ours."""
    locust = Path(sys.executable).parent / "locust"
    lf = PEERS / "locustfile_llm.py"
    if not lf.exists() or not locust.exists():
        return None
    summary_file = work / f"lg-{conc}-{time.monotonic_ns()}.json"
    port = server.paced if accuracy else server.unpaced
    seconds = (args.acc_seconds_1 if conc == 1 else args.acc_seconds) if accuracy else args.warmup + args.step
    cmd = [str(locust), "-f", str(lf), "FastSSEUser", "--headless", "-u", str(conc), "-r", str(conc),
           "-t", f"{max(1, round(seconds))}s", "--host", f"http://127.0.0.1:{port}", "--only-summary",
           "--stop-timeout", "30" if accuracy else "0", "--loglevel", "WARNING"]  # fmt: skip
    env = dict(os.environ, LG_JSON="orjson", LG_MODEL=MODEL, LG_OUT=str(summary_file),
               LG_MAX_TOKENS=str(OSL_ACCURACY if accuracy else OSL_THROUGHPUT))  # fmt: skip
    if accuracy:
        server.reset_truth()
    log = open(work / "locust.log", "ab")  # noqa: SIM115
    t_start = time.time_ns()
    foreign = ForeignLoad(args.client_cpu)
    pin = pinned(args.client_cpu, realtime=accuracy)
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=pin)
    sampler = None if accuracy else Sampler(server, proc.pid, args.client_cpu)
    if sampler is not None:
        sampler.start()
    try:
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        if sampler is not None:
            sampler.finish()
        log.close()
    if accuracy:
        try:
            d = json.loads(summary_file.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        rep = {"ttft": d["ttft_ms"], "itl": d["itl_ms"]}
        if not rep["ttft"].get("n"):
            return None
        row = errors(rep, server.truth())
        row.update(client="locust-fast-orjson", conc=conc, foreign_pct=foreign.pct())
        return row
    assert sampler is not None
    # the load starts once Locust has spawned its users: the first sample where chunks flow
    active = [s[0] for p, s in itertools.pairwise(sampler.samples) if s[2] > p[2]]
    if len(active) < 4:
        return None
    t0 = max(t_start, active[0]) + int(args.warmup * 1e9)
    w = sampler.window(*middle(t0, active[-1]))
    if w is not None:
        w.update(client="locust-fast-orjson", conc=conc)
    return w


# ------------------------------------------------------------------------------------ others
def run_json_tool(cmd: list[str], timeout: float, cwd: Path = REPO) -> Row | None:
    """Run a benchmark script; its last stdout line is one JSON object."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s: {' '.join(cmd)}"}
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        return {"error": f"exit {p.returncode}: {(p.stderr or p.stdout)[-500:]}"}
    try:
        out: Row = json.loads(lines[-1])
    except json.JSONDecodeError:
        return {"error": f"no JSON line at the end of {' '.join(cmd)}"}
    return out


def run_peers(args: argparse.Namespace, work: Path) -> tuple[list[str], str]:
    """The peers' harness, with our ``loadgen ramp`` (client ``llm-loadgen``) and the bare Locust
    loop (``locust-fast-orjson``) side by side with every peer whose environment exists. Its two
    Node mock servers are started here first, pinned like the harness would, and warmed (a cold
    Node server is slow for its first ~1,500 requests, and its truth would charge that to whichever
    client ran first); the harness reuses servers it finds on its ports."""
    venvs = Path(args.peers_venvs) if args.peers_venvs else None
    if venvs is None or not venvs.is_dir():
        return [], "peers: skipped (no --peers-venvs with their environments; see ../shared/bench-peers/setup.sh)"
    if not shutil.which("node") or not (PEERS / "runner.py").exists():
        return [], f"peers: skipped (needs node and {PEERS / 'runner.py'})"
    venv_of = {"llm-loadgen": None, "locust-fast-orjson": "venv-locust", "sglang-bench": "venv-sglang",
               "inference-perf": "venv-inference-perf", "aiperf": "venv-aiperf", "guidellm": "venv-guidellm",
               "genai-bench": "venv-genai-bench"}  # fmt: skip
    wanted = args.peers_clients.split(",") if args.peers_clients else list(venv_of)
    have = [c for c in wanted if venv_of.get(c) is None or (venvs / str(venv_of[c])).exists()]
    loadgen_bin = Path(sys.executable).parent / "loadgen"
    if "llm-loadgen" in have and not loadgen_bin.exists():
        have.remove("llm-loadgen")
    if not have:
        return [], f"peers: skipped (none of {', '.join(wanted)} has its venv in {venvs})"
    res = work / "peers.jsonl"
    mocks = _warm_peer_mocks(args, work)
    cmd = [sys.executable, str(PEERS / "runner.py"), "--venv-root", str(venvs), "--clients", ",".join(have),
           "--suite", args.peers_suite, "--conc", args.peers_conc, "--acc-conc", args.peers_acc_conc,
           "--reps", str(args.peers_reps or args.reps), "--load-s", "8", "--out", str(res),
           "--workdir", str(work / "peers"), "--client-cpu", str(args.client_cpu),
           "--server-cpu", str(args.server_cpu)]  # fmt: skip
    if args.peers_tokenizer:
        cmd += ["--tokenizer", args.peers_tokenizer]
    if args.sglang_script:
        cmd += ["--sglang-script", args.sglang_script]
    pcap = work / "paced.pcap"
    with contextlib.ExitStack() as stack:
        no_wire = stack.enter_context(wire.capture(PEER_PORTS[1][0], pcap, args.server_cpu)) if args.wire else None
        try:
            subprocess.run(cmd, cwd=PEERS, timeout=7200, env=dict(os.environ, LOADGEN_BIN=str(loadgen_bin)))
        finally:
            for m in mocks:
                m.terminate()
                m.wait(timeout=5)
    table = subprocess.run([sys.executable, str(PEERS / "runner.py"), "--table", str(res)], cwd=PEERS,
                           capture_output=True, text=True).stdout  # fmt: skip
    kept = res
    if args.json_out and res.exists():  # the raw rows beside the other results (work is deleted)
        kept = args.json_out.with_name(args.json_out.stem + "-peers.jsonl")
        shutil.copy(res, kept)
    lines = table.splitlines()
    if args.wire:
        lines += [""] + (wire_table(res, work / "peers", pcap) if no_wire is None else [f"wire: skipped ({no_wire})"])
    return lines, f"peers: {', '.join(have)} through {PEERS / 'runner.py'} (raw rows: {kept})"


WIRE_HEAD = (
    "### The wire as a second truth (paced server, llm-loadgen's accuracy runs; ms)\n\n"
    "mock truth: the server's own stamps, from when it had read the request; wire: loopback packets, from the\n"
    "request's first packet to the first response packet; per request: our TTFT minus the wire's, matched by\n"
    "X-Request-Id; server read delay: wire minus mock truth (what the server's truth cannot see).\n\n"
    "| run | requests | TTFT err vs mock truth mean / p99 | vs wire, per request: mean / p99 / max | "
    "send stamp to request packet p99 | server read delay mean / p99 |\n"
    "|---|---:|---:|---:|---:|---:|"
)


def wire_table(rows_file: Path, runs: Path, pcap: Path) -> list[str]:
    """One line per llm-loadgen accuracy run of the peers' harness: its error against the mock's
    truth, against the wire per request, and the server's own read delay (wire - truth)."""
    if not rows_file.exists() or not pcap.exists():
        return ["wire: skipped (no harness rows or no capture)"]
    calls = wire.read_calls(pcap, PEER_PORTS[1][0])
    out = [WIRE_HEAD]
    for line in rows_file.read_text().splitlines():
        r = json.loads(line)
        if r.get("client") != "llm-loadgen" or r.get("mode") != "accuracy" or "reported" not in r:
            continue
        run_dirs = sorted((runs / r["work"]).glob("runs/*"))
        if not run_dirs:
            continue
        c = wire.compare_run(run_dirs[-1], calls)
        truth, rep = r["truth"]["ttft_ms"], r["reported"]
        out.append(
            f"| c={r['conc']} rep {r['rep']} | {c['error']['n']:,} | "
            f"{rep['ttft_mean'] - truth['mean']:+.2f} / {rep['ttft_p99'] - truth['p99']:+.2f} | "
            f"{c['error']['mean']:+.3f} / {c['error']['p99']:+.3f} / {c['error']['max']:+.3f} | "
            f"{c['send_lag']['p99']:+.3f} | "
            f"{c['wire']['mean'] - truth['mean']:+.2f} / {c['wire']['p99'] - truth['p99']:+.2f} |"
        )
    return out


PEER_PORTS = ((8000, 0.0, 0.0), (8001, TTFT_MS, ITL_MS))  # runner.py's UNPACED_PORT and PACED_PORT


def _warm_peer_mocks(args: argparse.Namespace, work: Path) -> list[subprocess.Popen[bytes]]:
    procs = []
    for port, ttft, itl in PEER_PORTS:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
            continue  # someone's server already: the harness reuses it, so do we
        except OSError:
            pass
        env = dict(os.environ, MOCK_PORT=str(port), MOCK_TTFT_MS=str(ttft), MOCK_ITL_MS=str(itl))
        log = open(work / f"peer-mock-{port}.log", "wb")  # noqa: SIM115 - lives as long as the server
        procs.append(subprocess.Popen(["node", str(PEERS / "mock_server.js")], env=env, stdout=log,
                                      stderr=subprocess.STDOUT, preexec_fn=pinned(args.server_cpu)))  # fmt: skip
    for port, _, _ in PEER_PORTS:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise SystemExit(f"the peers' mock server on port {port} did not start; see {work}") from exc
                time.sleep(0.05)
    warm_up([port for port, _, _ in PEER_PORTS], args, work)
    return procs


def warm_up(ports: Sequence[int], args: argparse.Namespace, work: Path, seconds: float = 6.0) -> None:
    """A few thousand requests through each server by our own client (its records are dropped): a
    cold Node server is slow for its first ~1,500 requests, and its truth would charge that to
    whichever client ran first."""
    for port in ports:
        out = work / f"warm-{port}-{time.monotonic_ns()}"
        out.mkdir()
        cmd = ramp_cmd(f"http://127.0.0.1:{port}", [256], 0.0, seconds, 16, out)
        run_ramp(cmd, args.client_cpu, work, None)
        shutil.rmtree(out, ignore_errors=True)


# ------------------------------------------------------------------------------------ tables
def fmt(v: Any, nd: int = 0) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return f"{v:,.{nd}f}"


def med(rows: list[Row], key: str, nd: int = 0, single: bool = False) -> str:
    vals = [r[key] for r in rows if r.get(key) is not None]
    if not vals:
        return "—"
    m = statistics.median(vals)
    if len(vals) == 1 or single:
        return fmt(m, nd)
    return f"{fmt(m, nd)} ({fmt(min(vals), nd)}–{fmt(max(vals), nd)})"


def throughput_table(rows: list[Row], max_foreign: float) -> list[str]:
    lines = [
        "| client | conc | n | req/s | chunks/s | client CPU % | CPU µs/chunk | telemetry CPU % "
        "| other load on client core % |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    keys = sorted({(r["client"], r["conc"]) for r in rows}, key=lambda k: (k[0] != "ours-fast", k[0], k[1]))
    for key in keys:
        every = [r for r in rows if (r["client"], r["conc"]) == key]
        rs = [r for r in every if r["foreign_pct"] <= max_foreign]
        dropped = len(every) - len(rs)
        n = f"{len(rs)}" + (f" (+{dropped} excl.)" if dropped else "")
        if not rs:  # every run had other load on the client core: show them, marked
            rs, n = every, f"0 (all {dropped} loaded: shown)"
        lines.append(
            f"| {key[0]} | {key[1]} | {n} | {med(rs, 'req_s')} | {med(rs, 'chunks_s')} | {med(rs, 'cpu_pct')} | "
            f"{med(rs, 'us_per_chunk', 2)} | {med(rs, 'telemetry_cpu_pct', 1)} | {med(rs, 'foreign_pct', 1)} |"
        )
    return lines


def accuracy_table(rows: list[Row]) -> list[str]:
    lines = [
        "| client | conc | n | requests | truth TTFT mean/p99 | TTFT mean err | TTFT p99 err | truth ITL p99 "
        "| ITL mean err | ITL p99 err | client CPU % | load-generator bound | other load on client core % |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for key in sorted({(r["client"], r["conc"]) for r in rows}, key=lambda k: (k[0] != "ours-fast", k[0], k[1])):
        rs = [r for r in rows if (r["client"], r["conc"]) == key]
        lines.append(
            f"| {key[0]} | {key[1]} | {len(rs)} | {med(rs, 'requests', 0, True)} | "
            f"{med(rs, 'truth_ttft_mean_ms', 1, True)}/{med(rs, 'truth_ttft_p99_ms', 1, True)} | "
            f"{med(rs, 'ttft_err_mean_ms', 2)} | {med(rs, 'ttft_err_p99_ms', 2)} | "
            f"{med(rs, 'truth_itl_p99_ms', 2, True)} | {med(rs, 'itl_err_mean_ms', 3)} | "
            f"{med(rs, 'itl_err_p99_ms', 2)} | {med(rs, 'client_cpu_pct', 0)} | "
            f"{_bound(rs)} | {med(rs, 'foreign_pct', 1)} |"
        )
    return lines


def _bound(rows: list[Row]) -> str:
    flags = [r["client_bound"] for r in rows if r.get("client_bound") is not None]
    if not flags:
        return "—"
    return f"{sum(flags)} of {len(flags)} runs" if any(flags) else "no"


def pick(rows: list[Row], client: str, conc: int, key: str, max_foreign: float | None = None) -> float | None:
    vals = [
        r[key]
        for r in rows
        if r["client"] == client and r["conc"] == conc and r.get(key) is not None
        and (max_foreign is None or r.get("foreign_pct", 0.0) <= max_foreign)
    ]  # fmt: skip
    if not vals and max_foreign is not None:  # every run was loaded: report them, flagged in the table
        return pick(rows, client, conc, key)
    return round(statistics.median(vals), 3) if vals else None


# ------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one short repetition (< 90 s); ends with one JSON line")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--conc", default="1,64,256,1024", help="throughput concurrencies")
    ap.add_argument("--acc-conc", default="1,256,1024", help="accuracy concurrencies (quick: 1,256)")
    ap.add_argument("--openai-conc", default="64,256,1024", help="concurrencies for --transport openai (full mode)")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds of warm-up per throughput step")
    ap.add_argument("--step", type=float, default=6.0, help="seconds of steady window per throughput step")
    ap.add_argument("--acc-seconds", type=float, default=6.0, help="accuracy run length at C=256")
    ap.add_argument("--acc-seconds-1", type=float, default=8.0, help="accuracy run length at C=1")
    ap.add_argument("--client-cpu", type=int, default=0)
    ap.add_argument("--server-cpu", type=int, default=1)
    ap.add_argument(
        "--nice",
        type=int,
        default=-20,
        help="niceness of client and server (negative needs root; "
        "as the peers' runner: protects the measurement on a shared machine)",
    )
    ap.add_argument(
        "--max-foreign", type=float, default=10.0, help="exclude runs with more other load on the client core (%%)"
    )
    ap.add_argument(
        "--realtime",
        action="store_true",
        help="run the accuracy clients (ours and the baseline, not the server) under SCHED_FIFO 10 (needs "
        "root), so that other processes on a busy shared machine cannot delay their reads; they use "
        "little CPU, but a real-time process can starve its core: off by default",
    )
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--no-openai", action="store_true")
    ap.add_argument("--no-sim", action="store_true")
    ap.add_argument("--no-analysis", action="store_true")
    ap.add_argument("--analysis-records", type=int, default=None, help="default 1,000,000 (quick: 100,000)")
    ap.add_argument("--peers-venvs", help="folder of venv-<tool> environments (../shared/bench-peers/setup.sh)")
    ap.add_argument("--peers-tokenizer")
    ap.add_argument("--sglang-script")
    ap.add_argument(
        "--peers-clients",
        help="clients for the peers' harness (default: llm-loadgen, "
        "locust-fast-orjson and every peer whose venv exists)",
    )
    ap.add_argument("--peers-suite", default="throughput,accuracy")
    ap.add_argument("--peers-conc", default="1,64,256", help="peers' harness throughput concurrencies")
    ap.add_argument("--peers-acc-conc", default="1,256", help="peers' harness accuracy concurrencies")
    ap.add_argument("--peers-reps", type=int, help="peers' harness repetitions (default --reps)")
    ap.add_argument("--peers-only", action="store_true", help="run only the peers' harness (needs --peers-venvs)")
    ap.add_argument(
        "--wire",
        action="store_true",
        help="peers: capture the paced server's loopback packets (tcpdump) and compare every llm-loadgen TTFT with "
        "the wire's, and the server's truth with the wire (benchmarks/wire.py)",
    )
    ap.add_argument(
        "--truth-sim",
        action="store_true",
        help="run only the steady-state mode against our simulator's emission log (also part of full mode)",
    )
    ap.add_argument("--truth-conc", default="256,1024", help="truth-sim concurrencies (one worker process)")
    ap.add_argument("--truth-seconds", type=float, default=20.0, help="truth-sim steady seconds per run")
    ap.add_argument("--keep", action="store_true", help="keep run directories and logs (printed at the end)")
    ap.add_argument("--json-out", type=Path, help="also write every measured row here (JSON)")
    args = ap.parse_args(argv)
    args.conc = [int(c) for c in args.conc.split(",") if c]
    args.openai_conc = [int(c) for c in args.openai_conc.split(",") if c]
    args.acc_conc = [int(c) for c in args.acc_conc.split(",") if c]
    args.truth_conc = [int(c) for c in args.truth_conc.split(",") if c]
    if args.quick:
        args.reps = 1
        args.warmup, args.step = 1.5, 2.5
        args.acc_seconds, args.acc_seconds_1 = 2.0, 3.0
        args.acc_conc = [1, 256]
        args.no_openai = True
    if args.analysis_records is None:
        args.analysis_records = 100_000 if args.quick else 1_000_000
    NICE[0] = args.nice
    REALTIME[0] = args.realtime
    ncpu = os.cpu_count() or 1
    args.client_cpu %= ncpu
    args.server_cpu %= ncpu

    # a timeout's SIGTERM unwinds through the finally blocks, which stop the servers and clients
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="loadgen-bench-"))
    os.sched_setaffinity(0, {args.server_cpu})  # this harness (sampling, HTTP polls) stays off the client core
    if args.truth_sim or args.peers_only:
        return _single_mode(args, work, started)
    server = Server(args.server_cpu, work)
    head = [
        f"llm-loadgen client benchmark, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"commit {_version(['git', '-C', str(REPO), 'rev-parse', '--short', 'HEAD'])}, "
        f"{'quick' if args.quick else f'full, {args.reps} reps'}",
        f"machine: {ncpu} CPUs ({_cpu_model()}), Python {sys.version.split()[0]}; client on CPU {args.client_cpu}, "
        f"server on CPU {args.server_cpu}, nice {args.nice}; accuracy clients "
        f"{'SCHED_FIFO' if REALTIME[0] else 'at normal priority'}; load average {os.getloadavg()[0]:.1f}",
        f"server: {server.describe()}",
    ]
    print("\n".join(head), flush=True)
    if server.paced is not None:
        warm_up([server.paced], args, work, 3.0 if args.quick else 6.0)
    thr: list[Row] = []
    acc: list[Row] = []
    notes: list[str] = []
    try:
        for rep in range(args.reps):
            rows = ours_throughput(server, args, work)
            thr += rows
            _progress(f"rep {rep}: ours", rows)
            if not args.no_baseline:
                for c in [256] if args.quick else args.conc:
                    r = locust_baseline(server, c, args, work, accuracy=False)
                    if r is not None:
                        thr.append(r)
                        _progress(f"rep {rep}: locust", [r])
            if not args.no_openai:
                rows = ours_throughput(server, args, work, transport="openai")
                thr += rows
                _progress(f"rep {rep}: openai transport", rows)
            if server.paced is not None:
                for c in args.acc_conc:
                    r = ours_accuracy(server, c, args, work)
                    acc.append(r)
                    _progress(f"rep {rep}: ours accuracy", [r])
                    if not args.no_baseline and not args.quick and c <= 256:
                        b = locust_baseline(server, c, args, work, accuracy=True)
                        if b is not None:
                            acc.append(b)
                            _progress(f"rep {rep}: locust accuracy", [b])
            else:
                notes.append("accuracy: skipped (the simulator fallback records no emission truth; install node)")
    finally:
        server.stop()
    truth: list[Row] = []
    if not args.quick:
        for rep in range(args.reps):
            for c in args.truth_conc:
                r = truth_sim(c, args, work)
                truth.append(r)
                _progress(f"rep {rep}: truth-sim", [r])
    sim: Row | None = None
    if not args.no_sim and (REPO / "benchmarks" / "sim_bench.py").exists():
        secs = ["--seconds", "4", "--warmup", "2", "--noise-seconds", "1"] if args.quick else []
        # the capacity setting of the simulator's notes: the tiny profile, long answers, a batch of
        # 256 at a fixed 5 ms step (one token per chunk)
        sim = run_json_tool([sys.executable, "benchmarks/sim_bench.py", "--server-cpu", str(args.server_cpu),
                             "--client-cpu", str(args.client_cpu), "--profile", "tiny", "--concurrency", "256",
                             "--max-tokens", "4096", "--extra-flags",
                             "--itl-growth 0 --max-running-requests 256 --cuda-graph-max-bs 256", *secs],
                            300)  # fmt: skip
    analysis: Row | None = None
    if not args.no_analysis and (REPO / "benchmarks" / "analysis_bench.py").exists():
        analysis = run_json_tool([sys.executable, "benchmarks/analysis_bench.py", "--records",
                                  str(args.analysis_records)], 900)  # fmt: skip

    print()
    print("### Throughput (unpaced server, 256 tokens per response; client on one core)")
    print(f"median (min–max) over reps of the steady window; runs with > {args.max_foreign:g} % other load on the "
          "client core are excluded (shown as 'excl.'; a row whose runs were all loaded shows them, marked); "
          "CPU µs/chunk = load-generator process CPU / server chunks; "
          "telemetry CPU is its side process, not included in µs/chunk\n")  # fmt: skip
    print("\n".join(throughput_table(thr, args.max_foreign)))
    if acc:
        print("\n### Timing accuracy (paced server: TTFT 50 ms, ITL 20 ms, 128 tokens, synchronized streams)")
        print("error = client-reported minus the server's emission truth for the same requests, ms\n")
        print("\n".join(accuracy_table(acc)))
    if truth:
        print("\n" + TRUTH_HEAD)
        print("\n".join(truth_table(truth)))
    print("\n### Simulator capacity (benchmarks/sim_bench.py)")
    print(json.dumps(sim) if sim else "skipped")
    print("\n### Analysis + report (benchmarks/analysis_bench.py)")
    print(json.dumps(analysis) if analysis else "skipped")
    if not args.quick:
        lines, note = run_peers(args, work)
        print("\n### Peers\n" + note)
        print("\n".join(lines))
    for n in dict.fromkeys(notes):
        print(n)
    if args.keep:
        print(f"run directories and logs kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    if args.json_out:
        args.json_out.write_text(
            json.dumps({"throughput": thr, "accuracy": acc, "truth_sim": truth, "sim": sim, "analysis": analysis})
        )
    mf = args.max_foreign
    result = {
        "mode": "quick" if args.quick else "full",
        "server": server.kind,
        "ours_us_per_chunk": pick(thr, "ours-fast", 256, "us_per_chunk", mf),
        "baseline_us_per_chunk": pick(thr, "locust-fast-orjson", 256, "us_per_chunk", mf),
        "ours_chunks_s_256": pick(thr, "ours-fast", 256, "chunks_s", mf),
        "ours_req_s_1024": pick(thr, "ours-fast", 1024, "req_s", mf),
        "ours_us_per_chunk_1024": pick(thr, "ours-fast", 1024, "us_per_chunk", mf),
        "foreign_pct_256": pick(thr, "ours-fast", 256, "foreign_pct"),
        "ttft_err_mean_ms": pick(acc, "ours-fast", 256, "ttft_err_mean_ms"),
        "ttft_err_p99_ms": pick(acc, "ours-fast", 256, "ttft_err_p99_ms"),
        "itl_err_p99_ms": pick(acc, "ours-fast", 256, "itl_err_p99_ms"),
        "ttft_err_mean_ms_c1": pick(acc, "ours-fast", 1, "ttft_err_mean_ms"),
        "sim_tok_s": round(sim["server_tok_s"]) if sim and "server_tok_s" in sim else None,
        "sim_step_err_p99_ms": sim.get("step_error_p99_ms") if sim else None,
        "analysis_total_s": analysis.get("total_s") if analysis else None,
        "analysis_records": analysis.get("records") if analysis else None,
        "wall_s": round(time.monotonic() - started, 1),
    }
    print(json.dumps(result), flush=True)
    return 0


TRUTH_HEAD = (
    "### Steady state against the simulator (h200-llama-8b, its emission log the truth; 5 s warm-up excluded, "
    "128 tokens, ignore_eos; one worker process)\n"
    "per-request first-chunk arrival minus the simulator's send stamp, ms; median (min–max) over reps\n"
)


def _single_mode(args: argparse.Namespace, work: Path, started: float) -> int:
    """``--truth-sim`` or ``--peers-only``: that one part, its table, and one JSON line."""
    print(f"llm-loadgen client benchmark ({'truth-sim' if args.truth_sim else 'peers'}), "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit "
          f"{_version(['git', '-C', str(REPO), 'rev-parse', '--short', 'HEAD'])}; machine: {os.cpu_count()} CPUs "
          f"({_cpu_model()}); client on CPU {args.client_cpu}, server on CPU {args.server_cpu}, nice {args.nice}; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    result: Row = {"mode": "truth-sim" if args.truth_sim else "peers"}
    try:
        if args.truth_sim:
            rows: list[Row] = []
            for rep in range(args.reps):
                for c in args.truth_conc:
                    r = truth_sim(c, args, work)
                    rows.append(r)
                    _progress(f"rep {rep}: truth-sim", [r])
            print("\n" + TRUTH_HEAD)
            print("\n".join(truth_table(rows)))
            for c in args.truth_conc:
                result[f"c{c}"] = {k: pick(rows, "ours-fast", c, k) for k in ("err_p50_ms", "err_mean_ms", "err_p99_ms",
                                   "err_max_ms", "first_flagged", "loop_lag_p99_ms", "client_cpu_pct")}  # fmt: skip
                result[f"c{c}"]["verdicts"] = [r.get("verdict") for r in rows if r["conc"] == c]
            if args.json_out:
                args.json_out.write_text(json.dumps({"truth_sim": rows}))
        else:
            lines, note = run_peers(args, work)
            print("\n### Peers\n" + note)
            print("\n".join(lines))
    finally:
        if args.keep:
            print(f"run directories and logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    result["wall_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(result), flush=True)
    return 0


def _progress(what: str, rows: list[Row]) -> None:
    for r in rows:
        if "err_p99_ms" in r:
            s = (f"c={r['conc']}: first-chunk err p50 {r['err_p50_ms']:+.2f} mean {r['err_mean_ms']:+.2f} "
                 f"p99 {r['err_p99_ms']:+.2f} max {r['err_max_ms']:+.1f} ms ({r['requests']} requests, "
                 f"{r['first_flagged']} late-bounded), {r['timing_reason'] or 'timing not marked'}, "
                 f"{r['verdict']}")  # fmt: skip
        elif "us_per_chunk" in r:
            s = (f"c={r['conc']}: {r['req_s']:.0f} req/s, {r['chunks_s']:.0f} chunks/s, "
                 f"{r['us_per_chunk']:.2f} µs/chunk, CPU {r['cpu_pct']:.0f} %, "
                 f"other load {r['foreign_pct']:.0f} %")  # fmt: skip
        else:
            s = (f"c={r['conc']}: TTFT err mean {r['ttft_err_mean_ms']:+.2f} p99 {r['ttft_err_p99_ms']:+.2f} ms, "
                 f"ITL err p99 {r['itl_err_p99_ms']:+.2f} ms ({r['requests']} requests), "
                 f"other load {r.get('foreign_pct', math.nan):.0f} %")  # fmt: skip
        print(f"  {what} {s}", file=sys.stderr, flush=True)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


if __name__ == "__main__":
    sys.exit(main())
