"""llama.cpp's OpenAI-compatible server as a real engine: does a ramp against it measure what the
server did? (issue 34; the server is llama-cpp-python's ``llama_cpp.server``, built from source.)

    # once (~8-25 min on 2 cores): the server in its own venv, as ../shared/realserver/README.md says
    python3 -m venv /work/llamacpp/venv
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_BLAS=OFF -DLLAMA_CURL=OFF" \\
        /work/llamacpp/venv/bin/pip install 'llama-cpp-python[server]' gguf numpy
    PYTHONPATH=. python benchmarks/llamacpp.py --venv /work/llamacpp/venv [--reps 3]

The model is ``../shared/realserver/make_gguf.py``'s tiny random-weight Llama (byte-level
vocabulary: tokens 0-255 are bytes, 256 EOS, 257-258 control tokens), written next to the venv
when missing. Nothing is downloaded. The server runs on 127.0.0.1 under its own session and is
stopped at the end. Three cases, each a real ``loadgen ramp`` (steps end by ``--requests-per-step``;
the long ``--step-seconds`` only catches a hang):

* ``queue`` (``--interrupt_requests False``: a request waits for the one in progress; the server
  has one slot): C=1, 2, 4, 32 output tokens, ASCII-only output (``logit_bias`` -100 on the bytes
  128-255 and the control tokens; EOS allowed), ``--reps`` times. Checked against what the server
  says and does: every request ok; every ``finish_reason`` present, ``length`` answers carrying
  exactly ``max_tokens`` (the server stops there: the truth), ``stop`` answers fewer; the request
  ids on the wire accepted (no 400 in the server's access log, ``header_id`` a UUID); one slot:
  the answers' streaming intervals do not overlap, throughput stays that of C=1, and TTFT grows as a
  queue of one server says (at C users a request waits for the C-1 others: TTFT(C) ~ TTFT(1) + (C-1)
  x E2E(1)).
* ``interrupt`` (the server's default ``--interrupt_requests True``: a new request cuts the one in
  progress, which then gets its role chunk and ``[DONE]`` with no finish reason): C=1, 4. Every cut
  answer must be recorded ``truncated``, none as a success with no output.
* ``bytes`` (the whole byte vocabulary, EOS blocked): the limit of counting chunks when the server
  sends no usage (llama-cpp-python sends none in a stream): a token that ends inside a UTF-8
  character is an empty ``content`` chunk (counted), but the server's byte handling also splits or
  repeats some; the share of answers whose count is exactly ``max_tokens`` and the spread of the rest.

Prints a table per case and, last, one JSON object. Figures: benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import free_port, run_loadgen  # noqa: E402

SHARED = ROOT.parent / "shared" / "realserver"
MAX_TOKENS = 32
ASCII_ONLY = {str(t): -100 for t in (*range(128, 256), 257, 258)}  # EOS (256) left free
NO_EOS = {"256": -100}
_ACCESS = re.compile(r'"POST (\S+) HTTP/1\.1" (\d{3})')


class Server:
    """``python -m llama_cpp.server`` on 127.0.0.1 in its own session; its log in ``log``."""

    def __init__(self, python: Path, gguf: Path, work: Path, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = work / f"llama-{self.port}.log"
        cmd = [str(python), "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", "tiny",
               "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", "4096", *args]  # fmt: skip
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited {self.proc.returncode}; see {self.log}")
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=2):
                    return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"llama_cpp.server did not answer within 120 s; see {self.log}")

    def statuses(self) -> dict[str, int]:
        """POSTs in its access log by status."""
        out: dict[str, int] = {}
        for m in _ACCESS.finditer(self.log.read_text(errors="replace")):
            out[m.group(2)] = out.get(m.group(2), 0) + 1
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def ramp(url: str, out: Path, concurrency: str, per_step: int, bias: dict[str, int]) -> Path:
    proc = run_loadgen(
        "ramp", "--url", url, "--concurrency", concurrency, "--requests-per-step", str(per_step),
        "--step-seconds", "300", "--warmup-seconds", "1", "--max-tokens", str(MAX_TOKENS),
        "--extra-body", "logit_bias=" + json.dumps(bias), "--no-telemetry", "--drain-seconds", "30",
        "--out", str(out), timeout=1200,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"loadgen ramp exited {proc.returncode}: {proc.stderr[-2000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for f in sorted(run_dir.glob("requests-*.jsonl")) for x in f.read_text().splitlines()]


def steps(run_dir: Path) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = json.loads((run_dir / "summary.json").read_text())["steps"]
    return steps


def overlap_share(recs: list[dict[str, Any]]) -> float:
    """Of the time answers were streaming (first chunk to end), the share two streamed at once."""
    spans = sorted((r["first_chunk_ns"], r["end_ns"]) for r in recs if r["first_chunk_ns"] and r["error_class"] is None)
    busy = both = 0
    last_end = 0
    for a, b in spans:
        busy += b - a
        if a < last_end:
            both += min(b, last_end) - a
        last_end = max(last_end, b)
    return both / busy if busy else 0.0


def queue_case(python: Path, gguf: Path, work: Path, reps: int) -> dict[str, Any]:
    rows: dict[int, dict[str, list[float]]] = {}
    totals = {"requests": 0, "ok": 0, "length": 0, "length_exact": 0, "stop": 0, "stop_fewer": 0, "no_finish": 0}
    ids_ok = True
    rejected = 0
    overlaps: list[float] = []
    for rep in range(reps):
        server = Server(python, gguf, work, "--interrupt_requests", "False")
        try:
            run_dir = ramp(server.url, work / f"queue-{rep}", "1,2,4", 24, ASCII_ONLY)
            time.sleep(0.5)  # the access log's last lines
            statuses = server.statuses()
        finally:
            server.stop()
        recs = records(run_dir)
        rejected += sum(n for s, n in statuses.items() if s.startswith("4"))
        ids_ok &= all(r["header_id"] and str(uuid.UUID(r["header_id"])) == r["header_id"] for r in recs)
        totals["requests"] += len(recs)
        for r in recs:
            ok = r["error_class"] is None
            totals["ok"] += ok
            fr = r["finish_reason"]
            if fr == "length":
                totals["length"] += 1
                totals["length_exact"] += r["output_tokens"] == MAX_TOKENS
            elif fr == "stop":
                totals["stop"] += 1
                totals["stop_fewer"] += (r["output_tokens"] or 0) < MAX_TOKENS
            else:
                totals["no_finish"] += 1
        for s in steps(run_dir):
            c = int(s["concurrency"])
            row = rows.setdefault(c, {"ttft_p50": [], "e2e_p50": [], "tok_s": [], "overlap": []})
            row["ttft_p50"].append(s["ttft_ms"]["p50"])
            row["e2e_p50"].append(s["e2e_ms"]["p50"])
            row["tok_s"].append(s["output_tok_s"])
            mine = [r for r in recs if r["step"] == s["step"]]
            row["overlap"].append(overlap_share(mine))
        overlaps.append(overlap_share(recs))
    med = {c: {k: statistics.median(v) for k, v in row.items()} for c, row in rows.items()}
    base = med[1]
    print(f"\n== queue: one slot, --interrupt_requests False; {reps} rep(s); medians (range)")
    print(f"{'C':>3} {'TTFT p50 ms':>22} {'queue model ms':>15} {'E2E p50 ms':>12} {'tok/s':>16} {'overlap':>8}")
    out_rows = []
    for c in sorted(rows):
        row = rows[c]
        model = base["ttft_p50"] + (c - 1) * base["e2e_p50"]
        t = row["ttft_p50"]
        print(
            f"{c:>3} {med[c]['ttft_p50']:>9.1f} ({min(t):.1f}-{max(t):.1f}) {model:>15.1f} {med[c]['e2e_p50']:>12.1f} "
            f"{med[c]['tok_s']:>7.0f} ({min(row['tok_s']):.0f}-{max(row['tok_s']):.0f}) {max(row['overlap']):>7.1%}"
        )
        out_rows.append({"concurrency": c, **med[c], "ttft_queue_model_ms": model, "ttft_p50_range": [min(t), max(t)]})
    print(
        f"requests {totals['requests']}, ok {totals['ok']}; finish length {totals['length']} "
        f"(exactly {MAX_TOKENS} tokens: {totals['length_exact']}), stop {totals['stop']} "
        f"(fewer: {totals['stop_fewer']}), none {totals['no_finish']}; 4xx in the server's log: {rejected}; "
        f"header ids UUIDs: {ids_ok}"
    )
    return {"steps": out_rows, **totals, "server_4xx": rejected, "header_ids_uuid": ids_ok}


def interrupt_case(python: Path, gguf: Path, work: Path) -> dict[str, Any]:
    server = Server(python, gguf, work)  # the server's default: a new request interrupts
    try:
        run_dir = ramp(server.url, work / "interrupt", "1,4", 24, ASCII_ONLY)
    finally:
        server.stop()
    recs = records(run_dir)
    by: dict[str, int] = {}
    for r in recs:
        key = f"C={1 if r['step'] == 0 else 4} {r['error_class'] or 'ok'}"
        by[key] = by.get(key, 0) + 1
    silent = [r for r in recs if r["error_class"] is None and not r["output_tokens"]]
    cut = [r for r in recs if r["error_class"] == "truncated"]
    no_finish_ok = [r for r in recs if r["error_class"] is None and r["finish_reason"] is None]
    print("\n== interrupt: the server's default (a new request cuts the one in progress)")
    print("records:", ", ".join(f"{k} {v}" for k, v in sorted(by.items())))
    print(f"ok with no output: {len(silent)}; ok without finish_reason: {len(no_finish_ok)}")
    if cut:
        print(f"a cut answer's record: {cut[0]['error']!r}")
    return {
        "records": by,
        "ok_without_output": len(silent),
        "ok_without_finish": len(no_finish_ok),
        "truncated": len(cut),
    }


def bytes_case(python: Path, gguf: Path, work: Path) -> dict[str, Any]:
    server = Server(python, gguf, work, "--interrupt_requests", "False")
    try:
        run_dir = ramp(server.url, work / "bytes", "1", 48, NO_EOS)
    finally:
        server.stop()
    recs = [r for r in records(run_dir) if r["error_class"] is None]
    diffs = [r["output_tokens"] - MAX_TOKENS for r in recs]
    exact = sum(d == 0 for d in diffs)
    print("\n== bytes: the whole byte vocabulary, EOS blocked (every answer is max_tokens long)")
    print(
        f"{len(recs)} answers, counted from chunks (no usage in llama-cpp-python's streams): exactly {MAX_TOKENS} "
        f"in {exact} ({exact / max(len(recs), 1):.0%}); count - truth: min {min(diffs, default=0)}, "
        f"median {statistics.median(diffs) if diffs else 0}, max {max(diffs, default=0)}"
    )
    return {"answers": len(recs), "exact": exact, "diff_min": min(diffs, default=0), "diff_max": max(diffs, default=0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", type=Path, required=True, help="the venv with llama-cpp-python[server] and gguf")
    ap.add_argument("--gguf", type=Path, help="the model (default: VENV/../tiny.gguf, written when missing)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of the queue case (default 3)")
    ap.add_argument("--keep", type=Path, help="keep the run directories here")
    a = ap.parse_args()
    python = a.venv / "bin" / "python"
    gguf = a.gguf or a.venv.parent / "tiny.gguf"
    if not gguf.exists():
        subprocess.run([str(python), str(SHARED / "make_gguf.py"), str(gguf)], check=True)
    work = a.keep or Path(tempfile.mkdtemp(prefix="llamacpp-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    result = {
        "queue": queue_case(python, gguf, work, a.reps),
        "interrupt": interrupt_case(python, gguf, work),
        "bytes": bytes_case(python, gguf, work),
        "seconds": round(time.monotonic() - t0, 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
