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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.analysis.load import Run, RunLoadError, load_run
from loadgen.analysis.summary import manifest_value
from loadgen.rundir.layout import read_manifest, write_manifest
from loadgen.spec import flags
from loadgen.twin.args import WHAT_IF_LOAD, calibrate_parser, twin_parser
from loadgen.twin.compare import compare_runs, markdown
from loadgen.twin.emit import SET_ALIASES, TwinError, apply_sets, write_twin
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


def calibrate(paths: list[str], engine: str | None = None) -> tuple[list[Run], TwinFit]:
    runs = _load_runs(paths)
    result = fit(observe(runs))
    if engine:
        result.engine, result.engine_evidence = engine, "--engine"
    return runs, result


def _served_name(runs: list[Run]) -> str:
    opts = runs[0].manifest.get("options") or {}
    return str(opts.get("model") or "twin")


def _summary(result: TwinFit) -> list[str]:
    return [f"`engine` = {result.engine} ({result.engine_evidence})"] + [
        f"`{k}` = {v.describe()}" for k, v in result.params.items()
    ]


def calibrate_main(argv: list[str]) -> int:
    args = calibrate_parser().parse_args(argv)
    try:
        runs, result = calibrate(args.runs, args.engine)
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


@dataclass(frozen=True)
class WhatIf:
    """What the replay changes against the measured run: simulator parameters (``sets``, as given
    to ``--set``) and the ramp's loads, context lengths and max_tokens (None: the run's own)."""

    sets: dict[str, str] = field(default_factory=dict)
    concurrency: list[int] | None = None
    context_tokens: list[int] | None = None
    max_tokens: int | None = None

    def describe(self, run: Run, result: TwinFit) -> str:
        """One line: each change with the measured value beside it ("" when nothing changes)."""
        parts = []
        for name, value in self.sets.items():
            fitted = (result.measured.get("what_if") or {}).get(SET_ALIASES.get(name, name), {}).get("fitted")
            parts.append(f"{name}={value}" + (f" (fitted {fitted:g})" if isinstance(fitted, (int, float)) else ""))
        opts = run.manifest.get("options") or {}
        if self.concurrency:
            was = sorted({s.concurrency for s in run.steps if s.concurrency})
            parts.append(f"concurrency {_ints(self.concurrency)} (measured {_ints(was) or 'none'})")
        if self.context_tokens:
            was_ctx = opts.get("context_tokens") or sorted({s.context_tokens for s in run.steps if s.context_tokens})
            parts.append(f"context tokens {_ints(self.context_tokens)} (measured {_ints(was_ctx) or 'default'})")
        if self.max_tokens is not None:
            was_max = opts.get("max_tokens")
            ratio = f", {self.max_tokens / was_max:.2g}x" if isinstance(was_max, int) and was_max > 0 else ""
            parts.append(f"max_tokens {self.max_tokens} (measured {was_max}{ratio})")
        return "; ".join(parts)

    def manifest(self) -> dict[str, Any]:
        return {
            "overrides": dict(self.sets),
            "concurrency": self.concurrency,
            "context_tokens": self.context_tokens,
            "max_tokens": self.max_tokens,
        }


def _ints(values: Any) -> str:
    return ",".join(str(v) for v in values) if isinstance(values, (list, tuple)) else ""


def _telemetry_argv(run: Run, url: str) -> list[str]:
    """The replay samples the twin as the run sampled its server, at the run's rates: the twin's
    /metrics always (its KV fill, queue and retractions answer the what-if even where the run had no
    /metrics), its /gpu/metrics where the run had GPU telemetry (else the twin's power is no fit)."""
    tel = (run.manifest.get("options") or {}).get("telemetry") or {}
    argv = ["--metrics-url", f"{url}/metrics", "--metrics-hz", repr(float(tel.get("metrics_hz") or 1.0))]
    if any(s["src"] == "gpu" for s in run.samples):
        argv += ["--gpu-source", f"{url}/gpu/metrics", "--gpu-hz", repr(float(tel.get("gpu_hz") or 10.0))]
    else:
        argv += ["--gpu-source", "none"]
    return argv


def ramp_argv(run: Run, url: str, out: Path, what_if: WhatIf | None = None) -> list[str]:
    """The ``loadgen ramp`` command that replays ``run``'s ramp against ``url`` (with ``what_if``'s
    loads, context lengths and max_tokens), sampling the twin's telemetry."""
    what_if = what_if or WhatIf()
    opts: dict[str, Any] = dict(run.manifest.get("options") or {})
    if not opts:
        raise TwinError(f"{run.path}: manifest.json has no options: cannot tell which ramp to replay")
    values: dict[str, Any] = {k: v for k, v in opts.items() if k not in _NOT_REPLAYED}
    for k, v in (opts.get("timeouts") or {}).items():
        values[f"timeouts.{k}"] = v
    values.pop("timeouts", None)
    values["no_stream"] = not opts.get("stream", True)
    if isinstance(values.get("slo"), dict):
        # the manifest keeps the parsed limits (ttft_p99_ms: 2000.0); the flag takes their text
        values["slo"] = _slo_text(values["slo"]) or None
    if values.get("find_knee"):
        # a knee search replays as the loads it actually visited
        values["find_knee"] = False
        values["concurrency"] = sorted({s.concurrency for s in run.steps if s.concurrency})
    if values.get("scenario"):
        # the scenario file set the output lengths and body (the manifest keeps the defaults beside it)
        if what_if.max_tokens is not None:
            raise TwinError(
                f"--max-tokens {what_if.max_tokens}: {run.path} ran the scenario {values['scenario']}, whose "
                "[output] max_tokens sets the lengths; copy the scenario with other lengths and replay that"
            )
        values.pop("max_tokens", None)
        values.pop("extra_body", None)
    if what_if.concurrency:
        values["concurrency"] = what_if.concurrency
        values["rates"] = None
    if what_if.context_tokens:
        values["context_tokens"] = what_if.context_tokens
    if what_if.max_tokens is not None:
        values["max_tokens"] = what_if.max_tokens
    values.update({"url": url, "out": str(out), "label": f"twin of {run.path.name}", "wait_ready_s": 30.0})
    return [sys.executable, "-m", "loadgen.cli", "ramp", *flags.to_argv(values, "ramp"), *_telemetry_argv(run, url)]


def _start_sim(profile: Path, workdir: Path, extra: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    port_file = workdir / "twin-sim.port"
    port_file.unlink(missing_ok=True)  # a twin served before (the measured replay's) wrote its own
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


def _what_if_values(args: argparse.Namespace) -> dict[str, Any]:
    """The load's what-ifs and --slo as loadgen ramp reads them (the flag table: kind and bound),
    by dest; None where not given. A TwinError names the flag and what is wrong."""
    from loadgen.spec import flags
    from loadgen.spec.options import OptionError

    out: dict[str, Any] = {}
    for dest in (*WHAT_IF_LOAD, "slo"):
        f = flags.BY_DEST[dest]
        try:
            out[dest] = flags.parse_value(f, getattr(args, f.attr), f.flag("ramp"))
        except OptionError as exc:
            raise TwinError(str(exc)) from None
    return out


def mark_predicted(twin_run: Path, measured: Run, profile: Path, what_if: WhatIf) -> None:
    """Record in the replay's manifest that every figure of it is the twin's prediction."""
    manifest = read_manifest(twin_run)
    manifest["twin"] = {
        "predicted": True,
        "source_run": str(measured.path.resolve()),
        "source_run_id": measured.run_id,
        "profile": str(profile.resolve()),
        **what_if.manifest(),
    }
    write_manifest(twin_run, manifest)


def _cli(*args: str) -> tuple[int, list[str]]:
    """Run ``python -m loadgen.cli ARGS``; its exit code and its output lines (stdout, then stderr)."""
    done = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    return done.returncode, (done.stdout + done.stderr).rstrip("\n").splitlines()


def _slo_text(slo: dict[str, Any]) -> str:
    """A parsed SLO (``ttft_p99_ms``: 2000.0) back as ``--slo`` text (the flag table's writer)."""
    from loadgen.spec import flags

    return flags.format_value(flags.BY_DEST["slo"], slo)


def _plan_argv(args: argparse.Namespace, measured: Run, twin_run: Path) -> list[str] | None:
    own = manifest_value(measured.manifest, "slo")
    slo = args.slo.strip() if args.slo else (_slo_text(own) if isinstance(own, dict) and own else None)
    if slo is None:
        return None
    argv = ["plan", str(twin_run), "--slo", slo]
    if args.target_rps is not None:
        argv += ["--target-rps", repr(args.target_rps)]
    if args.target_users is not None:
        argv += ["--target-users", repr(args.target_users)]
    return argv


def twin_main(argv: list[str]) -> int:
    args = twin_parser().parse_args(argv)
    out = Path(args.out) if args.out else Path(args.run) / "twin"
    try:
        load = _what_if_values(args)
        what_if = WhatIf(
            sets=_parse_sets(args.set),
            concurrency=load["concurrency"],
            context_tokens=load["context_tokens"],
            max_tokens=load["max_tokens"],
        )
        runs, result = calibrate([args.run], args.engine)
        measured = runs[0]
        if args.plan and _plan_argv(args, measured, out) is None:
            raise TwinError(f"--plan: {args.run} was run without --slo; give the limits, e.g. --slo ttft_p99=2s")
        passthrough = apply_sets(result, what_if.sets)
        profile, _ = write_twin(result, out / "twin.toml", served_name=_served_name(runs))
        ramp_argv(measured, "http://127.0.0.1:0", out / "runs", what_if)  # bad options fail before the twin starts
    except TwinError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    extra = [a for k, v in passthrough.items() for a in ("--set", f"{k}={v}")] + ["--seed", str(args.seed)]
    # Loads the run never measured are replayed on their own, after the measured ramp replayed as it
    # ran: a step followed by a heavier one ends differently (its requests sent late in the window
    # finish under the next load), so the twin's measured steps are compared as the run measured them
    # and the what-if curve is a ramp of its own, as a real ramp of those loads would be.
    replays = [what_if]
    if _beyond_measured(measured, what_if):
        replays = [WhatIf(sets=what_if.sets), what_if]
    paths: list[Path] = []
    for replay in replays:
        got = _replay(profile, out, extra, measured, replay)
        if isinstance(got, int):
            return got
        mark_predicted(got, measured, profile, replay)
        paths.append(got)
    twin_path = paths[-1]
    for earlier in paths[:-1]:  # the measured ramp's replay: its report again, now marked predicted
        code, shown = _cli("report", str(earlier))
        if code != 0:
            print(f"error: `loadgen report {earlier}` exited with {code}:", file=sys.stderr)
            print("\n".join(shown[-15:]), file=sys.stderr)
            return 1
    plan_argv = _plan_argv(args, measured, twin_path)
    # the replay's report was written before the mark: `loadgen plan` (or `report`) renders it again
    rerender = plan_argv if args.plan and plan_argv else ["report", str(twin_path)]
    code, shown = _cli(*rerender)
    if code != 0:
        print(f"error: `loadgen {' '.join(rerender)}` exited with {code}:", file=sys.stderr)
        print("\n".join(shown[-15:]), file=sys.stderr)
        return 1
    plan_text = shown[:-2] if args.plan else []  # `loadgen plan` ends with "plan: FILE" and the run dir
    twin_runs = [load_run(p) for p in paths]
    table = compare_runs(measured, twin_runs[0], twin_runs[1] if len(twin_runs) > 1 else None)
    table["twin_run"] = str(twin_path)
    table["twin_runs"] = [str(p) for p in paths]
    table["what_if"] = {**what_if.manifest(), "text": what_if.describe(measured, result)}
    table["plan"] = _plan_part(plan_argv, args.plan, plan_text, twin_path)
    table["fit"] = result.as_json()
    (out / "twin.json").write_text(json.dumps(table, indent=2) + "\n")
    (out / "twin.md").write_text(markdown(table, _summary(result), result.cannot_fit))
    if plan_text:
        print("\n".join(plan_text))
    print(f"twin: {out / 'twin.md'}")
    print(twin_path)  # last, as every command that writes a run directory: the twin's replay, marked predicted
    return 0


def _beyond_measured(run: Run, what_if: WhatIf) -> bool:
    """The what-if asks for loads the run never measured, of the same workload (another context
    length or max_tokens makes every step a prediction, one replay)."""
    if not what_if.concurrency or what_if.context_tokens or what_if.max_tokens is not None:
        return False
    measured = {s.concurrency for s in run.steps if s.concurrency}
    return bool(set(what_if.concurrency) - measured) and bool(measured)


def _replay(profile: Path, out: Path, extra: list[str], measured: Run, what_if: WhatIf) -> Path | int:
    """Serve the twin, replay ``measured``'s ramp against it with ``what_if``; the replay's run
    directory, or the exit code after saying why it failed."""
    try:
        proc, url = _start_sim(profile, out, extra)
    except TwinError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        cmd = ramp_argv(measured, url, out / "runs", what_if)
        with tempfile.TemporaryFile("w+") as log:
            done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            log.seek(0)
            text = log.read()
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
    return Path(lines[-1].strip())


def _plan_part(plan_argv: list[str] | None, planned: bool, text: list[str], twin_path: Path) -> dict[str, Any]:
    """twin.json's ``plan``: the plan ``--plan`` made (its command and text, headed PREDICTED), or
    the command that makes one (the run's SLO, else an example)."""
    argv = plan_argv or ["plan", str(twin_path), "--slo", "ttft_p99=2s,tpot_p99=50ms"]
    if planned:
        body = [ln for ln in text if not ln.startswith("## ")]
        while body and not body[0].strip():
            body.pop(0)
        return {"file": str(twin_path / "plan.json"), "command": ["loadgen", *argv], "lines": body}
    cmd = " ".join(["loadgen", *argv])
    return {
        "file": None,
        "command": ["loadgen", *argv],
        "lines": [f"Not planned (`loadgen twin --plan`). A plan from the twin marks every figure predicted: `{cmd}`"],
    }
