"""What a finished request leaves in the prefix cache: its prompt continued by its reply.

SGLang's radix tree keeps the KV of a finished request's generated tokens as the continuation of
its prompt, so the next turn of a conversation (the same messages, the assistant's reply, a new
user message) is served mostly from cache. The simulator matches prompts on content, so the
continuation is named the way the next turn's prompt will be hashed
(:func:`loadgen.sim.text.prompt_block_hashes`):

* chat: the request's tools and messages followed by an assistant message whose content is the
  reply text (the template's role marker, then the words as the client received them);
* text completion: the prompt string followed by the reply text;
* a prompt given as token ids has no text to continue: its output is not cached.

:class:`PromptContinuation` is the engine's ``SimRequest.continued_block_hashes`` hook: called with
the number of output tokens whose KV exists, it returns the chained hashes of every full block of
that continuation (the prompt's own full blocks first). ``reply(n)`` gives the first ``n`` output
tokens as text; the responder supplies it, so the blocks carry exactly the text that was sent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loadgen.sim.text import prompt_block_hashes


class PromptContinuation:
    """Block hashes of a prompt followed by the first ``n`` tokens of its reply (see module doc)."""

    __slots__ = ("_block_tokens", "_chars_per_token", "_chat", "_messages", "_prompt", "_reply", "_tools")

    def __init__(
        self,
        messages: list[Any] | None,
        prompt: str,
        chars_per_token: float,
        block_tokens: int,
        reply: Callable[[int], str],
        tools: Any = None,
    ) -> None:
        self._chat = messages is not None
        self._tools = tools
        self._messages = messages or []
        self._prompt = prompt
        self._chars_per_token = chars_per_token
        self._block_tokens = block_tokens
        self._reply = reply

    def __call__(self, n_tokens: int) -> list[int]:
        text = self._reply(n_tokens)
        if self._chat:
            body: dict[str, Any] = {"messages": [*self._messages, {"role": "assistant", "content": text}]}
            if self._tools:
                body["tools"] = self._tools
        else:
            body = {"prompt": self._prompt + text}
        return prompt_block_hashes(body, self._chat, self._chars_per_token, self._block_tokens)


def continuation(
    body: dict[str, Any], chat: bool, chars_per_token: float, block_tokens: int, reply: Callable[[int], str]
) -> PromptContinuation | None:
    """The continuation hook for a request ``body``; None when its output cannot be cached (a
    token-id prompt, messages that are not a list, no prefix cache)."""
    if block_tokens <= 0:
        return None
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list):
            return None
        return PromptContinuation(messages, "", chars_per_token, block_tokens, reply, body.get("tools"))
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):
        if not all(isinstance(x, str) for x in prompt):
            return None  # token ids (or a mix): the reply's words have no ids to continue them
        prompt = "".join(prompt)
    return PromptContinuation(None, str(prompt), chars_per_token, block_tokens, reply)
