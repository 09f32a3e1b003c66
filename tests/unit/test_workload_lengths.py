from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from loadgen.workload.errors import TableError
from loadgen.workload.lengths import Distribution, parse_distribution, sample_length

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "traces"
AZURE = TRACES / "azure-llm-2023-conv.csv"
N = 4000
ALPHA = 0.001  # a correct sampler fails a test at this level once in a thousand seeds


def draw(spec: Any, n: int = N, seed: int = 11, integer: bool = False) -> np.ndarray:
    dist = parse_distribution(spec, "x", integer=integer)
    rng = random.Random(seed)
    return np.array([dist.sample(rng) for _ in range(n)])


def test_fixed_is_constant() -> None:
    assert set(draw(300, 100)) == {300.0}
    assert set(draw({"dist": "fixed", "value": 7}, 100)) == {7.0}


def test_uniform_continuous_passes_ks() -> None:
    x = draw({"dist": "uniform", "low": 100, "high": 900})
    assert x.min() >= 100 and x.max() <= 900
    assert stats.kstest(x, stats.uniform(loc=100, scale=800).cdf).pvalue > ALPHA


def test_uniform_integer_gives_each_integer_equally() -> None:
    x = draw({"dist": "uniform", "low": 1, "high": 6}, integer=True)
    counts = np.array([(x == k).sum() for k in range(1, 7)])
    assert counts.sum() == N  # nothing outside [1, 6], no fractions
    assert stats.chisquare(counts).pvalue > ALPHA


def test_normal_passes_ks() -> None:
    x = draw({"dist": "normal", "mean": 2000, "std": 300})
    assert stats.kstest(x, stats.norm(2000, 300).cdf).pvalue > ALPHA


def test_lognormal_median_and_sigma_pass_ks() -> None:
    x = draw({"dist": "lognormal", "median": 760, "sigma": 0.99})
    assert stats.kstest(x, stats.lognorm(s=0.99, scale=760).cdf).pvalue > ALPHA
    assert abs(np.median(x) / 760 - 1) < 0.1
    # the log's spread is the configured sigma (standard error sigma / sqrt(2N) ~ 1.1%)
    assert abs(np.log(x).std() / 0.99 - 1) < 0.04


def test_exponential_passes_ks() -> None:
    x = draw({"dist": "exponential", "mean": 2.5})
    assert stats.kstest(x, stats.expon(scale=2.5).cdf).pvalue > ALPHA


def test_empirical_values_follow_their_frequencies() -> None:
    values = [10, 20, 20, 30, 30, 30]
    x = draw({"dist": "empirical", "values": values})
    counts = np.array([(x == v).sum() for v in (10, 20, 30)])
    assert counts.sum() == N
    assert stats.chisquare(counts, f_exp=np.array([1, 2, 3]) / 6 * N).pvalue > ALPHA


def test_mixture_passes_ks_against_mixture_cdf() -> None:
    spec = {
        "dist": "mixture",
        "components": [
            {"weight": 3, "dist": "normal", "mean": 100, "std": 10},
            {"weight": 1, "dist": "normal", "mean": 1000, "std": 50},
        ],
    }
    x = draw(spec)

    def cdf(v: np.ndarray) -> np.ndarray:
        return 0.75 * stats.norm(100, 10).cdf(v) + 0.25 * stats.norm(1000, 50).cdf(v)

    assert stats.kstest(x, cdf).pvalue > ALPHA


def test_min_max_clamp_puts_the_tails_on_the_bounds() -> None:
    x = draw({"dist": "normal", "mean": 500, "std": 100, "min": 400, "max": 650})
    assert x.min() == 400 and x.max() == 650
    below = (x == 400).mean()
    expected = stats.norm(500, 100).cdf(400)
    # binomial standard error at N draws; 4 sigma
    assert abs(below - expected) < 4 * math.sqrt(expected * (1 - expected) / N)


def test_sample_length_rounds_and_clips_to_context() -> None:
    dist: Distribution = parse_distribution({"dist": "uniform", "low": 0, "high": 50_000}, "x", integer=True)
    rng = random.Random(1)
    values = [sample_length(dist, rng, 8192) for _ in range(500)]
    assert min(values) >= 1 and max(values) == 8192
    assert all(isinstance(v, int) for v in values)


@pytest.mark.skipif(not AZURE.exists(), reason=f"trace not present at {AZURE} (needs ../shared beside the repo)")
def test_empirical_from_azure_trace_matches_the_trace() -> None:
    dist = parse_distribution(
        {"dist": "empirical", "path": str(AZURE), "format": "azure", "field": "output"}, "x", integer=True
    )
    import csv

    with AZURE.open() as f:
        truth = np.array([int(r["GeneratedTokens"]) for r in csv.DictReader(f)])
    rng = random.Random(3)
    x = np.array([dist.sample(rng) for _ in range(N)])
    # the draw is a sample of the trace's own values: two-sample KS does not reject
    assert set(np.unique(x)) <= set(np.unique(truth))
    assert stats.ks_2samp(x, truth).pvalue > ALPHA


BAD = [
    (-5, "x = -5: must be >= 0"),
    (12.5, "x = 12.5: must be a whole number of tokens"),
    ("long", 'x = "long": must be a number or a table'),
    ({"dist": "lognormel", "median": 5, "sigma": 1}, 'x.dist = "lognormel": must be one of'),
    ({"dist": "lognormel", "median": 5, "sigma": 1}, 'did you mean "lognormal"'),
    ({"dist": "uniform", "low": 900, "high": 100}, "x.high = 100: must be >= low (900)"),
    ({"dist": "uniform", "low": -10, "high": 100}, "x.low = -10: must be >= 0"),
    ({"dist": "normal", "mean": 100, "std": -1}, "x.std = -1: must be >= 0"),
    ({"dist": "normal", "mean": -100, "std": 1}, "x.mean = -100: must be >= 0"),
    ({"dist": "lognormal", "median": 0, "sigma": 1}, "x.median = 0: must be > 0"),
    ({"dist": "lognormal", "median": 100}, "x.sigma: is required"),
    ({"dist": "lognormal", "median": 100, "sigma": 1, "sgima": 2}, 'x.sgima: unknown key (did you mean "sigma"?)'),
    ({"dist": "normal", "mean": 100, "std": 1, "min": 50, "max": 10}, "x.max = 10: must be >= min (50)"),
    ({"dist": "fixed", "value": 10, "min": 50}, "x.min = 50: is above every value"),
    ({"dist": "empirical", "values": []}, "x.values = []: must not be empty"),
    ({"dist": "empirical", "values": [1, -2]}, "x.values[1] = -2: must be a number >= 0"),
    ({"dist": "empirical"}, "empirical needs values"),
    ({"dist": "empirical", "path": "/nonexistent/t.csv", "format": "azure", "field": "input"}, "no such file"),
    (
        {"dist": "mixture", "components": [{"weight": 0, "dist": "fixed", "value": 1}]},
        "components[0].weight = 0: must be > 0",
    ),
    ({"dist": "mixture", "components": [{"weight": 1, "dist": "normal", "mean": 1}]}, "components[0].std: is required"),
    ({"dist": "uniform", "low": True, "high": 3}, "x.low = true: must be a number, not a boolean"),
]


@pytest.mark.parametrize(("spec", "message"), BAD)
def test_bad_distributions_are_explained(spec: Any, message: str) -> None:
    with pytest.raises(TableError) as info:
        parse_distribution(spec, "x", integer=True)
    assert message in str(info.value)
