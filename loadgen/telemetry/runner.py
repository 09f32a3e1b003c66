"""The side process body: every source on its own thread, writing to the run directory.

Periodic samplers (NVML, nvidia-smi one-shot, DCGM, server /metrics, a remote monitor) each run on
a thread with their own period, on a fixed schedule (a slow read skips ticks rather than bunching
them). Streaming sources (an nvidia-smi loop command, server log commands and files) run on threads
of their own. A source that fails is recorded as an event; the others go on. The main thread only
waits for the stop file, SIGTERM/SIGINT, or the parent process going away.

Files written in the run directory: ``samples.jsonl``, ``events.jsonl`` (see ``base`` for the
schema), ``server.log`` (every server log line read, verbatim), ``telemetry.pid`` (written once
started, removed at exit).

A write that fails (disk full, the folder remounted read-only) stops the process cleanly: the
lines already written stay whole (``JsonlAppender``), later samples are dropped, the reason goes
to stdout (``telemetry.log``, when that can still be written) and the exit status is
``EXIT_WRITE_FAILED`` (4), which the load generator reports; the run itself goes on.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import orjson

from loadgen.rundir.records import JsonlAppender, RunDirError, RunDirWriteError
from loadgen.rundir.samples import Sample
from loadgen.telemetry.base import Emit, Event, Sampler, SamplerDone, SamplerUnavailable, event
from loadgen.telemetry.logscan import LogScanner
from loadgen.telemetry.options import TelemetryOptions
from loadgen.telemetry.streams import CommandLines, FileLines, split_command

PID_FILE = "telemetry.pid"
SERVER_LOG = "server.log"
EXIT_WRITE_FAILED = 4  # the run directory could not be written (disk full, read-only)


@dataclass(frozen=True, kw_only=True)
class RunConfig(TelemetryOptions):
    """The sources (``TelemetryOptions``) plus where this process writes and when it stops."""

    run_dir: Path
    stop_file: Path | None = None
    parent_pid: int | None = None


class Sink:
    """The two JSONL files; one ``os.write`` per batch of lines, safe across threads (O_APPEND).

    The first write that fails is kept in ``failure`` and sets ``stop`` (the process winds down);
    every later write is dropped, so the files end with whole lines from before the failure."""

    def __init__(self, run_dir: Path, stop: threading.Event | None = None) -> None:
        self.samples_out = JsonlAppender(run_dir / "samples.jsonl")
        self.events_out = JsonlAppender(run_dir / "events.jsonl")
        self.log_out: JsonlAppender | None = None
        self.run_dir = run_dir
        self.stop = stop
        self.failure: RunDirError | None = None
        self.n_samples = 0
        self.n_events = 0

    def _write(self, out: JsonlAppender, data: bytes) -> bool:
        if self.failure is not None:
            return False
        try:
            out.write_bytes(data)
            return True
        except RunDirError as exc:
            if self.failure is None:
                self.failure = exc
                if self.stop is not None:
                    self.stop.set()
            return False

    def samples(self, recs: Sequence[Sample]) -> None:
        if recs and self._write(self.samples_out, b"".join(orjson.dumps(r) + b"\n" for r in recs)):
            self.n_samples += len(recs)

    def event(self, rec: Event) -> None:
        if self._write(self.events_out, orjson.dumps(rec, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"):
            self.n_events += 1

    def server_log_line(self, line: str) -> None:
        if self.failure is not None:
            return
        if self.log_out is None:
            try:
                self.log_out = JsonlAppender(self.run_dir / SERVER_LOG)
            except RunDirError as exc:
                self.failure = self.failure or exc
                if self.stop is not None:
                    self.stop.set()
                return
        self._write(self.log_out, line.rstrip("\r\n").encode("utf-8", errors="replace") + b"\n")

    def close(self) -> None:
        self.samples_out.close()
        self.events_out.close()
        if self.log_out is not None:
            self.log_out.close()


def run_periodic(
    sampler: Sampler, sink: Sink, stop: threading.Event, monotonic: Callable[[], float] = time.monotonic
) -> None:
    """Open ``sampler`` and call it every ``period_s`` until ``stop``; never raises."""
    emit: Emit = sink.event
    try:
        sampler.open(emit)
    except Exception as exc:
        msg = str(exc) if isinstance(exc, SamplerUnavailable) else f"{type(exc).__name__}: {exc}"
        emit(event("source_unavailable", sampler=sampler.name, message=msg))
        try:
            sampler.close()
        except Exception:
            pass  # already reported as unavailable
        return
    period = max(sampler.period_s, 0.001)
    last_error: str | None = None
    repeats = 0
    next_t = monotonic()
    try:
        while not stop.is_set():
            try:
                recs = sampler.sample()
            except SamplerDone as exc:
                emit(event("source_ended", sampler=sampler.name, message=str(exc)))
                return
            except SamplerUnavailable as exc:
                emit(event("source_unavailable", sampler=sampler.name, message=str(exc)))
                return
            except Exception as exc:
                msg = str(exc) or type(exc).__name__
                if msg != last_error:
                    emit(event("sampler_error", sampler=sampler.name, message=msg))
                    last_error, repeats = msg, 0
                else:
                    repeats += 1
            else:
                if last_error is not None:
                    emit(event("sampler_recovered", sampler=sampler.name, after_errors=repeats + 1))
                    last_error = None
                sink.samples(recs)
            next_t += period
            now = monotonic()
            if next_t < now:  # fell behind: skip the missed ticks, keep the phase
                next_t += math.ceil((now - next_t) / period) * period
            stop.wait(next_t - now)
    finally:
        try:
            sampler.close()
        except Exception as exc:
            emit(event("sampler_error", sampler=sampler.name, message=f"close: {exc}"))


def _gpu_sources(cfg: RunConfig, sink: Sink) -> tuple[list[Sampler], list[Any]]:
    src = cfg.gpu_source.strip()
    period = 1.0 / cfg.gpu_hz
    if src in ("", "none"):
        return [], []
    if src == "nvml":
        from loadgen.telemetry.nvml import NvmlSampler

        return [NvmlSampler(period, cfg.gpus)], []
    if src.startswith(("http://", "https://")):
        from loadgen.telemetry.dcgm import DcgmSampler

        return [DcgmSampler(src, period)], []
    from loadgen.telemetry.smi import SmiParser, SmiPollSampler, is_streaming, query_fields

    argv = split_command(src, "--gpu-source")
    if not is_streaming(argv):
        return [SmiPollSampler(argv, period)], []
    parser = SmiParser(query_fields(argv))

    def on_line(line: str, t_ns: int) -> None:
        sink.samples(parser.feed(line, t_ns))

    return [], [CommandLines("smi", argv, on_line, sink.event)]


def build_sources(cfg: RunConfig, sink: Sink, stop: threading.Event) -> tuple[list[Sampler], list[Any]]:
    """Periodic samplers and started-on-demand line sources for ``cfg``; ValueError on a bad option."""
    samplers, streams = _gpu_sources(cfg, sink)
    if cfg.metrics_url:
        from loadgen.telemetry.server import ServerMetricsSampler

        samplers.append(ServerMetricsSampler(cfg.metrics_url, 1.0 / cfg.metrics_hz, cfg.metrics_map))
    if cfg.monitor_url:
        from loadgen.telemetry.remote import RemoteSampler

        samplers.append(RemoteSampler(cfg.monitor_url, cfg.monitor_token, 1.0 / cfg.monitor_hz, sink.event))
    if cfg.server_logs or cfg.server_log_file:
        scanner = LogScanner()

        def on_log_line(line: str, t_ns: int) -> None:
            sink.server_log_line(line)
            events, samples = scanner.scan(line, t_ns)
            for ev in events:
                sink.event(ev)
            sink.samples(samples)

        if cfg.server_logs:
            argv = split_command(cfg.server_logs, "--server-logs")
            streams.append(CommandLines("server_logs", argv, on_log_line, sink.event))
        if cfg.server_log_file:
            streams.append(
                FileLines(
                    "server_log_file",
                    Path(cfg.server_log_file),
                    on_log_line,
                    sink.event,
                    stop,
                    from_start=cfg.log_from_start,
                )
            )
    return samplers, streams


def _public(cfg: RunConfig) -> dict[str, Any]:
    return {
        "gpu_source": cfg.gpu_source,
        "gpu_hz": cfg.gpu_hz,
        "gpus": cfg.gpus,
        "metrics_url": cfg.metrics_url,
        "metrics_hz": cfg.metrics_hz,
        "server_logs": cfg.server_logs,
        "server_log_file": cfg.server_log_file,
        "monitor_url": cfg.monitor_url,
        "monitor_token": "***" if cfg.monitor_token else None,
    }


def run(cfg: RunConfig, stop: threading.Event | None = None, install_signals: bool = True) -> int:
    """Run until stopped; returns the process exit status (0, or 2 for a bad option)."""
    stop = stop or threading.Event()
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    sink = Sink(run_dir, stop)
    if install_signals:

        def _on_signal(_sig: int, _frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, _on_signal)
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # ignored on entry: a background job
            signal.signal(signal.SIGINT, _on_signal)
    try:
        samplers, streams = build_sources(cfg, sink, stop)
    except ValueError as exc:
        sink.event(event("source_unavailable", sampler="side_process", message=str(exc)))
        sink.close()
        print(f"loadgen telemetry: {exc}", flush=True)
        return 2
    sink.event(event("started", sampler="side_process", pid=os.getpid(), config=_public(cfg)))
    threads = [
        threading.Thread(target=run_periodic, args=(s, sink, stop), name=f"telemetry-{s.name}", daemon=True)
        for s in samplers
    ]
    for t in threads:
        t.start()
    for s in streams:
        s.start()
    pid_file = run_dir / PID_FILE
    try:
        pid_file.write_text(f"{os.getpid()}\n")
    except OSError as exc:
        sink.failure = sink.failure or RunDirWriteError(pid_file, exc)
        stop.set()
    reason = "signal"
    try:
        while not stop.wait(0.1):
            if cfg.stop_file is not None and cfg.stop_file.exists():
                reason = "stop_file"
                break
            if cfg.parent_pid is not None and os.getppid() != cfg.parent_pid:
                reason = "parent_exited"
                break
    finally:
        stop.set()
        for s in streams:
            s.stop()
        for t in threads:
            t.join(5.0)
        if sink.failure is not None:
            reason = "write_failed"
        sink.event(event("stopped", sampler="side_process", reason=reason, samples=sink.n_samples))
        sink.close()
        try:
            pid_file.unlink()
        except OSError:
            pass
    if sink.failure is not None:
        try:
            print(f"loadgen telemetry: stopped: {sink.failure}; samples written before it stay", flush=True)
        except OSError:
            pass  # telemetry.log is on the same full or read-only disk
        return EXIT_WRITE_FAILED
    return 0


def config_from_args(args: argparse.Namespace, run_dir: Path) -> RunConfig:
    """The side process's configuration from its command line (``add_source_args``)."""
    return RunConfig(run_dir=run_dir, **asdict(TelemetryOptions.from_args(args)))
