"""The seed profile through real HTTP and `loadgen ramp` lands where the virtual clock says (issue 3)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.sim.profile import load_profile
from loadgen.sim.text import classify_source
from loadgen.sim.virtual import closed_loop
from loadgen.workload import Workload
from tests.conftest import run_loadgen

pytestmark = pytest.mark.slow

WARMUP = {1: 2.0, 64: 10.0}
WINDOW = {1: 10.0, 64: 16.0}


def test_http_ramp_matches_virtual_clock_at_c1_and_c64(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory("--profile", "b300x8-kimi-k2.6-ddtree", "--startup-s", "0")
    measured = {}
    for c in (1, 64):
        proc = run_loadgen(
            "ramp",
            "--url",
            sim.url,
            "--concurrency",
            str(c),
            "--max-tokens",
            "512",
            "--context-tokens",
            "1000",
            "--extra-body",
            "ignore_eos=true",
            "--warmup-seconds",
            str(WARMUP[c]),
            "--step-seconds",
            str(WINDOW[c]),
            "--no-telemetry",
            "--out",
            str(tmp_path),
            timeout=240,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        step = json.loads((Path(proc.stdout.strip().splitlines()[-1]) / "summary.json").read_text())["steps"][0]
        measured[c] = step
    profile = load_profile("b300x8-kimi-k2.6-ddtree")
    # the simulator accepts more draft tokens on code than on prose: ask the virtual clock for the
    # class of prompt the ramp sent (the ramp's default prompts are built from Python's docs)
    spec, _ = Workload.simple(1000, 512).session(0).next()
    source = classify_source(" ".join(m["content"] for m in spec.messages or []))
    for c, step in measured.items():
        virtual = closed_loop(
            profile,
            c,
            prompt_tokens=round(step["prompt_tokens_mean"]),
            output_tokens=512,
            warmup_s=WARMUP[c],
            window_s=WINDOW[c],
            source=source,
        )
        assert step["output_tok_s"] == pytest.approx(virtual.output_tok_s, rel=0.10), (c, virtual)
