"""``loadgen predict`` (issue 28): a deployment's ramp on the virtual clock, judged against what the
step model knows exactly (one user's TPOT is one decode step at its context, its TTFT one prefill),
conservation in an open loop, the start-up check's words, and the deployment text's errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from loadgen.predict.deploy import main, parse_deployment, predict
from loadgen.sim.model import StepModel
from loadgen.sim.profile import ProfileError


def test_one_user_sees_one_decode_step_per_token_and_one_prefill_before_the_first() -> None:
    dep = parse_deployment("profile=h200-llama-8b")
    rows = predict([dep], concurrencies=[1], input_tokens=1000, output_tokens=256)["rows"]
    (row,) = rows
    model = StepModel(dep.profile)
    # alone on the server, every step is a decode of one request; its context grows from 1,000 to
    # 1,255 tokens, and the step cost is linear in it: the mean step is the one at the mean context
    assert row["tpot_ms"]["p50"] == pytest.approx(model.decode(1, 1000 + 128).duration_s * 1e3, rel=1e-3)
    assert row["ttft_ms"]["p50"] == pytest.approx(model.prefill(1000, 1000 * 1001 / 2).duration_s * 1e3, rel=1e-3)
    assert row["output_tok_s"] == pytest.approx(row["per_request_tok_s"], rel=0.05)
    assert row["predicted"] is True and row["valid"] and row["requests_ok"] >= 5


def test_rows_carry_summary_names_and_deployments_stand_side_by_side() -> None:
    deps = [
        parse_deployment("label=one H200,profile=h200-llama-8b"),
        parse_deployment("label=one H100,profile=h200-llama-8b,hardware=h100"),
    ]
    result = predict(deps, concurrencies=[1, 8, 32], input_tokens=500, output_tokens=128, window_s=20)
    assert [d["deployment"] for d in result["deployments"]] == ["one H200", "one H100"]
    by = {(r["deployment"], r["concurrency"]): r for r in result["rows"]}
    assert len(by) == 6
    for r in result["rows"]:
        for key in ("output_tok_s", "ttft_ms", "tpot_ms", "e2e_ms", "kv_usage", "queue_len", "gpu_power_w"):
            assert key in r, key
        assert set(r["ttft_ms"]) == {"mean", "p50", "p90", "p99"}
    # more load, more throughput; the H100's lower bandwidth gives a slower decode at every load
    for label in ("one H200", "one H100"):
        tok = [by[(label, c)]["output_tok_s"] for c in (1, 8, 32)]
        assert tok == sorted(tok)
    for c in (1, 8, 32):
        assert by[("one H100", c)]["tpot_ms"]["p50"] > by[("one H200", c)]["tpot_ms"]["p50"]
    assert all(d["knee"] is not None and d["knee"]["reason"] for d in result["deployments"])


def test_an_open_loop_below_saturation_serves_what_arrives() -> None:
    dep = parse_deployment("profile=h200-llama-8b")
    (row,) = predict([dep], rates=[4.0], input_tokens=200, output_tokens=128, window_s=200, warmup_s=10)["rows"]
    # 4 requests/s of 128 tokens each: ~512 tok/s arrive and are served (Poisson over 200 s: ~800 requests)
    assert row["output_tok_s"] == pytest.approx(4.0 * 128, rel=0.08)
    assert row["rate"] == 4.0 and row["concurrency"] is None


def test_a_deployment_that_does_not_start_says_which_term_and_by_how_much() -> None:
    result = predict(
        [parse_deployment("model=deepseek-v3,hardware=h200"), parse_deployment("hardware=h200x8,server.tp=16")],
        concurrencies=[1],
    )
    weights, devices = result["deployments"]
    assert not weights["starts"] and weights["failure_term"] == "weights"
    assert "exceed the GPU's" in weights["failure"] and "GB by" in weights["failure"]
    assert devices["failure"] == "tensor parallelism 16 needs 16 GPUs, the hardware part has 8"
    assert result["rows"] == []


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("tp=8", "unknown key 'tp'"),
        ("model", "is not KEY=VALUE"),
        ("model=nope", "no model part 'nope'"),
        ("server.nope=1", "nope"),
    ],
)
def test_a_bad_deployment_text_names_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ProfileError, match=says):
        parse_deployment(text)


def test_the_command_writes_json_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p.json"
    code = main(["--deployment", "profile=h200-llama-8b", "--concurrency", "1,4", "--output-tokens", "64",
                 "--window-seconds", "10", "--json", str(out)])  # fmt: skip
    assert code == 0
    data = json.loads(out.read_text())
    assert [r["concurrency"] for r in data["rows"]] == [1, 4] and data["deployments"][0]["starts"]
    assert "Predicted" in capsys.readouterr().out


CHOICE_DEPLOYMENTS = [
    "label=8xH200 <fp8>,model=llama-3.3-70b-instruct,hardware=h200x8,server.tp=8,server.quantization=fp8",
    "label=4xB200 fp8,model=llama-3.3-70b-instruct,hardware=b200x8,server.tp=4,server.quantization=fp8,price=6",
    "label=one H200,model=llama-3.1-405b,hardware=h200",
]


def test_choose_plans_each_deployment_at_its_slo_and_ranks_by_what_the_target_costs() -> None:
    from loadgen.predict.deploy import choose, parse_prices

    deps = [parse_deployment(t, i) for i, t in enumerate(CHOICE_DEPLOYMENTS)]
    result = predict(deps, concurrencies=[8, 32, 128], input_tokens=1000, output_tokens=256, window_s=20.0)
    slo = {"ttft_p99_ms": 2000.0, "tpot_p99_ms": 50.0}
    choice = choose(deps, result, slo, target_rps=20.0, prices=parse_prices("h200=3.5,b200=5.2"), headroom=0.2)
    assert choice["ranked_by"].startswith("cost per hour")
    plans = {p["deployment"]: p for p in choice["plans"]}
    assert plans["one H200"]["reason"].startswith("does not start: weights")  # 811 GB on one GPU
    assert choice["plans"][-1]["deployment"] == "one H200"
    assert plans["4xB200 fp8"]["gpu_hour_cost"] == 6.0  # price= in the text beats --gpu-price's 5.2
    assert plans["8xH200 <fp8>"]["gpu_hour_cost"] == 3.5  # h200 prices the h200x8 entry
    for label in ("8xH200 <fp8>", "4xB200 fp8"):
        p, rows = plans[label], [r for r in result["rows"] if r["deployment"] == label]
        c = p["operating_point"]["concurrency"]
        # the operating point is the highest load whose rows meet every limit, and the next one does not
        within = [r for r in rows if r["ttft_ms"]["p99"] <= 2000 and r["tpot_ms"]["p99"] <= 50]
        assert c == max(r["concurrency"] for r in within)
        assert all(r["concurrency"] > c for r in rows if r not in within)
        at = next(r for r in rows if r["concurrency"] == c)
        req_s = at["requests_ok"] / at["window_s"] * 0.98 * 0.8  # union bound of two p99s, 20 % headroom
        assert p["per_replica_req_s"] == pytest.approx(req_s, rel=1e-9)
        assert p["replicas"] == math.ceil(20.0 / req_s)
        gpus = 8 if label.startswith("8x") else 4
        assert p["gpus"] == p["replicas"] * gpus
        hourly = p["gpu_hour_cost"] * gpus
        assert p["total_hour_cost"] == pytest.approx(hourly * p["replicas"])
        assert p["cost_per_million_tokens"] == pytest.approx(hourly / (p["per_replica_tok_s"] * 3600) * 1e6)
    fitting = [p for p in choice["plans"] if "reason" not in p]
    assert [p["total_hour_cost"] for p in fitting] == sorted(p["total_hour_cost"] for p in fitting)
    assert choice["best"] == fitting[0]["deployment"]


def test_the_command_chooses_and_writes_a_page_marked_predicted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.html"
    argv = [a for t in CHOICE_DEPLOYMENTS[:2] for a in ("--deployment", t)]
    argv += ["--concurrency", "8,32", "--window-seconds", "10", "--output-tokens", "128"]
    argv += ["--slo", "ttft_p99=2s,tpot_p99=50ms", "--target-rps", "5", "--gpu-price", "h200=3.5"]
    assert main([*argv, "--html", str(out)]) == 0
    text = capsys.readouterr().out
    assert "## Choice" in text and "serves it for the least" in text
    page = out.read_text(encoding="utf-8")
    assert "Predicted, not measured." in page
    assert page.count("<svg") >= 6  # throughput, TTFT, TPOT, power, tok/J, Pareto
    assert "8xH200 &lt;fp8&gt;" in page and "<fp8>" not in page  # labels escaped
    assert "cmp-pareto" in page


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--target-rps", "5"], "give --slo too"),
        (["--slo", "ttft_p99=2s", "--gpu-price", "h200"], "--gpu-price 'h200': give HARDWARE=USD_PER_GPU_HOUR"),
        (["--slo", "ttft_p99=2s", "--target-rps", "0"], "--target-rps 0: give the request rate to serve"),
        (["--deployment", "profile=h200-llama-8b,price=cheap"], "price 'cheap' is not a USD-per-GPU-hour number"),
    ],
)
def test_choice_options_that_cannot_be_used_say_why(
    extra: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--concurrency", "1", *extra]) == 2
    assert says in capsys.readouterr().err
