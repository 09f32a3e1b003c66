"""Pooling request parsing, vectors and scores (loadgen.sim.pooling), without a server."""

from __future__ import annotations

import base64
import json

import numpy as np
import orjson
import pytest

from loadgen.sim.params import BadRequest
from loadgen.sim.pooling import (
    Sequence,
    embed,
    embeddings_body,
    read_embeddings,
    read_rerank,
    read_score,
    relevance,
    rerank_body,
)


def body(obj: object) -> bytes:
    return json.dumps(obj).encode()


def test_embedding_inputs_and_token_counts() -> None:
    p = read_embeddings(body({"input": "abcdefghi"}), 4.0, 64)
    assert [s.tokens for s in p.inputs] == [3] and p.dimensions == 64 and not p.base64
    p = read_embeddings(body({"input": ["ab", "abcde"], "encoding_format": "base64", "dimensions": 8}), 4.0, 64)
    assert [s.tokens for s in p.inputs] == [1, 2] and p.base64 and p.dimensions == 8
    p = read_embeddings(body({"input": [5, 6, 7]}), 4.0, 64)  # one input of token ids
    assert [(s.ids, s.tokens) for s in p.inputs] == [((5, 6, 7), 3)]
    p = read_embeddings(body({"input": [[1, 2], [3, 4, 5, 6]]}), 4.0, 64)
    assert [s.tokens for s in p.inputs] == [2, 4]


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"input": ""}, "input[0] is an empty string"),
        ({"input": []}, "Field 'input' is required"),
        ({}, "Field 'input' is required"),
        ({"input": ["a", 3]}, "input[1] must be a non-empty string"),
        ({"input": "a", "encoding_format": "int8"}, "encoding_format must be 'float' or 'base64'"),
        ({"input": "a", "dimensions": 65}, "dimensions must be an integer from 1 to 64"),
        ({"input": "a", "dimensions": 0}, "dimensions must be an integer from 1 to 64"),
    ],
)
def test_bad_embedding_bodies(payload: dict[str, object], message: str) -> None:
    with pytest.raises(BadRequest) as exc:
        read_embeddings(body(payload), 4.0, 64)
    assert message in exc.value.message


def test_bad_json_is_a_bad_request() -> None:
    with pytest.raises(BadRequest, match="Invalid JSON body"):
        read_rerank(b"{not json", 4.0)
    with pytest.raises(BadRequest, match="Invalid JSON body"):
        read_score(b"[1, 2]", 4.0)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"documents": ["a"]}, "Field 'query' is required"),
        ({"query": "", "documents": ["a"]}, "Field 'query' is required"),
        ({"query": "q"}, "Field 'documents' is required"),
        ({"query": "q", "documents": []}, "Field 'documents' is required"),
        ({"query": "q", "documents": "a b"}, "Field 'documents' is required"),
        ({"query": "q", "documents": ["a", {"text": "b"}]}, "documents[1] is dict"),
        ({"query": "q", "documents": ["a"], "top_n": 0}, "top_n must be a positive integer"),
    ],
)
def test_bad_rerank_bodies(payload: dict[str, object], message: str) -> None:
    with pytest.raises(BadRequest) as exc:
        read_rerank(body(payload), 4.0)
    assert message in exc.value.message


def test_rerank_pairs_cost_query_plus_document_tokens() -> None:
    p = read_rerank(body({"query": "12345678", "documents": ["1234", "123456789012"], "top_n": 9}), 4.0)
    assert [s.tokens for s in p.pairs] == [2 + 1, 2 + 3]
    assert p.top_n == 2 and p.return_documents  # top_n clipped to the documents; documents by default


def test_score_pairs_one_to_n_and_n_to_n() -> None:
    p = read_score(body({"text_1": "q", "text_2": ["a", "b"]}), 4.0)
    assert p.pairs == [("q", "a"), ("q", "b")]
    p = read_score(body({"text_1": ["q1", "q2"], "text_2": ["a", "b"]}), 4.0)
    assert p.pairs == [("q1", "a"), ("q2", "b")]
    with pytest.raises(BadRequest, match="give one text_1"):
        read_score(body({"text_1": ["q1", "q2"], "text_2": ["a", "b", "c"]}), 4.0)
    with pytest.raises(BadRequest, match="Field 'text_2' is required"):
        read_score(body({"text_1": "q", "text_2": [""]}), 4.0)


def test_vectors_are_unit_deterministic_and_closer_when_texts_share_words() -> None:
    a = embed(Sequence("the quick brown fox jumps", None, 0), 512)
    assert a.dtype == np.float32 and a.shape == (512,)
    assert float(np.linalg.norm(a)) == pytest.approx(1.0, abs=1e-6)
    assert np.array_equal(a, embed(Sequence("the quick brown fox jumps", None, 0), 512))
    near = embed(Sequence("the quick brown fox sleeps", None, 0), 512)
    far = embed(Sequence("entirely different words here", None, 0), 512)
    assert float(a @ near) > 0.5 > float(a @ far)
    ids = embed(Sequence("", (1, 2, 3), 3), 512)
    assert not np.array_equal(ids, embed(Sequence("", (1, 2, 4), 3), 512))


def test_relevance_orders_documents_by_shared_words() -> None:
    q = "how do pandas live in china"
    same, related, unrelated = relevance(q, q), relevance(q, "pandas live in china"), relevance(q, "stock prices")
    assert 0.9 < same < 1.0
    assert same > related > unrelated
    assert 0.0 < unrelated < 0.15


def test_embeddings_body_dimensions_and_base64() -> None:
    p = read_embeddings(body({"input": ["alpha beta", "gamma"], "dimensions": 16}), 4.0, 64)
    obj = orjson.loads(embeddings_body("embd-1", 7, "m", p, 64))
    assert obj["object"] == "list" and obj["model"] == "m" and obj["id"] == "embd-1"
    assert [d["index"] for d in obj["data"]] == [0, 1]
    vec = np.array(obj["data"][0]["embedding"])
    full = embed(p.inputs[0], 64)
    assert len(vec) == 16 and np.linalg.norm(vec) == pytest.approx(1.0, abs=1e-5)
    assert vec == pytest.approx(full[:16] / np.linalg.norm(full[:16]), abs=1e-6)  # leading coordinates
    assert obj["usage"] == {"prompt_tokens": 3 + 2, "total_tokens": 5, "completion_tokens": 0}
    p64 = read_embeddings(body({"input": ["alpha beta"], "dimensions": 16, "encoding_format": "base64"}), 4.0, 64)
    obj64 = orjson.loads(embeddings_body("embd-2", 7, "m", p64, 64))
    decoded = np.frombuffer(base64.b64decode(obj64["data"][0]["embedding"]), dtype="<f4")
    assert decoded == pytest.approx(vec, abs=1e-7)


def test_rerank_body_sorted_top_n_and_documents() -> None:
    docs = ["stock prices fell", "pandas eat bamboo in china", "pandas"]
    p = read_rerank(body({"query": "what do pandas eat in china", "documents": docs, "top_n": 2}), 4.0)
    obj = orjson.loads(rerank_body("rerank-1", "m", p))
    res = obj["results"]
    assert [r["index"] for r in res] == [1, 2]
    assert res[0]["relevance_score"] >= res[1]["relevance_score"]
    assert res[0]["document"] == {"text": docs[1]}
    p = read_rerank(body({"query": "q", "documents": docs, "return_documents": False}), 4.0)
    res = orjson.loads(rerank_body("rerank-2", "m", p))["results"]
    assert len(res) == 3 and all("document" not in r for r in res)
    scores = [r["relevance_score"] for r in res]
    assert scores == sorted(scores, reverse=True)
