"""What a CI job shows of a run: the GitHub Actions step summary and the ``--junit`` file.

``$GITHUB_STEP_SUMMARY`` names a Markdown file GitHub renders on the job's page; a step appends to
it. :func:`step_summary_md` is the verdict and the step table; :func:`write_ci_outputs` appends it
there (when the variable is set) and writes the JUnit XML (when a path is given).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from loadgen.analysis.contracts import RunSummary
from loadgen.report.junit import junit_xml
from loadgen.report.markdown import escape_cell, step_table, verdict_block


def step_summary_md(summary: RunSummary) -> str:
    """A heading with the run's name, the thresholds' verdict (when judged), then the step table."""
    title = escape_cell(summary.get("label") or summary.get("run_id") or "run")
    lines = [f"## loadgen ramp: {title}", ""]
    lines += verdict_block(summary)
    steps = summary.get("steps") or []
    body = step_table(steps) if steps else "No requests were recorded in this run."
    return "\n".join(lines) + body.replace("## Steps", "### Steps", 1).rstrip("\n") + "\n\n"


def write_ci_outputs(
    summary: RunSummary, junit: str | os.PathLike[str] | None, env: Mapping[str, str] | None = None
) -> list[Path]:
    """Write ``junit`` (JUnit XML) when given and append the step summary to
    ``$GITHUB_STEP_SUMMARY`` when set (``env``: the environment, ``os.environ`` by default); the
    paths written. Raises OSError when either cannot be written."""
    env = os.environ if env is None else env
    written: list[Path] = []
    if junit:
        path = Path(junit)
        if path.parent != Path(""):
            path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(junit_xml(summary))
        written.append(path)
    target = env.get("GITHUB_STEP_SUMMARY")
    if target:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(step_summary_md(summary))
        written.append(Path(target))
    return written


__all__ = ["step_summary_md", "write_ci_outputs"]
