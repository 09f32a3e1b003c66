"""Counting tokens: a local tokenizer when the user points at one, an estimator otherwise.

Nothing here downloads anything. A tokenizer is used only when given as a path to a local
``tokenizer.json`` (or a local Hugging Face model directory that holds one), and only if the
``tokenizers`` package is installed; otherwise :class:`TokenizerError` says what to do.

The estimator splits text into runs (letters, digits, whitespace, punctuation) and counts each
run on its own, so the estimate of a text cut at run boundaries is exactly the sum of its runs'
estimates. The prompt builder relies on that to hit a target length without re-counting. On
English prose it gives about four characters per token, close to the BPE vocabularies of current
chat models (cl100k / Llama 3 class); the server's ``usage`` stays the truth for what was served.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Protocol

from loadgen.workload.errors import WorkloadError
from loadgen.workload.tables import user_path

# Maximal runs of one character class; adjacent runs always differ in class, so any substring cut
# at run boundaries splits into the same runs again (the additivity the prompt builder needs).
PIECE_RE = re.compile(r"[^\W\d_]+|\d+|\s+|[^\w\s]+|_+")


def piece_tokens(piece: str) -> int:
    """Estimated tokens of one run from :data:`PIECE_RE`."""
    first = piece[0]
    if first.isspace():
        # A single space is absorbed by the next word (" the" is one token); newlines and
        # indentation cost about one token per run.
        return 0 if piece == " " else 1 + len(piece) // 16
    if first.isdigit():
        return -(-len(piece) // 3)  # digits are split into groups of up to three
    if first.isalpha():
        if piece.isascii():
            return -(-len(piece) // 7)  # common words are one token, long ones two or three
        return len(piece)  # CJK and other scripts: about one token per character
    return -(-len(piece) // 2)  # punctuation and underscores: pairs often merge


def estimate_tokens(text: str) -> int:
    """Estimated token count of ``text`` (no tokenizer needed; deterministic)."""
    return sum(piece_tokens(p) for p in PIECE_RE.findall(text))


class TokenCounter(Protocol):
    """What the prompt builder needs from a tokenizer."""

    name: str

    def count(self, text: str) -> int:
        """Number of tokens of ``text`` (no special tokens)."""
        ...

    def truncate(self, text: str, n_tokens: int) -> str:
        """The longest prefix of ``text`` that has at most ``n_tokens`` tokens."""
        ...


class EstimatorCounter:
    """:func:`estimate_tokens` behind the :class:`TokenCounter` interface."""

    name = "estimate"

    def count(self, text: str) -> int:
        return estimate_tokens(text)

    def truncate(self, text: str, n_tokens: int) -> str:
        total = 0
        for m in PIECE_RE.finditer(text):
            total += piece_tokens(m.group())
            if total > n_tokens:
                return text[: m.start()]
        return text


class TokenizerError(WorkloadError):
    """A tokenizer path that cannot be used; the message says why and what to do."""


class HFTokenizerCounter:
    """A local Hugging Face ``tokenizer.json`` loaded with the ``tokenizers`` package."""

    def __init__(self, path: str | Path) -> None:
        file = resolve_tokenizer_file(path)
        try:
            from tokenizers import Tokenizer  # optional dependency
        except ImportError:
            raise TokenizerError(
                f"tokenizer {file}: the 'tokenizers' package is not installed; install it "
                "(pip install tokenizers) or leave the tokenizer out to use the built-in estimator"
            ) from None
        try:
            self._tok: Any = Tokenizer.from_file(str(file))
        except Exception as exc:  # the Rust side raises its own exception type
            raise TokenizerError(f"tokenizer {file}: cannot load it: {exc}") from None
        self.name = f"tokenizer:{file}"

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def truncate(self, text: str, n_tokens: int) -> str:
        enc = self._tok.encode(text, add_special_tokens=False)
        if len(enc.ids) <= n_tokens:
            return text
        if n_tokens <= 0:
            return ""
        return text[: enc.offsets[n_tokens - 1][1]]


def resolve_tokenizer_file(path: str | Path) -> Path:
    """``path`` itself if it is a file, ``path/tokenizer.json`` if it is a directory."""
    p = user_path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
        if not p.is_file():
            raise TokenizerError(
                f"tokenizer directory {path} has no tokenizer.json; point at a local Hugging Face "
                "model directory or a tokenizer.json file (nothing is downloaded)"
            )
    elif not p.is_file():
        raise TokenizerError(
            f"tokenizer {path}: no such file or directory; give a local tokenizer.json or model "
            "directory (nothing is downloaded), or leave it out to use the estimator"
        )
    return p


def load_counter(path: str | Path | None) -> TokenCounter:
    """A tokenizer for ``path``, or the estimator when ``path`` is None."""
    if path is None:
        return EstimatorCounter()
    return HFTokenizerCounter(path)
