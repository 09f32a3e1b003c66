"""The one flag table: every front end is generated from it and reads the same values back."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import pytest

from loadgen.spec import flags
from loadgen.spec.options import OptionError, RampOptions, Timeouts

# RampOptions fields no user types: the run's own bookkeeping and what other flag groups set
NOT_FLAGS = {"telemetry", "argv", "stream"}


def test_every_option_of_a_run_has_one_row() -> None:
    fields = {f.name for f in dataclasses.fields(RampOptions)} - NOT_FLAGS - {"timeouts"}
    fields |= {f"timeouts.{f.name}" for f in dataclasses.fields(Timeouts)}
    dests = [f.dest for f in flags.FLAGS]
    assert len(dests) == len(set(dests)), "a dest defined twice"
    assert fields - set(dests) == set(), "RampOptions fields without a flag"
    assert set(dests) - fields == {"no_stream", "no_telemetry"}  # the two switches the builders read


def _parser(surface: Any) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    flags.add_arguments(p, surface)
    return p


def test_ramp_and_ui_parse_the_same_text_to_the_same_values() -> None:
    argv = ["--url", "http://h:1", "--concurrency", "1, 8,32", "--context-tokens", "60,4000", "--max-tokens", "64",
            "--extra-body", "temperature=0", "--extra-body", '{"top_p": 0.5}', "--slo", "ttft_p99=2s"]  # fmt: skip
    got = {}
    for surface in ("ramp", "ui"):
        raw = flags.raw_values(_parser(surface).parse_args(argv), surface)
        got[surface] = {d: flags.parse_value(flags.BY_DEST[d], v, "--x") for d, v in raw.items() if d in raw}
    for dest in ("concurrency", "context_tokens", "max_tokens", "extra_body", "slo"):
        assert got["ramp"][dest] == got["ui"][dest], dest
    assert got["ramp"]["concurrency"] == [1, 8, 32]
    assert got["ramp"]["extra_body"] == {"temperature": 0, "top_p": 0.5}
    assert got["ramp"]["slo"] == {"ttft_p99_ms": 2000.0}


def test_ui_leaves_what_is_not_given_to_the_form() -> None:
    raw = flags.raw_values(_parser("ui").parse_args(["--url", "http://h:1"]), "ui")
    assert flags.to_argv({d: v for d, v in raw.items() if d != "url"}, "lg") == []


def test_values_written_as_flags_read_back_the_same() -> None:
    values = {"concurrency": [1, 8], "rates": [0.5, 2.0], "step_seconds": 7.5, "max_tokens": 16,
              "extra_body": {"ignore_eos": True, "stop": ["\n"]}, "scenario": "s.toml", "find_knee": True,
              "no_stream": False, "slo": {"ttft_p99_ms": 2000.0, "tpot_p50_ms": 0.5}}  # fmt: skip
    argv = flags.to_argv(values, "ramp")
    assert "--no-stream" not in argv and "--find-knee" in argv
    ns = _parser("ramp").parse_args(["--url", "http://h:1", *argv])
    raw = flags.raw_values(ns, "ramp")
    for dest, want in values.items():
        f = flags.BY_DEST[dest]
        got = flags.parse_value(f, raw[dest], f.flag("ramp"))
        assert (got or False) == want, dest


def test_locust_options_match_the_table() -> None:
    form = argparse.ArgumentParser()
    hidden = argparse.ArgumentParser()
    flags.add_locust_arguments(form, hidden)
    shown = {a.option_strings[0] for a in form._actions if a.option_strings and a.dest != "help"}
    cli_only = {a.option_strings[0] for a in hidden._actions if a.option_strings and a.dest != "help"}
    assert "--lg-steps" in shown and "--lg-extra-body" in shown and "--lg-slo" in shown
    assert {"--lg-out", "--lg-stall-timeout", "--lg-request-timeout", "--no-telemetry"} <= cli_only
    assert not shown & cli_only
    ns = form.parse_args(["--lg-steps", "1,4", "--lg-extra-body", "temperature=0 ignore_eos=true"])
    raw = flags.raw_values(ns, "lg")
    assert flags.parse_value(flags.BY_DEST["concurrency"], raw["concurrency"], "--lg-steps") == [1, 4]
    assert flags.parse_value(flags.BY_DEST["extra_body"], raw["extra_body"], "--lg-extra-body") == {
        "temperature": 0,
        "ignore_eos": True,
    }


@pytest.mark.parametrize(
    ("dest", "text", "message"),
    [
        ("concurrency", "1,0", "--lg-steps '1,0': every value must be a whole number above 0"),
        ("rates", "fast", "--rate 'fast': expected comma-separated numbers"),
        ("extra_body", "[1]", "--extra-body '[1]': expected a JSON object"),
        ("max_tokens", "many", "--lg-max-tokens 'many': expected a whole number"),
    ],
)
def test_bad_values_name_the_flag_as_typed(dest: str, text: str, message: str) -> None:
    f = flags.BY_DEST[dest]
    flag = "--lg-" + (f.lg or f.name) if message.startswith("--lg") else f.flag("ramp")
    with pytest.raises(OptionError, match=message.replace("[", r"\[").replace("]", r"\]")):
        flags.parse_value(f, text, flag)


def test_the_readme_documents_every_flag_of_loadgen_ramp() -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    missing = [f.flag("ramp") for f in flags.FLAGS if "ramp" in f.surfaces and f"`{f.flag('ramp')}" not in readme]
    assert not missing, f"README.md's option table lacks {missing}"


def test_telemetry_sources_written_back_read_the_same() -> None:
    from loadgen.telemetry.options import add_source_args, source_argv

    parser = argparse.ArgumentParser()
    add_source_args(parser)
    argv = ["--gpu-source", "http://h:9400/metrics", "--gpu-hz", "4", "--gpus", "0,2", "--log-from-start",
            "--metrics-map", "kv_usage=kv", "--monitor-url", "http://m:9500", "--monitor-hz", "0.5"]  # fmt: skip
    first = parser.parse_args(argv)
    again = parser.parse_args(source_argv(first))
    assert vars(again) == vars(first)
    assert source_argv(parser.parse_args([])) == []  # defaults are left to the other side's defaults


def test_a_metrics_map_field_no_server_sample_has_is_refused_naming_the_fields(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from loadgen.telemetry.options import add_source_args

    parser = argparse.ArgumentParser()
    add_source_args(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--metrics-map", "kv_usage_frac=kv"])
    err = capsys.readouterr().err
    assert "'kv_usage_frac' is not a server field" in err and "kv_usage" in err and "preemptions_total" in err


def test_every_subcommand_parser_builds_without_clashing_options() -> None:
    # the option table's flags and the telemetry source flags share one parser per command: two rows
    # with the same flag (--gpus once clashed with the telemetry's GPU selection) fail only here
    from loadgen.cli.parser import build_parser

    parser = build_parser()
    ns = parser.parse_args(["ramp", "--url", "http://127.0.0.1:1", "--gpu-count", "8", "--gpus", "0,1"])
    assert ns.gpu_count == 8
    parser.parse_args(["demo", "--concurrency", "1"])


def test_every_row_has_a_group_and_a_default_said() -> None:
    # --help ends each option's help with its default, or what decides where there is none; the web
    # form shows Flag.help as is, so the help itself never says it
    for f in flags.FLAGS:
        if f.kind != "switch" and f.dest != "url":
            assert f.default is not None or f.unset, f"{f.flag('ramp')}: neither a default nor the words for none"
        assert f.group in flags.GROUPS, f.dest
        assert "default" not in f.help.lower(), f"{f.flag('ramp')}: the command line adds the default, not help"
    help_text = flags.command_line_help
    assert help_text(flags.BY_DEST["max_tokens"]).endswith("(default: 512, or the scenario's)")
    assert help_text(flags.BY_DEST["concurrency"], [1, 8]).endswith("(default: 1,8)")  # the demo's own
    assert help_text(flags.BY_DEST["search_factor"]).endswith("(default: 2)")
    assert help_text(flags.BY_DEST["model"]).endswith("(default: the first model /v1/models lists)")


def test_the_ramp_command_carries_every_option_it_parses_into_the_run() -> None:
    # a row in the table is not enough: `loadgen ramp` builds RampOptions field by field
    from loadgen.cli.parser import build_parser
    from loadgen.cli.ramp_options import ramp_options as _ramp_options

    argv = ["ramp", "--url", "http://127.0.0.1:1", "--call-type", "embeddings", "--gpu-count", "8", "--repeat", "3"]
    opts = _ramp_options(build_parser().parse_args(argv), argv)
    assert (opts.call_type, opts.gpu_count, opts.repeat) == ("embeddings", 8, 3)


BOUNDED = [f for f in flags.FLAGS if f.bound is not None]


def _past(f: flags.Flag) -> str:
    """A value the bound refuses: the bound itself when strict, else one below."""
    assert f.bound is not None
    least = f.bound.least if f.bound.strict else f.bound.least - 1
    return str(int(least)) if f.kind == "int" else f"{least:g}"


def _form(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    flags.add_locust_arguments(parser, parser)
    return parser.parse_args(list(argv))


def test_the_table_bounds_the_options_that_need_it() -> None:
    names = {f.dest for f in BOUNDED}
    assert {"step_seconds", "warmup_seconds", "max_tokens", "requests_per_step", "burstiness", "gpu_count"} <= names


@pytest.mark.parametrize("f", BOUNDED, ids=lambda f: f.dest)
def test_every_bound_is_checked_alike_on_the_command_line_and_in_the_web_form(f: flags.Flag) -> None:
    """One rule from the table, one message, each surface naming its own flag (issue 29: the form
    used to check three of these, the command line six, each in its own words)."""
    from loadgen.cli.parser import build_parser
    from loadgen.cli.ramp_options import ramp_options as _ramp_options
    from loadgen.locustfile import validate

    assert f.bound is not None
    words = f.bound.words()
    gamma = ["--arrival", "gamma", "--rate", "1"] if f.dest == "burstiness" else []
    if "ramp" in f.surfaces:
        ns = build_parser().parse_args(["ramp", "--url", "http://127.0.0.1:1", *gamma, f.flag("ramp"), _past(f)])
        with pytest.raises(OptionError) as cli:  # loadgen ramp: "error: ..." and exit 2
            _ramp_options(ns, [])
        assert str(cli.value).startswith(f"{f.flag('ramp')} {_past(f)}: {words}"), str(cli.value)
    if "form" in f.surfaces or "lg" in f.surfaces:
        lg_gamma = ["--lg-arrival", "gamma"] if f.dest == "burstiness" else []
        with pytest.raises(OptionError) as form:
            validate(_form(*lg_gamma, f.flag("form"), _past(f)))
        assert str(form.value).startswith(f"{f.flag('form')} {_past(f)}: {words}"), str(form.value)
    if not f.bound.strict:  # the bound itself is taken
        assert flags.parse_value(f, str(int(f.bound.least)), f.flag("ramp")) == f.bound.least


def test_burstiness_without_gamma_arrivals_is_refused_in_the_web_form_too() -> None:
    from loadgen.locustfile import validate

    with pytest.raises(OptionError, match="--lg-burstiness 2: applies to --lg-arrival gamma only"):
        validate(_form("--lg-rates", "1", "--lg-burstiness", "2"))
    validate(_form("--lg-rates", "1", "--lg-arrival", "gamma", "--lg-burstiness", "2"))


@pytest.mark.parametrize("dest", ["fail_on", "abort_on"])
def test_thresholds_are_read_once_by_the_table_on_every_surface(dest: str) -> None:
    """A typo in --fail-on/--abort-on is refused alike on the command line and in the web form
    (the form used to pass it on unread), and a good text becomes the thresholds the run judges:
    the ramp's --abort-on guard takes them as read, the manifest keeps the text."""
    from loadgen.cli.parser import build_parser
    from loadgen.cli.ramp_options import ramp_options as _ramp_options
    from loadgen.locustfile import _ramp_options as form_options
    from loadgen.locustfile import validate

    f = flags.BY_DEST[dest]
    with pytest.raises(OptionError, match=rf"^{f.flag('ramp')} threshold 'ttft_p98>2s': unknown metric"):
        _ramp_options(build_parser().parse_args(["ramp", "--url", "http://h:1", f.flag("ramp"), "ttft_p98>2s"]), [])
    with pytest.raises(OptionError, match=rf"^{f.flag('form')} threshold 'ttft_p98>2s': unknown metric"):
        validate(_form(f.flag("form"), "ttft_p98>2s"))
    ns = build_parser().parse_args(["ramp", "--url", "http://h:1", f.flag("ramp"), " ttft_p99>2s,run:error_rate>1% "])
    cli = getattr(_ramp_options(ns, []), dest)
    form = getattr(form_options(_form(f.flag("form"), "ttft_p99>2s,run:error_rate>1%"), "http://h:1", "m"), dest)
    assert cli == form
    assert [(t.metric, t.limit, t.scope) for t in cli] == [("ttft_p99", 2000.0, "step"), ("error_rate", 1.0, "run")]
    manifest = RampOptions(url="http://h:1", model="m", **{dest: cli}).manifest()
    assert manifest[dest] == "ttft_p99>2s,run:error_rate>1%"
    assert getattr(RampOptions.from_manifest(manifest), dest) == cli  # a worker reads the same thresholds


def test_max_tokens_has_one_default_on_every_surface() -> None:
    """The ramp's flag, the web form, RampOptions, a scenario with no [output] max_tokens and a
    RequestSpec all ask for the same length (a scenario used to default to 256, the ramp to 512)."""
    from loadgen.locustfile import _ramp_options as form_options
    from loadgen.spec.request import DEFAULT_MAX_TOKENS, RequestSpec
    from loadgen.workload.scenario import parse_scenario

    assert flags.BY_DEST["max_tokens"].default == DEFAULT_MAX_TOKENS
    assert RampOptions(url="http://h:1", model="m").max_tokens == DEFAULT_MAX_TOKENS
    assert form_options(_form(), "http://h:1", "m").max_tokens == DEFAULT_MAX_TOKENS
    assert parse_scenario('endpoint = "chat"\n').output.max_tokens.describe() == f"fixed {DEFAULT_MAX_TOKENS}"
    assert RequestSpec().max_tokens == DEFAULT_MAX_TOKENS


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max-tokens", "0"], "--max-tokens 0: must be above 0"),
        (["--concurrency", "8,x"], "--concurrency '8,x'"),
        (["--context-tokens", "0"], "--context-tokens"),
        (["--slo", "ttft_p95=2s"], "unknown SLO name 'ttft_p95'"),
    ],
)
def test_the_twins_what_ifs_are_read_as_the_ramp_reads_them(
    argv: list[str], message: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """loadgen twin's --concurrency, --context-tokens, --max-tokens and --slo are the table's rows
    (it had its own parser of lists and took --max-tokens 0): refused before any fit, exit 2, with
    the ramp's own message."""
    from loadgen.twin.cli import twin_main

    assert twin_main([str(tmp_path / "no-such-run"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err, err
    with pytest.raises(OptionError) as ramp:  # the same text, refused alike by loadgen ramp
        flags.parse_value(flags.BY_DEST[argv[0][2:].replace("-", "_")], argv[1], argv[0])
    assert message in str(ramp.value)
