"""The submission's call graph, Python and C++ together: from ``forward`` down to the kernels.

Python nodes come from ``ctx.python`` (the functions forward reaches, with helpers inlined):

* ``py:<qualname>``        a Python function (``py:ModelNew.forward``, ``py:launch_add``)
* ``torch:<op>``           a torch computation (``torch:torch.matmul``, ``torch:Tensor.sum``, ``torch:torch.nn.Conv2d``)
* ``export:<ext>.<fn>``    an extension function called from Python (the C++ side binds it)
* ``triton:<kernel>``      a ``@triton.jit`` kernel
* ``op:<ns>.<op>``         a custom ``torch.ops`` operator; ``cupy:<name>`` a cupy kernel

The C++ side (``hackscan.cuda.graph.cuda_graph``) adds ``cpp:``, ``kernel:``, ``device:`` and
``aten:`` nodes behind the ``export:`` nodes; the two graphs share the ``export:`` names, so
``networkx.compose`` joins them.  Every node has a ``kind``; edges have a ``kind`` (``calls``,
``launches``, ``binds``) and the host ``line`` of the call.  Kernels and exports that exist but
that nothing calls are nodes too, so "defined but never reached" is a graph query.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import networkx as nx

if TYPE_CHECKING:
    from .context import ScanContext
    from .python.facts import PythonFacts

# node kinds that do the work on the device
KERNEL_KINDS = frozenset({"kernel", "triton", "custom_op", "cupy", "numba"})
# node kinds Python calls into: the entry points of compiled code
ENTRY_KINDS = frozenset({"export", "triton", "custom_op", "cupy", "numba"})


def build_graph(ctx: ScanContext) -> nx.DiGraph:
    """The composed graph of one submission (lazy as ``ctx.graph``)."""
    g = python_graph(ctx.python) if ctx.python is not None else nx.DiGraph()
    if any(u.language in ("cuda", "cpp") for u in ctx.units):
        try:
            from .cuda.graph import cuda_graph
        except ImportError:  # the C++ side is optional: the Python graph stands alone
            return g
        cg = cuda_graph(ctx.cuda)
        g = nx.compose(cg, g)
    return g


def python_graph(facts: PythonFacts) -> nx.DiGraph:
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


# ------------------------------------------------------------------------------------ queries
def forward_node(g: nx.DiGraph) -> str | None:
    return g.graph.get("forward")


def reachable(g: nx.DiGraph, root: str | None = None) -> set[str]:
    """Every node reachable from ``root`` (forward by default), the root included."""
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


__all__ = [
    "build_graph", "python_graph", "forward_node", "reachable", "kernels_reachable", "any_kernel_reachable",
    "entries_reachable", "unreached_kernels", "torch_ops_reachable", "KERNEL_KINDS", "ENTRY_KINDS",
]
