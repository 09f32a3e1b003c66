"""``--arrival`` / ``--burstiness`` (issue 19: open-loop arrivals from the web UI's form and the command
line): the flags replace the scenario's ``[load]`` arrival, and the gaps they give have the asked
coefficient of variation."""

from __future__ import annotations

import itertools
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from loadgen.cli.parser import build_parser
from loadgen.cli.ramp_options import ramp_options as _ramp_options
from loadgen.load.compose import base_workload
from loadgen.spec.options import OptionError, RampOptions

REPO = Path(__file__).resolve().parents[2]


def _gaps_cv(opts: RampOptions, rate: float = 50.0, n: int = 4000) -> float:
    w = base_workload(opts)
    times = [t for t, _ in itertools.islice(w.arrivals(0, rate, 3600.0), n)]
    gaps = [(b - a) / 1e9 for a, b in itertools.pairwise(times)]
    assert statistics.fmean(gaps) == pytest.approx(1 / rate, rel=0.08)
    return statistics.pstdev(gaps) / statistics.fmean(gaps)


def test_gamma_arrivals_from_the_flags_have_the_asked_burstiness() -> None:
    poisson = _gaps_cv(RampOptions(url="http://127.0.0.1:1", model="m"))
    bursty = _gaps_cv(RampOptions(url="http://127.0.0.1:1", model="m", arrival="gamma", burstiness=3.0))
    assert poisson == pytest.approx(1.0, abs=0.1)
    assert bursty == pytest.approx(3.0, rel=0.15)


def test_the_flags_replace_a_scenarios_arrival() -> None:
    opts = RampOptions(url="http://127.0.0.1:1", model="m", scenario=str(REPO / "scenarios" / "chat.toml"))
    assert base_workload(opts).scenario.load.arrival == "poisson"
    load = base_workload(replace(opts, arrival="gamma", burstiness=2.0)).scenario.load
    assert (load.arrival, load.burstiness) == ("gamma", 2.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rate", "2", "--burstiness", "2"], "--burstiness 2: applies to --arrival gamma only"),
        (["--rate", "2", "--arrival", "gamma", "--burstiness", "0"], "--burstiness 0: must be above 0"),
    ],
)
def test_bad_burstiness_names_the_flag(argv: list[str], message: str) -> None:
    ns = build_parser().parse_args(["ramp", "--url", "http://127.0.0.1:1", *argv])
    with pytest.raises(OptionError, match=message):
        _ramp_options(ns, [])
