"""Pooling requests (embeddings, rerank, score): what a body asks for, the vectors and scores, the bodies.

Requests, read from JSON (a body that breaks the rules raises
:class:`~loadgen.sim.params.BadRequest`, answered with a 400):

* ``/v1/embeddings`` (OpenAI's and vLLM's shape): ``input`` a non-empty string, a non-empty list
  of non-empty strings, a list of token ids, or a list of token-id lists; ``encoding_format``
  ``float`` (default) or ``base64`` (little-endian float32, as OpenAI and vLLM send it);
  ``dimensions`` an integer 1..the model's embedding size. Each input is one sequence.
* ``/v1/rerank`` (the Jina/Cohere shape vLLM serves): ``query`` a non-empty string, ``documents``
  a non-empty list of strings, ``top_n`` (positive integer, default all), ``return_documents``
  (default true). Each (query, document) pair is one sequence: a cross-encoder reads them together.
* ``/v1/score`` (vLLM's): ``text_1`` and ``text_2``, each a string or a list of strings; 1:1, 1:N
  or N:N pairs, one sequence each.

Tokens are estimated like prompts (:mod:`loadgen.sim.text`): ``ceil(characters / chars_per_token)``
per text, at least 1, token ids exactly; a pair costs the query's tokens plus the document's.

Vectors are deterministic functions of the text alone (not of the seed), so equal inputs get equal
vectors on every server: feature hashing of the first :data:`HASHED_WORDS` lower-cased words (CRC-32
picks each word's coordinate and sign) plus a dense part seeded by the text's hash, normalised to
unit length. Texts that share words have a higher cosine. ``dimensions`` keeps the leading
coordinates and renormalises (Matryoshka-style). A relevance score is a logistic function of the
cosine of the two texts' vectors, in (0, 1): about 0.05 for texts with no word in common, 0.95
for the same text.
"""

from __future__ import annotations

import base64
import hashlib
import math
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from loadgen.sim.params import BadRequest, read_json_object

MAX_EMBEDDING_DIM = 4096  # embedding size: the model's hidden size, capped here
HASHED_WORDS = 256  # words that shape a vector (bounds the event loop's work per input)
DENSE_WEIGHT = 0.3  # the text-seeded dense part against the word part (both unit length)
SCORE_DIM = 256  # vector size behind relevance scores


@dataclass(frozen=True)
class Sequence:
    """One engine sequence of a pooling request: its text (or token ids) and its token count."""

    text: str
    ids: tuple[int, ...] | None
    tokens: int


@dataclass(frozen=True)
class EmbeddingParams:
    inputs: list[Sequence]
    base64: bool
    dimensions: int


@dataclass(frozen=True)
class RerankParams:
    query: str
    documents: list[str]
    pairs: list[Sequence]  # query + document i
    top_n: int
    return_documents: bool


@dataclass(frozen=True)
class ScoreParams:
    pairs: list[tuple[str, str]]
    sequences: list[Sequence]


def _text_tokens(text: str, chars_per_token: float) -> int:
    return max(1, math.ceil(len(text) / chars_per_token))


def _is_ids(value: Any) -> bool:
    return (
        isinstance(value, list) and bool(value) and all(isinstance(x, int) and not isinstance(x, bool) for x in value)
    )


def read_embeddings(body_raw: bytes, chars_per_token: float, max_dim: int) -> EmbeddingParams:
    """Parse an embeddings body (``max_dim``: the model's embedding size)."""
    body = read_json_object(body_raw)
    raw = body.get("input")
    items: list[Any]
    if isinstance(raw, str) or _is_ids(raw):
        items = [raw]
    elif isinstance(raw, list) and raw:
        items = raw
    else:
        raise BadRequest(
            "Field 'input' is required: a non-empty string, a list of strings, or a list of token ids "
            f"(got {type(raw).__name__ if raw is not None else 'nothing'}{' (empty)' if raw == [] else ''})."
        )
    inputs: list[Sequence] = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            if not item:
                raise BadRequest(f"input[{i}] is an empty string; every input must have text.")
            inputs.append(Sequence(item, None, _text_tokens(item, chars_per_token)))
        elif _is_ids(item):
            inputs.append(Sequence("", tuple(item), len(item)))
        else:
            raise BadRequest(
                f"input[{i}] must be a non-empty string or a non-empty list of token ids, got {item!r:.60}."
            )
    fmt = body.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise BadRequest(f"encoding_format must be 'float' or 'base64', got {fmt!r}.")
    dims = body.get("dimensions")
    if dims is None:
        dims = max_dim
    elif not isinstance(dims, int) or isinstance(dims, bool) or not 1 <= dims <= max_dim:
        raise BadRequest(
            f"dimensions must be an integer from 1 to {max_dim} (the model's embedding size), got {dims!r}."
        )
    return EmbeddingParams(inputs, fmt == "base64", dims)


def read_rerank(body_raw: bytes, chars_per_token: float) -> RerankParams:
    """Parse a rerank body."""
    body = read_json_object(body_raw)
    query = body.get("query")
    if not isinstance(query, str) or not query:
        raise BadRequest(f"Field 'query' is required and must be a non-empty string, got {query!r:.60}.")
    docs = body.get("documents")
    if not isinstance(docs, list) or not docs:
        raise BadRequest(f"Field 'documents' is required and must be a non-empty list of strings, got {docs!r:.60}.")
    for i, d in enumerate(docs):
        if not isinstance(d, str):
            raise BadRequest(f"Field 'documents' must be a list of strings; documents[{i}] is {type(d).__name__}.")
    top_n = body.get("top_n")
    if top_n is None:
        top_n = len(docs)
    elif not isinstance(top_n, int) or isinstance(top_n, bool) or top_n < 1:
        raise BadRequest(f"top_n must be a positive integer, got {top_n!r}.")
    ret = body.get("return_documents")
    q_tokens = _text_tokens(query, chars_per_token)
    pairs = [Sequence(d, None, q_tokens + _text_tokens(d, chars_per_token)) for d in docs]
    return RerankParams(query, docs, pairs, min(top_n, len(docs)), True if ret is None else bool(ret))


def read_score(body_raw: bytes, chars_per_token: float) -> ScoreParams:
    """Parse a score body: ``text_1`` against ``text_2`` (1:1, 1:N or N:N)."""
    body = read_json_object(body_raw)
    sides: list[list[str]] = []
    for name in ("text_1", "text_2"):
        value = body.get(name)
        texts = [value] if isinstance(value, str) else value
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
            raise BadRequest(f"Field '{name}' is required: a non-empty string or a non-empty list of them.")
        sides.append(texts)
    left, right = sides
    if len(left) == 1:
        left = left * len(right)
    elif len(left) != len(right):
        raise BadRequest(
            f"text_1 has {len(left)} texts and text_2 {len(right)}: give one text_1, or as many as text_2."
        )
    pairs = list(zip(left, right, strict=True))
    seqs = [Sequence(b, None, _text_tokens(a, chars_per_token) + _text_tokens(b, chars_per_token)) for a, b in pairs]
    return ScoreParams(pairs, seqs)


# -- vectors and scores ------------------------------------------------------------------------------


def embed(seq: Sequence, dim: int) -> np.ndarray:
    """The unit vector of ``seq`` with ``dim`` coordinates, float32 (module docstring)."""
    words = [str(x).encode() for x in seq.ids[:HASHED_WORDS]] if seq.ids is not None else _words(seq.text)
    key = repr(seq.ids).encode() if seq.ids is not None else seq.text.encode("utf-8", "surrogatepass")
    seed = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")
    dense = np.random.default_rng(seed).standard_normal(dim)
    vec = DENSE_WEIGHT * dense / np.linalg.norm(dense)
    if words:
        h = np.fromiter((zlib.crc32(w) for w in words), dtype=np.int64, count=len(words))
        signs = np.where(h & (1 << 31), -1.0, 1.0)
        bag = np.zeros(dim)
        np.add.at(bag, h % dim, signs)
        norm = np.linalg.norm(bag)
        if norm > 0:
            vec += bag / norm
    out: np.ndarray = (vec / np.linalg.norm(vec)).astype(np.float32)
    return out


def _words(text: str) -> list[bytes]:
    return [w.encode("utf-8", "surrogatepass") for w in text.lower().split()[:HASHED_WORDS]]


def relevance(query: str, document: str) -> float:
    """How relevant ``document`` is to ``query``, in (0, 1) (module docstring)."""
    return _logistic(_score_vec(query), _score_vec(document))


def _score_vec(text: str) -> np.ndarray:
    return embed(Sequence(text, None, 0), SCORE_DIM)


def _logistic(a: np.ndarray, b: np.ndarray) -> float:
    return 1.0 / (1.0 + math.exp(-(6.0 * float(np.dot(a, b)) - 3.0)))


def truncate(vec: np.ndarray, dimensions: int) -> np.ndarray:
    """The leading ``dimensions`` coordinates of ``vec``, renormalised."""
    if dimensions >= len(vec):
        return vec
    head = vec[:dimensions]
    norm = float(np.linalg.norm(head))
    out: np.ndarray = head / norm if norm > 0 else head
    return out


# -- bodies ------------------------------------------------------------------------------------------


def _usage(prompt_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens, "completion_tokens": 0}


def embeddings_body(rid: str, created: int, model: str, params: EmbeddingParams, full_dim: int) -> bytes:
    data: list[dict[str, Any]] = []
    for i, seq in enumerate(params.inputs):
        vec = truncate(embed(seq, full_dim), params.dimensions)
        value: Any = base64.b64encode(vec.astype("<f4").tobytes()).decode() if params.base64 else vec
        data.append({"object": "embedding", "index": i, "embedding": value})
    tokens = sum(s.tokens for s in params.inputs)
    obj = {"id": rid, "object": "list", "created": created, "model": model, "data": data, "usage": _usage(tokens)}
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)


def rerank_body(rid: str, model: str, params: RerankParams) -> bytes:
    q = _score_vec(params.query)
    scores = [_logistic(q, _score_vec(d)) for d in params.documents]
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[: params.top_n]
    results: list[dict[str, Any]] = []
    for i in order:
        item: dict[str, Any] = {"index": i, "relevance_score": scores[i]}
        if params.return_documents:
            item["document"] = {"text": params.documents[i]}
        results.append(item)
    tokens = sum(s.tokens for s in params.pairs)
    return orjson.dumps({"id": rid, "model": model, "usage": _usage(tokens), "results": results})


def score_body(rid: str, created: int, model: str, params: ScoreParams) -> bytes:
    data = [{"index": i, "object": "score", "score": relevance(a, b)} for i, (a, b) in enumerate(params.pairs)]
    tokens = sum(s.tokens for s in params.sequences)
    obj = {"id": rid, "object": "list", "created": created, "model": model, "data": data, "usage": _usage(tokens)}
    return orjson.dumps(obj)
