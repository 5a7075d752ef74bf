"""The package's shape (issue #14): no import cycle among gpt1's modules, counting imports inside functions, and no
module of the pipeline over 600 lines."""

from __future__ import annotations

import ast
import graphlib

from tests.conftest import REPO

MAX_LINES = 600


def modules() -> dict[str, object]:
    found = {}
    for path in (REPO / "gpt1").rglob("*.py"):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        found[name] = path
    return found


def imported(name: str, known: dict) -> str | None:
    """The gpt1 module an import of `name` loads: itself, else its nearest parent package."""
    while name not in known and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in known and name != "gpt1" else None  # every module imports the root package: no edge


def import_graph() -> dict[str, set[str]]:
    known = modules()
    graph = {name: set() for name in known}
    for name, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):  # function bodies included
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gpt1"):
                # `from gpt1.x import y` loads gpt1.x.y when y is a submodule, else gpt1.x
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                           for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("gpt1")]
            else:
                continue
            graph[name] |= {m for t in targets if (m := imported(t, known)) and m != name}
    return graph


def test_the_import_graph_finds_the_edges_it_must():
    graph = import_graph()
    assert "gpt1.tracking.logger" in graph["gpt1.tracking.models"]  # a module-level import
    assert len(graph) > 40 and sum(map(len, graph.values())) > 100


def test_no_import_cycle_among_the_packages_modules():
    try:
        graphlib.TopologicalSorter(import_graph()).prepare()
    except graphlib.CycleError as e:
        raise AssertionError(f"import cycle: {' -> '.join(e.args[1])}") from None


def test_no_module_of_the_pipeline_is_over_600_lines():
    paths = [*(REPO / "gpt1").rglob("*.py"), *(REPO / "flows").rglob("*.py")]
    long = {p.relative_to(REPO).as_posix(): n for p in paths
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, long
