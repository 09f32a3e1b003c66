"""The twin's fit on synthetic run directories with known parameters (no server, no jitter).

``synth_run`` plays a closed-loop ramp against the engine model of docs/twin.md on exact times:
prefill batches of every waiting request (p0 + p1 * tokens / 1000 ms), decode steps of every
running request (a + b * n + c * K / 1000 ms), one chunk per request per decode step, a user sends
its next request when the previous one ends. The fit must recover the parameters within their
uncertainty (or say they are not determined).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from loadgen.analysis.load import load_run
from loadgen.sim.acceptance import acceptance_cdf
from loadgen.sim.engine import Engine
from loadgen.sim.profile import ProfileError, apply_overrides, load_profile
from loadgen.twin.cli import calibrate_main
from loadgen.twin.emit import apply_sets, profile_text
from loadgen.twin.fit import _fit_prefill, fit, renewal_steps
from loadgen.twin.observe import observe

T0 = 1_800_000_000_000_000_000


@dataclass
class Truth:
    a_ms: float = 5.0
    b_ms: float = 0.05
    c_ms: float = 0.0  # per 1k tokens in KV
    p0_ms: float = 20.0
    p1_ms: float = 2.0  # per 1k prefilled tokens
    max_running: int = 10_000
    bend_ms: float = 0.0  # + bend_ms * sqrt(n): a decode step that bends with the batch (MoE)
    tau: float = 1.0  # speculative decoding: mean tokens a decode step commits (truncated geometric)
    depth: int = 0
    natural_median: float = 0.0  # > 0: a request stops at a log-normal length (spread 0.8) below the cap
    label_taus: tuple[tuple[str, float], ...] = ()  # workload labels drawn evenly, each with its own tau
    slow_steps: tuple[tuple[int, float], ...] = ()  # (step, factor): the host ran that step's engine slower


def synth_run(
    path: Path,
    truth: Truth,
    concurrency: list[int],
    *,
    step_s: float = 3.0,
    max_tokens: int = 64,
    prompt_tokens: list[int] | None = None,
    stream: bool = True,
    seed: int = 0,
    send_gap_ms: float = 0.0,
) -> Path:
    """Write a run directory of a closed-loop ramp over ``concurrency`` against ``truth``.
    ``send_gap_ms``: a step's chunks leave one stream after another, this far apart (a server whose
    API process sends slowly: vLLM's on a busy host)."""
    gap = send_gap_ms / 1e3
    rng = np.random.default_rng(seed)
    accept = acceptance_cdf(truth.tau, truth.depth)
    by_label = {label: acceptance_cdf(tau, truth.depth) for label, tau in truth.label_taus}
    labels = [label for label, _ in truth.label_taus] or [""]

    def natural_target() -> int:
        if truth.natural_median <= 0:
            return max_tokens
        return min(max_tokens, max(2, int(truth.natural_median * np.exp(0.8 * rng.standard_normal()))))

    prompts = prompt_tokens or [60]
    path.mkdir(parents=True, exist_ok=True)
    recs: list[dict[str, object]] = []
    steps: list[dict[str, object]] = []
    t = 0.0  # seconds since T0
    rid = 0
    for si, conc in enumerate(concurrency):
        slow = dict(truth.slow_steps).get(si, 1.0)
        start = t
        steps.append(
            {"step": si, "event": "start", "t_ns": T0 + int(start * 1e9), "concurrency": conc, "warmup_s": 0.5}
        )
        steps.append({"step": si, "event": "steady", "t_ns": T0 + int((start + 0.5) * 1e9)})
        end = start + step_s
        waiting: list[dict[str, object]] = []
        running: list[dict[str, object]] = []

        def new_request(now: float, user: int, si: int = si) -> dict[str, object]:
            nonlocal rid
            rid += 1
            return {
                "id": f"r{rid}",
                "user": user,
                "sent": now,
                "prompt": int(rng.choice(prompts)),
                "chunks": [],
                "tokens": [],
                "target": natural_target(),
                "step": si,
                "label": labels[int(rng.integers(len(labels)))],
            }

        waiting = [new_request(t, u) for u in range(conc)]
        while waiting or running:
            if waiting and len(running) < truth.max_running:
                batch = waiting[: truth.max_running - len(running)]
                del waiting[: len(batch)]
                tokens = sum(int(r["prompt"]) for r in batch)  # type: ignore[misc]
                t += slow * (truth.p0_ms + truth.p1_ms * tokens / 1000.0) / 1e3
                for i, r in enumerate(batch):
                    r["chunks"].append(t + i * gap)  # type: ignore[attr-defined]
                    r["tokens"].append(1)  # type: ignore[attr-defined]
                    running.append(r)
                continue
            n = len(running)
            ctx = sum(int(r["prompt"]) + len(r["chunks"]) for r in running)  # type: ignore[arg-type, misc]
            t += slow * (truth.a_ms + truth.b_ms * n + truth.bend_ms * n**0.5 + truth.c_ms * ctx / 1000.0) / 1e3
            done = []
            for i, r in enumerate(running):
                have = sum(r["tokens"])  # type: ignore[call-overload]
                cdf = by_label.get(str(r["label"]), accept)
                drawn = int(np.searchsorted(cdf, rng.random(), side="right")) + 1
                r["chunks"].append(t + i * gap)  # type: ignore[attr-defined]
                r["tokens"].append(min(drawn, int(r["target"]) - have))  # type: ignore[attr-defined, call-overload]
                if have + r["tokens"][-1] >= int(r["target"]):  # type: ignore[index, call-overload]
                    done.append(r)
            for r in done:
                running.remove(r)
                r["end"] = t
                recs.append(r)
                if t < end:
                    waiting.append(new_request(t, int(r["user"])))  # type: ignore[call-overload]
        steps.append({"step": si, "event": "end", "t_ns": T0 + int(t * 1e9), "reason": "duration"})
    with (path / "requests-w0.jsonl").open("w") as fh:
        for r in recs:
            sent = T0 + int(float(r["sent"]) * 1e9)  # type: ignore[arg-type]
            chunks = [T0 + int(c * 1e9) - sent for c in r["chunks"]]  # type: ignore[attr-defined]
            rec = {
                "id": r["id"],
                "worker": "w0",
                "step": r["step"],
                "user": r["user"],
                "intended_ns": sent,
                "sent_ns": sent,
                "first_chunk_ns": sent + chunks[0] if stream else None,
                "end_ns": T0 + int(float(r["end"]) * 1e9),  # type: ignore[arg-type]
                "chunk_offsets_ns": chunks if stream else [],
                "chunk_tokens": r["tokens"] if stream else [],
                "prompt_tokens": r["prompt"],
                "output_tokens": sum(r["tokens"]),  # type: ignore[call-overload]
                "tokens_source": "usage",
                "finish_reason": "stop" if int(r["target"]) < max_tokens else "length",  # type: ignore[call-overload]
                "status": 200,
                "error_class": None,
                "error": None,
                "endpoint": "chat",
                "stream": stream,
                "max_tokens": max_tokens,
                "context_tokens": 60,
                "cached_tokens": 0,
                "source": r["label"] or None,
            }
            fh.write(json.dumps(rec) + "\n")
    with (path / "steps.jsonl").open("w") as fh:
        for s in steps:
            fh.write(json.dumps(s) + "\n")
    options = {
        "url": "http://x",
        "model": "m",
        "concurrency": concurrency,
        "step_seconds": step_s,
        "warmup_seconds": 0.5,
        "max_tokens": max_tokens,
        "stream": stream,
    }
    (path / "manifest.json").write_text(json.dumps({"kind": "ramp", "run_id": path.name, "options": options}))
    return path


def _fit(path: Path):  # type: ignore[no-untyped-def]
    return fit(observe([load_run(path)]))


def test_exact_recovery_of_decode_and_prefill(tmp_path: Path) -> None:
    truth = Truth(a_ms=5.0, b_ms=0.05, p0_ms=20.0, p1_ms=2.0)
    run = synth_run(tmp_path / "run", truth, [1, 4, 16, 32], prompt_tokens=[60, 500, 2000])
    result = _fit(run)
    p = result.params
    # decode: a + b * n (+ c * K, which the fit must find to be ~0 or fold in)
    ctx = result.measured["ctx_per_request_tokens"]
    per_req = p["decode_ms_per_request"].value + p["decode_ms_per_1k_ctx"].value * ctx / 1000
    assert p["decode_ms_fixed"].value + per_req * 1 == pytest.approx(truth.a_ms + truth.b_ms, rel=1e-3)
    assert per_req == pytest.approx(truth.b_ms, rel=0.02)
    assert p["prefill_ms_fixed"].value == pytest.approx(truth.p0_ms, rel=1e-3)
    assert p["prefill_ms_per_1k_tokens"].value == pytest.approx(truth.p1_ms, rel=1e-2)
    assert not p["prefill_ms_per_1k_tokens"].assumed
    unc = p["prefill_ms_fixed"].uncertainty
    assert unc is not None and abs(p["prefill_ms_fixed"].value - truth.p0_ms) <= 3 * unc + 1e-6
    assert p["tokens_per_chunk"].value == 1.0 and p["spec_depth"].value == 0


def test_context_term_is_separated_when_contexts_vary(tmp_path: Path) -> None:
    # contexts 40x apart: the twin serves c as a term of its own, so its simulator's decode step
    # follows the context at lengths the run never had (a --context-tokens what-if)
    from loadgen.sim.profile import load_profile_file

    truth = Truth(a_ms=6.0, b_ms=0.01, c_ms=0.5)
    run = synth_run(tmp_path / "run", truth, [2, 8, 16], prompt_tokens=[100, 4000])
    result = _fit(run)
    p = result.params
    assert not p["decode_ms_per_1k_ctx"].assumed
    assert p["decode_ms_per_1k_ctx"].value == pytest.approx(truth.c_ms, rel=0.02)
    assert p["decode_ms_fixed"].value == pytest.approx(truth.a_ms, rel=0.01)
    assert result.measured["ctx_term_served"] is True
    path = tmp_path / "twin.toml"
    path.write_text(profile_text(result, name="twin", served_name="m"))
    engine = Engine(load_profile_file(path))
    for n, ctx_sum in ((1, 100.0), (8, 8 * 4000.0), (16, 16 * 20_000.0)):
        true_ms = truth.a_ms + truth.b_ms * n + truth.c_ms * ctx_sum / 1000
        assert engine.timing.decode(n, ctx_sum).duration_s * 1e3 == pytest.approx(true_ms, rel=0.02), (n, ctx_sum)


def test_context_term_is_folded_in_at_one_context_length(tmp_path: Path) -> None:
    # one prompt length: context grows with the batch, so c is folded in at the run's context per
    # request (the twin's step matches the run's, not other context lengths), and it says so
    from loadgen.sim.profile import load_profile_file

    truth = Truth(a_ms=6.0, b_ms=0.01, c_ms=0.5)
    result = _fit(synth_run(tmp_path / "run", truth, [2, 8, 16], prompt_tokens=[1000]))
    assert result.measured["ctx_term_served"] is False
    assert any("folded into the per-request term" in line for line in result.cannot_fit), result.cannot_fit
    path = tmp_path / "twin.toml"
    path.write_text(profile_text(result, name="twin", served_name="m"))
    assert "decode_ms_per_1k_ctx = 0.0" in path.read_text()
    engine = Engine(load_profile_file(path))
    ctx = result.measured["ctx_per_request_tokens"]
    for n in (2, 8, 16):
        true_ms = truth.a_ms + truth.b_ms * n + truth.c_ms * n * ctx / 1000
        assert engine.timing.decode(n, 1e9).duration_s * 1e3 == pytest.approx(true_ms, rel=0.02), n


def test_max_running_is_found_from_the_batch_plateau(tmp_path: Path) -> None:
    truth = Truth(max_running=8)
    result = _fit(synth_run(tmp_path / "run", truth, [2, 4, 16], step_s=2.0))
    mr = result.params["max_running_requests"]
    assert not mr.assumed and mr.value == 8


def test_one_step_says_what_it_cannot_fit_and_keeps_the_rest(tmp_path: Path) -> None:
    result = _fit(synth_run(tmp_path / "run", Truth(), [4], step_s=2.0))
    assert any("only 1 step" in c for c in result.cannot_fit)
    assert result.params["decode_ms_per_request"].assumed
    assert result.params["decode_ms_fixed"].value == pytest.approx(5.0 + 0.05 * 4, rel=1e-3)
    assert "prefill_ms_fixed" in result.params
    text = profile_text(result, name="twin", served_name="m")
    assert "cannot fit" in text and "[timing]" in text


def test_no_streaming_writes_what_it_can(tmp_path: Path) -> None:
    run = synth_run(tmp_path / "run", Truth(), [1, 4], step_s=1.0, stream=False)
    out = tmp_path / "twin.toml"
    assert calibrate_main([str(run), "-o", str(out)]) == 0
    report = json.loads(out.with_suffix(".fit.json").read_text())
    assert any("no streamed output" in c for c in report["cannot_fit"])
    assert "decode_ms_fixed" not in report["params"]
    assert "natural_len_median" in report["params"]
    from loadgen.sim.profile import load_profile_file

    prof = load_profile_file(out)  # the written file is a valid profile even so
    assert prof.timing is not None


def test_corrupt_run_dir_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "requests-w0.jsonl").write_text('{"id": "x", "sent_ns": "not a number"}\n')
    assert calibrate_main([str(bad), "-o", str(tmp_path / "t.toml")]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "error:" in err
    assert calibrate_main([str(tmp_path / "missing"), "-o", str(tmp_path / "t.toml")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_twin_profile_round_trips_through_the_simulator_loader(tmp_path: Path) -> None:
    from loadgen.sim.engine import Engine
    from loadgen.sim.profile import load_profile_file

    result = _fit(synth_run(tmp_path / "run", Truth(max_running=8), [2, 4, 16], step_s=2.0))
    apply_sets(result, {"kv_pool_tokens": "123456"})
    path = tmp_path / "twin.toml"
    path.write_text(profile_text(result, name="twin", served_name="m"))
    prof = load_profile_file(path)
    engine = Engine(prof)
    assert engine.pool_tokens == 123456
    assert prof.max_running_requests == 8
    assert prof.timing is not None
    assert engine.timing.decode(1, 0).duration_s * 1e3 == pytest.approx(5.05, rel=1e-3)
    assert engine.timing.decode(8, 0).duration_s * 1e3 == pytest.approx(5.4, rel=1e-3)


def test_the_fixed_timing_prefill_has_a_floor() -> None:
    # a prefill step takes max(floor, ttft_ms + ttft_per_1k_ms * k / 1000): small batches sit on the floor
    from loadgen.sim.fixed_timing import FixedStepModel
    from loadgen.sim.profile import FixedTiming

    model = FixedStepModel(FixedTiming(ttft_ms=2.0, ttft_per_1k_ms=4.0, ttft_floor_ms=6.0), real=None)  # type: ignore[arg-type]
    model._cost = lambda d: d  # type: ignore[method-assign,assignment,return-value]
    assert model.prefill(100, 0.0) == pytest.approx(6.0e-3)  # 2 + 0.4 < 6: the floor
    assert model.prefill(2000, 0.0) == pytest.approx(10.0e-3)  # 2 + 8 > 6: the line


def test_a_decode_step_that_bends_is_followed_through_each_load_level(tmp_path: Path) -> None:
    # a + b*n + bend*sqrt(n): a straight line over C=1..64 misses C=1; the broken line through each
    # step's batch does not, and the twin's simulator serves that broken line
    from loadgen.sim.profile import load_profile_file

    truth = Truth(a_ms=5.0, b_ms=0.02, bend_ms=1.5)
    result = _fit(synth_run(tmp_path / "run", truth, [1, 8, 32, 64], step_s=2.0))
    p = result.params

    def true_ms(n: float) -> float:
        return truth.a_ms + truth.b_ms * n + truth.bend_ms * n**0.5

    line_1 = p["decode_ms_fixed"].value + p["decode_ms_per_request"].value
    assert abs(line_1 / true_ms(1) - 1) > 0.05
    knots = {int(k.rsplit("_", 1)[1]) for k in p if k.startswith("decode_ms_at_batch_")}
    assert {1, 8, 32, 64} <= knots
    path = tmp_path / "twin.toml"
    path.write_text(profile_text(result, name="twin", served_name="m"))
    engine = Engine(load_profile_file(path))
    for n in (1, 8, 32, 64):
        assert engine.timing.decode(n, 0).duration_s * 1e3 == pytest.approx(true_ms(n), rel=5e-3)
    # a what-if on the line replaces the broken line
    apply_sets(result, {"decode_ms_per_request": "1.0"})
    assert 'decode_ms_by_batch = ""' in profile_text(result, name="twin", served_name="m")


def test_a_step_that_falls_as_the_batch_grows_is_held_and_the_twin_says_the_host_changed(tmp_path: Path) -> None:
    # the host ran the engine 1.5x slower during the C=2 step (a neighbour on its cores): the step
    # times read 5.1, 7.7, 5.2 ms at n = 1, 2, 4, and a broken line through them falls past n=2, which
    # extended to the twin's what-if loads gave a step of 0.3 ms at n=8 (a 16x faster engine)
    from loadgen.sim.profile import load_profile_file

    truth = Truth(a_ms=5.0, b_ms=0.05, slow_steps=((1, 1.5),))
    result = _fit(synth_run(tmp_path / "run", truth, [1, 2, 4], step_s=3.0))
    p = result.params
    knots = [p[f"decode_ms_at_batch_{n}"].value for n in (1, 2, 4)]
    assert knots[0] == pytest.approx(truth.a_ms + truth.b_ms, rel=0.01)
    assert knots[1] == pytest.approx(knots[2], rel=1e-3)  # the fall is pooled: held level, not falling
    assert truth.a_ms + 4 * truth.b_ms < knots[2] < 1.5 * (truth.a_ms + 2 * truth.b_ms)
    assert p["decode_ms_per_request"].value >= 0
    assert result.measured["decode_fell_with_batch"] is True
    note = next(s for s in result.cannot_fit if s.startswith("decode step vs batch"))
    assert "n=2" in note and "n=4" in note and "speed changed" in note
    path = tmp_path / "twin.toml"
    path.write_text(profile_text(result, name="twin", served_name="m"))
    engine = Engine(load_profile_file(path))
    served = [engine.timing.decode(n, 0).duration_s * 1e3 for n in (1, 2, 4, 8, 16)]
    assert served == sorted(served) and served[-1] == pytest.approx(knots[2], rel=1e-3)
    # the same ramp on a steady host: no fall, no note, the line's own points
    steady = _fit(synth_run(tmp_path / "steady", Truth(a_ms=5.0, b_ms=0.05), [1, 2, 4], step_s=3.0))
    assert "decode_fell_with_batch" not in steady.measured
    assert not any(s.startswith("decode step vs batch") for s in steady.cannot_fit)


def test_speculative_acceptance_is_fitted_from_the_steps_each_request_took(tmp_path: Path) -> None:
    truth = Truth(tau=3.0, depth=5)
    run = synth_run(tmp_path / "run", truth, [1, 4, 16], step_s=2.0, max_tokens=32)
    obs = observe([load_run(run)])
    p = fit(obs).params
    assert p["spec_depth"].value == truth.depth
    assert p["tokens_per_chunk"].value == pytest.approx(truth.tau, rel=0.02)
    # whole chunks alone read low: the chunk that reaches max_tokens, left out, is more often a long draw
    assert obs.chunk_tokens.mean() < 0.97 * truth.tau


def test_acceptance_per_workload_label_is_fitted_and_served_by_the_label_header(tmp_path: Path) -> None:
    # code prompts accept 5 tokens a step, prose 3: the twin fits each label's acceptance and its
    # simulator draws it for a request whose X-Loadgen-Source header names the label
    from loadgen.sim.acceptance import SOURCE_PREFIX, request_source
    from loadgen.sim.profile import load_profile_file

    truth = Truth(tau=4.0, depth=6, label_taus=(("chat:x/code", 5.0), ("chat:x/prose", 3.0)))
    result = fit(observe([load_run(synth_run(tmp_path / "run", truth, [1, 4, 16], step_s=3.0, max_tokens=48))]))
    p = result.params
    assert p["tokens_per_chunk@chat:x/code"].value == pytest.approx(5.0, rel=0.04)
    assert p["tokens_per_chunk@chat:x/prose"].value == pytest.approx(3.0, rel=0.04)
    assert 3.0 < p["tokens_per_chunk"].value < 5.0  # the pooled one, for labels the twin has not seen
    path = tmp_path / "twin.toml"
    path.write_text(profile_text(result, name="twin", served_name="m"))
    engine = Engine(load_profile_file(path), seed=1)
    taus = engine.profile.spec.taus_by_source()
    assert set(taus) == {"chat:x/code", "chat:x/prose"}
    assert request_source(taus, "chat:x/code", "prose text") == SOURCE_PREFIX + "chat:x/code"
    assert request_source(taus, "other", "plain prose words here") == "prose"  # unknown: the classifier's
    for label, tau in (("chat:x/code", 5.0), ("chat:x/prose", 3.0)):
        reqs = [SimpleNamespace(source=SOURCE_PREFIX + label)] * 20_000
        assert np.mean(engine._draw(reqs)) == pytest.approx(tau, rel=0.04)  # type: ignore[arg-type]
    # a what-if on the pooled acceptance applies to every request
    apply_sets(result, {"tokens_per_chunk": "2.0"})
    assert 'tau_by_source = ""' in profile_text(result, name="twin", served_name="m")
    with pytest.raises(ProfileError, match="expected LABEL=TAU pairs"):
        apply_overrides(load_profile_file(path), {"spec.tau_by_source": "chat:x/code=0.5"})


def test_renewal_steps_count_the_draws_to_reach_each_length() -> None:
    assert renewal_steps(0.0, 3, 5).tolist() == [0, 1, 2, 3, 4, 5]  # one token a step
    sure = renewal_steps(1.0 - 1e-12, 3, 9)  # always depth + 1 = 4 tokens
    assert sure.tolist() == pytest.approx([0, 1, 1, 1, 1, 2, 2, 2, 2, 3], abs=1e-6)


def test_decode_ms_by_batch_is_a_broken_line_extended_at_its_ends() -> None:
    prof = apply_overrides(load_profile("tiny"), {"timing.decode_ms_by_batch": "2:10,4:13,16:19"})
    engine = Engine(prof)
    ms = [engine.timing.decode(n, 0.0).duration_s * 1e3 for n in (1, 2, 3, 4, 10, 16, 32)]
    assert ms == pytest.approx([8.5, 10.0, 11.5, 13.0, 16.0, 19.0, 27.0])
    for bad in ("4:10", "4:10,2:12", "1:10,x:3", "1:0,2:3"):
        with pytest.raises(ProfileError, match="decode_ms_by_batch"):
            apply_overrides(load_profile("tiny"), {"timing.decode_ms_by_batch": bad})


def test_a_few_early_stops_give_the_natural_length(tmp_path: Path) -> None:
    # median 300 against a 64-token cap: ~3 % of requests stop on their own; with fewer than five stops
    # the median is still fitted (the spread assumed), not assumed
    truth = Truth(natural_median=300.0)
    result = _fit(synth_run(tmp_path / "run", truth, [4, 16], step_s=1.0, max_tokens=64, seed=3))
    median, sigma = result.params["natural_len_median"], result.params["natural_len_sigma"]
    assert not median.assumed and sigma.assumed
    assert median.uncertainty is not None
    assert abs(median.value - truth.natural_median) <= 3 * median.uncertainty
    assert any("output length spread" in c for c in result.cannot_fit)


def test_a_scenario_run_replays_its_scenario_without_the_manifests_default_lengths(tmp_path: Path) -> None:
    # the manifest keeps max_tokens' default beside the scenario; `loadgen ramp` refuses both at once,
    # so the replay leaves the lengths to the scenario file, and a max_tokens what-if says what to do
    from loadgen.twin.cli import WhatIf, ramp_argv
    from loadgen.twin.emit import TwinError

    run_dir = synth_run(tmp_path / "run", Truth(), [1, 4])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["options"].update({"scenario": "/s/spread.toml", "max_tokens": 512, "extra_body": {"a": 1}})
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    run = load_run(run_dir)
    argv = ramp_argv(run, "http://127.0.0.1:1", tmp_path / "out", WhatIf(concurrency=[8]))
    assert argv[argv.index("--scenario") + 1] == "/s/spread.toml"
    assert "--max-tokens" not in argv and "--extra-body" not in argv
    assert argv[argv.index("--concurrency") + 1] == "8"
    with pytest.raises(TwinError, match=r"ran the scenario /s/spread.toml, whose \[output\] max_tokens"):
        ramp_argv(run, "http://127.0.0.1:1", tmp_path / "out", WhatIf(max_tokens=64))
    # a run without a scenario replays its --max-tokens
    manifest["options"].pop("scenario")
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    argv = ramp_argv(load_run(run_dir), "http://127.0.0.1:1", tmp_path / "out")
    assert argv[argv.index("--max-tokens") + 1] == "512"


def _prefills(batched: list[tuple[int, float]]) -> SimpleNamespace:
    """Prefill steps as observe() gives them, shaped as h100-llama-8b's in a C=1, 4, 16 ramp of
    60-token prompts: 140 single prefills and 8 of two requests on a 6.6-ms floor (spread 0.13 ms),
    9 single ones 0.9 ms above it (an idle engine's: the request's way in is timed too), and
    ``batched`` steps (tokens, ms)."""
    rng = np.random.default_rng(3)
    tokens = [60.0] * 149 + [120.0] * 8 + [float(k) for k, _ in batched]
    ms = list(6.6 + rng.normal(0.0, 0.13, 140)) + list(7.5 + rng.normal(0.0, 0.1, 9))
    ms += list(6.6 + rng.normal(0.0, 0.13, 8)) + [t for _, t in batched]
    return SimpleNamespace(
        prefill_s=np.array(ms) / 1e3,
        prefill_tokens=np.array(tokens),
        prefill_reqs=np.ones(len(ms), dtype=np.int64),
        prompt_tokens=np.full(10, 60.0),
    )


def test_the_prefill_line_rests_on_the_few_batches_above_the_floor() -> None:
    """Nearly every prefill a single 60-token one on the floor: the straight line is flat and its
    slope undetermined, but three batched prefills on the line 0.8 + 33.5 ms per 1k tokens give it
    (h100-llama-8b's shape, benchmarks/accuracy/test_twin_recovery.py)."""
    line = [(k, 0.8 + 33.5 * k / 1000) for k in (180, 241, 482)]
    params: dict[str, Any] = {}
    cannot: list[str] = []
    _fit_prefill(_prefills(line), params, cannot, {})  # type: ignore[arg-type]
    assert not cannot
    assert params["prefill_ms_floor"].value == pytest.approx(6.6, rel=0.01)
    assert params["prefill_ms_per_1k_tokens"].value == pytest.approx(33.5, rel=0.05)
    assert not params["prefill_ms_per_1k_tokens"].assumed
    assert "the line from the 3 steps above it" in params["prefill_ms_per_1k_tokens"].evidence


def test_one_batch_above_the_floor_does_not_make_a_line() -> None:
    params: dict[str, Any] = {}
    cannot: list[str] = []
    _fit_prefill(_prefills([(482, 17.0)]), params, cannot, {})  # type: ignore[arg-type]
    assert params["prefill_ms_per_1k_tokens"].value == 0.0 and params["prefill_ms_per_1k_tokens"].assumed
    assert "prefill_ms_floor" not in params
    assert any("prefill cost per token" in c and "not determined (assumed 0)" in c for c in cannot)


def test_a_run_against_vllm_gives_a_twin_that_schedules_as_vllm_in_its_blocks(tmp_path: Path) -> None:
    from loadgen.sim.engine import Engine
    from loadgen.sim.profile import load_profile_file
    from loadgen.sim.sched_vllm import VllmScheduler

    run = synth_run(tmp_path / "run", Truth(max_running=8), [2, 4, 16], step_s=2.0)
    # the server samples telemetry writes from vLLM's /metrics (its cache_config_info read as the pool)
    with (run / "samples.jsonl").open("a") as fh:
        for i in range(5):
            sample = {"t_ns": T0 + i * 10**9, "src": "server", "engine": "vllm", "running": 2, "queued": 0,
                      "kv_usage": 0.2, "kv_capacity_tokens": 1920.0, "kv_block_tokens": 128}  # fmt: skip
            fh.write(json.dumps(sample) + "\n")
    result = _fit(run)
    assert result.engine == "vllm" and "vllm's" in result.engine_evidence
    assert result.value("kv_pool_tokens") == 1920 and result.value("prefix_block_tokens") == 128
    path = tmp_path / "twin.toml"
    path.write_text(profile_text(result, name="twin", served_name="m"))
    engine = Engine(load_profile_file(path))
    assert isinstance(engine.scheduler, VllmScheduler) and engine.pool_tokens == 1920
    assert engine.profile.server.prefix_block_tokens == 128 and engine.profile.server.chunked_prefill_size == 2048


def _vllm_samples(run: Path) -> None:
    with (run / "samples.jsonl").open("a") as fh:
        for i in range(5):
            sample = {"t_ns": T0 + i * 10**9, "src": "server", "engine": "vllm", "running": 2, "queued": 0,
                      "kv_usage": 0.2, "kv_capacity_tokens": 1_000_000.0, "kv_block_tokens": 16}  # fmt: skip
            fh.write(json.dumps(sample) + "\n")


def test_a_slow_sender_still_gives_vllm_prefill_steps_told_apart_at_half_a_decode_step(tmp_path: Path) -> None:
    # chunks of one step leave 0.4 ms apart (more than the 0.3 ms that groups a burst; at most 1.6 ms
    # for a step, within half a decode step): the first chunks of one prefill are still one step,
    # timed from the first chunk of the step before
    truth = Truth(a_ms=5.0, b_ms=0.05, p0_ms=20.0, p1_ms=2.0)
    run = synth_run(tmp_path / "run", truth, [1, 2, 4], prompt_tokens=[60, 500, 2000], send_gap_ms=0.4)
    _vllm_samples(run)
    p = _fit(run).params
    assert p["prefill_ms_fixed"].value == pytest.approx(truth.p0_ms, rel=0.05)
    assert p["prefill_ms_per_1k_tokens"].value == pytest.approx(truth.p1_ms, rel=0.1)


def _read_late(run: Path, every: int, size: int) -> int:
    """Every ``every``-th record's chunks after the first, ``size`` at a time, as a client that fell
    behind reads them: in one read at the last one's time, the others marked as upper bounds
    (``chunk_late_ns``). Returns the chunks whose time moved."""
    path = run / "requests-w0.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    moved = 0
    for i, rec in enumerate(recs):
        off = rec["chunk_offsets_ns"]
        if i % every:
            continue
        late = []
        for start in range(1, len(off) - size + 1, size):
            end = start + size - 1
            late += [[j, off[end] - off[j]] for j in range(start, end)]
            off[start:end] = [off[end]] * (size - 1)
            moved += size - 1
        rec["chunk_late_ns"] = late
    path.write_text("".join(json.dumps(rec) + "\n" for rec in recs))
    return moved


def test_chunks_read_together_give_their_steps_the_span_over_their_number(tmp_path: Path) -> None:
    # a client a step behind (vLLM's engine threads on the cores the load generator shares) reads two
    # chunks at once: a gap of 0 and one of two steps. Read gap by gap, the zeros left out, the step
    # read twice its length where such reads were the rule (the real engine's calibration ramps: a
    # third of the gaps at one user)
    truth = Truth(a_ms=3.0, b_ms=0.5)
    run = synth_run(tmp_path / "run", truth, [1, 2, 4], max_tokens=96, prompt_tokens=[60])
    assert _read_late(run, every=1, size=2) > 1000
    obs = observe([load_run(run)])
    assert obs.gap_s.min() > 0.9 * (truth.a_ms + truth.b_ms) / 1e3
    p = fit(obs).params
    for n in (1, 2, 4):
        assert p[f"decode_ms_at_batch_{n}"].value == pytest.approx(truth.a_ms + truth.b_ms * n, rel=0.01), n
