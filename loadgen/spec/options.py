"""What a run is asked to do, and the workload and steps composed from it: the one definition
``loadgen ramp``, the web UI's locustfile, the distributed workers and campaigns share.

No gevent, no locust, no sockets here: campaigns and the CLI import it without pulling the load
generator's event loop in.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from loadgen.spec.gates import Thresholds, parse_thresholds
from loadgen.spec.request import DEFAULT_MAX_TOKENS

if TYPE_CHECKING:
    from loadgen.spec.request import Endpoint
    from loadgen.telemetry.options import TelemetryOptions
    from loadgen.workload.traffic import Workload


class OptionError(ValueError):
    """A bad option value; the message names the flag, the value and what to do."""


def parse_int_list(flag: str, text: str) -> list[int]:
    """``1,8,32``: whole numbers above 0 (``--concurrency``, ``--context-tokens``, ``--lg-steps``)."""
    try:
        values = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise OptionError(f"{flag} {text!r}: expected comma-separated whole numbers, e.g. 1,8,32") from None
    if not values or any(v <= 0 for v in values):
        raise OptionError(f"{flag} {text!r}: every value must be a whole number above 0")
    return values


def parse_float_list(flag: str, text: str) -> list[float]:
    """``0.5,1,2``: numbers above 0 (``--rate``)."""
    try:
        values = [float(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise OptionError(f"{flag} {text!r}: expected comma-separated numbers, e.g. 0.5,1,2") from None
    if not values or any(not v > 0 for v in values):
        raise OptionError(f"{flag} {text!r}: every value must be above 0")
    return values


def parse_extra_body(items: Sequence[str], flag: str = "--extra-body") -> dict[str, Any]:
    """Body fields from ``KEY=VALUE`` items (the value parsed as JSON when it parses:
    ``temperature=0``, ``ignore_eos=true``, ``stop=["\\n"]``) or whole JSON objects; later wins."""
    out: dict[str, Any] = {}
    for item in items:
        item = item.strip()
        if not item:
            continue
        if item.startswith(("{", "[")):
            try:
                data = json.loads(item)
            except ValueError as exc:
                raise OptionError(f"{flag} {item!r}: not valid JSON ({exc})") from None
            if not isinstance(data, dict):
                raise OptionError(f'{flag} {item!r}: expected a JSON object, e.g. {{"temperature": 0}}')
            out.update(data)
            continue
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise OptionError(f"{flag} {item!r}: expected key=value, e.g. temperature=0 or ignore_eos=true")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def parse_tenant_flags(items: Sequence[str], flag: str = "--tenant") -> tuple[tuple[str, str], ...]:
    """``["chat=chat.toml", "batch=batch.toml"]`` -> (name, scenario path) pairs, in order; OptionError
    naming the item when it is not NAME=PATH or a name comes twice."""
    out: list[tuple[str, str]] = []
    for item in items:
        name, sep, path = str(item).partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise OptionError(f"{flag} {item!r}: write NAME=SCENARIO, e.g. {flag} chat=scenarios/chat.toml")
        if any(n == name for n, _ in out):
            raise OptionError(f"{flag} {item!r}: tenant {name} is given twice")
        out.append((name, path))
    return tuple(out)


def extra_body_items(text: str, flag: str = "--extra-body") -> list[str]:
    """One text field (the web UI's form) holding what ``--extra-body`` takes: a JSON object, or
    KEY=VALUE items separated by spaces (quoted as in a shell)."""
    text = text.strip()
    if not text or text.startswith(("{", "[")):
        return [text] if text else []
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise OptionError(f"{flag} {text!r}: {exc}") from None


# the header that carries each request's id (a UUID: llama.cpp's server answers 400 with an empty body
# to any other value); ``none`` sends no id header
DEFAULT_REQUEST_ID_HEADER = "X-Request-Id"
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP field name (RFC 9110, 5.1: a token)


DEFAULT_MASTER_PORT = 5557  # Locust's own


def parse_host_port(text: str, flag: str, default_port: int = DEFAULT_MASTER_PORT) -> tuple[str, int]:
    """``HOST[:PORT]`` (``[::1]:5557`` for an IPv6 address) as (host, port); the port defaults to
    Locust's master port."""
    t = text.strip()
    host, port_text = t, ""
    if t.startswith("["):
        end = t.find("]")
        host, rest = t[1:end], t[end + 1 :] if end > 0 else ""
        if end < 0 or (rest and not rest.startswith(":")):
            raise OptionError(f"{flag} {text!r}: expected HOST:PORT, e.g. [::1]:5557")
        port_text = rest[1:]
    elif t.count(":") == 1:
        host, port_text = t.split(":")
    if not host:
        raise OptionError(f"{flag} {text!r}: expected HOST:PORT, e.g. 10.0.0.5:5557 (no host given)")
    if not port_text:
        return host, default_port
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise OptionError(f"{flag} {text!r}: the port must be a number from 1 to 65535")
    return host, port


def parse_request_id_header(text: str | None, flag: str = "--request-id-header") -> str | None:
    """The header name each request's id goes in (default ``X-Request-Id``), or None for ``none``
    (no id header). Raises OptionError naming ``flag`` for a text that is no HTTP field name."""
    if text is None or not text.strip():
        return DEFAULT_REQUEST_ID_HEADER
    name = text.strip()
    if name.lower() == "none":
        return None
    if not _HEADER_NAME.fullmatch(name):
        raise OptionError(
            f"{flag} {text!r}: not an HTTP header name (letters, digits and -, e.g. X-Request-Id); "
            "or none to send no request id"
        )
    if name.lower() in ("content-type", "content-length", "authorization", "host"):
        raise OptionError(f"{flag} {text!r}: that header carries something else; choose another name, or none")
    return name


@dataclass(slots=True)
class Timeouts:
    """Seconds. ``stall_s``: longest silence (no bytes) tolerated once the request is sent;
    ``request_s``: the whole call, send to end of stream."""

    connect_s: float = 10.0
    stall_s: float = 60.0
    request_s: float = 600.0


# prompt length when no --context-tokens is given: a short chat turn (the story's smallest cell)
DEFAULT_CONTEXT_TOKENS = 60


@dataclass(slots=True, frozen=True)
class RampOptions:
    url: str
    model: str
    concurrency: list[int] | None = None
    step_seconds: float | None = 30.0
    warmup_seconds: float = 5.0
    requests_per_step: int | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    context_tokens: list[int] | None = None
    endpoint: Endpoint = "chat"
    stream: bool = True
    extra_body: dict[str, Any] = field(default_factory=dict)
    tenants: tuple[tuple[str, str], ...] = ()  # --tenant NAME=SCENARIO: an even split of each step's load
    label: str | None = None
    out: str = "reports"
    transport: str = "fast"
    api_key: str | None = None
    timeouts: Timeouts = field(default_factory=Timeouts)
    request_id_header: str | None = DEFAULT_REQUEST_ID_HEADER  # None: no id header
    seed: int = 0
    drain_seconds: float = 60.0
    on_server_down: str = "stop"  # stop | wait | skip-step
    server_status: str | None = None  # a command printing the server's state (systemctl is-active ...)
    wait_ready_s: float = 0.0
    rates: list[float] | None = None
    arrival: str | None = None  # open loop: poisson | gamma (None: the scenario's [load] arrival)
    burstiness: float | None = None  # --arrival gamma: the gaps' coefficient of variation
    scenario: str | None = None
    workload: str | None = None  # --workload FILE: a workload file replayed exactly (workload.replay)
    telemetry: TelemetryOptions | None = None  # None: no side process
    slo: dict[str, float] | None = None
    call_type: str | None = None  # the call type the knee and plan are about (None: most served tokens)
    repeat: int = 1  # each step this many times in a row (confidence intervals over the repeats)
    gpu_count: int | None = None  # GPUs serving the model (per-GPU figures); None: from telemetry
    workers: int = 0
    master: bool = False  # workers on other machines connect (loadgen worker --master HOST:PORT)
    master_bind: str = "0.0.0.0:5557"
    expect_workers: int = 0
    worker_wait_s: float = 300.0
    on_worker_loss: str = "continue"  # continue | stop
    prometheus_port: int | None = None
    tokenizer: str | None = None  # a local tokenizer.json / HF directory for output tokens without usage
    fail_on: Thresholds | None = None  # thresholds that fail the run (spec.gates syntax)
    abort_on: Thresholds | None = None  # thresholds judged after each step; a breach stops the ramp
    junit: str | None = None  # JUnit XML of the thresholds' results
    find_knee: bool = False
    search_max_steps: int = 12
    search_max_seconds: float | None = None
    search_factor: float = 2.0
    search_max_load: float = 4096
    argv: list[str] = field(default_factory=list)

    @classmethod
    def from_manifest(cls, data: dict[str, Any]) -> RampOptions:
        """Options back from ``manifest()`` (what a master sends its workers): no secrets, no
        telemetry (a worker samples nothing)."""
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "telemetry"}
        fields["timeouts"] = Timeouts(**fields.get("timeouts", {}))
        for name, flag in (("fail_on", "--fail-on"), ("abort_on", "--abort-on")):
            if fields.get(name):
                fields[name] = parse_thresholds(str(fields[name]), flag)
        return cls(**fields)

    def manifest(self) -> dict[str, Any]:
        telemetry = self.telemetry
        data = asdict(replace(self, telemetry=None))
        if telemetry is not None:
            data["telemetry"] = {k: v for k, v in asdict(telemetry).items() if k != "monitor_token"}
        for name in ("fail_on", "abort_on"):  # as written, the text every surface reads
            gate = getattr(self, name)
            data[name] = None if gate is None else gate.text
        data.pop("api_key", None)  # secrets never reach the run directory
        data["api_key_set"] = self.api_key is not None
        return data


def scenario_manifest(base: Workload | None) -> dict[str, Any] | None:
    """What the manifest says of the scenario a workload came from (None: the ramp's own prompts)."""
    s = getattr(base, "scenario", None)
    if s is None:
        return None
    return {"name": s.name, "path": s.path, "description": s.description, "seed": s.seed}


def run_manifest(
    kind: str,
    run_id: str,
    opts: RampOptions,
    plan: Sequence[StepPlan] = (),
    base: Workload | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The one manifest shape every run directory gets (``loadgen ramp``, the web UI's runs):
    ``kind``, ``label``, ``run_id``, ``options`` (``RampOptions.manifest``: no secrets), ``plan``,
    ``scenario``, ``slo``, ``tenants`` (a ``[[tenants]]`` scenario's: each one's load, priority, header
    names, body fields and SLO), then ``extra`` (``outcome``, ``argv`` of a Locust command line...)."""
    return {
        "kind": kind,
        "label": opts.label,
        "run_id": run_id,
        "options": opts.manifest(),
        "plan": [p.describe() for p in plan],
        "scenario": scenario_manifest(base),
        "slo": opts.slo,
        **({"tenants": [t.describe() for t in base.scenario.tenants]} if base and base.scenario.tenants else {}),
        **extra,
    }


def build_ramp_plan(opts: RampOptions, base: Workload) -> list[StepPlan]:
    """Steps from the flags, falling back to the scenario's ``[load]`` and ``[matrix]`` for what the flags
    leave out; with ``--repeat N`` each step N times in a row (``repeat_steps``)."""
    return repeat_steps(_ramp_plan(opts, base), opts.repeat)


def repeat_steps(plan: list[StepPlan], n: int) -> list[StepPlan]:
    """Each step ``n`` times in a row, numbered ``repeat`` 0 .. n-1 (``n`` = 1: the plan as it is).

    In a row, not the whole ramp ``n`` times: the repeats of a load meet the same server state within
    minutes of each other, so their spread is the run-to-run noise at that load rather than a drift
    of the machine over the whole run, and a ramp cut short still has whole groups for the loads it
    reached (``analysis.repeats``)."""
    if n < 1:
        raise OptionError(f"--repeat {n}: give 1 or more (each step that many times)")
    if n == 1:
        return plan
    return [replace(p, repeat=r) for p in plan for r in range(n)]


def with_scenario_contexts(opts: RampOptions, base: Workload) -> RampOptions:
    """The options with the scenario's prompt lengths where the flags give none (what the plan
    steps through and the manifest records)."""
    if opts.context_tokens is None and opts.scenario and base.scenario.context_tokens:
        return replace(opts, context_tokens=list(base.scenario.context_tokens))
    return opts


def _ramp_plan(opts: RampOptions, base: Workload) -> list[StepPlan]:
    opts = with_scenario_contexts(opts, base)
    if base.scenario.tenants:
        return _tenants_plan(opts, base)
    if opts.rates:
        return build_open_plan(
            list(opts.rates), opts.context_tokens, opts.warmup_seconds, opts.step_seconds, opts.requests_per_step
        )
    if opts.concurrency:
        return build_plan(
            opts.concurrency, opts.context_tokens, opts.warmup_seconds, opts.step_seconds, opts.requests_per_step
        )
    load = base.scenario.load
    if load.mode == "open":
        return build_open_plan(
            base.step_targets(), opts.context_tokens, opts.warmup_seconds, opts.step_seconds, opts.requests_per_step
        )
    return build_plan(
        [int(c) for c in load.concurrency],
        opts.context_tokens,
        opts.warmup_seconds,
        opts.step_seconds,
        opts.requests_per_step,
    )


def _tenants_plan(opts: RampOptions, base: Workload) -> list[StepPlan]:
    """A ``[[tenants]]`` scenario's steps: each tenant's users or rate per step (their sum is the
    step's load); ``--concurrency`` / ``--rate`` give the loads their shares divide."""
    scenario = base.scenario
    closed = scenario.load.mode == "closed"
    flag = opts.concurrency if closed else opts.rates
    other = opts.rates if closed else opts.concurrency
    if other:
        mode = scenario.load.mode
        raise OptionError(
            f"{'--rate' if closed else '--concurrency'}: the tenants of {scenario.path} are {mode} loop "
            f'([load] mode = "{mode}"); give {"--concurrency" if closed else "--rate"} or neither'
        )
    if flag and not any(t.share is not None for t in scenario.tenants):
        raise OptionError(
            f"{'--concurrency' if closed else '--rate'}: the tenants of {scenario.path} set their own loads "
            "(users or rate); the flag divides only shares (share = ...)"
        )
    loads = [float(x) for x in flag] if flag else [float(x) for x in scenario.load.steps()]
    per_step = base.tenant_steps(loads)
    plan: list[StepPlan] = []
    for tenants in per_step:
        total = sum(v for _, v in tenants)
        if closed:
            step = StepPlan(int(total), None, opts.warmup_seconds, opts.step_seconds, opts.requests_per_step)
        else:
            step = StepPlan(1, None, opts.warmup_seconds, opts.step_seconds, opts.requests_per_step, rate=total)
        step.tenants = tenants
        plan.append(step)
    return plan


@dataclass(slots=True)
class StepPlan:
    """One step. Closed loop: ``concurrency`` users. Open loop (``rate`` req/s, or ``replay``, a
    trace replayed at a time scale): ``concurrency`` is the number of dispatching users (1 per
    process); requests are sent at their scheduled times whatever is in flight."""

    concurrency: int
    context_tokens: int | None = None
    warmup_s: float = 5.0
    duration_s: float | None = 30.0
    requests: int | None = None
    rate: float | None = None
    replay: Any = None
    repeat: int | None = None  # which repeat of its load (``--repeat``), None without repeats
    tenants: tuple[tuple[str, float], ...] | None = None  # [[tenants]]: (name, users or req/s) each

    @property
    def open_loop(self) -> bool:
        return self.rate is not None or self.replay is not None

    def describe(self) -> dict[str, Any]:
        return {
            "concurrency": None if self.open_loop else self.concurrency,
            "context_tokens": self.context_tokens,
            "rate": self.rate,
            "time_scale": getattr(self.replay, "time_scale", None),
            "warmup_s": self.warmup_s,
            "duration_s": self.duration_s,
            "requests": self.requests,
            **({"repeat": self.repeat} if self.repeat is not None else {}),
            **({"tenants": dict(self.tenants)} if self.tenants is not None else {}),
        }


def build_plan(
    concurrency: list[int],
    context_tokens: list[int] | None,
    warmup_s: float,
    duration_s: float | None,
    requests: int | None,
) -> list[StepPlan]:
    """The matrix: every context length (outer) times every concurrency (inner)."""
    contexts = _plan_contexts(context_tokens, duration_s, requests)
    return [StepPlan(c, ctx, warmup_s, duration_s, requests) for ctx in contexts for c in concurrency]


def _plan_contexts(
    context_tokens: list[int] | None, duration_s: float | None, requests: int | None
) -> list[int | None]:
    """The context lengths a plan iterates (None: the workload's own); a step must be able to end."""
    if duration_s is None and requests is None:
        raise ValueError("give --step-seconds or --requests-per-step (or both)")
    return list(context_tokens) if context_tokens else [None]


def build_open_plan(
    targets: list[Any],
    context_tokens: list[int] | None,
    warmup_s: float,
    duration_s: float | None,
    requests: int | None,
) -> list[StepPlan]:
    """Open-loop steps: each target a rate (req/s, a number) or a trace replay; one dispatcher."""
    plan = []
    for ctx in _plan_contexts(context_tokens, duration_s, requests):
        for target in targets:
            if isinstance(target, (int, float)):
                plan.append(StepPlan(1, ctx, warmup_s, duration_s, requests, rate=float(target)))
            else:
                plan.append(StepPlan(1, ctx, warmup_s, duration_s, requests, replay=target))
    return plan
