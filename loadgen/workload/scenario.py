"""Scenario files (TOML): what traffic to send and how hard, validated with file:line errors.

A scenario names a prompt source and length distributions, output lengths, sampling parameters,
optional shared prefixes and multi-turn conversations, and the load pattern (closed-loop
concurrency steps or open-loop arrivals). :func:`load_scenario` reads and checks one, including the
dataset and trace files it points at; every problem raises :class:`ScenarioError` whose message
names the file, the line, the field, the bad value and what is allowed, e.g.::

    scenarios/chat.toml:14: load.mode = "clsed": must be one of "closed", "open" (did you mean "closed"?)

The full reference of keys is in the README (section "Scenario files"); the shipped scenarios under
``scenarios/`` are commented examples.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from loadgen.spec.calls import CALLS, ENDPOINTS, GENERATIVE, Inputs, taking
from loadgen.spec.gates import ThresholdError, Thresholds, parse_thresholds
from loadgen.spec.request import DEFAULT_MAX_TOKENS, Endpoint
from loadgen.workload.corpus import CORPUS_NAMES
from loadgen.workload.datasets import PROMPT_FORMATS, TRACE_FORMATS, PromptRow, Trace, load_prompts, load_trace
from loadgen.workload.errors import NO_VALUE, DatasetError, TableError, WorkloadError
from loadgen.workload.images import MAX_SIDE, data_url, mime_type
from loadgen.workload.lengths import Clamped, Distribution, Empirical, Fixed, Uniform, parse_distribution
from loadgen.workload.prompts import CHAT_TASKS
from loadgen.workload.tables import Table, type_name, user_path
from loadgen.workload.tokens import TokenizerError, resolve_tokenizer_file
from loadgen.workload.tools import ToolsSpec, parse_tools

PROMPT_SOURCES = ("chat", "prose", "code", "sharegpt", "jsonl", "trace")
ARRIVALS = ("poisson", "gamma", "trace")
WARMUP_PROMPTS = ("separate", "same")
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


class ScenarioError(WorkloadError):
    """A scenario that cannot be used; ``str()`` is the full message for the user."""

    def __init__(self, path: str | None, line: int | None, message: str, field: str | None = None) -> None:
        self.path = path
        self.line = line
        self.field = field
        where = path or "(scenario)"
        if line is not None:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {message}")


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


def load_scenario(path: str | Path) -> Scenario:
    """Read, validate and resolve a scenario file (datasets and traces are read too)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(str(p), None, "no such scenario file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(str(p), None, f"cannot read the scenario file: {exc}") from None
    return parse_scenario(text, str(p), p.parent)


def parse_scenario(text: str, path: str = "(scenario)", base_dir: Path | None = None) -> Scenario:
    """Validate scenario TOML ``text``; ``path`` names it in errors, ``base_dir`` resolves files."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
        line = int(m.group(1)) if m else None
        detail = msg[: m.start()].strip() if m else msg
        col = f" (column {m.group(2)})" if m else ""
        raise ScenarioError(path, line, f"invalid TOML: {detail}{col}") from None
    try:
        return _build(Table(data), path, base_dir or Path("."))
    except TableError as exc:
        line = find_line(text, exc.key)
        raise ScenarioError(path, line, exc.describe(exc.key), field=exc.key) from None


def find_line(text: str, key: str) -> int | None:
    """The 1-based line where dotted ``key`` (e.g. ``prompt.input_tokens.sigma``) is written.

    tomllib reports no positions for values, so this scans the text: the table header, then the
    key inside that table, then (for inline tables) the nested key on or after that line. Falls
    back to the nearest enclosing line found, or None.
    """
    # "[1]" stays a part: it picks the second [[array.table]] of that name
    parts = re.findall(r"\[\d+\]|[^.\[\]]+", key)
    lines = text.splitlines()
    section: list[str] = []
    best: int | None = None
    best_depth = 0
    key_line: dict[tuple[str, ...], int] = {}
    arrays: dict[tuple[str, ...], int] = {}
    header_re = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
    key_re = re.compile(r'^\s*("?)([A-Za-z0-9_\-]+)\1\s*=')
    for i, line in enumerate(lines, start=1):
        hm = header_re.match(line)
        if hm:
            section = [s.strip().strip('"') for s in hm.group(1).split(".")]
            key_line.setdefault(tuple(section), i)
            if line.lstrip().startswith("[["):
                n = arrays.get(tuple(section), 0)
                arrays[tuple(section)] = n + 1
                section = [*section, f"[{n}]"]
                key_line.setdefault(tuple(section), i)
            continue
        km = key_re.match(line)
        if km:
            key_line.setdefault((*section, km.group(2)), i)
    for depth in range(len(parts), 0, -1):
        if tuple(parts[:depth]) in key_line:
            best, best_depth = key_line[tuple(parts[:depth])], depth
            break
    if best is None:
        return None
    # Nested keys inside an inline table or multi-line array: look on and after the key's line,
    # until the next top-level key or header.
    for name in parts[best_depth:]:
        if name.startswith("["):
            continue
        pattern = re.compile(rf"(^|[{{,\s]){re.escape(name)}\s*=")
        start = best
        for j in range(start, len(lines) + 1):
            line = lines[j - 1]
            if j > start and (header_re.match(line) or key_re.match(line)):
                break
            if pattern.search(line):
                best = j
                break
    return best


def _build(root: Table, path: str, base_dir: Path) -> Scenario:
    name = root.get_str("name", Path(path).stem if path != "(scenario)" else "scenario")
    description = root.get_str("description", "")
    seed = root.get_int("seed", 0)
    endpoint = root.get_choice("endpoint", ENDPOINTS, "chat")
    model = root.get_str("model", None)
    context_limit = root.get_int("context_limit", DEFAULT_CONTEXT_LIMIT, min_value=2)
    tokenizer = root.get_str("tokenizer", None)
    if tokenizer is not None:
        tok_path = _resolve(base_dir, tokenizer)
        try:
            resolve_tokenizer_file(tok_path)
        except TokenizerError as exc:
            raise TableError("tokenizer", tokenizer, str(exc)) from None
        tokenizer = str(tok_path)

    trace_spec = _trace(root.sub("trace"), base_dir)
    prompt = _prompt(root.sub("prompt") or Table({}, "prompt"), base_dir, trace_spec)
    output = _output(root.sub("output") or Table({}, "output"))
    sampling = _sampling(root.sub("sampling"))
    body_table = root.sub("body")  # free-form request-body fields, sent as written
    body = dict(body_table.data) if body_table else {}
    shared = _shared_prefix(root.sub("shared_prefix"))
    conversation = _conversation(root.sub("conversation"), endpoint)
    load = _load(root.sub("load") or Table({}, "load"), trace_spec)
    context_tokens = _matrix(root.sub("matrix"), context_limit)
    embeddings = _embeddings(root.sub("embeddings"), endpoint, base_dir)
    rerank = _rerank(root.sub("rerank"), endpoint)
    tools_table = root.sub("tools")
    tools = parse_tools(tools_table, base_dir) if tools_table is not None else None
    agent = _agent(root.sub("agent"), endpoint)
    reasoning = _reasoning(root.sub("reasoning"), endpoint)
    images = _images(root.sub("images"), base_dir)
    gate = _gate(root.sub("gate"))
    root.finish()
    _check_endpoint(root, endpoint, prompt, load, context_tokens)

    if conversation is not None and load.mode == "open":
        raise TableError("load.mode", "open", 'multi-turn conversations ([conversation]) need mode = "closed"')
    if conversation is not None and prompt.source == "trace":
        raise TableError("prompt.source", "trace", "a trace gives single requests; remove [conversation]")
    if context_tokens and prompt.source not in ("chat", "prose", "code"):
        raise TableError(
            "matrix.context_tokens", list(context_tokens), "a context-length matrix needs a built-in prompt source"
        )
    if isinstance(prompt.input_tokens, Fixed) and prompt.input_tokens.value >= context_limit:
        raise TableError(
            "prompt.input_tokens", int(prompt.input_tokens.value), f"must be below context_limit ({context_limit})"
        )
    return Scenario(
        name=name,
        path=path,
        description=description,
        seed=seed,
        endpoint=endpoint,
        model=model,
        context_limit=context_limit,
        tokenizer=tokenizer,
        prompt=prompt,
        output=output,
        sampling=sampling,
        body=body,
        shared_prefix=shared,
        conversation=conversation,
        load=load,
        trace=trace_spec,
        context_tokens=context_tokens,
        embeddings=embeddings,
        rerank=rerank,
        tools=tools,
        agent=agent,
        reasoning=reasoning,
        images=images,
        gate=gate,
    )


def _check_endpoint(
    root: Table, endpoint: str, prompt: PromptSpec, load: LoadSpec, context_tokens: tuple[int, ...]
) -> None:
    """What each endpoint can carry: the sections that make no sense for it are errors."""
    present = {name for name in root.data if isinstance(root.data[name], dict)}
    if endpoint not in GENERATIVE:
        for name in ("conversation", "tools", "agent", "images", "reasoning", "shared_prefix"):
            if name in present:
                problem = f'applies to generative endpoints; this scenario has endpoint = "{endpoint}"'
                raise TableError(name, NO_VALUE, problem)
        if prompt.source not in ("chat", "prose", "code"):
            raise TableError(
                "prompt.source",
                prompt.source,
                f'endpoint = "{endpoint}" draws its texts from a built-in source: "chat", "prose" or "code"',
            )
        if context_tokens and CALLS[endpoint].inputs is Inputs.QUERY_DOCUMENTS:
            raise TableError("matrix", NO_VALUE, f'a context-length matrix does not apply to endpoint = "{endpoint}"')
        return
    if CALLS[endpoint].inputs is Inputs.PROMPT:
        for name in ("tools", "agent", "images"):
            if name in present:
                takes = " or ".join(f'"{n}"' for n in taking(Inputs.MESSAGES))
                problem = f"has no place in a {endpoint} prompt; use endpoint = {takes}"
                raise TableError(name, NO_VALUE, problem)
    if "agent" in present:
        if "tools" not in present:
            raise TableError("agent", NO_VALUE, "needs tools to call: add a [tools] table")
        if "conversation" in present:
            raise TableError("agent", NO_VALUE, "an agent task is its own conversation: remove [conversation]")
        if load.mode == "open":
            raise TableError("load.mode", "open", 'agent tasks ([agent]) need mode = "closed"')
        if prompt.source == "trace":
            raise TableError("prompt.source", "trace", "a trace gives single requests; remove [agent]")


def _resolve(base_dir: Path, value: str) -> Path:
    p = user_path(value)
    return p if p.is_absolute() else base_dir / p


def _length(t: Table, name: str, default: Any, base_dir: Path | None = None) -> Distribution:
    raw = t.raw(name, default)
    return parse_distribution(raw, t.key(name), integer=True, base_dir=base_dir)


def _seconds(t: Table, name: str, default: Any) -> Distribution:
    raw = t.raw(name, default)
    return parse_distribution(raw, t.key(name), integer=False)


def _trace(t: Table | None, base_dir: Path) -> TraceSpec | None:
    if t is None:
        return None
    raw_path = t.get_str("path")
    fmt = t.get_choice("format", ("auto", *TRACE_FORMATS), "auto")
    offset_s = t.get_float("offset_s", 0.0, min_value=0.0)
    t.finish()
    p = _resolve(base_dir, raw_path)
    try:
        trace = load_trace(p, fmt)
    except DatasetError as exc:
        raise TableError(t.key("path"), raw_path, f"cannot use it: {exc}") from None
    if offset_s >= trace.duration_s and offset_s > 0:
        raise TableError(t.key("offset_s"), offset_s, f"is past the trace's end ({trace.duration_s:.1f} s)")
    return TraceSpec(str(p), trace.format, trace, offset_s)


def _prompt(t: Table, base_dir: Path, trace: TraceSpec | None) -> PromptSpec:
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
    p = _resolve(base_dir, raw_path)
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


def _output(t: Table) -> OutputSpec:
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


def _sampling(t: Table | None) -> dict[str, Any]:
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


def _shared_prefix(t: Table | None) -> SharedPrefixSpec | None:
    if t is None:
        return None
    tokens = _length(t, "tokens", None)
    ratio = t.get_float("ratio", 1.0, min_value=0.0, max_value=1.0)
    pool = t.get_int("pool", 1, min_value=1)
    kind = t.get_choice("kind", ("document", "system"), "document")
    source = t.get_choice("source", CORPUS_NAMES, "prose")
    t.finish()
    return SharedPrefixSpec(tokens, ratio, pool, kind, source)


def _conversation(t: Table | None, endpoint: str) -> ConversationSpec | None:
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


def _embeddings(t: Table | None, endpoint: str, base_dir: Path) -> EmbeddingsSpec | None:
    if t is None:
        return EmbeddingsSpec() if CALLS[endpoint].inputs is Inputs.BATCH else None
    _section_for(t, endpoint, Inputs.BATCH)
    batch = parse_distribution(t.raw("batch", 1), t.key("batch"), integer=True, floor=1.0)
    input_tokens = _length(t, "input_tokens", None, base_dir) if t.has("input_tokens") else None
    t.finish()
    return EmbeddingsSpec(batch, input_tokens)


def _rerank(t: Table | None, endpoint: str) -> RerankSpec | None:
    if t is None:
        return RerankSpec() if CALLS[endpoint].inputs is Inputs.QUERY_DOCUMENTS else None
    _section_for(t, endpoint, Inputs.QUERY_DOCUMENTS)
    documents = parse_distribution(t.raw("documents", 8), t.key("documents"), integer=True, floor=1.0)
    query = _length(t, "query_tokens", 16)
    document = _length(t, "document_tokens", 128)
    t.finish()
    return RerankSpec(documents, query, document)


def _agent(t: Table | None, endpoint: str) -> AgentSpec | None:
    if t is None:
        return None
    max_turns = t.get_int("max_turns", 5, min_value=1)
    results = _length(t, "tool_result_tokens", 256)
    latency = _seconds(t, "tool_latency_s", 0.0)
    think = _seconds(t, "think_time_s", 0.0)
    state = _responses_state(t, endpoint)
    t.finish()
    return AgentSpec(max_turns, results, latency, think, state)


def _reasoning(t: Table | None, endpoint: str) -> ReasoningSpec | None:
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


def _images(t: Table | None, base_dir: Path) -> ImagesSpec | None:
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
            p = _resolve(base_dir, raw)
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
        return ImagesSpec(count, files=tuple(str(_resolve(base_dir, f)) for f in files), file_urls=tuple(urls))
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


def _load(t: Table, trace: TraceSpec | None) -> LoadSpec:
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


def _gate(t: Table | None) -> GateSpec:
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


def _matrix(t: Table | None, context_limit: int) -> tuple[int, ...]:
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


__all__ = [
    "AgentSpec",
    "ConversationSpec",
    "EmbeddingsSpec",
    "ImagesSpec",
    "LoadSpec",
    "OutputSpec",
    "PromptSpec",
    "ReasoningSpec",
    "RerankSpec",
    "Scenario",
    "ScenarioError",
    "SharedPrefixSpec",
    "TraceSpec",
    "find_line",
    "load_scenario",
    "parse_scenario",
]
