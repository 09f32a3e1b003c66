"""Steps the server was down for: INVALID, and their power idle, whatever else they show."""

from __future__ import annotations

from loadgen.analysis.contracts import StepSummary
from loadgen.analysis.load import Run


def server_down_enricher(run: Run, steps: list[StepSummary]) -> None:
    """A step that ended with reason ``server_down`` (the ramp found the server gone) is invalid;
    power sampled then is not load power."""
    for step in steps:
        if step.get("end_reason") != "server_down":
            continue
        step["valid"] = False
        prev = step.get("invalid_reason")
        step["invalid_reason"] = "server down" + (f"; {prev}" if prev and "server" not in prev else "")
        if "power_valid" in step:
            step["power_valid"] = False
            step["power_invalid_reason"] = "server down: no request was being served"
