"""Score (``/v1/score``, vLLM's; also served as ``/score``): ``text_1`` scored against each of
``text_2``, a cross-encoder's 1:N pairs, answered with one ``score`` per pair (vLLM's example
``examples/online_serving/openai_cross_encoder_score.py`` sends ``{"model", "text_1", "text_2"}``).
A scenario builds it as it builds rerank calls: a query and its documents (the ``[rerank]`` table).
The openai SDK has no API for it.
"""

from __future__ import annotations

from typing import Any

from loadgen.spec.calls.base import Answer, CallType, Decoder, Inputs
from loadgen.spec.calls.rerank import documents, documents_prompt
from loadgen.spec.request import RequestSpec


def _build(spec: RequestSpec, body: dict[str, Any]) -> None:
    body["text_1"] = spec.query or ""
    body["text_2"] = list(spec.documents or [])


CALL = CallType(
    name="score",
    path="/v1/score",
    inputs=Inputs.QUERY_DOCUMENTS,
    answer=Answer.ITEMS,
    decoder=Decoder.POOLING,
    openai_sdk=False,
    takes_tools=False,
    build=_build,
    prompt=documents_prompt,
    items=documents,
)
