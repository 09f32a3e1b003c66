"""Tenants with priorities against a server that reads no body ``priority`` (issue 31's bad input):
one line, exit 2, before any run directory. Two such servers on loopback: one that says so in its
OpenAPI document (a FastAPI server whose chat request has no priority field), and one that lists
itself as llama.cpp's server (no OpenAPI document; its /v1/models says ``owned_by: llamacpp``)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_loadgen

OPENAPI = {
    "paths": {
        "/v1/chat/completions": {
            "post": {
                "requestBody": {
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ChatRequest"}}}
                }
            }
        }
    },
    "components": {"schemas": {"ChatRequest": {"properties": {"model": {}, "messages": {}, "max_tokens": {}}}}},
}


def _server(owned_by: str, openapi: dict[str, Any] | None) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/health":
                body = b"ok"
            elif self.path == "/v1/models":
                body = json.dumps({"data": [{"id": "m", "object": "model", "owned_by": owned_by}]}).encode()
            elif self.path == "/openapi.json" and openapi is not None:
                body = json.dumps(openapi).encode()
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            raise AssertionError("nothing may be sent to a server the test was refused for")

        def log_message(self, *args: Any) -> None:
            pass

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


@pytest.fixture(params=[("fastapi", True), ("llamacpp", False)], ids=["openapi-without-priority", "llama.cpp"])
def server_url(request: pytest.FixtureRequest) -> Iterator[str]:
    owned_by, with_openapi = request.param
    srv = _server(owned_by, OPENAPI if with_openapi else None)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_priorities_a_server_cannot_read_are_refused_in_one_line(server_url: str, tmp_path: Path) -> None:
    scenario = tmp_path / "two.toml"
    scenario.write_text(
        'name = "two"\n[[tenants]]\nname = "chat"\nshare = 0.5\npriority = 0\n'
        '[[tenants]]\nname = "batch"\nshare = 0.5\npriority = 1\n'
    )
    out = tmp_path / "runs"
    done = run_loadgen("ramp", "--url", server_url, "--scenario", str(scenario), "--concurrency", "2",
                       "--step-seconds", "1", "--no-telemetry", "--out", str(out))  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.strip()]
    assert "tenants with priorities (chat 0, batch 1)" in line and "does not read it" in line
    assert ("/openapi.json" in line) or ("llama.cpp" in line)
    assert not out.exists() or not any(out.iterdir())
