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

The reason is one sentence: the deciding signal first, then every other triggered signal, then the
ignored steps. Kleinrock's optimum, the queue, power and log signals only ever add evidence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from loadgen.analysis.contracts import ContextVerdict, IgnoredStep, KneeRule, KneeVerdict, LoadAxis
from loadgen.analysis.knee.curve import (
    Finding,
    KneeOptions,
    Step,
    as_number,
    fmt_load,
    make_curve,
    parse_slo_key,
)
from loadgen.analysis.knee.detectors import run_detectors
from loadgen.analysis.values import load_axis, number

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
    deciding: list[Finding] = []
    knee: float | None
    rule: KneeRule
    if hard:
        rule = "hard limit"
        # A hard limit failing already at the first step (knee None) means no load qualifies: it wins.
        knee = min((-math.inf if f.knee is None else f.knee) for f in hard)
        deciding = [f for f in hard if (-math.inf if f.knee is None else f.knee) == knee]
        if math.isinf(knee):
            knee = None
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
            deciding = [f for n in CURVE_DETECTORS if (f := found[n]).triggered and f.knee == knee]
        else:
            rule, knee = "none", None
    deciding.sort(key=lambda f: DETECTOR_ORDER.index(f.name))

    lead = [f.phrase for f in deciding]
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
    reason = "; ".join(x for x in [*lead, *rest, ignored_txt] if x)
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
