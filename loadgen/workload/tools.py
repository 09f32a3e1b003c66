"""``[tools]``: the function tools a scenario sends, read and checked before a run starts.

Tools are declared inline (``[[tools.function]]`` tables with ``name``, ``description`` and
``parameters``, a TOML table that is a JSON Schema) or in a JSON file (``file = "tools.json"``: a
list of tools in the chat form ``{"type": "function", "function": {...}}`` or the flat form
``{"type": "function", "name": ..., "parameters": ...}``). Either way they come out in the chat
form, which :func:`loadgen.spec.request.request_body` reshapes for the Responses API.

Every tool's ``parameters`` is checked as JSON Schema (the draft its ``$schema`` names, else
2020-12), so a typo such as ``type = "strng"`` fails at load, naming the tool and the place in
the schema, instead of as a 400 from the server at every request of a run.
"""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.workload.errors import NO_VALUE, TableError
from loadgen.workload.tables import Table, type_name, user_path

TOOL_CHOICES = ("auto", "required", "none")
# OpenAI's rule for function names; servers that render them into a chat template need no more
NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class ToolsSpec:
    """The tools (chat form, in declaration order) and the ``tool_choice`` to send (None: not sent)."""

    tools: tuple[dict[str, Any], ...]
    choice: Any = None
    file: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(str(t["function"]["name"]) for t in self.tools)


class ToolError(TableError):
    """A bad tool: ``where`` names it (``tools.function[1] 'search'``), ``key`` locates its line."""

    def __init__(self, key: str, where: str, problem: str) -> None:
        self.where = where
        super().__init__(key, NO_VALUE, problem)

    def describe(self, key: str) -> str:
        return f"{self.where}: {self.problem}"


def parse_tools(t: Table, base_dir: Path) -> ToolsSpec:
    """The ``[tools]`` table: ``function`` (inline tools) or ``file``, and ``choice``."""
    if t.has("file") and t.has("function"):
        raise TableError(t.key("file"), t.raw("file"), "give tools inline ([[tools.function]]) or in a file, not both")
    file: str | None = None
    if t.has("file"):
        raw = t.get_str("file")
        path = user_path(raw)
        path = path if path.is_absolute() else base_dir / path
        tools = _from_file(t.key("file"), raw, path)
        file = str(path)
    else:
        items = t.get_list("function")
        tools = []
        for i, item in enumerate(items):
            key = f"{t.key('function')}[{i}]"
            ft = Table(item, key)
            name = ft.get_str("name")
            description = ft.get_str("description", None)
            parameters = ft.raw("parameters", None) or _empty_parameters()
            strict = ft.get_bool("strict", None)
            ft.finish()
            where = f"{key} {name!r}"
            tools.append(_tool(f"{key}.name", where, name, description, parameters, strict, f"{key}.parameters"))
    _no_duplicates(t, tools, file)
    names = [str(tool["function"]["name"]) for tool in tools]
    choice: Any = None
    if t.has("choice"):
        raw_choice = t.get_str("choice")
        if raw_choice in TOOL_CHOICES:
            choice = raw_choice
        elif raw_choice in names:
            choice = {"type": "function", "function": {"name": raw_choice}}
        else:
            shown = ", ".join(f'"{c}"' for c in (*TOOL_CHOICES, *names))
            raise TableError(t.key("choice"), raw_choice, f"must be one of {shown} (a declared tool's name)")
    t.finish()
    return ToolsSpec(tuple(tools), choice, file)


def _from_file(key: str, raw: str, path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TableError(key, raw, f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TableError(key, raw, f"cannot read {path}: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TableError(key, raw, f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    if not isinstance(data, list) or not data:
        raise TableError(key, raw, f"{path}: must hold a non-empty JSON list of tools, not {type_name(data)}")
    tools = []
    for i, item in enumerate(data):
        at = f'tools.file "{path}" [{i}]'
        if not isinstance(item, dict):
            raise ToolError(key, at, f"must be a JSON object, not {type_name(item)}")
        if item.get("type", "function") != "function":
            raise ToolError(key, at, f'type = {item.get("type")!r}: only "function" tools can be sent')
        fn = item.get("function", item)  # the chat form nests the function, the flat form does not
        if not isinstance(fn, dict):
            raise ToolError(key, at, f"function must be a JSON object, not {type_name(fn)}")
        name = fn.get("name")
        where = f"{at} {name!r}" if isinstance(name, str) else at
        parameters = fn.get("parameters", _empty_parameters())
        tools.append(_tool(key, where, name, fn.get("description"), parameters, fn.get("strict"), key))
    return tools


def _tool(
    key: str, where: str, name: Any, description: Any, parameters: Any, strict: Any, schema_key: str
) -> dict[str, Any]:
    """One tool in the chat form, its name and parameters checked."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ToolError(key, where, f"name = {name!r}: must be 1-64 letters, digits, '_' or '-'")
    if description is not None and not isinstance(description, str):
        raise ToolError(key, where, f"description must be a string, not {type_name(description)}")
    if strict is not None and not isinstance(strict, bool):
        raise ToolError(key, where, f"strict must be true or false, not {type_name(strict)}")
    if not isinstance(parameters, dict):
        raise ToolError(schema_key, where, f"parameters must be a table (a JSON Schema), not {type_name(parameters)}")
    problem = schema_problem(parameters)
    if problem is not None:
        raise ToolError(schema_key, where, f"parameters is not valid JSON Schema {problem}")
    if parameters.get("type", "object") != "object":
        kind = parameters["type"]
        raise ToolError(schema_key, where, f'parameters must describe an object (type = "object"), not {kind!r}')
    fn: dict[str, Any] = {"name": name}
    if description is not None:
        fn["description"] = description
    fn["parameters"] = parameters
    if strict is not None:
        fn["strict"] = strict
    return {"type": "function", "function": fn}


def _empty_parameters() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


def schema_problem(schema: dict[str, Any]) -> str | None:
    """Why ``schema`` is not valid JSON Schema (``at <path>: <message>``), or None when it is."""
    # jsonschema is imported here, not at module level: only scenarios with tools pay for it
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    with warnings.catch_warnings():
        # an unknown $schema is a warning in jsonschema 4 (it falls back to the latest draft)
        warnings.simplefilter("error", DeprecationWarning)
        try:
            cls = validator_for(schema, default=Draft202012Validator)
        except DeprecationWarning:
            return f"at $schema: {schema.get('$schema')!r} is not a JSON Schema draft jsonschema knows"
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        path = ".".join(str(p) for p in exc.absolute_path) or "(root)"
        return f"at {path}: {exc.message}"
    return None


def _no_duplicates(t: Table, tools: list[dict[str, Any]], file: str | None) -> None:
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        name = str(tool["function"]["name"])
        if name in seen:
            key = t.key("file") if file else f"{t.key('function')}[{i}].name"
            where = f'tools.file "{file}" [{i}]' if file else f"{t.key('function')}[{i}]"
            raise ToolError(key, where, f"name {name!r} is declared twice; tool names must be unique")
        seen.add(name)


__all__ = ["TOOL_CHOICES", "ToolError", "ToolsSpec", "parse_tools", "schema_problem"]
