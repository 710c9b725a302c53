"""HS221: the output a kernel writes does not depend on the input's data (class 6, the CUDA side of HS110).

``out[row] = 0.5f`` for the mean of ``torch.rand`` rows, or ``y[i] = bias[i % n]`` for a layer whose
input never reaches the kernel: the kernel runs, the output is written (HS207 is satisfied), and a
harness that draws its inputs from one distribution cannot tell it from the computation.  The dynamic
stage probes this with other inputs (HS402); this is the static signal, read from the kernels that
write a returned allocation: none of them reads a pointer that carries forward's input data.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ...context import Hit, ScanContext
from ...cuda.flow import UNINITIALISED, CudaFlow, Origin
from ...cuda.parser import text
from ...cuda.records import Export, Function, pos_of

# calls whose result is a size, not data
_METADATA = frozenset({"size", "sizes", "numel", "dim", "stride", "strides", "size_t", "data_ptr", "get_device",
                       "element_size", "nbytes", "itemsize", "ndimension", "min", "max", "static_cast",
                       "getCurrentCUDAStream", "stream"})


def cuda_input_independent_output(ctx: ScanContext) -> Iterator[Hit]:
    """HS221: every kernel that stores to an exported function's returned allocation reads no pointer
    parameter except the output itself and tensors the Python side passes from module state (a bias).

    Left alone: a kernel that reads any other pointer (an input, a scratch buffer another launch wrote,
    a pointer it cannot trace), an output any host call or library may write, a kernel reached through
    a struct of pointers or a device lambda, and an export whose Python call sites cannot be found.
    """
    facts = ctx.cuda
    if not facts.exports:
        return
    flow = ctx.cuda_flow
    for export, fn in facts.exported_host_functions():
        outs = _returned_allocations(flow, fn)
        if not outs:
            continue
        for alloc, ret_value in outs:
            why = _independent(ctx, flow, fn, export, alloc)
            if why is None:
                continue
            kernels, reads = why
            shown = " ".join(text(ret_value).split())[:40]
            read_text = (", which reads only " + ", ".join(f"`{r}`" for r in reads)) if reads else \
                ", which reads no tensor at all"
            yield ctx.hit(pos_of(alloc.function.unit if alloc.function else fn.unit, alloc.node),
                          args={"var": shown, "function": fn.name, "kernels": ", ".join(f"`{k}`" for k in kernels),
                                "reads": read_text},
                          evidence={"export": export.name, "kernels": kernels, "reads": reads})


def _returned_allocations(flow: CudaFlow, fn: Function) -> list[tuple[Origin, object]]:
    out = []
    seen: set[int] = set()
    for r in flow.returns(fn):
        if r.value is None:
            continue
        for o in flow.origins(r.value, fn):
            if o.kind == "alloc" and o.detail in UNINITIALISED and o.node is not None and not o.maybe and \
                    o.node.id not in seen:
                seen.add(o.node.id)
                out.append((o, r.value))
    return out


def _independent(ctx: ScanContext, flow: CudaFlow, fn: Function, export: Export,
                 alloc: Origin) -> tuple[list[str], list[str]] | None:
    """(kernels writing ``alloc``, state tensors they read) when none of them reads input data; else None."""
    facts = ctx.cuda
    writers: list[str] = []
    reads: list[str] = []
    for lc in flow.launches_from(fn):
        kernel = facts.kernel_for(lc)
        stores_alloc = False
        arg_origins: list[list[Origin]] = []
        for idx, arg in enumerate(lc.args):
            if arg.type == "lambda_expression":
                return None
            origins = flow.origins(arg, lc.function)
            arg_origins.append(origins)
            if any(o.node is alloc.node for o in origins):
                if kernel is None or any(o.aggregate for o in origins):
                    return None
                if flow.stores(kernel).stores(idx):
                    stores_alloc = True
        if not stores_alloc or kernel is None:
            continue
        body = kernel.body.text or b"" if kernel.body is not None else b""
        writers.append(kernel.name)
        for idx, p in enumerate(kernel.params):
            # a word search on the body's bytes, not a walk of its identifiers: most kernels read ``x``;
            # a member (``blockIdx.x``, ``p->x``) is not the parameter
            if idx >= len(arg_origins) or not _mentions(body, p.name.encode()):
                continue
            if not p.pointer:
                # a scalar computed on the host from the input's values (``x.mean().item<float>()``)
                # carries its data: only sizes, literals and constants are data-free
                if any(o.kind in ("aten", "call", "unknown") and
                       o.detail.rsplit("::", 1)[-1].rsplit(".", 1)[-1] not in _METADATA for o in arg_origins[idx]):
                    return None
                continue
            origins = arg_origins[idx]
            if any(o.node is alloc.node for o in origins):
                continue  # the output itself (``y[i] += ...``)
            if not origins:
                return None
            for o in origins:
                if o.kind != "input":
                    return None  # a scratch buffer, a copy, state: may carry the input's data
                how = _python_side(ctx, export, o.index)
                if how != "state":
                    return None
            reads.append(p.name)
    if not writers:
        return None
    # asked last, for the rare output no kernel fills from data: a host loop may write it too
    for host_fn in flow.host_closure(fn):
        if any(alloc.node is o.node for _node, origins in flow.host_stores(host_fn) for o in origins):
            return None
    return writers, reads


_WORD = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def _mentions(body: bytes, name: bytes) -> bool:
    """``name`` as a whole identifier in ``body`` and not a member (``blockIdx.x``, ``p->x``); a byte
    search, since compiling a regular expression per parameter name costs more than the rule."""
    i = body.find(name)
    n = len(name)
    while i >= 0:
        before = body[i - 1] if i else 32
        after = body[i + n] if i + n < len(body) else 32
        if before not in _WORD and after not in _WORD and before != 46 and not (before == 62 and i > 1 and
                                                                                body[i - 2] == 45):
            return True
        i = body.find(name, i + 1)
    return False


def _python_side(ctx: ScanContext, export: Export, index: int) -> str:
    """``state`` when every Python call of ``export`` passes argument ``index`` from module state
    (``self.bias``) and no value of forward's inputs reaches it; ``input`` otherwise."""
    flow = ctx.model_flow
    if flow is None:
        return "input"
    found = False
    for k in flow.kernels:
        if k.kind != "extension" or k.target != export.name:
            continue
        call = k.node
        if index >= len(call.args) or any(isinstance(a, ast.Starred) for a in call.args[:index + 1]):
            return "input"
        arg_flow = flow.flow_of(call.args[index])
        if arg_flow is None or arg_flow.inputs or arg_flow.alias or not arg_flow.state:
            return "input"
        found = True
    return "state" if found else "input"



