from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from loadgen.workload.arrivals import gamma_offsets, poisson_offsets, schedule_ns, trace_offsets
from loadgen.workload.datasets import load_trace

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "traces"
AZURE = TRACES / "azure-llm-2023-conv.csv"
MOONCAKE = TRACES / "mooncake-conversation.jsonl"
ALPHA = 0.001


def gaps(offsets: list[float]) -> np.ndarray:
    return np.diff(np.array([0.0, *offsets]))


def test_poisson_gaps_are_exponential_and_rate_is_kept() -> None:
    rate = 8.0
    offsets = list(itertools.islice(poisson_offsets(rate, random.Random(5)), 5000))
    g = gaps(offsets)
    assert stats.kstest(g, stats.expon(scale=1 / rate).cdf).pvalue > ALPHA
    achieved = len(offsets) / offsets[-1]
    # 5000 arrivals: the rate estimate's relative standard error is 1/sqrt(5000) = 1.4%
    assert abs(achieved / rate - 1) < 0.05


def test_poisson_counts_per_second_are_poisson() -> None:
    rate = 4.0
    offsets = np.array(list(itertools.islice(poisson_offsets(rate, random.Random(9)), 8000)))
    seconds = int(offsets[-1])
    counts = np.bincount(offsets[offsets < seconds].astype(int), minlength=seconds)
    # the variance-to-mean ratio of a Poisson count is 1 (dispersion test)
    dispersion = counts.var(ddof=1) / counts.mean()
    chi2 = dispersion * (seconds - 1)
    p = 2 * min(stats.chi2.cdf(chi2, seconds - 1), stats.chi2.sf(chi2, seconds - 1))
    assert p > ALPHA


@pytest.mark.parametrize("cv", [0.5, 1.0, 2.0, 3.0])
def test_gamma_gaps_have_the_configured_burstiness(cv: float) -> None:
    rate = 10.0
    offsets = list(itertools.islice(gamma_offsets(rate, cv, random.Random(int(cv * 10))), 20_000))
    g = gaps(offsets)
    shape = 1 / cv**2
    # KS distance above 1 µs: the cumulative float offsets cannot resolve smaller gaps (a bursty
    # gamma has many: they are simultaneous arrivals at nanosecond resolution).
    x = np.sort(g)
    ecdf = np.arange(1, len(x) + 1) / len(x)
    cdf = stats.gamma(a=shape, scale=1 / (rate * shape)).cdf(x)
    keep = x >= 1e-6
    distance = max(np.abs(ecdf - cdf)[keep].max(), np.abs(ecdf - 1 / len(x) - cdf)[keep].max())
    assert distance < 1.95 / np.sqrt(len(x))  # the KS critical value at alpha = 0.001
    assert abs(g.std() / g.mean() / cv - 1) < 0.08
    assert abs(len(offsets) / offsets[-1] / rate - 1) < 0.05


def test_bad_rates_are_rejected() -> None:
    with pytest.raises(ValueError, match="must be > 0"):
        next(poisson_offsets(0, random.Random(0)))
    with pytest.raises(ValueError, match="coefficient of variation"):
        next(gamma_offsets(1, -1, random.Random(0)))


def test_schedule_adds_start_and_stops_at_duration() -> None:
    start = 1_700_000_000_000_000_000
    out = list(schedule_ns(start, [(0.0, "a"), (0.5, "b"), (1.9999, "c"), (2.0, "d"), (3.0, "e")], 2.0))
    assert out == [(start, "a"), (start + 500_000_000, "b"), (start + 1_999_900_000, "c")]


def test_arrivals_are_reproducible_per_seed() -> None:
    a = list(itertools.islice(poisson_offsets(3, random.Random(1)), 50))
    b = list(itertools.islice(poisson_offsets(3, random.Random(1)), 50))
    c = list(itertools.islice(poisson_offsets(3, random.Random(2)), 50))
    assert a == b and a != c


def test_trace_replay_keeps_the_trace_times_scaled(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    stamps_ms = [1000, 1000, 1250, 4000, 10_500]
    path.write_text(
        "".join(json.dumps({"timestamp": t, "input_length": 10, "output_length": 5}) + "\n" for t in stamps_ms)
    )
    trace = load_trace(path, "mooncake")
    got = [t for t, _ in trace_offsets(trace, time_scale=0.5)]
    assert got == [(t - 1000) / 1000 * 0.5 for t in stamps_ms]
    from_offset = [t for t, _ in trace_offsets(trace, time_scale=2.0, offset_s=0.25)]
    assert from_offset == [0.0, 5.5, 18.5]


@pytest.mark.skipif(not AZURE.exists(), reason=f"trace not present at {AZURE} (needs ../shared beside the repo)")
def test_azure_trace_replay_sends_at_the_trace_times() -> None:
    import csv
    from datetime import datetime

    with AZURE.open() as f:
        rows = list(itertools.islice(csv.DictReader(f), 300))

    def secs(s: str) -> float:
        base, frac = s.split(".")
        return datetime.strptime(base, "%Y-%m-%d %H:%M:%S").timestamp() + float("0." + frac)

    truth = [secs(r["TIMESTAMP"]) for r in rows]
    truth = [t - truth[0] for t in truth]
    trace = load_trace(AZURE, "auto")
    assert trace.format == "azure" and len(trace.rows) == 19_366
    start = 5_000_000_000
    sent = list(schedule_ns(start, trace_offsets(trace, time_scale=0.1), truth[-1] * 0.1 + 1e-6))
    assert len(sent) >= 300
    for (t_ns, row), t, r in zip(sent, truth, rows, strict=False):
        assert abs(t_ns - (start + t * 0.1 * 1e9)) < 1_000  # within 1 µs of the scaled trace time
        assert row.input_tokens == int(r["ContextTokens"]) and row.output_tokens == int(r["GeneratedTokens"])


@pytest.mark.skipif(not MOONCAKE.exists(), reason=f"trace not present at {MOONCAKE} (needs ../shared beside the repo)")
def test_mooncake_trace_loads_with_block_ids() -> None:
    trace = load_trace(MOONCAKE)
    assert trace.format == "mooncake" and len(trace.rows) == 12_031
    first = json.loads(MOONCAKE.open().readline())
    assert trace.rows[0].input_tokens == first["input_length"]
    assert trace.rows[0].hash_ids == tuple(first["hash_ids"])
    # 512-token blocks: the ids cover the input
    for row in trace.rows[:500]:
        assert row.hash_ids is not None
        assert len(row.hash_ids) == -(-row.input_tokens // 512)
