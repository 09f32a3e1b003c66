"""The command lines of ``loadgen calibrate`` and ``loadgen twin`` (``loadgen.twin.cli`` runs them):
their options, help and examples, apart from the fit so that building them imports no numpy/scipy."""

from __future__ import annotations

import argparse

from loadgen.spec import flags

# the ramp's options a twin replays differently (``loadgen twin --concurrency ...``)
WHAT_IF_LOAD = ("concurrency", "context_tokens", "max_tokens")

_RUN_DIR = "reports/20260501-120000-run"  # a run directory, named as loadgen ramp names them
CALIBRATE_DESCRIPTION = """\
Fit a simulator profile, the run's digital twin, to what one run or more
observed: decode and prefill step times, tokens per step, output lengths, GPU
power, KV capacity (docs/twin.md). Writes the profile (a loadgen sim
--profile-file) and its fit report; prints each fitted parameter and what it
could not fit. Exit status 2, with the run directory and what is wrong, when a
run cannot be read."""
CALIBRATE_EPILOG = f"""\
examples:
  loadgen calibrate {_RUN_DIR}
  # two runs of one server, fitted together
  loadgen calibrate {_RUN_DIR} reports/20260501-130000-long \\
      -o h200.toml
  # a what-if profile: the fit, with room for 256 running requests
  loadgen calibrate {_RUN_DIR} --set max_running_requests=256 \\
      -o mrr-256.toml
  # serve it
  loadgen sim --profile-file twin.toml --port 30001"""
TWIN_DESCRIPTION = """\
Calibrate the run's twin (as loadgen calibrate), serve it (loadgen sim), replay
the run's ramp against it and compare the twin's figures with the run's, step
by step, in twin.md and twin.json; with --set, --concurrency, --context-tokens
or --max-tokens, a what-if: the replay runs the changed server or load and
every figure of it is marked predicted (docs/twin.md). The last line printed
is the replay's run directory. Exit status 2 bad input, 1 when the twin or the
replay fails (the message says which)."""
TWIN_EPILOG = f"""\
examples:
  # how well does the twin reproduce the run?
  loadgen twin {_RUN_DIR}
  # what if the server ran 256 requests at once, under up to 512 users?
  loadgen twin {_RUN_DIR} --set max_running_requests=256 \\
      --concurrency 128,256,512
  # ... and the capacity plan from the twin's predicted curve
  loadgen twin {_RUN_DIR} --concurrency 128,256,512 --plan \\
      --slo ttft_p99=2s,tpot_p99=50ms --target-rps 40
  # long prompts the run never sent
  loadgen twin {_RUN_DIR} --context-tokens 16000 \\
      --out /tmp/twin-16k"""


def calibrate_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="loadgen calibrate",
        description=CALIBRATE_DESCRIPTION,
        epilog=CALIBRATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories of one server, to fit together")
    ap.add_argument(
        "-o",
        "--output",
        default="twin.toml",
        metavar="FILE",
        help="profile to write; the fit report goes beside it as NAME.fit.json (default: twin.toml)",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="replace a fitted parameter (what-if), e.g. max_running_requests=256 (repeatable; default: none)",
    )
    _add_engine(ap)
    return ap


def twin_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="loadgen twin",
        description=TWIN_DESCRIPTION,
        epilog=TWIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("run", metavar="RUN_DIR", help="the run directory to calibrate from and replay")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="what-if: replace a fitted parameter (max_running_requests=256, kv_pool_tokens=...) "
        "or any simulator field as SECTION.FIELD=VALUE (repeatable; default: none)",
    )
    # the load's what-ifs are the ramp's own options, read by the flag table as loadgen ramp reads them
    flags.add_overrides(ap, WHAT_IF_LOAD, "what-if: replay with ")
    ap.add_argument(
        "--out",
        metavar="DIR",
        help="folder for twin.toml, twin.md, twin.json and the twin's run (default: RUN_DIR/twin)",
    )
    ap.add_argument(
        "--plan",
        action="store_true",
        help="also plan capacity from the twin's predicted curve (loadgen plan of the replay, marked predicted); "
        "SLO from --slo, else the run's own",
    )
    flags.add_overrides(ap, ("slo",), "with --plan: ")
    ap.add_argument("--target-rps", type=float, help="with --plan: requests/s the service must carry (default: none)")
    ap.add_argument(
        "--target-users", type=float, help="with --plan: concurrent users the service must carry (default: none)"
    )
    ap.add_argument(
        "--seed",
        type=int,
        default=0,
        help="the twin simulator's random seed (acceptance and natural-length draws; default: 0): replays under "
        "several seeds show the twin's own spread, which a short step at low load makes a few %%",
    )
    _add_engine(ap)
    return ap


def _add_engine(ap: argparse.ArgumentParser) -> None:
    """``--engine``, the same for calibrate and twin: which scheduler the fitted profile runs."""
    ap.add_argument(
        "--engine",
        choices=("sglang", "vllm"),
        help="the scheduler the twin runs: SGLang's or vLLM's V1 (docs/simulator.md) (default: the engine "
        "whose names the run's server /metrics carried, else sglang)",
    )
