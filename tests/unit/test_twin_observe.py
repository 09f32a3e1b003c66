"""What ``loadgen.twin.observe`` reads from a run directory's client timestamps, on synthetic records
with known engine steps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from loadgen.analysis.load import load_run
from loadgen.analysis.synthetic import make_record, step_lines, write_run_dir
from loadgen.twin.observe import _burst_starts, observe

BURST_MS = 0.1  # a server sends a step's chunks one stream after another, 0.1 ms apart


def test_bursts_are_arrivals_closer_than_the_cluster_gap() -> None:
    t = np.array([0, 100_000, 200_000, 2_000_000, 2_050_000, 9_000_000], dtype=np.int64)
    assert _burst_starts(t).tolist() == [0, 0, 0, 3, 3, 5]


def test_a_prefill_starts_when_the_step_before_ended_not_when_its_last_chunk_arrived(tmp_path: Path) -> None:
    """Twenty requests decode; their step ending at 10 ms sends its chunks from 10.0 to 11.9 ms. A
    request sent at 5 ms waited for that step; its prefill ran 10-18 ms (its first chunk at 18 ms), and
    the next decode step ends at 25 ms. The prefill is 8 ms: timed from the burst's last chunk it would
    read 6.1."""
    records = []
    for i in range(20):
        first = 2.0 + 0.01 * i  # one prefill step of the twenty: first chunks together at 2 ms
        records.append(
            make_record(f"r{i}", 0, 0.0, [first, 10.0 + BURST_MS * i, 25.0 + BURST_MS * i, 32.0 + BURST_MS * i])
        )
    records.append(make_record("late", 0, 5.0, [13.0, 25.0 + BURST_MS * 20 - 5.0, 32.0 + BURST_MS * 20 - 5.0]))
    lines = step_lines(0, 0.0, 0.0, 40.0, concurrency=21)
    run = load_run(write_run_dir(tmp_path / "run", steps=lines, records={"requests-w0.jsonl": records}))
    obs = observe([run])
    by_start = sorted(zip(obs.prefill_reqs.tolist(), (obs.prefill_s * 1e3).tolist(), strict=True))
    assert by_start[0] == (1, pytest.approx(8.0))  # the late request's prefill
    assert by_start[1] == (20, pytest.approx(2.0))  # the twenty's: from their send to their first first chunk


def test_a_burst_longer_than_half_a_decode_step_is_not_taken_for_one_step(tmp_path: Path) -> None:
    """Arrivals 0.29 ms apart for 5.5 ms of every 6-ms decode step: a burst that long cannot be told
    from arrivals of several steps run together (a client that read late), so the prefill is timed
    from the last arrival before it (4 ms; from the burst's first it would read 9.5)."""
    gap = 0.29
    records = []
    for i in range(20):
        chunks = [2.0 + 0.01 * i] + [10.0 + 6.0 * s + gap * i for s in range(4)]
        records.append(make_record(f"r{i}", 0, 0.0, chunks))
    last_before = 10.0 + 6.0 * 3 + gap * 19  # the last chunk of the fourth step, 33.51 ms
    records.append(make_record("late", 0, 20.0, [last_before + 4.0 - 20.0, last_before + 10.0 - 20.0]))
    lines = step_lines(0, 0.0, 0.0, 60.0, concurrency=21)
    run = load_run(write_run_dir(tmp_path / "run", steps=lines, records={"requests-w0.jsonl": records}))
    obs = observe([run])
    late = [s for n, s in zip(obs.prefill_reqs.tolist(), (obs.prefill_s * 1e3).tolist(), strict=True) if n == 1]
    assert late == [pytest.approx(4.0)]


def test_a_prefill_whose_first_time_is_only_a_bound_is_not_timed(tmp_path: Path) -> None:
    """The same run as above, but the late request's first chunk came merged with later bytes (the
    client read it late): the transport marked its time an upper bound, 5 ms wide. Its prefill is not
    a measurement, so it is left out; the twenty's, which the transport vouches for, stays."""
    records = []
    for i in range(20):
        first = 2.0 + 0.01 * i
        records.append(
            make_record(f"r{i}", 0, 0.0, [first, 10.0 + BURST_MS * i, 25.0 + BURST_MS * i, 32.0 + BURST_MS * i])
        )
    late = make_record("late", 0, 5.0, [13.0, 25.0 + BURST_MS * 20 - 5.0, 32.0 + BURST_MS * 20 - 5.0])
    late.chunk_late_ns = [[0, 5_000_000]]
    records.append(late)
    lines = step_lines(0, 0.0, 0.0, 40.0, concurrency=21)
    run = load_run(write_run_dir(tmp_path / "run", steps=lines, records={"requests-w0.jsonl": records}))
    obs = observe([run])
    assert list(zip(obs.prefill_reqs.tolist(), (obs.prefill_s * 1e3).tolist(), strict=True)) == [
        (20, pytest.approx(2.0))
    ]
