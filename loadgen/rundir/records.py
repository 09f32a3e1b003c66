"""RequestRecord (one per LLM call) and the append-only JSONL writers of a run directory.

Each record is written with one ``os.write`` on an ``O_APPEND`` descriptor as soon as its request
ends: nothing is buffered in the process, so a crash or ``kill -9`` of the load generator loses no
finished request, and a partially written last line (the process killed mid-write) is skipped by the
reader. The field names are the run directory contract (README, "Request records").

A write that fails (disk full, a folder remounted read-only, an I/O error) raises
:class:`RunDirWriteError`, naming the file and the free space left; a line the kernel took only
part of (a short write: the disk filled mid-line) is cut off again first, so the file stays whole
lines (docs/lifecycle.md, "Disk full").
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

ERROR_CLASSES = (
    "connection_refused",
    "connect_timeout",
    "connection_reset",
    "stall",
    "read_timeout",
    "http_400_context_length",
    "http_429",
    "http_3xx",
    "http_4xx",
    "http_5xx",
    "kv_cache",
    "stream_error",
    "malformed_stream",
    "truncated",
    "response_too_large",
    "cancelled",
    "other",
)


@dataclass(slots=True)
class RequestRecord:
    """One LLM call, as measured by the client.

    All ``*_ns`` times but the offsets are wall-clock nanoseconds since the epoch (derived from one
    perf-counter anchor per process, so differences are exact). ``chunk_offsets_ns`` are arrival
    times of the chunks that carried output text, relative to ``sent_ns``; ``chunk_tokens`` the
    tokens each of them carried (see ``tokens_source``). TTFT is ``first_chunk_ns - intended_ns``.

    ``chunk_clock``: ``kernel`` when chunk times are the kernel's receive times, ``read`` when
    they are the times the process read them (TLS, the openai transport, other systems).
    ``chunk_late_ns``: sparse ``[chunk index, ns]`` pairs for the chunks whose time is an upper
    bound (the kernel merged their bytes with later ones): each arrived at most ``ns`` earlier;
    every other kernel time is exact. ``send_late_ns``: how long after ``sent_ns`` the request's
    first bytes were written (the client's own time: building the request, a connect when none was
    ready, a deschedule in between; 0 when not measured, as over TLS or the openai transport). The
    server cannot have started before then, so the TTFT may be long by that much.
    ``user_late_ns`` (closed loop): how long after its user meant to send it (when the last bytes
    of the user's previous answer reached this host, plus the think time) the request went out; 0
    for a user's first request of a step, in an open loop, or when not measured. A load generator
    that could not run (its process descheduled: a server on the same cores) sends late, and the
    server has fewer requests in flight than the users the step names.

    Kinds of output (chat's ``reasoning_content`` / ``content`` / ``tool_calls`` deltas, the
    Responses API's reasoning / output text / function call events): ``first_reasoning_ns``,
    ``first_answer_ns`` and ``first_tool_ns`` are the arrivals of the first of each (None when none
    came); ``first_chunk_ns`` stays the first output of any kind. ``reasoning_tokens``: the server's
    ``completion_tokens_details.reasoning_tokens`` (``output_tokens_details`` for Responses), part
    of ``output_tokens``. ``tool_calls``: calls the answer made, ``tool_args_chars`` the characters
    of their arguments. An agent loop's turns carry ``max_turns`` (its cap), ``conversation`` (the
    task) and ``turn`` (its step). ``inputs``: the items of a pooling call (embedding inputs,
    rerank documents; None for generative calls, which have no TTFT then). ``images``: image parts
    sent (their token cost is in ``prompt_tokens``; ``context_tokens`` asked for the text only).
    ``endpoint`` is the call type: chat, completions, responses, embeddings or rerank.
    ``header_id``: the id sent in the request-id header (``X-Request-Id`` unless
    ``--request-id-header`` names another; a UUID, which every server accepts, where ``id`` is ours:
    run, worker, process and sequence), the key to the server's own logs; None when no id header was sent.
    ``tenant``: the ``[[tenants]]`` entry that sent it (None in a run without tenants).
    """

    id: str
    worker: str
    step: int
    intended_ns: int
    sent_ns: int
    first_chunk_ns: int | None = None
    end_ns: int = 0
    chunk_offsets_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    tokens_source: str = "none"
    finish_reason: str | None = None
    status: int = 0
    error_class: str | None = None
    error: str | None = None
    endpoint: str = "chat"
    stream: bool = True
    max_tokens: int | None = None
    context_tokens: int | None = None
    source: str = ""
    user: int = 0
    reasoning_chunks: int = 0
    server_request_id: str | None = None
    conversation: str | None = None
    turn: int = 0
    cached_tokens: int | None = None
    chunk_late_ns: list[list[int]] = field(default_factory=list)
    chunk_clock: str = ""
    first_reasoning_ns: int | None = None
    first_answer_ns: int | None = None
    first_tool_ns: int | None = None
    reasoning_tokens: int | None = None
    tool_calls: int = 0
    tool_args_chars: int = 0
    max_turns: int | None = None
    inputs: int | None = None
    images: int = 0
    header_id: str | None = None
    tenant: str | None = None
    send_late_ns: int = 0
    user_late_ns: int = 0

    def to_json(self) -> bytes:
        # orjson serialises the dataclass itself, fields in order: the bytes asdict() would give,
        # without asdict's deep copy of every list (~100x faster for a 128-chunk record)
        return orjson.dumps(self, option=orjson.OPT_APPEND_NEWLINE)


# upper edges (ms) of the loop-lag histogram (``lag_hist``) in client-*.jsonl; the last bucket is open
LAG_EDGES_MS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0)


class JsonlAppender:
    """Append-only JSONL file: one ``os.write`` per line, no user-space buffering.

    ``write_bytes`` either appends every byte of the line(s) or raises :class:`RunDirWriteError`
    with the file as it was: after a short write it tries the rest, and when that fails too it
    truncates the file back to where the line began. The truncation is skipped when another
    writer has appended after the piece (the file grew past it; events.jsonl has two writer
    processes): then the reader skips that one merged line. The appender stays usable: a later
    write succeeds once space is back.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise RunDirError(f"cannot open {self.path} for writing: {exc.strerror}") from exc

    def write_bytes(self, line: bytes) -> None:
        fd = self._fd
        if fd is None:
            raise RunDirError(f"{self.path} is closed")
        try:
            done = os.write(fd, line)
        except OSError as exc:
            raise RunDirWriteError(self.path, exc) from exc
        if done != len(line):
            self._finish(fd, line, done)

    def _finish(self, fd: int, line: bytes, done: int) -> None:
        """The kernel took ``done`` bytes of ``line``: write the rest, or cut the piece off again."""
        view = memoryview(line)
        error: OSError | None = None
        while done < len(line):
            try:
                n = os.write(fd, view[done:])
            except OSError as exc:
                error = exc
                break
            if n == 0:
                break
            done += n
        if done == len(line):
            return
        if done:
            try:
                end = os.lseek(fd, 0, os.SEEK_CUR)  # O_APPEND: just past our last byte
                if os.fstat(fd).st_size == end:
                    os.ftruncate(fd, end - done)
            except OSError:
                pass  # the torn piece stays; the reader skips an unparseable line
        if error is None:
            error = OSError(28, os.strerror(28))  # a write that took nothing without an error: full
        raise RunDirWriteError(self.path, error) from error

    def write(self, obj: Any) -> None:
        self.write_bytes(orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class RunDirError(Exception):
    """The run directory cannot be created or written; the message names the path and what to do."""


class RunDirWriteError(RunDirError):
    """A write into the run directory failed mid-run: ``path``, ``errno``, ``free_bytes`` (None
    when unknown). The message names the file, the reason and the space left on its filesystem."""

    def __init__(self, path: Path, exc: OSError) -> None:
        self.path = path
        self.errno = exc.errno
        self.reason = exc.strerror or str(exc)
        self.free_bytes = free_bytes(path.parent)
        free = "unknown space" if self.free_bytes is None else format_bytes(self.free_bytes)
        super().__init__(f"cannot write {path}: {self.reason} ({free} free on its filesystem)")


def free_bytes(folder: Path) -> int | None:
    """Bytes free to this user on ``folder``'s filesystem, or None when it cannot be asked."""
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def format_bytes(n: int) -> str:
    """``0 bytes``, ``12.0 KiB``, ``3.4 MiB``, ``1.2 GiB``."""
    if n < 1024:
        return f"{n} bytes"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            break
    return f"{size:.1f} {unit}"


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read a JSONL file, skipping a torn last line (a writer killed mid-write) and blank lines."""
    out: list[dict[str, Any]] = []
    with open(path, "rb") as fh:
        data = fh.read()
    loads = orjson.loads
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            out.append(loads(line))
        except orjson.JSONDecodeError:
            continue
    return out
