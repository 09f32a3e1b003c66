"""Request records as columns (:class:`Requests`), and the builder that joins parsed parts into them.

:class:`Requests` holds every request record of a run as numpy columns: one integer column per
field of ``INT_FIELDS``/``NEW_INT_FIELDS`` (``MISSING`` where a record had null), one
:class:`Categorical` per string field, and the per-chunk data as two flat arrays with per-record
offsets into them (CSR layout), never as per-record lists. The field tables here are the one list of
what a record's columns are; ``columns_parse`` fills them from lines, ``columns_load`` from files.

:class:`ColumnBuilder` appends :class:`Part` objects (the columns of one block of lines, with
block-local categorical codes) and joins them into one :class:`Requests`, sizing the flat chunk
arrays once so that a large run never grows them by copying. :func:`take_requests` takes rows of
parsed tables through the same builder.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]

MISSING = -1
"""Stored in an integer column where the record had null (``first_chunk_ns``, token counts...)."""

# Integer columns: name -> value stored when the key is absent or null.
INT_FIELDS: dict[str, int] = {
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
NEW_INT_FIELDS: dict[str, int] = {
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
    "user_late_ns": 0,
}
CAT_FIELDS = ("worker", "tokens_source", "finish_reason", "error_class", "endpoint", "chunk_clock")
NEW_CAT_FIELDS = ("conversation", "source", "tenant")
# Columns derived from a record's ``chunk_late_ns`` (see ``columns_parse._late_columns``).
DERIVED_INTS = ("late_first_ns", "late_gaps")
ALL_INTS = (*INT_FIELDS, *NEW_INT_FIELDS, *DERIVED_INTS)
ALL_CATS = (*CAT_FIELDS, *NEW_CAT_FIELDS)
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
    a row to its error message (only rows that have one). ``late_first_ns``: by how much the TTFT
    may read long (0: exact): how late the first chunk's time may be plus how long after the send
    time the request went out (``send_late_ns``); ``late_gaps``: inter-chunk gaps with an end that may be late by
    more than ``TIMING_TOLERANCE_NS``; ``chunk_clock``: ``kernel``, ``read`` or ``""`` (older runs).
    The fields newer writers add (``first_reasoning_ns``, ``first_answer_ns``, ``first_tool_ns``,
    ``reasoning_tokens``, ``max_turns``, ``inputs``: MISSING; ``tool_calls``, ``tool_args_chars``,
    ``images``, ``turn``, ``user_late_ns``: 0; ``conversation``, ``source`` (the workload's label),
    ``tenant``: None) read as those defaults in older runs.
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
    user_late_ns: I64
    conversation: Categorical
    source: Categorical
    tenant: Categorical
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


class FlatArray:
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
# parts of the columns -> Requests


@dataclass(slots=True)
class Part:
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


class ColumnBuilder:
    """Accumulates the parts of all blocks into the Requests columns."""

    def __init__(
        self, expected_bytes: int, slots: tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]] | None = None
    ) -> None:
        self.expected_bytes = expected_bytes
        self.slots = slots
        self.ints: dict[str, list[I64]] = {k: [] for k in ALL_INTS}
        self.cat_tables: dict[str, dict[Any, int]] = {k: {} for k in ALL_CATS}
        self.cats: dict[str, list[I32]] = {k: [] for k in ALL_CATS}
        self.ids: list[Any] = []
        self.errors: dict[int, str] = {}
        self.counts: list[I64] = []
        self.offsets: FlatArray | None = None
        self.tokens: FlatArray | None = None
        self.n = 0
        self.skipped = 0

    def add(self, part: Part, block_bytes: int, chunks: bool = True) -> None:
        """Append a part; ``chunks=False`` leaves its chunk arrays out (the caller places them)."""
        self.skipped += part.skipped
        if not chunks:
            self._add_columns(part)
            return
        if (self.offsets is None or self.tokens is None) and self.slots is not None:
            self.offsets = FlatArray(np.int64, slot=self.slots[0])
            self.tokens = FlatArray(np.int32, slot=self.slots[1])
        if self.offsets is None or self.tokens is None:
            # size the flat arrays once from the first block's chunks per byte (+10 %), so that
            # large runs never grow them by copying
            per_byte = len(part.offsets) / max(block_bytes, 1)
            capacity = int(per_byte * self.expected_bytes * 1.1) + 1024
            self.offsets = FlatArray(np.int64, capacity)
            self.tokens = FlatArray(np.int32, capacity)
        self.offsets.extend(part.offsets)
        self.tokens.extend(part.tokens)
        self._add_columns(part)

    def _add_columns(self, part: Part) -> None:
        if not part.n:
            return
        for name in ALL_INTS:
            self.ints[name].append(part.ints[name])
        for name in ALL_CATS:
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

    def to_part(self) -> Part:
        """Everything added so far as one part (a worker's answer for its byte range)."""
        ints = {k: (np.concatenate(v) if v else np.empty(0, dtype=np.int64)) for k, v in self.ints.items()}
        cats = {
            k: (np.concatenate(v) if v else np.empty(0, dtype=np.int32), list(self.cat_tables[k]))
            for k, v in self.cats.items()
        }
        part = Part(
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
        empty = FlatArray(np.int64, 0)
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
            tenant=cat("tenant"),
            chunk_start=chunk_start,
            chunk_offsets_ns=chunk_arrays[0] if chunk_arrays else (self.offsets or empty).finish(),
            chunk_tokens=chunk_arrays[1] if chunk_arrays else (self.tokens or FlatArray(np.int32, 0)).finish(),
            errors=self.errors,
            **ints,
        )


def take_requests(parts: Sequence[tuple[Requests, I64]]) -> Requests:
    """The rows ``rows`` of each ``Requests`` in ``parts``, concatenated in the order given.

    Each row keeps every column, its chunks and its error message; a subset taken in run order
    gives the same per-step figures as the whole run wherever the subset holds every row a figure
    reads (``loadgen.webui.tail.RecordBlocks.rows_for`` takes each step's rows this way)."""
    total_chunks = sum(int(req.chunk_counts[rows].sum()) for req, rows in parts)
    # chunks are the unit here: one "byte" per chunk sizes the flat arrays exactly once
    cols = ColumnBuilder(total_chunks)
    for req, rows in parts:
        if not len(rows):
            continue
        counts = req.chunk_counts[rows]
        n = int(counts.sum())
        before = np.cumsum(counts) - counts
        idx = np.repeat(req.chunk_start[rows] - before, counts) + np.arange(n, dtype=np.int64)
        row_list = rows.tolist()
        errors = [(k, req.errors[r]) for k, r in enumerate(row_list) if r in req.errors] if req.errors else []
        part = Part(
            ints={name: getattr(req, name)[rows] for name in ALL_INTS},
            cats={name: (getattr(req, name).codes[rows], list(getattr(req, name).names)) for name in ALL_CATS},
            ids=[req.ids[r] for r in row_list],
            errors=errors,
            counts=counts,
            offsets=req.chunk_offsets_ns[idx],
            tokens=req.chunk_tokens[idx],
            skipped=0,
        )
        cols.add(part, max(n, 1))
    return cols.finish()
