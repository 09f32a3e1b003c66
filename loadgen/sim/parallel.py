"""How a deployment spreads a model over its GPUs: tensor, pipeline, expert and attention-data
parallelism, and what each costs on the interconnect.

SGLang's layout (its flags: ``--tp``, ``--pp-size``, ``--ep-size``, ``--enable-dp-attention
--dp-size``), as ``server.tp``, ``server.pp``, ``server.ep`` and ``server.dp_attention``:

* ``tp`` GPUs form one pipeline stage; ``pp`` stages each hold ``L/pp`` layers: ``tp * pp`` GPUs.
* ``ep`` (dividing ``tp``) splits the routed experts of each MoE layer over ``ep`` groups of the
  stage's GPUs, each expert sharded ``tp/ep`` ways by width (``ep = tp``: whole experts).
* ``dp_attention`` (dividing ``tp``) runs attention data-parallel: ``dp`` ranks of ``tp/dp`` GPUs,
  each with its own requests and KV cache (an MLA cache, replicated across attention TP ranks, is
  then split ``dp`` ways), the attention weights replicated ``dp`` times.

Per stage forward of ``n`` tokens (``n/dp`` a DP rank), per GPU, on top of the step model's terms:

    attention all-reduce  per layer, n/dp tokens x hidden x 2 B over tp/dp GPUs   (when tp/dp > 1)
    MLP / MoE             per layer, all-reduce of n x hidden x 2 B over tp GPUs  (TP, EP without
                          DP attention: tokens replicated, each rank its experts, partial sums
                          reduced; DP attention without EP: gather and scatter, the same bytes)
                          or, EP with DP attention, all-to-all per MoE layer: dispatch n/dp x k x
                          hidden x 1 B (FP8) and combine x 2 B, (ep-1)/ep of it leaving the GPU
    pipeline send         n x hidden x 2 B to the next stage over the link
    expert imbalance      with EP the step waits for the busiest rank: routes and touched experts
                          on it are the mean times ``ep_imbalance`` (below)

A collective costs ``latency + bytes / bandwidth``. NVLink and xGMI entries fold the latency of an
all-reduce below ``server.small_allreduce_bytes`` into ``server.t_fix_ms`` (custom one-shot
all-reduce kernels, calibrated with it); PCIe has no such kernel and pays
``hardware.collective_latency_us`` on every one: the entry's figure is an all-reduce over 8 GPUs,
and a ring over ``n`` takes ``2(n-1)`` steps to 8's 14 (``ring_latency_share``), so DP attention's
all-reduce over 2 GPUs pays 1/7 of it. The all-reduce bandwidth is the entry's measured
ring (or NVLS) algorithm bandwidth; all-to-all ``hardware.alltoall_gb_s`` (0: 0.8 x the link).

Pipeline parallelism in the engine: a decode step advances every running request one token. With
``m = min(pp, n)`` micro-batches in flight each crosses the ``pp`` stages in turn, so a step lasts
``pp`` stage forwards of ``n/m`` requests; with fewer requests than stages, stages idle (the bubble)
and their utilisation (power) is ``m/pp``. A prefill step does the same with the requests that have
prompt tokens to prefill (``PREFILL_PIPELINED``): with a queue the stages work on different
requests' chunks at once; one request alone crosses them one after the other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loadgen.sim.profile import Hardware, Profile
from loadgen.sim.shapes import ProfileError

A2A_LATENCY_US = 20.0
"""ASSUMPTION: fixed cost of one intra-node all-to-all (dispatch or combine) on NVLink/xGMI, where the
entry gives no ``collective_latency_us``: DeepEP-class kernels for a decode batch take tens of µs."""

PREFILL_PIPELINED = (
    "ASSUMPTION: under pipeline parallelism a prefill step's tokens split evenly into min(pp, requests with prompt "
    "tokens to prefill) micro-batches in flight at once (SGLang's and TensorRT-LLM's PP keep several requests' "
    "chunks in the pipeline); one request's prompt is not split across micro-batches."
)
UNIFORM_ROUTING = (
    "ASSUMPTION: the router spreads tokens uniformly over experts; expert-parallel imbalance is only the "
    "statistics of the draw. Real routers are skewed (why EPLB exists), so EP figures are optimistic."
)
DP_BALANCED = "ASSUMPTION: requests are spread evenly over DP-attention ranks (SGLang's round robin)."


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    ep: int
    dp: int

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def attn_tp(self) -> int:
        return self.tp // self.dp

    @property
    def moe_tp(self) -> int:
        return self.tp // self.ep

    @property
    def all_to_all(self) -> bool:
        """EP with DP attention dispatches tokens to experts (DeepEP); otherwise tokens stay put."""
        return self.ep > 1 and self.dp > 1

    def describe(self) -> str:
        parts = [f"TP{self.tp}"]
        if self.pp > 1:
            parts.append(f"PP{self.pp}")
        if self.ep > 1:
            parts.append(f"EP{self.ep}")
        if self.dp > 1:
            parts.append(f"DP-attention {self.dp}")
        return " ".join(parts)


def layout_of(profile: Profile) -> Layout:
    """The profile's layout; ProfileError naming the field when it cannot be built."""
    s, m = profile.server, profile.model
    tp, pp, ep, dp = max(1, s.tp), max(1, s.pp), max(1, s.ep), max(1, s.dp_attention)
    if tp % ep:
        raise ProfileError(f"server.ep {ep} must divide server.tp {tp}: expert groups are formed within a stage")
    if tp % dp:
        raise ProfileError(f"server.dp_attention {dp} must divide server.tp {tp}: DP ranks are formed within a stage")
    if ep > 1 and m.experts == 0:
        raise ProfileError(f"server.ep {ep}: model {m.name!r} has no routed experts; leave server.ep at 1")
    if ep > 1 and m.experts % ep:
        raise ProfileError(f"server.ep {ep} must divide the model's {m.experts} routed experts")
    if pp > m.layers:
        raise ProfileError(f"server.pp {pp} exceeds the model's {m.layers} layers")
    return Layout(tp, pp, ep, dp)


def ep_imbalance(routes: float, ep: int) -> float:
    """Busiest expert-parallel rank's share over the mean, for ``routes`` token-to-expert routes
    spread over ``ep`` ranks (``UNIFORM_ROUTING``): the expected maximum of ``ep`` near-binomial
    counts, mean + sqrt(2 ln(ep) var), at least one whole route, at most all of them on one rank."""
    if ep <= 1 or routes <= 0:
        return 1.0
    mean = routes / ep
    var = routes * (1.0 / ep) * (1.0 - 1.0 / ep)
    at_least = math.ceil(routes / ep) / mean  # the busiest rank holds a whole route at least
    return min(float(ep), max(at_least, 1.0 + math.sqrt(2.0 * math.log(ep) * var) / mean))


def ring_latency_share(ranks: int) -> float:
    """Latency of a ring all-reduce over ``ranks`` GPUs over that of 8 (the hardware entry's
    ``collective_latency_us``): NCCL's ring takes ``2(n-1)`` steps of one hop each
    (``RING_STEPS``)."""
    return 2.0 * (max(ranks, 1) - 1) / 14.0


RING_STEPS = (
    "ASSUMPTION: a small all-reduce over PCIe costs one fixed latency per ring step, 2(n-1) steps over n GPUs; "
    "hardware.collective_latency_us is the 8-GPU figure (NCCL ring on 8 PCIe cards, nccl issue 1530)."
)


def link_gb_s(hw: Hardware) -> float:
    """GPU-to-GPU bandwidth per GPU, one direction: the scale-up link, or PCIe for PCIe parts
    (halved without peer-to-peer: through host memory)."""
    if hw.interconnect.startswith("pcie"):
        return hw.pcie_gb_s if hw.p2p else hw.pcie_gb_s / 2.0
    return hw.nvlink_uni_gb_s if hw.nvlink_uni_gb_s > 0 else hw.pcie_gb_s


def folds_small_collectives(hw: Hardware) -> bool:
    """Does the link have one-shot all-reduce kernels whose cost ``t_fix`` absorbs (NVLink, xGMI)?"""
    return hw.interconnect in ("nvlink", "xgmi")


def alltoall_gb_s(hw: Hardware) -> float:
    return hw.alltoall_gb_s if hw.alltoall_gb_s > 0 else 0.8 * link_gb_s(hw)
