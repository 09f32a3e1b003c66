"""What the twin's end-to-end checks share (tests/integration/test_twin_e2e.py and
benchmarks/accuracy/test_twin_recovery.py): the workload they ramp and ``loadgen twin`` run as a user
runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# short chat prompts whose max_tokens is spread (16-112): users that ask for the same length finish in
# the same decode step and come back together, and whether such a cohort splits into several prefills
# turns on microseconds of client timing (docs/twin.md, "The workload: spread output lengths")
SPREAD = """name = "twin-recovery"
description = "short chat prompts; output lengths spread so that closed-loop users do not move in cohorts"
seed = 0
[prompt]
source = "chat"
input_tokens = 60
[output]
max_tokens = { dist = "uniform", low = 16, high = 112 }
"""


def run_twin(run_dir: str, out: Path, *extra: str) -> dict[str, Any]:
    """``loadgen twin RUN_DIR --out OUT ...`` in a process of its own; its twin.json."""
    code = "import sys; from loadgen.twin.cli import twin_main; sys.exit(twin_main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", code, run_dir, "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    data: dict[str, Any] = json.loads((out / "twin.json").read_text())
    return data
