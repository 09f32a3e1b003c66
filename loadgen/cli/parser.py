"""The ``loadgen`` command line: its subcommands, their options, and what each ``--help`` says
above and below them. Each subcommand's parser sets ``command``; ``loadgen.cli.commands`` runs it."""

from __future__ import annotations

import argparse
from typing import Any

from loadgen.cli.ramp_options import add_ramp_flags

# What each subcommand's --help says above and below its options. Examples use loopback addresses
# and this repository's files; tests/unit/test_help.py parses every one of them with its parser.
HELP = argparse.RawDescriptionHelpFormatter

_RUN_DIR = "reports/20260501-120000-run"  # a run directory, named as loadgen ramp names them

DESCRIPTION = """\
A load generator for OpenAI-compatible LLM servers (SGLang, vLLM, llama.cpp,
...), built on Locust: it ramps the load step by step, measures every request
and the server's and GPUs' telemetry, and writes a run directory with a report.
`loadgen COMMAND --help` tells more of each command, with examples."""

EPILOG = """\
examples:
  loadgen demo                                  # a whole run, simulated server
  loadgen ramp --url http://127.0.0.1:30000     # ramp a server, write a report
  loadgen ui --url http://127.0.0.1:30000       # web UI, http://127.0.0.1:8089
  loadgen sim --port 30000                      # a simulated server to try"""

RAMP_DESCRIPTION = """\
Ramp the load on an OpenAI-compatible server step by step, to find where it
saturates (the knee). Closed loop (--concurrency, the default): each step holds
that many users, each sending its next request when its last one finished.
Open loop (--rate): requests arrive at that rate, whatever the server does.
Each step warms up, then measures its window: TTFT, inter-token latency,
throughput, errors, the server's and the GPUs' telemetry. All of it goes to a
new run directory under --out (report.md, summary.json, steps.csv, the raw
records), whose path is the last line printed.

exit status: 0 done; 2 bad usage, or the run stopped early; 3 server not
ready; 4 run directory not writable; 5 a --fail-on/--abort-on threshold
breached; 130 interrupted (the partial report is written)."""

RAMP_EPILOG = """\
examples:
  # the default ramp: 1, 8, 32, 64, 128 users, 30-s steps, 512 output tokens
  loadgen ramp --url http://127.0.0.1:30000
  # a quick look: three short steps of short answers
  loadgen ramp --url http://127.0.0.1:30000 --concurrency 1,8,32 \\
      --step-seconds 10 --max-tokens 128
  # open loop: 1, 2, 4 and 8 requests/s, arriving as a Poisson process
  loadgen ramp --url http://127.0.0.1:30000 --rate 1,2,4,8
  # a described workload against an SLO; exit 5 on a breach (for CI)
  loadgen ramp --url http://127.0.0.1:30000 --scenario scenarios/chat.toml \\
      --slo ttft_p99=2s,tpot_p99=50ms --fail-on 'ttft_p99>2s,error_rate>1%'
  # search for the knee from 4 users (doubling, then bisecting), 15 min at most
  loadgen ramp --url http://127.0.0.1:30000 --find-knee --concurrency 4 \\
      --max-seconds 900"""

DEMO_DESCRIPTION = """\
Start the built-in simulated server (SGLang-like, with a calibrated model of
its GPUs: no GPU needed), ramp it as loadgen ramp would with the demo's
shorter steps, write the report and stop the server: about two minutes with
the defaults. Takes loadgen ramp's options but --url, --model and the
telemetry sources: those are the simulator's. The run directory's path is
the last line printed."""

DEMO_EPILOG = """\
examples:
  loadgen demo
  # under a minute: two short steps
  loadgen demo --concurrency 1,8 --step-seconds 5 --warmup-seconds 2
  # one H200 serving Llama-3.1-8B (loadgen sim --list-profiles lists them)
  loadgen demo --profile h200-llama-8b --concurrency 1,16,64,256
  # a described workload with an SLO, reports under /tmp
  loadgen demo --scenario scenarios/chat.toml --slo ttft_p99=2s \\
      --out /tmp/loadgen-demo"""

REPORT_DESCRIPTION = """\
Rebuild summary.json, steps.csv and report.md of a run directory from its raw
records: after an upgrade, or to judge the run against another SLO or other
thresholds. RUN_DIR is the path loadgen ramp printed last. Exit status 5 when
a threshold is breached, as loadgen ramp's; 2 when RUN_DIR is no run."""

REPORT_EPILOG = f"""\
examples:
  loadgen report {_RUN_DIR}
  loadgen report {_RUN_DIR} --slo ttft_p99=2s,tpot_p99=50ms
  loadgen report {_RUN_DIR} --fail-on 'ttft_p99>2s' \\
      --junit thresholds.xml"""

PLAN_DESCRIPTION = """\
Plan capacity from a run: the highest load one replica carries within the
SLO, less the headroom; the replicas (and GPUs) a target load needs; the
energy per token and, given a GPU-hour price, the cost per million tokens.
Prints the plan and writes plan.json into the run directory."""

PLAN_EPILOG = f"""\
examples:
  loadgen plan {_RUN_DIR} --slo ttft_p99=2s,tpot_p99=50ms
  loadgen plan {_RUN_DIR} --slo ttft_p99=2s --target-rps 50 \\
      --gpu-hour-cost 2.5
  loadgen plan {_RUN_DIR} --slo e2e_p90=20s \\
      --target-users 400 --gpus-per-replica 4"""

COMPARE_DESCRIPTION = """\
Put two runs or more side by side, step by step (the same load and context
length), with each figure's ratio to the first run's. Writes compare.md,
compare.html and compare.json into a new directory under --out, prints the
Markdown, then that directory."""

COMPARE_EPILOG = """\
examples:
  loadgen compare reports/20260501-120000-before reports/20260501-130000-after
  # three runs, each against the first
  loadgen compare reports/20260501-120000-tp8 reports/20260501-130000-tp4 \\
      reports/20260501-140000-tp2
  loadgen compare reports/20260501-120000-sglang \\
      reports/20260501-130000-vllm --out /tmp/comparisons"""

SCENARIO_DESCRIPTION = """\
Check a scenario file (a described workload: prompts, lengths, load pattern;
docs/scenarios.md) and say what is wrong where, or draw requests from it as a
run would and show them, with their lengths' statistics. Exit status 0 when
the file is usable, 2 when not."""

SCENARIO_EPILOG = """\
examples:
  loadgen scenario check scenarios/chat.toml
  loadgen scenario show scenarios/chat.toml -n 50
  loadgen scenario show scenarios/agentic-multi-turn.toml"""


def build_parser() -> argparse.ArgumentParser:
    """The ``loadgen`` parser; each subcommand's parser sets ``command`` to its name."""
    parser = argparse.ArgumentParser(prog="loadgen", description=DESCRIPTION, epilog=EPILOG, formatter_class=HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "demo",
        help="ramp the built-in simulated server and write a report",
        usage="%(prog)s [--profile NAME] [options]",
        description=DEMO_DESCRIPTION,
        epilog=DEMO_EPILOG,
        formatter_class=HELP,
    )
    add_ramp_flags(p, demo=True)
    p = sub.add_parser(
        "ramp",
        help="escalating-concurrency ramp against a server",
        usage="%(prog)s --url URL [options]",
        description=RAMP_DESCRIPTION,
        epilog=RAMP_EPILOG,
        formatter_class=HELP,
    )
    add_ramp_flags(p)
    _add_report(sub)
    _delegated(sub, "predict", "the ramp a deployment would give, on the simulator's virtual clock")
    _delegated(sub, "fleet", "replicas behind a router serving a trace or a day, on the simulator's virtual clock")
    _delegated(sub, "router", "an OpenAI-compatible proxy routing requests over several servers by a policy")
    _delegated(sub, "sim", "the simulated server on its own")
    _add_plan(sub)
    _add_compare_and_scenario(sub)
    _delegated(sub, "ui", "Locust's web UI with the live LLM tab")
    _delegated(sub, "campaign", "the same ramp against several server configurations")
    _delegated(sub, "monitor", "the telemetry side process on its own")
    _delegated(sub, "worker", "a load-generating worker for loadgen ramp --master on another machine")
    _delegated(sub, "workload", "workload files: export a run's requests, show one, import a trace")
    _delegated(sub, "calibrate", "fit a simulator profile (a twin) to what a run observed", dest="twin_args")
    _delegated(sub, "twin", "calibrate a twin, replay the ramp against it, compare; what-ifs", dest="twin_args")
    return parser


def _delegated(sub: Any, name: str, what: str, dest: str | None = None) -> None:
    """A subcommand with a parser of its own (``loadgen NAME --help``): its arguments pass through."""
    p = sub.add_parser(name, help=f"{what} (loadgen {name} --help)", add_help=False)
    p.add_argument(dest or f"{name}_args", nargs=argparse.REMAINDER)


def _add_report(sub: Any) -> None:
    p = sub.add_parser(
        "report",
        help="rebuild summary.json, steps.csv and report.md from a run directory",
        description=REPORT_DESCRIPTION,
        epilog=REPORT_EPILOG,
        formatter_class=HELP,
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory")
    p.add_argument(
        "--slo",
        metavar="LIMITS",
        help="judge the knee against these limits, e.g. ttft_p99=2s,tpot_p99=50ms (default: the run's own)",
    )
    p.add_argument(
        "--call-type",
        metavar="TYPE",
        help="the call type the knee verdict and plan are about, when the run mixes several "
        "(default: the run's own choice, else the one that served the most tokens)",
    )
    p.add_argument(
        "--fail-on",
        metavar="THRESHOLDS",
        help="re-judge the run against these thresholds (loadgen ramp's syntax; replaces the run's own "
        "--fail-on/--abort-on); exit 5 when one is breached (default: the run's own)",
    )
    p.add_argument(
        "--junit",
        metavar="FILE",
        help="write the thresholds' results as JUnit XML to this file (default: none, not written)",
    )


def _add_plan(sub: Any) -> None:
    p = sub.add_parser(
        "plan",
        help="capacity plan from a run: load per replica at an SLO, replicas, energy, cost",
        description=PLAN_DESCRIPTION,
        epilog=PLAN_EPILOG,
        formatter_class=HELP,
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory")
    p.add_argument(
        "--slo",
        metavar="LIMITS",
        required=True,
        help="limits, e.g. ttft_p99=2s,tpot_p99=50ms,e2e_p90=20s (required, no default)",
    )
    p.add_argument(
        "--target-rps",
        metavar="RPS",
        type=float,
        help="requests/s the service must carry (default: none; give it or --target-users for a replica count)",
    )
    p.add_argument(
        "--target-users", metavar="USERS", type=float, help="concurrent users the service must carry (default: none)"
    )
    p.add_argument(
        "--headroom",
        metavar="FRACTION",
        type=float,
        default=0.2,
        help="spare capacity per replica (default: 0.2, plan at 80%%)",
    )
    p.add_argument(
        "--gpus-per-replica", metavar="N", type=int, default=8, help="GPUs each replica runs on (default: 8)"
    )
    p.add_argument(
        "--gpu-hour-cost",
        metavar="PRICE",
        type=float,
        help="price of one GPU-hour, for cost per million tokens (default: none, no cost)",
    )
    p.add_argument(
        "--context-tokens",
        metavar="TOKENS",
        type=int,
        help="plan for this context length of a matrix run (default: the largest the run measured)",
    )


def _add_compare_and_scenario(sub: Any) -> None:
    p = sub.add_parser(
        "compare",
        help="runs side by side with ratios per step (Markdown and HTML)",
        description=COMPARE_DESCRIPTION,
        epilog=COMPARE_EPILOG,
        formatter_class=HELP,
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories, the first one the baseline")
    p.add_argument(
        "--out", metavar="DIR", default="reports", help="folder for the comparison's directory (default: reports)"
    )

    p = sub.add_parser(
        "scenario",
        help="validate a scenario file, or draw requests from it and show them",
        description=SCENARIO_DESCRIPTION,
        epilog=SCENARIO_EPILOG,
        formatter_class=HELP,
    )
    p.add_argument("action", choices=["check", "show"], help="check: validate the file; show: draw requests too")
    p.add_argument("file", metavar="FILE", help="a scenario file (TOML)")
    p.add_argument("-n", type=int, default=20, help="requests to draw (show; default: 20)")
