"""``loadgen campaign FILE.toml [--out DIR] [--only NAME]... [--check]``: the command line.

Exit codes: 0 every selected variant was tried (a variant that failed is a result in the report,
not an error) or ``--check`` printed the plan; 5 every variant was tried and one of them breached
its ``fail_on`` / ``abort_on`` thresholds; 2 an unusable file, flag or ``--only`` name (the
message says which and where); 4 the campaign directory cannot be created; 130 interrupted by
Ctrl-C or SIGTERM, after writing a partial report. A SIGINT ignored when the campaign started (a
background job of a script) stays ignored, as Python and POSIX programs do; SIGTERM always stops
it. Progress goes to ``out`` (stderr); the report's Markdown, its path and the campaign directory
(last line, for scripts) go to stdout.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from typing import IO, Any

from loadgen.campaign.file import Campaign, CampaignError, load_campaign
from loadgen.campaign.report import build_report, render_markdown, write_report
from loadgen.campaign.runner import CampaignRunner
from loadgen.rundir.layout import create_run_dir, write_manifest
from loadgen.rundir.records import RunDirError

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_RUN_DIR = 4
EXIT_THRESHOLDS = 5
EXIT_INTERRUPTED = 130


DESCRIPTION = """\
Run the same ramp against several configurations of a server, one variant
after another (apply a change, start or restart the server, wait until it is
ready, ramp, roll back), and compare them in one report: the campaign
directory under --out holds each variant's run directory and campaign.md.
A campaign file (TOML) says the variants, their commands and the [load];
docs/lifecycle.md and scenarios/campaign-*.toml show how.

exit status: 0 every selected variant was tried (a variant that failed is a
result, not an error) or --check printed the plan; 5 a variant breached its
fail_on/abort_on thresholds; 2 an unusable file, flag or --only name; 4 the
campaign directory cannot be created; 130 interrupted (a partial report)."""
EPILOG = """\
examples:
  # validate the file and print the plan; run nothing
  loadgen campaign scenarios/campaign-max-running-requests.toml --check
  # the whole campaign against the built-in simulator, about a minute
  loadgen campaign scenarios/campaign-max-running-requests.toml
  # one variant only, written under /tmp
  loadgen campaign scenarios/campaign-max-running-requests.toml \\
      --only mrr-128 --out /tmp/campaigns"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="loadgen campaign",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "file", metavar="FILE", help="campaign file (TOML), e.g. scenarios/campaign-max-running-requests.toml"
    )
    p.add_argument(
        "--out", default="reports", metavar="DIR", help="folder for the campaign directory (default: reports)"
    )
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="run only this variant (repeatable; default: every variant)",
    )
    p.add_argument("--check", action="store_true", help="validate the file and print the plan; run nothing")
    return p


def _plan_text(c: Campaign) -> str:
    lines = [f"campaign {c.name}: {len(c.variants)} variant(s)"]
    for v in c.variants:
        lines.append(f"- {v.name}: {v.description}".rstrip(": "))
        for cmd in v.apply:
            lines.append(f"    apply:    {shlex.join(cmd)}")
        if v.start:
            lines.append(f"    start:    {shlex.join(v.start)}")
        lines.append(
            f"    ready:    {v.url} within {v.wait_ready_s:g} s"
            + (f", status {shlex.join(v.status)}" if v.status else "")
        )
        load = v.load
        what = (
            f"concurrency {load.concurrency}" if load.concurrency else f"rate {load.rate}" if load.rate else "scenario"
        )
        lines.append(f"    {load.mode}:     {what}, {load.step_seconds or 'default'} s steps")
        for cmd in v.rollback:
            lines.append(f"    rollback: {shlex.join(cmd)}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, out: IO[str] | None = None) -> int:
    stream = out if out is not None else sys.stderr
    ns = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        campaign = load_campaign(ns.file)
    except CampaignError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    unknown = [n for n in ns.only if n not in {v.name for v in campaign.variants}]
    if unknown:
        names = ", ".join(v.name for v in campaign.variants)
        print(f"error: --only {unknown[0]!r}: no such variant in {ns.file}; variants: {names}", file=sys.stderr)
        return EXIT_USAGE
    if ns.check:
        print(_plan_text(campaign))
        return EXIT_OK
    try:
        campaign_dir = create_run_dir(ns.out, f"campaign-{campaign.name}")
    except RunDirError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_RUN_DIR
    write_manifest(campaign_dir, {"kind": "campaign", "name": campaign.name, "file": campaign.path})
    runner = CampaignRunner(campaign, campaign_dir, stream)
    interrupted = False
    previous: Callable[..., Any] | int | None = signal.getsignal(signal.SIGTERM)

    def on_term(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        runner.run(ns.only)
    except KeyboardInterrupt:
        interrupted = True
        stream.write("interrupted: writing a partial campaign report\n")
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
    report = build_report(campaign, campaign_dir, runner.results, interrupted)
    write_report(campaign_dir, report)
    print(render_markdown(report))
    print(f"report: {campaign_dir / 'campaign.md'}")
    print(campaign_dir)
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_THRESHOLDS if any(r.get("status") == "thresholds_breached" for r in runner.results) else EXIT_OK
