"""Errors a user sees when a workload cannot be built; each message says what to change."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

NO_VALUE: Any = object()
"""Marks a :class:`TableError` about a key as such (unknown or missing), not about its value."""


class WorkloadError(ValueError):
    """A workload input (scenario, distribution, dataset, trace) that cannot be used."""


class TableError(WorkloadError):
    """A bad value inside a specification table.

    ``key`` is the dotted path of the offending key relative to the table being parsed (for
    example ``"sigma"`` or ``"components[1].weight"``); the scenario loader prefixes the table's own
    path and adds the file and line.
    """

    def __init__(self, key: str, value: Any, problem: str) -> None:
        self.key = key
        self.value = value
        self.problem = problem
        super().__init__(self.describe(key))

    def describe(self, key: str) -> str:
        """The message with ``key`` as the key's name (the scenario loader passes the full path)."""
        if self.value is NO_VALUE:
            return f"{key}: {self.problem}"
        return f"{key} = {show_value(self.value)}: {self.problem}"


class DatasetError(WorkloadError):
    """A dataset or trace file that is missing or malformed (``line`` is 1-based, or None)."""

    def __init__(self, path: object, line: int | None, problem: str) -> None:
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{path}:{line}" if line is not None else f"{path}"
        super().__init__(f"{where}: {problem}")


def show_value(value: Any) -> str:
    """A value as it would be written in TOML-ish form, shortened for messages."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        text = str(int(value))  # 20.0 from a cross-check reads as the 20 the user wrote
    elif isinstance(value, str):
        text = f'"{value}"'
    else:
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def suggest(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean "x"?)`` for the closest of ``choices``, or an empty string."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f' (did you mean "{close[0]}"?)' if close else ""


def unknown_key(key: str, name: str, allowed: Iterable[str]) -> TableError:
    """The error for key ``name`` (full path ``key``) that is not one of ``allowed``."""
    allowed = sorted(allowed)
    listed = ", ".join(allowed) if allowed else "none"
    return TableError(key, NO_VALUE, f"unknown key{suggest(name, allowed)}; allowed keys here: {listed}")
