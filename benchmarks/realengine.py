"""A real vLLM under KV pressure: does a ramp measure what it did, and does the twin predict it? (issue 33)

The engine is ../shared/realserver's vLLM (CPU build) serving a tiny random-weight Llama (built
locally; nothing downloaded; ~3 GB venv, so never in the CI suite), started once per KV pool size
with ``KV_BLOCKS`` blocks of 128 tokens and ``MAX_NUM_SEQS`` 32, on 127.0.0.1, warmed up by a ramp no
figure reads (``warm_up``), and stopped at the end.
vLLM pins its worker to one CPU itself, and its other processes and the load generator share every
CPU, the load generator's ramps in a scheduling group at nice -10 (``--nice``, ``CLIENT_NICE``:
vLLM's threads otherwise kept it off the cores for hundreds of ms at a time); ``--split`` puts vLLM on all CPUs but the
last and the load generator's ramps on the last (``split_cpus``: tried on 2026-12-06 and not the
default, for what it did to vLLM).

    ../shared/realserver/start.sh /work/rs 8011      # once: builds /work/rs/venv and /work/rs/model
    PYTHONPATH=. .venv/bin/python benchmarks/realengine.py --dir /work/rs [--quick] [--json OUT.json]

For each pool (``--pools``, blocks) and prompt/output mix (``--mixes``), ``--reps`` times:

* a calibration ramp at ``--cal`` users (1, 2, 4: below the KV pool's limit) and a truth ramp at
  ``--predict`` users (8, 16: twice and four times the highest), each a real ``loadgen ramp`` with
  ``--metrics-url``, vLLM's /metrics scraped before and after;
* truth, per ramp: the output tokens of our records against vLLM's ``generation_tokens`` counter
  (equal when every request ran to its end), the largest gap between our TTFT CDF (first chunk less
  sent) and vLLM's ``time_to_first_token_seconds`` histogram at each of its bounds (target 0.05), and
  the step where our report sees the first preemption against vLLM's counter read at the steps' ends;
  beside the gap: how many TTFTs our transport marked as upper bounds (``chunk_late_ns``: this
  process read late and the kernel merged the bytes; ``send_late_ns`` over 1 ms: it was descheduled
  before its request's write; on this 2-core host the engine's threads take both cores) and the gap
  without them, our mean TTFT against vLLM's, and our mean E2E less
  vLLM's (``e2e_request_latency_seconds``);
* the wire (``tcpdump`` on loopback, unless ``--no-wire`` or it cannot capture): per request, the
  request packet to the first packet with output text; our TTFT less the wire's for the records we
  vouch for and for those we marked, and the wire's CDF against vLLM's histogram, the part of the
  gap that lies in vLLM's API process (outside its clock) and no client can close;
* the check ramp (unless ``--no-check``): the calibration's loads again, right after the truth ramp,
  and the largest change of TPOT p50 between the two: how far the engine's own speed moved within
  the case (``HOST_MOVED_MAX``), the floor under the twin's error on this host;
* the twin, ``loadgen twin CAL --concurrency 8,16 --engine E`` for E = sglang and vllm: its output
  tok/s and TPOT p50 at the truth's loads (target within 10 %) and the first load at which it
  preempts, over its replay of the calibration ramp and its prediction (target: vLLM's first, over
  the calibration and truth ramps; at pool 24, 600:128 vLLM preempts at the calibration's 4 users).
  A truth step whose users held less than ``HELD_MIN`` of their load (requests in flight over users:
  the load generator, descheduled, sent late) is not counted in the twin's medians; it is printed
  apart with its error. The twin's errors on its own calibration steps are printed too.

Prints one row per case and engine model, the medians, vLLM against itself (its tok/s at one case and
load, repetition against repetition, and the check ramp against the calibration: the floor under the
twin's error on this host), and last a JSON object. Figures:
benchmarks/RESULTS.md and docs/twin.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import wire  # benchmarks/wire.py: the loopback packets as a second truth
from llamacpp import records, steps  # the run directory's readers (benchmarks/ is sys.path[0])

from loadgen.analysis.columns import TIMING_TOLERANCE_NS
from loadgen.telemetry import prom

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = ROOT.parent / "shared" / "realserver"
ENGINES = ("sglang", "vllm")
PREEMPTIONS = "vllm:num_preemptions_total"
WIRE_SNAPLEN = 512  # reaches the delta of vLLM's chunks (the first token follows a role-only chunk)
HEADER = (
    "| pool | mix | rep | load | measured tok/s | TPOT p50 ms | preempted | model | twin tok/s | err | "
    "twin TPOT p50 | err | twin preempted | load held |"
)


def split_cpus() -> tuple[set[int] | None, set[int] | None]:
    """The CPUs for vLLM and for the load generator: the last CPU this process may use goes to the
    load generator, the rest to vLLM, as a load generator runs on a machine of its own against a GPU
    server. vLLM pins its worker to CPU 0 itself; its engine-core and API processes float. On the
    2-core host (2026-12-06, pool 32, 300:256, ramps at 1-8 users): with every process free, the
    load generator shared a core with them, and in 3 of 6 ramps its users held 0.77-0.92 of their
    load at 2-8 users (requests in flight over users), and 8 users read 720-1,179 tok/s over the 6;
    split, 0.99-1.00 at every load, and 753-898 tok/s over 3. The full benchmark split (``--split``,
    3,101 s): every truth step held its load and vLLM repeated itself within 9.5 % (median), but
    vLLM's API and engine-core processes then share its worker's core. Our TTFT CDF was within 0.05
    of vLLM's histogram in 15 of 24 ramps (first tokens near its 40-ms bound, moved across by the few
    ms its API process adds outside its clock), and the wire's own gap was as large (0.176). The
    twin read 12.2 % on tok/s and 14.3 % on TPOT p50, against 11.8 % and 10.2 % on all 24 points of
    the run before with every CPU shared. So it is not the default. (None, None) with one CPU."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None, None
    return set(cpus[:-1]), {cpus[-1]}


CLIENT_NICE = -10
"""The load generator's ramps against vLLM run in a session of their own whose scheduling group
(Linux's autogroup, ``/proc/self/autogroup``) is at this nice value (``--nice``; 0: in this
process's session, as before). vLLM's worker, engine-core and API threads keep both cores busy
while it serves, in a session and so a scheduling group of their own (start.sh's ``setsid``). The
load generator, asleep most of the time, then waited for a core for hundreds of ms at a time, and
its users went one at a time: a request's ``send`` woke vLLM's API server, which took the core, and
the process was held inside that ``sendto`` (575 ms under strace) while another request's whole
answer arrived; the others' sends waited behind it. Its records said so (``user_late_ns``, the
steps marked timing uncertain, ``held``), but the steps did not apply their load.

Measured on 2026-12-06, one vLLM (pool 48, 300:256), ramps of 4 and 16 users (12 s each) in turn,
two rounds; the users' requests in flight over their number (``held``) at 4 / 16 users: as before
0.69 / 0.97 and 0.57 / 0.99; the process alone at nice -10 0.85 / 0.61 and 0.99 / 1.00; SCHED_RR
1.00 / 1.00 twice; this (its own session, the group at -10) 1.00 / 1.00 and 1.00 / 0.97. The group's
weight is what vLLM's group outweighed. The load generator uses a few % of a core, so vLLM keeps
the rest; a GPU server has its load generator on another machine. Where the group cannot be set
(no autogroup, or not permitted) the process's own nice value is set instead, and the run says so."""


def _on(cpus: set[int] | None, nice: int | None = None) -> Any:
    """A ``preexec_fn`` that puts the child (and what it starts) on ``cpus`` and, with ``nice``, in a
    session of its own whose scheduling group is at ``nice`` (``CLIENT_NICE``; the process's own
    nice value where there is no autogroup to set); None: no change."""
    if cpus is None and nice is None:
        return None

    def pre() -> None:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        if nice is not None:
            os.setsid()
            try:
                with open("/proc/self/autogroup", "w") as f:
                    f.write(str(nice))
            except OSError:
                os.setpriority(os.PRIO_PROCESS, 0, nice)

    return pre


def scheduling_group(nice: int) -> str | None:
    """How the load generator's ramps can be given ``nice``: "autogroup", "process" (its own nice
    value only) or None (neither is permitted here: below 0 needs root or CAP_SYS_NICE)."""
    probe = (
        "import os, sys\nos.setsid()\n"
        "try:\n    open('/proc/self/autogroup', 'w').write(sys.argv[1])\n    print('autogroup')\n"
        "except OSError:\n    os.setpriority(os.PRIO_PROCESS, 0, int(sys.argv[1]))\n    print('process')\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe, str(nice)], capture_output=True, text=True, timeout=30)
    return proc.stdout.strip() if proc.returncode == 0 else None


def run_loadgen(
    *args: str, timeout: float, cpus: set[int] | None = None, nice: int | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "loadgen.cli", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT, preexec_fn=_on(cpus, nice)
    )


class Server:
    """vLLM on 127.0.0.1:``port`` with a pool of ``blocks`` blocks (start.sh / stop.sh), on ``cpus``
    (None: every CPU). ``client_cpus`` and ``client_nice``: where and at what nice value the load
    generator runs against it (None: as this process)."""

    def __init__(
        self,
        vdir: Path,
        port: int,
        blocks: int,
        cpus: set[int] | None = None,
        client_cpus: set[int] | None = None,
        client_nice: int | None = None,
    ) -> None:
        self.vdir, self.port, self.blocks = vdir, port, blocks
        self.cpus, self.client_cpus, self.client_nice = cpus, client_cpus, client_nice
        self.pid = 0

    def __enter__(self) -> Server:
        env = {**os.environ, "KV_BLOCKS": str(self.blocks), "MAX_MODEL_LEN": "1024", "MAX_NUM_SEQS": "32"}
        proc = subprocess.run(
            ["bash", str(SHARED / "start.sh"), str(self.vdir), str(self.port)],
            capture_output=True, text=True, env=env, timeout=900, preexec_fn=_on(self.cpus),
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"start.sh failed ({proc.returncode}): {proc.stderr[-2000:]}")
        self.pid = int(proc.stdout.strip().splitlines()[-1])
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["bash", str(SHARED / "stop.sh"), str(self.pid)], capture_output=True, timeout=120)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def metrics(self) -> prom.Exposition:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as resp:
            return prom.parse(resp.read().decode(), lambda n: n.startswith("vllm:"))


def counter(expo: prom.Exposition, name: str) -> float:
    return sum(s.value for s in expo.samples if s.name == name)


def ttft_buckets(expo: prom.Exposition) -> dict[float, float]:
    out: dict[float, float] = {}
    for s in expo.samples:
        if s.name == "vllm:time_to_first_token_seconds_bucket":
            le = float(s.labels["le"])
            out[le] = out.get(le, 0.0) + s.value
    return out


def ramp(server: Server, out: Path, loads: str, prompt: int, output: int, step_s: float, label: str) -> Path:
    proc = run_loadgen(
        "ramp", "--url", server.url, "--concurrency", loads, "--context-tokens", str(prompt),
        "--max-tokens", str(output), "--step-seconds", str(step_s), "--warmup-seconds", "2",
        "--drain-seconds", "60", "--metrics-url", server.url + "/metrics", "--out", str(out), "--label", label,
        timeout=1800, cpus=server.client_cpus, nice=server.client_nice,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"loadgen ramp exited {proc.returncode}: {proc.stderr[-2000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def first_unvouched(rec: dict[str, Any]) -> bool:
    """Whether the record's TTFT is only an upper bound: our transport marked its first output time
    (``chunk_late_ns`` holds chunk 0) because the kernel merged its bytes with later ones, which it
    does when this process reads late; or its request went out more than the analysis's tolerance
    after the send stamp (``send_late_ns``: the process was descheduled before its write). On this
    2-core host the CPU engine's threads take both cores (a 1-ms sleeper here oversleeps by up to
    2.4 s while vLLM decodes), and the wire shows vLLM sent those chunks on time."""
    late_send = (rec.get("send_late_ns") or 0) > TIMING_TOLERANCE_NS
    return late_send or any(i == 0 for i, _ in rec.get("chunk_late_ns") or [])


def gap_at_bounds(ttfts: list[float], buckets: dict[float, float], total: float) -> float:
    """The largest gap between our TTFT CDF and vLLM's histogram at each of its bounds."""
    return band_gap([(x, x) for x in ttfts], buckets, total)


def band_gap(spans: list[tuple[float, float]], buckets: dict[float, float], total: float) -> float:
    """``gap_at_bounds`` where a first time we only bound is an interval (``lo``, ``hi``): at each
    bound our CDF lies between the share certainly under it (``hi <= le``) and the share possibly
    under it (``lo <= le``); the gap is vLLM's CDF's distance from that band. A vouched time is an
    interval of width 0."""
    gap = 0.0
    n = len(spans)
    for le in sorted(buckets):
        if le == float("inf") or not total or not n:
            continue
        theirs = buckets[le] / total
        certain = sum(1 for _, hi in spans if hi <= le) / n
        possible = sum(1 for lo, _ in spans if lo <= le) / n
        gap = max(gap, certain - theirs, theirs - possible)
    return gap


def first_span(rec: dict[str, Any]) -> tuple[float, float]:
    """A record's TTFT (s) as the interval our transport vouches for: from the send stamp to its
    first output time, down to the time from its request's write (``send_late_ns``) to the earliest
    the first bytes can have arrived (``chunk_late_ns`` of chunk 0)."""
    hi = (rec["first_chunk_ns"] - rec["sent_ns"]) / 1e9
    early = next((ns for i, ns in rec.get("chunk_late_ns") or [] if i == 0), 0)
    early += rec.get("send_late_ns") or 0
    return max(0.0, hi - early / 1e9), hi


def repeatability(rows: list[dict[str, Any]]) -> list[float]:
    """How far vLLM's measured tok/s at one case and load moved between repetitions, |rep k / rep 0 - 1|:
    the floor under the twin's error on this host (the twin is calibrated and checked minutes apart)."""
    tok = {(r["pool_blocks"], r["prompt"], r["output"], r["rep"], r["load"]): r["measured_tok_s"] for r in rows}
    first = {k: (k[0], k[1], k[2], 0, k[4]) for k in tok}  # the same case and load, rep 0
    return [abs(v / tok[first[k]] - 1) for k, v in tok.items() if k[3] > 0 and tok.get(first[k])]


HELD_MIN = 0.95
"""A truth step whose users had fewer requests in flight than this share of them did not apply its
load: the twin's error there is not counted (the rows are printed apart)."""


def held(run_dir: Path) -> dict[int, float]:
    """Per load: the requests in flight over the steady window, as a share of the users (these ramps
    have no think time: a load generator that keeps up holds 1.0). On this host vLLM's engine threads
    take both cores and the load generator's process was descheduled for up to 2.2 s between an
    answer and the next request: 8 users held 5.95 (2026-12-06). New runs also say so themselves
    (``timing.users_late_share``, the step marked timing uncertain)."""
    marks = {int(s["step"]): s for s in steps(run_dir)}
    busy: dict[int, float] = {}
    for r in records(run_dir):
        s = marks.get(int(r["step"]))
        if s is None:
            continue
        a, b = s["steady_ns"], s["end_ns"]
        busy[s["step"]] = busy.get(s["step"], 0.0) + max(0, min(r["end_ns"], b) - max(r["sent_ns"], a))
    return {
        int(s["concurrency"]): busy.get(k, 0.0) / ((s["end_ns"] - s["steady_ns"]) * s["concurrency"])
        for k, s in marks.items()
        if s.get("concurrency") and s["end_ns"] > s["steady_ns"]
    }


def hist_mean(before: prom.Exposition, after: prom.Exposition, name: str) -> float | None:
    n = counter(after, name + "_count") - counter(before, name + "_count")
    return (counter(after, name + "_sum") - counter(before, name + "_sum")) / n if n else None


def truth(
    run_dir: Path, before: prom.Exposition, after: prom.Exposition, wire_calls: dict[str, Any] | None = None
) -> dict[str, Any]:
    recs = [r for r in records(run_dir) if r.get("error_class") is None]
    ours_tokens = sum(int(r.get("output_tokens") or 0) for r in recs)
    vllm_tokens = counter(after, "vllm:generation_tokens_total") - counter(before, "vllm:generation_tokens_total")
    timed = [r for r in recs if r.get("first_chunk_ns")]
    ttfts = sorted((r["first_chunk_ns"] - r["sent_ns"]) / 1e9 for r in timed)
    b0, b1 = ttft_buckets(before), ttft_buckets(after)
    total = b1.get(float("inf"), 0.0) - b0.get(float("inf"), 0.0)
    buckets = {le: b1[le] - b0.get(le, 0.0) for le in b1}
    gap = gap_at_bounds(ttfts, buckets, total)
    # what lies outside vLLM's clock: its TTFT and E2E histograms start when the request reaches its
    # engine (after the HTTP parse and the tokenizer) and stop when the engine emits (before the
    # detokenizer and the stream's write)
    vouched = sorted((r["first_chunk_ns"] - r["sent_ns"]) / 1e9 for r in timed if not first_unvouched(r))
    e2e_vllm = hist_mean(before, after, "vllm:e2e_request_latency_seconds")
    ttft_vllm = hist_mean(before, after, "vllm:time_to_first_token_seconds")
    e2e_ours = sum((r["end_ns"] - r["sent_ns"]) / 1e9 for r in timed) / len(timed) if timed else None
    pre = [(int(s["concurrency"]), float(s.get("preemptions") or 0.0)) for s in steps(run_dir)]
    out: dict[str, Any] = {
        "run": str(run_dir),
        "requests": len(recs),
        "output_tokens": ours_tokens,
        "vllm_generation_tokens": vllm_tokens,
        "ttft_cdf_gap": gap,
        "ttft_cdf_gap_vouched": gap_at_bounds(vouched, buckets, total),
        "ttft_cdf_gap_band": band_gap([first_span(r) for r in timed], buckets, total),
        "first_unvouched": len(timed) - len(vouched),
        "ttft_mean_ms": (sum(ttfts) / len(ttfts) * 1e3) if ttfts else None,
        "ttft_mean_vllm_ms": ttft_vllm * 1e3 if ttft_vllm is not None else None,
        "e2e_path_ms": (e2e_ours - e2e_vllm) * 1e3 if e2e_ours is not None and e2e_vllm is not None else None,
        "ttft_requests": (len(ttfts), total),
        "preemptions": pre,
        "preemptions_counter": counter(after, "vllm:num_preemptions_total")
        - counter(before, "vllm:num_preemptions_total"),
    }
    if wire_calls is not None:
        out["wire"] = wire_truth(timed, wire_calls, buckets, total)
    return out


def wire_truth(
    timed: list[dict[str, Any]], calls: dict[str, Any], buckets: dict[float, float], total: float
) -> dict[str, Any]:
    """The first token as loopback packets show it (request packet to the first packet with output
    text): our TTFT less the wire's per request, for the records whose first time we vouch for and
    for those we marked; and the wire's CDF against vLLM's histogram (what no client can close)."""
    vouched: list[float] = []
    marked: list[float] = []
    wire_ttfts: list[float] = []
    for r in timed:
        call = calls.get(r.get("header_id") or r["id"])
        if call is None or call.first_response_ns is None:
            continue
        theirs = (call.first_response_ns - call.request_ns) / 1e6
        wire_ttfts.append(theirs / 1e3)
        (marked if first_unvouched(r) else vouched).append((r["first_chunk_ns"] - r["sent_ns"]) / 1e6 - theirs)
    return {
        "matched": len(wire_ttfts),
        "ours_minus_wire_ms": wire.stats(vouched),
        "marked_minus_wire_ms": wire.stats(marked),
        "wire_cdf_gap": gap_at_bounds(sorted(wire_ttfts), buckets, total),
    }


def wired(
    on: bool, server: Server, out: Path, loads: str, prompt: int, output: int, step_s: float, label: str
) -> tuple[Path, dict[str, Any] | None]:
    """``ramp`` with the loopback packets captured (``--wire``): the run and its calls by request id,
    or None (and why, once) where tcpdump cannot capture."""
    if not on:
        return ramp(server, out, loads, prompt, output, step_s, label), None
    pcap = out / f"{label}.pcap"
    with wire.capture(server.port, pcap, snaplen=WIRE_SNAPLEN) as why:
        run = ramp(server, out, loads, prompt, output, step_s, label)
    if why is not None:
        print(f"  no wire truth: {why}", flush=True)
        return run, None
    calls = wire.read_calls(pcap, server.port, output_only=True)
    pcap.unlink()
    return run, calls


def wire_line(t: dict[str, Any]) -> str:
    w = t.get("wire")
    if w is None:
        return "wire: not captured"
    v, m = w["ours_minus_wire_ms"], w["marked_minus_wire_ms"]
    return (
        f"wire ({w['matched']} requests): our TTFT less the wire's, vouched {v['n']}: p50 {_ms(v['p50'])} "
        f"p99 {_ms(v['p99'])} max {_ms(v['max'])} ms; marked {m['n']}: p50 {_ms(m['p50'])} max {_ms(m['max'])} ms; "
        f"the wire's TTFT CDF against vLLM's histogram {w['wire_cdf_gap']:.3f}"
    )


def onset(pre: list[tuple[int, float]]) -> int | None:
    return next((c for c, n in pre if n > 0), None)


def twin(cal: Path, out: Path, loads: str, engine: str) -> tuple[dict[int, dict[str, Any]], dict[int, dict[str, Any]]]:
    """The twin's steps at ``loads`` (its what-if ramp) and at the calibration's own loads (its replay
    of the calibration ramp, which ``loadgen twin`` runs first; twin.json's ``twin_runs``)."""
    proc = run_loadgen("twin", str(cal), "--concurrency", loads, "--engine", engine, "--out", str(out), timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"loadgen twin exited {proc.returncode}: {proc.stderr[-2000:]}")
    twin_run = Path(proc.stdout.strip().splitlines()[-1])
    runs = [Path(r) for r in json.loads((out / "twin.json").read_text()).get("twin_runs") or []]
    replay = next((r for r in runs if r != twin_run), None)
    by_load = lambda run: {int(s["concurrency"]): s for s in steps(run)}  # noqa: E731
    return by_load(twin_run), (by_load(replay) if replay else {})


HOST_MOVED_MAX = 0.10
"""The calibration's loads are ramped again after the truth ramp (the check ramp), and the largest
change of TPOT p50 between the two is printed per case and summed up beside the twin's errors, with
how many cases moved by more than this (the twin's target): the engine's own speed minutes apart, the
floor under what the twin can be held to on this host. It does not leave points out: in the full run
of 2026-12-06 (sixth session) every case moved by more than 10 % (median 17.2 %, max 33.2 %), twins
within 2 % among them, so the host moves within a ramp and a check before and after cannot say which
truth steps it moved. TPOT p50 is the engine's
step; a ramp's tok/s also moves with the load generator's and vLLM's API process's time on the cores,
which the twin's fit does not read (its decode and prefill steps are timed between chunks)."""


def host_moved(before: Path, after: Path) -> float:
    """The largest relative change of TPOT p50 over the loads both ramps ran."""
    a = {int(s["concurrency"]): s["tpot_ms"]["p50"] for s in steps(before)}
    b = {int(s["concurrency"]): s["tpot_ms"]["p50"] for s in steps(after)}
    return max((abs(b[c] / a[c] - 1) for c in a.keys() & b.keys() if a[c] and b[c]), default=0.0)


def warm_up(server: Server, out: Path, prompt: int, output: int, blocks: int) -> None:
    """A ramp no figure reads, right after vLLM starts: its first requests run slow (on 2026-12-06
    the first calibration ramp of a fresh server read 519 tok/s at 4 users, and the same loads ramped
    again three minutes later 909, TPOT p50 at one user 3.05 ms and then 2.39)."""
    ramp(server, out, "1,4", prompt, output, 10.0, f"warmup-b{blocks}")


def left_out(r: dict[str, Any]) -> list[str]:
    """Why a point cannot judge the twin: its users did not hold their load (``HELD_MIN``)."""
    if r.get("held") is not None and r["held"] < HELD_MIN:
        return [f"the users held {r['held']:.2f} of their load"]
    return []


def twin_summary(rows: list[dict[str, Any]]) -> str:
    """Per engine model: the twin's median and largest errors over the truth steps that can judge it
    (``left_out``), how many points were within 10 % on both, the preemption onset, the twin's errors
    on the calibration it was fitted on; then the points left out, each with its error, never
    averaged in."""
    out = []
    for engine in ENGINES:
        mine = [r for r in rows if r["engine_model"] == engine]
        kept = [r for r in mine if not left_out(r)]
        tok = [abs(r["tok_s_err"]) for r in kept if r["tok_s_err"] is not None]
        tpot = [abs(r["tpot_err"]) for r in kept if r["tpot_err"] is not None]
        both = sum(1 for r in kept if r["tok_s_err"] is not None and r["tpot_err"] is not None
                   and abs(r["tok_s_err"]) < 0.1 and abs(r["tpot_err"]) < 0.1)  # fmt: skip
        cases = {(r["pool_blocks"], r["prompt"], r["rep"]): r for r in mine}
        same = sum(1 for r in cases.values() if r["onset_twin"] == r["onset_measured"])
        tok_all = [abs(r["tok_s_err"]) for r in mine if r["tok_s_err"] is not None]
        tpot_all = [abs(r["tpot_err"]) for r in mine if r["tpot_err"] is not None]
        if tok and tpot:
            out.append(
                f"{engine}: median |err| tok/s {median(tok) * 100:.1f}% (max {max(tok) * 100:.1f}%), TPOT p50 "
                f"{median(tpot) * 100:.1f}% (max {max(tpot) * 100:.1f}%), both within 10 % at {both}/{len(kept)} "
                f"points that judge it (all {len(mine)}: {median(tok_all) * 100:.1f}% and "
                f"{median(tpot_all) * 100:.1f}%); preemption onset at the measured load in {same}/{len(cases)} cases"
            )
        at_cal = [e for r in cases.values() for e in (r.get("twin_at_cal_err") or {}).values()]
        cal_tok = [abs(a) for a, _ in at_cal if a is not None]
        cal_tpot = [abs(b) for _, b in at_cal if b is not None]
        if cal_tok and cal_tpot:
            out.append(
                f"  {engine} on its own calibration's {len(at_cal)} steps: median |err| tok/s "
                f"{median(cal_tok) * 100:.1f}% (max {max(cal_tok) * 100:.1f}%), TPOT p50 {median(cal_tpot) * 100:.1f}% "
                f"(max {max(cal_tpot) * 100:.1f}%)"
            )
        for r in mine:
            if r not in kept:
                out.append(
                    f"  left out ({engine}): pool {r['pool_blocks']}, {r['prompt']}:{r['output']}, rep {r['rep']}, "
                    f"C={r['load']}: {'; '.join(left_out(r))} (tok/s {pct(r['tok_s_err'])}, "
                    f"TPOT {pct(r['tpot_err'])})"
                )
    return "\n".join(out)


def err(pred: float | None, meas: float | None) -> float | None:
    if pred is None or not meas:
        return None
    return (pred - meas) / meas


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}"


def pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:+.1f}%"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="start.sh's folder (its venv and model; built if missing)")
    ap.add_argument("--port", type=int, default=8031)
    ap.add_argument("--pools", default="24,32,48", help="KV pool sizes, blocks of 128 tokens (default: 24,32,48)")
    ap.add_argument("--mixes", default="300:256,600:128", help="prompt:output tokens (default: 300:256,600:128)")
    ap.add_argument("--cal", default="1,2,4", help="calibration loads (default: 1,2,4)")
    ap.add_argument("--predict", default="8,16", help="loads to predict (default: 8,16)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--step-seconds", type=float, default=12.0)
    ap.add_argument("--out", default="/tmp/realengine", help="run directories (default: /tmp/realengine)")
    ap.add_argument("--quick", action="store_true", help="one pool (32), one mix, one repetition")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument(
        "--split",
        action="store_true",
        help="the last CPU for the load generator's ramps, the rest for vLLM (default: every CPU for both, vLLM "
        "pinning its worker as it does itself); see split_cpus for what it did on the 2-core host",
    )
    ap.add_argument(
        "--nice",
        type=int,
        default=CLIENT_NICE,
        help=f"the nice value of the load generator's ramps' scheduling group, a session of their own (default: "
        f"{CLIENT_NICE}; 0 runs them in this process's session, as vLLM runs); see CLIENT_NICE for why",
    )
    ap.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="do not ramp the calibration's loads again after the truth ramp (the check of the host's speed, "
        "HOST_MOVED_MAX)",
    )
    ap.add_argument(
        "--no-wire", dest="wire", action="store_false", help="do not capture the loopback packets (tcpdump) as a truth"
    )
    args = ap.parse_args()
    pools = [32] if args.quick else [int(x) for x in args.pools.split(",")]
    mixes = [tuple(int(v) for v in m.split(":")) for m in args.mixes.split(",")][: 1 if args.quick else None]
    reps = 1 if args.quick else args.reps
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    engine_cpus, client_cpus = split_cpus() if args.split else (None, None)
    print(
        f"vLLM on CPUs {sorted(engine_cpus)}, the load generator's ramps on {sorted(client_cpus)}; the twin's "
        "replays on every CPU"
        if engine_cpus and client_cpus
        else "vLLM and the load generator on every CPU"
    )
    client_nice: int | None = args.nice if args.nice != 0 else None
    how = scheduling_group(client_nice) if client_nice is not None else None
    if client_nice is not None and how is None:
        print(f"the load generator's ramps cannot run at nice {client_nice} here (not permitted): at 0, as vLLM")
        client_nice = None
    if how == "autogroup":
        print(f"the load generator's ramps in a session of their own, its scheduling group at nice {client_nice}")
    elif how == "process":
        print(f"the load generator's ramps at nice {client_nice} (the process: no autogroup to set)")
    else:
        print("the load generator's ramps in this process's session, at its nice value, as vLLM's")
    print(HEADER)
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for blocks in pools:
        with Server(Path(args.dir), args.port, blocks, engine_cpus, client_cpus, client_nice) as server:
            warm_up(server, out, mixes[0][0], mixes[0][1], blocks)
            for prompt, output in mixes:
                for rep in range(reps):
                    tag = f"b{blocks}-p{prompt}-o{output}-r{rep}"
                    m0 = server.metrics()
                    cal, w_cal = wired(
                        args.wire, server, out, args.cal, prompt, output, args.step_seconds, f"cal-{tag}"
                    )
                    m1 = server.metrics()
                    tru, w_tru = wired(
                        args.wire, server, out, args.predict, prompt, output, args.step_seconds, f"truth-{tag}"
                    )
                    m2 = server.metrics()
                    t_cal, t_tru = truth(cal, m0, m1, w_cal), truth(tru, m1, m2, w_tru)
                    moved = None
                    if args.check:
                        chk = ramp(server, out, args.cal, prompt, output, args.step_seconds, f"check-{tag}")
                        moved = host_moved(cal, chk)
                        print(
                            f"  check {tag}: the calibration's loads again after the truth: TPOT p50 moved {pct(moved)}"
                        )
                    measured = {int(s["concurrency"]): s for s in steps(tru)}
                    at_cal = {int(s["concurrency"]): s for s in steps(cal)}
                    held_by_load = held(tru)
                    held_cal = held(cal)
                    print(
                        f"  {tag}: the calibration's users held "
                        + ", ".join(f"{v:.2f} at C={c}" for c, v in sorted(held_cal.items()))
                        + " of their load",
                        flush=True,
                    )
                    onset_measured = onset(t_cal["preemptions"] + t_tru["preemptions"])
                    for engine in ENGINES:
                        pred, replay = twin(cal, out / f"twin-{tag}-{engine}", args.predict, engine)
                        # the onset over every load the case ran: the calibration's (the twin's replay
                        # of it) and the truth's; a pool that preempts at the calibration's top load
                        # has its onset there
                        pre_twin = [
                            (c, float(steps_at[c].get("preemptions") or 0.0))
                            for steps_at in (replay, pred)
                            for c in sorted(steps_at)
                        ]
                        cal_err = {
                            c: (
                                err(replay[c].get("output_tok_s"), at_cal[c]["output_tok_s"]),
                                err((replay[c].get("tpot_ms") or {}).get("p50"), at_cal[c]["tpot_ms"]["p50"]),
                            )
                            for c in sorted(at_cal.keys() & replay.keys())
                        }
                        for c in sorted(measured):
                            m, p = measured[c], pred.get(c, {})
                            row = {
                                "pool_blocks": blocks, "prompt": prompt, "output": output, "rep": rep,
                                "load": c, "engine_model": engine,
                                "measured_tok_s": m["output_tok_s"], "twin_tok_s": p.get("output_tok_s"),
                                "measured_tpot_p50": m["tpot_ms"]["p50"],
                                "twin_tpot_p50": (p.get("tpot_ms") or {}).get("p50"),
                                "measured_preemptions": m.get("preemptions"), "twin_preemptions": p.get("preemptions"),
                                "onset_measured": onset_measured, "onset_twin": onset(pre_twin),
                                "held": held_by_load.get(c), "held_cal": held_cal,
                                "client_nice": client_nice or 0, "client_group": how,
                                "host_moved": moved, "twin_at_cal_err": cal_err,
                                "truth_cal": t_cal, "truth_truth": t_tru,
                            }  # fmt: skip
                            row["tok_s_err"] = err(row["twin_tok_s"], row["measured_tok_s"])
                            row["tpot_err"] = err(row["twin_tpot_p50"], row["measured_tpot_p50"])
                            rows.append(row)
                            print(
                                f"| {blocks} | {prompt}:{output} | {rep} | C={c} | {m['output_tok_s']:.0f} | "
                                f"{m['tpot_ms']['p50']:.2f} | {m.get('preemptions'):.0f} | {engine} | "
                                f"{row['twin_tok_s'] or 0:.0f} | {pct(row['tok_s_err'])} | "
                                f"{row['twin_tpot_p50'] or 0:.2f} | {pct(row['tpot_err'])} | "
                                f"{p.get('preemptions') or 0:.0f} | {held_by_load.get(c, 0):.2f} |",
                                flush=True,
                            )
                    for name, t in (("cal", t_cal), ("truth", t_tru)):
                        print(
                            f"  truth {tag} {name}: output tokens {t['output_tokens']} "
                            f"vs vLLM {t['vllm_generation_tokens']:.0f}; "
                            f"TTFT CDF gap {t['ttft_cdf_gap']:.3f} over {t['ttft_requests'][0]} requests "
                            f"(vLLM {t['ttft_requests'][1]:.0f}); first times marked as upper bounds (read late) "
                            f"{t['first_unvouched']}: gap with them as their bounds {t['ttft_cdf_gap_band']:.3f}, "
                            f"without them {t['ttft_cdf_gap_vouched']:.3f}; "
                            f"TTFT mean {_ms(t['ttft_mean_ms'])} ms vs vLLM's {_ms(t['ttft_mean_vllm_ms'])}, "
                            f"E2E outside vLLM's clock {_ms(t['e2e_path_ms'])} ms; "
                            f"preemptions per step {t['preemptions']} "
                            f"(counter {t['preemptions_counter']:.0f})",
                            flush=True,
                        )
                        print("    " + wire_line(t), flush=True)
    print()
    print(twin_summary(rows))
    floor = repeatability(rows)
    if floor:
        print(
            f"vLLM against itself (each rep against rep 0 of its case, same load): median |diff| tok/s "
            f"{median(floor) * 100:.1f}% (max {max(floor) * 100:.1f}%), over 10% in "
            f"{sum(1 for d in floor if d > 0.1)}/{len(floor)}: the twin's error cannot be judged finer"
        )
    shifts = {(r["pool_blocks"], r["prompt"], r["rep"]): r["host_moved"] for r in rows}
    within = [m for m in shifts.values() if m is not None]
    if within:
        print(
            f"vLLM against itself within a case (the calibration's loads before and after the truth ramp, the largest "
            f"change of TPOT p50): median {median(within) * 100:.1f}% (max {max(within) * 100:.1f}%), over "
            f"{HOST_MOVED_MAX:.0%} in {sum(1 for m in within if m > HOST_MOVED_MAX)}/{len(within)} cases"
        )
    ramps = list({r[k]["run"]: r[k] for r in rows for k in ("truth_cal", "truth_truth")}.values())
    gaps = [t["ttft_cdf_gap"] for t in ramps]
    bands = [t["ttft_cdf_gap_band"] for t in ramps]
    wires = [t["wire"]["wire_cdf_gap"] for t in ramps if t.get("wire")]
    toks = [(t["output_tokens"], t["vllm_generation_tokens"]) for t in ramps]
    print(
        f"truth: largest TTFT CDF gap {max(gaps):.3f} as recorded, {max(bands):.3f} with the marked first times as "
        f"their bounds (within 0.05 in {sum(1 for b in bands if b <= 0.05)}/{len(bands)} ramps)"
        + (f", the wire's against vLLM's {max(wires):.3f}" if wires else "")
        + f"; output tokens equal vLLM's counter in {sum(1 for a, b in toks if a == b)}/{len(toks)} ramps"
    )
    print(f"{len(rows)} rows in {time.perf_counter() - t0:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str) + "\n")
    print(json.dumps({"rows": len(rows)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
