"""A sequence inside the simulated engine, and what one step of it commits (engine.py and its schedulers,
sched_sglang.py and sched_vllm.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loadgen.sim.model import StepCost
from loadgen.sim.prefix import Block

WAITING, RUNNING, FINISHED, ABORTED = 0, 1, 2, 3

LogFn = Callable[[str], None]


class RejectError(Exception):
    """A request refused at submission: ``status`` is the HTTP status, ``message`` the server's text."""

    def __init__(self, status: int, message: str, err_type: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type


@dataclass(eq=False, slots=True)
class SimRequest:
    """One request inside the engine. Times are on the engine's clock, in seconds."""

    rid: str
    prompt_tokens: int
    max_new_tokens: int  # what the request allows (scheduler reservations use this)
    target_tokens: int  # when it will stop (the server knows; the scheduler does not use it)
    stop_reason: str  # "length" or "stop", reported when target_tokens is reached
    source: str = "default"
    arrival_s: float = 0.0
    generated: int = 0
    prefilled: int = 0  # tokens of (prompt + output so far) already in the KV cache
    kv_tokens: int = 0
    state: int = WAITING
    first_token_s: float = -1.0
    last_token_s: float = -1.0
    finish_s: float = -1.0
    queue_end_s: float = -1.0
    retractions: int = 0
    verify_ct: int = 0
    finish_reason: str = ""
    abort_message: str = ""
    context: object = None  # the server's per-request state
    block_hashes: list[int] = field(default_factory=list)  # chained prompt block hashes (prefix cache)
    cached_tokens: int = 0  # prompt tokens found in the prefix cache at first scheduling (usage)
    locked: list[Block] = field(default_factory=list)  # cached blocks this request holds
    # (n output tokens) -> chained hashes of every full block of the prompt continued by its first n
    # output tokens (loadgen.sim.continuation); None: the output is not cached when the request ends
    continued_block_hashes: Callable[[int], list[int]] | None = None
    prefill_only: bool = False  # a pooling sequence (embeddings, rerank): done when its prefill ends
    priority: int = 0  # the body's priority (used under scheduling_policy = "priority")

    @property
    def recompute_len(self) -> int:
        return self.prompt_tokens + self.generated


@dataclass(slots=True)
class Emission:
    """Tokens a request committed in one step. ``finished`` marks the request's last emission."""

    req: SimRequest
    tokens: int
    finished: bool


@dataclass(slots=True)
class Step:
    kind: str  # "prefill", "decode" or "mixed" (vLLM: prefill chunks and decodes in one forward)
    start_s: float
    end_s: float
    cost: StepCost
    reqs: list[SimRequest]
    chunks: list[int] = field(default_factory=list)  # prefill: tokens per request
    # a coalesced run of decode steps (Engine.coalesce): each step's end and the energy (J per GPU)
    # spent by then, numpy arrays; None for a single step
    ends: Any = None
    energy: Any = None
    commits: Any = None  # speculative decoding: tokens each request has committed by each step's end
