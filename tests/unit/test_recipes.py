"""The "How to add" recipes of docs/architecture.md, each held to completeness: a detector, a
telemetry source, a report section or an engine that is added by half of its recipe fails here.

(A call type's recipe is held by tests/unit/test_call_registry.py, followed once for ``score``; a
model's by tests/unit/sim/test_hfconfig.py, every shipped config.json against its published
parameter count; a hardware part's by tests/unit/sim/test_sim_profiles.py.)
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from loadgen.analysis.knee import DETECTOR_NAMES, DETECTOR_ORDER, KneeOptions, knee_verdict
from loadgen.analysis.knee.curve import make_curve
from loadgen.analysis.knee.detectors import run_detectors

PKG = Path(__file__).resolve().parents[2] / "loadgen"


def _steps() -> list[dict[str, Any]]:
    """A closed-loop ramp that saturates at C=32: throughput flat, latency and queue climbing."""
    out = []
    for i, (c, tok_s, ttft) in enumerate([(1, 100.0, 50.0), (8, 780.0, 60.0), (32, 2900.0, 90.0), (64, 3000.0, 900.0)]):
        lat = {"mean": ttft, "p50": ttft, "p90": ttft * 1.2, "p99": ttft * 1.5}
        out.append(
            {
                "step": i,
                "concurrency": c,
                "valid": True,
                "output_tok_s": tok_s,
                "requests_ok": 100,
                "requests_failed": 0,
                "ttft_ms": lat,
                "itl_ms": {k: v / 10 for k, v in lat.items()},
                "tpot_ms": {k: v / 10 for k, v in lat.items()},
                "e2e_ms": {k: v * 5 for k, v in lat.items()},
            }
        )
    return out


def test_a_knee_detector_is_run_named_ordered_and_reported() -> None:
    """Recipe: a ``detect_*`` function in analysis/knee/detectors.py returning a ``Finding``, called
    by ``run_detectors``; its name in ``DETECTOR_ORDER`` (where the verdict's prose lists it) and in
    ``DETECTOR_NAMES`` (how the prose names it). Then the verdict and the report carry it."""
    found = run_detectors(make_curve(_steps()), {"ttft_p99_ms": 500.0}, KneeOptions())
    assert set(found) == set(DETECTOR_ORDER) == set(DETECTOR_NAMES)
    assert len(DETECTOR_ORDER) == len(set(DETECTOR_ORDER))
    from loadgen.analysis.knee.verdict import CURVE_DETECTORS, EVIDENCE_DETECTORS, HARD_DETECTORS

    assert set(HARD_DETECTORS) | set(CURVE_DETECTORS) | set(EVIDENCE_DETECTORS) <= set(DETECTOR_ORDER)
    verdict = knee_verdict(_steps(), {"ttft_p99_ms": 500.0})
    assert set(verdict["detectors"]) == set(DETECTOR_ORDER)  # summary.json and report.html's table
    from loadgen.report.html_verdict import detectors_html

    table = detectors_html({"knee": verdict, "steps": _steps()})  # type: ignore[typeddict-item]
    assert all(f'data-detector="{name}"' in table for name in DETECTOR_ORDER)


def _sampler_classes() -> dict[str, type]:
    import importlib

    out: dict[str, type] = {}
    for path in sorted((PKG / "telemetry").glob("*.py")):
        module = importlib.import_module(
            f"loadgen.telemetry.{path.stem}" if path.stem != "__init__" else "loadgen.telemetry"
        )
        for name, obj in vars(module).items():
            protocol = getattr(obj, "_is_protocol", False)
            if inspect.isclass(obj) and name.endswith("Sampler") and obj.__module__ == module.__name__ and not protocol:
                out[name] = obj
    return out


def test_a_telemetry_source_is_a_sampler_the_runner_builds() -> None:
    """Recipe: a class in telemetry/ with ``name``, ``period_s``, ``open(emit)``, ``sample()`` and
    ``close()`` (telemetry.base.Sampler; ``sample`` may block, it has a thread of its own), whose
    samples are rundir/samples.py's typed ones (GpuSample, ServerSample), and a branch of
    ``runner.build_sources`` that makes it from its option. A class the runner never builds is dead
    code; one without the methods would fail at run time, after the run started."""
    classes = _sampler_classes()
    assert {"NvmlSampler", "DcgmSampler", "SmiPollSampler", "ServerMetricsSampler", "RemoteSampler"} <= set(classes)
    runner_src = (PKG / "telemetry" / "runner.py").read_text()
    built = {
        n.func.id for n in ast.walk(ast.parse(runner_src)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    for name, cls in classes.items():
        for method in ("open", "sample", "close"):
            assert callable(getattr(cls, method, None)), f"{name} has no {method}()"
        init = inspect.getsource(cls)
        assert "self.name" in init and "self.period_s" in init, f"{name} sets no name or period_s"
        assert name in built, f"telemetry/runner.py never builds {name}"
        returns = str(inspect.signature(cls.sample).return_annotation)
        assert re.search(r"\b(GpuSample|ServerSample|Sample)\b", returns), f"{name}.sample() returns {returns}"


def test_a_report_section_renders_nothing_without_its_data() -> None:
    """Recipe: a function ``summary -> str | None`` in report/ (sections.py, calltables.py),
    listed in ``LEAD_SECTIONS`` or ``TRAILING_SECTIONS``: None when the summary lacks its data, so
    a run without telemetry, SLO or plan still gets a clean report."""
    from loadgen.report.sections import LEAD_SECTIONS, TRAILING_SECTIONS

    sections = (*LEAD_SECTIONS, *TRAILING_SECTIONS)
    assert len(sections) == len(set(sections))
    bare: Any = {"steps": [], "totals": {}, "run_id": "r", "manifest": {}}
    for section in sections:
        assert section(bare) is None, f"{section.__name__} renders something for an empty summary"
    with_knee: Any = {**bare, "steps": _steps(), "knee": knee_verdict(_steps(), None)}
    assert any(isinstance(s(with_knee), str) for s in LEAD_SECTIONS)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_an_engine_is_known_to_every_surface_that_names_one(engine: str) -> None:
    """Recipe: its defaults in sim/engines.py (``ENGINES``, ``with_engine``), its scheduler module,
    and its name wherever a command takes ``--engine``: the simulator's, predict's deployments and
    the twin's (which may not import sim/, so it spells the names out: held equal here)."""
    from loadgen.sim.engines import ENGINES, with_engine
    from loadgen.sim.profile import load_profile
    from loadgen.twin.args import calibrate_parser, twin_parser

    assert engine in ENGINES
    assert with_engine(load_profile("h200-llama-8b"), engine) is not None
    for parser in (calibrate_parser(), twin_parser()):
        (action,) = [a for a in parser._actions if "--engine" in a.option_strings]
        assert tuple(action.choices or ()) == ENGINES
