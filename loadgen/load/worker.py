"""``python -m loadgen.load.worker --master-host H --master-port P``: one load-generating worker process.

Started by ``loadgen ramp --workers N`` on the master's machine, or by hand on other machines
(then the worker needs the same scenario files at the same paths, and ``OPENAI_API_KEY`` in its
environment if the server wants one).
"""

from __future__ import annotations

import argparse
import sys

from locust.env import Environment

from loadgen.load.distributed import WorkerLink
from loadgen.load.runtime import quiet_gc
from loadgen.load.user import LLMUser, OpenLoopUser


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadgen.load.worker")
    parser.add_argument("--master-host", default="127.0.0.1")
    parser.add_argument("--master-port", type=int, default=5557)
    ns = parser.parse_args(argv)
    env = Environment(user_classes=[LLMUser, OpenLoopUser])
    runner = env.create_worker_runner(ns.master_host, ns.master_port)
    WorkerLink(env)
    quiet_gc()
    runner.greenlet.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
