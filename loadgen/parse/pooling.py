"""Pooling answers (``/v1/embeddings``, ``/v1/rerank``) -> ``PoolingResult``. Pure: no I/O, no clock.

These calls answer with one JSON body and no output tokens; what a load test needs from it is how
many items came back and how many prompt tokens the server counted:

- embeddings (OpenAI, vLLM, SGLang): ``{"object": "list", "data": [{"index", "embedding"}...],
  "usage": {"prompt_tokens", "total_tokens"}}``; the embedding is a float list or, with
  ``encoding_format: "base64"`` (what the OpenAI SDK sends by default), a base64 string;
- rerank, vLLM / Jina / Cohere shape: ``{"results": [{"index", "relevance_score", ...}...],
  "usage": {"total_tokens"}}`` (Cohere: ``meta.billed_units``, no token count);
- rerank, SGLang's shape: a bare list ``[{"index", "score", "meta_info": {"prompt_tokens"}}...]``.

``items`` is the number of embeddings or scored documents returned; ``prompt_tokens`` is usage's
``prompt_tokens``, else its ``total_tokens`` (a pooling call generates nothing), else the sum of the
items' ``meta_info.prompt_tokens``; None when the server says nothing. An error object (``{"error":
...}`` or ``{"object": "error"}``) fills ``error``; a body that is not JSON, or has no list of
items, counts as ``malformed``. The vectors themselves are not decoded further.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from loadgen.parse.stream.result import StreamResult

_FIRST_MALFORMED_CHARS = 200


@dataclass(slots=True)
class PoolingResult(StreamResult):
    """A pooling call's answer: a ``StreamResult`` without output, with ``items``."""

    items: int | None = None


def parse_pooling_body(body: bytes, end_ns: int) -> PoolingResult:
    """Decode one embeddings or rerank body (see the module doc); ``done`` is always True."""
    res = PoolingResult(end_ns=end_ns, done=True, n_payloads=1, finish_reason="stop")
    try:
        obj: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    if type(obj) is dict and (obj.get("object") == "error" or obj.get("error") is not None):
        err: dict[str, Any] = obj["error"] if isinstance(obj.get("error"), dict) else obj
        msg = err.get("message")
        text = msg if type(msg) is str else ("" if msg is None else str(msg))  # a message is text, as for chat
        res.error = {"message": text or str(err), "type": err.get("type"), "code": err.get("code")}
        res.finish_reason = None
        return res
    items: Any = None
    if type(obj) is list:
        items = obj
    elif type(obj) is dict:
        items = obj.get("data") if obj.get("data") is not None else obj.get("results")
        res.model = obj.get("model") if type(obj.get("model")) is str else None
        rid = obj.get("id")
        res.server_id = rid if type(rid) is str else None
    if type(items) is not list:
        res.malformed = 1
        res.first_malformed = body[:_FIRST_MALFORMED_CHARS].decode("utf-8", "replace")
        res.finish_reason = None
        return res
    res.items = len(items)
    usage = obj.get("usage") if type(obj) is dict else None
    if type(usage) is dict:
        for key in ("prompt_tokens", "total_tokens"):
            value = usage.get(key)
            if type(value) is int:
                res.prompt_tokens = value
                break
    if res.prompt_tokens is None:
        counts: list[int] = [
            m["prompt_tokens"]
            for it in items
            if type(it) is dict and type(m := it.get("meta_info")) is dict and type(m.get("prompt_tokens")) is int
        ]
        if counts:
            res.prompt_tokens = sum(counts)
    return res


__all__ = ["PoolingResult", "parse_pooling_body"]
