"""The requests a fleet serves: a public trace played at its own times, scaled, looped and bent to a
day's shape, or a steady Poisson stream.

A trace (``loadgen.workload.datasets``: Azure 2023/2024, BurstGPT, Mooncake) gives each request's time,
prompt and output tokens, and Mooncake also its prefix blocks (``hash_ids``, 512 tokens each: equal ids
are a shareable prefix). Each 512-token block becomes the engine's ``block_tokens`` blocks, keyed so
that equal Mooncake ids give equal keys; a trace without ids gives prompts with no blocks (the prefix
cache sees nothing, as the trace tells nothing of what its prompts share).

Time: ``scale`` multiplies the trace's rate (its gaps divided by it). A day shape is 24 relative rates,
one an hour, normalised to a mean of 1: the trace's clock runs ``shape[h]`` times as fast in hour ``h``
of the played day, so the day keeps the trace's bursts and mix and averages its rate times ``scale``.
Past its end the trace starts again (a one-hour trace plays a day as 24 loops of itself at the
day's pace); ``duration_s`` ends the play.

``diurnal`` (ASSUMPTION, no published hourly curve of these services is shipped): a cosine with its peak
at 14:00 and its trough at 02:00, peak four times the trough (1 ± 0.6), the shape of a service used
in its users' working day.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.workload.datasets import MOONCAKE_BLOCK_TOKENS, Trace

DIURNAL = tuple(1.0 + 0.6 * math.cos(2 * math.pi * (h + 0.5 - 14.0) / 24.0) for h in range(24))
SHAPES = {"flat": (1.0,) * 24, "diurnal": DIURNAL}


@dataclass(frozen=True, slots=True)
class FleetRequest:
    """One request a fleet serves: when it arrives (s on the fleet's clock), its lengths, its prompt's
    chained block keys (empty: none) and its session (None: none)."""

    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    blocks: tuple[int, ...] = ()
    session: str | None = None


_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(s|m|h|d)?\s*$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(text: str, flag: str) -> float:
    """``300``, ``300s``, ``5m``, ``1h``, ``1d`` -> seconds; ValueError naming the flag."""
    m = _DURATION.match(text)
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"{flag} {text!r}: give a positive duration such as 300s, 5m, 1h or 1d")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def parse_shape(text: str) -> tuple[float, ...]:
    """A day shape: ``flat``, ``diurnal`` or 24 comma-separated relative rates (any unit, >= 0, not all
    0), normalised to a mean of 1. ValueError naming what is wrong."""
    t = text.strip()
    if t in SHAPES:
        raw: Sequence[float] = SHAPES[t]
    else:
        parts = [p for p in t.split(",") if p.strip()]
        if len(parts) != 24:
            raise ValueError(
                f"day shape {text!r}: give flat, diurnal or 24 comma-separated relative rates (one an hour), "
                f"not {len(parts)}"
            )
        try:
            raw = [float(p) for p in parts]
        except ValueError:
            raise ValueError(f"day shape {text!r}: every hour's rate must be a number") from None
        if any(not (v >= 0 and math.isfinite(v)) for v in raw) or not any(raw):
            raise ValueError(f"day shape {text!r}: rates must be >= 0 and not all 0")
    mean = sum(raw) / len(raw)
    return tuple(v / mean for v in raw)


def _blocks_of(
    hash_ids: tuple[int, ...] | None, prompt_tokens: int, block_tokens: int, shift: Callable[[int], int]
) -> tuple[int, ...]:
    """A Mooncake prompt's engine blocks: each 512-token id (as ``shift`` names it in this loop) split
    into ``block_tokens`` blocks, keyed ``id * per + j + 1`` (equal ids, equal keys), up to the
    prompt's last full block."""
    if not hash_ids or block_tokens <= 0:
        return ()
    per = max(1, MOONCAKE_BLOCK_TOKENS // block_tokens)
    n = prompt_tokens // block_tokens
    out: list[int] = []
    for h in hash_ids:
        base = shift(h) * per + 1
        for j in range(per):
            if len(out) >= n:
                return tuple(out)
            out.append(base + j)
    return tuple(out)


def _warp(shape: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """(day time at each hour's start, trace time at each hour's start): the trace's clock runs
    ``shape[h]`` times as fast in hour ``h``."""
    day = np.arange(25, dtype=float) * 3600.0
    trace = np.concatenate([[0.0], np.cumsum(np.asarray(shape, dtype=float) * 3600.0)])
    return day, trace


def from_trace(
    trace: Trace,
    *,
    scale: float = 1.0,
    shape: Sequence[float] | None = None,
    duration_s: float | None = None,
    block_tokens: int = 64,
    max_requests: int | None = None,
) -> Iterator[FleetRequest]:
    """The trace's requests on the fleet's clock (module docstring), in arrival order, lazily.

    Without a shape and a duration the trace plays once; with either it loops until ``duration_s``
    (a shape without a duration plays one day)."""
    if scale <= 0:
        raise ValueError(f"scale {scale}: must be > 0")
    rows = trace.rows
    if not rows:
        return
    looping = shape is not None or duration_s is not None
    if shape is not None and duration_s is None:
        duration_s = 24 * 3600.0
    # one loop of the trace lasts its span plus one mean gap (so the loops do not overlap)
    span = rows[-1].offset_s
    period = span + (span / (len(rows) - 1) if len(rows) > 1 else 1.0)
    if period <= 0:
        period = 1.0
    day = trace_at = None
    if shape is not None:
        if len(shape) != 24 or not sum(shape) > 0:
            raise ValueError(f"a day shape has 24 hourly rates, not all 0; got {len(shape)}")
        mean = sum(shape) / len(shape)
        day, trace_at = _warp([v / mean for v in shape])
    # a looped trace repeats its shared prefixes (an id in several requests: a system prompt, a
    # conversation's history) but not its one-off prompts: those are renamed in every loop
    uses: dict[int, int] = {}
    for row in rows:
        for h in row.hash_ids or ():
            uses[h] = uses.get(h, 0) + 1
    stride = max(uses, default=0) + 1
    loop = 0
    sent = 0
    while True:

        def shift(h: int, loop: int = loop) -> int:
            return h if uses.get(h, 0) > 1 else h + loop * stride

        for row in rows:
            tau = (loop * period + row.offset_s) / scale  # trace seconds at the played rate
            if day is not None and trace_at is not None:
                days, within = divmod(tau, float(trace_at[-1]))
                t = days * 86400.0 + float(np.interp(within, trace_at, day))
            else:
                t = tau
            if duration_s is not None and t >= duration_s:
                return
            blocks = _blocks_of(row.hash_ids, row.input_tokens, block_tokens, shift)
            yield FleetRequest(t, max(1, row.input_tokens), max(1, row.output_tokens), blocks)
            sent += 1
            if max_requests is not None and sent >= max_requests:
                return
        if not looping:
            return
        loop += 1


def poisson(
    rate: float, duration_s: float, input_tokens: int, output_tokens: int, *, seed: int = 0
) -> Iterator[FleetRequest]:
    """Poisson arrivals at ``rate`` per second for ``duration_s``, every request the same lengths."""
    if rate <= 0:
        raise ValueError(f"rate {rate}: must be > 0")
    rng = np.random.default_rng(seed)
    t = 0.0
    while True:
        t += float(rng.exponential(1.0 / rate))
        if t >= duration_s:
            return
        yield FleetRequest(t, input_tokens, output_tokens)


def draw_tie_order(requests: Iterable[FleetRequest], seed: int) -> Iterator[FleetRequest]:
    """``requests`` (in arrival order) with each run of equal arrival times in an order drawn with
    ``seed``; times and everything else unchanged. A trace written on a coarse clock (Mooncake's on a
    3-s grid, BurstGPT's in whole seconds) gives many requests one time: which of them reached the
    router first is not in the trace, and where prefixes, queues and tie-breaks depend on it the
    figures do too (a drawn order per run; ``loadgen fleet --orders`` shows how far they move). Holds
    one run of equal times at once."""
    rng = np.random.default_rng(seed)
    group: list[FleetRequest] = []
    for fr in requests:
        if group and fr.arrival_s != group[0].arrival_s:
            yield from _drawn(group, rng)
            group = []
        group.append(fr)
    yield from _drawn(group, rng)


def _drawn(group: list[FleetRequest], rng: np.random.Generator) -> list[FleetRequest]:
    if len(group) < 2:
        return group
    return [group[i] for i in rng.permutation(len(group))]


def _output_tokens(body: dict[str, Any], default: int) -> int:
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        v = body.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return default


def from_workload(
    path: str | Path, *, chars_per_token: float = 4.0, block_tokens: int = 64, default_output_tokens: int = 512
) -> Iterator[FleetRequest]:
    """An open-loop workload file's requests (``loadgen workload export --rate`` or ``import``) at
    their intended times, step after step (each step ``warmup_s + duration_s`` long, or as long as
    its last line). Each body's prompt is measured as the simulator measures it (characters over
    ``chars_per_token``, 4 a chat message) and cut into chained block hashes as its prefix cache does;
    a redacted file's texts are the replay's stand-ins (the same lengths and sharing). A turn that
    continues a conversation (``cont``) carries the conversation's earlier messages and, for each
    answer, text of its ``max_tokens``; its session is the conversation. Output: the body's
    ``max_tokens`` (else ``default_output_tokens``). WorkloadFileError for a closed-loop file (its
    users wait on answers: there are no times to play)."""
    from loadgen.sim.params import BadRequest, body_prompt_tokens
    from loadgen.sim.text import prompt_block_hashes
    from loadgen.workload.corpus import _prose_text
    from loadgen.workload.wfile import BlockText, WorkloadFileError, open_workload, unredact_body

    wf = open_workload(path, hashing=False)
    h = wf.header
    if h.mode != "open":
        raise WorkloadFileError(
            wf.path,
            1,
            "a closed-loop file: its users send when their answers come, so it has no times to play on a "
            "fleet; export it with --rate (open loop) or play a trace",
        )
    filler = BlockText(_prose_text()) if h.redacted else None
    chat = h.endpoint in ("chat", "responses")
    history: dict[str, list[dict[str, Any]]] = {}
    t0 = 0.0
    for step, d in enumerate(h.steps):
        last = 0.0
        for line in wf.lines(step):
            body = line.get("body") or {}
            if filler is not None:
                body = unredact_body(body, filler)
            out = _output_tokens(body, default_output_tokens)
            conv = line.get("conversation")
            session = str(conv) if conv is not None else None
            if chat and session is not None and isinstance(body.get("messages"), list):
                earlier = history.get(session, []) if line.get("cont") else []
                messages = earlier + list(body["messages"])
                body = {**body, "messages": messages}
                history[session] = [*messages, {"role": "assistant", "content": "x" * int(out * chars_per_token)}]
            try:
                prompt = body_prompt_tokens(body, chat, chars_per_token)
            except BadRequest as exc:
                raise WorkloadFileError(
                    wf.path, None, f"step {step}, request at {line.get('at_s')} s: {exc.message} (a server refuses it)"
                ) from None
            blocks = tuple(prompt_block_hashes(body, chat, chars_per_token, block_tokens))
            last = float(line["at_s"])
            yield FleetRequest(t0 + last, prompt, out, blocks, session)
        span = float(d.get("warmup_s") or 0.0) + float(d.get("duration_s") or 0.0)
        t0 += max(span, last)
