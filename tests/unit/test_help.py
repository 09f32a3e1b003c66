"""Every command's ``--help`` as a newcomer meets it: what the command does, examples that run, each
option's default, and ``loadgen ramp``'s many options in groups.

The examples are parsed here by the parser of the command they name (and, where it is cheap, put
through the checks the command makes before it starts anything), so an example cannot name a flag
that no longer exists or a file the repository lacks.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from collections.abc import Callable

import pytest

from loadgen.cli import parser as cli
from loadgen.cli.ramp_options import ramp_options
from loadgen.spec import flags
from tests.conftest import REPO


def _delegated() -> dict[str, Callable[[], argparse.ArgumentParser]]:
    """The subcommands that parse their own argv (``loadgen SUB ...`` hands it on): their parsers."""
    from loadgen.campaign.cli import build_parser as campaign
    from loadgen.cli.workload_cmd import build_parser as workload
    from loadgen.fleet.cli import build_parser as fleet
    from loadgen.fleet.proxy import build_parser as router
    from loadgen.predict.deploy import build_parser as predict
    from loadgen.run.worker import build_parser as worker
    from loadgen.sim.cli import build_parser as sim
    from loadgen.telemetry.monitor import build_parser as monitor
    from loadgen.twin.args import calibrate_parser, twin_parser
    from loadgen.webui.cli import _parser as ui

    return {"sim": sim, "ui": ui, "campaign": campaign, "monitor": monitor, "calibrate": calibrate_parser,
            "twin": twin_parser, "predict": predict, "worker": worker, "workload": workload,
            "fleet": fleet, "router": router}  # fmt: skip


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def parsers() -> dict[str, argparse.ArgumentParser]:
    """Every ``loadgen SUB --help``'s parser by SUB; "" is ``loadgen --help``'s."""
    delegated = _delegated()
    own = {name: p for name, p in _subcommands().items() if name not in delegated}
    return {"": cli.build_parser(), **own, **{name: build() for name, build in delegated.items()}}


def _telemetry_run() -> argparse.ArgumentParser:
    from loadgen.telemetry.__main__ import build_parser

    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = action.choices["run"]
    return parser


ALL = parsers()
# switches say what they do; off unless given is their default
SWITCHES = (argparse._HelpAction, argparse._StoreTrueAction, argparse._StoreFalseAction,
            argparse.BooleanOptionalAction, argparse._VersionAction)  # fmt: skip


def test_every_subcommand_has_its_help_checked_here() -> None:
    assert set(_subcommands()) == set(ALL) - {""}
    assert set(_delegated()) <= set(_subcommands())


@pytest.mark.parametrize("name", sorted(ALL))
def test_help_prints_a_description_and_examples(name: str) -> None:
    out = io.StringIO()
    argv = [name, "--help"] if name else ["--help"]
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        if name in _delegated():
            ALL[name].parse_args(["--help"])
        else:
            cli.build_parser().parse_args(argv)
    assert done.value.code == 0
    text = out.getvalue()
    parser = ALL[name]
    assert parser.description and len(parser.description) > 80, f"loadgen {name}: no description"
    assert parser.epilog and "examples:" in parser.epilog, f"loadgen {name}: no examples"
    assert 3 <= len(examples(parser.epilog)) <= 5, f"loadgen {name}: {examples(parser.epilog)}"
    assert parser.description.splitlines()[0] in text and "examples:" in text


def _options(parser: argparse.ArgumentParser) -> list[tuple[argparse.Action, str]]:
    """Each option and what --help says of it (its help, else its group's description)."""
    out = []
    for group in parser._action_groups:
        for action in group._group_actions:
            if action.option_strings and action.help != argparse.SUPPRESS:
                out.append((action, action.help or group.description or ""))
    return out


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_option_says_its_default(name: str) -> None:
    parsers = [ALL[name], _telemetry_run()] if name == "monitor" else [ALL[name]]
    for parser in parsers:
        for action, text in _options(parser):
            if isinstance(action, SWITCHES):
                continue
            said = "required" in text if action.required else "default" in text
            assert said, f"{parser.prog} {action.option_strings[0]}: its help says no default: {text!r}"


def test_ramp_options_are_in_groups() -> None:
    parser = ALL["ramp"]
    shown = [g for g in parser._action_groups if g._group_actions]
    titles = [g.title for g in shown]
    assert [t for t in titles if t in flags.GROUPS] == [t for t in flags.GROUPS if t in titles]
    assert len(titles) >= 8, titles
    for group in shown:
        if group.title in ("options", "optional arguments", "positional arguments"):
            assert len(group._group_actions) <= 3, f"{group.title}: {[a.dest for a in group._group_actions]}"
    telemetry = next(g for g in shown if g.title == flags.TELEMETRY)
    assert {"--gpu-source", "--no-telemetry"} <= {a.option_strings[0] for a in telemetry._group_actions}


def test_ui_help_shows_the_web_page_flags_first() -> None:
    parser = ALL["ui"]
    text = parser.format_help()
    assert "--web-port" in text and "8089" in text and "--web-host" in text and "--web-login" in text
    assert "http://127.0.0.1:8089" in text  # where the page is
    first = next(g for g in parser._action_groups if g._group_actions and g.title not in ("options",))
    assert {"--web-port", "--web-host", "--web-login"} == {a.option_strings[0] for a in first._group_actions}


def test_ui_hands_the_web_page_flags_on_to_locust() -> None:
    from loadgen.webui.cli import locust_argv

    argv = locust_argv(["--url", "http://127.0.0.1:30000", "--web-port", "8090", "--web-login", "--master"])
    assert argv[argv.index("--web-port") + 1] == "8090" and "--web-login" in argv and argv[-1] == "--master"
    assert argv[argv.index("--web-host") + 1] == "127.0.0.1"
    plain = locust_argv(["--url", "http://127.0.0.1:30000"])
    assert "--web-port" not in plain and "--web-login" not in plain  # Locust's own default, 8089


def examples(epilog: str) -> list[list[str]]:
    """The commands of an epilog's examples section, each as argv (continuation lines joined, the
    environment's assignments and trailing comments left out)."""
    text = epilog.split("examples:" if "examples:" in epilog else "example:", 1)[1].replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        argv = shlex.split(line, comments=True)
        while argv and re.fullmatch(r"[A-Z_]+=.*", argv[0]):
            argv.pop(0)
        if argv:
            out.append(argv)
    return out


# Locust's own flags the ui examples pass through (loadgen ui hands on what it does not know)
LOCUST_FLAGS = {"--master", "--expect-workers", "--worker", "--headless", "--web-base-path"}


def _check(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Parse one example with its command's parser, then the checks that command makes first."""
    if argv[:3] == ["python", "-m", "loadgen.telemetry"]:
        _telemetry_run().parse_args(argv[4:])
        return
    assert argv[0] == "loadgen", argv
    sub, rest = argv[1], argv[2:]
    delegated = _delegated()
    if sub == "ui":
        from loadgen.webui.cli import _parser, locust_argv

        locust_argv(rest)
        _, unknown = _parser().parse_known_args(rest)
        assert {a for a in unknown if a.startswith("-")} <= LOCUST_FLAGS, argv
    elif sub in delegated:
        ns = delegated[sub]().parse_args(rest)
        if sub == "campaign":
            from loadgen.campaign.file import load_campaign

            campaign = load_campaign(ns.file)
            assert set(ns.only) <= {v.name for v in campaign.variants}, argv
        elif sub == "sim":
            from loadgen.sim.profile import load_profile

            if not ns.profile_file:
                load_profile(ns.profile, hardware=ns.hardware, model=ns.model_config, spec=ns.spec)
    else:
        ns = cli.build_parser().parse_args(argv[1:])
        if sub in ("ramp", "demo"):
            monkeypatch.delenv("OPENAI_API_KEY", raising=False)
            if sub == "demo":
                from loadgen.sim.profile import load_profile

                load_profile(ns.profile)
                ns.url, ns.model = "http://127.0.0.1:1", None
            ramp_options(ns, argv[1:])
        elif sub == "scenario":
            from loadgen.workload.scenario import load_scenario

            load_scenario(ns.file)


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_example_parses_with_its_commands_parser(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the examples' files are the repository's (scenarios/...)
    epilogs = [ALL[name].epilog or ""]
    if name == "monitor":
        epilogs.append(_telemetry_run().epilog or "")
    for epilog in epilogs:
        for argv in examples(epilog):
            assert all("://" not in a or "://127.0.0.1:" in a for a in argv), f"not loopback: {argv}"
            try:
                _check(argv, monkeypatch)
            except SystemExit as exc:  # argparse's error, already printed
                pytest.fail(f"{shlex.join(argv)}: exit {exc.code}")
