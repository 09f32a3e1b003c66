"""The load generator's own live metrics in Prometheus's text format (for existing Grafana set-ups).

The numbers come from the run directory as it grows (the request records and ``steps.jsonl``), so
a Locust master that receives its workers' records exports the whole cluster's counts, and they are
the same numbers the report will show. Served on the Locust web UI at ``/loadgen/metrics`` and, for
headless ``loadgen ramp``, by ``start_exporter(state, port)`` on a port of its own.

Metrics::

    loadgen_requests_ok_total                  counter    successful requests
    loadgen_requests_failed_total{error_class} counter    failed requests by class
    loadgen_output_tokens_total                counter    output tokens of successful requests
    loadgen_ttft_seconds                       histogram  first chunk - intended send, per request
    loadgen_itl_seconds                        histogram  every gap between successive output chunks
    loadgen_e2e_seconds                        histogram  end - intended send, per request
    loadgen_step                               gauge      index of the current step (-1 before the first)
    loadgen_step_concurrency                   gauge      the current step's target users (closed loop)
    loadgen_step_rate                          gauge      the current step's request rate (open loop)
    loadgen_users                              gauge      Locust users running (where known)
    loadgen_in_flight                          gauge      requests sent and not finished (where known)
    loadgen_run_info{run_id}                   gauge      1, labelled with the run directory's name
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from loadgen.webui.tail import JsonlTail, RecordTail, chunk_gaps_s, ttft_ms

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)
E2E_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class Histogram:
    """Cumulative buckets as Prometheus wants them: ``le`` bounds, ``+Inf``, ``_sum``, ``_count``."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(sorted(bounds))
        self.counts = [0] * len(self.bounds)  # observations <= bound (not yet cumulative)
        self.sum = 0.0
        self.count = 0

    def observe(self, v: float) -> None:
        self.sum += v
        self.count += 1
        for i, b in enumerate(self.bounds):
            if v <= b:
                self.counts[i] += 1
                break

    def lines(self, name: str) -> list[str]:
        out = []
        cum = 0
        for b, c in zip(self.bounds, self.counts, strict=True):
            cum += c
            out.append(f'{name}_bucket{{le="{_num(b)}"}} {cum}')
        out.append(f'{name}_bucket{{le="+Inf"}} {self.count}')
        out.append(f"{name}_sum {_num(self.sum)}")
        out.append(f"{name}_count {self.count}")
        return out


def _num(v: float) -> str:
    return repr(float(v))


def _label(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class LoadgenMetrics:
    """Counters accumulated from one run directory at a time (``run_dir()`` may change between
    scrapes, e.g. a new ramp started from the web UI: counters keep counting across runs)."""

    def __init__(
        self,
        run_dir: Callable[[], Path | None],
        users: Callable[[], int | None] | None = None,
        in_flight: Callable[[], int | None] | None = None,
    ) -> None:
        self._run_dir_fn = run_dir
        self._users_fn = users
        self._in_flight_fn = in_flight
        self._lock = threading.Lock()
        self._dir: Path | None = None
        self._records: RecordTail | None = None
        self._steps: JsonlTail | None = None
        self.ok = 0
        self.failed: dict[str, int] = {}
        self.tokens = 0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.step = -1
        self.concurrency: int | None = None
        self.rate: float | None = None

    def update(self) -> None:
        with self._lock:
            d = self._run_dir_fn()
            if d is None:
                return
            d = Path(d)
            if d != self._dir:
                self._dir = d
                self._records = RecordTail(d)
                self._steps = JsonlTail(d / "steps.jsonl")
                self.step, self.concurrency, self.rate = -1, None, None
            assert self._records is not None and self._steps is not None
            for ev in self._steps.read():
                if ev.get("event") == "start" and isinstance(ev.get("step"), int) and ev["step"] >= self.step:
                    self.step = ev["step"]
                    self.concurrency = ev.get("concurrency")
                    self.rate = ev.get("rate")
            for rec in self._records.read():
                self._observe(rec)

    def _observe(self, rec: dict[str, Any]) -> None:
        cls = rec.get("error_class")
        if cls is not None:
            self.failed[str(cls)] = self.failed.get(str(cls), 0) + 1
            return
        self.ok += 1
        self.tokens += int(rec.get("output_tokens") or 0)
        t = ttft_ms(rec)
        if t is not None:
            self.ttft.observe(t / 1e3)
        for gap in chunk_gaps_s(rec):
            self.itl.observe(gap)
        if rec.get("end_ns") and rec.get("intended_ns"):
            self.e2e.observe((rec["end_ns"] - rec["intended_ns"]) / 1e9)

    def render(self) -> str:
        self.update()
        with self._lock:
            out: list[str] = []

            def head(name: str, kind: str, text: str) -> None:
                out.append(f"# HELP {name} {text}")
                out.append(f"# TYPE {name} {kind}")

            head("loadgen_run_info", "gauge", "The run directory being exported (value always 1).")
            if self._dir is not None:
                out.append(f'loadgen_run_info{{run_id="{_label(self._dir.name)}"}} 1')
            head("loadgen_requests_ok_total", "counter", "Requests that completed without error.")
            out.append(f"loadgen_requests_ok_total {self.ok}")
            head("loadgen_requests_failed_total", "counter", "Failed requests by error class.")
            for cls in sorted(self.failed):
                out.append(f'loadgen_requests_failed_total{{error_class="{_label(cls)}"}} {self.failed[cls]}')
            head("loadgen_output_tokens_total", "counter", "Output tokens of successful requests.")
            out.append(f"loadgen_output_tokens_total {self.tokens}")
            head("loadgen_ttft_seconds", "histogram", "Time to first output chunk, from the intended send time.")
            out.extend(self.ttft.lines("loadgen_ttft_seconds"))
            head("loadgen_itl_seconds", "histogram", "Gaps between successive output chunks.")
            out.extend(self.itl.lines("loadgen_itl_seconds"))
            head("loadgen_e2e_seconds", "histogram", "End-to-end latency, from the intended send time.")
            out.extend(self.e2e.lines("loadgen_e2e_seconds"))
            head("loadgen_step", "gauge", "Index of the current ramp step (-1 before the first).")
            out.append(f"loadgen_step {self.step}")
            head("loadgen_step_concurrency", "gauge", "Target concurrent users of the current step (closed loop).")
            if self.concurrency is not None:
                out.append(f"loadgen_step_concurrency {self.concurrency}")
            head("loadgen_step_rate", "gauge", "Request rate of the current step in req/s (open loop).")
            if self.rate is not None:
                out.append(f"loadgen_step_rate {_num(float(self.rate))}")
            users = self._users_fn() if self._users_fn is not None else None
            head("loadgen_users", "gauge", "Locust users running.")
            if users is not None:
                out.append(f"loadgen_users {users}")
            in_flight = self._in_flight_fn() if self._in_flight_fn is not None else None
            head("loadgen_in_flight", "gauge", "Requests sent and not yet finished.")
            if in_flight is not None:
                out.append(f"loadgen_in_flight {in_flight}")
            return "\n".join(out) + "\n"


def metrics_for_state(state: Any, env: Any = None) -> LoadgenMetrics:
    """Metrics of a ``RunState`` (``env``: its Locust environment, for the user count)."""

    def users() -> int | None:
        runner = getattr(env, "runner", None)
        return int(runner.user_count) if runner is not None else None

    def in_flight() -> int | None:
        v = getattr(state, "in_flight", None)
        return int(v) if isinstance(v, int) else None

    return LoadgenMetrics(lambda: state.run_dir, users=users, in_flight=in_flight)


class Exporter:
    """A running exporter; calling it stops the server. ``port`` is the bound port."""

    def __init__(self, server: ThreadingHTTPServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        self.port: int = server.server_address[1]

    def __call__(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)


def serve_metrics(metrics: LoadgenMetrics, port: int, host: str = "0.0.0.0") -> Exporter:
    """Serve ``metrics`` at ``/metrics`` (and ``/``) on ``host:port`` from a background thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] not in ("/", "/metrics"):
                self.send_error(404, "only /metrics is served here")
                return
            body = metrics.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return  # scrapes every few seconds would flood the progress line

    try:
        server = ThreadingHTTPServer((host, port), Handler)
    except OSError as exc:
        raise OSError(
            f"--prometheus-port {port}: cannot listen on {host}:{port} ({exc.strerror}); pick another port"
        ) from None
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="loadgen-prometheus", daemon=True)
    thread.start()
    return Exporter(server, thread)


def start_exporter(state: Any, port: int, env: Any = None, host: str = "0.0.0.0") -> Exporter:
    """Export ``state``'s run (a ``RunState``) on ``host:port``; returns the stop callable (with
    ``.port``)."""
    return serve_metrics(metrics_for_state(state, env), port, host)
