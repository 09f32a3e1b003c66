"""``loadgen ui``: Locust's web UI with our locustfile, the ramp's flags turned into form defaults.

``loadgen ui --url URL [--scenario FILE] [--concurrency 1,8,32] ...`` runs
``python -m locust -f <loadgen/locustfile.py> --host URL --lg-steps 1,8,32 ...``: every value given
here becomes the default of the matching field in the web UI's form (still editable there). Flags
this command does not know (``--master``, ``--expect-workers 4``, ...) go to Locust unchanged; the
web page's ``--web-port``, ``--web-host`` and ``--web-login`` are parsed here, so that ``--help``
shows them, and handed on to Locust.

The UI listens on 127.0.0.1 unless ``--web-host`` says otherwise (Locust's own default is every
interface). Beyond loopback it starts only behind a login: ``--web-login`` with
``LOADGEN_WEB_AUTH=user:password`` in the environment (``loadgen.webui.auth``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from loadgen.spec import flags
from loadgen.spec.options import OptionError
from loadgen.telemetry.options import add_source_args, source_argv

LOCUSTFILE = Path(__file__).resolve().parents[1] / "locustfile.py"


DESCRIPTION = """\
Locust's web UI with loadgen's locustfile: a start form for any run (closed or
open loop, scenarios, SLO, thresholds), a live page that steers the running
ramp, past runs and comparisons (docs/webui.md). Once it says it listens, open
http://127.0.0.1:8089 (the --web-port) in a browser.

Each run option below sets the default of its field in the form, still
editable there; one not given leaves the field at loadgen ramp's default,
shown as (default: ...). Flags this command does not know (--master,
--expect-workers N, --web-base-path PATH, ...) go to Locust unchanged:
python -m locust --help lists them."""
EPILOG = """\
examples:
  # the web UI for a server on this machine: open http://127.0.0.1:8089
  loadgen ui --url http://127.0.0.1:30000
  # on port 8090, the form's steps and SLO filled in
  loadgen ui --url http://127.0.0.1:30000 --web-port 8090 --concurrency 1,8,32 \\
      --slo ttft_p99=2s
  # the form offers the scenarios of ./scenarios, chat.toml chosen
  loadgen ui --url http://127.0.0.1:30000 --scenarios scenarios \\
      --scenario scenarios/chat.toml
  # behind a login: its user and password come from the environment
  LOADGEN_WEB_AUTH="ops:$(openssl rand -hex 12)" \\
      loadgen ui --url http://127.0.0.1:30000 --web-login
  # a Locust master; workers: locust -f loadgen/locustfile.py --worker
  loadgen ui --url http://127.0.0.1:30000 --master --expect-workers 2"""
WEB_GROUP = "Web page (Locust's own flags, handed on to it)"
WEB_HOST = "127.0.0.1"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="loadgen ui",
        usage="%(prog)s --url URL [--web-port PORT] [options] [Locust's options]",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # Locust parses these; here so that --help shows them first and --web-host gets our default
    web = p.add_argument_group(WEB_GROUP)
    web.add_argument(
        "--web-port",
        type=int,
        metavar="PORT",
        help="port of the web page: http://127.0.0.1:PORT (default: 8089, Locust's)",
    )
    web.add_argument(
        "--web-host",
        default=WEB_HOST,
        metavar="ADDRESS",
        help="address the page listens on; beyond this machine (e.g. every interface) it starts only with "
        f"--web-login (default: {WEB_HOST}, this machine only; Locust's own is every interface)",
    )
    web.add_argument(
        "--web-login",
        action="store_true",
        help="put the page behind a login, its user from LOADGEN_WEB_AUTH=user:password in the environment",
    )
    groups = flags.add_arguments(p, "ui")
    add_source_args(groups[flags.TELEMETRY])
    groups[flags.LOAD].add_argument(
        "--scenarios",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder whose *.toml scenarios the start form offers (repeatable); the form runs only these, "
        "never a path typed into it (default: ./scenarios)",
    )
    return p


class UsageError(OptionError):
    """A flag this command cannot turn into Locust's; the message says which and why."""


def locust_argv(argv: list[str]) -> list[str]:
    """The arguments for ``python -m locust`` that ``loadgen ui ARGV`` runs: every option of the flag
    table given here, parsed by the same code as ``loadgen ramp``'s, as its ``--lg-*`` form default."""
    ns, rest = _parser().parse_known_args(argv)
    out = ["-f", str(LOCUSTFILE), "--host", ns.url]
    raw = flags.raw_values(ns, "ui")
    raw.pop("url", None)
    if ns.scenario:  # the scenario's [load] fills what the flags leave out, as in loadgen ramp
        from loadgen.workload.scenario import ScenarioError, load_scenario

        try:
            scenario = load_scenario(ns.scenario)
        except ScenarioError as exc:
            raise UsageError(str(exc)) from None
        load = scenario.load
        if raw.get("concurrency") is None and load.mode != "open" and load.concurrency:
            raw["concurrency"] = ",".join(str(int(c)) for c in load.concurrency)
        if raw.get("rates") is None and raw.get("concurrency") is None and load.mode == "open" and load.rates:
            raw["rates"] = ",".join(f"{r:g}" for r in load.rates)
        if raw.get("step_seconds") is None and load.step_seconds:
            raw["step_seconds"] = load.step_seconds
        if raw.get("warmup_seconds") is None and load.warmup_seconds is not None:
            raw["warmup_seconds"] = load.warmup_seconds
    values: dict[str, Any] = {}
    try:  # the same parsers as loadgen ramp's, so both commands take the same values
        for dest, text in raw.items():
            f = flags.BY_DEST[dest]
            values[dest] = text if f.kind == "slo" else flags.parse_value(f, text, f.flag("ui"))
    except OptionError as exc:
        raise UsageError(str(exc)) from None
    contexts = values.get("context_tokens")
    if contexts and len(contexts) > 1 and not values.get("concurrency"):
        raise UsageError(
            f"--context-tokens {ns.context_tokens!r}: several context lengths make a matrix of ramp steps: "
            "give --concurrency too (or one length)"
        )
    out += flags.to_argv(values, "lg")
    out += source_argv(ns)  # the telemetry sources, as loadgen ramp's
    if ns.scenarios:
        out += ["--lg-scenarios", ",".join(str(Path(d).resolve()) for d in ns.scenarios)]
    out += ["--web-host", ns.web_host]  # Locust's default is every interface; opening it is a choice
    if ns.web_port is not None:
        out += ["--web-port", str(ns.web_port)]
    if ns.web_login:
        out.append("--web-login")
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
