"""Reading validated values out of parsed TOML tables.

A :class:`Table` hands out typed values by key and, once the caller has read everything it knows,
:meth:`Table.finish` rejects the keys nobody asked for (with a "did you mean"). Every failure is a
:class:`~loadgen.workload.errors.TableError` carrying the key's dotted path, the value and what is
allowed; the scenario loader adds file and line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from loadgen.workload.errors import NO_VALUE, TableError, suggest, unknown_key

T = TypeVar("T")

_MISSING: Any = object()


def type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return type(value).__name__


def user_path(value: str | Path) -> Path:
    """``value`` as a path with ``~`` / ``~user`` expanded; as written when that home does not
    exist (pathlib raises RuntimeError), so the caller reports a missing file naming it."""
    p = Path(value)
    try:
        return p.expanduser()
    except RuntimeError:
        return p


class Table:
    """A TOML table being read; ``path`` is its dotted name (``""`` for the document root)."""

    def __init__(self, data: Any, path: str = "") -> None:
        if not isinstance(data, dict):
            raise TableError(path or "(root)", data, f"must be a table, not {type_name(data)}")
        self.data: dict[str, Any] = data
        self.path = path
        self._read: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def has(self, name: str) -> bool:
        return name in self.data

    def raw(self, name: str, default: Any = _MISSING) -> Any:
        """The value as parsed, unchecked (the caller validates it)."""
        self._read.add(name)
        if name not in self.data:
            if default is _MISSING:
                raise TableError(self.key(name), NO_VALUE, "is required")
            return default
        return self.data[name]

    def get_int(self, name: str, default: Any = _MISSING, *, min_value: int | None = None) -> Any:
        if name not in self.data:
            return self.raw(name, default)
        value = self.raw(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TableError(self.key(name), value, f"must be an integer, not {type_name(value)}")
        if min_value is not None and value < min_value:
            raise TableError(self.key(name), value, f"must be >= {min_value}")
        return value

    def get_float(
        self,
        name: str,
        default: Any = _MISSING,
        *,
        min_value: float | None = None,
        positive: bool = False,
        max_value: float | None = None,
    ) -> Any:
        if name not in self.data:
            return self.raw(name, default)
        raw = self.raw(name)
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise TableError(self.key(name), raw, f"must be a number, not {type_name(raw)}")
        try:
            value = float(raw)
        except OverflowError:  # an integer past any float (TOML's parser does not bound them)
            value = math.inf
        if not math.isfinite(value):
            raise TableError(self.key(name), raw, "must be a finite number")
        if positive and value <= 0:
            raise TableError(self.key(name), raw, "must be > 0")
        if min_value is not None and value < min_value:
            raise TableError(self.key(name), raw, f"must be >= {min_value:g}")
        if max_value is not None and value > max_value:
            raise TableError(self.key(name), raw, f"must be <= {max_value:g}")
        return value

    def get_bool(self, name: str, default: Any = _MISSING) -> Any:
        if name not in self.data:
            return self.raw(name, default)
        value = self.raw(name)
        if not isinstance(value, bool):
            raise TableError(self.key(name), value, f"must be true or false, not {type_name(value)}")
        return value

    def get_str(self, name: str, default: Any = _MISSING) -> Any:
        if name not in self.data:
            return self.raw(name, default)
        value = self.raw(name)
        if not isinstance(value, str):
            raise TableError(self.key(name), value, f"must be a string, not {type_name(value)}")
        return value

    def get_choice(self, name: str, choices: Sequence[str], default: Any = _MISSING) -> Any:
        if name not in self.data:
            return self.raw(name, default)
        value = self.get_str(name)
        if value not in choices:
            allowed = ", ".join(f'"{c}"' for c in choices)
            raise TableError(self.key(name), value, f"must be one of {allowed}{suggest(value, choices)}")
        return value

    def get_list(self, name: str, default: Any = _MISSING, *, non_empty: bool = True) -> Any:
        if name not in self.data:
            return self.raw(name, default)
        value = self.raw(name)
        if not isinstance(value, list):
            raise TableError(self.key(name), value, f"must be an array, not {type_name(value)}")
        if non_empty and not value:
            raise TableError(self.key(name), value, "must not be empty")
        return value

    def sub(self, name: str) -> Table | None:
        """The sub-table ``name``, or None when absent."""
        value = self.raw(name, None)
        if value is None:
            return None
        return Table(value, self.key(name))

    def finish(self, allowed: Sequence[str] = ()) -> None:
        """Reject keys that were never read (``allowed`` adds names to suggest and list)."""
        known = sorted({*self._read, *allowed})
        for name in self.data:
            if name not in self._read and name not in allowed:
                raise unknown_key(self.key(name), name, known)
