"""The call types' registry (``spec.calls``): one module per type, each piece declared, every path
served by the simulator, every body decoded by the decoder the type names.

The recipe "How to add a call type" (docs/architecture.md) was followed once for ``score`` (vLLM's
``/v1/score``): its module, its name in ``Endpoint`` and its ``case`` in ``call_type``; the checks
below and the end-to-end ramp of every items type (tests/integration/test_call_types_e2e.py) then
cover it without a line of their own.
"""

from __future__ import annotations

import importlib
import time
import urllib.request
from pathlib import Path
from typing import Any, get_args

import pytest

from loadgen.load.client import parse_body
from loadgen.spec.calls import CALLS, ENDPOINTS, GENERATIVE, ITEMS, Answer, Decoder, Inputs, call_type, items_of
from loadgen.spec.calls import request_body as body_of
from loadgen.spec.flags import BY_DEST
from loadgen.spec.request import Endpoint, RequestSpec

CALLS_DIR = Path(__file__).resolve().parents[2] / "loadgen" / "spec" / "calls"
SHARED = {"__init__", "base", "text"}  # the registry, what a type declares, what text types share


def test_every_name_is_one_module_and_every_module_one_name() -> None:
    modules = {p.stem for p in CALLS_DIR.glob("*.py")} - SHARED
    assert modules == set(ENDPOINTS) == set(get_args(Endpoint))
    for name in ENDPOINTS:
        declared = importlib.import_module(f"loadgen.spec.calls.{name}").CALL
        assert declared is call_type(name) is CALLS[name] and declared.name == name


def test_the_derived_sets_partition_the_types_by_their_answer() -> None:
    assert set(ENDPOINTS) == GENERATIVE | ITEMS and not GENERATIVE & ITEMS
    assert {c.name for c in CALLS.values() if c.answer is Answer.ITEMS} == ITEMS
    # a text answer is read by a stream decoder, an items answer by the pooling one
    for c in CALLS.values():
        assert (c.decoder is Decoder.POOLING) == (c.answer is Answer.ITEMS), c.name
        assert c.path.startswith("/v1/") and c.path.count("/") >= 2
    assert len({c.path for c in CALLS.values()}) == len(CALLS)


def test_every_front_end_offers_every_type() -> None:
    assert BY_DEST["endpoint"].choices == ENDPOINTS and BY_DEST["call_type"].choices == ENDPOINTS


def _spec(name: Endpoint) -> RequestSpec:
    """One small call of each kind of input, as a workload would hand it over."""
    match CALLS[name].inputs:
        case Inputs.MESSAGES | Inputs.PROMPT:
            return RequestSpec(
                endpoint=name, messages=[{"role": "user", "content": "say something"}], max_tokens=5, stream=False
            )
        case Inputs.BATCH:
            return RequestSpec(endpoint=name, inputs=["one text", "and another", "a third"], stream=False)
        case Inputs.QUERY_DOCUMENTS:
            return RequestSpec(endpoint=name, query="which?", documents=["this one", "that one"], stream=False)


@pytest.mark.parametrize("name", ENDPOINTS)
def test_the_simulator_serves_every_path_and_the_named_decoder_reads_its_answer(
    sim_factory: Any, name: Endpoint
) -> None:
    """The simulator shares no code with the registry: it meets each type on the wire, at its path,
    with its body; the answer is read by the decoder the type names."""
    sim = sim_factory("--profile", "tiny")
    ct = CALLS[name]
    spec = _spec(name)
    req = urllib.request.Request(
        sim.url + ct.path, data=body_of(spec, "m"), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200
        data = resp.read()
    result: Any = parse_body(ct.decoder, data, time.perf_counter_ns())
    assert result.error is None and not result.malformed, data[:200]
    assert result.prompt_tokens and result.prompt_tokens > 0
    if ct.answer is Answer.ITEMS:
        assert result.items == items_of(spec)
    else:
        assert result.finish_reason in ("stop", "length") and result.text
