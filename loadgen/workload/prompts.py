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
(a local tokenizer) is passed. With the estimator a prompt of ``n`` tokens estimates at ``n`` or
at most two below it; with a tokenizer it has at most ``n`` tokens by that tokenizer.
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
    overhead = counter.count(frame.replace("{doc}", "x")) - counter.count("x")
    if n_tokens <= overhead:
        text = counter.truncate(frame.replace("{doc}", ""), n_tokens)
        return text, counter.count(text)
    doc, doc_tokens = _excerpt(corpus, n_tokens - overhead, rng, counter)
    text = frame.replace("{doc}", doc)
    if isinstance(counter, EstimatorCounter):
        return text, overhead + doc_tokens  # the estimator is additive over runs
    return text, counter.count(text)


def _excerpt(corpus_name: str, n_tokens: int, rng: random.Random, counter: TokenCounter | None) -> tuple[str, int]:
    corpus = get_corpus(corpus_name)
    if counter is None or isinstance(counter, EstimatorCounter):
        return _segments(corpus, n_tokens, rng)
    # A real tokenizer: over-draw with the estimator, then cut at the tokenizer's boundary.
    state = rng.getstate()
    budget = n_tokens + n_tokens // 4 + 16
    while True:
        rng.setstate(state)  # the same excerpt, longer
        text, _ = _segments(corpus, budget, rng)
        if counter.count(text) >= n_tokens:
            cut = counter.truncate(text, n_tokens).rstrip()
            return cut, counter.count(cut)
        budget *= 2


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
