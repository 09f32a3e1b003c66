"""``loadgen ramp --workload FILE`` against the simulator, which logs every body it receives
(``--body-log``): the replay sends the file's bodies, its conversations continue with the answers
the server gave, a redacted file gets the same prompt lengths and cache hits, and a stream that runs
out marks its step (issue 31)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from loadgen.cli.workload_cmd import main as workload_main
from tests.conftest import REPO, loadgen_cmd, run_dir_of, run_loadgen, run_records

pytestmark = pytest.mark.slow


def _export(tmp: Path, name: str, *args: str) -> Path:
    """``loadgen workload export``, in this process (what it writes does not depend on where it runs)."""
    out = tmp / name
    assert workload_main(["export", *args, "-o", str(out)]) == 0
    return out


def _replay(sim: Any, workload: Path, out: Path) -> Path:
    done = run_loadgen("ramp", "--url", sim.url, "--workload", str(workload), "--no-telemetry", "--out", str(out))
    return run_dir_of(done)


def _bodies(log: Path) -> list[dict[str, Any]]:
    return [json.loads(x)["body"] for x in log.read_text().splitlines()]


def test_a_replay_sends_the_files_bodies_and_continues_conversations_with_the_servers_answers(
    sim_factory: Any, tmp_path: Path
) -> None:
    scenario = tmp_path / "talk.toml"
    scenario.write_text(
        'name = "talk"\nseed = 4\n[prompt]\nsource = "chat"\ninput_tokens = 200\nsystem_prompt = "Be brief."\n'
        "[output]\nmax_tokens = 12\n[conversation]\nturns = 3\nfollowup_tokens = 30\n"
    )
    args = ["--scenario", str(scenario), "--concurrency", "2", "--step-seconds", "2", "--warmup-seconds", "0"]
    args += ["--requests-per-user", "12"]
    exported = _export(tmp_path, "conv.jsonl", *args)
    lines = [json.loads(x) for x in exported.read_text().splitlines()[1:]]
    log = tmp_path / "bodies.jsonl"
    sim = sim_factory("--profile", "tiny", "--body-log", str(log))
    run_dir = _replay(sim, exported, tmp_path / "runs")
    received = _bodies(log)
    assert len(received) == len(run_records(run_dir)) >= 8
    firsts = [x["body"] for x in lines if not x.get("cont")]
    conts = [x["body"] for x in lines if x.get("cont")]
    seen: list[list[dict[str, Any]]] = []
    continued = 0
    for body in received:
        assert body.pop("model") == "sim-tiny"
        if body in firsts:  # a conversation's first turn: the file's body, as it is
            seen.append(body["messages"])
            continue
        # a later turn: an earlier request's messages, the server's answer, then the file's new turn
        *history, answer, turn = body["messages"]
        assert answer["role"] == "assistant" and answer["content"]
        assert history in seen, "a continued turn must extend a request the server received"
        assert {**body, "messages": [turn]} in conts
        seen.append(body["messages"])
        continued += 1
    assert continued >= 2
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["workload"]["requests"] == len(lines)
    import hashlib

    assert manifest["workload"]["sha256"] == hashlib.sha256(exported.read_bytes()).hexdigest()
    # export -> replay -> export again: the same file
    assert _export(tmp_path, "again.jsonl", *args).read_bytes() == exported.read_bytes()


def test_a_redacted_file_replays_with_the_same_prompt_lengths_and_cache_hits(sim_factory: Any, tmp_path: Path) -> None:
    args = ["--scenario", str(REPO / "scenarios/chat.toml"), "--rate", "6", "--step-seconds", "2"]
    plain = _export(tmp_path, "plain.jsonl", *args, "--warmup-seconds", "0")
    redacted = _export(tmp_path, "red.jsonl", "--workload", str(plain), "--redact")
    got = {}
    runs = {}
    for name, path in (("plain", plain), ("redacted", redacted)):  # side by side, a cache of its own each
        sim = sim_factory("--profile", "tiny")
        argv = ["ramp", "--url", sim.url, "--workload", str(path), "--no-telemetry", "--out", str(tmp_path / name)]
        runs[name] = subprocess.Popen(
            loadgen_cmd(*argv), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    for name, proc in runs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        recs = run_records(Path(out.strip().splitlines()[-1]))
        recs.sort(key=lambda r: r["intended_ns"])
        got[name] = [(r["prompt_tokens"], r["cached_tokens"] or 0) for r in recs if r["error_class"] is None]
    assert len(got["plain"]) == len(got["redacted"]) >= 8
    prompts = [(a[0], b[0]) for a, b in zip(got["plain"], got["redacted"], strict=True)]
    assert all(abs(a - b) <= 0.05 * a for a, b in prompts), prompts
    cached = sum(c for _, c in got["plain"]), sum(c for _, c in got["redacted"])
    assert cached[0] > 0 and abs(cached[0] - cached[1]) <= 0.1 * cached[0], cached  # the shared system prompt


def test_a_stream_that_runs_out_marks_its_step_below_plan(sim_factory: Any, tmp_path: Path) -> None:
    short = _export(tmp_path, "short.jsonl", "--concurrency", "2", "--context-tokens", "64", "--max-tokens", "4",
                    "--step-seconds", "2", "--warmup-seconds", "0", "--requests-per-user", "2")  # fmt: skip
    sim = sim_factory("--profile", "tiny")
    run_dir = _replay(sim, short, tmp_path / "runs")
    assert len(run_records(run_dir)) == 4
    (step,) = json.loads((run_dir / "summary.json").read_text())["steps"]
    assert not step["valid"]
    assert "load below plan: 2 users sent every request of their stream in the workload file" in step["invalid_reason"]
