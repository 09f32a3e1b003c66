"""The inference server's Prometheus ``/metrics``, mapped onto the server sample fields.

SGLang (``sglang:*``, needs ``--enable-metrics``) and vLLM V1 (``vllm:*``) names are recognised from
the page itself; any other server is read through a user mapping ``{field: metric name}`` (which also
overrides the built-in names). Counters stay cumulative (``*_total`` fields); the analysis takes their
differences per step. Series that differ only in a tensor/pipeline rank label are one value reported
by several ranks, so they are merged (max) before summing over the remaining labels (data-parallel
ranks, engines).

SGLang caveats handled here: ``sglang:cache_hit_rate`` flips to 0 during decode, so the cumulative
``cached_tokens_total``/``prompt_tokens_total`` pair is kept too; SGLang's preemption is retraction
(``num_retracted_requests_total``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import cast

from loadgen.rundir.samples import SERVER_FIELDS, ServerSample
from loadgen.telemetry import prom
from loadgen.telemetry.base import Emit
from loadgen.telemetry.fetch import get

# field -> candidate metric names, first present wins
SGLANG: dict[str, tuple[str, ...]] = {
    "running": ("sglang:num_running_reqs",),
    "queued": ("sglang:num_queue_reqs",),
    "kv_usage": ("sglang:token_usage",),
    "kv_capacity_tokens": ("sglang:max_total_num_tokens",),
    "preemptions_total": ("sglang:num_retracted_requests_total",),
    "prefix_hit": ("sglang:cache_hit_rate",),
    "prefix_hits_total": ("sglang:cached_tokens_total",),
    "prefix_queries_total": ("sglang:prompt_tokens_total",),
    "spec_accept_len": ("sglang:spec_accept_length",),
    "spec_accept_rate": ("sglang:spec_accept_rate",),
    "prompt_tokens_total": ("sglang:prompt_tokens_total",),
    "gen_tokens_total": ("sglang:generation_tokens_total",),
    "requests_total": ("sglang:num_requests_total",),
    "aborted_total": ("sglang:num_aborted_requests_total",),
}

VLLM: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running",),
    "queued": ("vllm:num_requests_waiting",),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "preemptions_total": ("vllm:num_preemptions_total",),
    "prefix_hits_total": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "prefix_queries_total": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "spec_drafts_total": ("vllm:spec_decode_num_drafts_total",),
    "spec_draft_tokens_total": ("vllm:spec_decode_num_draft_tokens_total",),
    "spec_accepted_total": ("vllm:spec_decode_num_accepted_tokens_total",),
    "prompt_tokens_total": ("vllm:prompt_tokens_total",),
    "gen_tokens_total": ("vllm:generation_tokens_total",),
    "requests_total": ("vllm:request_success_total",),
}

_RANK_LABELS = frozenset({"tp_rank", "pp_rank", "attn_tp_rank", "moe_ep_rank"})
# gauges that are fractions or means: merged across ranks/engines by max (fill) or mean (acceptance)
_MAX_FIELDS = frozenset({"kv_usage", "prefix_hit"})
_MEAN_FIELDS = frozenset({"spec_accept_len", "spec_accept_rate"})
_COUNT_FIELDS = frozenset({"running", "queued"})  # whole requests: written as ints


def detect_engine(expo: prom.Exposition) -> str:
    for s in expo.samples:
        if s.name.startswith("sglang:"):
            return "sglang"
        if s.name.startswith("vllm:"):
            return "vllm"
    return "custom"


def _combine(field: str, series: list[prom.PromSample]) -> float | None:
    groups: dict[tuple[tuple[str, str], ...], float] = {}
    for s in series:
        if math.isnan(s.value):
            continue
        key = tuple(sorted((k, v) for k, v in s.labels.items() if k not in _RANK_LABELS))
        groups[key] = max(groups.get(key, -math.inf), s.value)
    if not groups:
        return None
    vals = list(groups.values())
    if field in _MAX_FIELDS:
        return max(vals)
    if field in _MEAN_FIELDS:
        return sum(vals) / len(vals)
    return sum(vals)


def map_metrics(expo: prom.Exposition, mapping: Mapping[str, str] | None = None, t_ns: int = 0) -> ServerSample:
    """The server sample one scrape gives (timed ``t_ns``): the fields its engine's names (and the
    user's ``mapping``, field -> metric name) find on the page, ``None`` for those not there."""
    engine = detect_engine(expo)
    table: dict[str, tuple[str, ...]] = dict(SGLANG if engine == "sglang" else VLLM if engine == "vllm" else {})
    for fld, metric in (mapping or {}).items():
        table[fld] = (metric,)
    by_name: dict[str, list[prom.PromSample]] = {}
    for s in expo.samples:
        by_name.setdefault(s.name, []).append(s)
    rec: ServerSample = {"t_ns": t_ns, "src": "server", "engine": engine}
    fields = cast("dict[str, object]", rec)  # the table's keys are server fields (checked below)
    for fld, names in table.items():
        if fld not in SERVER_FIELDS:
            raise KeyError(f"{fld!r} is not a server sample field (loadgen.rundir.samples.SERVER_FIELDS)")
        value = None
        for name in names:
            if name in by_name:
                value = _combine(fld, by_name[name])
                break
        fields[fld] = int(value) if fld in _COUNT_FIELDS and value is not None and value.is_integer() else value
    if engine == "vllm" and "kv_capacity_tokens" not in table:
        capacity, block = _vllm_cache_config(by_name.get("vllm:cache_config_info", []))
        if capacity:
            rec["kv_capacity_tokens"], rec["kv_block_tokens"] = float(capacity), block
    return rec


def _vllm_cache_config(series: list[prom.PromSample]) -> tuple[int, int]:
    """The KV pool vLLM's ``cache_config_info`` labels describe, as (tokens, block size): ``num_gpu_blocks``
    blocks of ``block_size`` tokens, of which one is its null block (``BlockPool.null_block``, never
    given to a request), so ``(num_gpu_blocks - 1) * block_size`` tokens; summed over engines."""
    tokens, block = 0, 0
    for s in series:
        try:
            blocks, size = int(s.labels.get("num_gpu_blocks", "")), int(s.labels.get("block_size", ""))
        except ValueError:
            continue  # "None" before the engine sized its pool
        tokens += max(blocks - 1, 0) * size
        block = size
    return tokens, block


class ServerMetricsSampler:
    """Scrapes ``url`` once per period; raises FetchError when the server does not answer."""

    def __init__(
        self, url: str, period_s: float = 1.0, mapping: Mapping[str, str] | None = None, timeout_s: float = 2.0
    ) -> None:
        self.name = "server_metrics"
        self.period_s = period_s
        self.url = url
        self.mapping = dict(mapping or {})
        self.timeout_s = min(timeout_s, max(period_s, 0.5))
        self._prefixes = ("sglang:", "vllm:")
        self._custom = set(self.mapping.values())

    def open(self, emit: Emit) -> None:
        self._emit = emit

    def _wanted(self, name: str) -> bool:
        return name.startswith(self._prefixes) or name in self._custom

    def sample(self) -> list[ServerSample]:
        body, _ = get(self.url, self.timeout_s)
        t_ns = time.time_ns()
        expo = prom.parse(body.decode("utf-8", errors="replace"), self._wanted)
        return [map_metrics(expo, self.mapping, t_ns)]

    def close(self) -> None:
        pass
