"""Learning how the server counts prompt tokens, so that prompts built without a tokenizer are
served at the length asked for.

The estimator (:mod:`loadgen.workload.tokens`) and the server's tokenizer disagree, and by how much
depends on the text and on the server (the simulator counts ``ceil(characters / 4)`` plus 4 per chat
message; a real server runs its own tokenizer and chat template). Without a tokenizer the workload
therefore learns the server's count from the ``usage.prompt_tokens`` of its responses:

    served_tokens ~= tokens_per_char * prompt_chars + tokens_per_message * messages

fitted by least squares over every response seen (running sums: O(1) per response, no allocation).
``prompt_chars`` are the characters of the message contents (or the completions prompt) as sent,
``messages`` the number of chat messages (1 for a completions prompt): the per-message term is the
chat template's tokens. A small ridge on ``tokens_per_message`` keeps the fit defined when every
prompt has nearly the same length (then the two terms cannot be told apart and the fit becomes a
plain ratio ``served / chars``); when lengths vary it pulls the per-message term a few percent
towards 0 (a fraction of a token; the ratio absorbs it).

The load side reports each response through :class:`LengthFeedback` (the interface this part owns);
the prompt builder counts with :attr:`LengthCalibrator.counter` once :attr:`LengthCalibrator.ready`,
and takes the template's tokens (:meth:`LengthCalibrator.overhead`) off the text it builds.
Everything runs on one gevent hub per process, so no locking is needed.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["CharRatioCounter", "LengthCalibrator", "LengthFeedback"]

# Weight of the prior tokens_per_message = 0, relative to the sum of messages**2 seen.
RIDGE = 0.01
# What a tokenizer can plausibly do with text: English prose and code run 0.2-0.35 tokens per
# character, byte-level fallbacks and CJK up to ~1.5, and a chat template adds a handful of tokens per
# message. A fit outside these bounds means the server's usage does not follow the prompt (a proxy
# or a mock answering a fixed prompt_tokens): learning from it would build prompts of absurd sizes,
# so the builder keeps the estimator.
MIN_TOKENS_PER_CHAR = 0.1
MAX_TOKENS_PER_CHAR = 1.5
MAX_TOKENS_PER_MESSAGE = 64.0


class LengthFeedback(Protocol):
    """What the load side tells the workload about each served request."""

    def observe(self, prompt_chars: int, messages: int, served_tokens: int) -> None:
        """One successful response: the prompt's characters and chat messages as sent, and the
        server's ``usage.prompt_tokens`` for it."""
        ...


class CharRatioCounter:
    """A :class:`~loadgen.workload.tokens.TokenCounter` that counts ``round(len(text) * tokens_per_char)``.

    O(1) to count, a slice to truncate. Its ratio is set by :class:`LengthCalibrator`.
    """

    name = "calibrated"

    def __init__(self, tokens_per_char: float = 0.25) -> None:
        self.tokens_per_char = tokens_per_char

    def count(self, text: str) -> int:
        return round(len(text) * self.tokens_per_char)

    def truncate(self, text: str, n_tokens: int) -> str:
        if n_tokens <= 0:
            return ""
        chars = int((n_tokens + 0.5) / self.tokens_per_char)
        while chars > 0 and round(chars * self.tokens_per_char) > n_tokens:
            chars -= 1
        return text[:chars]


class LengthCalibrator:
    """Fits ``served = tokens_per_char * chars + tokens_per_message * messages`` from responses.

    Implements :class:`LengthFeedback`. Observations with no characters or no served tokens are
    ignored (a server that sends no usage teaches nothing). Until the first observation, and while
    the fit is outside what a tokenizer can do (``MIN_TOKENS_PER_CHAR`` ... ``MAX_TOKENS_PER_CHAR``,
    at most ``MAX_TOKENS_PER_MESSAGE``), :attr:`ready` is False and the prompt builder keeps the
    estimator.
    """

    def __init__(self) -> None:
        self.observations = 0
        self.plausible = False
        self.tokens_per_char = 0.0
        self.tokens_per_message = 0.0
        self.counter = CharRatioCounter()
        # running sums of the normal equations (x: chars, m: messages, y: served tokens)
        self._sxx = self._sxm = self._smm = self._sxy = self._smy = 0.0

    @property
    def ready(self) -> bool:
        return self.observations > 0 and self.plausible

    def observe(self, prompt_chars: int, messages: int, served_tokens: int) -> None:
        if prompt_chars <= 0 or served_tokens <= 0:
            return
        x, m, y = float(prompt_chars), float(max(messages, 0)), float(served_tokens)
        self.observations += 1
        self._sxx += x * x
        self._sxm += x * m
        self._smm += m * m
        self._sxy += x * y
        self._smy += m * y
        smm = self._smm * (1.0 + RIDGE)
        det = self._sxx * smm - self._sxm * self._sxm
        a = (self._sxy * smm - self._sxm * self._smy) / det if det > 0 else 0.0
        b = (self._sxx * self._smy - self._sxm * self._sxy) / det if det > 0 else 0.0
        if a <= 0.0 or b < 0.0:  # degenerate, or a template cannot remove tokens: the plain ratio
            a, b = self._sxy / self._sxx, 0.0
        self.plausible = MIN_TOKENS_PER_CHAR <= a <= MAX_TOKENS_PER_CHAR and 0.0 <= b <= MAX_TOKENS_PER_MESSAGE
        self.tokens_per_char = a
        self.tokens_per_message = b
        if self.plausible:
            self.counter.tokens_per_char = a

    def overhead(self, messages: int) -> int:
        """Tokens the server adds to the text of a request with ``messages`` chat messages."""
        return round(self.tokens_per_message * messages)

    def predict(self, prompt_chars: int, messages: int) -> float:
        """The served tokens the fit expects for a prompt of this size."""
        return self.tokens_per_char * prompt_chars + self.tokens_per_message * messages
