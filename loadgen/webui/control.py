"""Steering a running ramp from the web UI: HTTP routes over ``RampShape``'s operations.

Added to our blueprint (``/loadgen``) by :func:`install_control`:

    GET  /loadgen/control/state      the ramp now (below)
    POST /loadgen/control/hold       the current step keeps running past its planned end
    POST /loadgen/control/release    ends a hold (a step past its planned end ends now)
    POST /loadgen/control/skip       ends the current step now; the next begins
    POST /loadgen/control/add-step   one more step at the end: ``concurrency`` or ``rate``
    POST /loadgen/control/set-load   ends the current step now; a step at ``concurrency`` or
                                     ``rate`` (otherwise like it) begins right after it

POST fields come as JSON or form fields; ``step`` (optional, on hold, skip and set-load) names the
step the client saw, so a repeated or late click acts on nothing rather than on the next step.
Every answer is JSON: ``{"ok", "message", "index", "finished", "held", "held_by", "paused",
"ends_in_s", "steps": [{"index", "status", "load", "concurrency", "rate", ..., "origin"?}]}``
(``RampShape.snapshot``); ``ok`` false with status 400 (a bad value, or a request the ramp cannot do
now: the message says which) or 409 (no ramp is running). Who asked (written to ``steps.jsonl``) is
"web UI (<client address>)", plus the user name behind ``--web-login``. The routes need the same
login as the rest of the UI, and refuse a POST whose ``Origin`` is another site (a page elsewhere
must not be able to steer a test through the user's browser).

Locust runs these handlers in greenlets of the same hub as the shape's ``tick()``; the operations
never yield, so they need no lock. In a distributed run the master's shape is the one steered (the
web UI runs on the master); the workers follow its step messages.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

from flask import Blueprint, Response, jsonify, request

NO_RAMP = "no ramp is running: start one from the form (users or request rates per step)"


@runtime_checkable
class Steerable(Protocol):
    """What the routes need of a shape (``loadgen.load.shape.RampShape`` is the one; this module does not
    import it: the load side imports the web UI's exporter, and the arrow goes one way). Each operation returns the
    message for the user or raises ``ValueError`` (``SteerError``) with one; ``who`` goes to steps.jsonl."""

    finished: bool

    def hold(self, who: str, step: int | None = None) -> str: ...

    def release(self, who: str) -> str: ...

    def skip(self, who: str, step: int | None = None) -> str: ...

    def add_load(self, who: str, concurrency: int | None = None, rate: float | None = None) -> str: ...

    def set_load(
        self, who: str, concurrency: int | None = None, rate: float | None = None, step: int | None = None
    ) -> str: ...

    def snapshot(self) -> dict[str, Any]: ...


class _BadField(ValueError):
    pass


def who_asked() -> str:
    """'web UI (address)' or 'web UI (address, user)' for the request being handled."""
    where = request.remote_addr or "unknown address"
    user = _login_name()
    return f"web UI ({where}, {user})" if user else f"web UI ({where})"


def _login_name() -> str | None:
    try:
        from flask_login import current_user
    except ImportError:  # pragma: no cover - Locust depends on flask-login
        return None
    try:
        if current_user.is_authenticated:
            name = getattr(current_user, "id", None)
            return str(name) if name else None
    except Exception:  # no login manager on this app (no --web-login): nobody is logged in
        return None
    return None


def _fields() -> dict[str, Any]:
    data = request.get_json(silent=True) if request.is_json else None
    if isinstance(data, dict):
        return data
    return {k: v for k, v in request.form.items()}


def _number(fields: dict[str, Any], name: str, kind: type) -> Any:
    """The field as an int or float; None when absent or empty; ValueError naming it when not a number."""
    raw = fields.get(name)
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    if isinstance(raw, bool):
        raise _BadField(f"{name} {raw!r}: expected a number")
    if kind is int:
        if isinstance(raw, float) and raw.is_integer():
            return int(raw)
        if isinstance(raw, int):
            return raw
        try:
            return int(str(raw).strip())
        except ValueError:
            raise _BadField(f"{name} {raw!r}: expected a whole number") from None
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise _BadField(f"{name} {raw!r}: expected a number") from None


def _cross_site() -> bool:
    """A browser names the page's site in ``Origin`` on a POST; none: not sent by a page elsewhere."""
    origin = request.headers.get("Origin")
    if origin is None:
        return False
    return origin == "null" or urlsplit(origin).netloc != request.host


def install_control(bp: Blueprint, get_shape: Callable[[], Any], auth: Callable[[Any], Any]) -> None:
    """Add the control routes to ``bp`` (before it is registered). ``get_shape``: the shape Locust
    runs now (``env.shape_class``; anything but a ``Steerable`` means no ramp); ``auth``: the web UI's
    ``auth_required_if_enabled``."""

    def answer(shape: Steerable | None, ok: bool, message: str, status: int = 200) -> Response:
        state: dict[str, Any] = (
            shape.snapshot()
            if shape is not None
            else {
                "index": None,
                "finished": None,
                "held": False,
                "held_by": None,
                "paused": False,
                "ends_in_s": None,
                "steps": [],
            }
        )
        response = jsonify({"ok": ok, "message": message, **state})
        response.status_code = status
        response.headers["Cache-Control"] = "no-store"
        return response

    def ramp() -> Steerable | None:
        shape = get_shape()
        return shape if isinstance(shape, Steerable) else None

    def steer(action: Callable[[Steerable, dict[str, Any], str], str]) -> Response:
        fields = _fields()  # read before any answer: a body left unread can make the server reset the connection
        if _cross_site():
            return answer(None, False, "refused: this request came from another site", 403)
        shape = ramp()
        if shape is None:
            return answer(None, False, NO_RAMP, 409)
        try:
            message = action(shape, fields, who_asked())
        except ValueError as exc:  # SteerError, or a field that is not a number
            return answer(shape, False, str(exc), 400)
        return answer(shape, True, message)

    def hold(shape: Steerable, f: dict[str, Any], who: str) -> str:
        return shape.hold(who, _number(f, "step", int))

    def release(shape: Steerable, f: dict[str, Any], who: str) -> str:
        return shape.release(who)

    def skip(shape: Steerable, f: dict[str, Any], who: str) -> str:
        return shape.skip(who, _number(f, "step", int))

    def add_step(shape: Steerable, f: dict[str, Any], who: str) -> str:
        return shape.add_load(who, _number(f, "concurrency", int), _number(f, "rate", float))

    def set_load(shape: Steerable, f: dict[str, Any], who: str) -> str:
        return shape.set_load(who, _number(f, "concurrency", int), _number(f, "rate", float), _number(f, "step", int))

    @bp.route("/control/state")
    @auth
    def control_state() -> Response:
        shape = ramp()
        if shape is None:
            return answer(None, True, NO_RAMP)
        return answer(shape, True, "the ramp has finished" if shape.finished else "a ramp is running")

    actions: dict[str, Callable[[Steerable, dict[str, Any], str], str]] = {
        "hold": hold,
        "release": release,
        "skip": skip,
        "add-step": add_step,
        "set-load": set_load,
    }
    for name, action in actions.items():

        def view(action: Callable[[Steerable, dict[str, Any], str], str] = action) -> Response:
            return steer(action)

        bp.add_url_rule(f"/control/{name}", f"control_{name.replace('-', '_')}", auth(view), methods=["POST"])
