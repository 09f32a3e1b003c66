"""`loadgen predict` against published serving results it was not fitted to.

The published set-ups are transcribed, with their sources and exact conditions, in
benchmarks/data/published_raw.toml (collected 2026-12-04; nothing in it was used to fit anything).
Every deployment here starts from the ``generic`` profile -- one set of engine constants, measured
once on a real H200 (benchmarks/gpu/step_probe.py) and frozen -- and swaps only what the set-up
states: the model (a shipped config.json, or benchmarks/data/configs/ for Llama 2), the GPU, the
weight format and the tensor parallelism. No factor per model, GPU, engine or set-up.

Four kinds of load, each predicted as the source ran it:

* ``offline``: all requests queued at once (trtllm-bench throughput): the source's number of
  requests (``OFFLINE_REQUESTS``) submitted to the engine at t = 0 on the virtual clock, run until
  the last ends; the figure is all their output tokens over that time, as trtllm-bench's "Total
  Output Throughput" counts it. (Until 2026-12-06 a closed loop of 1,024 users measured over a
  window: its users, started together, stayed in waves, and the window caught a wave's phase.)
* ``static``: gptSessionBenchmark's static batch (TensorRT-LLM v0.9.0's page): B requests at t = 0,
  their prompts in one prefill, a cache of exactly the batch; B x output tokens over the time the
  last ends, per GPU as the page gives it.
* ``batch_size``: a static batch (LMDeploy's profile_generation, vLLM's benchmark_latency): B users
  started together with fixed lengths, who stay in step; output tok/s, TTFT, per-token latency p50,
  end-to-end latency.
* ``concurrency``: a closed loop of C users (a serving client); a client whose code the data names
  (``client = "gpu_conc-995b194"``) is run as that code feeds its users (``gpu_conc_client``).

It prints one row per load point (published, predicted, error per figure), then per set-up and per
metric the median absolute error, the saturation step of each curve (the first load reaching 85 %
of the curve's highest throughput, published and predicted) and writes ``--json``/``--markdown``.

    PYTHONPATH=. .venv/bin/python benchmarks/predict_published.py [--quick] [--markdown OUT.md] [--json OUT.json]

``--quick``: one set-up of each kind (the tests run it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from loadgen.predict.deploy import Deployment, parse_deployment, predict, startup
from loadgen.sim.engine import Engine, SimRequest
from loadgen.sim.model import StepModel

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "published_raw.toml"
CONFIGS = HERE / "data" / "configs"
OFFLINE_USERS = 1024  # the cap on running requests offline: more than any KV pool below holds (the pool binds)
# trtllm-bench's requests per ISL/OSL on the perf-overview page (published_raw.toml's notes: "num_requests
# per ISL/OSL: ... 128/2048:3000, ... 2048/128:3000, ... 5000/500:1500, 1000/1000:3000, ...")
OFFLINE_REQUESTS = {(128, 2048): 3000, (1000, 1000): 3000, (2048, 128): 3000, (5000, 500): 1500}
SATURATION_SHARE = 0.85

TRT_PAIRS = ("128-2048", "1000-1000", "2048-128", "5000-500")
SELECTED = [
    *(
        f"trtllm-perfoverview-{m}-{pair}"
        for m in (
            "llama31-8b-h200-tp1",
            "llama31-8b-h100-tp1",
            "llama33-70b-h200-tp1",
            "llama33-70b-h100-tp2",
            "llama33-70b-b200-tp1",
            "llama31-405b-h200-tp8",
            "llama31-405b-h100-tp8",
            "qwen3-235b-h200-tp8",
        )
        for pair in TRT_PAIRS
    ),
    *(f"trtllm-perfoverview-llama33-70b-rtxpro6000-tp1pp{pp}-{pair}" for pp in (1, 2, 4, 8) for pair in TRT_PAIRS),
    "lmdeploy-a100-llama2-7b-tp1-static-128-2048",
    "lmdeploy-a100-llama2-7b-tp1-static-2048-128",
    "lmdeploy-a100-llama2-13b-tp1-static-128-2048",
    "lmdeploy-a100-llama2-70b-tp4-static-128-2048",
    "lmdeploy-a100-llama2-70b-tp4-static-2048-128",
    "rocm-devdocker-mi300x-llama31-70b-fp8-tp8-latency-128-2048",
    "rocm-devdocker-mi300x-llama31-405b-fp8-tp8-latency-128-2048",
    "gpuconc-h200-gpt-oss-20b-c1-16-1000-1000",
    # TensorRT-LLM v0.5's first-token table: one request's context phase, every LLaMA row
    *(f"trtllm-perfmd-ftl-llama7b-{g}-tp1-{isl}" for g in ("h100", "l40s", "a100") for isl in (128, 2048)),
    *(f"trtllm-perfmd-ftl-llama70b-{g}-tp4-{isl}" for g in ("h100", "a100") for isl in (128, 2048)),
]
# TensorRT-LLM v0.9.0's page: every LLaMA 7B / 70B row of its static-batch throughput and first-token
# tables (the rows whose build it states), all that the data holds under these prefixes
SELECTED += sorted(
    s["id"]
    for s in tomllib.loads(DATA.read_text())["setup"]
    if s["id"].startswith(("trtllm-perfv09-llama", "trtllm-perfv09-ftl-llama"))
)
QUICK = [
    "trtllm-perfoverview-llama31-8b-h200-tp1-1000-1000",
    "lmdeploy-a100-llama2-7b-tp1-static-2048-128",
    "gpuconc-h200-gpt-oss-20b-c1-16-1000-1000",
]

MODELS = [  # (substring of the source's model field, the model part)
    ("Llama-3.1-8B", "llama-3.1-8b"),
    ("Llama-3.3-70B", "llama-3.3-70b-instruct"),
    ("Llama-3.1-70B", "llama-3.1-70b"),
    ("Llama-3.1-405B", "llama-3.1-405b"),
    ("Qwen3-235B-A22B", "qwen3-235b-a22b"),
    ("gpt-oss-20b", "gpt-oss-20b"),
    ("llama2-7b", str(CONFIGS / "llama-2-7b.json")),
    ("llama2-13b", str(CONFIGS / "llama-2-13b.json")),
    ("llama2-70b", str(CONFIGS / "llama-2-70b.json")),
]
GPUS = [
    ("RTX PRO 6000", "rtx-pro-6000"),
    ("H200", "h200"),
    ("H100", "h100"),
    ("B200", "b200"),
    ("A100", "a100-sxm"),
    ("MI300X", "mi300x"),
    ("L40S", "l40s"),
]
# LMDeploy v0.1.0a1's TurboMind, as its A100 page was measured. The page (3e391df) says "The tested
# lmdeploy version is `v0.1.0a1`" (tag 9c46b27, 2023-11-29); its benchmark/benchmark_{7b,13b,70b}.sh
# write the engine's config.ini before profiling:
# * one iteration of LlamaBatch::InternalThreadEntry at v0.1.0a1: Initialize makes active every queued
#   request that fits (SequenceManager::Materialize gives a sequence blocks for its context plus one
#   step only, nothing kept for the output to come, and swaps out the latest arrivals when the pool is
#   short, their blocks turning to cache); ContextDecode then runs the prompts of all the newly active
#   ones, in sub-batches of at most max_context_token_num tokens but all of them in this iteration;
#   then one decode step (Generate) for every active sequence gives the new ones their first token.
#   So there is no token budget across iterations: a prompt admitted waits for all prompts admitted
#   with it. (The budget per iteration with a partial prompt, num_tokens_per_iter, came with "Unify
#   prefill & decode passes" (#775), 2023-12-04, after the tag; until 2026-12-06 it was applied here
#   from the page's commit, which holds it: 16,416 tokens an iteration.) Modelled by vLLM V1's rules
#   (sim/sched_vllm.py: admission without room for the output, preemption of the newest) with a
#   budget no batch reaches: max_batch_size x session_len;
# * session_len 4,096 for llama2 (lmdeploy/model.py) + 8 (deploy/target_model/base.py);
# * the pool: cache_max_entry_count >= 1 is a count of blocks (BlockManager.cc), all allocated at
#   start (cache_chunk_size -1), of cache_block_seq_len 128 tokens (LlamaTritonModel.cc);
# * max_batch_size per script; no prefix caching in v0.1 (every thread sends the same random ids).
TURBOMIND_SESSION = 4096 + 8
TURBOMIND_BLOCK = 128
TURBOMIND_V01 = {  # model part: (cache_max_entry_count blocks, max_batch_size)
    str(CONFIGS / "llama-2-7b.json"): (1000, 128),
    str(CONFIGS / "llama-2-13b.json"): (500, 128),
    str(CONFIGS / "llama-2-70b.json"): (4000, 256),
}
WEIGHTS = {"fp8": "fp8", "nvfp4": "nvfp4", "fp16": "", "bf16": "", None: ""}

# metric: (published keys in order of preference, (predicted row field, statistic or None: p50, or mean for a mean))
METRICS = {
    "output_tok_s": (("output_tok_s",), ("output_tok_s", None)),
    "ttft_ms": (("ttft_ms_median", "ttft_ms_mean"), ("ttft_ms", None)),
    "tpot_ms": (("tpot_ms_median",), ("tpot_ms", "p50")),
    "itl_ms": (("itl_ms_median",), ("itl_ms", "p50")),
    "e2e_ms": (("e2e_ms_median", "e2e_ms_mean"), ("e2e_ms", None)),
}


@dataclass
class Setup:
    raw: dict[str, Any]
    deployment: str
    kind: str
    loads: list[int]
    points: list[dict[str, Any]] = field(default_factory=list)


def _pick(table: list[tuple[str, str]], text: str, what: str, sid: str) -> str:
    for key, value in table:
        if key.lower() in text.lower():
            return value
    raise SystemExit(f"{DATA.name}: set-up {sid!r}: no {what} part for {text!r}")


def build(raw: dict[str, Any]) -> Setup:
    sid = raw["id"]
    model = _pick(MODELS, raw["model"], "model", sid)
    gpu = _pick(GPUS, raw["gpu"], "hardware", sid)
    tp, pp = int(raw.get("tp", 1)), int(raw.get("pp", 1))
    hardware = gpu if tp * pp == 1 else f"{gpu}x8"
    points = raw["point"]
    first = points[0]
    kind = (
        "offline"
        if first.get("offline")
        else "static"
        if first.get("static_batch")
        else "batch_size"
        if "batch_size" in first
        else "concurrency"
    )
    fields = [f"label={sid}", "profile=generic", f"model={model}", f"hardware={hardware}", f"server.tp={tp}"]
    if pp > 1:
        fields.append(f"server.pp={pp}")
    quant = WEIGHTS[raw.get("weights")]
    if quant:
        fields.append(f"server.quantization={quant}")
    if raw.get("kv_cache_dtype"):  # the source states its cache (TensorRT-LLM v0.5: --fp8_kv_cache)
        fields.append(f"server.kv_cache_dtype={raw['kv_cache_dtype']}")
    elif raw["model"].startswith("nvidia/"):
        # NVIDIA's ModelOpt checkpoints carry "kv_cache_quant_algo": "FP8" in hf_quant_config.json,
        # which the engines honour without a flag: the set-up's cache is FP8
        fields.append("server.kv_cache_dtype=fp8")
    loads = [OFFLINE_USERS] if kind == "offline" else [int(p.get("batch_size") or p["concurrency"]) for p in points]
    cap = max(max(loads), 256)
    engine = str(raw.get("engine", "")).lower()
    turbomind = TURBOMIND_V01.get(model) if engine.startswith("lmdeploy") else None
    if engine == "vllm":
        # the set-up says its engine: vLLM's defaults and its V1 scheduler (sim/sched_vllm.py);
        # TensorRT-LLM is scheduled as SGLang schedules, LMDeploy's TurboMind as below
        fields.append("engine=vllm")
    elif turbomind:
        blocks, max_batch = turbomind
        fields += [
            "engine=vllm",
            f"server.chunked_prefill_size={max_batch * TURBOMIND_SESSION}",
            f"server.prefix_block_tokens={TURBOMIND_BLOCK}",
            f"server.kv_pool_tokens={blocks * TURBOMIND_BLOCK}",
            "server.disable_radix_cache=true",
        ]
        cap = max_batch
    if kind == "static":
        # gptSessionBenchmark's static batch: the batch's prompts in one context phase (no chunking), a
        # cache allocated for exactly the batch at full length (--paged_kv_cache disable), no more running
        b, isl, osl = loads[0], int(raw["input_tokens"]), int(raw["output_tokens"])
        fields += [f"server.chunked_prefill_size={b * isl}", f"server.kv_pool_tokens={b * (isl + osl)}"]
        cap = b
    fields += [f"server.max_running_requests={cap}", f"server.cuda_graph_max_bs={cap}"]
    return Setup(raw, ",".join(fields), kind, loads, points)


def windows(setup: Setup) -> tuple[float, float]:
    """(warm-up, window) seconds: a few request lifetimes at the largest load, from the step model."""
    dep = parse_deployment(setup.deployment)
    isl, osl = int(setup.raw["input_tokens"]), int(setup.raw["output_tokens"])
    b = min(max(setup.loads), 256)
    m = StepModel(dep.profile)
    life = m.prefill(isl * b, b * isl * (isl + 1) / 2).duration_s + osl * m.decode(b, b * (isl + osl / 2)).duration_s
    return 0.5 * life, 3.0 * life


def offline(dep: Deployment, requests: int, isl: int, osl: int) -> dict[str, Any]:
    """trtllm-bench's offline run as it ran: ``requests`` requests queued at t = 0, run to the last
    one's end on the virtual clock; a row with its output tok/s (all output tokens over that time),
    the running requests' mean and the KV pool's highest fill."""
    engine = Engine(dep.profile, seed=0)
    for i in range(requests):
        engine.submit(
            SimRequest(rid=f"r{i}", prompt_tokens=isl, max_new_tokens=osl, target_tokens=osl, stop_reason="length"),
            0.0,
        )
    engine.advance(0.0)
    done = tokens = 0
    now, running, kv = 0.0, [], 0.0
    pool = engine.pool_tokens
    while done < requests:
        nxt = engine.next_event_s
        if nxt is None:
            raise SystemExit(f"{dep.label}: the engine stopped with {requests - done} requests left")
        now = nxt
        for em in engine.advance(now):
            tokens += em.tokens
            done += em.finished
        running.append(len(engine.running))
        kv = max(kv, engine.used_tokens / pool if pool else 0.0)
    return {
        "output_tok_s": tokens / now,
        "running": {"mean": sum(running) / len(running)},
        "kv_usage": {"max": kv},
    }


def gpu_conc_client(dep: Deployment, users: int, raw: dict[str, Any], isl: int, osl: int) -> dict[str, Any]:
    """The gpu_conc client (``client = "gpu_conc-995b194"`` in the data) run on the virtual clock as
    its code ran it: ``users`` workers take requests from a queue, each timed from when its worker
    starts it; the warm-up puts one every ``warmup_gap_s``, then its results and queue are cleared
    (requests in flight finish and are counted); the measured phase puts one every ``feed_gap_s`` while
    the queue holds fewer than ``queue_per_user`` x users; then the queue drains (at most
    ``drain_timeout_s``). Throughput is the counted tokens over the phase and the drain."""
    warm, warm_gap, feed_gap = float(raw["warmup_s"]), float(raw["warmup_gap_s"]), float(raw["feed_gap_s"])
    cap, phase = int(raw["queue_per_user"]) * users, float(raw["phase_s"])
    drain, timeout = float(raw["drain_timeout_s"]), float(raw["request_timeout_s"])
    engine = Engine(dep.profile, seed=0)
    queue: list[int] = []
    free, seq = users, 0
    started: dict[str, tuple[float, float | None]] = {}  # rid -> (start, first token)
    done: list[tuple[float, float, float, int]] = []  # (start, first token, end, tokens) of counted ones
    tokens: dict[str, int] = {}
    next_put: float | None = 0.0
    cleared, end = False, warm + phase + drain
    running: list[int] = []
    kv, pool = 0.0, engine.pool_tokens

    def dispatch(now: float) -> None:
        nonlocal free
        while free and queue:
            queue.pop(0)
            rid = f"r{len(started)}"
            started[rid] = (now, None)
            engine.submit(
                SimRequest(rid=rid, prompt_tokens=isl, max_new_tokens=osl, target_tokens=osl, stop_reason="length"),
                now,
            )
            free -= 1
        if not engine.busy:
            engine.advance(now)

    now = 0.0
    while True:
        nxt = engine.next_event_s
        clear_at = None if cleared else warm
        times = [t for t in (nxt, next_put, clear_at) if t is not None]
        if not times:
            break
        now = min(times)
        if now > end:
            now = end
            break
        if clear_at is not None and now >= clear_at and (next_put is None or clear_at <= next_put):
            cleared, done[:] = True, []
            queue.clear()
            next_put = warm  # the measured phase puts its first request at once
            continue
        if next_put is not None and now >= next_put and (nxt is None or next_put <= nxt):
            if not cleared or len(queue) < cap:
                queue.append(seq)
                seq += 1
            gap = feed_gap if cleared else warm_gap
            following = now + gap
            if cleared:
                next_put = following if following - warm < phase else None
            else:
                next_put = following if following < warm else None
            dispatch(now)
            continue
        for em in engine.advance(now):
            rid = em.req.rid
            start, first = started[rid]
            if em.tokens > 0 and first is None:
                started[rid] = (start, now)
            tokens[rid] = tokens.get(rid, 0) + em.tokens
            if em.finished:
                free += 1
                first = started[rid][1]
                if cleared and now - start <= timeout and first is not None:
                    done.append((start, first, now, tokens[rid]))
        running.append(len(engine.running))
        kv = max(kv, engine.used_tokens / pool if pool else 0.0)
        dispatch(now)
        if cleared and next_put is None and not queue and free == users:
            break
    total = max(1e-9, now - warm)
    ttft = [(f - s0) * 1e3 for s0, f, _, _ in done]
    e2e = [(e - s0) * 1e3 for s0, _, e, _ in done]
    return {
        "output_tok_s": sum(n for *_, n in done) / total,
        "ttft_ms": {"p50": median(ttft), "mean": sum(ttft) / len(ttft)} if ttft else None,
        "e2e_ms": {"p50": median(e2e), "mean": sum(e2e) / len(e2e)} if e2e else None,
        "running": {"mean": sum(running) / len(running) if running else 0.0},
        "kv_usage": {"max": kv},
    }


def published(point: dict[str, Any], metric: str, kind: str) -> float | None:
    keys, _ = METRICS[metric]
    for k in keys:
        if k in point:
            return float(point[k])
    return None


def predicted(row: dict[str, Any], metric: str, pub_key: str | None) -> float | None:
    _, (name, stat) = METRICS[metric]
    v = row.get(name)
    if isinstance(v, dict):
        stat = stat or ("mean" if pub_key and pub_key.endswith("_mean") else "p50")
        v = v.get(stat)
    return None if v is None else float(v)


def saturation_step(tok: list[float]) -> int:
    top = max(tok)
    return next(i for i, t in enumerate(tok) if t >= SATURATION_SHARE * top)


def run(ids: list[str]) -> dict[str, Any]:
    data = tomllib.loads(DATA.read_text())
    by_id = {s["id"]: s for s in data["setup"]}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise SystemExit(f"{DATA.name}: no set-up {', '.join(missing)}")
    cells: list[dict[str, Any]] = []
    curves: list[dict[str, Any]] = []
    started: list[dict[str, Any]] = []
    conditions: list[dict[str, Any]] = []
    for sid in ids:
        setup = build(by_id[sid])
        t0 = time.perf_counter()
        isl, osl = int(setup.raw["input_tokens"]), int(setup.raw["output_tokens"])
        if setup.raw.get("client") == "gpu_conc-995b194":
            dep = parse_deployment(setup.deployment)
            check = startup(dep)
            rows = [gpu_conc_client(dep, c, setup.raw, isl, osl) for c in setup.loads] if check["starts"] else []
            result: dict[str, Any] = {"deployments": [check], "rows": rows}
        elif setup.kind in ("offline", "static"):
            dep = parse_deployment(setup.deployment)
            check = startup(dep)
            if setup.kind == "static":  # one generate() of the batch: its tokens over its latency
                requests = setup.loads[0]
            elif (isl, osl) in OFFLINE_REQUESTS:
                requests = OFFLINE_REQUESTS[isl, osl]
            else:
                raise SystemExit(f"{DATA.name}: set-up {sid!r}: no request count for {isl}/{osl} (OFFLINE_REQUESTS)")
            rows = [offline(dep, requests, isl, osl)] if check["starts"] else []
            result = {"deployments": [check], "rows": rows}
        else:
            warm, window = windows(setup)
            # a client whose users start a stated gap apart (start_gap_s, after a ramp-up that is not
            # measured: ramp_up_s) stays spread: users who start apart stay apart, their prefills
            # falling between each other's decodes rather than in one wave
            ramp = float(setup.raw.get("ramp_up_s", 0.0))
            result = predict(
                [parse_deployment(setup.deployment)],
                concurrencies=setup.loads,
                input_tokens=isl,
                output_tokens=osl,
                warmup_s=warm + ramp,
                window_s=window,
                stagger_s=float(setup.raw.get("start_gap_s", 0.0)),
                independent=True,  # every published point was a run of its own
            )
        (check,) = result["deployments"]
        raw = setup.raw
        conditions.append(
            {
                "id": sid,
                "source": raw["source_url"],
                "where": raw.get("where", ""),
                "engine": f"{raw.get('engine', '?')} {raw.get('engine_version', '')}".strip(),
                "model": raw["model"],
                "weights": raw.get("weights") or "checkpoint's",
                "gpu": f"{raw.get('gpus', 1)}x {raw['gpu']}, TP{raw.get('tp', 1)}"
                + (f" PP{raw['pp']}" if raw.get("pp", 1) > 1 else ""),
                "lengths": f"{raw['input_tokens']}/{raw['output_tokens']}",
                "load": setup.kind,
                "deployment": setup.deployment,
            }
        )
        started.append(
            {
                "id": sid,
                "starts": check["starts"],
                "failure": check["failure"],
                "kv_pool_tokens": check["kv_pool_tokens"],
                "seconds": time.perf_counter() - t0,
            }
        )
        rows = result["rows"]
        for point, row in zip(setup.points, rows or [None] * len(setup.points), strict=True):
            load = setup.loads[0] if setup.kind == "offline" else int(point.get("batch_size") or point["concurrency"])
            for metric in METRICS:
                pub = published(point, metric, setup.kind)
                if pub is None:
                    continue
                keys, _ = METRICS[metric]
                pub_key = next((k for k in keys if k in point), None)
                pred = predicted(row, metric, pub_key) if row else None
                cells.append(
                    {
                        "id": sid,
                        "kind": setup.kind,
                        "load": load,
                        "metric": metric,
                        "published": pub,
                        "predicted": pred,
                        "error": (pred / pub - 1) if pred and pub else None,
                        "running": row["running"]["mean"] if row else None,
                        "kv_usage": row["kv_usage"]["max"] if row else None,
                    }
                )
        if len(setup.points) >= 3 and rows:
            pub_tok = [float(p.get("output_tok_s") or 0.0) for p in setup.points]
            if all(pub_tok):
                pred_tok = [r["output_tok_s"] for r in rows]
                curves.append(
                    {
                        "id": sid,
                        "loads": setup.loads,
                        "published": saturation_step(pub_tok),
                        "predicted": saturation_step(pred_tok),
                    }
                )
            else:  # a latency curve: throughput = batch x output tokens / E2E
                osl = int(setup.raw["output_tokens"])
                pub_tok = [
                    b * osl / (float(p["e2e_ms_mean"]) / 1e3) for b, p in zip(setup.loads, setup.points, strict=True)
                ]
                pred_tok = [b * osl / (r["e2e_ms"]["mean"] / 1e3) for b, r in zip(setup.loads, rows, strict=True)]
                curves.append(
                    {
                        "id": sid,
                        "loads": setup.loads,
                        "published": saturation_step(pub_tok),
                        "predicted": saturation_step(pred_tok),
                    }
                )
    summary = {}
    for metric in METRICS:
        errs = [abs(c["error"]) for c in cells if c["metric"] == metric and c["error"] is not None]
        if errs:
            summary[metric] = {"cells": len(errs), "median_abs_error": median(errs), "max_abs_error": max(errs)}
    within = sum(abs(c["published"] - c["predicted"]) <= 1 for c in curves)
    summary["knee"] = {"curves": len(curves), "within_one_step": within}
    return {"cells": cells, "curves": curves, "deployments": started, "setups": conditions, "summary": summary}


def _fmt(v: float | None, metric: str) -> str:
    if v is None:
        return "–"
    return f"{v:,.0f}" if metric == "output_tok_s" or v >= 100 else f"{v:.1f}"


def markdown(res: dict[str, Any]) -> str:
    lines = [
        "| set-up | engine | model, weights | GPUs | in/out tokens | load | source |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in res["setups"]:
        lines.append(
            f"| {c['id']} | {c['engine']} | {c['model']}, {c['weights']} | {c['gpu']} | {c['lengths']} | {c['load']} "
            f"| [{c['where'].replace('|', '/')}]({c['source']}) |"
        )
    lines += ["", "| set-up | load | metric | published | predicted | error |", "|---|---:|---|---:|---:|---:|"]
    for c in res["cells"]:
        load = "offline" if c["kind"] == "offline" else f"{'C' if c['kind'] == 'concurrency' else 'B'}={c['load']}"
        err = f"{c['error']:+.1%}" if c["error"] is not None else "–"
        lines.append(
            f"| {c['id']} | {load} | {c['metric']} | {_fmt(c['published'], c['metric'])} | "
            f"{_fmt(c['predicted'], c['metric'])} | {err} |"
        )
    lines += ["", "| metric | cells | median abs. error | max abs. error |", "|---|---:|---:|---:|"]
    for metric, s in res["summary"].items():
        if metric != "knee":
            lines.append(f"| {metric} | {s['cells']} | {s['median_abs_error']:.1%} | {s['max_abs_error']:.1%} |")
    # the same per engine and version, as each source states it: one engine's miss is not another's
    engine_of = {c["id"]: c["engine"] for c in res["setups"]}
    groups: dict[tuple[str, str], list[float]] = {}
    for c in res["cells"]:
        if c["error"] is not None:
            groups.setdefault((engine_of[c["id"]], c["metric"]), []).append(abs(c["error"]))
    lines += ["", "| engine, as its source states it | metric | cells | median abs. error |", "|---|---|---:|---:|"]
    for (engine, metric), errs in sorted(groups.items()):
        lines.append(f"| {engine} | {metric} | {len(errs)} | {median(errs):.1%} |")
    k = res["summary"]["knee"]
    lines += ["", f"Saturation step within one step on {k['within_one_step']} of {k['curves']} curves:", ""]
    for c in res["curves"]:
        lines.append(f"- {c['id']}: loads {c['loads']}, published step {c['published']}, predicted {c['predicted']}")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one set-up of each kind")
    ap.add_argument("--only", default="", help="set-up ids starting with this text")
    ap.add_argument("--json", default="")
    ap.add_argument("--markdown", default="")
    args = ap.parse_args()
    ids = QUICK if args.quick else [i for i in SELECTED if i.startswith(args.only)]
    t0 = time.perf_counter()
    res = run(ids)
    text = markdown(res)
    print(text)
    for d in res["deployments"]:
        if not d["starts"]:
            print(f"does not start: {d['id']}: {d['failure']}")
    print(f"{len(ids)} set-ups, {len(res['cells'])} cells in {time.perf_counter() - t0:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    if args.markdown:
        Path(args.markdown).write_text(text)


if __name__ == "__main__":
    main()
