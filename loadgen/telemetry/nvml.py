"""GPUs through NVML (nvidia-ml-py): the only module that imports ``pynvml``.

NVML errors are translated here and nowhere else: no library or driver -> ``SamplerUnavailable``
with what to do; a GPU that disappears -> a ``gpu_lost`` event and that GPU is no longer read (the
others are); a reading the GPU does not support -> one ``field_not_supported`` event and that field
stays ``None``; any other NVML error on a reading -> one ``sampler_error`` event per (GPU, field,
error) and ``None``. Nothing here is fatal to the side process.

Power: ``power_w`` is the instantaneous field (NVML_FI_DEV_POWER_INSTANT, scope GPU) where the GPU
supports it; ``power_avg_w`` is ``nvmlDeviceGetPowerUsage``, which on Ampere and newer is a 1 s
average. Energy is the mJ counter (``nvmlDeviceGetTotalEnergyConsumption``, Volta and newer): the
analysis takes its differences, which sampling cannot alias.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loadgen.rundir.samples import GpuSample, gpu_sample
from loadgen.telemetry.base import Emit, SamplerDone, SamplerUnavailable, event, settle_power

try:
    import pynvml
except ImportError:  # nvidia-ml-py is a declared dependency; still, say so instead of crashing
    pynvml = None

_POWER_INSTANT = 186  # NVML_FI_DEV_POWER_INSTANT
_SCOPE_GPU = 0  # NVML_POWER_SCOPE_GPU
_CLOCK_SM = 1
_CLOCK_MEM = 2
_TEMP_GPU = 0


class _GpuLost(Exception):
    pass


@dataclass
class _Gpu:
    index: int
    handle: Any
    uuid: str | None
    name: str | None
    off: set[str] = field(default_factory=set)  # readings found unsupported
    reported: set[tuple[str, int]] = field(default_factory=set)  # (reading, error code) already emitted
    lost: bool = False


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def describe_nvml_error(exc: BaseException) -> str:
    """A sentence for a user: what NVML said and what to do about it."""
    if pynvml is None:
        return "nvidia-ml-py is not installed; install it (pip install nvidia-ml-py) or pass --gpu-source none"
    code = getattr(exc, "value", None)
    if code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
        return (
            "NVML library libnvidia-ml.so.1 not found: this host has no NVIDIA driver. Run the monitor on "
            "the GPU host, or pass --gpu-source with an nvidia-smi command or a DCGM exporter URL, "
            "or --gpu-source none"
        )
    if code == pynvml.NVML_ERROR_DRIVER_NOT_LOADED:
        return "NVIDIA driver is not loaded (NVML: Driver Not Loaded); check nvidia-smi on this host"
    if code == pynvml.NVML_ERROR_NO_PERMISSION:
        return "NVML refused access (No Permission); run as a user allowed to query the GPU"
    if code == pynvml.NVML_ERROR_GPU_IS_LOST:
        return "GPU is lost (fell off the bus or the driver reset it); check dmesg and nvidia-smi"
    if code == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
        return "the installed NVIDIA driver lacks this NVML function (driver too old)"
    if code == pynvml.NVML_ERROR_NOT_SUPPORTED:
        return "not supported on this GPU"
    return f"NVML error: {exc}"


class NvmlSampler:
    """Reads every visible GPU (or ``gpus``) once per ``sample()``: one record per GPU."""

    def __init__(self, period_s: float = 0.1, gpus: list[int] | None = None) -> None:
        self.name = "nvml"
        self.period_s = period_s
        self._want = gpus
        self._gpus: list[_Gpu] = []
        self._emit: Emit = lambda _rec: None
        self._inited = False

    def open(self, emit: Emit) -> None:
        self._emit = emit
        if pynvml is None:
            raise SamplerUnavailable(describe_nvml_error(ImportError()))
        try:
            pynvml.nvmlInit()
            self._inited = True
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            raise SamplerUnavailable(describe_nvml_error(exc)) from None
        if count == 0:
            raise SamplerUnavailable("NVML found no GPU on this host (nvidia-smi should list them)")
        indices = list(range(count)) if self._want is None else [i for i in self._want if i < count]
        if not indices:
            raise SamplerUnavailable(f"NVML sees {count} GPUs; none of {self._want} exists. Check --gpus")
        for i in indices:
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            except pynvml.NVMLError as exc:
                emit(event("gpu_lost", sampler=self.name, gpu=i, message=describe_nvml_error(exc)))
                continue
            gpu = _Gpu(i, handle, None, None)
            try:
                gpu.uuid = _text(self._try(gpu, "uuid", pynvml.nvmlDeviceGetUUID, handle))
                gpu.name = _text(self._try(gpu, "name", pynvml.nvmlDeviceGetName, handle))
            except _GpuLost as exc:
                emit(event("gpu_lost", sampler=self.name, gpu=i, message=str(exc)))
                continue
            self._gpus.append(gpu)
        if not self._gpus:
            raise SamplerUnavailable("NVML lists GPUs but none could be opened; check nvidia-smi and dmesg")
        emit(
            event(
                "gpus",
                sampler=self.name,
                gpus=[{"gpu": g.index, "uuid": g.uuid, "name": g.name} for g in self._gpus],
            )
        )

    def _try(self, gpu: _Gpu, reading: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Call one NVML function; translate its error into an event and ``None``."""
        if reading in gpu.off:
            return None
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            code = getattr(exc, "value", -1)
            if code == pynvml.NVML_ERROR_GPU_IS_LOST:
                raise _GpuLost(describe_nvml_error(exc)) from None
            unsupported = code in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            if unsupported:
                gpu.off.add(reading)  # never asked again
            elif (reading, code) in gpu.reported:
                return None  # each error of each reading is reported once
            else:
                gpu.reported.add((reading, code))
            kind = "field_not_supported" if unsupported else "sampler_error"
            self._emit(event(kind, sampler=self.name, gpu=gpu.index, field=reading, message=describe_nvml_error(exc)))
            return None

    def _instant_mw(self, gpu: _Gpu) -> int | None:
        values = self._try(
            gpu, "power_instant", pynvml.nvmlDeviceGetFieldValues, gpu.handle, [(_POWER_INSTANT, _SCOPE_GPU)]
        )
        if values is None:
            return None
        value = values[0]
        if value.nvmlReturn != 0:
            if value.nvmlReturn == pynvml.NVML_ERROR_GPU_IS_LOST:
                raise _GpuLost(describe_nvml_error(pynvml.NVMLError(value.nvmlReturn)))
            gpu.off.add("power_instant")
            self._emit(
                event(
                    "field_not_supported",
                    sampler=self.name,
                    gpu=gpu.index,
                    field="power_instant",
                    message=f"NVML field {_POWER_INSTANT} returned {value.nvmlReturn}; using the averaged reading",
                )
            )
            return None
        return int(value.value.uiVal)

    def _read(self, gpu: _Gpu) -> GpuSample:
        t0 = time.time_ns()
        h = gpu.handle
        instant = self._instant_mw(gpu)
        avg = self._try(gpu, "power_avg", pynvml.nvmlDeviceGetPowerUsage, h)
        energy = self._try(gpu, "energy", pynvml.nvmlDeviceGetTotalEnergyConsumption, h)
        limit = self._try(gpu, "power_limit", pynvml.nvmlDeviceGetEnforcedPowerLimit, h)
        util = self._try(gpu, "util", pynvml.nvmlDeviceGetUtilizationRates, h)
        mem = self._try(gpu, "memory", pynvml.nvmlDeviceGetMemoryInfo, h)
        sm = self._try(gpu, "sm_clock", pynvml.nvmlDeviceGetClockInfo, h, _CLOCK_SM)
        memclk = self._try(gpu, "mem_clock", pynvml.nvmlDeviceGetClockInfo, h, _CLOCK_MEM)
        reasons = self._try(gpu, "clock_reasons", pynvml.nvmlDeviceGetCurrentClocksEventReasons, h)
        temp = self._try(gpu, "temp", pynvml.nvmlDeviceGetTemperature, h, _TEMP_GPU)
        t1 = time.time_ns()
        rec = gpu_sample((t0 + t1) // 2, "nvml", gpu.index, gpu.uuid)
        rec["power_avg_w"] = None if avg is None else avg / 1000.0
        settle_power(rec, None if instant is None else instant / 1000.0)
        rec["energy_mj"] = energy
        rec["power_limit_w"] = None if limit is None else limit / 1000.0
        if util is not None:
            rec["util_gpu"], rec["util_mem"] = int(util.gpu), int(util.memory)
        if mem is not None:
            rec["mem_used_b"], rec["mem_total_b"] = int(mem.used), int(mem.total)
        rec["sm_clock_mhz"] = sm
        rec["mem_clock_mhz"] = memclk
        rec["clock_reasons"] = reasons
        rec["temp_c"] = temp
        return rec

    def sample(self) -> list[GpuSample]:
        out: list[GpuSample] = []
        for gpu in self._gpus:
            if gpu.lost:
                continue
            try:
                out.append(self._read(gpu))
            except _GpuLost as exc:
                gpu.lost = True
                self._emit(event("gpu_lost", sampler=self.name, gpu=gpu.index, uuid=gpu.uuid, message=str(exc)))
        if self._gpus and all(g.lost for g in self._gpus):
            raise SamplerDone("every GPU is lost")
        return out

    def close(self) -> None:
        if self._inited:
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError:
                pass
            self._inited = False
