"""Campaign files: validation errors name the file, the line and the key; commands stay argument lists."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.campaign import CampaignError, load_campaign, parse_campaign

REPO = Path(__file__).resolve().parents[2]

GOOD = """\
[campaign]
name = "c"
url = "http://127.0.0.1:{port}"

[ramp]
concurrency = [1, 4]
step_seconds = 2

[[variant]]
name = "a"
start = "{python} -m loadgen.sim --port {port}; rm -rf /"

[[variant]]
name = "b"
apply = [["systemctl", "restart", "sglang"], "echo 'two words'"]
rollback = ["echo back"]
url = "http://gpu:30000"
[variant.ramp]
concurrency = [8]
mode = "knee"
"""


def _error(text: str) -> str:
    with pytest.raises(CampaignError) as err:
        parse_campaign(text, "camp.toml")
    return str(err.value)


def test_good_file_parses_with_argument_lists() -> None:
    c = parse_campaign(GOOD, "camp.toml")
    a, b = c.variants
    # a shell string is split like a shell would, but `;` stays an argument: no shell runs it
    assert a.start == ["{python}", "-m", "loadgen.sim", "--port", "{port};", "rm", "-rf", "/"]
    assert a.load.concurrency == [1, 4] and a.load.mode == "ramp" and a.load.step_seconds == 2
    assert b.apply == [["systemctl", "restart", "sglang"], ["echo", "two words"]]
    assert b.rollback == [["echo", "back"]]
    assert b.url == "http://gpu:30000"
    assert b.load.concurrency == [8] and b.load.mode == "knee" and b.load.step_seconds == 2


def test_shipped_campaign_is_valid() -> None:
    c = load_campaign(REPO / "scenarios" / "campaign-max-running-requests.toml")
    assert [v.name for v in c.variants] == ["mrr-128", "mrr-256"]
    assert "128" in c.variants[0].start and "256" in c.variants[1].start  # type: ignore[operator]


def test_unknown_key_in_second_variant_names_its_line() -> None:
    text = GOOD.replace('rollback = ["echo back"]', 'rollback = ["echo back"]\nrolback = ["x"]')
    msg = _error(text)
    assert msg.startswith("camp.toml:17: variant[1].rolback: unknown key")
    assert 'did you mean "rollback"' in msg


def test_bad_value_inside_variant_ramp_names_its_line() -> None:
    msg = _error(GOOD.replace("concurrency = [8]", "concurrency = [8, -1]"))
    assert msg.startswith("camp.toml:19: variant[1].ramp.concurrency = [8, -1]: must be an array of whole numbers")


def test_unknown_placeholder_is_rejected() -> None:
    msg = _error(GOOD.replace("--port {port};", "--port {prot}"))
    assert msg.startswith("camp.toml:11: variant[0].start") and "unknown placeholder {prot}" in msg


def test_missing_pieces_are_named() -> None:
    assert "campaign: is required" in _error('[[variant]]\nname = "a"\nstart = ["x"]\n')
    no_start = GOOD.replace('start = "{python} -m loadgen.sim --port {port}; rm -rf /"\n', "")
    assert "camp.toml:9: variant[0].start: a variant needs a start command or apply commands" in _error(no_start)
    assert _error(GOOD.replace('name = "c"', "name = 3")).startswith("camp.toml:2: campaign.name = 3: must be a string")
    dup = GOOD.replace('name = "b"', 'name = "a"')
    assert "camp.toml:14: variant[1].name" in _error(dup) and "same name" in _error(dup)
    assert "invalid TOML" in _error("[campaign\n")


def test_no_api_key_in_campaign_files() -> None:
    text = GOOD.replace("step_seconds = 2", 'step_seconds = 2\nargs = ["--api-key", "sk-x"]')
    assert "no secrets in campaign files" in _error(text)


def test_command_must_be_strings() -> None:
    msg = _error(GOOD.replace('rollback = ["echo back"]', "rollback = [[1, 2]]"))
    assert msg.startswith("camp.toml:16: variant[1].rollback[0] = [1, 2]: must be a command")


def test_ramp_command_line_is_built_from_the_file(tmp_path: Path) -> None:
    from loadgen.campaign.runner import _ramp_argv

    c = parse_campaign(GOOD.replace('mode = "knee"', 'mode = "knee"\nargs = ["--server-log-file", "{log_file}"]'))
    b = c.variants[1]
    env = {"log_file": "/var/log/x.log", "url": "http://gpu:30000"}
    argv = _ramp_argv(b, "http://gpu:30000", tmp_path, "c b", env, wait_s=10)
    assert argv[1:4] == ["-m", "loadgen.cli", "ramp"]
    assert argv[argv.index("--concurrency") + 1] == "8"
    assert argv[argv.index("--step-seconds") + 1] == "2"
    assert "--find-knee" in argv and argv[-2:] == ["--server-log-file", "/var/log/x.log"]
    assert argv[argv.index("--out") + 1] == str(tmp_path)


def test_variants_that_cannot_start_are_recorded_and_the_campaign_goes_on(tmp_path: Path) -> None:
    import io
    import sys

    from loadgen.campaign import CampaignRunner, build_report, render_markdown

    text = f"""
[campaign]
name = "broken"
url = "http://127.0.0.1:{{port}}"
wait_ready_s = 30
[ramp]
concurrency = [1]

[[variant]]
name = "no-binary"
start = ["/nonexistent/sglang", "--port", "{{port}}"]

[[variant]]
name = "no-apply-tool"
apply = [["/nonexistent/sed", "-i", "s/128/256/", "unit.conf"]]

[[variant]]
name = "exits-at-once"
start = [{sys.executable!r}, "-c", "import sys; print('Traceback (most recent call last):'); sys.exit(2)"]
"""
    campaign = parse_campaign(text, "broken.toml")
    out = io.StringIO()
    runner = CampaignRunner(campaign, tmp_path, out)
    runner.run()
    by_name = {r["name"]: r for r in runner.results}
    assert by_name["no-binary"]["status"] == "failed_to_start"
    assert "not found: '/nonexistent/sglang'" in by_name["no-binary"]["reason"]
    assert by_name["no-apply-tool"]["status"] == "apply_failed"
    assert "command not found" in by_name["no-apply-tool"]["reason"]
    once = by_name["exits-at-once"]
    assert once["status"] == "failed_to_start" and "exit code 2" in once["reason"]
    assert [m["pattern"] for m in once["matches"]] == ["traceback"]
    report = build_report(campaign, tmp_path, runner.results, interrupted=False)
    assert report["comparison"] is None  # nothing ran, nothing to compare
    md = render_markdown(report)
    assert md.count("failed_to_start") >= 2 and "Traceback (most recent call last):" in md


def test_check_and_only_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from loadgen.campaign import main

    path = tmp_path / "c.toml"
    path.write_text(GOOD)
    assert main([str(path), "--check"]) == 0
    plan = capsys.readouterr().out
    assert "campaign c: 2 variant(s)" in plan and "apply:    systemctl restart sglang" in plan
    assert main([str(path), "--only", "zzz"]) == 2
    assert "--only 'zzz': no such variant" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.toml")]) == 2
    assert "no such campaign file" in capsys.readouterr().err
    assert main([str(path), "--out", "/proc/loadgen-cannot-write"]) == 4
    assert "cannot create the output folder" in capsys.readouterr().err


def test_scenario_paths_resolve_beside_the_file_or_fail_with_the_line(tmp_path: Path) -> None:
    (tmp_path / "chat.toml").write_text("# a scenario\n")
    path = tmp_path / "c.toml"
    path.write_text(GOOD.replace("step_seconds = 2", 'step_seconds = 2\nscenario = "chat.toml"'))
    c = load_campaign(path)
    assert all(v.load.scenario == str((tmp_path / "chat.toml").resolve()) for v in c.variants)
    path.write_text(GOOD.replace("step_seconds = 2", 'step_seconds = 2\nscenario = "nope.toml"'))
    with pytest.raises(CampaignError) as err:
        load_campaign(path)
    assert str(err.value).startswith(f'{path}:8: scenario = "nope.toml": no such file')


def test_every_option_of_the_tables_campaign_surface_is_a_ramp_key(tmp_path: Path) -> None:
    """The campaign's [ramp] keys are the flag table's campaign surface (issue 29: the table named
    arrival, burstiness, endpoint, call_type and gpu_count campaign options, and the file refused
    them as unknown keys); each is checked as its flag is and reaches the ramp's command line."""
    from loadgen.campaign.file import RAMP_KEYS
    from loadgen.campaign.runner import _ramp_argv
    from loadgen.spec import flags

    surface = {f.name.replace("-", "_") for f in flags.FLAGS if "campaign" in f.surfaces} - {"find_knee"}
    assert surface <= set(RAMP_KEYS)
    extra = 'arrival = "gamma"\nburstiness = 2.5\nendpoint = "completions"\ncall_type = "completions"\ngpu_count = 8\n'
    c = parse_campaign(GOOD.replace("step_seconds = 2\n", "step_seconds = 2\n" + extra), "camp.toml")
    for v in c.variants:
        argv = _ramp_argv(v, "http://gpu:30000", tmp_path, "c", {}, wait_s=10)
        got = {flag: argv[argv.index(flag) + 1] for flag in ("--arrival", "--burstiness", "--endpoint", "--gpu-count")}
        assert got == {"--arrival": "gamma", "--burstiness": "2.5", "--endpoint": "completions", "--gpu-count": "8"}
        assert argv[argv.index("--call-type") + 1] == "completions"
    # a variant's own [variant.ramp] overrides the campaign-wide value
    text = GOOD.replace("step_seconds = 2\n", "step_seconds = 2\n" + extra).replace(
        "concurrency = [8]", "concurrency = [8]\ngpu_count = 4"
    )
    b = parse_campaign(text, "camp.toml").variants[1]
    assert b.load.options["gpu_count"] == 4


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("gpu_count = 0", "ramp.gpu_count = 0: must be 1 or more"),
        ("burstiness = 0", "ramp.burstiness = 0: must be above 0 (1 is Poisson's)"),
        ('arrival = "bursty"', 'ramp.arrival = "bursty": must be one of "poisson", "gamma"'),
        ("burstiness = 2", "ramp.burstiness = 2: applies to arrival gamma only"),
        ('endpoint = "chat/completions"', 'ramp.endpoint = "chat/completions": must be one of'),
    ],
)
def test_a_table_option_in_a_campaign_is_checked_as_its_flag_is(line: str, message: str) -> None:
    msg = _error(GOOD.replace("step_seconds = 2\n", f"step_seconds = 2\n{line}\n"))
    assert msg.startswith(f"camp.toml:8: {message}"), msg
