"""Parse ``requests*.jsonl`` into columns (:class:`Requests`): the only code that reads request records.

:func:`load_requests` reads every record of the given files, in order, into numpy columns. A line
that is not a JSON object (a torn last line after kill -9) is skipped and counted; a record field of
the wrong type raises :class:`RunLoadError` naming the file, the field (or the line) and what to do.

Fast for large runs (a 1,000,000-record run loads in seconds, not minutes): files are read in
blocks; the two per-chunk arrays of a record are cut out of its line as text and parsed in one
numpy call per block (they are most of the bytes, and turning them into Python ints is what costs);
orjson parses the rest of the line; the cyclic garbage collector is paused while records are parsed
(millions of short-lived dicts would otherwise trigger it over and over). Large runs are parsed by
forked worker processes that write the chunk arrays into shared memory (:class:`_SharedChunks`).
Per-chunk data is kept as two flat arrays with per-record offsets into them (CSR layout), never as
per-record lists.
"""

from __future__ import annotations

import ctypes
import gc
import itertools
import mmap
import multiprocessing
import os
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]

MISSING = -1
"""Stored in an integer column where the record had null (``first_chunk_ns``, token counts...)."""

BLOCK_BYTES = 1 << 20  # small blocks stay in the CPU cache and reuse the allocator's memory
RANGE_BYTES = 16 << 20  # work unit of a worker process
PARALLEL_MIN_BYTES = 96 << 20  # below this, worker start-up costs more than it saves
_OFF_KEY = b'"chunk_offsets_ns":['
_TOK_KEY = b'"chunk_tokens":['

# Integer columns: name -> value stored when the key is absent or null.
_INT_FIELDS: dict[str, int] = {
    "step": MISSING,
    "intended_ns": MISSING,
    "sent_ns": MISSING,
    "first_chunk_ns": MISSING,
    "end_ns": MISSING,
    "prompt_tokens": MISSING,
    "output_tokens": MISSING,
    "status": 0,
    "context_tokens": MISSING,
    "max_tokens": MISSING,
    "cached_tokens": MISSING,
    "reasoning_chunks": 0,
    "user": 0,
}
# Fields that records of older runs do not have (absent = the default here, as for null).
_NEW_INT_FIELDS: dict[str, int] = {
    "first_reasoning_ns": MISSING,
    "first_answer_ns": MISSING,
    "first_tool_ns": MISSING,
    "reasoning_tokens": MISSING,
    "tool_calls": 0,
    "tool_args_chars": 0,
    "max_turns": MISSING,
    "inputs": MISSING,
    "images": 0,
    "turn": 0,
}
_CAT_FIELDS = ("worker", "tokens_source", "finish_reason", "error_class", "endpoint", "chunk_clock")
_NEW_CAT_FIELDS = ("conversation", "source")
# Columns derived from a record's ``chunk_late_ns`` (see ``_late_columns``).
_DERIVED_INTS = ("late_first_ns", "late_gaps")
_ALL_INTS = (*_INT_FIELDS, *_NEW_INT_FIELDS, *_DERIVED_INTS)
_ALL_CATS = (*_CAT_FIELDS, *_NEW_CAT_FIELDS)
TIMING_TOLERANCE_NS = 1_000_000
"""A chunk time that may be late by more than this is counted as uncertain (``late_gaps``)."""


class RunLoadError(Exception):
    """The run directory cannot be read; the message names the file, the field and what to do."""


@dataclass(frozen=True, slots=True)
class Categorical:
    """A string column as integer codes into ``names`` (``names[code]``; None is a name too)."""

    codes: I32
    names: tuple[str | None, ...]

    def code_of(self, name: str | None) -> int:
        """The code of ``name``, or -1 when no record has it (so ``codes == -1`` selects nothing)."""
        try:
            return self.names.index(name)
        except ValueError:
            return -1

    def values(self, rows: npt.NDArray[Any] | None = None) -> list[str | None]:
        codes = self.codes if rows is None else self.codes[rows]
        names = self.names
        return [names[c] for c in codes.tolist()]


@dataclass(slots=True)
class Requests:
    """All request records of a run as columns (one row per record; files concatenated).

    Integer columns hold ``MISSING`` (-1) where a record had null. ``chunk_start`` has ``n + 1``
    entries: the text chunks of record ``i`` are ``chunk_offsets_ns[chunk_start[i]:chunk_start[i+1]]``
    (arrival times relative to ``sent_ns``) and the same slice of ``chunk_tokens``. ``errors`` maps
    a row to its error message (only rows that have one). ``late_first_ns``: how late the first
    chunk's time may be (0: exact); ``late_gaps``: inter-chunk gaps with an end that may be late by
    more than ``TIMING_TOLERANCE_NS``; ``chunk_clock``: ``kernel``, ``read`` or ``""`` (older runs).
    The fields newer writers add (``first_reasoning_ns``, ``first_answer_ns``, ``first_tool_ns``,
    ``reasoning_tokens``, ``max_turns``, ``inputs``: MISSING; ``tool_calls``, ``tool_args_chars``,
    ``images``, ``turn``: 0; ``conversation``, ``source`` (the workload's label): None) read as those
    defaults in older runs.
    """

    ids: list[str]
    worker: Categorical
    step: I64
    intended_ns: I64
    sent_ns: I64
    first_chunk_ns: I64
    end_ns: I64
    prompt_tokens: I64
    output_tokens: I64
    status: I64
    context_tokens: I64
    max_tokens: I64
    cached_tokens: I64
    reasoning_chunks: I64
    user: I64
    tokens_source: Categorical
    finish_reason: Categorical
    error_class: Categorical
    endpoint: Categorical
    chunk_clock: Categorical
    first_reasoning_ns: I64
    first_answer_ns: I64
    first_tool_ns: I64
    reasoning_tokens: I64
    tool_calls: I64
    tool_args_chars: I64
    max_turns: I64
    inputs: I64
    images: I64
    turn: I64
    conversation: Categorical
    source: Categorical
    late_first_ns: I64
    late_gaps: I64
    chunk_start: I64
    chunk_offsets_ns: I64
    chunk_tokens: I32
    errors: dict[int, str] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.step)

    @property
    def chunk_counts(self) -> I64:
        return np.diff(self.chunk_start)

    def chunks_of(self, row: int) -> tuple[I64, I32]:
        """Offsets (ns after ``sent_ns``) and token counts of one record's text chunks."""
        a, b = int(self.chunk_start[row]), int(self.chunk_start[row + 1])
        return self.chunk_offsets_ns[a:b], self.chunk_tokens[a:b]


# ---------------------------------------------------------------------------------------------
# growable flat arrays (realloc in place: large buffers grow by mremap, without a copy's peak)


class _Flat:
    """A growable array; or, given ``slot``, one that fills that view (a worker's shared slot)
    and moves to a private array only if it would overflow it (``in_slot`` then turns False)."""

    __slots__ = ("arr", "in_slot", "n")

    def __init__(
        self, dtype: type[np.signedinteger[Any]], capacity: int = 1 << 16, slot: npt.NDArray[Any] | None = None
    ) -> None:
        self.arr: npt.NDArray[Any] = slot if slot is not None else np.empty(capacity, dtype=dtype)
        self.in_slot = slot is not None
        self.n = 0

    def extend(self, values: npt.NDArray[Any]) -> None:
        need = self.n + len(values)
        if need > len(self.arr):
            if self.in_slot:
                private = np.empty(max(need, len(self.arr) * 2), dtype=self.arr.dtype)
                private[: self.n] = self.arr[: self.n]
                self.arr, self.in_slot = private, False
            else:
                self.arr.resize(max(need, len(self.arr) * 2), refcheck=False)
        self.arr[self.n : need] = values
        self.n = need

    def finish(self) -> npt.NDArray[Any]:
        if self.in_slot:
            return self.arr[: self.n]
        self.arr.resize(self.n, refcheck=False)
        return self.arr


# ---------------------------------------------------------------------------------------------
# one block of lines -> columns


@dataclass(slots=True)
class _Batch:
    recs: list[dict[str, Any]]
    counts: list[int]
    offsets: npt.NDArray[np.int64]
    tokens: npt.NDArray[np.int32]


def _parse_ints(text: bytes, dtype: type[np.signedinteger[Any]]) -> npt.NDArray[Any] | None:
    """Comma-separated integers -> array, or None if the text is anything else."""
    if not text:
        return np.empty(0, dtype=dtype)
    with warnings.catch_warnings():
        # numpy warns (and returns a short array) on unparsable text; make that an error.
        warnings.simplefilter("error", DeprecationWarning)
        try:
            return np.fromstring(text, dtype=dtype, sep=",")
        except (ValueError, DeprecationWarning):
            return None


def _int_list(value: Any) -> list[int] | None:
    if value is None:
        return []
    if not isinstance(value, list):
        return None
    out: list[int] = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return None
        out.append(int(v))
    return out


def _fast_batch(lines: list[bytes]) -> _Batch | None:
    """The fast path: every line a JSON object with both chunk arrays of plain integers."""
    stripped: list[bytes] = []
    off_parts: list[bytes] = []
    tok_parts: list[bytes] = []
    counts: list[int] = []
    add_line, add_off, add_tok, add_count = stripped.append, off_parts.append, tok_parts.append, counts.append
    for line in lines:
        i = line.find(_OFF_KEY)
        j = line.find(_TOK_KEY)
        if i < 0 or j < 0:
            return None
        i += 20
        j += 16
        ie = line.find(b"]", i)
        je = line.find(b"]", j)
        if ie < 0 or je < 0:
            return None
        off = line[i:ie]
        tok = line[j:je]
        n_off = off.count(b",") + 1 if off else 0
        n_tok = tok.count(b",") + 1 if tok else 0
        if n_off != n_tok:
            return None
        if off:
            add_off(off)
            add_tok(tok)
        add_count(n_off)
        add_line(line[:i] + line[ie:j] + line[je:] if i < j else line[:j] + line[je:i] + line[ie:])
    try:
        recs = list(map(orjson.loads, stripped))
    except orjson.JSONDecodeError:
        return None
    if not all(type(r) is dict for r in recs):
        return None
    offsets = _parse_ints(b",".join(off_parts), np.int64)
    tokens = _parse_ints(b",".join(tok_parts), np.int32)
    total = sum(counts)
    if offsets is None or tokens is None or len(offsets) != total or len(tokens) != total:
        return None
    return _Batch(recs, counts, offsets, tokens)


def _line_number(path: Path, block_start: int, k: int) -> int:
    """1-based line number of line ``k`` of the block at byte ``block_start`` (error messages only)."""
    newlines = 0
    with open(path, "rb") as fh:
        remaining = block_start
        while remaining > 0:
            data = fh.read(min(remaining, 1 << 24))
            if not data:
                break
            newlines += data.count(b"\n")
            remaining -= len(data)
    return newlines + 1 + k


def _slow_batch(lines: list[bytes], path: Path, block_start: int) -> tuple[_Batch, int]:
    """Line by line: skips blank lines and counts lines that are not JSON objects (a torn line);
    names the line of a bad chunk array."""
    recs: list[dict[str, Any]] = []
    counts: list[int] = []
    offs: list[list[int]] = []
    toks: list[list[int]] = []
    skipped = 0
    for k, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            rec = None
        if type(rec) is not dict:
            skipped += 1
            continue
        off = _int_list(rec.get("chunk_offsets_ns"))
        tok = _int_list(rec.get("chunk_tokens"))
        if off is None or tok is None:
            where = f"{path}:{_line_number(path, block_start, k)}"
            raise RunLoadError(
                f"{where}: chunk_offsets_ns and chunk_tokens must be lists of integers; "
                "the record is corrupt: delete that line and run `loadgen report` again"
            )
        if len(tok) != len(off):
            # A writer that did not count tokens per chunk: one token per chunk, never a shifted pairing.
            tok = [1] * len(off)
        recs.append(rec)
        counts.append(len(off))
        offs.append(off)
        toks.append(tok)
    total = sum(counts)
    offsets = np.fromiter(chain.from_iterable(offs), dtype=np.int64, count=total)
    tokens = np.fromiter(chain.from_iterable(toks), dtype=np.int32, count=total)
    return _Batch(recs, counts, offsets, tokens), skipped


def _line_blocks(path: Path, start: int = 0, end: int | None = None) -> Iterator[tuple[list[bytes], int]]:
    """Yield (lines, byte offset of the first) per block of about BLOCK_BYTES of ``path[start:end]``.

    ``start`` must be a line start; ``end`` a line start or the file's end.
    """
    pos = start
    tail = b""
    with open(path, "rb") as fh:
        fh.seek(start)
        while True:
            want = BLOCK_BYTES if end is None else min(BLOCK_BYTES, end - pos - len(tail))
            data = fh.read(want) if want > 0 else b""
            at_end = not data
            buf = tail + data if tail else data
            if not at_end:
                cut = buf.rfind(b"\n")
                if cut < 0:
                    tail = buf
                    continue
                tail = buf[cut + 1 :]
                buf = buf[: cut + 1]
            else:
                tail = b""
            if buf:
                lines = buf.split(b"\n")
                if not lines[-1]:
                    lines.pop()
                yield lines, pos
                pos += len(buf)
            if at_end:
                return


@dataclass(slots=True)
class _Part:
    """The columns of one block of lines (categoricals with block-local codes)."""

    ints: dict[str, I64]
    cats: dict[str, tuple[I32, list[Any]]]
    ids: list[Any]
    errors: list[tuple[int, str]]
    counts: I64
    offsets: npt.NDArray[np.int64]
    tokens: npt.NDArray[np.int32]
    skipped: int
    in_slot: int = -1  # >= 0: the chunk arrays are not here but in the worker's shared slot, this many

    @property
    def n(self) -> int:
        return len(self.counts)


_KEYS = (*_INT_FIELDS, *_CAT_FIELDS, "id", "error")
_ALL_KEYS = itemgetter(*_KEYS)
_NEW_KEYS = (*_NEW_INT_FIELDS, *_NEW_CAT_FIELDS)
_ALL_NEW_KEYS = itemgetter(*_NEW_KEYS)


def _int_column(col: Sequence[Any], name: str, default: int, path: Path) -> I64:
    if None in col:
        col = [default if v is None else v for v in col]
    try:
        return np.asarray(col, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        bad = next((v for v in col if type(v) not in (int, float)), col[0])
        raise RunLoadError(
            f"{path}: field {name!r} must be an integer or null, found {bad!r}; "
            "the file is not a loadgen request log or is corrupt"
        ) from None


def _cat_column(col: Sequence[Any]) -> tuple[I32, list[Any]]:
    table: dict[Any, int] = {}
    try:
        for v in set(col):
            table[v] = len(table)
    except TypeError:  # an unhashable value (list, object): keep its text
        col = [v if v is None or type(v) is str else str(v) for v in col]
        for v in set(col):
            table[v] = len(table)
    codes = np.fromiter(map(table.__getitem__, col), dtype=np.int32, count=len(col))
    return codes, list(table)


def _columns(batch: _Batch, path: Path, skipped: int) -> _Part:
    recs = batch.recs
    try:
        columns: list[Sequence[Any]] = list(zip(*map(_ALL_KEYS, recs), strict=True)) if recs else []
    except KeyError:  # a writer that leaves keys out: absent = default
        columns = [[r.get(k, _INT_FIELDS.get(k)) for r in recs] for k in _KEYS]
    if not columns:
        columns = [() for _ in _KEYS]
    by_key = dict(zip(_KEYS, columns, strict=True))
    by_key.update(_new_columns(recs))
    ints = {name: _int_column(by_key[name], name, d, path) for name, d in _INT_FIELDS.items()}
    ints.update({name: _int_column(by_key[name], name, d, path) for name, d in _NEW_INT_FIELDS.items()})
    ints["late_first_ns"], ints["late_gaps"] = _late_columns(recs, batch.counts)
    cats = {
        name: _cat_column([v if v is not None else "" for v in by_key[name]] if name == "chunk_clock" else by_key[name])
        for name in _ALL_CATS
    }
    err_col = by_key["error"]
    errors: list[tuple[int, str]] = []
    if err_col.count(None) != len(err_col):
        errors = [(k, str(m)) for k, m in enumerate(err_col) if m is not None]
    return _Part(
        ints=ints,
        cats=cats,
        ids=list(by_key["id"]),
        errors=errors,
        counts=np.asarray(batch.counts, dtype=np.int64),
        offsets=batch.offsets,
        tokens=batch.tokens,
        skipped=skipped,
    )


def _new_columns(recs: list[dict[str, Any]]) -> dict[str, Sequence[Any]]:
    """The columns of the fields older runs lack (kinds of output, agent turns, pooling inputs,
    images): one C-level pass when every record has them, else absent = default (null)."""
    if not recs:
        return {k: () for k in _NEW_KEYS}
    try:
        return dict(zip(_NEW_KEYS, zip(*map(_ALL_NEW_KEYS, recs), strict=True), strict=True))
    except KeyError:
        defaults: dict[str, Any] = {**_NEW_INT_FIELDS, "conversation": None, "source": None}
        return {k: [r.get(k, defaults[k]) for r in recs] for k in _NEW_KEYS}


def _late_columns(recs: list[dict[str, Any]], counts: list[int]) -> tuple[I64, I64]:
    """Per record: the bound of its first chunk, and how many of its gaps have an end bounded by
    more than the tolerance (from the sparse ``chunk_late_ns`` pairs; most records have none)."""
    first = np.zeros(len(recs), dtype=np.int64)
    gaps = np.zeros(len(recs), dtype=np.int64)
    for k, rec in enumerate(recs):
        late = rec.get("chunk_late_ns")
        if not late or type(late) is not list:
            continue
        n = counts[k]
        touched: set[int] = set()
        for pair in late:
            if type(pair) is not list or len(pair) != 2:
                continue
            i, ns = pair
            if type(i) is not int or type(ns) is not int:
                continue
            if i == 0:
                first[k] = ns
            if ns > TIMING_TOLERANCE_NS:
                if 1 <= i < n:
                    touched.add(i)  # the gap that ends at chunk i
                if i + 1 < n:
                    touched.add(i + 1)  # the gap that starts at it
        gaps[k] = len(touched)
    return first, gaps


def _parse_lines(lines: list[bytes], path: Path, block_start: int) -> _Part:
    """One block of request lines -> columns (fast path, else line by line)."""
    batch = _fast_batch(lines)
    skipped = 0
    if batch is None:
        batch, skipped = _slow_batch(lines, path, block_start)
    return _columns(batch, path, skipped)


class _Columns:
    """Accumulates the parts of all blocks into the Requests columns."""

    def __init__(
        self, expected_bytes: int, slots: tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]] | None = None
    ) -> None:
        self.expected_bytes = expected_bytes
        self.slots = slots
        self.ints: dict[str, list[I64]] = {k: [] for k in _ALL_INTS}
        self.cat_tables: dict[str, dict[Any, int]] = {k: {} for k in _ALL_CATS}
        self.cats: dict[str, list[I32]] = {k: [] for k in _ALL_CATS}
        self.ids: list[Any] = []
        self.errors: dict[int, str] = {}
        self.counts: list[I64] = []
        self.offsets: _Flat | None = None
        self.tokens: _Flat | None = None
        self.n = 0
        self.skipped = 0

    def add(self, part: _Part, block_bytes: int, chunks: bool = True) -> None:
        """Append a part; ``chunks=False`` leaves its chunk arrays out (the caller places them)."""
        self.skipped += part.skipped
        if not chunks:
            self._add_columns(part)
            return
        if (self.offsets is None or self.tokens is None) and self.slots is not None:
            self.offsets = _Flat(np.int64, slot=self.slots[0])
            self.tokens = _Flat(np.int32, slot=self.slots[1])
        if self.offsets is None or self.tokens is None:
            # size the flat arrays once from the first block's chunks per byte (+10 %), so that
            # large runs never grow them by copying
            per_byte = len(part.offsets) / max(block_bytes, 1)
            capacity = int(per_byte * self.expected_bytes * 1.1) + 1024
            self.offsets = _Flat(np.int64, capacity)
            self.tokens = _Flat(np.int32, capacity)
        self.offsets.extend(part.offsets)
        self.tokens.extend(part.tokens)
        self._add_columns(part)

    def _add_columns(self, part: _Part) -> None:
        if not part.n:
            return
        for name in _ALL_INTS:
            self.ints[name].append(part.ints[name])
        for name in _ALL_CATS:
            codes, names = part.cats[name]
            table = self.cat_tables[name]
            remap = np.asarray([table.setdefault(v, len(table)) for v in names], dtype=np.int32)
            self.cats[name].append(remap[codes] if len(remap) else codes)
        self.ids.extend(part.ids)
        base = self.n
        for k, msg in part.errors:
            self.errors[base + k] = msg
        self.counts.append(part.counts)
        self.n += part.n

    def to_part(self) -> _Part:
        """Everything added so far as one part (a worker's answer for its byte range)."""
        ints = {k: (np.concatenate(v) if v else np.empty(0, dtype=np.int64)) for k, v in self.ints.items()}
        cats = {
            k: (np.concatenate(v) if v else np.empty(0, dtype=np.int32), list(self.cat_tables[k]))
            for k, v in self.cats.items()
        }
        part = _Part(
            ints=ints,
            cats=cats,
            ids=self.ids,
            errors=sorted(self.errors.items()),
            counts=np.concatenate(self.counts) if self.counts else np.empty(0, dtype=np.int64),
            offsets=self.offsets.finish() if self.offsets else np.empty(0, dtype=np.int64),
            tokens=self.tokens.finish() if self.tokens else np.empty(0, dtype=np.int32),
            skipped=self.skipped,
        )
        in_slot = self.offsets is None or self.tokens is None or (self.offsets.in_slot and self.tokens.in_slot)
        if self.slots is not None and in_slot:
            part.in_slot = len(part.offsets)
            part.offsets, part.tokens = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32)
        return part

    def finish(self, chunk_arrays: tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]] | None = None) -> Requests:
        def cat(name: str) -> Categorical:
            names = tuple(self.cat_tables[name])
            parts = self.cats[name]
            codes = np.concatenate(parts) if parts else np.empty(0, dtype=np.int32)
            return Categorical(codes.astype(np.int32, copy=False), names)

        ints = {k: (np.concatenate(v) if v else np.empty(0, dtype=np.int64)) for k, v in self.ints.items()}
        counts = np.concatenate(self.counts) if self.counts else np.empty(0, dtype=np.int64)
        chunk_start = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=chunk_start[1:])
        intended = ints["intended_ns"]
        missing_intended = intended == MISSING
        if missing_intended.any():  # closed loop writers may leave it out: intended = sent
            intended[missing_intended] = ints["sent_ns"][missing_intended]
        empty = _Flat(np.int64, 0)
        return Requests(
            ids=self.ids,
            worker=cat("worker"),
            tokens_source=cat("tokens_source"),
            finish_reason=cat("finish_reason"),
            error_class=cat("error_class"),
            endpoint=cat("endpoint"),
            chunk_clock=cat("chunk_clock"),
            conversation=cat("conversation"),
            source=cat("source"),
            chunk_start=chunk_start,
            chunk_offsets_ns=chunk_arrays[0] if chunk_arrays else (self.offsets or empty).finish(),
            chunk_tokens=chunk_arrays[1] if chunk_arrays else (self.tokens or _Flat(np.int32, 0)).finish(),
            errors=self.errors,
            **ints,
        )


def _parse_range(
    task: tuple[str, int, int], slots: tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]] | None = None
) -> _Part:
    """Parse ``path[start:end]`` (whole lines) into one part; runs in a worker process too.

    With ``slots`` (views of shared memory) the chunk arrays are written there, not returned."""
    path_s, start, end = task
    path = Path(path_s)
    cols = _Columns(end - start, slots)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of short-lived dicts would trigger the cyclic collector over and over
    try:
        for lines, block_start in _line_blocks(path, start, end):
            cols.add(_parse_lines(lines, path, block_start), sum(map(len, lines)))
    except OSError as exc:
        raise RunLoadError(f"cannot read {path}: {exc.strerror}") from exc
    finally:
        if gc_was_enabled:
            gc.enable()
    return cols.to_part()


def _file_ranges(path: Path, size: int, range_bytes: int) -> list[tuple[str, int, int]]:
    """Split a file into byte ranges of about ``range_bytes`` that start and end at line starts."""
    bounds = [0]
    with open(path, "rb") as fh:
        pos = range_bytes
        while pos < size:
            fh.seek(pos)
            fh.readline()
            cut = fh.tell()
            if cut >= size:
                break
            bounds.append(cut)
            pos = cut + range_bytes
    bounds.append(size)
    return [(str(path), a, b) for a, b in itertools.pairwise(bounds) if b > a]


def _can_fork() -> bool:
    """Forking is safe only in a plain single-threaded process: no other thread can hold a lock the
    child would inherit, and no gevent hub (whose monkey-patched pipes and threads hang a pool)."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None and monkey.is_module_patched("threading"):
        return False
    return threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods()


def _workers_for(total_bytes: int, workers: int | None) -> int:
    if not _can_fork():
        return 1
    if workers is not None:
        return max(1, workers)
    if total_bytes < PARALLEL_MIN_BYTES:
        return 1
    return max(1, min(os.cpu_count() or 1, 4))


class _SharedChunks:
    """The chunk arrays of a parallel load, in anonymous shared memory that forked workers write.

    Each task gets a slot big enough for any text of its byte range (every chunk takes at least 4
    bytes of it: a digit and a separator in each array), so a worker never has to send its arrays
    back through a pipe. The parent then slides the slots together (memmove) and gives the emptied
    pages back, leaving one contiguous array each, as a serial load would.
    """

    def __init__(self, tasks: Sequence[tuple[str, int, int]]) -> None:
        caps = [(end - start) // 4 + 1 for _, start, end in tasks]
        self.bases = [0, *itertools.accumulate(caps)]
        total = self.bases[-1]
        self._maps = (mmap.mmap(-1, max(total * 8, 1)), mmap.mmap(-1, max(total * 4, 1)))
        self.offsets = np.frombuffer(self._maps[0], dtype=np.int64, count=total)
        self.tokens = np.frombuffer(self._maps[1], dtype=np.int32, count=total)

    def slot(self, k: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]:
        a, b = self.bases[k], self.bases[k + 1]
        return self.offsets[a:b], self.tokens[a:b]

    def _release(self, which: int, first: int, end: int, item: int) -> None:
        page = mmap.PAGESIZE
        lo = -(-first * item // page) * page
        hi = end * item // page * page
        if hi > lo and hasattr(mmap, "MADV_REMOVE"):
            self._maps[which].madvise(mmap.MADV_REMOVE, lo, hi - lo)

    def compact(self, counts: Sequence[int]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]:
        """Slide slot k's first ``counts[k]`` entries to follow slot k-1's; the joined arrays."""
        pos = 0
        for k, n in enumerate(counts):
            base = self.bases[k]
            if n and base != pos:
                arrays: tuple[npt.NDArray[Any], npt.NDArray[Any]] = (self.offsets, self.tokens)
                for which, arr in enumerate(arrays):
                    item = arr.itemsize
                    ctypes.memmove(arr.ctypes.data + pos * item, arr.ctypes.data + base * item, n * item)
                    self._release(which, max(base, pos + n), base + n, item)
            pos += n
        self._release(0, pos, self.bases[-1], 8)
        self._release(1, pos, self.bases[-1], 4)
        return self.offsets[:pos], self.tokens[:pos]


_WORKER_SHARED: list[_SharedChunks] = []  # set in each forked worker by _init_worker


def _init_worker(shared: _SharedChunks) -> None:
    _WORKER_SHARED.append(shared)


def _parse_task(item: tuple[int, tuple[str, int, int]]) -> _Part:
    k, task = item
    return _parse_range(task, _WORKER_SHARED[0].slot(k))


def parse_request_block(data: bytes, path: Path, offset: int = 0) -> tuple[Requests, int]:
    """Complete lines of one request file (``data`` read from byte ``offset``, ending at a newline)
    as columns, and how many lines were skipped: the parse :func:`load_requests` does, for a reader
    that follows a growing file one appended block at a time (the web UI's live view).
    Raises RunLoadError as :func:`load_requests` does."""
    cols = _Columns(len(data))
    pos = 0
    while pos < len(data):  # in blocks of about BLOCK_BYTES, as load_requests reads (cache-sized)
        cut = data.find(b"\n", pos + BLOCK_BYTES) + 1 or len(data)
        lines = data[pos:cut].split(b"\n")
        if not lines[-1]:
            lines.pop()
        if lines:
            cols.add(_parse_lines(lines, path, offset + pos), cut - pos)
        pos = cut
    return cols.finish(), cols.skipped


def take_requests(parts: Sequence[tuple[Requests, I64]]) -> Requests:
    """The rows ``rows`` of each ``Requests`` in ``parts``, concatenated in the order given.

    Each row keeps every column, its chunks and its error message; a subset taken in run order
    gives the same per-step figures as the whole run wherever the subset holds every row a figure
    reads (``loadgen.webui.live`` takes each step's rows this way)."""
    total_chunks = sum(int(req.chunk_counts[rows].sum()) for req, rows in parts)
    # chunks are the unit here: one "byte" per chunk sizes the flat arrays exactly once
    cols = _Columns(total_chunks)
    for req, rows in parts:
        if not len(rows):
            continue
        counts = req.chunk_counts[rows]
        n = int(counts.sum())
        before = np.cumsum(counts) - counts
        idx = np.repeat(req.chunk_start[rows] - before, counts) + np.arange(n, dtype=np.int64)
        row_list = rows.tolist()
        errors = [(k, req.errors[r]) for k, r in enumerate(row_list) if r in req.errors] if req.errors else []
        part = _Part(
            ints={name: getattr(req, name)[rows] for name in _ALL_INTS},
            cats={name: (getattr(req, name).codes[rows], list(getattr(req, name).names)) for name in _ALL_CATS},
            ids=[req.ids[r] for r in row_list],
            errors=errors,
            counts=counts,
            offsets=req.chunk_offsets_ns[idx],
            tokens=req.chunk_tokens[idx],
            skipped=0,
        )
        cols.add(part, max(n, 1))
    return cols.finish()


def load_requests(files: Sequence[Path], workers: int | None = None) -> tuple[Requests, int]:
    """Every record of ``files``, in order, as columns; and how many lines were skipped.

    Files of more than PARALLEL_MIN_BYTES in all are parsed by worker processes (one per CPU, at most
    4; forked, so only from a single-threaded process without gevent's monkey-patching, else in this
    process); ``workers`` sets the count (1: no worker processes). Raises RunLoadError when a file
    cannot be read or a record has a field of the wrong type.
    """
    try:
        sizes = [p.stat().st_size for p in files]
        total = sum(sizes)
        n_workers = _workers_for(total, workers)
        range_bytes = RANGE_BYTES if n_workers > 1 else max(total, 1)
        tasks = [t for p, size in zip(files, sizes, strict=True) for t in _file_ranges(p, size, range_bytes)]
    except OSError as exc:
        raise RunLoadError(f"cannot read {exc.filename}: {exc.strerror}") from exc
    cols = _Columns(total)
    if n_workers > 1 and len(tasks) > 1:
        shared = _SharedChunks(tasks)
        # fork (checked safe above): spawn would re-import the caller's __main__ in every worker,
        # and the shared mappings are inherited, not copied
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(min(n_workers, len(tasks)), initializer=_init_worker, initargs=(shared,)) as pool:
            parts = list(pool.imap(_parse_task, enumerate(tasks)))
        if all(part.in_slot >= 0 for part in parts):
            for task, part in zip(tasks, parts, strict=True):
                cols.add(part, task[2] - task[1], chunks=False)
            joined = shared.compact([part.in_slot for part in parts])
            return cols.finish(joined), cols.skipped
        for k, (task, part) in enumerate(zip(tasks, parts, strict=True)):  # a slot overflowed: copy
            if part.in_slot >= 0:
                off, tok = shared.slot(k)
                part.offsets, part.tokens = off[: part.in_slot], tok[: part.in_slot]
            cols.add(part, task[2] - task[1])
    else:
        for task in tasks:
            cols.add(_parse_range(task), task[2] - task[1])
    return cols.finish(), cols.skipped
