"""``loadgen worker --master HOST[:PORT]`` (``python -m loadgen.run.worker``): one load-generating
worker process.

Started by ``loadgen ramp --workers N`` on the master's machine (``--direct``: it writes the run
directory itself), or on other machines against ``loadgen ramp --master``: it takes everything from
the master (options, steps, seed); a scenario must be the same file at the same path (checked), and
``OPENAI_API_KEY`` comes from its own environment if the server wants one.

Exit status: 0 when the master ended the run, 2 refused (another loadgen version, another scenario
file), 3 the master went silent (its users were stopped at once; records the master did not take
are in ``--spill-dir``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from loadgen.spec.options import OptionError, parse_host_port

DESCRIPTION = """\
A load-generating worker of a loadgen ramp --master on another machine
(docs/web-ui-and-distributed.md). It takes everything from the master: the
options, the steps, the seed; a scenario must be the same file at the same path
(checked by its sha256), and an API key comes from this machine's
$OPENAI_API_KEY. Its records go to the master in acknowledged batches. If the
master goes silent for 5 s while users run, it sends no new request; if the
master answers again, it sends from the master's next step on (never in the
middle of one); if not, after --master-timeout it ends the calls in flight,
writes what the master did not take to --spill-dir and exits 3. Refused
(another loadgen version or scenario file), it says why and exits 2."""
EPILOG = """\
examples:
  # the master (here on this machine, listening on loopback for the example):
  # its first step starts once two workers joined
  loadgen ramp --url http://127.0.0.1:30000 --concurrency 8,32 --master \\
      --master-bind 127.0.0.1:5557 --expect-workers 2
  # each worker (on the load machines: --master MASTER_HOST:5557)
  loadgen worker --master 127.0.0.1:5557
  # records the master could not take kept under /var/tmp
  loadgen worker --master 127.0.0.1 --spill-dir /var/tmp"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loadgen worker",
        usage="%(prog)s --master HOST[:PORT] [options]",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--master",
        required=True,
        metavar="HOST[:PORT]",
        help="the loadgen ramp --master to take the run from (required; the port defaults to 5557)",
    )
    parser.add_argument(
        "--spill-dir",
        type=Path,
        default=Path("."),
        metavar="DIR",
        help="where records the master could not take are written (default: the current folder)",
    )
    parser.add_argument(
        "--master-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long a worker whose master went silent waits for it to come back before it exits 3 (it sends "
        "nothing new after 5 s of silence whatever this is; default: 60, Locust's)",
    )
    parser.add_argument("--direct", action="store_true", help=argparse.SUPPRESS)  # the master's own machine
    return parser


def run_worker(ns: argparse.Namespace) -> int:
    import locust.runners
    from locust.env import Environment

    from loadgen.load.distributed import WorkerLink
    from loadgen.load.runtime import quiet_gc
    from loadgen.load.user import LLMUser, OpenLoopUser

    host, port = parse_host_port(ns.master, "--master")
    locust.runners.MASTER_HEARTBEAT_TIMEOUT = max(ns.master_timeout, 6.0)  # its checker quits the worker
    env = Environment(user_classes=[LLMUser, OpenLoopUser])
    # a wrong address is otherwise silence: say where this worker waits (the master lists who joined)
    print(f"worker: taking the run from the master at {host}:{port} (waiting until it answers)", file=sys.stderr)
    runner = env.create_worker_runner(host, port)
    link = WorkerLink(env, direct=ns.direct, spill_dir=ns.spill_dir)
    quiet_gc()
    runner.greenlet.join()
    link.spill_left()  # what the master never took, on this machine's disk
    return link.exit_code


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        return run_worker(ns)
    except OptionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("worker: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
