"""Scenario files (TOML): what traffic to send and how hard, validated with file:line errors.

A scenario names a prompt source and length distributions, output lengths, sampling parameters,
optional shared prefixes and multi-turn conversations, and the load pattern (closed-loop
concurrency steps or open-loop arrivals). :func:`load_scenario` reads and checks one, including the
dataset and trace files it points at; every problem raises :class:`ScenarioError` whose message
names the file, the line, the field, the bad value and what is allowed, e.g.::

    scenarios/chat.toml:14: load.mode = "clsed": must be one of "closed", "open" (did you mean "closed"?)

This module reads the file, assembles the sections and checks what spans several of them; each
section's keys are read by its parser in :mod:`loadgen.workload.scenario_sections`, into the
dataclasses of :mod:`loadgen.workload.scenario_types`.

The full reference of keys is in the README (section "Scenario files"); the shipped scenarios under
``scenarios/`` are commented examples.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from loadgen.spec.calls import CALLS, ENDPOINTS, GENERATIVE, Inputs, taking
from loadgen.workload.errors import NO_VALUE, TableError, WorkloadError
from loadgen.workload.lengths import Fixed
from loadgen.workload.scenario_sections import (
    parse_agent,
    parse_conversation,
    parse_embeddings,
    parse_gate,
    parse_images,
    parse_load,
    parse_matrix,
    parse_output,
    parse_prompt,
    parse_reasoning,
    parse_rerank,
    parse_sampling,
    parse_shared_prefix,
    parse_trace,
    resolve_path,
)
from loadgen.workload.scenario_types import DEFAULT_CONTEXT_LIMIT, LoadSpec, PromptSpec, Scenario
from loadgen.workload.tables import Table
from loadgen.workload.tenants import check_tenants, parse_tenants
from loadgen.workload.tokens import TokenizerError, resolve_tokenizer_file
from loadgen.workload.tools import parse_tools


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
    limit_given = root.has("context_limit")
    context_limit = root.get_int("context_limit", DEFAULT_CONTEXT_LIMIT, min_value=2)
    tokenizer = root.get_str("tokenizer", None)
    if tokenizer is not None:
        tok_path = resolve_path(base_dir, tokenizer)
        try:
            resolve_tokenizer_file(tok_path)
        except TokenizerError as exc:
            raise TableError("tokenizer", tokenizer, str(exc)) from None
        tokenizer = str(tok_path)

    trace_spec = parse_trace(root.sub("trace"), base_dir)
    prompt = parse_prompt(root.sub("prompt") or Table({}, "prompt"), base_dir, trace_spec)
    if prompt.source == "trace" and trace_spec is not None and not limit_given:
        # a replay sends the trace's lengths: the default limit must not clip its longest requests (a
        # server that cannot take them answers so, and those errors are counted); a limit written in
        # the file clips them
        longest = max((r.input_tokens + r.output_tokens for r in trace_spec.trace.rows), default=0)
        context_limit = max(context_limit, longest + 2)
    output = parse_output(root.sub("output") or Table({}, "output"))
    sampling = parse_sampling(root.sub("sampling"))
    body_table = root.sub("body")  # free-form request-body fields, sent as written
    body = dict(body_table.data) if body_table else {}
    shared = parse_shared_prefix(root.sub("shared_prefix"))
    conversation = parse_conversation(root.sub("conversation"), endpoint)
    load = parse_load(root.sub("load") or Table({}, "load"), trace_spec)
    context_tokens = parse_matrix(root.sub("matrix"), context_limit)
    embeddings = parse_embeddings(root.sub("embeddings"), endpoint, base_dir)
    rerank = parse_rerank(root.sub("rerank"), endpoint)
    tools_table = root.sub("tools")
    tools = parse_tools(tools_table, base_dir) if tools_table is not None else None
    agent = parse_agent(root.sub("agent"), endpoint)
    reasoning = parse_reasoning(root.sub("reasoning"), endpoint)
    images = parse_images(root.sub("images"), base_dir)
    gate = parse_gate(root.sub("gate"))
    tenants = parse_tenants(root.raw("tenants", None), base_dir)
    root.finish()
    check_tenants(tenants, load.mode)
    if tenants and context_tokens:
        raise TableError("matrix", NO_VALUE, "tenants each send their own lengths: remove [matrix]")
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
        tenants=tenants,
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


__all__ = [
    "Scenario",
    "ScenarioError",
    "find_line",
    "load_scenario",
    "parse_scenario",
]
