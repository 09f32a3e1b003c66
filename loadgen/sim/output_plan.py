"""What an answer consists of: reasoning tokens first, then the answer text or one tool call.

Reasoning (:func:`read_effort`): chat ``reasoning_effort`` ("low", "medium", "high"; "minimal"
counts as low, "none" asks for none), chat ``chat_template_kwargs`` ``{"enable_thinking": true}``
or ``{"thinking": true}`` (SGLang / vLLM templates; medium; an explicit false turns reasoning
off whatever the effort says), Responses ``reasoning: {"effort": ...}``. The answer then starts
with ``floor(fraction * base)`` reasoning tokens (:func:`reasoning_tokens`): fraction 0.25 / 0.5 /
0.75 for low / medium / high, base the request's ``max_tokens`` (absent: the room left in the
context, at most :data:`REASONING_BASE_TOKENS`), at least 1 and at most ``cap - 1`` so one answer
token is always left (a cap of 1 leaves no reasoning). The answer after it is as long as without
reasoning (the natural length draw, or the rest up to the cap with ``ignore_eos``: a total of
``max_tokens``), all within the cap.

Tool calls (:func:`read_tools`, :func:`decide_call`): ``tools`` in the chat form
``{"type": "function", "function": {"name", "parameters"}}`` or the Responses flat form
``{"type": "function", "name", "parameters"}`` (either on either endpoint). ``tool_choice``:
"none" answers text; "required" or a named function (``{"type": "function", "function": {"name":
X}}``, Responses ``{"type": "function", "name": X}``) calls; "auto" (the default) calls unless
the conversation already holds ``tool_rounds`` tool results (chat messages of role ``tool``,
Responses ``function_call_output`` items, earlier turns of ``previous_response_id`` included), the
server's ``--tool-rounds`` (default :data:`DEFAULT_TOOL_ROUNDS`): an agent loop gets that many
calls, then a final answer. The tool called is the named one, else ``tools[k % len(tools)]`` where
``k`` is the number of tool results so far (the first tool first, then the next ...). Its
arguments are compact JSON that satisfies the tool's ``parameters`` schema (:func:`sample_value`:
every property, required or not; strings of 2-4 words, integers and numbers within
``minimum``/``maximum``, booleans, the first-or-seeded ``enum`` value, arrays of 1-2 items),
seeded by the tool's name, ``k`` and the prompt text, so the same request gets the same arguments.
They cost ``ceil(len(arguments) / 3.5)`` output tokens (:data:`ARGUMENT_CHARS_PER_TOKEN`), generated
by the engine like any output token, after the reasoning. A call ends when its arguments are
complete (``ignore_eos`` does not lengthen it); a cap reached first cuts the arguments short and the
answer ends with finish_reason "length".
"""

from __future__ import annotations

import hashlib
import math
import random
import uuid
from dataclasses import dataclass
from typing import Any

import orjson

from loadgen.sim.params import BadRequest
from loadgen.sim.text import WORDS

EFFORT_FRACTION = {"low": 0.25, "medium": 0.5, "high": 0.75}
EFFORT_ALIASES = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "none": None}
REASONING_BASE_TOKENS = 4096
ARGUMENT_CHARS_PER_TOKEN = 3.5
DEFAULT_TOOL_ROUNDS = 4
CHOICES = ("none", "auto", "required")
MAX_SCHEMA_DEPTH = 8
_WORD_TEXT = [w.decode().strip() for w in WORDS]


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolAsk:
    """A request's ``tools`` and ``tool_choice`` (``choice`` "none", "auto", "required" or
    "function", the last with ``named``)."""

    tools: tuple[Tool, ...]
    choice: str
    named: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The call an answer makes: its arguments and the output tokens they take."""

    name: str
    call_id: str
    arguments: str
    tokens: int

    def piece(self, start: int, n: int) -> str:
        """The arguments' characters of answer tokens ``start .. start + n`` (tokens split the
        string evenly by characters)."""
        size, total = len(self.arguments), self.tokens
        return self.arguments[start * size // total : min(start + n, total) * size // total]


@dataclass(frozen=True, slots=True)
class OutputPlan:
    """An answer with reasoning and/or a tool call (a plain text answer has no plan)."""

    effort: str | None
    reasoning_tokens: int
    call: ToolCall | None

    def split(self, before: int, n: int) -> tuple[int, int]:
        """(reasoning tokens, answer tokens) among ``n`` tokens that follow the first ``before``."""
        r = self.reasoning_tokens - before
        if r <= 0:
            return 0, n
        return (n, 0) if r >= n else (r, n - r)


def read_effort(body: dict[str, Any], responses: bool) -> str | None:
    """The reasoning effort a body asks for (module doc), None for no reasoning."""
    if responses:
        reasoning = body.get("reasoning")
        if reasoning is None:
            return None
        if not isinstance(reasoning, dict):
            raise BadRequest(f"Field 'reasoning' must be an object like {{'effort': 'medium'}}, got {reasoning!r}.")
        return _effort(reasoning.get("effort", "medium"), "reasoning.effort")
    kwargs = body.get("chat_template_kwargs")
    flag: bool | None = None
    if isinstance(kwargs, dict):
        for key in ("enable_thinking", "thinking"):
            if key in kwargs:
                flag = bool(kwargs[key])
    if flag is False:
        return None
    effort = body.get("reasoning_effort")
    if effort is not None:
        return _effort(effort, "reasoning_effort")
    return "medium" if flag else None


def _effort(value: Any, field: str) -> str | None:
    if value is None:
        return "medium"
    if value not in EFFORT_ALIASES:
        raise BadRequest(f"{field} must be one of {', '.join(EFFORT_ALIASES)}; got {value!r}.")
    return EFFORT_ALIASES[value]


def reasoning_tokens(effort: str | None, max_tokens: int | None, cap: int) -> int:
    """Reasoning tokens of an answer whose output may reach ``cap`` tokens (module doc)."""
    if effort is None or cap < 2:
        return 0
    base = max_tokens if max_tokens is not None else min(cap, REASONING_BASE_TOKENS)
    return min(max(1, int(EFFORT_FRACTION[effort] * base)), cap - 1)


def read_tools(body: dict[str, Any]) -> ToolAsk | None:
    """The request's tools and tool choice; None without tools. :class:`BadRequest` names the
    field that breaks the forms in the module doc."""
    raw = body.get("tools")
    if raw is None or raw == []:
        return None
    if not isinstance(raw, list):
        raise BadRequest(f"Field 'tools' must be a list of function tools, got {raw!r}.")
    tools: list[Tool] = []
    for i, tool in enumerate(raw):
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise BadRequest(
                f"tools[{i}] must be a function tool ({{'type': 'function', ...}}; the simulator serves no "
                f"other kind), got {tool!r}."
            )
        fn = tool.get("function")
        if not isinstance(fn, dict):
            fn = tool
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise BadRequest(f"tools[{i}] needs a function 'name' (a non-empty string).")
        params = fn.get("parameters")
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise BadRequest(f"tools[{i}].parameters must be a JSON schema object, got {params!r}.")
        tools.append(Tool(name, params))
    choice = body.get("tool_choice", "auto")
    if choice is None:
        choice = "auto"
    if isinstance(choice, str):
        if choice not in CHOICES:
            raise BadRequest(f"tool_choice must be one of {', '.join(CHOICES)} or a function; got {choice!r}.")
        return ToolAsk(tuple(tools), choice)
    fn = choice.get("function") if isinstance(choice, dict) and isinstance(choice.get("function"), dict) else choice
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str):
        raise BadRequest(
            f"tool_choice must be 'none', 'auto', 'required' or {{'type': 'function', 'function': {{'name': ...}}}}; "
            f"got {choice!r}."
        )
    if name not in {t.name for t in tools}:
        raise BadRequest(f"tool_choice names the function {name!r}, which is not in 'tools'.")
    return ToolAsk(tuple(tools), "function", name)


def count_tool_results(messages: list[Any]) -> int:
    """Tool results in a conversation (chat messages of role ``tool``)."""
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "tool")


def decide_call(ask: ToolAsk | None, n_results: int, rounds: int, prompt_text: str) -> ToolCall | None:
    """The call the answer makes, or None for a text answer (module doc)."""
    if ask is None or ask.choice == "none" or (ask.choice == "auto" and n_results >= rounds):
        return None
    if ask.named is not None:
        tool = next(t for t in ask.tools if t.name == ask.named)
    else:
        tool = ask.tools[n_results % len(ask.tools)]
    seed = hashlib.blake2b(f"{tool.name}\0{n_results}\0{prompt_text}".encode(errors="replace"), digest_size=8)
    rng = random.Random(int.from_bytes(seed.digest(), "big"))
    arguments = orjson.dumps(sample_value(tool.parameters, rng)).decode()
    tokens = max(1, math.ceil(len(arguments) / ARGUMENT_CHARS_PER_TOKEN))
    return ToolCall(tool.name, "call_" + uuid.uuid4().hex[:24], arguments, tokens)


def sample_value(schema: Any, rng: random.Random, depth: int = 0) -> Any:
    """A value that satisfies a JSON schema (the subset in the module doc; anything else: a string)."""
    if not isinstance(schema, dict) or depth > MAX_SCHEMA_DEPTH:
        return _words(rng, {})
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return rng.choice(enum)
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            usable = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
            return sample_value((usable or options)[0], rng, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    if kind == "object":
        props = schema.get("properties")
        out = {name: sample_value(sub, rng, depth + 1) for name, sub in (props or {}).items()}
        for name in schema.get("required") or []:
            if isinstance(name, str) and name not in out:
                out[name] = _words(rng, {})
        return out
    if kind == "array":
        lo = _int(schema.get("minItems"), 1)
        hi = max(lo, min(_int(schema.get("maxItems"), 2), 2))
        return [sample_value(schema.get("items"), rng, depth + 1) for _ in range(rng.randint(lo, hi))]
    if kind in ("integer", "number"):
        lo_f = _num(schema.get("minimum"), 0.0)
        hi_f = max(lo_f, _num(schema.get("maximum"), lo_f + 100.0))
        if kind == "integer":
            lo_i, hi_i = math.ceil(lo_f), math.floor(hi_f)
            return rng.randint(lo_i, max(lo_i, hi_i))
        return round(rng.uniform(lo_f, hi_f), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return _words(rng, schema)


def _words(rng: random.Random, schema: dict[str, Any]) -> str:
    text = " ".join(rng.choice(_WORD_TEXT) for _ in range(rng.randint(2, 4)))
    limit = schema.get("maxLength")
    return text[: max(1, limit)] if isinstance(limit, int) else text


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


def _num(value: Any, default: float) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def plan_output(
    cap: int, max_tokens: int | None, natural: int, ignore_eos: bool, effort: str | None, call: ToolCall | None
) -> tuple[int, str, OutputPlan | None]:
    """(tokens the answer generates, its stop reason, its plan) for an output cap of ``cap`` tokens;
    ``natural``: the drawn natural length of its text (unused with ``ignore_eos`` or a call)."""
    r = reasoning_tokens(effort, max_tokens, cap)
    plan = OutputPlan(effort, r, call) if effort is not None or call is not None else None
    want = r + (call.tokens if call is not None else natural)
    if call is None and ignore_eos:
        return cap, "length", plan
    if want < cap or (call is not None and want == cap):
        return want, "stop", plan
    return cap, "length", plan
