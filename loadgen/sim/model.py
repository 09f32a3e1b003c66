"""Step-time and power model of a tensor-parallel inference server (start-up memory: memory.py).

The decode (or draft+verify) step of ``C`` requests, each verifying ``n_v`` tokens (1 without
speculative decoding), processes ``N = C * n_v`` tokens:

    n_eff  = C * n_v**beta                        tokens that pick experts independently
    W_gpu  = [dense + moe_layers * E*(1-(1-k/E)**n_eff) * expert_bytes (+ drafter)] / TP
    KV_gpu = sum(ctx) * kv_bytes_per_token        (/ TP unless the cache is replicated, as MLA is)
    t_mem  = W_gpu / (eta_bw * BW) + KV_gpu / (eta_attn * BW)
    t_cmp  = [2*P_lin*N / F_lin + (2*P_exp*N + pad) / F_exp + (2*P_rest*N + attn_flops * layers *
              sum(n_v * ctx)) / F] / TP / eta_c
             P_lin: linear_params, P_exp: moe_layers*k*expert_params, P_rest: active - both; F the
             BF16 peak, F_lin/F_exp their formats' (sim/quant.py: FP8/FP4 peaks, weight-only rate)
    pad    = 2 * 3*hidden*moe_intermediate * moe_layers * E*(1-(1-k/E)**n_eff) * moe_block_tokens/2
    t_ar   = 2 * layers * N * hidden * 2 B / allreduce_bw   (ring or NVLS; 0 below the small-message size)
    t_ag   = N * vocab * 2 B * (TP-1)/TP / (0.78 * NVLink)  (logits all-gather)
    T      = t_fix + max(t_mem, t_cmp) + t_ar + t_ag + drafter_ms
             (max: server.roofline_k = 0; else the k-norm (t_mem^k + t_cmp^k)^(1/k), generic profile;
             with server.attention_apart, the generic profile's, the cache's bytes and the attention's
             FLOPs take a roofline of their own, added to that of the weights and the matmuls)
    t_fix  = t_fix_ms + layers * t_fix_per_layer_us   (0 per layer in the calibrated profiles)

``pad`` is the fused-MoE kernel's row padding: SGLang's ``fused_moe`` sorts the tokens by expert
and pads each expert's rows to a multiple of ``BLOCK_SIZE_M`` (``moe_align_block_size``), so every
expert a step touches computes on average half a block of zero rows. It is what makes a verify
pass of C=128 cheaper per token than one of C=64: the padding is a fixed cost once every expert is
touched, while the useful rows grow with C (the seed's +18 % from C=64 to C=128 needs it).

A prefill step is the same forward over the new prompt tokens (its attention sees each token's
prefix) plus ``t_fix_prefill``. Power per GPU is ``idle + P_hbm*u_bw + P_tc*u_tc + P_nvl*u_nvl``
capped at the board limit, with the utilisations the step's bytes, FLOPs and collective time imply.
The equations and constants come from the calibration study (reference/simulator-calibration.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.sim.parallel import (
    A2A_LATENCY_US,
    alltoall_gb_s,
    ep_imbalance,
    folds_small_collectives,
    layout_of,
    link_gb_s,
    ring_latency_share,
)
from loadgen.sim.profile import Profile
from loadgen.sim.quant import math_of, peak_tflops


def roofline(t_mem: float, t_cmp: float, k: float) -> float:
    """A stage's time from its memory and compute times: the larger (``k`` 0), or their ``k``-norm,
    which is above the larger where the two are close (kernels that overlap them only in part)."""
    if k <= 0:
        return max(t_mem, t_cmp)
    top = max(t_mem, t_cmp)
    if top <= 0:
        return 0.0
    blended: float = top * ((t_mem / top) ** k + (t_cmp / top) ** k) ** (1.0 / k)
    return blended


@dataclass(frozen=True, slots=True)
class StepCost:
    """Duration of one engine step and the per-GPU utilisations it implies (shares of peak)."""

    duration_s: float
    u_bw: float
    u_tc: float
    u_nvl: float
    power_w: float


class StepModel:
    """Pure functions of a profile: step durations and power."""

    def __init__(self, profile: Profile) -> None:
        self.p = profile
        hw, m, s, sp = profile.hardware, profile.model, profile.server, profile.spec
        self.layout = layout_of(profile)
        lay = self.layout
        self.tp, self.pp = lay.tp, lay.pp
        self.bw = hw.hbm_bw_tb_s * 1e12
        self.flops = peak_tflops(hw, "bf16", 1.0) * 1e12
        nvls = s.nvls and hw.allreduce_nvls_gb_s > 0
        self.ar_bw = (hw.allreduce_nvls_gb_s if nvls else hw.allreduce_ring_gb_s) * 1e9
        self.link_bw = link_gb_s(hw) * 1e9
        self.a2a_bw = alltoall_gb_s(hw) * 1e9
        self.fold = folds_small_collectives(hw)
        self.latency = hw.collective_latency_us / 1e6
        self.a2a_latency = self.latency if self.latency > 0 else A2A_LATENCY_US / 1e6
        self.t_fix = s.t_fix_ms / 1e3 + m.layers * s.t_fix_per_layer_us / 1e6
        self.t_fix_prefill = s.t_fix_prefill_ms / 1e3
        self.drafter_s = sp.drafter_ms / 1e3 if sp.enabled else 0.0
        # KV per GPU: a GQA cache splits by heads over the stage; an MLA cache is whole on every
        # attention-TP rank, so only DP attention splits it (by requests)
        self.kv_div = lay.dp if m.kv_replicated else lay.tp
        self.drafter_bytes = sp.drafter_bytes if sp.enabled else 0.0
        self.miss = 1.0 - m.experts_active / m.experts if m.experts > 0 else 1.0
        # DP attention replicates the attention weights over the DP ranks: read per GPU / (tp/dp)
        attn_bytes = m.attention_params * m.linear_bits / 8.0
        self.attn_extra_bytes = attn_bytes * (1.0 / lay.attn_tp - 1.0 / lay.tp)
        # FLOPs per token by the peak they run at (sim/quant.py): the linear layers and the routed
        # experts in their formats, the rest (lm_head, routers, biases) and attention in BF16
        wo = s.weight_only_eff
        self.peak_lin = peak_tflops(hw, math_of(m.linear_format), wo) * 1e12
        self.peak_exp = peak_tflops(hw, math_of(m.expert_format), wo) * 1e12
        self.flops_lin = 2.0 * m.linear_params
        self.flops_exp = 2.0 * m.moe_layers * m.experts_active * m.expert_params
        self.flops_rest = max(0.0, 2.0 * m.active_params - self.flops_lin - self.flops_exp)

    # -- step durations -------------------------------------------------------------------------

    def _experts_touched(self, n_eff: float) -> float:
        """Routed experts per MoE layer that ``n_eff`` independently routed tokens touch."""
        m = self.p.model
        return m.experts * (1.0 - self.miss**n_eff) if m.experts > 0 and n_eff > 0 else 0.0

    def _imbalance(self, n_tokens: float, n_eff: float) -> tuple[float, float]:
        """(routes, touched experts) on the busiest expert-parallel rank over the mean (1, 1 without EP)."""
        ep = self.layout.ep
        if ep <= 1:
            return 1.0, 1.0
        m = self.p.model
        touched = self._experts_touched(n_eff)
        per_rank_cap = m.experts / ep / max(touched / ep, 1e-9)
        return (
            ep_imbalance(n_tokens * m.experts_active, ep),
            min(per_rank_cap, ep_imbalance(touched, ep)),
        )

    def _weights_read(self, n_eff: float, touched_imb: float = 1.0) -> float:
        """Weight bytes one GPU reads for a forward of the whole model (divide by ``pp`` for a stage)."""
        m = self.p.model
        moe = m.moe_layers * self._experts_touched(n_eff) * m.expert_bytes * touched_imb
        return (m.streamed_dense_bytes + moe + self.drafter_bytes) / self.tp + self.attn_extra_bytes

    def _moe_pad_flops(self, n_eff: float, touched_imb: float = 1.0) -> float:
        """FLOPs per GPU spent on the fused-MoE kernel's padding rows (module docstring)."""
        m = self.p.model
        expert_params = 3.0 * m.hidden * m.moe_intermediate
        rows = self._experts_touched(n_eff) * touched_imb * self.p.server.moe_block_tokens / 2.0
        return 2.0 * expert_params * m.moe_layers * rows / self.tp

    def _all_reduce(self, msg: float, ranks: int) -> float:
        """Seconds of one all-reduce of ``msg`` bytes over ``ranks`` GPUs of the stage (parallel.py:
        latency folding, and a ring's latency by its steps)."""
        if self.fold:
            latency = self.p.server.allreduce_latency_us / 1e6
            if latency > 0:
                return latency + msg / self.ar_bw  # one-shot kernels: one exchange at any rank count
            return msg / self.ar_bw if msg >= self.p.server.small_allreduce_bytes else 0.0
        return self.latency * ring_latency_share(ranks) + msg / self.ar_bw

    def _collectives(self, n_tokens: float) -> tuple[float, float]:
        """Collective seconds of one stage forward over ``n_tokens`` tokens (its ``L/pp`` layers), and
        the logits all-gather of the last stage."""
        lay, m = self.layout, self.p.model
        if lay.tp <= 1 and lay.pp <= 1:
            return 0.0, 0.0
        layers, moe_layers = m.layers / lay.pp, m.moe_layers / lay.pp
        h2 = m.hidden * 2.0
        t = 0.0
        if lay.attn_tp > 1:
            t += layers * self._all_reduce(n_tokens / lay.dp * h2, lay.attn_tp)
        if lay.all_to_all:
            remote = (lay.ep - 1) / lay.ep
            a2a = n_tokens / lay.dp * m.experts_active * m.hidden * 3.0 * remote / self.a2a_bw
            dense = (layers - moe_layers) * self._all_reduce(n_tokens * h2, lay.tp)
            t += moe_layers * (2 * self.a2a_latency + a2a) + dense
        elif lay.tp > 1:
            t += layers * self._all_reduce(n_tokens * h2, lay.tp)
        if lay.pp > 1:
            t += self.latency + n_tokens * h2 / self.link_bw  # hand the hidden states to the next stage
        t_ag = n_tokens * m.vocab * 2.0 * (lay.tp - 1) / lay.tp / (0.78 * self.link_bw) if lay.tp > 1 else 0.0
        return t, t_ag

    def _tensor_seconds(self, n_tokens: float, attn_flops: float, pad_flops: float, routes_imb: float) -> float:
        """Seconds per GPU the whole model's matmuls take at peak, each class at its own (before eta_c)."""
        lin = self.flops_lin * n_tokens / self.tp / self.peak_lin
        exp = (self.flops_exp * n_tokens * routes_imb / self.tp + pad_flops) / self.peak_exp
        return lin + exp + (self.flops_rest * n_tokens + attn_flops) / self.tp / self.flops

    def _step(
        self, n_tokens: float, n_eff: float, attn_flops: float, kv_bytes: float, batches: int, prefill: bool
    ) -> StepCost:
        """A step of ``batches`` micro-batches, each crossing the ``pp`` stages (parallel.py);
        figures are per micro-batch and whole-model, a stage does ``1/pp`` of them."""
        s, pp = self.p.server, self.pp
        routes_imb, touched_imb = self._imbalance(n_tokens, n_eff)
        w = self._weights_read(n_eff, touched_imb) / pp
        kv = kv_bytes / pp
        t_w, t_kv = w / (s.eta_bw * self.bw), kv / (s.eta_attn * self.bw)
        tensor_s = self._tensor_seconds(n_tokens, attn_flops, self._moe_pad_flops(n_eff, touched_imb), routes_imb) / pp
        t_fix = (self.t_fix + (self.t_fix_prefill if prefill else 0.0)) / pp
        comm, t_ag = self._collectives(n_tokens)
        if s.attention_apart:
            attn_s = attn_flops / self.tp / self.flops / pp
            stage = (
                t_fix
                + roofline(t_w, (tensor_s - attn_s) / s.eta_c, s.roofline_k)
                + roofline(t_kv, attn_s / s.eta_c, s.roofline_k)
            )
        else:
            stage = t_fix + roofline(t_w + t_kv, tensor_s / s.eta_c, s.roofline_k)
        duration = pp * (stage + comm) + t_ag + self.drafter_s
        # a stage is busy for each of the micro-batches it sees
        u_bw = min(1.0, batches * (w + kv) / duration / self.bw)
        u_tc = min(1.0, batches * tensor_s / duration)
        u_nvl = min(1.0, (batches * comm + t_ag) / duration)
        return StepCost(duration, u_bw, u_tc, u_nvl, self.power_w(u_bw, u_tc, u_nvl))

    def decode(self, n_reqs: int, ctx_sum: float) -> StepCost:
        """One decode step (a draft+verify cycle with speculative decoding) of ``n_reqs`` requests
        whose KV lengths sum to ``ctx_sum`` tokens: every one advances; under pipeline parallelism
        as ``min(pp, n_reqs)`` micro-batches."""
        m = self.p.model
        n_v = self.p.verify_width
        batches = max(1, min(self.pp, n_reqs))
        reqs = n_reqs / batches
        ctx = ctx_sum / batches
        n_eff = reqs * (n_v**self.p.spec.beta if n_v > 1 else 1.0)
        return self._step(
            reqs * n_v,
            n_eff,
            m.attn_flops_per_ctx * m.layers * n_v * ctx,
            ctx * m.kv_bytes_per_token / self.kv_div,
            batches,
            prefill=False,
        )

    def prefill(self, n_tokens: int, attn_pairs: float, requests: int = 1) -> StepCost:
        """One prefill step over ``n_tokens`` new prompt tokens; ``attn_pairs`` is the number of
        (query token, context token) pairs its attention computes. Under pipeline parallelism the
        work of ``requests`` requests with prompt tokens to prefill (this batch's and those waiting)
        fills ``min(pp, requests)`` micro-batches, as a decode step's requests do (parallel.py,
        ``PREFILL_PIPELINED``); one request alone crosses the stages one after the other."""
        m = self.p.model
        batches = max(1, min(self.pp, requests))
        return self._step(
            n_tokens / batches,
            n_tokens / batches,
            m.attn_flops_per_ctx * m.layers * attn_pairs / batches,
            0.0,
            batches,
            prefill=True,
        )

    def mixed(self, n_reqs: int, ctx_sum: float, n_tokens: int, attn_pairs: float, prefill_reqs: int) -> StepCost:
        """One forward of vLLM's scheduler (sched_vllm.py): ``n_reqs`` decoding requests whose KV
        lengths sum to ``ctx_sum`` (as :meth:`decode`) and ``n_tokens`` prompt tokens of
        ``prefill_reqs`` requests with ``attn_pairs`` attention pairs (as :meth:`prefill`) share the
        weights' read and the fixed cost. Either part alone is exactly that method's step."""
        if n_tokens <= 0:
            return self.decode(n_reqs, ctx_sum)
        if n_reqs <= 0:
            return self.prefill(n_tokens, attn_pairs, prefill_reqs)
        m = self.p.model
        n_v = self.p.verify_width
        batches = max(1, min(self.pp, n_reqs + prefill_reqs))
        n_eff = n_reqs * (n_v**self.p.spec.beta if n_v > 1 else 1.0) + n_tokens
        return self._step(
            (n_reqs * n_v + n_tokens) / batches,
            n_eff / batches,
            m.attn_flops_per_ctx * m.layers * (n_v * ctx_sum + attn_pairs) / batches,
            ctx_sum * m.kv_bytes_per_token / self.kv_div / batches,
            batches,
            prefill=True,
        )

    # -- power ----------------------------------------------------------------------------------

    def power_w(self, u_bw: float, u_tc: float, u_nvl: float) -> float:
        hw = self.p.hardware
        p = hw.idle_w + hw.p_hbm_w * u_bw + hw.p_tc_w * u_tc + hw.p_nvl_w * u_nvl
        return min(p, hw.power_limit_w)
