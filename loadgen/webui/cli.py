"""``loadgen ui``: Locust's web UI with our locustfile, the ramp's flags turned into form defaults.

``loadgen ui --url URL [--scenario FILE] [--concurrency 1,8,32] ...`` runs
``python -m locust -f <loadgen/locustfile.py> --host URL --lg-steps 1,8,32 ...``: every value given
here becomes the default of the matching field in the web UI's form (still editable there). Flags
this command does not know (``--master``, ``--expect-workers 4``, ``--web-port 8090``, ...) go to
Locust unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from loadgen.options import OptionError, parse_extra_body, parse_int_list

LOCUSTFILE = Path(__file__).resolve().parents[1] / "locustfile.py"


def _parser() -> argparse.ArgumentParser:
    from loadgen.telemetry.options import add_source_args

    p = argparse.ArgumentParser(
        prog="loadgen ui",
        description="Locust's web UI with the LLM tab; flags become the form's defaults. "
        "Unknown flags (e.g. --master, --web-port 8090) are passed to Locust.",
    )
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:30000")
    p.add_argument("--scenario", help="a scenario file (TOML); its [load] concurrency becomes the ramp steps")
    p.add_argument("--concurrency", help="ramp steps: users per step, e.g. 1,8,32 (none: Locust's user count)")
    p.add_argument("--step-seconds", type=float, help="steady window per step (default 30)")
    p.add_argument("--warmup-seconds", type=float, help="warm-up before each step's window (default 5)")
    p.add_argument("--max-tokens", type=int, help="max_tokens per request (default 512)")
    p.add_argument("--context-tokens", help="prompt lengths in tokens, as loadgen ramp's: e.g. 60,4000,16000")
    p.add_argument("--slo", help="latency limits for the knee verdict, e.g. ttft_p99=2s,tpot_p99=50ms")
    p.add_argument("--model", help="model name (default: the first one /v1/models lists)")
    p.add_argument("--endpoint", choices=["chat", "completions"])
    p.add_argument("--transport", choices=["fast", "openai"])
    p.add_argument(
        "--extra-body",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra body field, as loadgen ramp's: value parsed as JSON when it parses; repeatable; "
        "or a whole JSON object",
    )
    p.add_argument("--label", help="run label")
    p.add_argument("--out", help="folder for run directories (default reports)")
    p.add_argument("--stall-timeout", type=float)
    p.add_argument("--request-timeout", type=float)
    p.add_argument("--no-telemetry", action="store_true", help="start no telemetry side process")
    add_source_args(p)
    return p


# (our flag's dest, the locustfile's option)
_PLAIN = [
    ("step_seconds", "--lg-step-seconds"),
    ("warmup_seconds", "--lg-warmup-seconds"),
    ("max_tokens", "--lg-max-tokens"),
    ("slo", "--lg-slo"),
    ("model", "--lg-model"),
    ("endpoint", "--lg-endpoint"),
    ("transport", "--lg-transport"),
    ("label", "--lg-label"),
    ("out", "--lg-out"),
    ("stall_timeout", "--lg-stall-timeout"),
    ("request_timeout", "--lg-request-timeout"),
]


class UsageError(OptionError):
    """A flag this command cannot turn into Locust's; the message says which and why."""


def locust_argv(argv: list[str]) -> list[str]:
    """The arguments for ``python -m locust`` that ``loadgen ui ARGV`` runs."""
    ns, rest = _parser().parse_known_args(argv)
    out = ["-f", str(LOCUSTFILE), "--host", ns.url]
    steps = ns.concurrency
    if ns.scenario:
        from loadgen.workload.scenario import ScenarioError, load_scenario

        try:
            scenario = load_scenario(ns.scenario)
        except ScenarioError as exc:
            raise UsageError(str(exc)) from None
        out += ["--lg-scenario", ns.scenario]
        load = scenario.load
        if steps is None and load.mode != "open" and load.concurrency:
            steps = ",".join(str(int(c)) for c in load.concurrency)
        if ns.step_seconds is None and load.step_seconds:
            ns.step_seconds = load.step_seconds
        if ns.warmup_seconds is None and load.warmup_seconds is not None:
            ns.warmup_seconds = load.warmup_seconds
    if steps:
        out += ["--lg-steps", steps.replace(" ", "")]
    try:  # the same parsers as loadgen ramp's, so both commands take the same values
        if ns.context_tokens:
            contexts = parse_int_list("--context-tokens", ns.context_tokens)
            if len(contexts) > 1 and not steps:
                raise UsageError(
                    f"--context-tokens {ns.context_tokens!r}: several context lengths make a matrix of ramp steps: "
                    "give --concurrency too (or one length)"
                )
            out += ["--lg-context-tokens", ",".join(map(str, contexts))]
        extra = parse_extra_body(ns.extra_body)
    except OptionError as exc:
        raise UsageError(str(exc)) from None
    if extra:
        out += ["--lg-extra-body", json.dumps(extra)]
    for dest, flag in _PLAIN:
        value = getattr(ns, dest)
        if value is not None:
            out += [flag, str(value)]
    if ns.no_telemetry:
        out.append("--no-telemetry")
    out += ["--gpu-source", ns.gpu_source, "--gpu-hz", repr(ns.gpu_hz), "--metrics-hz", repr(ns.metrics_hz)]
    if ns.gpus is not None:
        out += ["--gpus", ",".join(str(g) for g in ns.gpus)]
    for flag, value in (
        ("--metrics-url", ns.metrics_url),
        ("--server-logs", ns.server_logs),
        ("--server-log-file", ns.server_log_file),
        ("--monitor-url", ns.monitor_url),
    ):
        if value:
            out += [flag, value]
    for fld, metric in ns.metrics_map:
        out += ["--metrics-map", f"{fld}={metric}"]
    if ns.log_from_start:
        out.append("--log-from-start")
    if ns.monitor_url:
        out += ["--monitor-hz", repr(ns.monitor_hz)]
    return out + rest


def main(argv: list[str]) -> int:
    """Replace this process with Locust (returns only on a usage error)."""
    try:
        args = locust_argv(argv)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    cmd = [sys.executable, "-m", "locust", *args]
    os.execv(sys.executable, cmd)
    return 0  # not reached: execv does not return


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
