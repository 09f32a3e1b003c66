"""The web UI as a newcomer meets it, at 1280x800 (issue 27): ``loadgen ui`` against the simulator, in
headless Chromium over the DevTools protocol (``tests/browser.py``).

One UI process, one browser, one journey:

* the start form speaks the form's words (no flag names as placeholders, no exit codes, no fields
  it does not have); a scenario chosen and then "(none)" gives the load fields their defaults back;
  a bad value is refused with the label the user saw, and that field is marked;
* a ramp started from the form ends as ``loadgen ramp`` ends: the requests in flight when its last
  step ends drain, so a server that answered everything leaves 0 failures (no ``cancelled``);
* mid-run, the live page's knee verdict and step table are above the fold, and the table fits;
* one count everywhere: the run's ok / failed requests are equal in summary.json, on the live page,
  in Past runs and on the report's cards; the live page's step rows are summary.json's steps;
* the run just finished can be compared at once (its checkbox is enabled once its report is
  written), and the comparison stays listed in Past runs.

Screenshots of the start form, the live page mid-run, Past runs, the report and the comparison are
kept (tmp path; copied into ``$LOADGEN_ARTIFACTS`` when set, as CI sets it).
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.browser import Tab, chromium, keep_artifact, needs_browser
from tests.conftest import REPO, free_port, loadgen_cmd, wait_http

# alone: a browser, the UI, a ramp and the simulator on two cores race the waits below
pytestmark = [pytest.mark.slow, pytest.mark.exclusive]

WIDTH, HEIGHT = 1280, 800
SET = """(function (id, value) {
  const el = document.getElementById(id);
  if (!el) return false;
  el.value = value;
  el.dispatchEvent(new Event(el.tagName === 'SELECT' ? 'change' : 'input', { bubbles: true }));
  return el.value === value;
})"""
FRAME = "document.getElementById('loadgen-llm-frame')"
DOC = f"{FRAME}.contentDocument"


def _field(tab: Tab, name: str) -> str:
    value: str = tab.js(f"document.getElementById('lg-field-{name}').value")
    return value


def _shot(tab: Tab, tmp: Path, name: str) -> None:
    time.sleep(0.3)  # the last poll's drawing
    shot = tab.screenshot(tmp / name)
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 10_000, name
    keep_artifact(tmp / name)


def _wait_run_dir(out: Path, label: str, timeout_s: float) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for d in out.glob("*"):
            try:
                if json.loads((d / "manifest.json").read_text()).get("label") == label:
                    return d
            except (OSError, ValueError):
                continue
        time.sleep(0.2)
    raise AssertionError(f"no run directory labelled {label} under {out} within {timeout_s} s")


def _wait_summary(run_dir: Path, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            summary: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
            return summary
        except (OSError, ValueError):
            time.sleep(0.25)
    raise AssertionError(f"{run_dir}: no summary.json within {timeout_s} s")


@needs_browser
def test_a_newcomers_journey_through_the_web_ui_at_1280x800(sim_factory: Any, tmp_path: Path) -> None:
    # a simulator slow enough that every step ends with requests in flight (the drain's case)
    sim = sim_factory("--profile", "tiny")
    out = tmp_path / "reports"
    port = free_port()
    ui = subprocess.Popen(
        loadgen_cmd(
            "ui", "--url", sim.url, "--out", str(out), "--scenarios", str(REPO / "scenarios"),
            "--gpu-source", f"{sim.url}/gpu/metrics", "--gpu-hz", "4", "--web-port", str(port),
        ),
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=(tmp_path / "ui.log").open("wb"),
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}/"
        wait_http(base, ui, 30)
        with chromium(tmp_path, "about:blank", size=f"{WIDTH},{HEIGHT}") as tab:
            tab.call(
                "Emulation.setDeviceMetricsOverride", width=WIDTH, height=HEIGHT, deviceScaleFactor=1, mobile=False
            )
            tab.navigate(base)
            tab.wait("document.getElementById('lg-start') !== null", 20, "our start form")

            # -- the form's words: no flag as a placeholder, no exit code, no field it does not have
            words = tab.js(
                "[...document.querySelectorAll('#lg-start input, #lg-start .lg-help')]"
                ".map(e => e.placeholder || e.textContent).join(' | ')"
            )
            for cli_word in ("--", "exit 5", "exit code"):
                assert cli_word not in words, (cli_word, words)
            _shot(tab, tmp_path, "webui-start-form.png")

            # -- a scenario fills the load fields; "(none)" gives the defaults back
            defaults = {n: _field(tab, n) for n in ("lg_steps", "lg_step_seconds", "lg_warmup_seconds")}
            chat = str(REPO / "scenarios" / "chat.toml")
            assert tab.js(f"{SET}('lg-field-lg_scenario', {json.dumps(chat)})")
            filled = {n: _field(tab, n) for n in defaults}
            assert filled != defaults, "the chat scenario's load pattern did not fill the form"
            assert tab.js(f"{SET}('lg-field-lg_scenario', '')")
            assert {n: _field(tab, n) for n in defaults} == defaults
            assert tab.js("document.getElementById('lg-mode-closed').checked")

            # -- a bad value: the answer names the label the user saw, and marks that field
            assert tab.js(f"{SET}('lg-field-lg_steps', '2,x')")
            tab.js("document.getElementById('lg-start-button').click()")
            refused = tab.wait(
                "(function () { const m = document.getElementById('lg-start-message');"
                " return m.className.includes('err') && m.textContent; })()",
                10,
                "the refusal",
            )
            label = tab.js("document.querySelector('label[for=lg-field-lg_steps]').textContent")
            assert f"\u201c{label}\u201d" in refused and "--lg-" not in refused, refused
            assert tab.js("document.getElementById('lg-field-lg_steps').getAttribute('aria-invalid')") == "true"

            # -- a ramp from the form: 2 steps, every step ends with requests in flight
            for field, value in (
                ("lg-field-lg_steps", "2,4"),
                ("lg-field-lg_step_seconds", "3"),
                ("lg-field-lg_warmup_seconds", "0.5"),
                ("lg-field-lg_max_tokens", "96"),
                ("lg-field-lg_label", "journey"),
            ):
                assert tab.js(f"{SET}({json.dumps(field)}, {json.dumps(value)})"), field
            tab.js("document.getElementById('lg-start-button').click()")
            tab.wait("location.search.includes('tab=llm')", 20, "the LLM tab after Start")
            run_dir = _wait_run_dir(out, "journey", 20)
            tab.wait(f"!!({FRAME} && {DOC} && {DOC}.querySelector('#steps-table tr[data-step=\"0\"]'))", 20, "step 0")

            # -- mid-run at 1280x800: the verdict and the step table above the fold, the table fits
            tab.wait(f"!!{DOC}.querySelector('#steps-table tr[data-step=\"1\"]')", 20, "step 1's row")
            fold = tab.js(
                f"(function () {{ const f = {FRAME}.getBoundingClientRect(); const d = {DOC};"
                " const top = (id) => f.top + d.getElementById(id).getBoundingClientRect().top;"
                " const s = d.querySelector('#steps .scroll');"
                " return {knee: top('knee'), table: top('steps-table'), row: f.top +"
                " d.querySelector('#steps-table tr[data-step]').getBoundingClientRect().bottom,"
                " overflow: s.scrollWidth - s.clientWidth,"
                " locust_table: [...document.querySelectorAll('table')].filter(t => t.offsetParent !== null"
                " && t.textContent.includes('Per-request tok/s')).length}; })()"
            )
            assert fold["knee"] < HEIGHT and fold["row"] < HEIGHT, fold
            assert fold["overflow"] <= 0, fold
            assert fold["locust_table"] == 0, "Locust's copy of the step table is still drawn above ours"
            _shot(tab, tmp_path, "webui-live-mid-run.png")

            # -- the end: drained, reported, 0 failures when the server answered everything
            summary = _wait_summary(run_dir, 60)
            totals = summary["totals"]
            assert totals["requests_failed"] == 0 and totals["errors"] == {}, totals
            assert totals["requests_ok"] > 0
            events = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
            assert [e["reason"] for e in events if e.get("event") == "end"] == ["duration", "duration"]

            # -- one count everywhere: the live page (once it reads the report) ...
            tab.wait(f"{DOC}.getElementById('source').textContent.includes('report')", 20, "the report's figures")
            live = tab.js(
                f"(function () {{ const d = {DOC}; return {{"
                " ok: d.querySelector('#totals [data-count=ok]').textContent,"
                " failed: d.querySelector('#totals [data-count=failed]').textContent,"
                " rows: [...d.querySelectorAll('#steps-table tbody tr[data-step]')]"
                ".map(r => r.children[2].textContent)}; })()"
            )
            assert live["ok"] == f"{totals['requests_ok']:,}" and live["failed"] == "0", (live, totals)
            assert live["rows"] == [f"{s['requests_ok']:,} / {s['requests_failed']:,}" for s in summary["steps"]]

            # ... Past runs: the run just reported can be compared at once, its counts are the summary's
            tab.navigate(base + "loadgen/runs")
            row = f'#runs tr[data-run="{run_dir.name}"]'
            tab.wait(f"!!document.querySelector('{row}')", 20, "the run in Past runs")
            listed = tab.js(
                f"(function () {{ const r = document.querySelector('{row}'); const c = r.querySelector('td.counts');"
                " return {status: r.children[4].textContent, disabled: r.querySelector('input.pick').disabled,"
                " ok: c.dataset.ok, failed: c.dataset.failed}; })()"
            )
            assert listed == {
                "status": "reported",
                "disabled": False,
                "ok": str(totals["requests_ok"]),
                "failed": "0",
            }, listed

            # ... and the report's cards
            tab.navigate(base + f"loadgen/runs/{run_dir.name}/report.html")
            tab.wait("!!document.querySelector('[data-count=ok]')", 20, "the report's cards")
            cards = tab.js(
                "({ok: document.querySelector('[data-count=ok] b').textContent,"
                " failed: document.querySelector('[data-count=failed] b').textContent})"
            )
            assert cards == {"ok": f"{totals['requests_ok']:,}", "failed": "0"}, cards
            _shot(tab, tmp_path, "webui-report.png")

            # -- a second run (Locust's /swarm, as the form posts it), then both compared from Past runs
            body = {"user_count": "1", "spawn_rate": "1", "host": sim.url, "lg_steps": "2", "lg_step_seconds": "2",
                    "lg_warmup_seconds": "0.5", "lg_max_tokens": "64", "lg_label": "journey-2"}  # fmt: skip
            req = urllib.request.Request(base + "swarm", data=urllib.parse.urlencode(body).encode())
            with urllib.request.urlopen(req, timeout=10) as resp:
                assert json.load(resp)["success"] is True
            second = _wait_run_dir(out, "journey-2", 20)
            tab.navigate(base + "loadgen/runs")
            # while it runs, its box says why it cannot be picked yet
            tab.wait(f"!!document.querySelector('#runs tr[data-run=\"{second.name}\"]')", 20, "the second run")
            _wait_summary(second, 40)
            # once reported: pickable at the next listing (the page lists every 5 s)
            tab.wait(
                f"!document.querySelector('#runs tr[data-run=\"{second.name}\"] input.pick').disabled",
                15,
                "the second run's box enabled once its report is written",
            )
            for name in (run_dir.name, second.name):
                tab.js(f"(function () {{ const c = document.querySelector('input.pick[value=\"{name}\"]');"
                       " c.checked = true; c.dispatchEvent(new Event('change')); })()")  # fmt: skip
            tab.js("document.getElementById('compare').click()")
            link = tab.wait("(document.getElementById('compare-link') || {}).href", 30, "the comparison link")
            compared = link.rstrip("/").split("/")[-2]
            _shot(tab, tmp_path, "webui-past-runs.png")
            # the comparison stays listed (a reload, as a user coming back later)
            tab.navigate(base + "loadgen/runs")
            tab.wait(
                f"!!document.querySelector('#runs tr[data-run=\"{compared}\"][data-kind=comparison] a')",
                20,
                "the comparison in Past runs",
            )
            tab.navigate(link)
            tab.wait("!!document.body && document.body.innerText.includes('journey-2')", 20, "the comparison page")
            _shot(tab, tmp_path, "webui-comparison.png")
    finally:
        if ui.poll() is None:
            ui.terminate()
            try:
                ui.wait(15)
            except subprocess.TimeoutExpired:
                ui.kill()
                ui.wait()
