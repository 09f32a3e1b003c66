"""A conversation's next turn is served from the prefix cache, reply included, through real HTTP."""

from __future__ import annotations

import http.client
import json
import time
from typing import Any
from urllib.parse import urlsplit

from loadgen.sim.text import count_prompt_tokens, prompt_text

B = 64  # the simulator's default prefix-cache block, estimated tokens
CHAT = "/v1/chat/completions"


def post(url: str, path: str, body: dict[str, Any]) -> tuple[float, str, dict[str, Any]]:
    """POST ``body`` (streamed when it says so); returns (TTFT s, the text received, usage)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        t0 = time.perf_counter()
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200
        if not body.get("stream"):
            obj = json.loads(resp.read())
            choice = obj["choices"][0]
            text = choice["message"]["content"] if "message" in choice else choice["text"]
            return time.perf_counter() - t0, text, obj["usage"]
        ttft, text, usage, buf = -1.0, "", None, b""
        while chunk := resp.read1(65536):
            buf += chunk
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                data = event.removeprefix(b"data: ")
                if data == b"[DONE]":
                    continue
                obj = json.loads(data)
                for choice in obj["choices"]:
                    piece = choice["delta"].get("content") if "delta" in choice else choice.get("text")
                    if piece:
                        if ttft < 0:
                            ttft = time.perf_counter() - t0
                        text += piece
                if obj.get("usage"):
                    usage = obj["usage"]
        assert usage is not None
        return ttft, text, usage
    finally:
        conn.close()


def chat_tokens(messages: list[dict[str, str]]) -> int:
    text, n = prompt_text({"messages": messages}, True)
    return count_prompt_tokens(text, n, 4.0)


def doc(n_chars: int) -> str:
    vocab = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "lambda"]
    return " ".join(vocab[(i * 7 + i // 5) % 8] for i in range(n_chars // 5))[:n_chars]


def test_two_turn_conversation_reports_prompt_and_reply_as_cached(sim_factory: Any) -> None:
    sim = sim_factory("--profile", "b300x8-kimi-k2.6-ddtree", "--startup-s", "0")
    turn1 = [{"role": "system", "content": doc(32000)}, {"role": "user", "content": "Summarise the document."}]
    stream = {"stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
    cold_ttft, reply, usage1 = post(sim.url, CHAT, {"messages": turn1, "max_tokens": 300, **stream})
    assert usage1["completion_tokens"] == 300 and usage1["prompt_tokens_details"]["cached_tokens"] == 0
    assert len(reply.split()) == 300
    turn2 = [*turn1, {"role": "assistant", "content": reply}, {"role": "user", "content": "And the next part?"}]
    warm_ttft, _, usage2 = post(sim.url, CHAT, {"messages": turn2, "max_tokens": 8, **stream})
    cached = usage2["prompt_tokens_details"]["cached_tokens"]
    prompt1_and_reply = chat_tokens([*turn1, {"role": "assistant", "content": reply}])
    assert usage2["prompt_tokens"] == chat_tokens(turn2)
    assert prompt1_and_reply - B - 4 < cached <= prompt1_and_reply  # one block, and the reply's last word
    assert cached > usage1["prompt_tokens"] + 300
    assert warm_ttft < 0.5 * cold_ttft  # a longer prompt, mostly from cache: faster than turn 1 cold

    # a non-streamed turn caches its reply too; a third turn hits all of it
    turn3_base = [*turn2]
    _, reply2, _ = post(sim.url, CHAT, {"messages": turn3_base, "max_tokens": 200, "ignore_eos": True})
    turn3 = [*turn3_base, {"role": "assistant", "content": reply2}, {"role": "user", "content": "Thanks."}]
    _, _, usage3 = post(sim.url, CHAT, {"messages": turn3, "max_tokens": 4})
    both = chat_tokens([*turn3_base, {"role": "assistant", "content": reply2}])
    assert both - B - 4 < usage3["prompt_tokens_details"]["cached_tokens"] <= both

    # text completions: the prompt continued by the reply text
    prompt = doc(8000)
    _, text, _ = post(sim.url, "/v1/completions", {"prompt": prompt, "max_tokens": 200, "ignore_eos": True})
    _, _, usage4 = post(sim.url, "/v1/completions", {"prompt": prompt + text + " Next:", "max_tokens": 2})
    assert usage4["prompt_tokens_details"]["cached_tokens"] >= (len(prompt + text) // 4) - B - 4


# The ramp with the multi-turn scenario checks the cache hits of every next turn:
# tests/integration/test_scenarios_e2e.py::test_multi_turn_history_grows_with_the_servers_replies_and_hits_the_cache
