"""The C++ call / launch graph of a submission's extensions.

Node names are a contract with ``hackscan/python/program.py``, which composes this graph with the Python
one (Python nodes call ``export:<ext>.<fn>``):

* ``export:<ext>.<fn>``   a function Python can call (``functions=`` / PYBIND11 ``m.def`` / cupy kernel)
* ``cpp:<ext>:<fn>``      a host function
* ``kernel:<ext>:<k>``    a ``__global__`` kernel
* ``device:<ext>:<fn>``   a ``__device__`` function
* ``aten:<name>``         an ATen / torch C++ call (``aten:at::matmul``, ``aten:Tensor.mm`` for methods)

Edges: ``binds`` (export -> its C++ function), ``calls`` (host -> host / aten, device -> device),
``launches`` (host -> kernel).  Node attributes: ``kind``, ``ext``, ``name``, ``line``, ``unit``;
aten nodes carry ``compute`` (False for allocation, views, checks and stream getters).  Edge
attributes: ``kind`` and ``line`` (host line of the call or launch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import networkx as nx

from .names import aten_name, is_compute

if TYPE_CHECKING:
    from .facts import CudaFacts
    from .records import Function


def node_name(fn: Function) -> str:
    prefix = {"kernel": "kernel", "device": "device"}.get(fn.kind, "cpp")
    return f"{prefix}:{fn.ext}:{fn.name}"


def cuda_graph(facts: CudaFacts) -> nx.DiGraph:
    g = nx.DiGraph()
    for fn in facts.functions:
        g.add_node(node_name(fn), kind=fn.kind if fn.kind != "host" else "cpp", ext=fn.ext, name=fn.name,
                   line=fn.pos.line, unit=fn.unit.id)
    for x in facts.extensions.values():
        for e in x.exports:
            g.add_node(e.node_name, kind="export", ext=x.name, name=e.name,
                       line=e.pos.line if e.pos else 0, unit=e.pos.unit if e.pos else None)
            for fn in x.lookup(e.target, "host", "kernel"):
                g.add_edge(e.node_name, node_name(fn), kind="binds", line=e.pos.line if e.pos else 0)
    for fn in facts.functions:
        src = node_name(fn)
        x = facts.extensions[fn.ext]
        for call in fn.calls:
            if not call.is_method:
                targets = [t for t in x.lookup(call.name) if t is not fn or call.base == fn.name]
                if targets and call.namespace in ("", "detail"):
                    for t in targets:
                        g.add_edge(src, node_name(t), kind="calls", line=call.pos.line)
                    continue
            aten = aten_name(call.name)
            if aten is not None and fn.kind == "host":
                if aten not in g:
                    g.add_node(aten, kind="aten", name=aten[5:], compute=is_compute(call.name), ext=None)
                g.add_edge(src, aten, kind="calls", line=call.pos.line)
        for lc in fn.launches:
            k = x.kernel(lc.kernel)
            if k is not None:
                g.add_edge(src, node_name(k), kind="launches", line=lc.pos.line)
            else:
                ghost = f"kernel:{fn.ext}:{lc.kernel}"
                if ghost not in g:
                    g.add_node(ghost, kind="kernel", ext=fn.ext, name=lc.kernel, line=0, unit=None, defined=False)
                g.add_edge(src, ghost, kind="launches", line=lc.pos.line)
    return g


__all__ = ["cuda_graph", "node_name", "aten_name", "is_compute"]
