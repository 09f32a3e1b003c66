"""/v1/responses (the OpenAI Responses API) over real HTTP against a `loadgen sim` process."""

from __future__ import annotations

import http.client
import json
import math
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sim_testutil import SimProc, timed_reads

from loadgen.parse.responses import ResponsesDecoder
from loadgen.sim.responses_api import ResponseStore, UnknownResponse, unknown_response_body

RESP = "/v1/responses"
CHAT = "/v1/chat/completions"
STREAM_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
]
END_EVENTS = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
LONG = " ".join(f"word{i} of the first turn's long document" for i in range(300))  # ~2,900 tokens


def tokens(messages: list[tuple[str, str]]) -> int:
    """The simulator's estimate for chat messages: ceil(chars / 4) + 4 per message."""
    return math.ceil(sum(len(c) for _, c in messages) / 4) + 4 * len(messages)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimProc, Path]]:
    tmp = tmp_path_factory.mktemp("simresp")
    emlog = tmp / "emission.jsonl"
    proc = SimProc(
        tmp, "--profile", "tiny", "--emission-log", str(emlog), "--log-file", str(tmp / "sim.log"), "--seed", "7"
    )
    yield proc, emlog
    assert proc.stop() == 0


def raw_stream(
    proc: SimProc, body: dict[str, Any], rid: str | None = None, timeout_s: float = 10.0
) -> tuple[int, dict[str, str], list[tuple[int, bytes]]]:
    """POST a streamed call; (status, headers, [(time_ns the read returned, its bytes)])."""
    c = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=timeout_s)
    headers = {"Content-Type": "application/json", **({"X-Request-Id": rid} if rid else {})}
    try:
        c.request("POST", RESP, body=json.dumps({**body, "stream": True}), headers=headers)
        r = c.getresponse()
        reads = list(timed_reads(r))
        return r.status, {k.lower(): v for k, v in r.getheaders()}, reads
    finally:
        c.close()


def sse_events(raw: bytes) -> list[tuple[str, bytes]]:
    """(event name, data) of each SSE event in ``raw``."""
    out = []
    for block in raw.split(b"\n\n"):
        if not block.strip():
            continue
        name, data = "", b""
        for line in block.split(b"\n"):
            if line.startswith(b"event: "):
                name = line[7:].decode()
            elif line.startswith(b"data: "):
                data = line[6:]
        out.append((name, data))
    return out


def post(proc: SimProc, body: dict[str, Any], rid: str | None = None) -> tuple[int, dict[str, str], Any]:
    status, headers, raw = proc.post(RESP, body, headers={"X-Request-Id": rid} if rid else None)
    return status, headers, json.loads(raw)


def emission_lines(emlog: Path, rid: str, n_min: int, timeout_s: float = 3.0) -> list[dict[str, Any]]:
    """The emission log's lines for ``rid`` once it holds ``n_min`` (flushed every 0.2 s)."""
    deadline = time.monotonic() + timeout_s
    while True:
        lines = [json.loads(x) for x in emlog.read_text().splitlines()] if emlog.exists() else []
        mine = [x for x in lines if x["request_id"] == rid]
        if len(mine) >= n_min or time.monotonic() > deadline:
            return mine
        time.sleep(0.05)


def output_text(obj: dict[str, Any]) -> str:
    return "".join(p["text"] for item in obj["output"] for p in item["content"])


def test_streamed_events_order_shapes_usage_and_ids(sim: tuple[SimProc, Path]) -> None:
    proc, emlog = sim
    body = {"model": "sim-tiny", "input": "Tell me about spring.", "instructions": "Be brief."}
    status, headers, reads = raw_stream(proc, body, rid="rsp-stream-1")
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    assert headers["x-request-id"] == "rsp-stream-1"
    events = sse_events(b"".join(d for _, d in reads))
    names = [n for n, _ in events]
    objs = [json.loads(d) for _, d in events]
    n_deltas = names.count("response.output_text.delta")
    assert n_deltas >= 1
    assert names == [*STREAM_EVENTS, *["response.output_text.delta"] * n_deltas, *END_EVENTS, "response.completed"]
    assert [o["type"] for o in objs] == names
    assert [o["sequence_number"] for o in objs] == list(range(len(objs)))
    created, final = objs[0]["response"], objs[-1]["response"]
    assert created["id"] == final["id"] == "resp_rsp-stream-1"
    assert created["status"] == "in_progress" and created["output"] == [] and created["usage"] is None
    assert created["instructions"] == "Be brief." and created["model"] == "sim-tiny"
    item = objs[2]["item"]
    assert re.fullmatch(r"msg_[0-9a-f]{24}", item["id"]) and item["type"] == "message"
    assert item["role"] == "assistant" and item["status"] == "in_progress" and item["content"] == []
    deltas = [o for o in objs if o["type"] == "response.output_text.delta"]
    assert all(
        (d["item_id"], d["output_index"], d["content_index"]) == (item["id"], 0, 0) and d["delta"] for d in deltas
    )
    text = "".join(d["delta"] for d in deltas)
    assert objs[-4]["text"] == text and objs[-3]["part"]["text"] == text
    assert objs[-2]["item"]["status"] == "completed" and objs[-2]["item"]["content"][0]["text"] == text
    assert final["status"] == "completed" and final["incomplete_details"] is None and output_text(final) == text
    n_out = len(text.split())  # one word per token
    u = final["usage"]
    n_in = tokens([("system", "Be brief."), ("user", "Tell me about spring.")])
    assert u == {
        "input_tokens": n_in,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": n_out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": n_in + n_out,
    }
    # the emission log has one line per event, the deltas' tokens summing to the output
    lines = emission_lines(emlog, "rsp-stream-1", len(objs))
    assert [x["index"] for x in lines] == list(range(len(objs)))
    assert [x["kind"] for x in lines] == [
        "content" if n == "response.output_text.delta" else n.removeprefix("response.") for n in names
    ]
    assert [x["tokens"] for x in lines if x["kind"] == "content"] == [len(d["delta"].split()) for d in deltas]


def test_output_cap_makes_an_incomplete_response(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    body = {"input": [{"role": "user", "content": [{"type": "input_text", "text": "Count."}]}]}
    status, _, reads = raw_stream(proc, {**body, "max_output_tokens": 9, "ignore_eos": True})
    assert status == 200
    events = sse_events(b"".join(d for _, d in reads))
    assert events[-1][0] == "response.incomplete"
    final = json.loads(events[-1][1])["response"]
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["usage"]["output_tokens"] == 9 and len(output_text(final).split()) == 9
    assert re.fullmatch(r"resp_[0-9a-f]{32}", final["id"])


def test_non_streamed_response_object(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    body = {"input": "hello there", "max_output_tokens": 6, "ignore_eos": True, "temperature": 0.5}
    status, headers, obj = post(proc, body, rid="rsp-plain-1")
    assert status == 200 and headers["x-request-id"] == "rsp-plain-1"
    assert obj["object"] == "response" and obj["id"] == "resp_rsp-plain-1" and obj["status"] == "incomplete"
    assert obj["temperature"] == 0.5 and obj["store"] is True and obj["previous_response_id"] is None
    (item,) = obj["output"]
    assert item["type"] == "message" and item["role"] == "assistant" and item["id"].startswith("msg_")
    assert item["content"][0]["type"] == "output_text" and len(item["content"][0]["text"].split()) == 6
    assert obj["usage"]["input_tokens"] == tokens([("user", "hello there")])
    assert obj["usage"]["output_tokens"] == 6 and obj["usage"]["total_tokens"] == obj["usage"]["input_tokens"] + 6
    status, _, anon = post(proc, {"input": "hi", "max_output_tokens": 2})
    assert status == 200 and re.fullmatch(r"resp_[0-9a-f]{32}", anon["id"])


def test_previous_response_id_grows_the_prompt_and_hits_the_cache(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    status, _, t1 = post(proc, {"input": LONG, "max_output_tokens": 40, "ignore_eos": True, "instructions": "Sys."})
    assert status == 200
    reply = output_text(t1)
    assert t1["usage"]["input_tokens"] == tokens([("system", "Sys."), ("user", LONG)])
    # turn 2: the same instructions, the earlier turn before the new input
    body2 = {"input": "And then?", "previous_response_id": t1["id"], "instructions": "Sys.", "max_output_tokens": 5}
    status, _, t2 = post(proc, body2)
    assert status == 200 and t2["previous_response_id"] == t1["id"]
    turn2 = [("system", "Sys."), ("user", LONG), ("assistant", reply), ("user", "And then?")]
    assert t2["usage"]["input_tokens"] == tokens(turn2)
    # the cache holds turn 1's prompt and reply (every full 64-token block but the reply's last token)
    cached = t2["usage"]["input_tokens_details"]["cached_tokens"]
    turn1_and_reply = tokens(turn2[:3])
    assert turn1_and_reply - 64 - 4 < cached <= turn1_and_reply
    assert cached % 64 == 0
    # turn 3 chains on turn 2: instructions are not carried over, the conversation is
    status, _, t3 = post(proc, {"input": "Last one.", "previous_response_id": t2["id"], "max_output_tokens": 3})
    assert status == 200
    turn3 = [*turn2[1:], ("assistant", output_text(t2)), ("user", "Last one.")]
    assert t3["usage"]["input_tokens"] == tokens(turn3)
    # a chat call with turn 2's messages is the same prompt: same tokens, served from the same cache
    messages = [{"role": r, "content": c} for r, c in turn2]
    status, _, raw = proc.post(CHAT, {"messages": messages, "max_tokens": 1})
    chat = json.loads(raw)
    assert chat["usage"]["prompt_tokens"] == t2["usage"]["input_tokens"]
    assert chat["usage"]["prompt_tokens_details"]["cached_tokens"] >= cached


def test_unknown_or_unstored_previous_response_id(sim: tuple[SimProc, Path]) -> None:
    proc, _ = sim
    status, _, err = post(proc, {"input": "x", "previous_response_id": "resp_nope"})
    assert status == 404
    assert err == {
        "object": "error",
        "message": "Response with id 'resp_nope' not found.",
        "type": "invalid_request_error",
        "param": "response_id",
        "code": 404,
    }
    status, _, err = post(proc, {"input": "x", "previous_response_id": "chatcmpl-1"})
    assert status == 400 and "Expected an ID that begins with 'resp'" in err["message"]
    status, _, t1 = post(proc, {"input": "not kept", "store": False, "max_output_tokens": 2})
    assert status == 200 and t1["store"] is False
    status, _, err = post(proc, {"input": "x", "previous_response_id": t1["id"]})
    assert status == 404 and t1["id"] in err["message"]


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({}, "Field 'input' is required."),
        ({"input": []}, "non-empty list"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]}, "content[0]"),
        ({"input": [{"type": "web_search_call"}]}, "input[0].type 'web_search_call'"),
        ({"input": "x", "max_output_tokens": -1}, "max_output_tokens must be a non-negative integer"),
        ({"input": "x", "instructions": 3}, "instructions"),
    ],
)
def test_bad_bodies_get_400(sim: tuple[SimProc, Path], body: dict[str, Any], fragment: str) -> None:
    proc, _ = sim
    status, _, err = post(proc, body)
    assert status == 400 and fragment in err["message"], err
    assert proc.get(RESP)[0] == 405


def test_decoder_reads_the_simulators_stream_against_the_emission_log(sim: tuple[SimProc, Path]) -> None:
    proc, emlog = sim
    body = {"input": "Write a long story about the sea.", "max_output_tokens": 30, "ignore_eos": True}
    status, _, reads = raw_stream(proc, body, rid="rsp-decode-1")
    assert status == 200
    dec = ResponsesDecoder()
    for t_ns, data in reads:
        dec.feed(data, t_ns)
    res = dec.finish(time.time_ns())
    events = [json.loads(d) for _, d in sse_events(b"".join(d for _, d in reads))]
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert res.error_class() is None and res.done and res.status == "incomplete"
    assert res.response_id == "resp_rsp-decode-1" and res.model == "sim-tiny"
    assert res.text == "".join(deltas) and len(res.text.split()) == 30
    assert (res.prompt_tokens, res.completion_tokens, res.cached_tokens) == (
        events[-1]["response"]["usage"]["input_tokens"],
        30,
        0,
    )
    assert res.reasoning_tokens == 0 and res.finish_reason == "length"
    content = [x for x in emission_lines(emlog, "rsp-decode-1", len(events)) if x["kind"] == "content"]
    assert len(content) == len(res.chunk_times_ns) == len(deltas)
    assert sum(x["tokens"] for x in content) == 30
    # each delta arrived at or after the simulator stamped it (same host clock)
    assert all(arrival >= x["emit_ns"] for arrival, x in zip(res.chunk_times_ns, content, strict=True))


# -- faults: one simulator each -------------------------------------------------------------------

FAULT_BODY = {"input": "hello", "max_output_tokens": 10, "ignore_eos": True}


def decode(reads: list[tuple[int, bytes]]) -> Any:
    dec = ResponsesDecoder()
    for t_ns, data in reads:
        dec.feed(data, t_ns)
    return dec.finish(time.time_ns())


def test_stall_fault_keeps_the_stream_silent(tmp_path: Path) -> None:
    proc = SimProc(tmp_path, "--profile", "tiny", "--stall-after-chunks", "3")
    try:
        t0 = time.monotonic()
        status, _, reads = raw_stream(proc, FAULT_BODY, timeout_s=0.6)
        assert status == 200 and time.monotonic() - t0 >= 0.6
        res = decode(reads)
        assert len(res.chunk_times_ns) == 3 and not res.done and res.error_class() == "truncated"
    finally:
        proc.stop()


def test_malformed_fault_cuts_one_delta_and_the_stream_goes_on(tmp_path: Path) -> None:
    proc = SimProc(tmp_path, "--profile", "tiny", "--malformed-after-chunks", "2")
    try:
        status, _, reads = raw_stream(proc, FAULT_BODY)
        assert status == 200
        res = decode(reads)
        assert res.malformed == 1 and res.done and res.error_class() == "malformed_stream"
        assert len(res.chunk_times_ns) == 9 and res.completion_tokens == 10
    finally:
        proc.stop()


def test_error_fault_ends_the_stream_with_response_failed(tmp_path: Path) -> None:
    proc = SimProc(tmp_path, "--profile", "tiny", "--error-after-chunks", "2")
    try:
        status, _, reads = raw_stream(proc, FAULT_BODY, rid="rsp-fail-1")
        assert status == 200
        events = sse_events(b"".join(d for _, d in reads))
        assert events[-1][0] == "response.failed"
        failed = json.loads(events[-1][1])["response"]
        assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
        assert failed["id"] == "resp_rsp-fail-1"
        res = decode(reads)
        assert len(res.chunk_times_ns) == 2 and res.error_class() == "stream_error"
        # the request was aborted: the server is free and answers the next call
        assert proc.post(RESP, {**FAULT_BODY, "stream": False})[0] == 200
    finally:
        proc.stop()


def test_reject_window_answers_429_with_a_body(tmp_path: Path) -> None:
    proc = SimProc(tmp_path, "--profile", "tiny", "--reject-status", "429", "--reject-duration-s", "60")
    try:
        status, headers, raw = proc.post(RESP, FAULT_BODY)
        assert status == 429 and headers["retry-after"] == "1"
        assert json.loads(raw)["message"] == "Too many requests. Please retry later."
    finally:
        proc.stop()


def test_engine_abort_ends_a_stream_with_an_error_event_and_a_body_with_500(tmp_path: Path) -> None:
    # pool = (0.5 * 2.08 GB - 1 GB) / 32 KiB = 1220 tokens: a 1,000-token prompt cannot grow by 400
    proc = SimProc(tmp_path, "--profile", "tiny", "--hw-hbm-gb", "2.08", "--mem-fraction-static", "0.5")
    try:
        body = {"input": "z" * 4000, "max_output_tokens": 400, "ignore_eos": True}
        status, _, reads = raw_stream(proc, body, rid="rsp-abort-1")
        assert status == 200
        name, data = sse_events(b"".join(d for _, d in reads))[-1]
        err = json.loads(data)
        assert name == "error" and err["type"] == "error" and "cannot fit in the KV cache pool" in err["message"]
        assert decode(reads).error_class() == "stream_error"
        status, _, raw = proc.post(RESP, {**body, "input": "y" * 4000})
        assert status == 500 and "cannot fit in the KV cache pool" in json.loads(raw)["message"]
    finally:
        proc.stop()


def test_store_keeps_the_last_n_least_recently_used_out_first() -> None:
    store = ResponseStore(limit=2)
    store.put("resp_a", [{"role": "user", "content": "a"}])
    store.put("resp_b", [{"role": "user", "content": "b"}])
    assert store.get("resp_a") is not None  # a is now the most recent
    store.put("resp_c", [{"role": "user", "content": "c"}])
    assert store.get("resp_b") is None and store.get("resp_a") is not None and len(store) == 2


def test_unknown_response_body_in_vllm_style() -> None:
    body = json.loads(unknown_response_body("vllm", UnknownResponse(404, "Response with id 'resp_x' not found.")))
    assert body == {
        "error": {
            "message": "Response with id 'resp_x' not found.",
            "type": "invalid_request_error",
            "param": "response_id",
            "code": 404,
        }
    }
