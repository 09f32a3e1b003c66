"""``loadgen ui``'s translation to Locust's flags, and the locustfile's ramp run headless."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loadgen.webui.cli import LOCUSTFILE, locust_argv
from tests.conftest import REPO


def _value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_ui_flags_become_form_defaults_and_unknown_flags_go_to_locust(tmp_path: Path) -> None:
    args = locust_argv(
        [
            *("--url", "http://h:1", "--concurrency", "1, 8,32", "--step-seconds", "20", "--slo", "ttft_p99=2s"),
            *("--metrics-url", "http://h:1/metrics", "--master", "--expect-workers", "2"),
        ]
    )
    assert args[:4] == ["-f", str(LOCUSTFILE), "--host", "http://h:1"]
    assert Path(args[1]).name == "locustfile.py" and Path(args[1]).exists()
    assert _value(args, "--lg-steps") == "1,8,32"
    assert _value(args, "--lg-step-seconds") == "20"
    assert _value(args, "--lg-slo") == "ttft_p99=2s"
    assert _value(args, "--metrics-url") == "http://h:1/metrics"
    assert args[-3:] == ["--master", "--expect-workers", "2"]
    assert "--lg-max-tokens" not in args  # not given: the locustfile's default stays


def test_ui_takes_the_body_and_context_flags_as_loadgen_ramp_does() -> None:
    """One syntax for both commands: repeatable KEY=VALUE (or a JSON object), a list of lengths."""
    from loadgen.spec.flags import BY_DEST, parse_value

    def _extra_body(items: list[str]) -> object:  # what loadgen ramp makes of its --extra-body items
        return parse_value(BY_DEST["extra_body"], items, "--extra-body")

    def form_extra_body(text: str) -> object:  # what the locustfile makes of its form field
        return parse_value(BY_DEST["extra_body"], text, "--lg-extra-body")

    def _contexts(text: str) -> object:
        return parse_value(BY_DEST["context_tokens"], text, "--lg-context-tokens")

    flags = ["--extra-body", "temperature=0", "--extra-body", "ignore_eos=true", "--extra-body", '{"top_p": 0.9}']
    args = locust_argv(["--url", "http://h:1", "--concurrency", "1,8", "--context-tokens", "60, 4000", *flags])
    want = {"temperature": 0, "ignore_eos": True, "top_p": 0.9}
    assert json.loads(_value(args, "--lg-extra-body")) == want == _extra_body(flags[1::2])
    assert _value(args, "--lg-context-tokens") == "60,4000" and _contexts("60,4000") == [60, 4000]
    # the web form's one text field takes the same items, space-separated, or a JSON object
    assert form_extra_body("temperature=0 ignore_eos=true top_p=0.9") == want
    assert form_extra_body(_value(args, "--lg-extra-body")) == want
    with pytest.raises(Exception, match=r"--context-tokens '60,4000': several context lengths"):
        locust_argv(["--url", "http://h:1", "--context-tokens", "60,4000"])  # a matrix needs steps
    with pytest.raises(Exception, match=r"--extra-body 'temperature': expected key=value"):
        locust_argv(["--url", "http://h:1", "--extra-body", "temperature"])


def test_a_scenario_supplies_the_ramp_steps(tmp_path: Path) -> None:
    scen = tmp_path / "s.toml"
    scen.write_text('name = "t"\n[load]\nconcurrency = [2, 4]\nstep_seconds = 7\nwarmup_seconds = 1\n')
    args = locust_argv(["--url", "http://h:1", "--scenario", str(scen)])
    assert _value(args, "--lg-scenario") == str(scen)
    assert _value(args, "--lg-steps") == "2,4"
    assert _value(args, "--lg-step-seconds") == "7" and _value(args, "--lg-warmup-seconds") == "1"
    explicit = locust_argv(["--url", "http://h:1", "--scenario", str(scen), "--concurrency", "16"])
    assert _value(explicit, "--lg-steps") == "16"
    # an open-loop scenario's rates become the form's rates, as loadgen ramp takes them
    scen.write_text('name = "t"\n[load]\nmode = "open"\nrates = [0.5, 2]\narrival = "gamma"\nburstiness = 2\n')
    args = locust_argv(["--url", "http://h:1", "--scenario", str(scen)])
    assert _value(args, "--lg-rates") == "0.5,2" and "--lg-steps" not in args


@pytest.mark.slow
def test_headless_ramp_walks_the_steps_and_exports_metrics(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory("--profile", "tiny")
    out = tmp_path / "reports"
    cmd = [
        sys.executable, "-m", "locust", "-f", "loadgen/locustfile.py", "--headless", "--host", sim.url,
        "--lg-steps", "1,3", "--lg-step-seconds", "1.5", "--lg-warmup-seconds", "0.5", "--lg-max-tokens", "16",
        "--lg-out", str(out), "--no-telemetry", "--only-summary",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = list(out.iterdir())
    events = [json.loads(x) for x in (run / "steps.jsonl").read_text().splitlines()]
    starts = [e for e in events if e["event"] == "start"]
    assert [e["concurrency"] for e in starts] == [1, 3]
    assert [e["reason"] for e in events if e["event"] == "end"] == ["duration", "duration"]
    summary = json.loads((run / "summary.json").read_text())
    assert [s["requests_ok"] > 0 for s in summary["steps"]] == [True, True]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["kind"] == "locust-ramp"
    # the one manifest shape, as loadgen ramp writes it (loadgen.spec.options.run_manifest)
    assert {"kind", "label", "run_id", "options", "plan", "scenario", "slo", "argv"} <= set(manifest)
    opts = manifest["options"]
    assert opts["url"] == sim.url and opts["concurrency"] == [1, 3] and opts["max_tokens"] == 16
    assert opts["step_seconds"] == 1.5 and opts["warmup_seconds"] == 0.5 and "api_key" not in opts
    assert [p["concurrency"] for p in manifest["plan"]] == [1, 3]
    assert summary["model"] == opts["model"] and summary["url"] == sim.url


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--lg-steps", "1,0", "--lg-steps '1,0': every value must be a whole number above 0"),
        ("--lg-extra-body", "[1]", "--lg-extra-body '[1]': expected a JSON object"),
        ("--lg-slo", "ttft=fast", "--lg-slo 'ttft=fast'"),
    ],
)
def test_headless_bad_option_exits_with_the_option_named(tmp_path: Path, flag: str, value: str, message: str) -> None:
    cmd = [
        sys.executable, "-m", "locust", "-f", "loadgen/locustfile.py", "--headless", "--host", "http://127.0.0.1:9",
        "--lg-out", str(tmp_path / "reports"), "--no-telemetry", flag, value,
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "reports").exists()  # nothing started, no run directory
