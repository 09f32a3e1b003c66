"""Start-up memory of an SGLang server, per GPU, from physical terms.

SGLang splits each GPU's memory ``T`` in two at start-up [S22][S23]. The *static fraction*
``mem_fraction_static * T`` holds what exists before the KV pool is sized and the pool itself, which
takes all the rest of the fraction:

    W     = [(weight_bytes - replicated) / TP + replicated      target weights per GPU
             + attention * (1/(TP/DP) - 1/TP)] / PP             (DP attention replicates attention;
                                                                PP stages hold L/PP layers each)
    W_d   = drafter_bytes / TP                                  drafter weights (counted in the
                                                                fraction, as newer SGLang does)
    R     = cuda_context_gb + NCCL_BUFFER_BYTES (TP > 1)       runtime allocated before the pool
    cell  = kv_bytes_per_token / (DP for MLA, else TP) / PP + drafter_kv_bytes_per_token / TP
            (the pool in tokens is then the deployment's: every DP rank's pool together)
    pool  = floor((mfs * T - W - W_d - R) / cell)               KV pool, tokens
            (or ``server.kv_pool_tokens`` when the engine was told its pool: taken as given)

The *headroom* ``(1 - mfs) * T`` holds what is allocated after the pool: the request table, the
attention backend's CUDA-graph metadata and the CUDA graphs' memory pool. Graphs are captured largest
batch first into one shared pool, so the pool is the peak of the largest captured forward. It runs
``N = bs_max * n_v`` tokens, with ``bs_max = min(cuda_graph_max_bs, max_running_requests)`` and the
verify width ``n_v`` (1 without speculative decoding, ``num_draft_tokens`` with it):

    table = (max_running + 1) * (context + 4 + n_v) * 4 B       req_to_token, int32 [S25]
    attn  = bs_max * context * 4 B                              KV-index buffer, int32
          + N * context * 1 B      (tree verify only)           custom tree mask, uint8
          + FLASHINFER_WORKSPACE_BYTES
    act   = N * [vocab * LOGIT_BYTES_PER_VOCAB                  logits of every verified token
                 + (HIDDEN_BUFFERS + target_hidden_layers) * hidden * 2 B
                 + 3 * intermediate / TP * 2 B]                 dense MLP gate, up, activation
    moe   = N * top_k * (hidden + 3 * moe_intermediate / TP) * 2 B     fused-MoE dispatch and
                                                                        combine buffers
    draft = bs_max * draft_block_tokens * (vocab * LOGIT_BYTES_PER_VOCAB + HIDDEN_BUFFERS * hidden * 2 B)

The terms are summed, not overlapped: the logits tensor is larger than any block the layers free,
so the caching allocator cannot place it in their memory. Capture fails (``Capture cuda graph
failed: CUDA out of memory``) when ``table + attn + act + moe + draft`` exceeds the headroom. What
is left is the runtime's, for prefill activations (a chunk of ``chunked_prefill_size`` tokens,
reported as ``prefill_activation_bytes``; SGLang does not check it at start-up, neither do we).

Failures, in the order a start-up meets them: TP x PP larger than the node's GPUs; weights that do not
fit next to the runtime (out of memory while loading); no room left for a KV pool (``Not enough
memory``); graphs larger than the headroom. Bytes are per GPU; sources are in the TOML parts.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.sim.parallel import layout_of
from loadgen.sim.profile import Profile

NCCL_BUFFER_BYTES = 1.0e9
"""ASSUMPTION: NCCL communicators (4 MiB per channel and peer on NVLink, NVLS multicast buffers)
and SGLang's custom all-reduce IPC buffers, allocated per GPU when TP > 1, before the pool."""

DEEPEP_BUFFER_BYTES = 1.0e9
"""ASSUMPTION: the all-to-all buffers of expert parallelism with DP attention (DeepEP's NVLink and RDMA
buffers, SGLang's default config), allocated per GPU before the pool."""

FLASHINFER_WORKSPACE_BYTES = 384 * 2**20
"""SGLang's attention float workspace (``global_config.flashinfer_workspace_size``, 384 MiB),
allocated with the attention backend after the KV pool."""

LOGIT_BYTES_PER_VOCAB = 6.0
"""Logits of one token: the BF16 tensor all-gathered across TP ranks (2 B per vocabulary entry)
and its FP32 copy for sampling and verification (4 B), alive together."""

HIDDEN_BUFFERS = 6
"""BF16 hidden-size tensors per token that a layer keeps at its peak: residual, hidden state, its
norm, the attention output, the MLP output and the all-reduce output (calibration study §4.4)."""

ACT_BYTES = 2  # BF16 activations
INDEX_BYTES = 4  # int32 token indices (req_to_token, KV indices)
TREE_MASK_BYTES = 1  # uint8 per (verified token, context position)

FAIL_DEVICES = "devices"
FAIL_WEIGHTS = "weights"
FAIL_KV_POOL = "kv_pool"
FAIL_GRAPHS = "graph_capture"


@dataclass(frozen=True)
class MemoryPlan:
    """How one GPU's memory is split at start-up; every figure in bytes per GPU."""

    gpus: int
    tp: int
    pp: int  # pipeline stages: tp * pp GPUs
    total_bytes: float
    runtime_bytes: float  # CUDA context + communication buffers, before the weights
    weight_bytes: float  # target weights: sharded part / TP + replicated part
    drafter_bytes: float  # drafter weights / TP
    static_bytes: float  # mem_fraction_static * total: runtime + weights + drafter + KV pool
    kv_cell_bytes: float  # KV bytes per pooled token, target + drafter
    kv_pool_bytes: float
    kv_pool_tokens: int
    headroom_bytes: float  # (1 - mem_fraction_static) * total
    graph_batch: int  # largest captured batch size
    graph_tokens: int  # tokens of the largest captured target forward
    table_bytes: float  # req_to_token
    attn_bytes: float  # KV-index buffer, tree mask, attention workspace
    activation_bytes: float  # logits, hidden-size buffers, dense MLP of the largest forward
    moe_bytes: float  # fused-MoE buffers of the largest forward
    draft_graph_bytes: float  # the drafter's largest captured forward
    prefill_activation_bytes: float  # one prefill chunk at run time (not checked)

    @property
    def graph_bytes(self) -> float:
        """Everything CUDA-graph capture needs out of the headroom."""
        return self.table_bytes + self.attn_bytes + self.activation_bytes + self.moe_bytes + self.draft_graph_bytes

    @property
    def graph_fits(self) -> bool:
        return self.graph_bytes <= self.headroom_bytes

    @property
    def headroom_left_bytes(self) -> float:
        return self.headroom_bytes - self.graph_bytes

    @property
    def failure(self) -> str | None:
        """Where start-up fails (``FAIL_*``), None when it starts."""
        if self.tp * self.pp > self.gpus:
            return FAIL_DEVICES
        if self.runtime_bytes + self.weight_bytes + self.drafter_bytes > self.total_bytes:
            return FAIL_WEIGHTS
        if self.kv_pool_tokens <= 0:
            return FAIL_KV_POOL
        if not self.graph_fits:
            return FAIL_GRAPHS
        return None


def memory_plan(profile: Profile) -> MemoryPlan:
    """The start-up memory plan of ``profile`` (see the module docstring for the terms)."""
    p, hw, m, s, sp = profile, profile.hardware, profile.model, profile.server, profile.spec
    lay = layout_of(profile)
    tp, pp = lay.tp, lay.pp
    total = hw.hbm_gb * 1e9
    runtime = hw.cuda_context_gb * 1e9 + (NCCL_BUFFER_BYTES if lay.gpus > 1 else 0.0)
    runtime += DEEPEP_BUFFER_BYTES if lay.all_to_all else 0.0
    replicated = min(m.replicated_weight_bytes, m.weight_bytes)
    attn_extra = m.attention_params * m.linear_bits / 8.0 * (1.0 / lay.attn_tp - 1.0 / tp)
    weights = ((m.weight_bytes - replicated) / tp + replicated + attn_extra) / pp
    spec_on = sp.enabled
    drafter = sp.drafter_bytes / tp if spec_on else 0.0
    static = s.mem_fraction_static * total
    kv_div = lay.dp if m.kv_replicated else tp
    cell = m.kv_bytes_per_token / kv_div / pp + (sp.drafter_kv_bytes_per_token / tp if spec_on else 0.0)
    pool = static - runtime - weights - drafter
    tokens = int(pool // cell) if pool > 0 and cell > 0 else 0
    if s.kv_pool_tokens > 0:  # the engine was given its pool (vLLM's block override, TurboMind's block count)
        tokens, pool = s.kv_pool_tokens, s.kv_pool_tokens * cell

    n_v = p.verify_width
    bs_max = max(1, min(s.cuda_graph_max_bs, p.max_running_requests))
    n_tok = bs_max * n_v
    ctx = p.context_length
    table = (p.max_running_requests + 1) * (ctx + 4 + n_v) * INDEX_BYTES
    tree_mask = n_tok * ctx * TREE_MASK_BYTES if spec_on and sp.algorithm == "tree" else 0
    attn = bs_max * ctx * INDEX_BYTES + tree_mask + FLASHINFER_WORKSPACE_BYTES
    kept = HIDDEN_BUFFERS + (sp.target_hidden_layers if spec_on else 0)
    dense_mlp = 3 * m.intermediate / tp * ACT_BYTES
    per_token = m.vocab * LOGIT_BYTES_PER_VOCAB + kept * m.hidden * ACT_BYTES + dense_mlp
    moe_per_token = m.experts_active * (m.hidden + 3 * m.moe_intermediate / tp) * ACT_BYTES if m.experts else 0.0
    draft_tokens = bs_max * sp.draft_block_tokens if spec_on else 0
    draft = draft_tokens * (m.vocab * LOGIT_BYTES_PER_VOCAB + HIDDEN_BUFFERS * m.hidden * ACT_BYTES)
    prefill = s.chunked_prefill_size * (HIDDEN_BUFFERS * m.hidden * ACT_BYTES + dense_mlp + moe_per_token)
    return MemoryPlan(
        gpus=hw.gpus,
        tp=tp,
        pp=pp,
        total_bytes=total,
        runtime_bytes=runtime,
        weight_bytes=weights,
        drafter_bytes=drafter,
        static_bytes=static,
        kv_cell_bytes=cell,
        kv_pool_bytes=max(pool, 0.0),
        kv_pool_tokens=tokens,
        headroom_bytes=total - static,
        graph_batch=bs_max,
        graph_tokens=n_tok,
        table_bytes=float(table),
        attn_bytes=float(attn),
        activation_bytes=n_tok * per_token,
        moe_bytes=n_tok * moe_per_token,
        draft_graph_bytes=draft,
        prefill_activation_bytes=prefill,
    )
