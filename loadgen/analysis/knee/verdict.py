"""The knee verdict: where a deployment saturates, and why, in one sentence.

Input is the summary's step list (plain dicts, see ``loadgen report``). Only steps labelled
``valid`` are used; the verdict lists the ones it ignored and why. The load axis is concurrency
(closed loop) or, when any step has no concurrency, the open-loop request rate. Several context
lengths are analysed one curve each; the verdict is the lowest knee among them. An SLO key that is
not ``<metric>_<stat>_ms`` raises ValueError before any step is read.

:func:`knee_verdict` combines the findings of :mod:`loadgen.analysis.knee.detectors`:

1. Each hard limit proposes a knee: for ``slo_breach``, ``error_onset`` and ``preemption`` the step
   where the signal appears already fails, so the knee is the step before it; a full KV cache
   marks the load at which the server became full, so the knee is that step. The verdict is the
   lowest of these (None, "no load meets ...", when a failing signal is already at the first step).
2. Without a hard limit, the throughput curve decides once it has flattened: the knee is the step
   before the first doubling of load that buys less than ``min_gain_per_doubling`` (or, when no
   measured doubling shows it, the last step at or below a USL peak inside the range). Kneedle only
   adds evidence: every concave curve bends somewhere, also one that still gains +20 % per
   doubling, and on geometric steps its bend lies a step or more below where the gain runs out.
3. Otherwise there is no knee within the measured range, and the reason says how the last step
   still scaled.

The reason is one sentence: the deciding signal first; then, where other detectors disagree with the
verdict, which ones and why they do not decide (``weigh``: "Kneedle and Kleinrock flag C=64 and the
power plateau C=8, but throughput still gained at least +18% per doubling of concurrency (the least
from C=64 to C=128), above the rule's 10% floor: no knee"), every figure taken from the findings;
then every other triggered signal; then the ignored steps. Kleinrock's optimum, the queue, power and
log signals only ever add evidence. :func:`deciding_detectors` and :func:`rule_text` read a verdict
back (also one from an older summary.json) for the reports.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from loadgen.analysis.contracts import ContextVerdict, IgnoredStep, KneeRule, KneeVerdict, LoadAxis
from loadgen.analysis.knee.curve import (
    Finding,
    KneeOptions,
    Step,
    as_number,
    fmt_load,
    make_curve,
    pct,
)
from loadgen.analysis.knee.detectors import run_detectors
from loadgen.analysis.values import load_axis, number
from loadgen.spec.gates import parse_slo_key

CURVE_DETECTORS = ("marginal_gain", "usl", "kneedle")
HARD_DETECTORS = ("slo_breach", "error_onset", "kv_saturation", "preemption")
DETECTOR_ORDER = (
    "slo_breach",
    "error_onset",
    "kv_saturation",
    "preemption",
    "marginal_gain",
    "kneedle",
    "usl",
    "kleinrock",
    "queue_onset",
    "power_plateau",
    "server_log",
)
# signals that describe the curve's shape or the server's state, never a limit: their silence beside
# a knee is worth a word ("Kneedle does not fire"); a hard limit's silence is not
EVIDENCE_DETECTORS = ("kneedle", "kleinrock", "queue_onset", "power_plateau")
DETECTOR_NAMES = {
    "slo_breach": "the SLO",
    "error_onset": "the error rate",
    "kv_saturation": "the KV cache",
    "preemption": "retractions",
    "marginal_gain": "the gain per doubling",
    "kneedle": "Kneedle",
    "usl": "the USL fit",
    "kleinrock": "Kleinrock",
    "queue_onset": "the server queue",
    "power_plateau": "the power plateau",
    "server_log": "the server log",
}


def _and(words: Sequence[str]) -> str:
    """Words joined as prose: a; a and b; a, b and c."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _key(knee: float | None) -> float:
    # a hard limit failing at the first step proposes no knee at all: it sorts below every load
    return -math.inf if knee is None else knee


def _deciding(rule: str, knee: float | None, found: Iterable[tuple[str, bool, float | None]]) -> list[str]:
    """Names of the detectors that decide the verdict, from (name, triggered, proposed knee)."""
    triggered = {name: k for name, t, k in found if t}
    family = HARD_DETECTORS if rule == "hard limit" else CURVE_DETECTORS if rule == "throughput curve" else ()
    return [n for n in DETECTOR_ORDER if n in family and n in triggered and _key(triggered[n]) == _key(knee)]


def deciding_detectors(verdict: Mapping[str, Any]) -> list[str]:
    """The detectors that decide ``verdict`` (a ``knee_verdict`` dict, or summary.json's ``knee``):
    for a hard limit the ones at the lowest proposed knee, for the throughput curve the curve
    detectors proposing the knee, none without a knee. Every other triggered detector is evidence."""
    dets = verdict.get("detectors")
    if not isinstance(dets, Mapping):
        return []
    found = [
        (str(n), bool(d.get("triggered")), number(d.get("knee"))) for n, d in dets.items() if isinstance(d, Mapping)
    ]
    return _deciding(str(verdict.get("rule") or "none"), number(verdict.get("knee")), found)


def _floor(dets: Mapping[str, Any]) -> float | None:
    gain = dets.get("marginal_gain")
    numbers = gain.get("numbers") if isinstance(gain, Mapping) else None
    return number(numbers.get("min_gain_per_doubling")) if isinstance(numbers, Mapping) else None


def rule_text(verdict: Mapping[str, Any]) -> str:
    """How the verdict weighs its detectors, in words for the reports: which rule decided (and by
    which detectors), what the rule needs, and that the other signals are evidence only. The floor
    is the one the verdict used (``marginal_gain``'s ``min_gain_per_doubling``)."""
    dets = verdict.get("detectors")
    dets = dets if isinstance(dets, Mapping) else {}
    floor = _floor(dets)
    under = f"buys under {floor:.0%} more throughput" if floor is not None else "buys too little throughput"
    names = _and([DETECTOR_NAMES.get(n, n) for n in deciding_detectors(verdict)] or ["?"])
    evidence = "Kneedle, Kleinrock, the server queue, GPU power and the server log add evidence only."
    rule = verdict.get("rule")
    if rule == "hard limit":
        return (
            f"Decided by a hard limit ({names}): a load that breaks an SLO, fails requests, fills the KV cache "
            f"or preempts is past the knee, whatever the throughput curve says. {evidence}"
        )
    if rule == "tenant SLO":
        return (
            "Decided by the tenants' own SLOs: the knee is the last load at which every tenant held its SLO; the "
            f"first tenant to break one as the load grew is the reason. {evidence}"
        )
    if rule == "throughput curve":
        return (
            f"Decided by the throughput curve ({names}): the knee is the last load before a doubling that {under} "
            f"(or the last step at or below a USL peak inside the range). {evidence}"
        )
    return (
        "No rule was met: a knee needs a hard limit (SLO breach, errors, KV cache full, preemption), a doubling "
        f"of load that {under}, or a USL peak inside the measured range. {evidence}"
    )


def _weakest_doubling(gain: Finding) -> tuple[float, float, float] | None:
    """(from, to, gain per doubling) of the pair of steps whose doubling bought the least."""
    pairs = [p for p in gain.numbers.get("pairs", []) if isinstance(p, Mapping)]
    if not pairs:
        return None
    p = min(pairs, key=lambda p: float(p["gain_per_doubling"]))
    return float(p["from"]), float(p["to"]), float(p["gain_per_doubling"])


def _where(load: float, axis: LoadAxis) -> str:
    """A detector's load: a step's as measured, a fitted one (the USL peak) rounded."""
    if float(load).is_integer():
        return fmt_load(load, axis)
    return f"C≈{load:.0f}" if axis == "concurrency" else f"rate≈{load:.3g} req/s"


def _flags(found: Sequence[Finding], axis: LoadAxis) -> str:
    """Names grouped by the load each flagged: Kneedle and Kleinrock flag C=64 and the power plateau C=8."""
    by_load: dict[float | None, list[str]] = {}
    for f in found:
        by_load.setdefault(f.load, []).append(DETECTOR_NAMES.get(f.name, f.name))
    parts = []
    for i, (load, names) in enumerate(by_load.items()):
        verb = ("flags " if len(names) == 1 else "flag ") if i == 0 else ""
        parts.append(f"{_and(names)} {verb}{_where(load, axis) if load is not None else 'a signal'}")
    # two groups read as "A and B flag C=64 and C C=8"; more get commas, so the "and"s stay inside groups
    return _and(parts) if len(parts) <= 2 else ", ".join(parts)


def weigh(
    found: Mapping[str, Finding],
    rule: KneeRule,
    knee: float | None,
    deciding: Sequence[Finding],
    axis: LoadAxis,
    opts: KneeOptions,
) -> list[str]:
    """Clauses saying why the detectors that disagree with the verdict do not decide it: the ones that
    fired elsewhere (or without a knee), and, beside a knee, the evidence signals that stayed quiet."""
    noun = "concurrency" if axis == "concurrency" else "rate"
    floor = f"{opts.min_gain_per_doubling:.0%}"
    flagged = [
        f
        for n in DETECTOR_ORDER
        if (f := found[n]).triggered and f not in deciding and (knee is None or f.knee != knee)
    ]
    weakest = _weakest_doubling(found["marginal_gain"]) if found["marginal_gain"].has_data else None
    still = ""
    if weakest is not None:
        a, b, g = weakest
        still = (
            f"throughput still gained at least {pct(g)} per doubling of {noun} "
            f"(the least from {fmt_load(a, axis)} to {fmt_load(b, axis)})"
        )
    out = []
    if rule == "none":
        if flagged:
            why = f"{still}, above the rule's {floor} floor" if still else "no throughput figures to judge a knee on"
            out.append(f"{_flags(flagged, axis)}, but {why}: no knee")
        return out
    if flagged:
        adds = "it adds evidence only" if len(flagged) == 1 else "they add evidence only"
        if rule == "hard limit":
            why = "the lowest hard limit decides: a load that breaks one is past the knee, whatever else fires"
        elif deciding and deciding[0].name == "usl":
            why = f"{adds}: the knee is the last step at or below the USL peak inside the range"
        else:
            why = f"{adds}: the knee is the last load before a doubling that bought under {floor}"
        out.append(f"{_flags(flagged, axis)}, but {why}")
    quiet = [DETECTOR_NAMES[n] for n in EVIDENCE_DETECTORS if found[n].has_data and not found[n].triggered]
    if rule == "hard limit" and still and not found["marginal_gain"].triggered:
        out.append(f"{still}, but a hard limit decides whatever the throughput does")
    if quiet:
        verb = "does" if len(quiet) == 1 else "do"
        adds = "it adds evidence only" if len(quiet) == 1 else "they add evidence only"
        need = "a hard limit decides alone" if rule == "hard limit" else f"one doubling under {floor} is enough"
        out.append(f"{_and(quiet)} {verb} not fire, but {adds}: {need}")
    return out


def _ignored(steps: Sequence[Step], axis: LoadAxis) -> list[IgnoredStep]:
    out: list[IgnoredStep] = []
    for s in steps:
        if s.get("valid", True) is not False:
            continue
        row: IgnoredStep = {
            "step": s.get("step"),
            "context_tokens": s.get("context_tokens"),
            "invalid_reason": s.get("invalid_reason") or "invalid",
        }
        if axis == "rate":
            row["rate"] = s.get("rate")
        else:
            row["concurrency"] = s.get("concurrency")
        out.append(row)
    return out


def _verdict_one(
    steps: Sequence[Step], slo: Mapping[str, float] | None, opts: KneeOptions, axis: LoadAxis
) -> ContextVerdict:
    curve = make_curve(steps, axis)
    ignored = _ignored(steps, axis)
    ignored_txt = ""
    if ignored:
        parts = [f"{fmt_load(number(s.get(axis)), axis)}: {s['invalid_reason']}" for s in ignored]
        ignored_txt = f"ignored {len(ignored)} invalid step{'s' if len(ignored) > 1 else ''} ({'; '.join(parts)})"

    if len(curve.loads) < 2:
        why = f"insufficient data: {len(curve.loads)} valid step{'s' if len(curve.loads) != 1 else ''}, need >= 2"
        return {
            "axis": axis,
            "ignored_steps": ignored,
            "knee": None,
            "rule": "none",
            "reason": "; ".join(x for x in (why, ignored_txt) if x),
            "detectors": {},
        }

    found = run_detectors(curve, slo, opts)
    hard = [found[n] for n in HARD_DETECTORS if found[n].triggered]
    knee: float | None
    rule: KneeRule
    if hard:
        rule = "hard limit"
        # A hard limit failing already at the first step (knee None) means no load qualifies: it wins.
        lowest = min(_key(f.knee) for f in hard)
        knee = None if math.isinf(lowest) else lowest
    else:
        # The curve's knee is the last load whose next doubling still paid: the step before the first
        # doubling that buys less than ``min_gain_per_doubling`` (or, when the steps are too sparse to
        # show one, the last step at or below the USL peak). Kneedle only adds evidence: every concave
        # curve bends somewhere, also one that still gains +20 % per doubling, and on geometric steps
        # its bend sits a step or more below where the gain runs out.
        decider = next((f for n in ("marginal_gain", "usl") if (f := found[n]).triggered and f.knee is not None), None)
        if decider is not None:
            rule = "throughput curve"
            knee = decider.knee
        else:
            rule, knee = "none", None
    deciding = [found[n] for n in _deciding(rule, knee, ((f.name, f.triggered, f.knee) for f in found.values()))]

    lead = [f.phrase for f in deciding]
    weighed = weigh(found, rule, knee, deciding, axis, opts)
    rest = [found[n].phrase for n in DETECTOR_ORDER if found[n].triggered and found[n] not in deciding]
    if rule == "none":
        gain = found["marginal_gain"]
        scaling = gain.evidence.rstrip(".").replace("Throughput still scales: ", "throughput ", 1)
        if gain.has_data:
            lead = [f"no saturation up to {fmt_load(curve.loads[-1], axis)}: {scaling[:1].lower()}{scaling[1:]}"]
        else:
            lead = [f"no knee found, throughput has {scaling}"]
        if found["usl"].load is not None and not found["usl"].triggered:
            lead.append(f"USL predicts a peak at C≈{found['usl'].load:.0f}")
    elif knee is None:
        lead.insert(0, f"no load meets the limits (already at {fmt_load(curve.loads[0], axis)})")
    reason = "; ".join(x for x in [*lead, *weighed, *rest, ignored_txt] if x)
    return {
        "axis": axis,
        "ignored_steps": ignored,
        "knee": knee,
        "rule": rule,
        "reason": reason,
        "detectors": {n: found[n].to_dict(axis) for n in DETECTOR_ORDER},
    }


def knee_verdict(
    steps: Sequence[Step], slo: Mapping[str, float] | None = None, options: KneeOptions | None = None
) -> KneeVerdict:
    """The knee of a ramp: {"concurrency", "rate", "reason", "rule", "detectors", ...}.

    ``concurrency`` (closed loop) or ``rate`` (open loop) is the knee or None; ``reason`` is one
    sentence; ``detectors`` maps each detector's name to its finding. With several context
    lengths each is judged alone (``by_context``) and the lowest knee is reported.
    """
    opts = options or KneeOptions()
    if slo:
        for k in slo:
            parse_slo_key(k)
    if not steps:
        return {
            "concurrency": None,
            "rate": None,
            "axis": "concurrency",
            "context_tokens": None,
            "knee": None,
            "rule": "none",
            "reason": "insufficient data: no steps",
            "detectors": {},
            "ignored_steps": [],
        }
    axis = load_axis(steps)
    groups: dict[Any, list[Step]] = {}
    for s in steps:
        groups.setdefault(s.get("context_tokens"), []).append(s)
    verdicts = {ctx: _verdict_one(g, slo, opts, axis) for ctx, g in groups.items()}
    ctx, chosen = min(
        verdicts.items(),
        key=lambda kv: (
            kv[1]["knee"] is None and kv[1]["rule"] != "hard limit",
            kv[1]["knee"] if kv[1]["knee"] is not None else -1.0,
        ),
    )
    knee = as_number(chosen["knee"])
    out: KneeVerdict = {
        "axis": chosen["axis"],
        "ignored_steps": chosen["ignored_steps"],
        "knee": knee,
        "rule": chosen["rule"],
        "reason": chosen["reason"] if len(groups) == 1 else f"at {ctx} context tokens: {chosen['reason']}",
        "detectors": chosen["detectors"],
        "context_tokens": ctx,
        "concurrency": knee if axis == "concurrency" else None,
        "rate": knee if axis == "rate" else None,
    }
    if len(groups) > 1:
        out["by_context"] = {str(k): v for k, v in verdicts.items()}
    return out
