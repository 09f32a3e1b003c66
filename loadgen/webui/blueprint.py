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

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from flask import Blueprint, Response, abort, request, send_from_directory

from loadgen.webui.live import LiveRun
from loadgen.webui.promexport import CONTENT_TYPE, LoadgenMetrics

STATIC = Path(__file__).with_name("static")
TAB_KEY = "llm"

# the LLM tab's table (Locust renders it from extended_stats rows with these keys)
TABLE = [
    ("step", "Step"),
    ("load", "Concurrency / rate"),
    ("phase", "Phase"),
    ("ok", "OK"),
    ("failed", "Failed"),
    ("tok_s", "Aggregate tok/s"),
    ("req_tok_s", "Per-request tok/s"),
    ("ttft_p50", "TTFT p50 (ms)"),
    ("ttft_p99", "TTFT p99 (ms)"),
    ("itl_p50", "ITL p50 (ms)"),
    ("itl_p99", "ITL p99 (ms)"),
    ("errors", "Errors"),
]


def _fmt(v: Any, digits: int = 1) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return round(v, digits)
    return v


def table_rows(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The LLM tab's table rows from a live payload (the "name" key is what Locust keys rows by)."""
    rows = []
    for s in payload.get("steps", []):
        load = f"{s['rate']:g} req/s" if s.get("rate") is not None else str(s.get("concurrency") or "")
        if s.get("context_tokens"):
            load += f" @ {s['context_tokens']} tok"
        errors = ", ".join(f"{k}: {v}" for k, v in sorted(s.get("errors", {}).items()))
        rows.append(
            {
                "name": f"step {s['step']}",
                "step": s["step"],
                "load": load,
                "phase": s["phase"],
                "ok": s["ok"],
                "failed": s["failed"],
                "tok_s": _fmt(s["tok_s"]),
                "req_tok_s": _fmt(s["req_tok_s"]),
                "ttft_p50": _fmt(s["ttft_p50"]),
                "ttft_p99": _fmt(s["ttft_p99"]),
                "itl_p50": _fmt(s["itl_p50"], 2),
                "itl_p99": _fmt(s["itl_p99"], 2),
                "errors": errors,
            }
        )
    return rows


class LiveSource:
    """The ``LiveRun`` of whichever run directory ``run_dir()`` names now (None before a run)."""

    def __init__(self, run_dir: Callable[[], Path | None]) -> None:
        self._run_dir = run_dir
        self._live: LiveRun | None = None

    def payload(self) -> dict[str, Any]:
        d = self._run_dir()
        if d is None:
            return {"run_id": None, "steps": [], "errors": {}, "power": {}, "kv": [], "knee": None, "reports": {}}
        if self._live is None or self._live.run_dir != Path(d):
            self._live = LiveRun(Path(d))
        return self._live.payload()


def install(env: Any, run_dir: Callable[[], Path | None], metrics: LoadgenMetrics) -> Blueprint:
    """Add the LLM tab, ``/loadgen/*`` and the report links to ``env.web_ui``."""
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

    app.register_blueprint(bp)
    web_ui.template_args["extendedTabs"] = [{"title": "LLM", "key": TAB_KEY}]
    web_ui.template_args["extendedTables"] = [{"key": TAB_KEY, "structure": [{"key": k, "title": t} for k, t in TABLE]}]
    tab_script = f'<script src="{base}/loadgen/static/tab.js"></script>'.encode()
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
