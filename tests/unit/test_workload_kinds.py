"""Every kind of call a scenario makes: embeddings, rerank, tools and agent loops, Responses API
chaining, reasoning fields and images; parsed, rendered, and sent through request_body."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path

import orjson
import pytest

from loadgen.spec.calls import items_of, request_body
from loadgen.spec.request import Reply, RequestSpec, ToolCall
from loadgen.workload import Workload
from loadgen.workload.images import png_image
from loadgen.workload.prompts import estimate_tokens
from loadgen.workload.scenario import Scenario, ScenarioError, load_scenario, parse_scenario
from tests.unit.test_scenario import scenario_error

TOOLS = """
[tools]
choice = "auto"
[[tools.function]]
name = "search"
description = "Search the docs."
parameters = { type = "object", properties = { q = { type = "string" } }, required = ["q"] }
[[tools.function]]
name = "read_file"
parameters = { type = "object", properties = { path = { type = "string" } } }
"""

AGENT = (
    """
seed = 3
endpoint = "ENDPOINT"
[prompt]
input_tokens = 200
[output]
max_tokens = 64
"""
    + TOOLS
    + """
[agent]
max_turns = 5
tool_result_tokens = 300
tool_latency_s = 0.5
think_time_s = 1.0
"""
)


def scenario(text: str, base_dir: Path | None = None) -> Scenario:
    return parse_scenario(text, "test.toml", base_dir)


def calls(*names: str, turn: int = 0) -> Reply:
    return Reply("", [ToolCall(f"call-{turn}-{i}", n, '{"q": "x"}') for i, n in enumerate(names)])


def body(spec: RequestSpec) -> dict:
    return orjson.loads(request_body(spec, "m"))


# -- parsing ----------------------------------------------------------------------------------


def test_sections_parse_with_their_defaults() -> None:
    s = scenario(AGENT.replace("ENDPOINT", "responses") + '[reasoning]\neffort = "high"\n')
    assert s.endpoint == "responses" and s.tools is not None and s.agent is not None
    assert s.tools.names == ("search", "read_file") and s.tools.choice == "auto"
    assert s.tools.tools[0] == {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the docs.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        },
    }
    assert s.agent.max_turns == 5 and s.agent.responses_state == "previous_response_id"
    assert s.reasoning is not None and s.reasoning.effort == "high"
    e = scenario('endpoint = "embeddings"\n')
    assert e.embeddings is not None and e.embeddings.input_tokens is None
    r = scenario('endpoint = "rerank"\n')
    assert r.rerank is not None and r.rerank.documents.sample(None) == 8  # type: ignore[arg-type]


def test_a_named_tool_choice_becomes_a_function_choice() -> None:
    s = scenario(TOOLS.replace('choice = "auto"', 'choice = "read_file"'))
    assert s.tools is not None
    assert s.tools.choice == {"type": "function", "function": {"name": "read_file"}}


def test_tools_from_a_json_file_in_chat_or_flat_form(tmp_path: Path) -> None:
    tools = [
        {"type": "function", "function": {"name": "a", "parameters": {"type": "object", "properties": {}}}},
        {"type": "function", "name": "b", "description": "flat", "parameters": {"type": "object"}},
    ]
    (tmp_path / "tools.json").write_text(json.dumps(tools))
    s = scenario('[tools]\nfile = "tools.json"\nchoice = "b"\n', tmp_path)
    assert s.tools is not None and s.tools.names == ("a", "b")
    assert s.tools.tools[1]["function"] == {"name": "b", "description": "flat", "parameters": {"type": "object"}}


BAD: list[tuple[str, list[str]]] = [
    (
        '[[tools.function]]\nname = "a"\nparameters = { type = "object" }\n[[tools.function]]\nname = "search"\n'
        'parameters = { type = "object", properties = { q = { type = "strng" } } }\n',
        [
            ":6:",
            "tools.function[1] 'search': parameters is not valid JSON Schema at properties.q.type: "
            "'strng' is not valid under any of the given schemas",
        ],
    ),
    (
        '[[tools.function]]\nname = "a"\nparameters = { "$schema" = "http://json-schema.org/draft-07/schema#", '
        'type = "object", properties = { q = { minLength = -1 } } }\n',
        ["tools.function[0] 'a'", "at properties.q.minLength"],
    ),
    ('[[tools.function]]\nname = "a b"\n', ["tools.function[0]", "must be 1-64 letters"]),
    ('[tools]\nchoice = "find"\n[[tools.function]]\nname = "search"\n', [":2:", 'tools.choice = "find"', '"search"']),
    ('[tools]\nfile = "nope.json"\n', [":2:", "no such file", "nope.json"]),
    ("[images]\nwidth = 0\n", [":2:", "images.width = 0"]),
    ("[images]\nheight = 20000\n", [":2:", "images.height = 20000", "16384"]),
    ('[images]\nwidth = { dist = "uniform", low = -5, high = 10 }\n', ["images.width", "low"]),
    ('[images]\nfiles = ["missing.png"]\n', [":2:", "images.files[0]", "no such image file", "missing.png"]),
    ('endpoint = "embedings"\n', [":1:", 'did you mean "embeddings"']),
    ('endpoint = "completions"\n' + TOOLS, ["tools: has no place in a completions prompt"]),
    ('endpoint = "rerank"\n[images]\ncount = 1\n', ["images: applies to generative endpoints"]),
    ("[embeddings]\nbatch = 4\n", ['embeddings: applies to endpoint = "embeddings" only']),
    ("[agent]\nmax_turns = 3\n", ["agent: needs tools"]),
    (TOOLS + "[agent]\n[conversation]\nturns = 3\n", ["remove [conversation]"]),
    ('[conversation]\nturns = 2\nresponses_state = "resend"\n', ['applies to endpoint = "responses" only']),
    ('endpoint = "responses"\n[reasoning]\nthinking = true\n', ['endpoint = "chat" only']),
]


@pytest.mark.parametrize(("text", "expected"), BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_sections_name_file_field_and_problem(tmp_path: Path, text: str, expected: list[str]) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    message = scenario_error(path, expected)
    assert message.startswith(str(path))


def test_a_bad_schema_in_a_tools_file_names_that_file(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_text(json.dumps([{"name": "s", "parameters": {"type": "strng"}}]))
    (tmp_path / "s.toml").write_text('[tools]\nfile = "t.json"\n')
    with pytest.raises(ScenarioError) as info:
        load_scenario(tmp_path / "s.toml")
    assert str(tmp_path / "t.json") in str(info.value) and "'s': parameters is not valid JSON Schema" in str(info.value)


# -- agent loops ------------------------------------------------------------------------------


def test_an_agent_task_grows_by_each_tool_result_and_stops_at_the_cap() -> None:
    session = Workload(scenario(AGENT.replace("ENDPOINT", "chat"))).session(0)
    spec, think = session.next()
    assert think == 0.0 and spec.turn == 0 and spec.max_turns == 5 and spec.tools and spec.tool_choice == "auto"
    task = spec.conversation
    previous = spec
    for turn in range(1, 5):
        session.record_reply(None, True, calls("search", "read_file", turn=turn - 1))
        spec, think = session.next()
        assert spec.conversation == task and spec.turn == turn and think == pytest.approx(1.5)
        assert spec.messages is not None and previous.messages is not None
        n = len(previous.messages)
        assert spec.messages[:n] == previous.messages
        assistant, *results = spec.messages[n:]
        assert assistant["role"] == "assistant" and [c["function"]["name"] for c in assistant["tool_calls"]] == [
            "search",
            "read_file",
        ]
        assert [r["tool_call_id"] for r in results] == [f"call-{turn - 1}-0", f"call-{turn - 1}-1"]
        assert all(r["role"] == "tool" and 290 <= estimate_tokens(r["content"]) <= 300 for r in results)
        assert spec.context_tokens is not None and previous.context_tokens is not None
        assert spec.context_tokens >= previous.context_tokens + 600  # both results, the reply on top
        previous = spec
    # the fifth turn was the last: its tool calls start a new task
    session.record_reply("", True, calls("search", turn=4))
    spec, _ = session.next()
    assert spec.turn == 0 and spec.conversation != task and session.conversations_started == 2


def test_a_reply_without_tool_calls_or_a_failure_ends_the_task() -> None:
    session = Workload(scenario(AGENT.replace("ENDPOINT", "chat"))).session(0)
    first, _ = session.next()
    session.record_reply("done", True, Reply("done"))
    spec, _ = session.next()
    assert spec.turn == 0 and spec.conversation != first.conversation
    session.record_reply(None, False, calls("search"))
    spec2, _ = session.next()
    assert spec2.turn == 0 and spec2.conversation != spec.conversation


def test_a_tool_call_reply_whose_text_was_not_kept_continues_with_a_stand_in() -> None:
    session = Workload(scenario(AGENT.replace("ENDPOINT", "chat"))).session(0)
    session.next()
    session.record_reply(None, True, Reply(None, [ToolCall("c1", "search", "{}")]))
    spec, _ = session.next()
    assert spec.turn == 1 and "stand-in" in spec.source
    assert spec.messages is not None and spec.messages[-2]["content"]  # the stood-in text


def test_tools_without_an_agent_go_with_single_requests() -> None:
    session = Workload(scenario(TOOLS)).session(0)
    spec, _ = session.next()
    session.record_reply("", True, calls("search"))
    spec2, _ = session.next()
    assert spec.tools and spec2.tools and spec.conversation is None and spec2.turn == 0


# -- Responses API chaining -------------------------------------------------------------------


def test_an_agent_on_responses_chains_to_the_stored_reply_and_sends_the_tool_outputs() -> None:
    session = Workload(scenario(AGENT.replace("ENDPOINT", "responses"))).session(0)
    spec, _ = session.next()
    assert spec.previous_response_id is None and body(spec)["store"] is True
    reply = calls("search")
    reply.response_id = "resp_1"
    session.record_reply("", True, reply)
    spec, _ = session.next()
    assert spec.previous_response_id == "resp_1" and spec.messages is not None
    assert spec.messages[spec.new_from]["role"] == "tool" and spec.new_from == len(spec.messages) - 1
    sent = body(spec)
    assert sent["previous_response_id"] == "resp_1"
    assert sent["input"] == [
        {"type": "function_call_output", "call_id": "call-0-0", "output": spec.messages[-1]["content"]}
    ]
    assert [t["name"] for t in sent["tools"]] == ["search", "read_file"]
    # a reply without an id: the next turn resends everything
    session.record_reply("", True, calls("read_file"))
    spec, _ = session.next()
    assert spec.previous_response_id is None and spec.new_from == 0


def test_a_responses_conversation_chains_each_new_user_turn() -> None:
    text = 'endpoint = "responses"\n[prompt]\ninput_tokens = 100\n[conversation]\nturns = 3\n'
    session = Workload(scenario(text)).session(0)
    session.next()
    session.record_reply("first answer", True, Reply("first answer", response_id="r1"))
    spec, _ = session.next()
    assert spec.previous_response_id == "r1" and spec.messages is not None
    assert spec.new_from == len(spec.messages) - 1 and spec.messages[-2]["content"] == "first answer"
    assert [item["role"] for item in body(spec)["input"]] == ["user"]
    resend = Workload(scenario(text.replace("turns = 3", 'turns = 3\nresponses_state = "resend"'))).session(0)
    resend.next()
    resend.record_reply("a", True, Reply("a", response_id="r1"))
    spec, _ = resend.next()
    assert spec.previous_response_id is None and body(spec)["store"] is False and len(body(spec)["input"]) == 3


# -- embeddings, rerank, reasoning ------------------------------------------------------------


def test_embeddings_requests_are_batches_of_corpus_text() -> None:
    text = 'endpoint = "embeddings"\nseed = 2\n[embeddings]\nbatch = 4\ninput_tokens = 100\n'
    spec, _ = Workload(scenario(text)).session(0).next()
    assert spec.endpoint == "embeddings" and spec.inputs is not None and len(spec.inputs) == 4
    assert all(98 <= estimate_tokens(t) <= 100 for t in spec.inputs)
    assert spec.context_tokens == 400 and items_of(spec) == 4 and not spec.stream
    assert body(spec) == {"model": "m", "input": spec.inputs}
    # without the section: batch 1, the prompt's lengths
    spec, _ = Workload(scenario('endpoint = "embeddings"\n[prompt]\ninput_tokens = 50\n')).session(0).next()
    assert spec.inputs is not None and len(spec.inputs) == 1 and spec.context_tokens == 50


def test_rerank_requests_are_a_query_and_documents() -> None:
    spec, _ = Workload(scenario('endpoint = "rerank"\n')).session(0).next()
    assert spec.query and spec.documents is not None and len(spec.documents) == 8
    assert 14 <= estimate_tokens(spec.query) <= 16
    assert all(126 <= estimate_tokens(d) <= 128 for d in spec.documents)
    assert spec.context_tokens == 8 * (16 + 128)
    assert body(spec) == {"model": "m", "query": spec.query, "documents": spec.documents}


def test_reasoning_fields_for_chat_and_responses() -> None:
    chat = Workload(scenario('[reasoning]\neffort = "low"\nthinking = false\n')).session(0).next()[0]
    assert body(chat)["reasoning_effort"] == "low"
    assert body(chat)["chat_template_kwargs"] == {"enable_thinking": False}
    responses = Workload(scenario('endpoint = "responses"\n[reasoning]\neffort = "medium"\n')).session(0).next()[0]
    assert body(responses)["reasoning"] == {"effort": "medium"} and "reasoning_effort" not in body(responses)


# -- images -----------------------------------------------------------------------------------


def decode_png(data: bytes) -> tuple[int, int, bytes]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    i, idat, size = 8, b"", (0, 0)
    while i < len(data):
        (n,) = struct.unpack(">I", data[i : i + 4])
        kind, chunk = data[i + 4 : i + 8], data[i + 8 : i + 8 + n]
        assert struct.unpack(">I", data[i + 8 + n : i + 12 + n])[0] == zlib.crc32(kind + chunk)
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", chunk[:10])
            assert (depth, colour) == (8, 2)
            size = (width, height)
        elif kind == b"IDAT":
            idat += chunk
        i += 12 + n
    return size[0], size[1], zlib.decompress(idat)  # checks the Adler-32 too


@pytest.mark.parametrize(("width", "height"), [(1, 1), (5, 3), (64, 9), (448, 672)])
def test_generated_pngs_are_valid_and_of_a_realistic_size(width: int, height: int) -> None:
    data = png_image(width, height, seed=1, index=7)
    w, h, raw = decode_png(data)
    assert (w, h) == (width, height) and len(raw) == height * (3 * width + 1)
    assert png_image(width, height, 1, 7) == data and png_image(width, height, 1, 8) != data
    if width * height > 10_000:
        assert 0.5 <= len(data) / (width * height) <= 2.0


def test_image_requests_carry_data_urls_after_the_text(tmp_path: Path) -> None:
    text = "seed = 4\n[prompt]\ninput_tokens = 50\n[images]\ncount = 2\nwidth = 64\nheight = 32\n"
    a, _ = Workload(scenario(text)).session(0).next()
    b, _ = Workload(scenario(text)).session(0).next()
    assert a.messages == b.messages and a.images == 2 and a.context_tokens == 50
    assert a.messages is not None
    text_part, *images = a.messages[-1]["content"]
    assert text_part["type"] == "text" and [p["type"] for p in images] == ["image_url", "image_url"]
    url = images[0]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert decode_png(base64.b64decode(url.split(",", 1)[1]))[:2] == (64, 32)
    assert images[0] != images[1]
    sent = body(a)
    assert sent["messages"][-1]["content"][1]["image_url"]["url"] == url
    # local files, sent with their MIME type
    (tmp_path / "pic.jpg").write_bytes(b"\xff\xd8\xff fake jpeg")
    s = scenario('[images]\nfiles = ["pic.jpg"]\n', tmp_path)
    spec, _ = Workload(s).session(0).next()
    assert spec.messages is not None
    assert spec.messages[-1]["content"][1]["image_url"]["url"].startswith("data:image/jpeg;base64,")


# -- every endpoint's body ------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["chat", "completions", "responses", "embeddings", "rerank"])
def test_every_endpoint_renders_a_valid_body(endpoint: str) -> None:
    text = f'endpoint = "{endpoint}"\n[prompt]\ninput_tokens = 40\n'
    if endpoint in ("chat", "responses"):
        text += TOOLS + "[images]\nwidth = 16\nheight = 16\n"
    spec, _ = Workload(scenario(text)).session(0).next()
    sent = body(spec)
    assert sent["model"] == "m"
    keys = {
        "chat": {"messages", "max_tokens", "tools", "tool_choice", "stream"},
        "completions": {"prompt", "max_tokens", "stream"},
        "responses": {"input", "max_output_tokens", "tools", "tool_choice", "stream"},
        "embeddings": {"input"},
        "rerank": {"query", "documents"},
    }[endpoint]
    assert keys <= set(sent)
    if endpoint == "responses":
        assert [p["type"] for p in sent["input"][-1]["content"]] == ["input_text", "input_image"]


def test_same_seed_same_requests_for_every_kind() -> None:
    def draw(text: str) -> str:
        session = Workload(scenario(text)).session(1)
        out = []
        for i in range(6):
            spec, think = session.next()
            out.append(request_body(spec, "m").decode() + f"|{think}|{spec.context_tokens}")
            session.record_reply("", True, calls("search", turn=i))
        return "\n".join(out)

    for text in (
        AGENT.replace("ENDPOINT", "chat"),
        'endpoint = "embeddings"\n[embeddings]\nbatch = { dist = "uniform", low = 1, high = 8 }\n',
        'endpoint = "rerank"\n[rerank]\ndocuments = { dist = "uniform", low = 2, high = 9 }\n',
        '[images]\nwidth = { dist = "uniform", low = 8, high = 40 }\nheight = 16\n',
    ):
        assert draw(text) == draw(text)
        assert draw(text) != draw(text.replace("seed = 3", "seed = 4") if "seed = 3" in text else "seed = 5\n" + text)
