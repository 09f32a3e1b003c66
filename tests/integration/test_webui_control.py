"""The web UI as the control plane, in a real browser (issue 19): ``loadgen ui`` against the simulator,
headless Chromium over the DevTools protocol (``tests/browser.py``).

One UI process serves the whole story, as a user meets it: the start form on the first page (its
defaults are ``loadgen ramp``'s, its scenarios those of ``--scenarios``), a closed-loop ramp started
by filling it and clicking Start, with the load changed mid-step from the live page's Steer panel
(the new step appears in the live table and in steps.jsonl, with who changed what), Locust's LLM
table and the KV chart filled from the server's own /metrics without ``--metrics-url``, an open-loop
run started from Locust's own form (folded under ours), then the past-runs page: a report opened
from the list and two runs compared. A screenshot of the live page after the 3-step ramp is kept
(tmp path; copied into ``$LOADGEN_ARTIFACTS`` when set).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from loadgen.spec import flags
from tests.browser import chromium, keep_artifact, needs_browser
from tests.conftest import REPO, free_port, loadgen_cmd, wait_http

# alone (tests/conftest.py): Chromium, the web UI, a ramp and a simulator race 20-s waits; beside another
# test on two cores it once missed step 0's steady phase
pytestmark = [pytest.mark.slow, pytest.mark.exclusive]

# a React-free form: set a field of ours the way typing does
SET = """(function (id, value) {
  const el = document.getElementById(id);
  if (!el) return false;
  el.value = value;
  el.dispatchEvent(new Event(el.tagName === 'SELECT' ? 'change' : 'input', { bubbles: true }));
  return el.value === value;
})"""

FRAME = "document.getElementById('loadgen-llm-frame')"

# a field of Locust's own (React) form, set the way typing does: the value setter, then an input event
LOCUST_FIELD = """(function (name, value) {
  const el = document.querySelector(`input[name="${name}"]`);
  if (!el) return false;
  Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set.call(el, value);
  el.dispatchEvent(new Event('input', { bubbles: true }));
  return el.value === value;
})"""


def _post(url: str, data: dict[str, str]) -> dict[str, Any]:
    body = urllib.parse.urlencode(data).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=10) as resp:
        answer: dict[str, Any] = json.load(resp)
        return answer


def _steps(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "steps.jsonl"  # written at the first step, a moment after the manifest
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@needs_browser
def test_start_steer_watch_and_compare_from_the_browser(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory("--profile", "tiny")
    out = tmp_path / "reports"
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    shutil.copyfile(REPO / "scenarios" / "chat.toml", scenarios / "chat.toml")
    (scenarios / "broken.toml").write_text("name = 'broken'\n[load]\nmode = 'sideways'\n")
    port = free_port()
    ui = subprocess.Popen(
        loadgen_cmd(
            "ui", "--url", sim.url, "--out", str(out), "--scenarios", str(scenarios),
            "--gpu-source", f"{sim.url}/gpu/metrics", "--gpu-hz", "4", "--metrics-hz", "4",
            "--web-port", str(port),
        ),
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=(tmp_path / "ui.log").open("wb"),
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}/"
        wait_http(base, ui, 30)
        with chromium(tmp_path, base) as tab:
            tab.wait("document.getElementById('lg-start') !== null", 20, "our start form")
            # the form's defaults are loadgen ramp's, from the one option table
            shown = tab.js(
                "Object.fromEntries([...document.querySelectorAll('#lg-start [id^=lg-field-]')]"
                ".map(e => [e.id.slice(9), e.value]))"
            )
            for dest in ("concurrency", "step_seconds", "warmup_seconds", "max_tokens", "endpoint", "transport"):
                f = flags.BY_DEST[dest]
                want = (
                    ",".join(map(str, f.default))
                    if isinstance(f.default, list)
                    else f"{f.default:g}"
                    if isinstance(f.default, float)
                    else str(f.default)
                )
                assert shown[f.lg_attr] == want, (dest, shown[f.lg_attr], want)
            # Locust's own form is folded away; the scenarios are those of --scenarios, a broken one not offered
            assert tab.js("document.querySelector('input[name=userCount]').closest('form').style.display") == "none"
            options = tab.js(
                "[...document.querySelectorAll('#lg-field-lg_scenario option')].map(o => [o.textContent, o.disabled])"
            )
            assert ["chat", False] in options
            assert any(text.startswith("broken (not a scenario") and disabled for text, disabled in options)

            # a ramp, started by filling the form and clicking Start
            for field, value in (
                ("lg-field-lg_steps", "1,2"),
                ("lg-field-lg_step_seconds", "2.5"),
                ("lg-field-lg_warmup_seconds", "0.5"),
                ("lg-field-lg_max_tokens", "24"),
                ("lg-field-lg_label", "browser-closed"),
            ):
                assert tab.js(f"{SET}({json.dumps(field)}, {json.dumps(value)})"), field
            tab.js("document.getElementById('lg-start-button').click()")
            tab.wait("location.search.includes('tab=llm')", 20, "the LLM tab after Start")
            tab.wait(
                f"!!({FRAME} && {FRAME}.contentDocument && {FRAME}.contentDocument.getElementById('chart-tok'))",
                20,
                "the live page",
            )
            run_dir = _wait_run_dir(out, "browser-closed", 20)
            # mid-step, from the live page's Steer panel: step 0 goes on at 3 users instead of 1
            doc = f"{FRAME}.contentDocument"
            tab.wait(f'!!{doc}.querySelector(\'#steps-table tr[data-step="0"][data-phase="steady"]\')', 20, "step 0")
            tab.js(
                f"(function () {{ const d = {doc}; const v = d.querySelector('[data-steer=set-value]');"
                " v.value = '3'; d.querySelector('[data-steer=set-unit]').value = 'concurrency';"
                " d.querySelector('button[data-steer=set]').click(); })()"
            )
            answer = tab.wait(f"{doc}.querySelector('[data-steer=answer]').textContent", 10, "the panel's answer")
            assert answer == "step 0 ended; step 1 at 3 users begins", answer
            # the new step appears in the live table, and in steps.jsonl with who changed what
            tab.wait(f"!!{doc}.querySelector('#steps-table tr[data-step=\"1\"]')", 10, "the new step's row")
            origin = next(s["origin"] for s in _steps(run_dir) if s.get("event") == "start" and s["step"] == 1)
            assert origin["action"] == "set_load" and origin["by"] == "web UI (127.0.0.1)"
            assert (origin["from"], origin["to"]) == ({"concurrency": 1}, {"concurrency": 3})
            # then the ramp walks its three steps (1, 3 inserted, 2) by itself
            _wait_steps_ended(run_dir, 3, 40)
            tab.wait(
                f"{FRAME}.contentDocument.querySelectorAll('#reports a').length > 0",
                30,
                "the report link on the live page",
            )
            # the KV chart filled from the simulator's /metrics, which nobody named
            points = tab.js(
                f"Object.fromEntries(['chart-kv', 'chart-tok', 'chart-ttft', 'chart-power'].map(id =>"
                f" [id, Number({FRAME}.contentDocument.getElementById(id).dataset.points || 0)]))"
            )
            assert points["chart-kv"] >= 1 and points["chart-power"] >= 1, points
            assert points["chart-tok"] >= 3 and points["chart-ttft"] >= 3, points  # a point per step
            time.sleep(0.5)
            shot = tab.screenshot(tmp_path / "webui-live-3-steps.png")
            assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 20_000
            keep_artifact(tmp_path / "webui-live-3-steps.png")
            summary = json.loads((run_dir / "summary.json").read_text())
            assert [s["concurrency"] for s in summary["steps"]] == [1, 3, 2]
            assert summary["steps"][0]["end_reason"] == "changed"
            rows = tab.js(f"[...{doc}.querySelectorAll('#steps-table tr[data-step]')].map(r => r.dataset.step)")
            assert rows == ["0", "1", "2"]
            # Locust's own table in the LLM tab lists the steps too (from its /stats/requests polls)
            locust_rows = tab.wait(
                "(function () { const t = [...document.querySelectorAll('table')]"
                ".find(t => t.textContent.includes('Per-request tok/s'));"
                " return t ? t.querySelectorAll('tbody tr').length : 0; })()",
                10,
                "the LLM table rows",
            )
            assert locust_rows >= 3

            # a Start naming a file outside the scenario folders is refused, whatever the form sent
            refused = _post(base + "swarm", {"user_count": "1", "spawn_rate": "1", "host": sim.url,
                                             "lg_steps": "1", "lg_scenario": "/etc/hostname"})  # fmt: skip
            assert refused["success"] is False and "not one of the scenario files" in refused["message"]

            # an open-loop run from Locust's own form (folded under ours): rates, Poisson arrivals
            tab.navigate(base)
            # after a run Locust shows its statistics; "New" opens the start form (ours above Locust's)
            tab.wait("[...document.querySelectorAll('button')].some(b => b.textContent.trim() === 'New')", 20, "New")
            tab.js("[...document.querySelectorAll('button')].find(b => b.textContent.trim() === 'New').click()")
            tab.wait("!!document.getElementById('lg-locust-form-toggle')", 20, "the start form again")
            tab.js("document.getElementById('lg-locust-form-toggle').click()")
            tab.wait("document.querySelector('input[name=lgRates]').closest('form').style.display === ''", 5, "it")
            fields = {"lgSteps": "", "lgRates": "4,8", "lgStepSeconds": "2", "lgWarmupSeconds": "0.5",
                      "lgMaxTokens": "16", "lgLabel": "browser-open"}  # fmt: skip
            for name, value in fields.items():
                assert tab.js(f"{LOCUST_FIELD}({json.dumps(name)}, {json.dumps(value)})"), name
            tab.js(
                "document.querySelector('input[name=lgRates]').closest('form').querySelector('button[type=submit]').click()"
            )
            second = _wait_run_dir(out, "browser-open", 20)
            _wait_steps_ended(second, 2, 40)
            assert [s["rate"] for s in json.loads((second / "summary.json").read_text())["steps"]] == [4.0, 8.0]

            # past runs: the list, a report opened from it, two runs compared
            tab.navigate(base + "loadgen/runs")
            tab.wait("document.querySelectorAll('#runs tbody tr[data-run]').length >= 2", 20, "two runs in the list")
            listed = tab.js("[...document.querySelectorAll('#runs tbody tr[data-run]')].map(r => r.dataset.run)")
            assert run_dir.name in listed and second.name in listed
            href = tab.js(f"document.querySelector('tr[data-run=\"{run_dir.name}\"] td:nth-child(2) a').href")
            tab.navigate(href)
            tab.wait(
                "document.title.length > 0 && document.body.innerText.includes('browser-closed')", 20, "the report"
            )
            tab.navigate(base + "loadgen/runs")
            tab.wait("document.querySelectorAll('input.pick').length >= 2", 20, "the run list again")
            for name in (run_dir.name, second.name):
                tab.js(f"(function () {{ const c = document.querySelector('input.pick[value=\"{name}\"]');"
                       " c.checked = true; c.dispatchEvent(new Event('change')); })()")  # fmt: skip
            tab.js("document.getElementById('compare').click()")
            link = tab.wait("(document.getElementById('compare-link') || {}).href", 30, "the comparison link")
            with urllib.request.urlopen(link, timeout=10) as resp:
                page = resp.read().decode()
            assert "browser-closed" in page and "browser-open" in page
    finally:
        if ui.poll() is None:
            ui.terminate()
            try:
                ui.wait(15)
            except subprocess.TimeoutExpired:
                ui.kill()
                ui.wait()


def _wait_run_dir(out: Path, label: str, timeout_s: float) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for d in out.glob("*"):
            try:
                manifest = json.loads((d / "manifest.json").read_text())
            except (OSError, ValueError):
                continue
            if manifest.get("label") == label:
                return d
        time.sleep(0.2)
    raise AssertionError(f"no run directory labelled {label} under {out} within {timeout_s} s")


def _wait_steps_ended(run_dir: Path, n: int, timeout_s: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ended = [s for s in _steps(run_dir) if s.get("event") == "end"]
        if len(ended) >= n and (run_dir / "summary.json").exists():
            return ended
        time.sleep(0.25)
    raise AssertionError(f"{run_dir}: {n} steps did not end within {timeout_s} s: {_steps(run_dir)}")
