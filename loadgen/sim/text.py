"""Output text, prompt token counting and prompt classification for the simulator.

Output: every token is one English word with a leading space (``" the"``), so the number of tokens
in a chunk is known exactly and the text reads like prose. Words are pre-encoded as JSON-safe
bytes; building a chunk is a byte join.

Prompt tokens are estimated, not tokenized: ``ceil(characters / chars_per_token)`` (4 by default,
the usual rule of thumb for English with BPE tokenizers) over the prompt text, plus 4 tokens per
chat message for the chat template's role markers. A chat message's text is its content's text
parts and, for an assistant message, its ``tool_calls`` (names and arguments). A request's
``tools`` add ``ceil(len(tools_text) / chars_per_token)`` tokens (:func:`tools_text`) and each
image its own count (:mod:`loadgen.sim.images`); the caller adds those. A completions prompt
given as a list of token ids counts one token per id.

Prefix-cache blocks: :func:`prompt_block_hashes` cuts the prompt into blocks of ``block_tokens``
estimated tokens (``block_tokens * chars_per_token`` characters; chat messages contribute their
role marker, as long as the 4 template tokens, then their content, an image as its hash padded to
its tokens' length; the tools' text comes first) and names each full block by a
hash chained over all blocks before it, so prompts sharing a prefix byte for byte share the hashes
of its full blocks. Token-id prompts are cut every ``block_tokens`` ids.

Prompt source (for source-dependent speculative acceptance): "code" when at least 3 % of the
characters are code punctuation (``{}();=<>[]``) or the text contains a code fence or common
keywords (``def ``, ``function``, ``#include``, ``import ``, ``class ``); otherwise "prose".
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np
import orjson

from loadgen.sim.images import image_marker, part_image_url

_WORDS = """
the of and to in is that for it as was with be by on not he this are or his from at which but have
an they you were her she there been one all we their has would when if so no will can more other its
into only time new some could these two may first then do any like my now over such our man me even
most made after also did many before must through back years where much your way well down should
because each just those people how too little state good very make world still own see men work long
get here between both life being under never day same another know while last might us great old
year off come since against go came right used take three states himself few house use during
without again place american around however home small found thought went say part once general high
upon school every does got united left number course war until always away something fact though
water less public put think almost hand enough far took head yet government system better set told
nothing night end why called didn eyes find going look asked later knew point next program city
business give group toward young days let room president side social given present several order
national possible rather second face per among form important often things looked early white john
case become large big need four within felt along children saw best church ever least power
development light thing seemed family interest want members mind country area others done turned
although open god service certain kind problem began different door thus help sense means whole
matter perhaps itself york times law human line above name example action company hands local show
whether five history gave today either act feet across taken past quite anything seen having death
experience body word half really field am car words already themselves information tell together
college shall money period held keep sure probably free seems real behind cannot miss political air
question making office brought whose special heard major problems ago became federal moment study
available known result street economic boy position reason change south board individual job areas
society west close turn love community true court force full seem model data value energy memory
cache token request server latency throughput batch queue
""".split()  # noqa: SIM905 - a word list reads better as text

WORDS: list[bytes] = [(" " + w).encode() for w in _WORDS]
N_WORDS = len(WORDS)

_CODE_CHARS = frozenset("{}();=<>[]")
_CODE_MARKERS = ("```", "def ", "function", "#include", "import ", "class ", "return ", "=>")


class TextSource:
    """Deterministic stream of word tokens from a seeded generator."""

    def __init__(self, seed: int) -> None:
        self._idx = np.random.default_rng(seed).integers(0, N_WORDS, size=1 << 16).tolist()
        self._pos = 0

    def take(self, n: int) -> bytes:
        """``n`` tokens of text, JSON-safe (plain ASCII words)."""
        idx, pos, size = self._idx, self._pos, len(self._idx)
        if pos + n > size:
            pos = 0
        self._pos = pos + n
        return b"".join([WORDS[i] for i in idx[pos : pos + n]])


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal parts: count the text parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def tools_text(tools: Any) -> str:
    """The prompt text of a request's ``tools`` (the chat template puts their definitions first):
    each function's name, description and parameters as compact JSON with sorted keys, the same
    for the chat form (``{"type": "function", "function": {...}}``) and the Responses flat form;
    "" when there are none."""
    if not isinstance(tools, list) or not tools:
        return ""
    out = []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        fn = tool.get("function")
        if not isinstance(fn, dict):
            fn = tool
        out.append({k: fn.get(k) for k in ("name", "description", "parameters") if k in fn})
    return orjson.dumps(out, option=orjson.OPT_SORT_KEYS).decode()


def _calls_text(message: dict[str, Any]) -> str:
    """An assistant message's ``tool_calls`` as prompt text: each call's name and arguments."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return ""
    parts = []
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            parts.append(str(fn.get("name", "")) + str(fn.get("arguments", "")))
    return "".join(parts)


def prompt_text(body: dict[str, Any], chat: bool) -> tuple[str, int]:
    """The prompt's text and the number of chat messages (0 for completions)."""
    if chat:
        messages = body.get("messages") or []
        if not isinstance(messages, list):
            return "", 0
        text = "".join(_content_text(m.get("content")) + _calls_text(m) for m in messages if isinstance(m, dict))
        return text, len(messages)
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):
        if prompt and all(isinstance(x, int) for x in prompt):
            return "", -len(prompt)  # token ids: negative count signals "exact"
        return "".join(str(x) for x in prompt), 0
    return str(prompt), 0


def tools_tokens(tools: Any, chars_per_token: float) -> int:
    """Prompt tokens of a request's ``tools`` (0 without any)."""
    text = tools_text(tools)
    return math.ceil(len(text) / chars_per_token) if text else 0


def count_prompt_tokens(text: str, n_messages: int, chars_per_token: float) -> int:
    """Estimated prompt tokens (see module docstring); ``n_messages < 0`` means exact token ids."""
    if n_messages < 0:
        return -n_messages
    return max(1, math.ceil(len(text) / chars_per_token) + 4 * n_messages)


def classify_source(text: str) -> str:
    """ "code" or "prose" (see module docstring)."""
    if not text:
        return "default"
    sample = text[:4000]
    if any(marker in sample for marker in _CODE_MARKERS):
        return "code"
    punct = sum(1 for ch in sample if ch in _CODE_CHARS)
    return "code" if punct >= 0.03 * len(sample) else "prose"


def _hash_chain(pieces: list[bytes]) -> list[int]:
    out: list[int] = []
    prev = b""
    for piece in pieces:
        prev = hashlib.blake2b(prev + piece, digest_size=8).digest()
        out.append(int.from_bytes(prev, "big"))
    return out


def prompt_block_hashes(body: dict[str, Any], chat: bool, chars_per_token: float, block_tokens: int) -> list[int]:
    """Chained hashes of the prompt's full blocks (see module docstring); [] when it has none."""
    if block_tokens <= 0:
        return []
    if not chat:
        prompt = body.get("prompt", "")
        if isinstance(prompt, list) and prompt and all(isinstance(x, int) for x in prompt):
            ids = np.asarray(prompt, dtype=np.int64)
            n = len(ids) // block_tokens
            return _hash_chain([ids[i * block_tokens : (i + 1) * block_tokens].tobytes() for i in range(n)])
    stream = _block_stream(body, chat, chars_per_token)
    size = max(1, round(block_tokens * chars_per_token))
    n = len(stream) // size
    return _hash_chain([stream[i * size : (i + 1) * size].encode("utf-8", "surrogatepass") for i in range(n)])


def _block_stream(body: dict[str, Any], chat: bool, chars_per_token: float) -> str:
    if not chat:
        text, _ = prompt_text(body, False)
        return text
    messages = body.get("messages") or []
    if not isinstance(messages, list):
        return ""
    width = max(1, round(4 * chars_per_token))  # the template's 4 tokens per message
    parts: list[str] = [tools_text(body.get("tools"))]
    for m in messages:
        if not isinstance(m, dict):
            continue
        marker = "<|" + str(m.get("role", "")) + "|>"
        parts.append(marker.ljust(width, "~")[:width])
        content = m.get("content")
        if isinstance(content, list):  # text parts as text, images as their hash (images.py)
            for p in content:
                url = part_image_url(p)
                if url is not None:
                    parts.append(image_marker(url, chars_per_token))
                elif isinstance(p, dict):
                    parts.append(str(p.get("text", "")))
        else:
            parts.append(_content_text(content))
        parts.append(_calls_text(m))
    return "".join(parts)
