"""A :class:`~loadgen.twin.fit.TwinFit` written as a simulator profile (``twin.toml``) and a report.

The twin is a normal profile (``loadgen sim --profile-file twin.toml``). Its step times use the
simulator's fixed-timing model (``[timing]``, ``loadgen.sim.fixed_timing.FixedStepModel``), which is the
fitted model with the KV-context term folded in at the run's context per request:

    decode step = itl_ms * (1 + itl_growth * (n - 1))      = a + b' * n,  b' = b + c * K/n
    prefill step = ttft_ms + ttft_per_1k_ms * tokens / 1000

Everything else is the simulator's scheduler as is: continuous batching, max running requests, the
KV token pool (its size set through the notional memory plan below), speculative acceptance,
the prefix cache and output lengths. The hardware and model parts are the toy ``tiny`` ones with
overrides: a notional GPU whose memory plan leaves exactly the fitted KV pool (``weight_bytes``
takes up the rest of the static fraction), never the measured hardware's real figures.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from loadgen.twin.fit import LABEL_TAU_PREFIX, Param, TwinFit

KV_CELL_BYTES = 65536
MEM_FRACTION = 0.9
NOTIONAL_HBM_GB = 1000.0
DEFAULT_CONTEXT = 131072
DEFAULT_CHUNKED_PREFILL = 8192
DEFAULT_VLLM_TOKEN_BUDGET = 2048
KNOT_PREFIX = "decode_ms_at_batch_"  # fit parameters: the broken-line decode step at that batch
LINE_PARAMS = ("decode_ms_fixed", "decode_ms_per_request", "decode_ms_per_1k_ctx")

# --set names that are not fit parameters but profile fields (SECTION.FIELD passes through)
SET_ALIASES = {
    "max_running_requests": "max_running_requests",
    "max-running-requests": "max_running_requests",
    "kv_pool_tokens": "kv_pool_tokens",
}


class TwinError(ValueError):
    """Bad --set or an unusable fit; the message says what to do."""


def apply_sets(result: TwinFit, sets: dict[str, str]) -> dict[str, str]:
    """Apply ``--set name=value`` to the fit's parameters (a what-if); returns the SECTION.FIELD
    overrides that go to the simulator as they are."""
    passthrough: dict[str, str] = {}
    for key, raw in sets.items():
        name = SET_ALIASES.get(key, key)
        if "." in name:
            passthrough[name] = raw
            continue
        if name not in result.params:
            known = ", ".join(sorted(result.params))
            raise TwinError(f"--set {key}={raw}: unknown parameter; use one of {known}, or SECTION.FIELD")
        try:
            value = float(raw)
        except ValueError as exc:
            raise TwinError(f"--set {key}={raw}: not a number") from exc
        old = result.params[name]
        result.params[name] = Param(value, None, old.unit, f"set by --set (what-if; fitted {old.value:.6g})", False)
        result.measured.setdefault("what_if", {})[name] = {"value": value, "fitted": old.value}
    return passthrough


def _get(result: TwinFit, name: str, default: float) -> float:
    p = result.params.get(name)
    return p.value if p is not None else default


def _comment(result: TwinFit, *names: str) -> str:
    if not names:
        return ""
    parts = []
    for n in names:
        p = result.params.get(n)
        if p is not None:
            parts.append(f"{n} = {p.describe()}")
        else:
            parts.append(f"{n}: not fitted")
    return "  # " + "; ".join(parts)


def _knot_batch(name: str) -> int:
    return int(name[len(KNOT_PREFIX) :])


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(round(v, 9))
    return json.dumps(str(v))


def decode_knots(result: TwinFit) -> list[tuple[int, float]]:
    """The broken-line decode points (batch, ms) with the KV term folded in at the run's context
    per request, as the twin serves them; empty when the fit kept the straight line, or when a
    what-if (``--set``) changed the line."""
    if any(name in result.measured.get("what_if", {}) for name in LINE_PARAMS):
        return []
    c = _folded_ctx_ms(result)
    ctx = float(result.measured.get("ctx_per_request_tokens", 0.0))
    points = [(_knot_batch(k), p.value) for k, p in result.params.items() if k.startswith(KNOT_PREFIX)]
    return [(x, v + c * ctx * x / 1000.0) for x, v in sorted(points)]


def ctx_term_served(result: TwinFit) -> bool:
    """The twin serves the KV-context term as its own (``decode_ms_per_1k_ctx``): the run's requests
    had contexts ``CTX_SPREAD_MIN`` times apart or more (two context lengths), or a what-if set it."""
    return bool(result.measured.get("ctx_term_served")) or "decode_ms_per_1k_ctx" in result.measured.get("what_if", {})


def _folded_ctx_ms(result: TwinFit) -> float:
    """ms per 1k context tokens folded into the per-request term (0 where the term is served)."""
    return 0.0 if ctx_term_served(result) else _get(result, "decode_ms_per_1k_ctx", 0.0)


def tau_by_source_text(result: TwinFit, depth: int) -> str:
    """``tau_by_source`` of the twin: each workload label's fitted acceptance ("" when not fitted, or
    when a what-if set ``tokens_per_chunk``, which then applies to every request)."""
    if "tokens_per_chunk" in result.measured.get("what_if", {}):
        return ""
    top = depth + 1 - 1e-3
    pairs = [
        (name[len(LABEL_TAU_PREFIX) :], min(max(p.value, 1.0), top))
        for name, p in sorted(result.params.items())
        if name.startswith(LABEL_TAU_PREFIX)
    ]
    return ";".join(f"{label}={tau:.6g}" for label, tau in pairs)


def timing_fields(result: TwinFit) -> dict[str, float | str]:
    """The ``[timing]`` section: the fitted step model in the simulator's fixed-timing form."""
    a = _get(result, "decode_ms_fixed", 5.0)
    b = _get(result, "decode_ms_per_request", 0.0)
    c = _folded_ctx_ms(result)
    ctx = float(result.measured.get("ctx_per_request_tokens", 0.0))
    b_eff = b + c * ctx / 1000.0
    itl = max(a + b_eff, 1e-3)
    return {
        "ttft_ms": max(_get(result, "prefill_ms_fixed", 20.0), 0.0),
        "ttft_per_1k_ms": max(_get(result, "prefill_ms_per_1k_tokens", 0.0), 0.0),
        "ttft_floor_ms": max(_get(result, "prefill_ms_floor", 0.0), 0.0),
        "itl_ms": itl,
        "itl_growth": b_eff / itl,
        "decode_ms_by_batch": ",".join(f"{x}:{ms:.6g}" for x, ms in decode_knots(result)),
        "decode_ms_per_1k_ctx": max(_get(result, "decode_ms_per_1k_ctx", 0.0), 0.0) if ctx_term_served(result) else 0.0,
        "power_busy_w": _get(result, "busy_w", 200.0),
    }


def _memory_plan(result: TwinFit) -> tuple[int, float, float]:
    """The notional GPU that leaves exactly the fitted KV pool: (pool tokens, HBM GB, weight bytes)."""
    pool = round(_get(result, "kv_pool_tokens", 10_000_000))
    hbm_gb = max(NOTIONAL_HBM_GB, math.ceil(pool * KV_CELL_BYTES / MEM_FRACTION / 1e9 * 1.2))
    static = MEM_FRACTION * hbm_gb * 1e9
    weight_bytes = static - (pool + 0.5) * KV_CELL_BYTES
    return pool, hbm_gb, weight_bytes


def _preamble_lines(result: TwinFit, name: str, *, spec: bool) -> list[str]:
    """The header comment, what could not be fitted, and the profile's top-level keys."""
    lines = [
        "# A digital twin calibrated by `loadgen calibrate` (docs/twin.md). Serve it with",
        f"#   loadgen sim --profile-file {name}.toml",
        "# Each value carries its fit in a comment: value ± standard uncertainty (fitted: evidence) or",
        "# ASSUMED where the run could not determine it.",
    ]
    for line in result.cannot_fit:
        lines.append(f"# cannot fit: {line}")
    names = ", ".join(Path(s).name for s in result.measured.get("sources", []))
    lines += [
        f"description = {_toml_value('Twin calibrated from ' + names)}",
        'hardware = "tiny"',
        'model = "tiny"',
        f'spec = "{"tiny-spec" if spec else "none"}"',
        f"sources = {json.dumps([str(s) for s in result.measured.get('sources', [])])}",
    ]
    return lines


def _hardware_lines(result: TwinFit, hbm_gb: float) -> list[str]:
    """``[hardware_overrides]``: the notional GPU, its count and its power."""
    idle = _get(result, "idle_w", 40.0)
    busy = _get(result, "busy_w", 200.0)
    limit = max(_get(result, "power_limit_w", 0.0), busy, idle) or 300.0
    return [
        "",
        "[hardware_overrides]",
        "# a notional GPU: its memory plan leaves exactly the fitted KV pool (see model_overrides)",
        'gpu_name = "twin"',
        f"gpus = {int(_get(result, 'gpus', 1))}" + _comment(result, "gpus"),
        f"hbm_gb = {_toml_value(float(hbm_gb))}",
        "cuda_context_gb = 0.0",
        f"idle_w = {_toml_value(idle)}" + _comment(result, "idle_w"),
        f"power_limit_w = {_toml_value(limit)}" + _comment(result, "power_limit_w"),
    ]


def _model_lines(result: TwinFit, served_name: str, pool: int, weight_bytes: float) -> list[str]:
    """``[model_overrides]``: the served name and the weights that leave the KV pool of ``pool`` tokens."""
    return [
        "",
        "[model_overrides]",
        f"served_name = {_toml_value(served_name)}",
        f"kv_bytes_per_token = {KV_CELL_BYTES}",
        f"# weight_bytes: the static memory fraction less the KV pool of {pool} tokens"
        + _comment(result, "kv_pool_tokens"),
        f"weight_bytes = {_toml_value(weight_bytes)}",
        f"streamed_dense_bytes = {_toml_value(weight_bytes)}",
        f"context_length = {DEFAULT_CONTEXT}  # ASSUMED: a run directory does not record the server's context length",
    ]


def _spec_lines(result: TwinFit, depth: int) -> list[str]:
    """``[spec_overrides]`` for speculative decoding ``depth`` tokens deep: the fitted acceptance."""
    tau = min(max(_get(result, "tokens_per_chunk", 1.0), 1.0), depth + 1 - 1e-3)
    return [
        "",
        "[spec_overrides]",
        'algorithm = "chain"',
        f"depth = {depth}" + _comment(result, "spec_depth"),
        f"num_draft_tokens = {depth + 1}  # ASSUMED: verify width = depth + 1 (sets KV per step only)",
        f"tau = {_toml_value(tau)}" + _comment(result, "tokens_per_chunk", "tokens_per_chunk_per_request"),
        "tau_code = 0.0",
        "tau_prose = 0.0",
        "# acceptance per workload label (the X-Loadgen-Source header the load generator sends)",
        f"tau_by_source = {_toml_value(tau_by_source_text(result, depth))}"
        + _comment(result, *sorted(k for k in result.params if k.startswith(LABEL_TAU_PREFIX))),
        "beta = 1.0",
        "drafter_ms = 0.0  # the fitted step time includes drafting",
        "drafter_bytes = 0.0",
        "drafter_kv_bytes_per_token = 0",
        "draft_block_tokens = 0",
        "target_hidden_layers = 0",
    ]


def _server_lines(result: TwinFit) -> list[str]:
    """``[server]``: the scheduler, its limits, output lengths and the prefix cache."""
    max_running = round(_get(result, "max_running_requests", 4096))
    prefix_on = _get(result, "prefix_cache", 1.0) >= 0.5
    return [
        "",
        "[server]",
        "tp = 1",
        f"max_running_requests = {max_running}" + _comment(result, "max_running_requests"),
        "max_queued_requests = 0",
        f"mem_fraction_static = {MEM_FRACTION}",
        f"cuda_graph_max_bs = {min(max_running, 512)}",
        f"engine = {_toml_value(result.engine)}  # the scheduler: {result.engine_evidence}",
        (
            f"chunked_prefill_size = {DEFAULT_VLLM_TOKEN_BUDGET}  # ASSUMED: vLLM's max_num_batched_tokens for its "
            "OpenAI server (8,192 on GPUs of 70 GiB or more): /metrics does not export it"
            if result.engine == "vllm"
            else f"chunked_prefill_size = {DEFAULT_CHUNKED_PREFILL}  # ASSUMED: SGLang's default"
        ),
        "startup_s = 0.0",
        f"natural_len_median = {max(1, round(_get(result, 'natural_len_median', 300.0)))}"
        + _comment(result, "natural_len_median"),
        f"natural_len_sigma = {_toml_value(max(_get(result, 'natural_len_sigma', 0.8), 1e-3))}"
        + _comment(result, "natural_len_sigma"),
        f"disable_radix_cache = {_toml_value(not prefix_on)}" + _comment(result, "prefix_cache"),
        f"prefix_block_tokens = {int(_get(result, 'prefix_block_tokens', 64))}"
        + _comment(result, "prefix_block_tokens"),
    ]


def _timing_lines(result: TwinFit) -> list[str]:
    """``[timing]``: the fitted step model (:func:`timing_fields`), ending with the file's last newline."""
    timing = timing_fields(result)
    ctx = result.measured.get("ctx_per_request_tokens")
    busy = _get(result, "busy_w", 200.0)
    return [
        "",
        "[timing]",
        "# decode step = itl_ms * (1 + itl_growth * (running - 1)) + decode_ms_per_1k_ctx * K/1000: the fitted",
        "# a + b*n + c*K/1000, "
        + (
            "c served as its own term (the run's contexts were 2x or more apart)"
            if ctx_term_served(result)
            else f"c folded into the per-request term at {ctx if ctx is None else round(ctx)} tokens a request"
        ),
        f"ttft_ms = {_toml_value(timing['ttft_ms'])}" + _comment(result, "prefill_ms_fixed"),
        f"ttft_per_1k_ms = {_toml_value(timing['ttft_per_1k_ms'])}" + _comment(result, "prefill_ms_per_1k_tokens"),
        f"ttft_floor_ms = {_toml_value(timing['ttft_floor_ms'])}" + _comment(result, "prefill_ms_floor"),
        f"itl_ms = {_toml_value(timing['itl_ms'])}" + _comment(result, "decode_ms_fixed"),
        f"itl_growth = {_toml_value(timing['itl_growth'])}"
        + _comment(result, "decode_ms_per_request", "decode_ms_per_1k_ctx"),
        "# the broken line through each load level's batch, when fitted, replaces itl_ms / itl_growth",
        f"decode_ms_by_batch = {_toml_value(timing['decode_ms_by_batch'])}"
        + _comment(result, *sorted((k for k in result.params if k.startswith(KNOT_PREFIX)), key=_knot_batch)),
        f"decode_ms_per_1k_ctx = {_toml_value(timing['decode_ms_per_1k_ctx'])}"
        + _comment(result, "decode_ms_per_1k_ctx"),
        f"power_busy_w = {_toml_value(float(busy))}" + _comment(result, "busy_w"),
        f"prefill_holds_decode = {_toml_value(result.engine == 'vllm')}  # vLLM: prefills were timed "
        "beside the decodes of their step",
        "",
    ]


def profile_text(result: TwinFit, *, name: str, served_name: str) -> str:
    """The twin as profile TOML, every value with its uncertainty and evidence as a comment."""
    depth = int(_get(result, "spec_depth", 0.0))
    pool, hbm_gb, weight_bytes = _memory_plan(result)
    lines = _preamble_lines(result, name, spec=depth > 0)
    lines += _hardware_lines(result, hbm_gb)
    lines += _model_lines(result, served_name, pool, weight_bytes)
    if depth > 0:
        lines += _spec_lines(result, depth)
    lines += _server_lines(result)
    lines += _timing_lines(result)
    return "\n".join(lines)


def write_twin(result: TwinFit, out: Path, *, served_name: str) -> tuple[Path, Path]:
    """Write ``out`` (the profile) and ``out`` with ``.fit.json`` (the fit report)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(profile_text(result, name=out.stem, served_name=served_name))
    report = out.with_suffix(".fit.json")
    data = result.as_json()
    data["twin_timing"] = timing_fields(result)
    report.write_text(json.dumps(data, indent=2) + "\n")
    return out, report
