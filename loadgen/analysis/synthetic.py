"""Synthetic run directories with exactly known timings, for tests and the analysis benchmark.

``make_record`` builds one RequestRecord from millisecond offsets (so a test can compute TTFT, ITL,
TPOT, E2E and tok/s by hand); ``write_run_dir`` writes a manifest, step lines and request files
exactly as a run does (``records.RequestRecord.to_json``); ``write_bulk_run`` writes a large
realistic ramp quickly (a pool of chunk patterns, many records) for performance measurements.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from loadgen.rundir.records import RequestRecord

T0_NS = 1_700_000_000_000_000_000
"""Wall-clock origin of synthetic runs (an arbitrary epoch time, ns)."""

MS = 1_000_000


def at_ms(ms: float) -> int:
    """Epoch ns of ``ms`` milliseconds after ``T0_NS`` (exact for whole microseconds)."""
    return T0_NS + round(ms * MS)


def make_record(
    rid: str,
    step: int,
    sent_ms: float,
    chunk_ms: Sequence[float] = (),
    chunk_tokens: Sequence[int] | None = None,
    *,
    end_ms: float | None = None,
    intended_ms: float | None = None,
    worker: str = "w0",
    output_tokens: int | None = -1,
    prompt_tokens: int | None = 100,
    context_tokens: int | None = None,
    tokens_source: str = "usage",
    status: int = 200,
    error_class: str | None = None,
    error: str | None = None,
    finish_reason: str | None = "length",
) -> RequestRecord:
    """A record whose times are milliseconds after ``T0_NS``.

    ``chunk_ms`` are the text chunks' arrival times relative to the send time; ``end_ms`` (also
    relative to the send time) defaults to the last chunk. ``output_tokens=-1`` means "the sum of
    chunk_tokens"; None writes null. ``chunk_tokens`` defaults to one token per chunk.
    """
    tokens = list(chunk_tokens) if chunk_tokens is not None else [1] * len(chunk_ms)
    sent = at_ms(sent_ms)
    offsets = [round(c * MS) for c in chunk_ms]
    end_rel = end_ms if end_ms is not None else (chunk_ms[-1] if chunk_ms else 0.0)
    return RequestRecord(
        id=rid,
        worker=worker,
        step=step,
        intended_ns=at_ms(intended_ms) if intended_ms is not None else sent,
        sent_ns=sent,
        first_chunk_ns=sent + offsets[0] if offsets else None,
        end_ns=sent + round(end_rel * MS),
        chunk_offsets_ns=offsets,
        chunk_tokens=tokens,
        prompt_tokens=prompt_tokens,
        output_tokens=sum(tokens) if output_tokens == -1 else output_tokens,
        tokens_source=tokens_source,
        finish_reason=finish_reason if error_class is None else None,
        status=status,
        error_class=error_class,
        error=error,
        context_tokens=context_tokens,
    )


def step_lines(
    step: int,
    start_ms: float,
    steady_ms: float | None,
    end_ms: float | None,
    *,
    concurrency: int | None = None,
    context_tokens: int | None = None,
    rate: float | None = None,
    warmup_s: float | None = None,
    reason: str = "duration",
) -> list[dict[str, Any]]:
    """The steps.jsonl lines of one step (None leaves the steady or end line out)."""
    lines: list[dict[str, Any]] = [
        {
            "step": step,
            "event": "start",
            "t_ns": at_ms(start_ms),
            "concurrency": concurrency,
            "context_tokens": context_tokens,
            "rate": rate,
            "warmup_s": warmup_s,
            "duration_s": None,
            "requests": None,
        }
    ]
    if steady_ms is not None:
        lines.append({"step": step, "event": "steady", "t_ns": at_ms(steady_ms)})
    if end_ms is not None:
        lines.append({"step": step, "event": "end", "t_ns": at_ms(end_ms), "reason": reason})
    return lines


def write_run_dir(
    path: str | os.PathLike[str],
    *,
    steps: Sequence[Mapping[str, Any]] = (),
    records: Mapping[str, Sequence[RequestRecord]] | None = None,
    manifest: Mapping[str, Any] | None = None,
    tail: Mapping[str, bytes] | None = None,
) -> Path:
    """Write a run directory: ``records`` maps a file name (``requests-w0.jsonl``) to its records;
    ``tail`` maps a file name to raw bytes appended after them (e.g. a torn line)."""
    run = Path(path)
    run.mkdir(parents=True, exist_ok=True)
    if manifest is not None:
        (run / "manifest.json").write_text(json.dumps(dict(manifest), indent=2))
    if steps:
        (run / "steps.jsonl").write_bytes(b"".join(orjson.dumps(dict(s)) + b"\n" for s in steps))
    for name, recs in (records or {}).items():
        (run / name).write_bytes(b"".join(r.to_json() for r in recs))
    for name, data in (tail or {}).items():
        with open(run / name, "ab") as fh:
            fh.write(data)
    return run


def write_bulk_run(
    path: str | os.PathLike[str],
    n_records: int,
    *,
    concurrencies: Sequence[int] = (1, 8, 32, 64, 128),
    chunks: int = 64,
    workers: int = 4,
    error_every: int = 500,
    seed: int = 0,
) -> Path:
    """A large realistic ramp: ``n_records`` spread evenly over the steps and ``workers`` files.

    Each request has ``chunks`` text chunks (TTFT ~50-150 ms, gaps ~15-25 ms, 1-3 tokens each, as a
    speculative server sends); one request in ``error_every`` fails with a read timeout.
    """
    rng = np.random.default_rng(seed)
    run = Path(path)
    run.mkdir(parents=True, exist_ok=True)
    (run / "manifest.json").write_text(
        json.dumps({"label": "bulk synthetic", "url": "http://127.0.0.1:0", "model": "synthetic"})
    )
    pool = _BulkPool.draw(rng, chunks)
    per_step = -(-n_records // len(concurrencies))
    step_out: list[bytes] = []
    files = [open(run / f"requests-w{w}.jsonl", "wb") for w in range(workers)]  # noqa: SIM115
    try:
        t = T0_NS
        written = 0
        for sid, conc in enumerate(concurrencies):
            n = min(per_step, n_records - written)
            mean_e2e_ns = 50 * MS + chunks * 20 * MS
            span = max(n * mean_e2e_ns // conc, 10 * 10**9)
            warm = span // 10
            start = {"concurrency": conc, "context_tokens": 1000, "rate": None, "warmup_s": warm / 1e9}
            step_out.append(_jsonl({"step": sid, "event": "start", "t_ns": t, **start}))
            step_out.append(_jsonl({"step": sid, "event": "steady", "t_ns": t + warm}))
            sends = np.sort(rng.integers(t, t + span, size=n)).tolist()
            picks = rng.integers(0, _BULK_POOL, size=n).tolist()
            buffers = pool.step_records(sid, written, sends, picks, workers, error_every)
            for fh, buf in zip(files, buffers, strict=True):
                fh.write(b"".join(buf))
            written += n
            t += span
            step_out.append(_jsonl({"step": sid, "event": "end", "t_ns": t, "reason": "duration"}))
            t += 10**9
    finally:
        for fh in files:
            fh.close()
    (run / "steps.jsonl").write_bytes(b"".join(step_out))
    return run


def _jsonl(line: dict[str, Any]) -> bytes:
    return orjson.dumps(line) + b"\n"


_BULK_POOL = 512  # chunk patterns a bulk run's requests draw from


@dataclass(frozen=True, slots=True)
class _BulkPool:
    """The chunk patterns a bulk run's requests draw from (offsets ns, tokens, their sums), and the
    record every request starts as."""

    chunks: int
    offsets: list[list[int]]
    tokens: list[list[int]]
    token_sums: list[int]
    base: dict[str, Any]

    @classmethod
    def draw(cls, rng: np.random.Generator, chunks: int) -> _BulkPool:
        ttft = rng.integers(50 * MS, 150 * MS, size=_BULK_POOL)
        gaps = rng.integers(15 * MS, 25 * MS, size=(_BULK_POOL, chunks))
        gaps[:, 0] = ttft
        offsets: list[list[int]] = np.cumsum(gaps, axis=1).tolist()
        tokens: list[list[int]] = rng.integers(1, 4, size=(_BULK_POOL, chunks)).tolist()
        base = asdict(RequestRecord(id="", worker="", step=0, intended_ns=0, sent_ns=0))
        base.update(status=200, tokens_source="usage", finish_reason="length", prompt_tokens=1000)
        return cls(chunks, offsets, tokens, [sum(t) for t in tokens], base)

    def step_records(
        self, sid: int, written: int, sends: list[int], picks: list[int], workers: int, error_every: int
    ) -> list[list[bytes]]:
        """The JSON lines of one step's requests, per worker file (request k goes to file k % workers);
        ``written``: requests of the earlier steps (it numbers the ids and places the failures)."""
        buffers: list[list[bytes]] = [[] for _ in range(workers)]
        dumps = orjson.dumps
        for k in range(len(sends)):
            rec = self.base.copy()
            sent = sends[k]
            p = picks[k]
            offs = self.offsets[p]
            w = k % workers
            rec["id"] = f"r{written + k:08d}"
            rec["worker"] = f"w{w}"
            rec["step"] = sid
            rec["intended_ns"] = sent
            rec["sent_ns"] = sent
            if (written + k) % error_every == error_every - 1:
                cut = self.chunks // 2
                rec.update(
                    chunk_offsets_ns=offs[:cut],
                    chunk_tokens=self.tokens[p][:cut],
                    first_chunk_ns=sent + offs[0],
                    end_ns=sent + offs[cut - 1] + 30 * 10**9,
                    output_tokens=None,
                    tokens_source="none",
                    finish_reason=None,
                    status=200,
                    error_class="read_timeout",
                    error="no chunk for 30 s",
                )
            else:
                rec["first_chunk_ns"] = sent + offs[0]
                rec["end_ns"] = sent + offs[-1] + MS
                rec["chunk_offsets_ns"] = offs
                rec["chunk_tokens"] = self.tokens[p]
                rec["output_tokens"] = self.token_sums[p]
            buffers[w].append(dumps(rec) + b"\n")
        return buffers


__all__ = ["MS", "T0_NS", "at_ms", "make_record", "step_lines", "write_bulk_run", "write_run_dir"]
