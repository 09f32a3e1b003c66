"""The pieces of the master/worker link that need no processes: addresses, clocks, the rules
between the distributed options, and the ramp's refusal of a bad combination."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.cli.commands import main
from loadgen.load.distributed import WorkerClock, other_scenario, scenario_digest
from loadgen.spec.options import OptionError, parse_host_port
from tests.conftest import REPO


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("10.0.0.5:6000", ("10.0.0.5", 6000)),
        ("master-a", ("master-a", 5557)),
        ("[::1]:5558", ("::1", 5558)),
        ("[fd00::2]", ("fd00::2", 5557)),
        ("0.0.0.0:5557", ("0.0.0.0", 5557)),
    ],
)
def test_host_port_takes_the_forms_users_write(text: str, want: tuple[str, int]) -> None:
    assert parse_host_port(text, "--master") == want


@pytest.mark.parametrize(("text", "says"), [(":5557", "no host"), ("a:0", "1 to 65535"), ("a:x", "1 to 65535")])
def test_a_bad_address_names_the_flag(text: str, says: str) -> None:
    with pytest.raises(OptionError, match=f"--master-bind '{text}'.*{says}"):
        parse_host_port(text, "--master-bind")


def test_the_quickest_round_trip_gives_the_offset() -> None:
    # (master send, worker clock, master receive): the worker is 50 ms ahead; one slow round trip
    pings = [
        (0, 50_000_000 + 400_000, 900_000),
        (1_000_000, 51_000_000 + 100_000, 1_200_000),
        (2_000_000, 0, 9_000_000),
    ]
    clock = WorkerClock.best(pings)
    assert clock.rtt_ns == 200_000
    assert clock.offset_ns == 51_100_000 - 1_100_000  # the worker's time less the round trip's midpoint
    assert clock.follows  # 50 ms is far beyond a 0.2 ms round trip
    assert not WorkerClock(300_000, 200_000).follows  # below 1 ms: not worth moving the records
    assert not WorkerClock(2_000_000, 5_000_000).follows  # within the round trip: cannot be told from 0


def test_a_worker_refuses_a_scenario_it_does_not_have_as_the_master_does(tmp_path: Path) -> None:
    chat = str(REPO / "scenarios" / "chat.toml")
    digest = scenario_digest(chat)
    assert digest is not None and other_scenario(chat, digest) is None
    other = tmp_path / "chat.toml"
    other.write_text((REPO / "scenarios" / "chat.toml").read_text() + "\n")
    why = other_scenario(str(other), digest)
    assert why is not None and f"scenario {other} differs (sha256 " in why and digest[:12] in why
    missing = other_scenario(str(tmp_path / "none.toml"), digest)
    assert missing is not None and "is not on this machine" in missing
    assert other_scenario(None, None) is None


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--master"], "--master: give --expect-workers N"),
        (["--expect-workers", "2"], "--expect-workers: applies to --master only"),
        (["--master", "--expect-workers", "2", "--workers", "2"], "--master and --workers: give one"),
        (["--master", "--expect-workers", "2", "--master-bind", "h:99999"], "--master-bind 'h:99999'"),
        (["--on-worker-loss", "later"], "invalid choice: 'later'"),
    ],
)
def test_the_ramp_refuses_a_distributed_combination_before_anything_starts(
    extra: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["ramp", "--url", "http://127.0.0.1:9", "--concurrency", "1", *extra]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusal
        code = int(exc.code or 0)
    assert code == 2
    assert says in capsys.readouterr().err
