"""docker-compose.yml and the Dockerfile, checked without a container engine (none runs here).

The compose file is read with PyYAML when it is installed, else with the small reader below (block
mappings, block lists of scalars, and JSON flow lists, which is all our compose file uses; it
fails loudly on anything else, so a file outside that subset is caught here too).
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests.conftest import REPO

COMPOSE = REPO / "docker-compose.yml"


def _scalar(text: str) -> Any:
    text = text.strip()
    if text.startswith("[") or text.startswith('"'):
        return json.loads(text)
    if text.startswith("'"):
        assert text.endswith("'"), text
        return text[1:-1].replace("''", "'")
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return text


def read_yaml_subset(text: str) -> Any:
    lines: list[tuple[int, str]] = []
    for raw in text.splitlines():
        stripped = raw.split(" #")[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if stripped.strip():
            lines.append((len(stripped) - len(stripped.lstrip(" ")), stripped.strip()))
    pos = 0

    def block(indent: int) -> Any:
        nonlocal pos
        if lines[pos][1].startswith("- "):
            items = []
            while pos < len(lines) and lines[pos][0] == indent and lines[pos][1].startswith("- "):
                items.append(_scalar(lines[pos][1][2:]))
                pos += 1
            return items
        mapping: dict[str, Any] = {}
        while pos < len(lines) and lines[pos][0] == indent:
            key, sep, rest = lines[pos][1].partition(":")
            assert sep, f"not a mapping entry: {lines[pos][1]!r}"
            pos += 1
            if rest.strip():
                mapping[key] = _scalar(rest)
            else:
                assert pos < len(lines) and lines[pos][0] > indent, f"{key}: empty value"
                mapping[key] = block(lines[pos][0])
        assert pos == len(lines) or lines[pos][0] < indent, f"bad indentation at {lines[pos][1]!r}"
        return mapping

    return block(0)


def load_compose() -> dict[str, Any]:
    text = COMPOSE.read_text()
    try:
        import yaml
    except ImportError:
        data: dict[str, Any] = read_yaml_subset(text)
        return data
    loaded: dict[str, Any] = yaml.safe_load(text)
    return loaded


def test_the_subset_reader_reads_what_it_claims() -> None:
    doc = 'a:\n  b: "x y"\n  c: [1, "two"]\n  d:\n    - "8089:8089"\n    - plain\ne: 3\n'
    assert read_yaml_subset(doc) == {"a": {"b": "x y", "c": [1, "two"], "d": ["8089:8089", "plain"]}, "e": 3}


def test_services_commands_and_ports_are_what_the_readme_says() -> None:
    services = load_compose()["services"]
    ours = {"sim", "master", "worker", "monitor", "headless-master", "headless-worker"}
    assert set(services) == ours | {"prometheus", "grafana"}
    for name, svc in ((n, services[n]) for n in ours):
        assert svc["build"] == ".", name  # one image, built from our Dockerfile
        assert svc["image"] == "llm-loadgen:latest", name
        assert isinstance(svc["command"], list), name  # exec form: no shell between compose and us
    sim = services["sim"]["command"]
    assert sim[:2] == ["loadgen", "sim"]
    assert sim[sim.index("--host") + 1] == "0.0.0.0" and sim[sim.index("--port") + 1] == "30000"
    assert "--profile" in sim
    assert services["sim"]["ports"] == ["30000:30000"]

    master = services["master"]["command"]
    assert master[:3] == ["locust", "-f", "/app/loadgen/locustfile.py"] and "--master" in master
    assert master[master.index("--web-host") + 1] == "0.0.0.0"
    assert master[master.index("--web-port") + 1] == "8089" and services["master"]["ports"] == ["8089:8089"]
    assert "http://sim:30000" in master[master.index("--host") + 1]
    out = master[master.index("--lg-out") + 1]
    assert f"./reports:{out}" in services["master"]["volumes"]  # reports land in ./reports on the host

    worker = services["worker"]
    cmd = worker["command"]
    assert cmd[:3] == ["locust", "-f", "/app/loadgen/locustfile.py"]
    assert "--worker" in cmd and cmd[cmd.index("--master-host") + 1] == "master"
    # `docker compose up --scale worker=4` needs a worker without fixed host ports or a container name
    assert "ports" not in worker and "container_name" not in worker

    monitor = services["monitor"]["command"]
    assert monitor[:2] == ["loadgen", "monitor"]
    assert monitor[monitor.index("--serve") + 1] == "0.0.0.0:9500"
    assert monitor[monitor.index("--gpu-source") + 1] == "http://sim:30000/gpu/metrics"
    # serving beyond loopback needs a token; it travels in the environment, never on a command line
    assert "LOADGEN_MONITOR_TOKEN" in services["monitor"]["environment"]
    assert "monitor:9500" in master[master.index("--monitor-url") + 1]


def test_every_locustfile_option_the_compose_file_uses_exists() -> None:
    from loadgen.locustfile import _add_arguments

    class Collect:
        def __init__(self) -> None:
            self.flags: set[str] = set()

        def add_argument(self, *names: str, **_: Any) -> None:
            self.flags.update(n for n in names if n.startswith("--"))

    c = Collect()
    _add_arguments(c)
    for name in ("master", "worker"):
        for arg in load_compose()["services"][name]["command"]:
            if arg.startswith("--lg-") or arg in ("--gpu-source", "--monitor-url"):
                assert arg in c.flags, f"{name}: {arg} is not an option of loadgen/locustfile.py"


def test_dockerfile_installs_the_package_and_the_files_compose_runs() -> None:
    text = (REPO / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.1[0-9]", text, re.M)
    assert "WORKDIR /app" in text and "COPY loadgen ./loadgen" in text
    assert re.search(r"^RUN pip install \.", text, re.M)
    exposed = set(re.search(r"^EXPOSE (.+)$", text, re.M).group(1).split())  # type: ignore[union-attr]
    assert {"8089", "5557", "30000", "9500"} <= exposed
    ignored = (REPO / ".dockerignore").read_text().split()
    assert "reports" in ignored and ".git" in ignored  # the build context stays small


def test_readme_compose_commands_name_existing_services() -> None:
    services = set(load_compose()["services"])
    readme = (REPO / "README.md").read_text()
    for m in re.finditer(r"--scale (\w+)=\d+", readme):
        assert m.group(1) in services, m.group(0)


def test_the_headless_profile_runs_a_master_and_the_workers_one_value_counts() -> None:
    """``docker compose --profile headless``: ``loadgen ramp --master`` and ``loadgen worker``
    replicas; LOADGEN_WORKERS is both how many workers start and how many the master waits for."""
    from loadgen.cli.parser import build_parser
    from loadgen.cli.ramp_options import ramp_options
    from loadgen.run.worker import build_parser as worker_parser
    from loadgen.spec.options import parse_host_port

    services = load_compose()["services"]
    master, worker = services["headless-master"], services["headless-worker"]
    assert master["profiles"] == ["headless"] and worker["profiles"] == ["headless"]
    count = "${LOADGEN_WORKERS:-2}"
    cmd = master["command"]
    assert cmd[:2] == ["loadgen", "ramp"] and cmd[cmd.index("--expect-workers") + 1] == count
    assert worker["deploy"]["replicas"] == count
    # the command lines parse, with the defaults compose puts in for the variables
    argv = [re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", a) for a in cmd[1:]]
    opts = ramp_options(build_parser().parse_args(argv), argv)
    assert opts.master and opts.expect_workers == 2 and opts.url == "http://sim:30000"
    host, port = parse_host_port(opts.master_bind, "--master-bind")
    wns = worker_parser().parse_args(worker["command"][2:])
    assert parse_host_port(wns.master, "--master") == ("headless-master", port) and host == "0.0.0.0"
    assert f"./reports:{opts.out}" in master["volumes"]  # the report lands on the host
    assert "ports" not in worker and "container_name" not in worker  # replicas need neither
