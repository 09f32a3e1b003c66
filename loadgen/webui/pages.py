"""Routes of the start form and the past-runs page (the data is ``start.py``'s and ``runs.py``'s):

    /loadgen/form.json               the start form's fields, defaults and scenarios
    /loadgen/runs                    the past-runs page (static/runs.html)
    /loadgen/runs.json               the run directories under --lg-out with their verdicts
    /loadgen/runs/<id>/<file>        a report file of one of them
    POST /loadgen/compare            {"runs": [id, id, ...]} -> loadgen compare's page, its link

and a check before Locust's ``/swarm`` (``start.guard_swarm``): a Start naming a scenario file the
UI does not offer is refused with Locust's own ``{"success": false, "message": ...}`` answer.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from flask import Blueprint, Response, abort, jsonify, request, send_from_directory

from loadgen.webui import runs as runlist
from loadgen.webui.start import ScenarioChoices, form_schema, guard_swarm

STATIC = Path(__file__).with_name("static")
DEFAULT_SCENARIO_FOLDER = "scenarios"


def scenario_choices(opts: Any) -> ScenarioChoices:
    """The folders ``--lg-scenarios`` names (comma-separated; default ``./scenarios``), and the command
    line's ``--lg-scenario`` file."""
    raw = str(getattr(opts, "lg_scenarios", "") or "")
    folders = [p.strip() for p in raw.split(",") if p.strip()] or [DEFAULT_SCENARIO_FOLDER]
    return ScenarioChoices(folders, extra=[str(getattr(opts, "lg_scenario", "") or "")])


def install_pages(
    bp: Blueprint,
    env: Any,
    running: Callable[[], Path | None],
    auth: Callable[[Callable[..., Any]], Callable[..., Any]],
    base: str,
) -> None:
    opts = env.parsed_options
    choices = scenario_choices(opts)
    out = Path(str(getattr(opts, "lg_out", "") or "reports"))

    def json_response(data: Any, status: int = 200) -> Response:
        body = orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
        return Response(body, status=status, mimetype="application/json", headers={"Cache-Control": "no-store"})

    @bp.route("/form.json")
    @auth
    def start_form() -> Response:
        return json_response(form_schema(env.parsed_options, env.host or "", choices))

    @bp.route("/runs")
    @auth
    def runs_page() -> Response:
        return send_from_directory(STATIC, "runs.html")

    @bp.route("/runs.json")
    @auth
    def runs_json() -> Response:
        return json_response({"out": str(out), "runs": runlist.list_runs(out, running())})

    @bp.route("/runs/<run_id>/<path:name>")
    @auth
    def past_run_file(run_id: str, name: str) -> Response:
        try:
            d = runlist.run_path(out, run_id)
        except runlist.RunListError as exc:
            abort(404, str(exc))
        return send_from_directory(d.resolve(), name)

    @bp.route("/compare", methods=["POST"])
    @auth
    def compare_runs() -> Response:
        data = request.get_json(silent=True) or {}
        ids = data.get("runs") if isinstance(data, dict) else None
        if ids is None:
            ids = request.form.getlist("runs")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            return json_response({"ok": False, "message": "give runs: a list of run ids"}, 400)
        try:
            target = runlist.compare(out, ids)
        except (runlist.RunListError, OSError, ValueError) as exc:
            return json_response({"ok": False, "message": str(exc)}, 400)
        link = f"{base}/loadgen/runs/{target.name}/compare.html"
        return json_response({"ok": True, "id": target.name, "url": link})

    app = env.web_ui.app

    @app.before_request
    def _guard_start() -> Any:
        if request.method == "POST" and request.path == f"{base}/swarm":
            reason = guard_swarm(request.form, choices)
            if reason is not None:
                return jsonify({"success": False, "message": reason, "host": env.host})
        return None
