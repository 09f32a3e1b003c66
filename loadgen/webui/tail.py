"""A run directory's JSONL files read as they grow: each read returns only the complete lines
appended since the last one (a half-written last line waits for the next read).

``JsonlTail`` follows one file; ``RecordTail`` every ``requests*.jsonl`` (one per worker, new ones
appearing mid-run) as dicts; ``RecordBlocks`` the same files parsed block by block into the
analysis's columns (``analysis.columns_parse.parse_request_block``), each block remembering where
it lies in its file so its columns can be dropped and read back later. ``ttft_ms`` and
``chunk_gaps_s`` read one record dict. Nothing here imports Flask or Locust.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from loadgen.analysis.columns import Requests, RunLoadError, take_requests
from loadgen.analysis.columns_parse import parse_request_block
from loadgen.analysis.load import Step

I64 = npt.NDArray[np.int64]


class JsonlTail:
    """One JSONL file read from where the last read stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self._partial = b""

    def read_block(self) -> tuple[bytes, int]:
        """The complete lines appended since the last read (ending at a newline; b"" if none), and
        the byte offset in the file where they start."""
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return b"", self.offset
        if not data:
            return b"", self.offset
        start = self.offset - len(self._partial)
        self.offset += len(data)
        buf = self._partial + data
        cut = buf.rfind(b"\n") + 1
        self._partial = buf[cut:]
        return buf[:cut], start

    def read(self) -> list[dict[str, Any]]:
        return json_lines(self.read_block()[0])


def json_lines(data: bytes) -> list[dict[str, Any]]:
    """The JSON objects of complete JSONL lines; anything else is skipped, as the report's loader does."""
    out: list[dict[str, Any]] = []
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a torn line from a killed writer: the report's loader says so; the live view skips it
        if isinstance(obj, dict):
            out.append(obj)
    return out


class RecordTail:
    """Every ``requests*.jsonl`` of a run directory (one per worker; new ones appear mid-run)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._tails: dict[str, JsonlTail] = {}

    def read(self) -> list[dict[str, Any]]:
        for path in sorted(self.run_dir.glob("requests*.jsonl")):
            if path.name not in self._tails:
                self._tails[path.name] = JsonlTail(path)
        out: list[dict[str, Any]] = []
        for tail in self._tails.values():
            out.extend(tail.read())
        return out


def ttft_ms(rec: dict[str, Any]) -> float | None:
    first = rec.get("first_chunk_ns")
    if first is None:
        return None
    return float((first - rec["intended_ns"]) / 1e6)


def chunk_gaps_s(rec: dict[str, Any]) -> list[float]:
    offs = rec.get("chunk_offsets_ns") or []
    return [(b - a) / 1e9 for a, b in itertools.pairwise(offs)]


# ---------------------------------------------------------------------------------------------
# request records as column blocks


@dataclass(slots=True)
class _Block:
    """One poll's new lines of one request file: where they are, what they span, and their columns
    (None once released: read again from the file when asked for)."""

    seq: int
    path: Path
    offset: int
    size: int
    req: Requests | None
    steps: frozenset[int]
    min_sent_ns: int
    max_end_ns: int


def _reads(req: Requests, step: Step) -> npt.NDArray[np.bool_]:
    """The rows of ``req`` that ``StepAnalysis.row(step)`` reads: the step's own records, and every
    record that may have streamed tokens into its window (sent before its end, ended after its start)."""
    mask: npt.NDArray[np.bool_] = (req.step == step.step) | (
        (req.sent_ns < step.end_ns) & (req.end_ns >= step.steady_ns)
    )
    return mask


class RecordBlocks:
    """Every ``requests*.jsonl`` of a run directory, parsed block by block into columns."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.seq = 0
        self.files: dict[str, list[_Block]] = {}
        self.blocks: list[_Block] = []  # every block, in read order (``blocks[k].seq == k + 1``)
        self._tails: dict[str, JsonlTail] = {}
        self.problems: list[str] = []

    def read(self) -> list[_Block]:
        """Parse what was appended since the last read; return the new blocks."""
        for path in sorted(self.run_dir.glob("requests*.jsonl")):
            if path.name not in self._tails:
                self._tails[path.name] = JsonlTail(path)
                self.files[path.name] = []
        new: list[_Block] = []
        for name, tail in self._tails.items():
            data, start = tail.read_block()
            if not data:
                continue
            try:
                req, _ = parse_request_block(data, tail.path, start)
            except RunLoadError as exc:  # the report will name it too; the live view goes on without it
                self.problems = [*self.problems[-4:], str(exc)]
                continue
            if not req.n:
                continue
            self.seq += 1
            block = _Block(
                seq=self.seq,
                path=tail.path,
                offset=start,
                size=len(data),
                req=req,
                steps=frozenset(np.unique(req.step).tolist()),
                min_sent_ns=int(req.sent_ns.min()),
                max_end_ns=int(req.end_ns.max()),
            )
            self.files[name].append(block)
            self.blocks.append(block)
            new.append(block)
        return new

    def columns(self, block: _Block) -> Requests:
        """The block's columns; a released block is parsed again from its file (not kept)."""
        if block.req is not None:
            return block.req
        with block.path.open("rb") as f:
            f.seek(block.offset)
            data = f.read(block.size)
        req, _ = parse_request_block(data, block.path, block.offset)
        return req

    def release(self, before_ns: int) -> None:
        """Drop the columns of blocks whose records all ended before ``before_ns`` (memory stays
        that of the recent records; an old step that needs them again reads them back)."""
        for block in self.blocks:
            if block.req is not None and block.max_end_ns < before_ns:
                block.req = None

    def touches(self, block: _Block, step: Step) -> bool:
        if step.step in block.steps:
            return True
        if block.min_sent_ns >= step.end_ns or block.max_end_ns < step.steady_ns:
            return False
        return bool(_reads(self.columns(block), step).any())

    def rows_for(self, step: Step) -> Requests:
        """The records ``step``'s row reads, in the report's order (files by name, then lines)."""
        parts: list[tuple[Requests, I64]] = []
        for name in sorted(self.files):
            for block in self.files[name]:
                if step.step in block.steps or not (
                    block.min_sent_ns >= step.end_ns or block.max_end_ns < step.steady_ns
                ):
                    req = self.columns(block)
                    rows = np.flatnonzero(_reads(req, step))
                    if len(rows):
                        parts.append((req, rows))
        return take_requests(parts)
