"""One model, two clocks (issue 28): ``loadgen predict`` on the virtual clock and a real ``loadgen ramp``
against ``loadgen sim`` serving the same deployment over HTTP agree within 5 % on output tok/s at
1 and 8 users, on one user's TTFT and TPOT, and on the decode step of eight (ITL p50); eight users'
mean TPOT within 10 % (their TTFT depends on the phases the client's jitter gives them).
The ramp sends what ``predict`` assumes: 1,000-token prompts, 128 output tokens forced
(``ignore_eos``), its users started together; predict is given the prompt length the server counted
and the client's own turns between a response and the next request, as the run measured them (a
few ms on this machine: they decide how a closed loop's prefills fall between its decodes)."""

from __future__ import annotations

import itertools
import json
import statistics
import subprocess
from pathlib import Path
from typing import Any

import pytest

from loadgen.predict.deploy import parse_deployment, predict
from tests.conftest import loadgen_cmd

# alone (tests/conftest.py): wall-clock step times on this machine, compared to 5 %
pytestmark = [pytest.mark.slow, pytest.mark.exclusive]

PROFILE = "h200-llama-8b"


def _gaps(run_dir: Path) -> list[float]:
    """Seconds from each request's end to its user's next send."""
    by_user: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for line in (run_dir / "requests-w0.jsonl").read_text().splitlines():
        r = json.loads(line)
        by_user.setdefault((r["step"], r["user"]), []).append(r)
    out = []
    for recs in by_user.values():
        recs.sort(key=lambda r: r["sent_ns"])
        out += [(b["sent_ns"] - a["end_ns"]) / 1e9 for a, b in itertools.pairwise(recs)]
    return out


def test_predict_lands_where_a_real_ramp_against_the_same_deployment_lands(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory("--profile", PROFILE, "--startup-s", "0")
    args = ["ramp", "--url", sim.url, "--concurrency", "1,8", "--context-tokens", "1000", "--max-tokens", "128",
            "--extra-body", "ignore_eos=true", "--warmup-seconds", "1.5", "--step-seconds", "5", "--no-telemetry",
            "--out", str(tmp_path / "out")]  # fmt: skip
    done = subprocess.run(loadgen_cmd(*args), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = Path(done.stdout.strip().splitlines()[-1])
    measured = json.loads((run_dir / "summary.json").read_text())["steps"]
    prompt = round(measured[0]["prompt_tokens_mean"])
    assert 900 <= prompt <= 1100, prompt  # the ramp's prompts are what predict is told
    # the client's own turn between a response's end and the user's next request, as the records show it
    gaps = _gaps(run_dir)
    assert 0 < statistics.median(gaps) < 0.05, gaps
    rows = predict([parse_deployment(f"profile={PROFILE}")], concurrencies=[1, 8], input_tokens=prompt,
                   output_tokens=128, client_gaps_s=gaps)["rows"]  # fmt: skip
    (one, eight), (p_one, p_eight) = measured, rows
    for got, want in ((one, p_one), (eight, p_eight)):
        assert got["valid"] and got["requests_ok"] >= 5, got
        assert got["output_tok_s"] == pytest.approx(want["output_tok_s"], rel=0.05), (got["concurrency"], "tok/s")
    # one user: every token one decode step, the first one prefill
    assert one["tpot_ms"]["p50"] == pytest.approx(p_one["tpot_ms"]["p50"], rel=0.05)
    assert one["ttft_ms"]["p50"] == pytest.approx(p_one["ttft_ms"]["p50"], rel=0.05)
    # eight users: the gap between chunks (ITL p50, the decode step of eight) is the predicted one.
    # TTFT and TPOT at C=8 depend on how the users' prefills fall between each other's decodes: the
    # first step's user carries over into the second out of phase with the seven new ones (predict
    # runs the steps as the ramp does, forecast.run_ramp), and the client's own turns, a few ms that
    # vary, move the phases (predict draws them from the ones this run measured). TTFT p50 then has
    # modes (measured over five runs 168-232 ms; predicted over eight seeds 203-234): the mean TPOT,
    # which every phase moves by less, is held to 10 %; TTFT at C=8 is not held (docs/simulator.md)
    assert eight["itl_ms"]["p50"] == pytest.approx(p_eight["itl_ms"]["p50"], rel=0.05)
    assert eight["tpot_ms"]["mean"] == pytest.approx(p_eight["tpot_ms"]["mean"], rel=0.10)
