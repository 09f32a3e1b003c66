"""The telemetry sample schema (loadgen.rundir.samples): what the samplers write is what every reader
takes back, typed; lines of neither kind are left out by all readers alike."""

from __future__ import annotations

import typing
from pathlib import Path

import orjson

from loadgen.analysis.load import load_run
from loadgen.rundir.samples import (
    GPU_FIELDS,
    SERVER_FIELDS,
    GpuSample,
    ServerSample,
    gpu_sample,
    gpu_samples,
    sample_of,
    samples_of,
    server_samples,
)
from loadgen.telemetry import prom
from loadgen.telemetry.base import set_readings, settle_power
from loadgen.telemetry.dcgm import dcgm_samples
from loadgen.telemetry.logscan import LogScanner
from loadgen.telemetry.server import SGLANG, VLLM, map_metrics
from loadgen.telemetry.smi import SmiParser


def test_the_field_lists_are_the_typed_dicts_keys() -> None:
    gpu_keys = set(typing.get_type_hints(GpuSample))
    assert set(GPU_FIELDS) == gpu_keys - {"t_ns", "src", "source", "gpu", "uuid"}
    assert set(gpu_sample(1, "nvml", 0)) == gpu_keys  # a GPU sample carries every field
    server_keys = set(typing.get_type_hints(ServerSample))
    assert set(SERVER_FIELDS) == server_keys - {"t_ns", "src", "engine", "source"}
    # every name the built-in /metrics tables fill is a server field, so no sample holds another
    assert set(SGLANG) | set(VLLM) <= set(SERVER_FIELDS)


def test_every_source_writes_a_sample_the_reader_takes_back_unchanged() -> None:
    smi = SmiParser().feed("index, uuid, power.draw [W], power.draw.instant [W], memory.used [MiB]", 5)
    smi += SmiParser(["index", "uuid", "power.draw", "memory.used"]).feed("1, GPU-x, 250.5 W, 1024 MiB", 6)
    dcgm = dcgm_samples(prom.parse('DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a"} 300\n'), 7)
    server = map_metrics(prom.parse("vllm:num_requests_running 3\nvllm:kv_cache_usage_perc 0.5\n"), t_ns=8)
    _, logged = LogScanner().scan(
        "Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 4 reqs, "
        "Waiting: 1 reqs, GPU KV cache usage: 12.5%, Prefix cache hit rate: 50.0%",
        9,
    )
    written = [*smi, *dcgm, server, *logged]
    assert [s["src"] for s in written] == ["gpu", "gpu", "server", "server"]
    lines = [orjson.loads(orjson.dumps(s)) for s in written]
    assert samples_of(lines) == written
    assert smi[0]["power_avg_w"] == 250.5 and smi[0]["power_kind"] == "average" and smi[0]["mem_used_b"] == 1 << 30
    assert logged[0].get("kv_usage") == 0.125 and logged[0].get("source") == "log"
    assert server.get("running") == 3 and isinstance(server.get("running"), int)


def test_a_reader_keeps_the_two_kinds_with_a_whole_time_and_fills_a_gpu_samples_fields() -> None:
    assert sample_of({"t_ns": 1, "src": "client", "power_w": 1.0}) is None  # not a sample kind
    assert sample_of({"src": "gpu"}) is None and sample_of({"t_ns": "x", "src": "gpu"}) is None
    assert sample_of([1, 2]) is None and sample_of(None) is None
    g = sample_of({"t_ns": 2.0, "src": "gpu", "power_w": 100.0})
    assert g is not None and g["src"] == "gpu"
    assert g["t_ns"] == 2 and isinstance(g["t_ns"], int)
    assert (g["gpu"], g["source"], g["uuid"], g["energy_mj"], g["power_w"]) == (0, "", None, None, 100.0)
    s = sample_of({"t_ns": 3, "src": "server", "queued": 2})
    assert s is not None and s == {"t_ns": 3, "src": "server", "queued": 2}
    both = samples_of([{"t_ns": 1, "src": "gpu", "gpu": 1}, {"t_ns": 2, "src": "server"}, {"t_ns": 3, "src": "x"}])
    assert [x["gpu"] for x in gpu_samples(both)] == [1] and [x["t_ns"] for x in server_samples(both)] == [2]


def test_set_readings_refuses_a_name_that_is_no_gpu_field() -> None:
    rec = gpu_sample(1, "smi", 0)
    set_readings(rec, {"util_gpu": 42.0, "power_avg_w": 99.5}, frozenset({"util_gpu"}))
    settle_power(rec, None)
    assert (rec["util_gpu"], rec["power_w"], rec["power_kind"]) == (42, 99.5, "average")
    settle_power(rec, 120.0)
    assert (rec["power_w"], rec["power_kind"]) == (120.0, "instant")
    try:
        set_readings(rec, {"power_instant_w": 1.0})
    except KeyError as exc:
        assert "power_instant_w" in str(exc)
    else:
        raise AssertionError("a name outside GPU_FIELDS was written into a GPU sample")


def test_load_run_types_the_samples_of_a_run_directory(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text("{}")
    (tmp_path / "samples.jsonl").write_bytes(
        b'{"t_ns": 5, "src": "server", "engine": "sglang", "running": 2}\n'
        b'{"t_ns": 6, "src": "gpu", "gpu": 1, "power_w": 300.0}\n'
        b'{"t_ns": 7, "src": "mystery"}\n'
        b'{"src": "gpu", "power_w": 1.0}\n'
        b'{"t_ns": 8, "src": "gp'  # cut off mid-line: skipped
    )
    run = load_run(tmp_path)
    assert [s["src"] for s in run.samples] == ["server", "gpu"]
    gpu = gpu_samples(run.samples)[0]
    assert gpu["gpu"] == 1 and gpu["power_limit_w"] is None
