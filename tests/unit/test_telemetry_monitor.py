"""`loadgen monitor`: the HTTP endpoint (loopback, token rules, cursors) and the remote puller."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.rundir.records import read_jsonl
from loadgen.telemetry import TelemetryOptions, start_side_process
from loadgen.telemetry.monitor import main, parse_bind, read_since, serve
from loadgen.telemetry.remote import RemoteSampler, pull

ROOT = Path(__file__).resolve().parents[2]


def lines(*recs: dict[str, Any]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in recs)


def http_get(url: str, token: str | None = None) -> tuple[int, bytes, dict[str, str]]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=5) as resp:
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


@pytest.fixture
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, Path]]:
    token = getattr(request, "param", None)
    httpd = serve(tmp_path, "127.0.0.1", 0, token)
    yield f"http://127.0.0.1:{httpd.server_address[1]}", tmp_path
    httpd.shutdown()
    httpd.server_close()


def test_read_since_returns_complete_lines_and_the_next_cursor(tmp_path: Path) -> None:
    f = tmp_path / "samples.jsonl"
    f.write_bytes(b'{"a":1}\n{"a":2}\n{"a":')
    body, cursor = read_since(f, 0)
    assert body == b'{"a":1}\n{"a":2}\n' and cursor == 16
    assert read_since(f, cursor) == (b"", 16)  # the torn line waits until it is complete
    with open(f, "ab") as fh:
        fh.write(b"3}\n")
    assert read_since(f, cursor) == (b'{"a":3}\n', 24)
    assert read_since(tmp_path / "missing.jsonl", 5) == (b"", 5)


def test_loopback_endpoint_without_token(served: tuple[str, Path]) -> None:
    url, run_dir = served
    (run_dir / "samples.jsonl").write_bytes(lines({"t_ns": 1, "src": "gpu", "gpu": 0, "power_w": 300.0}))
    code, body, headers = http_get(f"{url}/v1/samples?since=0")
    assert code == 200 and orjson.loads(body) == {"t_ns": 1, "src": "gpu", "gpu": 0, "power_w": 300.0}
    assert int(headers["X-Next-Cursor"]) == len(body)
    assert abs(int(headers["X-Server-Time-Ns"]) - time.time_ns()) < 5 * 10**9
    assert http_get(f"{url}/v1/events?since=0")[:2] == (200, b"")
    assert http_get(f"{url}/nope")[0] == 404
    assert http_get(f"{url}/v1/samples?since=x")[0] == 400


@pytest.mark.parametrize("served", ["s3cret-token"], indirect=True)
def test_a_token_is_required_when_set(served: tuple[str, Path]) -> None:
    url, run_dir = served
    (run_dir / "samples.jsonl").write_bytes(lines({"t_ns": 1}))
    assert http_get(f"{url}/v1/samples")[0] == 401
    assert http_get(f"{url}/v1/samples", token="wrong")[0] == 401
    code, body, _ = http_get(f"{url}/v1/samples", token="s3cret-token")
    assert code == 200 and body == b'{"t_ns":1}\n'
    assert http_get(f"{url}/healthz")[0] == 200


def test_a_non_loopback_bind_without_token_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"refusing to serve telemetry on 0\.0\.0\.0:0 without a token"):
        serve(tmp_path, "0.0.0.0", 0, None)
    monkeypatch.delenv("LOADGEN_MONITOR_TOKEN", raising=False)
    assert main(["--serve", "0.0.0.0:0", "--gpu-source", "none", "--run-dir", str(tmp_path)]) == 2
    assert not (tmp_path / "events.jsonl").exists()  # nothing started
    assert parse_bind("9500") == ("127.0.0.1", 9500)
    assert parse_bind("[::1]:9500") == ("::1", 9500)
    with pytest.raises(ValueError, match="expected \\[HOST:\\]PORT"):
        parse_bind("host:http")


@pytest.mark.parametrize("served", ["tok"], indirect=True)
def test_remote_sampler_pulls_since_its_cursor(served: tuple[str, Path]) -> None:
    url, run_dir = served
    (run_dir / "samples.jsonl").write_bytes(lines({"t_ns": 1, "src": "gpu"}, {"t_ns": 2, "src": "gpu"}))
    (run_dir / "events.jsonl").write_bytes(lines({"t_ns": 1, "src": "log", "kind": "log_match", "pattern": "cuda_oom"}))
    emitted: list[dict[str, Any]] = []
    sampler = RemoteSampler(url, "tok", 0.5, emitted.append)
    assert [r["t_ns"] for r in sampler.sample()] == [1, 2]
    with open(run_dir / "samples.jsonl", "ab") as fh:
        fh.write(lines({"t_ns": 3, "src": "gpu"}))
    assert [r["t_ns"] for r in sampler.sample()] == [3]
    assert sampler.sample() == []
    kinds = [e["kind"] for e in emitted]
    assert kinds == ["remote_clock", "log_match"]  # the clock once; each remote event once
    assert emitted[1]["remote"] is True and abs(emitted[0]["offset_ns"]) < 10**9
    with pytest.raises(Exception, match="HTTP 401"):
        pull(url, "samples", 0, token=None)


def test_monitor_process_serves_a_remote_side_process(tmp_path: Path) -> None:
    remote_dir, local_dir, log = tmp_path / "remote", tmp_path / "local", tmp_path / "server.log"
    log.write_text("")
    stop = tmp_path / "stop-monitor"
    env = {**os.environ, "LOADGEN_MONITOR_TOKEN": "tk", "PYTHONPATH": str(ROOT)}
    mon = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from loadgen.telemetry.monitor import main; sys.exit(main(sys.argv[1:]))",
            "--serve",
            "127.0.0.1:0",
            "--run-dir",
            str(remote_dir),
            "--gpu-source",
            "none",
            "--server-log-file",
            str(log),
            "--stop-file",
            str(stop),
        ],
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert mon.stdout is not None
        first = mon.stdout.readline().decode()
        assert first.startswith("loadgen monitor: serving http://127.0.0.1:"), first
        url = first.split()[3]
        side = start_side_process(
            local_dir, TelemetryOptions(gpu_source="none", monitor_url=url, monitor_token="tk", monitor_hz=10.0)
        )
        assert side.wait_ready(15.0)
        time.sleep(0.5)
        with open(log, "a") as fh:
            fh.write("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
        deadline = time.monotonic() + 10
        found: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not found:
            time.sleep(0.1)
            found = [e for e in read_jsonl(local_dir / "events.jsonl") if e.get("pattern") == "cuda_oom"]
        assert side.stop(10.0) == 0
        assert len(found) == 1 and found[0]["remote"] is True
        assert "tk" not in (local_dir / "events.jsonl").read_text()  # the token is never written down
    finally:
        stop.touch()
        assert mon.wait(10) == 0
