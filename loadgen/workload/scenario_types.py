"""The scenario format as data: one frozen dataclass per TOML section, the :class:`Scenario` that
holds them, and the defaults a section or key left out takes.

These are the values :mod:`loadgen.workload.scenario` returns once a file has been read and
checked, and what :class:`~loadgen.workload.traffic.Workload` draws requests from; nothing here
reads a file or validates a value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from loadgen.spec.gates import Thresholds
from loadgen.spec.request import DEFAULT_MAX_TOKENS, Endpoint
from loadgen.workload.corpus import CORPUS_NAMES
from loadgen.workload.datasets import PromptRow, Trace
from loadgen.workload.lengths import Distribution, Fixed
from loadgen.workload.prompts import CHAT_TASKS
from loadgen.workload.tenants import TenantSpec
from loadgen.workload.tools import ToolsSpec

DEFAULT_CONTEXT_LIMIT = 32768
# Immutable defaults shared by every scenario that leaves the key out.
DEFAULT_INPUT_TOKENS: Distribution = Fixed(512)
DEFAULT_OUTPUT_TOKENS: Distribution = Fixed(DEFAULT_MAX_TOKENS)
DEFAULT_FOLLOWUP_TOKENS: Distribution = Fixed(64)
NO_THINK_TIME: Distribution = Fixed(0.0)
ONE: Distribution = Fixed(1)
DEFAULT_RERANK_DOCUMENTS: Distribution = Fixed(8)
DEFAULT_QUERY_TOKENS: Distribution = Fixed(16)
DEFAULT_DOCUMENT_TOKENS: Distribution = Fixed(128)
DEFAULT_TOOL_RESULT_TOKENS: Distribution = Fixed(256)
DEFAULT_IMAGE_SIDE: Distribution = Fixed(1024)


@dataclass(frozen=True)
class PromptSpec:
    """``[prompt]``: where prompt text comes from and how long the per-request part is."""

    source: str = "chat"
    input_tokens: Distribution = DEFAULT_INPUT_TOKENS
    tasks: tuple[str, ...] = CHAT_TASKS
    corpora: tuple[str, ...] = CORPUS_NAMES
    path: str | None = None
    dataset: tuple[PromptRow, ...] = ()
    system_prompt: str | None = None


@dataclass(frozen=True)
class OutputSpec:
    """``[output]``: ``min_tokens`` is a count, ``"max_tokens"`` (force the full length) or None."""

    max_tokens: Distribution = DEFAULT_OUTPUT_TOKENS
    from_dataset: bool = True
    ignore_eos: bool = False
    min_tokens: int | Literal["max_tokens"] | None = None


@dataclass(frozen=True)
class SharedPrefixSpec:
    """``[shared_prefix]``: ``ratio`` of requests start with one of ``pool`` shared prefixes."""

    tokens: Distribution
    ratio: float = 1.0
    pool: int = 1
    kind: Literal["system", "document"] = "document"
    source: str = "prose"


@dataclass(frozen=True)
class ConversationSpec:
    """``[conversation]``: multi-turn sessions (closed loop only). ``responses_state`` (Responses
    API): ``"previous_response_id"`` chains each turn to the stored reply and sends only the new
    turn, ``"resend"`` sends the whole history (the only way for the other endpoints)."""

    turns: Distribution
    think_time_s: Distribution = NO_THINK_TIME
    followup_tokens: Distribution = DEFAULT_FOLLOWUP_TOKENS
    responses_state: Literal["previous_response_id", "resend"] = "resend"


@dataclass(frozen=True)
class EmbeddingsSpec:
    """``[embeddings]``: ``batch`` inputs a request, each of ``input_tokens`` (None: the prompt's)."""

    batch: Distribution = ONE
    input_tokens: Distribution | None = None


@dataclass(frozen=True)
class RerankSpec:
    """``[rerank]``: a query of ``query_tokens`` and ``documents`` documents of ``document_tokens``."""

    documents: Distribution = DEFAULT_RERANK_DOCUMENTS
    query_tokens: Distribution = DEFAULT_QUERY_TOKENS
    document_tokens: Distribution = DEFAULT_DOCUMENT_TOKENS


@dataclass(frozen=True)
class AgentSpec:
    """``[agent]``: tool-calling tasks (closed loop). A task runs until a reply calls no tool, a
    request fails or ``max_turns`` requests were sent; each tool call is answered with a result of
    ``tool_result_tokens``, after the tools' run time (``tool_latency_s``, one draw a call, the
    calls running side by side) and ``think_time_s``."""

    max_turns: int = 5
    tool_result_tokens: Distribution = DEFAULT_TOOL_RESULT_TOKENS
    tool_latency_s: Distribution = NO_THINK_TIME
    think_time_s: Distribution = NO_THINK_TIME
    responses_state: Literal["previous_response_id", "resend"] = "resend"


@dataclass(frozen=True)
class ReasoningSpec:
    """``[reasoning]``: ``effort`` (chat ``reasoning_effort``, responses ``reasoning.effort``) and
    ``thinking`` (chat ``chat_template_kwargs.enable_thinking``); None: not sent."""

    effort: str | None = None
    thinking: bool | None = None


@dataclass(frozen=True)
class ImagesSpec:
    """``[images]``: ``count`` images a request, generated PNGs of ``width`` x ``height`` pixels, or
    drawn from ``files`` (their data URLs, read at load)."""

    count: Distribution = ONE
    width: Distribution = DEFAULT_IMAGE_SIDE
    height: Distribution = DEFAULT_IMAGE_SIDE
    format: str = "png"
    files: tuple[str, ...] = ()
    file_urls: tuple[str, ...] = ()


@dataclass(frozen=True)
class TraceSpec:
    """``[trace]``: a request trace for arrival times and/or prompt lengths."""

    path: str
    format: str
    trace: Trace
    offset_s: float = 0.0


@dataclass(frozen=True)
class LoadSpec:
    """``[load]``: the load pattern, one step per concurrency (closed) or rate / time scale (open)."""

    mode: Literal["closed", "open"] = "closed"
    concurrency: tuple[int, ...] = (1,)
    rates: tuple[float, ...] = ()
    arrival: str = "poisson"
    burstiness: float = 1.0
    time_scales: tuple[float, ...] = (1.0,)
    step_seconds: float = 60.0
    warmup_seconds: float = 0.0
    requests_per_step: int = 0
    warmup_prompts: Literal["separate", "same"] = "separate"
    think_time_s: Distribution = NO_THINK_TIME

    def steps(self) -> list[float]:
        """The step targets: concurrencies (closed), rates (open) or trace time scales (trace)."""
        if self.mode == "closed":
            return [float(c) for c in self.concurrency]
        if self.arrival == "trace":
            return list(self.time_scales)
        return list(self.rates)


@dataclass(frozen=True)
class GateSpec:
    """``[gate]``: pass/fail thresholds of a run of this scenario, as ``--fail-on`` / ``--abort-on``
    take them, read here (``spec.gates``) so a typo names its line; ``loadgen ramp``'s flags
    override them."""

    fail_on: Thresholds | None = None
    abort_on: Thresholds | None = None


@dataclass(frozen=True)
class Scenario:
    """A checked scenario: its top-level keys and one spec per section (None: that optional section
    is absent). ``context_tokens``: the ``[matrix]`` context lengths, empty without one."""

    name: str = "simple"
    path: str | None = None
    description: str = ""
    seed: int = 0
    endpoint: Endpoint = "chat"
    model: str | None = None
    context_limit: int = DEFAULT_CONTEXT_LIMIT
    tokenizer: str | None = None
    prompt: PromptSpec = field(default_factory=PromptSpec)
    output: OutputSpec = field(default_factory=OutputSpec)
    sampling: Mapping[str, Any] = field(default_factory=dict)
    body: Mapping[str, Any] = field(default_factory=dict)
    shared_prefix: SharedPrefixSpec | None = None
    conversation: ConversationSpec | None = None
    load: LoadSpec = field(default_factory=LoadSpec)
    trace: TraceSpec | None = None
    context_tokens: tuple[int, ...] = ()
    embeddings: EmbeddingsSpec | None = None
    rerank: RerankSpec | None = None
    tools: ToolsSpec | None = None
    agent: AgentSpec | None = None
    reasoning: ReasoningSpec | None = None
    images: ImagesSpec | None = None
    gate: GateSpec = field(default_factory=GateSpec)
    tenants: tuple[TenantSpec, ...] = ()  # [[tenants]]: several workloads in one run (workload.tenants)
