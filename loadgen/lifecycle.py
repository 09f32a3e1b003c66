"""Server readiness: poll until the server answers, fail fast when it is plainly not coming up."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from loadgen.client import split_base_url


class NotReady(Exception):
    """The server did not become ready; the message says what was seen last."""


def _get(url: str, timeout: float, api_key: str | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url)
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read() if exc.fp else b""


def base_of(url: str) -> str:
    scheme, host, port, prefix = split_base_url(url)
    return f"{scheme}://{host}:{port}{prefix}"


def wait_ready(
    url: str,
    timeout_s: float,
    api_key: str | None = None,
    alive: Callable[[], str | None] | None = None,
    progress: Callable[[str], None] | None = None,
    interval_s: float = 0.25,
) -> None:
    """Return when GET /health answers 200 (or, where there is no /health, GET /v1/models);
    raise NotReady otherwise.

    ``alive`` returns None while the server can still come up, else the reason it cannot (its
    process exited, its unit failed): the wait stops at once with that reason.
    """
    base = base_of(url)
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    while True:
        if alive is not None:
            dead = alive()
            if dead:
                raise NotReady(dead)
        try:
            status, body = _get(base + "/health", timeout=2.0, api_key=api_key)
            if status in (404, 405):  # no health endpoint: the models list answering is the best sign
                status, body = _get(base + "/v1/models", timeout=2.0, api_key=api_key)
                where = "/v1/models"
            else:
                where = "/health"
            if status == 200:
                return
            last = f"HTTP {status} from {where}: {body[:200].decode('utf-8', 'replace')}"
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            last = f"{type(reason).__name__}: {reason}"
        if progress is not None:
            progress(last)
        if time.monotonic() >= deadline:
            raise NotReady(f"{base} not ready after {timeout_s:g} s; last: {last}")
        time.sleep(interval_s)


def first_model(url: str, api_key: str | None = None) -> str | None:
    """The first model id the server lists, or None."""
    try:
        status, body = _get(base_of(url) + "/v1/models", timeout=5.0, api_key=api_key)
    except (urllib.error.URLError, OSError):
        return None
    if status != 200:
        return None
    try:
        data = json.loads(body)
        return str(data["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def probe_metrics(url: str, api_key: str | None = None) -> str | None:
    """The server's Prometheus endpoint (``/metrics`` beside the API) when it serves one, else None."""
    target = base_of(url) + "/metrics"
    try:
        status, body = _get(target, timeout=3.0, api_key=api_key)
    except (urllib.error.URLError, OSError):
        return None
    if status == 200 and (b"# TYPE" in body[:65536] or b"# HELP" in body[:65536]):
        return target
    return None
