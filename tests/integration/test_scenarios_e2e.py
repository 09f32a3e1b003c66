"""Shipped scenarios run against the simulated server, as a user would run them."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, run_loadgen

pytestmark = pytest.mark.slow


def _records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for f in run_dir.glob("requests*.jsonl") for x in f.read_text().splitlines() if x]


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
        "--step-seconds",
        "3",
        "--warmup-seconds",
        "0.5",
        "--out",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["scenario"]["name"].startswith("chat")
    recs = [r for r in _records(run_dir) if r["error_class"] is None]
    assert len(recs) >= 8
    # lengths vary as the scenario's distributions say; the server's count is close to the estimate
    assert len({r["context_tokens"] for r in recs}) > 3
    for r in recs:
        assert r["prompt_tokens"] == pytest.approx(r["context_tokens"], rel=0.25, abs=30)
        assert r["output_tokens"] <= r["max_tokens"]


def test_multi_turn_history_grows_with_the_servers_replies(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory("--profile", "tiny")
    proc = run_loadgen(
        "ramp",
        "--url",
        sim.url,
        "--scenario",
        str(REPO / "scenarios/agentic-multi-turn.toml"),
        "--concurrency",
        "3",
        "--step-seconds",
        "7",
        "--warmup-seconds",
        "0",
        "--out",
        str(tmp_path),
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    by_conv: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in _records(run_dir):
        if r["error_class"] is None and r["conversation"]:
            by_conv[r["conversation"]].append(r)
    multi = [sorted(v, key=lambda r: r["turn"]) for v in by_conv.values() if len(v) >= 2]
    assert multi, "no conversation reached a second turn"
    for turns in multi:
        for a, b in itertools.pairwise(turns):
            assert b["turn"] == a["turn"] + 1
            # the next prompt holds the previous prompt plus the reply the server gave
            assert b["prompt_tokens"] > a["prompt_tokens"] + a["output_tokens"] * 0.5
