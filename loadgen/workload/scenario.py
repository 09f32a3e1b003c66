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

from loadgen.spec.request import Endpoint
from loadgen.workload.corpus import CORPUS_NAMES
from loadgen.workload.datasets import PROMPT_FORMATS, TRACE_FORMATS, PromptRow, Trace, load_prompts, load_trace
from loadgen.workload.errors import DatasetError, SpecError, WorkloadError
from loadgen.workload.lengths import Distribution, Fixed, parse_distribution
from loadgen.workload.prompts import CHAT_TASKS
from loadgen.workload.spec import Table, type_name
from loadgen.workload.tokens import TokenizerError, resolve_tokenizer_file

PROMPT_SOURCES = ("chat", "prose", "code", "sharegpt", "jsonl", "trace")
ARRIVALS = ("poisson", "gamma", "trace")
WARMUP_PROMPTS = ("separate", "same")
DEFAULT_CONTEXT_LIMIT = 32768
# Immutable defaults shared by every scenario that leaves the key out.
DEFAULT_INPUT_TOKENS: Distribution = Fixed(512)
DEFAULT_MAX_TOKENS: Distribution = Fixed(256)
DEFAULT_FOLLOWUP_TOKENS: Distribution = Fixed(64)
NO_THINK_TIME: Distribution = Fixed(0.0)

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

    max_tokens: Distribution = DEFAULT_MAX_TOKENS
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
    """``[conversation]``: multi-turn sessions (closed loop only)."""

    turns: Distribution
    think_time_s: Distribution = NO_THINK_TIME
    followup_tokens: Distribution = DEFAULT_FOLLOWUP_TOKENS


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
    except SpecError as exc:
        line = find_line(text, exc.key)
        raise ScenarioError(path, line, exc.describe(exc.key), field=exc.key) from None


def find_line(text: str, key: str) -> int | None:
    """The 1-based line where dotted ``key`` (e.g. ``prompt.input_tokens.sigma``) is written.

    tomllib reports no positions for values, so this scans the text: the table header, then the
    key inside that table, then (for inline tables) the nested key on or after that line. Falls
    back to the nearest enclosing line found, or None.
    """
    parts = [p for p in re.split(r"\.|\[\d+\]", key) if p]
    lines = text.splitlines()
    section: list[str] = []
    best: int | None = None
    best_depth = 0
    key_line: dict[tuple[str, ...], int] = {}
    header_re = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
    key_re = re.compile(r'^\s*("?)([A-Za-z0-9_\-]+)\1\s*=')
    for i, line in enumerate(lines, start=1):
        hm = header_re.match(line)
        if hm:
            section = [s.strip().strip('"') for s in hm.group(1).split(".")]
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
    endpoint = root.get_choice("endpoint", ("chat", "completions"), "chat")
    model = root.get_str("model", None)
    context_limit = root.get_int("context_limit", DEFAULT_CONTEXT_LIMIT, min_value=2)
    tokenizer = root.get_str("tokenizer", None)
    if tokenizer is not None:
        tok_path = _resolve(base_dir, tokenizer)
        try:
            resolve_tokenizer_file(tok_path)
        except TokenizerError as exc:
            raise SpecError("tokenizer", tokenizer, str(exc)) from None
        tokenizer = str(tok_path)

    trace_spec = _trace(root.sub("trace"), base_dir)
    prompt = _prompt(root.sub("prompt") or Table({}, "prompt"), base_dir, trace_spec)
    output = _output(root.sub("output") or Table({}, "output"))
    sampling = _sampling(root.sub("sampling"))
    body_table = root.sub("body")  # free-form request-body fields, sent as written
    body = dict(body_table.data) if body_table else {}
    shared = _shared_prefix(root.sub("shared_prefix"))
    conversation = _conversation(root.sub("conversation"))
    load = _load(root.sub("load") or Table({}, "load"), trace_spec)
    context_tokens = _matrix(root.sub("matrix"), context_limit)
    root.finish()

    if conversation is not None and load.mode == "open":
        raise SpecError("load.mode", "open", 'multi-turn conversations ([conversation]) need mode = "closed"')
    if conversation is not None and prompt.source == "trace":
        raise SpecError("prompt.source", "trace", "a trace gives single requests; remove [conversation]")
    if context_tokens and prompt.source not in ("chat", "prose", "code"):
        raise SpecError(
            "matrix.context_tokens", list(context_tokens), "a context-length matrix needs a built-in prompt source"
        )
    if isinstance(prompt.input_tokens, Fixed) and prompt.input_tokens.value >= context_limit:
        raise SpecError(
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
    )


def _resolve(base_dir: Path, value: str) -> Path:
    p = Path(value).expanduser()
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
        raise SpecError(t.key("path"), raw_path, f"cannot use it: {exc}") from None
    if offset_s >= trace.duration_s and offset_s > 0:
        raise SpecError(t.key("offset_s"), offset_s, f"is past the trace's end ({trace.duration_s:.1f} s)")
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
            raise SpecError(t.key("source"), source, "needs a [trace] table with the trace's path")
        return PromptSpec(source, system_prompt=system_prompt)
    raw_path = t.get_str("path")
    t.finish()
    p = _resolve(base_dir, raw_path)
    assert source in PROMPT_FORMATS
    try:
        rows = load_prompts(p, source)
    except DatasetError as exc:
        raise SpecError(t.key("path"), raw_path, f"cannot use it: {exc}") from None
    return PromptSpec(source, path=str(p), dataset=tuple(rows), system_prompt=system_prompt)


def _string_list(t: Table, name: str, default: list[str], allowed: tuple[str, ...]) -> list[str]:
    values = t.get_list(name, default)
    for i, v in enumerate(values):
        if v not in allowed:
            shown = ", ".join(f'"{a}"' for a in allowed)
            raise SpecError(f"{t.key(name)}[{i}]", v, f"must be one of {shown}")
    return list(values)


def _output(t: Table) -> OutputSpec:
    max_tokens = _length(t, "max_tokens", 256)
    from_dataset = t.get_bool("from_dataset", True)
    ignore_eos = t.get_bool("ignore_eos", False)
    min_raw = t.raw("min_tokens", None)
    min_tokens: int | Literal["max_tokens"] | None
    count_ok = isinstance(min_raw, int) and not isinstance(min_raw, bool) and min_raw >= 0
    if not (min_raw is None or min_raw == "max_tokens" or count_ok):
        raise SpecError(t.key("min_tokens"), min_raw, 'must be an integer >= 0 or "max_tokens"')
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
                raise SpecError(t.key(name), value, "must be a string or an array of strings")
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


def _conversation(t: Table | None) -> ConversationSpec | None:
    if t is None:
        return None
    turns = parse_distribution(t.raw("turns"), t.key("turns"), integer=True, floor=1.0)
    think = _seconds(t, "think_time_s", 0.0)
    followup = _length(t, "followup_tokens", 64)
    t.finish()
    return ConversationSpec(turns, think, followup)


def _numbers(t: Table, name: str, *, integer: bool, default: Any = None) -> tuple[Any, ...]:
    values = t.get_list(name) if default is None else t.get_list(name, default)
    out = []
    for i, v in enumerate(values):
        key = f"{t.key(name)}[{i}]"
        if isinstance(v, bool) or not isinstance(v, int if integer else (int, float)):
            want = "an integer" if integer else "a number"
            raise SpecError(key, v, f"must be {want}, not {type_name(v)}")
        if v <= 0 or (not integer and not math.isfinite(v)):
            raise SpecError(key, v, "must be > 0")
        out.append(v if integer else float(v))
    return tuple(out)


def _load(t: Table, trace: TraceSpec | None) -> LoadSpec:
    mode = t.get_choice("mode", ("closed", "open"), "closed")
    step_seconds = t.get_float("step_seconds", 60.0, positive=True)
    warmup_seconds = t.get_float("warmup_seconds", 0.0, min_value=0.0)
    if warmup_seconds >= step_seconds:
        raise SpecError(
            t.key("warmup_seconds"), warmup_seconds, f"must be shorter than step_seconds ({step_seconds:g})"
        )
    requests_per_step = t.get_int("requests_per_step", 0, min_value=0)
    warmup_prompts = t.get_choice("warmup_prompts", WARMUP_PROMPTS, "separate")
    only = ("concurrency", "think_time_s") if mode == "open" else ("rates", "arrival", "burstiness", "time_scales")
    for name in only:
        if t.has(name):
            other = "closed" if mode == "open" else "open"
            raise SpecError(
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
            raise SpecError(t.key(name), t.raw(name), f'applies to arrival = {shown} only (this table has "{arrival}")')
    rates: tuple[float, ...] = ()
    time_scales: tuple[float, ...] = (1.0,)
    burstiness = 1.0
    if arrival == "trace":
        if trace is None:
            raise SpecError(t.key("arrival"), arrival, "needs a [trace] table with the trace's path")
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


def _matrix(t: Table | None, context_limit: int) -> tuple[int, ...]:
    if t is None:
        return ()
    values = _numbers(t, "context_tokens", integer=True)
    t.finish()
    for i, v in enumerate(values):
        if v >= context_limit:
            raise SpecError(
                f"matrix.context_tokens[{i}]",
                v,
                f"must be below context_limit ({context_limit}) to leave room for output",
            )
    return values


__all__ = [
    "ConversationSpec",
    "LoadSpec",
    "OutputSpec",
    "PromptSpec",
    "Scenario",
    "ScenarioError",
    "SharedPrefixSpec",
    "TraceSpec",
    "find_line",
    "load_scenario",
    "parse_scenario",
]
