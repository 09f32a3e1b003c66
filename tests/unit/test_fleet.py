"""The fleet on the virtual clock (issue 32): the router's policies, traces played scaled and bent to a
day, the windows' figures, one replica against ``loadgen predict``'s engine on the same load, prefix-aware
routing's cache hits on a trace whose prompts share prefixes, and ``loadgen fleet`` as a user runs it."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest

from loadgen.fleet.cli import main as fleet_main
from loadgen.fleet.router import Policy, RouteInfo, Router, parse_policy
from loadgen.fleet.sim import FleetResult, _add, request_limits, run_fleet
from loadgen.fleet.stats import LogHistogram, Window
from loadgen.fleet.traffic import FleetRequest, draw_tie_order, from_trace, parse_shape, poisson
from loadgen.sim.forecast import run_point
from loadgen.sim.profile import load_profile
from loadgen.workload.datasets import load_trace

# -- the router -------------------------------------------------------------------------------------


def _info(blocks: tuple[int, ...] = (), session: str | None = None, prompt: int = 640) -> RouteInfo:
    return RouteInfo(blocks, prompt, session, 64)


def test_round_robin_takes_the_active_replicas_in_turn() -> None:
    r = Router(Policy.ROUND_ROBIN, 3)
    assert [r.pick(_info()) for _ in range(6)] == [0, 1, 2, 0, 1, 2]
    r.set_active(1, False)
    assert {r.pick(_info()) for _ in range(4)} == {0, 2}
    assert r.outstanding[1] == 2


def test_least_requests_takes_the_fewest_outstanding_and_breaks_ties_in_turn() -> None:
    r = Router(Policy.LEAST_REQUESTS, 3)
    first = [r.pick(_info()) for _ in range(3)]
    assert sorted(first) == [0, 1, 2]  # an idle fleet is spread, not all sent to replica 0
    r.done(1)
    assert r.pick(_info()) == 1
    r.done(0)
    r.done(0)  # replica 0 now has none outstanding (it had one; a second done makes it -1: the least)
    assert r.pick(_info()) == 0


def test_least_kv_reads_the_reported_use_then_the_outstanding() -> None:
    usage = [0.9, 0.2, 0.2]
    r = Router(Policy.LEAST_KV, 3, kv_usage=lambda i: usage[i])
    assert r.pick(_info()) == 1
    assert r.pick(_info()) == 2  # same use, fewer outstanding
    usage[0] = 0.0
    assert r.pick(_info()) == 0


def test_prefix_aware_sends_a_shared_prefix_where_it_went_and_balances_when_loads_part() -> None:
    r = Router(Policy.PREFIX_AWARE, 4, balance_abs=4, balance_rel=1.5)
    system = tuple(range(1, 9))  # 8 blocks = 512 of a 640-token prompt
    first = r.pick(_info((*system, 100)))
    # the same prefix goes where it went while the loads are close, whatever the rest of the prompt
    for k in range(3):
        assert r.pick(_info((*system, 200 + k))) == first
    # a prompt sharing nothing goes to a replica with the smallest tree (an empty one)
    other = r.pick(_info((900, 901, 902, 903, 904, 905, 906, 907)))
    assert other != first and r.tree_size(other) == 8
    # a short match (under 30 % of the prompt) is not followed
    assert r.pick(_info((1, 2000, 2001, 2002, 2003, 2004, 2005, 2006, 2007), prompt=640)) not in (first,)
    # imbalance beyond both thresholds: the least loaded takes it, prefix or not; within them the prefix
    # is followed (to the least loaded of the replicas holding it)
    balanced = followed = 0
    holders = {first}
    for k in range(12):
        loads = list(r.outstanding)
        choice = r.pick(_info((*system, 300 + k)))
        if max(loads) - min(loads) > 4 and max(loads) > 1.5 * min(loads):
            assert loads[choice] == min(loads)
            balanced += 1
        else:
            assert choice in holders and loads[choice] == min(loads[i] for i in holders)
            followed += 1
        holders.add(choice)
    assert balanced and followed


def test_prefix_aware_forgets_the_oldest_blocks_past_its_bound() -> None:
    r = Router(Policy.PREFIX_AWARE, 2, tree_blocks=4)
    a = r.pick(_info((1, 2, 3, 4), prompt=256))
    r.pick(_info((5, 6, 7, 8), prompt=256))  # the other replica (smallest tree)
    r.pick(_info((11, 12, 13, 14), prompt=256))
    assert r.tree_size(a) <= 4
    assert all(size <= 4 for size in (r.tree_size(0), r.tree_size(1)))


def test_session_affinity_is_sticky_and_moves_few_sessions_when_a_replica_joins() -> None:
    r = Router(Policy.SESSION, 4)
    sessions = [f"conv-{i}" for i in range(400)]
    home = {s: r.pick(_info(session=s)) for s in sessions}
    assert all(r.pick(_info(session=s)) == home[s] for s in sessions[:50])
    assert len(set(home.values())) == 4
    r.add_replica()
    moved = sum(1 for s in sessions if r.pick(_info(session=s)) != home[s])
    assert 40 < moved < 130  # about a fifth move (to the new one), none between the old ones
    assert all(r.pick(_info(session=s)) in (home[s], 4) for s in sessions)
    # without a session: least requests
    assert r.pick(_info()) == int(np.argmin(r.outstanding))


def test_policies_by_name() -> None:
    assert parse_policy("prefix-aware") is Policy.PREFIX_AWARE
    with pytest.raises(ValueError, match="round-robin, least-requests, least-kv, prefix-aware, session"):
        parse_policy("random")
    with pytest.raises(ValueError, match="no active replica"):
        r = Router(Policy.ROUND_ROBIN, 1)
        r.set_active(0, False)
        r.pick(_info())


# -- requests ---------------------------------------------------------------------------------------


def _azure(tmp_path: Path, n: int = 200, gap_s: float = 0.5) -> Path:
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i in range(n):
        t = i * gap_s
        lines.append(f"2023-11-16 18:{int(t // 60):02d}:{t % 60:010.7f},{300 + i % 50},{20 + i % 30}")
    path = tmp_path / "azure.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_trace_plays_at_its_times_scaled_and_looped(tmp_path: Path) -> None:
    trace = load_trace(_azure(tmp_path))
    once = list(from_trace(trace))
    assert len(once) == 200 and once[1].arrival_s == pytest.approx(0.5)
    assert (once[0].prompt_tokens, once[0].output_tokens, once[0].blocks) == (300, 20, ())
    fast = list(from_trace(trace, scale=2.0))
    assert fast[-1].arrival_s == pytest.approx(once[-1].arrival_s / 2)
    looped = list(from_trace(trace, duration_s=300.0))
    # one loop lasts the span plus a mean gap (100 s), so 300 s hold three loops
    assert len(looped) == 600 and looped[200].arrival_s == pytest.approx(100.0)
    assert all(b.arrival_s >= a.arrival_s for a, b in itertools.pairwise(looped))


def test_a_day_shape_sets_each_hours_rate(tmp_path: Path) -> None:
    trace = load_trace(_azure(tmp_path, n=100, gap_s=36.0))  # one request every 36 s: 100 an hour
    shape = [1.0] * 12 + [3.0] * 12  # normalised to mean 1: 0.5 then 1.5
    day = list(from_trace(trace, shape=shape))
    per_hour = np.bincount([int(r.arrival_s // 3600) for r in day], minlength=24)
    assert per_hour[:12] == pytest.approx([50] * 12, abs=1) and per_hour[12:] == pytest.approx([150] * 12, abs=1)
    assert parse_shape("diurnal")[14] > 1.5 > 0.5 > parse_shape("diurnal")[2]
    assert sum(parse_shape("diurnal")) == pytest.approx(24.0)
    for bad, words in (("1,2,3", "not 3"), (",".join(["0"] * 24), "not all 0"), (",".join(["x"] * 24), "number")):
        with pytest.raises(ValueError, match=words):
            parse_shape(bad)


def test_mooncake_blocks_keep_what_prompts_share_and_loops_rename_the_one_off_prompts(tmp_path: Path) -> None:
    path = tmp_path / "mooncake.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 1100, "output_length": 10, "hash_ids": [0, 1, 2]},
        {"timestamp": 1000, "input_length": 1100, "output_length": 10, "hash_ids": [0, 3, 4]},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    reqs = list(from_trace(load_trace(path), duration_s=4.0, block_tokens=64))
    assert len(reqs) == 4
    a, b, a2, _ = reqs
    assert len(a.blocks) == 1100 // 64 and a.blocks[:8] == b.blocks[:8]  # id 0: 8 blocks of 64 shared
    assert a.blocks[8] != b.blocks[8]
    assert a2.blocks[:8] == a.blocks[:8] and a2.blocks[8:] != a.blocks[8:]  # the shared id stays, the rest renamed


# -- the windows' figures ---------------------------------------------------------------------------


def test_log_histogram_percentiles_are_within_a_quarter_percent() -> None:
    rng = np.random.default_rng(1)
    values = rng.lognormal(-3, 1.2, 20000)
    h = LogHistogram()
    for v in values:
        h.add(float(v))
    for q in (50, 90, 99):
        assert h.percentile(q) == pytest.approx(float(np.percentile(values, q)), rel=0.004)
    assert h.share_at_most(float(np.percentile(values, 90))) == pytest.approx(0.9, abs=0.01)
    assert LogHistogram().percentile(50) is None


def test_request_limits_take_the_tightest_and_refuse_itl() -> None:
    assert request_limits({"ttft_p99_ms": 2000.0, "ttft_p50_ms": 500.0, "tpot_p99_ms": 50.0}) == (
        0.5,
        0.05,
        float("inf"),
    )
    with pytest.raises(ValueError, match="itl"):
        request_limits({"itl_p99_ms": 50.0})


# -- the fleet against the engine alone -------------------------------------------------------------


def test_one_replica_behind_the_router_equals_predict_on_the_same_load() -> None:
    """The issue's first check: the same Poisson load (6/s, 1000 in, 256 out) on one replica, measured
    over the same 600 s after a 60-s warm-up, as ``loadgen predict``'s engine run measures it."""
    profile = load_profile("h100-llama-8b")
    rate, inp, out = 6.0, 1000, 256
    alone = run_point(profile, rate=rate, input_tokens=inp, output_tokens=out, warmup_s=60, window_s=600, drain_s=60)
    fleet = run_fleet(profile, poisson(rate, 660, inp, out, seed=3), replicas=1, window_s=60)
    measured = Window(60, 660)
    for w in fleet.windows[1:11]:
        _add(measured, w)
    pairs = {
        "throughput": (alone.output_tok_s, measured.output_tokens / 600),
        "TTFT p50": (float(np.percentile(alone.ttft_s, 50)), measured.hist["ttft"].percentile(50)),
        "TPOT p50": (float(np.percentile(alone.tpot_s, 50)), measured.hist["tpot"].percentile(50)),
        "E2E p50": (float(np.percentile(alone.e2e_s, 50)), measured.hist["e2e"].percentile(50)),
    }
    off = {k: f / a - 1 for k, (a, f) in pairs.items() if f is not None}
    assert len(off) == 4 and all(abs(v) < 0.03 for v in off.values()), off
    assert fleet.routed == [fleet.requests] and fleet.total.failed == 0


def test_energy_and_tokens_add_up_over_the_windows() -> None:
    profile = load_profile("h100-llama-8b")
    fleet = run_fleet(profile, poisson(4.0, 120, 500, 100, seed=1), replicas=3, window_s=30)
    total = fleet.total
    assert total.arrived == fleet.requests == total.finished
    assert total.output_tokens == 100 * fleet.requests
    gpus = fleet.gpus_per_replica
    idle = profile.hardware.idle_w * 3 * gpus * fleet.windows[-1].end_s
    assert total.energy_j > idle  # the steps ran above idle power
    assert total.energy_j < profile.hardware.power_limit_w * 3 * gpus * fleet.windows[-1].end_s
    assert sorted(fleet.routed) == sorted(fleet.routed) and sum(fleet.routed) == fleet.requests
    assert 0 < total.busy_s <= total.replica_s


def _shared_prefix_trace(tmp_path: Path, n: int = 600) -> Path:
    """Mooncake-format requests of 40 conversations: each turn's prompt is its conversation's history
    (its earlier ids) plus one new block, a request every 0.25 s."""
    rng = np.random.default_rng(0)
    history: dict[int, list[int]] = {}
    lines = []
    for i in range(n):
        conv = int(rng.integers(40))
        ids = history.setdefault(conv, [])
        ids.append(i)  # a new block id each turn
        lines.append(
            json.dumps(
                {"timestamp": i * 250, "input_length": 512 * len(ids) - 100, "output_length": 40, "hash_ids": list(ids)}
            )
        )
    path = tmp_path / "conversations.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_prefix_aware_routing_finds_the_conversations_history_where_round_robin_loses_it(tmp_path: Path) -> None:
    profile = load_profile("h100-llama-8b")
    trace = load_trace(_shared_prefix_trace(tmp_path))
    # what a single cache that never forgets would find: every earlier turn's blocks
    reqs = list(from_trace(trace, block_tokens=64))
    seen: set[int] = set()
    ideal = 0
    for r in reqs:
        usable = r.blocks[: (r.prompt_tokens - 1) // 64]
        ideal += 64 * next((i for i, b in enumerate(usable) if b not in seen), len(usable))
        seen.update(r.blocks)
    ideal_share = ideal / sum(r.prompt_tokens for r in reqs)
    hits = {}
    for policy in (Policy.ROUND_ROBIN, Policy.PREFIX_AWARE):
        fleet = run_fleet(profile, iter(reqs), replicas=4, policy=policy, window_s=600)
        hits[policy] = fleet.total.cached_tokens / fleet.total.prompt_tokens / ideal_share
    # in turn, a conversation's turn finds on its replica only the history up to the last turn that went
    # there; prefix-aware routing sends it where its whole history is
    assert hits[Policy.PREFIX_AWARE] > 0.95 and hits[Policy.ROUND_ROBIN] < 0.8, (hits, ideal_share)


# -- loadgen fleet ----------------------------------------------------------------------------------


def test_loadgen_fleet_finds_the_fewest_replicas_and_writes_what_it_predicted_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fleet"
    code = fleet_main(
        [
            "--deployment",
            "h100-llama-8b",
            "--rate",
            "20",
            "--duration",
            "90s",
            "--input-tokens",
            "2000",
            "--output-tokens",
            "200",
            "--find-replicas",
            "--slo",
            "ttft_p99=300ms,tpot_p99=20ms",
            "--window",
            "30s",
            "--router",
            "least-requests,round-robin",
            "--per-window",
            "--price",
            "2.5",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0, capsys.readouterr()
    doc = json.loads((out / "fleet.json").read_text())
    assert doc["predicted"] is True and doc["predicted_from"]["requests"]["poisson_rps"] == 20
    for run in doc["runs"]:
        n = run["found"]
        tried = {t["replicas"]: t["holds"] for t in run["tried"]}
        assert tried[n] and (n == 1 or tried.get(n - 1) is False), tried  # the fewest: one fewer fails
        assert all(w["slo_held"] is not False for w in run["windows"])
        # each window of the steady load, played on its own after the traffic before it, needs about as many
        needs = [w["replicas_needed"] for w in run["per_window"] if w["arrival_rps"]]
        assert len(needs) == 3 and all(x is not None and abs(x - n) <= 1 for x in needs), (needs, n)
        assert run["total"]["cost_usd"] == pytest.approx(run["total"]["gpu_hours"] * 2.5)
    text = (out / "fleet.md").read_text()
    assert "(predicted)" in text and "Policies side by side" in text and "the fewest that hold the SLO" in text


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--replicas", "2"], "give --trace FILE, --workload FILE or --rate R"),
        (["--rate", "5", "--replicas", "2"], "--rate needs --duration"),
        (["--rate", "5", "--duration", "1m", "--find-replicas"], "give --slo"),
        (["--rate", "5", "--duration", "1m", "--replicas", "2", "--router", "fastest"], "unknown router policy"),
        (["--rate", "5", "--duration", "soon", "--replicas", "2"], "--duration 'soon'"),
        (["--trace", "/nonexistent/t.csv", "--replicas", "2"], "no such file"),
        (["--rate", "5", "--duration", "1m", "--replicas", "2", "--slo", "itl_p99=5ms"], "itl"),
        (["--rate", "5", "--duration", "1m", "--replicas", "2", "--orders", "0"], "--orders 0"),
        (
            ["--rate", "5", "--duration", "1m", "--replicas", "1", "--autoscale", "max=2", "--orders", "3"],
            "--autoscale",
        ),
    ],
)
def test_loadgen_fleet_refuses_bad_input_naming_it(
    args: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert fleet_main(["--deployment", "h100-llama-8b", "--quiet", *args]) == 2
    assert words in capsys.readouterr().err


def test_loadgen_fleet_names_a_deployment_that_does_not_start(capsys: pytest.CaptureFixture[str]) -> None:
    code = fleet_main(
        [
            "--deployment",
            "model=llama-3.1-405b,hardware=h100",
            "--rate",
            "1",
            "--duration",
            "1m",
            "--replicas",
            "1",
            "--quiet",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "does not start" in err, err


def test_fleet_requests_are_taken_in_order() -> None:
    profile = load_profile("tiny")
    with pytest.raises(ValueError, match="out of order"):
        run_fleet(profile, [FleetRequest(5.0, 10, 5), FleetRequest(1.0, 10, 5)], replicas=1)


# -- the autoscaler ---------------------------------------------------------------------------------


def _steps(*parts: tuple[float, float, float]) -> list[FleetRequest]:
    """Poisson arrivals in consecutive parts of (seconds, rate/s, prompt tokens), 200 output tokens each."""
    out: list[FleetRequest] = []
    t0 = 0.0
    for k, (seconds, rate, prompt) in enumerate(parts):
        out += [
            FleetRequest(t0 + r.arrival_s, r.prompt_tokens, r.output_tokens)
            for r in poisson(rate, seconds, int(prompt), 200, seed=k)
        ]
        t0 += seconds
    return out


def test_cold_start_is_the_engines_start_and_the_weights_over_the_slower_of_storage_and_pcie() -> None:
    from loadgen.fleet.sim import cold_start
    from loadgen.sim.memory import memory_plan

    profile = load_profile("h100-llama-8b")
    weights = memory_plan(profile).weight_bytes
    assert weights > 15e9  # Llama-3.1-8B in BF16 on one GPU
    assert cold_start(profile, storage_gb_s=5.0, init_s=60.0) == pytest.approx(60.0 + weights / 5e9)
    # from fast storage the GPU's PCIe link (Gen5 x16, 64 GB/s) is what limits
    assert cold_start(profile, storage_gb_s=1000.0, init_s=0.0) == pytest.approx(
        weights / (profile.hardware.pcie_gb_s * 1e9)
    )


def test_the_autoscaler_follows_a_surge_late_by_its_cold_start_and_gives_replicas_back() -> None:
    from loadgen.fleet.sim import parse_autoscale

    profile = load_profile("h100-llama-8b")
    # 10 min quiet, 15 min a surge ten times the rate, 15 min quiet again
    reqs = _steps((600, 2.0, 1000), (900, 20.0, 1000), (900, 2.0, 1000))
    spec = parse_autoscale("target=0.7,capacity=16,cold-start=120s,interval=30s,min=1,max=16,down-after=5m")
    slo = {"ttft_p99_ms": 500.0}
    scaled = run_fleet(profile, iter(reqs), replicas=1, window_s=300, slo=slo, autoscale=spec)
    ups = [e for e in scaled.scale_events if e["action"] == "up"]
    downs = [e for e in scaled.scale_events if e["action"] == "down"]
    assert ups and 600 <= ups[0]["t_s"] <= 660, scaled.scale_events  # within a tick or two of the surge
    assert downs and downs[-1]["t_s"] >= 1500 + 300  # only after five quiet minutes
    peak = scaled.total.replicas_max
    assert 2 <= peak <= 16
    by_window = [w.row(1, None, slo) for w in scaled.windows]
    # while the new replicas load (the surge's first 5 minutes) the SLO breaks; once they serve it holds
    assert by_window[2]["slo_held"] is False and by_window[4]["slo_held"] is True, [r["slo_held"] for r in by_window]
    assert by_window[3]["replicas"] > by_window[1]["replicas"] and by_window[-1]["replicas"] < by_window[4]["replicas"]
    fixed = run_fleet(profile, iter(reqs), replicas=peak, window_s=300, slo=slo)
    assert scaled.total.replica_s < 0.8 * fixed.total.replica_s  # the quiet hours' GPUs given back
    assert fixed.total.slo_ok > scaled.total.slo_ok  # what the lag cost
    assert scaled.total.finished == fixed.total.finished == len(reqs)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("target=1.5", "(0, 1]"),
        ("min=4,max=2", "1 <= min <= max"),
        ("speed=3", "KEY=VALUE"),
        ("cold-start=soon", "cold-start"),
        ("capacity=0", "capacity"),
    ],
)
def test_autoscale_text_is_checked(text: str, words: str) -> None:
    from loadgen.fleet.sim import parse_autoscale

    with pytest.raises(ValueError, match=re.escape(words)):
        parse_autoscale(text)


# -- disaggregated pools ----------------------------------------------------------------------------


def test_a_disaggregated_request_waits_for_its_kv_to_cross_the_nic() -> None:
    """One request alone: its first token reaches the client when the prompt's KV has crossed from the
    prefill replica (the prefill's own first token rides with it), so TTFT is the prefill plus bytes over
    the NIC; the decode replica then steps it alone."""
    from loadgen.sim.profile import apply_overrides

    base = load_profile("h100-llama-8b")
    one = [FleetRequest(1.0, 8000, 50)]
    aggregated = run_fleet(base, iter(one), replicas=2, window_s=60)
    ttft_agg = aggregated.total.hist["ttft"].percentile(50)
    assert ttft_agg is not None
    for nic_gb_s in (50.0, 1.0):
        profile = apply_overrides(base, {"hardware.nic_gb_s": nic_gb_s})
        pd = run_fleet(profile, iter(one), replicas=2, window_s=60, disaggregate=(1, 1))
        ttft = pd.total.hist["ttft"].percentile(50)
        transfer = 8000 * profile.model.kv_bytes_per_token / (nic_gb_s * 1e9)  # one GPU: the whole KV
        assert ttft == pytest.approx(ttft_agg + transfer, rel=0.01, abs=0.001), (nic_gb_s, ttft, ttft_agg, transfer)
        assert pd.total.finished == 1 and pd.total.output_tokens == 50 and pd.routed == [1, 1]  # prefill, decode


def test_disaggregation_trades_ttft_for_tpot_on_the_same_gpus() -> None:
    """Eight H100s under the Azure-like load: a decode pool free of prefills keeps TPOT low and steady;
    too small a prefill pool makes prompts queue (TTFT); enough of one holds both."""
    profile = load_profile("h100-llama-8b")
    reqs = _steps((150, 40.0, 1000))  # 6,000 requests: 600 s gave the same TPOT ratios to 1 %
    agg = run_fleet(profile, iter(reqs), replicas=8, window_s=150)
    tight = run_fleet(profile, iter(reqs), replicas=8, window_s=150, disaggregate=(1, 7))
    even = run_fleet(profile, iter(reqs), replicas=8, window_s=150, disaggregate=(4, 4))

    def p(r: FleetResult, f: str, q: float) -> float:
        v = r.total.hist[f].percentile(q)
        assert v is not None
        return v

    assert p(even, "tpot", 99) < 0.95 * p(agg, "tpot", 99) and p(even, "tpot", 50) < p(agg, "tpot", 50)
    assert p(tight, "ttft", 50) > 5 * p(even, "ttft", 50)
    assert agg.total.finished == even.total.finished == tight.total.finished == len(reqs)
    assert agg.total.output_tokens == even.total.output_tokens


def test_disaggregate_flag_is_checked(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--deployment", "h100-llama-8b", "--rate", "5", "--duration", "1m", "--quiet"]
    assert fleet_main([*base, "--disaggregate", "2"]) == 2
    assert "prefill:decode" in capsys.readouterr().err
    assert fleet_main([*base, "--disaggregate", "2:2", "--replicas", "4"]) == 2
    assert "leave out --replicas" in capsys.readouterr().err


# -- a workload file as the fleet's requests --------------------------------------------------------


def test_an_open_loop_workload_file_plays_at_its_times_with_its_prompts_shared_prefixes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from loadgen.cli.workload_cmd import main as workload_main
    from loadgen.fleet.traffic import from_workload

    scenario = tmp_path / "rag.toml"
    scenario.write_text(
        'name = "rag"\nseed = 1\n[prompt]\nsource = "chat"\ninput_tokens = 300\n'
        "[shared_prefix]\nratio = 1.0\npool = 2\ntokens = 1024\n"
        "[output]\nmax_tokens = 64\n"
    )
    wfile = tmp_path / "rag.jsonl"
    export = ["export", "--scenario", str(scenario), "--rate", "4,8", "--step-seconds", "30", "--warmup-seconds", "0"]
    code = workload_main([*export, "-o", str(wfile)])
    assert code == 0, capsys.readouterr()
    reqs = list(from_workload(wfile))
    lines = [json.loads(x) for x in wfile.read_text().splitlines()[1:]]
    assert len(reqs) == len(lines) and all(r.output_tokens == 64 for r in reqs)
    # step 2's lines start after step 1's 30 s, at their own offsets
    second = [ln for ln in lines if ln["step"] == 1]
    assert reqs[len(lines) - len(second)].arrival_s == pytest.approx(30.0 + second[0]["at_s"])
    # one of two shared documents heads every prompt (1,024 tokens by the client's estimate, 10 or more
    # of the simulator's 64-token blocks), then the request's own question
    heads = {r.blocks[:8] for r in reqs}
    assert len(heads) == 2 and len({r.blocks for r in reqs}) == len(reqs)
    out = tmp_path / "fleet"
    args = ["--deployment", "h100-llama-8b", "--workload", str(wfile), "--replicas", "2", "--router", "prefix-aware"]
    code = fleet_main([*args, "--window", "30s", "--out", str(out), "--quiet"])
    assert code == 0, capsys.readouterr()
    doc = json.loads((out / "fleet.json").read_text())
    total = doc["runs"][0]["total"]
    assert total["arrived"] == len(reqs) and total["cache_hit_share"] > 0.6
    assert doc["predicted_from"]["requests"]["workload"] == str(wfile)


def test_a_closed_loop_workload_file_is_refused_naming_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from loadgen.cli.workload_cmd import main as workload_main

    wfile = tmp_path / "closed.jsonl"
    assert workload_main(["export", "--concurrency", "2", "--step-seconds", "5", "-o", str(wfile)]) == 0
    capsys.readouterr()
    assert fleet_main(["--deployment", "h100-llama-8b", "--workload", str(wfile), "--replicas", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "closed-loop file" in err and "--rate" in err and str(wfile) in err


# -- requests that arrive at one instant -------------------------------------------------------------


def test_simultaneous_arrivals_are_played_in_a_drawn_order_and_counted() -> None:
    times = [0.0] * 5 + [1.0] + [3.0] * 4 + [4.5]
    reqs = [FleetRequest(t, 100 + i, 10) for i, t in enumerate(times)]
    drawn = list(draw_tie_order(iter(reqs), 7))
    assert [r.arrival_s for r in drawn] == times  # the times and the runs of equal times stay
    for t in set(times):  # each run of equal times holds the same requests
        assert sorted(r.prompt_tokens for r in drawn if r.arrival_s == t) == [
            r.prompt_tokens for r in reqs if r.arrival_s == t
        ]
    assert drawn[5] is reqs[5] and drawn[10] is reqs[10]  # a request alone at its time is not moved
    assert list(draw_tie_order(iter(reqs), 7)) == drawn  # a seed is one order
    orders = {tuple(r.prompt_tokens for r in draw_tie_order(iter(reqs), seed)) for seed in range(8)}
    assert len(orders) > 4
    profile = load_profile("h100-llama-8b")
    result = run_fleet(profile, iter(reqs), replicas=2, window_s=10, order_seed=3)
    assert (result.simultaneous, result.order_seed) == (9, 3)
    assert run_fleet(profile, iter(reqs[5:6]), replicas=1, window_s=10).simultaneous == 0


def _bursts(tmp_path: Path) -> Path:
    """Mooncake-format bursts: every 3 s a prompt of 30,000 tokens and one of 300 stamped with one time (the
    trace's clock is coarse), the long one first in the file. On one replica the short one waits ~1.5 s
    for the long one's prefill when it is taken second, ~0.1 s when first."""
    lines = []
    for tick in range(20):
        for n in (30000, 300):
            ids = [tick * 100 + len(lines) * 1000 + j for j in range(-(-n // 512))]
            row = {"timestamp": tick * 3000, "input_length": n, "output_length": 30, "hash_ids": ids}
            lines.append(json.dumps(row))
    path = tmp_path / "bursts.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_loadgen_fleet_orders_shows_how_far_the_figures_move_with_the_order_of_simultaneous_arrivals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _bursts(tmp_path)
    out = tmp_path / "fleet"
    args = ["--deployment", "h100-llama-8b", "--trace", str(trace), "--replicas", "1", "--window", "1m"]
    code = fleet_main([*args, "--router", "least-requests,prefix-aware", "--orders", "4", "--out", str(out), "--quiet"])
    assert code == 0, capsys.readouterr()
    doc = json.loads((out / "fleet.json").read_text())
    for run in doc["runs"]:
        assert run["simultaneous"] == 40 and run["order_seed"] == 0
        orders = run["orders"]
        assert orders["n"] == 4 and orders["seeds"] == [0, 1, 2, 3]
        ttft = orders["figures"]["TTFT p50 ms"]
        assert len(ttft["values"]) == 4 and ttft["min"] <= ttft["median"] <= ttft["max"]
        assert ttft["values"][0] == pytest.approx(run["total"]["ttft_ms"]["p50"])  # the tables are the first draw
        assert orders["figures"]["output tok/s"]["spread"] < 0.02  # the same tokens, whatever the order
    # a short prompt ahead of the long one or behind it: its TTFT ~0.1 s or ~1.5 s, and the mean with it
    ttft = doc["runs"][0]["orders"]["figures"]["TTFT mean ms"]
    assert ttft["max"] > ttft["min"] * 1.03, ttft
    # the file's order, the long one first every time, is the slowest of all
    file_order = run_fleet(load_profile("h100-llama-8b"), from_trace(load_trace(trace)), replicas=1, window_s=60)
    assert file_order.total.hist["ttft"].mean() * 1e3 > ttft["max"] * 1.03
    text = (out / "fleet.md").read_text()
    assert "40 of 40 requests (100%) arrived at the same instant as another" in text
    assert "over 4 drawn orders (seeds 0-3)" in text and "| TTFT p50 ms |" in text
    # one order by default, said so; the same seed draws the same order
    code = fleet_main([*args, "--out", str(tmp_path / "one"), "--quiet"])
    assert code == 0, capsys.readouterr()
    one = json.loads((tmp_path / "one" / "fleet.json").read_text())["runs"][0]
    assert one["total"]["ttft_ms"] == doc["runs"][0]["total"]["ttft_ms"] and "orders" not in one
    assert "This run draws one order (seed 0); `--orders 5`" in (tmp_path / "one" / "fleet.md").read_text()


def test_find_replicas_with_orders_needs_a_count_that_holds_in_every_drawn_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _bursts(tmp_path)
    base = ["--deployment", "h100-llama-8b", "--trace", str(trace), "--window", "1m", "--quiet"]
    base += ["--find-replicas", "--slo", "ttft_mean=1100ms", "--max-replicas", "4", "--seed", "1"]
    found = {}
    for orders in (1, 4):
        out = tmp_path / f"o{orders}"
        assert fleet_main([*base, "--orders", str(orders), "--out", str(out)]) == 0, capsys.readouterr()
        run = json.loads((out / "fleet.json").read_text())["runs"][0]
        found[orders] = run["found"]
        assert run["orders_judged"] == orders
    # one replica's mean TTFT is 994 ms in the order seed 1 draws and 1,212 ms in seed 2's (seeds 0-3:
    # 1,284, 994, 1,212, 1,103): the first order alone finds one replica, four orders (seeds 1-4) two
    assert found == {1: 1, 4: 2}, found
    assert "held in each of 4 drawn orders" in (tmp_path / "o4" / "fleet.md").read_text()


def test_a_workload_body_is_counted_as_the_simulator_counts_it_and_a_bad_image_is_named(tmp_path: Path) -> None:
    from loadgen.fleet.traffic import from_workload
    from loadgen.sim.params import read_params
    from loadgen.workload.errors import DatasetError

    header = {
        "schema": "llm-loadgen.workload", "version": 1, "mode": "open", "endpoint": "chat", "model": "",
        "steps": [{"warmup_s": 0.0, "duration_s": 10.0}],
    }  # fmt: skip
    bodies = [{"max_tokens": 8, "messages": [{"role": "user", "content": "x" * n}]} for n in (401, 402, 403, 404, 4001)]
    path = tmp_path / "w.jsonl"
    lines = [json.dumps(header)] + [json.dumps({"step": 0, "at_s": i * 0.5, "body": b}) for i, b in enumerate(bodies)]
    path.write_text("\n".join(lines) + "\n")
    got = [r.prompt_tokens for r in from_workload(path)]
    # the simulator's own count of each body (a ceiling of characters over 4, 4 a message): 105, 105, 105, 105, 1005
    assert got == [read_params(json.dumps(b).encode(), True, 4.0, "sglang").prompt_tokens for b in bodies]
    assert got == [105, 105, 105, 105, 1005]
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,bm90IGFuIGltYWdl"}}
    bad = {"max_tokens": 8, "messages": [{"role": "user", "content": [image]}]}
    path.write_text(json.dumps(header) + "\n" + json.dumps({"step": 0, "at_s": 2.5, "body": bad}) + "\n")
    with pytest.raises(DatasetError, match=r"step 0, request at 2\.5 s: Invalid image"):
        list(from_workload(path))
