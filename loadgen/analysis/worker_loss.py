"""Steps a distributed worker was lost or came back in: INVALID, their load below the plan from then.

The master records ``worker_lost`` (``loadgen.load.distributed``: the worker stopped answering its
heartbeats, killed or cut off) with the step it happened in. Its users stop sending then, and Locust
gives them to no one until the next step's spawn, so that step ran below its planned load for the
rest of its time; the steps after it have their whole load on the workers left. A worker that
answers again (``worker_back``) is given users by Locust at once, but sends nothing until the next
step begins: that step too ran below its plan from then on.

A replay of a workload file (``loadgen ramp --workload``) records ``workload_exhausted`` when a
closed-loop user has sent every request of its stream for the step: it sends nothing more in the
step, which ran below its plan from then on too.
"""

from __future__ import annotations

from loadgen.analysis.contracts import StepSummary
from loadgen.analysis.load import Run


def worker_loss_enricher(run: Run, steps: list[StepSummary]) -> None:
    """Mark each step a worker was lost in, or a workload file's users ran out in: invalid, naming
    the worker (the users) and when."""
    by_step = {s["step"]: s for s in steps}
    ran_out: dict[int, list[float]] = {}
    for e in run.events:
        kind = e.get("kind")
        if e.get("src") != "loadgen" or kind not in ("worker_lost", "worker_back", "workload_exhausted"):
            continue
        index, t_ns = e.get("step"), e.get("t_ns")
        step = by_step.get(index) if isinstance(index, int) else None
        if step is None or not isinstance(t_ns, int) or t_ns > step["end_ns"]:
            continue
        into = max(t_ns - step["start_ns"], 0) / 1e9
        if kind == "workload_exhausted":
            ran_out.setdefault(step["step"], []).append(into)
            continue
        what = "lost" if kind == "worker_lost" else "back, idle until the next step,"
        _invalid(step, f"load below plan: worker {e.get('worker', '?')} {what} {into:.1f} s into the step")
    for index, times in ran_out.items():
        n = len(times)
        _invalid(
            by_step[index],
            f"load below plan: {n} user{'s' if n > 1 else ''} sent every request of {'their' if n > 1 else 'its'} "
            f"stream in the workload file, the first {min(times):.1f} s into the step (export it with more "
            "--requests-per-user)",
        )


def _invalid(step: StepSummary, why: str) -> None:
    step["valid"] = False
    prev = step.get("invalid_reason")
    step["invalid_reason"] = f"{prev}; {why}" if prev else why
