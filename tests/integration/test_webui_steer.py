"""Steering a running ramp over HTTP (real Locust, real simulator, no browser): set the load mid-step,
add an open-loop step, hold and skip (once in a warm-up); every change is a step boundary in
steps.jsonl with who and what, and the report written at Stop has each of those steps with its own
figures. Then an open-loop ramp from the form's rates, changed to users while it runs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, free_port, run_records, wait_http

pytestmark = pytest.mark.slow


def _call(url: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


def _json(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    return _call(url, json.dumps(body).encode(), {"Content-Type": "application/json", **(headers or {})})


def _form(url: str, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
    return _call(url, urllib.parse.urlencode(form).encode())


def _until(what: str, check: Any, timeout_s: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _whole_lines(path: Path) -> list[dict[str, Any]]:
    """The lines of a JSONL file being appended to (one still being written has no newline yet)."""
    data = path.read_bytes() if path.exists() else b""
    return [json.loads(line) for line in data.split(b"\n")[:-1]]


def _ok_in_window(run_dir: Path, step: int) -> int:
    """Successful requests of ``step`` sent in its steady window so far, as summary.json counts them."""
    steady = [
        ln["t_ns"] for ln in _whole_lines(run_dir / "steps.jsonl") if ln["step"] == step and ln["event"] == "steady"
    ]
    if not steady:
        return 0
    return sum(
        r["step"] == step and r["error_class"] is None and r["sent_ns"] >= steady[0]
        for f in run_dir.glob("requests*.jsonl")
        for r in _whole_lines(f)
    )


def test_set_load_add_step_and_skip_from_the_web_ui(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory("--profile", "tiny")
    port = free_port()
    out = tmp_path / "reports"
    locust = subprocess.Popen(
        [
            sys.executable, "-m", "locust", "-f", "loadgen/locustfile.py", "--host", sim.url,
            "--web-host", "127.0.0.1", "--web-port", str(port), "--lg-out", str(out), "--no-telemetry",
        ],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=(tmp_path / "locust.log").open("wb"),
    )  # fmt: skip
    ui = f"http://127.0.0.1:{port}"
    control = ui + "/loadgen/control/"

    def state() -> dict[str, Any]:
        return _call(control + "state")[1]

    def at(index: int, status: str) -> bool:
        s = state()
        return s["index"] == index and s["steps"][index]["status"] == status

    try:
        wait_http(ui + "/", locust, 30)
        idle = state()
        assert idle["ok"] and idle["steps"] == [] and "no ramp is running" in idle["message"]
        code, refused = _json(control + "skip", {})
        assert code == 409 and refused["ok"] is False and "no ramp is running" in refused["message"]

        # every step ends by steering or Stop, once it did the work the report checks (requests in
        # its window, however long this machine takes): the 60 s only catch a hang
        form = {
            "user_count": "1", "spawn_rate": "1", "host": sim.url, "lg_max_tokens": "12",
            "lg_steps": "2,3", "lg_step_seconds": "60", "lg_warmup_seconds": "0.5",
        }  # fmt: skip
        code, started = _form(ui + "/swarm", form)
        assert started["success"], started
        (run,) = _until("the run directory", lambda: list(out.glob("*")))
        _until("step 0 steady", lambda: at(0, "steady"))
        _until("3 requests in step 0's window", lambda: _ok_in_window(run, 0) >= 3, 60)

        # a page of another site cannot steer the test through the user's browser
        code, cross = _json(control + "skip", {}, {"Origin": "http://elsewhere.example"})
        assert code == 403 and cross["ok"] is False
        code, bad = _json(control + "set-load", {"concurrency": 0, "step": 0})
        assert code == 400 and "concurrency 0: give a whole number of users, 1 or more" in bad["message"]
        code, changed = _json(control + "set-load", {"concurrency": 4, "step": 0})
        assert code == 200 and changed["ok"] and changed["message"] == "step 0 ended; step 1 at 4 users begins"
        assert [s["load"] for s in changed["steps"]] == ["2 users", "4 users", "3 users"]
        code, again = _json(control + "set-load", {"concurrency": 4, "step": 0})  # a repeated click
        assert code == 400 and "step 0 is not running (the ramp is at step 1)" in again["message"]
        code, added = _form(control + "add-step", {"rate": "8"})  # form fields work too
        assert code == 200 and added["message"] == "step 3 (8 req/s) added at the end of the ramp"

        _until("step 1 steady", lambda: at(1, "steady"))
        code, held = _json(control + "hold", {"step": 1})
        assert code == 200 and held["held"] and held["held_by"] == "web UI (127.0.0.1)"
        _until("3 requests in step 1's window", lambda: _ok_in_window(run, 1) >= 3, 60)
        code, skipped = _json(control + "skip", {"step": 1})
        assert code == 200 and skipped["message"] == "step 1 skipped; step 2 (3 users) begins", skipped
        code, skipped = _json(control + "skip", {"step": 2})  # at once: step 2 ends in its warm-up
        assert code == 200 and skipped["message"] == "step 2 skipped; step 3 (8 req/s) begins", skipped
        _until("step 3 steady", lambda: at(3, "steady"))
        _until("8 requests in step 3's window", lambda: _ok_in_window(run, 3) >= 8, 60)
        code, held = _json(control + "hold", {"step": 3})  # a rate's arrivals go on while it is held
        assert code == 200 and held["held"], held
        _form(ui + "/stop", {})

        summary_path = run / "summary.json"
        _until("the report written at Stop", summary_path.exists, 30)
        after = state()
        assert after["steps"] == [] and "no ramp is running" in after["message"]

        # an open-loop ramp from the form's rates, changed to users while it runs
        code, started = _form(ui + "/swarm", {**form, "lg_steps": "", "lg_rates": "6"})
        assert started["success"], started
        (second,) = _until("the second run directory", lambda: [d for d in out.iterdir() if d != run])
        _until("the open-loop step steady", lambda: at(0, "steady"))
        _until("2 requests in its window", lambda: _ok_in_window(second, 0) >= 2, 60)
        code, changed = _json(control + "set-load", {"concurrency": 2, "step": 0})
        assert code == 200 and changed["message"] == "step 0 ended; step 1 at 2 users begins"
        _until("the closed-loop step steady", lambda: at(1, "steady"))
        _until("2 requests in its window", lambda: _ok_in_window(second, 1) >= 2, 60)
        _form(ui + "/stop", {})
        _until("the second report", (second / "summary.json").exists, 30)
    finally:
        if locust.poll() is None:
            locust.terminate()
            try:
                locust.wait(10)
            except subprocess.TimeoutExpired:
                locust.kill()
                locust.wait()

    lines = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    ends = {ln["step"]: ln for ln in lines if ln["event"] == "end"}
    starts = {ln["step"]: ln for ln in lines if ln["event"] == "start"}
    who = "web UI (127.0.0.1)"
    assert [ends[i]["reason"] for i in range(4)] == ["changed", "skipped", "skipped", "stopped"]
    assert [ends[i].get("ended_by") for i in range(4)] == [who, who, who, None]
    assert [starts[i]["concurrency"] for i in range(3)] == [2, 4, 3] and starts[3]["rate"] == 8.0
    assert "origin" not in starts[0] and "origin" not in starts[2]
    origin = starts[1]["origin"]
    assert (origin["action"], origin["by"], origin["from"], origin["to"], origin["after"]) == (
        "set_load", who, {"concurrency": 2}, {"concurrency": 4}, 0
    )  # fmt: skip
    assert origin["t_ns"] == ends[0]["t_ns"] == starts[1]["t_ns"]
    assert starts[3]["origin"]["action"] == "add_step" and starts[3]["origin"]["to"] == {"rate": 8.0}
    assert starts[3]["warmup_s"] == 0.5 and starts[3]["duration_s"] == 60.0
    assert ends[1]["holds"] == [
        {"by": who, "from_ns": ends[1]["holds"][0]["from_ns"], "to_ns": ends[1]["t_ns"], "released_by": None}
    ]
    assert not any(ln["event"] == "steady" and ln["step"] == 2 for ln in lines)

    rows = json.loads(summary_path.read_text())["steps"]
    assert [(r["step"], r["concurrency"], r["rate"], r["end_reason"]) for r in rows] == [
        (0, 2, None, "changed"), (1, 4, None, "skipped"), (2, 3, None, "skipped"), (3, None, 8.0, "stopped"),
    ]  # fmt: skip
    for i in (0, 1, 3):
        assert rows[i]["requests_ok"] > 0 and rows[i]["output_tok_s"] > 0, rows[i]
        assert rows[i]["step_fields"].get("ended_by") == (who if i < 3 else None)
    assert rows[2]["valid"] is False
    assert rows[2]["invalid_reason"].startswith("not steady: ended during its warm-up (skipped)")
    records = run_records(run)
    assert {r["step"] for r in records if r["error_class"] is None} >= {0, 1, 3}
    # the open-loop step's requests were sent at their scheduled times by the dispatcher
    open_loop = [r for r in records if r["step"] == 3 and r["error_class"] is None]
    assert len(open_loop) >= 8 and all(r["sent_ns"] >= r["intended_ns"] for r in open_loop)
    assert "ended during its warm-up" in (run / "report.md").read_text()

    rows = json.loads((second / "summary.json").read_text())["steps"]
    assert [(r["concurrency"], r["rate"], r["end_reason"]) for r in rows] == [
        (None, 6.0, "changed"),
        (2, None, "stopped"),
    ]
    assert rows[1]["step_fields"]["origin"]["from"] == {"rate": 6.0}
    assert rows[1]["step_fields"]["origin"]["to"] == {"concurrency": 2}
    assert rows[0]["requests_ok"] > 0 and rows[1]["requests_ok"] > 0
    manifest = json.loads((second / "manifest.json").read_text())
    assert manifest["options"]["rates"] == [6.0] and manifest["plan"][0]["rate"] == 6.0


def test_loadgen_ui_takes_rates_for_the_form() -> None:
    from loadgen.webui.cli import locust_argv

    argv = locust_argv(["--url", "http://127.0.0.1:1", "--rate", "0.5,2", "--step-seconds", "10"])
    assert argv[argv.index("--lg-rates") + 1] == "0.5,2"
    assert argv[argv.index("--lg-step-seconds") + 1] == "10"
