"""Embeddings (``/v1/embeddings``): ``input``, the batch; no output length."""

from __future__ import annotations

from typing import Any

from loadgen.spec.calls.base import Answer, CallType, Decoder, Inputs
from loadgen.spec.request import RequestSpec


def _build(spec: RequestSpec, body: dict[str, Any]) -> None:
    body["input"] = list(spec.inputs or [])


def _prompt(spec: RequestSpec) -> tuple[int, int]:
    inputs = spec.inputs or []
    return sum(map(len, inputs)), max(1, len(inputs))


def _items(spec: RequestSpec) -> int:
    return len(spec.inputs or ())


CALL = CallType(
    name="embeddings",
    path="/v1/embeddings",
    inputs=Inputs.BATCH,
    answer=Answer.ITEMS,
    decoder=Decoder.POOLING,
    openai_sdk=True,
    takes_tools=False,
    build=_build,
    prompt=_prompt,
    items=_items,
)
