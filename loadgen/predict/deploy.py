"""``loadgen predict``: the ramp a deployment would give, on the virtual clock (no HTTP, in seconds).

A deployment is a simulator profile with its parts swapped and fields overridden, written as one
``--deployment`` text of comma-separated ``key=value`` items::

    label=8xH200 TP8,model=llama-3.3-70b-instruct,hardware=h200x8,server.tp=8

``profile`` (default ``generic``: one set of engine constants for every deployment, measured once on a
real H200 and frozen, profiles/generic.toml) gives the server settings; ``model`` (a models.toml entry, a
shipped config.json name or a config.json path), ``hardware`` and ``spec`` swap parts as ``loadgen sim
--model-config/--hardware/--spec`` do; any ``SECTION.FIELD=VALUE`` overrides a field as ``loadgen sim
--set`` does. ``loadgen sim`` started with the same parts and overrides serves this deployment over
HTTP: the same engine, on the wall clock.

Each deployment first gets the start-up check (``memory.memory_plan``: does it fit, the KV pool in
tokens); one that does not start is listed with the term that does not fit. Then the loads
(``--concurrency`` users, or ``--rate`` Poisson arrivals per second) run one after another as a
ramp's steps (``forecast.run_ramp``: a closed loop's users carry over, the new ones start together),
each with a warm-up and a measured window, with requests of ``--input-tokens`` asking ``--output-tokens``
(``ignore_eos``), and gives one row with the names summary.json's steps use (``output_tok_s``,
``ttft_ms``/``tpot_ms``/``e2e_ms`` with ``p50``/``p90``/``p99``/``mean``, ``kv_usage``, ``queue_len``,
``gpu_power_w``, ``tokens_per_joule``, ...) and ``"predicted": true``. Percentiles are over the
requests sent in the window (every one runs to its end), as the analysis takes them. The knee is
``analysis.knee.knee_verdict`` over a deployment's rows, as a report judges a run.

GPUs of a deployment: ``server.tp`` x ``server.pp`` (tok/s per GPU and power are over those GPUs).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.sim.engines import with_engine
from loadgen.sim.forecast import PointResult, run_ramp
from loadgen.sim.memory import FAIL_DEVICES, FAIL_GRAPHS, FAIL_KV_POOL, FAIL_WEIGHTS, MemoryPlan, memory_plan
from loadgen.sim.parallel import layout_of
from loadgen.sim.profile import Profile, ProfileError, apply_overrides, load_profile

DEFAULT_PROFILE = "generic"
PART_KEYS = ("profile", "model", "hardware", "spec", "engine", "label", "price")


@dataclass(frozen=True)
class Deployment:
    label: str
    profile: Profile
    spec_text: str  # as the user wrote it
    price: float | None = None  # USD per GPU-hour (``price=``, else ``--gpu-price`` by hardware)

    @property
    def gpus(self) -> int:
        s = self.profile.server
        return max(1, s.tp) * max(1, s.pp)


def parse_deployment(text: str, index: int = 0) -> Deployment:
    """One ``--deployment`` text; ProfileError naming the item and what to give."""
    items: dict[str, str] = {}
    overrides: dict[str, str] = {}
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise ProfileError(
                f"--deployment {text!r}: {item!r} is not KEY=VALUE (keys: {', '.join(PART_KEYS)}, or SECTION.FIELD)"
            )
        if "." in key:
            overrides[key] = value
        elif key in PART_KEYS:
            items[key] = value
        else:
            raise ProfileError(
                f"--deployment {text!r}: unknown key {key!r}; give {', '.join(PART_KEYS)} or SECTION.FIELD=VALUE "
                "(e.g. server.tp=8)"
            )
    profile = load_profile(
        items.get("profile", DEFAULT_PROFILE),
        hardware=items.get("hardware"),
        model=items.get("model"),
        spec=items.get("spec"),
    )
    if overrides:
        profile = apply_overrides(profile, overrides)
    if "engine" in items:
        profile = with_engine(profile, items["engine"], keep=set(overrides))
    label = items.get("label") or _auto_label(profile, index)
    price = None
    if "price" in items:
        try:
            price = float(items["price"])
        except ValueError:
            price = -1.0
        if not price >= 0:
            raise ProfileError(f"--deployment {text!r}: price {items['price']!r} is not a USD-per-GPU-hour number >= 0")
    return Deployment(label, profile, text, price)


def _auto_label(p: Profile, index: int) -> str:
    spec = "" if not p.spec.enabled else f", {p.spec.name}"
    return f"{p.model.served_name.split('/')[-1]} on {p.hardware.name}, {layout_of(p).describe()}{spec}"


def _dist(values: Sequence[float]) -> dict[str, float | None]:
    """p50/p90/p99/mean in milliseconds of ``values`` (seconds), numpy's linear percentiles."""
    if not len(values):
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    a = np.asarray(values, dtype=float) * 1e3
    p50, p90, p99 = np.percentile(a, [50, 90, 99]).tolist()
    return {"mean": float(a.mean()), "p50": p50, "p90": p90, "p99": p99}


def _stat(values: list[float] | list[int]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "max": None}
    return {"mean": float(np.mean(values)), "max": float(np.max(values))}


def point_row(
    dep: Deployment,
    step: int,
    r: PointResult,
    *,
    concurrency: int | None,
    rate: float | None,
    input_tokens: int,
    output_tokens: int,
) -> dict[str, Any]:
    """One load's figures under summary.json's step names."""
    power_total = r.power_w * dep.gpus
    e2e = _dist(r.e2e_s)
    per_request = (
        float(np.mean([output_tokens / e for e in r.e2e_s if e > 0])) if r.e2e_s else None
    )  # output tokens / E2E, mean over requests, as the report's per-request tok/s
    limit = dep.profile.hardware.power_limit_w * dep.gpus
    return {
        "predicted": True,
        "deployment": dep.label,
        "step": step,
        "concurrency": concurrency,
        "rate": rate,
        "context_tokens": input_tokens,
        "output_tokens": output_tokens,
        "window_s": r.window_s,
        "valid": r.sent_in_window > 0 and not r.unfinished,
        "requests_ok": len(r.e2e_s),
        "requests_failed": 0,
        "output_tok_s": r.output_tok_s,
        "tok_s_per_gpu": r.output_tok_s / dep.gpus,
        "per_request_tok_s": per_request,
        "ttft_ms": _dist(r.ttft_s),
        "tpot_ms": _dist(r.tpot_s),
        "itl_ms": _dist(r.itl_s),
        "e2e_ms": e2e,
        "kv_usage": _stat(r.kv_usage),
        "queue_len": _stat(r.queued),
        "running": _stat(r.running),
        "preemptions": float(r.retracted),
        "gpu_count": dep.gpus,
        "gpu_power_w": {"mean": power_total, "p95": None, "max": None},
        "gpu_power_limit_w": limit,
        "gpu_power_frac_of_limit": power_total / limit if limit else None,
        "energy_j": r.energy_j * dep.gpus,
        "tokens_per_joule": r.output_tok_s / power_total if power_total > 0 else None,
        "power_valid": True,
    }


def failure_words(plan: MemoryPlan) -> str | None:
    """Why a deployment does not start, by how much, and which term (None: it starts)."""
    gb = 1e9
    failure = plan.failure
    if failure == FAIL_DEVICES:
        layout = f"tensor parallelism {plan.tp}" + (f" x pipeline {plan.pp}" if plan.pp > 1 else "")
        return f"{layout} needs {plan.tp * plan.pp} GPUs, the hardware part has {plan.gpus}"
    if failure == FAIL_WEIGHTS:
        need = plan.runtime_bytes + plan.weight_bytes + plan.drafter_bytes
        return (
            f"weights: {plan.weight_bytes / gb:,.1f} GB per GPU (+ {plan.drafter_bytes / gb:,.1f} GB drafter, "
            f"{plan.runtime_bytes / gb:,.1f} GB runtime) exceed the GPU's {plan.total_bytes / gb:,.1f} GB by "
            f"{(need - plan.total_bytes) / gb:,.1f} GB: more GPUs (server.tp=N, server.pp=N), a smaller format "
            "(server.quantization) or a larger GPU"
        )
    if failure == FAIL_KV_POOL:
        short = plan.runtime_bytes + plan.weight_bytes + plan.drafter_bytes - plan.static_bytes
        return (
            f"KV pool: the static share ({plan.static_bytes / gb:,.1f} GB, mem_fraction_static) holds the runtime "
            f"and weights with {short / gb:,.1f} GB too few for any KV cache: raise server.mem_fraction_static "
            "or use more GPUs"
        )
    if failure == FAIL_GRAPHS:
        return (
            f"graph buffers: CUDA-graph capture needs {plan.graph_bytes / gb:,.2f} GB, the headroom left by "
            f"mem_fraction_static is {plan.headroom_bytes / gb:,.2f} GB ({-plan.headroom_left_bytes / gb:,.2f} GB "
            "short): lower server.cuda_graph_max_bs or server.mem_fraction_static"
        )
    return None


def startup(dep: Deployment) -> dict[str, Any]:
    """The start-up check: does it fit, the KV pool, the largest batch that runs."""
    plan = memory_plan(dep.profile)
    return {
        "deployment": dep.label,
        "starts": plan.failure is None,
        "failure": failure_words(plan),
        "failure_term": plan.failure,
        "kv_pool_tokens": plan.kv_pool_tokens,
        "max_running_requests": dep.profile.max_running_requests,
        "weights_gb_per_gpu": plan.weight_bytes / 1e9,
        "gpus": dep.gpus,
    }


def predict(
    deployments: list[Deployment],
    *,
    concurrencies: list[int] | None = None,
    rates: list[float] | None = None,
    input_tokens: int = 1000,
    output_tokens: int = 512,
    warmup_s: float = 10.0,
    window_s: float = 30.0,
    seed: int = 0,
    slo: Any = None,
    stagger_s: float = 0.0,
    client_gap_s: float = 0.001,
    independent: bool = False,
    client_gaps_s: Sequence[float] | None = None,
) -> dict[str, Any]:
    """Every deployment at every load: ``{"deployments": [start-up check + knee], "rows": [...]}``.
    The loads run one after another on one engine, as ``loadgen ramp`` runs its steps (a closed
    loop's users carry over from step to step: forecast.run_ramp); ``independent``: each load
    from an idle server (a benchmark whose every point was a run of its own). ``client_gaps_s``: the
    client's turns to draw from (forecast.run_ramp) instead of the constant ``client_gap_s``."""
    loads: list[tuple[int | None, float | None]] = (
        [(c, None) for c in concurrencies or []] if concurrencies else [(None, r) for r in rates or []]
    )
    out_deps: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    for dep in deployments:
        check = startup(dep)
        mine: list[dict[str, Any]] = []
        if check["starts"] and loads:
            kw: dict[str, Any] = dict(
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                warmup_s=warmup_s,
                window_s=window_s,
                drain_s=max(60.0, window_s),
                # closed loop: a step's new users start together, as loadgen ramp spawns them (with
                # fixed output lengths they stay in step: their prefills batch together, not between
                # each other's decodes; a real workload's varied lengths spread them)
                stagger_s=stagger_s,
                client_gap_s=client_gap_s,
                client_gaps_s=client_gaps_s,
                seed=seed,
            )
            cs = [c for c, _ in loads if c is not None] or None
            rs = [r for _, r in loads if r is not None] or None
            if independent:  # each load a run of its own, from an idle server
                results = [
                    run_ramp(dep.profile, [c] if c is not None else None, [r] if r is not None else None, **kw)[0]
                    for c, r in loads
                ]
            else:  # one run, its steps one after another, as loadgen ramp runs them
                results = run_ramp(dep.profile, cs, rs, **kw)
            for step, ((c, rate), r) in enumerate(zip(loads, results, strict=True)):
                mine.append(
                    point_row(
                        dep, step, r, concurrency=c, rate=rate, input_tokens=input_tokens, output_tokens=output_tokens
                    )
                )
        check["knee"] = _knee(mine, slo)
        out_deps.append(check)
        rows += mine
    return {"deployments": out_deps, "rows": rows}


def _knee(rows: list[dict[str, Any]], slo: Any) -> dict[str, Any] | None:
    if len(rows) < 2:
        return None
    from loadgen.analysis.knee import knee_verdict

    try:
        verdict = knee_verdict([dict(r) for r in rows], slo)
    except (ValueError, KeyError, TypeError) as exc:
        return {"knee": None, "reason": f"no verdict: {exc}"}
    axis = verdict.get("axis") or "concurrency"
    return {"knee": verdict.get(axis), "axis": axis, "reason": verdict.get("reason")}


def parse_prices(text: str) -> dict[str, float]:
    """``--gpu-price`` ``"h200=3.5,b200=5.2"``: USD per GPU-hour by hardware entry (``h200`` also
    prices ``h200x8``); ValueError naming the bad item."""
    out: dict[str, float] = {}
    for raw in text.split(","):
        if not raw.strip():
            continue
        name, sep, value = raw.partition("=")
        try:
            price = float(value) if sep and name.strip() else -1.0
        except ValueError:
            price = -1.0
        if not price >= 0:
            raise ValueError(f"--gpu-price {raw.strip()!r}: give HARDWARE=USD_PER_GPU_HOUR, e.g. h200=3.5,b200=5.2")
        out[name.strip()] = price
    return out


def price_of(dep: Deployment, prices: dict[str, float]) -> float | None:
    if dep.price is not None:
        return dep.price
    name = dep.profile.hardware.name
    return prices.get(name, prices.get(re.sub(r"x\d+$", "", name)))


def choose(
    deployments: list[Deployment],
    result: dict[str, Any],
    slo: dict[str, float],
    *,
    target_rps: float | None = None,
    prices: dict[str, float] | None = None,
    headroom: float = 0.2,
) -> dict[str, Any]:
    """Which deployment serves the target within the SLO for the least: ``analysis.plan.capacity_plan``
    of each deployment's rows (the operating point is the highest load meeting every limit, replicas
    for ``target_rps``, cost per million tokens at the GPU price), ranked by total cost per hour when
    a target and prices are given, else by cost per million tokens, else by output tok/s per GPU at
    the operating point. A deployment with no load within the SLO, or that does not start, is listed
    last with the reason."""
    from loadgen.analysis.plan import capacity_plan

    plans: list[dict[str, Any]] = []
    for dep, check in zip(deployments, result["deployments"], strict=True):
        rows = [r for r in result["rows"] if r["deployment"] == dep.label]
        price = price_of(dep, prices or {})
        entry: dict[str, Any] = {"deployment": dep.label, "gpus_per_replica": dep.gpus, "gpu_hour_cost": price}
        if not check["starts"]:
            entry["reason"] = f"does not start: {check['failure']}"
            plans.append(entry)
            continue
        plan = capacity_plan(
            rows, slo, target_rps=target_rps, headroom=headroom, gpus_per_replica=dep.gpus, gpu_hour_cost=price
        )
        op = plan.get("operating_point")
        if op is None:
            entry["reason"] = plan.get("reason")
            plans.append(entry)
            continue
        per: Mapping[str, Any] = plan["per_replica"] or {}
        cost: Mapping[str, Any] = plan.get("cost") or {}
        energy: Mapping[str, Any] = plan.get("energy") or {}
        entry.update(
            operating_point={k: op.get(k) for k in ("concurrency", "rate", "ok_req_s", "output_tok_s", "slo_values")},
            per_replica_req_s=per.get("req_s"),
            per_replica_tok_s=per.get("tok_s"),
            tok_s_per_gpu=(per.get("tok_s") or 0.0) / dep.gpus,
            replicas=plan.get("replicas"),
            gpus=plan.get("gpus"),
            cost_per_million_tokens=cost.get("per_million_tokens"),
            total_hour_cost=cost.get("total_hour_cost"),
            kwh_per_million_tokens=energy.get("kwh_per_million_tokens"),
        )
        plans.append(entry)
    priced = target_rps is not None and all(p.get("total_hour_cost") is not None for p in plans if "reason" not in p)
    by_cost = all(p.get("cost_per_million_tokens") is not None for p in plans if "reason" not in p)
    if priced:
        key, ranked_by = "total_hour_cost", "cost per hour of the replicas that serve the target"
    elif by_cost:
        key, ranked_by = "cost_per_million_tokens", "cost per million output tokens at the operating point"
    else:
        key, ranked_by = "tok_s_per_gpu", "output tok/s per GPU at the operating point (no GPU prices given)"
    fit = [p for p in plans if "reason" not in p]
    fit.sort(key=lambda p: p[key] if key != "tok_s_per_gpu" else -p[key])
    ranked = fit + [p for p in plans if "reason" in p]
    return {
        "slo": slo,
        "target_rps": target_rps,
        "headroom": headroom,
        "ranked_by": ranked_by,
        "best": ranked[0]["deployment"] if fit else None,
        "plans": ranked,
    }


def _choice_lines(choice: dict[str, Any]) -> list[str]:
    slo = ", ".join(f"{k.removesuffix('_ms')} ≤ {v:g} ms" for k, v in choice["slo"].items())
    target = f"{choice['target_rps']:g} req/s" if choice["target_rps"] is not None else "no target rate"
    lines = [
        "## Choice",
        "",
        f"Within {slo}, {target}, {choice['headroom']:.0%} headroom; ranked by {choice['ranked_by']}. "
        + (f"**{choice['best']}** serves it for the least." if choice["best"] else "No deployment meets the SLO."),
        "",
        "| deployment | operating load | tok/s per GPU | replicas | GPUs | $/GPU-h | $/h | $ per M tokens "
        "| kWh per M tokens |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in choice["plans"]:
        if "reason" in p:
            lines.append(f"| {p['deployment']} | {p['reason']} | | | | | | | |")
            continue
        op = p["operating_point"]
        load = f"C={op['concurrency']:g}" if op.get("concurrency") is not None else f"{op['rate']:g} req/s"
        lines.append(
            f"| {p['deployment']} | {load} | {_n(p['tok_s_per_gpu'])} | {_n(p['replicas'])} | {_n(p['gpus'])} | "
            f"{_n(p['gpu_hour_cost'], 2)} | {_n(p['total_hour_cost'], 2)} | {_n(p['cost_per_million_tokens'], 3)} | "
            f"{_n(p['kwh_per_million_tokens'], 3)} |"
        )
    lines.append("")
    return lines


# -- output -----------------------------------------------------------------------------------------


def _ms(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v:,.2f}" if abs(v) < 10 else f"{v:,.1f}" if abs(v) < 1000 else f"{v:,.0f}"


def _n(v: float | None, digits: int = 0) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.{digits}f}"


def markdown(result: dict[str, Any]) -> str:
    """The prediction as Markdown: per deployment, its start-up check, knee and one row per load."""
    lines = ["# Predicted (loadgen sim's model on the virtual clock; not measured)", ""]
    for dep in result["deployments"]:
        label = dep["deployment"]
        lines.append(f"## {label}")
        lines.append("")
        if not dep["starts"]:
            lines += [f"Does not start: {dep['failure']}", ""]
            continue
        mrr = dep["max_running_requests"]
        lines.append(
            f"{dep['gpus']} GPU{'s' if dep['gpus'] > 1 else ''}; KV pool {dep['kv_pool_tokens']:,} tokens; "
            f"weights {dep['weights_gb_per_gpu']:,.1f} GB per GPU; max running requests {mrr or 'engine default'}."
        )
        knee = dep.get("knee")
        if knee:
            lines.append(f"Knee: {knee['knee'] if knee.get('knee') is not None else 'none'}: {knee.get('reason')}")
        lines.append("")
        lines.append(
            "| load | tok/s | tok/s per GPU | tok/s per req | TTFT p50 / p99 ms | TPOT p50 / p99 ms | "
            "E2E p50 / p99 ms | KV max | queue | GPU W | tok/J |"
        )
        lines.append("|---|" + "---:|" * 10)
        for r in (r for r in result["rows"] if r["deployment"] == label):
            load = f"C={r['concurrency']}" if r["concurrency"] is not None else f"{r['rate']:g} req/s"
            kv = r["kv_usage"]["max"]
            lines.append(
                f"| {load} | {_n(r['output_tok_s'])} | {_n(r['tok_s_per_gpu'])} | {_n(r['per_request_tok_s'], 1)} | "
                f"{_ms(r['ttft_ms']['p50'])} / {_ms(r['ttft_ms']['p99'])} | "
                f"{_ms(r['tpot_ms']['p50'])} / {_ms(r['tpot_ms']['p99'])} | "
                f"{_ms(r['e2e_ms']['p50'])} / {_ms(r['e2e_ms']['p99'])} | "
                f"{'–' if kv is None else f'{kv:.0%}'} | {_n(r['queue_len']['mean'], 1)} | "
                f"{_n(r['gpu_power_w']['mean'])} | {_n(r['tokens_per_joule'], 2)} |"
            )
        lines.append("")
    if result.get("choice"):
        lines += _choice_lines(result["choice"])
    return "\n".join(lines)


DESCRIPTION = """\
The ramp a deployment would give, computed on the simulator's virtual clock: no server, no HTTP, a
few seconds. Each deployment gets the start-up check (does it fit, the KV pool), then one row per
load: output tok/s (in all and per GPU), per-request tok/s, TTFT/TPOT/E2E p50 and p99, KV fill,
queue, GPU power and tok/J, and the knee as a report judges it. Every figure is predicted: loadgen
sim serves the same deployment over HTTP (the same engine), and a loadgen ramp against it measures
what this prints."""

EPILOG = """\
examples:
  # Llama-3.1-8B on one H200 at 1, 8, 32 and 64 users (the generic engine constants)
  loadgen predict --deployment model=llama-3.1-8b,hardware=h200 --concurrency 1,8,32,64
  # two deployments side by side, from shipped config.json files, rows to a JSON file
  loadgen predict --deployment "label=H200 TP8,model=llama-3.3-70b-instruct,hardware=h200x8,server.tp=8" \\
      --deployment "label=B200 TP8,model=llama-3.3-70b-instruct,hardware=b200x8,server.tp=8" \\
      --concurrency 1,16,64 --json predict.json
  # open loop: Poisson arrivals at 2, 4 and 8 requests/s, long prompts
  loadgen predict --deployment model=llama-3.1-8b,hardware=h200 --rate 2,4,8 --input-tokens 8000 --output-tokens 256
  # which serves 20 req/s within the SLO for the least: Llama-3.3-70B in FP8, 8x H200 or 4x B200
  loadgen predict --deployment "model=llama-3.3-70b-instruct,hardware=h200x8,server.tp=8,server.quantization=fp8" \
      --deployment "model=llama-3.3-70b-instruct,hardware=b200x8,server.tp=4,server.quantization=fp8" \
      --concurrency 8,16,32,64,128 --slo ttft_p99=2s,tpot_p99=50ms --target-rps 20 \
      --gpu-price h200=3.5,b200=5.2 --html predict.html"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="loadgen predict",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--deployment",
        action="append",
        metavar="KEY=VALUE,...",
        help="a deployment: profile=NAME, model=NAME|config.json, hardware=NAME, spec=NAME, label=TEXT and "
        f"SECTION.FIELD=VALUE overrides (repeatable) (default: profile={DEFAULT_PROFILE})",
    )
    load = p.add_mutually_exclusive_group()
    load.add_argument(
        "--concurrency", metavar="USERS", help="closed loop: users per step, e.g. 1,8,32 (default: 1,8,32,64)"
    )
    load.add_argument("--rate", metavar="RATES", help="open loop: Poisson arrivals per second per step (default: none)")
    p.add_argument(
        "--input-tokens", type=int, default=1000, metavar="N", help="prompt tokens per request (default: 1000)"
    )
    p.add_argument(
        "--output-tokens",
        type=int,
        default=512,
        metavar="N",
        help="output tokens per request, ignore_eos (default: 512)",
    )
    p.add_argument(
        "--slo", metavar="LIMITS", help="latency limits for the knee, e.g. ttft_p99=2s,tpot_p99=50ms (default: none)"
    )
    p.add_argument(
        "--window-seconds", type=float, default=30.0, metavar="SECONDS", help="measured window per load (default: 30)"
    )
    p.add_argument(
        "--warmup-seconds", type=float, default=10.0, metavar="SECONDS", help="warm-up before each window (default: 10)"
    )
    p.add_argument(
        "--client-gap-ms",
        type=float,
        default=1.0,
        metavar="MS",
        help="closed loop: a user's time between a response's end and its next request (default: 1)",
    )
    p.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the arrivals (default: 0)")
    choice = p.add_argument_group(
        "choosing a deployment",
        "With --slo: each deployment's operating point (the highest load meeting every limit), the replicas a "
        "target rate needs and what they cost; the deployments ranked.",
    )
    choice.add_argument(
        "--target-rps", type=float, metavar="REQ_S", help="request rate to serve, for replicas and cost (default: none)"
    )
    choice.add_argument(
        "--gpu-price",
        metavar="HW=USD,...",
        help="USD per GPU-hour by hardware entry, e.g. h200=3.5,b200=5.2 (h200 also prices h200x8); a "
        "deployment's price=USD comes first (default: none)",
    )
    choice.add_argument(
        "--headroom",
        type=float,
        default=0.2,
        metavar="FRACTION",
        help="plan each replica at this much below its operating point (default: 0.2)",
    )
    p.add_argument("--json", metavar="FILE", help="write the start-up checks and rows as JSON (default: none)")
    p.add_argument(
        "--html",
        metavar="FILE",
        help="write an HTML page: every deployment on the same plots and one Pareto plot (default: none)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    import orjson

    from loadgen.spec.gates import parse_slo
    from loadgen.spec.options import OptionError, parse_float_list, parse_int_list

    ns = build_parser().parse_args(argv)
    try:
        deployments = [parse_deployment(t, i) for i, t in enumerate(ns.deployment or [f"profile={DEFAULT_PROFILE}"])]
        concurrencies = parse_int_list("--concurrency", ns.concurrency) if ns.concurrency else None
        rates = parse_float_list("--rate", ns.rate) if ns.rate else None
        slo = parse_slo(ns.slo) if ns.slo else None
        prices = parse_prices(ns.gpu_price) if ns.gpu_price else {}
        if ns.target_rps is not None and not ns.target_rps > 0:
            raise ValueError(f"--target-rps {ns.target_rps:g}: give the request rate to serve, > 0")
        if not 0 <= ns.headroom < 1:
            raise ValueError(f"--headroom {ns.headroom:g}: give a fraction in [0, 1), e.g. 0.2")
        if slo is None and (ns.target_rps is not None or prices):
            raise ValueError("--target-rps and --gpu-price choose among deployments within an SLO: give --slo too")
    except (ProfileError, OptionError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if concurrencies is None and rates is None:
        concurrencies = [1, 8, 32, 64]
    t0 = time.perf_counter()
    result = predict(
        deployments,
        concurrencies=concurrencies,
        rates=rates,
        input_tokens=ns.input_tokens,
        output_tokens=ns.output_tokens,
        warmup_s=ns.warmup_seconds,
        window_s=ns.window_seconds,
        seed=ns.seed,
        slo=slo,
        client_gap_s=ns.client_gap_ms / 1e3,
    )
    if slo:
        result["choice"] = choose(
            deployments, result, slo, target_rps=ns.target_rps, prices=prices, headroom=ns.headroom
        )
    print(markdown(result))
    print(f"({len(result['rows'])} loads predicted in {time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    if ns.json:
        Path(ns.json).write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    if ns.html:
        from loadgen.predict.page import render_page

        Path(ns.html).write_text(render_page(result, slo), encoding="utf-8")
    return 0
