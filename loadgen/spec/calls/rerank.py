"""Rerank (``/v1/rerank``): ``query`` and ``documents`` (vLLM's and SGLang's shape; Cohere's and
Jina's too). The openai SDK has no API for it."""

from __future__ import annotations

from typing import Any

from loadgen.spec.calls.base import Answer, CallType, Decoder, Inputs
from loadgen.spec.request import RequestSpec


def _build(spec: RequestSpec, body: dict[str, Any]) -> None:
    body["query"] = spec.query or ""
    body["documents"] = list(spec.documents or [])


def documents_prompt(spec: RequestSpec) -> tuple[int, int]:
    """A query and its documents as prompt text: their characters, and one item each."""
    docs = spec.documents or []
    return len(spec.query or "") + sum(map(len, docs)), 1 + len(docs)


def documents(spec: RequestSpec) -> int:
    """The items of a query-and-documents call: one result per document."""
    return len(spec.documents or ())


CALL = CallType(
    name="rerank",
    path="/v1/rerank",
    inputs=Inputs.QUERY_DOCUMENTS,
    answer=Answer.ITEMS,
    decoder=Decoder.POOLING,
    openai_sdk=False,
    takes_tools=False,
    build=_build,
    prompt=documents_prompt,
    items=documents,
)
