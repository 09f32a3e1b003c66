"""The contract of ``summary.json``: every key the analysis writes, as the report, ``loadgen compare``
and the live web UI read it.

A summary is built by ``analysis.summary.build_summary`` (the run's facts, one ``StepSummary`` per
step, ``RunTotals``), enriched per step by the telemetry join (``StepTelemetry``) and the load
generator's own load (``StepClientLoad``), then completed by ``report.pipeline`` with the SLO, the
``KneeVerdict``, the run's events and the ``CapacityPlan``. Everything is a TypedDict: a summary is
a plain dict, written with orjson and read back with ``json.loads`` as the same type, so an
existing summary.json needs no conversion. Units are in the names (``_ms``, ``_s``, ``_ns`` epoch
wall clock, ``_w``, ``_j``, ``_frac`` a share in [0, 1]); None means not measured.

Keys that only some summaries have sit in ``total=False`` classes (a split base class holds the
required ones; ``typing.NotRequired`` needs Python 3.11). ``tests/unit/test_contracts.py`` checks a
summary built from a synthetic run against these classes, both ways. Readers still meet older or
hand-edited files whose values do not match: they read through ``analysis.values``, which turns
anything unexpected into None.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

LoadAxis = Literal["concurrency", "rate"]
"""What a ramp varies: users (closed loop) or the request rate (open loop, req/s)."""

KneeRule = Literal["hard limit", "throughput curve", "tenant SLO", "none"]
EnergyMethod = Literal["counter", "power_integral", "mixed"]
LatencyKey = Literal["ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"]


# ------------------------------------------------------------------------------------- one step


class LatencyStats(TypedDict):
    """One latency over a step's successful requests, ms; all None when none succeeded."""

    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None


class ScheduleLag(TypedDict):
    """How late requests left after their intended send time, ms (open loop)."""

    mean: float | None
    max: float | None


class TimingFigures(TypedDict):
    """What the records say about chunk times that may be late (``analysis.steps``)."""

    tolerance_ms: float
    ttft_late_share: float | None
    itl_late_share: float | None
    ttft_late_max_ms: float | None
    read_clock_requests: int
    users_late_share: float | None
    users_late_max_ms: float | None


class TimingSummary(TimingFigures, total=False):
    """``timing`` of a step; the verdict keys come from ``analysis.client_load``."""

    uncertain: bool
    reason: str | None


class StepStats(TypedDict):
    """The keys ``analysis.steps.StepAnalysis.row`` writes for every step, in its order."""

    step: int
    concurrency: int | None
    context_tokens: int | None
    rate: float | None
    start_ns: int
    steady_ns: int
    end_ns: int
    end_reason: str | None
    wall_s: float
    window_s: float
    output_tok_s: float | None
    per_request_tok_s: float | None
    requests_ok: int
    requests_failed: int
    requests_cancelled: int
    requests_warmup: int
    errors: dict[str, int]
    ttft_ms: LatencyStats
    itl_ms: LatencyStats
    tpot_ms: LatencyStats
    e2e_ms: LatencyStats
    tokens_per_chunk_mean: float | None
    prompt_tokens_mean: float | None
    prompt_tokens_requested_mean: float | None
    prefix_cached_frac: float | None
    output_tokens_total: int
    output_tokens_mean: float | None
    output_tokens_in_window: float
    output_tokens_source: dict[str, int]
    timing: TimingSummary
    schedule_lag_ms: ScheduleLag
    valid: bool
    invalid_reason: str | None


class PowerStats(TypedDict):
    """Watts over a step's window: time-weighted mean, p95, max."""

    mean: float
    p95: float
    max: float


class MeanMax(TypedDict):
    mean: float
    max: float


class MeanMin(TypedDict):
    mean: float
    min: float


class GpuPower(TypedDict):
    """One GPU's figures for a step (``gpus``); ``lost``: it disappeared by the step's end."""

    gpu: int
    power_w: PowerStats | None
    energy_j: float | None
    power_limit_w: float | None
    lost: bool


class TelemetryGap(TypedDict):
    """An interval inside a step with no sample from ``src``."""

    src: Literal["gpu", "server"]
    start_ns: int
    end_ns: int
    s: float


class GpuTelemetry(TypedDict, total=False):
    gpu_count: int
    gpu_power_w: PowerStats | None
    gpu_power_limit_w: float | None
    gpu_power_frac_of_limit: float | None
    energy_j: float | None
    energy_method: EnergyMethod | None
    gpus: list[GpuPower]
    util_gpu: MeanMax | None
    util_mem: MeanMax | None
    sm_clock_mhz: MeanMin | None
    mem_clock_mhz: MeanMax | None
    clock_reasons: dict[str, float] | None


class ServerTelemetry(TypedDict, total=False):
    running: MeanMax | None
    queue_len: MeanMax | None
    kv_usage: MeanMax | None
    preemptions: float | None
    spec_accept_len: float | None
    prefix_hit: float | None
    server_gen_tok_s: float | None


class StepTelemetry(GpuTelemetry, ServerTelemetry, total=False):
    """What ``analysis.telemetry`` joins onto a step: every key, or none when the summary was
    built without the telemetry enricher."""

    engine: str | None
    log_events: dict[str, int]
    telemetry_events: dict[str, int]
    telemetry_gaps: list[TelemetryGap]
    power_valid: bool
    power_invalid_reason: str | None
    tokens_per_joule: float | None
    memory_bound: bool | None


class ClientCpu(TypedDict):
    """CPU of the load generator's processes as shares of one core: the busiest process's mean,
    the largest sample, the sum over processes."""

    mean: float
    max: float
    total: float
    processes: int


class _LoopLagRequired(TypedDict):
    p50: float
    p90: float
    p99: float
    max: float


class LoopLag(_LoopLagRequired, total=False):
    """How late the load generator's event loop woke up, ms; ``beats``: heartbeats counted
    (absent when the samples carried no histograms, as in older runs)."""

    beats: int


class StepClientLoad(TypedDict, total=False):
    """What ``analysis.client_load`` adds when the run has ``client-*.jsonl``; ``workers_advised``
    only when the step was load-generator bound or its timing uncertain."""

    client_cpu: ClientCpu
    loop_lag_ms: LoopLag
    client_bound: bool
    workers_advised: int


CallKind = Literal["generative", "pooling"]
"""A generative call streams output (chat, completions, responses); a pooling call (embeddings,
rerank) returns one answer for its ``inputs`` and has no TTFT."""


class _CallTypeRequired(TypedDict):
    kind: CallKind
    requests_ok: int
    requests_failed: int
    errors: dict[str, int]
    e2e_ms: LatencyStats
    prompt_tok_s: float | None  # prompt tokens of successful calls that ended in the window / window


class CallTypeStats(_CallTypeRequired, total=False):
    """One call type (endpoint) of a step (``by_call``), over the same rows as the step's figures.

    Generative calls: ``ttft_ms``, ``itl_ms``, ``tpot_ms`` and ``output_tok_s`` (tokens that
    arrived in the window, as the step's aggregate). Pooling calls: ``inputs_s`` (items of
    successful calls that ended in the window / window)."""

    ttft_ms: LatencyStats
    itl_ms: LatencyStats
    tpot_ms: LatencyStats
    output_tok_s: float | None
    inputs_s: float | None


class AgentTurn(TypedDict):
    """One turn index of the agent tasks of a step: its successful requests sent in the window."""

    turn: int
    requests: int
    ttft_ms: LatencyStats
    prompt_tokens_mean: float | None


class AgentStats(TypedDict):
    """Agent loops of a step (records with ``max_turns``). ``turns``: per turn index. Tasks are
    counted in the step where their first turn was sent (inside its window): ``tasks_complete``
    ended (a successful turn without tool calls, a failed turn, or the last allowed turn;
    ``tasks_failed`` of them by a failure), ``tasks_cut`` did not (the run or step ended first, or
    the client cancelled them). ``task_ms``: last end - first intended send, complete tasks only."""

    turns: list[AgentTurn]
    tasks_complete: int
    tasks_failed: int
    tasks_cut: int
    task_ms: LatencyStats


class ImageStats(TypedDict):
    """Successful requests of a step that sent images, sent inside the window.

    ``image_tokens_per_image_mean``: mean over those with both token counts of
    (prompt_tokens - context_tokens) / images; ``estimate`` is True unless the run counted its text
    with a tokenizer (``context_tokens`` is then exact)."""

    requests: int
    images: int
    prompt_tokens_mean: float | None
    context_tokens_mean: float | None
    image_tokens_per_image_mean: float | None
    estimate: bool


class StepCallTypes(TypedDict, total=False):
    """What ``analysis.calltypes`` adds: ``by_call`` when the run has more than one call type or
    any that is not chat; the kinds of output when any record tells them apart; ``agent`` and
    ``images`` when the run has such requests."""

    by_call: dict[str, CallTypeStats]
    ttft_reasoning_ms: LatencyStats
    ttft_answer_ms: LatencyStats
    ttft_tool_ms: LatencyStats
    reasoning_tokens_mean: float | None
    reasoning_share: float | None
    tool_calls: int
    tool_args_chars_mean: float | None
    agent: AgentStats
    images: ImageStats


class ConfidenceInterval(TypedDict):
    """A figure over repeated steps (``analysis.repeats``): mean and 95 % Student-t interval over the
    repeats (``low``/``high`` None with one repeat), their number and sample standard deviation."""

    mean: float | None
    low: float | None
    high: float | None
    n: int
    sd: float | None


class RepeatGroup(TypedDict):
    """The repeats of one load (``--repeat N``): their step ids, how many were VALID, and each figure
    with its interval (``analysis.repeats.FIGURES``)."""

    context_tokens: int | None
    concurrency: int | None
    rate: float | None
    steps: list[int]
    repeats: int
    valid_repeats: int
    figures: dict[str, ConfidenceInterval]


class GoodputStats(TypedDict):
    """``step["goodput"]``: the successful requests of the window that met every SLO limit, each judged
    on its own figures (``analysis.goodput``)."""

    requests: int
    met: int
    frac: float | None
    req_s: float | None
    tok_s: float | None
    missed_by_limit: dict[str, int]


class TenantGoodput(TypedDict):
    """A tenant's goodput at its own SLO: its successful requests of the window that met every limit."""

    requests: int
    met: int
    frac: float | None
    req_s: float | None
    missed_by_limit: dict[str, int]


class TenantStats(CallTypeStats, total=False):
    """One tenant of a step (``tenants``; ``analysis.tenants``): the figures a call type has over its
    own requests, its demand and share, and with an SLO its goodput and the limits it broke."""

    demand: float | None  # users (closed loop) or requests/s (open loop) in the step's plan
    token_share: float | None  # of the step's output tok/s
    slo: dict[str, float]
    goodput: TenantGoodput
    slo_breaks: list[str]  # "ttft_p99 2.41 s > 2 s", one per limit its step figure exceeds


class TenantKnee(TypedDict):
    """``tenant_knee``: the first step where a tenant's SLO broke as the load grew (``at``, on
    ``axis``), and the knee: the last load before it where every tenant's held (None: none did)."""

    axis: str
    knee: float | None
    tenant: str
    breaks: list[str]
    at: float
    step: int
    reason: str


class StepSummary(StepStats, StepCallTypes, StepTelemetry, StepClientLoad, total=False):
    """One element of ``steps``: the step's statistics and what the enrichers added."""

    # With [[tenants]] (``analysis.tenants``): each tenant's figures, and Jain's fairness index
    tenants: dict[str, TenantStats]
    fairness: float | None

    step_fields: dict[str, Any]  # other keys of the step's lines (free-form), when any
    # With an SLO (``analysis.goodput``): the requests that met every limit, judged one by one; the
    # capacity plan reads ``goodput_frac`` (measured) instead of bounding it from percentiles.
    goodput: GoodputStats
    goodput_frac: float
    # With --repeat: the 95 % interval of each figure over the repeats of this step's load
    # (``analysis.repeats``; {figure: {"low", "high"}}).
    ci: dict[str, dict[str, float | None]]


# -------------------------------------------------------------------------------------- the run


class RunTotals(TypedDict):
    """The whole run, warm-up included; ``peak_*`` over the valid steps."""

    records: int
    requests_ok: int
    requests_failed: int
    errors: dict[str, int]
    error_samples: dict[str, str]  # the first message of each error class
    output_tokens_total: int
    steps: int
    valid_steps: int
    peak_output_tok_s: float | None
    peak_step: int | None
    peak_concurrency: int | None
    duration_s: float | None
    skipped_lines: int
    empty: bool


class _IgnoredStepRequired(TypedDict):
    step: int | None
    context_tokens: int | None
    invalid_reason: str


class IgnoredStep(_IgnoredStepRequired, total=False):
    """An invalid step the knee verdict left out; its load under the verdict's axis."""

    concurrency: int | None
    rate: float | None


class DetectorFinding(TypedDict):
    """One detector's answer (``analysis.knee.Finding``); ``load`` is where its signal appears,
    ``knee`` the knee it proposes, repeated under the verdict's axis."""

    name: str
    triggered: bool
    load: float | None
    knee: float | None
    evidence: str
    phrase: str
    has_data: bool
    numbers: dict[str, Any]  # each detector's own figures (USL: lambda, sigma, kappa, ...)
    concurrency: float | None
    rate: float | None


class ContextVerdict(TypedDict):
    """The verdict of one context length."""

    axis: LoadAxis
    ignored_steps: list[IgnoredStep]
    knee: float | None
    rule: KneeRule
    reason: str
    detectors: dict[str, DetectorFinding]


class _KneeVerdictRequired(ContextVerdict):
    context_tokens: int | None
    concurrency: float | None
    rate: float | None


class KneeVerdict(_KneeVerdictRequired, total=False):
    """``knee``: where the ramp saturates (``analysis.knee.knee_verdict``), under ``concurrency``
    or ``rate``; with several context lengths the lowest knee, each judged in ``by_context``."""

    by_context: dict[str, ContextVerdict]


class _RunEventRequired(TypedDict):
    t_ns: int
    src: str
    kind: str


class RunEvent(_RunEventRequired, total=False):
    """An ``events.jsonl`` line the load side wrote about the run itself (``src`` "loadgen"):
    server down and back, a worker lost."""

    step: int | None
    detail: str
    policy: str
    log_matches: list[dict[str, str]]
    worker: str
    client_id: str
    # requests_refused (loadgen.load.refusal.Refusal): the status, the server's answer, the request
    status: int
    answer: str
    path: str
    headers: str
    body: str
    count: int


class AxisLoad(TypedDict, total=False):
    """A load named by its axis (in the plan, in a comparison): one of the two keys."""

    concurrency: float
    rate: float


class NextStepFails(AxisLoad):
    why: list[str]


class OperatingPoint(AxisLoad):
    """The highest load meeting the SLO, and the rates there (req/s, tok/s)."""

    step: int | None
    interpolated: bool
    ok_req_s: float | None
    output_tok_s: float | None
    success_frac: float
    goodput_frac: float
    goodput_req_s: float | None
    goodput_tok_s: float | None
    slo_values: dict[str, float | None]
    next_step_fails: NextStepFails | None


class PerReplica(AxisLoad):
    req_s: float | None
    tok_s: float | None


class PlanEnergy(TypedDict):
    tokens_per_joule: float
    kwh_per_million_tokens: float
    gpu_power_w_mean: float | None
    measured_at: str


class PlanCost(TypedDict):
    gpu_hour_cost: float
    replica_hour_cost: float
    per_million_tokens: float
    total_hour_cost: float | None


class _CapacityPlanRequired(TypedDict):
    slo: dict[str, float]
    axis: LoadAxis
    context_tokens: int | None
    headroom: float
    gpus_per_replica: int
    target_rps: float | None
    target_users: float | None
    operating_point: OperatingPoint | None
    per_replica: PerReplica | None
    replicas: int | None
    gpus: int | None
    energy: PlanEnergy | None
    cost: PlanCost | None
    notes: list[str]


class CapacityPlan(_CapacityPlanRequired, total=False):
    """``plan`` (``analysis.plan.capacity_plan``); ``reason`` when no step meets the SLO;
    ``predicted`` when the run is a twin's replay (``RunSummary.predicted``)."""

    reason: str
    predicted: str


GpusSource = Literal["option", "telemetry", "unknown"]
"""Where the Pareto's GPU count came from: ``--gpu-count``, the GPU telemetry, or neither (1)."""


class ParetoPoint(TypedDict):
    """One step on the Pareto plot (``analysis.pareto``): ``per_user_tok_s`` = 1000 / TPOT p50,
    ``tok_s_per_gpu`` = output tok/s / ``gpus``; None when the step has no such figure."""

    step: int
    concurrency: int | None
    rate: float | None
    context_tokens: int | None
    tok_s_per_gpu: float | None
    per_user_tok_s: float | None
    on_frontier: bool
    valid: bool


class ParetoSummary(TypedDict):
    """``pareto``: throughput per GPU against per-user tok/s, every step, the frontier marked (per
    context length; INVALID steps never on it). ``note`` says when the GPU count is unknown."""

    gpus: int
    gpus_source: GpusSource
    note: str | None
    per_user: str  # how per_user_tok_s is computed, "1000 / tpot_ms.p50"
    points: list[ParetoPoint]


class _RunSummaryRequired(TypedDict):
    schema_version: int
    label: str | None
    run_id: str
    url: str | None
    model: str | None
    transport: str | None
    created: str | None  # "YYYY-MM-DDTHH:MM:SSZ", UTC
    request_files: list[str]
    percentile_method: str
    min_ok_requests: int
    steps: list[StepSummary]
    totals: RunTotals


class RunSummary(_RunSummaryRequired, total=False):
    """summary.json. ``build_summary`` writes the required keys; the pipeline adds the rest
    (``slo`` when the run had one, ``plan`` when ``loadgen plan`` asked for one)."""

    slo: dict[str, float]  # "ttft_p99_ms" -> limit in ms
    knee: KneeVerdict
    run_events: list[RunEvent]
    plan: CapacityPlan
    # the call type the knee and the plan are about, when the run has ``by_call`` (analysis.calltypes)
    knee_call_type: str
    # with [[tenants]]: the first tenant whose SLO broke as the load grew (the knee's reason then)
    tenant_knee: TenantKnee
    # ``--fail-on`` / ``--abort-on`` judged, when the run or ``loadgen report`` had any: the shape of
    # ``analysis.thresholds.ThresholdVerdict`` (typed there)
    thresholds: dict[str, Any]
    # with --repeat: the method, every load's figures with their intervals, the knee's stability
    # (analysis.repeats.add_repeats)
    repeats: dict[str, Any]
    # throughput per GPU against per-user tok/s, per step, the frontier marked (analysis.pareto)
    pareto: ParetoSummary
    # the run is a digital twin's replay (manifest ``twin``, ``loadgen twin``): "Predicted by the twin
    # of RUN, not measured" and the what-if, shown on the report and the plan (report.pipeline)
    predicted: str


__all__ = [
    "AgentStats",
    "AgentTurn",
    "AxisLoad",
    "CallKind",
    "CallTypeStats",
    "CapacityPlan",
    "ClientCpu",
    "ContextVerdict",
    "DetectorFinding",
    "EnergyMethod",
    "GpuPower",
    "GpuTelemetry",
    "GpusSource",
    "IgnoredStep",
    "ImageStats",
    "KneeRule",
    "KneeVerdict",
    "LatencyKey",
    "LatencyStats",
    "LoadAxis",
    "LoopLag",
    "MeanMax",
    "MeanMin",
    "NextStepFails",
    "OperatingPoint",
    "ParetoPoint",
    "ParetoSummary",
    "PerReplica",
    "PlanCost",
    "PlanEnergy",
    "PowerStats",
    "RunEvent",
    "RunSummary",
    "RunTotals",
    "ScheduleLag",
    "ServerTelemetry",
    "StepCallTypes",
    "StepClientLoad",
    "StepStats",
    "StepSummary",
    "StepTelemetry",
    "TelemetryGap",
    "TimingFigures",
    "TimingSummary",
]
