"""The side process's options: one dataclass for callers, the same flags on the command line."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field

from loadgen.rundir.samples import SERVER_FIELDS

TOKEN_ENV = "LOADGEN_MONITOR_TOKEN"


@dataclass(frozen=True)
class TelemetryOptions:
    """What to sample. ``gpu_source``: "nvml", "none", a command printing nvidia-smi CSV (split with
    shlex, run without a shell) or a DCGM exporter URL. ``server_logs`` is a command (same rules);
    ``server_log_file`` a file to follow. ``monitor_token`` travels to the child in the environment
    (``LOADGEN_MONITOR_TOKEN``), never on its command line. Frozen: a front end that learns a source
    later (the server's /metrics it probed, the demo's simulator) makes a new one with ``replace``."""

    gpu_source: str = "nvml"
    gpu_hz: float = 10.0
    gpus: list[int] | None = None
    metrics_url: str | None = None
    metrics_hz: float = 1.0
    metrics_map: dict[str, str] = field(default_factory=dict)
    server_logs: str | None = None
    server_log_file: str | None = None
    log_from_start: bool = False
    monitor_url: str | None = None
    monitor_token: str | None = None
    monitor_hz: float = 2.0

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> TelemetryOptions:
        """From the flags ``add_source_args`` added; the monitor token comes from the environment."""
        return cls(
            gpu_source=args.gpu_source,
            gpu_hz=args.gpu_hz,
            gpus=args.gpus,
            metrics_url=args.metrics_url,
            metrics_hz=args.metrics_hz,
            metrics_map=dict(args.metrics_map),
            server_logs=args.server_logs,
            server_log_file=args.server_log_file,
            log_from_start=args.log_from_start,
            monitor_url=args.monitor_url,
            monitor_token=os.environ.get(TOKEN_ENV) or None,
            monitor_hz=args.monitor_hz,
        )

    def to_argv(self) -> list[str]:
        argv = ["--gpu-source", self.gpu_source, "--gpu-hz", repr(self.gpu_hz), "--metrics-hz", repr(self.metrics_hz)]
        if self.gpus is not None:
            argv += ["--gpus", ",".join(str(g) for g in self.gpus)]
        if self.metrics_url:
            argv += ["--metrics-url", self.metrics_url]
        for fld, metric in self.metrics_map.items():
            argv += ["--metrics-map", f"{fld}={metric}"]
        if self.server_logs:
            argv += ["--server-logs", self.server_logs]
        if self.server_log_file:
            argv += ["--server-log-file", self.server_log_file]
        if self.log_from_start:
            argv.append("--log-from-start")
        if self.monitor_url:
            argv += ["--monitor-url", self.monitor_url, "--monitor-hz", repr(self.monitor_hz)]
        return argv


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return v


def _gpus(text: str) -> list[int]:
    try:
        return [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--gpus {text!r}: expected comma-separated GPU indices, e.g. 0,1") from None


def _mapping(text: str) -> tuple[str, str]:
    fld, sep, metric = text.partition("=")
    if not sep or not fld.strip() or not metric.strip():
        raise argparse.ArgumentTypeError(f"--metrics-map {text!r}: expected FIELD=METRIC, e.g. running=my_running_reqs")
    if fld.strip() not in SERVER_FIELDS:
        raise argparse.ArgumentTypeError(
            f"--metrics-map {text!r}: {fld.strip()!r} is not a server field; FIELD is one of {', '.join(SERVER_FIELDS)}"
        )
    return fld.strip(), metric.strip()


def add_source_args(p: argparse._ActionsContainer) -> None:
    """The telemetry source flags, on a parser or one of its groups."""
    p.add_argument(
        "--gpu-source",
        default="nvml",
        metavar="SOURCE",
        help='where GPU samples come from: nvml (this machine\'s NVIDIA GPUs), none, "CMD ..." printing '
        "nvidia-smi CSV, or a DCGM exporter's http://host:9400/metrics (default: nvml)",
    )
    p.add_argument("--gpu-hz", type=_positive, default=10.0, metavar="HZ", help="GPU samples per second (default: 10)")
    p.add_argument(
        "--gpus",
        type=_gpus,
        default=None,
        metavar="LIST",
        help="GPU indices to read, e.g. 0,1 (default: every GPU the source sees)",
    )
    p.add_argument(
        "--metrics-url",
        default=None,
        metavar="URL",
        help="the server's Prometheus /metrics URL (default: loadgen ramp and ui use the server's own /metrics "
        "when it answers; loadgen monitor none)",
    )
    p.add_argument(
        "--metrics-hz", type=_positive, default=1.0, metavar="HZ", help="server scrapes per second (default: 1)"
    )
    p.add_argument(
        "--metrics-map",
        type=_mapping,
        action="append",
        default=[],
        metavar="FIELD=METRIC",
        help="a field's metric name, for servers other than SGLang/vLLM "
        "(repeatable; default: SGLang's and vLLM's names)",
    )
    p.add_argument(
        "--server-logs",
        default=None,
        metavar="COMMAND",
        help='a command printing the server log, e.g. "journalctl -u X -f -o cat" (default: none)',
    )
    p.add_argument(
        "--server-log-file", default=None, metavar="FILE", help="a server log file to follow (default: none)"
    )
    p.add_argument("--log-from-start", action="store_true", help="read the log file from its start, not its end")
    p.add_argument(
        "--monitor-url",
        default=None,
        metavar="URL",
        help="pull samples from a remote `loadgen monitor --serve` (default: none)",
    )
    p.add_argument(
        "--monitor-hz", type=_positive, default=2.0, metavar="HZ", help="remote pulls per second (default: 2)"
    )


def source_argv(ns: argparse.Namespace) -> list[str]:
    """The telemetry flags of ``ns`` that differ from their defaults, written back as
    ``add_source_args`` reads them (``loadgen ui`` hands them on to Locust this way)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_source_args(parser)
    out: list[str] = []
    for action in parser._actions:
        flag, value = action.option_strings[0], getattr(ns, action.dest, action.default)
        if value == action.default or value is None:
            continue
        if isinstance(action, argparse._StoreTrueAction):
            out.append(flag)
        elif isinstance(action, argparse._AppendAction):
            for fld, metric in value:
                out += [flag, f"{fld}={metric}"]
        elif isinstance(value, list):
            out += [flag, ",".join(str(v) for v in value)]
        else:
            out += [flag, repr(value) if isinstance(value, float) else str(value)]
    return out
