"""Numbers as every output writes them: report.md and report.html, the live page, the campaign and
comparison tables, console lines. One definition per style, so a figure reads the same wherever it
appears. Pure: values in, text out; a value that is not a finite number (None, nan, a string) is
``missing`` (``MISSING``, "–", unless the caller's table uses another mark).

- :func:`fixed`: a table cell, ``digits`` decimals with thousands separators; whole numbers whole.
- :func:`prose`: a measured value in a sentence or a chart label, three significant figures.
- :func:`sig3`: a comparison cell, whole above 100, else three significant figures.
- :func:`percent`: a fraction as a percentage; :func:`ratio`: "1.23x".
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from loadgen.analysis.values import number

MISSING = "–"


def fixed(value: Any, digits: int = 1, missing: str = MISSING) -> str:
    """``1234.5`` -> "1,234.5" (``digits`` decimals), ``1234`` (an int) -> "1,234"."""
    v = number(value)
    if v is None:
        return missing
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return f"{int(value):,}"
    return f"{v:,.{digits}f}"


def prose(value: float) -> str:
    """Three significant figures with thousands separators: 1,234; 56.8; 3.14; 0.0123."""
    if not math.isfinite(value):
        return MISSING
    av = abs(value)
    if av >= 100:
        return f"{value:,.0f}"
    if av >= 10:
        return f"{value:,.1f}"
    if av >= 1:
        return f"{value:,.2f}"
    return f"{value:.3g}"


def sig3(value: Any, missing: str = MISSING) -> str:
    """Whole with separators from 100 up ("4,093"), three significant figures below ("2.06")."""
    v = number(value)
    if v is None:
        return missing
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def percent(fraction: Any, digits: int = 0, missing: str = MISSING) -> str:
    """``0.253`` -> "25%" (``digits`` decimals)."""
    v = number(fraction)
    return missing if v is None else f"{100 * v:.{digits}f}%"


def ratio(value: Any, missing: str = MISSING) -> str:
    """``1.234`` -> "1.23x"."""
    v = number(value)
    return missing if v is None else f"{v:.2f}x"


__all__ = ["MISSING", "fixed", "percent", "prose", "ratio", "sig3"]
