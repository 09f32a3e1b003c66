"""fail_on / abort_on in a scenario's [gate] and a campaign's [ramp] table."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.campaign.file import CampaignError, parse_campaign
from loadgen.campaign.runner import _ramp_argv
from loadgen.workload.scenario import ScenarioError, parse_scenario

CAMPAIGN = """\
[campaign]
name = "c"
url = "http://127.0.0.1:{port}"

[ramp]
concurrency = [1, 8]
fail_on = "ttft_p99>2s,run:error_rate>1%"

[[variant]]
name = "a"
start = ["true"]

[[variant]]
name = "b"
start = ["true"]
[variant.ramp]
abort_on = "invalid_steps>0"
"""


def test_a_scenario_gate_carries_its_thresholds() -> None:
    s = parse_scenario('[gate]\nfail_on = "ttft_p99>2s"\nabort_on = "error_rate>5%"\n')
    assert s.gate.fail_on is not None and s.gate.abort_on is not None
    assert (s.gate.fail_on.text, s.gate.abort_on.text) == ("ttft_p99>2s", "error_rate>5%")
    (t,) = s.gate.fail_on  # read with the scenario, not again by the ramp
    assert (t.metric, t.op, t.limit, t.unit) == ("ttft_p99", ">", 2000.0, "ms")
    assert parse_scenario("").gate.fail_on is None
    with pytest.raises(ScenarioError, match=r"\(scenario\):2: gate.fail_onn"):
        parse_scenario('[gate]\nfail_onn = "ttft_p99>2s"\n')
    with pytest.raises(ScenarioError, match="must be a string"):
        parse_scenario("[gate]\nfail_on = 2\n")
    # a typo names the scenario's line and key, before any server is asked anything
    with pytest.raises(ScenarioError, match=r"\(scenario\):3: gate.abort_on .*unknown metric 'ttft_p98'"):
        parse_scenario('[gate]\nfail_on = "ttft_p99>2s"\nabort_on = "ttft_p98>1s"\n')


def test_campaign_ramp_tables_pass_thresholds_to_each_ramp(tmp_path: Path) -> None:
    c = parse_campaign(CAMPAIGN, "c.toml")
    a, b = c.variants
    assert (a.load.fail_on, a.load.abort_on) == ("ttft_p99>2s,run:error_rate>1%", None)
    assert (b.load.fail_on, b.load.abort_on) == ("ttft_p99>2s,run:error_rate>1%", "invalid_steps>0")
    argv = _ramp_argv(b, "http://h:1", tmp_path, "c b", {}, wait_s=1.0)
    i = argv.index("--fail-on")
    assert argv[i + 1] == "ttft_p99>2s,run:error_rate>1%"
    assert argv[argv.index("--abort-on") + 1] == "invalid_steps>0"


def test_a_campaign_threshold_typo_names_file_line_and_fix() -> None:
    bad = CAMPAIGN.replace('abort_on = "invalid_steps>0"', 'abort_on = "invalid_steps>0.5"')
    with pytest.raises(CampaignError) as exc:
        parse_campaign(bad, "c.toml")
    assert str(exc.value).startswith("c.toml:17: variant[1].ramp.abort_on")
    assert "invalid_steps is a count; give a whole number" in str(exc.value)
