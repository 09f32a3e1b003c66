"""The one table of a run's options, from which every front end is generated.

Each row is one option of ``RampOptions``: its name on the command line (``--max-tokens``), its
name in Locust (``--lg-max-tokens``, a field of the web UI's form when ``form`` is among its
surfaces), how its text is parsed, its default and its help. The surfaces:

* ``ramp``: ``loadgen ramp`` (and ``loadgen demo``, with the demo's own defaults);
* ``ui``: ``loadgen ui``, whose values become the defaults of the form (a value not given there
  leaves the locustfile's default);
* ``form``: a ``--lg-*`` option of the locustfile shown in the web UI's form; ``lg``: a ``--lg-*``
  option on Locust's command line only;
* ``campaign``: a key of a campaign's ``[load]`` table, turned into ``loadgen ramp`` argv.

``add_arguments`` builds the argparse options of a surface, ``raw_values`` reads them back by
``dest``, ``parse_value`` turns a raw text into the option's value (errors name the flag as the
user typed it), and ``to_argv`` writes values back as flags (campaigns, ``loadgen ui`` -> Locust).
No gevent and nothing of the load side here: campaigns and the CLI import it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from loadgen.spec.options import OptionError, extra_body_items, parse_extra_body, parse_float_list, parse_int_list
from loadgen.spec.request import ENDPOINTS

Surface = Literal["ramp", "ui", "form", "lg", "campaign"]
# int, float, str: one value; ints, floats: comma-separated lists; body: --extra-body items; slo:
# latency limits; switch: present or not; choice: one of ``choices``
Kind = Literal["int", "float", "str", "ints", "floats", "body", "slo", "switch", "choice"]

RAMP: frozenset[Surface] = frozenset({"ramp"})


@dataclass(frozen=True, slots=True)
class Flag:
    """One option. ``dest``: the ``RampOptions`` attribute (``timeouts.stall_s`` for a nested one;
    ``no_telemetry``, ``no_stream``: switches read by the builder). ``default``: the product's
    default (None: not given; a scenario or the builder decides). ``lg``: the Locust name without
    ``--lg-`` when it is not ``name``."""

    dest: str
    name: str
    kind: Kind
    help: str
    surfaces: frozenset[Surface]
    default: Any = None
    choices: tuple[str, ...] = ()
    lg: str | None = None
    metavar: str | None = None

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
    Flag("url", "url", "str", "server base URL, e.g. http://127.0.0.1:30000", _s("ramp", "ui")),
    Flag("model", "model", "str", "model name (default: the first one /v1/models lists)",
         _s("ramp", "ui", "form", "campaign")),
    Flag("scenario", "scenario", "str",
         "a scenario file (TOML): prompts, lengths, load pattern; flags override it",
         _s("ramp", "ui", "form", "campaign")),
    Flag("concurrency", "concurrency", "ints",
         "comma-separated user counts per step, e.g. 1,8,32 (default 1,8,32,64,128; in the web UI, "
         "empty: Locust's user count drives the load)",
         _s("ramp", "ui", "form", "campaign"), default=[1, 8, 32, 64, 128], lg="steps"),
    Flag("rates", "rate", "floats", "open loop: comma-separated request rates per step (req/s), e.g. 1,2,4",
         _s("ramp", "ui", "form", "campaign"), lg="rates"),
    Flag("step_seconds", "step-seconds", "float", "steady window length per step (default 30)",
         _s("ramp", "ui", "form", "campaign"), default=30.0),
    Flag("warmup_seconds", "warmup-seconds", "float", "warm-up excluded from each step (default 5)",
         _s("ramp", "ui", "form", "campaign"), default=5.0),
    Flag("requests_per_step", "requests-per-step", "int",
         "end a step once this many requests finished in its window", _s("ramp", "ui", "form", "campaign")),
    Flag("arrival", "arrival", "choice",
         "open loop: how requests arrive at each --rate: poisson (exponential gaps) or gamma (gaps with "
         "coefficient of variation --burstiness; >1 bursty); default: the scenario's [load] arrival, else poisson",
         _s("ramp", "ui", "form", "campaign"), choices=("poisson", "gamma")),
    Flag("burstiness", "burstiness", "float",
         "--arrival gamma: the gaps' coefficient of variation (1 is Poisson's, 2 twice as bursty)",
         _s("ramp", "ui", "form", "campaign")),
    Flag("max_tokens", "max-tokens", "int", "max_tokens of each request (default 512)",
         _s("ramp", "ui", "form", "campaign"), default=512),
    Flag("context_tokens", "context-tokens", "ints",
         "prompt lengths in tokens; several make a matrix with the steps, e.g. 60,4000,16000",
         _s("ramp", "ui", "form")),
    Flag("endpoint", "endpoint", "choice",
         "the API to call: chat, completions, responses (streamed events), embeddings or rerank (one body "
         "each, no TTFT); a scenario's `endpoint` says it for a described workload",
         _s("ramp", "ui", "form", "campaign"), default="chat", choices=ENDPOINTS),
    Flag("no_stream", "no-stream", "switch", "non-streaming requests (no TTFT/ITL)", RAMP, default=False),
    Flag("extra_body", "extra-body", "body",
         "extra JSON body field, e.g. temperature=0, ignore_eos=true (repeatable; value parsed as JSON "
         "when it parses; or a whole JSON object)",
         _s("ramp", "ui", "form"), metavar="KEY=VALUE"),
    Flag("transport", "transport", "choice", "HTTP client", _s("ramp", "ui", "form"), default="fast",
         choices=("fast", "openai")),
    Flag("api_key", "api-key", "str",
         "bearer token (default: $OPENAI_API_KEY); never written to the run dir", RAMP),
    Flag("request_id_header", "request-id-header", "str",
         "the header that carries each request's id, a UUID (the records keep it as header_id beside their own "
         "id); another name for servers that want one, or none to send no id (default X-Request-Id)",
         _s("ramp", "ui", "lg"), default="X-Request-Id", metavar="NAME|none"),
    Flag("timeouts.request_s", "request-timeout", "float", "seconds for a whole call",
         _s("ramp", "ui", "lg"), default=600.0),
    Flag("timeouts.stall_s", "stall-timeout", "float", "seconds without any byte before a call fails",
         _s("ramp", "ui", "lg"), default=60.0),
    Flag("timeouts.connect_s", "connect-timeout", "float", "seconds to open a connection", RAMP, default=10.0),
    Flag("wait_ready_s", "wait-ready", "float", "poll the server until it answers (0: check once)", RAMP,
         default=0.0, metavar="SECONDS"),
    Flag("workers", "workers", "int",
         "load-generating worker processes on this machine (Locust master/worker); 0: one process", RAMP,
         default=0),
    Flag("on_server_down", "on-server-down", "choice",
         "when the server stops answering mid-ramp: end the ramp (stop), wait for it to come back and "
         "go on with the next step (wait, up to --wait-ready seconds or 300), or go on at once (skip-step)",
         RAMP, default="stop", choices=("stop", "wait", "skip-step")),
    Flag("server_status", "server-status", "str",
         "a command printing the server's state, e.g. 'systemctl is-active sglang' (run without a shell); "
         "failed/inactive/exited/dead stops --wait-ready at once",
         RAMP, metavar="COMMAND"),
    Flag("seed", "seed", "int", "seed of every random choice (prompts, lengths, arrivals)", RAMP, default=0),
    Flag("drain_seconds", "drain-seconds", "float",
         "after the last step, wait this long for requests in flight to finish", RAMP, default=60.0),
    Flag("label", "label", "str", "a name for this run (shown in reports, part of the run id)",
         _s("ramp", "ui", "form")),
    Flag("out", "out", "str", "folder for run directories (default reports)", _s("ramp", "ui", "lg"),
         default="reports"),
    Flag("no_telemetry", "no-telemetry", "switch", "start no telemetry side process", _s("ramp", "ui", "lg"),
         default=False),
    Flag("prometheus_port", "prometheus-port", "int", "serve the load generator's own metrics on this port",
         _s("ramp", "lg")),
    Flag("tokenizer", "tokenizer", "str",
         "a local tokenizer.json or Hugging Face model folder: prompts of exactly the requested tokens by it, "
         "and output tokens counted when the server sends no usage (never downloaded; needs the tokenizers "
         "package: pip install 'llm-loadgen[tokenizers]')", RAMP),
    Flag("slo", "slo", "slo", "latency limits for the knee verdict, e.g. ttft_p99=2s,tpot_p99=50ms",
         _s("ramp", "ui", "form")),
    Flag("call_type", "call-type", "choice",
         "the call type the knee verdict and plan are about, when a run mixes several (default: the one "
         "that served the most tokens)", _s("ramp", "ui", "form", "campaign"), choices=ENDPOINTS),
    Flag("gpu_count", "gpu-count", "int",
         "GPUs serving the model, for per-GPU figures (throughput per GPU on the Pareto plot); default: the "
         "count the GPU telemetry saw (--gpus selects which GPUs telemetry reads)",
         _s("ramp", "ui", "form", "campaign")),
    Flag("fail_on", "fail-on", "str",
         "thresholds that fail the run (exit 5), e.g. 'ttft_p99>2s,tpot_p99>50ms,error_rate>1%,invalid_steps>0': "
         "per step (any valid step breaching fails; run: for the whole run, e.g. run:error_rate>1%); metrics "
         "ttft|itl|tpot|e2e_mean|p50|p90|p99 (ms, s, us), error_rate (%), output_tok_s, goodput_share (%), "
         "invalid_steps; operators > >= < <=", _s("ramp", "ui", "form", "campaign"), metavar="THRESHOLDS"),
    Flag("abort_on", "abort-on", "str",
         "thresholds (as --fail-on) judged after each step: the first breach stops the ramp within a step, "
         "writes a partial report and exits 5", _s("ramp", "ui", "form", "campaign"), metavar="THRESHOLDS"),
    Flag("junit", "junit", "str",
         "write the thresholds' results as JUnit XML to this file (one testcase per step and threshold)", RAMP,
         metavar="FILE"),
    Flag("repeat", "repeat", "int",
         "run each step N times in a row: every figure gets a 95% confidence interval over the repeats, and "
         "the knee verdict says how stable it was (default 1)", _s("ramp"), default=1),
    Flag("find_knee", "find-knee", "switch",
         "search for the knee: raise the load geometrically from the first --concurrency/--rate value "
         "until saturation shows, then bisect", _s("ramp", "campaign"), default=False),
    Flag("search_max_steps", "max-steps", "int", "--find-knee: at most this many steps", RAMP, default=12),
    Flag("search_max_seconds", "max-seconds", "float", "--find-knee: time budget for the whole search", RAMP),
    Flag("search_factor", "factor", "float", "--find-knee: load multiplier while raising", RAMP, default=2.0),
    Flag("search_max_load", "max-load", "float", "--find-knee: highest concurrency or rate to try", RAMP,
         default=4096.0),
)  # fmt: skip

BY_DEST: dict[str, Flag] = {f.dest: f for f in FLAGS}
# ramp options a scenario's [load] table may set: ``loadgen ramp`` leaves them unset (None) so the
# scenario decides, then falls back to the table's default
SCENARIO_SETS = frozenset({"concurrency", "step_seconds", "warmup_seconds", "max_tokens"})


class _Adds(Protocol):
    def add_argument(self, *args: Any, **kwargs: Any) -> Any: ...


def add_arguments(
    parser: _Adds,
    surface: Literal["ramp", "ui"],
    *,
    skip: Iterable[str] = (),
    defaults: Mapping[str, Any] | None = None,
) -> None:
    """The options of ``loadgen ramp`` or ``loadgen ui`` (``skip``: dests a command defines itself;
    ``defaults``: per-command defaults, e.g. the demo's shorter steps)."""
    skipped = set(skip)
    for f in FLAGS:
        if surface not in f.surfaces or f.dest in skipped:
            continue
        if defaults and f.dest in defaults:
            default: Any = defaults[f.dest]
        elif surface == "ui" or f.dest in SCENARIO_SETS:
            default = None  # not given: the form's (or the scenario's) default stays
        else:
            default = f.default
        help_text = f.help
        if defaults and f.dest in defaults:  # this command's own default, not the ramp's
            shown = ",".join(map(str, default)) if isinstance(default, list) else f"{default:g}"
            help_text = f"{help_text.split(' (default')[0]} (default {shown})"
        kw: dict[str, Any] = {"help": help_text.replace("%", "%%"), "dest": f.attr}  # argparse %-formats help
        if f.metavar:
            kw["metavar"] = f.metavar
        if f.kind == "switch":
            parser.add_argument(f.flag(surface), action="store_true", **kw)
            continue
        if f.kind == "body":
            parser.add_argument(f.flag(surface), action="append", default=[], **kw)
            continue
        if f.kind == "choice":
            kw["choices"] = list(f.choices)
        elif f.kind in ("int", "float"):
            kw["type"] = int if f.kind == "int" else float
        if f.dest == "url" and surface in ("ramp", "ui"):
            kw["required"] = True
        if isinstance(default, list):
            default = ",".join(str(v) for v in default)
        parser.add_argument(f.flag(surface), default=default, **kw)


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
    if f.kind == "slo":
        from loadgen.analysis.plan import SLOError, parse_slo

        try:
            return dict(parse_slo(str(raw)))
        except (SLOError, ValueError) as exc:
            raise OptionError(f"{flag} {raw!r}: {exc}") from None
    if f.kind in ("int", "float") and isinstance(raw, str):
        try:
            return int(raw) if f.kind == "int" else float(raw)
        except ValueError:
            raise OptionError(f"{flag} {raw!r}: expected a {'whole ' if f.kind == 'int' else ''}number") from None
    return raw


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
