"""Wiring for ``locust -f loadgen/locustfile.py --host URL`` (web UI or --headless).

The same ``LLMUser`` as ``loadgen ramp``; Locust's own user count and spawn rate drive the load.
Each test start (each "Start" in the web UI) is one step of the run directory; the report is
written when the test stops. Options (all optional): --lg-model, --lg-max-tokens,
--lg-context-tokens, --lg-endpoint, --lg-transport, --lg-extra-body, --lg-label, --lg-out,
--lg-stall-timeout, --lg-request-timeout; the API key comes from $OPENAI_API_KEY.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from locust import events
from locust.env import Environment

from loadgen.client import Timeouts
from loadgen.clock import ANCHOR
from loadgen.ramp import DEFAULT_CONTEXT_TOKENS
from loadgen.rundir import create_run_dir, write_manifest
from loadgen.runtime import RunState, TargetOptions
from loadgen.shape import StepPlan
from loadgen.user import LLMUser

__all__ = ["LLMUser"]


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    group = parser.add_argument_group("llm-loadgen")
    group.add_argument("--lg-model", default="", help="model name (default: first of /v1/models)")
    group.add_argument("--lg-max-tokens", type=int, default=512, help="max_tokens per request")
    group.add_argument("--lg-context-tokens", type=int, default=0, help="prompt length in tokens (0: short chat)")
    group.add_argument("--lg-endpoint", choices=["chat", "completions"], default="chat")
    group.add_argument("--lg-transport", choices=["fast", "openai"], default="fast")
    group.add_argument("--lg-extra-body", default="", help="JSON object merged into each request body")
    group.add_argument("--lg-label", default="", help="run label")
    group.add_argument("--lg-out", default="reports", help="folder for run directories")
    group.add_argument("--lg-stall-timeout", type=float, default=60.0)
    group.add_argument("--lg-request-timeout", type=float, default=600.0)


class _UIRun:
    """One run directory per Locust process; a step per test start."""

    def __init__(self, env: Environment) -> None:
        import orjson

        from loadgen.lifecycle import first_model
        from loadgen.workload import Workload

        opts = env.parsed_options
        host = env.host or ""
        model = getattr(opts, "lg_model", "") or first_model(host) or "default"
        extra = orjson.loads(opts.lg_extra_body) if getattr(opts, "lg_extra_body", "") else {}
        self.run_dir = create_run_dir(opts.lg_out, opts.lg_label or "locust")
        write_manifest(
            self.run_dir,
            {
                "kind": "locust",
                "label": opts.lg_label or None,
                "run_id": self.run_dir.name,
                "argv": sys.argv[1:],
                "url": host,
                "model": model,
            },
        )
        ctx = opts.lg_context_tokens or None
        workload = Workload.simple(
            context_tokens=ctx or DEFAULT_CONTEXT_TOKENS,
            max_tokens=opts.lg_max_tokens,
            endpoint=opts.lg_endpoint,
            extra=extra,
            seed=0,
        )
        target = TargetOptions(
            url=host,
            model=model,
            api_key=os.environ.get("OPENAI_API_KEY") or None,
            transport=opts.lg_transport,
            timeouts=Timeouts(stall_s=opts.lg_stall_timeout, request_s=opts.lg_request_timeout),
        )
        self.ctx = ctx
        self.state = RunState(self.run_dir, target, lambda plan: workload)
        self.state.fire_request = env.events.request.fire
        self.state.log_metric = lambda kind, name, ms: env.stats.log_request(kind, name, ms, 0)
        self.env = env
        self.step = -1

    def start(self) -> None:
        self.step += 1
        users = getattr(self.env.parsed_options, "num_users", None) or 0
        now = ANCHOR.now_wall_ns()
        self.state.step_started(self.step, StepPlan(users, self.ctx, 0.0, None, None), now)
        self.state.step_steady(self.step, now)

    def stop(self) -> None:
        if self.step < 0:
            return
        self.state.step_ended(self.step, ANCHOR.now_wall_ns(), "stopped")
        from loadgen.report import write_outputs

        write_outputs(self.run_dir)
        print(f"report: {Path(self.run_dir) / 'report.md'}", file=sys.stderr)


_run: _UIRun | None = None


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_: Any) -> None:
    global _run
    from locust.runners import MasterRunner

    if isinstance(environment.runner, MasterRunner):
        return
    if _run is None:
        _run = _UIRun(environment)
        environment.loadgen = _run.state  # type: ignore[attr-defined]
    _run.start()


@events.test_stop.add_listener
def _on_test_stop(environment: Environment, **_: Any) -> None:
    if _run is not None:
        _run.stop()
