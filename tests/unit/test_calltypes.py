"""Mixed call types, kinds of output, agent tasks and images (``analysis.calltypes``) against
hand-computed truths: synthetic run directories whose every time and count is known."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.analysis.calltypes import CallTypeError, call_type_steps, knee_steps
from loadgen.analysis.load import MISSING, load_run
from loadgen.analysis.summary import build_summary
from loadgen.analysis.synthetic import MS, at_ms, make_record, step_lines, write_run_dir
from loadgen.report.pipeline import rebuild
from loadgen.rundir.records import RequestRecord

WINDOW = (1000, 11_000)  # ms: the steady window of step 0 in most runs below


def _embedding(rid: str, step: int, sent_ms: float, **kw: Any) -> RequestRecord:
    rec = make_record(rid, step, sent_ms, [], end_ms=20, output_tokens=None, prompt_tokens=50, **kw)
    return replace(rec, endpoint="embeddings", inputs=4, finish_reason=None)


def mixed_run(path: Path) -> Path:
    """Step 0, window [1000, 11000) ms: 5 chat calls (TTFT 100 ms, 3 tokens, 100 prompt tokens, E2E
    300 ms) and 6 embeddings calls (4 inputs, 50 prompt tokens, E2E 20 ms) and one that failed."""
    chat = [make_record(f"c{i}", 0, 2000 + 1000 * i, [100, 200, 300], prompt_tokens=100) for i in range(5)]
    emb = [_embedding(f"e{i}", 0, 1500 + 1000 * i) for i in range(6)]
    emb.append(
        replace(
            _embedding("bad", 0, 9000, status=500, error_class="http_5xx", error="boom"),
            prompt_tokens=None,
            inputs=4,
        )
    )
    return write_run_dir(
        path,
        steps=step_lines(0, 0, *WINDOW, concurrency=4),
        records={"requests-w0.jsonl": chat, "requests-w1.jsonl": emb},
        manifest={"label": "mixed"},
    )


def test_by_call_splits_a_mixed_step(tmp_path: Path) -> None:
    summary = build_summary(load_run(mixed_run(tmp_path)))
    step = summary["steps"][0]
    by_call = step["by_call"]
    assert set(by_call) == {"chat", "embeddings"}
    chat, emb = by_call["chat"], by_call["embeddings"]
    assert chat["kind"] == "generative" and emb["kind"] == "pooling"
    assert (chat["requests_ok"], chat["requests_failed"]) == (5, 0)
    assert (emb["requests_ok"], emb["requests_failed"], emb["errors"]) == (6, 1, {"http_5xx": 1})
    assert chat["ttft_ms"]["p50"] == pytest.approx(100.0)
    assert chat["e2e_ms"]["p99"] == pytest.approx(300.0)
    assert chat["tpot_ms"]["mean"] == pytest.approx(100.0)  # (300 - 100) / (3 - 1)
    assert chat["output_tok_s"] == pytest.approx(15 / 10)  # 15 tokens arrived in a 10 s window
    assert chat["prompt_tok_s"] == pytest.approx(500 / 10)
    assert "ttft_ms" not in emb and "output_tok_s" not in emb
    assert emb["e2e_ms"]["mean"] == pytest.approx(20.0)
    assert emb["inputs_s"] == pytest.approx(24 / 10)  # the failed call's inputs do not count
    assert emb["prompt_tok_s"] == pytest.approx(300 / 10)
    # the step's own figures are those of every call, as before
    assert step["requests_ok"] == 11 and step["requests_failed"] == 1
    assert step["ttft_ms"]["p50"] == pytest.approx(100.0)
    # chat served 5 x (100 + 3) tokens, embeddings 6 x 50: the knee is about chat
    assert summary["knee_call_type"] == "chat"
    view = knee_steps(summary)[0]
    assert view["requests_ok"] == 5 and view["output_tok_s"] == pytest.approx(1.5)


def test_the_call_type_can_be_named_and_must_exist(tmp_path: Path) -> None:
    run = load_run(mixed_run(tmp_path))
    summary = build_summary(run, call_type="embeddings")
    assert summary["knee_call_type"] == "embeddings"
    view = knee_steps(summary)[0]
    assert view["output_tok_s"] == pytest.approx(30.0)  # prompt tok/s of the pooling calls
    assert (view["requests_ok"], view["requests_failed"], view["errors"]) == (6, 1, {"http_5xx": 1})
    assert view["ttft_ms"]["p50"] is None and view["e2e_ms"]["p50"] == pytest.approx(20.0)
    with pytest.raises(CallTypeError, match="'rerank' is not in this run: it has chat, embeddings"):
        build_summary(run, call_type="rerank")


def test_the_manifest_can_name_the_call_type(tmp_path: Path) -> None:
    path = mixed_run(tmp_path)
    (path / "manifest.json").write_text(json.dumps({"options": {"call_type": "embeddings"}}))
    assert build_summary(load_run(path))["knee_call_type"] == "embeddings"


def test_a_plain_chat_run_has_no_breakdown(tmp_path: Path) -> None:
    recs = [make_record(f"c{i}", 0, 2000 + 1000 * i, [100, 200]) for i in range(6)]
    run = write_run_dir(tmp_path, steps=step_lines(0, 0, *WINDOW, concurrency=1), records={"requests.jsonl": recs})
    summary = rebuild(run)
    step = summary["steps"][0]
    new_keys = {"by_call", "ttft_reasoning_ms", "tool_calls", "agent", "images"}
    assert not new_keys & set(step) and "knee_call_type" not in summary
    assert call_type_steps(summary["steps"], None) == summary["steps"]
    md = (run / "report.md").read_text()
    assert "By call type" not in md and "Agent tasks" not in md and "Kinds of output" not in md


def test_a_pooling_only_ramp_is_valid_and_its_knee_reads_prompt_tokens(tmp_path: Path) -> None:
    steps, recs = [], []
    for s, c in enumerate((1, 2, 4)):
        t0 = s * 12_000
        steps += step_lines(s, t0, t0 + 1000, t0 + 11_000, concurrency=c)
        recs += [_embedding(f"e{s}-{i}", s, t0 + 1000 + 100 * i) for i in range(10 * c)]
    path = write_run_dir(tmp_path, steps=steps, records={"requests.jsonl": recs})
    summary = rebuild(path)
    assert summary["knee_call_type"] == "embeddings"
    assert all(s["valid"] for s in summary["steps"])
    assert [s["by_call"]["embeddings"]["inputs_s"] for s in summary["steps"]] == pytest.approx([4.0, 8.0, 16.0])
    assert [s["output_tok_s"] for s in knee_steps(summary)] == pytest.approx([50.0, 100.0, 200.0])
    assert summary["knee"]["detectors"]["marginal_gain"]["has_data"]
    md = (path / "report.md").read_text()
    assert (
        "| 2 | C=4 | embeddings (knee) | pooling | 40 / 0 | 16.0 inputs/s, 200.0 prompt tok/s | – | 20.0 / 20.0 |" in md
    )
    assert "- Peak embeddings throughput: 200.0 prompt tok/s at C=4" in md
    assert "Call type: embeddings (its throughput and latencies feed the verdict and the plan)." in md
    assert "<h2 id=by-call>By call type</h2>" in (path / "report.html").read_text()


def test_kinds_of_output(tmp_path: Path) -> None:
    """Reasoning first (50 ms), then the answer (200 ms); one request calls tools at 150 ms."""
    recs = []
    for i in range(4):
        rec = make_record(f"r{i}", 0, 2000 + 1000 * i, [50, 100, 200, 250], output_tokens=40)
        sent = rec.sent_ns
        recs.append(
            replace(rec, first_reasoning_ns=sent + 50 * MS, first_answer_ns=sent + 200 * MS, reasoning_tokens=30)
        )
    tool = make_record("t", 0, 7000, [150, 160], output_tokens=10, intended_ms=6990)
    recs.append(
        replace(tool, first_tool_ns=tool.sent_ns + 150 * MS, tool_calls=2, tool_args_chars=40, reasoning_tokens=0)
    )
    path = write_run_dir(tmp_path, steps=step_lines(0, 0, *WINDOW, concurrency=1), records={"requests.jsonl": recs})
    step = build_summary(load_run(path))["steps"][0]
    assert step["ttft_reasoning_ms"] == {"mean": 50.0, "p50": 50.0, "p90": 50.0, "p99": 50.0}
    assert step["ttft_answer_ms"]["p50"] == pytest.approx(200.0)
    assert step["ttft_tool_ms"]["p50"] == pytest.approx(160.0)  # from the intended send, 10 ms earlier
    assert step["ttft_ms"]["p50"] == pytest.approx(50.0)  # TTFT stays the first output of any kind
    assert step["reasoning_tokens_mean"] == pytest.approx(120 / 5)
    assert step["reasoning_share"] == pytest.approx(120 / 170)
    assert step["tool_calls"] == 2 and step["tool_args_chars_mean"] == pytest.approx(40.0)
    assert "by_call" not in step  # one call type, chat


AGENT_TURN_MS = 700  # each turn: TTFT 100 ms x (turn + 1), E2E 600 ms, the next sent 100 ms later


def _task(
    task: str, start_ms: float, n: int, *, tool_last: bool = True, fail_last: str | None = None
) -> list[RequestRecord]:
    out = []
    for t in range(n):
        sent = start_ms + AGENT_TURN_MS * t
        last = t == n - 1
        if last and fail_last:
            rec = make_record(
                f"{task}-{t}",
                0,
                sent,
                [],
                end_ms=10,
                status=500 if fail_last != "cancelled" else 0,
                error_class=fail_last,
                output_tokens=None,
                prompt_tokens=None,
            )
        else:
            rec = make_record(f"{task}-{t}", 0, sent, [100 * (t + 1)], end_ms=600, prompt_tokens=1000 + 500 * t)
        calls = 1 if (not last or tool_last) and not (last and fail_last) else 0
        out.append(replace(rec, conversation=task, turn=t, max_turns=5, tool_calls=calls, tool_args_chars=10 * calls))
    return out


def agent_run(path: Path) -> Path:
    recs = [
        *_task("T1", 2000, 3, tool_last=False),  # answers at turn 2: complete, 2000 ms
        *_task("T2", 5000, 5),  # every turn calls a tool; turn 4 is the last allowed: complete, 3400 ms
        *_task("T3", 9000, 2, fail_last="http_5xx"),  # fails at turn 1: complete (failed), 710 ms
        *_task("T4", 11_000, 2),  # still calling tools when the run ended: cut
        *_task("T5", 13_000, 1, fail_last="cancelled"),  # the client stopped it: cut
        *_task("T6", 500, 1, tool_last=False),  # first turn in the warm-up: not counted
    ]
    return write_run_dir(
        path,
        steps=step_lines(0, 0, 1000, 31_000, concurrency=4),
        records={"requests.jsonl": recs},
        manifest={"label": "agent"},
    )


def test_agent_tasks_and_turns(tmp_path: Path) -> None:
    path = agent_run(tmp_path)
    summary = rebuild(path)
    agent = summary["steps"][0]["agent"]
    assert [(t["turn"], t["requests"], t["ttft_ms"]["p50"], t["prompt_tokens_mean"]) for t in agent["turns"]] == [
        (0, 4, 100.0, 1000.0),
        (1, 3, 200.0, 1500.0),
        (2, 2, 300.0, 2000.0),
        (3, 1, 400.0, 2500.0),
        (4, 1, 500.0, 3000.0),
    ]
    assert (agent["tasks_complete"], agent["tasks_failed"], agent["tasks_cut"]) == (3, 1, 2)
    task = agent["task_ms"]  # tasks of 710, 2000 and 3400 ms; the cut ones never averaged in
    assert task["p50"] == pytest.approx(2000.0)
    assert task["mean"] == pytest.approx(6110 / 3)
    assert task["p99"] == pytest.approx(2000 + 0.98 * 1400)
    md = (path / "report.md").read_text()
    assert "## Agent tasks" in md
    assert "| 0 | C=4 | 4 | 1 | 500.0 / 500.0 | 3,000 |" in md
    assert "3 tasks complete (1 ended by a failure), 2 cut; time per task p50 / p99 2.00 / 3.37 s." in md
    assert "<h2 id=agent>Agent tasks</h2>" in (path / "report.html").read_text()


def test_image_tokens_per_image(tmp_path: Path) -> None:
    recs = [
        replace(make_record("a", 0, 2000, [100], prompt_tokens=1100, context_tokens=100), images=2),
        replace(make_record("b", 0, 3000, [100], prompt_tokens=400, context_tokens=100), images=1),
        make_record("c", 0, 4000, [100], prompt_tokens=100, context_tokens=100),
    ]
    steps = step_lines(0, 0, *WINDOW, concurrency=1)
    path = write_run_dir(tmp_path / "est", steps=steps, records={"requests.jsonl": recs})
    images = build_summary(load_run(path))["steps"][0]["images"]
    assert images == {
        "requests": 2,
        "images": 3,
        "prompt_tokens_mean": 750.0,
        "context_tokens_mean": 100.0,
        "image_tokens_per_image_mean": 400.0,  # (1000 / 2 + 300 / 1) / 2
        "estimate": True,
    }
    exact = write_run_dir(
        tmp_path / "tok", steps=steps, records={"requests.jsonl": recs}, manifest={"options": {"tokenizer": "/t.json"}}
    )
    assert build_summary(load_run(exact))["steps"][0]["images"]["estimate"] is False
    rebuild(path)
    assert "≈400 tokens per image (estimate" in (path / "report.md").read_text()


def test_old_records_read_the_new_fields_as_defaults(tmp_path: Path) -> None:
    """A record written before the fields existed, and a block mixing both kinds of lines."""
    new = make_record("new", 0, 2000, [100])
    old = {
        k: v
        for k, v in orjson.loads(new.to_json()).items()
        if k
        not in (
            "inputs",
            "images",
            "max_turns",
            "first_reasoning_ns",
            "first_answer_ns",
            "first_tool_ns",
            "reasoning_tokens",
            "tool_calls",
            "tool_args_chars",
            "turn",
            "conversation",
        )
    }
    old["id"] = "old"
    newer = replace(new, id="newer", inputs=3, images=1, turn=2, conversation="x", tool_calls=1)
    (tmp_path / "requests.jsonl").write_bytes(orjson.dumps(old) + b"\n" + newer.to_json())
    req = load_run(tmp_path).requests
    assert req.inputs.tolist() == [MISSING, 3]
    assert req.images.tolist() == [0, 1]
    assert req.turn.tolist() == [0, 2]
    assert req.tool_calls.tolist() == [0, 1]
    assert req.max_turns.tolist() == [MISSING, MISSING]
    assert req.first_reasoning_ns.tolist() == [MISSING, MISSING]
    assert req.conversation.values() == [None, "x"]
    (tmp_path / "requests.jsonl").write_bytes(orjson.dumps(old) + b"\n")
    only_old = load_run(tmp_path).requests
    assert only_old.inputs.tolist() == [MISSING] and only_old.conversation.values() == [None]


def test_tasks_span_the_run_not_only_a_file(tmp_path: Path) -> None:
    """A task's turns written by two workers are one task."""
    turns = _task("T", 2000, 2, tool_last=False)
    path = write_run_dir(
        tmp_path,
        steps=step_lines(0, 0, *WINDOW, concurrency=1),
        records={"requests-w0.jsonl": turns[:1], "requests-w1.jsonl": turns[1:]},
    )
    agent = build_summary(load_run(path))["steps"][0]["agent"]
    assert (agent["tasks_complete"], agent["tasks_cut"]) == (1, 0)
    assert agent["task_ms"]["p50"] == pytest.approx(AGENT_TURN_MS + 600)
    assert at_ms(0) > 0


def test_the_plan_is_about_the_knee_call_type(tmp_path: Path) -> None:
    path = mixed_run(tmp_path)
    request = {"slo": {"e2e_p99_ms": 400.0}, "headroom": 0.0, "gpus_per_replica": 1}
    chat = rebuild(path, write_plan_request=request)
    op = chat["plan"]["operating_point"]
    assert chat["knee_call_type"] == "chat" and op is not None and op["concurrency"] == 4
    assert op["ok_req_s"] == pytest.approx(5 / 10)  # the chat calls' rate, not every call's
    assert op["output_tok_s"] == pytest.approx(1.5)
    emb = rebuild(path, write_plan_request=request, call_type="embeddings")
    assert emb["plan"]["operating_point"] is None  # 1 of its 7 calls failed
    assert emb["plan"]["reason"].endswith("has 14.3% of requests failed")
