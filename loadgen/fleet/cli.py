"""``loadgen fleet``: replicas of a deployment behind a router, serving a trace on the virtual clock.

The deployment is a twin or profile file (``twin.toml`` from ``loadgen calibrate``, any
``profiles/*.toml``-format file), a shipped profile name, or a deployment as ``loadgen predict`` takes
it (``model=...,hardware=...,server.tp=8``). The requests: a public trace (``--trace``; ``--scale``,
``--day-shape`` and ``--duration`` play it faster, to a day's shape, looped) or steady Poisson arrivals
(``--rate`` with ``--duration``). ``--router`` names one policy or several (compared side by side on the
same requests); ``--replicas N`` or, with ``--slo``, ``--find-replicas``: the fewest replicas whose every
window (or ``--hold`` of them) keeps the SLO. Writes fleet.json and fleet.md in ``--out``; every figure
is predicted, and both files say from what. Exit status 2 for bad input, 1 when no replica count up to
``--max-replicas`` holds the SLO.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from loadgen.fleet.router import POLICY_NAMES, Policy, parse_policy
from loadgen.fleet.sim import FleetResult, parse_autoscale, request_limits, run_fleet
from loadgen.fleet.stats import holds
from loadgen.fleet.traffic import FleetRequest, from_trace, from_workload, parse_duration, parse_shape, poisson
from loadgen.sim.profile import Profile, ProfileError, load_profile, load_profile_file
from loadgen.spec.gates import SLOError, parse_slo
from loadgen.workload.datasets import TRACE_FORMATS, load_trace
from loadgen.workload.errors import DatasetError
from loadgen.workload.wfile import open_workload


def load_deployment(text: str) -> tuple[Profile, str]:
    """The deployment a user names (module docstring) and its label. ProfileError naming what to give."""
    if "=" in text:
        from loadgen.predict.deploy import parse_deployment

        dep = parse_deployment(text)
        return dep.profile, dep.label
    path = Path(text)
    if path.suffix == ".toml" or path.exists():
        if not path.is_file():
            raise ProfileError(f"--deployment {text}: no such file (a twin.toml, a profile file, a profile name)")
        return load_profile_file(path), str(path)
    return load_profile(text), text


DESCRIPTION = """\
Replicas of a deployment behind a router, serving a trace, a day of traffic or a steady rate, computed
on the simulator's virtual clock (each replica the engine loadgen sim serves; no HTTP). Per window:
arrival rate, replicas busy, TTFT/TPOT/E2E and queue percentiles, SLO attainment and goodput, prefix
cache hits, power, energy and cost. Several --router policies are compared on the same requests;
--find-replicas gives the fewest replicas whose every window (or --hold of them) keeps the SLO. Every
figure is predicted, and fleet.json / fleet.md say from what."""

EPILOG = """\
examples:
  # the Azure conversation trace on 4 replicas of Llama-3.1-8B on H100, each policy side by side
  loadgen fleet --deployment h100-llama-8b --trace azure_conv.csv --replicas 4 \\
      --router round-robin,least-requests,prefix-aware --window 10m
  # the fewest replicas of a calibrated twin that keep the SLO through a day of the trace, 3x its rate
  loadgen fleet --deployment twin.toml --trace azure_conv.csv --day-shape diurnal --scale 3 \\
      --find-replicas --slo ttft_p99=2s,tpot_p99=50ms --price 3.5
  # Llama-3.3-70B in FP8 on 8x H200 (TP8), Poisson arrivals at 40/s for 10 minutes, 16 replicas
  loadgen fleet --deployment "model=llama-3.3-70b-instruct,hardware=h200x8,server.tp=8,server.quantization=fp8" \\
      --rate 40 --duration 10m --input-tokens 2000 --output-tokens 300 --replicas 16 --window 1m"""


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="loadgen fleet",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--deployment",
        required=True,
        help="required: a twin or profile file (.toml), a profile name, or KEY=VALUE items as loadgen predict takes",
    )
    src = ap.add_argument_group("requests (a trace, or --rate with --duration)")
    src.add_argument("--trace", help="a request trace: Azure or BurstGPT CSV, Mooncake JSONL (default: none)")
    src.add_argument(
        "--trace-format", default="auto", choices=("auto", *TRACE_FORMATS), help="the trace's format (default: auto)"
    )
    src.add_argument("--scale", type=float, default=1.0, help="multiply the trace's request rate (default: 1)")
    src.add_argument(
        "--day-shape",
        help="play the trace over a day of this shape, looped: flat, diurnal or 24 relative hourly rates "
        "(default: none, the trace's own times)",
    )
    src.add_argument(
        "--duration",
        help="how long to play, e.g. 5m, 1h, 1d; loops the trace (default: the trace once, a day shape 1d)",
    )
    src.add_argument("--max-requests", type=int, help="stop after this many requests (default: no limit)")
    src.add_argument(
        "--workload",
        help="instead of a trace: an open-loop workload file (loadgen workload export --rate, or import) "
        "at its times (default: none)",
    )
    src.add_argument("--rate", type=float, help="instead of a trace: Poisson arrivals per second (default: none)")
    src.add_argument("--input-tokens", type=int, default=1000, help="with --rate: prompt tokens (default: 1000)")
    src.add_argument("--output-tokens", type=int, default=256, help="with --rate: output tokens (default: 256)")
    ap.add_argument(
        "--router",
        default="least-requests",
        help=f"policy, or several comma-separated to compare: {', '.join(POLICY_NAMES)} (default: least-requests)",
    )
    ap.add_argument("--replicas", type=int, help="replicas of the deployment (default: none; or --find-replicas)")
    ap.add_argument("--find-replicas", action="store_true", help="the fewest replicas that hold --slo")
    ap.add_argument(
        "--disaggregate",
        metavar="P:D",
        help="prefill and decode pools of P and D replicas (the prompt's KV over the NICs between them), "
        "compared with the same GPUs as P+D aggregated replicas (default: none, aggregated)",
    )
    ap.add_argument(
        "--autoscale",
        help="scale the replicas as the load goes: target=0.7,capacity=N (requests in flight a replica serves "
        "within the SLO),cold-start=auto|90s,interval=30s,min=1,max=64,down-after=5m; compared with a fixed "
        "fleet at the autoscaler's peak (default: none, a fixed fleet)",
    )
    ap.add_argument(
        "--max-replicas", type=int, default=256, help="with --find-replicas: the most to try (default: 256)"
    )
    ap.add_argument(
        "--per-window",
        action="store_true",
        help="with --find-replicas: also the fewest replicas each window needs (each window played on its own "
        "after the 10 minutes before it)",
    )
    ap.add_argument(
        "--hold",
        type=float,
        default=1.0,
        help="with --find-replicas: the share of windows that must hold the SLO (default: 1, every one)",
    )
    ap.add_argument("--slo", help="latency limits, e.g. ttft_p99=2s,tpot_p99=50ms; ttft, tpot and e2e (default: none)")
    ap.add_argument("--window", default="1h", help="the report's window, e.g. 5m, 1h (default: 1h)")
    ap.add_argument("--price", type=float, help="USD per GPU-hour, for the cost column (default: none)")
    ap.add_argument(
        "--seed",
        type=int,
        default=0,
        help="the random seed of the replicas, the Poisson arrivals and the order drawn for requests that "
        "arrive at one instant (default: 0)",
    )
    ap.add_argument(
        "--orders",
        type=int,
        default=1,
        help="play the requests N times, each with its own drawn order of the requests that share an arrival "
        "time (a trace on a coarse clock): with --replicas each figure's median and range over them, with "
        "--find-replicas the fewest replicas that hold the SLO in every one (default: 1)",
    )
    ap.add_argument("--out", help="folder for fleet.json and fleet.md (default: reports/fleet-<time>)")
    ap.add_argument("--quiet", action="store_true", help="no progress line")
    return ap


class _Args:
    """The options, read and checked once."""

    def __init__(self, ns: argparse.Namespace) -> None:
        self.profile, self.label = load_deployment(ns.deployment)
        self.policies = [parse_policy(p) for p in ns.router.split(",") if p.strip()]
        if not self.policies:
            raise ValueError(f"--router {ns.router!r}: name a policy: {', '.join(POLICY_NAMES)}")
        self.slo: dict[str, float] = parse_slo(ns.slo) if ns.slo else {}
        request_limits(self.slo)
        self.window_s = parse_duration(ns.window, "--window")
        self.duration_s = parse_duration(ns.duration, "--duration") if ns.duration else None
        self.shape = parse_shape(ns.day_shape) if ns.day_shape else None
        self.autoscale = parse_autoscale(ns.autoscale) if ns.autoscale else None
        self.pd: tuple[int, int] | None = None
        if ns.disaggregate:
            parts = ns.disaggregate.split(":")
            try:
                self.pd = (int(parts[0]), int(parts[1])) if len(parts) == 2 else None
            except ValueError:
                self.pd = None
            if self.pd is None or min(self.pd) < 1:
                raise ValueError(f"--disaggregate {ns.disaggregate!r}: give prefill:decode replicas, e.g. 2:6")
            if ns.find_replicas or self.autoscale is not None or ns.replicas is not None:
                raise ValueError(
                    "--disaggregate gives the replicas (P:D): leave out --replicas, --find-replicas, --autoscale"
                )
            if self.profile.server.engine == "vllm":
                raise ValueError("--disaggregate is modelled on SGLang's scheduler; this deployment runs vLLM's")
            ns.replicas = sum(self.pd)
        if self.autoscale is not None:
            if ns.find_replicas:
                raise ValueError("--autoscale and --find-replicas answer different questions: give one")
            if ns.replicas is None:
                ns.replicas = self.autoscale.min_replicas
        elif self.pd is None and (ns.replicas is None) == (not ns.find_replicas):
            raise ValueError("give --replicas N, --find-replicas (with --slo) or --autoscale")
        if ns.find_replicas and not self.slo:
            raise ValueError("--find-replicas looks for the fewest replicas that hold an SLO: give --slo")
        if ns.replicas is not None and ns.replicas < 1:
            raise ValueError(f"--replicas {ns.replicas}: give at least 1")
        if not 0 < ns.hold <= 1:
            raise ValueError(f"--hold {ns.hold}: give a share of windows in (0, 1]")
        if ns.max_replicas < 1:
            raise ValueError(f"--max-replicas {ns.max_replicas}: give at least 1")
        if sum(x is not None for x in (ns.trace, ns.rate, ns.workload)) != 1:
            raise ValueError("give --trace FILE, --workload FILE or --rate R (with --duration)")
        if ns.workload is not None and (ns.day_shape or ns.scale != 1.0 or ns.duration):
            raise ValueError(
                "--workload plays the file at its own times: leave out --scale, --day-shape and --duration"
            )
        if ns.scale <= 0:
            raise ValueError(f"--scale {ns.scale}: must be > 0")
        if ns.rate is not None:
            if not ns.rate > 0:
                raise ValueError(f"--rate {ns.rate}: must be > 0")
            if self.duration_s is None:
                raise ValueError("--rate needs --duration (how long the arrivals go on)")
            if ns.input_tokens < 1 or ns.output_tokens < 1:
                raise ValueError("--input-tokens and --output-tokens must be >= 1")
        if ns.orders < 1:
            raise ValueError(f"--orders {ns.orders}: give at least 1")
        if ns.orders > 1 and (self.autoscale is not None or self.pd is not None or ns.per_window):
            raise ValueError(
                "--orders draws the order of simultaneous arrivals for --replicas and --find-replicas runs; "
                "leave it out with --autoscale, --disaggregate and --per-window"
            )
        if ns.per_window and not ns.find_replicas:
            raise ValueError("--per-window is --find-replicas' answer for each window: give --find-replicas")
        self.trace = load_trace(ns.trace, ns.trace_format) if ns.trace else None
        self.workload_sha = ""
        if ns.workload is not None:
            wf = open_workload(ns.workload)  # every line checked once, before any run
            if wf.header.mode != "open":
                next(from_workload(ns.workload), None)  # raises its WorkloadFileError: no times to play
            self.workload_sha = wf.sha256
        self.ns = ns

    def run(self, policy: Policy, replicas: int, order: int = 0, **extra: Any) -> FleetResult:
        """One fleet run of the requests with these options (``order``: which drawn order of simultaneous
        arrivals, from 0; ``extra``: autoscale, disaggregate)."""
        ns = self.ns
        return run_fleet(
            self.profile,
            self.requests(),
            replicas=replicas,
            policy=policy,
            window_s=self.window_s,
            slo=self.slo,
            seed=ns.seed,
            order_seed=ns.seed + order,
            progress=_progress(ns.quiet),
            **extra,
        )

    def requests(self) -> Iterator[FleetRequest]:
        ns = self.ns
        if ns.workload is not None:
            s = self.profile.server
            stream = from_workload(ns.workload, chars_per_token=s.chars_per_token, block_tokens=s.prefix_block_tokens)
            if ns.max_requests is None:
                return stream
            return (r for _, r in zip(range(ns.max_requests), stream, strict=False))
        if self.trace is not None:
            return from_trace(
                self.trace,
                scale=ns.scale,
                shape=self.shape,
                duration_s=self.duration_s,
                block_tokens=self.profile.server.prefix_block_tokens,
                max_requests=ns.max_requests,
            )
        assert self.duration_s is not None
        stream = poisson(ns.rate, self.duration_s, ns.input_tokens, ns.output_tokens, seed=ns.seed)
        if ns.max_requests is None:
            return stream
        return (r for i, r in zip(range(ns.max_requests), stream, strict=False))

    def source(self) -> dict[str, Any]:
        ns = self.ns
        if ns.workload is not None:
            return {"workload": str(ns.workload), "sha256": self.workload_sha}
        if self.trace is not None:
            return {
                "trace": self.trace.path,
                "format": self.trace.format,
                "trace_requests": len(self.trace.rows),
                "scale": ns.scale,
                "day_shape": list(self.shape) if self.shape else None,
                "duration_s": self.duration_s,
            }
        return {
            "poisson_rps": ns.rate,
            "duration_s": self.duration_s,
            "input_tokens": ns.input_tokens,
            "output_tokens": ns.output_tokens,
        }


def _progress(quiet: bool) -> Callable[[float, int], None] | None:
    if quiet or not sys.stderr.isatty():
        return None
    started = time.monotonic()

    def show(t: float, n: int) -> None:
        print(
            f"\r  {n:,} requests, {t / 3600:.2f} h simulated, {time.monotonic() - started:.0f} s",
            end="",
            file=sys.stderr,
            flush=True,
        )

    return show


BACKLOG_PER_REPLICA = 20  # --find-replicas: requests in flight per replica's running batch that end an attempt


def window_verdicts(result: FleetResult, slo: dict[str, float]) -> list[bool | None]:
    """Each window's verdict on the SLO (None: nothing to judge); a run stopped overloaded fails from
    the window it stopped in to the end of the requests (``n_windows`` of the longest run tried)."""
    out: list[bool | None] = []
    stop = result.overloaded_at_s
    for w in result.windows:
        if stop is not None and w.end_s > stop:
            out.append(False)
        elif w.arrived or w.finished:
            out.append(holds(w.row(result.gpus_per_replica, None, slo), slo, w.failed))
        else:
            out.append(None)
    return out


def judge(result: FleetResult, slo: dict[str, float], hold: float) -> tuple[bool, float]:
    """Whether the run holds the SLO in at least ``hold`` of its judged windows, and the share that do."""
    verdicts = window_verdicts(result, slo)
    judged = [v for v in verdicts if v is not None]
    if not judged:
        return False, 0.0
    share = sum(1 for v in judged if v) / len(judged)
    # a run stopped overloaded did not play its later windows: it does not hold, whatever the share
    return share >= hold - 1e-12 and result.overloaded_at_s is None, share


def find_replicas(
    args: _Args, policy: Policy, log: Callable[[str], None]
) -> tuple[int | None, FleetResult | None, list[dict[str, Any]]]:
    """The fewest replicas holding the SLO (doubling, then bisecting), its run, and every count tried."""
    ns = args.ns
    tried: dict[int, tuple[bool, float, FleetResult]] = {}

    def attempt(n: int) -> bool:
        # a count too small for the load is known by its backlog: stop it there (its later windows fail).
        # With --orders a count holds only if it holds in every drawn order (the first that fails ends it);
        # its share of windows is the lowest of those played
        first: FleetResult | None = None
        ok, share = True, 1.0
        for k in range(ns.orders):
            result = args.run(
                policy, n, order=k, max_backlog=BACKLOG_PER_REPLICA * args.profile.max_running_requests * n
            )
            first = first or result
            held, part = judge(result, args.slo, ns.hold)
            ok, share = ok and held, min(share, part)
            which = f" (order {k + 1} of {ns.orders})" if ns.orders > 1 else ""
            if result.overloaded_at_s is not None:
                stop = result.overloaded_at_s / 3600
                log(f"{policy.value}: {n} replicas overloaded at {stop:.2f} h (stopped there){which}")
            else:
                log(f"{policy.value}: {n} replicas hold the SLO in {part:.0%} of windows{which}{' ✓' if held else ''}")
            if not ok:
                break
        assert first is not None
        tried[n] = (ok, share, first)
        return ok

    low, high = 0, 1
    while not attempt(high):
        low = high
        if high >= ns.max_replicas:
            return None, None, _tried_rows(tried)
        high = min(high * 2, ns.max_replicas)
    while high - low > 1:
        mid = (low + high) // 2
        if attempt(mid):
            high = mid
        else:
            low = mid
    return high, tried[high][2], _tried_rows(tried)


WARM_S = 600.0  # --per-window: each window is played after this much of the traffic before it


def per_window_need(args: _Args, policy: Policy, most: int, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Each window's own need: the fewest replicas (up to ``most``, --max-replicas) that hold the
    SLO in it, the window played on its own after ``WARM_S`` (at most a window) of the traffic before it
    (a fleet sized for that hour, no backlog carried in from a busier one), counts tried from the one
    below the previous window's need, each stopped once its backlog shows it too small. None: nothing
    arrived in it, or not even ``most`` replicas held it."""
    w_s = args.window_s
    warm = min(WARM_S, w_s)  # the warm-up fits in the run's first window
    slo = args.slo
    cap = BACKLOG_PER_REPLICA * args.profile.max_running_requests
    out: list[dict[str, Any]] = []
    pending: list[FleetRequest] = []  # the current window's requests and the warm-up before it
    k = 0

    def judge_window(k: int, reqs: list[FleetRequest]) -> None:
        start = k * w_s
        arrived = sum(1 for r in reqs if r.arrival_s >= start)
        need = None
        if arrived:
            # the window becomes the run's second (the warm-up's traffic at the end of its first), or the first
            shift, at = (start - w_s, 1) if k > 0 else (0.0, 0)
            shifted = [
                FleetRequest(r.arrival_s - shift, r.prompt_tokens, r.output_tokens, r.blocks, r.session) for r in reqs
            ]
            n = max(1, (out[-1]["replicas_needed"] or 1) - 1) if out else 1
            while n <= most:
                result = run_fleet(
                    args.profile, iter(shifted), replicas=n, policy=policy, window_s=w_s, slo=slo,
                    seed=args.ns.seed, max_backlog=cap * n, order_seed=args.ns.seed,
                )  # fmt: skip
                verdicts = window_verdicts(result, slo)
                if result.overloaded_at_s is None and at < len(verdicts) and verdicts[at] is not False:
                    need = n
                    break
                n += 1
        out.append({"start_s": start, "end_s": start + w_s, "arrival_rps": arrived / w_s, "replicas_needed": need})
        log(f"{policy.value}: window {start / 3600:.2f} h needs {need} replicas")

    for fr in args.requests():
        while fr.arrival_s >= (k + 1) * w_s:
            judge_window(k, list(pending))
            k += 1
            pending = [r for r in pending if r.arrival_s >= k * w_s - warm]
        pending.append(fr)
    if pending:
        judge_window(k, pending)
    return out


def _tried_rows(tried: dict[int, tuple[bool, float, FleetResult]]) -> list[dict[str, Any]]:
    return [
        {"replicas": n, "holds": ok, "windows_held": share, "overloaded_at_s": r.overloaded_at_s}
        for n, (ok, share, r) in sorted(tried.items())
    ]


def result_json(result: FleetResult, args: _Args) -> dict[str, Any]:
    price = args.ns.price
    slo = args.slo
    windows = [w.row(result.gpus_per_replica, price, slo) for w in result.windows]
    total = result.total.row(result.gpus_per_replica, price, slo)
    return {
        "policy": result.policy,
        "replicas": result.replicas,
        "requests": result.requests,
        "simulated_s": result.sim_s,
        "cpu_s": result.wall_s,
        "routed": result.routed,
        "windows": windows,
        "total": total,
        "windows_held": judge(result, slo, 1.0)[1] if slo else None,
        "simultaneous": result.simultaneous,
        "order_seed": result.order_seed,
    }


# (label, the total's key, its statistic or None): the figures --orders gives with their range
ORDER_FIGURES: tuple[tuple[str, str, str | None], ...] = (
    ("output tok/s", "output_tok_s", None),
    ("TTFT p50 ms", "ttft_ms", "p50"),
    ("TTFT p99 ms", "ttft_ms", "p99"),
    ("TTFT mean ms", "ttft_ms", "mean"),
    ("TPOT p50 ms", "tpot_ms", "p50"),
    ("TPOT p99 ms", "tpot_ms", "p99"),
    ("E2E p50 ms", "e2e_ms", "p50"),
    ("E2E p99 ms", "e2e_ms", "p99"),
    ("queue p99 ms", "queue_ms", "p99"),
    ("cache hits", "cache_hit_share", None),
    ("SLO met", "slo_attainment", None),
    ("windows held", "windows_held", None),
)


def order_spread(draws: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure of the whole run over ``draws`` (result_json of one fleet, one drawn order of the
    simultaneous arrivals each): its values, median, lowest and highest, and the spread (highest - lowest)
    over the median."""
    figures: dict[str, Any] = {}
    for label, key, stat in ORDER_FIGURES:
        raw = [d.get(key) if key == "windows_held" else d["total"].get(key) for d in draws]
        picked = [(v or {}).get(stat) if stat is not None else v for v in raw]
        values = [float(v) for v in picked if v is not None]
        if len(values) < len(picked):
            continue
        mid = statistics.median(values)
        figures[label] = {
            "values": values,
            "median": mid,
            "min": min(values),
            "max": max(values),
            "spread": (max(values) - min(values)) / mid if mid else 0.0,
        }
    return {"n": len(draws), "seeds": [d["order_seed"] for d in draws], "figures": figures}


def _ms(v: Any) -> str:
    return "–" if v is None else (f"{v:,.0f}" if v >= 100 else f"{v:.1f}")


def _tried_words(t: dict[str, Any]) -> str:
    if t.get("overloaded_at_s") is not None:
        return f"{t['replicas']} (overloaded at {t['overloaded_at_s'] / 3600:.2f} h: stopped there)"
    return f"{t['replicas']} ({_pct(t['windows_held'])} of windows)"


def _num(v: Any, fmt: str) -> str:
    return "–" if v is None else format(v, fmt)


def _pct(v: Any) -> str:
    return "–" if v is None else f"{v * 100:.0f} %"


def markdown(doc: dict[str, Any]) -> str:
    """fleet.md: what was predicted from what, each policy's windows, and the policies side by side."""
    src = doc["predicted_from"]
    lines = [
        f"# Fleet: {doc['deployment']} (predicted)",
        "",
        f"Every figure is **predicted** on the simulator's virtual clock, from the deployment `{doc['deployment']}` "
        f"({src['profile']}; {src['gpus_per_replica']} GPU(s) a replica, KV pool {src['kv_pool_tokens']:,} tokens) "
        f"and {_source_words(src['requests'])}. Requests are counted in the window they arrived in.",
        "",
    ]
    if doc.get("slo"):
        lines.append("SLO: " + ", ".join(f"{k.removesuffix('_ms')} ≤ {v:g} ms" for k, v in doc["slo"].items()))
        lines.append("")
    for run in doc["runs"]:
        head = f"## {run['policy']}, {run['replicas']} replica{'' if run['replicas'] == 1 else 's'}"
        if run.get("found") is not None:
            head += " (the fewest that hold the SLO)"
        if run.get("autoscaled"):
            head = (
                f"## {run['policy']}, autoscaled ({run['total']['replicas_max']} at most; a new replica serves "
                f"{run['cold_start_s']:.0f} s after it is asked for)"
            )
        if run.get("fixed_at_peak"):
            head += " (fixed at the autoscaler's peak)"
        if run.get("disaggregated"):
            pd = run["disaggregated"]
            head = (
                f"## {run['policy']}, disaggregated: {pd['prefill']} prefill and {pd['decode']} decode replicas "
                f"(the prompt's KV over the NICs)"
            )
        lines += [head, ""]
        if run.get("tried"):
            lines.append("Tried: " + ", ".join(_tried_words(t) for t in run["tried"]))
            if (run.get("orders_judged") or 1) > 1:
                lines[-1] += (
                    f". A count holds only if it held in each of {run['orders_judged']} drawn orders of the "
                    "simultaneous arrivals (its share: the lowest); the tables are the first order"
                )
            lines.append("")
        if run.get("per_window"):
            lines += [
                "The fewest replicas each window needs (each window played on its own, after the 10 minutes "
                "of traffic before it):",
                "",
                "| window | arrivals/s | replicas needed |",
                "|---|---:|---:|",
            ]
            for pw in run["per_window"]:
                need = "–" if pw["replicas_needed"] is None else str(pw["replicas_needed"])
                lines.append(
                    f"| {pw['start_s'] / 3600:.2f}-{pw['end_s'] / 3600:.2f} h | {pw['arrival_rps'] or 0:.2f} | {need} |"
                )
            lines.append("")
        lines += [
            "| window | arrivals/s | replicas (max) | busy | TTFT p50 / p99 ms | TPOT p50 / p99 ms | E2E p99 ms "
            "| queue p99 ms | SLO met | goodput req/s | cache hits | kW | kWh | cost USD |",
            "|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for w in [*run["windows"], run["total"]]:
            name = "all" if w is run["total"] else f"{w['start_s'] / 3600:.2f}-{w['end_s'] / 3600:.2f} h"
            ttft, tpot = w["ttft_ms"], w["tpot_ms"]
            lines.append(
                f"| {name} | {w['arrival_rps'] or 0:.2f} | {w['replicas'] or 0:.1f} ({w['replicas_max']}) | "
                f"{w['replicas_busy'] or 0:.1f} | "
                f"{_ms(ttft['p50'])} / {_ms(ttft['p99'])} | {_ms(tpot['p50'])} / {_ms(tpot['p99'])} | "
                f"{_ms(w['e2e_ms']['p99'])} | {_ms(w['queue_ms']['p99'])} | {_pct(w['slo_attainment'])} | "
                f"{_num(w['goodput_rps'], '.2f')} | {_pct(w['cache_hit_share'])} | "
                f"{w['power_kw'] or 0:.1f} | {w['energy_kwh']:.1f} | {_num(w['cost_usd'], ',.0f')} |"
            )
        lines.append("")
        lines += _order_lines(run)
    if len(doc["runs"]) > 1:
        lines += [
            "## Policies side by side",
            "",
            "| policy | replicas | TTFT p50 / p99 ms | TPOT p50 ms | SLO met | windows held | cache hits | GPU-hours "
            "| kWh |",
            "|---|---:|---|---:|---:|---:|---:|---:|---:|",
        ]
        ranged = any(run.get("orders") for run in doc["runs"])
        for run in doc["runs"]:
            t = run["total"]
            count = f"auto, ≤ {t['replicas_max']}" if run.get("autoscaled") else str(run["replicas"])
            if run.get("disaggregated"):
                count = f"{run['disaggregated']['prefill']}P + {run['disaggregated']['decode']}D"
            lines.append(
                f"| {run['policy']} | {count} | {_ranged(run, 'TTFT p50 ms', t['ttft_ms']['p50'])} / "
                f"{_ranged(run, 'TTFT p99 ms', t['ttft_ms']['p99'])} | "
                f"{_ranged(run, 'TPOT p50 ms', t['tpot_ms']['p50'])} | "
                f"{_ranged(run, 'SLO met', t['slo_attainment'], _pct)} | "
                f"{_ranged(run, 'windows held', run['windows_held'], _pct)} | "
                f"{_ranged(run, 'cache hits', t['cache_hit_share'], _pct)} | "
                f"{t['gpu_hours']:.1f} | {t['energy_kwh']:.1f} |"
            )
        lines.append("")
        if ranged:
            lines += ["With --orders: the median over the drawn orders, their lowest and highest in brackets.", ""]
    return "\n".join(lines)


def _ranged(run: dict[str, Any], label: str, value: Any, fmt: Callable[[Any], str] = _ms) -> str:
    """A side-by-side cell: the run's ``value``, or with --orders the median (lowest-highest) of the figure
    ``label`` names in :data:`ORDER_FIGURES`."""
    f = (run.get("orders") or {}).get("figures", {}).get(label)
    if f is None:
        return fmt(value)
    return f"{fmt(f['median'])} ({fmt(f['min'])}-{fmt(f['max'])})"


def _order_lines(run: dict[str, Any]) -> list[str]:
    """What fleet.md says of the requests that arrived at one instant: how many, and with --orders how
    far each figure moves with the order drawn for them."""
    n_same, arrived = run.get("simultaneous") or 0, run["total"]["arrived"] or 1
    if not n_same:
        return []
    orders = run.get("orders")
    words = (
        f"{n_same:,} of {arrived:,} requests ({n_same / arrived:.0%}) arrived at the same instant as another "
        "(the trace's clock is coarse): the order they reach the router in is not in the trace, and where "
        "prefixes, queues and ties depend on it the figures do too."
    )
    if orders is None:
        return [
            f"{words} This run draws one order (seed {run['order_seed']}); `--orders 5` shows how far each "
            "figure moves with it.",
            "",
        ]
    lines = [
        f"{words} The tables above are the order drawn with seed {orders['seeds'][0]}; over {orders['n']} drawn "
        f"orders (seeds {orders['seeds'][0]}-{orders['seeds'][-1]}):",
        "",
        "| figure | median | lowest | highest | spread |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, f in orders["figures"].items():
        if label in ("cache hits", "SLO met", "windows held"):
            cells = [_pct(f["median"]), _pct(f["min"]), _pct(f["max"])]
        else:
            cells = [_ms(f["median"]), _ms(f["min"]), _ms(f["max"])]
        lines.append(f"| {label} | {' | '.join(cells)} | {f['spread'] * 100:.1f} % |")
    lines.append("")
    return lines


def _source_words(src: dict[str, Any]) -> str:
    if "workload" in src:
        return f"the workload file `{src['workload']}` (sha256 {src['sha256'][:12]}) at its times"
    if "trace" in src:
        words = f"the {src['format']} trace `{src['trace']}` ({src['trace_requests']:,} requests)"
        if src["scale"] != 1.0:
            words += f" at {src['scale']:g}x its rate"
        if src["day_shape"]:
            words += " bent to a day's shape"
        if src["duration_s"]:
            d = src["duration_s"]
            words += f", played for {d / 3600:g} h" if d >= 3600 else f", played for {d / 60:g} min"
        return words
    return (
        f"Poisson arrivals at {src['poisson_rps']:g}/s for {src['duration_s']:g} s, "
        f"{src['input_tokens']} prompt and {src['output_tokens']} output tokens"
    )


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        args = _Args(ns)
    except (ProfileError, DatasetError, SLOError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from loadgen.sim.memory import memory_plan

    plan = memory_plan(args.profile)
    if plan.failure is not None:
        from loadgen.predict.deploy import failure_words

        print(f"error: the deployment {args.label} does not start: {failure_words(plan)}", file=sys.stderr)
        return 2

    def log(line: str) -> None:
        if not ns.quiet:
            print(("\r" if sys.stderr.isatty() else "") + line, file=sys.stderr)

    runs: list[dict[str, Any]] = []
    status = 0
    for policy in args.policies:
        if ns.find_replicas:
            n, result, tried = find_replicas(args, policy, log)
            if result is None:
                log(f"{policy.value}: no count up to --max-replicas {ns.max_replicas} holds the SLO")
                runs.append({"policy": policy.value, "replicas": None, "found": None, "tried": tried})
                status = 1
                continue
            run = result_json(result, args)
            run.update(found=n, tried=tried, orders_judged=ns.orders)
            if ns.per_window:
                run["per_window"] = per_window_need(args, policy, ns.max_replicas, log)
        else:
            result = args.run(policy, ns.replicas, autoscale=args.autoscale, disaggregate=args.pd)
            run = result_json(result, args)
            if ns.orders > 1:
                draws = [result]
                for k in range(1, ns.orders):
                    log(f"{policy.value}: order {k + 1} of {ns.orders}")
                    draws.append(args.run(policy, ns.replicas, order=k))
                run["orders"] = order_spread([result_json(d, args) for d in draws])
            if args.pd is not None:
                run["disaggregated"] = {"prefill": args.pd[0], "decode": args.pd[1]}
                runs.append(run)
                log(f"{policy.value}: the same {ns.replicas} replicas aggregated")
                run = result_json(args.run(policy, ns.replicas), args)
            if args.autoscale is not None:
                run.update(autoscaled=True, scale_events=result.scale_events, cold_start_s=result.cold_start_s)
                runs.append(run)
                peak = result.total.replicas_max
                log(f"{policy.value}: autoscaled up to {peak} replicas; the same traffic on {peak} fixed")
                fixed = args.run(policy, peak)
                run = result_json(fixed, args)
                run["fixed_at_peak"] = True
        runs.append(run)
    doc = {
        "predicted": True,
        "deployment": args.label,
        "predicted_from": {
            "profile": args.profile.name,
            "sources": list(args.profile.sources),
            "gpus_per_replica": max(1, args.profile.server.tp) * max(1, args.profile.server.pp),
            "kv_pool_tokens": plan.kv_pool_tokens,
            "engine": args.profile.server.engine or "sglang",
            "requests": args.source(),
            "simulator": "loadgen.fleet.sim (the simulator's engine per replica, virtual clock)",
        },
        "slo": args.slo or None,
        "window_s": args.window_s,
        "runs": runs,
    }
    out = Path(ns.out) if ns.out else Path("reports") / time.strftime("fleet-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    (out / "fleet.json").write_text(json.dumps(doc, indent=1))
    done = [r for r in runs if r.get("windows") is not None]
    text = markdown({**doc, "runs": done})
    (out / "fleet.md").write_text(text)
    print(text)
    print(out / "fleet.md")
    return status
