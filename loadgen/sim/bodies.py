"""The bytes of the simulator's responses, shaped like SGLang's (vLLM's where ``style`` says so).

Streams, as SGLang sends them: a role-only first chunk (chat), content chunks carrying every token
a step committed, a finish chunk with ``finish_reason`` (and ``matched_stop``: the EOS token id when
the reason is "stop"), the usage chunk (``choices: []``) when ``stream_options.include_usage`` is
set, then ``data: [DONE]``. ``continuous_usage_stats`` puts usage in every chunk, as vLLM does.
Every chunk of a request starts with the same :func:`chunk_prefix`, built once per request; a
content chunk is ``head + text + tail`` around it (:func:`content_template`), so the per-chunk work
is one concatenation. ``text`` is JSON-safe bytes (plain words), inserted as is. Reasoning chunks
(``delta.reasoning_content``, :func:`reasoning_template`) and a tool call's chunks (its head,
:func:`tool_call_chunk`, then argument pieces, :func:`arguments_template`) are built the same way.

Whole bodies: chat and text completions, error bodies (SGLang's flat ``{"object": "error", ...}``,
vLLM's ``{"error": {...}}``), the model list, SGLang's ``/server_info`` and the simulator's own
``/sim/stats`` (how late engine steps ran, in ms, over the last 100,000 steps).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from loadgen.sim.engine import Engine
from loadgen.sim.profile import Profile

EOS_TOKEN_ID = 163586
DONE = b"data: [DONE]\n\n"


def chunk_prefix(id_json: bytes, chat: bool, created: int, model_json: bytes) -> bytes:
    """``data: {"id":…,"object":…,"created":…,"model":…`` (``id_json``, ``model_json``: JSON strings)."""
    obj = b"chat.completion.chunk" if chat else b"text_completion"
    return b'data: {"id":' + id_json + b',"object":"' + obj + b'","created":%d,"model":' % created + model_json


def content_template(prefix: bytes, chat: bool) -> tuple[bytes, bytes]:
    """(head, tail) of a content chunk; the tail ends in ``"usage":null}\\n\\n``."""
    if chat:
        head = prefix + b',"choices":[{"index":0,"delta":{"role":null,"content":"'
        tail = (
            b'","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,'
            b'"matched_stop":null}],"usage":null}\n\n'
        )
    else:
        head = prefix + b',"choices":[{"index":0,"text":"'
        tail = b'","logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}\n\n'
    return head, tail


_CHOICE_TAIL = b'"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}\n\n'


def reasoning_template(prefix: bytes) -> tuple[bytes, bytes]:
    """(head, tail) of a chat chunk carrying reasoning text in ``delta.reasoning_content``; the tail
    ends in ``"usage":null}\\n\\n``."""
    head = prefix + b',"choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":"'
    return head, b'","tool_calls":null},' + _CHOICE_TAIL


def tool_call_chunk(prefix: bytes, call_id: str, name: str, arguments: str = "", reasoning: bytes = b"null") -> bytes:
    """A chat stream's first chunk of a tool call: its id, type, name and the first piece of its
    arguments (generated in the same step), and the reasoning text that step ended (a JSON value)."""
    call = {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    delta = (
        b'{"role":null,"content":null,"reasoning_content":'
        + reasoning
        + b',"tool_calls":['
        + orjson.dumps(call)
        + b"]}"
    )
    return prefix + b',"choices":[{"index":0,"delta":' + delta + b"," + _CHOICE_TAIL


def crossing_chunk(prefix: bytes, reasoning: bytes, text: bytes) -> bytes:
    """One chat chunk of a step that ended the reasoning and began the answer: both fields in one
    delta, as vLLM's reasoning parsers send it (``reasoning`` and ``text`` JSON-escaped, unquoted)."""
    return (
        prefix
        + b',"choices":[{"index":0,"delta":{"role":null,"content":"'
        + text
        + b'","reasoning_content":"'
        + reasoning
        + b'","tool_calls":null},'
        + _CHOICE_TAIL
    )


def arguments_template(prefix: bytes) -> tuple[bytes, bytes]:
    """(head, tail) of a chat chunk carrying a piece of the tool call's arguments; the piece goes
    between them as a JSON string (quotes included); the tail ends in ``"usage":null}\\n\\n``."""
    head = (
        prefix + b',"choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":null,'
        b'"tool_calls":[{"index":0,"function":{"arguments":'
    )
    return head, b"}}]}," + _CHOICE_TAIL


def usage_json(prompt: int, completion: int, cached: int, reasoning: int | None = None) -> bytes:
    """Usage; ``reasoning`` (when the request asked for reasoning) adds
    ``completion_tokens_details.reasoning_tokens``."""
    details = b"" if reasoning is None else b',"completion_tokens_details":{"reasoning_tokens":%d}' % reasoning
    return (
        b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,'
        b'"prompt_tokens_details":{"cached_tokens":%d}'
        % (prompt, prompt + completion, completion, cached)
        + details
        + b"}"
    )


def role_chunk(prefix: bytes, usage: bytes) -> bytes:
    """A chat stream's first chunk: the assistant role, empty content (``usage``: JSON or ``null``)."""
    return (
        prefix + b',"choices":[{"index":0,"delta":{"role":"assistant",'
        b'"content":"","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,'
        b'"matched_stop":null}],"usage":' + usage + b"}\n\n"
    )


def finish_chunk(prefix: bytes, chat: bool, reason: str, usage: bytes) -> bytes:
    """The chunk carrying ``finish_reason`` (``usage``: JSON or ``null``)."""
    matched = b"%d" % EOS_TOKEN_ID if reason == "stop" else b"null"
    if chat:
        choice = (
            b',"choices":[{"index":0,"delta":{"role":null,"content":null,'
            b'"reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":"'
        )
    else:
        choice = b',"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"'
    return prefix + choice + reason.encode() + b'","matched_stop":' + matched + b'}],"usage":' + usage + b"}\n\n"


def usage_chunk(prefix: bytes, usage: bytes) -> bytes:
    """The ``include_usage`` chunk: no choices, the request's usage."""
    return prefix + b',"choices":[],"usage":' + usage + b"}\n\n"


def malformed_chunk(id_json: bytes) -> bytes:
    """A content chunk cut short mid-JSON (the ``--malformed-after-chunks`` fault)."""
    return b'data: {"id":' + id_json + b',"object":"chat.completion.chu\n\n'


def stream_error(message: str, err_type: str, code: int) -> bytes:
    """An error event inside a 200 stream, then ``[DONE]``: how the real servers end a failed stream."""
    body = orjson.dumps({"error": {"message": message, "type": err_type, "param": None, "code": code}})
    return b"data: " + body + b"\n\n" + DONE


def error_body(style: str, status: int, message: str, err_type: str) -> bytes:
    if style == "vllm":
        return orjson.dumps({"error": {"message": message, "type": err_type, "param": None, "code": status}})
    return orjson.dumps({"object": "error", "message": message, "type": err_type, "param": None, "code": status})


def completion_body(
    chat: bool,
    rid: str,
    created: int,
    model_name: str,
    text: str,
    reason: str,
    prompt_tokens: int,
    generated: int,
    cached: int,
    reasoning: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    reasoning_tokens: int | None = None,
) -> bytes:
    """A non-streamed chat or text completion (chat: ``reasoning`` the message's
    ``reasoning_content``, ``tool_calls`` its calls, whose message has null content when it has
    no text; ``reasoning_tokens`` goes to ``usage.completion_tokens_details``)."""
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + generated,
        "completion_tokens": generated,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    if reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    matched = EOS_TOKEN_ID if reason == "stop" else None
    if chat:
        obj: dict[str, Any] = {
            "id": rid,
            "object": "chat.completion",
            "created": created,
            "model": model_name,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": None if tool_calls and not text else text,
                        "reasoning_content": reasoning,
                        "tool_calls": tool_calls,
                    },
                    "logprobs": None,
                    "finish_reason": reason,
                    "matched_stop": matched,
                }
            ],
            "usage": usage,
        }
    else:
        obj = {
            "id": rid,
            "object": "text_completion",
            "created": created,
            "model": model_name,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": reason, "matched_stop": matched}],
            "usage": usage,
        }
    return orjson.dumps(obj)


def models_body(style: str, model_name: str, created: int, context_length: int) -> bytes:
    """``/v1/models``: the one served model."""
    model = {
        "id": model_name,
        "object": "model",
        "created": created,
        "owned_by": "vllm" if style == "vllm" else "sglang",
        "root": model_name,
        "max_model_len": context_length,
    }
    return orjson.dumps({"object": "list", "data": [model]})


def server_info_body(profile: Profile, engine: Engine) -> bytes:
    """SGLang's /server_info subset: settings and ``internal_states`` (acceptance since start)."""
    p, c = profile, engine.counters
    accept = (c.spec_accepted_tokens + c.spec_cycles) / c.spec_cycles if c.spec_cycles else None
    name = p.model.served_name
    info = {
        "model_path": name,
        "served_model_name": name,
        "tp_size": p.server.tp,
        "max_running_requests": p.max_running_requests,
        "max_queued_requests": p.server.max_queued_requests or None,
        "mem_fraction_static": p.server.mem_fraction_static,
        "cuda_graph_max_bs": p.server.cuda_graph_max_bs,
        "chunked_prefill_size": p.server.chunked_prefill_size,
        "context_length": p.context_length,
        "disable_radix_cache": engine.cache is None,
        "speculative_algorithm": p.spec.name.upper() if p.spec.enabled else None,
        "speculative_num_draft_tokens": p.verify_width if p.spec.enabled else None,
        "max_total_num_tokens": engine.pool_tokens,
        "internal_states": [{"avg_spec_accept_length": accept, "last_gen_throughput": engine.gauges.gen_throughput}],
        "version": "loadgen-sim",
    }
    return orjson.dumps(info)


def sim_stats_body(lateness_s: list[float], engine: Engine, ready: bool) -> bytes:
    """``/sim/stats``: step lateness percentiles (``lateness_s``: how late each step ran, s) and counters."""
    late = np.array(lateness_s[-100_000:]) * 1e3 if lateness_s else np.zeros(1)
    c = engine.counters
    stats = {
        "steps": len(lateness_s),
        "step_lateness_ms": {
            "p50": float(np.percentile(late, 50)),
            "p99": float(np.percentile(late, 99)),
            "max": float(late.max()),
            "mean": float(late.mean()),
        },
        "generation_tokens": c.generation_tokens,
        "requests": c.requests,
        "finished": c.finished,
        "aborted": c.aborted,
        "retracted": c.retracted_reqs,
        "preempted": c.preempted_reqs,
        "spec_cycles": c.spec_cycles,
        "spec_accepted_tokens": c.spec_accepted_tokens,
        "kv_pool_tokens": engine.pool_tokens,
        "ready": ready,
    }
    return orjson.dumps(stats)
