"""``python -m loadgen.telemetry run --run-dir DIR [source flags] [--stop-file PATH]``: the side process.

It never imports gevent or locust. Exit status 0 after a clean stop, 2 for a bad option.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from loadgen.telemetry.options import add_source_args
from loadgen.telemetry.runner import config_from_args, run

EPILOG = """\
loadgen ramp starts this process itself; to sample by hand, use loadgen monitor.

example:
  python -m loadgen.telemetry run --run-dir /tmp/run --gpu-source none \\
      --metrics-url http://127.0.0.1:30000/metrics --stop-file /tmp/run/stop"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m loadgen.telemetry", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "run",
        help="sample into a run directory until stopped",
        description="Sample the telemetry sources into a run directory until stopped.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--run-dir", required=True, type=Path, metavar="DIR", help="the run directory to append to (required)"
    )
    p.add_argument(
        "--stop-file", type=Path, default=None, metavar="FILE", help="stop when this file appears (default: none)"
    )
    p.add_argument(
        "--parent-pid",
        type=int,
        default=None,
        metavar="PID",
        help="stop when this parent process is gone (default: none)",
    )
    p.add_argument(
        "--nice",
        type=int,
        default=0,
        metavar="N",
        help="lower this process's priority by this much (the load generator's reads come first; default: 0)",
    )
    add_source_args(p.add_argument_group("Telemetry sources"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.nice > 0:
        try:
            os.nice(args.nice)
        except OSError as exc:
            print(f"loadgen telemetry: --nice {args.nice} not applied ({exc})", file=sys.stderr)
    parent_pid = args.parent_pid
    if parent_pid is not None and parent_pid != os.getppid():
        print(
            f"loadgen telemetry: --parent-pid {parent_pid} is not this process's parent; ignoring it",
            file=sys.stderr,
        )
        parent_pid = None
    cfg = replace(config_from_args(args, args.run_dir), stop_file=args.stop_file, parent_pid=parent_pid)
    return run(cfg)


if __name__ == "__main__":
    sys.exit(main())
