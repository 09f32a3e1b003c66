"""summary.json against its contract (``loadgen.analysis.contracts``), both ways: every key a built
summary has is declared, every required key is there, each value has its declared kind, and the
synthetic run reaches every nested object the contract names (so none of them goes unchecked)."""

from __future__ import annotations

import json
import types
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

import orjson
import pytest

from loadgen.analysis.contracts import RunSummary
from loadgen.analysis.synthetic import MS, at_ms, make_record, step_lines, write_run_dir
from loadgen.report import write_outputs
from loadgen.report.pipeline import rebuild
from loadgen.report.plots_demo import write_demo_run
from loadgen.rundir.records import LAG_EDGES_MS

STEP_MS = 12_000
# (context tokens, concurrency, TTFT ms): TTFT grows with load so the SLO below breaks at C=4
LOADS = [(100, 1, 50), (100, 2, 80), (100, 4, 150), (200, 1, 50), (200, 2, 80), (200, 4, 150), (200, 8, 300)]
BOUND_STEP = 2  # the load generator's CPU is saturated here
DOWN_STEP = 6  # the server went away during this one


def _jsonl(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))


def rich_run(path: Path) -> Path:
    """Every part of a summary: telemetry (with a sampling gap), the client's own load (one bound
    step), two context lengths, an invalid step, a failure in warm-up, run events and a plan."""
    steps, recs = [], []
    for s, (ctx, c, ttft) in enumerate(LOADS):
        t0 = s * STEP_MS
        reason = "server_down" if s == DOWN_STEP else "duration"
        steps += step_lines(s, t0, t0 + 1000, t0 + 11_000, concurrency=c, context_tokens=ctx, reason=reason)
        recs += [
            make_record(f"r{s}-{i}", s, t0 + 1000 + 450 * i, [ttft + 20 * k for k in range(5)], context_tokens=ctx)
            for i in range(20)
        ]
    recs.append(make_record("bad", 0, 100, [], status=503, error="<html>503</html>", output_tokens=None))
    run = write_run_dir(
        path,
        steps=steps,
        records={"requests-w0.jsonl": recs},
        manifest={
            "label": "contract",
            "run_id": "contract-run",
            "created_ns": at_ms(0),
            "options": {"url": "http://127.0.0.1:9", "model": "m", "transport": "fast"},
            "host": {"cpus": 4},
            "slo": {"ttft_p99_ms": 120.0},
        },
    )
    end_ms = len(LOADS) * STEP_MS
    samples: list[dict[str, Any]] = []
    for k in range(0, end_ms, 200):
        if 3000 <= k < 5000:
            continue  # a 2 s gap in step 0's window: listed, not enough to make its power invalid
        for g in range(2):
            samples.append(
                {
                    "t_ns": at_ms(k) + g,
                    "src": "gpu",
                    "source": "nvml",
                    "gpu": g,
                    "power_w": 300.0 + (k % STEP_MS) / 100,
                    "energy_mj": 300 * k,
                    "power_limit_w": 700.0,
                    "util_gpu": 90,
                    "util_mem": 50,
                    "sm_clock_mhz": 1800,
                    "mem_clock_mhz": 2600,
                    "clock_reasons": 4,
                }
            )
    for k in range(0, end_ms, 1000):
        samples.append(
            {
                "t_ns": at_ms(k),
                "src": "server",
                "engine": "sglang",
                "running": 3,
                "queued": 1,
                "kv_usage": 0.5,
                "preemptions_total": k // 1000,
                "spec_drafts_total": k,
                "spec_accepted_total": k // 2,
                "prefix_hits_total": k,
                "prefix_queries_total": 2 * k,
                "gen_tokens_total": 10 * k,
            }
        )
    _jsonl(run / "samples.jsonl", samples)
    down_ns = at_ms(DOWN_STEP * STEP_MS + 5000)
    _jsonl(
        run / "events.jsonl",
        [
            {
                "t_ns": at_ms(2000),
                "src": "log",
                "kind": "log_match",
                "pattern": "oom",
                "severity": "error",
                "line": "x",
            },
            {"t_ns": at_ms(3000), "src": "telemetry", "kind": "source_unavailable", "source": "prometheus"},
            {
                "t_ns": down_ns,
                "src": "loadgen",
                "kind": "server_down",
                "step": DOWN_STEP,
                "detail": "connection refused",
                "policy": "stop",
                "log_matches": [{"pattern": "oom", "line": "x"}],
            },
            {"t_ns": down_ns, "src": "loadgen", "kind": "worker_lost", "worker": "w1", "client_id": "c1", "step": 6},
        ],
    )
    hist = [0] * (len(LAG_EDGES_MS) + 1)
    hist[0] = 50
    bound = range(BOUND_STEP * STEP_MS, (BOUND_STEP + 1) * STEP_MS)
    _jsonl(
        run / "client-w0.jsonl",
        [
            {"t_ns": at_ms(k), "src": "client", "worker": "w0", "cpu_frac": 0.97 if k in bound else 0.3}
            | {"loop_lag_ms": 0.5, "lag_max_ms": 2.0, "lag_hist": hist}
            for k in range(0, end_ms, 250)
        ],
    )
    request = {"slo": {"ttft_p99_ms": 120.0}, "target_rps": 10.0, "gpu_hour_cost": 2.0, "gpus_per_replica": 2}
    (run / "plan.json").write_bytes(orjson.dumps({"request": request}))
    return run


def _check(value: Any, tp: Any, path: str, seen: set[type], problems: list[str]) -> None:
    """``value`` against the annotation ``tp``: TypedDict keys both ways, then every value's kind."""
    origin = get_origin(tp)
    if tp is Any:
        return
    if value is None:
        if origin not in (Union, types.UnionType) or type(None) not in get_args(tp):
            problems.append(f"{path}: null, declared {tp}")
        return
    if origin in (Union, types.UnionType):
        arms = [a for a in get_args(tp) if a is not type(None)]
        results = []
        for arm in arms:
            found: list[str] = []
            _check(value, arm, path, seen, found)
            results.append(found)
        if all(results):
            problems.extend(min(results, key=len))
    elif origin is Literal:
        if value not in get_args(tp):
            problems.append(f"{path}: {value!r} is not one of {get_args(tp)}")
    elif is_typeddict(tp):
        if not isinstance(value, dict):
            problems.append(f"{path}: {type(value).__name__}, declared {tp.__name__}")
            return
        seen.add(tp)
        hints = get_type_hints(tp)
        for key in sorted(set(value) - set(hints)):
            problems.append(f"{path}.{key}: written but not declared in {tp.__name__}")
        for key in sorted(tp.__required_keys__ - set(value)):
            problems.append(f"{path}.{key}: required by {tp.__name__} but not written")
        for key, v in value.items():
            if key in hints:
                _check(v, hints[key], f"{path}.{key}", seen, problems)
    elif origin is list:
        if not isinstance(value, list):
            problems.append(f"{path}: {type(value).__name__}, declared a list")
            return
        for i, v in enumerate(value):
            _check(v, get_args(tp)[0], f"{path}[{i}]", seen, problems)
    elif origin is dict:
        if not isinstance(value, dict):
            problems.append(f"{path}: {type(value).__name__}, declared a dict")
            return
        for k, v in value.items():
            _check(v, get_args(tp)[1], f"{path}[{k!r}]", seen, problems)
    elif tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            problems.append(f"{path}: {value!r}, declared a number")
    elif tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{path}: {value!r}, declared an int")
    elif isinstance(tp, type) and not isinstance(value, tp):
        problems.append(f"{path}: {value!r}, declared {tp.__name__}")


def _reachable(tp: Any, out: set[type]) -> set[type]:
    """Every TypedDict named inside ``tp``'s annotations, recursively."""
    if is_typeddict(tp):
        if tp in out:
            return out
        out.add(tp)
        for hint in get_type_hints(tp).values():
            _reachable(hint, out)
    for arg in get_args(tp):
        _reachable(arg, out)
    return out


def conforms(summary: Any) -> tuple[list[str], set[type]]:
    problems: list[str] = []
    seen: set[type] = set()
    _check(summary, RunSummary, "summary", seen, problems)
    return problems, seen


def kinds_run(path: Path) -> Path:
    """The newer kinds of requests: chat and embeddings mixed, reasoning, an agent task, images."""
    recs = []
    for i in range(6):
        chat = make_record(f"c{i}", 0, 1500 + 1000 * i, [50, 100], context_tokens=80)
        recs.append(
            replace(
                chat,
                first_reasoning_ns=chat.sent_ns + 50 * MS,
                first_answer_ns=chat.sent_ns + 100 * MS,
                reasoning_tokens=1,
                images=1 if i == 0 else 0,
                conversation="task" if i < 2 else None,
                turn=i if i < 2 else 0,
                max_turns=4 if i < 2 else None,
                tool_calls=1 if i == 0 else 0,
                tool_args_chars=12 if i == 0 else 0,
                first_tool_ns=chat.sent_ns + 60 * MS if i == 0 else None,
            )
        )
        emb = make_record(f"e{i}", 0, 1600 + 1000 * i, [], end_ms=10, output_tokens=None)
        recs.append(replace(emb, endpoint="embeddings", inputs=2, finish_reason=None))
    return write_run_dir(path, steps=step_lines(0, 0, 1000, 11_000, concurrency=2), records={"requests.jsonl": recs})


def tenants_run(path: Path) -> Path:
    """Two tenants over two steps: chat alone holds its TTFT SLO, then breaks it beside batch."""
    recs = []
    steps: list[dict[str, Any]] = []
    for step, (start, chat_ttft, batch_users) in enumerate(((0, 50, 0), (12_000, 900, 4))):
        lines = step_lines(step, start, start + 1000, start + 11_000, concurrency=2 + batch_users)
        lines[0]["tenants"] = {"chat": 2.0, "batch": float(batch_users)}
        steps += lines
        for i in range(8):
            t = start + 1500 + 1000 * i
            recs.append(replace(make_record(f"c{step}-{i}", step, t, [chat_ttft, chat_ttft + 20]), tenant="chat"))
            if batch_users:
                recs.append(replace(make_record(f"b{step}-{i}", step, t, [200, 260, 320]), tenant="batch"))
    manifest = {"tenants": [{"name": "chat", "slo": "ttft_p99=500ms"}, {"name": "batch", "slo": "e2e_p99=60s"}]}
    return write_run_dir(path, steps=steps, records={"requests.jsonl": recs}, manifest=manifest)


def test_a_rebuilt_summary_json_is_what_the_contract_declares(tmp_path: Path) -> None:
    run = rich_run(tmp_path / "run")
    rebuild(run)
    summary = json.loads((run / "summary.json").read_text())
    problems, seen = conforms(summary)
    assert problems == []
    kinds = kinds_run(tmp_path / "kinds")
    rebuild(kinds)
    kinds_problems, kinds_seen = conforms(json.loads((kinds / "summary.json").read_text()))
    assert kinds_problems == []
    tenants = tenants_run(tmp_path / "tenants")
    rebuild(tenants)
    tenant_summary = json.loads((tenants / "summary.json").read_text())
    tenant_problems, tenant_seen = conforms(tenant_summary)
    assert tenant_problems == []
    assert tenant_summary["tenant_knee"]["tenant"] == "chat" and tenant_summary["knee"]["concurrency"] == 2
    # the runs reach every object the contract names, so each was checked against a real summary
    unseen = _reachable(RunSummary, set()) - seen - kinds_seen - tenant_seen
    assert {t.__name__ for t in unseen} == set()
    # and the parts that make those objects are there: it is the run meant above
    steps = summary["steps"]
    assert not steps[BOUND_STEP]["valid"] and steps[BOUND_STEP]["workers_advised"] >= 2
    assert steps[DOWN_STEP]["invalid_reason"].startswith("server down")
    assert steps[0]["telemetry_gaps"] and steps[0]["power_valid"]
    assert set(summary["knee"]["by_context"]) == {"100", "200"}
    assert summary["plan"]["operating_point"]["concurrency"] == 2.0 and summary["plan"]["cost"] is not None


def test_a_summary_of_nothing_keeps_every_required_key(tmp_path: Path) -> None:
    write_run_dir(tmp_path, manifest={"label": "nothing"})
    assert conforms(write_outputs(tmp_path))[0] == []
    assert conforms(json.loads((tmp_path / "summary.json").read_text()))[0] == []


@pytest.mark.parametrize("telemetry", [True, False])
def test_the_report_demo_summary_is_a_run_summary(tmp_path: Path, telemetry: bool) -> None:
    assert conforms(write_demo_run(tmp_path, telemetry=telemetry, knee=telemetry))[0] == []


def test_a_drifted_summary_is_caught(tmp_path: Path) -> None:
    """The checker itself: an undeclared key, a missing required one, a wrong kind, deep down."""
    summary = write_demo_run(tmp_path)
    bad: dict[str, Any] = json.loads(json.dumps(summary))
    bad["steps"][1]["ttft_ms"]["p95"] = 1.0
    del bad["totals"]["empty"]
    bad["knee"]["detectors"]["usl"]["triggered"] = "yes"
    problems, _ = conforms(bad)
    assert problems == [
        "summary.steps[1].ttft_ms.p95: written but not declared in LatencyStats",
        "summary.totals.empty: required by RunTotals but not written",
        "summary.knee.detectors['usl'].triggered: 'yes', declared bool",
    ]
