"""Workload files: every request of a run as JSON lines, to read, review, version and replay exactly.

The format (``docs/workload-files.md``), schema ``llm-loadgen.workload`` version 1:

* line 1, the header: ``schema``, ``version``, ``mode`` (``closed``: users who each send their
  requests in order; ``open``: requests at their intended times), ``steps`` (each step's load as a
  run's manifest says it: ``concurrency`` or ``rate``, ``warmup_s``, ``duration_s``, ``requests``,
  ``tenants``), ``tenants`` (each one's name, priority and SLO), ``endpoint``, ``model`` (at export;
  the replay sends its own ``--model``), ``redacted``, ``scenario`` (name, path, seed and the
  file's sha256, when one was exported), ``source`` (``export`` or ``import:FORMAT``) and
  ``created_by`` (the loadgen version);
* then one line per request: ``step``, and ``user`` + ``order`` + ``think_s`` (closed loop: the
  user's rank in the step, the request's place in its stream, the wait before sending it) or
  ``at_s`` (open loop: seconds from the step's start), ``endpoint``, ``body`` (the JSON body without
  ``model``), ``context_tokens`` (the prompt length asked for), ``source`` (the workload's label),
  and where they apply ``tenant``, ``headers``, ``conversation`` + ``turn``, ``cont`` (true: the
  request continues the previous one of the same user: its ``body.messages`` are only the new
  messages, appended at replay to the previous request's messages and the answer the server gave).

Lines of one user of one step (closed) or of one step (open) are kept together and in order, so a
replay reads each stream from its own offset, never the whole file into memory.

Redacted files (``--redact``) replace every text (message contents, prompts, inputs, query,
documents) with ``{"redacted": {"chars": N, "blocks": [...]}}``: the text's length and a hash per
64-character block, chained across the request's texts in order, so two requests that shared a
prefix share the leading hashes. A replay writes corpus text of the same length for each block,
chosen by its hash: the same lengths and the same prefix sharing, none of the words.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from loadgen.spec.calls import ENDPOINTS
from loadgen.workload.errors import DatasetError

SCHEMA = "llm-loadgen.workload"
VERSION = 1
BLOCK_CHARS = 64  # redaction: one hash per this many characters of text
_READ_BLOCK = 1 << 16

# the body fields that carry text a redacted file must not: each a string or a list of them
# (chat message contents are handled on their own: a string or a list of parts)
_TEXT_FIELDS = ("prompt", "input", "query", "documents", "text_1", "text_2", "instructions")


class WorkloadFileError(DatasetError):
    """A workload file that cannot be used: names the file, the line and what to do."""


@dataclass(slots=True)
class Header:
    """A workload file's first line."""

    mode: str  # closed | open
    steps: list[dict[str, Any]]
    endpoint: str = "chat"
    model: str = ""
    tenants: list[dict[str, Any]] = field(default_factory=list)
    redacted: bool = False
    scenario: dict[str, Any] | None = None
    source: str = "export"
    created_by: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "version": VERSION,
            "mode": self.mode,
            "endpoint": self.endpoint,
            "model": self.model,
            "redacted": self.redacted,
            "source": self.source,
            "created_by": self.created_by,
            "scenario": self.scenario,
            "tenants": self.tenants,
            "steps": self.steps,
        }


def header_line(header: Header) -> bytes:
    return orjson.dumps(header.to_dict()) + b"\n"


def request_line(line: Mapping[str, Any]) -> bytes:
    return orjson.dumps(line) + b"\n"


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# -- reading -------------------------------------------------------------------------------------


def read_header(path: str | Path) -> Header:
    """The header of the workload file at ``path``; a WorkloadFileError for anything else (another
    schema, another version, a missing field)."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            first = f.readline()
    except OSError as exc:
        raise WorkloadFileError(p, None, f"cannot read it ({exc.strerror or exc})") from None
    if not first.strip():
        raise WorkloadFileError(p, 1, "empty: a workload file starts with its header line (loadgen workload export)")
    try:
        data = orjson.loads(first)
    except orjson.JSONDecodeError as exc:
        raise WorkloadFileError(p, 1, f"the header is not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else None
        raise WorkloadFileError(
            p,
            1,
            f"schema {got!r} is not {SCHEMA!r}: not a loadgen workload file (loadgen workload import converts traces)",
        )
    version = data.get("version")
    if version != VERSION:
        raise WorkloadFileError(
            p,
            1,
            f"schema version {version!r}: this loadgen reads version {VERSION}; export it again with this "
            "version, or use the loadgen that wrote it",
        )
    mode = data.get("mode")
    if mode not in ("closed", "open"):
        raise WorkloadFileError(p, 1, f"mode {mode!r}: must be closed or open")
    steps = data.get("steps")
    if not isinstance(steps, list) or not steps or not all(isinstance(s, dict) for s in steps):
        raise WorkloadFileError(p, 1, "steps: must be a non-empty list of the steps' loads")
    endpoint = data.get("endpoint", "chat")
    if endpoint not in ENDPOINTS:
        raise WorkloadFileError(p, 1, f"endpoint {endpoint!r}: one of {', '.join(ENDPOINTS)}")
    return Header(
        mode=mode,
        steps=steps,
        endpoint=endpoint,
        model=str(data.get("model") or ""),
        tenants=list(data.get("tenants") or []),
        redacted=bool(data.get("redacted")),
        scenario=data.get("scenario"),
        source=str(data.get("source") or ""),
        created_by=str(data.get("created_by") or ""),
    )


@dataclass(slots=True)
class Stream:
    """Where one stream's lines are: from ``offset``, ``count`` lines, numbered from ``first_line``."""

    offset: int
    count: int
    first_line: int


@dataclass(slots=True)
class WorkloadFile:
    """A workload file checked line by line and indexed: each step's stream (open loop) or each
    user's stream in each step (closed loop) by its byte offset. Nothing of the bodies is kept."""

    path: Path
    header: Header
    sha256: str
    requests: int
    streams: dict[tuple[int, int], Stream]  # (step, user) -> lines; open loop: user is 0
    tenants_seen: dict[str, int]
    size: int

    def users(self, step: int) -> int:
        """How many users' streams a closed-loop step has."""
        return sum(1 for s, _ in self.streams if s == step)

    def lines(self, step: int, user: int = 0) -> Iterator[dict[str, Any]]:
        """The request lines of ``user`` in ``step`` (open loop: the step's), parsed, in order."""
        where = self.streams.get((step, user))
        if where is None:
            return iter(())
        return (orjson.loads(raw) for raw in read_lines(self.path, where.offset, where.count))


def read_lines(path: Path, offset: int, count: int) -> Iterator[bytes]:
    """``count`` lines from byte ``offset``, read in blocks (one file handle per stream)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        pos, rest, left = offset, b"", count
        while left > 0:
            block = os.pread(fd, _READ_BLOCK, pos)
            if not block:
                if rest:
                    yield rest
                return
            pos += len(block)
            parts = (rest + block).split(b"\n")
            rest = parts.pop()
            for raw in parts:
                if left == 0:
                    return
                left -= 1
                yield raw
    finally:
        os.close(fd)


def open_workload(path: str | Path, *, hashing: bool = True) -> WorkloadFile:
    """Read the workload file at ``path`` once: its header, every request line checked (the fields
    its mode needs, their types, the order of each stream), and the index of its streams. A
    WorkloadFileError names the line and the field."""
    p = Path(path)
    header = read_header(p)
    closed = header.mode == "closed"
    n_steps = len(header.steps)
    streams: dict[tuple[int, int], Stream] = {}
    tenants_seen: dict[str, int] = {}
    h = hashlib.sha256() if hashing else None
    current: tuple[int, int] | None = None
    last_at = 0.0
    expect_order = 0
    requests = 0
    offset = 0
    lineno = 0
    with open(p, "rb") as f:
        for raw in f:
            lineno += 1
            if h is not None:
                h.update(raw)
            start = offset
            offset += len(raw)
            if lineno == 1:
                continue
            if not raw.strip():
                raise WorkloadFileError(p, lineno, "an empty line: a workload file has one request per line")
            try:
                line = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise WorkloadFileError(p, lineno, f"not JSON ({exc})") from None
            if not isinstance(line, dict):
                raise WorkloadFileError(p, lineno, "a request line must be a JSON object")
            step = line.get("step")
            if not isinstance(step, int) or not 0 <= step < n_steps:
                raise WorkloadFileError(p, lineno, f"step {step!r}: must be a step of the header, 0 to {n_steps - 1}")
            body = line.get("body")
            if not isinstance(body, dict):
                raise WorkloadFileError(p, lineno, "body: must be the request's JSON body (an object)")
            endpoint = line.get("endpoint", header.endpoint)
            if endpoint not in ENDPOINTS:
                raise WorkloadFileError(p, lineno, f"endpoint {endpoint!r}: one of {', '.join(ENDPOINTS)}")
            tenant = line.get("tenant")
            if tenant is not None:
                if not isinstance(tenant, str):
                    raise WorkloadFileError(p, lineno, f"tenant {tenant!r}: must be the tenant's name")
                tenants_seen[tenant] = tenants_seen.get(tenant, 0) + 1
            if closed:
                user, think = line.get("user"), line.get("think_s", 0.0)
                if not isinstance(user, int) or user < 0:
                    raise WorkloadFileError(p, lineno, f"user {user!r}: a closed-loop line needs its user (0, 1, ...)")
                if not isinstance(think, (int, float)) or think < 0:
                    raise WorkloadFileError(p, lineno, f"think_s {think!r}: seconds >= 0")
                key = (step, user)
            else:
                at = line.get("at_s")
                if not isinstance(at, (int, float)) or at < 0:
                    why = f"at_s {at!r}: an open-loop line needs its time in the step (s >= 0)"
                    raise WorkloadFileError(p, lineno, why)
                key = (step, 0)
            if key != current:
                if key in streams:
                    who = f"step {step} user {key[1]}" if closed else f"step {step}"
                    raise WorkloadFileError(
                        p, lineno, f"{who} again after other lines: keep each stream's lines together, in order"
                    )
                streams[key] = Stream(start, 0, lineno)
                current, expect_order, last_at = key, 0, 0.0
            if closed:
                if line.get("order") != expect_order:
                    why = f"order {line.get('order')!r}: this user's requests go 0, 1, ...; expected {expect_order}"
                    raise WorkloadFileError(p, lineno, why)
                if line.get("cont") and expect_order == 0:
                    raise WorkloadFileError(p, lineno, "cont: the first request of a user's stream continues nothing")
                expect_order += 1
            else:
                if line["at_s"] < last_at:
                    why = f"at_s {line['at_s']}: before the line above ({last_at}); sort the step's lines by at_s"
                    raise WorkloadFileError(p, lineno, why)
                last_at = line["at_s"]
                if line.get("cont"):
                    raise WorkloadFileError(p, lineno, "cont: open-loop requests stand alone")
            streams[key].count += 1
            requests += 1
    if requests == 0:
        raise WorkloadFileError(p, None, "no requests after the header")
    return WorkloadFile(
        path=p,
        header=header,
        sha256=h.hexdigest() if h is not None else "",
        requests=requests,
        streams=streams,
        tenants_seen=tenants_seen,
        size=offset,
    )


# -- redaction -----------------------------------------------------------------------------------


class _Chain:
    """The block hashes of one request's texts, chained: equal prefixes, equal leading hashes."""

    def __init__(self) -> None:
        self.state = b""

    def text(self, text: str) -> dict[str, Any]:
        data = text.encode()
        blocks = []
        for i in range(0, len(text), BLOCK_CHARS):
            piece = text[i : i + BLOCK_CHARS].encode()
            self.state = hashlib.blake2b(self.state + piece, digest_size=8).digest()
            blocks.append(self.state.hex())
        if not data:
            blocks = []
        return {"redacted": {"chars": len(text), "blocks": blocks}}


def redact_body(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with every text replaced by its length and chained block hashes (module docstring);
    everything else (lengths asked for, sampling, tools, roles) kept."""
    chain = _Chain()
    out = dict(body)
    messages = body.get("messages")
    if isinstance(messages, list):
        out["messages"] = [_redact_message(m, chain) for m in messages]
    for key in _TEXT_FIELDS:
        value = body.get(key)
        if isinstance(value, str):
            out[key] = chain.text(value)
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            out[key] = [chain.text(v) for v in value]
    return out


def _redact_message(message: Any, chain: _Chain) -> Any:
    if not isinstance(message, dict):
        return message
    out = dict(message)
    content = message.get("content")
    if isinstance(content, str):
        out["content"] = chain.text(content)
    elif isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append({**part, "text": chain.text(part["text"])})
            else:
                parts.append(part)
        out["content"] = parts
    return out


def unredact_body(body: dict[str, Any], text_for: Callable[[str, int], str]) -> dict[str, Any]:
    """A redacted body with text put back: each block of each text is ``text_for(hash, chars)``."""

    def fill(value: Any) -> Any:
        if isinstance(value, dict):
            r = value.get("redacted")
            if isinstance(r, dict) and set(value) == {"redacted"}:
                return _text_of(r, text_for)
            return {k: fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fill(v) for v in value]
        return value

    return {k: fill(v) for k, v in body.items()}


def _text_of(r: dict[str, Any], text_for: Callable[[str, int], str]) -> str:
    chars = int(r.get("chars", 0))
    blocks = r.get("blocks") or []
    pieces = []
    for i, block in enumerate(blocks):
        n = min(BLOCK_CHARS, chars - i * BLOCK_CHARS)
        if n <= 0:
            break
        pieces.append(text_for(str(block), n))
    return "".join(pieces)


class BlockText:
    """Corpus text for a redacted block: ``chars`` characters from a place its hash picks (the
    same hash, the same text: prefix sharing survives; nothing of the original is in it)."""

    def __init__(self, corpus_text: str) -> None:
        text = " ".join(corpus_text.split())
        self.text = text + " " + text[: BLOCK_CHARS * 2]
        self.span = len(text)

    def __call__(self, block: str, chars: int) -> str:
        start = int(block[:12], 16) % self.span
        return self.text[start : start + chars]
