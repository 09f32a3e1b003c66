"""``loadgen workload export | show | import``: workload files (docs/workload-files.md).

``export`` takes the ramp's own options (a scenario, ``--tenant``, ``--concurrency`` or ``--rate``,
the step times...) and writes every request that ramp would send; with ``--workload FILE`` it
writes an existing file again (``--redact`` to strip its text). ``import`` turns a public trace
(Azure, Mooncake, BurstGPT) or ShareGPT-style conversations into one. ``show`` prints what a
reviewer needs of a file, and writes it as an HTML page with ``--html``. Exit 2, with one line
naming the file, line or flag, when the input cannot be used.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from loadgen.cli.codes import EXIT_OK, EXIT_USAGE, UsageError
from loadgen.spec import flags
from loadgen.spec.options import OptionError
from loadgen.workload.errors import WorkloadError

HELP = argparse.RawDescriptionHelpFormatter

IMPORT_FORMATS = ("auto", "azure", "burstgpt", "mooncake", "sharegpt")

DESCRIPTION = """\
Workload files: every request of a run as JSON lines (docs/workload-files.md).
export writes what a ramp with the given options would send (bodies, users and
their order or intended times, tenants, conversation links); show prints a
file's statistics (and an HTML page); import converts a public trace (Azure,
BurstGPT, Mooncake) or ShareGPT conversations. loadgen ramp --workload FILE
replays one exactly. Exit status 2 when the input cannot be used."""

EPILOG = """\
examples:
  loadgen workload export --scenario scenarios/chat.toml --concurrency 8,32 \\
      -o chat.jsonl
  loadgen workload export --workload chat.jsonl --redact -o chat-redacted.jsonl
  loadgen workload show chat.jsonl --html chat.html
  loadgen workload import azure-llm-2023-conv.csv --time-scale 0.5 -o azure.jsonl"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loadgen workload", description=DESCRIPTION, epilog=EPILOG, formatter_class=HELP
    )
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser(
        "export",
        help="every request a ramp would send, as a workload file",
        description="Write every request the ramp these options describe would send (bodies, users and "
        "their order, or intended times; tenants; conversation links), one JSON line each.",
        formatter_class=HELP,
    )
    flags.add_arguments(p, "ramp", skip=("url",))
    p.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="the workload file to write (JSON lines; required)"
    )
    p.add_argument(
        "--redact",
        action="store_true",
        help="keep lengths and prefix hashes only, no text (a replay writes corpus text of the same lengths)",
    )
    p.add_argument(
        "--requests-per-user",
        type=int,
        metavar="N",
        help="closed loop: requests in each user's stream (default: two a second of the step's time)",
    )
    p = sub.add_parser("show", help="what a workload file holds: lengths, arrivals, prefix sharing, turns")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--html", metavar="OUT", help="also write the statistics as an HTML page here (default: none)")
    p = sub.add_parser(
        "import",
        help="a public trace or ShareGPT conversations as a workload file",
        description="Convert a trace (Azure 2023/2024 CSV, BurstGPT CSV, Mooncake JSONL: open loop at the "
        "trace's times) or ShareGPT-style conversations (closed loop) into a workload file.",
        formatter_class=HELP,
    )
    p.add_argument("trace", metavar="TRACE")
    p.add_argument("--format", choices=IMPORT_FORMATS, default="auto", help="the trace's format (default: auto)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the workload file to write (required)")
    p.add_argument("--time-scale", type=float, default=1.0, help="trace times are multiplied by this (default: 1)")
    p.add_argument(
        "--seconds", type=float, help="the step's length: the trace's first seconds (default: the whole trace)"
    )
    p.add_argument("--concurrency", type=int, default=8, help="ShareGPT: users (default: 8)")
    p.add_argument(
        "--requests-per-user", type=int, default=32, metavar="N", help="ShareGPT: each user's stream (default: 32)"
    )
    p.add_argument("--seed", type=int, default=0, help="the draws of text and lengths (default: 0)")
    p.add_argument("--redact", action="store_true", help="keep lengths and prefix hashes only")
    return parser


def main(argv: list[str]) -> int:
    ns = build_parser().parse_args(argv)
    try:
        if ns.action == "export":
            return _export(ns, argv)
        if ns.action == "import":
            return _import(ns)
        return _show(ns)
    except (OptionError, WorkloadError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # ``show`` into ``head``: the reader had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _export(ns: argparse.Namespace, argv: list[str]) -> int:
    from loadgen.cli.ramp_options import ramp_options

    if ns.requests_per_user is not None and ns.requests_per_user < 1:
        raise UsageError(f"--requests-per-user {ns.requests_per_user}: 1 or more")
    if ns.workload:
        from loadgen.cli.ramp_options import _check_workload

        _check_workload(ns)  # a file's requests and steps are its own: the flags that would change them
        if ns.requests_per_user is not None:
            raise UsageError(
                f"--workload {ns.workload} and --requests-per-user: the file's streams are as long as they are"
            )
        return _reexport(ns)
    ns.url = ""
    ns.no_telemetry = True
    opts = ramp_options(ns, argv)
    from loadgen.run.export import export_run

    t0 = time.perf_counter()
    n, steps = export_run(opts, Path(ns.output), per_user=ns.requests_per_user, redact=ns.redact)
    return _wrote(Path(ns.output), n, steps, time.perf_counter() - t0)


def _reexport(ns: argparse.Namespace) -> int:
    """An existing workload file written again, line by line (``--redact``: without its text)."""
    from loadgen.workload.wfile import header_line, open_workload, read_lines, redact_body, request_line

    t0 = time.perf_counter()
    wf = open_workload(ns.workload, hashing=False)
    header = wf.header
    redact = ns.redact and not header.redacted
    if redact:
        header.redacted = True
    out = Path(ns.output)
    tmp = out.with_name(out.name + ".part")
    import orjson

    n = 0
    with open(tmp, "wb", buffering=1 << 20) as f:
        f.write(header_line(header))
        for key in wf.streams:
            s = wf.streams[key]
            for raw in read_lines(wf.path, s.offset, s.count):
                line = orjson.loads(raw)
                if redact:
                    line["body"] = redact_body(line["body"])
                    if line.get("headers"):
                        line["headers"] = dict.fromkeys(line["headers"], "<redacted>")
                f.write(request_line(line))
                n += 1
    tmp.replace(out)
    return _wrote(out, n, len(header.steps), time.perf_counter() - t0)


def _wrote(path: Path, n: int, steps: int, seconds: float) -> int:
    from loadgen.workload.wfile import file_sha256

    size = path.stat().st_size
    print(
        f"{n:,} requests in {steps} step{'s' if steps != 1 else ''}, {size / 1e6:.1f} MB, sha256 "
        f"{file_sha256(path)[:16]}, in {seconds:.1f} s",
        file=sys.stderr,
    )
    print(path)
    return EXIT_OK


def _import(ns: argparse.Namespace) -> int:
    """A trace or ShareGPT file as a scenario of its own (written to a temporary file, read by the
    scenario loader as any scenario is), then exported."""
    from loadgen.workload.datasets import _detect_trace_format

    src = Path(ns.trace)
    if not src.exists():
        raise UsageError(f"{src}: no such file")
    if ns.time_scale <= 0:
        raise UsageError(f"--time-scale {ns.time_scale}: must be > 0")
    fmt = ns.format
    if fmt == "auto":
        fmt = "sharegpt" if src.suffix == ".json" else _detect_trace_format(src)
    path = str(src.resolve()).replace("\\", "\\\\").replace('"', '\\"')
    if fmt == "sharegpt":
        toml = (
            f'name = "import-sharegpt"\nseed = {ns.seed}\n[prompt]\nsource = "sharegpt"\npath = "{path}"\n'
            "[conversation]\nturns = 1000\n"
            f'[load]\nmode = "closed"\nconcurrency = [{ns.concurrency}]\nstep_seconds = 60\nwarmup_seconds = 0\n'
        )
    else:
        seconds = f"step_seconds = {ns.seconds}\n" if ns.seconds else ""
        toml = (
            f'name = "import-{fmt}"\nseed = {ns.seed}\n[prompt]\nsource = "trace"\n'
            f'[trace]\npath = "{path}"\nformat = "{fmt}"\n'
            f'[load]\nmode = "open"\narrival = "trace"\ntime_scales = [{ns.time_scale}]\n{seconds}warmup_seconds = 0\n'
        )
    from loadgen.workload.export import ExportOptions, export_workload
    from loadgen.workload.scenario import load_scenario
    from loadgen.workload.traffic import Workload

    with tempfile.TemporaryDirectory() as tmp:
        scenario_path = Path(tmp) / f"import-{fmt}.toml"
        scenario_path.write_text(toml)
        scenario = load_scenario(scenario_path)
    from dataclasses import replace

    scenario = replace(scenario, path=None)
    base = Workload(scenario)
    plan = _import_plan(base, ns)
    out = Path(ns.output)
    part = out.with_name(out.name + ".part")
    t0 = time.perf_counter()
    with open(part, "wb", buffering=1 << 20) as f:
        n = export_workload(
            f,
            base,
            plan,
            lambda _p: base,
            {},
            ExportOptions(per_user=ns.requests_per_user, redact=ns.redact, source=f"import:{fmt} {src.name}"),
        )
    part.replace(out)
    return _wrote(out, n, len(plan), time.perf_counter() - t0)


def _import_plan(base: Any, ns: argparse.Namespace) -> list[Any]:
    from loadgen.spec.options import StepPlan

    load = base.scenario.load
    if load.mode == "closed":
        return [StepPlan(concurrency=ns.concurrency, warmup_s=0.0, duration_s=60.0)]
    (target,) = base.step_targets()
    span = target.trace.duration_s * ns.time_scale
    duration = min(ns.seconds, span) if ns.seconds else span + 1e-3  # the last request is in the step
    rate = len(target.trace.rows) / max(target.trace.duration_s, 1e-9) / ns.time_scale
    return [StepPlan(concurrency=1, warmup_s=0.0, duration_s=duration, rate=None, replay=target)] if rate else []


def _show(ns: argparse.Namespace) -> int:
    from loadgen.workload.wfile import open_workload
    from loadgen.workload.wshow import render_html, render_text, summarise

    wf = open_workload(ns.file)
    stats = summarise(wf)
    print(render_text(stats))
    if ns.html:
        Path(ns.html).write_text(render_html(stats))
        print(ns.html)
    return EXIT_OK
