"""Headless Chromium over the DevTools protocol, for the browser tests (web UI, report, Pareto).

``CHROMIUM``: the binary (``LOADGEN_CHROMIUM``, else the first of the usual names on PATH), or
None; ``needs_browser``: skips a test without it or without ``websocket-client``. ``chromium(tmp,
url)`` starts one in its own profile and process group and yields a ``Tab`` on its first page;
the browser is stopped when the block ends.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port, wait_http

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless_shell")


def find_chromium() -> str | None:
    env = os.environ.get("LOADGEN_CHROMIUM")
    if env:
        return env if shutil.which(env) or Path(env).is_file() else None
    return next((p for name in CANDIDATES if (p := shutil.which(name))), None)


CHROMIUM = find_chromium()
try:
    import websocket  # websocket-client

    HAVE_WS = True
except ImportError:  # pragma: no cover - depends on the environment
    HAVE_WS = False

needs_browser = pytest.mark.skipif(
    CHROMIUM is None or not HAVE_WS,
    reason="needs a Chromium binary (apt-get install chromium, or set LOADGEN_CHROMIUM) and websocket-client",
)


class Tab:
    """One page target: ``call`` a DevTools method, ``js`` an expression (promises awaited),
    ``wait`` until an expression is truthy; every event read on the way is kept in ``events``."""

    def __init__(self, ws_url: str) -> None:
        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self._ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        mid = next(self._ids)
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                result: dict[str, Any] = msg.get("result", {})
                return result
            if "method" in msg:
                self.events.append(msg)

    def js(self, expr: str) -> Any:
        res = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expr[:80]}: {res['exceptionDetails']}")
        return res["result"].get("value")

    def wait(self, expr: str, timeout_s: float, what: str) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.js(expr)
            if value:
                return value
            time.sleep(0.25)
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def open(self, url: str, timeout_s: float = 30.0) -> list[str]:
        """Load ``url`` and wait for its load event; the errors logged meanwhile (``errors``). Needs
        the Page, Runtime and Log domains enabled."""
        self.events.clear()
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout_s
        while not any(e["method"] == "Page.loadEventFired" for e in self.events):
            if time.monotonic() > deadline:
                raise AssertionError(f"{url} did not finish loading within {timeout_s} s")
            self.events.append(json.loads(self.ws.recv()))
        self.js("new Promise(r => setTimeout(r, 200))")  # late console output arrives as events too
        return errors(self.events)

    def screenshot(self, path: Path) -> bytes:
        shot = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        path.write_bytes(shot)
        return shot

    def close(self) -> None:
        self.ws.close()


def keep_artifact(path: Path) -> None:
    """Copy a test's file (a screenshot) into ``$LOADGEN_ARTIFACTS`` when set (``.ci/run`` sets it)."""
    target = os.environ.get("LOADGEN_ARTIFACTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(target) / path.name)


def errors(events: list[dict[str, Any]]) -> list[str]:
    """Console errors and warnings, uncaught exceptions and browser log errors among ``events``."""
    out = []
    for e in events:
        p = e.get("params", {})
        if e.get("method") == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert", "warning"):
            out.append(
                f"console.{p['type']}: " + " ".join(str(a.get("value", a.get("description"))) for a in p["args"])
            )
        elif e.get("method") == "Runtime.exceptionThrown":
            out.append("exception: " + json.dumps(p.get("exceptionDetails", {}))[:500])
        elif e.get("method") == "Log.entryAdded" and p.get("entry", {}).get("level") in ("error", "warning"):
            out.append(f"log {p['entry'].get('source')}: {p['entry'].get('text')}")
    return out


@contextmanager
def chromium(tmp: Path, url: str = "about:blank", size: str = "1400,1500") -> Iterator[Tab]:
    """A headless Chromium showing ``url``; its ``Tab``. Stopped (its whole process group) on exit."""
    assert CHROMIUM is not None
    port = free_port()
    browser = subprocess.Popen(
        [
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
            "--disable-background-networking", "--disable-sync", "--disable-dev-shm-usage",
            f"--user-data-dir={tmp / 'chromium-profile'}", f"--remote-debugging-port={port}",
            f"--window-size={size}", url,
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    tab = None
    try:
        wait_http(f"http://127.0.0.1:{port}/json/version", browser, 30)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as resp:
            targets = [t for t in json.load(resp) if t.get("type") == "page"]
        tab = Tab(targets[0]["webSocketDebuggerUrl"])
        yield tab
    finally:
        if tab is not None:
            tab.close()
        if browser.poll() is None:
            os.killpg(browser.pid, signal.SIGTERM)
            try:
                browser.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(browser.pid, signal.SIGKILL)
                browser.wait()
