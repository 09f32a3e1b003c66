"""The campaign file (TOML): what each variant starts, applies, checks and ramps; validated once.

:func:`load_campaign` / :func:`parse_campaign` turn the file into a :class:`Campaign`; every problem
is a :class:`CampaignError` reading ``FILE:LINE: key = value: problem`` (invalid TOML, unknown key,
wrong type, unknown placeholder, missing start/apply, duplicate variant name, missing scenario).

Every command is an argument list (a TOML array of strings, or a string split with shlex); no
shell ever sees a value from the file. Placeholders inside arguments: ``{python}`` (this Python),
``{port}`` (a free local port picked per variant), ``{url}``, ``{variant}``, ``{variant_dir}``,
``{campaign_dir}``, ``{log_file}`` (default ``{variant_dir}/server.log``); :func:`fill` substitutes
them when the runner knows their values. Times are seconds (``wait_ready_s``, ``apply_timeout_s``,
a ramp's ``step_seconds`` and ``timeout_s``), rates requests per second.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from loadgen.lifecycle import split_command
from loadgen.spec import flags
from loadgen.spec.gates import ThresholdError, parse_thresholds
from loadgen.spec.options import OptionError
from loadgen.workload.errors import NO_VALUE, TableError
from loadgen.workload.tables import Table

PLACEHOLDERS = ("python", "port", "url", "variant", "variant_dir", "campaign_dir", "log_file")
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
_SLUG = re.compile(r"[^A-Za-z0-9._-]+")
LOAD_MODES = ("ramp", "knee")
# a [ramp] key for every option of the flag table's campaign surface (the key is the flag's name,
# --warmup-seconds -> warmup_seconds; --find-knee is mode = "knee"), and the campaign's own keys
TABLE_KEYS: dict[str, flags.Flag] = {
    f.name.replace("-", "_"): f for f in flags.FLAGS if "campaign" in f.surfaces and f.dest != "find_knee"
}
RAMP_KEYS = ("mode", *TABLE_KEYS, "args", "timeout_s")
# the table's options a LoadSpec holds in fields of its own; the others go to LoadSpec.options
_FIELDS = ("concurrency", "rate", "step_seconds", "warmup_seconds", "requests_per_step", "max_tokens", "scenario",
           "model", "fail_on", "abort_on")  # fmt: skip


class CampaignError(ValueError):
    """A campaign file that cannot be used: ``FILE:LINE: key = value: problem``."""


Command = list[str]


@dataclass
class LoadSpec:
    """``[ramp]`` (campaign-wide) merged with a variant's ``[variant.ramp]``."""

    mode: str = "ramp"
    concurrency: list[int] | None = None
    rate: list[float] | None = None
    step_seconds: float | None = None
    warmup_seconds: float | None = None
    requests_per_step: int | None = None
    max_tokens: int | None = None
    scenario: str | None = None
    model: str | None = None
    fail_on: str | None = None  # thresholds (``loadgen ramp --fail-on``): a breach makes the campaign exit 5
    abort_on: str | None = None  # thresholds that stop the variant's ramp early (``--abort-on``)
    args: list[str] = field(default_factory=list)
    timeout_s: float = 3600.0
    # the rest of the table's campaign options, by the flag's dest (arrival, burstiness, endpoint, ...)
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Variant:
    name: str
    description: str = ""
    url: str = ""
    start: Command | None = None
    apply: list[Command] = field(default_factory=list)
    rollback: list[Command] = field(default_factory=list)
    status: Command | None = None
    logs: Command | None = None
    log_file: str | None = None
    wait_ready_s: float = 120.0
    apply_timeout_s: float = 600.0
    load: LoadSpec = field(default_factory=LoadSpec)


@dataclass
class Campaign:
    name: str
    path: str
    description: str
    variants: list[Variant]


def slug(name: str) -> str:
    """A variant's folder name in the campaign directory; two variants may not share one."""
    # dots are stripped at the ends too: a name of `..` or `.` must not become a path step
    return _SLUG.sub("-", name).strip("-.")[:48] or "variant"


def fill(values: Sequence[str], env: dict[str, str]) -> list[str]:
    """``values`` with each ``{placeholder}`` replaced from ``env``; a placeholder ``env`` lacks stays as written."""
    return [_PLACEHOLDER.sub(lambda m: env.get(m.group(1), m.group(0)), v) for v in values]


def _line_of(text: str, key: str) -> int | None:
    """1-based line of dotted ``key`` (``variant[1].start``, ``ramp.max_tokens``, ``campaign``)."""
    m = re.match(r"^([A-Za-z_]+)(?:\[(\d+)\])?(?:\.(.*))?$", key)
    if not m:
        return None
    table, index, rest = m.group(1), int(m.group(2) or 0), m.group(3)
    lines = text.splitlines()
    header = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
    seen = -1
    start = None
    for i, line in enumerate(lines):
        h = header.match(line)
        if h and h.group(1) == table:
            seen += 1
            if seen == index:
                start = i
                break
    if start is None:
        return None
    if not rest:
        return start + 1
    names = [re.sub(r"\[\d+\]$", "", p) for p in rest.split(".") if p]
    section = table
    for j in range(start + 1, len(lines)):
        h = header.match(lines[j])
        if h:
            name = h.group(1)
            if name == table:  # the next [[variant]]
                break
            section = name
            if name == f"{table}.{'.'.join(names[:1])}" and len(names) == 1:
                return j + 1
            continue
        want = names[-1]
        if section == table and len(names) > 1:
            want = names[0]
        if re.match(rf"^\s*{re.escape(want)}\s*=", lines[j]):
            return j + 1
    return start + 1


def _command(t: Table, name: str, required: bool = False) -> Command | None:
    if not t.has(name):
        if required:
            t.raw(name)  # raises "is required"
        return None
    value = t.raw(name)
    if isinstance(value, str):
        try:
            return split_command(value, t.key(name))
        except ValueError as exc:
            raise TableError(t.key(name), value, str(exc).split(": ", 1)[-1]) from None
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return list(value)
    raise TableError(
        t.key(name), value, "must be a command: a string (split like a shell would) or an array of strings"
    )


def _commands(t: Table, name: str) -> list[Command]:
    if not t.has(name):
        return []
    value = t.raw(name)
    if not isinstance(value, list):
        raise TableError(t.key(name), value, 'must be an array of commands, e.g. [["systemctl", "restart", "sglang"]]')
    out: list[Command] = []
    for i, item in enumerate(value):
        key = f"{t.key(name)}[{i}]"
        if isinstance(item, str):
            try:
                out.append(split_command(item, key))
            except ValueError as exc:
                raise TableError(key, item, str(exc).split(": ", 1)[-1]) from None
        elif isinstance(item, list) and item and all(isinstance(v, str) for v in item):
            out.append(list(item))
        else:
            raise TableError(key, item, "must be a command: a string or a non-empty array of strings")
    return out


def _check_placeholders(key: str, values: Sequence[str]) -> None:
    for v in values:
        for m in _PLACEHOLDER.finditer(v):
            if m.group(1) not in PLACEHOLDERS:
                allowed = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
                raise TableError(key, v, f"unknown placeholder {{{m.group(1)}}}; allowed: {allowed}")


def _thresholds(t: Table, name: str, default: str | None) -> str | None:
    """A ``fail_on`` / ``abort_on`` text, its syntax checked here so a typo fails before any server starts."""
    text: str | None = t.get_str(name, default)
    if text is None or text is default:
        return text
    try:
        parse_thresholds(text, name)
    except ThresholdError as exc:
        raise TableError(t.key(name), text, str(exc).split(": ", 1)[-1]) from None
    return text


def _table_value(t: Table, key: str, f: flags.Flag) -> Any:
    """A [ramp] value of one of the flag table's options, checked as the table says (its kind, its
    choices, its bound), the error naming the key and line."""
    if f.kind == "choice":
        return t.get_choice(key, f.choices)
    if f.kind == "str":
        return t.get_str(key)
    if f.kind in ("int", "float"):
        value = t.get_int(key) if f.kind == "int" else t.get_float(key)
        try:
            return flags.parse_value(f, value, key)
        except OptionError as exc:
            raise TableError(t.key(key), t.raw(key), str(exc).split(": ", 1)[-1]) from None
    raise TableError(t.key(key), t.raw(key), f"a {f.kind} option has no campaign key yet; give it in args")


def _load(t: Table | None, base: LoadSpec) -> LoadSpec:
    if t is None:
        return base
    spec = LoadSpec(**{**base.__dict__, "args": list(base.args), "options": dict(base.options)})
    spec.mode = t.get_choice("mode", LOAD_MODES, spec.mode)
    if t.has("concurrency"):
        values = t.get_list("concurrency")
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
            raise TableError(t.key("concurrency"), values, "must be an array of whole numbers above 0")
        spec.concurrency, spec.rate = list(values), None
    if t.has("rate"):
        values = t.get_list("rate")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1e308 for v in values):
            raise TableError(t.key("rate"), values, "must be an array of finite request rates above 0 (req/s)")
        spec.rate, spec.concurrency = [float(v) for v in values], None
    if t.has("concurrency") and t.has("rate"):
        raise TableError(t.key("rate"), t.raw("rate"), "give concurrency or rate, not both")
    spec.step_seconds = t.get_float("step_seconds", spec.step_seconds, positive=True)
    spec.warmup_seconds = t.get_float("warmup_seconds", spec.warmup_seconds, min_value=0)
    spec.requests_per_step = t.get_int("requests_per_step", spec.requests_per_step, min_value=1)
    spec.max_tokens = t.get_int("max_tokens", spec.max_tokens, min_value=1)
    spec.scenario = t.get_str("scenario", spec.scenario)
    spec.model = t.get_str("model", spec.model)
    spec.fail_on = _thresholds(t, "fail_on", spec.fail_on)
    spec.abort_on = _thresholds(t, "abort_on", spec.abort_on)
    spec.timeout_s = t.get_float("timeout_s", spec.timeout_s, positive=True)
    for key, f in TABLE_KEYS.items():
        if key not in _FIELDS and t.has(key):
            spec.options[f.dest] = _table_value(t, key, f)
    if t.has("burstiness") or t.has("arrival"):
        try:
            flags.check_combination(spec.options, "campaign")
        except OptionError as exc:
            key = "burstiness" if t.has("burstiness") else "arrival"
            raise TableError(t.key(key), t.raw(key), str(exc).split(": ", 1)[-1].replace("--", "")) from None
    if t.has("args"):
        args = t.get_list("args", non_empty=False)
        if not all(isinstance(a, str) for a in args):
            raise TableError(t.key("args"), args, "must be an array of strings (extra `loadgen ramp` flags)")
        for a in args:
            if a == "--api-key" or a.startswith("--api-key="):
                raise TableError(
                    t.key("args"), a, "no secrets in campaign files: set OPENAI_API_KEY in the environment"
                )
        _check_written_paths(t.key("args"), args)
        _check_placeholders(t.key("args"), args)
        spec.args = list(args)
    t.finish()
    return spec


# `loadgen ramp` flags in `args` that name a file or folder the ramp writes: a campaign writes only
# inside its own directory, so their value must start with {variant_dir}/ or {campaign_dir}/ and
# hold no `..` (the ramp's --out is the campaign's to choose)
_WRITTEN_PATH_FLAGS = ("--junit",)


def _check_written_paths(key: str, args: list[str]) -> None:
    for i, a in enumerate(args):
        flag, eq, value = a.partition("=")
        if flag == "--out":
            raise TableError(key, a, "the campaign decides where each ramp writes (its variant folder): remove --out")
        if flag not in _WRITTEN_PATH_FLAGS:
            continue
        if not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
        parts = value.replace("\\", "/").split("/")
        if parts[0] not in ("{variant_dir}", "{campaign_dir}") or ".." in parts:
            raise TableError(
                key,
                value,
                f"{flag} must write inside the campaign directory: start it with {{variant_dir}}/ "
                "(e.g. {variant_dir}/junit.xml) and use no `..`",
            )


def _variant(t: Table, defaults: dict[str, Any], load: LoadSpec) -> Variant:
    name = t.get_str("name")
    if not name.strip():
        raise TableError(t.key("name"), name, "must not be empty")
    v = Variant(name=name)
    v.description = t.get_str("description", "")
    v.url = t.get_str("url", defaults["url"])
    v.start = _command(t, "start")
    v.apply = _commands(t, "apply")
    v.rollback = _commands(t, "rollback")
    v.status = _command(t, "status") or defaults["status"]
    v.logs = _command(t, "logs") or defaults["logs"]
    v.log_file = t.get_str("log_file", defaults["log_file"])
    v.wait_ready_s = t.get_float("wait_ready_s", defaults["wait_ready_s"], min_value=0)
    v.apply_timeout_s = t.get_float("apply_timeout_s", defaults["apply_timeout_s"], positive=True)
    v.load = _load(t.sub("ramp"), load)
    t.finish()
    if not v.url:
        raise TableError(t.key("url"), v.url, 'is required (here or in [campaign]), e.g. "http://127.0.0.1:{port}"')
    if v.start is None and not v.apply:
        raise TableError(
            t.key("start"), NO_VALUE, "a variant needs a start command or apply commands (how its server is configured)"
        )
    _check_placeholders(t.key("url"), [v.url])
    for key, cmd in (("start", v.start), ("status", v.status), ("logs", v.logs)):
        if cmd:
            _check_placeholders(t.key(key), cmd)
    for key, cmds in (("apply", v.apply), ("rollback", v.rollback)):
        for i, cmd in enumerate(cmds):
            _check_placeholders(f"{t.key(key)}[{i}]", cmd)
    if v.log_file:
        _check_placeholders(t.key("log_file"), [v.log_file])
    if v.load.concurrency is None and v.load.rate is None and v.load.scenario is None:
        raise TableError(t.key("ramp.concurrency"), NO_VALUE, "is required (in [ramp] or here), or give a scenario")
    return v


def parse_campaign(text: str, path: str = "(campaign)", base_dir: Path | None = None) -> Campaign:
    """Validate campaign TOML ``text``; every problem is a :class:`CampaignError` naming file and line.

    ``base_dir`` (the file's folder) resolves a ramp's ``scenario`` path: beside the campaign file
    first, else from the current folder; a scenario found in neither is an error.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
        where = f"{path}:{m.group(1)}" if m else path
        detail = msg[: m.start()].strip() if m else msg
        raise CampaignError(f"{where}: invalid TOML: {detail}") from None
    try:
        root = Table(data)
        head = root.sub("campaign")
        if head is None:
            raise TableError("campaign", NO_VALUE, 'is required: a [campaign] table with at least name = "..."')
        name = head.get_str("name")
        defaults = {
            "url": head.get_str("url", ""),
            "status": _command(head, "status"),
            "logs": _command(head, "logs"),
            "log_file": head.get_str("log_file", None),
            "wait_ready_s": head.get_float("wait_ready_s", 120.0, min_value=0),
            "apply_timeout_s": head.get_float("apply_timeout_s", 600.0, positive=True),
        }
        description = head.get_str("description", "")
        head.finish()
        load = _load(root.sub("ramp"), LoadSpec())
        raw_variants = root.raw("variant", None)
        if not isinstance(raw_variants, list) or not raw_variants:
            raise TableError("variant", NO_VALUE, "is required: one [[variant]] table per server configuration")
        variants = [_variant(Table(item, f"variant[{i}]"), defaults, load) for i, item in enumerate(raw_variants)]
        root.finish()
    except TableError as exc:
        line = _line_of(text, exc.key)
        where = f"{path}:{line}" if line else path
        raise CampaignError(f"{where}: {exc.describe(exc.key)}") from None
    seen: set[str] = set()
    for i, v in enumerate(variants):
        folder = slug(v.name)
        if folder in seen:
            line = _line_of(text, f"variant[{i}].name")
            raise CampaignError(f'{path}:{line}: variant[{i}].name = "{v.name}": two variants with the same name')
        seen.add(folder)
    if base_dir is not None:
        for i, v in enumerate(variants):
            if v.load.scenario is None:
                continue
            found = [c for c in (base_dir / v.load.scenario, Path(v.load.scenario)) if c.is_file()]
            if not found:
                own = isinstance(data["variant"][i].get("ramp"), dict) and "scenario" in data["variant"][i]["ramp"]
                line = _line_of(text, f"variant[{i}].ramp.scenario" if own else "ramp.scenario")
                raise CampaignError(
                    f'{path}:{line}: scenario = "{v.load.scenario}": no such file (looked beside the campaign '
                    f"file, in {base_dir}, and in the current folder)"
                )
            v.load.scenario = str(found[0].resolve())
    return Campaign(name=name, path=path, description=description, variants=variants)


def load_campaign(path: str | Path) -> Campaign:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CampaignError(f"{p}: no such campaign file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CampaignError(f"{p}: cannot read the campaign file: {exc}") from None
    return parse_campaign(text, str(p), p.parent)
