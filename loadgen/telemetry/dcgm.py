"""GPUs through a DCGM exporter's Prometheus ``/metrics`` (``http://gpu-host:9400/metrics``).

DCGM reports watts (NVML reports mW), energy in mJ since driver load, framebuffer memory in MiB.
Series are grouped by their ``gpu`` label. A scrape does not make DCGM read the hardware: the values
are as fresh as the exporter's own collection interval.
"""

from __future__ import annotations

import time

from loadgen.rundir.samples import GpuSample, gpu_sample
from loadgen.telemetry import prom
from loadgen.telemetry.base import Emit, set_readings, settle_power
from loadgen.telemetry.fetch import get

_MIB = 1 << 20
_MAP: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_POWER_USAGE_INSTANT": ("power_instant_w", 1.0),
    "DCGM_FI_DEV_POWER_USAGE": ("power_avg_w", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_mj", 1.0),
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": ("power_limit_w", 1.0),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_mgmt_limit_w", 1.0),
    "DCGM_FI_DEV_GPU_UTIL": ("util_gpu", 1.0),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("util_mem", 1.0),
    "DCGM_FI_DEV_FB_USED": ("mem_used_b", _MIB),
    "DCGM_FI_DEV_FB_FREE": ("mem_free_b", _MIB),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("temp_c", 1.0),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("clock_reasons", 1.0),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("clock_reasons", 1.0),
}
_INT_FIELDS = frozenset(
    {"util_gpu", "util_mem", "mem_used_b", "sm_clock_mhz", "mem_clock_mhz", "clock_reasons", "energy_mj"}
)


def dcgm_samples(expo: prom.Exposition, t_ns: int) -> list[GpuSample]:
    per_gpu: dict[int, dict[str, float]] = {}
    uuids: dict[int, str] = {}
    for s in expo.samples:
        target = _MAP.get(s.name)
        if target is None or "gpu" not in s.labels:
            continue
        try:
            gpu = int(s.labels["gpu"])
        except ValueError:
            continue
        per_gpu.setdefault(gpu, {})[target[0]] = s.value * target[1]
        if "UUID" in s.labels:
            uuids[gpu] = s.labels["UUID"]
    out: list[GpuSample] = []
    for gpu in sorted(per_gpu):
        vals = per_gpu[gpu]
        rec = gpu_sample(t_ns, "dcgm", gpu, uuids.get(gpu))
        instant = vals.pop("power_instant_w", None)
        mgmt = vals.pop("power_mgmt_limit_w", None)
        free = vals.pop("mem_free_b", None)
        set_readings(rec, vals, _INT_FIELDS)
        if rec["power_limit_w"] is None:
            rec["power_limit_w"] = mgmt
        if free is not None and rec["mem_used_b"] is not None:
            rec["mem_total_b"] = int(free) + rec["mem_used_b"]
        settle_power(rec, instant)
        out.append(rec)
    return out


class DcgmSampler:
    def __init__(self, url: str, period_s: float = 1.0, timeout_s: float = 2.0) -> None:
        self.name = "dcgm"
        self.period_s = period_s
        self.url = url
        self.timeout_s = min(timeout_s, max(period_s, 0.5))

    def open(self, emit: Emit) -> None:
        self._emit = emit

    def sample(self) -> list[GpuSample]:
        body, _ = get(self.url, self.timeout_s)
        t_ns = time.time_ns()
        expo = prom.parse(body.decode("utf-8", errors="replace"), lambda n: n.startswith("DCGM_FI_"))
        return dcgm_samples(expo, t_ns)

    def close(self) -> None:
        pass
