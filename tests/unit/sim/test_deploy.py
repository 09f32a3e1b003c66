"""``loadgen predict`` (issue 28): a deployment's ramp on the virtual clock, judged against what the
step model knows exactly (one user's TPOT is one decode step at its context, its TTFT one prefill),
conservation in an open loop, the start-up check's words, and the deployment text's errors."""

from __future__ import annotations

import json
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
