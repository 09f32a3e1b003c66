"""``loadgen calibrate RUN_DIR... -o twin.toml`` and ``loadgen twin RUN_DIR`` (docs/twin.md).

``calibrate_main(argv)`` fits the twin and writes the profile and its fit report; exit 0, or 2 with
one line naming the run directory and what is wrong. ``twin_main(argv)`` calibrates, serves the
twin (``python -m loadgen.sim --profile-file``), replays the run's ramp against it (``python -m
loadgen.cli ramp``, built from the manifest's options by the one flag table) and writes
``twin.md``/``twin.json`` beside the twin's own run directory; exit 0, 2 bad input, 1 when the twin
or the replay fails (the message says which, with the command and its last output lines).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from loadgen.analysis.load import Run, RunLoadError, load_run
from loadgen.spec import flags
from loadgen.twin.compare import compare_runs, markdown
from loadgen.twin.emit import TwinError, apply_sets, write_twin
from loadgen.twin.fit import TwinFit, fit
from loadgen.twin.observe import observe

# options a replay never copies: the target, where to write, secrets, the live server's own hooks
_NOT_REPLAYED = {"url", "out", "label", "api_key", "server_status", "prometheus_port", "workers", "argv", "telemetry"}


def _load_runs(paths: list[str]) -> list[Run]:
    runs = []
    for p in paths:
        try:
            run = load_run(p)
        except RunLoadError as exc:
            raise TwinError(f"{p}: {exc}") from exc
        if not len(run.requests.sent_ns):
            raise TwinError(f"{p}: no request records (requests*.jsonl empty or missing): nothing to calibrate from")
        runs.append(run)
    return runs


def calibrate(paths: list[str]) -> tuple[list[Run], TwinFit]:
    runs = _load_runs(paths)
    return runs, fit(observe(runs))


def _served_name(runs: list[Run]) -> str:
    opts = runs[0].manifest.get("options") or {}
    return str(opts.get("model") or "twin")


def _summary(result: TwinFit) -> list[str]:
    return [f"`{k}` = {v.describe()}" for k, v in result.params.items()]


def calibrate_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="loadgen calibrate", description="Fit a simulator profile to run directories.")
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR")
    ap.add_argument(
        "-o",
        "--output",
        default="twin.toml",
        help="profile to write (default twin.toml); the fit report goes beside it as NAME.fit.json",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="replace a fitted parameter (what-if), e.g. max_running_requests=256",
    )
    args = ap.parse_args(argv)
    try:
        runs, result = calibrate(args.runs)
        apply_sets(result, _parse_sets(args.set))
        profile, report = write_twin(result, Path(args.output), served_name=_served_name(runs))
    except TwinError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in _summary(result):
        print(line)
    for line in result.cannot_fit:
        print(f"cannot fit: {line}")
    print(f"profile: {profile}")
    print(f"fit report: {report}")
    return 0


def _parse_sets(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise TwinError(f"--set {item!r}: expected NAME=VALUE")
        out[key.strip()] = value.strip()
    return out


def ramp_argv(run: Run, url: str, out: Path, concurrency: list[int] | None, gpu_source: str) -> list[str]:
    """The ``loadgen ramp`` command that replays ``run``'s ramp against ``url``."""
    opts: dict[str, Any] = dict(run.manifest.get("options") or {})
    if not opts:
        raise TwinError(f"{run.path}: manifest.json has no options: cannot tell which ramp to replay")
    values: dict[str, Any] = {k: v for k, v in opts.items() if k not in _NOT_REPLAYED}
    for k, v in (opts.get("timeouts") or {}).items():
        values[f"timeouts.{k}"] = v
    values.pop("timeouts", None)
    values["no_stream"] = not opts.get("stream", True)
    if values.get("find_knee"):
        # a knee search replays as the loads it actually visited
        values["find_knee"] = False
        values["concurrency"] = sorted({s.concurrency for s in run.steps if s.concurrency})
    if concurrency:
        values["concurrency"] = concurrency
        values["rates"] = None
    values.update({"url": url, "out": str(out), "label": f"twin of {run.path.name}", "wait_ready_s": 30.0})
    return [sys.executable, "-m", "loadgen.cli", "ramp", *flags.to_argv(values, "ramp"), "--gpu-source", gpu_source]


def _start_sim(profile: Path, workdir: Path, extra: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    port_file = workdir / "twin-sim.port"
    log = workdir / "twin-sim.log"
    cmd = [
        sys.executable,
        "-m",
        "loadgen.sim",
        "--profile-file",
        str(profile),
        "--port",
        "0",
        "--port-file",
        str(port_file),
        "--log-file",
        str(log),
        *extra,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30.0
    while not (port_file.exists() and port_file.read_text().strip()):
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise TwinError(f"the twin simulator exited with {proc.returncode}: {err.strip()[-800:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise TwinError("the twin simulator wrote no port file within 30 s")
        time.sleep(0.02)
    url = f"http://127.0.0.1:{int(port_file.read_text().strip())}"
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return proc, url
        except OSError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise TwinError("the twin simulator did not become ready")
        time.sleep(0.05)


def twin_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="loadgen twin", description="Calibrate a twin and replay the run against it.")
    ap.add_argument("run", metavar="RUN_DIR")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="what-if: replace a fitted parameter (max_running_requests=256, kv_pool_tokens=...) "
        "or any simulator field as SECTION.FIELD=VALUE",
    )
    ap.add_argument("--concurrency", help="replay these concurrencies instead of the run's (what-if)")
    ap.add_argument("--out", help="folder for twin.toml, twin.md, twin.json and the twin's run (default RUN_DIR/twin)")
    args = ap.parse_args(argv)
    try:
        conc = [int(x) for x in args.concurrency.split(",")] if args.concurrency else None
    except ValueError:
        print(f"error: --concurrency {args.concurrency!r}: expected integers separated by commas", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path(args.run) / "twin"
    try:
        runs, result = calibrate([args.run])
        passthrough = apply_sets(result, _parse_sets(args.set))
        profile, _ = write_twin(result, out / "twin.toml", served_name=_served_name(runs))
    except TwinError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    measured = runs[0]
    extra = [a for k, v in passthrough.items() for a in ("--set", f"{k}={v}")]
    try:
        proc, url = _start_sim(profile, out, extra)
    except TwinError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        gpu = f"{url}/gpu/metrics" if any(s.get("src") == "gpu" for s in measured.samples) else "none"
        cmd = ramp_argv(measured, url, out / "runs", conc, gpu)
        with tempfile.TemporaryFile("w+") as log:
            done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            log.seek(0)
            text = log.read()
    except TwinError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if done.returncode != 0 or not lines:
        print(f"error: the replay `{' '.join(cmd)}` exited with {done.returncode}:", file=sys.stderr)
        print("\n".join(lines[-15:]), file=sys.stderr)
        return 1
    twin_run = load_run(lines[-1].strip())
    table = compare_runs(measured, twin_run)
    table["twin_run"] = str(twin_run.path)
    table["fit"] = result.as_json()
    (out / "twin.json").write_text(json.dumps(table, indent=2) + "\n")
    (out / "twin.md").write_text(markdown(table, _summary(result), result.cannot_fit))
    print(f"twin: {out / 'twin.md'}")
    return 0
