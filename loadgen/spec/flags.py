"""The one table of a run's options, from which every front end is generated.

Each row is one option of ``RampOptions``: its name on the command line (``--max-tokens``), its
name in Locust (``--lg-max-tokens``, a field of the web UI's form when ``form`` is among its
surfaces), how its text is parsed, its default, its help and its group in ``--help`` (``GROUPS``).
The surfaces:

* ``ramp``: ``loadgen ramp`` (and ``loadgen demo``, with the demo's own defaults);
* ``ui``: ``loadgen ui``, whose values become the defaults of the form (a value not given there
  leaves the locustfile's default);
* ``form``: a ``--lg-*`` option of the locustfile shown in the web UI's form; ``lg``: a ``--lg-*``
  option on Locust's command line only;
* ``campaign``: a key of a campaign's ``[load]`` table, turned into ``loadgen ramp`` argv.

``add_arguments`` builds the argparse options of a surface, in their groups, each help ending with
its default (``command_line_help``; ``Flag.help`` itself never says it, so the web form can show
it as is), ``raw_values`` reads them back by
``dest``, ``parse_value`` turns a raw text into the option's value (errors name the flag as the
user typed it), and ``to_argv`` writes values back as flags (campaigns, ``loadgen ui`` -> Locust).
No gevent and nothing of the load side here: campaigns and the CLI import it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from loadgen.spec.calls import ENDPOINTS
from loadgen.spec.gates import SLOError, ThresholdError, Thresholds, parse_slo, parse_thresholds
from loadgen.spec.options import (
    OptionError,
    extra_body_items,
    parse_extra_body,
    parse_float_list,
    parse_int_list,
    parse_tenant_flags,
)
from loadgen.spec.request import DEFAULT_MAX_TOKENS

Surface = Literal["ramp", "ui", "form", "lg", "campaign"]
# int, float, str: one value; ints, floats: comma-separated lists; body: --extra-body items; slo:
# latency limits; thresholds: pass/fail conditions (spec.gates); switch: present or not; choice: one
# of ``choices``
Kind = Literal["int", "float", "str", "ints", "floats", "body", "slo", "thresholds", "switch", "choice", "tenants"]

RAMP: frozenset[Surface] = frozenset({"ramp"})


# The groups of ``loadgen ramp --help`` (and ``loadgen ui --help``), in the order it shows them
TARGET = "Target server"
LOAD = "Load"
STEPS = "Steps and timing"
REQUESTS = "Requests"
VERDICT = "Verdict and gates"
KNEE = "Knee search"
OUTPUT = "Output"
TELEMETRY = "Telemetry / GPU"
TRANSPORT = "Transport and timeouts"
GROUPS: tuple[str, ...] = (TARGET, LOAD, STEPS, REQUESTS, VERDICT, KNEE, OUTPUT, TELEMETRY, TRANSPORT)


@dataclass(frozen=True)
class Bound:
    """The least value a numeric option takes: ``least`` itself too unless ``strict``. ``hint`` ends
    the error (what the value means)."""

    least: float
    strict: bool = False
    hint: str = ""

    def words(self) -> str:
        if self.strict:
            return f"must be above {self.least:g}"
        return f"must be {self.least:g} or more"


ABOVE_0 = Bound(0, strict=True)
AT_LEAST_0 = Bound(0)
AT_LEAST_1 = Bound(1)


@dataclass(frozen=True, slots=True)
class Flag:
    """One option. ``dest``: the ``RampOptions`` attribute (``timeouts.stall_s`` for a nested one;
    ``no_telemetry``, ``no_stream``: switches read by the builder). ``default``: the product's
    default (None: not given; a scenario or the builder decides). ``lg``: the Locust name without
    ``--lg-`` when it is not ``name``. ``group``: its title in ``GROUPS``. ``unset``: what the
    command-line help says of the default where ``default`` cannot say it (None: what decides).
    ``bound``: the least value of a number, checked by ``parse_value`` on every surface.
    ``help`` never states the default: the command line adds it, the web form shows its own."""

    dest: str
    name: str
    kind: Kind
    help: str
    surfaces: frozenset[Surface]
    default: Any = None
    choices: tuple[str, ...] = ()
    lg: str | None = None
    metavar: str | None = None
    group: str = field(kw_only=True)
    unset: str = field(default="", kw_only=True)
    bound: Bound | None = field(default=None, kw_only=True)

    def flag(self, surface: Surface) -> str:
        """The flag as a user types it on that surface."""
        if surface in ("form", "lg"):
            return "--lg-" + (self.lg or self.name)
        return "--" + self.name

    @property
    def attr(self) -> str:
        """The argparse attribute of the ramp/ui surfaces (``--max-tokens`` -> ``max_tokens``)."""
        return self.name.replace("-", "_")

    @property
    def lg_attr(self) -> str:
        return "lg_" + (self.lg or self.name).replace("-", "_")


def _s(*names: Surface) -> frozenset[Surface]:
    return frozenset(names)


FLAGS: tuple[Flag, ...] = (
    Flag("url", "url", "str", "server base URL, e.g. http://127.0.0.1:30000", _s("ramp", "ui"), metavar="URL",
         group=TARGET),
    Flag("model", "model", "str", "model name", _s("ramp", "ui", "form", "campaign"), metavar="NAME", group=TARGET,
         unset="the first model /v1/models lists"),
    Flag("scenario", "scenario", "str",
         "a scenario file (TOML): prompts, lengths, load pattern; flags override it",
         _s("ramp", "ui", "form", "campaign"), metavar="FILE", group=LOAD,
         unset="none: the ramp's own prompts of --context-tokens tokens"),
    Flag("workload", "workload", "str",
         "a workload file (loadgen workload export/import): its requests replayed exactly, its steps the ramp's",
         RAMP, metavar="FILE", group=LOAD, unset="none: the scenario's or the ramp's own requests"),
    Flag("concurrency", "concurrency", "ints", "closed loop: comma-separated user counts per step, e.g. 1,8,32",
         _s("ramp", "ui", "form", "campaign"), default=[1, 8, 32, 64, 128], lg="steps", metavar="USERS", group=LOAD),
    Flag("rates", "rate", "floats", "open loop: comma-separated request rates per step (req/s), e.g. 1,2,4",
         _s("ramp", "ui", "form", "campaign"), lg="rates", metavar="RATES", group=LOAD,
         unset="none: closed loop at --concurrency, or the scenario's rates"),
    Flag("step_seconds", "step-seconds", "float", "seconds each step measures (its steady window, after the warm-up)",
         _s("ramp", "ui", "form", "campaign"), default=30.0, metavar="SECONDS", group=STEPS, bound=ABOVE_0),
    Flag("warmup_seconds", "warmup-seconds", "float", "seconds of warm-up at the start of each step, not measured",
         _s("ramp", "ui", "form", "campaign"), default=5.0, metavar="SECONDS", group=STEPS, bound=AT_LEAST_0),
    Flag("requests_per_step", "requests-per-step", "int",
         "end a step once this many requests finished in its window", _s("ramp", "ui", "form", "campaign"),
         metavar="N", group=STEPS, unset="none: a step ends after --step-seconds, or the scenario's count",
         bound=ABOVE_0),
    Flag("arrival", "arrival", "choice",
         "open loop: how requests arrive at each --rate: poisson (exponential gaps) or gamma (gaps with "
         "coefficient of variation --burstiness; >1 bursty)",
         _s("ramp", "ui", "form", "campaign"), choices=("poisson", "gamma"), group=LOAD,
         unset="the scenario's [load] arrival, else poisson"),
    Flag("burstiness", "burstiness", "float",
         "--arrival gamma: the gaps' coefficient of variation (1 is Poisson's, 2 twice as bursty)",
         _s("ramp", "ui", "form", "campaign"), metavar="CV", group=LOAD, unset="1",
         bound=Bound(0, strict=True, hint="1 is Poisson's")),
    Flag("max_tokens", "max-tokens", "int", "max_tokens of each request",
         _s("ramp", "ui", "form", "campaign"), default=DEFAULT_MAX_TOKENS, metavar="N", group=REQUESTS,
         bound=ABOVE_0),
    Flag("context_tokens", "context-tokens", "ints",
         "prompt lengths in tokens; several make a matrix with the steps, e.g. 60,4000,16000",
         _s("ramp", "ui", "form"), metavar="TOKENS", group=REQUESTS, unset="60, or the scenario's prompt lengths"),
    Flag("endpoint", "endpoint", "choice",
         "the API to call: chat, completions, responses (streamed events), embeddings or rerank (one body "
         "each, no TTFT); a scenario's `endpoint` says it for a described workload",
         _s("ramp", "ui", "form", "campaign"), default="chat", choices=ENDPOINTS, group=REQUESTS),
    Flag("no_stream", "no-stream", "switch", "non-streaming requests (no TTFT/ITL)", RAMP, default=False,
         group=REQUESTS),
    Flag("extra_body", "extra-body", "body",
         "extra JSON body field, e.g. temperature=0, ignore_eos=true (repeatable; value parsed as JSON "
         "when it parses; or a whole JSON object)",
         _s("ramp", "ui", "form"), metavar="KEY=VALUE", group=REQUESTS, unset="none"),
    Flag("tenants", "tenant", "tenants",
         "a tenant and its scenario file, NAME=SCENARIO (repeatable): the steps' load (--concurrency or --rate) "
         "split evenly among them, each in the report; priorities, SLOs and loads of their own: a scenario's "
         "[[tenants]] (docs/scenarios.md)",
         RAMP, metavar="NAME=SCENARIO", group=REQUESTS, unset="none"),
    Flag("transport", "transport", "choice",
         "HTTP client: fast (built in) or openai (the openai package: pip install 'llm-loadgen[openai]')",
         _s("ramp", "ui", "form"), default="fast", choices=("fast", "openai"), group=TRANSPORT),
    Flag("api_key", "api-key", "str", "bearer token; never written to the run dir", RAMP, metavar="KEY", group=TARGET,
         unset="$OPENAI_API_KEY"),
    Flag("request_id_header", "request-id-header", "str",
         "the header that carries each request's id, a UUID (the records keep it as header_id beside their own "
         "id); another name for servers that want one, or none to send no id",
         _s("ramp", "ui", "lg"), default="X-Request-Id", metavar="NAME|none", group=TRANSPORT),
    Flag("timeouts.request_s", "request-timeout", "float", "seconds for a whole call",
         _s("ramp", "ui", "lg"), default=600.0, metavar="SECONDS", group=TRANSPORT),
    Flag("timeouts.stall_s", "stall-timeout", "float", "seconds without any byte before a call fails",
         _s("ramp", "ui", "lg"), default=60.0, metavar="SECONDS", group=TRANSPORT),
    Flag("timeouts.connect_s", "connect-timeout", "float", "seconds to open a connection", RAMP, default=10.0,
         metavar="SECONDS", group=TRANSPORT),
    Flag("wait_ready_s", "wait-ready", "float", "poll the server until it answers, up to this long (0: check once)",
         RAMP, default=0.0, metavar="SECONDS", group=TARGET),
    Flag("workers", "workers", "int",
         "load-generating worker processes on this machine (Locust master/worker); 0: one process", RAMP,
         default=0, metavar="N", group=LOAD),
    Flag("master", "master", "switch",
         "be the master of workers on other machines (each runs loadgen worker --master HOST:PORT): they send "
         "the requests, this process runs the steps, takes their records and writes the report",
         RAMP, default=False, group=LOAD),
    Flag("master_bind", "master-bind", "str", "with --master: the address the workers connect to", RAMP,
         default="0.0.0.0:5557", metavar="HOST:PORT", group=LOAD),
    Flag("expect_workers", "expect-workers", "int", "with --master: the first step starts once this many "
         "workers connected", RAMP, default=0, metavar="N", group=LOAD, bound=AT_LEAST_0),
    Flag("worker_wait_s", "worker-wait", "float", "with --master: how long to wait for --expect-workers", RAMP,
         default=300.0, metavar="SECONDS", group=LOAD, bound=AT_LEAST_0),
    Flag("on_worker_loss", "on-worker-loss", "choice",
         "when a worker stops answering mid-ramp (killed, cut off): go on with the others (continue; the "
         "step is marked below plan) or end the ramp (stop)", RAMP, default="continue",
         choices=("continue", "stop"), group=LOAD),
    Flag("on_server_down", "on-server-down", "choice",
         "when the server stops answering mid-ramp: end the ramp (stop), wait for it to come back and "
         "go on with the next step (wait, up to --wait-ready seconds or 300), or go on at once (skip-step)",
         RAMP, default="stop", choices=("stop", "wait", "skip-step"), group=TARGET),
    Flag("server_status", "server-status", "str",
         "a command printing the server's state, e.g. 'systemctl is-active sglang' (run without a shell); "
         "failed/inactive/exited/dead stops --wait-ready at once",
         RAMP, metavar="COMMAND", group=TARGET, unset="none"),
    Flag("seed", "seed", "int", "seed of every random choice (prompts, lengths, arrivals)", RAMP, default=0,
         metavar="N", group=LOAD),
    Flag("drain_seconds", "drain-seconds", "float",
         "after the last step, wait this long for requests in flight to finish", _s("ramp", "ui", "lg"), default=60.0,
         metavar="SECONDS", group=STEPS, bound=AT_LEAST_0),
    Flag("label", "label", "str", "a name for this run (shown in reports, part of the run id)",
         _s("ramp", "ui", "form"), metavar="TEXT", group=OUTPUT,
         unset="none: the run id ends in run, demo-PROFILE or locust"),
    Flag("out", "out", "str", "folder for run directories", _s("ramp", "ui", "lg"), default="reports",
         metavar="DIR", group=OUTPUT),
    Flag("no_telemetry", "no-telemetry", "switch", "start no telemetry side process", _s("ramp", "ui", "lg"),
         default=False, group=TELEMETRY),
    Flag("prometheus_port", "prometheus-port", "int", "serve the load generator's own metrics on this port",
         _s("ramp", "lg"), metavar="PORT", group=OUTPUT, unset="none: not served"),
    Flag("tokenizer", "tokenizer", "str",
         "a local tokenizer.json or Hugging Face model folder: prompts of exactly the requested tokens by it, "
         "and output tokens counted when the server sends no usage (never downloaded; needs the tokenizers "
         "package: pip install 'llm-loadgen[tokenizers]')", RAMP, metavar="PATH", group=REQUESTS,
         unset="the scenario's, else none: prompt lengths estimated, output chunks counted"),
    Flag("slo", "slo", "slo", "latency limits for the knee verdict, e.g. ttft_p99=2s,tpot_p99=50ms",
         _s("ramp", "ui", "form"), metavar="LIMITS", group=VERDICT,
         unset="none: the knee is found without latency limits"),
    Flag("call_type", "call-type", "choice",
         "the call type the knee verdict and plan are about, when a run mixes several",
         _s("ramp", "ui", "form", "campaign"), choices=ENDPOINTS, group=VERDICT,
         unset="the one that served the most tokens"),
    Flag("gpu_count", "gpu-count", "int",
         "GPUs serving the model, for per-GPU figures (throughput per GPU on the Pareto plot); --gpus selects "
         "which GPUs telemetry reads",
         _s("ramp", "ui", "form", "campaign"), metavar="N", group=VERDICT, unset="the count the GPU telemetry saw",
         bound=AT_LEAST_1),
    Flag("fail_on", "fail-on", "thresholds",
         "thresholds that fail the run (exit 5), e.g. 'ttft_p99>2s,error_rate>1%,invalid_steps>0': per "
         "step (any valid step breaching fails; run:error_rate>1% judges the whole run); metrics "
         "ttft|itl|tpot|e2e_mean|p50|p90|p99, error_rate, output_tok_s, goodput_share, invalid_steps; "
         "operators > >= < <= (docs/ci.md)", _s("ramp", "ui", "form", "campaign"), metavar="THRESHOLDS",
         group=VERDICT, unset="none; in loadgen ramp the scenario's [gate] fail_on"),
    Flag("abort_on", "abort-on", "thresholds",
         "thresholds (as --fail-on) judged after each step: the first breach stops the ramp within a step, "
         "writes a partial report and exits 5", _s("ramp", "ui", "form", "campaign"), metavar="THRESHOLDS",
         group=VERDICT, unset="none; in loadgen ramp the scenario's [gate] abort_on"),
    Flag("junit", "junit", "str",
         "write the thresholds' results as JUnit XML to this file (one testcase per step and threshold)", RAMP,
         metavar="FILE", group=VERDICT, unset="none: not written"),
    Flag("repeat", "repeat", "int",
         "run each step N times in a row: every figure gets a 95% confidence interval over the repeats, and "
         "the knee verdict says how stable it was", _s("ramp"), default=1, metavar="N", group=STEPS),
    Flag("find_knee", "find-knee", "switch",
         "search for the knee: raise the load geometrically from the first --concurrency/--rate value "
         "until saturation shows, then bisect", _s("ramp", "campaign"), default=False, group=KNEE),
    Flag("search_max_steps", "max-steps", "int", "--find-knee: at most this many steps", RAMP, default=12,
         metavar="N", group=KNEE),
    Flag("search_max_seconds", "max-seconds", "float", "--find-knee: time budget for the whole search", RAMP,
         metavar="SECONDS", group=KNEE, unset="none: no time limit"),
    Flag("search_factor", "factor", "float", "--find-knee: load multiplier while raising", RAMP, default=2.0,
         metavar="X", group=KNEE),
    Flag("search_max_load", "max-load", "float", "--find-knee: highest concurrency or rate to try", RAMP,
         default=4096.0, metavar="LOAD", group=KNEE),
)  # fmt: skip

BY_DEST: dict[str, Flag] = {f.dest: f for f in FLAGS}
# ramp options a scenario's [load] table may set: ``loadgen ramp`` leaves them unset (None) so the
# scenario decides, then falls back to the table's default
SCENARIO_SETS = frozenset({"concurrency", "step_seconds", "warmup_seconds", "max_tokens"})


class _Adds(Protocol):
    def add_argument(self, *args: Any, **kwargs: Any) -> Any: ...


def add_arguments(
    parser: argparse.ArgumentParser,
    surface: Literal["ramp", "ui"],
    *,
    skip: Iterable[str] = (),
    defaults: Mapping[str, Any] | None = None,
) -> dict[str, argparse._ArgumentGroup]:
    """The options of ``loadgen ramp`` or ``loadgen ui``, each in its group of ``GROUPS``; the groups
    are returned by title, for a command's own options (an empty one is not shown). ``skip``: dests a
    command defines itself; ``defaults``: per-command defaults, e.g. the demo's shorter steps."""
    groups = {title: parser.add_argument_group(title) for title in GROUPS}
    skipped = set(skip)
    command_defaults = defaults or {}
    for f in FLAGS:
        if surface not in f.surfaces or f.dest in skipped:
            continue
        own = f.dest in command_defaults
        if own:
            default: Any = command_defaults[f.dest]
        elif surface == "ui" or f.dest in SCENARIO_SETS:
            default = None  # not given: the form's (or the scenario's) default stays
        else:
            default = f.default
        help_text = command_line_help(f, default if own else None)
        kw: dict[str, Any] = {"help": help_text.replace("%", "%%"), "dest": f.attr}  # argparse %-formats help
        if f.metavar:
            kw["metavar"] = f.metavar
        group = groups[f.group]
        if f.kind == "switch":
            group.add_argument(f.flag(surface), action="store_true", **kw)
            continue
        if f.kind in ("body", "tenants"):
            group.add_argument(f.flag(surface), action="append", default=[], **kw)
            continue
        if f.kind == "choice":
            kw["choices"] = list(f.choices)
        elif f.kind in ("int", "float"):
            kw["type"] = int if f.kind == "int" else float
        if f.dest == "url":
            kw["required"] = True
        if isinstance(default, list):
            default = ",".join(str(v) for v in default)
        group.add_argument(f.flag(surface), default=default, **kw)
    return groups


def command_line_help(f: Flag, default: Any = None) -> str:
    """``f.help`` as ``--help`` shows it: ending in its default, "(default: 30)", or what decides when
    there is none ("(default: the first model /v1/models lists)"); ``default``: a command's own (the
    demo's). Switches are off unless given and say nothing more; --url is required."""
    if f.dest == "url":
        return f"{f.help} (required)"
    if f.kind == "switch":
        return f.help
    if default is not None:
        words = format_value(f, default)
    elif f.unset:
        words = f.unset
    else:
        words = format_value(f, f.default) + (", or the scenario's" if f.dest in SCENARIO_SETS else "")
    return f"{f.help} (default: {words})"


def add_locust_arguments(parser: _Adds, hidden: _Adds) -> None:
    """The locustfile's ``--lg-*`` options: ``form`` ones on ``parser`` (Locust shows them in the web
    UI's form, editable before each Start), ``lg`` ones on ``hidden`` (command line only). Text
    fields default to ``""`` (not given)."""
    for f in FLAGS:
        if "form" in f.surfaces:
            target = parser
        elif "lg" in f.surfaces:
            target = hidden
        else:
            continue
        name = f.flag("lg") if f.dest != "no_telemetry" else "--no-telemetry"
        kw: dict[str, Any] = {"help": f.help.replace("%", "%%")}  # argparse %-formats help
        if f.kind == "switch":
            target.add_argument(name, action="store_true", **kw)
        elif f.kind == "choice":
            target.add_argument(name, choices=list(f.choices), default=f.default, **kw)
        elif f.kind in ("int", "float") and (f.default is not None or f.dest == "prometheus_port"):
            cast = int if f.kind == "int" else float
            target.add_argument(name, type=cast, default=cast(f.default or 0), **kw)
        else:
            target.add_argument(name, default="", **kw)


def add_overrides(parser: argparse.ArgumentParser, dests: Iterable[str], prefix: str) -> None:
    """Rows of the table as another command's overrides of a run's own values (``loadgen twin``'s
    what-ifs): the ramp's flag name and metavar, read as text (None: the run's own), then parsed
    with :func:`parse_value` like the ramp's, bounds and all. ``prefix`` starts each help."""
    for dest in dests:
        f = BY_DEST[dest]
        kw: dict[str, Any] = {"dest": f.attr, "default": None, "help": f"{prefix}{f.help} (default: the run's own)"}
        if f.metavar:
            kw["metavar"] = f.metavar
        parser.add_argument(f.flag("ramp"), **{**kw, "help": kw["help"].replace("%", "%%")})


def parse_value(f: Flag, raw: Any, flag: str) -> Any:
    """``raw`` (a flag's text, a form field, a number argparse already made) as the option's value;
    None when empty. Raises OptionError naming ``flag``, the value and what to do."""
    if raw is None or (isinstance(raw, str) and not raw.strip()) or (isinstance(raw, list) and not raw):
        return None
    if f.kind == "ints":
        return parse_int_list(flag, str(raw))
    if f.kind == "floats":
        return parse_float_list(flag, str(raw))
    if f.kind == "body":
        items = raw if isinstance(raw, list) else extra_body_items(str(raw), flag)
        return parse_extra_body(items, flag)
    if f.kind == "tenants":
        return parse_tenant_flags(raw if isinstance(raw, list) else [str(raw)], flag)
    if f.kind == "slo":
        try:
            return dict(parse_slo(str(raw)))
        except (SLOError, ValueError) as exc:
            raise OptionError(f"{flag} {raw!r}: {exc}") from None
    if f.kind == "thresholds":
        if isinstance(raw, Thresholds):
            return raw
        try:
            return parse_thresholds(str(raw), flag)
        except ThresholdError as exc:
            raise OptionError(str(exc)) from None
    if f.kind in ("int", "float") and isinstance(raw, str):
        try:
            raw = int(raw) if f.kind == "int" else float(raw)
        except ValueError:
            raise OptionError(f"{flag} {raw!r}: expected a {'whole ' if f.kind == 'int' else ''}number") from None
    if (
        f.bound is not None
        and isinstance(raw, int | float)
        and (raw < f.bound.least or (f.bound.strict and raw == f.bound.least))
    ):
        hint = f" ({f.bound.hint})" if f.bound.hint else ""
        raise OptionError(f"{flag} {raw:g}: {f.bound.words()}{hint}")
    return raw


def check_combination(values: Mapping[str, Any], surface: Surface) -> None:
    """The rules between options (each value already parsed, by dest), on every surface."""
    burstiness = values.get("burstiness")
    if burstiness is not None and values.get("arrival") != "gamma":
        flag = BY_DEST["burstiness"].flag(surface)
        raise OptionError(f"{flag} {burstiness:g}: applies to {BY_DEST['arrival'].flag(surface)} gamma only")
    if values.get("master"):
        if not values.get("expect_workers"):
            raise OptionError("--master: give --expect-workers N, the workers the first step waits for")
        if values.get("workers"):
            raise OptionError("--master and --workers: give one (workers elsewhere, or on this machine)")
    elif values.get("expect_workers"):
        raise OptionError("--expect-workers: applies to --master only")


def raw_values(ns: argparse.Namespace | Any, surface: Surface) -> dict[str, Any]:
    """The raw value of every option of ``surface`` found on a parsed namespace, by dest."""
    out: dict[str, Any] = {}
    for f in FLAGS:
        if surface not in f.surfaces and not (surface == "lg" and "form" in f.surfaces):
            continue
        attr = f.lg_attr if surface in ("form", "lg") and f.dest != "no_telemetry" else f.attr
        if hasattr(ns, attr):
            out[f.dest] = getattr(ns, attr)
    return out


def _number(v: float) -> str:
    """Shortest exact text: 2.0 -> "2", 0.25 -> "0.25" (repr keeps every digit a float has)."""
    return str(int(v)) if isinstance(v, float) and v.is_integer() else repr(v)


def format_value(f: Flag, value: Any) -> str:
    """A parsed value as the text its flag takes (lists comma-joined, bodies as one JSON object)."""
    if f.kind in ("ints", "floats"):
        return ",".join(_number(v) for v in value)
    if f.kind in ("int", "float"):
        return _number(value)
    if f.kind == "body":
        return json.dumps(value)
    if f.kind == "slo" and isinstance(value, Mapping):  # parse_slo's {"ttft_p99_ms": 2000.0}
        return ",".join(
            f"{k.removesuffix('_ms')}={v:g}ms" if k.endswith("_ms") else f"{k}={v:g}s" for k, v in value.items()
        )
    return str(value)


def to_argv(values: Mapping[str, Any], surface: Surface) -> list[str]:
    """Flags for ``values`` (by dest; None, False and empty lists left out) on a surface, in table order:
    ``ramp`` for a ``loadgen ramp`` command line, ``lg`` for Locust's."""
    out: list[str] = []
    for f in FLAGS:
        if f.dest not in values:
            continue
        value = values[f.dest]
        if value is None or value is False or (isinstance(value, (list, dict)) and not value):
            continue
        flag = "--no-telemetry" if f.dest == "no_telemetry" else f.flag(surface)
        if f.kind == "switch":
            out.append(flag)
        else:
            out += [flag, format_value(f, value)]
    return out
