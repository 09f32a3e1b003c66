"""The web UI's exposure: beyond loopback only behind a login (``--web-login``), said on start.

Locust's ``--web-login`` only shows a login page; the locustfile must say who may log in. Ours takes
one user from ``LOADGEN_WEB_AUTH=user:password`` (the environment, never the command line, like the
monitor's token) and compares both parts in constant time. Sessions are signed with a random key
per process (a restart logs everyone out).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
from typing import Any

AUTH_ENV = "LOADGEN_WEB_AUTH"


def is_loopback(host: str | None) -> bool:
    """``--web-host`` values that only this machine can reach (Locust's default ``*`` is every interface)."""
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False


def exposure_warning(host: str | None, port: int, web_login: bool) -> str | None:
    """The line to print when the UI is reachable from the network, or None."""
    if is_loopback(host):
        return None
    where = "every interface" if host in (None, "", "*", "0.0.0.0", "::") else host
    if web_login:
        return f"the web UI listens on {where} (port {port}) behind --web-login ({AUTH_ENV})"
    return (
        f"the web UI would listen on {where} (port {port}) with no login: anyone who reaches it could start "
        f"load against the target and read the reports. Add --web-login with {AUTH_ENV}=user:password in the "
        "environment, or pass --web-host 127.0.0.1"
    )


def credentials(environ: dict[str, str] | None = None) -> tuple[str, str]:
    """``(user, password)`` from ``LOADGEN_WEB_AUTH``; ``ValueError`` naming the variable when unusable."""
    raw = (environ if environ is not None else os.environ).get(AUTH_ENV, "")
    user, sep, password = raw.partition(":")
    if not sep or not user.strip() or not password.strip():
        raise ValueError(
            f"--web-login needs {AUTH_ENV}=user:password in the environment (a user and a non-empty password)"
        )
    return user, password


def install_login(web_ui: Any, user: str, password: str) -> None:
    """Make Locust's login page (``--web-login``) accept exactly ``user``/``password``."""
    from flask import Blueprint, redirect, request, session, url_for
    from flask_login import UserMixin, login_user

    class _User(UserMixin):
        def __init__(self, name: str) -> None:
            self.id = name

    app = web_ui.app
    app.config["SECRET_KEY"] = secrets.token_hex(32)
    web_ui.login_manager.user_loader(lambda name: _User(name) if name == user else None)
    web_ui.auth_args = {"username_password_callback": "/loadgen-login"}
    bp = Blueprint("loadgen_login", __name__)

    @bp.route("/loadgen-login", methods=["POST"])
    def login_submit() -> Any:
        got_user = str(request.form.get("username") or "").encode()
        got_password = str(request.form.get("password") or "").encode()
        # both compared, always: the time does not say which part was wrong
        ok_user = hmac.compare_digest(got_user, user.encode())
        ok_password = hmac.compare_digest(got_password, password.encode())
        if ok_user and ok_password:
            login_user(_User(user))
            return redirect(url_for("locust.index"))
        session["auth_error"] = "wrong user or password"
        return redirect(url_for("locust.login"))

    app.register_blueprint(bp)
