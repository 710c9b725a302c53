"""The import graph of the ``hackscan`` package: no circles, and no module imports from a layer above it.

The graph is read from the source (``ast``), not from ``sys.modules``, so it sees every import a
module can run, whichever code path a test happens to take.

What counts as an edge:

- module-level imports, and imports inside functions.  A function-level import runs, later, and
  the module does not work without it; deferring an import hides a circle from the interpreter
  (that is usually why it was deferred) but not from the reader, who still has to understand both
  modules together.  The one good reason to defer an import (keeping a heavy library such as
  networkx or torch off a path that does not need it) still works downward, which this test allows.
- imports under ``if TYPE_CHECKING:`` too.  They never run, but they say that a module is written
  against another's types: a type-only import back up a chain (facts that name the analysis built
  on them, a model built from the scan context that names it) is the same knot for the reader, and
  hiding it is how the circles of the core came back.  So a module names only types of its own
  layer or below, and an analysis built on facts is handed them rather than reached from them.
- not ``importlib.import_module`` by name: the registry loads each rule's check function that way,
  and the registry test holds those names to the files.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "hackscan"

# Lowest first.  A module may import from its own layer or a lower one.  The longest matching
# prefix decides a module's layer; "hackscan" itself (the package's ``__init__``: ``scan_source``,
# ``__version__``) is the API over the engine.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("util", ("hackscan.util",)),
    ("vocabulary", ("hackscan.units", "hackscan.model", "hackscan.annotations", "hackscan.suppress",
                    "hackscan.inputs", "hackscan.registry", "hackscan.config", "hackscan.classes",
                    "hackscan.rulefiles",
                    # the harness profiles are plain data that config validates names against
                    "hackscan.dynamic.shared.profiles")),
    ("facts", ("hackscan.python", "hackscan.cuda", "hackscan.triton")),
    # buildability reads the whole scan context (host calls and C++ trees together), so it sits with it
    ("context", ("hackscan.context", "hackscan.cuda.buildability")),
    ("checks", ("hackscan.checks",)),
    ("engine", ("hackscan.engine", "hackscan")),
    ("stages", ("hackscan.dynamic", "hackscan.perf", "hackscan.output")),
    ("batch", ("hackscan.parallel", "hackscan.pipeline", "hackscan.resume", "hackscan.cluster")),
    # the verified reward drives whole batches (pipeline, Ray) for a training loop
    ("rl", ("hackscan.rl",)),
    ("measure", ("hackscan.measure",)),
    ("cli", ("hackscan.cli", "hackscan.__main__")),
]

# Circles other branches are removing; the lead empties this list when they are merged.  Each
# entry is the set of modules of one circle: a circle passes while it stays inside a listed set,
# and an entry no circle needs any more fails the test, so the list cannot go stale.
KNOWN_CIRCLES: dict[frozenset[str], str] = {}

# Upward imports to be removed, with the same rule: a listed one that is gone fails the test.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    line: int
    deferred: bool  # inside a function

    def __str__(self) -> str:
        where = " (in a function)" if self.deferred else ""
        return f"{self.importer}:{self.line}{where} -> {self.imported}"


def module_names(root: Path) -> dict[str, Path]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: dict[str, Path]) -> list[str]:
    """The package modules one import statement loads (the nearest enclosing module for a name
    that is not one: ``from ..units import Pos`` -> ``hackscan.units``)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - node.level + 1]
            stem = ".".join(base + ([node.module] if node.module else []))
        else:
            stem = node.module or ""
        names = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in known else stem for a in node.names]
    out = []
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name:
            out.append(name)
    return out


def import_edges(root: Path) -> list[Edge]:
    known = module_names(root)
    edges = []
    for module, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        deferred: set[int] = set()
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                deferred.update(id(n) for n in ast.walk(fn))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(module, path.name == "__init__.py", node, known):
                    if target != module:
                        edges.append(Edge(module, target, node.lineno, id(node) in deferred))
    return edges


def layer_of(module: str) -> int:
    best, best_len = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best_len:
                best, best_len = i, len(p)
    return best


def circles(edges: list[Edge]) -> list[set[str]]:
    g = nx.DiGraph((e.importer, e.imported) for e in edges)
    return [c for c in nx.strongly_connected_components(g) if len(c) > 1]


def upward(edges: list[Edge]) -> list[Edge]:
    return [e for e in edges if layer_of(e.importer) < layer_of(e.imported)]


def _cycle_text(members: set[str], edges: list[Edge]) -> str:
    return "\n    ".join(str(e) for e in edges if e.importer in members and e.imported in members)


# -------------------------------------------------------------------------------------------------

@functools.cache
def package_edges() -> tuple[Edge, ...]:
    return tuple(import_edges(PACKAGE))


def test_every_module_has_a_layer() -> None:
    missing = sorted(m for m in module_names(PACKAGE) if layer_of(m) < 0)
    assert not missing, f"add these modules to LAYERS in {__file__}: {missing}"


def test_no_import_circles() -> None:
    found = circles(list(package_edges()))
    new = [c for c in found if not any(c <= known for known in KNOWN_CIRCLES)]
    assert not new, "import circles:\n" + "\n".join(f"  {sorted(c)}:\n    {_cycle_text(c, list(package_edges()))}" for c in new)
    stale = [sorted(k) for k in KNOWN_CIRCLES if not any(c & k for c in found)]
    assert not stale, f"these circles are gone: remove them from KNOWN_CIRCLES: {stale}"


def test_no_upward_imports() -> None:
    found = upward(list(package_edges()))
    names = [n for n, _ in LAYERS]
    new = [e for e in found if (e.importer, e.imported) not in KNOWN_UPWARD]
    assert not new, "imports from a higher layer:\n" + "\n".join(
        f"  {e}  ({names[layer_of(e.importer)]} imports {names[layer_of(e.imported)]})" for e in new)
    pairs = {(e.importer, e.imported) for e in found}
    stale = [k for k in KNOWN_UPWARD if k not in pairs]
    assert not stale, f"these upward imports are gone: remove them from KNOWN_UPWARD: {stale}"


def test_the_core_of_the_issue_stays_fixed() -> None:
    """The circles that once tied the core together (``context`` <-> ``cuda/facts`` <->
    ``cuda/flow`` / ``graph``, ``python/program`` <-> ``context``), by name, so a KNOWN_CIRCLES entry
    cannot hide them."""
    core = {"hackscan.context", "hackscan.cuda.facts", "hackscan.cuda.flow", "hackscan.graph",
            "hackscan.cuda.graph", "hackscan.cuda.records", "hackscan.cuda.builder", "hackscan.units",
            "hackscan.python.program", "hackscan.python.patterns", "hackscan.triton.facts"}
    assert not [c for c in circles(list(package_edges())) if c & core]
    assert not [e for e in package_edges() if e.importer.startswith(("hackscan.context", "hackscan.units", "hackscan.cuda",
                                                           "hackscan.engine"))
                and e.imported in ("hackscan.python.lazy", "hackscan.python.records")]


# ---------------------------------------------------------------- the graph builder itself


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "hackscan"
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_the_builder_sees_function_level_and_type_only_circles(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "__init__.py": "",
        "units.py": "def f():\n    from .context import ScanContext\n",  # upward, deferred
        "context.py": "from .units import Pos\n",
        "cuda/__init__.py": "",
        "cuda/facts.py": "from ..units import Pos\nfrom . import flow\n",
        "cuda/flow.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .facts import CudaFacts\n",
    })
    edges = import_edges(root)
    assert Edge("hackscan.units", "hackscan.context", 2, True) in edges
    assert Edge("hackscan.cuda.facts", "hackscan.cuda.flow", 2, False) in edges
    assert Edge("hackscan.cuda.flow", "hackscan.cuda.facts", 3, False) in edges  # type-only: an edge too
    assert sorted(map(sorted, circles(edges))) == [["hackscan.context", "hackscan.units"],
                                                   ["hackscan.cuda.facts", "hackscan.cuda.flow"]]
    assert [str(e) for e in upward(edges)] == ["hackscan.units:2 (in a function) -> hackscan.context"]


@pytest.mark.parametrize("module, layer", [
    ("hackscan", "engine"), ("hackscan.cuda.records", "facts"), ("hackscan.util.lazy", "util"),
    ("hackscan.dynamic.worker", "stages"), ("hackscan.cli", "cli"),
])
def test_layer_of(module: str, layer: str) -> None:
    assert LAYERS[layer_of(module)][0] == layer
