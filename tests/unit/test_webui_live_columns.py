"""The two column helpers the live view reads requests with (``analysis.columns_parse``,
``analysis.columns``): a file parsed block by block is the file parsed at once, and rows taken from
blocks are those rows of the run."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import numpy as np

from loadgen.analysis.columns import Categorical, Requests, take_requests
from loadgen.analysis.columns_load import load_requests
from loadgen.analysis.columns_parse import parse_request_block
from tests.unit.test_webui_live import make_records


def _rows(req: Requests) -> list[dict[str, object]]:
    """Each row as plain values (categoricals by name, chunks as lists), to compare across tables."""
    out = []
    for i in range(req.n):
        row: dict[str, object] = {"id": req.ids[i], "error": req.errors.get(i)}
        for f in fields(req):
            col = getattr(req, f.name)
            if isinstance(col, Categorical):
                row[f.name] = col.names[int(col.codes[i])]
            elif isinstance(col, np.ndarray) and len(col) == req.n:
                row[f.name] = int(col[i])
        offs, toks = req.chunks_of(i)
        row["chunks"] = (offs.tolist(), toks.tolist())
        out.append(row)
    return out


def test_blocks_parse_as_the_whole_file(tmp_path: Path) -> None:
    data = b"".join(make_records()["w0"])
    path = tmp_path / "requests-w0.jsonl"
    path.write_bytes(data)
    whole, skipped = load_requests([path], workers=1)
    cut = data.index(b"\n", len(data) // 3) + 1
    first, s1 = parse_request_block(data[:cut], path)
    second, s2 = parse_request_block(data[cut:] + b"{torn", path, cut)  # a torn last line is skipped
    assert skipped == s1 == 0 and s2 == 1
    assert _rows(first) + _rows(second) == _rows(whole)
    empty, _ = parse_request_block(b"", path)
    assert empty.n == 0 and len(empty.chunk_start) == 1


def test_take_keeps_rows_in_the_order_given(tmp_path: Path) -> None:
    recs = make_records()
    a, _ = parse_request_block(b"".join(recs["w0"]), tmp_path / "requests-w0.jsonl")
    b, _ = parse_request_block(b"".join(recs["w1"]), tmp_path / "requests-w1.jsonl")
    rows_a = np.flatnonzero(a.step == 1)
    rows_b = np.flatnonzero((b.step == 2) | (b.error_class.codes != b.error_class.code_of(None)))
    taken = take_requests([(a, rows_a), (b, np.empty(0, dtype=np.int64)), (b, rows_b)])
    expected = [_rows(a)[i] for i in rows_a.tolist()] + [_rows(b)[i] for i in rows_b.tolist()]
    assert _rows(taken) == expected
    assert any(r["error"] for r in expected)  # error messages travel with their rows
    assert take_requests([]).n == 0
