"""What a run directory says about the server's engine, as arrays the fit reads (``observe(run)``).

Everything here is derived from the client's own timestamps (wall-clock ns) plus, where the run has
them, the server's /metrics samples and GPU samples. The engine model behind the derivations is the
simulator's (docs/twin.md): steps are either a prefill batch or a decode batch; every running
request gets one chunk per decode step; a prefill step ends with the first chunk of every request
it admitted.

* Decode gaps: the gap between two successive chunks of one request spans one decode step, plus
  any prefill step that ran in between. A prefill step ends with a first chunk of *another* request,
  so a gap with no other request's first chunk strictly inside it is "clean": it is one decode step.
  The batch of that step is the number of requests between their first and last chunk at the gap's
  midpoint; the tokens in KV are their prompt tokens plus the tokens they had received by then.
* Prefill events: first chunks that arrive together (within ``CLUSTER_NS``) are one prefill step. It
  started at the later of the end of the step before and the last send time among its requests (an
  idle engine starts on arrival). The step before ended when the first chunk of its burst arrived
  (the chunks before the prefill's, back to a gap of ``CLUSTER_NS``): a server sends a step's chunks
  to its streams one after another while the next step already runs, so the burst's last chunk
  arrives late by the time it took to send the others (the simulator at a batch of 128: ~2 ms), and a
  prefill timed from it reads that much short. A burst longer than half the median clean decode gap
  is taken for arrivals of several steps run together, and its last arrival stands. A step with a
  first chunk whose time the transport marked an upper bound (``chunk_late_ns``: the client read it
  late and the kernel merged its bytes with later ones) is not timed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from loadgen.analysis.columns import TIMING_TOLERANCE_NS, Requests
from loadgen.analysis.load import MISSING, Run
from loadgen.analysis.steps import ok_mask
from loadgen.rundir.samples import Sample, ServerSample, gpu_samples, server_samples

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
BArr = npt.NDArray[np.bool_]

CLUSTER_NS = 300_000
"""First chunks closer than this (0.3 ms) came from one prefill step (a step's chunks leave the
server back to back; distinct steps are a step time, milliseconds, apart)."""
EDGE_NS = 200_000
"""A first chunk within this of a gap's ends does not make the gap dirty (same step's emissions)."""

_CAPACITY = re.compile(r"max_running_requests=(\d+)")


@dataclass(frozen=True)
class StepInfo:
    step: int
    concurrency: int | None
    rate: float | None
    context_tokens: int | None
    steady_ns: int
    end_ns: int


@dataclass
class Observations:
    """Arrays derived from one or more runs (concatenated). Times in seconds, tokens as counts."""

    # clean decode gaps
    gap_s: F64
    gap_batch: F64
    gap_ctx_tokens: F64
    gap_run_step: list[str]  # "run:step" label per distinct step (evidence)
    gap_step_idx: I64  # index into gap_run_step
    # tokens per chunk (every non-first, non-last chunk, clean or not)
    chunk_tokens: F64
    chunk_batch: F64
    # prefill events
    prefill_s: F64
    prefill_reqs: I64
    prefill_tokens: F64
    # per successful request (ttft_s: streamed ones only)
    ttft_s: F64
    prompt_tokens: F64
    cached_tokens: F64  # NaN where the server did not say
    output_tokens: F64
    output_chunks: F64  # chunks that carried output (0 where the request was not streamed)
    finished_stop: BArr
    max_tokens: F64
    source: npt.NDArray[np.object_]  # the workload's label ("" where the record has none)
    # run facts
    steps: list[StepInfo]
    records: int
    ok_records: int
    streamed_records: int
    # server metrics (None where the run has none)
    kv_capacity_tokens: float | None = None
    kv_block_tokens: int | None = None  # vLLM's block size (cache_config_info); SGLang pages are 1 token
    engine: str = ""  # the engine the server's /metrics names belong to (sglang, vllm), "" if none
    kv_ratio: F64 = field(default_factory=lambda: np.zeros(0))  # sampled ctx tokens / kv_usage
    running_max: float | None = None
    queued_while_running_max: bool = False
    preemptions: float | None = None
    logged_max_running: int | None = None
    # GPU power samples (per GPU) with whether any request was in flight then
    power_w: F64 = field(default_factory=lambda: np.zeros(0))
    power_busy: F64 = field(default_factory=lambda: np.zeros(0))
    gpus: int = 0
    power_limit_w: float | None = None
    sources: list[str] = field(default_factory=list)


def _csr_rows(counts: I64) -> I64:
    return np.repeat(np.arange(len(counts), dtype=np.int64), counts)


def _burst_starts(t_sorted: I64, sep: int = CLUSTER_NS) -> I64:
    """For each arrival (sorted), the index of the first arrival of its burst: arrivals closer than
    ``sep`` to the one before are one burst."""
    new = np.ones(len(t_sorted), dtype=bool)
    new[1:] = np.diff(t_sorted) > sep
    return np.maximum.accumulate(np.where(new, np.arange(len(t_sorted)), 0))


@dataclass(frozen=True)
class _Chunks:
    """Every chunk of every record that streamed something (failed ones occupied the batch too),
    flattened in record order, with the sorted views that say who was decoding at a given time."""

    rows: I64  # the records that streamed (indices into run.requests)
    rec: I64  # per chunk: its record, as an index into rows
    t: I64  # per chunk: arrival time (ns)
    tok: F64  # per chunk: tokens it carried
    pos: I64  # per chunk: its index within its record
    last_pos: I64  # per chunk: the index of its record's last chunk
    prompt: F64  # per row: prompt tokens (0 where unknown)
    order_first: I64  # rows by first-chunk time
    f_sorted: I64  # first-chunk times, sorted
    l_sorted: I64  # last-chunk times, sorted
    t_sorted: I64  # every chunk's time, sorted
    cum_prompt_f: F64  # prompt tokens of the rows by first-chunk order, cumulated (leading 0)
    cum_prompt_l: F64  # the same by last-chunk order
    cum_out_l: F64  # tokens received per row by last-chunk order, cumulated
    cum_tok: F64  # tokens of every chunk in time order, cumulated

    def batch_ctx(self, x: I64) -> tuple[F64, F64]:
        """At each time in ``x`` (ns): the requests in their decode phase (first chunk at or before,
        last chunk at or after) and the tokens they hold in KV (prompt plus output so far)."""
        a = np.searchsorted(self.f_sorted, x, side="right")
        b = np.searchsorted(self.l_sorted, x, side="left")  # last < x: left the batch
        nb = (a - b).astype(np.float64)
        received = self.cum_tok[np.searchsorted(self.t_sorted, x, side="right")]
        ctx = (self.cum_prompt_f[a] - self.cum_prompt_l[b]) + (received - self.cum_out_l[b])
        return nb, ctx


def _chunks(req: Requests, rows: I64, counts: I64) -> _Chunks:
    """The chunks of the records ``rows`` (``counts``: chunks per record, all records)."""
    sel_counts = counts[rows]
    starts = req.chunk_start[rows]
    idx = np.repeat(starts, sel_counts) + (
        np.arange(int(sel_counts.sum())) - np.repeat(np.cumsum(sel_counts) - sel_counts, sel_counts)
    )
    rec = _csr_rows(sel_counts)
    t = req.sent_ns[rows][rec] + req.chunk_offsets_ns[idx]
    tok = req.chunk_tokens[idx].astype(np.float64)
    pos = np.arange(len(idx)) - np.repeat(np.cumsum(sel_counts) - sel_counts, sel_counts)
    last_pos = sel_counts[rec] - 1
    first_t = t[pos == 0]
    last_t = t[pos == last_pos]
    prompt = np.where(req.prompt_tokens[rows] >= 0, req.prompt_tokens[rows], 0).astype(np.float64)
    order_first = np.argsort(first_t, kind="stable")
    order_last = np.argsort(last_t, kind="stable")
    rec_tokens = np.bincount(rec, weights=tok, minlength=len(rows))
    t_order = np.argsort(t, kind="stable")
    return _Chunks(
        rows=rows,
        rec=rec,
        t=t,
        tok=tok,
        pos=pos,
        last_pos=last_pos,
        prompt=prompt,
        order_first=order_first,
        f_sorted=first_t[order_first],
        l_sorted=last_t[order_last],
        t_sorted=t[t_order],
        cum_prompt_f=np.concatenate(([0.0], np.cumsum(prompt[order_first]))),
        cum_prompt_l=np.concatenate(([0.0], np.cumsum(prompt[order_last]))),
        cum_out_l=np.concatenate(([0.0], np.cumsum(rec_tokens[order_last]))),
        cum_tok=np.concatenate(([0.0], np.cumsum(tok[t_order]))),
    )


def _decode_gaps(ch: _Chunks, step: I64) -> tuple[dict[str, Any], float]:
    """The clean decode gaps (module docstring) with their batch, context and step (``step``: each
    record's step), the tokens per chunk, and half the median clean gap (ns; 0 if none).

    Chunks of one record at the same time were read together (the kernel merged their bytes while
    this process was late, or the server wrote them at once): the gap between them is not a step,
    and the one before them ends early chunks only late. Only the last of them has its own time, so
    the span from the arrival before to it holds one step per chunk it brought, and each of those
    steps is counted as the span over their number (a client descheduled for 0.5 s and then handed
    160 chunks at once gave 159 gaps of 0 and one of 0.5 s: read one by one, they turned a 3.4-ms
    step's median into 3.0 or 0)."""
    n = len(ch.t)
    later = ch.pos > 0
    with_prev = np.zeros(n, dtype=bool)
    with_prev[1:] = later[1:] & (ch.t[1:] == ch.t[:-1])  # read with the chunk before it
    group_start = np.maximum.accumulate(np.where(with_prev, 0, np.arange(n)))
    last_of_group = np.ones(n, dtype=bool)
    last_of_group[:-1] = ~with_prev[1:]
    ends = np.flatnonzero(last_of_group & (ch.pos[group_start] > 0))  # an arrival with one before it
    starts = group_start[ends]
    k = ends - starts + 1  # steps the span holds: one per chunk it brought
    g_end = ch.t[ends]
    g_start = ch.t[starts - 1]
    mid = (g_start + g_end) // 2
    nb, ctx = ch.batch_ctx(mid)
    inside = np.searchsorted(ch.f_sorted, g_end - EDGE_NS, side="left") - np.searchsorted(
        ch.f_sorted, g_start + EDGE_NS, side="right"
    )
    clean = inside <= 0
    per_step = np.repeat(((g_end - g_start) / k)[clean], k[clean])
    step_of_gap = np.repeat(step[ch.rows][ch.rec[ends]][clean], k[clean])
    each = np.flatnonzero(later & (ch.pos < ch.last_pos))  # tokens per chunk: whole chunks after the first
    chunk_nb, _ = ch.batch_ctx((ch.t[each] + ch.t[each - 1]) // 2)
    half_step = float(np.median(per_step)) / 2.0 if len(per_step) else 0.0
    gaps = {
        "gap_s": per_step / 1e9,
        "gap_batch": np.repeat(nb[clean], k[clean]),
        "gap_ctx_tokens": np.repeat(ctx[clean], k[clean]),
        "gap_step": step_of_gap,
        "chunk_tokens": ch.tok[each],
        "chunk_batch": chunk_nb,
    }
    return gaps, half_step


def _prefill_events(ch: _Chunks, req: Requests, sep: int, half_step: float) -> dict[str, Any]:
    """The prefill steps (module docstring): first chunks no more than ``sep`` ns apart are one
    step; its time (s), requests and uncached prompt tokens."""
    f_sorted, t_sorted = ch.f_sorted, ch.t_sorted
    if not len(f_sorted):
        return {"prefill_s": np.zeros(0), "prefill_reqs": np.zeros(0, dtype=np.int64), "prefill_tokens": np.zeros(0)}
    split = np.flatnonzero(np.diff(f_sorted) > sep) + 1
    c_start = np.concatenate(([0], split))
    c_end = np.concatenate((split, [len(f_sorted)]))
    c_t = f_sorted[c_start]
    prev = np.searchsorted(t_sorted, c_t - sep, side="left") - 1
    # the step before ended when the first chunk of its burst arrived: a server sends a step's
    # chunks one stream after another while its next step runs. A burst longer than half a
    # decode step is arrivals of several steps run together (a client that read late): the
    # last arrival stands then.
    last_t = t_sorted[np.maximum(prev, 0)]
    first_t_burst = t_sorted[_burst_starts(t_sorted, sep)][np.maximum(prev, 0)]
    step_end = np.where(last_t - first_t_burst <= half_step, first_t_burst, last_t)
    prev_t = np.where(prev >= 0, step_end, np.iinfo(np.int64).min)
    sent_sorted = req.sent_ns[ch.rows][ch.order_first]
    cached = np.where(req.cached_tokens[ch.rows] >= 0, req.cached_tokens[ch.rows], 0).astype(np.float64)
    new_tokens = np.maximum(ch.prompt - cached, 0.0)[ch.order_first]
    cum_new = np.concatenate(([0.0], np.cumsum(new_tokens)))
    max_sent = np.maximum.reduceat(sent_sorted, c_start)
    begin = np.maximum(prev_t, max_sent)
    p_s = (c_t - begin) / 1e9
    p_reqs = c_end - c_start
    p_tok = cum_new[c_end] - cum_new[c_start]
    # a step with a first time the transport only bounds (this process read it late, the kernel
    # merged its bytes with later ones: ``chunk_late_ns``) is not timed: it is not a measurement
    late_sorted = req.late_first_ns[ch.rows][ch.order_first]
    vouched = np.maximum.reduceat(late_sorted, c_start) <= TIMING_TOLERANCE_NS
    good = (p_s > 0) & (ch.prompt[ch.order_first][c_start] > 0) & vouched
    return {"prefill_s": p_s[good], "prefill_reqs": p_reqs[good].astype(np.int64), "prefill_tokens": p_tok[good]}


def _request_columns(req: Requests, ok: BArr, has_first: BArr, counts: I64) -> dict[str, Any]:
    """Per successful request: TTFT (s; streamed ones only), tokens, chunks, how it finished and its
    workload label."""
    streamed_ok = np.flatnonzero(ok & has_first)
    ttft = (req.first_chunk_ns[streamed_ok] - req.intended_ns[streamed_ok]) / 1e9
    okr = np.flatnonzero(ok)
    fr = req.finish_reason.values(okr)
    cached_col = req.cached_tokens[okr].astype(np.float64)
    cached_col[req.cached_tokens[okr] < 0] = np.nan
    out_tok = req.output_tokens[okr].astype(np.float64)
    out_tok[req.output_tokens[okr] < 0] = np.nan
    return {
        "ttft_s": ttft,
        "prompt_tokens": req.prompt_tokens[okr].astype(np.float64),
        "cached_tokens": cached_col,
        "output_tokens": out_tok,
        "output_chunks": counts[okr].astype(np.float64),
        "finished_stop": np.array([f == "stop" for f in fr], dtype=bool),
        "max_tokens": req.max_tokens[okr].astype(np.float64),
        "source": np.array([v or "" for v in req.source.values(okr)], dtype=object),
    }


def _server_engine(server: list[ServerSample]) -> str | None:
    """The engine most of the server's /metrics samples name (sglang, vllm); None if none does."""
    engines = [e for s in server if (e := s.get("engine")) in ("sglang", "vllm") and e is not None]
    return max(set(engines), key=engines.count) if engines else None


def _numeric_values(samples: Sequence[Mapping[str, object]], key: str) -> list[float]:
    """``key`` of every sample that has it as a number."""
    return [float(v) for s in samples if isinstance(v := s.get(key), (int, float))]


def _server_facts(server: list[ServerSample], ch: _Chunks) -> dict[str, Any]:
    """What the server's /metrics samples say: KV capacity and block size, the tokens in KV per unit
    of reported usage (context from ``ch`` at each sample), the running high mark and whether
    requests queued there with KV to spare, and the preemptions during the run."""
    kv_cap = _numeric_values(server, "kv_capacity_tokens")
    kv_ratio: list[float] = []
    blocks = [b for s in server if isinstance(b := s.get("kv_block_tokens"), int)]
    running = _numeric_values(server, "running")
    run_max = max(running) if running else None
    queued_at_max = any(
        isinstance(q := s.get("queued"), (int, float))
        and q > 0
        and run_max is not None
        and s.get("running") == run_max
        and float(s.get("kv_usage") or 0.0) < 0.9
        for s in server
    )
    usage = [(s["t_ns"], float(u)) for s in server if isinstance(u := s.get("kv_usage"), (int, float))]
    if usage:
        ts = np.array([u[0] for u in usage], dtype=np.int64)
        frac = np.array([u[1] for u in usage])
        _, ctx_at = ch.batch_ctx(ts)
        keep = frac > 0.01
        kv_ratio = (ctx_at[keep] / frac[keep]).tolist()
    pre = _numeric_values(server, "preemptions_total")
    return {
        "kv_capacity_tokens": max(kv_cap) if kv_cap else None,
        "kv_block_tokens": max(blocks) if blocks else None,
        "kv_ratio": np.array(kv_ratio),
        "running_max": run_max,
        "queued_while_running_max": queued_at_max,
        "preemptions": (max(pre) - min(pre)) if pre else None,
    }


def _logged_max_running(events: list[dict[str, Any]]) -> int | None:
    """The last ``max_running_requests=N`` the server's log printed, or None."""
    logged: int | None = None
    for ev in events:
        m = _CAPACITY.search(str(ev.get("line", "")))
        if m:
            logged = int(m.group(1))
    return logged


def _gpu_power(samples: Sequence[Sample], req: Requests) -> dict[str, Any]:
    """GPU power samples (W, per GPU) with whether any request was in flight then (1.0 or 0.0), the
    number of GPUs and their highest power limit."""
    gpu = [s for s in gpu_samples(samples) if isinstance(s["power_w"], (int, float))]
    p_w = np.array([s["power_w"] for s in gpu], dtype=np.float64)
    if gpu:
        gt = np.array([s["t_ns"] for s in gpu], dtype=np.int64)
        sent_sorted_all = np.sort(req.sent_ns[req.sent_ns != MISSING])
        ends_sorted = np.sort(req.end_ns[(req.sent_ns != MISSING) & (req.end_ns != MISSING)])
        inflight = np.searchsorted(sent_sorted_all, gt, side="right") - np.searchsorted(ends_sorted, gt, side="right")
        p_busy = (inflight > 0).astype(np.float64)
    else:
        p_busy = np.zeros(0)
    limits = _numeric_values(gpu, "power_limit_w")
    return {
        "power_w": p_w,
        "power_busy": p_busy,
        "gpus": len({s["gpu"] for s in gpu}),
        "power_limit_w": max(limits) if limits else None,
    }


def _one_run(run: Run) -> dict[str, Any]:
    """One run's observations, keyed by :class:`Observations` field (``gap_step``: each gap's step
    number, before ``observe`` labels them)."""
    server = server_samples(run.samples)
    engine = _server_engine(server)
    req = run.requests
    n = len(req.sent_ns)
    counts = np.diff(req.chunk_start)
    ok = ok_mask(req) if n else np.zeros(0, dtype=bool)
    has_first = (req.first_chunk_ns != MISSING) & (counts > 0) & (req.sent_ns != MISSING)
    ch = _chunks(req, np.flatnonzero(has_first), counts)
    gaps, half_step = _decode_gaps(ch, req.step)
    # vLLM sends a step's tokens, first ones included, from its API server one stream after another,
    # slower than CLUSTER_NS apart on a busy host: its steps are told apart at half a decode step
    sep = max(CLUSTER_NS, int(half_step)) if engine == "vllm" else CLUSTER_NS
    return {
        **gaps,
        **_prefill_events(ch, req, sep, half_step),
        **_request_columns(req, ok, has_first, counts),
        "steps": [StepInfo(s.step, s.concurrency, s.rate, s.context_tokens, s.steady_ns, s.end_ns) for s in run.steps],
        "records": n,
        "ok_records": int(ok.sum()),
        "streamed_records": len(ch.rows),
        "engine": engine,
        **_server_facts(server, ch),
        "logged_max_running": _logged_max_running(run.events),
        **_gpu_power(run.samples, req),
    }


def observe(runs: list[Run]) -> Observations:
    """Observations of one or more runs of the same deployment, concatenated."""
    parts = [_one_run(r) for r in runs]
    labels: list[str] = []
    step_idx: list[I64] = []
    for run, p in zip(runs, parts, strict=True):
        uniq = np.unique(p["gap_step"])
        base = len(labels)
        labels.extend(f"{run.path.name}:step {int(s)}" for s in uniq)
        step_idx.append(base + np.searchsorted(uniq, p["gap_step"]))

    def cat(key: str) -> Any:
        return np.concatenate([p[key] for p in parts]) if parts else np.zeros(0)

    def first(key: str) -> Any:
        vals = [p[key] for p in parts if p[key] is not None]
        return max(vals) if vals else None

    pre = [p["preemptions"] for p in parts if p["preemptions"] is not None]
    return Observations(
        gap_s=cat("gap_s"),
        gap_batch=cat("gap_batch"),
        gap_ctx_tokens=cat("gap_ctx_tokens"),
        gap_run_step=labels,
        gap_step_idx=np.concatenate(step_idx) if step_idx else np.zeros(0, dtype=np.int64),
        chunk_tokens=cat("chunk_tokens"),
        chunk_batch=cat("chunk_batch"),
        prefill_s=cat("prefill_s"),
        prefill_reqs=cat("prefill_reqs"),
        prefill_tokens=cat("prefill_tokens"),
        ttft_s=cat("ttft_s"),
        prompt_tokens=cat("prompt_tokens"),
        cached_tokens=cat("cached_tokens"),
        output_tokens=cat("output_tokens"),
        output_chunks=cat("output_chunks"),
        finished_stop=cat("finished_stop"),
        max_tokens=cat("max_tokens"),
        source=cat("source") if parts else np.zeros(0, dtype=object),
        steps=[s for p in parts for s in p["steps"]],
        records=sum(p["records"] for p in parts),
        ok_records=sum(p["ok_records"] for p in parts),
        streamed_records=sum(p["streamed_records"] for p in parts),
        kv_capacity_tokens=first("kv_capacity_tokens"),
        kv_block_tokens=first("kv_block_tokens"),
        engine=first("engine") or "",
        kv_ratio=cat("kv_ratio"),
        running_max=first("running_max"),
        queued_while_running_max=any(p["queued_while_running_max"] for p in parts),
        preemptions=sum(pre) if pre else None,
        logged_max_running=first("logged_max_running"),
        power_w=cat("power_w"),
        power_busy=cat("power_busy"),
        gpus=max((p["gpus"] for p in parts), default=0),
        power_limit_w=first("power_limit_w"),
        sources=[str(r.path) for r in runs],
    )
