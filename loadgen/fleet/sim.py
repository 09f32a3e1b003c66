"""A fleet on the virtual clock: replicas of one deployment behind a router, serving a stream of requests.

Each replica is the simulator's :class:`~loadgen.sim.engine.Engine` (the one ``loadgen sim`` serves
over HTTP and ``loadgen predict`` runs), with its own seed; nothing opens a socket or sleeps. The clock
jumps from event to event: the next arrival (routed at once by :class:`~loadgen.fleet.router.Router`
and submitted to its replica) or the earliest end of any replica's step (a heap of them). The router
sees the requests it sent and has not seen end, and each replica's KV-cache use as last reported,
every ``kv_report_s`` (a real router polls ``/metrics``; its view lags by up to that).

What is measured (:mod:`loadgen.fleet.stats`): per window of ``window_s``, the requests that arrived in
it (TTFT, TPOT = (E2E - TTFT) / (output tokens - 1), E2E, queue time = first scheduled - arrival,
cached prompt tokens, whether each met the per-request limits the SLO implies), the output tokens and
the energy of every GPU produced in it (the engines' energy counters read at the window's edges), the
replica-seconds busy and serving. Memory holds the replicas and the requests in flight, never the
finished ones.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from loadgen.fleet.router import Policy, RouteInfo, Router
from loadgen.fleet.stats import LogHistogram, Window
from loadgen.fleet.traffic import FleetRequest, draw_tie_order, parse_duration
from loadgen.sim.engine import ABORTED, Emission, Engine, RejectError, SimRequest
from loadgen.sim.memory import memory_plan
from loadgen.sim.parallel import layout_of
from loadgen.sim.profile import Profile

KV_REPORT_S = 1.0  # how often a replica's KV use reaches the router (a /metrics poll)


@dataclass
class FleetResult:
    """One fleet run: its windows, what it cost in CPU, and its whole-run totals."""

    replicas: int
    policy: str
    windows: list[Window]
    requests: int
    wall_s: float  # CPU-clock seconds the simulation took
    sim_s: float  # virtual seconds simulated
    gpus_per_replica: int
    total: Window = field(default_factory=lambda: Window(0.0, 0.0))
    routed: list[int] = field(default_factory=list)  # requests sent to each replica (prefill pool first)
    scale_events: list[dict[str, Any]] = field(default_factory=list)  # the autoscaler's decisions
    cold_start_s: float | None = None  # the autoscaler's replicas: from taking the GPUs to serving
    # when the requests in flight passed ``max_backlog`` and the run stopped there (None: it did not);
    # every window from the one holding it fails the SLO
    overloaded_at_s: float | None = None
    # requests that arrived at the same instant as another (their order is not in the trace), and the seed
    # of the order drawn for them (None: as given)
    simultaneous: int = 0
    order_seed: int | None = None


def request_limits(slo: dict[str, float]) -> tuple[float, float, float]:
    """Per-request limits (seconds) an SLO implies for TTFT, TPOT and E2E (inf where it names none): a
    request meets the SLO when each of its figures is within the tightest limit named for it. ValueError
    for an ``itl`` limit, which a fleet does not record per request."""
    limits = {"ttft": math.inf, "tpot": math.inf, "e2e": math.inf}
    for key, value_ms in slo.items():
        metric = key.split("_", 1)[0]
        if metric not in limits:
            raise ValueError(f"SLO {key}: a fleet judges ttft, tpot and e2e per request; drop the {metric} limit")
        limits[metric] = min(limits[metric], value_ms / 1e3)
    return limits["ttft"], limits["tpot"], limits["e2e"]


class _Fleet:
    """The replicas, their router(s), the windows and the event heap of one :func:`run_fleet`."""

    def __init__(
        self,
        profile: Profile,
        replicas: int,
        policy: Policy,
        *,
        window_s: float,
        slo: dict[str, float],
        seed: int,
        kv_report_s: float,
        coalesce: bool,
        pd: tuple[int, int] | None = None,
    ) -> None:
        plan = memory_plan(profile)
        if plan.failure is not None:
            raise ValueError(f"the deployment does not start: {plan.failure}")
        if pd is not None:
            if profile.server.engine == "vllm":
                raise ValueError("disaggregated pools are modelled on SGLang's scheduler; the deployment runs vLLM's")
            if min(pd) < 1:
                raise ValueError(f"disaggregated pools of {pd[0]} prefill and {pd[1]} decode replicas: give >= 1 each")
            replicas = pd[0] + pd[1]
        self.pd = pd
        self.profile = profile
        self.seed = seed
        self.coalesce = coalesce
        self.engines: list[Engine] = []
        self.born: list[float] = []  # when each replica's GPUs were taken (loading counts)
        self.gone: list[float | None] = []  # when a drained replica gave them back
        self.draining: set[int] = set()
        self.loading: dict[int, float] = {}  # replica -> when it is ready to serve
        for _ in range(replicas):
            self._new_engine(0.0)
        self.pool = self.engines[0].pool_tokens
        self.block_tokens = profile.server.prefix_block_tokens
        self.reported: list[float] = [0.0] * replicas
        self.reported_at = -math.inf
        self.kv_report_s = kv_report_s
        tree = self.pool // max(1, self.block_tokens)
        n_front = pd[0] if pd is not None else replicas
        self.router = Router(policy, n_front, kv_usage=self._kv_usage, tree_blocks=max(1, tree))
        # disaggregated: the decode pool behind its own least-requests router; a prompt's KV crosses from
        # a prefill replica's NICs (each GPU its shard, one transfer at a time per replica)
        self.decode_router = Router(Policy.LEAST_REQUESTS, pd[1]) if pd is not None else None
        lay = layout_of(profile)
        kv_div = lay.dp if profile.model.kv_replicated else lay.tp
        self.transfer_s_per_token = (
            profile.model.kv_bytes_per_token / max(1, kv_div) / (profile.hardware.nic_gb_s * 1e9)
        )
        self.nic_free = [0.0] * n_front
        self.pending: dict[int, tuple[float, Window, int, int, int, float]] = {}
        self.transfers = 0
        self.window_s = window_s
        self.windows: list[Window] = []
        self.ttft_max, self.tpot_max, self.e2e_max = request_limits(slo)
        self.judged = bool(slo)
        self.heap: list[tuple[float, int]] = []
        self.due: list[float | None] = [None] * replicas
        self.marks: list[tuple[float, float]] = [(0.0, 0.0)] * replicas  # (energy J, busy s) at the window start
        self.retracted_mark = 0
        self.now = 0.0
        self.seq = 0
        self.requests = 0
        self.gpus = max(1, profile.server.tp) * max(1, profile.server.pp)

    def _new_engine(self, t: float) -> int:
        """A replica whose GPUs are taken at ``t`` (idle power from then on); its index."""
        e = Engine(self.profile, seed=self.seed + len(self.engines))
        e.coalesce = self.coalesce
        e._account_idle(t)
        self.engines.append(e)
        self.born.append(t)
        self.gone.append(None)
        return len(self.engines) - 1

    def serving(self) -> list[int]:
        """Replicas that take new requests (ready, not draining)."""
        return [i for i, g in enumerate(self.gone) if g is None and i not in self.loading and i not in self.draining]

    def add_replica(self, t: float, ready_s: float) -> int:
        """A new replica, loading from ``t``, taking requests ``ready_s`` later."""
        i = self._new_engine(t)
        self.reported.append(0.0)
        self.due.append(None)
        self.marks.append(self.engines[i]._cumulative(t))
        j = self.router.add_replica()
        assert i == j
        self.router.set_active(i, False)
        self.loading[i] = t + ready_s
        if self.windows:
            w = self.windows[-1]
            w.replicas_max = max(w.replicas_max, self._alive())
        return i

    def ready(self, t: float) -> None:
        """Replicas done loading by ``t`` start taking requests."""
        for i, at in list(self.loading.items()):
            if at <= t:
                del self.loading[i]
                self.router.set_active(i, True)

    def drain(self, i: int, t: float) -> None:
        """Replica ``i`` takes no new request; it is given back when it holds none."""
        self.draining.add(i)
        self.router.set_active(i, False)
        self.release_idle(t)

    def release_idle(self, t: float) -> None:
        for i in list(self.draining):
            if self.router.outstanding[i] == 0 and not self.engines[i].busy:
                self.draining.discard(i)
                self.gone[i] = t

    def _kv_usage(self, i: int) -> float:
        return self.reported[i]

    def _report(self, now: float) -> None:
        if now - self.reported_at >= self.kv_report_s:
            pool = self.pool or 1
            self.reported = [e.used_tokens / pool for e in self.engines]
            self.reported_at = now

    def _window(self, t: float) -> Window:
        """The window holding ``t``, opening any before it (each closes the previous one's totals)."""
        k = int(t // self.window_s)
        while len(self.windows) <= k:
            start = len(self.windows) * self.window_s
            if self.windows:
                self._close(self.windows[-1])
            self.windows.append(Window(start, start + self.window_s, replicas_max=self._alive()))
        return self.windows[k]

    def _alive(self) -> int:
        return sum(1 for g in self.gone if g is None)

    def _close(self, w: Window) -> None:
        """Energy, busy time and retractions of every replica over ``w`` (its end is past every step
        that has completed: events run in time order)."""
        end = w.end_s
        energy = busy = replica_s = 0.0
        retracted = 0
        for i, e in enumerate(self.engines):
            gone = self.gone[i]
            stop = end if gone is None else min(end, gone)
            replica_s += max(0.0, stop - max(w.start_s, self.born[i]))
            retracted += e.counters.retracted_reqs
            if gone is not None and gone <= w.start_s:
                continue
            e_j, b_s = e._cumulative(stop)
            e0, b0 = self.marks[i]
            energy += e_j - e0
            busy += b_s - b0
            self.marks[i] = (e_j, b_s)
        w.energy_j = energy * self.gpus
        w.busy_s = busy
        w.replica_s = replica_s
        w.retracted = retracted - self.retracted_mark
        self.retracted_mark = retracted

    def _schedule(self, i: int) -> None:
        nxt = self.engines[i].next_event_s
        if nxt is not None and nxt != self.due[i]:
            self.due[i] = nxt
            heapq.heappush(self.heap, (nxt, i))

    def arrive(self, fr: FleetRequest) -> None:
        now = fr.arrival_s
        self.now = now
        w = self._window(now)
        w.arrived += 1
        w.prompt_tokens += fr.prompt_tokens
        self.requests += 1
        if self.router.policy is Policy.LEAST_KV:
            self._report(now)
        i = self.router.pick(RouteInfo(fr.blocks, fr.prompt_tokens, fr.session, self.block_tokens))
        eng = self.engines[i]
        try:
            eng.check(fr.prompt_tokens, fr.output_tokens)
        except RejectError:
            w.failed += 1
            self.router.done(i)
            return
        prefill_only = self.pd is not None
        req = SimRequest(
            rid=str(self.seq),
            prompt_tokens=fr.prompt_tokens,
            max_new_tokens=0 if prefill_only else fr.output_tokens,
            target_tokens=0 if prefill_only else fr.output_tokens,
            stop_reason="stop" if prefill_only else "length",
            prefill_only=prefill_only,
        )
        self.seq += 1
        if fr.blocks:
            req.block_hashes = list(fr.blocks)
        # (window, arrival at the fleet, output tokens asked, cached prompt tokens, queue seconds)
        req.context = (w, now, fr.output_tokens, -1, -1.0)
        self._submit(i, req, now)

    def _submit(self, i: int, req: SimRequest, now: float, transferred: bool = False) -> None:
        eng = self.engines[i]
        if transferred:
            eng.submit_transferred(req, now)
        else:
            eng.submit(req, now)
        if not eng.busy:
            self._emitted(i, now, eng.advance(now))
        else:
            eng.interrupt(now)  # a coalesced run of decodes ends with the step running now
        self._schedule(i)

    def event(self, t: float, i: int) -> None:
        """The heap's event at ``t``: replica ``i``'s step ends, or (``i`` < 0) a KV transfer does."""
        if i < 0:
            self.transfer_done(t, -i - 1)
            return
        if self.due[i] != t:
            return  # superseded: the step's end moved (an interrupted run)
        self.now = t
        self.due[i] = None
        emissions = self.engines[i].advance(t)
        self._schedule(i)
        if emissions:
            self._emitted(i, t, emissions)

    def _emitted(self, i: int, t: float, emissions: list[Emission]) -> None:
        pd = self.pd
        produced = 0
        for em in emissions:
            produced += em.tokens
            if not em.finished:
                continue
            req = em.req
            ctx: tuple[Window, float, int, int, float] = req.context  # type: ignore[assignment]
            w, arrival, asked, cached, queue_s = ctx
            if pd is not None and i < pd[0]:
                self.router.done(i)
                if req.state == ABORTED:
                    w.failed += 1
                else:
                    self._transfer(i, t, req, w, arrival, asked)
                continue
            if pd is not None:
                assert self.decode_router is not None
                self.decode_router.done(i - pd[0])
            else:
                self.router.done(i)
            if req.state == ABORTED:
                w.failed += 1
                continue
            self._record(req, w, arrival, cached, queue_s)
        if produced:
            self._window(t).output_tokens += produced

    def _transfer(self, i: int, t: float, req: SimRequest, w: Window, arrival: float, asked: int) -> None:
        """A prefilled prompt's KV leaves prefill replica ``i`` for the decode pool."""
        start = max(t, self.nic_free[i])
        done = start + req.prompt_tokens * self.transfer_s_per_token
        self.nic_free[i] = done
        k = self.transfers
        self.transfers += 1
        self.pending[k] = (arrival, w, req.prompt_tokens, asked, req.cached_tokens, req.queue_end_s - req.arrival_s)
        heapq.heappush(self.heap, (done, -k - 1))

    def transfer_done(self, t: float, k: int) -> None:
        """A prompt's KV (and its first token) reached the decode pool: a decode replica takes it."""
        assert self.pd is not None and self.decode_router is not None
        self.now = t
        arrival, w, prompt, asked, cached, queue_s = self.pending.pop(k)
        j = self.decode_router.pick(RouteInfo((), prompt, None, self.block_tokens))
        req = SimRequest(
            rid=f"d{k}", prompt_tokens=prompt, max_new_tokens=asked, target_tokens=asked, stop_reason="length"
        )
        req.context = (w, arrival, asked, cached, queue_s)
        self._submit(self.pd[0] + j, req, t, transferred=True)

    def _record(self, req: SimRequest, w: Window, arrival: float, cached: int, queue_s: float) -> None:
        ttft = req.first_token_s - arrival
        e2e = req.finish_s - arrival
        hist = w.hist
        hist["ttft"].add(ttft)
        hist["e2e"].add(e2e)
        if queue_s < 0:
            queue_s = req.queue_end_s - req.arrival_s
            cached = req.cached_tokens
        hist["queue"].add(max(queue_s, 0.0) + 1e-9)
        ok = ttft <= self.ttft_max and e2e <= self.e2e_max
        if req.generated > 1:
            tpot = (req.finish_s - req.first_token_s) / (req.generated - 1)
            hist["tpot"].add(tpot)
            ok = ok and tpot <= self.tpot_max
        w.finished += 1
        w.cached_tokens += cached
        if ok and self.judged:
            w.slo_ok += 1
            w.good_tokens += req.generated

    def advance(self, t_limit: float, scaler: _Scaler | None) -> None:
        """Every replica's step ending before ``t_limit``, and the autoscaler's ticks, in time order;
        with ``t_limit`` infinite, until every request has ended."""
        heap = self.heap
        while True:
            t_step = heap[0][0] if heap else math.inf
            t_tick = scaler.next_tick if scaler is not None and (heap or t_limit < math.inf) else math.inf
            if min(t_step, t_tick) >= t_limit or (t_step == math.inf and t_tick == math.inf):
                return
            if scaler is not None and t_tick <= t_step:
                self.now = t_tick
                self._window(t_tick)
                scaler.tick(t_tick)
                scaler.next_tick += scaler.spec.interval_s
                continue
            t, i = heapq.heappop(heap)
            self.event(t, i)


ENGINE_INIT_S = 60.0  # ASSUMPTION: a server's start besides its weights (process, CUDA graphs): about a minute
STORAGE_GB_S = 5.0  # ASSUMPTION: what a node reads its weights at from local NVMe (a Gen4 x4 drive: ~7 GB/s)


@dataclass(frozen=True)
class Autoscale:
    """A reactive autoscaler, as KServe's or KEDA's on a concurrency metric: every ``interval_s`` it
    reads the requests in flight over the serving replicas and wants ``ceil(in flight / (capacity *
    target))`` replicas (within ``min``/``max``); more start loading at once (ready ``cold_start_s``
    later), fewer are drained only after the want stayed lower for ``down_after_s`` (a drained replica
    finishes what it holds). ``capacity``: requests in flight one replica serves within the SLO (from
    ``loadgen plan``; default the deployment's ``max_running_requests``). ``cold_start_s`` default:
    :func:`cold_start`."""

    target: float = 0.7
    capacity: float | None = None
    cold_start_s: float | None = None
    interval_s: float = 30.0
    min_replicas: int = 1
    max_replicas: int = 64
    down_after_s: float = 300.0
    storage_gb_s: float = STORAGE_GB_S
    init_s: float = ENGINE_INIT_S


def cold_start(profile: Profile, storage_gb_s: float = STORAGE_GB_S, init_s: float = ENGINE_INIT_S) -> float:
    """Seconds from taking a replica's GPUs to serving: the weights read from storage (all of them, once,
    at ``storage_gb_s``) or pushed over each GPU's PCIe link (its share, at the hardware's ``pcie_gb_s``),
    whichever is slower, plus the engine's start (``init_s``)."""
    plan = memory_plan(profile)
    gpus = max(1, profile.server.tp) * max(1, profile.server.pp)
    per_gpu = plan.weight_bytes + plan.drafter_bytes
    storage_s = per_gpu * gpus / (storage_gb_s * 1e9)
    pcie_s = per_gpu / (max(profile.hardware.pcie_gb_s, 1e-9) * 1e9)
    return init_s + max(storage_s, pcie_s)


def parse_autoscale(text: str) -> Autoscale:
    """``target=0.7,capacity=64,cold-start=auto|90s,interval=30s,min=1,max=64,down-after=5m,storage-gb-s=5,
    init=60s``; ValueError naming the bad item."""
    names = {
        "target": "target",
        "target-utilisation": "target",
        "target-utilization": "target",
        "capacity": "capacity",
        "cold-start": "cold_start_s",
        "interval": "interval_s",
        "min": "min_replicas",
        "max": "max_replicas",
        "down-after": "down_after_s",
        "storage-gb-s": "storage_gb_s",
        "init": "init_s",
    }
    values: dict[str, Any] = {}
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in names:
            raise ValueError(f"--autoscale {item!r}: use KEY=VALUE with KEY in {', '.join(sorted(set(names)))}")
        field_name = names[key]
        try:
            if field_name in ("cold_start_s", "interval_s", "down_after_s", "init_s"):
                if field_name == "cold_start_s" and value == "auto":
                    continue
                values[field_name] = parse_duration(value, f"--autoscale {key}")
            elif field_name in ("min_replicas", "max_replicas"):
                values[field_name] = int(value)
            else:
                values[field_name] = float(value)
        except ValueError as exc:
            raise ValueError(f"--autoscale {item!r}: {exc}") from None
    a = Autoscale(**values)
    if not 0 < a.target <= 1:
        raise ValueError(f"--autoscale target={a.target}: give a share in (0, 1]")
    if a.capacity is not None and a.capacity <= 0:
        raise ValueError(f"--autoscale capacity={a.capacity}: must be > 0")
    if not 1 <= a.min_replicas <= a.max_replicas:
        raise ValueError(f"--autoscale min={a.min_replicas}, max={a.max_replicas}: need 1 <= min <= max")
    if a.storage_gb_s <= 0:
        raise ValueError("--autoscale storage-gb-s must be > 0")
    return a


class _Scaler:
    """:class:`Autoscale` acting on a fleet at its ticks."""

    def __init__(self, spec: Autoscale, fleet: _Fleet) -> None:
        self.spec = spec
        self.fleet = fleet
        self.capacity = spec.capacity or float(fleet.profile.max_running_requests)
        self.cold_s = (
            spec.cold_start_s
            if spec.cold_start_s is not None
            else cold_start(fleet.profile, spec.storage_gb_s, spec.init_s)
        )
        self.next_tick = spec.interval_s
        self.low_since: float | None = None
        self.events: list[dict[str, Any]] = []

    def tick(self, t: float) -> None:
        fleet, spec = self.fleet, self.spec
        fleet.ready(t)
        fleet.release_idle(t)
        serving = fleet.serving()
        in_flight = sum(fleet.router.outstanding)
        want = math.ceil(in_flight / (self.capacity * spec.target)) if in_flight else 0
        want = min(spec.max_replicas, max(spec.min_replicas, want))
        have = len(serving) + len(fleet.loading)
        if want > have:
            for _ in range(want - have):
                fleet.add_replica(t, self.cold_s)
            self.events.append({"t_s": t, "replicas": want, "in_flight": in_flight, "action": "up"})
            self.low_since = None
        elif want < len(serving):
            if self.low_since is None:
                self.low_since = t
            elif t - self.low_since >= spec.down_after_s:
                for i in sorted(serving, key=lambda i: fleet.router.outstanding[i])[: len(serving) - want]:
                    fleet.drain(i, t)
                self.events.append({"t_s": t, "replicas": want, "in_flight": in_flight, "action": "down"})
                self.low_since = None
        else:
            self.low_since = None


def run_fleet(
    profile: Profile,
    requests: Iterable[FleetRequest],
    *,
    replicas: int,
    policy: Policy = Policy.LEAST_REQUESTS,
    window_s: float = 3600.0,
    slo: dict[str, float] | None = None,
    seed: int = 0,
    kv_report_s: float = KV_REPORT_S,
    progress: Callable[[float, int], None] | None = None,
    coalesce: bool = True,
    autoscale: Autoscale | None = None,
    disaggregate: tuple[int, int] | None = None,
    max_backlog: int | None = None,
    order_seed: int | None = None,
) -> FleetResult:
    """Serve ``requests`` (in arrival order) with ``replicas`` replicas of ``profile`` behind a
    ``policy`` router, to the last request's end; the windows of ``window_s`` it spans. ``progress``
    is called now and then with (virtual seconds, requests so far). ``max_backlog``: stop where the
    requests in flight pass it (a fleet too small for the load: ``overloaded_at_s``; its later windows
    are not simulated, and fail the SLO). ``order_seed``: requests that arrive at the same instant are
    routed in an order drawn with it (:func:`~loadgen.fleet.traffic.draw_tie_order`; None: as given).
    ValueError when the deployment does not start or the requests are out of order."""
    if replicas < 1:
        raise ValueError("a fleet needs at least one replica")
    if window_s <= 0:
        raise ValueError(f"window {window_s} s: must be > 0")
    started = time.process_time()
    fleet = _Fleet(
        profile,
        replicas,
        policy,
        window_s=window_s,
        slo=slo or {},
        seed=seed,
        kv_report_s=kv_report_s,
        coalesce=coalesce,
        pd=disaggregate,
    )
    if disaggregate is not None and autoscale is not None:
        raise ValueError("an autoscaler of disaggregated pools is not modelled: give one or the other")
    scaler = _Scaler(autoscale, fleet) if autoscale is not None else None
    heap = fleet.heap
    last = -math.inf
    overloaded_at: float | None = None
    simultaneous, tied = 0, False  # requests sharing an arrival time; whether the last one shared its
    if order_seed is not None:
        requests = draw_tie_order(requests, order_seed)
    for tick, fr in enumerate(requests, start=1):
        t_arr = fr.arrival_s
        if t_arr == last:
            simultaneous += 1 if tied else 2
            tied = True
        else:
            tied = False
        if max_backlog is not None and tick % 64 == 0 and sum(fleet.router.outstanding) > max_backlog:
            overloaded_at = t_arr
            break
        if t_arr < last:
            raise ValueError(f"requests out of order: one at {t_arr:.3f} s after one at {last:.3f} s")
        last = t_arr
        if scaler is not None:
            fleet.advance(t_arr, scaler)
        else:
            while heap and heap[0][0] < t_arr:
                t, i = heapq.heappop(heap)
                fleet.event(t, i)
        fleet.arrive(fr)
        if progress is not None and tick % 5000 == 0:
            progress(t_arr, tick)
    if overloaded_at is None:
        fleet.advance(math.inf, scaler)
    end = max(fleet.now, last, 0.0)
    last_w = fleet._window(end)
    # the last window ends with the run (its last request's end), not a whole window later: the GPUs
    # are counted until then
    last_w.end_s = max(end, last_w.start_s + 1e-9)
    fleet._close(last_w)
    total = Window(0.0, fleet.windows[-1].end_s, replicas_max=max(w.replicas_max for w in fleet.windows))
    for w in fleet.windows:
        _add(total, w)
    return FleetResult(
        replicas=replicas,
        policy=policy.value,
        windows=fleet.windows,
        requests=fleet.requests,
        wall_s=time.process_time() - started,
        sim_s=end,
        gpus_per_replica=fleet.gpus,
        total=total,
        routed=list(fleet.router.routed) + (list(fleet.decode_router.routed) if fleet.decode_router else []),
        scale_events=scaler.events if scaler is not None else [],
        cold_start_s=scaler.cold_s if scaler is not None else None,
        overloaded_at_s=overloaded_at,
        simultaneous=simultaneous,
        order_seed=order_seed,
    )


def _add(total: Window, w: Window) -> None:
    for name in (
        "arrived",
        "finished",
        "failed",
        "slo_ok",
        "good_tokens",
        "output_tokens",
        "prompt_tokens",
        "cached_tokens",
        "energy_j",
        "busy_s",
        "replica_s",
        "retracted",
    ):
        setattr(total, name, getattr(total, name) + getattr(w, name))
    for f, h in w.hist.items():
        total.hist[f].merge(h)


__all__ = ["Autoscale", "FleetResult", "LogHistogram", "cold_start", "parse_autoscale", "request_limits", "run_fleet"]
