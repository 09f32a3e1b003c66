"""The Grafana dashboard (deploy/grafana) against what is really exported: every metric its queries
name is on a /metrics page that the load generator (a live ``loadgen ramp --prometheus-port``), the
simulator as SGLang and as vLLM (with speculative decoding), or its DCGM stand-in serves. A renamed
metric, or a query typed wrong, fails here rather than as an empty panel in front of an operator."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, free_port, loadgen_cmd

pytestmark = pytest.mark.slow

DASHBOARD = REPO / "deploy" / "kubernetes" / "dashboards" / "llm-loadgen-dashboard.json"
FUNCTIONS = {"sum", "avg", "max", "min", "count", "rate", "irate", "increase", "histogram_quantile"}


def _names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (functions, ``by (...)`` labels, ranges and
    numbers left out)."""
    expr = re.sub(r"\b(by|without)\s*\([^)]*\)", " ", expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)
    tokens = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", expr))
    return {t for t in tokens if t not in FUNCTIONS}


def _exposed(url: str) -> set[str]:
    """The metric names a /metrics page serves: its samples', and those its ``# TYPE`` lines declare
    (a labelled counter with no sample yet, such as failures by class before the first failure)."""
    with urllib.request.urlopen(url, timeout=5) as resp:
        text: str = resp.read().decode()
    names = {re.split(r"[{ ]", line, maxsplit=1)[0] for line in text.splitlines() if line and line[0] != "#"}
    for m in re.finditer(r"^# TYPE (\S+) (\w+)", text, re.M):
        suffixes = ("_bucket", "_sum", "_count") if m.group(2) == "histogram" else ("",)
        names.update(m.group(1) + s for s in suffixes)
    return names


def _queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]


def test_the_expression_reader_finds_the_metrics_and_only_them() -> None:
    expr = 'histogram_quantile(0.99, sum by (le) (rate(loadgen_ttft_seconds_bucket{job="x"}[1m])))'
    assert _names(expr) == {"loadgen_ttft_seconds_bucket"}
    assert _names("1 + sum(rate(vllm:a_total[1m])) / sum(rate(vllm:b_total[1m]))") == {"vllm:a_total", "vllm:b_total"}


def test_every_dashboard_query_names_a_metric_something_here_exports(sim_factory: Any, tmp_path: Path) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = _queries(dashboard)
    assert len(queries) >= 15
    sglang = sim_factory("--profile", "tiny")
    vllm = sim_factory("--profile", "tiny", "--spec", "tiny-spec", "--engine", "vllm")
    port = free_port()
    ramp = subprocess.Popen(
        loadgen_cmd(
            "ramp",
            "--url",
            sglang.url,
            "--concurrency",
            "2",
            "--step-seconds",
            "4",
            "--warmup-seconds",
            "0.5",
            "--max-tokens",
            "8",
            "--no-telemetry",
            "--prometheus-port",
            str(port),
            "--out",
            str(tmp_path),
        ),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        loadgen: set[str] = set()
        deadline = time.monotonic() + 60
        while "loadgen_ttft_seconds_bucket" not in loadgen or "loadgen_step_concurrency" not in loadgen:
            assert time.monotonic() < deadline and ramp.poll() is None, ramp.stderr.read() if ramp.stderr else ""
            try:
                loadgen = _exposed(f"http://127.0.0.1:{port}/metrics")
            except OSError:
                pass
            time.sleep(0.2)
        ramp.communicate(timeout=60)
    finally:
        if ramp.poll() is None:
            ramp.kill()
    exported = (
        loadgen
        | _exposed(f"{sglang.url}/metrics")
        | _exposed(f"{vllm.url}/metrics")
        | _exposed(f"{sglang.url}/gpu/metrics")
    )
    for title, expr in queries:
        names = _names(expr)
        assert names, f"{title}: {expr!r} reads no metric"
        missing = names - exported
        assert not missing, f"panel {title!r}: {sorted(missing)} is exported by nothing here ({expr})"
    # each source is on the dashboard: the load generator's, both engines', and the GPUs'
    used = set().union(*(_names(e) for _, e in queries))
    for prefix in ("loadgen_", "sglang:", "vllm:", "DCGM_FI_"):
        assert any(n.startswith(prefix) for n in used), prefix


def test_grafana_and_prometheus_are_provisioned_with_it() -> None:
    datasource = yaml.safe_load((REPO / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text())
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"
    provider = yaml.safe_load((REPO / "deploy/grafana/provisioning/dashboards/llm-loadgen.yml").read_text())
    folder = provider["providers"][0]["options"]["path"]
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    mounts = compose["grafana"]["volumes"]
    assert f"./deploy/kubernetes/dashboards/llm-loadgen-dashboard.json:{folder}/llm-loadgen-dashboard.json:ro" in mounts
    prom = yaml.safe_load((REPO / "deploy/prometheus/prometheus.yml").read_text())
    targets = {t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    master = compose["headless-master"]["command"]
    assert f"headless-master:{master[master.index('--prometheus-port') + 1]}" in targets
    assert "sim:30000" in targets
