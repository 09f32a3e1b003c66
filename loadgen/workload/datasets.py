"""Datasets of prompts and request traces, read from local files.

Prompt datasets (text):

- ShareGPT JSON: an array of ``{"conversations": [{"from": "human"|"gpt"|"system", "value": str}]}``;
  each conversation gives its human turns in order and the lengths of the replies.
- JSONL prompts: one ``{"prompt": str}`` a line, optionally with ``"output_tokens"`` (or
  ``"max_tokens"``), an integer.

Request traces (timing and token counts, no text):

- ``azure``: the Azure LLM inference trace CSV, ``TIMESTAMP,ContextTokens,GeneratedTokens`` with
  timestamps ``YYYY-MM-DD HH:MM:SS.fffffff``;
- ``burstgpt``: BurstGPT CSV, ``Timestamp`` (seconds) with ``Request tokens`` and
  ``Response tokens`` columns;
- ``mooncake``: Mooncake JSONL, ``timestamp`` (ms), ``input_length``, ``output_length`` and
  ``hash_ids`` (ids of 512-token prefix blocks; equal ids mean a shareable prefix).

Every malformed file raises :class:`~loadgen.workload.errors.DatasetError` naming the file and line.
"""

from __future__ import annotations

import csv
import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from loadgen.workload.errors import DatasetError
from loadgen.workload.tokens import estimate_tokens

TRACE_FORMATS = ("azure", "burstgpt", "mooncake")
PROMPT_FORMATS = ("sharegpt", "jsonl")
MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One request of a trace; ``offset_s`` is its time since the trace's first request."""

    offset_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class Trace:
    path: str
    format: str
    rows: tuple[TraceRow, ...]

    @property
    def duration_s(self) -> float:
        return self.rows[-1].offset_s if self.rows else 0.0


@dataclass(frozen=True, slots=True)
class PromptRow:
    """One conversation of a prompt dataset: the user turns in order, and reply lengths if known."""

    turns: tuple[str, ...]
    output_tokens: tuple[int, ...] = ()

    @property
    def prompt(self) -> str:
        return self.turns[0]


def _open_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DatasetError(
            path,
            None,
            "no such file; check the path (a scenario file's relative paths are resolved from its folder, a "
            "command line's from the current directory)",
        ) from None
    except IsADirectoryError:
        raise DatasetError(path, None, "is a directory, not a file") from None
    except UnicodeDecodeError as exc:
        raise DatasetError(path, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise DatasetError(path, None, f"cannot read it: {exc.strerror}") from None
    except ValueError:  # the OS takes no path with a NUL character in it
        raise DatasetError(path, None, "the path holds a NUL character (\\x00); no file has such a name") from None


def _jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for lineno, line in enumerate(_open_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(path, lineno, f"not valid JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise DatasetError(path, lineno, "each line must be a JSON object")
        yield lineno, obj


def _int_field(path: Path, lineno: int, obj: dict[str, Any], name: str, required: bool = True) -> int | None:
    if name not in obj:
        if required:
            raise DatasetError(path, lineno, f'missing field "{name}"')
        return None
    value = obj[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 0:
        raise DatasetError(path, lineno, f'field "{name}" = {value!r}: must be a non-negative integer')
    return int(value)


def load_trace(path: str | Path, fmt: str = "auto") -> Trace:
    """Read a request trace; ``fmt`` is one of :data:`TRACE_FORMATS` or ``auto`` (by content).

    Results are cached per (path, format, modification time): a scenario reading one trace for its
    arrivals and for its input and output lengths parses it once.
    """
    p = Path(path)
    try:
        mtime_ns = p.stat().st_mtime_ns
    except (OSError, ValueError):  # ValueError: a NUL in the path
        mtime_ns = 0  # _open_text raises the clear error
    return _load_trace_cached(str(p), fmt, mtime_ns)


@functools.lru_cache(maxsize=8)
def _load_trace_cached(path: str, fmt: str, mtime_ns: int) -> Trace:
    p = Path(path)
    if fmt == "auto":
        fmt = _detect_trace_format(p)
    if fmt == "mooncake":
        rows = _load_mooncake(p)
    elif fmt in ("azure", "burstgpt"):
        rows = _load_csv_trace(p, fmt)
    else:
        raise DatasetError(p, None, f"unknown trace format {fmt!r}; use one of {', '.join(TRACE_FORMATS)}")
    if not rows:
        raise DatasetError(p, None, "the trace has no requests")
    rows.sort(key=lambda r: r.offset_s)
    t0 = rows[0].offset_s
    shifted = tuple(TraceRow(r.offset_s - t0, r.input_tokens, r.output_tokens, r.hash_ids) for r in rows)
    return Trace(str(p), fmt, shifted)


def _detect_trace_format(p: Path) -> str:
    head = _open_text(p)[:4096].lstrip()
    if head.startswith("{"):
        return "mooncake"
    first = head.splitlines()[0] if head else ""
    if "ContextTokens" in first:
        return "azure"
    if "Request tokens" in first:
        return "burstgpt"
    raise DatasetError(
        p,
        1,
        "cannot tell the trace format (expected an Azure or BurstGPT CSV header "
        "or Mooncake JSONL); set the format explicitly",
    )


def _load_mooncake(p: Path) -> list[TraceRow]:
    rows = []
    for lineno, obj in _jsonl(p):
        ts = obj.get("timestamp")
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or ts < 0:
            raise DatasetError(p, lineno, f'field "timestamp" = {ts!r}: must be milliseconds >= 0')
        n_in = _int_field(p, lineno, obj, "input_length")
        n_out = _int_field(p, lineno, obj, "output_length")
        ids = obj.get("hash_ids")
        if ids is not None and (
            not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
        ):
            raise DatasetError(p, lineno, 'field "hash_ids" must be an array of integers')
        assert n_in is not None and n_out is not None
        rows.append(TraceRow(ts / 1000.0, n_in, n_out, tuple(ids) if ids is not None else None))
    return rows


_CSV_COLUMNS = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
}


def _load_csv_trace(p: Path, fmt: str) -> list[TraceRow]:
    text = _open_text(p)
    reader = csv.reader(text.splitlines())
    try:
        header = next(reader)
    except StopIteration:
        raise DatasetError(p, None, "empty file") from None
    want = _CSV_COLUMNS[fmt]
    missing = [c for c in want if c not in header]
    if missing:
        raise DatasetError(p, 1, f"not a {fmt} trace: header lacks {', '.join(missing)} (found: {', '.join(header)})")
    i_ts, i_in, i_out = (header.index(c) for c in want)
    rows = []
    for lineno, rec in enumerate(reader, start=2):
        if not rec:
            continue
        try:
            ts_text, in_text, out_text = rec[i_ts], rec[i_in], rec[i_out]
        except IndexError:
            raise DatasetError(p, lineno, f"expected {len(header)} columns, found {len(rec)}") from None
        try:
            ts = _azure_time(ts_text) if fmt == "azure" else float(ts_text)
        except ValueError:
            raise DatasetError(p, lineno, f"bad timestamp {ts_text!r}") from None
        try:
            n_in, n_out = int(in_text), int(out_text)
        except ValueError:
            raise DatasetError(p, lineno, f"token counts must be integers, got {in_text!r}, {out_text!r}") from None
        if n_in < 0 or n_out < 0:
            raise DatasetError(p, lineno, f"token counts must be >= 0, got {n_in}, {n_out}")
        rows.append(TraceRow(ts, n_in, n_out))
    return rows


def _azure_time(text: str) -> float:
    """Seconds since the epoch (naive, UTC assumed) of ``YYYY-MM-DD HH:MM:SS[.fffffff]``."""
    base, _, frac = text.strip().partition(".")
    seconds = datetime.strptime(base, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    return seconds + (float("0." + frac) if frac else 0.0)


def load_prompts(path: str | Path, fmt: str) -> list[PromptRow]:
    """Read a prompt dataset; ``fmt`` is ``sharegpt`` or ``jsonl``."""
    p = Path(path)
    if fmt == "sharegpt":
        rows = _load_sharegpt(p)
    elif fmt == "jsonl":
        rows = _load_jsonl_prompts(p)
    else:
        raise DatasetError(p, None, f"unknown prompt format {fmt!r}; use one of {', '.join(PROMPT_FORMATS)}")
    if not rows:
        raise DatasetError(p, None, "the dataset has no usable prompts")
    return rows


def _load_sharegpt(p: Path) -> list[PromptRow]:
    try:
        data = json.loads(_open_text(p))
    except json.JSONDecodeError as exc:
        raise DatasetError(p, exc.lineno, f"not valid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(data, list):
        raise DatasetError(p, None, "a ShareGPT file must hold a JSON array of conversations")
    rows = []
    for i, conv in enumerate(data):
        turns = conv.get("conversations") if isinstance(conv, dict) else None
        if not isinstance(turns, list):
            raise DatasetError(p, None, f'conversation #{i} has no "conversations" array')
        users: list[str] = []
        replies: list[int] = []
        for turn in turns:
            if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
                raise DatasetError(p, None, f'conversation #{i}: each turn needs "from" and a string "value"')
            who = turn.get("from")
            if who in ("human", "user"):
                users.append(turn["value"])
            elif who in ("gpt", "assistant", "chatgpt", "bard", "bing") and len(replies) < len(users):
                replies.append(max(1, estimate_tokens(turn["value"])))
        # Keep conversations that start with a user turn with text; reply lengths pair with turns.
        if users and users[0].strip():
            rows.append(PromptRow(tuple(users), tuple(replies)))
    return rows


def _load_jsonl_prompts(p: Path) -> list[PromptRow]:
    rows = []
    for lineno, obj in _jsonl(p):
        prompt = obj.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise DatasetError(p, lineno, 'each line needs a non-empty string field "prompt"')
        out = _int_field(p, lineno, obj, "output_tokens", required=False)
        if out is None:
            out = _int_field(p, lineno, obj, "max_tokens", required=False)
        rows.append(PromptRow((prompt,), (out,) if out is not None else ()))
    return rows


def length_values(path: str | Path, fmt: str, field: str) -> list[int]:
    """Input or output lengths (``field``: ``input`` or ``output``) of a trace or prompt dataset."""
    if fmt in PROMPT_FORMATS:
        rows = load_prompts(path, fmt)
        if field == "input":
            return [estimate_tokens(r.prompt) for r in rows]
        values = [r.output_tokens[0] for r in rows if r.output_tokens]
        if not values:
            raise DatasetError(path, None, "the dataset has no output lengths")
        return values
    trace = load_trace(path, fmt)
    return [r.input_tokens if field == "input" else r.output_tokens for r in trace.rows]
