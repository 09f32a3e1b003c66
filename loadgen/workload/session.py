"""The closed-loop request stream of one simulated user: single requests, multi-turn
conversations and agent tasks (tool calls answered with tool results).

:class:`Session` keeps a user's history between requests and decides what comes next: a follow-up
turn, the tool results of the last reply's calls, or a new conversation. The request text itself is
built by its :class:`~loadgen.workload.traffic.Workload`, from the session's own random streams.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from loadgen.spec.request import Reply, RequestSpec, ToolCall
from loadgen.workload.lengths import sample_length
from loadgen.workload.messages import Turn, chat_messages, count_images
from loadgen.workload.prompts import build_prompt

if TYPE_CHECKING:
    from loadgen.workload.traffic import Workload


class Session:
    """The closed-loop request stream of one simulated user: single requests, conversations or
    agent tasks.

    Not thread-safe: one session belongs to one user. ``next()`` returns the request to send and
    the think time (s) to wait before sending it; ``record_reply()`` reports how it went. A failed
    request (``ok=False``), or a ``next()`` without a reply recorded, ends the conversation: the
    following request starts a new one. A reply recorded as ``None`` (the transport kept no text)
    is stood in for by corpus text of the requested output length, and the follow-up's ``source``
    says ``stand-in``.

    Agent tasks (``[agent]``): a task is a user prompt and the tools; a reply that calls tools is
    answered, while the task has turns left (``max_turns``), by a request that appends the reply
    (with its ``tool_calls``) and one ``tool`` message per call (a result of ``tool_result_tokens``),
    after the tools' run time and the think time. A reply without tool calls, a failure or the cap
    ends the task. ``RequestSpec.conversation`` is the task, ``turn`` its step, ``max_turns`` the cap.

    Responses API (``responses_state = "previous_response_id"``): when a reply came with its
    ``response_id``, the next turn chains to it (``previous_response_id``) and ``new_from`` marks
    the messages the stored response does not hold (the new user turn, or the tool results); the
    whole history stays in ``messages``. Without an id the next turn resends everything.
    """

    def __init__(self, workload: Workload, user_index: int, step: int = 0, generation: int = 0) -> None:
        self.workload = workload
        self.user_index = user_index
        label = f"{user_index}:{step}:{generation}"
        self._label = label.replace(":", ".")
        self._rng = workload.rng(f"user:{label}")
        separate = workload.scenario.load.warmup_prompts == "separate"
        self._warm_rng = workload.rng(f"user-warmup:{label}") if separate else self._rng
        self._history: list[dict[str, Any]] = []
        self._history_tokens = 0
        self._turns_left = 0
        self._turn = 0
        self._conversations = 0
        self._conversation: str | None = None
        self._phase_warmup = False
        self._pending: RequestSpec | None = None
        self._stand_in = False
        self._dataset_turns: list[tuple[str, int | None]] = []
        self._calls: list[ToolCall] = []  # the last reply's tool calls, to answer next
        self._response_id: str | None = None  # the stored response the next turn can chain to
        self._stored = 0  # messages that response holds

    @property
    def conversations_started(self) -> int:
        """Conversations (or agent tasks) started so far."""
        return self._conversations

    def next(self, warmup: bool = False) -> tuple[RequestSpec, float]:
        """The next request and the think time (seconds) to wait before sending it."""
        w = self.workload
        s = w.scenario
        rng = self._warm_rng if warmup else self._rng
        if s.agent is not None:
            return self._agent_next(rng, warmup)
        conv = s.conversation
        if conv is None:
            spec = w.request(rng, warmup)
            self._pending = spec
            return spec, max(0.0, s.load.think_time_s.sample(rng))
        continuing = (
            self._conversation is not None
            and self._pending is None
            and self._turns_left > 0
            and warmup == self._phase_warmup
        )
        if continuing:
            room = s.context_limit - self._history_tokens - 2
            if room > 16:
                known: int | None = None
                if self._dataset_turns:
                    text, known = self._dataset_turns.pop(0)
                    label = f"{s.prompt.source}:followup"
                    text_tokens = target = w._builder().count(text)
                else:
                    text, text_tokens, target = w._followup(rng, room // 2)
                    label = "followup"
                max_tokens = w._max_tokens(rng, known)
                max_tokens = min(max_tokens, s.context_limit - self._history_tokens - target)
                if max_tokens >= 1:
                    if self._stand_in:
                        label += "+stand-in"
                    turn = Turn(None, text, self._history_tokens + target, max_tokens, label)
                    spec = w._render(turn, self._history, self._conversation, self._turn)
                    self._chain(spec, conv.responses_state)
                    self._pending = spec
                    self._history.append({"role": "user", "content": text})
                    self._history_tokens += text_tokens
                    self._turns_left -= 1
                    self._turn += 1
                    return spec, max(0.0, conv.think_time_s.sample(rng))
        # A new conversation.
        self._start(warmup)
        first = w._single(rng, warmup)
        turns = sample_length(conv.turns, rng, 1_000_000)
        self._dataset_turns = list(first.followups)
        if s.prompt.source in ("sharegpt", "jsonl"):
            # A dataset conversation has the turns its users wrote, up to the drawn number.
            turns = min(turns, 1 + len(self._dataset_turns))
        self._turns_left = turns - 1
        spec = w._render(first, [], self._conversation, 0)
        self._history = chat_messages(first)
        self._history_tokens = first.prompt_tokens
        self._pending = spec
        self._turn = 1
        return spec, 0.0

    def _start(self, warmup: bool) -> None:
        """A new conversation or agent task: a new id, nothing to chain to."""
        s = self.workload.scenario
        self._phase_warmup = warmup
        self._conversations += 1
        phase = "w" if warmup else "m"
        self._conversation = f"{s.seed}-{phase}-{self._label}-{self._conversations}"
        self._stand_in = False
        self._calls = []
        self._response_id = None
        self._stored = 0

    def _chain(self, spec: RequestSpec, state: str) -> None:
        """Chain ``spec`` to the stored response of the previous turn, when there is one."""
        if state != "previous_response_id" or self._response_id is None:
            return
        spec.previous_response_id = self._response_id
        spec.new_from = self._stored
        if spec.images and spec.messages is not None:
            spec.images = count_images(spec.messages[self._stored :])

    def _agent_next(self, rng: random.Random, warmup: bool) -> tuple[RequestSpec, float]:
        w = self.workload
        agent = w.scenario.agent
        assert agent is not None
        continuing = (
            self._conversation is not None
            and self._pending is None
            and bool(self._calls)
            and self._turn < agent.max_turns
            and warmup == self._phase_warmup
        )
        if continuing:
            answered = self._tool_results(rng)
            if answered is not None:
                return answered
        self._start(warmup)
        first = w._single(rng, warmup)
        spec = w._render(first, [], self._conversation, 0)
        spec.max_turns = agent.max_turns
        self._history = chat_messages(first)
        self._history_tokens = first.prompt_tokens
        self._pending = spec
        self._turn = 1
        return spec, 0.0

    def _tool_results(self, rng: random.Random) -> tuple[RequestSpec, float] | None:
        """The next step of an agent task: the history and a result for each tool call (None
        when the context has no room left for it: the task ends)."""
        w = self.workload
        s = w.scenario
        agent = s.agent
        assert agent is not None
        calls, self._calls = self._calls, []
        room = s.context_limit - self._history_tokens - 2
        if room <= 16 * (len(calls) + 1):
            return None
        counter = w._builder()
        results: list[dict[str, Any]] = []
        target = tokens = 0
        for call in calls:
            n = sample_length(agent.tool_result_tokens, rng, max(1, room // (2 * len(calls))))
            text, k = w._text(n, rng, counter)
            results.append({"role": "tool", "tool_call_id": call.call_id, "content": text})
            target += n
            tokens += k
        max_tokens = min(w._max_tokens(rng, None), s.context_limit - self._history_tokens - target)
        if max_tokens < 1:
            return None
        # the calls run side by side: the turn waits for the slowest
        latency = max(max(0.0, agent.tool_latency_s.sample(rng)) for _ in calls)
        think = max(0.0, agent.think_time_s.sample(rng))
        label = "agent:tool-results" + ("+stand-in" if self._stand_in else "")
        messages = [*self._history, *results]
        spec = w._spec(messages, self._history_tokens + target, max_tokens, label, self._conversation, self._turn)
        spec.max_turns = agent.max_turns
        self._chain(spec, agent.responses_state)
        self._pending = spec
        self._history.extend(results)
        self._history_tokens += tokens
        self._turn += 1
        return spec, latency + think

    def record_reply(self, text: str | None, ok: bool, reply: Reply | None = None) -> None:
        """Report the outcome of the last request: the reply text (None if not kept; ``reply.text``
        stands in when only ``reply`` has it), success, and what else the reply carried (tool calls,
        the Responses API's ``response_id``)."""
        spec = self._pending
        self._pending = None
        s = self.workload.scenario
        if spec is None or (s.conversation is None and s.agent is None):
            return
        if not ok:
            self._conversation = None
            self._turns_left = 0
            self._calls = []
            return
        if text is None and reply is not None:
            text = reply.text
        calls = list(reply.tool_calls) if reply is not None and s.agent is not None else []
        if s.agent is not None and not (calls and spec.turn + 1 < s.agent.max_turns):
            self._conversation = None  # no call to answer, or the cap: the task is over
            return
        counter = self.workload._builder()
        if text is None:
            self._stand_in = True
            rng = random.Random(f"{s.seed}:stand-in:{spec.conversation}:{spec.turn}")
            text = build_prompt(spec.max_tokens, rng, "prose", self.workload.counter)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        tokens = counter.count(text) if text else 0
        if calls:
            message["content"] = text or None
            message["tool_calls"] = [
                {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in calls
            ]
            tokens += sum(counter.count(f"{c.name} {c.arguments}") for c in calls)
        self._history.append(message)
        self._history_tokens += tokens
        self._calls = calls
        if reply is not None and reply.response_id:
            self._response_id = reply.response_id
            self._stored = len(self._history)
        else:
            self._response_id = None
