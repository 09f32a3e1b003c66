"""Step durations given rather than modelled: a profile's ``[timing]`` table (demos, tests, a twin
calibrated from a run) in place of :class:`~loadgen.sim.model.StepModel`'s model of the hardware.

:class:`FixedStepModel` has the step model's interface (``decode``, ``prefill``, ``mixed``, each a
:class:`~loadgen.sim.model.StepCost`, durations in seconds). A decode step takes ``itl_ms`` growing
with the batch (or the ``decode_ms_by_batch`` table, piecewise linear) plus a cost per 1,000 tokens
of context; a prefill takes ``ttft_ms`` plus a cost per 1,000 prompt tokens, never under
``ttft_floor_ms``; a mixed step (vLLM's) the sum of both parts, or the longer one with
``prefill_holds_decode``. Every step draws the timing's ``power_busy_w``, capped at the hardware's
power limit.
"""

from __future__ import annotations

from bisect import bisect_left

from loadgen.sim.model import StepCost, StepModel
from loadgen.sim.profile import FixedTiming


class FixedStepModel:
    """Step durations from :class:`FixedTiming` (TTFT and per-step time given), same interface."""

    def __init__(self, timing: FixedTiming, real: StepModel) -> None:
        self.t = timing
        self.real = real
        self._batch, self._step_ms = timing.decode_points()

    def decode(self, n_reqs: int, ctx_sum: float) -> StepCost:
        kv_ms = self.t.decode_ms_per_1k_ctx * ctx_sum / 1000.0
        if self._batch:
            return self._cost((self._table_ms(float(n_reqs)) + kv_ms) / 1e3)
        d = (self.t.itl_ms * (1.0 + self.t.itl_growth * max(0, n_reqs - 1)) + kv_ms) / 1e3
        return self._cost(d)

    def _table_ms(self, n: float) -> float:
        xs, ys = self._batch, self._step_ms
        i = min(max(bisect_left(xs, n), 1), len(xs) - 1)  # segment [i-1, i]; the end ones extend
        slope = (ys[i] - ys[i - 1]) / (xs[i] - xs[i - 1])
        return max(ys[i - 1] + slope * (n - xs[i - 1]), 1e-3)

    def prefill(self, n_tokens: int, attn_pairs: float, requests: int = 1) -> StepCost:
        d = max(self.t.ttft_floor_ms, self.t.ttft_ms + self.t.ttft_per_1k_ms * n_tokens / 1000.0) / 1e3
        return self._cost(d)

    def mixed(self, n_reqs: int, ctx_sum: float, n_tokens: int, attn_pairs: float, prefill_reqs: int) -> StepCost:
        # ASSUMPTION: a given timing has no shared forward, so a mixed step costs both of its parts,
        # unless its prefill time was measured with the decodes beside it (a twin of a vLLM run)
        if n_tokens <= 0:
            return self.decode(n_reqs, ctx_sum)
        if n_reqs <= 0:
            return self.prefill(n_tokens, attn_pairs, prefill_reqs)
        dec = self.decode(n_reqs, ctx_sum).duration_s
        pre = self.prefill(n_tokens, attn_pairs, prefill_reqs).duration_s
        return self._cost(max(dec, pre) if self.t.prefill_holds_decode else dec + pre)

    def _cost(self, d: float) -> StepCost:
        hw = self.real.p.hardware
        busy = min(self.t.power_busy_w, hw.power_limit_w)
        share = (busy - hw.idle_w) / max(1.0, hw.power_limit_w - hw.idle_w)
        return StepCost(d, share, share, 0.0, busy)
