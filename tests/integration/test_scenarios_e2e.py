"""Shipped scenarios run against the simulated server, as a user would run them."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, run_dir_of, run_loadgen, run_records

pytestmark = pytest.mark.slow


def test_chat_scenario_runs_and_reports_requested_vs_served(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory("--profile", "tiny")
    proc = run_loadgen(
        "ramp",
        "--url",
        sim.url,
        "--scenario",
        str(REPO / "scenarios/chat.toml"),
        "--concurrency",
        "4",
        # ends once 12 requests of its window finished, however long the scenario's lengths take on
        # this machine; the 60 s only catch a hang
        "--requests-per-step",
        "12",
        "--step-seconds",
        "60",
        "--warmup-seconds",
        "0.5",
        "--out",
        str(tmp_path),
    )
    run_dir = run_dir_of(proc)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["scenario"]["name"].startswith("chat")
    recs = [r for r in run_records(run_dir) if r["error_class"] is None]
    assert len(recs) >= 8
    # lengths vary as the scenario's distributions say; the server's count is close to the estimate
    assert len({r["context_tokens"] for r in recs}) > 3
    for r in recs:
        assert r["prompt_tokens"] == pytest.approx(r["context_tokens"], rel=0.25, abs=30)
        assert r["output_tokens"] <= r["max_tokens"]


def test_multi_turn_history_grows_with_the_servers_replies_and_hits_the_cache(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory("--profile", "tiny")
    proc = run_loadgen(
        "ramp",
        "--url",
        sim.url,
        "--scenario",
        str(REPO / "scenarios/agentic-multi-turn.toml"),
        "--concurrency",
        "3",
        # ends once 9 requests finished: 3 users' conversations (4 turns or more each) hold at least
        # 3 second turns among them, however long the think times and replies take; 120 s catch a hang
        "--requests-per-step",
        "9",
        "--step-seconds",
        "120",
        "--warmup-seconds",
        "0",
        "--out",
        str(tmp_path),
        timeout=180,
    )
    run_dir = run_dir_of(proc)
    by_conv: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in run_records(run_dir):
        if r["error_class"] is None and r["conversation"]:
            by_conv[r["conversation"]].append(r)
    multi = [sorted(v, key=lambda r: r["turn"]) for v in by_conv.values() if len(v) >= 2]
    assert multi, "no conversation reached a second turn"
    assert sum(len(t) - 1 for t in multi) >= 3, "too few conversations reached a second turn"
    for turns in multi:
        for a, b in itertools.pairwise(turns):
            assert b["turn"] == a["turn"] + 1
            # the next prompt holds the previous prompt plus the reply the server gave
            assert b["prompt_tokens"] > a["prompt_tokens"] + a["output_tokens"] * 0.5
            # and the simulator's prefix cache serves that previous prompt and its reply (>= 0.75
            # estimated tokens per word), to a 64-token block and the reply's last word
            assert b["cached_tokens"] >= a["prompt_tokens"] + 0.75 * a["output_tokens"] - 64 - 4


TRACES = REPO.parent / "shared" / "data" / "traces"


THINK = """name = "think"
seed = 3
[prompt]
source = "chat"
input_tokens = 40
[output]
max_tokens = { dist = "uniform", low = 8, high = 40 }
[load]
mode = "closed"
think_time_s = { dist = "exponential", mean = 0.4 }
"""


def test_a_steady_window_holds_the_same_requests_whatever_the_warm_ups_timing(sim_factory: Any, tmp_path: Path) -> None:
    """Closed loop with think times, against two servers of different speed: a user whose think time
    spans the end of the warm-up sends the steady stream's request, not the warm-up's it drew before,
    so each user's window starts with the same request on both and goes on alike (the faster server
    gets further). A twin's replay, or an A/B of two servers, then compares the same requests."""
    from loadgen.analysis.load import load_run
    from loadgen.analysis.steps import step_rows

    scenario = tmp_path / "think.toml"
    scenario.write_text(THINK)
    seqs = []
    for itl in ("4", "12"):
        sim = sim_factory("--profile", "tiny", "--itl-ms", itl)
        proc = run_loadgen(
            # the window ends once 36 requests finished (6 a user), on either server at any speed of the
            # machine; the 60 s only catch a hang
            "ramp", "--url", sim.url, "--scenario", str(scenario), "--concurrency", "6", "--requests-per-step", "36",
            "--step-seconds", "60", "--warmup-seconds", "1", "--no-telemetry", "--out", str(tmp_path / f"itl{itl}"),
        )  # fmt: skip
        run_dir = run_dir_of(proc)
        (row,) = step_rows(load_run(run_dir))
        by_user: dict[Any, list[tuple[Any, ...]]] = defaultdict(list)
        for r in sorted(run_records(run_dir), key=lambda r: r["sent_ns"]):
            if r["sent_ns"] >= row["steady_ns"] and r["error_class"] is None:
                # (the prompt's length may differ by a token: the workload tunes it to the server's count)
                by_user[r["user"]].append((r["max_tokens"], r["source"]))
        seqs.append(by_user)
    fast, slow = seqs
    assert set(fast) == set(slow) and len(fast) == 6
    for user in fast:
        n = min(len(fast[user]), len(slow[user]))
        assert n >= 2, (user, fast[user], slow[user])
        assert fast[user][:n] == slow[user][:n], (user, fast[user], slow[user])
