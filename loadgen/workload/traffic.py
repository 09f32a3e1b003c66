"""From a :class:`~loadgen.workload.scenario.Scenario` to the requests a user sends.

The interface the Locust users call:

- closed loop, one :class:`~loadgen.workload.session.Session` per simulated user::

      session = workload.session(user_index)
      spec, think_s = session.next(warmup=in_warmup)   # wait think_s, then send spec
      session.record_reply(text, ok, reply)            # the reply (text None if not kept; Reply:
                                                       # tool calls, response_id)

- open loop, intended send times (wall-clock ns) decided up front::

      for intended_ns, spec in workload.arrivals(start_ns, target, duration_s, step=k):
          ...                                          # wait until intended_ns, then send

Reproducibility: every random stream is seeded from the scenario's seed and a stable label
(session index, step, block id), never from shared state, so the same scenario gives the same
requests whatever the order in which users run. Multi-turn follow-ups carry the replies the server
actually gave, so those are the same only for the same replies.

Prompt lengths: with a tokenizer (``counter``, or the scenario's ``tokenizer``) each built part
has exactly its target by that tokenizer. Without one, prompts are built with the estimator until
the first response, then with the server's tokens per character learned from ``usage.prompt_tokens``
(:attr:`Workload.lengths`, fed by the load side; see :mod:`loadgen.workload.calibration`), the chat
template's tokens taken off the text. Either way ``RequestSpec.context_tokens`` (what the record calls
requested) is the target: the sampled or trace length, plus the counted fixed parts around it (system
prompt, shared prefix, the history of a conversation), never the corrected size of the text built.
Follow-up turns count the template tokens of their earlier messages in neither.

Warm-up (``load.warmup_prompts``): ``"separate"`` draws warm-up requests from their own streams and
their own shared-prefix pool, so warm-up does not put the measured prompts into the server's prefix
cache; ``"same"`` draws them from the measured streams (warm-up then primes the cache the way a
long-running service would have).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from loadgen.spec.calls import CALLS, Inputs, assert_never
from loadgen.spec.request import Endpoint, RequestSpec
from loadgen.workload.arrivals import gamma_offsets, poisson_offsets, schedule_ns, trace_offsets
from loadgen.workload.calibration import LengthCalibrator
from loadgen.workload.corpus import get_corpus
from loadgen.workload.datasets import MOONCAKE_BLOCK_TOKENS, Trace, TraceRow
from loadgen.workload.images import MAX_SIDE, data_url, png_image
from loadgen.workload.lengths import Distribution, Fixed, sample_length
from loadgen.workload.messages import Turn, chat_messages, count_images, transcript, user_message
from loadgen.workload.prompts import chat_prompt_with_count, fit_text, prompt_with_count
from loadgen.workload.scenario_types import (
    DEFAULT_CONTEXT_LIMIT,
    EmbeddingsSpec,
    LoadSpec,
    OutputSpec,
    PromptSpec,
    RerankSpec,
    Scenario,
)
from loadgen.workload.session import Session
from loadgen.workload.tenants import TenantSpec, tenant_steps
from loadgen.workload.tokens import EstimatorCounter, TokenCounter, load_counter

DOCUMENT_TASK = "With the document above as context:\n\n"
FOLLOWUPS = (
    "Thanks. Here is the next part; do the same for it.\n\n{doc}",
    "Can you go into more detail, using this passage as well?\n\n{doc}",
    "How does that compare with the following?\n\n{doc}",
    "Good. Now look at this and tell me what changes.\n\n{doc}",
)


@dataclass(frozen=True)
class TraceReplay:
    """An open-loop step that replays a trace: its times multiplied by ``time_scale``."""

    trace: Trace
    time_scale: float = 1.0
    offset_s: float = 0.0


class Workload:
    """Requests for one scenario (and, for a matrix, one context length)."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        counter: TokenCounter | None = None,
        salt: str = "",
        lengths: LengthCalibrator | None = None,
        tenant: TenantSpec | None = None,
    ) -> None:
        """``counter``: a tokenizer (default: the scenario's, else the estimator); ``lengths``: the
        calibrator to share (the cells of a matrix talk to one server); ``tenant``: the
        ``[[tenants]]`` entry this workload sends for (its requests carry its name, headers, body
        fields and priority)."""
        if tenant is not None:
            body = {**scenario.body, **tenant.body}
            if tenant.priority is not None:
                body["priority"] = tenant.priority
            scenario = replace(scenario, body=body)
        self.tenant = tenant
        self.scenario = scenario
        self._salt = salt  # keeps the request streams of matrix cells apart
        self.counter = counter if counter is not None else load_counter(scenario.tokenizer)
        # What the load side feeds with each response's usage; used only without a tokenizer.
        self.lengths = lengths if lengths is not None else LengthCalibrator()
        self._prefix_pools: dict[str, list[tuple[str, int]]] = {}
        self._sessions_made: dict[tuple[int, int], int] = {}
        self._additive = isinstance(self.counter, EstimatorCounter)
        system = scenario.prompt.system_prompt
        self._system_tokens = self.counter.count(system) if system else 0
        self._document_task_tokens = self.counter.count(DOCUMENT_TASK)
        # One list for every request: the body builder only reads it.
        self._tools = [dict(t) for t in scenario.tools.tools] if scenario.tools else None
        self._tool_choice = scenario.tools.choice if scenario.tools else None
        self._text_sources = _text_sources(scenario)
        state = None
        if scenario.endpoint == "responses":
            multi = scenario.agent or scenario.conversation
            state = multi.responses_state if multi is not None else None
        # a chained conversation needs its replies stored; one that resends them does not
        self._store = None if state is None else state == "previous_response_id"
        # Load the corpora now, not in the middle of the first request (about 0.5 s each).
        for name in _corpora_used(scenario):
            get_corpus(name)

    @classmethod
    def simple(
        cls,
        context_tokens: int,
        max_tokens: int,
        endpoint: Endpoint = "chat",
        extra: dict[str, Any] | None = None,
        seed: int = 0,
        counter: TokenCounter | None = None,
    ) -> Workload:
        """Chat-style requests of a fixed prompt length, for ``--context-tokens`` without a scenario
        (``counter``: ``--tokenizer``'s, else the estimator and the learned ratio)."""
        if context_tokens < 1 or max_tokens < 1:
            raise ValueError(f"context_tokens and max_tokens must be >= 1, got {context_tokens}, {max_tokens}")
        scenario = Scenario(
            name=f"context-{context_tokens}",
            seed=seed,
            endpoint=endpoint,
            context_limit=max(DEFAULT_CONTEXT_LIMIT, context_tokens + max_tokens),
            prompt=PromptSpec("chat", Fixed(context_tokens)),
            output=OutputSpec(Fixed(max_tokens)),
            body=dict(extra or {}),
            load=LoadSpec(),
        )
        # Each context length its own streams: cells of a matrix must not share prompt prefixes.
        return cls(scenario, counter=counter, salt=f"@{context_tokens}")

    def for_context(self, context_tokens: int) -> Workload:
        """This workload with the per-request prompt length fixed (one cell row of a matrix)."""
        s = self.scenario
        prompt = replace(s.prompt, input_tokens=Fixed(context_tokens))
        return Workload(
            replace(s, prompt=prompt, name=f"{s.name}@{context_tokens}"),
            counter=self.counter,
            salt=f"{self._salt}@{context_tokens}",
            lengths=self.lengths,
        )

    def session(self, user_index: int, step: int = 0) -> Session:
        """The closed-loop request stream of simulated user ``user_index``.

        Each call gives a new stream: the k-th session made for the same ``(user_index, step)`` is
        seeded with k too, so a user that makes a new session every step never resends its earlier
        prompts (a prefix cache would serve those from cache). Same scenario and same sequence of
        calls, same requests.
        """
        key = (user_index, step)
        generation = self._sessions_made.get(key, 0)
        self._sessions_made[key] = generation + 1
        return Session(self, user_index, step, generation)

    def rng(self, label: str) -> random.Random:
        """A random stream for ``label``, independent of every other label (seeded by the scenario)."""
        return random.Random(f"{self.scenario.seed}{self._salt}:{label}")

    def step_targets(self) -> list[float | TraceReplay]:
        """The steps of the scenario's load: concurrencies, rates, or trace replays."""
        load = self.scenario.load
        if load.mode == "open" and load.arrival == "trace":
            trace = self.scenario.trace
            assert trace is not None  # the scenario loader guarantees it
            return [TraceReplay(trace.trace, scale, trace.offset_s) for scale in load.time_scales]
        return list(load.steps())

    def tenant_steps(self, step_loads: list[float]) -> list[tuple[tuple[str, float], ...]]:
        """The scenario's ``[[tenants]]`` loads per step (``workload.tenants.tenant_steps``)."""
        s = self.scenario
        return tenant_steps(s.tenants, step_loads, s.load.mode == "closed")

    def arrivals(
        self,
        start_ns: int,
        rate_or_trace: float | TraceReplay,
        duration_s: float,
        *,
        step: int = 0,
        warmup_s: float = 0.0,
    ) -> Iterator[tuple[int, RequestSpec]]:
        """Open-loop requests with their intended send time (wall-clock ns), lazily, in time order.

        ``rate_or_trace`` is requests/s (Poisson or gamma, as the scenario's ``arrival`` says) or a
        :class:`TraceReplay`. Requests whose intended time falls within ``warmup_s`` of the start
        are warm-up requests (see the module docstring). Nothing here sleeps.
        """
        s = self.scenario
        timing = self.rng(f"arrivals:{step}")
        measured = self.rng(f"open:{step}")
        warm = measured if s.load.warmup_prompts == "same" else self.rng(f"open-warmup:{step}")
        warmup_ns = start_ns + round(warmup_s * 1e9)
        if isinstance(rate_or_trace, TraceReplay):
            replay = rate_or_trace
            rows = trace_offsets(replay.trace, replay.time_scale, replay.offset_s)
            for intended_ns, row in schedule_ns(start_ns, rows, duration_s):
                in_warmup = intended_ns < warmup_ns
                spec = self.request(warm if in_warmup else measured, in_warmup, row)
                spec.intended_ns = intended_ns
                yield intended_ns, spec
            return
        rate = float(rate_or_trace)
        if s.load.arrival == "gamma":
            offsets = gamma_offsets(rate, s.load.burstiness, timing)
        else:
            offsets = poisson_offsets(rate, timing)
        for intended_ns, _ in schedule_ns(start_ns, ((t, None) for t in offsets), duration_s):
            in_warmup = intended_ns < warmup_ns
            spec = self.request(warm if in_warmup else measured, in_warmup)
            spec.intended_ns = intended_ns
            yield intended_ns, spec

    # -- building requests -------------------------------------------------------------------

    def request(self, rng: random.Random, warmup: bool, row: TraceRow | None = None) -> RequestSpec:
        """A single request (no conversation) for the scenario's endpoint, drawn from ``rng``."""
        match CALLS[self.scenario.endpoint].inputs:
            case Inputs.BATCH:
                return self._embeddings(rng)
            case Inputs.QUERY_DOCUMENTS:
                return self._rerank(rng)
            case Inputs.MESSAGES | Inputs.PROMPT:
                return self._render(self._single(rng, warmup, row), [], None, 0)
            case unknown:
                assert_never(unknown)

    def _text(self, n_tokens: int, rng: random.Random, counter: TokenCounter) -> tuple[str, int]:
        """Plain corpus text of ``n_tokens`` (embedding inputs, rerank texts, tool results)."""
        source = self._text_sources[0] if len(self._text_sources) == 1 else rng.choice(self._text_sources)
        return prompt_with_count(n_tokens, _text_rng(rng), source, counter)

    def _embeddings(self, rng: random.Random) -> RequestSpec:
        s = self.scenario
        e = s.embeddings or EmbeddingsSpec()
        counter = self._builder()
        # each input is its own sequence to the server: the template's tokens (BOS/EOS) come off each
        template = self.lengths.overhead(1) if counter is self.lengths.counter else 0
        batch = sample_length(e.batch, rng, MAX_BATCH)
        lengths = e.input_tokens or s.prompt.input_tokens
        inputs: list[str] = []
        total = 0
        for _ in range(batch):
            n = sample_length(lengths, rng, s.context_limit)
            text, _ = self._text(max(1, n - template), rng, counter)
            inputs.append(text)
            total += n
        return self._tag(
            RequestSpec(
                endpoint=s.endpoint,
                inputs=inputs,
                max_tokens=1,
                stream=False,
                extra=dict(s.body),
                context_tokens=total,
                source=f"{s.endpoint}:{self._text_sources[0] if len(self._text_sources) == 1 else 'mixed'}",
            )
        )

    def _rerank(self, rng: random.Random) -> RequestSpec:
        """A query and its documents; ``context_tokens`` counts the query once per document, as a
        cross-encoder reads it (one query + document sequence each)."""
        s = self.scenario
        r = s.rerank or RerankSpec()
        counter = self._builder()
        n_docs = sample_length(r.documents, rng, MAX_BATCH)
        q = sample_length(r.query_tokens, rng, s.context_limit - 1)
        query, _ = self._text(q, rng, counter)
        documents: list[str] = []
        total = 0
        for _ in range(n_docs):
            d = sample_length(r.document_tokens, rng, max(1, s.context_limit - q))
            text, _ = self._text(d, rng, counter)
            documents.append(text)
            total += q + d
        return self._tag(
            RequestSpec(
                endpoint=s.endpoint,
                query=query,
                documents=documents,
                max_tokens=1,
                stream=False,
                extra=dict(s.body),
                context_tokens=total,
                source=s.endpoint,
            )
        )

    def _images(self, rng: random.Random) -> tuple[str, ...]:
        """The image parts' data URLs of one request (drawn after its text: scenarios without
        images draw the same requests as before)."""
        spec = self.scenario.images
        if spec is None:
            return ()
        count = max(0, round(spec.count.sample(rng)))
        if spec.file_urls:
            return tuple(spec.file_urls[rng.randrange(len(spec.file_urls))] for _ in range(count))
        urls = []
        for _ in range(count):
            width = _side(spec.width, rng)
            height = _side(spec.height, rng)
            urls.append(data_url(png_image(width, height, self.scenario.seed, rng.getrandbits(32))))
        return tuple(urls)

    def _builder(self) -> TokenCounter:
        """The counter prompts are built with now: the tokenizer; without one, the server's learned
        ratio once a response has taught it, the estimator before."""
        if self._additive and self.lengths.ready:
            return self.lengths.counter
        return self.counter

    @staticmethod
    def _total(text: str, estimated: int, counter: TokenCounter) -> int:
        """Tokens of ``text`` whose parts add up to ``estimated`` by the estimator.

        The estimator is additive over runs, so the sum of the parts is exact and nothing is
        re-counted on the request path; any other counter counts the assembled text (the learned
        ratio in O(1)).
        """
        return estimated if isinstance(counter, EstimatorCounter) else counter.count(text)

    def _prefix_pool(self, warmup: bool) -> list[tuple[str, int]]:
        """The shared prefixes (system prompts or documents) and their tokens, built once per phase."""
        spec = self.scenario.shared_prefix
        assert spec is not None
        key = "warmup" if warmup and self.scenario.load.warmup_prompts == "separate" else "measure"
        pool = self._prefix_pools.get(key)
        if pool is None:
            pool = []
            for i in range(spec.pool):
                rng = random.Random(f"{self.scenario.seed}:prefix:{key}:{i}")
                n = sample_length(spec.tokens, rng, self.scenario.context_limit - 2)
                pool.append(prompt_with_count(n, rng, spec.source, self.counter))
            self._prefix_pools[key] = pool
        return pool

    def _prefix(self, rng: random.Random, warmup: bool, counter: TokenCounter) -> tuple[str, int] | None:
        """A shared prefix (built once per phase with the tokenizer or estimator, so that its text
        stays the same for the prefix cache; counted with ``counter``) or a unique one."""
        spec = self.scenario.shared_prefix
        if spec is None:
            return None
        if rng.random() < spec.ratio:
            text, tokens = self._prefix_pool(warmup)[rng.randrange(spec.pool)]
            return text, tokens if counter is self.counter else counter.count(text)
        # Not shared: a prefix of the same length distribution, unique to this request.
        n = sample_length(spec.tokens, rng, self.scenario.context_limit - 2)
        return prompt_with_count(n, _text_rng(rng), spec.source, counter)

    def _single(self, rng: random.Random, warmup: bool, row: TraceRow | None = None) -> Turn:
        """A first (or only) turn: optional shared prefix, the prompt, and its output length."""
        s = self.scenario
        limit = s.context_limit
        counter = self._builder()
        calibrated = counter is self.lengths.counter
        prefix = self._prefix(rng, warmup, counter)
        prefix_tokens = prefix[1] if prefix else 0
        system = s.prompt.system_prompt
        system_tokens = self._system_tokens
        if system and counter is not self.counter:
            system_tokens = counter.count(system)
        room = max(1, limit - prefix_tokens - system_tokens - 1)
        # The chat template's tokens (learned; 0 before or with a tokenizer) come off the text built.
        system_message = system is not None or (
            prefix is not None and s.shared_prefix is not None and s.shared_prefix.kind == "system"
        )
        template = self.lengths.overhead(2 if system_message else 1) if calibrated else 0
        out_known: int | None = None
        followups: tuple[tuple[str, int | None], ...] = ()
        source = s.prompt.source
        if source == "trace":
            if row is None:
                assert s.trace is not None
                row = s.trace.trace.rows[rng.randrange(len(s.trace.trace.rows))]
            n_in = min(room, max(1, row.input_tokens))
            text, text_tokens = self._trace_text(row, max(1, n_in - template), counter)
            out_known = row.output_tokens
            label = f"trace:{s.trace.format if s.trace else 'trace'}"
        elif source in ("sharegpt", "jsonl"):
            data = s.prompt.dataset
            pick = data[rng.randrange(len(data))]
            text = pick.prompt
            text_tokens = counter.count(text)
            n_in = text_tokens + template  # no target: what the text counts, as the server will
            out_known = pick.output_tokens[0] if pick.output_tokens else None
            later = pick.turns[1:]
            replies = [*pick.output_tokens[1:], *([None] * len(later))]
            followups = tuple(zip(later, replies[: len(later)], strict=True))
            label = source
        else:
            n_in = sample_length(s.prompt.input_tokens, rng, room)
            if source == "chat":
                task = rng.choice(s.prompt.tasks)
                corpus = rng.choice(s.prompt.corpora)
                text, text_tokens = chat_prompt_with_count(
                    max(1, n_in - template), _text_rng(rng), task, corpus, counter
                )
                label = f"chat:{task}/{corpus}"
            else:
                text, text_tokens = prompt_with_count(max(1, n_in - template), _text_rng(rng), source, counter)
                label = source
        max_tokens = self._max_tokens(rng, out_known)
        part_tokens = text_tokens  # the part built to a length (n_in less the template's tokens)
        if prefix is not None:
            if s.shared_prefix is not None and s.shared_prefix.kind == "system":
                if system is None:
                    system, system_tokens = prefix
                else:
                    system = f"{system}\n\n{prefix[0]}"
                    system_tokens = self._total(system, system_tokens + 1 + prefix_tokens, counter)
            else:
                # The document first (the shared, cacheable part), then this request's task.
                joined = f"{prefix[0]}\n\n{DOCUMENT_TASK}{text}"
                task_tokens = self._document_task_tokens if counter is self.counter else counter.count(DOCUMENT_TASK)
                text_tokens = self._total(joined, prefix_tokens + 1 + task_tokens + text_tokens, counter)
                text = joined
        # requested: the fixed parts as counted, and the target of the part built to a length
        prompt_tokens = system_tokens + text_tokens - part_tokens + n_in
        max_tokens = max(1, min(max_tokens, limit - prompt_tokens))
        return Turn(system, text, prompt_tokens, max_tokens, label, followups, self._images(rng))

    def _max_tokens(self, rng: random.Random, known: int | None) -> int:
        out = self.scenario.output
        if known is not None and out.from_dataset and known > 0:
            return known
        return sample_length(out.max_tokens, rng, self.scenario.context_limit - 1)

    def _trace_text(self, row: TraceRow, n_tokens: int, counter: TokenCounter) -> tuple[str, int]:
        """Prompt text (and tokens) for a trace row; Mooncake ``hash_ids`` get one text per block.

        Block ``h`` is always the same excerpt (seeded by the scenario seed and ``h``), so rows
        that share ids share those blocks byte for byte. Full blocks are 511 tokens and a newline
        by the tokenizer when there is one, else by the estimator (not by the learned ratio, which
        moves: the blocks' text must not). The last block takes the rest of the length by
        ``counter``: a prefix of that block's excerpt, which may run past the block's 512 tokens
        when the counter counts less than the estimator (and which cannot be shorter than nothing:
        full blocks that already count more than ``n_tokens`` leave the prompt over its target).
        """
        if not row.hash_ids:
            rng = random.Random(f"{self.scenario.seed}:row:{row.offset_s}")
            return prompt_with_count(n_tokens, rng, "prose", counter)
        additive = isinstance(counter, EstimatorCounter)
        tokenizer = counter is self.counter and not additive
        corpus = get_corpus("prose")
        parts: list[str] = []
        tokens = 0
        left = n_tokens
        for i, h in enumerate(row.hash_ids):
            if left <= 0:
                break
            last = i == len(row.hash_ids) - 1 or left <= MOONCAKE_BLOCK_TOKENS
            start = corpus.random_start(random.Random(f"{self.scenario.seed}:block:{h}").random())
            if last and not additive:
                head = "".join(parts)
                more = n_tokens - counter.count(head)
                long, _ = corpus.excerpt_counted(start, 2 * max(more, 0) + 16)
                return fit_text(head, long, "", n_tokens, counter)
            if last:
                text, k = corpus.excerpt_counted(start, min(left, MOONCAKE_BLOCK_TOKENS))
                parts.append(text)
                tokens += k
                break
            # A full block: 511 tokens of text and a newline, so blocks never merge into one word.
            text, k = corpus.excerpt_counted(start, MOONCAKE_BLOCK_TOKENS - 1)
            if tokenizer:
                longer, _ = corpus.excerpt_counted(start, 2 * MOONCAKE_BLOCK_TOKENS)
                text, k = fit_text("", longer, "", MOONCAKE_BLOCK_TOKENS - 1, counter)
            parts.append(text + "\n")
            tokens += k + 1
            left -= MOONCAKE_BLOCK_TOKENS
        joined = "".join(parts)
        return joined, self._total(joined, tokens, counter)

    def _followup(self, rng: random.Random, room: int) -> tuple[str, int, int]:
        """A follow-up user message built on a new excerpt: its text, its tokens and its target."""
        conv = self.scenario.conversation
        assert conv is not None
        counter = self._builder()
        n = sample_length(conv.followup_tokens, rng, max(1, room))
        frame = rng.choice(FOLLOWUPS)
        overhead = counter.count(frame.replace("{doc}", "x")) - counter.count("x")
        corpus = rng.choice(self.scenario.prompt.corpora)
        doc, doc_tokens = prompt_with_count(max(0, n - overhead), _text_rng(rng), corpus, counter)
        text = frame.replace("{doc}", doc).rstrip()
        tokens = self._total(text, overhead + doc_tokens if doc else counter.count(text), counter)
        return text, tokens, n if doc else tokens

    def _extra(self, max_tokens: int) -> dict[str, Any]:
        s = self.scenario
        extra: dict[str, Any] = dict(s.sampling)
        if s.output.ignore_eos:
            extra["ignore_eos"] = True
        if s.output.min_tokens == "max_tokens":
            extra["min_tokens"] = max_tokens
        elif s.output.min_tokens:
            extra["min_tokens"] = min(s.output.min_tokens, max_tokens)
        reasoning = s.reasoning
        if reasoning is not None and reasoning.effort is not None:
            if s.endpoint == "responses":
                extra["reasoning"] = {"effort": reasoning.effort}
            else:
                extra["reasoning_effort"] = reasoning.effort
        if reasoning is not None and reasoning.thinking is not None:
            extra["chat_template_kwargs"] = {"enable_thinking": reasoning.thinking}
        if self._store is not None:
            extra["store"] = self._store
        kwargs = extra.get("chat_template_kwargs")
        extra.update(s.body)
        if isinstance(kwargs, dict) and isinstance(s.body.get("chat_template_kwargs"), dict):
            extra["chat_template_kwargs"] = {**kwargs, **s.body["chat_template_kwargs"]}
        return extra

    def _render(
        self, turn: Turn, history: list[dict[str, Any]], conversation: str | None, turn_index: int
    ) -> RequestSpec:
        """A RequestSpec for the scenario's endpoint; ``history`` holds earlier turns (chat form)."""
        messages = [*history, user_message(turn)] if history else chat_messages(turn)
        return self._spec(messages, turn.prompt_tokens, turn.max_tokens, turn.source, conversation, turn_index)

    def _spec(
        self,
        messages: list[dict[str, Any]],
        prompt_tokens: int,
        max_tokens: int,
        source: str,
        conversation: str | None,
        turn_index: int,
    ) -> RequestSpec:
        """A generative request: ``messages`` in chat form (completions also get them as one
        transcript, the prompt sent), with the scenario's tools and body fields."""
        spec = RequestSpec(
            endpoint=self.scenario.endpoint,
            messages=messages,
            max_tokens=max_tokens,
            extra=self._extra(max_tokens),
            context_tokens=prompt_tokens,
            source=source,
            conversation=conversation,
            turn=turn_index,
            tools=self._tools,
            tool_choice=self._tool_choice,
            images=count_images(messages) if self.scenario.images else 0,
        )
        if CALLS[spec.endpoint].inputs is Inputs.PROMPT:
            spec.prompt = transcript(messages)
        return self._tag(spec)

    def _tag(self, spec: RequestSpec) -> RequestSpec:
        """The tenant's name and extra headers on a request (its body fields are in the scenario's)."""
        tenant = self.tenant
        if tenant is not None:
            spec.tenant = tenant.name
            if tenant.headers:
                spec.headers = tenant.headers
        return spec


def _text_rng(rng: random.Random) -> random.Random:
    """The stream a prompt's text is drawn from: one draw of ``rng``, so the lengths, tasks and
    output lengths ``rng`` gives next do not depend on how much text the counter needed."""
    return random.Random(rng.getrandbits(64))


MAX_BATCH = 100_000  # inputs of an embeddings request, documents of a rerank request


def _side(dist: Distribution, rng: random.Random) -> int:
    return min(MAX_SIDE, max(1, round(dist.sample(rng))))


def _text_sources(s: Scenario) -> tuple[str, ...]:
    """The corpora of plain texts (embedding inputs, rerank texts, tool results)."""
    if s.prompt.source in ("prose", "code"):
        return (s.prompt.source,)
    return s.prompt.corpora


def _corpora_used(s: Scenario) -> set[str]:
    names: set[str] = set()
    if s.agent is not None or CALLS[s.endpoint].inputs in (Inputs.BATCH, Inputs.QUERY_DOCUMENTS):
        names.update(_text_sources(s))
    if s.prompt.source in ("chat", "prose", "code") or s.conversation is not None:
        names.update(s.prompt.corpora if s.prompt.source == "chat" or s.conversation else (s.prompt.source,))
    if s.shared_prefix is not None:
        names.add(s.shared_prefix.source)
    if s.prompt.source == "trace":
        names.add("prose")
    return names
