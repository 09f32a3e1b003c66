"""Server lifecycle: readiness, fail-fast on a dead server, bounded log capture, failure lines.

The story this module answers: a server restarted with a new flag never came back, the readiness
loop printed FAILED without the reason, and the reason sat unread in the journal. Here:

* :func:`wait_ready` polls ``/health`` (``/v1/models`` where there is none) and stops **at once**
  when the server's process has exited (``alive``) or its status command says it failed
  (``status_cmd``, e.g. ``systemctl is-active sglang``);
* :func:`capture_logs` reads a bounded tail of the server's log from a command
  (``journalctl -u sglang -n 500 --no-pager``, ``docker logs --tail 500 NAME``) or a file;
* :func:`match_failures` picks the lines that explain the failure with the telemetry package's log
  patterns (CUDA graph capture out of memory, not enough memory for the KV cache, tracebacks ...);
* :func:`readiness_gate` puts the three together for ``--wait-ready``: progress line, captured log
  and ``server_not_ready`` event in the run directory, :class:`NotReady` naming the matched lines;
* :class:`ServerProcess` starts a server command, sends its output to a file and knows when it ended.

Commands are argument lists; a user's string is split with :func:`shlex.split` and never handed to
a shell, so ``;``, pipes and ``$VAR`` in a scenario or flag are passed literally.
"""

from __future__ import annotations

import collections
import json
import os
import shlex
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from loadgen.spec.request import split_base_url

# Words a status command prints when the server has stopped for good (systemctl is-active: "failed",
# "inactive"; docker inspect -f {{.State.Status}}: "exited", "dead"). "activating", "restarting",
# "reloading" mean it may still come up.
FAILED_STATES = frozenset({"failed", "inactive", "dead", "exited", "stopped"})
NOT_READY_LOG = "server-not-ready.log"
SHOWN_LINES = 12  # failure lines shown in a message; the run directory keeps all of them


class NotReady(Exception):
    """The server did not become ready.

    ``str()`` is the message for the user (the reason and the matched failure lines);
    ``reason`` is the short cause, ``log_lines`` the captured log tail, ``matches`` the
    :func:`match_failures` of it.
    """

    def __init__(self, reason: str, log_lines: Sequence[str] = (), matches: Sequence[dict[str, Any]] = ()) -> None:
        self.reason = reason
        self.log_lines = list(log_lines)
        self.matches = list(matches)
        super().__init__(failure_message(reason, self.matches, self.log_lines))


def failure_message(reason: str, matches: Sequence[dict[str, Any]], log_lines: Sequence[str]) -> str:
    """``reason`` plus the matched failure lines (or, with none matched, the log's last lines)."""
    if matches:
        shown = [m["line"] for m in matches[:SHOWN_LINES]]
        more = len(matches) - len(shown)
        head = "matched failure lines in the server log:"
        tail = [f"  ... and {more} more"] if more > 0 else []
        return "\n".join([reason, head, *(f"  {line}" for line in shown), *tail])
    if log_lines:
        last = log_lines[-SHOWN_LINES:]
        return "\n".join([reason, "no known failure line matched; the log ends with:", *(f"  {x}" for x in last)])
    return reason


def split_command(command: str | Sequence[str], what: str) -> list[str]:
    """An argument list from a user string (``shlex.split``) or a list; ValueError names ``what``."""
    if isinstance(command, str):
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise ValueError(f"{what} {command!r}: cannot split into arguments ({exc}); check the quoting") from None
    else:
        argv = [str(a) for a in command]
    if not argv:
        raise ValueError(f"{what}: the command is empty")
    return argv


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


def status_says_failed(status_cmd: Sequence[str], timeout_s: float = 5.0) -> str | None:
    """Run the status command once; the reason when its output names a stopped state, else None.

    A status command that cannot run (not found, timed out) raises ValueError: that is a usage
    problem, not a server one.
    """
    try:
        done = subprocess.run(
            list(status_cmd), capture_output=True, timeout=timeout_s, stdin=subprocess.DEVNULL, check=False
        )
    except FileNotFoundError:
        raise ValueError(f"--server-status: command not found: {status_cmd[0]!r}") from None
    except subprocess.TimeoutExpired:
        raise ValueError(f"--server-status {shlex.join(status_cmd)!r}: no answer within {timeout_s:g} s") from None
    except OSError as exc:
        raise ValueError(f"--server-status {shlex.join(status_cmd)!r}: cannot run it ({exc.strerror})") from None
    text = (done.stdout or done.stderr).decode("utf-8", "replace").strip()
    word = text.split()[0].lower().strip("'\"") if text else ""
    if word in FAILED_STATES:
        return f"the status command `{shlex.join(status_cmd)}` says {word!r} (exit {done.returncode})"
    return None


def wait_ready(
    url: str,
    timeout_s: float,
    api_key: str | None = None,
    alive: Callable[[], str | None] | None = None,
    progress: Callable[[str], None] | None = None,
    interval_s: float = 0.25,
    status_cmd: list[str] | None = None,
) -> None:
    """Return when GET /health answers 200 (or, where there is no /health, GET /v1/models);
    raise NotReady otherwise.

    ``alive`` returns None while the server can still come up, else the reason it cannot (its
    process exited): the wait stops at once with that reason. ``status_cmd`` (an argument list,
    run about once a second) does the same for a service: output starting with one of
    :data:`FAILED_STATES` stops the wait. ``timeout_s`` 0 checks once. ``progress`` gets the last
    thing seen after every unsuccessful poll.
    """
    base = base_of(url)
    start = time.monotonic()
    deadline = start + timeout_s
    last = "no answer yet"
    next_status = start
    while True:
        if alive is not None:
            dead = alive()
            if dead:
                raise NotReady(dead)
        if status_cmd and time.monotonic() >= next_status:
            failed = status_says_failed(status_cmd)
            if failed:
                raise NotReady(failed)
            next_status = time.monotonic() + 1.0
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


# servers known by their /v1/models ``owned_by`` that read no ``priority`` in a request body
_NO_PRIORITY = {"llamacpp": "llama.cpp's server"}


def priority_unread(url: str, path: str, api_key: str | None = None) -> str | None:
    """Why the server at ``url`` would not read a request body's ``priority`` on ``path``, or None
    when it does or cannot be told. Its OpenAPI document (vLLM, SGLang and other FastAPI servers)
    says which fields the path's request takes; else its ``owned_by`` names a server known to have
    no priority field."""
    base = base_of(url)
    try:
        status, body = _get(base + "/openapi.json", timeout=5.0, api_key=api_key)
        if status == 200:
            fields = _request_fields(json.loads(body), path)
            if fields is not None and "priority" not in fields:
                return f"its request schema for {path} (/openapi.json) has no priority field"
            if fields is not None:
                return None
        status, body = _get(base + "/v1/models", timeout=5.0, api_key=api_key)
        if status == 200:
            models = json.loads(body).get("data", [])
            owners = {str(m.get("owned_by", "")).lower() for m in models if isinstance(m, dict)}
            for owner, name in _NO_PRIORITY.items():
                if owner in owners:
                    return f"{name} (owned_by {owner}) has no priority field"
    except (urllib.error.URLError, OSError, ValueError, AttributeError):
        return None
    return None


def _request_fields(doc: Any, path: str) -> set[str] | None:
    """The property names of ``path``'s POST request body in an OpenAPI document (None: not said)."""
    try:
        content = doc["paths"][path]["post"]["requestBody"]["content"]
        schema = next(iter(content.values()))["schema"]
        for _ in range(4):  # $ref, or anyOf/allOf of one $ref
            if "$ref" in schema:
                schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
            elif "properties" in schema:
                return set(schema["properties"])
            elif schema.get("anyOf") or schema.get("allOf"):
                schema = (schema.get("anyOf") or schema.get("allOf"))[0]
            else:
                return None
    except (KeyError, TypeError, StopIteration, IndexError):
        return None
    return None


def served_endpoints(url: str, api_key: str | None = None) -> list[str] | None:
    """The POST paths under /v1 the server lists in its OpenAPI document (vLLM, SGLang and other
    FastAPI servers serve /openapi.json), sorted; None when it lists none."""
    try:
        status, body = _get(base_of(url) + "/openapi.json", timeout=5.0, api_key=api_key)
    except (urllib.error.URLError, OSError):
        return None
    if status != 200:
        return None
    try:
        paths = json.loads(body)["paths"]
        found = sorted(p for p, ops in paths.items() if p.startswith("/v1/") and "post" in ops)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return found or None


def endpoint_missing_message(endpoint: str, path: str, error: str, served: Sequence[str] | None) -> str:
    """One line for a server that answered 404 to the endpoint's first call. A server that lists
    the path it answered 404 to serves the endpoint: its 404 is about something else, most often
    the model (vLLM: "The model `x` does not exist.")."""
    if served and path in served:
        return (
            f"POST {path} answered 404 before any call succeeded, though the server lists it; its answer: "
            f"{error}. A 404 on a path the server serves is most often a model it does not have: check --model "
            "(GET /v1/models lists the names it serves)."
        )
    listed = (
        f"it lists POST {', '.join(served)}"
        if served
        else f"it lists no endpoints (no /openapi.json); its answer: {error}"
    )
    return (
        f"the server does not serve --endpoint {endpoint}: POST {path} answered 404 before any call "
        f"succeeded; {listed}. Choose an endpoint it serves (--endpoint or the scenario's `endpoint`)."
    )


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


# -- logs ---------------------------------------------------------------------------------------


def _tail_file(path: Path, max_lines: int, block: int = 65536) -> list[str]:
    """The last ``max_lines`` lines of ``path``, reading backwards from its end (bounded memory)."""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        pos = fh.tell()
        data = b""
        while pos > 0 and data.count(b"\n") <= max_lines:
            step = min(block, pos)
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + data
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[-max_lines:] if max_lines > 0 else []


def _command_lines(argv: list[str], max_lines: int, timeout_s: float) -> list[str]:
    """Up to the last ``max_lines`` lines the command prints (stdout and stderr) within ``timeout_s``.

    A following command (``journalctl -f``) is stopped at the deadline; what it printed is kept.
    """
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return [f"(log command not found: {argv[0]!r})"]
    except OSError as exc:
        return [f"(cannot run the log command {shlex.join(argv)!r}: {exc.strerror})"]
    kept: collections.deque[str] = collections.deque(maxlen=max(max_lines, 1))
    out = proc.stdout
    assert out is not None

    def read() -> None:
        for raw in out:
            kept.append(raw.decode("utf-8", "replace").rstrip("\r\n"))

    reader = threading.Thread(target=read, name="capture-logs", daemon=True)
    reader.start()
    reader.join(timeout_s)
    if reader.is_alive():
        proc.kill()
        reader.join(2.0)
    try:
        proc.wait(2.0)
    except subprocess.TimeoutExpired:  # pragma: no cover - killed processes end
        pass
    out.close()
    return list(kept)[-max_lines:] if max_lines > 0 else []


def capture_logs(
    command: list[str] | None, file: Path | None, max_lines: int = 2000, timeout_s: float = 5
) -> list[str]:
    """A bounded read of the server's log: the command's output (an argument list, stopped after
    ``timeout_s``) and/or the last lines of ``file``; at most ``max_lines`` from each.

    Never raises for a missing file or command: the returned lines say what was missing.
    """
    lines: list[str] = []
    if command:
        lines += _command_lines(list(command), max_lines, timeout_s)
    if file is not None:
        try:
            lines += _tail_file(Path(file), max_lines)
        except FileNotFoundError:
            lines.append(f"(no log file at {file})")
        except OSError as exc:
            lines.append(f"(cannot read the log file {file}: {exc.strerror})")
    return lines


def match_failures(lines: Sequence[str]) -> list[dict[str, Any]]:
    """The lines that match a known failure signature (telemetry log patterns of severity fatal,
    error or warning), in log order, one entry per line: ``{"pattern", "patterns", "severity",
    "line", "index"}``. ``pattern`` is the first (most specific) match, ``patterns`` all of them,
    ``severity`` the worst, ``index`` the line's position in ``lines``."""
    from loadgen.telemetry.logscan import LogScanner

    rank = {"fatal": 0, "error": 1, "warning": 2}
    scanner = LogScanner(stats=False)
    found: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        events, _ = scanner.scan(line, 0)
        hits = [ev for ev in events if ev["severity"] in rank]
        if not hits:
            continue
        worst = min((ev["severity"] for ev in hits), key=rank.__getitem__)
        found.append(
            {
                "pattern": hits[0]["pattern"],
                "patterns": [ev["pattern"] for ev in hits],
                "severity": worst,
                "line": hits[0]["line"],
                "index": i,
            }
        )
    return found


# -- the --wait-ready gate ----------------------------------------------------------------------


class _ProgressLine:
    """The waiting line: rewritten in place on a terminal; otherwise a new line when what was seen
    changed (at most one a second), and every 5 s while it stays the same."""

    def __init__(self, url: str, timeout_s: float, out: IO[str]) -> None:
        self.url, self.timeout_s, self.out = url, timeout_s, out
        self.tty = bool(getattr(out, "isatty", lambda: False)())
        self.start = time.monotonic()
        self.printed: str | None = None
        self.last_print = -1e9
        self.drawn = False

    def __call__(self, last: str) -> None:
        now = time.monotonic()
        text = f"waiting for {self.url} ({now - self.start:.0f}/{self.timeout_s:g} s): {last}"
        since = now - self.last_print
        if self.tty:
            self.out.write("\r" + text[:160].ljust(100))
            self.drawn = True
        elif (last != self.printed and since >= 1.0) or since >= 5.0:
            self.out.write(text + "\n")
            self.printed, self.last_print = last, now
        self.out.flush()

    def end(self) -> None:
        if self.drawn:
            self.out.write("\n")
            self.out.flush()


def record_not_ready(run_dir: Path, exc: NotReady, url: str) -> Path:
    """Keep a failed readiness wait in ``run_dir``: the captured log (``server-not-ready.log``) and a
    ``server_not_ready`` event in events.jsonl; returns the log's path."""
    from loadgen.rundir.records import JsonlAppender

    log_path = run_dir / NOT_READY_LOG
    log_path.write_text("".join(line + "\n" for line in exc.log_lines), encoding="utf-8")
    events = JsonlAppender(run_dir / "events.jsonl")
    try:
        events.write(
            {
                "t_ns": time.time_ns(),
                "src": "lifecycle",
                "kind": "server_not_ready",
                "url": base_of(url),
                "reason": exc.reason,
                "matches": [{k: m[k] for k in ("pattern", "severity", "line")} for m in exc.matches],
                "log_file": NOT_READY_LOG,
                "log_lines": len(exc.log_lines),
            }
        )
    finally:
        events.close()
    return log_path


def readiness_gate(
    url: str,
    timeout_s: float,
    *,
    api_key: str | None,
    status_cmd: str | Sequence[str] | None,
    log_cmd: str | Sequence[str] | None,
    log_file: str | Path | None,
    run_dir: Path | Callable[[], Path] | None,
    out: IO[str],
    alive: Callable[[], str | None] | None = None,
    max_lines: int = 2000,
) -> None:
    """``--wait-ready``: wait with a progress line on ``out``; on failure capture the logs, keep
    them in the run directory and raise :class:`NotReady` whose message has the matched lines.

    ``status_cmd`` / ``log_cmd``: strings (split with shlex) or argument lists; ``log_cmd`` should
    print a bounded tail (``journalctl -u UNIT -n 500 --no-pager``; a following command is
    stopped after 5 s). ``run_dir``: the run directory, or a function that creates it (called
    only when the server is not ready), or None to keep nothing. A status or log command that
    cannot be split or run raises ValueError (a usage problem).
    """
    status_argv = split_command(status_cmd, "--server-status") if status_cmd else None
    log_argv = split_command(log_cmd, "--server-logs") if log_cmd else None
    line = _ProgressLine(base_of(url), timeout_s, out)
    try:
        wait_ready(url, timeout_s, api_key, alive=alive, progress=line, status_cmd=status_argv)
        return
    except NotReady as first:
        reason = first.reason
    finally:
        line.end()
    lines = capture_logs(log_argv, Path(log_file) if log_file else None, max_lines=max_lines)
    exc = NotReady(reason, lines, match_failures(lines))
    target = run_dir() if callable(run_dir) else run_dir
    if target is not None:
        record_not_ready(target, exc, url)
    raise exc


# -- a server process we start --------------------------------------------------------------------


class ServerProcess:
    """A server started from an argument list, its stdout and stderr appended to ``log_path``.

    It runs in its own session (process group), so :meth:`stop` also ends the workers a server
    spawns (SGLang and vLLM do). Use as a context manager or call :meth:`stop`.
    """

    def __init__(
        self,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: dict[str, str] | None = None,
        cwd: str | Path | None = None,
    ) -> None:
        self.argv = [str(a) for a in argv]
        if not self.argv:
            raise ValueError("server command: the command is empty")
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child; closed below
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=None if env is None else {**os.environ, **env},
                cwd=cwd,
                start_new_session=True,
            )
        except FileNotFoundError:
            raise ValueError(f"server command: not found: {self.argv[0]!r}") from None
        except OSError as exc:
            raise ValueError(f"server command {shlex.join(self.argv)!r}: cannot start it ({exc.strerror})") from None
        finally:
            log.close()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def alive(self) -> str | None:
        """None while running, else why not: the ``alive`` callback of :func:`wait_ready`."""
        code = self.proc.poll()
        if code is None:
            return None
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        return f"the server process `{shlex.join(self.argv[:6])}{' ...' if len(self.argv) > 6 else ''}` ended ({how})"

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM the process group, SIGKILL what is left of it after ``timeout_s``; the exit code.

        Workers that outlive their parent (or ignore SIGTERM) are ended too.
        """
        deadline = time.monotonic() + timeout_s
        self._signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.proc.wait()
        # members left after the leader: give them a moment, then SIGKILL the group (harmless for
        # members already gone or waiting to be reaped)
        grace = min(deadline, time.monotonic() + 1.0)
        while self._group_alive() and time.monotonic() < grace:
            time.sleep(0.05)
        if self._group_alive():
            self._signal(signal.SIGKILL)
        return self.proc.returncode

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)  # the group this class created (start_new_session)
        except (ProcessLookupError, PermissionError):
            if self.proc.poll() is None:
                self.proc.send_signal(sig)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = [
    "FAILED_STATES",
    "NotReady",
    "ServerProcess",
    "base_of",
    "capture_logs",
    "failure_message",
    "first_model",
    "match_failures",
    "probe_metrics",
    "readiness_gate",
    "record_not_ready",
    "split_command",
    "status_says_failed",
    "wait_ready",
]
