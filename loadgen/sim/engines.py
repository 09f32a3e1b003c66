"""Serving engines' defaults: what ``--engine sglang|vllm`` sets when the user does not.

An engine changes a deployment's timing through the settings it picks on its own from the GPU and
the layout -- the prefill token budget, the cap on running requests, the CUDA-graph batch sizes and
the memory it keeps for weights and cache -- and the way it is seen through the names of its
metrics and its log lines (``style``: prom.py, logsink.py, bodies.py). These are those defaults,
from each engine's source; the user's own ``server.*`` settings win over them.

* SGLang (``python/sglang/srt/server_args.py``, ``ServerArgs._handle_gpu_memory_settings``): by
  the GPU's memory in MiB -- under 20 GiB a 2,048-token prefill chunk and graphs to batch 8; under
  35 GiB 2,048 and 24 (TP < 4) or 80; under 60 GiB 4,096 and 32 or 160; under 160 GiB 8,192 and
  256 (TP < 4) or 512; above, 16,384 and 512. ``mem_fraction_static = (mem - reserved) / mem`` with
  ``reserved = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + tp * pp / 8 * 1024`` MiB (DP
  attention: ``+ graph_bs * dp * 3``, and ``* 1.5`` more past batch 300), at least 10 GiB on GPUs
  over 60 GiB, + 2 GiB with a draft model. No cap on running requests but the KV pool's; prefix
  (radix) cache on.
* vLLM V1 (``vllm/engine/arg_utils.py``, ``EngineArgs.get_batch_defaults`` for the OpenAI server;
  ``gpu_memory_utilization`` 0.90; V1's prefix caching on): on GPUs of 70 GiB or more other than
  the A100, a token budget of 8,192 per step and 1,024 sequences; otherwise 2,048 and 256. CUDA
  graphs up to batch 512 (its compilation config's largest capture size).

The scheduler follows ``server.engine``: SGLang's (engine.py: prefill and decode steps apart,
admission that reserves room for future output, retraction) or vLLM's V1 (sched_vllm.py: one token
budget per step shared by prefill chunks and decodes, admission without reservation, preemption of
the newest request by recompute, KV in blocks of ``--block-size`` 16, set here as
``server.prefix_block_tokens``). vLLM's token budget is ``server.chunked_prefill_size`` and its
``gpu_memory_utilization`` the static share (ASSUMPTION: vLLM's fraction also covers the
activations its profiling run measures, so its pool reads a little large).
"""

from __future__ import annotations

from typing import Any

from loadgen.sim.profile import Profile, ProfileError, apply_overrides

ENGINES = ("sglang", "vllm")
GIB_MIB = 1024.0


def _gpu_mem_mib(profile: Profile) -> float:
    # hbm_gb as the entries carry it (what nvidia-smi reports, in GiB for the older entries)
    return profile.hardware.hbm_gb * GIB_MIB


def sglang_defaults(profile: Profile) -> dict[str, Any]:
    s = profile.server
    mem = _gpu_mem_mib(profile)
    tp, pp, dp = max(1, s.tp), max(1, s.pp), max(1, s.dp_attention)
    if mem < 20 * GIB_MIB:
        chunk, graph_bs = 2048, 8
    elif mem < 35 * GIB_MIB:
        chunk, graph_bs = 2048, 24 if tp < 4 else 80
    elif mem < 60 * GIB_MIB:
        chunk, graph_bs = 4096, 32 if tp < 4 else 160
    elif mem < 160 * GIB_MIB:
        chunk, graph_bs = 8192, 256 if tp < 4 else 512
    else:
        chunk, graph_bs = 16384, 512
    reserved = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + tp * pp / 8 * 1024
    if dp > 1:
        reserved += graph_bs * dp * 3
        if graph_bs > 300:
            reserved += graph_bs * dp * 1.5
    if mem > 60 * GIB_MIB:
        reserved = max(reserved, 10 * GIB_MIB)
    if profile.spec.enabled:
        reserved += 2 * GIB_MIB
    return {
        "server.chunked_prefill_size": chunk,
        "server.cuda_graph_max_bs": graph_bs,
        "server.mem_fraction_static": round((mem - reserved) / mem, 3),
        "server.max_running_requests": 0,
        "server.disable_radix_cache": False,
        # SGLang serves the higher priority value first unless --schedule-low-priority-values-first
        "server.low_priority_values_first": False,
    }


def vllm_defaults(profile: Profile) -> dict[str, Any]:
    mem = _gpu_mem_mib(profile)
    large = mem >= 70 * GIB_MIB and "a100" not in profile.hardware.gpu_name.lower()
    return {
        "server.chunked_prefill_size": 8192 if large else 2048,
        "server.max_running_requests": 1024 if large else 256,
        "server.cuda_graph_max_bs": 512,
        "server.mem_fraction_static": 0.9,
        "server.disable_radix_cache": False,
        "server.prefix_block_tokens": 16,
        "server.low_priority_values_first": True,  # vLLM: the lower value first, always
    }


def with_engine(profile: Profile, engine: str, keep: set[str] | frozenset[str] = frozenset()) -> Profile:
    """``profile`` served by ``engine``: its defaults for the settings not in ``keep`` (the
    ``server.*`` keys the user set), and ``server.engine``. ProfileError naming the choices."""
    if engine not in ENGINES:
        raise ProfileError(f"engine {engine!r}: choose one of {', '.join(ENGINES)}")
    defaults = sglang_defaults(profile) if engine == "sglang" else vllm_defaults(profile)
    chosen = {k: v for k, v in defaults.items() if k not in keep}
    chosen["server.engine"] = engine
    return apply_overrides(profile, chosen)
