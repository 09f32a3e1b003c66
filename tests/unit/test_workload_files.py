"""Workload files (issue 31): the format read back line by line, export that is the same every time,
redaction that keeps lengths and prefix sharing, the replay's rebuilding of conversations and tool
loops from the answers it got, ``show``'s figures, and ``import`` of each public trace format."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.cli.workload_cmd import main as workload_main
from loadgen.spec.request import Reply, ToolCall
from loadgen.workload.replay import FileWorkload
from loadgen.workload.wfile import (
    BLOCK_CHARS,
    SCHEMA,
    BlockText,
    WorkloadFileError,
    open_workload,
    read_header,
    redact_body,
    unredact_body,
)
from loadgen.workload.wshow import render_html, render_text, summarise
from tests.conftest import REPO


def _export(tmp: Path, name: str, *args: str) -> Path:
    out = tmp / name
    assert workload_main(["export", *args, "-o", str(out)]) == 0
    return out


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _write(path: Path, header: dict[str, Any], lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in [header, *lines]))
    return path


HEADER = {"schema": SCHEMA, "version": 1, "mode": "closed", "endpoint": "chat", "steps": [{"concurrency": 2}]}


def _req(user: int, order: int, text: str = "hello", **extra: Any) -> dict[str, Any]:
    body = {"max_tokens": 8, "messages": [{"role": "user", "content": text}], "stream": True}
    return {"step": 0, "user": user, "order": order, "think_s": 0.0, "endpoint": "chat", "body": body, **extra}


def test_the_same_options_export_the_same_file_and_a_file_exports_to_itself(tmp_path: Path) -> None:
    args = ["--scenario", str(REPO / "scenarios/agentic-multi-turn.toml"), "--concurrency", "2,3"]
    args += ["--step-seconds", "3", "--warmup-seconds", "1"]
    a = _export(tmp_path, "a.jsonl", *args)
    b = _export(tmp_path, "b.jsonl", *args)
    assert a.read_bytes() == b.read_bytes()
    again = _export(tmp_path, "again.jsonl", "--workload", str(a))
    assert again.read_bytes() == a.read_bytes()
    wf = open_workload(a)
    h = wf.header
    assert (h.mode, [s["concurrency"] for s in h.steps], [s["per_user"] for s in h.steps]) == ("closed", [2, 3], [8, 8])
    assert h.scenario is not None and h.scenario["name"] == "agentic-multi-turn" and len(h.scenario["sha256"]) == 64
    # each user's stream of each step, 8 requests each, turns that continue their conversation marked
    assert sorted(wf.streams) == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)] and wf.requests == 40
    lines = _lines(a)[1:]
    conts = [x for x in lines if x.get("cont")]
    assert conts and all(x["turn"] > 0 and [m["role"] for m in x["body"]["messages"]] == ["user"] for x in conts)
    firsts = [x for x in lines if not x.get("cont")]
    assert all(x["body"]["messages"][0]["role"] == "system" for x in firsts)
    assert "model" not in lines[0]["body"]


def test_open_loop_tenants_keep_their_times_names_and_priorities(tmp_path: Path) -> None:
    scenario = tmp_path / "two.toml"
    scenario.write_text(
        'name = "two"\n[load]\nmode = "open"\nrates = [4, 8]\n[[tenants]]\nname = "chat"\nshare = 0.5\npriority = 0\n'
        'slo = "ttft_p99=2s"\n[[tenants]]\nname = "batch"\nshare = 0.5\npriority = 1\n'
    )
    out = _export(tmp_path, "t.jsonl", "--scenario", str(scenario), "--step-seconds", "5", "--warmup-seconds", "0")
    wf = open_workload(out)
    assert wf.header.mode == "open" and [t["name"] for t in wf.header.tenants] == ["chat", "batch"]
    assert wf.header.tenants[0]["slo"] == "ttft_p99=2s"
    lines = _lines(out)[1:]
    for step in (0, 1):
        at = [x["at_s"] for x in lines if x["step"] == step]
        assert at == sorted(at) and at[0] >= 0 and at[-1] <= 5.0
    assert {x["tenant"]: x["body"]["priority"] for x in lines} == {"chat": 0, "batch": 1}
    assert 0.5 * 60 < len(lines) < 1.5 * 60  # (4 + 8) req/s for 5 s


@pytest.mark.parametrize(
    ("lines", "problem"),
    [
        ([_req(0, 0), _req(0, 2)], "order 2: this user's requests go 0, 1, ...; expected 1"),
        ([_req(0, 0), _req(1, 0), _req(0, 1)], "step 0 user 0 again after other lines"),
        ([_req(0, 0, cont=True)], "cont: the first request of a user's stream continues nothing"),
        ([{**_req(0, 0), "step": 3}], "step 3: must be a step of the header, 0 to 0"),
        ([{**_req(0, 0), "body": "hi"}], "body: must be the request's JSON body"),
        ([{**_req(0, 0), "endpoint": "chats"}], "endpoint 'chats'"),
        ([], "no requests after the header"),
    ],
)
def test_a_bad_line_is_named_with_its_number_and_what_to_do(tmp_path: Path, lines: list[Any], problem: str) -> None:
    path = _write(tmp_path / "bad.jsonl", HEADER, lines)
    with pytest.raises(WorkloadFileError) as err:
        open_workload(path)
    assert problem in str(err.value) and str(path) in str(err.value)


def test_another_schema_or_version_is_refused_in_one_line_exit_2(tmp_path: Path, capsys: Any) -> None:
    v2 = _write(tmp_path / "v2.jsonl", {**HEADER, "version": 2}, [_req(0, 0)])
    with pytest.raises(WorkloadFileError, match="schema version 2: this loadgen reads version 1"):
        read_header(v2)
    other = _write(tmp_path / "other.jsonl", {"schema": "aiperf", "version": 1}, [_req(0, 0)])
    with pytest.raises(WorkloadFileError, match="not a loadgen workload file"):
        read_header(other)
    assert workload_main(["show", str(v2)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "v2.jsonl:1: schema version 2" in err[0]


def test_redaction_keeps_lengths_and_shared_prefixes_and_no_text() -> None:
    system = "You are a careful assistant that answers in one paragraph. " * 5
    a = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": "What is a tuple?"}]}
    b = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": "What is a list, then?"}]}
    ra, rb = redact_body(a), redact_body(b)
    assert "assistant" not in json.dumps(ra) and "tuple" not in json.dumps(ra)
    sa = ra["messages"][0]["content"]["redacted"]
    assert sa["chars"] == len(system) and len(sa["blocks"]) == -(-len(system) // BLOCK_CHARS)
    assert ra["messages"][0] == rb["messages"][0]  # the shared system prompt: the same hashes
    assert ra["messages"][1] != rb["messages"][1]
    # a replay's text: the same lengths, and what was shared is shared again, byte for byte
    fill = BlockText("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu " * 40)
    ta, tb = unredact_body(ra, fill), unredact_body(rb, fill)
    assert [len(m["content"]) for m in ta["messages"]] == [len(m["content"]) for m in a["messages"]]
    assert ta["messages"][0]["content"] == tb["messages"][0]["content"]
    assert ta["messages"][1]["content"] != tb["messages"][1]["content"]
    # the chain: a block's hash covers what came before it, so equal text after a different start differs
    c = {"messages": [{"role": "user", "content": "x" + system}]}
    assert set(redact_body(c)["messages"][0]["content"]["redacted"]["blocks"]).isdisjoint(sa["blocks"])


def _agent_file(tmp: Path) -> FileWorkload:
    first = _req(0, 0, "find the bug", conversation="c1", turn=0)
    follow = _req(0, 1, conversation="c1", turn=1, cont=True)
    follow["body"]["messages"] = [{"role": "tool", "tool_call_id": "call_0", "content": "result A"}]
    third = _req(0, 2, conversation="c1", turn=2, cont=True)
    third["body"]["messages"] = [{"role": "tool", "tool_call_id": "call_1", "content": "result B"}]
    nxt = _req(0, 3, "a new task", conversation="c2", turn=0)
    return FileWorkload(open_workload(_write(tmp / "agent.jsonl", HEADER, [first, follow, third, nxt])))


def test_a_tool_loop_is_rebuilt_from_the_answers_the_replay_got(tmp_path: Path) -> None:
    wl = _agent_file(tmp_path)
    session = wl.session_at(0, 0)
    spec, _ = session.next()
    assert spec is not None and spec.body is not None and spec.body["messages"][-1]["content"] == "find the bug"
    calls = [ToolCall("srv-1", "search", '{"q": 1}'), ToolCall("srv-2", "read", "{}")]
    session.record_reply("looking", True, Reply(text="looking", tool_calls=calls))
    spec, _ = session.next()
    assert spec is not None and spec.body is not None
    msgs = spec.body["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "tool"]
    assert [c["id"] for c in msgs[1]["tool_calls"]] == ["srv-1", "srv-2"]
    # one result per call of the answer, with its id; the file's one result serves both
    assert [(m["tool_call_id"], m["content"]) for m in msgs[2:]] == [("srv-1", "result A"), ("srv-2", "result A")]
    assert spec.messages == msgs and spec.conversation == "c1" and spec.turn == 1
    # an answer that calls no tool ends the task: its last turn is passed over
    session.record_reply("done", True, Reply(text="done"))
    spec, _ = session.next()
    assert spec is not None and spec.conversation == "c2"
    spec, _ = session.next()
    assert spec is None and session.exhausted


def test_a_failed_turn_ends_its_conversation_at_replay(tmp_path: Path) -> None:
    session = _agent_file(tmp_path).session_at(0, 0)
    session.next()
    session.record_reply(None, False, None)
    spec, _ = session.next()
    assert spec is not None and spec.conversation == "c2"


def test_a_redacted_file_replays_with_text_of_the_same_lengths(tmp_path: Path) -> None:
    args = ["--scenario", str(REPO / "scenarios/chat.toml"), "--concurrency", "2", "--step-seconds", "2"]
    plain = _export(tmp_path, "p.jsonl", *args, "--warmup-seconds", "0")
    red = _export(tmp_path, "r.jsonl", "--workload", str(plain), "--redact")
    assert open_workload(red).header.redacted and "You are" not in red.read_text()
    a, b = FileWorkload.open(plain).session_at(0, 1), FileWorkload.open(red).session_at(0, 1)
    for _ in range(4):
        (sa, _), (sb, _) = a.next(), b.next()
        assert sa is not None and sb is not None and sa.messages is not None and sb.messages is not None
        assert [len(m["content"]) for m in sa.messages] == [len(m["content"]) for m in sb.messages]
        assert sa.max_tokens == sb.max_tokens and sa.context_tokens == sb.context_tokens
        a.record_reply("ok", True)
        b.record_reply("ok", True)


def test_show_counts_lengths_steps_and_prefix_sharing(tmp_path: Path) -> None:
    shared = "S" * (2 * BLOCK_CHARS)
    lines = [_req(0, 0, shared + "a" * BLOCK_CHARS), _req(0, 1, shared + "b" * BLOCK_CHARS), _req(1, 0, "c" * 10)]
    lines[0]["context_tokens"], lines[1]["context_tokens"] = 100, 300
    stats = summarise(open_workload(_write(tmp_path / "s.jsonl", HEADER, lines)))
    # of 3 * 64 + 3 * 64 + 10 characters, the second request's first 128 came before
    assert stats.prefix_share == pytest.approx(2 * BLOCK_CHARS / (6 * BLOCK_CHARS + 10))
    assert stats.groups["*"].requests == 3 and stats.groups["*"].context_tokens == [100, 300]
    assert stats.steps[0]["users"] == 2 and stats.steps[0]["requests"] == 3
    text = render_text(stats)
    assert "3 requests, closed loop" in text and "prefix sharing: 32.5%" in text
    assert "<svg" in render_html(stats)


TRACES = {
    "azure": (
        "azure.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:15:51.3004990,879,55\n",
        [0.0, 4.314579, 4.619909],
    ),
    "burstgpt": (
        "burst.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n"
        "7.5,ChatGPT,1087,44,1131,Conversation log\n12,GPT-4,417,109,526,API log\n",
        [0.0, 2.5, 7.0],
    ),
    "mooncake": (
        "moon.jsonl",
        '{"timestamp": 0, "input_length": 1200, "output_length": 30, "hash_ids": [1, 2, 3]}\n'
        '{"timestamp": 500, "input_length": 1100, "output_length": 40, "hash_ids": [1, 2, 4]}\n'
        '{"timestamp": 2000, "input_length": 300, "output_length": 50, "hash_ids": [9]}\n',
        [0.0, 0.5, 2.0],
    ),
}


@pytest.mark.parametrize("fmt", sorted(TRACES))
def test_import_turns_a_public_trace_into_an_open_loop_file(tmp_path: Path, fmt: str) -> None:
    name, text, times = TRACES[fmt]
    trace = tmp_path / name
    trace.write_text(text)
    out = tmp_path / "w.jsonl"
    assert workload_main(["import", str(trace), "--time-scale", "2", "-o", str(out)]) == 0  # found from the file
    wf = open_workload(out)
    assert wf.header.mode == "open" and wf.header.source == f"import:{fmt} {name}"
    lines = _lines(out)[1:]
    assert [x["at_s"] for x in lines] == pytest.approx([2 * t for t in times], abs=1e-5)
    wanted = {"azure": [44, 109, 55], "burstgpt": [18, 44, 109], "mooncake": [30, 40, 50]}[fmt]
    assert [x["body"]["max_tokens"] for x in lines] == wanted
    if fmt == "mooncake":  # requests that share leading hash ids share their prompts' leading text
        p0, p1 = (x["body"]["messages"][-1]["content"] for x in lines[:2])
        common = next(i for i, (c, d) in enumerate(zip(p0, p1, strict=False)) if c != d)
        assert common > 1000


def test_import_sharegpt_conversations_as_closed_loop_turns(tmp_path: Path) -> None:
    convs = [
        {"id": str(i), "conversations": [
            {"from": "human", "value": f"question {i} one"}, {"from": "gpt", "value": "answer"},
            {"from": "human", "value": f"question {i} two"}, {"from": "gpt", "value": "answer two"},
        ]}
        for i in range(6)
    ]  # fmt: skip
    src = tmp_path / "sg.json"
    src.write_text(json.dumps(convs))
    out = tmp_path / "sg.jsonl"
    assert workload_main(["import", str(src), "--concurrency", "2", "--requests-per-user", "4", "-o", str(out)]) == 0
    wf = open_workload(out)
    assert wf.header.mode == "closed" and wf.requests == 8
    lines = _lines(out)[1:]
    assert any(x.get("cont") for x in lines)
    users = {x["body"]["messages"][-1]["content"] for x in lines}
    assert any(u.startswith("question") and u.endswith("two") for u in users)


def test_a_replay_plan_is_the_files_steps(tmp_path: Path) -> None:
    out = _export(tmp_path, "o.jsonl", "--rate", "3,6", "--step-seconds", "4", "--warmup-seconds", "1",
                  "--context-tokens", "64", "--max-tokens", "8")  # fmt: skip
    plan = FileWorkload.open(out).plan()
    steps = [(p.rate, p.warmup_s, p.duration_s, p.open_loop) for p in plan]
    assert steps == [(3.0, 1.0, 4.0, True), (6.0, 1.0, 4.0, True)]
    arrivals = list(FileWorkload.open(out).arrivals(10**9, None, 0.0, step=1))
    assert arrivals and all(t == s.intended_ns for t, s in arrivals) and arrivals[0][0] >= 10**9
    buf = io.BytesIO(out.read_bytes())
    assert buf.readline().startswith(b'{"schema":"llm-loadgen.workload","version":1')


@pytest.mark.parametrize(
    "flags", [["--tenant", "a=x.toml"], ["--concurrency", "4"], ["--repeat", "2"], ["--rate", "3"]]
)
def test_a_replay_refuses_the_flags_that_would_set_its_requests_again(tmp_path: Path, flags: list[str]) -> None:
    from loadgen.cli import parser as cli
    from loadgen.cli.codes import UsageError
    from loadgen.cli.ramp_options import ramp_options

    path = _write(tmp_path / "w.jsonl", HEADER, [_req(0, 0)])
    argv = ["ramp", "--url", "http://127.0.0.1:1", "--workload", str(path), *flags]
    ns = cli.build_parser().parse_args(argv)
    with pytest.raises(UsageError, match=f"--workload {path} and {flags[0]}: the workload file holds"):
        ramp_options(ns, argv[1:])


def test_a_file_written_again_refuses_the_options_that_would_change_it(tmp_path: Path, capsys: Any) -> None:
    path = _write(tmp_path / "w.jsonl", HEADER, [_req(0, 0)])
    for extra in (["--concurrency", "4"], ["--requests-per-user", "3"]):
        assert workload_main(["export", "--workload", str(path), *extra, "-o", str(tmp_path / "o.jsonl")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"--workload {path} and {extra[0]}" in err[0], err
    assert not (tmp_path / "o.jsonl").exists()


def test_show_into_a_reader_that_stops_early_ends_quietly(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = _export(tmp_path, "w.jsonl", "--concurrency", "2", "--step-seconds", "2", "--context-tokens", "32")
    # ``true`` has gone before anything is written: the write meets a closed pipe every time
    cmd = f"{sys.executable} -m loadgen.cli workload show {path} | true"
    done = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
