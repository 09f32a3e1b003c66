"""GPUs through any command that prints ``nvidia-smi --query-gpu=... --format=csv`` output
(``nvidia-smi`` here, ``ssh gpu-host nvidia-smi ...`` there). The command is an argument list.

With a loop flag (``-l``/``-lms``/``--loop``/``--loop-ms``) the command streams and each line is a
sample; without one it is run once per period. The header line names the fields; with
``noheader`` the names come from the command's own ``--query-gpu`` list. Units (``W``, ``MiB``,
``MHz``, ``%``) are stripped; ``[N/A]``, ``[Not Supported]`` and non-finite numbers read as missing. nvidia-smi has no
energy counter query, so energy comes from the integral of power in the analysis.
"""

from __future__ import annotations

import math
import subprocess
import time

from loadgen.rundir.samples import GpuSample, gpu_sample
from loadgen.telemetry.base import Emit, SamplerUnavailable, set_readings, settle_power

LOOP_FLAGS = ("-l", "-lms", "--loop", "--loop-ms")
_MIB = 1 << 20

# nvidia-smi query name -> (sample field, scale); the first listed wins when two map to one field
_FIELDS: dict[str, tuple[str, float]] = {
    "power.draw.instant": ("power_instant_w", 1.0),
    "power.draw": ("power_avg_w", 1.0),
    "power.draw.average": ("power_avg_w", 1.0),
    "enforced.power.limit": ("power_limit_w", 1.0),
    "power.limit": ("power_limit_enforced_fallback_w", 1.0),
    "utilization.gpu": ("util_gpu", 1.0),
    "utilization.memory": ("util_mem", 1.0),
    "memory.used": ("mem_used_b", _MIB),
    "memory.total": ("mem_total_b", _MIB),
    "clocks.sm": ("sm_clock_mhz", 1.0),
    "clocks.current.sm": ("sm_clock_mhz", 1.0),
    "clocks.mem": ("mem_clock_mhz", 1.0),
    "clocks.current.memory": ("mem_clock_mhz", 1.0),
    "temperature.gpu": ("temp_c", 1.0),
}
_REASONS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")
_INT_FIELDS = frozenset({"util_gpu", "util_mem", "mem_used_b", "mem_total_b", "sm_clock_mhz", "mem_clock_mhz"})


def query_fields(argv: list[str]) -> list[str] | None:
    """The ``--query-gpu`` field list of a command line, if it has one."""
    for i, arg in enumerate(argv):
        if arg.startswith("--query-gpu="):
            return [f.strip() for f in arg.split("=", 1)[1].split(",")]
        if arg == "--query-gpu" and i + 1 < len(argv):
            return [f.strip() for f in argv[i + 1].split(",")]
    return None


def is_streaming(argv: list[str]) -> bool:
    return any(a in LOOP_FLAGS or a.startswith(("--loop=", "--loop-ms=")) for a in argv)


def _number(text: str) -> float | None:
    t = text.strip()
    if not t or t.startswith("[") or t.upper() in ("N/A", "NOT SUPPORTED"):
        return None
    t = t.split()[0]
    try:
        v = float(int(t, 16)) if t.lower().startswith("0x") else float(t)
    except (ValueError, OverflowError):
        return None
    return v if math.isfinite(v) else None  # "inf"/"nan" are no reading (and int() of them raises)


class SmiParser:
    """Feed lines; get GPU samples. Pure: the read time comes in."""

    def __init__(self, fields: list[str] | None = None) -> None:
        self.fields = fields

    def feed(self, line: str, t_ns: int) -> list[GpuSample]:
        line = line.strip()
        if not line:
            return []
        cells = [c.strip() for c in line.split(",")]
        if any(c.split(" [")[0] in ("index", "uuid", "power.draw", "timestamp", "name") for c in cells[:3]):
            # a header line: "power.draw [W]" -> "power.draw"
            self.fields = [c.split(" [")[0].strip() for c in cells]
            return []
        if self.fields is None or len(cells) != len(self.fields):
            return []
        named = dict(zip(self.fields, cells, strict=True))
        gpu_index = _number(named.get("index", "0"))
        rec = gpu_sample(t_ns, "smi", int(gpu_index) if gpu_index is not None else 0, named.get("uuid"))
        values: dict[str, float] = {}
        for query, text in named.items():
            target = _FIELDS.get(query)
            if target is None:
                continue
            v = _number(text)
            if v is not None and target[0] not in values:
                values[target[0]] = v * target[1]
        for name in _REASONS:
            if name in named:
                v = _number(named[name])
                rec["clock_reasons"] = None if v is None else int(v)
        instant = values.pop("power_instant_w", None)
        fallback_limit = values.pop("power_limit_enforced_fallback_w", None)
        set_readings(rec, values, _INT_FIELDS)
        if rec["power_limit_w"] is None:
            rec["power_limit_w"] = fallback_limit
        settle_power(rec, instant)
        return [rec]


class SmiPollSampler:
    """Runs a one-shot nvidia-smi command once per period and parses its output."""

    def __init__(self, argv: list[str], period_s: float = 1.0, timeout_s: float = 10.0) -> None:
        self.name = "smi"
        self.period_s = period_s
        self.argv = argv
        self.timeout_s = timeout_s
        self.parser = SmiParser(query_fields(argv))

    def open(self, emit: Emit) -> None:
        self._emit = emit

    def sample(self) -> list[GpuSample]:
        try:
            proc = subprocess.run(
                self.argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=self.timeout_s, check=False
            )
        except FileNotFoundError:
            raise SamplerUnavailable(f"--gpu-source: command {self.argv[0]!r} not found") from None
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"--gpu-source: {self.argv[0]} did not finish within {self.timeout_s:g} s") from None
        if proc.returncode != 0:
            tail = proc.stderr.decode(errors="replace").strip()[-300:]
            raise RuntimeError(f"--gpu-source: {self.argv[0]} exited with {proc.returncode}: {tail}")
        t_ns = time.time_ns()
        out: list[GpuSample] = []
        for line in proc.stdout.decode(errors="replace").splitlines():
            out.extend(self.parser.feed(line, t_ns))
        return out

    def close(self) -> None:
        pass
