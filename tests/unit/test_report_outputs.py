"""summary.json, steps.csv and report.md rebuilt from a run directory alone."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadgen.analysis.synthetic import step_lines, write_run_dir
from loadgen.report import write_outputs
from loadgen.report.markdown import escape_cell
from loadgen.report.tables import steps_csv

sys.path.insert(0, str(Path(__file__).parent))
from test_analysis_steps import scenario


def test_outputs_of_a_run(tmp_path: Path) -> None:
    run = scenario(tmp_path)
    summary = write_outputs(run, min_ok_requests=3)
    assert json.loads((run / "summary.json").read_text()) == json.loads(json.dumps(summary))

    rows = list(csv.DictReader(io.StringIO((run / "steps.csv").read_text())))
    assert [r["step"] for r in rows] == ["0", "1"]
    first = rows[0]
    assert float(first["ttft_ms_p50"]) == pytest.approx(60.0)
    assert float(first["e2e_ms_p99"]) == pytest.approx(298.2)
    assert float(first["output_tok_s"]) == pytest.approx(1.4)
    assert first["errors_http_5xx"] == "2" and first["errors_connection_refused"] == "1"
    assert rows[1]["errors_http_5xx"] == "0"  # a class another step had: 0, not blank
    assert first["valid"] == "true" and rows[1]["valid"] == "false"
    assert rows[1]["invalid_reason"] == "not steady"
    assert rows[1]["output_tok_s"] == ""  # None -> empty cell
    assert first["concurrency"] == "2" and first["context_tokens"] == "100"

    md = (run / "report.md").read_text()
    assert md.startswith("# Load test report: B300 \\| TP8\n")
    assert "- Server: http://127.0.0.1:9/v1" in md and "- Model: m" in md and "- Transport: fast" in md
    assert "| Step | Context | C | Agg tok/s | Per-req tok/s | Wall s | Prompt tok asked / served | Tok/chunk |" in md
    # step 0: context 100, C=2, 1.4 tok/s, wall 11 s, 100 asked / 110 served prompt tokens,
    # 1.40 tokens per chunk (summary's tokens_per_chunk_mean), TTFT p50/p99 60.0 / 99.2
    assert "| 0 | 100 | 2 | 1.4 | 23.7 | 11.0 | 100 / 110 | 1.40 | 60.0 / 99.2 |" in md
    assert "| 3 / 3 | yes |" in md
    # errors: one sample message each, escaped for a table cell
    assert "| http_5xx | 2 | 2 | &lt;html>503&lt;/html> |" in md
    assert "| connection_refused | 1 | 1 | Connection refused\\| second line |" in md
    assert "## Invalid steps\n\n- Step 1 (C=4, context 100): not steady" in md


def test_empty_run_still_gets_a_report(tmp_path: Path) -> None:
    write_run_dir(tmp_path, steps=step_lines(0, 0, 1000, 5000, concurrency=8), manifest={"label": "empty"})
    summary = write_outputs(tmp_path)
    assert summary["totals"]["empty"] is True
    assert summary["steps"][0]["invalid_reason"] == "server served nothing"
    md = (tmp_path / "report.md").read_text()
    assert "No requests were recorded in this run" in md
    assert (tmp_path / "steps.csv").read_text().startswith("step,concurrency,")


def test_a_run_with_nothing_but_a_manifest(tmp_path: Path) -> None:
    write_run_dir(tmp_path, manifest={"label": "nothing"})
    summary = write_outputs(tmp_path)
    assert summary["steps"] == [] and summary["totals"]["records"] == 0
    assert "No requests were recorded" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "steps.csv").read_text().startswith("step,concurrency,context_tokens,output_tok_s,")


WRITER = r"""
import sys, time
from loadgen.rundir.records import JsonlAppender
from loadgen.rundir.layout import StepLog, write_manifest
from loadgen.analysis.synthetic import make_record
from pathlib import Path
run = Path(sys.argv[1])
write_manifest(run, {"label": "crash"})
log = StepLog(run)
out = JsonlAppender(run / "requests-w0.jsonl")
now = time.time_ns()
log.start(0, now, concurrency=1, context_tokens=None, rate=None, warmup_s=0.0)
log.steady(0, now)
i = 0
while True:
    rec = make_record(f"r{i}", 0, 0, [10, 20, 30])
    d = now + i * 1_000_000
    rec.intended_ns = rec.sent_ns = d
    rec.first_chunk_ns = d + 10_000_000
    rec.end_ns = d + 30_000_000
    out.write_bytes(rec.to_json())
    i += 1
    if i == 50:
        print("ready", flush=True)
    time.sleep(0.001)
"""


def test_report_after_kill_9_of_the_writer(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    with open(tmp_path / "requests-w0.jsonl", "ab") as fh:  # as if killed in the middle of a write
        fh.write(b'{"id":"torn","worker":"w0","step":0,"intended_ns":17')
    written = (tmp_path / "requests-w0.jsonl").read_bytes().count(b"\n")
    summary = write_outputs(tmp_path)
    (step,) = summary["steps"]
    assert step["end_reason"] is None  # no end line: the run was killed
    assert summary["totals"]["records"] == written >= 50
    assert summary["totals"]["skipped_lines"] == 1
    assert step["requests_ok"] == written and step["valid"] is True
    assert step["ttft_ms"]["p50"] == pytest.approx(10.0)
    assert step["itl_ms"]["p50"] == pytest.approx(10.0)
    assert "Step 0: no end line (the run was stopped or killed)" in (tmp_path / "report.md").read_text()


def test_enricher_keys_become_flat_csv_columns_and_sections_are_appended(tmp_path: Path) -> None:
    run = scenario(tmp_path)

    def power(_run: object, steps: list[dict[str, object]]) -> None:
        for s in steps:
            s["gpu_power_w"] = {"mean": 400.5, "max": 450.0}

    write_outputs(run, [power], sections=[lambda summary: "## Knee\n\nnone found"], min_ok_requests=3)
    header = (run / "steps.csv").read_text().splitlines()[0].split(",")
    assert header[-2:] == ["gpu_power_w_mean", "gpu_power_w_max"]
    assert (run / "report.md").read_text().rstrip().endswith("## Knee\n\nnone found")


def test_csv_groups_late_columns_with_their_key() -> None:
    text = steps_csv(
        [
            {"step": 0, "errors": {}, "ttft_ms": {"p50": 1.0}, "tags": ["a", "b"]},
            {"step": 1, "errors": {"stall": 2}, "ttft_ms": {"p50": None}, "tags": []},
        ]
    )
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["step", "errors_stall", "ttft_ms_p50", "tags"]
    assert rows[1] == ["0", "0", "1.0", '["a","b"]']
    assert rows[2] == ["1", "2", "", "[]"]


def test_escape_cell() -> None:
    assert escape_cell("a|b\nc\r\n\td") == "a\\|b c d"
    assert escape_cell("<b>&amp; 3 < 5 & 6") == "&lt;b>&amp;amp; 3 < 5 & 6"
    assert escape_cell("x" * 1000).endswith("…") and len(escape_cell("x" * 1000)) == 300
