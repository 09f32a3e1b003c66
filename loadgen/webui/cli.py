"""``loadgen ui``: Locust's web UI with our locustfile, the ramp's flags turned into form defaults.

``loadgen ui --url URL [--scenario FILE] [--concurrency 1,8,32] ...`` runs
``python -m locust -f <loadgen/locustfile.py> --host URL --lg-steps 1,8,32 ...``: every value given
here becomes the default of the matching field in the web UI's form (still editable there). Flags
this command does not know (``--master``, ``--expect-workers 4``, ``--web-port 8090``, ...) go to
Locust unchanged.

The UI listens on 127.0.0.1 unless ``--web-host`` says otherwise (Locust's own default is every
interface). Beyond loopback it prints a warning; ``--web-login`` with ``LOADGEN_WEB_AUTH=user:password``
in the environment puts it behind a login (``loadgen.webui.auth``).
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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="loadgen ui",
        description="Locust's web UI with the LLM tab; flags become the form's defaults. "
        "Unknown flags (e.g. --master, --web-port 8090) are passed to Locust.",
    )
    flags.add_arguments(p, "ui")
    add_source_args(p)
    p.add_argument(
        "--scenarios",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder whose *.toml scenarios the start form offers (repeatable; default ./scenarios); "
        "the form runs only these, never a path typed into it",
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
    if not any(a == "--web-host" or a.startswith("--web-host=") for a in rest):
        out += ["--web-host", "127.0.0.1"]  # Locust's default is every interface; opening it is a choice
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
