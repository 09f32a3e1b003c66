"""Safe defaults (issue 18): what is exposed beyond loopback needs a real secret, campaign files write
only inside their own directory, and no command from a file goes through a shell."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadgen.campaign import CampaignError, parse_campaign
from loadgen.campaign.file import slug
from loadgen.telemetry.monitor import main as monitor_main
from loadgen.telemetry.monitor import serve, token_problem
from loadgen.webui.auth import AUTH_ENV, credentials, exposure_warning
from loadgen.webui.cli import locust_argv
from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("token", [None, "", "   ", "change-me", "CHANGE-ME", " change-me\n", "short-token"])
def test_the_monitor_refuses_a_missing_default_or_short_token_beyond_loopback(
    tmp_path: Path, token: str | None
) -> None:
    assert token_problem(token) is not None
    with pytest.raises(ValueError, match=r"refusing to serve telemetry on 0\.0\.0\.0:0 .*openssl rand -hex 24"):
        serve(tmp_path, "0.0.0.0", 0, token)


def test_the_monitor_accepts_a_real_token_and_loopback_without_one(tmp_path: Path) -> None:
    assert token_problem("3f9c0a7e5b2d4c1f8a6e") is None
    for httpd in (serve(tmp_path, "127.0.0.1", 0, None), serve(tmp_path, "0.0.0.0", 0, "3f9c0a7e5b2d4c1f8a6e")):
        httpd.shutdown()
        httpd.server_close()


def test_the_monitor_command_names_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LOADGEN_MONITOR_TOKEN", "change-me")
    code = monitor_main(["--serve", "0.0.0.0:0", "--run-dir", str(tmp_path), "--gpu-source", "none"])
    err = capsys.readouterr().err
    assert code == 2 and "well-known default token 'change-me'" in err and "LOADGEN_MONITOR_TOKEN" in err


def test_compose_requires_a_monitor_token_instead_of_a_default() -> None:
    text = (REPO / "docker-compose.yml").read_text()
    assert "change-me" not in text
    assert text.count("${LOADGEN_MONITOR_TOKEN:?") == 3  # monitor, master and headless-master
    # the master's web UI listens on every interface of its container: behind a login, always
    assert "${LOADGEN_WEB_AUTH:?" in text and '"--web-login"' in text


def test_the_web_ui_listens_on_loopback_unless_told_and_needs_a_login_beyond_it() -> None:
    argv = locust_argv(["--url", "http://127.0.0.1:30000"])
    assert argv[argv.index("--web-host") + 1] == "127.0.0.1"
    argv = locust_argv(["--url", "http://127.0.0.1:30000", "--web-host", "0.0.0.0"])
    assert argv.count("--web-host") == 1 and argv[argv.index("--web-host") + 1] == "0.0.0.0"
    assert exposure_warning("127.0.0.1", 8089, False) is None
    for host in ("*", "0.0.0.0", "10.1.2.3"):
        warning = exposure_warning(host, 8089, False)
        assert warning is not None and "no login" in warning and "--web-login" in warning
    assert "behind --web-login" in (exposure_warning("0.0.0.0", 8089, True) or "")


def test_web_login_credentials_come_from_the_environment() -> None:
    assert credentials({AUTH_ENV: "ops:pa:ss"}) == ("ops", "pa:ss")
    for bad in ("", "ops", "ops:", ":pw", " : "):
        with pytest.raises(ValueError, match=AUTH_ENV):
            credentials({AUTH_ENV: bad})


CAMPAIGN = """\
[campaign]
name = "c"
url = "http://127.0.0.1:{port}"

[ramp]
concurrency = [1]
args = ARGS

[[variant]]
name = "NAME"
start = "{python} -m loadgen.sim --port {port}; rm -rf / $(id) `id`"
"""


def _campaign(args: str = "[]", name: str = "a") -> str:
    return CAMPAIGN.replace("ARGS", args).replace("NAME", name)


@pytest.mark.parametrize(
    "args",
    [
        '["--out", "/tmp/elsewhere"]',
        '["--out=reports"]',
        '["--junit", "/etc/junit.xml"]',
        '["--junit", "junit.xml"]',
        '["--junit={variant_dir}/../../junit.xml"]',
    ],
)
def test_a_campaign_cannot_make_a_ramp_write_outside_its_directory(args: str) -> None:
    with pytest.raises(CampaignError, match=r"camp\.toml:7: ramp\.args"):
        parse_campaign(_campaign(args), "camp.toml")


def test_written_paths_inside_the_campaign_directory_are_fine() -> None:
    c = parse_campaign(_campaign('["--junit", "{variant_dir}/junit.xml"]'), "camp.toml")
    assert c.variants[0].load.args == ["--junit", "{variant_dir}/junit.xml"]


@pytest.mark.parametrize("name", ["..", ".", "../../etc", "/etc/cron.d", "a/../../b"])
def test_a_variant_name_never_becomes_a_path_outside_the_campaign(name: str) -> None:
    folder = slug(name)
    assert folder and "/" not in folder and folder not in (".", "..")
    assert not folder.startswith(".")


def test_commands_from_files_are_argument_lists_and_nothing_runs_a_shell() -> None:
    c = parse_campaign(_campaign(), "camp.toml")
    start = c.variants[0].start
    assert start is not None and "$(id)" in start and "`id`" in start and "{port};" in start
    for path in (REPO / "loadgen").rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "shell":
                assert isinstance(node.value, ast.Constant) and node.value.value is False, path
            if (
                isinstance(node, ast.Attribute)
                and node.attr in ("system", "popen")
                and getattr(node.value, "id", "") == "os"
            ):
                raise AssertionError(f"{path}: os.{node.attr}")


def _locust_ui(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if k != AUTH_ENV}
    return subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", "loadgen/locustfile.py", "--host", "http://127.0.0.1:9",
         "--web-port", str(port), "--lg-out", str(tmp_path), "--no-telemetry", *args],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**clean, **(env or {})},
    )  # fmt: skip


def test_beyond_loopback_the_web_ui_refuses_to_start_without_a_login(tmp_path: Path) -> None:
    proc = _locust_ui(tmp_path, "--web-host", "0.0.0.0")
    out, _ = proc.communicate(timeout=60)
    text = out.decode()
    assert proc.returncode != 0
    assert "with no login" in text and "--web-login" in text and AUTH_ENV in text


def test_beyond_loopback_with_a_login_the_web_ui_starts_and_says_so(tmp_path: Path) -> None:
    proc = _locust_ui(tmp_path, "--web-host", "0.0.0.0", "--web-login", env={AUTH_ENV: "ops:" + "s3cret-" * 3})
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        seen = b""
        while b"behind --web-login" not in seen and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen += line
        assert b"behind --web-login" in seen, seen.decode()[-2000:]
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.communicate(timeout=15)
