"""Running a campaign: each variant of a :class:`~loadgen.campaign.file.Campaign` tried in turn.

1. ``apply`` commands run to completion (edit a flag, ``systemctl restart``); a failing one ends
   the variant;
2. ``start``: a server command the campaign owns (its output goes to ``server.out``; it is
   stopped after the variant);
3. readiness: :func:`loadgen.lifecycle.wait_ready` with the started process's liveness and the
   ``status`` command; a server that does not come up is recorded with the reason (the matched
   lines of its captured log) and the campaign goes on with the next variant;
4. the load: ``loadgen ramp`` (or ``--find-knee``) as a child process, so gevent never enters
   this process; its run directory lands in the variant's folder;
5. ``rollback`` commands, whatever happened.

Each variant gets one folder in the campaign directory (apply, server, ramp and rollback logs,
``captured.log`` of a failed start, the ramp's run directory) and one result dict in
:attr:`CampaignRunner.results`: ``status`` is ``ok``, ``apply_failed``, ``failed_to_start``,
``server_died``, ``ramp_failed`` or ``interrupted``, ``reason`` says why in a sentence. A variant
that fails is a result, not an exception; a Ctrl-C (``KeyboardInterrupt``; the command line turns
SIGTERM into one too) leaves :meth:`CampaignRunner.run` after the variant's cleanup (the ramp gets
one SIGTERM and writes a partial report, the server is stopped, the rollback runs).
"""

from __future__ import annotations

import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import orjson

from loadgen.campaign.file import Campaign, Command, Variant, fill, slug
from loadgen.campaign.report import brief
from loadgen.lifecycle import NotReady, ServerProcess, capture_logs, match_failures, wait_ready
from loadgen.spec import flags

EXIT_THRESHOLDS = 5  # loadgen ramp's exit code when a threshold was breached
EXIT_INTERRUPTED = 130  # loadgen ramp stopped by SIGINT/SIGTERM (its partial report written)
CONTEXT_LINES = 8  # log lines kept from the first fatal match on


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _run_commands(cmds: list[Command], env: dict[str, str], log: Path, timeout_s: float) -> str | None:
    """Run each command to completion, output appended to ``log``; the first failure's reason, or None."""
    with open(log, "ab") as fh:
        for cmd in cmds:
            argv = fill(cmd, env)
            fh.write(f"$ {shlex.join(argv)}\n".encode())
            fh.flush()
            try:
                done = subprocess.run(
                    argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout_s
                )
            except FileNotFoundError:
                return f"`{shlex.join(argv)}`: command not found"
            except subprocess.TimeoutExpired:
                return f"`{shlex.join(argv)}`: still running after {timeout_s:g} s (stopped)"
            except OSError as exc:
                return f"`{shlex.join(argv)}`: cannot run it ({exc.strerror})"
            if done.returncode != 0:
                return f"`{shlex.join(argv)}` exited with {done.returncode}"
    return None


def _ramp_argv(v: Variant, url: str, variant_dir: Path, label: str, env: dict[str, str], wait_s: float) -> list[str]:
    """The ``loadgen ramp`` command of a variant: its ``[load]`` values written as flags by the one
    flag table, then the variant's own ``args`` (placeholders filled)."""
    spec = v.load
    values = {
        "url": url,
        "out": str(variant_dir),
        "label": label,
        "concurrency": spec.concurrency,
        "rates": spec.rate,
        "step_seconds": spec.step_seconds,
        "warmup_seconds": spec.warmup_seconds,
        "requests_per_step": spec.requests_per_step,
        "max_tokens": spec.max_tokens,
        "scenario": spec.scenario,
        "model": spec.model,
        "fail_on": spec.fail_on,
        "abort_on": spec.abort_on,
        "find_knee": spec.mode == "knee",
        "wait_ready_s": wait_s,
        **spec.options,
    }
    return [sys.executable, "-m", "loadgen.cli", "ramp", *flags.to_argv(values, "ramp"), *fill(spec.args, env)]


class CampaignRunner:
    """Runs the variants in order; ``out`` gets one line per phase (progress for a person)."""

    def __init__(self, campaign: Campaign, campaign_dir: Path, out: IO[str]) -> None:
        self.campaign = campaign
        self.dir = campaign_dir
        self.out = out
        self.results: list[dict[str, Any]] = []
        self.server: ServerProcess | None = None

    def say(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def run(self, only: Sequence[str] = ()) -> None:
        for v in self.campaign.variants:
            if only and v.name not in only:
                continue
            self.run_variant(v)

    def run_variant(self, v: Variant) -> dict[str, Any]:
        """Run one variant; its result is in ``self.results`` from the start (a Ctrl-C keeps it)."""
        vdir = self.dir / slug(v.name)
        vdir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        env = {
            "python": sys.executable,
            "port": str(port),
            "variant": v.name,
            "variant_dir": str(vdir),
            "campaign_dir": str(self.dir),
        }
        env["log_file"] = fill([v.log_file], env)[0] if v.log_file else str(vdir / "server.log")
        url = fill([v.url], env)[0]
        env["url"] = url
        result: dict[str, Any] = {
            "name": v.name,
            "description": v.description,
            "url": url,
            "dir": vdir.name,
            "status": "ok",
            "reason": None,
            "matches": [],
            "log_tail": [],
            "run_dir": None,
            "started_ns": time.time_ns(),
        }
        self.results.append(result)
        self.say(f"variant {v.name}: {v.description or ''}".rstrip(": "))
        try:
            self._variant_body(v, vdir, env, url, result)
        except KeyboardInterrupt:
            result["status"], result["reason"] = "interrupted", "the campaign was interrupted during this variant"
            raise
        finally:
            if self.server is not None:
                code = self.server.stop()
                result["server_exit"] = code
                self.server = None
            if v.rollback:
                why = _run_commands(v.rollback, env, vdir / "rollback.log", v.apply_timeout_s)
                result["rollback"] = "ok" if why is None else why
                if why:
                    self.say(f"  rollback failed: {why}")
            result["ended_ns"] = time.time_ns()
        self.say(f"  -> {result['status']}" + (f": {result['reason']}" if result["reason"] else ""))
        return result

    def _capture(self, v: Variant, vdir: Path, env: dict[str, str], result: dict[str, Any]) -> None:
        lines: list[str] = []
        if self.server is not None:
            lines += capture_logs(None, self.server.log_path, max_lines=1000)
        log_file = Path(env["log_file"])
        if log_file.exists() or v.log_file:
            lines += capture_logs(None, log_file, max_lines=2000)
        if v.logs:
            lines += capture_logs(fill(v.logs, env), None, max_lines=2000)
        (vdir / "captured.log").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
        matches = match_failures(lines)
        result["matches"] = [{k: m[k] for k in ("pattern", "severity", "line")} for m in matches]
        result["log_tail"] = lines[-20:]
        if matches:  # the first failure with the lines after it (SGLang prints its advice there)
            first = next((m for m in matches if m["severity"] == "fatal"), matches[0])
            result["context"] = lines[first["index"] : first["index"] + CONTEXT_LINES]
        result["captured_log"] = f"{vdir.name}/captured.log"

    def _variant_body(self, v: Variant, vdir: Path, env: dict[str, str], url: str, result: dict[str, Any]) -> None:
        if v.apply:
            self.say(f"  apply: {len(v.apply)} command(s)")
            why = _run_commands(v.apply, env, vdir / "apply.log", v.apply_timeout_s)
            if why is not None:
                result["status"], result["reason"] = "apply_failed", why
                result["log_tail"] = capture_logs(None, vdir / "apply.log", max_lines=20)
                return
        if v.start is not None:
            argv = fill(v.start, env)
            self.say(f"  start: {shlex.join(argv)}")
            try:
                self.server = ServerProcess(argv, vdir / "server.out")
            except ValueError as exc:
                result["status"], result["reason"] = "failed_to_start", str(exc)
                return
        status = fill(v.status, env) if v.status else None
        last_print = [0.0]

        def progress(last: str) -> None:
            now = time.monotonic()
            if now - last_print[0] >= 5.0:
                self.say(f"  waiting for {url}: {last}")
                last_print[0] = now

        t0 = time.monotonic()
        try:
            wait_ready(
                url,
                v.wait_ready_s,
                alive=self.server.alive if self.server is not None else None,
                progress=progress,
                status_cmd=status,
            )
        except NotReady as exc:
            result["status"], result["reason"] = "failed_to_start", exc.reason
            self._capture(v, vdir, env, result)
            for m in result["matches"][:5]:
                self.say(f"  {m['pattern']}: {m['line']}")
            return
        except ValueError as exc:  # the status command itself cannot run
            result["status"], result["reason"] = "failed_to_start", str(exc)
            return
        result["ready_s"] = round(time.monotonic() - t0, 3)
        self.say(f"  ready after {result['ready_s']:.1f} s; {v.load.mode} running")
        label = f"{self.campaign.name} {v.name}"
        argv = _ramp_argv(v, url, vdir, label, env, wait_s=min(10.0, max(v.wait_ready_s, 1.0)))
        result["ramp_argv"] = argv[1:]
        try:
            code, run_dir = self._ramp(argv, vdir / "ramp.log", v.load.timeout_s)
        except KeyboardInterrupt:
            self._keep_run(result, _newest_run_dir(vdir))
            raise
        result["ramp_exit"] = code
        if run_dir is None:
            run_dir = _newest_run_dir(vdir)
        self._keep_run(result, run_dir)
        down = [r for r in (result.get("summary") or {}).get("step_rows", []) if r.get("end_reason") == "server_down"]
        if self.server is not None and self.server.alive() is not None:
            result["status"] = "server_died"
            result["reason"] = f"{self.server.alive()} during the {v.load.mode}"
            self._capture(v, vdir, env, result)
        elif down:  # a service we did not start went down (the ramp noticed it)
            at = down[0]
            load = f"C={at['concurrency']}" if at.get("concurrency") is not None else f"{at.get('rate')} req/s"
            result["status"] = "server_died"
            result["reason"] = f"the server went down during the {v.load.mode} (step at {load})"
            self._capture(v, vdir, env, result)
        elif code == EXIT_THRESHOLDS:
            result["status"] = "thresholds_breached"
            result["reason"] = _breaches(run_dir) or f"a threshold was breached; see {vdir.name}/ramp.log"
        elif code != 0:
            result["status"] = "ramp_failed"
            result["reason"] = f"loadgen ramp exited with {code}; see {vdir.name}/ramp.log"
            result["log_tail"] = capture_logs(None, vdir / "ramp.log", max_lines=20)

    def _keep_run(self, result: dict[str, Any], run_dir: Path | None) -> None:
        """Point the result at the ramp's run directory and its summary (when it wrote one)."""
        if run_dir is None:
            return
        result["run_dir"] = str(run_dir.relative_to(self.dir)) if run_dir.is_relative_to(self.dir) else str(run_dir)
        if (run_dir / "summary.json").exists():
            result["summary"] = brief(orjson.loads((run_dir / "summary.json").read_bytes()))

    def _ramp(self, argv: list[str], log: Path, timeout_s: float) -> tuple[int, Path | None]:
        """Run ``loadgen ramp`` as a child (gevent stays out of this process); its exit code and run dir.

        The child has its own session, so a Ctrl-C at the terminal reaches only the campaign, which
        then sends the ramp one SIGTERM (it writes a partial report) and waits for it. SIGTERM, not
        SIGINT: a campaign started with SIGINT ignored (a background job) passes that on to the
        ramp, which keeps ignoring it. A ramp stopped at ``timeout_s`` exits 130 with its partial
        report: that is the variant's result, returned as 0.
        """
        timed_out = False
        with open(log, "ab") as err:
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True
            )
            try:
                stdout, _ = proc.communicate(timeout=timeout_s)
            except (subprocess.TimeoutExpired, KeyboardInterrupt) as exc:
                proc.send_signal(signal.SIGTERM)  # the ramp writes a partial report on SIGTERM
                timed_out = isinstance(exc, subprocess.TimeoutExpired)
                try:
                    stdout, _ = proc.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    stdout, _ = proc.communicate()
                if isinstance(exc, KeyboardInterrupt):
                    raise
        lines = [x for x in stdout.decode("utf-8", "replace").splitlines() if x.strip()]
        run_dir = Path(lines[-1].strip()) if lines else None
        if run_dir is not None and not run_dir.is_dir():
            run_dir = None
        if timed_out and proc.returncode == EXIT_INTERRUPTED:
            return 0, run_dir
        return proc.returncode, run_dir


def _breaches(run_dir: Path | None) -> str | None:
    """The breached thresholds of a run, from its summary.json: "ttft_p99>2s: ttft_p99 2,431 ms > ..."."""
    path = run_dir / "summary.json" if run_dir is not None else None
    if path is None or not path.exists():
        return None
    verdict = orjson.loads(path.read_bytes()).get("thresholds") or {}
    found = [f"{r['threshold']}: {r['message']}" for r in verdict.get("results") or [] if r.get("breached")]
    if verdict.get("aborted_by"):
        found.insert(0, f"aborted by --abort-on {verdict['aborted_by']}")
    return "; ".join(found) or None


def _newest_run_dir(folder: Path) -> Path | None:
    """The newest run directory under ``folder`` (a ramp stopped before printing its path)."""
    found = [p.parent for p in folder.glob("*/manifest.json")]
    return max(found, key=lambda p: p.stat().st_mtime, default=None)
