"""Thresholds that gate a pipeline, end to end against the simulator: --fail-on, --abort-on,
--junit, $GITHUB_STEP_SUMMARY, ``loadgen report --fail-on`` and a scenario's [gate]."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import xmlschema

from tests.conftest import run_loadgen

pytestmark = pytest.mark.slow

XSD = Path(__file__).resolve().parents[1] / "fixtures" / "junit" / "junit-10.xsd"
QUICK = ["--warmup-seconds", "0.2", "--max-tokens", "8", "--drain-seconds", "5", "--no-telemetry"]
# steps that must be valid (thresholds judge only those) end once 20 requests of their window
# finished, at any speed of the machine; the 60 s only catch a hang
VALID_STEPS = ["--requests-per-step", "20", "--step-seconds", "60"]


def _run_dir(proc: Any) -> Path:
    path = Path(proc.stdout.strip().splitlines()[-1])
    assert path.is_dir(), proc.stdout + proc.stderr[-2000:]
    return path


def _summary(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
    return data


def _failures(junit: Path) -> dict[str, str]:
    xmlschema.XMLSchema(str(XSD)).validate(str(junit))
    root = ET.parse(junit).getroot()
    return {
        str(case.get("name")): str(f.get("message"))
        for case in root.iter("testcase")
        if (f := case.find("failure")) is not None
    }


def test_a_faulty_server_breaches_every_kind_of_threshold(sim_factory: Any, tmp_path: Path) -> None:
    # 150 ms TTFT, an error event inside 30 % of the streams; C=1 finishes too few requests in 1.5 s
    sim = sim_factory("--profile", "tiny", "--ttft-ms", "150", "--error-after-chunks", "2", "--fault-rate", "0.3")
    junit, gh = tmp_path / "ci" / "junit.xml", tmp_path / "step-summary.md"
    fail_on = "ttft_p99>100ms,error_rate>10%,run:error_rate>10%,output_tok_s<1000000,invalid_steps>0"
    proc = run_loadgen("ramp", "--url", sim.url, "--concurrency", "1,8", "--step-seconds", "1.5", *QUICK,
                       "--out", str(tmp_path / "r"),
                       "--fail-on", fail_on, "--junit", str(junit), env={"GITHUB_STEP_SUMMARY": str(gh)})  # fmt: skip
    assert proc.returncode == 5, proc.stderr[-3000:]
    run_dir = _run_dir(proc)
    verdict = _summary(run_dir)["thresholds"]
    assert verdict["verdict"] == "fail"
    status = {r["threshold"]: r["status"] for r in verdict["results"]}
    assert status == dict.fromkeys(fail_on.split(","), "fail")
    assert "FAIL: 5 of 5 thresholds breached" in proc.stderr
    failures = _failures(junit)
    assert failures["step 1 (C=8): ttft_p99>100ms"].startswith("ttft_p99 ")
    assert " ms > 100 ms (+" in failures["step 1 (C=8): ttft_p99>100ms"]
    assert failures["step 1 (C=8): error_rate>10%"].endswith(" at C=8")
    assert failures["run:error_rate>10%"].startswith("error_rate ")
    assert failures["run: invalid_steps>0"] == "invalid_steps 1 step > 0 steps (+1)"
    assert "output_tok_s<1000000" in " ".join(failures)
    report = (run_dir / "report.md").read_text().splitlines()
    assert report[2] == "> **Thresholds: FAIL: 5 of 5 thresholds breached**"
    page = (run_dir / "report.html").read_text()
    assert page.index('id="thresholds"') < page.index('id="verdict"')  # the gate's verdict comes first
    assert "FAIL: 5 of 5 thresholds breached" in page
    summary_md = gh.read_text()
    assert "> **Thresholds: FAIL: 5 of 5 thresholds breached**" in summary_md and "### Steps" in summary_md


def test_a_healthy_run_passes_and_report_re_judges_it(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory("--profile", "tiny")
    junit = tmp_path / "junit.xml"
    proc = run_loadgen("ramp", "--url", sim.url, "--concurrency", "2,4", *VALID_STEPS, *QUICK,
                       "--out", str(tmp_path / "r"), "--fail-on", "ttft_p99>5s,error_rate>1%,invalid_steps>0",
                       "--junit", str(junit),
                       env={"GITHUB_STEP_SUMMARY": ""})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = _run_dir(proc)
    assert _summary(run_dir)["thresholds"]["verdict"] == "pass"
    assert "PASS: 3 thresholds met" in proc.stderr
    assert _failures(junit) == {}
    # the same run, judged again against a limit it misses: exit 5, the verdict rewritten
    again = run_loadgen("report", str(run_dir), "--fail-on", "ttft_p99>1us", "--junit", str(tmp_path / "j2.xml"))
    assert again.returncode == 5, again.stderr[-2000:]
    assert _summary(run_dir)["thresholds"]["results"][0]["threshold"] == "ttft_p99>1us"
    assert set(_failures(tmp_path / "j2.xml")) == {"step 0 (C=2): ttft_p99>1us", "step 1 (C=4): ttft_p99>1us"}
    # without --fail-on the run's own thresholds judge it again
    assert run_loadgen("report", str(run_dir)).returncode == 0
    bad = run_loadgen("report", str(run_dir), "--fail-on", "ttft_p99>2")
    assert bad.returncode == 2
    assert "--fail-on threshold 'ttft_p99>2': no unit; use ms, s or us" in bad.stderr


def test_abort_on_stops_the_ramp_within_one_step(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory("--profile", "tiny", "--ttft-ms", "150")
    scenario = tmp_path / "gate.toml"
    scenario.write_text(
        'name = "gated"\n[prompt]\ninput_tokens = 32\n[output]\nmax_tokens = 8\n'
        # step 0 ends once 10 requests finished (a valid step, judged at any speed); 60 s catch a hang
        "[load]\nconcurrency = [2, 4, 8, 16]\nrequests_per_step = 10\nstep_seconds = 60\nwarmup_seconds = 0.2\n"
        '[gate]\nabort_on = "ttft_p99>100ms"\n'
    )
    proc = run_loadgen("ramp", "--url", sim.url, "--scenario", str(scenario), "--drain-seconds", "5",
                       "--no-telemetry", "--out", str(tmp_path / "r"))  # fmt: skip
    assert proc.returncode == 5, proc.stderr[-3000:]
    run_dir = _run_dir(proc)
    ends = [json.loads(x) for x in (run_dir / "steps.jsonl").read_text().splitlines() if '"end"' in x]
    assert [(e["step"], e["reason"]) for e in ends] == [(0, "requests"), (1, "aborted")]
    verdict = _summary(run_dir)["thresholds"]
    assert (verdict["aborted_by"], verdict["aborted_step"]) == ("ttft_p99>100ms", 0)
    assert "aborting: --abort-on ttft_p99>100ms: ttft_p99 " in proc.stderr
    head = (run_dir / "report.md").read_text().splitlines()[2]
    assert head.endswith("the ramp was aborted by --abort-on ttft_p99>100ms**")


def test_bad_threshold_syntax_exits_2_before_anything_runs(tmp_path: Path) -> None:
    proc = run_loadgen("ramp", "--url", "http://127.0.0.1:9", "--fail-on", "ttft_p99>2s,latency>1s",
                       "--out", str(tmp_path))  # fmt: skip
    assert proc.returncode == 2
    assert "--fail-on threshold 'latency>1s': unknown metric 'latency'" in proc.stderr
    assert not any(tmp_path.iterdir())
