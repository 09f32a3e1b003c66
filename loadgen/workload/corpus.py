"""Built-in corpora of real text that need no network: Python's own documentation and source.

``prose`` is English from ``pydoc_data.topics`` (the language reference topics behind ``help()``),
``code`` is Python from a fixed list of standard-library modules of the running interpreter. Both
ship with CPython, so the same Python version gives the same text (a different version gives
slightly different text: requests are reproducible per seed *and* Python version).

A :class:`Corpus` keeps the text once with the start offset and cumulative estimated tokens of
every run (see :mod:`loadgen.workload.tokens`), so cutting an excerpt of N tokens is a binary
search and a string slice, not a re-count. Excerpts past the end wrap around to the start.
"""

from __future__ import annotations

import bisect
import functools
import sysconfig
from itertools import accumulate
from pathlib import Path

from loadgen.workload.errors import WorkloadError
from loadgen.workload.tokens import PIECE_RE, piece_tokens

CORPUS_NAMES = ("prose", "code")

# Stable, readable modules present in every CPython >= 3.10.
CODE_MODULES = (
    "argparse.py",
    "bisect.py",
    "calendar.py",
    "collections/__init__.py",
    "configparser.py",
    "csv.py",
    "dataclasses.py",
    "difflib.py",
    "fractions.py",
    "functools.py",
    "heapq.py",
    "json/decoder.py",
    "json/encoder.py",
    "logging/__init__.py",
    "pathlib.py",
    "random.py",
    "shlex.py",
    "statistics.py",
    "string.py",
    "textwrap.py",
)


class CorpusError(WorkloadError):
    """A built-in corpus is unavailable in this Python installation."""


class Corpus:
    """Text split into estimator runs, with an excerpt cutter.

    ``text`` always ends with a blank line, so wrapping from the end to the start never glues two
    words together.
    """

    def __init__(self, name: str, text: str) -> None:
        self.name = name
        self.text = text.rstrip() + "\n\n"
        starts: list[int] = []
        counts: list[int] = []
        word_starts: list[int] = []
        prev_space = True
        for i, m in enumerate(PIECE_RE.finditer(self.text)):
            piece = m.group()
            starts.append(m.start())
            counts.append(piece_tokens(piece))
            if prev_space and piece[0].isalpha():
                word_starts.append(i)
            prev_space = piece[0].isspace()
        if not word_starts:
            raise CorpusError(f"corpus {name!r} has no words")
        self.starts = starts
        self.cum = [0, *accumulate(counts)]  # cum[i] = tokens of runs [0, i)
        self.word_starts = word_starts
        self.total_tokens = self.cum[-1]

    def excerpt(self, start_piece: int, n_tokens: int) -> str:
        """Text from run ``start_piece`` with about ``n_tokens`` estimated tokens (never more).

        The excerpt ends on a non-space run and falls short of ``n_tokens`` by at most the size of
        one run (one or two tokens). It wraps around the corpus when it runs past the end.
        """
        return self.excerpt_counted(start_piece, n_tokens)[0]

    def excerpt_counted(self, start_piece: int, n_tokens: int) -> tuple[str, int]:
        """:meth:`excerpt` and its estimated token count, found from the run table (no re-count)."""
        if n_tokens <= 0:
            return "", 0
        cum, starts, text = self.cum, self.starts, self.text
        n_runs = len(starts)
        wraps, rest = divmod(cum[start_piece] + n_tokens, self.total_tokens)
        end = bisect.bisect_right(cum, rest) - 1  # the last run boundary within budget
        end_char = starts[end] if end < n_runs else len(text)
        if wraps == 0:
            out = text[starts[start_piece] : end_char]
        else:
            out = text[starts[start_piece] :] + text * (wraps - 1) + text[:end_char]
        tokens = wraps * self.total_tokens + cum[end] - cum[start_piece]
        short = rest - cum[end]
        if short > 0 and end < n_runs:
            # The next run does not fit whole (a long word, number or rule of dashes): take as
            # much of it as fits, so the excerpt lands on the target instead of below it.
            nxt = text[end_char : starts[end + 1] if end + 1 < n_runs else len(text)]
            part = nxt[: short * _chars_per_token(nxt)]
            if part:
                return out + part, tokens + piece_tokens(part)
        if not out:
            return "", 0
        last = end - 1 if end > 0 else n_runs - 1  # the last whole run in ``out``
        if text[starts[last]].isspace():
            tokens -= cum[last + 1] - cum[last]  # rstrip drops it
        return out.rstrip(), tokens

    def random_start(self, rng_value: float) -> int:
        """A word-start run index for ``rng_value`` in [0, 1)."""
        return self.word_starts[int(rng_value * len(self.word_starts))]


def _chars_per_token(run: str) -> int:
    """Characters of ``run`` that make one estimated token (0: whitespace, never split)."""
    first = run[0]
    if first.isspace():
        return 0
    if first.isdigit():
        return 3
    if first.isalpha():
        return 7 if run.isascii() else 1
    return 2


@functools.cache
def get_corpus(name: str) -> Corpus:
    """The built-in corpus ``name`` (``prose`` or ``code``), loaded once per process."""
    if name == "prose":
        return Corpus("prose", _prose_text())
    if name == "code":
        return Corpus("code", _code_text())
    raise CorpusError(f"unknown corpus {name!r}; built-in corpora: {', '.join(CORPUS_NAMES)}")


def _prose_text() -> str:
    try:
        from pydoc_data.topics import topics
    except ImportError:
        raise CorpusError(
            "the 'prose' corpus needs pydoc_data.topics, which this Python installation lacks "
            "(some distributions package it separately); use the 'code' corpus or a dataset file"
        ) from None
    return "\n\n".join(topics[key].strip() for key in sorted(topics))


def _code_text() -> str:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    parts = []
    for rel in CODE_MODULES:
        path = stdlib / rel
        try:
            parts.append(f"# {rel}\n" + path.read_text(encoding="utf-8").strip())
        except OSError:
            continue  # a stripped-down installation: use what is there
    if not parts:
        raise CorpusError(f"the 'code' corpus found no standard-library sources under {stdlib}")
    return "\n\n\n".join(parts)
