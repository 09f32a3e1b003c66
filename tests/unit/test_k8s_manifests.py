"""deploy/kubernetes/, checked without a cluster (none runs here).

Every manifest is validated offline against the Kubernetes JSON schemas that the
``kubernetes-validate`` package ships (strict: unknown fields are errors), the kustomization lists
every file, and every container's command line is parsed by the parser of the command it runs:
``loadgen ramp`` by ``loadgen.cli``'s, ``loadgen sim`` / ``monitor`` / ``ui`` by their own, and
``locust -f loadgen/locustfile.py`` by Locust's with the locustfile's options. URLs and host names on
those command lines must name a Service of the base, on one of its ports.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.conftest import REPO

yaml = pytest.importorskip("yaml")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

BASE = REPO / "deploy" / "kubernetes"
HEADLESS = BASE / "headless"  # the distributed ramp, applied after the base
DASHBOARDS = BASE / "dashboards"  # Prometheus and Grafana with the dashboard
ROOTS = {"base": BASE, "headless": HEADLESS, "dashboards": DASHBOARDS}
THIRD_PARTY = ("prom/prometheus", "grafana/grafana")  # images of their own, run as their own users
# 1.30: the oldest Kubernetes release still commonly run; also the newest the package ships
K8S_VERSIONS = ["1.30", kubernetes_validate.utils.latest_version()]
WORKLOADS = ("Deployment", "DaemonSet", "Job")
APP = "llm-loadgen"


def _files() -> list[Path]:
    return sorted(p for p in BASE.rglob("*") if p.suffix in (".yaml", ".yml"))


def _documents() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in _files():
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                out.append((str(path.relative_to(BASE)), doc))
    return out


DOCS = _documents()
MANIFESTS = [(f, d) for f, d in DOCS if d.get("kind") != "Kustomization"]


def _one(kind: str, component: str) -> dict[str, Any]:
    found = [
        d
        for _, d in MANIFESTS
        if d["kind"] == kind and d["metadata"]["labels"].get("app.kubernetes.io/component") == component
    ]
    assert len(found) == 1, f"expected one {kind} for {component}, found {len(found)}"
    return found[0]


def _pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"]["template"]["spec"]
    return spec


def _containers() -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    for _, doc in MANIFESTS:
        if doc["kind"] in WORKLOADS:
            pod = _pod_spec(doc)
            for c in pod.get("initContainers", []) + pod["containers"]:
                yield f"{doc['kind']}/{doc['metadata']['name']}/{c['name']}", c, pod


def _command(c: dict[str, Any]) -> list[str]:
    argv = list(c.get("command", [])) + list(c.get("args", []))
    assert argv and all(isinstance(a, str) for a in argv), f"{c['name']}: command must be a list of strings"
    return argv


def _services() -> dict[str, set[int]]:
    return {
        d["metadata"]["name"]: {p["port"] for p in d["spec"]["ports"]} for _, d in MANIFESTS if d["kind"] == "Service"
    }


# --- the files -------------------------------------------------------------------------------------


def test_the_base_has_every_part() -> None:
    assert (BASE / "kustomization.yaml").is_file()
    kinds = {(d["kind"], d["metadata"]["labels"]["app.kubernetes.io/component"]) for _, d in MANIFESTS}
    assert {
        ("Deployment", "master"),
        ("Service", "master"),
        ("Deployment", "worker"),
        ("Deployment", "sim"),
        ("Service", "sim"),
        ("DaemonSet", "monitor"),
        ("Job", "ramp"),
    } <= kinds


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize(
    ("name", "doc"), MANIFESTS, ids=[f"{f}:{d['kind']}/{d['metadata']['name']}" for f, d in MANIFESTS]
)
def test_manifest_validates_against_the_kubernetes_schema(name: str, doc: dict[str, Any], version: str) -> None:
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        pytest.fail(f"{name}: {doc['kind']}/{doc['metadata']['name']} against {version}: {path}: {exc.message}")


def _root_of(file: str) -> Path:
    return next((r for r in (HEADLESS, DASHBOARDS) if (BASE / file).is_relative_to(r)), BASE)


def _own(root: Path) -> list[tuple[str, dict[str, Any]]]:
    """The manifests of one kustomization (the base's are those outside its subfolders)."""
    return [(f, d) for f, d in MANIFESTS if _root_of(f) == root]


@pytest.mark.parametrize("root", list(ROOTS.values()), ids=list(ROOTS))
def test_the_kustomization_lists_every_file(root: Path) -> None:
    kust = yaml.safe_load((root / "kustomization.yaml").read_text())
    assert kust["apiVersion"].startswith("kustomize.config.k8s.io/") and kust["kind"] == "Kustomization"
    listed = kust["resources"]
    assert len(listed) == len(set(listed)), "a file listed twice"
    on_disk = {str((BASE / f).relative_to(root)) for f in {f for f, _ in _own(root)}}
    assert set(listed) == on_disk
    ours = [i["name"] for i in kust.get("images", [])]
    assert ours == ([] if root == DASHBOARDS else ["llm-loadgen"])  # the dashboards run no image of ours


def _render(root: Path) -> list[dict[str, Any]]:
    out = subprocess.run(["kubectl", "kustomize", str(root)], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
@pytest.mark.parametrize("root", list(ROOTS.values()), ids=list(ROOTS))
def test_kubectl_kustomize_renders_it_offline(root: Path) -> None:
    generated = [
        g["name"] for g in yaml.safe_load((root / "kustomization.yaml").read_text()).get("configMapGenerator", [])
    ]

    def name(d: dict[str, Any]) -> str:  # a generated ConfigMap's name carries a hash of its content
        n: str = d["metadata"]["name"]
        base = n.rsplit("-", 1)[0]
        return base if d["kind"] == "ConfigMap" and base in generated else n

    key = sorted((d["kind"], name(d)) for d in _render(root))
    local = {"config.kubernetes.io/local-config": "true"}  # kustomize keeps these out of the cluster
    own = [d for _, d in _own(root) if not local.items() <= d["metadata"].get("annotations", {}).items()]
    assert key == sorted([(d["kind"], d["metadata"]["name"]) for d in own] + [("ConfigMap", g) for g in generated])


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
def test_grafana_gets_the_dashboard_and_prometheus_scrapes_the_load_generator() -> None:
    rendered = _render(DASHBOARDS)
    board = next(
        d
        for d in rendered
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("loadgen-grafana-dashboard")
    )
    assert board["data"]["llm-loadgen-dashboard.json"] == (DASHBOARDS / "llm-loadgen-dashboard.json").read_text()
    prom = yaml.safe_load(
        next(d for d in rendered if d["metadata"]["name"] == "loadgen-prometheus" and d["kind"] == "ConfigMap")["data"][
            "prometheus.yml"
        ]
    )
    targets = {t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    services = _services()
    for t in targets:
        host, port = t.split(":")
        assert int(port) in services.get(host, set()), f"Prometheus target {t} is no Service port"
    master = _command(
        _pod_spec(
            next(d for _, d in _own(HEADLESS) if d["kind"] == "Job" and d["metadata"]["name"] == "loadgen-headless")
        )["containers"][0]
    )
    assert f"loadgen-headless:{master[master.index('--prometheus-port') + 1]}" in targets


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
def test_the_headless_ramps_worker_count_is_one_value(tmp_path: Path) -> None:
    """``workers`` of the local ConfigMap is the workers Job's parallelism and completions and the
    master's --expect-workers, whatever it is set to."""
    shutil.copytree(HEADLESS, tmp_path / "headless")
    size = tmp_path / "headless" / "headless.yaml"
    size.write_text(size.read_text().replace('workers: "2"', 'workers: "7"'))
    for root, n in ((HEADLESS, 2), (tmp_path / "headless", 7)):
        jobs = {d["metadata"]["name"]: d for d in _render(root) if d["kind"] == "Job"}
        workers = jobs["loadgen-headless-workers"]["spec"]
        assert workers["parallelism"] == workers["completions"] == n
        argv = _command(_pod_spec(jobs["loadgen-headless"])["containers"][0])
        assert argv[argv.index("--expect-workers") + 1] == str(n)
        wargv = _command(_pod_spec(jobs["loadgen-headless-workers"])["containers"][0])
        assert wargv[:2] == ["loadgen", "worker"]
        assert wargv[wargv.index("--master") + 1] == f"loadgen-headless:{argv[argv.index('--master-bind') + 1][-4:]}"


# --- what each part must be ------------------------------------------------------------------------


def test_every_object_is_labelled_and_every_selector_matches_its_pods() -> None:
    for _, doc in MANIFESTS:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == APP and labels["app.kubernetes.io/component"]
        if doc["kind"] in ("Deployment", "DaemonSet"):
            selector = doc["spec"]["selector"]["matchLabels"]
            assert selector.items() <= doc["spec"]["template"]["metadata"]["labels"].items()
    pods = [d["spec"]["template"]["metadata"]["labels"] for _, d in MANIFESTS if d["kind"] in WORKLOADS]
    for _, svc in MANIFESTS:
        if svc["kind"] == "Service":
            sel = svc["spec"]["selector"]
            assert sum(sel.items() <= p.items() for p in pods) == 1, f"Service {svc['metadata']['name']}"


def _dockerfile_uid() -> int:
    m = re.search(r"useradd\b[^\n]*--uid (\d+)", (REPO / "Dockerfile").read_text())
    assert m, "the Dockerfile creates no user with a fixed uid"
    return int(m.group(1))


def test_containers_run_as_the_images_user_with_limits_and_no_privileges() -> None:
    uid = _dockerfile_uid()
    for where, c, pod in _containers():
        ours = c["image"].split(":")[0] not in THIRD_PARTY
        assert not ours or c["image"].split(":")[0] == "llm-loadgen", where  # docker-compose.yml's image name
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert not ours or pod["securityContext"]["runAsUser"] == uid, where
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"], where
        assert not sc.get("privileged"), where
        if sc.get("readOnlyRootFilesystem"):  # tempfile and friends need a writable /tmp
            assert any(m["mountPath"] == "/tmp" for m in c.get("volumeMounts", [])), where
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(c["resources"][kind]), f"{where}: resources.{kind}"
        assert pod.get("hostNetwork") is not True, where


def test_sim_and_monitor_are_ready_on_their_health_endpoints() -> None:
    for kind, component, path in (("Deployment", "sim", "/health"), ("DaemonSet", "monitor", "/healthz")):
        c = _pod_spec(_one(kind, component))["containers"][0]
        probe = c["readinessProbe"]["httpGet"]
        assert probe["path"] == path
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        port = ports.get(probe["port"], probe["port"])
        argv = _command(c)
        assert str(port) in " ".join(argv), f"{component}: probe on {port}, not the port it serves"


def test_the_monitor_runs_on_gpu_nodes_off_the_host_network_with_its_token_from_a_secret() -> None:
    ds = _one("DaemonSet", "monitor")
    pod = _pod_spec(ds)
    assert pod["hostNetwork"] is False
    assert pod["nodeSelector"] and any("nvidia.com/gpu" in t["key"] for t in pod["tolerations"])
    c = pod["containers"][0]
    argv = _command(c)
    assert argv[:2] == ["loadgen", "monitor"] and "--serve" in argv
    env = {e["name"]: e for e in c["env"]}
    token = env["LOADGEN_MONITOR_TOKEN"]
    assert "value" not in token and token["valueFrom"]["secretKeyRef"]["name"]
    # required: the monitor refuses to serve beyond loopback without one anyway
    assert not token["valueFrom"]["secretKeyRef"].get("optional", False)


def test_no_secret_is_written_into_a_manifest() -> None:
    for where, c, _ in _containers():
        for e in c.get("env", []):
            if re.search(r"TOKEN|KEY|PASSWORD|SECRET", e["name"]):
                assert "value" not in e and "secretKeyRef" in e["valueFrom"], f"{where}: {e['name']}"
        # secrets travel in the environment, never on a command line (which `ps` and the pod spec show)
        argv = list(c.get("command", [])) + list(c.get("args", []))  # a third-party image may have neither
        assert not any(re.match(r"--(token|api-key)(=|$)", a) for a in argv), where
    assert not any(d["kind"] == "Secret" for _, d in MANIFESTS), "no Secret with a known value in the base"


def test_the_ramp_job_exits_with_the_ramps_code_and_keeps_its_reports() -> None:
    job = _one("Job", "ramp")
    assert job["spec"]["backoffLimit"] == 0
    pod = _pod_spec(job)
    assert pod["restartPolicy"] == "Never"
    (c,) = pod["containers"]
    argv = _command(c)
    # `loadgen ramp` is the container's process itself: no shell in between to swallow its exit code
    assert argv[:2] == ["loadgen", "ramp"]
    out = argv[argv.index("--out") + 1]
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == out)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    claim = volume["persistentVolumeClaim"]["claimName"]
    assert any(d["kind"] == "PersistentVolumeClaim" and d["metadata"]["name"] == claim for _, d in MANIFESTS)
    url = urlsplit(argv[argv.index("--url") + 1])
    assert url.hostname == _one("Service", "sim")["metadata"]["name"]


def test_workers_connect_to_the_masters_service() -> None:
    master_svc = _one("Service", "master")
    ports = {p["port"] for p in master_svc["spec"]["ports"]}
    assert {8089, 5557} <= ports
    worker = _pod_spec(_one("Deployment", "worker"))["containers"][0]
    argv = _command(worker)
    assert argv[argv.index("--master-host") + 1] == master_svc["metadata"]["name"]
    assert int(argv[argv.index("--master-port") + 1]) == 5557
    # remote workers must not write records into a folder of their own
    assert {e["name"]: e.get("value") for e in worker["env"]}["LOADGEN_RECORDS_VIA_MASTER"] == "1"
    master = _pod_spec(_one("Deployment", "master"))["containers"][0]
    margv = _command(master)
    assert "--master" in margv and margv[margv.index("--web-host") + 1] == "0.0.0.0"


def test_every_url_and_host_on_a_command_line_is_a_service_of_the_base() -> None:
    services = _services()
    for where, c, _ in _containers():
        if c["image"].split(":")[0] in THIRD_PARTY:
            continue
        argv = _command(c)
        for a in argv:
            if a.startswith("http://"):
                u = urlsplit(a)
                assert u.hostname in services and u.port in services[u.hostname], f"{where}: {a}"
        if "--master-host" in argv:
            assert argv[argv.index("--master-host") + 1] in services, where


# --- every command line, parsed by the real parsers -------------------------------------------------


class _Parsed(Exception):
    def __init__(self, ns: argparse.Namespace) -> None:
        self.ns = ns


def _parse_with(main: Any, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> argparse.Namespace:
    """Run ``main(argv)`` only as far as its own ``parse_args``: the real parser, nothing started."""
    real = argparse.ArgumentParser.parse_args

    def parse_then_stop(self: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> Any:
        raise _Parsed(real(self, args, namespace))

    with monkeypatch.context() as m:
        m.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
        with pytest.raises(_Parsed) as caught:
            main(argv)
    return caught.value.ns


def _locust_options(argv: list[str]) -> Any:
    """Locust's own parser with loadgen/locustfile.py's options, as `locust -f ...` builds it."""
    from locust.argument_parser import get_parser

    import loadgen.locustfile  # noqa: F401  (registers the --lg-* and telemetry options)

    parser = get_parser(default_config_files=[])
    opts = parser.parse_args(argv)
    assert not opts.user_classes, f"stray words taken for user classes: {opts.user_classes}"
    return opts


def _check_locust(where: str, argv: list[str]) -> Any:
    opts = _locust_options(argv)
    # the image's /app/loadgen/... is the repository's loadgen/... (Dockerfile: WORKDIR /app, COPY loadgen)
    locustfile = Path(opts.locustfile)
    assert locustfile.parts[:2] == ("/", "app"), f"{where}: {opts.locustfile}"
    assert (REPO / locustfile.relative_to("/app")).is_file(), f"{where}: {opts.locustfile}"
    return opts


def _check_loadgen(where: str, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from loadgen.cli.parser import build_parser
    from loadgen.cli.ramp_options import ramp_options

    sub, rest = argv[1], argv[2:]
    if sub == "sim":
        from loadgen.sim.cli import build_parser
        from loadgen.sim.profile import load_profile

        ns = build_parser().parse_args(rest)
        load_profile(ns.profile, hardware=ns.hardware, model=ns.model_config, spec=ns.spec)
    elif sub == "monitor":
        from loadgen.telemetry import monitor

        ns = _parse_with(monitor.main, rest, monkeypatch)
        if ns.serve:
            monitor.parse_bind(ns.serve)
    elif sub == "ui":
        from loadgen.webui.cli import locust_argv

        # what `loadgen ui` hands to Locust (its own locustfile, wherever the package is installed)
        opts = _locust_options(locust_argv(rest))
        assert Path(opts.locustfile).resolve() == (REPO / "loadgen" / "locustfile.py").resolve()
    elif sub == "campaign":
        pytest.fail(f"{where}: loadgen campaign is not expected in the base")
    elif sub == "worker":
        from loadgen.run.worker import build_parser as worker_parser
        from loadgen.spec.options import parse_host_port

        host, port = parse_host_port(worker_parser().parse_args(rest).master, "--master")
        assert port in _services().get(host, set()), f"{where}: --master {host}:{port} is no Service port"
    else:
        ns = build_parser().parse_args(argv[1:])
        if sub == "ramp":
            # the option checks `loadgen ramp` makes before it contacts the server
            monkeypatch.delenv("OPENAI_API_KEY", raising=False)
            ramp_options(ns, argv[1:])


@pytest.mark.parametrize("where", [w for w, c, _ in _containers() if c["image"].split(":")[0] not in THIRD_PARTY])
def test_the_command_line_is_one_its_program_accepts(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    c = next(c for w, c, _ in _containers() if w == where)
    argv = _command(c)
    try:
        if argv[0] == "loadgen":
            _check_loadgen(where, argv, monkeypatch)
        elif argv[0] == "locust":
            _check_locust(where, argv[1:])
        else:
            pytest.fail(f"{where}: runs {argv[0]!r}, neither loadgen nor locust")
    except SystemExit as exc:  # argparse's way of saying no
        pytest.fail(f"{where}: {' '.join(argv)!r} rejected by its parser (exit {exc.code})")
