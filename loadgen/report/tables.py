"""steps.csv: one row per step, the summary's step dicts flattened into columns.

Nested dicts become ``<key>_<subkey>`` columns (``ttft_ms_p99``, ``errors_connection_refused``);
lists become JSON text. Columns keep the order of the step dict; a column that only later steps
have (an error class, an enricher's key) sits with its group. ``errors_*`` cells of a step without
that error are 0; other missing cells and None are empty.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Sequence

import orjson

from loadgen.analysis.contracts import StepSummary


def _flatten(key: str, value: object) -> Iterator[tuple[str, object]]:
    if isinstance(value, dict):
        for sub, v in value.items():
            yield from _flatten(f"{key}_{sub}", v)
    elif isinstance(value, (list, tuple)):
        yield key, orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY, default=str).decode()
    else:
        yield key, value


def flat_rows(steps: Sequence[StepSummary]) -> tuple[list[str], list[dict[str, object]]]:
    """(columns, rows) for the step dicts, whatever keys they carry; each row maps column -> cell
    value."""
    groups: dict[str, list[str]] = {}
    rows: list[dict[str, object]] = []
    for step in steps:
        row: dict[str, object] = {}
        for top, value in step.items():
            cols = groups.setdefault(top, [])
            for col, v in _flatten(top, value):
                if col not in cols:
                    cols.append(col)
                row[col] = v
        rows.append(row)
    columns = [c for cols in groups.values() for c in cols]
    for row in rows:
        for col in groups.get("errors", ()):
            row.setdefault(col, 0)
    return columns, rows


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(round(value, 6))
    return str(value)


EMPTY_HEADER = (
    "step",
    "concurrency",
    "context_tokens",
    "output_tok_s",
    "per_request_tok_s",
    "requests_ok",
    "requests_failed",
    "valid",
    "invalid_reason",
)


def steps_csv(steps: Sequence[StepSummary]) -> str:
    """The text of steps.csv (header line, then one line per step; a short header for no steps)."""
    columns, rows = flat_rows(steps)
    if not columns:
        columns = list(EMPTY_HEADER)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in columns])
    return out.getvalue()


__all__ = ["flat_rows", "steps_csv"]
