"""``loadgen campaign FILE.toml``: the same ramp against several server configurations, compared.

Each variant of a campaign file is one server configuration, tried in turn:

1. ``apply`` commands run to completion (edit a flag, ``systemctl restart``); a failing one ends
   the variant;
2. ``start``: a server command the campaign owns (its output goes to ``server.out``; it is
   stopped after the variant);
3. readiness: :func:`loadgen.lifecycle.wait_ready` with the started process's liveness and the
   ``status`` command; a server that does not come up is recorded with the reason (the matched
   lines of its captured log) and the campaign goes on with the next variant;
4. the load: ``loadgen ramp`` (or ``--find-knee``) as a child process, so gevent never enters
   this process; its run directory lands in the variant's folder;
5. ``rollback`` commands, whatever happened.

The campaign directory (``<out>/<stamp>-campaign-<name>/``) holds one folder per variant (apply,
server and ramp logs, the captured log of a failed start, the ramp's run directory) and the report:
``campaign.json`` (everything) and ``campaign.md`` (variants side by side, each failure's reason).

Every command is an argument list (a TOML array of strings, or a string split with shlex); no
shell ever sees a value from the file. Placeholders inside arguments: ``{python}`` (this Python),
``{port}`` (a free local port picked per variant), ``{url}``, ``{variant}``, ``{variant_dir}``,
``{campaign_dir}``, ``{log_file}`` (default ``{variant_dir}/server.log``).
"""

from __future__ import annotations

import argparse
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

import orjson

from loadgen.lifecycle import NotReady, ServerProcess, capture_logs, match_failures, split_command, wait_ready
from loadgen.records import RunDirError
from loadgen.rundir import create_run_dir, write_manifest
from loadgen.workload.errors import NO_VALUE, SpecError
from loadgen.workload.spec import Table

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_RUN_DIR = 4
EXIT_INTERRUPTED = 130

CONTEXT_LINES = 8  # log lines kept from the first fatal match on
PLACEHOLDERS = ("python", "port", "url", "variant", "variant_dir", "campaign_dir", "log_file")
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
_SLUG = re.compile(r"[^A-Za-z0-9._-]+")
LOAD_MODES = ("ramp", "knee")
RAMP_KEYS = (
    "mode",
    "concurrency",
    "rate",
    "step_seconds",
    "warmup_seconds",
    "requests_per_step",
    "max_tokens",
    "scenario",
    "model",
    "args",
    "timeout_s",
)


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
    args: list[str] = field(default_factory=list)
    timeout_s: float = 3600.0


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


# -- the file ---------------------------------------------------------------------------------------


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
            raise SpecError(t.key(name), value, str(exc).split(": ", 1)[-1]) from None
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return list(value)
    raise SpecError(t.key(name), value, "must be a command: a string (split like a shell would) or an array of strings")


def _commands(t: Table, name: str) -> list[Command]:
    if not t.has(name):
        return []
    value = t.raw(name)
    if not isinstance(value, list):
        raise SpecError(t.key(name), value, 'must be an array of commands, e.g. [["systemctl", "restart", "sglang"]]')
    out: list[Command] = []
    for i, item in enumerate(value):
        key = f"{t.key(name)}[{i}]"
        if isinstance(item, str):
            try:
                out.append(split_command(item, key))
            except ValueError as exc:
                raise SpecError(key, item, str(exc).split(": ", 1)[-1]) from None
        elif isinstance(item, list) and item and all(isinstance(v, str) for v in item):
            out.append(list(item))
        else:
            raise SpecError(key, item, "must be a command: a string or a non-empty array of strings")
    return out


def _check_placeholders(key: str, values: Sequence[str]) -> None:
    for v in values:
        for m in _PLACEHOLDER.finditer(v):
            if m.group(1) not in PLACEHOLDERS:
                allowed = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
                raise SpecError(key, v, f"unknown placeholder {{{m.group(1)}}}; allowed: {allowed}")


def _load(t: Table | None, base: LoadSpec) -> LoadSpec:
    if t is None:
        return base
    spec = LoadSpec(**{**base.__dict__, "args": list(base.args)})
    spec.mode = t.get_choice("mode", LOAD_MODES, spec.mode)
    if t.has("concurrency"):
        values = t.get_list("concurrency")
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
            raise SpecError(t.key("concurrency"), values, "must be an array of whole numbers above 0")
        spec.concurrency, spec.rate = list(values), None
    if t.has("rate"):
        values = t.get_list("rate")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in values):
            raise SpecError(t.key("rate"), values, "must be an array of request rates above 0 (req/s)")
        spec.rate, spec.concurrency = [float(v) for v in values], None
    if t.has("concurrency") and t.has("rate"):
        raise SpecError(t.key("rate"), t.raw("rate"), "give concurrency or rate, not both")
    spec.step_seconds = t.get_float("step_seconds", spec.step_seconds, positive=True)
    spec.warmup_seconds = t.get_float("warmup_seconds", spec.warmup_seconds, min_value=0)
    spec.requests_per_step = t.get_int("requests_per_step", spec.requests_per_step, min_value=1)
    spec.max_tokens = t.get_int("max_tokens", spec.max_tokens, min_value=1)
    spec.scenario = t.get_str("scenario", spec.scenario)
    spec.model = t.get_str("model", spec.model)
    spec.timeout_s = t.get_float("timeout_s", spec.timeout_s, positive=True)
    if t.has("args"):
        args = t.get_list("args", non_empty=False)
        if not all(isinstance(a, str) for a in args):
            raise SpecError(t.key("args"), args, "must be an array of strings (extra `loadgen ramp` flags)")
        for a in args:
            if a == "--api-key" or a.startswith("--api-key="):
                raise SpecError(t.key("args"), a, "no secrets in campaign files: set OPENAI_API_KEY in the environment")
        _check_placeholders(t.key("args"), args)
        spec.args = list(args)
    t.finish()
    return spec


def _variant(t: Table, defaults: dict[str, Any], load: LoadSpec) -> Variant:
    name = t.get_str("name")
    if not name.strip():
        raise SpecError(t.key("name"), name, "must not be empty")
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
        raise SpecError(t.key("url"), v.url, 'is required (here or in [campaign]), e.g. "http://127.0.0.1:{port}"')
    if v.start is None and not v.apply:
        raise SpecError(
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
        raise SpecError(t.key("ramp.concurrency"), NO_VALUE, "is required (in [ramp] or here), or give a scenario")
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
            raise SpecError("campaign", NO_VALUE, 'is required: a [campaign] table with at least name = "..."')
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
            raise SpecError("variant", NO_VALUE, "is required: one [[variant]] table per server configuration")
        variants = [_variant(Table(item, f"variant[{i}]"), defaults, load) for i, item in enumerate(raw_variants)]
        root.finish()
    except SpecError as exc:
        line = _line_of(text, exc.key)
        where = f"{path}:{line}" if line else path
        raise CampaignError(f"{where}: {exc.describe(exc.key)}") from None
    seen: set[str] = set()
    for i, v in enumerate(variants):
        slug = _slug(v.name)
        if slug in seen:
            line = _line_of(text, f"variant[{i}].name")
            raise CampaignError(f'{path}:{line}: variant[{i}].name = "{v.name}": two variants with the same name')
        seen.add(slug)
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


# -- running ----------------------------------------------------------------------------------------


def _slug(name: str) -> str:
    return _SLUG.sub("-", name).strip("-")[:48] or "variant"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _fill(values: Sequence[str], env: dict[str, str]) -> list[str]:
    return [_PLACEHOLDER.sub(lambda m: env.get(m.group(1), m.group(0)), v) for v in values]


def _run_commands(cmds: list[Command], env: dict[str, str], log: Path, timeout_s: float) -> str | None:
    """Run each command to completion, output appended to ``log``; the first failure's reason, or None."""
    with open(log, "ab") as fh:
        for cmd in cmds:
            argv = _fill(cmd, env)
            fh.write(f"$ {shlex.join(argv)}\n".encode())
            fh.flush()
            try:
                done = subprocess.run(
                    argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout_s
                )
            except FileNotFoundError:
                return f"`{shlex.join(argv)}`: command not found"
            except subprocess.TimeoutExpired:
                return f"`{shlex.join(argv)}`: still running after {timeout_s:g} s (stopped)"
            except OSError as exc:
                return f"`{shlex.join(argv)}`: cannot run it ({exc.strerror})"
            if done.returncode != 0:
                return f"`{shlex.join(argv)}` exited with {done.returncode}"
    return None


def _ramp_argv(v: Variant, url: str, variant_dir: Path, label: str, env: dict[str, str], wait_s: float) -> list[str]:
    spec = v.load
    argv = [sys.executable, "-m", "loadgen.cli", "ramp", "--url", url, "--out", str(variant_dir), "--label", label]
    if spec.concurrency:
        argv += ["--concurrency", ",".join(str(c) for c in spec.concurrency)]
    if spec.rate:
        argv += ["--rate", ",".join(f"{r:g}" for r in spec.rate)]
    for flag, value in (
        ("--step-seconds", spec.step_seconds),
        ("--warmup-seconds", spec.warmup_seconds),
        ("--requests-per-step", spec.requests_per_step),
        ("--max-tokens", spec.max_tokens),
        ("--scenario", spec.scenario),
        ("--model", spec.model),
    ):
        if value is not None:
            argv += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    if spec.mode == "knee":
        argv.append("--find-knee")
    argv += ["--wait-ready", f"{wait_s:g}"]
    return argv + _fill(spec.args, env)


def _brief(summary: dict[str, Any]) -> dict[str, Any]:
    steps = summary.get("steps") or []
    valid = [s for s in steps if s.get("valid", True) and s.get("output_tok_s") is not None]
    best = max(valid, key=lambda s: s["output_tok_s"], default=None)
    knee = summary.get("knee") or {}
    rows = [
        {
            "concurrency": s.get("concurrency"),
            "rate": s.get("rate"),
            "context_tokens": s.get("context_tokens"),
            "output_tok_s": s.get("output_tok_s"),
            "ttft_p50_ms": (s.get("ttft_ms") or {}).get("p50"),
            "tpot_p50_ms": (s.get("tpot_ms") or {}).get("p50"),
            "gpu_power_w_mean": (s.get("gpu_power_w") or {}).get("mean"),
            "requests_ok": s.get("requests_ok"),
            "requests_failed": s.get("requests_failed"),
            "valid": s.get("valid", True),
            "invalid_reason": s.get("invalid_reason"),
            "end_reason": s.get("end_reason"),
        }
        for s in steps
    ]
    return {
        "step_rows": rows,
        "steps": len(steps),
        "valid_steps": len(valid),
        "peak_output_tok_s": best["output_tok_s"] if best else None,
        "peak_at": {"concurrency": best.get("concurrency"), "rate": best.get("rate")} if best else None,
        "requests_ok": sum(int(s.get("requests_ok") or 0) for s in steps),
        "requests_failed": sum(int(s.get("requests_failed") or 0) for s in steps),
        "knee": {"concurrency": knee.get("concurrency"), "rate": knee.get("rate"), "reason": knee.get("reason")},
    }


class CampaignRunner:
    """Runs the variants in order; ``out`` gets one line per phase (progress for a person)."""

    def __init__(self, campaign: Campaign, campaign_dir: Path, out: IO[str]) -> None:
        self.campaign = campaign
        self.dir = campaign_dir
        self.out = out
        self.results: list[dict[str, Any]] = []
        self.server: ServerProcess | None = None

    def say(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def run(self, only: Sequence[str] = ()) -> None:
        for v in self.campaign.variants:
            if only and v.name not in only:
                continue
            self.run_variant(v)

    def run_variant(self, v: Variant) -> dict[str, Any]:
        """Run one variant; its result is in ``self.results`` from the start (a Ctrl-C keeps it)."""
        vdir = self.dir / _slug(v.name)
        vdir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        env = {
            "python": sys.executable,
            "port": str(port),
            "variant": v.name,
            "variant_dir": str(vdir),
            "campaign_dir": str(self.dir),
        }
        env["log_file"] = _fill([v.log_file], env)[0] if v.log_file else str(vdir / "server.log")
        url = _fill([v.url], env)[0]
        env["url"] = url
        result: dict[str, Any] = {
            "name": v.name,
            "description": v.description,
            "url": url,
            "dir": vdir.name,
            "status": "ok",
            "reason": None,
            "matches": [],
            "log_tail": [],
            "run_dir": None,
            "started_ns": time.time_ns(),
        }
        self.results.append(result)
        self.say(f"variant {v.name}: {v.description or ''}".rstrip(": "))
        try:
            self._variant_body(v, vdir, env, url, result)
        except KeyboardInterrupt:
            result["status"], result["reason"] = "interrupted", "the campaign was interrupted during this variant"
            raise
        finally:
            if self.server is not None:
                code = self.server.stop()
                result["server_exit"] = code
                self.server = None
            if v.rollback:
                why = _run_commands(v.rollback, env, vdir / "rollback.log", v.apply_timeout_s)
                result["rollback"] = "ok" if why is None else why
                if why:
                    self.say(f"  rollback failed: {why}")
            result["ended_ns"] = time.time_ns()
        self.say(f"  -> {result['status']}" + (f": {result['reason']}" if result["reason"] else ""))
        return result

    def _capture(self, v: Variant, vdir: Path, env: dict[str, str], result: dict[str, Any]) -> None:
        lines: list[str] = []
        if self.server is not None:
            lines += capture_logs(None, self.server.log_path, max_lines=1000)
        log_file = Path(env["log_file"])
        if log_file.exists() or v.log_file:
            lines += capture_logs(None, log_file, max_lines=2000)
        if v.logs:
            lines += capture_logs(_fill(v.logs, env), None, max_lines=2000)
        (vdir / "captured.log").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
        matches = match_failures(lines)
        result["matches"] = [{k: m[k] for k in ("pattern", "severity", "line")} for m in matches]
        result["log_tail"] = lines[-20:]
        if matches:  # the first failure with the lines after it (SGLang prints its advice there)
            first = next((m for m in matches if m["severity"] == "fatal"), matches[0])
            result["context"] = lines[first["index"] : first["index"] + CONTEXT_LINES]
        result["captured_log"] = f"{vdir.name}/captured.log"

    def _variant_body(self, v: Variant, vdir: Path, env: dict[str, str], url: str, result: dict[str, Any]) -> None:
        if v.apply:
            self.say(f"  apply: {len(v.apply)} command(s)")
            why = _run_commands(v.apply, env, vdir / "apply.log", v.apply_timeout_s)
            if why is not None:
                result["status"], result["reason"] = "apply_failed", why
                result["log_tail"] = capture_logs(None, vdir / "apply.log", max_lines=20)
                return
        if v.start is not None:
            argv = _fill(v.start, env)
            self.say(f"  start: {shlex.join(argv)}")
            try:
                self.server = ServerProcess(argv, vdir / "server.out")
            except ValueError as exc:
                result["status"], result["reason"] = "failed_to_start", str(exc)
                return
        status = _fill(v.status, env) if v.status else None
        last_print = [0.0]

        def progress(last: str) -> None:
            now = time.monotonic()
            if now - last_print[0] >= 5.0:
                self.say(f"  waiting for {url}: {last}")
                last_print[0] = now

        t0 = time.monotonic()
        try:
            wait_ready(
                url,
                v.wait_ready_s,
                alive=self.server.alive if self.server is not None else None,
                progress=progress,
                status_cmd=status,
            )
        except NotReady as exc:
            result["status"], result["reason"] = "failed_to_start", exc.reason
            self._capture(v, vdir, env, result)
            for m in result["matches"][:5]:
                self.say(f"  {m['pattern']}: {m['line']}")
            return
        except ValueError as exc:  # the status command itself cannot run
            result["status"], result["reason"] = "failed_to_start", str(exc)
            return
        result["ready_s"] = round(time.monotonic() - t0, 3)
        self.say(f"  ready after {result['ready_s']:.1f} s; {v.load.mode} running")
        label = f"{self.campaign.name} {v.name}"
        argv = _ramp_argv(v, url, vdir, label, env, wait_s=min(10.0, max(v.wait_ready_s, 1.0)))
        result["ramp_argv"] = argv[1:]
        try:
            code, run_dir = self._ramp(argv, vdir / "ramp.log", v.load.timeout_s)
        except KeyboardInterrupt:
            self._keep_run(result, _newest_run_dir(vdir))
            raise
        result["ramp_exit"] = code
        if run_dir is None:
            run_dir = _newest_run_dir(vdir)
        self._keep_run(result, run_dir)
        down = [r for r in (result.get("summary") or {}).get("step_rows", []) if r.get("end_reason") == "server_down"]
        if self.server is not None and self.server.alive() is not None:
            result["status"] = "server_died"
            result["reason"] = f"{self.server.alive()} during the {v.load.mode}"
            self._capture(v, vdir, env, result)
        elif down:  # a service we did not start went down (the ramp noticed it)
            at = down[0]
            load = f"C={at['concurrency']}" if at.get("concurrency") is not None else f"{at.get('rate')} req/s"
            result["status"] = "server_died"
            result["reason"] = f"the server went down during the {v.load.mode} (step at {load})"
            self._capture(v, vdir, env, result)
        elif code != 0:
            result["status"] = "ramp_failed"
            result["reason"] = f"loadgen ramp exited with {code}; see {vdir.name}/ramp.log"
            result["log_tail"] = capture_logs(None, vdir / "ramp.log", max_lines=20)

    def _keep_run(self, result: dict[str, Any], run_dir: Path | None) -> None:
        """Point the result at the ramp's run directory and its summary (when it wrote one)."""
        if run_dir is None:
            return
        result["run_dir"] = str(run_dir.relative_to(self.dir)) if run_dir.is_relative_to(self.dir) else str(run_dir)
        if (run_dir / "summary.json").exists():
            result["summary"] = _brief(orjson.loads((run_dir / "summary.json").read_bytes()))

    def _ramp(self, argv: list[str], log: Path, timeout_s: float) -> tuple[int, Path | None]:
        """Run ``loadgen ramp`` as a child (gevent stays out of this process); its exit code and run dir.

        The child has its own session, so a Ctrl-C at the terminal reaches only the campaign, which
        then sends the ramp one SIGINT (it writes a partial report) and waits for it.
        """
        with open(log, "ab") as err:
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True
            )
            try:
                stdout, _ = proc.communicate(timeout=timeout_s)
            except (subprocess.TimeoutExpired, KeyboardInterrupt) as exc:
                proc.send_signal(signal.SIGINT)  # the ramp writes a partial report on SIGINT
                try:
                    stdout, _ = proc.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    stdout, _ = proc.communicate()
                if isinstance(exc, KeyboardInterrupt):
                    raise
        lines = [x for x in stdout.decode("utf-8", "replace").splitlines() if x.strip()]
        run_dir = Path(lines[-1].strip()) if lines else None
        if run_dir is not None and not run_dir.is_dir():
            run_dir = None
        return proc.returncode, run_dir


def _newest_run_dir(folder: Path) -> Path | None:
    """The newest run directory under ``folder`` (a ramp stopped before printing its path)."""
    found = [p.parent for p in folder.glob("*/manifest.json")]
    return max(found, key=lambda p: p.stat().st_mtime, default=None)


# -- the report -------------------------------------------------------------------------------------


def build_report(
    campaign: Campaign, campaign_dir: Path, results: list[dict[str, Any]], interrupted: bool
) -> dict[str, Any]:
    """campaign.json's content; compares the variants that produced a run (first one is the baseline)."""
    from loadgen.pipeline import summarise
    from loadgen.report.compare import compare_runs

    summaries: list[dict[str, Any]] = []
    labels: list[str] = []
    for r in results:
        if r.get("run_dir") and r.get("summary"):
            _, summary = summarise(campaign_dir / r["run_dir"])
            summaries.append(summary)
            labels.append(r["name"])
    comparison = compare_runs(summaries, labels) if len(summaries) >= 2 else None
    return {
        "kind": "campaign",
        "name": campaign.name,
        "file": campaign.path,
        "description": campaign.description,
        "interrupted": interrupted,
        "variants": results,
        "comparison": comparison,
    }


_LOG_PREFIX = re.compile(r"^\S+T\S+ \S+ [\w.@-]+\[\d+\]: ")  # journal: "<iso time> <host> <unit>[<pid>]: "
_SGLANG_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:]+(?: [A-Z]+\d+)*\] ")


def short_line(line: str, limit: int = 160) -> str:
    """A log line without its journal and SGLang prefixes, shortened for a table cell."""
    text = _SGLANG_PREFIX.sub("", _LOG_PREFIX.sub("", line))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _num(v: Any) -> str:
    return "—" if v is None else f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def render_markdown(report: dict[str, Any]) -> str:
    from loadgen.report.compare import render_compare_md

    lines = [f"# Campaign: {report['name']}", ""]
    if report.get("description"):
        lines += [report["description"], ""]
    lines += [
        f"File: `{report['file']}`" + ("  \n**Interrupted: a partial report.**" if report["interrupted"] else ""),
        "",
    ]
    lines += [
        "| variant | status | peak tok/s | at load | requests ok / failed | knee | why |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report["variants"]:
        s = r.get("summary") or {}
        at = s.get("peak_at") or {}
        load = (
            f"C={at['concurrency']}"
            if at.get("concurrency") is not None
            else (f"{at['rate']:g} req/s" if at.get("rate") else "—")
        )
        knee = s.get("knee") or {}
        knee_at = knee.get("concurrency") or knee.get("rate")
        reqs = f"{s['requests_ok']} / {s['requests_failed']}" if s else "—"
        why = short_line(r["matches"][0]["line"]) if r.get("matches") else (r["reason"] or "")
        lines.append(
            f"| {_cell(r['name'])} | {r['status']} | {_num(s.get('peak_output_tok_s'))} | {load} | {reqs} | "
            f"{_cell(knee_at) if knee_at is not None else '—'} | {_cell(why)} |"
        )
    lines.append("")
    for r in report["variants"]:
        if r["status"] == "ok":
            continue
        lines += [f"## {r['name']}: {r['status']}", "", r["reason"] or "", ""]
        if r.get("matches"):
            lines += ["Matched failure lines of the server's log:", "", "```"]
            lines += [m["line"] for m in r["matches"][:20]]
            lines += ["```", ""]
            if r.get("context") and len(r["context"]) > 1:
                lines += ["The log from the first failure on:", "", "```", *r["context"], "```", ""]
        elif r.get("log_tail"):
            lines += ["No known failure line matched; the log ends with:", "", "```", *r["log_tail"], "```", ""]
        if r.get("captured_log"):
            lines += [f"Captured log: `{r['captured_log']}`", ""]
    for r in report["variants"]:
        rows = (r.get("summary") or {}).get("step_rows") or []
        if not rows:
            continue
        lines += [
            f"## {r['name']}: steps",
            "",
            "| load | context | tok/s | TTFT p50 ms | TPOT p50 ms | GPU power W | ok / failed | valid |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in rows:
            load = f"C={row['concurrency']}" if row.get("concurrency") is not None else f"{row.get('rate')} req/s"
            valid = "yes" if row.get("valid", True) else f"no: {_cell(row.get('invalid_reason') or '')}"
            lines.append(
                f"| {load} | {row.get('context_tokens') or '—'} | {_num(row.get('output_tok_s'))} | "
                f"{_num(row.get('ttft_p50_ms'))} | {_num(row.get('tpot_p50_ms'))} | "
                f"{_num(row.get('gpu_power_w_mean'))} | "
                f"{row.get('requests_ok')} / {row.get('requests_failed')} | {valid} |"
            )
        lines.append("")
    cmp = report.get("comparison")
    if cmp is not None:
        lines += [f"## Comparison (baseline: {cmp['baseline']})", "", render_compare_md(cmp)]
    for r in report["variants"]:
        s = r.get("summary")
        if s and s.get("knee", {}).get("reason"):
            lines += [f"- {r['name']} knee: {s['knee']['reason']}"]
    lines += ["", "Run directories: " + ", ".join(f"`{r['run_dir']}`" for r in report["variants"] if r.get("run_dir"))]
    return "\n".join(lines).rstrip() + "\n"


def write_report(campaign_dir: Path, report: dict[str, Any]) -> None:
    (campaign_dir / "campaign.json").write_bytes(
        orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"
    )
    (campaign_dir / "campaign.md").write_text(render_markdown(report), encoding="utf-8")


# -- command line -----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="loadgen campaign",
        description="Run the same ramp against several server configurations and compare them.",
    )
    p.add_argument("file", help="campaign file (TOML), e.g. scenarios/campaign-max-running-requests.toml")
    p.add_argument("--out", default="reports", help="folder for the campaign directory (default reports)")
    p.add_argument("--only", action="append", default=[], metavar="NAME", help="run only this variant (repeatable)")
    p.add_argument("--check", action="store_true", help="validate the file and print the plan; run nothing")
    return p


def _plan_text(c: Campaign) -> str:
    lines = [f"campaign {c.name}: {len(c.variants)} variant(s)"]
    for v in c.variants:
        lines.append(f"- {v.name}: {v.description}".rstrip(": "))
        for cmd in v.apply:
            lines.append(f"    apply:    {shlex.join(cmd)}")
        if v.start:
            lines.append(f"    start:    {shlex.join(v.start)}")
        lines.append(
            f"    ready:    {v.url} within {v.wait_ready_s:g} s"
            + (f", status {shlex.join(v.status)}" if v.status else "")
        )
        load = v.load
        what = (
            f"concurrency {load.concurrency}" if load.concurrency else f"rate {load.rate}" if load.rate else "scenario"
        )
        lines.append(f"    {load.mode}:     {what}, {load.step_seconds or 'default'} s steps")
        for cmd in v.rollback:
            lines.append(f"    rollback: {shlex.join(cmd)}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, out: IO[str] | None = None) -> int:
    stream = out if out is not None else sys.stderr
    ns = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        campaign = load_campaign(ns.file)
    except CampaignError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    unknown = [n for n in ns.only if n not in {v.name for v in campaign.variants}]
    if unknown:
        names = ", ".join(v.name for v in campaign.variants)
        print(f"error: --only {unknown[0]!r}: no such variant in {ns.file}; variants: {names}", file=sys.stderr)
        return EXIT_USAGE
    if ns.check:
        print(_plan_text(campaign))
        return EXIT_OK
    try:
        campaign_dir = create_run_dir(ns.out, f"campaign-{campaign.name}")
    except RunDirError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_RUN_DIR
    write_manifest(campaign_dir, {"kind": "campaign", "name": campaign.name, "file": campaign.path})
    runner = CampaignRunner(campaign, campaign_dir, stream)
    interrupted = False
    previous: Callable[..., Any] | int | None = signal.getsignal(signal.SIGTERM)

    def on_term(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        runner.run(ns.only)
    except KeyboardInterrupt:
        interrupted = True
        stream.write("interrupted: writing a partial campaign report\n")
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
    report = build_report(campaign, campaign_dir, runner.results, interrupted)
    write_report(campaign_dir, report)
    print(render_markdown(report))
    print(f"report: {campaign_dir / 'campaign.md'}")
    print(campaign_dir)
    return EXIT_INTERRUPTED if interrupted else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
