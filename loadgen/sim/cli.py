"""Command line of the simulator: ``python -m loadgen.sim`` (and ``loadgen sim``).

Every profile field has a flag: server fields and fixed-timing fields by their own name
(``--max-running-requests 256``, ``--nvls/--no-nvls``, ``--ttft-ms 20``), hardware, model and spec
fields with a prefix (``--hw-hbm-gb 141``, ``--model-layers 40``, ``--spec-tau 5``), and any field
as ``--set SECTION.FIELD=VALUE``. ``--hardware``, ``--model-config`` and ``--spec`` swap whole parts.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from typing import Any

from loadgen.sim.engines import ENGINES, with_engine
from loadgen.sim.profile import (
    SECTION_TYPES,
    ProfileError,
    apply_overrides,
    load_profile,
    load_profile_file,
    part_names,
    profile_description,
    profile_names,
)

DEFAULT_PROFILE = "b300x8-kimi-k2.6-ddtree"
PREFIX = {"server": "", "timing": "", "hardware": "hw-", "model": "model-", "spec": "spec-"}


def _flag(section: str, name: str) -> str:
    return "--" + PREFIX[section] + name.replace("_", "-")


DESCRIPTION = """\
A simulated OpenAI-compatible LLM server (SGLang-like; vLLM's metric names with
--metrics-style vllm) with a calibrated model of its steps, KV cache and GPU
power: something to point loadgen at without a GPU. It serves /v1/models,
/v1/chat/completions, /v1/completions and the other endpoints loadgen calls,
/metrics, and the GPUs' samples at /gpu/metrics (loadgen ramp --gpu-source
http://127.0.0.1:30000/gpu/metrics). A profile fixes the hardware, the model
and speculative decoding; every field of it has a flag (the groups at the end)."""
EPILOG = """\
examples:
  # the default profile on http://127.0.0.1:30000
  loadgen sim
  loadgen sim --list-profiles
  # one H200 serving Llama-3.1-8B, with room for 256 running requests
  loadgen sim --profile h200-llama-8b --port 30001 --max-running-requests 256
  # imitate vLLM's metrics and errors, under another model name
  loadgen sim --metrics-style vllm --served-model-name my-model
  # a server that crashes after a minute, on a free port written to a file
  loadgen sim --profile tiny --port 0 --port-file /tmp/sim.port \\
      --crash-after-s 60"""


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="loadgen sim",
        usage="%(prog)s [--profile NAME] [--port PORT] [options]",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    _add_serving(ap)
    _add_faults(ap)
    for section, cls in SECTION_TYPES.items():
        _add_profile_fields(ap, section, cls)
    return ap


def _add_serving(ap: argparse.ArgumentParser) -> None:
    """The "serving" group: address, profile and its parts, logs, engine style, seed, ``--set``."""
    g = ap.add_argument_group("serving")
    g.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    g.add_argument("--port", type=int, default=30000, help="port to bind; 0 picks a free one (default: 30000)")
    g.add_argument(
        "--port-file", metavar="PATH", help="write the bound port to this file once listening (default: none)"
    )
    g.add_argument(
        "--profile", default=DEFAULT_PROFILE, metavar="NAME", help=f"named profile (default: {DEFAULT_PROFILE})"
    )
    g.add_argument(
        "--profile-file",
        metavar="PATH",
        help="a profile TOML outside the package, same format as profiles/*.toml (a calibrated twin); "
        "replaces --profile (default: none)",
    )
    g.add_argument("--list-profiles", action="store_true", help="print the profiles and parts, then exit")
    g.add_argument(
        "--hardware", help="hardware part to use instead of the profile's, e.g. b200x8 (default: the profile's)"
    )
    g.add_argument(
        "--model-config",
        help="model part to use instead of the profile's: a models.toml entry (kimi-k2.6), the name of a "
        "config.json shipped in loadgen/sim/profiles/configs/ (qwen3-32b, deepseek-v3, gpt-oss-120b, ...) or "
        "the path of a Hugging Face config.json, read and never downloaded (default: the profile's)",
    )
    g.add_argument(
        "--spec",
        help="speculative-decoding part to use instead of the profile's: none, ddtree, ... (default: the profile's)",
    )
    g.add_argument("--served-model-name", help="model name reported by the API (default: the profile's)")
    g.add_argument(
        "--emission-log", metavar="PATH", help="append one JSON line per chunk sent to this file (default: none)"
    )
    g.add_argument(
        "--body-log",
        metavar="PATH",
        help="append one JSON line per request received to this file: its path, X-Request-Id and body (default: none)",
    )
    g.add_argument("--log-file", metavar="PATH", help="write the server log here (default: stderr)")
    g.add_argument(
        "--engine",
        choices=ENGINES,
        help="serve as this engine: its defaults for the settings not given (prefill budget, running requests, "
        "CUDA-graph batch sizes, memory share; sim/engines.py) and its metric names and log lines "
        "(default: the profile's own settings, SGLang's names)",
    )
    g.add_argument(
        "--metrics-style",
        choices=("sglang", "vllm"),
        default=None,
        help="metric names, log lines and error bodies to imitate (default: --engine's, else sglang)",
    )
    g.add_argument("--seed", type=int, default=0, help="random seed (lengths, acceptance, text; default: 0)")
    g.add_argument(
        "--tool-rounds",
        type=int,
        default=4,
        help="with tool_choice auto, answer with a tool call until the conversation holds this many tool "
        "results, then with text (default: 4)",
    )
    g.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="override any profile field (repeatable; default: none)",
    )


def _add_faults(ap: argparse.ArgumentParser) -> None:
    """The "faults" group: crashes, stalled or broken streams, reject windows, a late readiness."""
    fg = ap.add_argument_group("faults", "Failures to inject, for testing a load generator; none by default.")
    fg.add_argument(
        "--crash-after-s", type=float, default=0.0, help="exit(1) this many seconds after start (default: 0, never)"
    )
    fg.add_argument(
        "--crash-after-requests", type=int, default=0, help="exit(1) when request N+1 arrives (default: 0, never)"
    )
    fg.add_argument(
        "--stall-after-chunks",
        type=int,
        default=-1,
        help="stop sending a stream after K content chunks, the connection left open (default: -1, never)",
    )
    fg.add_argument(
        "--malformed-after-chunks",
        type=int,
        default=-1,
        help="send content chunk K+1 as truncated JSON, then carry on (default: -1, never)",
    )
    fg.add_argument(
        "--error-after-chunks",
        type=int,
        default=-1,
        help="after K content chunks send an error event inside the 200 stream and end it (default: -1, never)",
    )
    fg.add_argument(
        "--fault-rate",
        type=float,
        default=1.0,
        help="share of requests the stream faults apply to (default: 1.0)",
    )
    fg.add_argument(
        "--reject-status",
        type=int,
        default=0,
        choices=(0, 429, 503),
        help="answer requests with this status during reject windows (default: 0, none)",
    )
    fg.add_argument(
        "--reject-start-s", type=float, default=0.0, help="first reject window start, after ready (default: 0)"
    )
    fg.add_argument("--reject-duration-s", type=float, default=0.0, help="reject window length (default: 0)")
    fg.add_argument(
        "--reject-period-s",
        type=float,
        default=0.0,
        help="repeat reject windows with this period (default: 0, once)",
    )
    fg.add_argument(
        "--rate-limit",
        action="append",
        default=[],
        metavar="TENANT=RPS",
        help="answer a tenant's requests beyond RPS a second with 429 and Retry-After (the tenant: the value of "
        "--rate-limit-header); repeatable (default: none)",
    )
    fg.add_argument(
        "--rate-limit-header",
        default="x-tenant",
        metavar="NAME",
        help="the request header that names the tenant for --rate-limit (default: x-tenant)",
    )
    fg.add_argument(
        "--ready-delay-s",
        type=float,
        default=0.0,
        help="stay unready (/health 503) this long after start-up (default: 0)",
    )


def _add_profile_fields(ap: argparse.ArgumentParser, section: str, cls: type) -> None:
    """One group per profile table: a flag for each field of ``cls``, parsed into ``ovr__SECTION__FIELD``
    (None when not given; a bool field has ``--no-`` too)."""
    sg = ap.add_argument_group(
        f"{section} fields",
        f"The fields of the profile's [{section}] table (default: the profile's values).",
    )
    for f in fields(cls):
        if section in ("hardware", "model", "spec") and f.name == "name":
            continue
        if section == "server" and f.name == "engine":
            continue  # --engine above: an engine's defaults, not only its name
        flag = _flag(section, f.name)
        dest = f"ovr__{section}__{f.name}"
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "str")
        if kind == "bool":
            sg.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction, default=None)
        else:
            conv: Any = {"int": int, "float": float}.get(kind, str)
            sg.add_argument(flag, dest=dest, type=conv, default=None, metavar=kind.upper())


def list_profiles() -> str:
    lines = ["profiles:"]
    for name in profile_names():
        lines.append(f"  {name:28s} {profile_description(name)}")
    for part, flag in (("hardware", "--hardware"), ("model", "--model-config"), ("spec", "--spec")):
        lines.append(f"{part} parts ({flag}): {', '.join(part_names(part))}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list_profiles:
        try:
            print(list_profiles())
        except ProfileError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    overrides: dict[str, Any] = {}
    for key, value in vars(args).items():
        if key.startswith("ovr__") and value is not None:
            _, section, name = key.split("__", 2)
            overrides[f"{section}.{name}"] = value
    if args.served_model_name:
        overrides["model.served_name"] = args.served_model_name
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"error: --set {item!r}: expected SECTION.FIELD=VALUE", file=sys.stderr)
            return 2
        overrides[key.strip()] = value.strip()
    try:
        if args.profile_file:
            profile = load_profile_file(
                args.profile_file, hardware=args.hardware, model=args.model_config, spec=args.spec
            )
        else:
            profile = load_profile(args.profile, hardware=args.hardware, model=args.model_config, spec=args.spec)
        profile = apply_overrides(profile, overrides)
        if args.engine:
            profile = with_engine(profile, args.engine, keep=set(overrides))
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from loadgen.sim.ratelimit import RateLimits
    from loadgen.sim.server import Faults, ServerOptions, run_server

    faults = Faults(
        crash_after_s=args.crash_after_s,
        crash_after_requests=args.crash_after_requests,
        stall_after_chunks=args.stall_after_chunks,
        malformed_after_chunks=args.malformed_after_chunks,
        error_after_chunks=args.error_after_chunks,
        fault_rate=args.fault_rate,
        reject_status=args.reject_status,
        reject_start_s=args.reject_start_s,
        reject_duration_s=args.reject_duration_s,
        reject_period_s=args.reject_period_s,
        ready_delay_s=args.ready_delay_s,
    )
    limits: dict[str, float] = {}
    for item in args.rate_limit:
        name, _, value = item.partition("=")
        try:
            rps = float(value)
        except ValueError:
            rps = -1.0
        if not name or rps <= 0:
            print(f"error: --rate-limit {item!r}: write TENANT=RPS with RPS > 0, e.g. batch=5", file=sys.stderr)
            return 2
        limits[name] = rps
    options = ServerOptions(
        rate_limits=RateLimits(limits, args.rate_limit_header.lower()),
        host=args.host,
        port=args.port,
        port_file=args.port_file,
        emission_log=args.emission_log,
        body_log=args.body_log,
        log_file=args.log_file,
        metrics_style=args.metrics_style or args.engine or "sglang",
        seed=args.seed,
        tool_rounds=args.tool_rounds,
        faults=faults,
    )
    try:
        return run_server(profile, options)
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
