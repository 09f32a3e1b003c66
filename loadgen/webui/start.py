"""The start form of the web UI: every field of a run, from the one option table, on the first page.

Locust's own form keeps our options under a collapsed "Custom parameters" and knows nothing of open
loop. ``static/start.js`` (added to Locust's index page) draws our form from ``/loadgen/form.json``
instead and posts it to Locust's ``/swarm`` exactly as Locust's form would (``lg_*`` fields), so the
locustfile's own checks and ramp building apply unchanged. What this module serves:

* ``form_schema``: the form's fields (the flag table's ``form`` surface: name, label, help, kind,
  choices) with their defaults as this UI process has them (``loadgen ui``'s flags, else
  ``loadgen ramp``'s defaults), and the scenarios the UI may run;
* ``ScenarioChoices``: the scenario files of the folders the UI was started with
  (``loadgen ui --scenarios DIR``, default ``./scenarios``), each with its load pattern so the form can
  show it; files that are not scenarios are listed with the reason, not offered;
* ``guard_swarm``: a Start whose ``lg_scenario`` is neither one of those files nor the command line's
  ``--scenario`` is refused: the page never makes the server read an arbitrary path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.spec import flags

# the form's sections, in order: (title, option dests)
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Load", ("concurrency", "rates", "arrival", "burstiness", "step_seconds", "warmup_seconds", "requests_per_step")),
    ("Requests", ("scenario", "model", "endpoint", "max_tokens", "context_tokens", "extra_body", "transport")),
    ("Verdict", ("slo", "fail_on", "abort_on", "call_type", "gpu_count", "label")),
)
LABELS = {
    "concurrency": "Closed loop: users per step",
    "rates": "Open loop: request rates per step (req/s)",
    "arrival": "Arrivals",
    "burstiness": "Burstiness (gamma CV)",
    "step_seconds": "Step seconds (steady window)",
    "warmup_seconds": "Warm-up seconds",
    "requests_per_step": "Requests per step (ends a step early)",
    "scenario": "Scenario",
    "model": "Model",
    "endpoint": "Endpoint",
    "max_tokens": "Max tokens",
    "context_tokens": "Context lengths (tokens)",
    "extra_body": "Extra body fields",
    "transport": "HTTP client",
    "slo": "SLO",
    "fail_on": "Fail on (thresholds)",
    "abort_on": "Abort on (thresholds)",
    "call_type": "Call type judged",
    "gpu_count": "GPUs serving the model",
    "label": "Label",
}


# the form's own words: (help under the field, placeholder). The flag table's help speaks the command
# line (flags, exit codes, options the form has not); a field here speaks of the form's fields only.
# A field missing here falls back to the flag table's help.
FORM_TEXT: dict[str, tuple[str, str]] = {
    "model": ("the model name the server serves; empty: the first one the server lists", "first listed"),
    "scenario": ("a described workload: prompts, lengths and its own load pattern (fills Load below)", ""),
    "concurrency": ("users sending one request after another; one step per number", "e.g. 1,8,32"),
    "rates": ("requests per second, sent whatever the server's pace; one step per rate", "e.g. 1,2,4"),
    "arrival": ("how the requests of a rate are spread: Poisson (random gaps) or gamma (burstier)", ""),
    "burstiness": (
        "for gamma arrivals: the gaps' coefficient of variation (1 is Poisson's, 2 twice as bursty)",
        "e.g. 2",
    ),
    "step_seconds": ("how long each step is measured, after its warm-up", "e.g. 30"),
    "warmup_seconds": ("the start of each step, not measured (the server settles at the new load)", "e.g. 5"),
    "requests_per_step": (
        "end a step as soon as this many requests finished in its measured window; empty: the step lasts its seconds",
        "no limit",
    ),
    "max_tokens": ("the longest answer asked of each request, in tokens", "e.g. 512"),
    "context_tokens": ("prompt lengths in tokens; several repeat every step at each length", "e.g. 60,4000"),
    "endpoint": ("the API each request calls; embeddings and rerank have no first token, so no TTFT", ""),
    "extra_body": ("more JSON fields for every request body, comma-separated name=value", "e.g. temperature=0"),
    "transport": ("fast: the built-in client (measures to the byte); openai: the openai package's client", ""),
    "slo": ("latency limits the knee verdict respects", "e.g. ttft_p99=2s,tpot_p99=50ms"),
    "fail_on": (
        "limits judged in the report: a breach marks the run FAILED (it runs to the end)",
        "e.g. ttft_p99>2s,error_rate>1%",
    ),
    "abort_on": (
        "limits judged after each step: the first breach stops the run and writes its report",
        "e.g. error_rate>5%",
    ),
    "call_type": ("in a run mixing several APIs, the one the knee verdict judges; empty: all calls", ""),
    "gpu_count": ("GPUs serving the model, for throughput per GPU; empty: as many as telemetry sees", "e.g. 8"),
    "label": ("a name for this run, shown in its reports and in Past runs", "e.g. baseline"),
}
_BY_FLAG = {f.flag(surface): f for f in flags.FLAGS if "form" in f.surfaces for surface in ("form", "ramp")}
_FLAG_IN_TEXT = re.compile(r"--(?:lg-)?[a-z][a-z0-9-]*")


def in_form_words(message: str) -> str:
    """An error from the option table names the flag (``--lg-steps '2,x': ...``): the form names
    the field the user saw ("Closed loop: users per step" '2,x': ...). Flags of no form field stay."""

    def label(m: re.Match[str]) -> str:
        text = m.group(0)
        f = _BY_FLAG.get(text)
        if f is None or "form" not in f.surfaces:
            return text
        return f"\u201c{LABELS.get(f.dest, f.dest)}\u201d"

    return _FLAG_IN_TEXT.sub(label, message)


@dataclass(frozen=True, slots=True)
class ScenarioChoice:
    """One file of a scenarios folder: ``path`` is what the form sends back (and all it may send)."""

    name: str
    path: str
    description: str = ""
    load: dict[str, Any] | None = None  # mode, concurrency / rates, arrival, burstiness, step seconds
    error: str | None = None  # not a usable scenario: why (listed, not offered)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": self.path,
            "description": self.description,
            "load": self.load,
            "error": self.error,
        }


class ScenarioChoices:
    """The scenario files of ``folders`` (``*.toml``, not recursive), read again on each listing so a
    file added while the UI runs appears; ``extra``: paths allowed besides them (the command line's
    ``--scenario``)."""

    def __init__(self, folders: Iterable[str | Path], extra: Iterable[str] = ()) -> None:
        self.folders = [Path(f) for f in folders]
        self.extra = [e for e in extra if e]

    def list(self) -> list[ScenarioChoice]:
        out: list[ScenarioChoice] = []
        seen: set[str] = set()
        paths = [Path(e) for e in self.extra]
        for folder in self.folders:
            if folder.is_dir():
                paths += sorted(folder.glob("*.toml"))
        for path in paths:
            key = str(path.resolve())
            if key in seen:
                continue
            seen.add(key)
            out.append(_choice(path))
        return out

    def allowed(self) -> set[str]:
        """The ``lg_scenario`` values a Start may carry: "" (none) and each usable file's path."""
        return {""} | {c.path for c in self.list() if c.error is None} | set(self.extra)


def _choice(path: Path) -> ScenarioChoice:
    from loadgen.workload.scenario import ScenarioError, load_scenario

    try:
        s = load_scenario(str(path))
    except ScenarioError as exc:
        return ScenarioChoice(path.stem, str(path), error=str(exc).splitlines()[0][:300])
    ld = s.load
    load: dict[str, Any] = {
        "mode": ld.mode,
        "step_seconds": ld.step_seconds,
        "warmup_seconds": ld.warmup_seconds,
        "arrival": ld.arrival if ld.mode == "open" else None,
    }
    if ld.mode == "open":
        load["rates"] = list(ld.rates)
        load["time_scales"] = list(ld.time_scales) if ld.arrival == "trace" else []
        load["burstiness"] = ld.burstiness if ld.arrival == "gamma" else None
    else:
        load["concurrency"] = [int(c) for c in ld.concurrency]
    return ScenarioChoice(s.name or path.stem, str(path), s.description or "", load)


def _text(value: Any) -> str:
    """A parsed option's value as the form's text (lists comma-joined, nothing as "")."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else ""
    if isinstance(value, list | tuple):
        return ",".join(_text(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def form_schema(opts: Any, host: str, choices: ScenarioChoices) -> dict[str, Any]:
    """What ``start.js`` draws: sections of fields (``name`` is the ``lg_*`` form key Locust's
    ``/swarm`` takes), their current defaults and help, the host, and the scenarios."""
    sections = []
    for title, dests in SECTIONS:
        fields = []
        for dest in dests:
            f = flags.BY_DEST.get(dest)
            if f is None or "form" not in f.surfaces:
                continue
            kind = f.kind
            given = _text(getattr(opts, f.lg_attr, None)) if opts is not None else ""
            fields.append(
                {
                    "name": f.lg_attr,
                    "dest": dest,
                    "flag": f.flag("ramp"),
                    "label": LABELS.get(dest, dest.replace("_", " ").capitalize()),
                    "help": FORM_TEXT.get(dest, (f.help, ""))[0],
                    "placeholder": FORM_TEXT.get(dest, ("", ""))[1],
                    "kind": kind,
                    "choices": list(f.choices),
                    # loadgen ui's value, else loadgen ramp's default: the form starts what ramp would
                    "default": given or _text(f.default),
                }
            )
        sections.append({"title": title, "fields": fields})
    return {
        "host": host,
        "sections": sections,
        "scenarios": [c.to_json() for c in choices.list()],
        "scenario_folders": [str(f) for f in choices.folders],
    }


def guard_swarm(form: Mapping[str, str], choices: ScenarioChoices) -> str | None:
    """The reason to refuse this Start, or None. Only ``lg_scenario`` is checked here (every other
    field goes through the locustfile's own parsing, which names the field and the value)."""
    value = str(form.get("lg_scenario") or "").strip()
    if value and value not in choices.allowed():
        folders = ", ".join(str(f) for f in choices.folders) or "none"
        return (
            f"scenario {value!r} is not one of the scenario files this UI offers (folders: {folders}); "
            "choose one from the list, or start loadgen ui with --scenarios DIR"
        )
    return None
