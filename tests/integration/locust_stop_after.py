"""A Locust plugin for the tests: ``--stop-after-requests N`` ends a headless run once N LLM calls
succeeded (and Locust's CSV counts them), the way ``-t`` ends it when its time is up
(``runner.quit()``: the test stops, the locustfile writes its report). A test then waits for work
done, not for seconds that Locust's start-up and a busy machine eat; its ``-t`` stays as a generous
cap. Not part of loadgen. Load it beside the locustfile:

    locust -f loadgen/locustfile.py,tests/integration/locust_stop_after.py --stop-after-requests 6 ...
"""

from __future__ import annotations

from typing import Any

import gevent
from locust import events
from locust.env import Environment
from locust.stats import CSV_STATS_INTERVAL_SEC


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    parser.add_argument(
        "--stop-after-requests",
        type=int,
        default=0,
        include_in_web_ui=False,
        help="quit once this many LLM calls succeeded (0: never)",
    )


@events.init.add_listener
def _on_init(environment: Environment, **_: Any) -> None:
    limit = int(getattr(environment.parsed_options, "stop_after_requests", 0) or 0)
    if limit <= 0:
        return
    done = 0

    def count(request_type: str, exception: BaseException | None = None, **_: Any) -> None:
        nonlocal done
        if request_type != "LLM" or exception is not None:
            return
        done += 1
        if done == limit and environment.runner is not None:
            # Locust's --csv is a snapshot written every CSV_STATS_INTERVAL_SEC, not at quit: quit
            # after its next snapshot (a timer due earlier than this one), which counts the N calls.
            # From a greenlet of its own: quitting kills the users, this call's among them.
            gevent.spawn_later(2 * CSV_STATS_INTERVAL_SEC, environment.runner.quit)

    environment.events.request.add_listener(count)
