"""What a call type declares (:class:`CallType`), and the closed sets it picks from."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from loadgen.spec.request import Endpoint, RequestSpec


class Answer(enum.Enum):
    """How a call's answer comes back."""

    TEXT = "text"  # generated text, streamed when asked: TTFT, inter-token latency, output tokens
    ITEMS = "items"  # one body of results for the input items (vectors, scores): prompt tokens, items/s


class Inputs(enum.Enum):
    """What a call carries, and so which of a scenario's sections build it (``workload``)."""

    MESSAGES = "messages"  # a conversation in chat form: turns, tools, images, agent loops
    PROMPT = "prompt"  # one plain-text prompt (a conversation flattened): no tools, no images
    BATCH = "batch"  # a batch of texts, one result each (the scenario's [embeddings] table)
    QUERY_DOCUMENTS = "query_documents"  # a query and the documents scored against it ([rerank] table)


class Decoder(enum.Enum):
    """Which of the pure decoders reads the answer (``parse``)."""

    CHAT = "chat"  # chat.completion(.chunk) and text_completion streams and bodies: parse.stream
    RESPONSES = "responses"  # the Responses API's events and body: parse.responses
    POOLING = "pooling"  # embeddings and rerank bodies: parse.pooling


@dataclass(frozen=True, slots=True)
class CallType:
    """One API a run can call. ``name`` is its ``--endpoint`` value, its records' ``endpoint``, its
    Locust row and its row of the report's per-call-type table; ``path`` the POST path under the
    server's base URL; ``inputs`` what it carries. ``build`` writes the type's own fields into a
    body that holds ``model``; ``prompt`` gives the prompt's characters and messages (or items) as sent, tools left out
    (``takes_tools`` says whether their JSON is sent and counted); ``items`` the input items of an
    items call, None for a text call."""

    name: Endpoint
    path: str
    inputs: Inputs
    answer: Answer
    decoder: Decoder
    openai_sdk: bool
    takes_tools: bool
    build: Callable[[RequestSpec, dict[str, Any]], None]
    prompt: Callable[[RequestSpec], tuple[int, int]]
    items: Callable[[RequestSpec], int | None]

    @property
    def generative(self) -> bool:
        return self.answer is Answer.TEXT


def assert_never(value: NoReturn) -> NoReturn:
    """The end of an exhaustive ``match``: mypy refuses a call that a value can still reach (a
    member with no branch), and at run time it names the value."""
    raise AssertionError(f"unhandled member {value!r}")


def no_items(spec: RequestSpec) -> None:
    """``items`` of a text call."""
    return None


__all__ = ["Answer", "CallType", "Decoder", "Inputs", "assert_never", "no_items"]
