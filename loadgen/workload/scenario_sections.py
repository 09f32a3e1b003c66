"""The section parsers of the scenario format: one function per TOML table, which reads its keys,
checks each value and returns that section's spec (:mod:`loadgen.workload.scenario_types`).

Each raises :class:`~loadgen.workload.errors.TableError` naming the dotted key, the bad value and
what is allowed; :func:`loadgen.workload.scenario.parse_scenario` turns it into a
:class:`~loadgen.workload.scenario.ScenarioError` with the file and line. A parser checks what its
own table can tell; what depends on several sections is checked by the caller. Paths are resolved
against the scenario file's folder (``base_dir``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from loadgen.spec.calls import CALLS, Inputs, taking
from loadgen.spec.gates import ThresholdError, Thresholds, parse_thresholds
from loadgen.spec.request import DEFAULT_MAX_TOKENS
from loadgen.workload.corpus import CORPUS_NAMES
from loadgen.workload.datasets import PROMPT_FORMATS, TRACE_FORMATS, load_prompts, load_trace
from loadgen.workload.errors import NO_VALUE, DatasetError, TableError
from loadgen.workload.images import MAX_SIDE, data_url, mime_type
from loadgen.workload.lengths import Clamped, Distribution, Empirical, Fixed, Uniform, parse_distribution
from loadgen.workload.prompts import CHAT_TASKS
from loadgen.workload.scenario_types import (
    AgentSpec,
    ConversationSpec,
    EmbeddingsSpec,
    GateSpec,
    ImagesSpec,
    LoadSpec,
    OutputSpec,
    PromptSpec,
    ReasoningSpec,
    RerankSpec,
    SharedPrefixSpec,
    TraceSpec,
)
from loadgen.workload.tables import Table, type_name, user_path

PROMPT_SOURCES = ("chat", "prose", "code", "sharegpt", "jsonl", "trace")
ARRIVALS = ("poisson", "gamma", "trace")
WARMUP_PROMPTS = ("separate", "same")
RESPONSES_STATES = ("previous_response_id", "resend")
REASONING_EFFORTS = ("low", "medium", "high")
IMAGE_FORMATS = ("png",)

# Request-body fields the [sampling] table accepts, with their checks: (kind, low, high).
SAMPLING_FIELDS: dict[str, tuple[str, float | None, float | None]] = {
    "temperature": ("number", 0.0, 2.0),
    "top_p": ("number", 0.0, 1.0),
    "top_k": ("integer", -1, None),
    "min_p": ("number", 0.0, 1.0),
    "presence_penalty": ("number", -2.0, 2.0),
    "frequency_penalty": ("number", -2.0, 2.0),
    "repetition_penalty": ("number", 0.0, None),
    "seed": ("integer", None, None),
    "stop": ("strings", None, None),
}


def resolve_path(base_dir: Path, value: str) -> Path:
    """A path as the scenario wrote it (``~`` expanded), relative to ``base_dir`` unless absolute."""
    p = user_path(value)
    return p if p.is_absolute() else base_dir / p


def _length(t: Table, name: str, default: Any, base_dir: Path | None = None) -> Distribution:
    raw = t.raw(name, default)
    return parse_distribution(raw, t.key(name), integer=True, base_dir=base_dir)


def _seconds(t: Table, name: str, default: Any) -> Distribution:
    raw = t.raw(name, default)
    return parse_distribution(raw, t.key(name), integer=False)


def parse_trace(t: Table | None, base_dir: Path) -> TraceSpec | None:
    if t is None:
        return None
    raw_path = t.get_str("path")
    fmt = t.get_choice("format", ("auto", *TRACE_FORMATS), "auto")
    offset_s = t.get_float("offset_s", 0.0, min_value=0.0)
    t.finish()
    p = resolve_path(base_dir, raw_path)
    try:
        trace = load_trace(p, fmt)
    except DatasetError as exc:
        raise TableError(t.key("path"), raw_path, f"cannot use it: {exc}") from None
    if offset_s >= trace.duration_s and offset_s > 0:
        raise TableError(t.key("offset_s"), offset_s, f"is past the trace's end ({trace.duration_s:.1f} s)")
    return TraceSpec(str(p), trace.format, trace, offset_s)


def parse_prompt(t: Table, base_dir: Path, trace: TraceSpec | None) -> PromptSpec:
    source = t.get_choice("source", PROMPT_SOURCES, "chat")
    system_prompt = t.get_str("system_prompt", None)
    if source in ("chat", "prose", "code"):
        input_tokens = _length(t, "input_tokens", 512, base_dir)
        tasks: tuple[str, ...] = CHAT_TASKS
        corpora: tuple[str, ...] = CORPUS_NAMES
        if source == "chat":
            tasks = tuple(_string_list(t, "tasks", list(CHAT_TASKS), CHAT_TASKS))
            corpora = tuple(_string_list(t, "corpus", list(CORPUS_NAMES), CORPUS_NAMES))
        t.finish()
        return PromptSpec(source, input_tokens, tasks, corpora, system_prompt=system_prompt)
    if source == "trace":
        t.finish()
        if trace is None:
            raise TableError(t.key("source"), source, "needs a [trace] table with the trace's path")
        return PromptSpec(source, system_prompt=system_prompt)
    raw_path = t.get_str("path")
    t.finish()
    p = resolve_path(base_dir, raw_path)
    assert source in PROMPT_FORMATS
    try:
        rows = load_prompts(p, source)
    except DatasetError as exc:
        raise TableError(t.key("path"), raw_path, f"cannot use it: {exc}") from None
    return PromptSpec(source, path=str(p), dataset=tuple(rows), system_prompt=system_prompt)


def _string_list(t: Table, name: str, default: list[str], allowed: tuple[str, ...]) -> list[str]:
    values = t.get_list(name, default)
    for i, v in enumerate(values):
        if v not in allowed:
            shown = ", ".join(f'"{a}"' for a in allowed)
            raise TableError(f"{t.key(name)}[{i}]", v, f"must be one of {shown}")
    return list(values)


def parse_output(t: Table) -> OutputSpec:
    max_tokens = _length(t, "max_tokens", DEFAULT_MAX_TOKENS)
    from_dataset = t.get_bool("from_dataset", True)
    ignore_eos = t.get_bool("ignore_eos", False)
    min_raw = t.raw("min_tokens", None)
    min_tokens: int | Literal["max_tokens"] | None
    count_ok = isinstance(min_raw, int) and not isinstance(min_raw, bool) and min_raw >= 0
    if not (min_raw is None or min_raw == "max_tokens" or count_ok):
        raise TableError(t.key("min_tokens"), min_raw, 'must be an integer >= 0 or "max_tokens"')
    min_tokens = min_raw
    t.finish()
    return OutputSpec(max_tokens, from_dataset, ignore_eos, min_tokens)


def parse_sampling(t: Table | None) -> dict[str, Any]:
    if t is None:
        return {}
    out: dict[str, Any] = {}
    for name, (kind, low, high) in SAMPLING_FIELDS.items():
        if not t.has(name):
            continue
        if kind == "number":
            out[name] = t.get_float(name, min_value=low, max_value=high)
        elif kind == "integer":
            value = t.get_int(name, min_value=None if low is None else int(low))
            out[name] = value
        else:
            value = t.raw(name)
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise TableError(t.key(name), value, "must be a string or an array of strings")
            out[name] = value
    t.finish(allowed=list(SAMPLING_FIELDS))
    return out


def parse_shared_prefix(t: Table | None) -> SharedPrefixSpec | None:
    if t is None:
        return None
    tokens = _length(t, "tokens", None)
    ratio = t.get_float("ratio", 1.0, min_value=0.0, max_value=1.0)
    pool = t.get_int("pool", 1, min_value=1)
    kind = t.get_choice("kind", ("document", "system"), "document")
    source = t.get_choice("source", CORPUS_NAMES, "prose")
    t.finish()
    return SharedPrefixSpec(tokens, ratio, pool, kind, source)


def parse_conversation(t: Table | None, endpoint: str) -> ConversationSpec | None:
    if t is None:
        return None
    turns = parse_distribution(t.raw("turns"), t.key("turns"), integer=True, floor=1.0)
    think = _seconds(t, "think_time_s", 0.0)
    followup = _length(t, "followup_tokens", 64)
    state = _responses_state(t, endpoint)
    t.finish()
    return ConversationSpec(turns, think, followup, state)


def _responses_state(t: Table, endpoint: str) -> Literal["previous_response_id", "resend"]:
    if endpoint != "responses":
        if t.has("responses_state"):
            raise TableError(
                t.key("responses_state"),
                t.raw("responses_state"),
                f'applies to endpoint = "responses" only (this scenario has "{endpoint}")',
            )
        return "resend"
    state: Literal["previous_response_id", "resend"] = t.get_choice(
        "responses_state", RESPONSES_STATES, "previous_response_id"
    )
    return state


def _section_for(t: Table, endpoint: str, inputs: Inputs) -> None:
    """A section that builds the calls carrying ``inputs``: an error for any other endpoint."""
    if CALLS[endpoint].inputs is not inputs:
        wanted = " or ".join(f'"{n}"' for n in taking(inputs))
        raise TableError(t.path, NO_VALUE, f'applies to endpoint = {wanted} only (this scenario has "{endpoint}")')


def parse_embeddings(t: Table | None, endpoint: str, base_dir: Path) -> EmbeddingsSpec | None:
    if t is None:
        return EmbeddingsSpec() if CALLS[endpoint].inputs is Inputs.BATCH else None
    _section_for(t, endpoint, Inputs.BATCH)
    batch = parse_distribution(t.raw("batch", 1), t.key("batch"), integer=True, floor=1.0)
    input_tokens = _length(t, "input_tokens", None, base_dir) if t.has("input_tokens") else None
    t.finish()
    return EmbeddingsSpec(batch, input_tokens)


def parse_rerank(t: Table | None, endpoint: str) -> RerankSpec | None:
    if t is None:
        return RerankSpec() if CALLS[endpoint].inputs is Inputs.QUERY_DOCUMENTS else None
    _section_for(t, endpoint, Inputs.QUERY_DOCUMENTS)
    documents = parse_distribution(t.raw("documents", 8), t.key("documents"), integer=True, floor=1.0)
    query = _length(t, "query_tokens", 16)
    document = _length(t, "document_tokens", 128)
    t.finish()
    return RerankSpec(documents, query, document)


def parse_agent(t: Table | None, endpoint: str) -> AgentSpec | None:
    if t is None:
        return None
    max_turns = t.get_int("max_turns", 5, min_value=1)
    results = _length(t, "tool_result_tokens", 256)
    latency = _seconds(t, "tool_latency_s", 0.0)
    think = _seconds(t, "think_time_s", 0.0)
    state = _responses_state(t, endpoint)
    t.finish()
    return AgentSpec(max_turns, results, latency, think, state)


def parse_reasoning(t: Table | None, endpoint: str) -> ReasoningSpec | None:
    if t is None:
        return None
    effort = t.get_choice("effort", REASONING_EFFORTS, None)
    thinking = t.get_bool("thinking", None)
    t.finish()
    if effort is not None and endpoint not in ("chat", "responses"):
        raise TableError(t.key("effort"), effort, f'applies to endpoint = "chat" or "responses" (not "{endpoint}")')
    if thinking is not None and endpoint != "chat":
        raise TableError(
            t.key("thinking"), thinking, f'is a chat template switch: endpoint = "chat" only (not "{endpoint}")'
        )
    return ReasoningSpec(effort, thinking)


def parse_images(t: Table | None, base_dir: Path) -> ImagesSpec | None:
    if t is None:
        return None
    count = parse_distribution(t.raw("count", 1), t.key("count"), integer=True)
    if t.has("files"):
        for name in ("width", "height", "format"):
            if t.has(name):
                raise TableError(t.key(name), t.raw(name), "applies to generated images; remove it or files")
        files = t.get_list("files")
        urls = []
        for i, raw in enumerate(files):
            key = f"{t.key('files')}[{i}]"
            if not isinstance(raw, str):
                raise TableError(key, raw, f"must be a string (a path), not {type_name(raw)}")
            p = resolve_path(base_dir, raw)
            mime = mime_type(p)
            if mime is None:
                raise TableError(key, raw, "is not a .png, .jpg, .jpeg, .webp or .gif file")
            try:
                data = p.read_bytes()
            except FileNotFoundError:
                raise TableError(key, raw, f"no such image file: {p}") from None
            except OSError as exc:
                raise TableError(key, raw, f"cannot read {p}: {exc}") from None
            urls.append(data_url(data, mime))
        t.finish()
        return ImagesSpec(count, files=tuple(str(resolve_path(base_dir, f)) for f in files), file_urls=tuple(urls))
    width = _pixels(t, "width")
    height = _pixels(t, "height")
    fmt = t.get_choice("format", IMAGE_FORMATS, "png")
    t.finish()
    return ImagesSpec(count, width, height, fmt)


def _pixels(t: Table, name: str) -> Distribution:
    """An image side: a distribution whose draws can be 1..MAX_SIDE pixels (draws of an unbounded
    one are clamped to that range when drawn)."""
    dist = parse_distribution(t.raw(name, 1024), t.key(name), integer=True, floor=1.0)
    high = math.inf
    if isinstance(dist, Fixed):
        high = dist.value
    elif isinstance(dist, (Uniform, Clamped)):
        high = dist.high
    elif isinstance(dist, Empirical):
        high = max(dist.values)
    if high != math.inf and high > MAX_SIDE:
        raise TableError(t.key(name), t.raw(name), f"an image side must be at most {MAX_SIDE} pixels")
    return dist


def _numbers(t: Table, name: str, *, integer: bool, default: Any = None) -> tuple[Any, ...]:
    values = t.get_list(name) if default is None else t.get_list(name, default)
    out = []
    for i, v in enumerate(values):
        key = f"{t.key(name)}[{i}]"
        if isinstance(v, bool) or not isinstance(v, int if integer else (int, float)):
            want = "an integer" if integer else "a number"
            raise TableError(key, v, f"must be {want}, not {type_name(v)}")
        if v <= 0:
            raise TableError(key, v, "must be > 0")
        if not integer and not v <= 1e308:  # nan, inf, or an integer float() cannot hold
            raise TableError(key, v, "must be a finite number")
        out.append(v if integer else float(v))
    return tuple(out)


def parse_load(t: Table, trace: TraceSpec | None) -> LoadSpec:
    mode = t.get_choice("mode", ("closed", "open"), "closed")
    step_seconds = t.get_float("step_seconds", 60.0, positive=True)
    warmup_seconds = t.get_float("warmup_seconds", 0.0, min_value=0.0)
    if warmup_seconds >= step_seconds:
        raise TableError(
            t.key("warmup_seconds"), warmup_seconds, f"must be shorter than step_seconds ({step_seconds:g})"
        )
    requests_per_step = t.get_int("requests_per_step", 0, min_value=0)
    warmup_prompts = t.get_choice("warmup_prompts", WARMUP_PROMPTS, "separate")
    only = ("concurrency", "think_time_s") if mode == "open" else ("rates", "arrival", "burstiness", "time_scales")
    for name in only:
        if t.has(name):
            other = "closed" if mode == "open" else "open"
            raise TableError(
                t.key(name), t.raw(name), f'applies to mode = "{other}" only (this table has mode = "{mode}")'
            )
    if mode == "closed":
        concurrency = _numbers(t, "concurrency", integer=True, default=[1])
        think = _seconds(t, "think_time_s", 0.0)
        t.finish()
        return LoadSpec(
            "closed",
            concurrency=concurrency,
            step_seconds=step_seconds,
            warmup_seconds=warmup_seconds,
            requests_per_step=requests_per_step,
            warmup_prompts=warmup_prompts,
            think_time_s=think,
        )
    arrival = t.get_choice("arrival", ARRIVALS, "poisson")
    for name, wanted in (("burstiness", ("gamma",)), ("time_scales", ("trace",)), ("rates", ("poisson", "gamma"))):
        if t.has(name) and arrival not in wanted:
            shown = " or ".join(f'"{w}"' for w in wanted)
            raise TableError(
                t.key(name), t.raw(name), f'applies to arrival = {shown} only (this table has "{arrival}")'
            )
    rates: tuple[float, ...] = ()
    time_scales: tuple[float, ...] = (1.0,)
    burstiness = 1.0
    if arrival == "trace":
        if trace is None:
            raise TableError(t.key("arrival"), arrival, "needs a [trace] table with the trace's path")
        time_scales = _numbers(t, "time_scales", integer=False, default=[1.0])
    else:
        rates = _numbers(t, "rates", integer=False)
        if arrival == "gamma":
            burstiness = t.get_float("burstiness", 1.0, positive=True)
    t.finish()
    return LoadSpec(
        "open",
        concurrency=(),
        rates=rates,
        arrival=arrival,
        burstiness=burstiness,
        time_scales=time_scales,
        step_seconds=step_seconds,
        warmup_seconds=warmup_seconds,
        requests_per_step=requests_per_step,
        warmup_prompts=warmup_prompts,
    )


def parse_gate(t: Table | None) -> GateSpec:
    if t is None:
        return GateSpec()
    gate = GateSpec(fail_on=_thresholds(t, "fail_on"), abort_on=_thresholds(t, "abort_on"))
    t.finish()
    return gate


def _thresholds(t: Table, name: str) -> Thresholds | None:
    text: str | None = t.get_str(name, None)
    if text is None:
        return None
    try:
        return parse_thresholds(text, name)
    except ThresholdError as exc:
        raise TableError(t.key(name), text, str(exc).split(": ", 1)[-1]) from None


def parse_matrix(t: Table | None, context_limit: int) -> tuple[int, ...]:
    if t is None:
        return ()
    values = _numbers(t, "context_tokens", integer=True)
    t.finish()
    for i, v in enumerate(values):
        if v >= context_limit:
            raise TableError(
                f"matrix.context_tokens[{i}]",
                v,
                f"must be below context_limit ({context_limit}) to leave room for output",
            )
    return values
