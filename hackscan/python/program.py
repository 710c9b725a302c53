"""The program model of a candidate: which class is the model, where its ``forward`` is, and what
runs when it is called.

Every part of hackscan that asks "which class is the model" asks ``model_class`` here, and every
question "does forward reach X" is a query on the one call / launch graph built here
(``Program.graph``, served lazily as ``ctx.program``).

Which class is the model (one rule, ``model_class``):

1. The class bound to ``ModelNew`` at module level: ``class ModelNew`` or ``ModelNew = OtherClass``
   (the last binding, as at run time).  The harness looks ``ModelNew`` up by name in the module,
   so whatever else the file defines, that class is what runs and is timed.
2. Otherwise the last module-level class that defines ``forward`` in its own body and derives from
   ``torch.nn.*`` or from another class of the file, leaving out the reference's ``Model`` and
   ``torch.autograd.Function`` subclasses.  Deriving from a module is the test because a plain
   class with a ``forward`` (a timer, a profiler wrapper, a data holder) is never called as the
   model; the last one because generated files put helper modules first and the model that uses
   them last.

A file that defines neither has no model: the analyses that need one find nothing to analyse, and
the dynamic stage refuses to run it (it can only run ``ModelNew``).

The graph (``networkx.DiGraph``) joins the two sides of a submission: Python nodes come from the
def-use analysis of the model (``ctx.model_flow``: the functions forward reaches, with helpers
inlined), the C++ side from ``hackscan.cuda.graph.cuda_graph`` (``ctx.cuda_graph``); they share the ``export:`` names,
so ``networkx.compose`` joins them.

* ``py:<qualname>``        a Python function (``py:ModelNew.forward``, ``py:launch_add``)
* ``torch:<op>``           a torch computation (``torch:torch.matmul``, ``torch:torch.nn.Conv2d``)
* ``export:<ext>.<fn>``    an extension function called from Python (the C++ side binds it)
* ``triton:<kernel>``      a ``@triton.jit`` kernel
* ``op:<ns>.<op>``         a custom ``torch.ops`` operator; ``cupy:<name>`` a cupy kernel
* ``cpp:<ext>:<fn>``, ``kernel:<ext>:<k>``, ``device:<ext>:<fn>``, ``aten:<name>`` (C++ side)

Every node has a ``kind``; edges have a ``kind`` (``calls``, ``launches``, ``binds``) and the host
``line`` of the call.  Kernels and exports that exist but that nothing calls are nodes too, so
"defined but never reached" is a graph query.  ``path_to`` / ``path_text`` name how forward reaches
a node, for rule messages ("forward -> relu_ext.relu_forward -> relu_kernel").
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..util.lazy import cached_property
from .indirection import namespace_writes
from .resolve import dotted_name

if TYPE_CHECKING:
    import networkx as nx

    from .facts import ModelFlow
    from .module import HostModule

MODEL_NAME = "ModelNew"  # the class the harness instantiates
REFERENCE_NAME = "Model"  # the reference's class, never the candidate's model
_AUTOGRAD_BASES = frozenset({"torch.autograd.Function", "torch.autograd.function.Function", "Function"})
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)

# node kinds that do the work on the device
KERNEL_KINDS = frozenset({"kernel", "triton", "custom_op", "cupy", "numba"})
# node kinds Python calls into: the entry points of compiled code
ENTRY_KINDS = frozenset({"export", "triton", "custom_op", "cupy", "numba"})


# ------------------------------------------------------------------------------------ the model
def _dotted(expr: ast.AST) -> str:
    """A base class as written (``nn.Module``), for callers that have no import map."""
    try:
        return ast.unparse(expr)
    except Exception:  # an unparsable node is no module base
        return ""


def _module_base(text: str) -> bool:
    """Without an import map: ``nn.X`` / ``torch.nn.X`` / a bare ``Module`` count as nn bases."""
    return text.startswith(("torch.nn.", "nn.")) or text == "Module"


def model_class(tree: ast.Module, canonical: Callable[[ast.AST], str] | None = None) -> ast.ClassDef | None:
    """The candidate's model class by the rule in the module docstring.

    ``canonical`` resolves a base class through the file's imports (``HostModule.canonical``); a
    caller with only a tree (the seeds, which edit their own parse) gets the spelled names.
    """
    classes: dict[str, ast.ClassDef] = {}
    bound: ast.ClassDef | None = None  # what the name ModelNew holds after the module ran
    for stmt in tree.body:
        if type(stmt) is ast.ClassDef:
            classes[stmt.name] = stmt  # a redefinition replaces the earlier class, as at run time
            if stmt.name == MODEL_NAME:
                bound = stmt
        elif type(stmt) is ast.Assign and any(type(t) is ast.Name and t.id == MODEL_NAME for t in stmt.targets):
            bound = _class_value(stmt.value, classes)
        elif type(stmt) in (ast.Assign, ast.Expr):
            # ``globals()["ModelNew"] = X``, ``vars(sys.modules[__name__])["ModelNew"] = X``,
            # ``setattr(sys.modules[__name__], "ModelNew", X)``: the same binding, spelled as a write
            # into the module's namespace
            for target, value in namespace_writes(stmt, canonical or _spelled):
                if type(target) is ast.Name and target.id == MODEL_NAME:
                    bound = _class_value(value, classes)
    if bound is not None:
        return bound
    best: ast.ClassDef | None = None
    for c in classes.values():
        if c.name == REFERENCE_NAME or not any(isinstance(f, _FUNCS) and f.name == "forward" for f in c.body):
            continue
        if canonical is not None:
            bases = {canonical(b) for b in c.bases}
            if bases & _AUTOGRAD_BASES:
                continue
            module = any(b.startswith("torch.nn.") or b in classes for b in bases)
        else:
            spelled = {_dotted(b) for b in c.bases}
            module = any(_module_base(b) or b in classes for b in spelled)
        if module and (best is None or c.lineno > best.lineno):
            best = c
    return best


def _class_value(value: ast.AST, classes: dict[str, ast.ClassDef]) -> ast.ClassDef | None:
    """The class of the file a value is: a class's name, or ``type("N", (Base,), {})`` (a subclass that
    adds nothing behaves as its first base)."""
    if type(value) is ast.Name:
        return classes.get(value.id)
    if type(value) is ast.Call and type(value.func) is ast.Name and value.func.id == "type" and \
            len(value.args) == 3 and type(value.args[1]) is ast.Tuple and value.args[1].elts and \
            type(value.args[2]) is ast.Dict and not value.args[2].keys:
        first = value.args[1].elts[0]
        return classes.get(first.id) if type(first) is ast.Name else None
    return None


def _spelled(expr: ast.AST) -> str:
    """A callee's dotted name as written, for callers without an import map."""
    return dotted_name(expr)


def is_harness_model(tree: ast.Module, cls: ast.ClassDef) -> bool:
    """Whether ``cls`` is the model by rule 1 (the name ``ModelNew`` holds it), not only by rule 2."""
    if cls.name == MODEL_NAME:
        return True
    classes = {cls.name: cls}
    for stmt in tree.body:
        if type(stmt) is ast.Assign and any(type(t) is ast.Name and t.id == MODEL_NAME for t in stmt.targets) \
                and _class_value(stmt.value, classes) is cls:
            return True
        if type(stmt) in (ast.Assign, ast.Expr) and any(
                type(t) is ast.Name and t.id == MODEL_NAME and _class_value(v, classes) is cls
                for t, v in namespace_writes(stmt, _spelled)):
            return True
    return False


def host_model(host: HostModule) -> ast.ClassDef | None:
    """``model_class`` of a parsed host file, cached on the host (it lives as long as one scan)."""
    d = host.__dict__
    if "_model_class" not in d:
        d["_model_class"] = model_class(host.tree, host.canonical)
    return d["_model_class"]  # type: ignore[no-any-return]


def forward_of(cls: ast.ClassDef | None) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The ``forward`` defined in the class body, the last one when it is defined twice (the later
    definition is the one Python keeps); None when the body has none."""
    found = None
    if cls is not None:
        for stmt in cls.body:
            if isinstance(stmt, _FUNCS) and stmt.name == "forward":
                found = stmt
    return found


def anchor(tree: ast.Module, canonical: Callable[[ast.AST], str] | None = None) -> tuple[int, int] | None:
    """(line, 1-based column) of the model's ``forward``, else of its class; None without a model."""
    cls = model_class(tree, canonical)
    if cls is None:
        return None
    node = forward_of(cls) or cls
    return node.lineno, node.col_offset + 1


@dataclass(frozen=True)
class Outline:
    """What the static stage knew of a candidate, carried on its ``Report`` (``report.program``) so
    that the dynamic stage and the performance stage parse nothing again: plain values only, it
    crosses process boundaries."""

    model: str | None = None  # the model class by ``model_class``
    harness_name: bool = False  # ``ModelNew`` names it: the dynamic stage can run it
    line: int = 1  # of the model's forward (else its class; 1 without a model)
    column: int = 1
    languages: tuple[str, ...] = ()  # of the compiled units found in the host (cuda, cpp, triton)
    extensions: tuple[tuple[str, str], ...] = ()  # (name, kind) of each extension the host builds
    triton_kernels: tuple[str, ...] = ()
    incomplete: bool = False  # extracting the compiled units failed: only the model is known


def outline(host: HostModule, extract: bool = True) -> Outline:
    """The outline of a parsed host; ``extract=False`` skips the units and extensions (for a host
    whose extraction raised)."""
    cls = host_model(host)
    node = forward_of(cls) or cls
    line, column = host.position(node) if node is not None else (1, 1)
    name = cls.name if cls is not None else None
    runs = cls is not None and is_harness_model(host.tree, cls)
    if not extract:
        return Outline(model=name, harness_name=runs, line=line, column=column, incomplete=True)
    return Outline(model=name, harness_name=runs, line=line, column=column,
                   languages=tuple(sorted({u.language for u in host.units})),
                   extensions=tuple((e.name, e.kind) for e in host.extensions),
                   triton_kernels=tuple(host.triton_kernels))


# ------------------------------------------------------------------------------------ the graph
class Program:
    """The program model of one submission: its model class, forward, and call / launch graph.

    Built from facts, each asked for only when the graph is: ``flow`` gives the model's value flow
    (``ctx.model_flow``), ``cuda_graph`` the C++ half of the graph (``ctx.cuda_graph``; None
    without C++ units)."""

    def __init__(self, host: HostModule | None, flow: Callable[[], ModelFlow | None],
                 cuda_graph: Callable[[], nx.DiGraph | None]):
        self.host = host
        self.model = host_model(host) if host is not None else None
        self.forward = forward_of(self.model)
        self._flow = flow
        self._cuda_graph = cuda_graph

    @property
    def model_name(self) -> str | None:
        return self.model.name if self.model is not None else None

    @property
    def forward_line(self) -> int | None:
        return self.forward.lineno if self.forward is not None else None

    @cached_property
    def graph(self) -> nx.DiGraph:
        try:
            cuda = self._cuda_graph()
        except ImportError:  # the C++ side is optional: the Python graph stands alone
            cuda = None
        return build_graph(self._flow(), cuda)

    # -------------------------------------------------------------- queries
    def reachable(self, root: str | None = None) -> set[str]:
        return reachable(self.graph, root)

    def path_to(self, target: str, root: str | None = None) -> list[str]:
        return path_to(self.graph, target, root)

    def path_text(self, target: str, root: str | None = None) -> str:
        """How forward reaches ``target``, named for a message ("" when it does not)."""
        return path_text(self.graph, self.path_to(target, root))


def build_graph(flow: ModelFlow | None, cuda: nx.DiGraph | None) -> nx.DiGraph:
    """The composed graph of one submission (lazy as ``ctx.program.graph``): the Python side from
    the model's value flow, joined with the C++ side where there is one."""
    import networkx as nx

    g = python_graph(flow) if flow is not None else nx.DiGraph()
    if cuda is not None:
        g = nx.compose(cuda, g)  # the Python graph's attributes (its forward) win
    return g


def python_graph(facts: ModelFlow) -> nx.DiGraph:
    import networkx as nx

    g = nx.DiGraph()
    host = facts.host
    for ext in host.extensions:
        for fn in ext.functions or ():
            g.add_node(f"export:{ext.name}.{fn}", kind="export", ext=ext.name, name=fn, line=ext.line)
    for name, fn in host.triton_kernels.items():
        g.add_node(f"triton:{name}", kind="triton", name=name, line=fn.lineno)
    for info in facts.functions.values():
        g.add_node(f"py:{info.qualname}", kind="python", name=info.qualname, line=info.node.lineno,
                   role=info.kind)
    for edge in facts.calls:
        g.add_edge(f"py:{edge.caller}", f"py:{edge.callee}", kind="calls", line=edge.node.lineno)
    for op in facts.ops:
        node = f"torch:{op.name}"
        if node not in g:
            g.add_node(node, kind="torch", name=op.name, family=op.family, compute=True)
        _add_call(g, f"py:{op.function}", node, op.line)
    for k in facts.kernels:
        kind = {"extension": "export", "triton": "triton", "torch_ops": "custom_op", "cupy": "cupy",
                "numba": "numba"}.get(k.kind, "custom_op")
        if k.name not in g:
            g.add_node(k.name, kind=kind, name=k.target, ext=k.extension, line=k.line)
        _add_call(g, f"py:{k.function}", k.name, k.line, "launches" if kind == "triton" else "calls")
    if facts.forward is not None:
        g.graph["forward"] = f"py:{facts.forward.qualname}"
    return g


def _add_call(g: nx.DiGraph, src: str, dst: str, line: int, kind: str = "calls") -> None:
    if g.has_edge(src, dst):
        lines = g.edges[src, dst].setdefault("lines", [g.edges[src, dst]["line"]])
        if line not in lines:
            lines.append(line)
        return
    g.add_edge(src, dst, kind=kind, line=line)


def forward_node(g: nx.DiGraph) -> str | None:
    return g.graph.get("forward")  # type: ignore[no-any-return]


def reachable(g: nx.DiGraph, root: str | None = None) -> set[str]:
    """Every node reachable from ``root`` (forward by default), the root included."""
    import networkx as nx

    root = root or forward_node(g)
    if root is None or root not in g:
        return set()
    return {root} | nx.descendants(g, root)


def _of_kind(g: nx.DiGraph, nodes: Iterable[str], kinds: frozenset[str]) -> set[str]:
    return {n for n in nodes if g.nodes[n].get("kind") in kinds}


def kernels_reachable(g: nx.DiGraph, root: str | None = None) -> set[str]:
    """Device kernels forward reaches: CUDA ``__global__`` kernels, Triton kernels, custom ops, cupy."""
    return _of_kind(g, reachable(g, root), KERNEL_KINDS)


def any_kernel_reachable(g: nx.DiGraph, root: str | None = None) -> bool:
    """Does forward reach any device kernel?  An export whose C++ side was not analysed counts."""
    nodes = reachable(g, root)
    if _of_kind(g, nodes, KERNEL_KINDS):
        return True
    return any(g.nodes[n].get("kind") == "export" and g.out_degree(n) == 0 for n in nodes)


def entries_reachable(g: nx.DiGraph, root: str | None = None) -> set[str]:
    """Compiled entry points forward calls (``export:``, ``triton:``, ``op:``, ``cupy:``)."""
    return _of_kind(g, reachable(g, root), ENTRY_KINDS)


def unreached_kernels(g: nx.DiGraph, root: str | None = None) -> set[str]:
    """Kernels and exports defined in the submission that forward never reaches (dead code)."""
    seen = reachable(g, root)
    return {n for n, d in g.nodes(data=True) if d.get("kind") in KERNEL_KINDS | {"export"} and n not in seen}


def torch_ops_reachable(g: nx.DiGraph, root: str | None = None) -> set[str]:
    """torch (Python) and ATen (C++) compute ops forward reaches."""
    nodes = reachable(g, root)
    return {n for n in nodes if g.nodes[n].get("kind") == "torch"
            or (g.nodes[n].get("kind") == "aten" and g.nodes[n].get("compute"))}


def path_to(g: nx.DiGraph, target: str, root: str | None = None) -> list[str]:
    """The shortest chain of nodes from ``root`` (forward by default) to ``target``; [] when none."""
    import networkx as nx

    root = root or forward_node(g)
    if root is None or root not in g or target not in g:
        return []
    try:
        return list(nx.shortest_path(g, root, target))
    except nx.NetworkXNoPath:
        return []


def node_label(g: nx.DiGraph, node: str) -> str:
    """A node as a reader names it: ``forward``, ``helper``, ``relu_ext.relu_forward``, ``relu_kernel``."""
    data = g.nodes[node] if node in g else {}
    kind = data.get("kind")
    name = str(data.get("name") or node.split(":", 1)[-1])
    if kind == "python":
        return name.rsplit(".", 1)[-1] if data.get("role") in ("forward", "method") else name
    if kind == "export" and data.get("ext") and not name.startswith(f"{data.get('ext')}."):
        return f"{data['ext']}.{name}"
    return name


def path_text(g: nx.DiGraph, path: list[str]) -> str:
    """``path`` for a message, arrows between the nodes; a host function that only repeats the name
    of the export bound to it is left out (``relu_ext.relu_forward``, not also ``relu_forward``)."""
    labels: list[str] = []
    prev: str | None = None
    for node in path:
        if prev is not None and g.edges[prev, node].get("kind") == "binds" and \
                g.nodes[node].get("name") == g.nodes[prev].get("name"):
            prev = node
            continue
        labels.append(node_label(g, node))
        prev = node
    return " -> ".join(labels)


__all__ = [
    "MODEL_NAME", "REFERENCE_NAME", "KERNEL_KINDS", "ENTRY_KINDS", "Program", "model_class", "host_model",
    "forward_of", "is_harness_model", "anchor", "Outline", "outline", "build_graph", "python_graph", "forward_node", "reachable", "kernels_reachable",
    "any_kernel_reachable", "entries_reachable", "unreached_kernels", "torch_ops_reachable", "path_to",
    "node_label", "path_text",
]
