"""Prompts of a chosen length built from real text (see :mod:`loadgen.workload.corpus`).

Speculative decoders accept more draft tokens on predictable text, so random-token prompts give
speed-ups no user sees; these prompts are real English and real Python instead.

Sources:

- ``prose``: excerpts of Python's documentation, each starting at a random word;
- ``code``: excerpts of standard-library source, each starting at a random word;
- ``chat``: a user request built on an excerpt: summarise, explain, continue, or answer a
  question about a document (prose or code, chosen at random).

Long prompts are made of excerpts of up to 1024 tokens from independent starts (like the retrieved
chunks of a RAG context), so that two prompts share a prefix only where a scenario asks for it.

Lengths are counted with the estimator unless a :class:`~loadgen.workload.tokens.TokenCounter`
(a local tokenizer, or the ratio learned from the server's usage) is passed. With the estimator a
prompt of ``n`` tokens estimates at ``n`` or at most two below it (no re-count: the estimator is
additive over runs). With any other counter it has exactly ``n`` tokens by that counter
(:func:`fit_text`): the text is over-drawn, cut with the counter's ``truncate``, and the cut then
moved, a token and then a character at a time (starting a word later if no nearby end will do),
until the assembled prompt (instruction frame included) counts ``n``. Should none count exactly
``n`` (not seen with byte-level or SentencePiece-style BPE on these corpora) the closest is
returned, and the count returned says so.
"""

from __future__ import annotations

import random

from loadgen.workload.corpus import Corpus, get_corpus
from loadgen.workload.tokens import EstimatorCounter, TokenCounter, estimate_tokens

__all__ = [
    "CHAT_TASKS",
    "PROMPT_SOURCES",
    "build_chat_prompt",
    "build_prompt",
    "chat_prompt_with_count",
    "estimate_tokens",
    "fit_text",
    "prompt_with_count",
]

PROMPT_SOURCES = ("prose", "code", "chat")
CHAT_TASKS = ("summarise", "explain", "continue", "answer")

_TEMPLATES: dict[tuple[str, str], str] = {
    ("summarise", "prose"): (
        "Summarise the following passage from the Python documentation in a few short paragraphs. "
        "Keep the technical details that matter.\n\n{doc}"
    ),
    ("summarise", "code"): (
        "Summarise what this Python module excerpt is for and how its parts fit together.\n\n```python\n{doc}\n```"
    ),
    ("explain", "prose"): (
        "Explain the following passage to a programmer who is new to Python. Use a small example "
        "where it helps.\n\n{doc}"
    ),
    ("explain", "code"): (
        "Explain what the following Python code does, step by step, and point out anything "
        "surprising.\n\n```python\n{doc}\n```"
    ),
    ("continue", "prose"): "Continue the following text in the same style and level of detail.\n\n{doc}",
    ("continue", "code"): "Continue this Python code in the same style.\n\n```python\n{doc}\n```",
    ("answer", "prose"): (
        "Read the document below and answer the question that follows it.\n\n{doc}\n\nQuestion: {question}"
    ),
    ("answer", "code"): (
        "Read the code below and answer the question that follows it.\n\n```python\n{doc}\n```\n\nQuestion: {question}"
    ),
}

_QUESTIONS: dict[str, tuple[str, ...]] = {
    "prose": (
        "What are the main rules this document describes?",
        "Which of these behaviours would most likely surprise a new user, and why?",
        "Give three concrete examples that illustrate the document.",
        "What does the document say about errors, and when are they raised?",
    ),
    "code": (
        "Which function here is the most complex, and what are its edge cases?",
        "What would you test first in this code, and how?",
        "Are there any bugs or performance problems in this code?",
        "How would you simplify this code without changing its behaviour?",
    ),
}

_ESTIMATOR = EstimatorCounter()
SEGMENT_TOKENS = 1024


def build_prompt(
    n_tokens: int,
    rng: random.Random,
    source: str = "prose",
    counter: TokenCounter | None = None,
) -> str:
    """Real text of about ``n_tokens`` tokens from ``source`` (``prose``, ``code`` or ``chat``).

    Deterministic for a given ``rng`` state. ``counter`` is a local tokenizer; without one the
    estimator (:func:`estimate_tokens`) counts. Raises ValueError for a negative length or an
    unknown source.
    """
    return prompt_with_count(n_tokens, rng, source, counter)[0]


def prompt_with_count(
    n_tokens: int,
    rng: random.Random,
    source: str = "prose",
    counter: TokenCounter | None = None,
) -> tuple[str, int]:
    """:func:`build_prompt` and the prompt's token count, without counting the text again."""
    if n_tokens < 0:
        raise ValueError(f"prompt length must be >= 0 tokens, got {n_tokens}")
    if source == "chat":
        return chat_prompt_with_count(n_tokens, rng, counter=counter)
    if source not in ("prose", "code"):
        raise ValueError(f"unknown prompt source {source!r}; use one of {', '.join(PROMPT_SOURCES)}")
    return _excerpt(source, n_tokens, rng, counter)


def build_chat_prompt(
    n_tokens: int,
    rng: random.Random,
    task: str | None = None,
    corpus: str | None = None,
    counter: TokenCounter | None = None,
) -> str:
    """A chat-style request of about ``n_tokens`` tokens: an instruction around a real excerpt.

    ``task`` is one of :data:`CHAT_TASKS` and ``corpus`` ``prose`` or ``code``; each is drawn
    from ``rng`` when None. When ``n_tokens`` is smaller than the instruction itself the
    instruction is returned cut to length.
    """
    return chat_prompt_with_count(n_tokens, rng, task, corpus, counter)[0]


_FRAME_TOKENS: dict[str, int] = {}  # a chat frame's tokens by the estimator (templates x questions)


def chat_prompt_with_count(
    n_tokens: int,
    rng: random.Random,
    task: str | None = None,
    corpus: str | None = None,
    counter: TokenCounter | None = None,
) -> tuple[str, int]:
    """:func:`build_chat_prompt` and the prompt's token count."""
    counter = counter or _ESTIMATOR
    task = task if task is not None else rng.choice(CHAT_TASKS)
    corpus = corpus if corpus is not None else rng.choice(("prose", "code"))
    if (task, corpus) not in _TEMPLATES:
        raise ValueError(f"unknown chat task {task!r} / corpus {corpus!r}; tasks: {', '.join(CHAT_TASKS)}")
    template = _TEMPLATES[(task, corpus)]
    question = rng.choice(_QUESTIONS[corpus])
    frame = template.replace("{question}", question)
    # Measure the frame around a one-word stand-in, so the runs either side of the excerpt are
    # counted as they will be once it is in place (the excerpt starts and ends like a word).
    additive = isinstance(counter, EstimatorCounter)
    overhead = _FRAME_TOKENS.get(frame) if additive else None
    if overhead is None:
        overhead = counter.count(frame.replace("{doc}", "x")) - counter.count("x")
        if additive:  # the estimator's count of a frame never changes: counted once a process
            _FRAME_TOKENS[frame] = overhead
    if n_tokens <= overhead:
        if additive:
            text = counter.truncate(frame.replace("{doc}", ""), n_tokens)
            return text, counter.count(text)
        return fit_text("", frame.replace("{doc}", ""), "", n_tokens, counter)
    if additive:
        doc, doc_tokens = _segments(get_corpus(corpus), n_tokens - overhead, rng)
        return frame.replace("{doc}", doc), overhead + doc_tokens  # the estimator is additive over runs
    head, _, tail = frame.partition("{doc}")
    return fit_text(head, _overdraw(get_corpus(corpus), n_tokens - overhead, rng, counter), tail, n_tokens, counter)


def _excerpt(corpus_name: str, n_tokens: int, rng: random.Random, counter: TokenCounter | None) -> tuple[str, int]:
    corpus = get_corpus(corpus_name)
    if counter is None or isinstance(counter, EstimatorCounter):
        return _segments(corpus, n_tokens, rng)
    if n_tokens == 0:
        return "", 0
    return fit_text("", _overdraw(corpus, n_tokens, rng, counter), "", n_tokens, counter)


def _overdraw(corpus: Corpus, n_tokens: int, rng: random.Random, counter: TokenCounter) -> str:
    """Text from ``corpus`` of at least ``n_tokens`` by ``counter``, drawn with the estimator."""
    state = rng.getstate()
    budget = n_tokens + n_tokens // 4 + 16
    while True:
        rng.setstate(state)  # the same excerpt, longer
        text, _ = _segments(corpus, budget, rng)
        if counter.count(text) >= n_tokens:
            return text
        budget *= 2


MAX_TOKEN_STEPS = 4
CHAR_WINDOW = 32
MAX_STARTS = 4


def fit_text(head: str, long: str, tail: str, n_tokens: int, counter: TokenCounter) -> tuple[str, int]:
    """``head + piece + tail`` counting ``n_tokens`` by ``counter``, ``piece`` a piece of ``long``.

    The piece starts at the start of ``long`` and ends where :func:`_fit_end` finds; a tokenizer's
    count can step over the target at every nearby end (a blank line before punctuation counts two
    at once), and then the piece starts one word later (up to :data:`MAX_STARTS` words).
    Returns the text and its count: ``n_tokens``, or the closest count found.
    """
    best_text, best_err = "", n_tokens + 1
    for start in _word_starts(long, MAX_STARTS):
        text, err = _fit_end(head, long[start:] if start else long, tail, n_tokens, counter)
        if err == 0:
            return text, n_tokens
        if abs(err) < abs(best_err):
            best_text, best_err = text, err
    return best_text, n_tokens + best_err


def _word_starts(text: str, n: int) -> list[int]:
    """0 and the starts of the next ``n - 1`` words of ``text``."""
    starts = [0]
    i = 0
    while len(starts) < n:
        space = text.find(" ", i)
        if space < 0 or space + 1 >= len(text):
            break
        i = space + 1
        starts.append(i)
    return starts


def _fit_end(head: str, long: str, tail: str, n_tokens: int, counter: TokenCounter) -> tuple[str, int]:
    """``head + long[:cut] + tail`` counting ``n_tokens``, and its error (0, or the smallest seen).

    Starts from ``counter.truncate`` (one count of the excerpt), corrects by whole tokens (a cut in
    the middle of a merge, the frame's text fusing with the excerpt's ends), then tries the cuts up
    to :data:`CHAR_WINDOW` characters either side, nearest first (a count is not monotonic in the
    cut: a character can complete a merge).
    """

    def count_at(cut: int) -> int:
        return counter.count(head + long[:cut] + tail)

    fixed = counter.count(head + "x" + tail) - counter.count("x")
    want = max(0, n_tokens - fixed)
    cut = len(counter.truncate(long, want))
    best_cut, best_err = cut, n_tokens + 1
    for _ in range(MAX_TOKEN_STEPS):
        err = count_at(cut) - n_tokens
        if abs(err) < abs(best_err):
            best_cut, best_err = cut, err
        if err == 0:
            return head + long[:cut] + tail, 0
        want = max(0, want - err)
        moved = len(counter.truncate(long, want))
        if moved == cut:
            break
        cut = moved
    centre = best_cut
    for distance in range(1, CHAR_WINDOW + 1):
        # towards the target first: longer when short of it, shorter when over
        for cut in (centre - distance, centre + distance) if best_err > 0 else (centre + distance, centre - distance):
            if not 0 <= cut <= len(long):
                continue
            err = count_at(cut) - n_tokens
            if abs(err) < abs(best_err):
                best_cut, best_err = cut, err
            if err == 0:
                return head + long[:cut] + tail, 0
    return head + long[:best_cut] + tail, best_err


def _segments(corpus: Corpus, n_tokens: int, rng: random.Random) -> tuple[str, int]:
    """``n_tokens`` of text as excerpts of at most :data:`SEGMENT_TOKENS` from independent starts.

    Two prompts that happen to start at the same word then share at most one segment, not their
    whole length: a server's prefix cache cannot turn a chance collision into a free 16k-token
    prefill. Segments are separated by a blank line (one token) and make up each other's shortfall.
    Returns the text and its estimated token count.
    """
    parts: list[str] = []
    left = n_tokens
    while left > 0:
        sep = 1 if parts else 0
        want = min(left - sep, SEGMENT_TOKENS)
        if want <= 0:
            break
        text, tokens = corpus.excerpt_counted(corpus.random_start(rng.random()), want)
        if not text:
            break
        parts.append(text)
        left -= tokens + sep
    return "\n\n".join(parts), n_tokens - left
