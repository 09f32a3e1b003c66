"""The Locust web UI in a real browser: Start a ramp from the form, watch the LLM tab's charts fill.

Headless Chromium (Debian's ``chromium``) is driven over the DevTools protocol with a small client
on ``websocket-client``; the UI is ``locust -f loadgen/locustfile.py`` against the simulated
server (``--profile tiny``). A screenshot of the LLM tab is kept as a test artefact (tmp path; set
LOADGEN_ARTIFACTS to keep it in that folder). Skipped without a Chromium binary.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.browser import CHROMIUM, Tab, keep_artifact, needs_browser
from tests.conftest import REPO, free_port, wait_http

pytestmark = pytest.mark.slow

# sets a React-controlled input the way typing does (the value setter, then an input event)
SET_FIELD = """
(function (name, value) {
  const el = document.querySelector(`input[name="${name}"]`);
  if (!el) return false;
  const setter = Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set;
  setter.call(el, value);
  el.dispatchEvent(new Event('input', { bubbles: true }));
  return el.value === value;
})
"""

# what the LLM tab's iframe shows: points drawn per chart, steps, knee text
CHARTS = """
(function () {
  const f = document.getElementById('loadgen-llm-frame');
  const d = f && f.contentDocument;
  if (!d || !d.getElementById('chart-tok')) return null;
  const pts = (id) => Number(d.getElementById(id).dataset.points || 0);
  return { tok: pts('chart-tok'), req: pts('chart-req'), ttft: pts('chart-ttft'), itl: pts('chart-itl'),
           kv: pts('chart-kv'), power: pts('chart-power'), steps: Number(d.body.dataset.steps || 0),
           run: d.getElementById('run').textContent, knee: d.getElementById('knee-text').textContent,
           circles: d.querySelectorAll('#chart-tok circle').length };
})()
"""


@needs_browser
def test_start_a_ramp_from_the_form_and_watch_the_llm_tab(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory("--profile", "tiny")
    web_port = free_port()
    out = tmp_path / "reports"
    locust = subprocess.Popen(
        [
            sys.executable, "-m", "locust", "-f", "loadgen/locustfile.py", "--host", sim.url,
            "--web-host", "127.0.0.1", "--web-port", str(web_port), "--lg-out", str(out),
            "--gpu-source", f"{sim.url}/gpu/metrics", "--gpu-hz", "4",
            "--metrics-url", f"{sim.url}/metrics", "--metrics-hz", "4",
        ],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=(tmp_path / "locust.log").open("wb"),
    )  # fmt: skip
    browser = None
    page = None
    try:
        ui = f"http://127.0.0.1:{web_port}/"
        wait_http(ui, locust, 30)
        dbg_port = free_port()
        assert CHROMIUM is not None
        browser = subprocess.Popen(
            [
                CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}",
                f"--remote-debugging-port={dbg_port}", "--window-size=1400,1500", ui,
            ],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_http(f"http://127.0.0.1:{dbg_port}/json/version", browser, 20)
        with urllib.request.urlopen(f"http://127.0.0.1:{dbg_port}/json/list", timeout=5) as resp:
            targets = [t for t in json.load(resp) if t.get("type") == "page"]
        page = Tab(targets[0]["webSocketDebuggerUrl"])
        page.wait("document.querySelector('input[name=\"lgSteps\"]') !== null", 20, "Locust's form")

        for name, value in [
            ("lgSteps", "1,4"),
            ("lgStepSeconds", "3"),
            ("lgWarmupSeconds", "1"),
            ("lgMaxTokens", "24"),
        ]:
            assert page.js(f"{SET_FIELD}({json.dumps(name)}, {json.dumps(value)})"), name
        page.js("document.querySelector('form button[type=submit]').click()")
        # the form goes away once Locust accepted the Start; then the LLM tab is one of the tabs
        page.wait(
            "[...document.querySelectorAll('button[role=tab]')].some(b => b.textContent.trim() === 'LLM')",
            20,
            "the LLM tab",
        )
        page.js("[...document.querySelectorAll('button[role=tab]')].find(b => b.textContent.trim() === 'LLM').click()")
        filled = page.wait(
            f"(function () {{ const c = {CHARTS.strip()};"
            " return c && c.steps >= 2 && c.tok >= 2 && c.ttft >= 4 ? c : null; })()",
            40,
            "two steps in the LLM tab's charts",
        )
        # the tab shows our run, one point per step on the throughput chart, p50/p90/p99 per step for TTFT
        assert filled["run"].endswith("-locust")
        assert filled["circles"] >= 2
        assert filled["req"] >= 1 and filled["itl"] >= 3
        # the telemetry side process sampled the simulator's /metrics and its DCGM-style /gpu/metrics
        assert filled["kv"] >= 1 and filled["power"] >= 1
        # the table Locust draws for the tab lists the steps
        rows = page.wait(
            "(function () { const t = [...document.querySelectorAll('table')]"
            ".find(t => t.textContent.includes('Per-request tok/s'));"
            " return t ? t.querySelectorAll('tbody tr').length : 0; })()",
            10,
            "the LLM table rows",
        )
        assert rows >= 2
        # the ramp ends by itself (1 + 3 s per step): the report is linked from the tab
        page.wait(
            "(function () { const f = document.getElementById('loadgen-llm-frame');"
            " return f && [...f.contentDocument.querySelectorAll('#reports a')]"
            ".some(a => a.textContent === 'report.md'); })()",
            30,
            "the report link",
        )
        time.sleep(0.5)
        shot = base64.b64decode(page.call("Page.captureScreenshot", format="png")["data"])
        path = tmp_path / "webui-llm-tab.png"
        path.write_bytes(shot)
        assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 20_000
        keep_artifact(path)
        runs = list(out.iterdir())
        assert len(runs) == 1 and (runs[0] / "summary.json").exists()
        summary = json.loads((runs[0] / "summary.json").read_text())
        assert [s.get("concurrency") for s in summary["steps"]] == [1, 4]
    finally:
        if page is not None:
            page.close()
        for proc in (browser, locust):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
