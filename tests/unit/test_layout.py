"""The package's shape: components import only what lies below them, with no import cycle among gpt1's modules
(imports inside functions counted), and the orchestration (flows/) sits on top of the library, never under it."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

from tests.conftest import REPO

# gpt1's components from the bottom up: a module may import its own component and the ones before it.
LAYERS = [
    {"gpt1.io", "gpt1.errors", "gpt1.progress", "gpt1.redact"},  # small helpers
    {"gpt1.stages"},  # the stage kit: a job, its key, its output folder
    {"gpt1.tasks"},
    {"gpt1.config"},
    {"gpt1.tokenizer"},  # the text encoder every stage that reads token ids loads
    {"gpt1.tracking", "gpt1.runtime"},
    {"gpt1.data", "gpt1.sample_data"},
    {"gpt1.model"},
    {"gpt1.pretrain", "gpt1.finetune", "gpt1.report"},
    {"gpt1.pipeline"},  # a generic DAG: plan, schedule, run, lineage
    {"gpt1.recipe"},  # the GPT-1 run: its recipe, its design, its preflight
    {"gpt1.cli"},  # the command line
]


def modules(root: str = "gpt1") -> dict[str, Path]:
    found = {}
    for path in (REPO / root).rglob("*.py"):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        found[name] = path
    return found


def imported(name: str, known: dict) -> str | None:
    """The gpt1 module an import of `name` loads: itself, else its nearest parent package."""
    while name not in known and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in known and name != "gpt1" else None  # every module imports the root package: no edge


def import_graph(known: dict[str, Path] | None = None) -> dict[str, set[str]]:
    known = known or modules()
    graph = {name: set() for name in known}
    for name, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):  # function bodies included
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(("gpt1", "flows")):
                # `from gpt1.x import y` loads gpt1.x.y when y is a submodule, else gpt1.x
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                           for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith(("gpt1", "flows"))]
            else:
                continue
            graph[name] |= {m for t in targets if (m := imported(t, known)) and m != name}
    return graph


def layer(module: str) -> int:
    for level, components in enumerate(LAYERS):
        if any(module == c or module.startswith(c + ".") for c in components):
            return level
    raise AssertionError(f"{module} belongs to no component of LAYERS: add it where it sits")


def test_the_import_graph_finds_the_edges_it_must():
    graph = import_graph()
    assert "gpt1.tracking.logger" in graph["gpt1.tracking.models"]  # a module-level import
    assert "gpt1.data.ingest.ingest" in graph["gpt1.data.ingest.stage"]  # `from gpt1.data.ingest import ingest`
    assert len(graph) > 50 and sum(map(len, graph.values())) > 100


def test_no_import_cycle_among_the_packages_modules():
    try:
        graphlib.TopologicalSorter(import_graph()).prepare()
    except graphlib.CycleError as e:
        raise AssertionError(f"import cycle: {' -> '.join(e.args[1])}") from None


def test_every_import_points_down_or_within_its_component():
    climbing = sorted(f"{a} -> {b}" for a, targets in import_graph().items() for b in targets
                      if layer(b) > layer(a))
    assert not climbing, climbing


def test_the_rule_catches_an_import_that_climbs(tmp_path):
    """The check itself: a model module importing the pipeline is caught."""
    known = modules()
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from gpt1.pipeline.plan import Plan\n")
    graph = import_graph({**known, "gpt1.model.bad": bad})
    assert [b for b in graph["gpt1.model.bad"] if layer(b) > layer("gpt1.model.bad")] == ["gpt1.pipeline.plan"]


def test_the_library_never_imports_the_orchestration():
    known = {**modules("gpt1"), **modules("flows")}
    graph = import_graph(known)
    assert not [f"{a} -> {b}" for a, targets in graph.items() if a.startswith("gpt1") for b in targets
                if b.startswith("flows")]
    assert any(b.startswith("gpt1") for b in graph["flows.pipeline"])
