"""The call types, one registry: what each API a run can call (chat, completions, responses,
embeddings, rerank, score) is, in one place each.

Each type is one module of this package declaring one :class:`CallType`: the POST path it goes to
(the simulator serves every one: ``tests/unit/test_call_registry.py``), how its answer comes back
(:class:`Answer`: generated text, streamed when asked, or a body of results per input item), which
decoder reads it (:class:`Decoder`, matched exhaustively by the load side's transport), whether the
openai SDK has an API for it (``--transport openai``), whether tools go with it, and three pure
functions of a :class:`~loadgen.spec.request.RequestSpec`: the endpoint's own fields of the JSON
body, the prompt's characters as sent (what the prompt-length calibration is told), and the input
items of an items call (embedding inputs, rerank documents). The record a call makes, its Locust
row (the type's name), the analysis's per-type table and the report's sections follow from the
``answer``: a text answer has TTFT, inter-token latency and output tokens; an items answer has
prompt tokens and items per second.

:func:`call_type` is the one ``match`` over the names, checked exhaustive by mypy
(``assert_never``): a name added to ``Endpoint`` without its module fails the type check, and so
does a new :class:`Answer` or :class:`Decoder` member the load side does not handle. Adding a type:
docs/architecture.md, "How to add a call type".
"""

from __future__ import annotations

from typing import Any, get_args

import orjson

from loadgen.spec.calls import chat, completions, embeddings, rerank, responses, score
from loadgen.spec.calls.base import Answer, CallType, Decoder, Inputs, assert_never
from loadgen.spec.request import Endpoint, RequestSpec


def call_type(name: Endpoint) -> CallType:
    """The call type of ``name``; every member of ``Endpoint`` has one (mypy checks the match)."""
    match name:
        case "chat":
            return chat.CALL
        case "completions":
            return completions.CALL
        case "responses":
            return responses.CALL
        case "embeddings":
            return embeddings.CALL
        case "rerank":
            return rerank.CALL
        case "score":
            return score.CALL
        case _:
            assert_never(name)


ENDPOINTS: tuple[Endpoint, ...] = get_args(Endpoint)
CALLS: dict[str, CallType] = {name: call_type(name) for name in ENDPOINTS}
GENERATIVE: frozenset[str] = frozenset(n for n, c in CALLS.items() if c.answer is Answer.TEXT)
ITEMS: frozenset[str] = frozenset(n for n, c in CALLS.items() if c.answer is Answer.ITEMS)
OPENAI_SDK: frozenset[str] = frozenset(n for n, c in CALLS.items() if c.openai_sdk)


def taking(inputs: Inputs) -> tuple[str, ...]:
    """The names of the call types that carry ``inputs``, in ``ENDPOINTS`` order."""
    return tuple(n for n, c in CALLS.items() if c.inputs is inputs)


def of(name: str) -> CallType:
    """The call type named ``name``; ValueError naming it and the names there are."""
    try:
        return CALLS[name]
    except KeyError:
        raise ValueError(f"unknown endpoint {name!r}; expected one of {', '.join(ENDPOINTS)}") from None


def request_body(spec: RequestSpec, model: str) -> bytes:
    """The JSON body of ``spec`` for its endpoint: ``model``, the type's own fields, then
    ``spec.extra`` merged last (sampling parameters, ``ignore_eos``...). A workload file's request
    (``spec.body``) goes as the file has it, with ``model`` (and ``stream`` off when the run asks)."""
    if spec.body is not None:
        body = {"model": model, **spec.body}
        if not spec.stream and body.get("stream"):
            body["stream"] = False
            body.pop("stream_options", None)
        return orjson.dumps(body)
    return orjson.dumps({"model": model, **request_fields(spec)})


def request_fields(spec: RequestSpec) -> dict[str, Any]:
    """The JSON body of ``spec`` without ``model``: what a workload file keeps of a request."""
    body: dict[str, Any] = {}
    of(spec.endpoint).build(spec, body)
    if spec.extra:
        body.update(spec.extra)
    return body


def prompt_chars(spec: RequestSpec) -> tuple[int, int]:
    """Characters of the prompt text as sent (message text, the completions prompt, embedding
    inputs, rerank query and documents) and the number of messages or items. Tool definitions are
    prompt text too (chat templates render their JSON into the prompt): their JSON counts as one
    more message, for the types that send them."""
    ct = of(spec.endpoint)
    chars, n = ct.prompt(spec)
    if spec.tools and ct.takes_tools:
        chars += len(orjson.dumps(spec.tools))
        n += 1
    return chars, n


def items_of(spec: RequestSpec) -> int | None:
    """Input items of an items call (embedding inputs, rerank documents); None for a text call."""
    return of(spec.endpoint).items(spec)


__all__ = [
    "CALLS",
    "ENDPOINTS",
    "GENERATIVE",
    "ITEMS",
    "OPENAI_SDK",
    "Answer",
    "CallType",
    "Decoder",
    "Inputs",
    "assert_never",
    "call_type",
    "items_of",
    "of",
    "prompt_chars",
    "request_body",
    "request_fields",
    "taking",
]
