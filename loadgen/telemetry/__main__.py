"""``python -m loadgen.telemetry run --run-dir DIR [source flags] [--stop-file PATH]``: the side process.

It never imports gevent or locust. Exit status 0 after a clean stop, 2 for a bad option.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from loadgen.telemetry.options import add_source_args
from loadgen.telemetry.runner import config_from_args, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadgen.telemetry", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="sample into a run directory until stopped")
    p.add_argument("--run-dir", required=True, type=Path, help="the run directory to append to")
    p.add_argument("--stop-file", type=Path, default=None, help="stop when this file appears")
    p.add_argument("--parent-pid", type=int, default=None, help="stop when this parent process is gone")
    p.add_argument(
        "--nice",
        type=int,
        default=0,
        help="lower this process's priority by this much (the load generator's reads come first)",
    )
    add_source_args(p)
    args = parser.parse_args(argv)
    if args.nice > 0:
        try:
            os.nice(args.nice)
        except OSError as exc:
            print(f"loadgen telemetry: --nice {args.nice} not applied ({exc})", file=sys.stderr)
    cfg = config_from_args(args, args.run_dir)
    cfg.stop_file = args.stop_file
    if args.parent_pid is not None and args.parent_pid != os.getppid():
        print(
            f"loadgen telemetry: --parent-pid {args.parent_pid} is not this process's parent; ignoring it",
            file=sys.stderr,
        )
    else:
        cfg.parent_pid = args.parent_pid
    return run(cfg)


if __name__ == "__main__":
    sys.exit(main())
