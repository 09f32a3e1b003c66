"""Closed-loop load on the engine with a virtual clock: no sockets, no sleeping.

``closed_loop`` runs ``concurrency`` users, each sending the next request as soon as (plus
``client_gap_s`` after) the previous one finished, like a ramp step of a load generator. It reports
what a load generator would measure over a steady window: output tokens per second that arrived in
the window, requests completed, mean per-GPU power from the energy counter, busy share. It is how
the calibration tests and capacity what-ifs use the engine.

Prefix caching: by default the requests carry no prompt blocks, so the prefix cache sees nothing.
``shared_prefix_tokens=N`` gives every request prompt blocks whose first ``N`` tokens are the same
for all requests (a system prompt or RAG document) and the rest unique to the request;
``shared_prefix_tokens=0`` makes every prompt unique (the cache fills but never hits).
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.sim.forecast import run_point
from loadgen.sim.profile import Profile


@dataclass(frozen=True)
class LoopResult:
    concurrency: int
    window_s: float
    output_tok_s: float
    requests_done: int
    power_w: float  # mean per-GPU power over the window
    busy_share: float
    mean_ttft_s: float
    mean_e2e_s: float
    retracted: int
    mean_running: float
    cache_hit_rate: float = 0.0  # cached / queried prompt tokens over the whole run


def closed_loop(
    profile: Profile,
    concurrency: int,
    *,
    prompt_tokens: int = 1000,
    output_tokens: int = 512,
    warmup_s: float = 20.0,
    window_s: float = 60.0,
    client_gap_s: float = 0.001,
    stagger_s: float = 0.0,
    source: str = "default",
    seed: int = 0,
    shared_prefix_tokens: int | None = None,
    natural_lengths: bool = False,
) -> LoopResult:
    """Run the closed loop and measure the window ``[warmup_s, warmup_s + window_s]``.

    Every request asks for ``output_tokens`` with ``ignore_eos`` (it always runs to the limit), or
    with ``natural_lengths`` stops on its own at a log-normal length (the profile's
    ``natural_len_median``/``sigma``, drawn from ``seed``) capped at ``output_tokens``: then two seeds
    measure different windows, as two runs of a real ramp do. User ``i`` starts at ``i * stagger_s``.
    TTFT and E2E are means over the requests that ended in the window (``forecast.run_point`` runs it).
    """
    r = run_point(
        profile,
        concurrency=concurrency,
        input_tokens=prompt_tokens,
        output_tokens=output_tokens,
        warmup_s=warmup_s,
        window_s=window_s,
        client_gap_s=client_gap_s,
        stagger_s=stagger_s,
        source=source,
        seed=seed,
        shared_prefix_tokens=shared_prefix_tokens,
        natural_lengths=natural_lengths,
    )
    return LoopResult(
        concurrency=concurrency,
        window_s=r.window_s,
        output_tok_s=r.output_tok_s,
        requests_done=r.requests_done,
        power_w=r.power_w,
        busy_share=r.busy_s / r.window_s,
        mean_ttft_s=sum(r.ttft_done_s) / len(r.ttft_done_s) if r.ttft_done_s else 0.0,
        mean_e2e_s=sum(r.e2e_done_s) / len(r.e2e_done_s) if r.e2e_done_s else 0.0,
        retracted=r.retracted,
        mean_running=sum(r.running) / len(r.running) if r.running else 0.0,
        cache_hit_rate=r.cache_hit_rate,
    )
