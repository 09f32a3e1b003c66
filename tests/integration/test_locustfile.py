"""`locust -f loadgen/locustfile.py` headless: Locust's own statistics carry the LLM rows."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def test_headless_locust_reports_ttft_and_itl(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory("--profile", "tiny")
    out = tmp_path / "reports"
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        "loadgen/locustfile.py,tests/integration/locust_stop_after.py",
        "--headless",
        "-u",
        "3",
        "-r",
        "3",
        # ends on work done (6 calls, as -t would end it), not on a time that start-up and a busy
        # machine eat; -t only catches a hang
        "--stop-after-requests",
        "6",
        "-t",
        "120s",
        "--host",
        sim.url,
        "--lg-max-tokens",
        "16",
        "--lg-out",
        str(out),
        "--csv",
        str(tmp_path / "stats"),
        "--only-summary",
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {(r["Type"], r["Name"]): r for r in csv.DictReader((tmp_path / "stats_stats.csv").open())}
    llm, ttft, itl = rows[("LLM", "chat")], rows[("TTFT", "chat")], rows[("ITL", "chat")]
    n = int(llm["Request Count"])
    assert n > 5 and int(llm["Failure Count"]) == 0
    assert int(ttft["Request Count"]) == n
    assert 0 < float(ttft["Average Response Time"]) < float(llm["Average Response Time"])
    assert 0 < float(itl["Average Response Time"]) < float(ttft["Average Response Time"]) * 10
    runs = list(out.iterdir())
    assert len(runs) == 1
    records = [json.loads(x) for f in runs[0].glob("requests*.jsonl") for x in f.read_text().splitlines()]
    assert len([r for r in records if r["error_class"] is None]) >= n
    summary = json.loads((runs[0] / "summary.json").read_text())
    assert summary["steps"][0]["requests_ok"] > 0
