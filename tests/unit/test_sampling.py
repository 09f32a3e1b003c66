"""A step window's sampling band (``loadgen.analysis.sampling``): the order-statistic interval of a
quantile against samples of known distributions, and per step of a run directory."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from loadgen.analysis.load import load_run
from loadgen.analysis.sampling import combined_noise, quantile_interval, relative_half_width, step_sampling
from loadgen.analysis.synthetic import make_record, step_lines, write_run_dir


def test_ranks_of_a_median_of_ten_are_the_second_and_ninth() -> None:
    # P(B <= 1) = 11/1024 <= 2.5 % < P(B <= 2) = 56/1024, B ~ Binomial(10, 1/2): ranks 2 and 9
    assert quantile_interval(np.arange(10.0, 0.0, -1.0), 0.5) == (2.0, 9.0)


@pytest.mark.parametrize("n", [6, 12, 40, 150])
def test_the_median_band_covers_the_true_median_95_percent_of_the_time(n: int) -> None:
    """Exponential samples (true median ln 2): the band holds it in >= 95 % of 2,000 draws (within
    the draws' own error), and is no wider than it must be (under 99.5 %) once n allows."""
    rng = np.random.default_rng(n)
    hits = 0
    for _ in range(2000):
        band = quantile_interval(rng.exponential(size=n), 0.5)
        assert band is not None and band[0] <= band[1]
        hits += band[0] <= math.log(2) <= band[1]
    assert 0.94 <= hits / 2000 <= (1.0 if n < 12 else 0.995)


def test_too_few_values_have_no_band() -> None:
    assert quantile_interval([], 0.5) is None
    assert quantile_interval([1.0, 2.0, 3.0, 4.0, 5.0], 0.5) is None  # 2 / 2^5 > 5 %
    assert quantile_interval(np.arange(6.0), 0.5) == (0.0, 5.0)
    assert quantile_interval(np.arange(367.0), 0.99) is None  # 0.99^367 > 2.5 %: no upper rank
    band = quantile_interval(np.arange(368.0), 0.99)
    assert band is not None and band[1] == 367.0 and band[0] < 367.0


def test_relative_widths_and_their_combination() -> None:
    assert relative_half_width((9.0, 11.0), 10.0) == pytest.approx(0.1)
    assert relative_half_width(None, 10.0) is None and relative_half_width((1.0, 2.0), 0.0) is None
    assert combined_noise(0.3, 0.4) == pytest.approx(0.5)
    assert combined_noise(0.3, None) is None


def test_step_sampling_takes_the_windows_successful_requests(tmp_path: Path) -> None:
    """Twelve requests in step 0's window (TTFT 10 + k ms, TPOT 5 + k ms), one failed and one in
    the warm-up left out; step 1 holds three: no band."""
    lines = step_lines(0, 0.0, 500.0, 3000.0, concurrency=4) + step_lines(1, 3000.0, 3500.0, 6000.0, concurrency=8)
    records = [
        make_record("warm", 0, 100.0, [1.0, 2.0]),
        make_record("bad", 0, 600.0, [], status=500, error_class="http"),
    ]
    for k in range(12):
        gap = 5.0 + k
        records.append(make_record(f"a{k}", 0, 600.0 + 100 * k, [10.0 + k + gap * j for j in range(4)]))
    records += [make_record(f"b{k}", 1, 3600.0 + 100 * k, [10.0, 20.0]) for k in range(3)]
    run = load_run(write_run_dir(tmp_path / "run", steps=lines, records={"requests-w0.jsonl": records}))
    bands = step_sampling(run)
    assert bands[0]["requests"] == 12
    # n = 12: ranks 3 and 10 (P(B <= 2) = 79/4096 <= 2.5 % < P(B <= 3) = 299/4096)
    assert bands[0]["ttft_p50_ms"] == pytest.approx((12.0, 19.0))
    assert bands[0]["tpot_p50_ms"] == pytest.approx((7.0, 14.0))
    assert bands[0]["ttft_p99_ms"] is None
    assert bands[1]["requests"] == 3 and bands[1]["tpot_p50_ms"] is None
