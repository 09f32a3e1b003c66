"""``--junit FILE``: a run's thresholds as JUnit XML, the format every CI system shows as tests.

One ``<testsuite>`` per run (inside ``<testsuites>``), one ``<testcase>`` per (step, threshold)
for step thresholds and one per run threshold; a breach is a ``<failure>`` whose message says by
how much ("ttft_p99 2,431 ms > 2,000 ms (+21.6%) at C=64"). A step threshold with no valid step to
judge is one failing testcase; an invalid step is a ``<skipped>`` testcase (its reason given), and
so is a threshold skipped for want of figures (``goodput_share`` without ``--slo``). The layout is
the common JUnit schema's (Jenkins' junit-10.xsd); ``tests/fixtures/junit/junit-10.xsd`` checks it.
A ``[[tenants]]`` run adds one case per step and tenant with an SLO of its own (``tenant chat SLO
ttft_p99=2000ms``), failing with the limits it broke; ``tenant:NAME:`` thresholds are cases as any.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from typing import Any

from loadgen.analysis.thresholds import where


def _time(seconds: Any) -> str:
    return f"{float(seconds):.3f}" if isinstance(seconds, (int, float)) and seconds >= 0 else "0"


def _case(suite: ET.Element, classname: str, name: str, seconds: Any = None) -> ET.Element:
    return ET.SubElement(suite, "testcase", {"classname": classname, "name": name, "time": _time(seconds)})


def junit_xml(summary: Mapping[str, Any]) -> bytes:
    """The JUnit XML of a judged summary (``summary["thresholds"]``; no thresholds: an empty suite)."""
    verdict: Mapping[str, Any] = summary.get("thresholds") or {}
    results: Sequence[Mapping[str, Any]] = verdict.get("results") or []
    steps: Sequence[Mapping[str, Any]] = summary.get("steps") or []
    run_name = str(summary.get("label") or summary.get("run_id") or "run")
    classname = f"loadgen.{summary.get('run_id') or 'run'}"
    totals: Mapping[str, Any] = summary.get("totals") or {}
    root = ET.Element("testsuites", {"name": "loadgen thresholds"})
    suite = ET.SubElement(root, "testsuite", {"name": f"loadgen ramp: {run_name}"})
    props = ET.SubElement(suite, "properties")
    for key, value in (
        ("run_id", summary.get("run_id")),
        ("url", summary.get("url")),
        ("model", summary.get("model")),
        ("verdict", verdict.get("verdict")),
        ("aborted_by", verdict.get("aborted_by")),
    ):
        if value is not None:
            ET.SubElement(props, "property", {"name": key, "value": str(value)})
    tests = failures = skipped = 0
    for r in results:
        flag = "--abort-on" if r.get("source") == "abort_on" else "--fail-on"
        if r.get("scope") == "run" or r.get("status") in ("no_data", "skipped"):
            text = str(r["threshold"])
            run_scope = r.get("scope") == "run" and not text.startswith("run:")
            case = _case(suite, classname, f"run: {text}" if run_scope else text)
            tests += 1
            if r.get("status") == "skipped":
                ET.SubElement(case, "skipped", {"message": str(r.get("message"))})
                skipped += 1
            elif r.get("breached"):
                ET.SubElement(
                    case, "failure", {"type": flag, "message": str(r.get("message"))}
                ).text = f"{flag} {r['threshold']}: {r.get('message')}"
                failures += 1
            if r.get("scope") == "run" or r.get("status") == "skipped":
                continue
        judged = {j.get("step"): j for j in r.get("steps") or []}
        for s in steps:
            name = f"step {s.get('step')} ({where(s)}): {r['threshold']}"
            case = _case(suite, classname, name, s.get("wall_s"))
            tests += 1
            j = judged.get(s.get("step"))
            if j is None:
                reason = s.get("invalid_reason") or "not judged"
                ET.SubElement(case, "skipped", {"message": f"step {s.get('step')} is invalid: {reason}"})
                skipped += 1
            elif j.get("breached"):
                ET.SubElement(
                    case, "failure", {"type": flag, "message": str(j.get("message"))}
                ).text = f"{flag} {r['threshold']}: {j.get('message')}"
                failures += 1
    # a [[tenants]] run: one case per step and tenant with an SLO of its own, failing where it broke
    for s in steps:
        for name, t in (s.get("tenants") or {}).items():
            if not isinstance(t, Mapping) or not t.get("slo") or not t.get("demand"):
                continue
            limits = ",".join(f"{k.removesuffix('_ms')}={v:g}ms" for k, v in t["slo"].items())
            case = _case(suite, classname, f"step {s.get('step')} ({where(s)}): tenant {name} SLO {limits}")
            tests += 1
            if t.get("slo_breaks"):
                why = "; ".join(map(str, t["slo_breaks"]))
                ET.SubElement(case, "failure", {"type": "tenant SLO", "message": why}).text = f"tenant {name}: {why}"
                failures += 1
    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(skipped))
    suite.set("time", _time(totals.get("duration_s")))
    if summary.get("created"):
        suite.set("timestamp", str(summary["created"]))
    root.set("tests", str(tests))
    root.set("failures", str(failures))
    root.set("errors", "0")
    root.set("time", _time(totals.get("duration_s")))
    ET.indent(root)
    xml: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return xml + b"\n"


__all__ = ["junit_xml"]
