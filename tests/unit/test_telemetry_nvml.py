"""The real pynvml code path against the fake libnvidia-ml.so.1 (tests/fakenvml), in a subprocess.

The side process is started with the real controller; nvidia-ml-py is unmodified and loads the fake
library through LD_LIBRARY_PATH. The fake's power follows a script, and its energy counter is the
exact integral of that script, so the expected values are computed here from the script itself.
"""

from __future__ import annotations

import importlib.util
import itertools
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadgen.analysis.telemetry import step_telemetry
from loadgen.rundir.records import read_jsonl
from loadgen.telemetry import TelemetryOptions, start_side_process

_BUILD = Path(__file__).resolve().parents[1] / "fakenvml" / "build.py"
_spec = importlib.util.spec_from_file_location("fakenvml_build", _BUILD)
assert _spec is not None and _spec.loader is not None
fakenvml = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fakenvml)

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("cc") is None, reason="no C compiler")

SCRIPT = [(0.0, 100_000), (0.7, 400_000), (1.4, 250_000)]  # (t_offset_s, mW)
# the script's clock starts this long after the side process is started: sampling begins before it
# however slowly a busy machine starts the process (0.3 s under load), and the checks that read the
# first 0.3 s of the script find samples there (before it, the fake holds the script's first value)
LEAD_S = 1.5
STEP_MW = 1_000  # GPU i draws script + i W


@pytest.fixture(scope="module")
def lib_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path: Path = fakenvml.build_fake_nvml(tmp_path_factory.mktemp("fakenvml"))
    return path


def power_w(t_s: float, gpu: int) -> float:
    mw = SCRIPT[0][1]
    for t0, v in SCRIPT:
        if t0 <= t_s:
            mw = v
    return (mw + gpu * STEP_MW) / 1000.0


def energy_j(a_s: float, b_s: float, gpu: int) -> float:
    """Integral of the scripted step function over [a, b], in joules."""
    edges = sorted({a_s, b_s, *(t for t, _ in SCRIPT if a_s < t < b_s)})
    return sum(power_w(x, gpu) * (y - x) for x, y in itertools.pairwise(edges))


Until = Callable[[list[dict[str, Any]], list[dict[str, Any]]], bool]


def run_side(
    tmp: Path, lib: Path, seconds: float, hz: float, until: Until | None = None, **fake: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int, int | None]:
    """Sample the scripted GPUs for ``seconds`` of the script, and then until ``until(samples, events)``
    holds: the samples a test counts, however long a busy machine takes to take them (a 60 s timeout
    only catches a hang). Returns the samples, the events, the script's start (ns) and the exit code."""
    script = tmp / "power.txt"
    script.write_text("# t_offset_s power_mw\n" + "".join(f"{t} {mw}\n" for t, mw in SCRIPT))
    t0_ns = time.time_ns() + int(LEAD_S * 1e9)
    env = fakenvml.fake_nvml_env(lib, script=str(script), t0_ns=str(t0_ns), gpu_step_mw=str(STEP_MW), **fake)
    run_dir = tmp / "run"
    side = start_side_process(run_dir, TelemetryOptions(gpu_source="nvml", gpu_hz=hz), env=env)
    assert side.wait_ready(15.0), (run_dir / "telemetry.log").read_text()
    assert time.time_ns() < t0_ns, f"the side process took more than {LEAD_S} s to start sampling"
    time.sleep(max(0.0, (t0_ns - time.time_ns()) / 1e9 + seconds))  # the script's span
    deadline = time.monotonic() + 60
    while until is not None and time.monotonic() < deadline:
        samples_path, events_path = run_dir / "samples.jsonl", run_dir / "events.jsonl"
        if samples_path.exists() and until(read_jsonl(samples_path), read_jsonl(events_path)):
            break
        time.sleep(0.05)
    assert side.alive()
    rc = side.stop(10.0)
    return read_jsonl(run_dir / "samples.jsonl"), read_jsonl(run_dir / "events.jsonl"), t0_ns, rc


@pytest.fixture(scope="module")
def scripted_run(
    lib_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int, int | None]:
    def enough(samples: list[dict[str, Any]], _: list[dict[str, Any]]) -> bool:
        return all(sum(s["src"] == "gpu" and s.get("gpu") == gpu for s in samples) >= 30 for gpu in (0, 1))

    return run_side(tmp_path_factory.mktemp("scripted"), lib_dir, 2.2, 20.0, enough, gpus="2")


def test_samples_arrive_at_the_configured_rate_with_the_scripted_values(scripted_run: Any) -> None:
    samples, events, t0_ns, rc = scripted_run
    assert rc == 0
    for gpu in (0, 1):
        mine = [s for s in samples if s["src"] == "gpu" and s["gpu"] == gpu]
        t = np.array([s["t_ns"] for s in mine])
        interval_s = float(np.median(np.diff(t))) / 1e9
        assert interval_s == pytest.approx(0.05, rel=0.2), interval_s
        assert len(mine) >= 30  # waited for (1.5 s at 20 Hz)
        for s in mine:
            off = (s["t_ns"] - t0_ns) / 1e9
            assert s["power_kind"] == "instant"
            assert s["power_w"] in (power_w(off - 0.01, gpu), power_w(off + 0.01, gpu)), (off, s["power_w"])
            assert s["power_limit_w"] == 700.0
            assert s["uuid"] == f"GPU-fake-{gpu:04d}"
            assert s["mem_total_b"] == 150754820096
        seen = {s["power_w"] for s in mine}
        assert {power_w(0.1, gpu), power_w(1.0, gpu), power_w(1.8, gpu)} <= seen
    assert not [e for e in events if e["kind"] in ("sampler_error", "gpu_lost", "source_unavailable")]
    assert [e["kind"] for e in events if e["sampler"] == "side_process"] == ["started", "stopped"]


def test_energy_per_step_from_the_counter_matches_the_scripted_integral(scripted_run: Any) -> None:
    samples, events, t0_ns, _ = scripted_run
    edges_s = [(0.3, 1.0), (1.0, 1.9), (0.3, 1.9)]
    windows = [(t0_ns + int(a * 1e9), t0_ns + int(b * 1e9)) for a, b in edges_s]
    rows = step_telemetry(samples, events, windows, [5, 5, 5], output_tokens_per_step=[1000, 1000, 1000])
    for row, (a, b) in zip(rows, edges_s, strict=True):
        want = energy_j(a, b, 0) + energy_j(a, b, 1)
        assert row["energy_method"] == "counter"
        assert row["energy_j"] == pytest.approx(want, rel=0.01), (a, b)
        assert row["tokens_per_joule"] == pytest.approx(1000 / row["energy_j"])
        assert row["power_valid"] is True
        assert row["gpu_count"] == 2
        assert row["gpu_power_limit_w"] == 1400.0
    # 1.0-1.9 s: 400 W then 250 W per GPU (+1 W on GPU 1); max of the sum is the 400 W part
    assert rows[1]["gpu_power_w"]["max"] == pytest.approx(801.0)
    assert rows[1]["gpu_power_w"]["mean"] == pytest.approx(
        (energy_j(1.0, 1.9, 0) + energy_j(1.0, 1.9, 1)) / 0.9, rel=0.06
    )


def test_without_an_energy_counter_energy_is_the_power_integral(lib_dir: Path, tmp_path: Path) -> None:
    samples, events, t0_ns, rc = run_side(tmp_path, lib_dir, 2.0, 20.0, gpus="1", unsupported="energy")
    assert rc == 0
    assert [e["field"] for e in events if e["kind"] == "field_not_supported"] == ["energy"]
    a, b = 0.3, 1.9
    rows = step_telemetry(samples, events, [(t0_ns + int(a * 1e9), t0_ns + int(b * 1e9))], [3])
    t = np.array([s["t_ns"] for s in samples])
    worst_gap_s = float(np.diff(t).max()) / 1e9
    # a sampled step function misses at most one sampling interval at each scripted change
    bound = sum(abs(power_w(tc, 0) - power_w(tc - 1e-6, 0)) * worst_gap_s for tc, _ in SCRIPT if a < tc < b)
    assert rows[0]["energy_method"] == "power_integral"
    assert abs(rows[0]["energy_j"] - energy_j(a, b, 0)) <= bound + 1.0


def test_gpu_lost_and_field_not_supported_are_recorded_and_not_fatal(lib_dir: Path, tmp_path: Path) -> None:
    def gpu0_goes_on(samples: list[dict[str, Any]], events: list[dict[str, Any]]) -> bool:
        lost = [e["t_ns"] for e in events if e["kind"] == "gpu_lost"]
        return bool(lost) and sum(s.get("gpu") == 0 and s["t_ns"] > lost[0] + 300_000_000 for s in samples) >= 3

    samples, events, t0_ns, rc = run_side(
        tmp_path, lib_dir, 1.8, 10.0, gpu0_goes_on, gpus="2", lost_after_s="0.8", lost_gpu="1", unsupported="instant"
    )
    assert rc == 0
    lost = [e for e in events if e["kind"] == "gpu_lost"]
    assert len(lost) == 1 and lost[0]["gpu"] == 1 and "lost" in lost[0]["message"]
    lost_off = (lost[0]["t_ns"] - t0_ns) / 1e9
    assert 0.8 <= lost_off < 1.2
    unsupported = sorted(e["gpu"] for e in events if e["kind"] == "field_not_supported")
    assert unsupported == [0, 1]
    assert all(e["field"] == "power_instant" for e in events if e["kind"] == "field_not_supported")
    gpu1 = [s for s in samples if s["gpu"] == 1]
    gpu0_late = [s for s in samples if s["gpu"] == 0 and s["t_ns"] > lost[0]["t_ns"] + 300_000_000]
    assert gpu1 and max(s["t_ns"] for s in gpu1) < lost[0]["t_ns"]
    assert len(gpu0_late) >= 3  # the other GPU goes on
    assert all(s["power_kind"] == "average" and s["power_avg_w"] is not None for s in samples)
    # the step after the loss is flagged: power covers one GPU of two
    rows = step_telemetry(samples, events, [(t0_ns + int(1.2e9), t0_ns + int(1.7e9))], [4])
    assert rows[0]["power_valid"] is False
    assert "GPU [1] missing" in rows[0]["power_invalid_reason"]
    assert rows[0]["telemetry_events"] == {}  # the loss happened before this window


@pytest.mark.parametrize(
    ("fake", "words"),
    [
        ({"init_error": "9"}, "Driver is not loaded"),
        ({"gpus": "0"}, "found no GPU"),
        ({}, "libnvidia-ml.so.1 not found"),
    ],
)
def test_no_driver_is_an_event_and_the_process_keeps_running(
    lib_dir: Path, tmp_path: Path, fake: dict[str, str], words: str
) -> None:
    lib = lib_dir if fake else tmp_path / "empty"
    lib.mkdir(exist_ok=True)
    if not fake and subprocess.run(["sh", "-c", "ldconfig -p | grep -q libnvidia-ml.so.1"]).returncode == 0:
        pytest.skip("this host has a real NVIDIA driver")
    env = fakenvml.fake_nvml_env(lib, **fake)
    side = start_side_process(tmp_path / "run", TelemetryOptions(gpu_source="nvml"), env=env)
    assert side.wait_ready(15.0)
    deadline = time.monotonic() + 5
    events: list[dict[str, Any]] = []
    while time.monotonic() < deadline and not any(e["kind"] == "source_unavailable" for e in events):
        time.sleep(0.05)
        events = read_jsonl(tmp_path / "run" / "events.jsonl")
    assert side.alive()
    assert side.stop(10.0) == 0
    unavailable = [e for e in events if e["kind"] == "source_unavailable"]
    assert len(unavailable) == 1 and unavailable[0]["sampler"] == "nvml"
    assert words.lower() in unavailable[0]["message"].lower()
