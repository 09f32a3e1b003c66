"""``loadgen monitor``: the telemetry side process on its own, e.g. on the GPU host.

Two modes:
  * ``loadgen monitor --run-dir DIR [sources]`` samples into DIR until Ctrl-C.
  * ``loadgen monitor --serve [HOST:]PORT [sources]`` also serves what it wrote over HTTP, for a
    remote ``loadgen ramp --monitor-url http://HOST:PORT``. It binds 127.0.0.1 unless told
    otherwise; bound to any other address it requires a bearer token (from ``--token-file`` or the
    ``LOADGEN_MONITOR_TOKEN`` environment variable, never the command line) and refuses to start
    without one, or with a blank one, a well-known default (``change-me``) or one under 16
    characters.

Endpoints (``Authorization: Bearer TOKEN`` when a token is set; ``/healthz`` is open):
  ``GET /v1/samples?since=N`` and ``GET /v1/events?since=N``: the JSONL bytes of complete lines from
  byte offset N (at most 4 MiB); header ``X-Next-Cursor`` is the offset to ask for next and
  ``X-Server-Time-Ns`` the monitor's wall clock (for the client's clock-offset estimate).
"""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import os
import sys
import tempfile
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from loadgen.telemetry.options import TOKEN_ENV, add_source_args
from loadgen.telemetry.runner import config_from_args, run

MAX_CHUNK = 4 << 20
FILES = {"/v1/samples": "samples.jsonl", "/v1/events": "events.jsonl"}


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_since(path: Path, since: int, limit: int = MAX_CHUNK) -> tuple[bytes, int]:
    """Complete lines of ``path`` from byte ``since``; returns (bytes, next cursor)."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if since > size:  # the file was replaced: start over
                since = 0
            fh.seek(since)
            data = fh.read(limit)
    except FileNotFoundError:
        return b"", since
    end = data.rfind(b"\n")
    if end < 0:
        return b"", since
    return data[: end + 1], since + end + 1


def make_handler(run_dir: Path, token: str | None) -> type[BaseHTTPRequestHandler]:
    expected = f"Bearer {token}".encode() if token else None

    class Handler(BaseHTTPRequestHandler):
        server_version = "loadgen-monitor"

        def log_message(self, format: str, *args: object) -> None:  # quiet: the run dir is the record
            return

        def _send(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/x-ndjson" if code == 200 else "text/plain")
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            if parts.path == "/healthz":
                self._send(200, b"ok\n")
                return
            if expected is not None:
                got = (self.headers.get("Authorization") or "").encode()
                if not hmac.compare_digest(got, expected):
                    self._send(401, b"missing or wrong bearer token\n", {"WWW-Authenticate": "Bearer"})
                    return
            name = FILES.get(parts.path)
            if name is None:
                self._send(404, b"unknown path; use /v1/samples or /v1/events\n")
                return
            try:
                since = int(parse_qs(parts.query).get("since", ["0"])[0])
            except ValueError:
                self._send(400, b"since must be an integer byte offset\n")
                return
            body, cursor = read_since(run_dir / name, max(since, 0))
            self._send(200, body, {"X-Next-Cursor": str(cursor), "X-Server-Time-Ns": str(time.time_ns())})

    return Handler


def parse_bind(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    host = host.strip("[]") or "127.0.0.1"
    try:
        return host, int(port)
    except ValueError:
        raise ValueError(f"--serve {text!r}: expected [HOST:]PORT, e.g. 9500 or 0.0.0.0:9500") from None


# tokens that examples and templates ship with: anyone who read them knows these
KNOWN_DEFAULT_TOKENS = frozenset({"change-me", "changeme", "token", "secret", "password"})
_MIN_TOKEN_CHARS = 16


def token_problem(token: str | None) -> str | None:
    """Why ``token`` cannot guard a monitor reachable from the network, or None when it can."""
    if token is None or not token.strip():
        return "without a token"
    if token.strip().lower() in KNOWN_DEFAULT_TOKENS:
        return f"with the well-known default token {token.strip()!r}"
    if len(token.strip()) < _MIN_TOKEN_CHARS:
        return f"with a token of {len(token.strip())} characters (at least {_MIN_TOKEN_CHARS})"
    return None


def serve(run_dir: Path, host: str, port: int, token: str | None) -> ThreadingHTTPServer:
    """Start the HTTP endpoint on a thread; refuse a non-loopback bind without a real token
    (missing, blank, a well-known default such as ``change-me``, or under 16 characters)."""
    problem = None if is_loopback(host) else token_problem(token)
    if problem is not None:
        raise ValueError(
            f"refusing to serve telemetry on {host}:{port} {problem}: set {TOKEN_ENV} to a random value "
            "(e.g. `openssl rand -hex 24`) or put one in --token-file, or bind 127.0.0.1"
        )
    httpd = ThreadingHTTPServer((host, port), make_handler(run_dir, token))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, name="monitor-http", daemon=True).start()
    return httpd


DESCRIPTION = """\
The telemetry side process of loadgen ramp on its own, e.g. on the GPU host
(docs/telemetry.md). With --run-dir it samples the sources below into that
folder until Ctrl-C; with --serve it also serves the
samples over HTTP, for a loadgen ramp --monitor-url elsewhere. It binds
127.0.0.1 unless told otherwise; on any other address it needs a bearer token
of 16 characters or more, from --token-file or $LOADGEN_MONITOR_TOKEN (never
the command line), and refuses to start without one."""
EPILOG = """\
examples:
  # sample this machine's GPUs and a server's /metrics into a folder, to Ctrl-C
  loadgen monitor --run-dir /tmp/telemetry \\
      --metrics-url http://127.0.0.1:30000/metrics
  # serve samples on 127.0.0.1:9500 for a loadgen ramp elsewhere (an SSH tunnel)
  loadgen monitor --serve 127.0.0.1:9500 --gpu-hz 5
  # ... which that loadgen ramp pulls, sampling no GPU itself
  loadgen ramp --url http://127.0.0.1:30000 --gpu-source none \\
      --monitor-url http://127.0.0.1:9500"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="loadgen monitor",
        usage="%(prog)s (--run-dir DIR | --serve [HOST:]PORT) [options]",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--run-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="where to write samples (default: a new temporary folder when serving; required otherwise)",
    )
    p.add_argument(
        "--serve", default=None, metavar="[HOST:]PORT", help="serve samples over HTTP (default: none, not served)"
    )
    p.add_argument(
        "--token-file",
        type=Path,
        default=None,
        metavar="FILE",
        help=f"file holding the bearer token (default: ${TOKEN_ENV}; none on 127.0.0.1)",
    )
    p.add_argument(
        "--stop-file", type=Path, default=None, metavar="FILE", help="stop when this file appears (default: none)"
    )
    add_source_args(p.add_argument_group("Telemetry sources"))
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    token = (os.environ.get(TOKEN_ENV) or "").strip() or None
    if args.token_file is not None:
        try:
            token = args.token_file.read_text().strip() or None
        except OSError as exc:
            print(f"loadgen monitor: cannot read --token-file {args.token_file}: {exc.strerror}", file=sys.stderr)
            return 2
    run_dir = args.run_dir
    if run_dir is None:
        if args.serve is None:
            print("loadgen monitor: pass --run-dir DIR, or --serve [HOST:]PORT", file=sys.stderr)
            return 2
        run_dir = Path(tempfile.mkdtemp(prefix="loadgen-monitor-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    httpd = None
    if args.serve is not None:
        try:
            host, port = parse_bind(args.serve)
            httpd = serve(run_dir, host, port, token)
        except ValueError as exc:
            print(f"loadgen monitor: {exc}", file=sys.stderr)
            return 2
        except OSError as exc:
            print(f"loadgen monitor: cannot listen on {args.serve}: {exc.strerror}", file=sys.stderr)
            return 2
        bound_port = httpd.server_address[1]
        print(f"loadgen monitor: serving http://{host}:{bound_port} from {run_dir}", flush=True)
    else:
        print(f"loadgen monitor: writing to {run_dir}", flush=True)
    cfg = config_from_args(args, run_dir)
    cfg = replace(cfg, monitor_token=cfg.monitor_token if args.monitor_url else None, stop_file=args.stop_file)
    try:
        return run(cfg)
    finally:
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()


if __name__ == "__main__":
    sys.exit(main())
