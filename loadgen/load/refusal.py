"""A run that cannot succeed: the server refuses the first requests, all with the same client error.

A server that answers 400 to every request (llama.cpp's server to a request id that is not a UUID,
a gateway to a header it does not like, vLLM to a body field it does not know) would otherwise be
"measured" for the whole ramp: thousands of failed records, a report of nothing, exit 0. Before any
call has succeeded, ``RefusalWatch`` counts the calls that failed with one HTTP client error (4xx
but 404, which says the endpoint is missing and has its own message, and 429, a rate limit that
passes); ``REFUSED_STREAK`` in a row with the same status stop the ramp (``loadgen.run.ramp``)
with one line: the status, the server's answer (or that its body was empty), the request that
caused it (its headers, the API key redacted, and the shape of its body, never the prompt text)
and what to try. Once one call has succeeded the watch is off: later 4xx are the server's answers
to those requests, measured like any error.

Server errors count too, more cautiously: ``FAILED_STREAK`` calls in a row that got the same 5xx
with the same answer. llama-cpp-python answers a body field it cannot parse (``temperature="hot"``)
with 500 and a validation message, every time; a server that fails now and then, or whose answers
differ (an overload, a request's own id in the text), is measured, not stopped.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import orjson

REFUSED_STREAK = 5
"""Calls refused alike (one 4xx), before any success, that stop the ramp (at C=1 about half a
second: a user pauses 0.1 s after a failed call)."""
FAILED_STREAK = 20
"""Calls that got the same 5xx and the same answer, before any success, that stop the ramp."""

EMPTY_BODY = "(empty body)"
_SECRET_WORDS = ("authorization", "api-key", "apikey", "token", "cookie", "secret", "password")


@dataclass(frozen=True, slots=True)
class Refusal:
    """The first requests were all refused alike: what ``message`` says, as plain fields (the
    ``requests_refused`` event of events.jsonl carries them)."""

    status: int
    error_class: str
    answer: str  # the server's body as recorded, or EMPTY_BODY
    path: str
    headers: str  # the request's headers, secrets redacted
    body: str  # the shape of the request's body
    count: int

    def message(self) -> str:
        """One line: the status, the answer, the request and what to try."""
        answer = "an empty body" if self.answer == EMPTY_BODY else f'the answer "{self.answer}"'
        verb = "failed" if self.status >= 500 else "refused"
        return (
            f"the server {verb} all of the first {self.count} requests, each with HTTP {self.status} and "
            f"{answer}; the request: POST {self.path}, headers {self.headers}, body {self.body}. "
            f"Try: {hint(self.status, self.error_class, self.answer == EMPTY_BODY)}"
        )

    def fields(self) -> dict[str, Any]:
        return asdict(self)


def hint(status: int, error_class: str, empty: bool) -> str:
    """What to try for a status every request got (the server's answer says more when it has one)."""
    if error_class == "http_400_context_length":
        return "the prompt and max_tokens exceed the model's context: lower --context-tokens or --max-tokens."
    if status in (401, 403):
        return "the server wants a key it accepts: pass --api-key KEY or set OPENAI_API_KEY."
    if status == 405:
        return (
            "the server takes no POST at this path: check --url (the server's base, http://host:port) and --endpoint."
        )
    if status == 413:
        return (
            "the request is larger than the server takes: lower --context-tokens (or the scenario's lengths, images)."
        )
    if status >= 500:
        return (
            "the server failed every request the same way, so its answer says why: a body field it cannot take "
            "(--extra-body, the scenario's fields), a model it has not loaded (--model, --wait-ready)."
        )
    if status == 422:
        return "the server did not accept a field of the body: check --extra-body, --model and the scenario's fields."
    if empty:
        return (
            f"a server that answers {status} with an empty body has often rejected a header before reading the "
            "body: try --request-id-header none (or the name the server wants), then --transport openai; "
            "send the request above with curl to find the field."
        )
    return "the server's answer names what it rejected: check --model, --extra-body, --max-tokens, the scenario."


def describe_headers(headers: dict[str, str]) -> str:
    """``Name: value`` pairs; a header that carries a credential shows ``<redacted>`` for its value."""
    parts = []
    for name, value in headers.items():
        low = name.lower()
        if any(word in low for word in _SECRET_WORDS):
            scheme = value.split(" ", 1)[0] + " " if low == "authorization" and " " in value else ""
            value = scheme + "<redacted>"
        parts.append(f"{name}: {value}")
    return "{" + ", ".join(parts) + "}"


def _shape(value: Any) -> str:
    if isinstance(value, str):
        return orjson.dumps(value).decode() if len(value) <= 40 else f"<text, {len(value)} chars>"
    if isinstance(value, bool) or value is None or isinstance(value, (int, float)):
        return orjson.dumps(value).decode()
    if isinstance(value, list):
        return f"[{len(value)} item{'s' if len(value) != 1 else ''}]"
    if isinstance(value, dict):
        return "{" + ", ".join(value) + "}"
    return type(value).__name__


def describe_body(body: bytes) -> str:
    """The body's top-level fields with short values, list lengths and object keys: enough to see
    what was asked, never the prompt's text."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return f"<{len(body)} bytes, not JSON>"
    if not isinstance(data, dict):
        return f"<JSON {type(data).__name__}>"
    return "{" + ", ".join(f"{k}: {_shape(v)}" for k, v in data.items()) + "}"


def answer_of(error: str | None) -> str:
    """The server's body from a record's ``error`` (``HTTP 400: <body>``)."""
    text = (error or "").partition(": ")[2].strip() if (error or "").startswith("HTTP ") else (error or "")
    return text or EMPTY_BODY


class RefusalWatch:
    """Counts alike refusals before the first success (``observe`` per failed call)."""

    def __init__(self, streak: int = REFUSED_STREAK, failed_streak: int = FAILED_STREAK) -> None:
        self.streak = streak
        self.failed_streak = failed_streak
        self._key: tuple[int, str] | None = None
        self._count = 0
        self.fired = False

    def observe(
        self, status: int, error_class: str, error: str | None, path: str, headers: dict[str, str], body: bytes
    ) -> Refusal | None:
        """A call that failed before any succeeded; the Refusal once ``streak`` in a row share a
        client-error status, or ``failed_streak`` a server-error status and answer (once per run),
        else None."""
        if self.fired:
            return None
        if not 400 <= status < 600 or status in (404, 429):
            self._key, self._count = None, 0  # another kind of failure: not a refusal of what we send
            return None
        key = (status, answer_of(error) if status >= 500 else "")
        self._count = self._count + 1 if key == self._key else 1
        self._key = key
        if self._count < (self.failed_streak if status >= 500 else self.streak):
            return None
        self.fired = True
        return Refusal(
            status=status,
            error_class=error_class,
            answer=answer_of(error),
            path=path,
            headers=describe_headers(headers),
            body=describe_body(body),
            count=self._count,
        )
