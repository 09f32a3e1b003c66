"""``loadgen scenario check FILE`` and ``loadgen scenario show FILE [-n N]``.

``check`` validates a scenario (and the files it names) and summarises it; ``show`` also draws N
requests as the load generator would and prints their length statistics, arrival statistics and a
few examples. Both return a process exit status: 0 when the scenario is usable, 2 when it is not
(the error goes to stderr, without a traceback).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from typing import TextIO

from loadgen.spec.calls import CALLS, GENERATIVE, Inputs
from loadgen.spec.request import Reply, RequestSpec, ToolCall
from loadgen.workload.errors import WorkloadError
from loadgen.workload.scenario import Scenario, load_scenario
from loadgen.workload.tenants import tenant_steps
from loadgen.workload.traffic import TraceReplay, Workload

EXIT_OK = 0
EXIT_INVALID = 2


def check_main(path: str, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Validate the scenario at ``path``; print a summary (stdout) or the error (stderr)."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        scenario = load_scenario(path)
        Workload(scenario)  # loads the tokenizer and corpora it names
    except WorkloadError as exc:
        print(f"error: {exc}", file=err)
        return EXIT_INVALID
    print(f"{path}: ok", file=out)
    for line in describe(scenario):
        print(f"  {line}", file=out)
    return EXIT_OK


def show_main(path: str, n: int = 20, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Validate the scenario, draw ``n`` requests and print their statistics and examples."""
    out = out or sys.stdout
    err = err or sys.stderr
    if n < 1:
        print(f"error: -n must be >= 1, got {n}", file=err)
        return EXIT_INVALID
    try:
        scenario = load_scenario(path)
        workload = Workload(scenario)
        print(f"{path}", file=out)
        for line in describe(scenario):
            print(f"  {line}", file=out)
        cells = [workload.for_context(c) for c in scenario.context_tokens] or [workload]
        for cell in cells:
            specs, times_ns = draw(cell, n)
            print("", file=out)
            if scenario.context_tokens:
                print(f"context {cell.scenario.prompt.input_tokens.describe()}:", file=out)
            for line in statistics(specs, times_ns):
                print(f"  {line}", file=out)
            for line in examples(specs, 3):
                print(f"  {line}", file=out)
    except WorkloadError as exc:
        print(f"error: {exc}", file=err)
        return EXIT_INVALID
    return EXIT_OK


def describe(s: Scenario) -> list[str]:
    """Human-readable lines summarising a scenario."""
    lines = [f"name: {s.name}" + (f" ({s.description})" if s.description else "")]
    lines.append(f"endpoint: {s.endpoint}; seed {s.seed}; context limit {s.context_limit} tokens")
    lines.append(f"tokens counted by: {s.tokenizer or 'built-in estimator'}")
    p = s.prompt
    if p.source in ("chat", "prose", "code"):
        lines.append(f"prompt: {p.source}, input {p.input_tokens.describe()}")
    elif p.source == "trace":
        lines.append("prompt: lengths (and Mooncake prefix blocks) from the trace")
    else:
        lines.append(f"prompt: {p.source} dataset {p.path} ({len(p.dataset)} conversations)")
    o = s.output
    force = []
    if o.ignore_eos:
        force.append("ignore_eos")
    if o.min_tokens is not None:
        force.append(f"min_tokens={o.min_tokens}")
    src = (
        "dataset/trace lengths where known, else "
        if o.from_dataset and p.source not in ("chat", "prose", "code")
        else ""
    )
    if s.endpoint in GENERATIVE:
        limits = f"; {', '.join(force)}" if force else ""
        lines.append(f"output: max_tokens {src}{o.max_tokens.describe()}{limits}")
    if s.sampling or s.body:
        lines.append(f"request body: {dict(s.sampling) | dict(s.body)}")
    if s.shared_prefix:
        sp = s.shared_prefix
        lines.append(
            f"shared prefix: {sp.kind}, {sp.tokens.describe()}, {sp.ratio:.0%} of requests share one of {sp.pool}"
        )
    if s.conversation:
        c = s.conversation
        lines.append(
            f"conversations: turns {c.turns.describe()}; think time {c.think_time_s.describe()} s; "
            f"follow-ups {c.followup_tokens.describe()}"
        )
    if s.embeddings:
        e = s.embeddings
        per_input = (e.input_tokens or s.prompt.input_tokens).describe()
        lines.append(f"embeddings: batch {e.batch.describe()} inputs of {per_input} tokens")
    if s.rerank:
        r = s.rerank
        lines.append(
            f"rerank: query {r.query_tokens.describe()} tokens, {r.documents.describe()} documents "
            f"of {r.document_tokens.describe()} tokens"
        )
    if s.tools:
        where = f" from {s.tools.file}" if s.tools.file else ""
        choice = f"; tool_choice {s.tools.choice}" if s.tools.choice is not None else ""
        lines.append(f"tools: {', '.join(s.tools.names)}{where}{choice}")
    if s.agent:
        a = s.agent
        lines.append(
            f"agent: up to {a.max_turns} turns a task; tool results {a.tool_result_tokens.describe()} tokens; "
            f"tool latency {a.tool_latency_s.describe()} s; think time {a.think_time_s.describe()} s"
        )
    multi = s.agent or s.conversation
    if s.endpoint == "responses" and multi is not None:
        lines.append(f"responses state: {multi.responses_state}")
    if s.reasoning:
        lines.append(f"reasoning: effort {s.reasoning.effort}; thinking {s.reasoning.thinking}")
    if s.images:
        im = s.images
        if im.files:
            lines.append(f"images: {im.count.describe()} a request from {len(im.files)} files")
        else:
            lines.append(
                f"images: {im.count.describe()} a request, {im.format}, width {im.width.describe()}, "
                f"height {im.height.describe()} pixels"
            )
    lines.extend(_load_lines(s))
    return lines


def _load_lines(s: Scenario) -> list[str]:
    """The summary lines of a scenario's load: the pattern, the steps and the context matrix."""
    lines: list[str] = []
    ld = s.load
    if s.tenants:
        steps = tenant_steps(s.tenants, [float(x) for x in ld.steps()], ld.mode == "closed")
        totals = ", ".join(f"{sum(v for _, v in step):g}" for step in steps)
        kind = "closed loop, users" if ld.mode == "closed" else "open loop, requests/s"
        lines.append(f"load: {kind} {totals} a step, split among {len(s.tenants)} tenants (below)")
    elif ld.mode == "closed":
        lines.append(f"load: closed loop, concurrency {', '.join(str(c) for c in ld.concurrency)}")
    elif ld.arrival == "trace":
        trace = s.trace
        assert trace is not None
        lines.append(
            f"load: trace replay of {trace.path} ({len(trace.trace.rows)} requests over "
            f"{trace.trace.duration_s:.0f} s), time scales {', '.join(f'{x:g}' for x in ld.time_scales)}"
        )
    else:
        kind = "Poisson" if ld.arrival == "poisson" else f"gamma (CV {ld.burstiness:g})"
        lines.append(f"load: open loop, {kind} arrivals at {', '.join(f'{r:g}' for r in ld.rates)} requests/s")
    per_step = f", at most {ld.requests_per_step} requests" if ld.requests_per_step else ""
    lines.append(
        f"steps: {ld.step_seconds:g} s each (first {ld.warmup_seconds:g} s warm-up, prompts {ld.warmup_prompts})"
        f"{per_step}"
    )
    if s.context_tokens:
        lines.append(f"matrix: context tokens {', '.join(str(c) for c in s.context_tokens)} x every step")
    if s.tenants:
        steps = tenant_steps(s.tenants, [float(x) for x in ld.steps()], ld.mode == "closed")
        unit = "users" if ld.mode == "closed" else "req/s"
        for k, t in enumerate(s.tenants):
            load = ", ".join(f"{step[k][1]:g}" for step in steps)
            extra = [f"priority {t.priority}"] if t.priority is not None else []
            extra += [f"slo {t.slo_text}"] if t.slo_text else []
            extra += [f"headers {', '.join(sorted(t.headers))}"] if t.headers else []
            where = t.scenario or "this file's workload"
            lines.append(f"tenant {t.name}: {where}; {unit} {load}" + "".join(f"; {x}" for x in extra))
    return lines


def draw(workload: Workload, n: int) -> tuple[list[RequestSpec], list[int]]:
    """``n`` requests as the first step would send them (and their intended times, open loop)."""
    s = workload.scenario
    if s.load.mode == "open":
        target = workload.step_targets()[0]
        horizon_s = 1e9 if not isinstance(target, TraceReplay) else target.trace.duration_s * target.time_scale + 1
        specs: list[RequestSpec] = []
        times: list[int] = []
        for t_ns, spec in workload.arrivals(0, target, horizon_s):
            specs.append(spec)
            times.append(t_ns)
            if len(specs) >= n:
                break
        return specs, times
    users = max(1, int(max(s.load.concurrency)))
    # With conversations, few users so that the draw shows later turns too.
    wanted = max(1, n // 4) if s.conversation or s.agent else n
    sessions = [workload.session(i) for i in range(min(users, wanted))]
    specs = []
    i = 0
    while len(specs) < n:
        session = sessions[i % len(sessions)]
        spec, _ = session.next()
        specs.append(spec)
        # no server here: replies are stood in for; an agent's calls its first tool each time
        reply = None
        if s.agent is not None and s.tools is not None:
            reply = Reply(None, [ToolCall(f"call-{i}", s.tools.names[0], "{}")])
        session.record_reply(None, True, reply)
        i += 1
    return specs, []


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[k]


def _stats_line(name: str, values: Sequence[float]) -> str:
    if not values:
        return f"{name}: none"
    mean = sum(values) / len(values)
    return (
        f"{name}: mean {mean:.0f}, p50 {_pct(values, 0.5):.0f}, p90 {_pct(values, 0.9):.0f}, "
        f"p99 {_pct(values, 0.99):.0f}, min {min(values):.0f}, max {max(values):.0f}"
    )


def statistics(specs: Sequence[RequestSpec], times_ns: Sequence[int]) -> list[str]:
    """Length statistics of ``specs`` and, when given, arrival statistics of ``times_ns``."""
    lines = [f"{len(specs)} requests drawn"]
    lines.append(_stats_line("prompt tokens (requested)", [s.context_tokens or 0 for s in specs]))
    lines.append(_stats_line("max_tokens", [s.max_tokens for s in specs]))
    sources: dict[str, int] = {}
    for s in specs:
        sources[s.source] = sources.get(s.source, 0) + 1
    lines.append("sources: " + ", ".join(f"{k} {v}" for k, v in sorted(sources.items(), key=lambda kv: -kv[1])))
    convs = {s.conversation for s in specs if s.conversation}
    if convs:
        lines.append(f"conversations: {len(convs)}, turns up to {max(s.turn for s in specs) + 1}")
    if len(times_ns) >= 2:
        gaps = [(b - a) / 1e9 for a, b in itertools.pairwise(times_ns)]
        mean = sum(gaps) / len(gaps)
        var = sum((g - mean) ** 2 for g in gaps) / len(gaps)
        span_s = (times_ns[-1] - times_ns[0]) / 1e9
        rate = (len(times_ns) - 1) / span_s if span_s > 0 else float("inf")
        cv = (var**0.5) / mean if mean > 0 else 0.0
        lines.append(f"arrivals: {rate:.3g} requests/s over {span_s:.3g} s; inter-arrival CV {cv:.2f}")
    return lines


def examples(specs: Sequence[RequestSpec], k: int, width: int = 160) -> list[str]:
    lines = []
    for i, spec in enumerate(specs[:k]):
        inputs_kind = CALLS[spec.endpoint].inputs
        if inputs_kind is Inputs.BATCH:
            inputs = spec.inputs or []
            text = inputs[0] if inputs else ""
            head = f"{len(inputs)} inputs, first"
        elif inputs_kind is Inputs.QUERY_DOCUMENTS:
            text = f"{spec.query} | {(spec.documents or [''])[0]}"
            head = f"query and {len(spec.documents or [])} documents, first"
        elif spec.messages:
            last = spec.messages[-1]
            text = _text(last.get("content"))
            head = f"{len(spec.messages)} messages, last {last['role']}"
            if spec.images:
                head += f", {spec.images} images"
            if spec.tools:
                head += f", {len(spec.tools)} tools"
        else:
            text = spec.prompt or ""
            head = "prompt"
        snippet = " ".join(text.split())
        if len(snippet) > width:
            snippet = snippet[: width - 3] + "..."
        lines.append(f"example {i + 1} [{spec.source}; {head}; {spec.context_tokens} tokens -> {spec.max_tokens}]:")
        lines.append(f"    {snippet}")
    return lines


def _text(content: object) -> str:
    """A message's text (content parts: their text parts; an image is shown as [image])."""
    if isinstance(content, list):
        return " ".join(
            str(p.get("text", "")) if p.get("type") == "text" else "[image]" for p in content if isinstance(p, dict)
        )
    return "" if content is None else str(content)
