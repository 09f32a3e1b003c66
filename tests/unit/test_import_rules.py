"""The "never" arrows of docs/architecture.md, read from the source: every import statement of the
package (module level and inside functions; ``if TYPE_CHECKING:`` blocks excluded, they never run).

A rule broken here would otherwise show up as a slow start, a gevent monkey-patch where none may
be, or an import cycle that works until someone reorders two lines.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from tests.architecture import BY_NAME, PARTS, current, render

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "loadgen"
EVENT_LOOP = ("gevent", "geventhttpclient", "locust", "greenlet")
IO = ("socket", "subprocess", "threading", "selectors", "asyncio", "urllib.request", "http")
# the pure incremental decoders: bytes or lines in, values out, nothing else
PARSERS = (
    "loadgen.parse.sse",
    "loadgen.parse.stream",
    "loadgen.parse.responses",
    "loadgen.telemetry.prom",
    "loadgen.telemetry.logscan",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in PKG.rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    out: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


@cache
def imported(module: str) -> frozenset[str]:
    """Every module name one module imports (absolute; ``from a import b`` gives a and a.b)."""
    path = MODULES[module]
    names: set[str] = set()
    for node in _imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
            continue
        if node.level:
            base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            target = ".".join([*base, node.module] if node.module else base)
        else:
            target = node.module or ""
        names.add(target)
        names.update(f"{target}.{a.name}" for a in node.names)
    return frozenset(names)


def internal_deps(module: str) -> set[str]:
    """The package's modules this one imports (a package's own submodules excluded: importing
    them from its ``__init__`` is how a package is built, not a cycle)."""
    return {m for m in imported(module) if m in MODULES and m != module and not m.startswith(module + ".")}


def closure(module: str) -> set[str]:
    """Every name reachable through the package's own modules, third-party names included."""
    seen: set[str] = set()
    todo = [module]
    names: set[str] = set()
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        names |= imported(m)
        todo += [d for d in internal_deps(m) if d not in seen]
    return names


def _hits(names: set[str], roots: tuple[str, ...]) -> set[str]:
    return {n for n in names if any(n == r or n.startswith(r + ".") for r in roots)}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_graph_is_read() -> None:
    # the reader itself: known edges must be found, or every rule below would pass vacuously
    assert "loadgen.spec.options" in internal_deps("loadgen.run.ramp")
    assert "loadgen.report.pipeline" in internal_deps("loadgen.run.ramp")  # a function-level import
    assert "gevent" in imported("loadgen.load.client") and "locust" in closure("loadgen.run.ramp")
    assert "loadgen.telemetry.runner" in internal_deps("loadgen.telemetry.monitor")
    assert "loadgen.parse.stream.builder" in internal_deps("loadgen.parse.stream.fastpath")
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_between_modules() -> None:
    graph = {m: internal_deps(m) for m in MODULES}
    assert _cycles(graph) == []


def test_no_import_cycles_between_parts() -> None:
    """A part is what the folder tree names: ``loadgen.X`` (a subpackage or a top-level module)."""

    def part(m: str) -> str:
        return ".".join(m.split(".")[:2])

    graph: dict[str, set[str]] = {}
    for m in MODULES:
        graph.setdefault(part(m), set()).update(part(d) for d in internal_deps(m) if part(d) != part(m))
    assert _cycles(graph) == []


def test_every_module_lives_in_a_part() -> None:
    """The folder tree names the parts: only the locustfile and lifecycle stand at the top."""
    top = {m for m in MODULES if m.count(".") == 1 and not (PKG / m.split(".")[1]).is_dir()}
    assert top == {"loadgen.locustfile", "loadgen.lifecycle"}


def _part(module: str) -> str:
    return module.split(".")[1]


def test_every_part_has_its_row_in_the_rules() -> None:
    """A new folder under loadgen/ is a new row of tests/architecture.py (and of the docs' table)."""
    parts = {_part(m) for m in MODULES if m != "loadgen"}
    assert parts == set(BY_NAME)


def _against_the_rows(deps: dict[str, set[str]]) -> dict[str, set[str]]:
    """The imports (module -> modules) that no part's row allows."""
    wrong: dict[str, set[str]] = {}
    for m, ds in deps.items():
        allowed = {_part(m), *BY_NAME[_part(m)].may_import}
        outside = {d for d in ds if d != "loadgen" and _part(d) not in allowed}
        if outside:
            wrong[m] = outside
    return wrong


def test_every_part_imports_only_what_its_row_allows() -> None:
    """The may-import column of docs/architecture.md, held against every import statement."""
    deps = {m: internal_deps(m) for m in MODULES if m != "loadgen"}
    wrong = _against_the_rows(deps)
    assert not wrong, f"imports no row allows (move the code, or change tests/architecture.py): {wrong}"
    # and the check is not vacuous: the arrow issue 29 removed (the summary built in report/) is caught
    deps["loadgen.analysis.summary"] = {*deps["loadgen.analysis.summary"], "loadgen.report.pipeline"}
    assert _against_the_rows(deps) == {"loadgen.analysis.summary": {"loadgen.report.pipeline"}}


def test_every_arrow_points_up_the_flow() -> None:
    """PARTS is in the order the data flows: a part may import only the parts above it."""
    seen: set[str] = set()
    for p in PARTS:
        assert set(p.may_import) <= seen, f"{p.name} may import {sorted(set(p.may_import) - seen)}, below it"
        seen.add(p.name)


def test_docs_table_is_the_rules_rendered() -> None:
    assert current() == render(), "docs/architecture.md's table is stale: run python -m tests.architecture"


def test_the_option_table_imports_nothing_of_the_rest() -> None:
    for m in MODULES:
        if m.startswith("loadgen.spec"):
            outside = {d for d in internal_deps(m) if not d.startswith("loadgen.spec")}
            assert not outside, f"{m} imports {sorted(outside)}"


def test_the_simulator_imports_nothing_of_the_load_generator() -> None:
    for m in MODULES:
        if m.startswith("loadgen.sim"):
            outside = {d for d in internal_deps(m) if not d.startswith("loadgen.sim")}
            assert not outside, f"{m} imports {sorted(outside)}"


@pytest.mark.parametrize("part", ["loadgen.analysis", "loadgen.report", "loadgen.telemetry", "loadgen.workload"])
def test_analysis_report_telemetry_and_workloads_never_reach_the_event_loop(part: str) -> None:
    for m in MODULES:
        if m == part or m.startswith(part + "."):
            assert not _hits(closure(m), EVENT_LOOP), f"{m} reaches {sorted(_hits(closure(m), EVENT_LOOP))}"


@pytest.mark.parametrize(
    "module",
    ["loadgen.lifecycle", "loadgen.campaign", "loadgen.spec.options", "loadgen.spec.flags", "loadgen.spec.request"],
)
def test_lifecycle_campaign_and_options_never_pull_gevent(module: str) -> None:
    modules = [m for m in MODULES if m == module or m.startswith(module + ".")]  # a package: all of it
    assert modules
    for m in modules:
        assert not _hits(closure(m), EVENT_LOOP), f"{m} reaches {sorted(_hits(closure(m), EVENT_LOOP))}"


@pytest.mark.parametrize("parser", PARSERS)
def test_parsers_are_pure(parser: str) -> None:
    modules = [m for m in MODULES if m == parser or m.startswith(parser + ".")]  # a package: all of it
    assert modules
    for m in modules:
        names = closure(m)
        assert not _hits(names, EVENT_LOOP + IO), f"{m}: {sorted(_hits(names, EVENT_LOOP + IO))}"


def test_pynvml_only_in_the_nvml_module() -> None:
    users = {m for m in MODULES if _hits(set(imported(m)), ("pynvml",))}
    assert users == {"loadgen.telemetry.nvml"}


def test_a_campaign_process_really_stays_free_of_gevent() -> None:
    """What the interpreter loads, not only what the source says (a plugin's side effect, say)."""
    code = (
        "import sys, loadgen.campaign, loadgen.lifecycle, loadgen.spec.options;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('gevent', 'locust', 'geventhttpclient'));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


TWIN_MAY_IMPORT = ("loadgen.twin", "loadgen.analysis", "loadgen.rundir", "loadgen.spec", "loadgen.sim.profile")


def test_the_twin_reads_run_dirs_and_profiles_only() -> None:
    """The twin (``loadgen calibrate`` / ``loadgen twin``) reads run directories through analysis and
    writes simulator profiles in sim.profile's format; it talks to the simulator and the ramp as
    child processes, never by importing them, and never reaches the event loop."""
    modules = [m for m in MODULES if m == "loadgen.twin" or m.startswith("loadgen.twin.")]
    assert modules
    for m in modules:
        outside = {d for d in internal_deps(m) if not any(d == p or d.startswith(p + ".") for p in TWIN_MAY_IMPORT)}
        assert not outside, f"{m} imports {sorted(outside)}"
        assert not _hits(closure(m), EVENT_LOOP), f"{m} reaches {sorted(_hits(closure(m), EVENT_LOOP))}"
