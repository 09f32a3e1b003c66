"""The "LLM" tab on Locust's own web UI (a Flask blueprint under ``/loadgen``).

Locust's mechanism for an extra tab is used as it is: ``extendedTabs`` / ``extendedTables`` in the
template arguments declare the tab and its table, and ``extended_stats`` in the ``/stats/requests``
answer (which the UI polls every 2 s) fills it: one row per step. The charts live on our own page,
``/loadgen/``, drawn by our script from ``/loadgen/live.json``; a small script added to Locust's
index page shows that page inside the LLM tab, under the table. Routes:

    /loadgen/             the live page (charts, knee verdict, links to the reports)
    /loadgen/live.json    what the page draws (``loadgen.webui.live.LiveRun.payload``)
    /loadgen/metrics      the load generator's metrics in Prometheus's text format
    /loadgen/run/<file>   the current run directory's report files (report.html, report.md, ...)
    /loadgen/static/...   our scripts and styles
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from flask import Blueprint, Response, abort, request, send_from_directory

from loadgen.analysis.formats import fixed
from loadgen.webui.live import LiveRun
from loadgen.webui.livejson import empty_payload
from loadgen.webui.promexport import CONTENT_TYPE, LoadgenMetrics

STATIC = Path(__file__).with_name("static")
TAB_KEY = "llm"

# the LLM tab's table (Locust renders it from extended_stats rows with these keys; tab.js finds
# the table by its "Per-request tok/s" title)
TABLE = [
    ("step", "Step"),
    ("load", "Concurrency / rate"),
    ("phase", "Phase"),
    ("valid", "Valid"),
    ("timing", "Timing"),
    ("ok", "OK (steady)"),
    ("failed", "Failed (steady)"),
    ("tok_s", "Aggregate tok/s"),
    ("req_tok_s", "Per-request tok/s"),
    ("ttft_p50", "TTFT p50 (ms)"),
    ("ttft_p99", "TTFT p99 (ms)"),
    ("tpot_p50", "TPOT p50 (ms)"),
    ("tpot_p99", "TPOT p99 (ms)"),
    ("itl_p50", "ITL p50 (ms)"),
    ("itl_p99", "ITL p99 (ms)"),
    ("errors", "Errors"),
    ("reasons", "Why (invalid, timing uncertain)"),
]


def fmt_num(v: float | None, digits: int = 1) -> str:
    """A figure as the report's tables print it (``report.markdown._num``): "1,234.5"; "" for none."""
    return fixed(v, digits, missing="")


def fmt_ms(v: float | None) -> str:
    """A latency as the report prints it (``report.markdown._ms``): 2 decimals under 10 ms, else 1."""
    if v is None:
        return ""
    return f"{v:,.2f}" if abs(v) < 10 else f"{v:,.1f}"


def table_rows(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The LLM tab's table rows from a live payload (the "name" key is what Locust keys rows by).

    Figures are formatted as the report formats them, so a finished run reads the same here as
    in report.md."""
    rows = []
    for s in payload.get("steps", []):
        load = f"{s['rate']:g} req/s" if s.get("rate") is not None else str(s.get("concurrency") or "")
        if s.get("context_tokens"):
            load += f" @ {s['context_tokens']} tok"
        errors = ", ".join(f"{k}: {v}" for k, v in sorted(s.get("errors", {}).items()))
        reasons = [r for r in (s.get("invalid_reason"), s.get("timing_reason")) if r]
        rows.append(
            {
                "name": f"step {s['step']}",
                "step": s["step"],
                "load": load,
                "phase": s["phase"],
                # a step warming up is not judged yet (the live page's badge says the same)
                "valid": "warm-up" if s["phase"] == "warm-up" else "VALID" if s.get("valid", True) else "INVALID",
                "timing": "uncertain" if s.get("timing_uncertain") else "",
                # the report's counts: requests sent in the steady window (cancelled ones apart)
                "ok": s.get("requests_ok", s["ok"]),
                "failed": s.get("requests_failed", s["failed"]),
                "tok_s": fmt_num(s.get("tok_s")),
                "req_tok_s": fmt_num(s.get("req_tok_s")),
                "ttft_p50": fmt_ms(s.get("ttft_p50")),
                "ttft_p99": fmt_ms(s.get("ttft_p99")),
                "tpot_p50": fmt_ms(s.get("tpot_p50")),
                "tpot_p99": fmt_ms(s.get("tpot_p99")),
                "itl_p50": fmt_ms(s.get("itl_p50")),
                "itl_p99": fmt_ms(s.get("itl_p99")),
                "errors": errors,
                "reasons": "; ".join(reasons),
            }
        )
    return rows


class LiveSource:
    """The ``LiveRun`` of whichever run directory ``run_dir()`` names now (None before a run).

    The page polls live.json and Locust's UI polls /stats/requests, each every 2 s: a payload
    younger than ``reuse_s`` is served again rather than computed twice."""

    def __init__(self, run_dir: Callable[[], Path | None], reuse_s: float = 0.5) -> None:
        self._run_dir = run_dir
        self._live: LiveRun | None = None
        self.reuse_s = reuse_s
        self._last: tuple[float, Path, dict[str, Any]] | None = None

    def payload(self) -> dict[str, Any]:
        d = self._run_dir()
        if d is None:
            return empty_payload()
        d = Path(d)
        now = time.monotonic()
        if self._last is not None and self._last[1] == d and now - self._last[0] < self.reuse_s:
            return self._last[2]
        if self._live is None or self._live.run_dir != d:
            self._live = LiveRun(d)
        payload = self._live.payload()
        self._last = (now, d, payload)
        return payload


def install(
    env: Any,
    run_dir: Callable[[], Path | None],
    metrics: LoadgenMetrics,
    running: Callable[[], Path | None] | None = None,
) -> Blueprint:
    """Add the LLM tab, ``/loadgen/*`` and the report links to ``env.web_ui``. ``run_dir``: the run the
    live page shows (the last one, also once reported); ``running``: the run going on now (None once its
    report is written; default ``run_dir``)."""
    web_ui = env.web_ui
    app = web_ui.app
    opts = env.parsed_options
    base = (getattr(opts, "web_base_path", None) or "").rstrip("/")
    bp = Blueprint("loadgen", __name__, url_prefix=f"{base}/loadgen", static_folder=str(STATIC))
    source = LiveSource(run_dir)
    auth = web_ui.auth_required_if_enabled

    @bp.route("/")
    @auth
    def page() -> Response:
        return send_from_directory(STATIC, "llm.html")

    @bp.route("/live.json")
    @auth
    def live() -> Response:
        body = orjson.dumps(source.payload(), option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
        return Response(body, mimetype="application/json", headers={"Cache-Control": "no-store"})

    @bp.route("/metrics")
    def prometheus() -> Response:
        # no login: Prometheus scrapes without one (as for Locust's own /stats endpoints)
        return Response(metrics.render(), content_type=CONTENT_TYPE)

    @bp.route("/run/<path:name>")
    @auth
    def run_file(name: str) -> Response:
        d = run_dir()
        if d is None:
            abort(404, "no run yet: start one from the form; its reports appear here when it stops")
        return send_from_directory(Path(d).resolve(), name)

    from loadgen.webui.pages import install_pages

    install_pages(bp, env, running or run_dir, auth, base)  # the start form, past runs, compare
    from loadgen.webui.control import install_control

    install_control(bp, lambda: env.shape_class, auth)  # /loadgen/control/*: steering a running ramp
    app.register_blueprint(bp)
    web_ui.template_args["extendedTabs"] = [{"title": "LLM", "key": TAB_KEY}]
    web_ui.template_args["extendedTables"] = [{"key": TAB_KEY, "structure": [{"key": k, "title": t} for k, t in TABLE]}]
    tab_script = (
        f'<script src="{base}/loadgen/static/tab.js"></script><script src="{base}/loadgen/static/start.js"></script>'
    ).encode()
    index_path = f"{base}/" if base else "/"

    @app.after_request
    def extend(response: Response) -> Response:
        if request.path == f"{base}/stats/requests" and response.is_json:
            data = response.get_json()
            try:
                rows = table_rows(source.payload())
            except OSError:
                rows = []  # the run directory went away: the table empties, Locust's own stats still show
            data["extended_stats"] = [{"key": TAB_KEY, "data": rows}]
            response.set_data(orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS))
        elif request.path == index_path and response.mimetype == "text/html":
            html = response.get_data()
            if b"</body>" in html and b"loadgen/static/tab.js" not in html:
                response.set_data(html.replace(b"</body>", tab_script + b"</body>", 1))
        return response

    return bp
