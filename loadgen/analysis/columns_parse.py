"""One block of ``requests*.jsonl`` lines -> the columns of its records (a :class:`Part`).

:func:`parse_lines` is the only code that reads the text of request records. A line that is not a
JSON object (a torn last line after kill -9) is skipped and counted; a record field of the wrong type
raises :class:`RunLoadError` naming the file, the field (or the line) and what to do.

Fast for large runs: the two per-chunk arrays of a record are cut out of its line as text and parsed
in one numpy call per block (they are most of the bytes, and turning them into Python ints is what
costs); orjson parses the rest of the line. A block any line of which does not fit that fast path
is parsed line by line instead. :func:`parse_request_block` parses appended blocks of a growing file
(the web UI's live view) the way ``columns_load.load_requests`` parses whole files.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from loadgen.analysis.columns import (
    ALL_CATS,
    CAT_FIELDS,
    I32,
    I64,
    INT_FIELDS,
    NEW_CAT_FIELDS,
    NEW_INT_FIELDS,
    TIMING_TOLERANCE_NS,
    ColumnBuilder,
    Part,
    Requests,
    RunLoadError,
)

BLOCK_BYTES = 1 << 20  # small blocks stay in the CPU cache and reuse the allocator's memory
_OFF_KEY = b'"chunk_offsets_ns":['
_TOK_KEY = b'"chunk_tokens":['


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


_KEYS = (*INT_FIELDS, *CAT_FIELDS, "id", "error")
_ALL_KEYS = itemgetter(*_KEYS)
_NEW_KEYS = (*NEW_INT_FIELDS, *NEW_CAT_FIELDS)
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


def _columns(batch: _Batch, path: Path, skipped: int) -> Part:
    recs = batch.recs
    try:
        columns: list[Sequence[Any]] = list(zip(*map(_ALL_KEYS, recs), strict=True)) if recs else []
    except KeyError:  # a writer that leaves keys out: absent = default
        columns = [[r.get(k, INT_FIELDS.get(k)) for r in recs] for k in _KEYS]
    if not columns:
        columns = [() for _ in _KEYS]
    by_key = dict(zip(_KEYS, columns, strict=True))
    by_key.update(_new_columns(recs))
    ints = {name: _int_column(by_key[name], name, d, path) for name, d in INT_FIELDS.items()}
    ints.update({name: _int_column(by_key[name], name, d, path) for name, d in NEW_INT_FIELDS.items()})
    ints["late_first_ns"], ints["late_gaps"] = _late_columns(recs, batch.counts)
    cats = {
        name: _cat_column([v if v is not None else "" for v in by_key[name]] if name == "chunk_clock" else by_key[name])
        for name in ALL_CATS
    }
    err_col = by_key["error"]
    errors: list[tuple[int, str]] = []
    if err_col.count(None) != len(err_col):
        errors = [(k, str(m)) for k, m in enumerate(err_col) if m is not None]
    return Part(
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
        defaults: dict[str, Any] = {**NEW_INT_FIELDS, "conversation": None, "source": None, "tenant": None}
        return {k: [r.get(k, defaults[k]) for r in recs] for k in _NEW_KEYS}


def _late_columns(recs: list[dict[str, Any]], counts: list[int]) -> tuple[I64, I64]:
    """Per record: by how much its TTFT may read long (its first chunk's bound, from the sparse
    ``chunk_late_ns`` pairs, plus ``send_late_ns``, the time before its request went out), and how
    many of its gaps have an end bounded by more than the tolerance (most records have neither)."""
    first = np.zeros(len(recs), dtype=np.int64)
    gaps = np.zeros(len(recs), dtype=np.int64)
    for k, rec in enumerate(recs):
        send = rec.get("send_late_ns")
        if type(send) is int and send > 0:
            first[k] = send
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
                first[k] += ns
            if ns > TIMING_TOLERANCE_NS:
                if 1 <= i < n:
                    touched.add(i)  # the gap that ends at chunk i
                if i + 1 < n:
                    touched.add(i + 1)  # the gap that starts at it
        gaps[k] = len(touched)
    return first, gaps


def parse_lines(lines: list[bytes], path: Path, block_start: int) -> Part:
    """One block of request lines -> columns (fast path, else line by line)."""
    batch = _fast_batch(lines)
    skipped = 0
    if batch is None:
        batch, skipped = _slow_batch(lines, path, block_start)
    return _columns(batch, path, skipped)


def parse_request_block(data: bytes, path: Path, offset: int = 0) -> tuple[Requests, int]:
    """Complete lines of one request file (``data`` read from byte ``offset``, ending at a newline)
    as columns, and how many lines were skipped: the parse ``columns_load.load_requests`` does, for a reader
    that follows a growing file one appended block at a time (the web UI's live view).
    Raises RunLoadError as ``load_requests`` does."""
    cols = ColumnBuilder(len(data))
    pos = 0
    while pos < len(data):  # in blocks of about BLOCK_BYTES, as load_requests reads (cache-sized)
        cut = data.find(b"\n", pos + BLOCK_BYTES) + 1 or len(data)
        lines = data[pos:cut].split(b"\n")
        if not lines[-1]:
            lines.pop()
        if lines:
            cols.add(parse_lines(lines, path, offset + pos), cut - pos)
        pos = cut
    return cols.finish(), cols.skipped
