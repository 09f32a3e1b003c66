"""Soak: does a long run drift? C=256 against the simulator with every part of a real run on.

    PYTHONPATH=. python benchmarks/soak.py                  # 30 minutes, 5-minute windows
    PYTHONPATH=. python benchmarks/soak.py --minutes 5      # 5 minutes, 1-minute windows
    PYTHONPATH=. python benchmarks/soak.py --smoke          # 3 minutes, 30-second windows, drift bound 5 % (CI)

What runs: ``loadgen sim --profile tiny`` (``--profile``) and ``loadgen ui --autostart``: Locust's web
UI on (a real page served on ``--web-port``, the load started without a click), request records
written to a run directory, the telemetry side process sampling the simulator's GPU endpoint at
10 Hz and its /metrics, one step at C=256 for longer than the soak. Every ``--sample-s`` seconds it
prints RSS (MiB) and open file descriptors of every process (the Locust process, its telemetry
child, the simulator); every window, the output tok/s and TTFT p50 of the requests that ended in
it, read from the run's records.

Verdict (exit 1 on a breach, 0 otherwise), after the first window (the warm-up):

* memory: a process's RSS grows by more than ``max(50 MiB, 20 %)`` of its RSS at the end of the
  warm-up, or its open descriptors by more than 16;
* throughput: the last complete window's tok/s differs from the first one after the warm-up by
  more than 2 % (``--max-drift``).

The last line is one JSON object with the figures (for RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
RSS_BOUND_MIB = 50.0
RSS_BOUND_FRAC = 0.20
FD_BOUND = 16


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from /proc/*/stat's parent field)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _proc(pid: int) -> tuple[float, int] | None:
    """(RSS in MiB, open descriptors) of ``pid``, or None when it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    rss_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return rss_kb / 1024, fds


def _name(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return str(pid)
    text = " ".join(a.decode(errors="replace") for a in argv)
    for key, label in (("loadgen.telemetry", "telemetry"), ("loadgen.sim", "sim"), ("locust", "loadgen")):
        if key in text:
            return label
    return Path(argv[0].decode(errors="replace")).name


def _windows(run_dir: Path, t0_ns: int, window_s: float, n: int) -> list[dict[str, Any]]:
    """Output tok/s and TTFT p50 of the successful requests that ended in each window."""
    toks = [0] * n
    ttfts: list[list[float]] = [[] for _ in range(n)]
    for f in run_dir.glob("requests-*.jsonl"):
        for line in f.read_bytes().splitlines():
            try:
                r = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # a line being written as we read
            if r.get("error_class") is not None:
                continue
            k = int((r["end_ns"] - t0_ns) / (window_s * 1e9))
            if 0 <= k < n:
                toks[k] += r.get("output_tokens") or 0
                if r.get("first_chunk_ns"):
                    ttfts[k].append((r["first_chunk_ns"] - r["intended_ns"]) / 1e6)
    return [
        {"window": k, "tok_s": toks[k] / window_s, "ttft_p50_ms": statistics.median(ttfts[k]) if ttfts[k] else None}
        for k in range(n)
    ]


def _start_sim(work: Path, profile: str) -> tuple[subprocess.Popen[bytes], str]:
    port_file = work / "sim.port"
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadgen.sim", "--profile", profile, "--port", "0", "--port-file", str(port_file)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=open(work / "sim.err", "wb"),  # noqa: SIM115 (the child keeps it)
    )
    deadline = time.monotonic() + 60
    while not (port_file.exists() and port_file.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the simulator did not start; see {work / 'sim.err'}")
        time.sleep(0.05)
    return proc, f"http://127.0.0.1:{int(port_file.read_text())}"


def _stop(proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=30.0, help="how long to soak (default 30)")
    p.add_argument("--window-s", type=float, default=None, help="drift window (default 300; 60 under 10 minutes)")
    p.add_argument("--sample-s", type=float, default=None, help="RSS/fd sample period (default window / 4)")
    p.add_argument("--smoke", action="store_true", help="CI form: 3 minutes, 30 s windows, drift bound 5 %%")
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--profile", default="tiny", help="simulator profile (default tiny)")
    p.add_argument("--max-drift", type=float, default=0.02, help="throughput drift bound (default 0.02)")
    p.add_argument("--web-port", type=int, default=0, help="the web UI's port (default: a free one)")
    p.add_argument("--work", default=None, help="folder for the run (default a new one under /tmp)")
    ns = p.parse_args(argv)
    if ns.smoke:
        # 30-s windows of ~3.7-s requests at C=256 move by a few percent (requests end in waves):
        # the smoke holds 5 %, the 30-minute soak's 5-minute windows hold 2 %
        ns.minutes, ns.window_s = 3.0, ns.window_s or 30.0
        if ns.max_drift == 0.02:
            ns.max_drift = 0.05
    window_s = ns.window_s or (300.0 if ns.minutes >= 10 else 60.0)
    sample_s = ns.sample_s or window_s / 4
    n_windows = int(ns.minutes * 60 // window_s)
    if n_windows < 3:
        p.error(f"--minutes {ns.minutes:g} gives {n_windows} windows of {window_s:g} s; at least 3 are needed")
    work = Path(ns.work) if ns.work else Path(f"/tmp/loadgen-soak-{os.getpid()}")
    work.mkdir(parents=True, exist_ok=True)
    web_port = ns.web_port
    if not web_port:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            web_port = s.getsockname()[1]
    sim, url = _start_sim(work, ns.profile)
    cmd = [
        sys.executable, "-m", "loadgen.cli", "ui", "--url", url, "--concurrency", str(ns.concurrency),
        "--step-seconds", str(ns.minutes * 60 + 600), "--warmup-seconds", "1", "--max-tokens", str(ns.max_tokens),
        "--out", str(work / "reports"), "--gpu-source", f"{url}/gpu/metrics", "--metrics-url", f"{url}/metrics",
        "--web-host", "127.0.0.1", "--web-port", str(web_port), "--autostart",
    ]  # fmt: skip
    print(f"soak: {ns.minutes:g} min at C={ns.concurrency}, {window_s:g} s windows; web UI http://127.0.0.1:{web_port}")
    ui = subprocess.Popen(cmd, cwd=REPO, stdout=open(work / "ui.log", "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
    samples: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 60
        while not list((work / "reports").glob("*/requests-*.jsonl")):
            if ui.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the load never started; see {work / 'ui.log'}")
            time.sleep(0.2)
        run_dir = next((work / "reports").glob("*/requests-*.jsonl")).parent
        t0_ns, t0 = time.time_ns(), time.monotonic()
        page = _web_page(web_port)
        print(f"run directory {run_dir}; web UI answered {page}")
        while (elapsed := time.monotonic() - t0) < ns.minutes * 60:
            row: dict[str, Any] = {"t_s": round(elapsed, 1)}
            for pid in [ui.pid, *_children(ui.pid), sim.pid]:
                got = _proc(pid)
                if got is not None:
                    row[_name(pid)] = {"rss_mib": round(got[0], 1), "fds": got[1]}
            samples.append(row)
            procs = " ".join(f"{k}: {v['rss_mib']:.1f} MiB {v['fds']} fds" for k, v in row.items() if k != "t_s")
            print(f"t={elapsed:7.1f} s  {procs}", flush=True)
            time.sleep(max(0.0, sample_s - (time.monotonic() - t0 - elapsed)))
        ui_alive = ui.poll() is None
    finally:
        _stop(ui)
        _stop(sim)
    windows = _windows(run_dir, t0_ns, window_s, n_windows)
    return _verdict(ns, window_s, samples, windows, ui_alive, run_dir)


def _web_page(port: int) -> str:
    import urllib.request

    deadline = time.monotonic() + 20
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
                return f"{resp.status} ({len(resp.read()):,} bytes)"
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _verdict(
    ns: argparse.Namespace,
    window_s: float,
    samples: list[dict[str, Any]],
    windows: list[dict[str, Any]],
    ui_alive: bool,
    run_dir: Path,
) -> int:
    failures: list[str] = []
    if not ui_alive:
        failures.append("the load generator exited before the end")
    print(f"\n{'window':>8} {'tok/s':>10} {'vs first':>9} {'TTFT p50 ms':>12} {'vs first':>9}")
    steady = windows[1:]
    base_tok = steady[0]["tok_s"] if steady else 0.0
    base_ttft = steady[0]["ttft_p50_ms"] if steady else None
    for w in windows:
        d_tok = w["tok_s"] / base_tok - 1 if base_tok else 0.0
        ttft = w["ttft_p50_ms"]
        d_ttft = ttft / base_ttft - 1 if ttft and base_ttft else 0.0
        mark = " (warm-up)" if w["window"] == 0 else ""
        print(
            f"{w['window'] * window_s:>7.0f}s {w['tok_s']:>10,.0f} {d_tok:>+8.1%} "
            f"{(ttft or 0):>12.2f} {d_ttft:>+8.1%}{mark}"
        )
    drift = steady[-1]["tok_s"] / base_tok - 1 if base_tok else float("inf")
    if abs(drift) > ns.max_drift:
        failures.append(f"throughput drifted {drift:+.1%} (bound {ns.max_drift:.0%})")
    # memory: from the first sample after the warm-up window to the last
    warm = next((s for s in samples if s["t_s"] >= window_s), samples[0] if samples else {})
    last = samples[-1] if samples else {}
    growth: dict[str, Any] = {}
    for name, first in warm.items():
        if name == "t_s" or name not in last:
            continue
        d_rss = last[name]["rss_mib"] - first["rss_mib"]
        d_fds = last[name]["fds"] - first["fds"]
        growth[name] = {
            "rss_start_mib": first["rss_mib"],
            "rss_end_mib": last[name]["rss_mib"],
            "rss_growth_mib": round(d_rss, 1),
            "fds_start": first["fds"],
            "fds_end": last[name]["fds"],
        }
        bound = max(RSS_BOUND_MIB, RSS_BOUND_FRAC * first["rss_mib"])
        if d_rss > bound:
            failures.append(f"{name}: RSS grew {d_rss:.1f} MiB after the warm-up (bound {bound:.0f} MiB)")
        if d_fds > FD_BOUND:
            failures.append(f"{name}: open descriptors grew by {d_fds} (bound {FD_BOUND})")
    ttfts = [w["ttft_p50_ms"] for w in steady if w["ttft_p50_ms"] is not None]
    result = {
        "minutes": round(ns.minutes, 2),
        "concurrency": ns.concurrency,
        "window_s": window_s,
        "tok_s": [round(w["tok_s"], 1) for w in windows],
        "ttft_p50_ms": [None if w["ttft_p50_ms"] is None else round(w["ttft_p50_ms"], 2) for w in windows],
        "throughput_drift": round(drift, 4),
        "ttft_p50_drift": round(ttfts[-1] / ttfts[0] - 1, 4) if len(ttfts) > 1 and ttfts[0] else None,
        "processes": growth,
        "run_dir": str(run_dir),
        "failures": failures,
    }
    print("\n" + ("PASS" if not failures else "FAIL: " + "; ".join(failures)))
    print(json.dumps(result))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
