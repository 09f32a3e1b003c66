"""Does priority scheduling protect the interactive tenant? Against a real vLLM, and the simulator.

Two tenants on one server: ``chat`` (2 users, priority 0, SLO ttft_p99=1s; 100-token prompts, 16
tokens out) and ``batch`` (0, then 12 users, priority 1; 600-token prompts, 128 out). The server runs
4 sequences at most, so the batch tenant's 12 users make a queue. Each server is started twice: vLLM's
default first-come-first-served policy, then ``--scheduling-policy priority``. Printed: per policy,
the chat tenant's TTFT p50/p99 and requests with the batch tenant beside it, the batch tenant's, and
the knee's reason.

    python benchmarks/tenants_priority.py --engine vllm   # ../shared/realserver (vLLM 0.32, CPU build)
    python benchmarks/tenants_priority.py --engine sim    # loadgen sim --engine vllm, the same limits
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REALSERVER = ROOT.parent / "shared" / "realserver"

TENANTS = """name = "shared"
[load]
mode = "closed"
step_seconds = 15
warmup_seconds = 3

[[tenants]]
name = "chat"
scenario = "interactive.toml"
users = 2
priority = 0
slo = "ttft_p99=1s"

[[tenants]]
name = "batch"
scenario = "batch.toml"
users = [0, 12]
priority = 1
"""
INTERACTIVE = (
    'name = "interactive"\nseed = 1\n[prompt]\nsource = "chat"\ninput_tokens = 100\n'
    "[output]\nmax_tokens = 16\nignore_eos = true\n"
)
BATCH = (
    'name = "batch"\nseed = 2\n[prompt]\nsource = "prose"\ninput_tokens = 600\n'
    "[output]\nmax_tokens = 128\nignore_eos = true\n"
)


def start(engine: str, policy: str, port: int, work: Path) -> tuple[subprocess.Popen[bytes] | None, str]:
    """The server (a process to stop, or vLLM's PID as text) listening on ``port``."""
    flags = ["--scheduling-policy", policy] if policy != "fcfs" else []
    if engine == "vllm":
        env = {**os.environ, "MAX_NUM_SEQS": "4", "WAIT": "1", "WAIT_TIMEOUT": "600"}
        out = subprocess.run(
            ["bash", str(REALSERVER / "start.sh"), str(work / "rs"), str(port), *flags],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        return None, out.stdout.strip().splitlines()[-1]
    argv = [sys.executable, "-m", "loadgen.sim", "--port", str(port), "--engine", "vllm"]
    argv += ["--max-running-requests", "4", *flags, "--log-file", str(work / f"sim-{policy}.log")]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).close()
            return proc, ""
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the simulator did not start")


def stop(proc: subprocess.Popen[bytes] | None, pid: str) -> None:
    if proc is not None:
        proc.terminate()
        proc.wait(30)
    elif pid:
        subprocess.run(["bash", str(REALSERVER / "stop.sh"), pid], capture_output=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine", choices=("vllm", "sim"), default="sim")
    p.add_argument("--port", type=int, default=8131)
    p.add_argument("--work", default=None, help="where vLLM's venv and model live (default: /work/rs if present)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tenants-") as tmp:
        work = Path(tmp)
        if args.engine == "vllm":
            (work / "rs").symlink_to(Path(args.work or "/work/rs"))
        for name, text in (("shared.toml", TENANTS), ("interactive.toml", INTERACTIVE), ("batch.toml", BATCH)):
            (work / name).write_text(text)
        for policy in ("fcfs", "priority"):
            proc, pid = start(args.engine, policy, args.port, work)
            try:
                ramp = subprocess.run(
                    [sys.executable, "-m", "loadgen.cli", "ramp", "--url", f"http://127.0.0.1:{args.port}",
                     "--scenario", str(work / "shared.toml"), "--no-telemetry", "--out", str(work / policy)],
                    cwd=ROOT, capture_output=True, text=True, timeout=600,
                )  # fmt: skip
            finally:
                stop(proc, pid)
            if ramp.returncode != 0:
                raise SystemExit(f"loadgen ramp failed: {ramp.stderr[-2000:]}")
            run_dir = Path(ramp.stdout.strip().splitlines()[-1])
            summary = json.loads((run_dir / "summary.json").read_text())
            both = summary["steps"][-1]["tenants"]
            for name in ("chat", "batch"):
                t = both[name]
                ttft = t.get("ttft_ms") or {}
                print(
                    f"{args.engine} {policy:8s} {name:5s} TTFT p50 {ttft.get('p50') or 0:7.0f} ms  p99 "
                    f"{ttft.get('p99') or 0:7.0f} ms  ok {t['requests_ok']:4d}  failed {t['requests_failed']}  "
                    f"{t.get('output_tok_s') or 0:6.0f} tok/s  SLO {'; '.join(t.get('slo_breaks') or []) or 'held'}"
                )
            print(f"{args.engine} {policy:8s} knee: {summary['knee']['reason'][:160]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
