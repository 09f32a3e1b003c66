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

import heapq
from dataclasses import dataclass

import numpy as np

from loadgen.sim.engine import Engine, SimRequest, natural_length
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
    """
    engine = Engine(profile, seed=seed)
    lengths = np.random.default_rng(seed)
    server = profile.server
    block = engine.cache.block_tokens if engine.cache is not None else 0
    n_blocks = prompt_tokens // block if block else 0
    n_shared = min(n_blocks, (shared_prefix_tokens or 0) // block) if block else 0
    t_end = warmup_s + window_s
    arrivals: list[tuple[float, int]] = [(i * stagger_s, i) for i in range(concurrency)]
    heapq.heapify(arrivals)
    seq = 0
    tokens_in_window = 0
    done = 0
    ttfts: list[float] = []
    e2es: list[float] = []
    running_sum = 0.0
    steps = 0
    e0 = b0 = None
    retracted0 = 0
    now = 0.0
    while True:
        nxt = engine.next_event_s
        t_arr = arrivals[0][0] if arrivals else None
        if nxt is None and t_arr is None:
            break
        if t_arr is not None and (nxt is None or t_arr <= nxt):
            now = t_arr
            if now > t_end:
                break
            while arrivals and arrivals[0][0] <= now:
                _, user = heapq.heappop(arrivals)
                target, reason = output_tokens, "length"
                if natural_lengths:
                    natural = natural_length(lengths, server.natural_len_median, server.natural_len_sigma)
                    if natural < output_tokens:
                        target, reason = natural, "stop"
                req = SimRequest(
                    rid=f"u{user}-{seq}",
                    prompt_tokens=prompt_tokens,
                    max_new_tokens=output_tokens,
                    target_tokens=target,
                    stop_reason=reason,
                    source=source,
                )
                if shared_prefix_tokens is not None and block:
                    # shared blocks are keys 1..n_shared; the request's own blocks are unique keys
                    own = (seq + 1) << 24
                    req.block_hashes = [i + 1 if i < n_shared else own + i for i in range(n_blocks)]
                seq += 1
                req.context = user
                engine.submit(req, now)
            if not engine.busy:
                engine.advance(now)
            continue
        assert nxt is not None
        now = nxt
        if now > t_end:
            break
        if e0 is None and now >= warmup_s:
            e0 = engine.energy_at(warmup_s)
            b0 = engine.totals_at(warmup_s)[1]
            retracted0 = engine.counters.retracted_reqs
        emissions = engine.advance(now)
        in_window = now >= warmup_s
        if in_window:
            running_sum += len(engine.running)
            steps += 1
        for em in emissions:
            if in_window:
                tokens_in_window += em.tokens
            if em.finished:
                req = em.req
                if in_window:
                    done += 1
                    ttfts.append(req.first_token_s - req.arrival_s)
                    e2es.append(req.finish_s - req.arrival_s)
                heapq.heappush(arrivals, (now + client_gap_s, int(req.context)))  # type: ignore[call-overload]
    end = min(now, t_end)
    span = max(1e-9, end - warmup_s)
    if e0 is None or b0 is None:
        e0, b0 = 0.0, 0.0
    e1, b1 = engine.totals_at(end)
    return LoopResult(
        concurrency=concurrency,
        window_s=span,
        output_tok_s=tokens_in_window / span,
        requests_done=done,
        power_w=(e1 - e0) / span,
        busy_share=(b1 - b0) / span,
        mean_ttft_s=sum(ttfts) / len(ttfts) if ttfts else 0.0,
        mean_e2e_s=sum(e2es) / len(e2es) if e2es else 0.0,
        retracted=engine.counters.retracted_reqs - retracted0,
        mean_running=running_sum / steps if steps else 0.0,
        cache_hit_rate=engine.counters.cached_tokens / max(1, engine.counters.prefix_queries),
    )
