"""Simulator profiles: hardware, model, server and speculative-decoding parts, as data.

A profile is four parts combined: a hardware entry (``hardware.toml``), a model entry
(``models.toml``), a speculative-decoding entry (``spec.toml``) and server settings. Named profiles
(``profiles/<name>.toml``) pick the parts and override fields; the command line can swap any part
(``--hardware b200x8 --model-config kimi-k2.6 --spec none``) and override any field afterwards
(``SECTION.FIELD=VALUE``, see :func:`apply_overrides`). Units live in the field names.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field, fields, replace
from itertools import pairwise
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

# the part types shared with hfconfig live in shapes; re-exported here
from loadgen.sim.quant import serve_as
from loadgen.sim.shapes import ModelConfig as ModelConfig
from loadgen.sim.shapes import ProfileError as ProfileError

PROFILE_DIR = Path(__file__).parent / "profiles"
PART_FILES = {"hardware": "hardware.toml", "model": "models.toml", "spec": "spec.toml"}


@dataclass(frozen=True)
class Hardware:
    """One node: ``gpus`` identical GPUs. Capacities and rates are per GPU unless named ``node``."""

    name: str = "custom"
    gpu_name: str = "NVIDIA GPU"
    gpus: int = 1
    hbm_gb: float = 80.0  # usable HBM per GPU, GB (1e9 bytes)
    hbm_bw_tb_s: float = 3.35  # peak HBM bandwidth per GPU
    bf16_tflops: float = 989.0  # dense BF16 tensor FLOP/s per GPU, in 1e12
    nvlink_uni_gb_s: float = 450.0  # NVLink bandwidth per GPU, one direction
    allreduce_ring_gb_s: float = 370.0  # all-reduce algorithm bandwidth, large messages, ring
    allreduce_nvls_gb_s: float = 0.0  # same with NVLink SHARP (0 = not available)
    power_limit_w: float = 700.0
    idle_w: float = 80.0  # model resident, server polling
    p_hbm_w: float = 150.0  # extra watts at 100 % HBM bandwidth
    p_tc_w: float = 400.0  # extra watts at 100 % BF16 tensor throughput
    p_nvl_w: float = 40.0  # extra watts while large collectives run
    sm_clock_mhz: int = 1980
    sm_clock_idle_mhz: int = 345
    mem_clock_mhz: int = 2619
    cuda_context_gb: float = 0.6  # per GPU before any weight: CUDA context, cuBLAS/NCCL handles
    fp8_tflops: float = 0.0  # dense FP8 tensor FLOP/s per GPU, in 1e12 (0 = no FP8 tensor math)
    fp4_tflops: float = 0.0  # dense FP4 (NVFP4/MXFP4) tensor FLOP/s per GPU, in 1e12 (0 = none)
    interconnect: str = "nvlink"  # GPU-to-GPU link: nvlink, xgmi (AMD Infinity Fabric), pcie5, pcie4, none
    p2p: bool = True  # GPUs reach each other peer-to-peer (False: through host memory, PCIe only)
    scaleup_gpus: int = 0  # GPUs one scale-up link domain joins (NVL72: 72); 0 = ``gpus``
    pcie_gb_s: float = 64.0  # host PCIe link per GPU, one direction (Gen5 x16: 64, Gen4 x16: 32)
    alltoall_gb_s: float = 0.0  # all-to-all bandwidth per GPU inside the node (0 = 0.8 x link)
    nic_gb_s: float = 50.0  # scale-out NIC per GPU, one direction (400 Gb/s = 50 GB/s)
    collective_latency_us: float = 0.0  # fixed cost of one collective not folded into t_fix (PCIe: NCCL's)
    # the largest dense GEMM FLOP/s measured on this GPU (1e12), by its vendor's library; 0 = not
    # measured: the GPU reaches the same share of its spec as the calibration GPU (quant.gemm_share)
    gemm_bf16_tflops: float = 0.0
    gemm_fp8_tflops: float = 0.0


@dataclass(frozen=True)
class SpecConfig:
    """Speculative decoding. ``algorithm`` is none, chain (DFlash/EAGLE chain) or tree (DDTree).

    One cycle drafts, then verifies ``num_draft_tokens`` tokens per request in one target forward
    (the verify width; the tree budget + 1 for DDTree), whatever is accepted, and commits
    ``accepted + 1`` tokens, at most ``depth + 1``. ``tau`` is the mean committed per cycle;
    ``tau_code`` / ``tau_prose`` replace it for prompts classified as code or prose (0 = use tau).
    ``tau_by_source`` (``"LABEL=TAU;LABEL=TAU"``) replaces both for a request whose
    ``X-Loadgen-Source`` header (the load generator's workload label) names one of its labels: a twin
    calibrated from a run keys acceptance by the labels the run's records carry (docs/twin.md).
    """

    name: str = "none"
    algorithm: str = "none"
    num_draft_tokens: int = 1
    depth: int = 0
    tau: float = 1.0
    tau_code: float = 0.0
    tau_prose: float = 0.0
    tau_by_source: str = ""
    beta: float = 0.5  # expert overlap of one request's verify tokens: n_eff = C * width**beta
    drafter_ms: float = 0.0  # drafter forward + tree build per cycle
    drafter_bytes: float = 0.0  # drafter weights (node total)
    drafter_kv_bytes_per_token: int = 0  # drafter KV cache per pooled token, all its layers (node total)
    draft_block_tokens: int = 0  # tokens one drafter forward processes per request
    target_hidden_layers: int = 0  # target layers whose hidden states the verify forward hands the drafter

    def __post_init__(self) -> None:
        source_taus(self.tau_by_source)  # a bad table fails at load, not at the first request

    @property
    def enabled(self) -> bool:
        return self.algorithm != "none"

    def taus_by_source(self) -> dict[str, float]:
        """``tau_by_source`` as label -> mean committed tokens per cycle (empty when unset)."""
        return source_taus(self.tau_by_source)


def source_taus(text: str) -> dict[str, float]:
    """Parse ``"LABEL=TAU;LABEL=TAU"`` (TAU >= 1) into a dict; "" gives {}."""
    out: dict[str, float] = {}
    for item in text.split(";"):
        if not item.strip():
            continue
        label, sep, value = item.rpartition("=")
        try:
            tau = float(value)
        except ValueError:
            tau = float("nan")
        if not sep or not label.strip() or not tau >= 1.0:
            raise ProfileError(
                f"spec.tau_by_source {text!r}: expected LABEL=TAU pairs separated by ';' with TAU >= 1, "
                "e.g. chat:answer/code=4.6;chat:answer/prose=3.8"
            )
        out[label.strip()] = tau
    return out


@dataclass(frozen=True)
class ServerConfig:
    """Serving settings (SGLang names) and the engine constants fitted per deployment."""

    engine: str = ""  # the engine whose defaults were applied (sim/engines.py); "" = the profile's own
    tp: int = 1
    pp: int = 1  # pipeline stages (SGLang --pp-size): tp * pp GPUs
    ep: int = 1  # expert-parallel groups within a stage (--ep-size; divides tp)
    dp_attention: int = 1  # attention data-parallel ranks within a stage (--enable-dp-attention --dp-size)
    max_running_requests: int = 0  # 0 = SGLang's default (48 with speculative decoding)
    max_queued_requests: int = 0  # 0 = unbounded; beyond it new requests get 503
    mem_fraction_static: float = 0.88
    # the KV pool in tokens as the engine was told it, not sized from mem_fraction_static (vLLM's
    # --num-gpu-blocks-override x --block-size; TurboMind's cache_max_entry_count >= 1, in blocks, x
    # cache_block_seq_len); taken as given, as those engines take it; 0 = sized from memory
    kv_pool_tokens: int = 0
    cuda_graph_max_bs: int = 256
    context_length: int = 0  # 0 = the model's
    chunked_prefill_size: int = 8192
    nvls: bool = True  # use NVLS all-reduce when the hardware has it
    t_fix_ms: float = 5.0  # fixed cost per forward step (launches, small all-reduces, sampling)
    t_fix_prefill_ms: float = 0.0  # extra fixed cost of a prefill step (no CUDA graph)
    # fixed cost per layer of a forward on top of t_fix_ms (its kernels' launch and tail under a CUDA
    # graph), so that one engine constant serves models of any depth (the generic profile)
    t_fix_per_layer_us: float = 0.0
    eta_bw: float = 0.8  # share of peak HBM bandwidth reached streaming weights
    eta_attn: float = 0.32  # share of peak HBM bandwidth reached streaming KV
    eta_c: float = 0.5  # share of peak BF16 FLOP/s reached by the forward
    # how the memory and compute times of a stage combine: 0 = the larger of the two (the calibrated
    # profiles); k > 0 = (t_mem^k + t_cmp^k)^(1/k), kernels that overlap them only in part (generic)
    roofline_k: float = 0.0
    # the attention's KV read and the matmuls run as kernels of their own, one after the other: a
    # stage takes the weights' roofline plus the KV's, rather than one roofline of both (generic)
    attention_apart: bool = False
    small_allreduce_bytes: float = 1e6  # messages below this are folded into t_fix
    # latency of one all-reduce on NVLink/xGMI when t_fix does not hold it (the generic profile's t_fix
    # was measured on one GPU); 0 = folded into t_fix below small_allreduce_bytes (calibrated profiles)
    allreduce_latency_us: float = 0.0
    # fused-MoE kernel's token block (SGLang fused_moe BLOCK_SIZE_M): each routed expert a step
    # touches computes half a block of padding rows on average; 0 = no padding
    moe_block_tokens: int = 64
    decode_log_interval: int = 40  # decode steps between metric refreshes / Decode batch lines
    startup_s: float = 0.0  # simulated start-up time (weights load, graph capture), scaled down
    natural_len_median: int = 300  # output length when the request does not ask ignore_eos
    natural_len_sigma: float = 0.8
    chars_per_token: float = 4.0  # prompt token estimator
    disable_radix_cache: bool = False  # SGLang's flag: no prefix cache, every prompt prefilled whole
    # the request body's ``priority``: "fcfs" ignores it (vLLM's default; vLLM 0.32 accepts any value
    # then), "priority" serves the waiting queue by it and preempts the lowest first (vLLM's
    # --scheduling-policy priority; SGLang's --enable-priority-scheduling)
    scheduling_policy: str = "fcfs"
    # which priority values come first: vLLM, always the lower; SGLang, the higher unless
    # --schedule-low-priority-values-first (SchedulePolicy.priority_sign)
    low_priority_values_first: bool = True
    # SGLang's priority preemption (PrefillAdder.preempt_to_schedule): a waiting request that cannot
    # be admitted preempts running ones whose priority it beats by more than this
    # (--priority-scheduling-preemption-threshold, 10); off with --disable-priority-preemption
    priority_preemption_threshold: int = 10
    disable_priority_preemption: bool = False
    prefix_block_tokens: int = 64  # prefix cache granularity, in estimated prompt tokens
    quantization: str = ""  # weight format served (sim/quant.py); "" = the checkpoint's own
    kv_cache_dtype: str = "auto"  # auto (the model's BF16) or fp8 (fp8_e4m3, fp8_e5m2)
    weight_only_eff: float = 0.85  # share of the BF16 GEMM rate a weight-only format keeps (quant.WEIGHT_ONLY)

    def __post_init__(self) -> None:
        if self.kv_pool_tokens < 0:
            raise ProfileError(
                f"server.kv_pool_tokens {self.kv_pool_tokens}: give the pool in tokens (> 0), or 0 to size it "
                "from mem_fraction_static"
            )


@dataclass(frozen=True)
class FixedTiming:
    """Override of the step model for demos and tests: a given TTFT and per-step time.

    Decode step time = ``itl_ms * (1 + itl_growth * (running - 1))``, so per-request speed falls as
    concurrency rises and aggregate throughput saturates at ``itl_ms / itl_growth`` requests' worth.
    A prefill step takes ``ttft_ms`` (plus ``ttft_per_1k_ms`` per 1,000 prompt tokens), and at least
    ``ttft_floor_ms``: a small batch is bound by reading the weights, not by its tokens (0: no floor).

    ``decode_ms_by_batch`` (``"N:MS,N:MS,..."``, at least two points, batch sizes increasing), when
    set, replaces ``itl_ms``/``itl_growth``: the decode step is piecewise linear in the running
    requests through those points, extended past either end along the nearest segment (never below
    1 µs). A calibrated twin uses it where the step time bends with the batch (MoE experts touched).

    ``decode_ms_per_1k_ctx`` adds that many ms to a decode step per 1,000 tokens held in the KV cache
    by the running requests (prompt and output so far, cached prefix included): attention reads them
    all. A twin calibrated from two or more context lengths writes it (docs/twin.md); 0: no term.

    ``prefill_holds_decode``: the prefill time was measured as vLLM runs a prompt, in one step with
    the running requests' decodes (a twin of a vLLM run), so a vLLM step that holds both takes the
    longer of the two parts, not their sum (sched_vllm.py; ``FixedStepModel.mixed``).
    """

    ttft_ms: float = 20.0
    itl_ms: float = 5.0
    itl_growth: float = 0.01
    ttft_per_1k_ms: float = 0.0
    ttft_floor_ms: float = 0.0
    power_busy_w: float = 300.0  # per-GPU power while stepping
    decode_ms_by_batch: str = ""
    decode_ms_per_1k_ctx: float = 0.0
    prefill_holds_decode: bool = False

    def __post_init__(self) -> None:
        batch_table(self.decode_ms_by_batch)  # a bad table fails at load, not at the first step

    def decode_points(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """``decode_ms_by_batch`` as (batch sizes, step ms); both empty when unset."""
        return batch_table(self.decode_ms_by_batch)


def batch_table(text: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Parse ``"N:MS,N:MS,..."`` into increasing batch sizes and positive step times (ms)."""
    if not text.strip():
        return (), ()
    where = f"timing.decode_ms_by_batch {text!r}"
    try:
        pairs = [tuple(float(x) for x in item.split(":")) for item in text.split(",") if item.strip()]
    except ValueError as exc:
        raise ProfileError(f"{where}: expected BATCH:MS pairs separated by commas, e.g. 1:7.1,32:9.8") from exc
    if any(len(p) != 2 for p in pairs) or len(pairs) < 2:
        raise ProfileError(f"{where}: expected two or more BATCH:MS pairs, e.g. 1:7.1,32:9.8")
    ns = tuple(p[0] for p in pairs)
    ms = tuple(p[1] for p in pairs)
    if any(b <= a for a, b in pairwise(ns)) or ns[0] < 1 or any(m <= 0 for m in ms):
        raise ProfileError(f"{where}: batch sizes must start at 1 or more and increase; step times must be > 0")
    return ns, ms


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    hardware: Hardware
    model: ModelConfig
    spec: SpecConfig
    server: ServerConfig
    timing: FixedTiming | None = None
    sources: tuple[str, ...] = field(default_factory=tuple)

    @property
    def context_length(self) -> int:
        return self.server.context_length or self.model.context_length

    @property
    def max_running_requests(self) -> int:
        if self.server.max_running_requests > 0:
            return self.server.max_running_requests
        return 48 if self.spec.enabled else 4096

    @property
    def verify_width(self) -> int:
        return self.spec.num_draft_tokens if self.spec.enabled else 1


SECTION_TYPES: dict[str, Any] = {
    "hardware": Hardware,
    "model": ModelConfig,
    "spec": SpecConfig,
    "server": ServerConfig,
    "timing": FixedTiming,
}


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            data: dict[str, Any] = tomllib.load(fh)
            return data
    except FileNotFoundError as exc:
        raise ProfileError(f"{path}: file not found") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: invalid TOML: {exc}") from exc


def _build(cls: Any, values: dict[str, Any], where: str) -> Any:
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in known:
            raise ProfileError(f"{where}: unknown field {key!r}; known fields: {', '.join(sorted(known))}")
        kwargs[key] = _coerce(known[key], value, f"{where}.{key}")
    return cls(**kwargs)


def _coerce(f: dataclasses.Field[Any], value: Any, where: str) -> Any:
    kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    try:
        if kind == "bool":
            if isinstance(value, str):
                low = value.strip().lower()
                if low in ("1", "true", "yes", "on"):
                    return True
                if low in ("0", "false", "no", "off"):
                    return False
                raise ValueError(value)
            return bool(value)
        if kind == "int":
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(float(value)) if isinstance(value, str) else int(value)
        if kind == "float":
            return float(value)
        if kind == "str":
            return str(value)
    except (TypeError, ValueError) as exc:
        raise ProfileError(f"{where}: {value!r} is not a valid {kind}") from exc
    return value


def part_names(part: str) -> list[str]:
    """Entry names available for one part (``hardware``, ``model`` or ``spec``)."""
    return sorted(_read_toml(PROFILE_DIR / PART_FILES[part]))


def load_part(part: str, name: str) -> Any:
    path = PROFILE_DIR / PART_FILES[part]
    table = _read_toml(path)
    if name not in table:
        raise ProfileError(f"{path}: no {part} entry {name!r}; choose one of: {', '.join(sorted(table))}")
    values = dict(table[name])
    values.setdefault("name", name)
    return _build(SECTION_TYPES[part], values, f"{path.name}[{name}]")


def load_model_part(ref: str) -> ModelConfig:
    """The model part ``ref`` names, tried in this order: an entry of ``models.toml``, a config shipped
    as ``profiles/configs/<ref>.json``, the path of a Hugging Face ``config.json`` (or of the folder
    holding one), read and never downloaded; the last two are derived by ``hfconfig.py``. Raises
    ProfileError naming what was tried, or the file and its missing fields."""
    from loadgen.sim import hfconfig

    entries = part_names("model")
    if ref in entries:
        mc: ModelConfig = load_part("model", ref)
        return mc
    shipped = hfconfig.shipped_config_names()
    if ref in shipped:
        return hfconfig.model_from_file(hfconfig.CONFIG_DIR / f"{ref}.json", name=ref)
    path = Path(ref).expanduser()
    if ref and (path.is_file() or (path / "config.json").is_file()):
        return hfconfig.model_from_file(path, name=ref)
    raise ProfileError(
        f"no model part {ref!r}: not an entry of {PART_FILES['model']} ({', '.join(entries)}), not a shipped "
        f"config ({', '.join(shipped)}) and no such file; give one of those names or the path of a "
        "Hugging Face config.json"
    )


def profile_names() -> list[str]:
    """Named profiles shipped in ``profiles/`` (every ``*.toml`` that is not a parts file)."""
    parts = set(PART_FILES.values())
    return sorted(p.stem for p in PROFILE_DIR.glob("*.toml") if p.name not in parts)


def profile_description(name: str) -> str:
    return str(_read_toml(PROFILE_DIR / f"{name}.toml").get("description", ""))


def load_profile(
    name: str,
    *,
    hardware: str | None = None,
    model: str | None = None,
    spec: str | None = None,
) -> Profile:
    """Load the named profile, optionally swapping its hardware, model or spec part (``model``: a
    models.toml entry, a shipped config.json name or a config.json path, see :func:`load_model_part`)."""
    path = PROFILE_DIR / f"{name}.toml"
    if not path.exists():
        raise ProfileError(f"unknown profile {name!r}; choose one of: {', '.join(profile_names())}")
    return load_profile_file(path, name=name, hardware=hardware, model=model, spec=spec)


def load_profile_file(
    path: str | Path,
    *,
    name: str | None = None,
    hardware: str | None = None,
    model: str | None = None,
    spec: str | None = None,
) -> Profile:
    """Load a profile from any TOML file in the format of ``profiles/<name>.toml`` (``loadgen sim
    --profile-file``; a calibrated twin, say). Its parts are named from the shipped part files and
    may be overridden in ``[hardware_overrides]``, ``[model_overrides]`` and ``[spec_overrides]``.
    ``name`` defaults to the file's stem. Raises ProfileError naming the file and field."""
    path = Path(path)
    name = name or path.stem
    data = _read_toml(path)
    hw = load_part("hardware", hardware or str(data.get("hardware", "")))
    mc = load_model_part(model or str(data.get("model", "")))
    sp = load_part("spec", spec or str(data.get("spec", "none")))
    for section, part_obj in (("hardware", hw), ("model", mc), ("spec", sp)):
        extra = data.get(f"{section}_overrides")
        if extra:
            values = {f.name: getattr(part_obj, f.name) for f in fields(part_obj)}
            values.update(extra)
            part_obj = _build(SECTION_TYPES[section], values, f"{path.name}[{section}_overrides]")
            if section == "hardware":
                hw = part_obj
            elif section == "model":
                mc = part_obj
            else:
                sp = part_obj
    server = _build(ServerConfig, dict(data.get("server", {})), f"{path.name}[server]")
    mc = serve_as(mc, server.quantization, server.kv_cache_dtype)
    timing = _build(FixedTiming, dict(data["timing"]), f"{path.name}[timing]") if "timing" in data else None
    return Profile(
        name=name,
        description=str(data.get("description", "")),
        hardware=hw,
        model=mc,
        spec=sp,
        server=server,
        timing=timing,
        sources=tuple(str(s) for s in data.get("sources", [])),
    )


def apply_overrides(profile: Profile, overrides: dict[str, Any]) -> Profile:
    """Return ``profile`` with ``{"section.field": value}`` overrides applied (strings are parsed).

    Overriding any ``timing.*`` field on a profile without fixed timing switches it to fixed timing.
    """
    by_section: dict[str, dict[str, Any]] = {}
    for key, value in overrides.items():
        section, _, name = key.partition(".")
        if section not in SECTION_TYPES or not name:
            raise ProfileError(f"override {key!r}: expected SECTION.FIELD with SECTION in {sorted(SECTION_TYPES)}")
        by_section.setdefault(section, {})[name] = value
    changes: dict[str, Any] = {}
    for section, values in by_section.items():
        current = getattr(profile, section)
        if current is None:
            current = FixedTiming()
        base = {f.name: getattr(current, f.name) for f in fields(current)}
        base.update(values)
        changes[section] = _build(SECTION_TYPES[section], base, f"override {section}")
    server = changes.get("server", profile.server)
    changes["model"] = serve_as(changes.get("model", profile.model), server.quantization, server.kv_cache_dtype)
    return replace(profile, **changes)
