"""``[[tenants]]`` scenarios: what they read, the steps they make, the requests they send, and
the bad input each refused with its file, line and what to write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadgen.load.compose import base_workload, tenant_workloads
from loadgen.sim.params import BadRequest, body_priority
from loadgen.spec.options import OptionError, RampOptions, build_ramp_plan
from loadgen.workload.scenario import ScenarioError, load_scenario
from loadgen.workload.tenants import tenant_of_rank, tenant_steps

CHAT = 'name = "chat"\nseed = 3\n[prompt]\nsource = "chat"\ninput_tokens = 64\n[output]\nmax_tokens = 8\n'


def _write(tmp: Path, tenants: str, load: str = 'mode = "closed"\nconcurrency = [8, 16]\n') -> Path:
    (tmp / "chat.toml").write_text(CHAT)
    path = tmp / "shared.toml"
    path.write_text(f'name = "shared"\n[load]\n{load}\n{tenants}')
    return path


def test_users_per_step_make_the_steps_and_each_request_carries_its_tenant(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        '[[tenants]]\nname = "chat"\nscenario = "chat.toml"\nusers = 2\npriority = 0\nslo = "ttft_p99=2s"\n'
        'headers = { "x-tenant" = "chat" }\nbody = { user = "chat-app" }\n\n'
        '[[tenants]]\nname = "batch"\nusers = [0, 4, 10]\npriority = 1\n',
    )
    s = load_scenario(path)
    assert [t.name for t in s.tenants] == ["chat", "batch"]
    assert s.tenants[0].slo == {"ttft_p99_ms": 2000.0} and s.tenants[0].scenario == str(tmp_path / "chat.toml")
    opts = RampOptions(url="http://x", model="m", scenario=str(path))
    base = base_workload(opts)
    plan = build_ramp_plan(opts, base)
    assert [p.concurrency for p in plan] == [2, 6, 12]
    assert [p.tenants for p in plan] == [
        (("chat", 2.0), ("batch", 0.0)),
        (("chat", 2.0), ("batch", 4.0)),
        (("chat", 2.0), ("batch", 10.0)),
    ]
    assert plan[1].describe()["tenants"] == {"chat": 2.0, "batch": 4.0}
    workloads = tenant_workloads(base)
    spec, _ = workloads["chat"].session(0).next(warmup=False)
    assert spec.tenant == "chat" and spec.headers == {"x-tenant": "chat"}
    assert spec.extra["priority"] == 0 and spec.extra["user"] == "chat-app"
    batch, _ = workloads["batch"].session(0).next(warmup=False)
    assert batch.tenant == "batch" and batch.headers is None and batch.extra["priority"] == 1
    # the users of a step, in rank order: the first tenant's first
    assert [tenant_of_rank(plan[1].tenants or (), r) for r in range(7)] == ["chat"] * 2 + ["batch"] * 4 + [None]


def test_shares_divide_the_steps_load_with_the_largest_remainder(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        '[[tenants]]\nname = "a"\nshare = 0.5\n\n[[tenants]]\nname = "b"\nshare = 0.3\n\n'
        '[[tenants]]\nname = "c"\nshare = 0.2\n',
        'mode = "closed"\nconcurrency = [1, 7, 10]\n',
    )
    s = load_scenario(path)
    steps = tenant_steps(s.tenants, [1.0, 7.0, 10.0], closed=True)
    assert steps == [
        (("a", 1.0), ("b", 0.0), ("c", 0.0)),
        (("a", 4.0), ("b", 2.0), ("c", 1.0)),  # 3.5, 2.1, 1.4: the 7th user to the largest remainder
        (("a", 5.0), ("b", 3.0), ("c", 2.0)),
    ]
    assert all(sum(v for _, v in step) == total for step, total in zip(steps, (1, 7, 10), strict=True))
    # --concurrency gives the loads the shares divide; open loop splits the rate as it is
    plan = build_ramp_plan(RampOptions(url="http://x", model="m", scenario=str(path), concurrency=[20]), base_workload(
        RampOptions(url="http://x", model="m", scenario=str(path))))  # fmt: skip
    assert [p.tenants for p in plan] == [(("a", 10.0), ("b", 6.0), ("c", 4.0))]
    assert tenant_steps(s.tenants, [5.0], closed=False) == [(("a", 2.5), ("b", 1.5), ("c", 1.0))]


@pytest.mark.parametrize(
    ("tenants", "load", "line", "says"),
    [
        (
            '[[tenants]]\nname = "a"\nshare = 0.5\n\n[[tenants]]\nname = "b"\nshare = 0.4\n',
            'mode = "closed"\nconcurrency = [10]\n',
            None,
            "the tenants' shares add up to 0.9 (a 0.5, b 0.4), not 1",
        ),
        (
            '[[tenants]]\nname = "a"\nusers = [1, 2]\n\n[[tenants]]\nname = "b"\nusers = [1, 2, 3]\n',
            'mode = "closed"\n',
            None,
            "per-step loads have different lengths [2, 3]",
        ),
        ('[[tenants]]\nname = "a"\nusers = 2\npriorty = 1\n', 'mode = "closed"\n', 8, "did you mean"),
        ('[[tenants]]\nname = "a"\nusers = 2\npriority = "high"\n', 'mode = "closed"\n', 8, "must be an integer"),
        ('[[tenants]]\nname = "a"\nrate = 2.0\n', 'mode = "closed"\n', None, "tenant a has a rate but [load] mode"),
        ('[[tenants]]\nname = "a"\nusers = 2\nshare = 0.5\n', 'mode = "closed"\n', 6, "one load"),
        ('[[tenants]]\nname = "a"\nusers = 2\nslo = "ttft_p99=2"\n', 'mode = "closed"\n', 8, "no unit"),
        ('[[tenants]]\nname = "a b"\nusers = 2\n', 'mode = "closed"\n', 6, "letters, digits"),
        ('[[tenants]]\nname = "a"\nusers = 2\nscenario = "nope.toml"\n', 'mode = "closed"\n', 8, "no such scenario"),
    ],
)
def test_bad_tenants_are_refused_with_the_file_line_and_what_to_write(
    tmp_path: Path, tenants: str, load: str, line: int | None, says: str
) -> None:
    path = _write(tmp_path, tenants, load)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    text = str(err.value)
    assert text.startswith(str(path)) and says in text, text
    if line is not None:
        assert text.startswith(f"{path}:{line}:"), text


def test_flags_that_contradict_the_tenants_loads_are_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, '[[tenants]]\nname = "a"\nusers = [1, 2]\n')
    base = base_workload(RampOptions(url="http://x", model="m", scenario=str(path)))
    with pytest.raises(OptionError, match="the flag divides only shares"):
        build_ramp_plan(RampOptions(url="http://x", model="m", scenario=str(path), concurrency=[4]), base)
    with pytest.raises(OptionError, match="are closed loop"):
        build_ramp_plan(RampOptions(url="http://x", model="m", scenario=str(path), rates=[2.0]), base)


def test_the_simulated_server_takes_an_integer_priority_only() -> None:
    assert body_priority({}) == 0 and body_priority({"priority": -3}) == -3
    for bad in ("high", 1.5, True):
        with pytest.raises(BadRequest, match="priority must be an integer"):
            body_priority({"priority": bad})


def _tenants_summary(tmp: Path) -> dict:
    from loadgen.analysis.pipeline import summarise
    from tests.unit.test_contracts import tenants_run

    _, summary = summarise(tenants_run(tmp / "run"))
    return dict(summary)


def test_tenant_thresholds_judge_that_tenants_figures_and_name_it(tmp_path: Path) -> None:
    from loadgen.analysis.thresholds import evaluate
    from loadgen.spec.gates import ThresholdError, parse_thresholds

    summary = _tenants_summary(tmp_path)
    ts = parse_thresholds("tenant:chat:ttft_p99>500ms,tenant:batch:ttft_p99>500ms,ttft_p99>2s,tenant:ghost:e2e_p99>1s")
    assert [t.tenant for t in ts] == ["chat", "batch", None, "ghost"]
    results = {r["threshold"]: r for r in evaluate(summary, ts)}
    chat = results["tenant:chat:ttft_p99>500ms"]
    assert chat["status"] == "fail" and chat["step"] == 1
    assert chat["message"].startswith("tenant chat ttft_p99 ") and "> 500 ms" in chat["message"]
    assert [j["breached"] for j in chat["steps"]] == [False, True]
    assert results["tenant:batch:ttft_p99>500ms"]["status"] == "pass"  # judged where batch sent
    assert [j["step"] for j in results["tenant:batch:ttft_p99>500ms"]["steps"] if j["value"] is not None] == [1]
    assert results["ttft_p99>2s"]["status"] == "pass"  # the step as a whole: both tenants' requests
    ghost = results["tenant:ghost:e2e_p99>1s"]
    assert (
        ghost["status"] == "no_data" and "no tenant 'ghost' in this run (its tenants: batch, chat)" in ghost["message"]
    )
    for bad, says in (
        ("tenant:chat:run:error_rate>1%", "judged per step; drop 'run:'"),
        ("tenant:chat:invalid_steps>0", "counts over the run, not per tenant"),
        ("tenant::ttft_p99>1s", "cannot read it"),
    ):
        with pytest.raises(ThresholdError, match=says):
            parse_thresholds(bad)


def test_junit_has_a_case_per_step_and_tenant_slo(tmp_path: Path) -> None:
    import xmlschema

    from loadgen.report.junit import junit_xml
    from tests.unit.test_thresholds_junit import XSD

    summary = _tenants_summary(tmp_path)
    xml = junit_xml(summary).decode()
    xmlschema.XMLSchema(str(XSD)).validate(xml)
    assert 'name="step 0 (C=2): tenant chat SLO ttft_p99=500ms" time="0" />' in xml
    assert 'name="step 1 (C=6): tenant chat SLO ttft_p99=500ms"' in xml and 'type="tenant SLO"' in xml
    assert xml.count("tenant batch SLO") == 1  # batch asked for nothing in step 0: nothing to judge
    assert 'failures="1"' in xml


def test_scenario_check_lists_each_tenant_and_the_steps_they_make(tmp_path: Path) -> None:
    import io

    from loadgen.workload.cli import check_main

    path = _write(
        tmp_path,
        '[[tenants]]\nname = "chat"\nscenario = "chat.toml"\nusers = 2\npriority = 0\nslo = "ttft_p99=2s"\n'
        'headers = { "x-tenant" = "chat" }\n\n[[tenants]]\nname = "batch"\nusers = [0, 4]\n',
    )
    out = io.StringIO()
    assert check_main(str(path), out=out) == 0
    text = out.getvalue()
    assert "load: closed loop, users 2, 6 a step, split among 2 tenants (below)" in text
    assert f"tenant chat: {tmp_path / 'chat.toml'}; users 2, 2; priority 0; slo ttft_p99=2s; headers x-tenant" in text
    assert "tenant batch: this file's workload; users 0, 4" in text


def test_the_simulators_rate_limit_is_a_token_bucket_per_tenant() -> None:
    from loadgen.sim.ratelimit import RateLimits

    limits = RateLimits({"batch": 2.0})
    assert [limits.take("batch", 0.0) for _ in range(2)] == [0.0, 0.0]  # a second's worth at once
    assert limits.take("batch", 0.0) == pytest.approx(0.5)  # then one every 0.5 s
    assert limits.take("batch", 0.5) == 0.0 and limits.take("batch", 0.5) > 0
    assert all(limits.take("chat", 0.0) == 0.0 for _ in range(10))  # no limit of its own


def test_a_tenant_over_its_rate_limit_gets_429_with_retry_after(sim_factory: Any) -> None:
    import urllib.error
    import urllib.request

    sim = sim_factory("--profile", "tiny", "--rate-limit", "batch=1")
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}'

    def post(tenant: str) -> tuple[int, str | None]:
        req = urllib.request.Request(
            f"{sim.url}/v1/chat/completions",
            data=body,
            headers={"x-tenant": tenant, "content-type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, None
        except urllib.error.HTTPError as err:
            return err.code, err.headers.get("Retry-After")

    assert post("batch") == (200, None)
    status, retry = post("batch")
    assert status == 429 and retry is not None and int(retry) >= 1
    assert [post("chat")[0] for _ in range(3)] == [200, 200, 200]


def test_the_live_page_has_each_tenants_figures_as_the_report(tmp_path: Path) -> None:
    from loadgen.analysis.pipeline import summarise
    from loadgen.webui.live import LiveRun
    from tests.unit.test_contracts import tenants_run

    run_dir = tenants_run(tmp_path / "run")
    live = LiveRun(run_dir, prefer_report=False).payload()
    _, summary = summarise(run_dir)
    assert live["source"] == "live"
    for shown, row in zip(live["steps"], summary["steps"], strict=True):
        for name, t in row["tenants"].items():
            page = shown["tenants"][name]
            assert page["ok"] == t["requests_ok"] and page["demand"] == t["demand"]
            assert page["ttft_p99"] == t["ttft_ms"]["p99"] and page["tok_s"] == t["output_tok_s"]
            assert page["slo_breaks"] == t["slo_breaks"] and page["share"] == t["token_share"]
        assert shown["fairness"] == row["fairness"]
    assert live["steps"][1]["tenants"]["chat"]["slo_breaks"] == ["ttft_p99 900 ms > 500 ms"]


def test_open_loop_tenants_each_draw_their_own_arrivals_merged_in_time(tmp_path: Path) -> None:
    from loadgen.load.compose import compose

    path = _write(
        tmp_path,
        '[[tenants]]\nname = "chat"\nscenario = "chat.toml"\nrate = 8.0\n\n'
        '[[tenants]]\nname = "batch"\nrate = [0, 2]\n',
        'mode = "open"\nrates = [1.0]\nstep_seconds = 30\n',
    )
    opts = RampOptions(url="http://127.0.0.1:9", model="m", scenario=str(path), out=str(tmp_path / "out"))
    run = compose(opts, "ramp")
    assert [(p.rate, p.tenants) for p in run.plan] == [
        (8.0, (("chat", 8.0), ("batch", 0.0))),
        (10.0, (("chat", 8.0), ("batch", 2.0))),
    ]
    step = run.plan[1]
    arrivals = list(run.state.arrivals_for(step, 0, step.rate, 30.0, 1))
    times = [t for t, _ in arrivals]
    assert times == sorted(times) and all(0 <= t < 30e9 for t in times)
    by = {name: [s for _, s in arrivals if s.tenant == name] for name in ("chat", "batch")}
    # Poisson counts over 30 s: 240 and 60 expected; 5 sigma either way
    assert abs(len(by["chat"]) - 240) < 5 * 240**0.5 and abs(len(by["batch"]) - 60) < 5 * 60**0.5
    assert all(s.intended_ns is not None for s in by["chat"] + by["batch"])
    assert {s.tenant for _, s in run.state.arrivals_for(run.plan[0], 0, 8.0, 30.0, 0)} == {"chat"}  # alone


def test_tenant_flags_split_the_steps_load_evenly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from loadgen.cli.parser import build_parser
    from loadgen.cli.ramp_options import ramp_options
    from loadgen.spec.options import parse_tenant_flags

    (tmp_path / "chat.toml").write_text(CHAT)
    (tmp_path / "other.toml").write_text(CHAT.replace('"chat"', '"other"', 1))
    monkeypatch.chdir(tmp_path)
    argv = ["ramp", "--url", "http://x", "--tenant", "chat=chat.toml", "--tenant", "other=other.toml",
            "--concurrency", "4,9"]  # fmt: skip
    opts = ramp_options(build_parser().parse_args(argv), argv)
    tenants = opts.tenants
    assert tenants == (("chat", "chat.toml"), ("other", "other.toml"))
    base = base_workload(opts)
    plan = build_ramp_plan(opts, base)
    assert [p.tenants for p in plan] == [(("chat", 2.0), ("other", 2.0)), (("chat", 5.0), ("other", 4.0))]
    assert tenant_workloads(base)["other"].scenario.name == "other"
    for bad, says in (
        (["chat"], "write NAME=SCENARIO"),
        (["a=chat.toml", "a=other.toml"], "tenant a is given twice"),
    ):
        with pytest.raises(OptionError, match=says):
            parse_tenant_flags(bad)
    with pytest.raises(OptionError, match="no such scenario file"):
        base_workload(RampOptions(url="http://x", model="m", concurrency=[2], tenants=(("x", "nope.toml"),)))
    with pytest.raises(OptionError, match="--tenant and --scenario"):
        chat = str(tmp_path / "chat.toml")
        base_workload(RampOptions(url="http://x", model="m", concurrency=[2], tenants=tenants, scenario=chat))


def test_where_tenants_cannot_run_yet_the_run_is_refused_before_its_directory(tmp_path: Path) -> None:
    from loadgen.load.compose import compose

    path = _write(tmp_path, '[[tenants]]\nname = "a"\nusers = 2\n')
    out = tmp_path / "out"
    for kind, extra, says in (
        ("ramp", {"workers": 2}, "drop --workers/--master/--find-knee"),
        ("ramp", {"find_knee": True}, "drop --workers/--master/--find-knee"),
        ("locust", {}, "run it as a ramp"),
    ):
        opts = RampOptions(url="http://x", model="m", scenario=str(path), out=str(out), **extra)  # type: ignore[arg-type]
        with pytest.raises(OptionError, match=says):
            compose(opts, kind)
    with pytest.raises(OptionError, match="one process for now"):
        compose(RampOptions(url="http://x", model="m", scenario=str(path), out=str(out)), "locust-ramp",
                records_elsewhere=True)  # fmt: skip
    assert not out.exists()
