"""Step-time, memory and power model of a tensor-parallel inference server.

The decode (or draft+verify) step of ``C`` requests, each verifying ``n_v`` tokens (1 without
speculative decoding), processes ``N = C * n_v`` tokens:

    n_eff  = C * n_v**beta                        tokens that pick experts independently
    W_gpu  = [dense + moe_layers * E*(1-(1-k/E)**n_eff) * expert_bytes (+ drafter)] / TP
    KV_gpu = sum(ctx) * kv_bytes_per_token        (/ TP unless the cache is replicated, as MLA is)
    t_mem  = W_gpu / (eta_bw * BW) + KV_gpu / (eta_attn * BW)
    t_cmp  = [2 * P_active * N + attn_flops * layers * sum(n_v * ctx)] / TP / (eta_c * F)
    t_ar   = 2 * layers * N * hidden * 2 B / allreduce_bw   (ring or NVLS; 0 below the small-message size)
    t_ag   = N * vocab * 2 B * (TP-1)/TP / (0.78 * NVLink)  (logits all-gather)
    T      = t_fix + max(t_mem, t_cmp) + t_ar + t_ag + drafter_ms

A prefill step is the same forward over the new prompt tokens (its attention sees each token's
prefix) plus ``t_fix_prefill``. Power per GPU is ``idle + P_hbm*u_bw + P_tc*u_tc + P_nvl*u_nvl``
capped at the board limit, with the utilisations the step's bytes, FLOPs and collective time imply.
The equations and constants come from the calibration study (reference/simulator-calibration.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.sim.profile import Profile


@dataclass(frozen=True, slots=True)
class StepCost:
    """Duration of one engine step and the per-GPU utilisations it implies (shares of peak)."""

    duration_s: float
    u_bw: float
    u_tc: float
    u_nvl: float
    power_w: float


@dataclass(frozen=True)
class MemoryPlan:
    """How a GPU's memory is split at start-up, SGLang style; bytes are per GPU."""

    total_bytes: float
    weight_bytes: float
    static_bytes: float  # mem_fraction_static * total: weights + KV pool
    kv_pool_bytes: float
    kv_pool_tokens: int
    headroom_bytes: float  # outside the static fraction: activations, graphs, NCCL buffers
    graph_bytes: float  # persistent CUDA-graph buffers for the largest captured batch
    graph_tokens: int
    req_to_token_bytes: float

    @property
    def graph_fits(self) -> bool:
        return self.graph_bytes <= self.headroom_bytes


class StepModel:
    """Pure functions of a profile: step durations, power, memory plan."""

    def __init__(self, profile: Profile) -> None:
        self.p = profile
        hw, m, s, sp = profile.hardware, profile.model, profile.server, profile.spec
        self.tp = max(1, s.tp)
        self.bw = hw.hbm_bw_tb_s * 1e12
        self.flops = hw.bf16_tflops * 1e12
        nvls = s.nvls and hw.allreduce_nvls_gb_s > 0
        self.ar_bw = (hw.allreduce_nvls_gb_s if nvls else hw.allreduce_ring_gb_s) * 1e9
        self.t_fix = s.t_fix_ms / 1e3
        self.t_fix_prefill = s.t_fix_prefill_ms / 1e3
        self.drafter_s = sp.drafter_ms / 1e3 if sp.enabled else 0.0
        self.kv_div = 1 if m.kv_replicated else self.tp
        self.drafter_bytes = sp.drafter_bytes if sp.enabled else 0.0
        self.weights_gpu = (m.weight_bytes + self.drafter_bytes) / self.tp
        self.miss = 1.0 - m.experts_active / m.experts if m.experts > 0 else 1.0

    # -- step durations -------------------------------------------------------------------------

    def _weights_read(self, n_eff: float) -> float:
        m = self.p.model
        moe = 0.0
        if m.experts > 0 and n_eff > 0:
            covered = m.experts * (1.0 - self.miss**n_eff)
            moe = m.moe_layers * covered * m.expert_bytes
        return (m.streamed_dense_bytes + moe + self.drafter_bytes) / self.tp

    def _collectives(self, n_tokens: float) -> tuple[float, float]:
        """All-reduce and logits all-gather seconds for a forward over ``n_tokens`` tokens."""
        if self.tp <= 1:
            return 0.0, 0.0
        m, hw = self.p.model, self.p.hardware
        msg = n_tokens * m.hidden * 2.0
        t_ar = 2 * m.layers * msg / self.ar_bw if msg >= self.p.server.small_allreduce_bytes else 0.0
        t_ag = n_tokens * m.vocab * 2.0 * (self.tp - 1) / self.tp / (0.78 * hw.nvlink_uni_gb_s * 1e9)
        return t_ar, t_ag

    def _finish(self, t_core: float, t_ar: float, t_ag: float, bytes_gpu: float, flops_gpu: float) -> StepCost:
        duration = t_core + t_ar + t_ag
        u_bw = min(1.0, bytes_gpu / duration / self.bw)
        u_tc = min(1.0, flops_gpu / duration / self.flops)
        u_nvl = min(1.0, (t_ar + t_ag) / duration)
        return StepCost(duration, u_bw, u_tc, u_nvl, self.power_w(u_bw, u_tc, u_nvl))

    def decode(self, n_reqs: int, ctx_sum: float) -> StepCost:
        """One decode step (a draft+verify cycle with speculative decoding) of ``n_reqs`` requests
        whose KV lengths sum to ``ctx_sum`` tokens."""
        s, m = self.p.server, self.p.model
        n_v = self.p.verify_width
        n_tokens = n_reqs * n_v
        n_eff = n_reqs * (n_v**self.p.spec.beta if n_v > 1 else 1.0)
        w = self._weights_read(n_eff)
        kv = ctx_sum * m.kv_bytes_per_token / self.kv_div
        t_mem = w / (s.eta_bw * self.bw) + kv / (s.eta_attn * self.bw)
        flops = (2.0 * m.active_params * n_tokens + m.attn_flops_per_ctx * m.layers * n_v * ctx_sum) / self.tp
        t_cmp = flops / (s.eta_c * self.flops)
        t_ar, t_ag = self._collectives(n_tokens)
        core = self.t_fix + max(t_mem, t_cmp) + self.drafter_s
        return self._finish(core, t_ar, t_ag, w + kv, flops)

    def prefill(self, n_tokens: int, attn_pairs: float) -> StepCost:
        """One prefill step over ``n_tokens`` new prompt tokens; ``attn_pairs`` is the number of
        (query token, context token) pairs its attention computes."""
        s, m = self.p.server, self.p.model
        w = self._weights_read(float(n_tokens))
        t_mem = w / (s.eta_bw * self.bw)
        flops = (2.0 * m.active_params * n_tokens + m.attn_flops_per_ctx * m.layers * attn_pairs) / self.tp
        t_cmp = flops / (s.eta_c * self.flops)
        t_ar, t_ag = self._collectives(n_tokens)
        core = self.t_fix + self.t_fix_prefill + max(t_mem, t_cmp) + self.drafter_s
        return self._finish(core, t_ar, t_ag, w, flops)

    # -- power ----------------------------------------------------------------------------------

    def power_w(self, u_bw: float, u_tc: float, u_nvl: float) -> float:
        hw = self.p.hardware
        p = hw.idle_w + hw.p_hbm_w * u_bw + hw.p_tc_w * u_tc + hw.p_nvl_w * u_nvl
        return min(p, hw.power_limit_w)

    # -- memory ---------------------------------------------------------------------------------

    def memory_plan(self) -> MemoryPlan:
        """SGLang's start-up accounting: KV pool from mem_fraction_static, CUDA graphs outside it.

        The largest verify graph holds ``min(cuda_graph_max_bs, max_running_requests) * n_v`` tokens;
        its persistent buffers are full-vocabulary fp32 logits plus ~6 BF16 hidden-size buffers per
        token, on top of ``graph_headroom_gb`` for activations and communication buffers.
        """
        p, hw, m, s = self.p, self.p.hardware, self.p.model, self.p.server
        total = hw.hbm_gb * 1e9
        static = s.mem_fraction_static * total
        kv_pool = static - self.weights_gpu
        cell = m.kv_bytes_per_token / self.kv_div
        tokens = int(kv_pool // cell) if kv_pool > 0 else 0
        max_bs = min(s.cuda_graph_max_bs, p.max_running_requests)
        graph_tokens = max_bs * p.verify_width
        req_to_token = (p.max_running_requests + 1) * (p.context_length + 4 + p.verify_width) * 4.0
        graph = s.graph_headroom_gb * 1e9 + graph_tokens * (m.vocab * 4.0 + 6 * m.hidden * 2.0) + req_to_token
        return MemoryPlan(
            total_bytes=total,
            weight_bytes=self.weights_gpu,
            static_bytes=static,
            kv_pool_bytes=max(kv_pool, 0.0),
            kv_pool_tokens=tokens,
            headroom_bytes=total - static,
            graph_bytes=graph,
            graph_tokens=graph_tokens,
            req_to_token_bytes=req_to_token,
        )
