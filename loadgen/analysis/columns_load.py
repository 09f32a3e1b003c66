"""Request files -> :class:`Requests`: :func:`load_requests`, in forked worker processes for large runs.

Files are read in blocks of about ``columns_parse.BLOCK_BYTES`` (small blocks stay in the CPU cache),
each block parsed by ``columns_parse.parse_lines``; the cyclic garbage collector is paused while
records are parsed (millions of short-lived dicts would otherwise trigger it over and over). Runs of
more than ``PARALLEL_MIN_BYTES`` are cut into byte ranges of about ``RANGE_BYTES`` that start and end
at line starts, parsed by forked worker processes that write the chunk arrays into shared memory
(:class:`_SharedChunks`); the parent slides them together, so the result is the serial parse's.
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
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from loadgen.analysis.columns import ColumnBuilder, Part, Requests, RunLoadError
from loadgen.analysis.columns_parse import BLOCK_BYTES, parse_lines

RANGE_BYTES = 16 << 20  # work unit of a worker process
PARALLEL_MIN_BYTES = 96 << 20  # below this, worker start-up costs more than it saves


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


def _parse_range(
    task: tuple[str, int, int], slots: tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]] | None = None
) -> Part:
    """Parse ``path[start:end]`` (whole lines) into one part; runs in a worker process too.

    With ``slots`` (views of shared memory) the chunk arrays are written there, not returned."""
    path_s, start, end = task
    path = Path(path_s)
    cols = ColumnBuilder(end - start, slots)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of short-lived dicts would trigger the cyclic collector over and over
    try:
        for lines, block_start in _line_blocks(path, start, end):
            cols.add(parse_lines(lines, path, block_start), sum(map(len, lines)))
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


def _parse_task(item: tuple[int, tuple[str, int, int]]) -> Part:
    k, task = item
    return _parse_range(task, _WORKER_SHARED[0].slot(k))


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
    cols = ColumnBuilder(total)
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
