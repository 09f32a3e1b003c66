"""A closed loop whose load generator cannot run sends late, and the step says so (issue 33's real
engine: vLLM's engine threads on both cores of this host held the load generator's process off them
for up to 2.2 s, and 8 users had 5.95 requests in flight).

The ramp's process group is stopped (SIGSTOP) for 0.6 s in its steady window, as a descheduled
process is: the server answers meanwhile, and each user's next request goes out when the process runs
again. The records keep how long after it was due each request went out (``user_late_ns``)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import orjson
import pytest

from tests.conftest import REPO, loadgen_cmd

FREEZE_S = 0.6


def _records(out: Path) -> list[dict]:
    return [orjson.loads(line) for f in out.glob("*/requests*.jsonl") for line in f.read_bytes().splitlines()]


def test_a_frozen_load_generator_marks_the_users_late_sends(tmp_path: Path, sim_factory) -> None:  # type: ignore[no-untyped-def]
    sim = sim_factory("--profile", "tiny")
    out = tmp_path / "out"
    cmd = loadgen_cmd(
        "ramp", "--url", sim.url, "--concurrency", "4", "--step-seconds", "2", "--warmup-seconds", "0.3",
        "--max-tokens", "16", "--out", str(out),
    )  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not any(b"steady" in f.read_bytes() for f in out.glob("*/steps.jsonl")):  # past the warm-up
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
            time.sleep(0.05)
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGSTOP)
        time.sleep(FREEZE_S)
        os.killpg(proc.pid, signal.SIGCONT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr[-2000:]
    run = Path(stdout.decode().strip().splitlines()[-1])
    late = sorted(r["user_late_ns"] / 1e9 for r in _records(out))
    # each user's next request waited out what was left of the freeze after its previous one ended;
    # the others went out as they were due (building a request: about a millisecond)
    assert 0.2 < late[-1] <= FREEZE_S + 0.2, late[-8:]
    assert sum(1 for x in late if x > 0.05) <= 8 and late[len(late) // 2] < 0.01, late
    step = orjson.loads((run / "summary.json").read_bytes())["steps"][0]
    timing = step["timing"]
    assert timing["users_late_max_ms"] == pytest.approx(max(late) * 1e3, rel=1e-9)
    assert timing["users_late_share"] > 0.05 and timing["uncertain"] is True and step["valid"] is True
    assert "fewer requests were in flight than the step's 4 users" in timing["reason"]
