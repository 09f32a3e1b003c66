"""A campaign's [ramp] fail_on: each variant's ramp is judged, and the campaign exits 5 when any
variant breached (the others still run and are reported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_a_campaign_exits_5_when_a_variant_breaches(tmp_path: Path) -> None:
    campaign = tmp_path / "gate.toml"
    campaign.write_text(
        '[campaign]\nname = "gate"\nurl = "http://127.0.0.1:{port}"\nwait_ready_s = 30\n'
        # a step ends once 10 requests finished: valid (judged) at any speed; the 60 s catch a hang
        "[ramp]\nconcurrency = [2]\nrequests_per_step = 10\nstep_seconds = 60\nwarmup_seconds = 0.2\nmax_tokens = 8\n"
        'fail_on = "ttft_p99>100ms"\nargs = ["--no-telemetry", "--drain-seconds", "5"]\n'
        '[[variant]]\nname = "fast"\n'
        'start = ["{python}", "-m", "loadgen.sim", "--profile", "tiny", "--port", "{port}"]\n'
        '[[variant]]\nname = "slow"\n'
        'start = ["{python}", "-m", "loadgen.sim", "--profile", "tiny", "--ttft-ms", "150", "--port", "{port}"]\n'
    )
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen.campaign", str(campaign), "--out", str(tmp_path / "out")],
        cwd=REPO, capture_output=True, text=True, timeout=240, env=dict(os.environ),
    )  # fmt: skip
    assert proc.returncode == 5, proc.stdout[-2000:] + proc.stderr[-3000:]
    cdir = Path(proc.stdout.strip().splitlines()[-1])
    report = json.loads((cdir / "campaign.json").read_text())
    by_name = {v["name"]: v for v in report["variants"]}
    assert by_name["fast"]["status"] == "ok"
    slow = by_name["slow"]
    assert slow["status"] == "thresholds_breached" and slow["ramp_exit"] == 5
    assert slow["reason"].startswith("ttft_p99>100ms: ttft_p99 ") and "ms > 100 ms (+" in slow["reason"]
    assert "--fail-on" in slow["ramp_argv"] and "ttft_p99>100ms" in slow["ramp_argv"]
