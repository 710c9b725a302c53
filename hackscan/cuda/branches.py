"""Branches in host functions: what their conditions read and what their arms do.

Value guards (class 1), environment / call-counter switches (class 11), early passthrough returns
(class 6) and shape fast paths (class 2) all come down to the same question about an ``if``: does
its condition depend on X, and does one arm return or skip the launch that the other arm (or the
rest of the function) performs?
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import tree_sitter as ts

from . import names
from .parser import contains, identifiers, text

if TYPE_CHECKING:
    from .facts import CudaFacts
    from .flow import CudaFlow
    from .records import Function, Launch

# host reads of tensor *values* (they synchronise and copy device data to the host)
VALUE_READ_METHODS = frozenset({"item", "equal", "allclose", "is_nonzero", "cpu", "tolist", "accessor"})
VALUE_READ_FUNCS = frozenset({"equal", "allclose", "is_nonzero"})
_D2H = re.compile(r"cudaMemcpy(DeviceToHost|Default)|CU_MEMORYTYPE_HOST|DtoH")
# conditions that only look at sizes, devices, dtypes or definedness: never value guards
_SHAPE_ONLY = re.compile(r"\b(numel|size|sizes|dim|ndimension|is_cuda|is_contiguous|scalar_type|dtype|device|defined|"
                         r"stride|strides|is_cpu|layout)\s*\(")


_EMPTY_CHECK = re.compile(r"numel\(\)\s*(==|<=)\s*0|numel\(\)\s*<\s*1|!\s*[\w.()]*numel\(\)|"
                          r"size\(\s*-?\d+\s*\)\s*==\s*0|\bdefined\(\)|\.empty\(\)|==\s*0\s*\)?\s*$")


def is_empty_check(cond: ts.Node) -> bool:
    """``x.numel() == 0`` and friends: returning early on an empty input is not a shortcut."""
    return bool(_EMPTY_CHECK.search(text(cond)))


def in_empty_branch(node: ts.Node, stop: ts.Node | None = None) -> bool:
    """Is ``node`` inside the arm of an ``if`` that tests for an empty input?"""
    cur = node.parent
    while cur is not None and cur != stop:
        if cur.type == "if_statement":
            cond = cur.child_by_field_name("condition")
            then = cur.child_by_field_name("consequence")
            if cond is not None and then is not None and contains(then, node) and is_empty_check(cond):
                return True
        cur = cur.parent
    return False


@dataclass(frozen=True)
class ValueRead:
    node: ts.Node  # the call (or deref) that reads tensor values on the host
    what: str  # short description for messages: ``x.min().item()``


@dataclass(frozen=True)
class Arm:
    node: ts.Node | None
    returns: bool  # has a return statement
    launches: bool  # launches a kernel (directly or through a host helper)
    return_nodes: tuple[ts.Node, ...] = ()


@dataclass(frozen=True)
class Branch:
    node: ts.Node  # if_statement / conditional_expression
    condition: ts.Node
    then: Arm
    other: Arm  # the else arm; ``node`` None when there is none


def value_reads(fn: Function, facts: CudaFacts | None = None, _depth: int = 0) -> list[ValueRead]:
    """Host reads of tensor values in ``fn``; with ``facts``, calls of host helpers that read
    values and return something count too (``if (looks_nonnegative(x)) return x;``).

    With ``facts`` the list is worked out once per function and depth and shared by every caller
    (the facts are fixed once built): do not change it."""
    if facts is not None:
        key = (id(fn), _depth)
        got = facts._value_reads.get(key)
        if got is None:
            got = facts._value_reads[key] = _value_reads(fn, facts, _depth)
        return got
    return _value_reads(fn, None, _depth)


def _value_reads(fn: Function, facts: CudaFacts | None, _depth: int) -> list[ValueRead]:
    out: list[ValueRead] = []
    if facts is not None and _depth < 3:
        x = facts.extensions[fn.ext]
        for c in fn.calls:
            if c.is_method:
                continue
            for g in x.lookup(c.name, "host"):
                if g is fn or _returns_void(g):
                    continue
                inner = value_reads(g, facts, _depth + 1)
                if inner:
                    out.append(ValueRead(c.node, f"{_short(c.node)}, which reads {inner[0].what}"))
                    break
    for c in fn.calls:
        base = c.base
        if c.is_method and base in VALUE_READ_METHODS:
            out.append(ValueRead(c.node, _short(c.node)))
        elif not c.is_method and c.namespace in ("at", "torch", "") and base in VALUE_READ_FUNCS:
            out.append(ValueRead(c.node, _short(c.node)))
        elif names.MEMCPY_D2H.fullmatch(base) and any(_D2H.search(text(a)) for a in c.args[3:5]):
            out.append(ValueRead(c.node, _short(c.node)))
    # ``std::all_of(p, p + x.numel(), pred)`` / ``std::accumulate`` / ``std::max_element`` over a host
    # pointer into a tensor (``p = x.data_ptr<float>()``): a standard algorithm reads every value
    for c in fn.calls:
        if not c.is_method and c.namespace == "std" and c.base in _STD_VALUE_READS and c.args and \
                _tensor_data(fn, c.args[0]):
            out.append(ValueRead(c.node, _short(c.node)))
    # ``*x.data_ptr<float>()`` / ``x.data_ptr<float>()[0]`` in host code
    for c in fn.calls:
        if c.is_method and c.base in ("data_ptr", "data", "const_data_ptr"):
            parent = c.node.parent
            if parent is not None and (
                    (parent.type == "pointer_expression" and parent.child_by_field_name("operator") is not None
                     and parent.child_by_field_name("operator").type == "*")
                    or (parent.type == "subscript_expression" and parent.child_by_field_name("argument") == c.node)):
                out.append(ValueRead(parent, _short(parent)))
    return out


# standard algorithms that read the values of the range they are given
_STD_VALUE_READS = frozenset({"all_of", "any_of", "none_of", "accumulate", "reduce", "max_element", "min_element",
                              "minmax_element", "count_if", "count", "find_if", "find", "inner_product"})
_DATA_METHODS = (".data_ptr", ".data<", ".const_data_ptr", ".mutable_data_ptr")  # not a std::vector's .data()


def _tensor_data(fn: Function, arg: ts.Node, depth: int = 0) -> bool:
    """``arg`` is a tensor's data pointer: ``x.data_ptr<float>()`` itself or a local assigned from one."""
    if any(m in text(arg) for m in _DATA_METHODS):
        return True
    if arg.type == "identifier" and depth < 2:
        return any(_tensor_data(fn, v, depth + 1) for v in fn.assigned.get(text(arg), ()))
    return False


def _returns_void(fn: Function) -> bool:
    ret = fn.node.child_by_field_name("type")
    return ret is not None and text(ret) == "void"


def _short(node: ts.Node) -> str:
    s = " ".join(text(node).split())
    return s if len(s) <= 60 else s[:57] + "..."


def tainted_names(fn: Function, seeds: Iterable[ts.Node]) -> set[str]:
    """Locals whose value derives from one of the seed expressions (assignment chains, fixpoint)."""
    seed_list = list(seeds)
    # a copy's own value is its status code: only the destination it fills carries tensor data
    data_seeds = [s for s in seed_list if not is_status_copy(s)]
    tainted: set[str] = set()
    changed = True
    rounds = 0
    while changed and rounds < 8:
        changed = False
        rounds += 1
        for name, values in fn.assigned.items():
            if name in tainted:
                continue
            for v in values:
                if any(contains(v, s) for s in data_seeds) or (tainted and _mentions(v, tainted)):
                    tainted.add(name)
                    changed = True
                    break
    # ``cudaMemcpy(&host_val, dev, ..., DeviceToHost)``: the destination is tainted too
    for s in seed_list:
        if s.type == "call_expression" and "cudaMemcpy" in text(s.child_by_field_name("function")):
            args = s.child_by_field_name("arguments")
            if args is not None and args.named_child_count:
                for ident in identifiers(args.named_children[0]):
                    tainted.add(text(ident))
                    break
    return tainted


def is_status_copy(node: ts.Node) -> bool:
    """``node`` is a device-to-host copy call (``cudaMemcpy``, ``cuMemcpyDtoH``): what it returns is a
    ``cudaError_t`` / ``CUresult``, and the tensor values land in its destination argument."""
    if node.type != "call_expression":
        return False
    fn = node.child_by_field_name("function")
    return fn is not None and names.MEMCPY_D2H.fullmatch(text(fn).split("::")[-1]) is not None


def _mentions(node: ts.Node, wanted: set[str]) -> bool:
    return any(text(i) in wanted for i in identifiers(node))


def depends_on(cond: ts.Node, seeds: list[ts.Node], tainted: set[str]) -> ts.Node | None:
    """The seed (or a tainted identifier) the condition reads, or None.  ``cudaMemcpy(...) !=
    cudaSuccess`` reads the copy's error code, not the values it copied."""
    for s in seeds:
        if contains(cond, s) and not is_status_copy(s):
            return s
    if tainted:
        # ``&host`` handed to a copy inside the condition is where the copy writes, not a read
        copies = [s for s in seeds if is_status_copy(s) and contains(cond, s)]
        for ident in identifiers(cond):
            if text(ident) in tainted and not any(contains(c, ident) for c in copies):
                return ident
    return None


def branches(fn: Function, flow: CudaFlow) -> list[Branch]:
    """Every ``if`` of a host function with what its arms do."""
    out: list[Branch] = []
    launch_nodes = _launch_sites(fn, flow)
    for node in fn.of_type("if_statement"):
        cond = node.child_by_field_name("condition")
        then = node.child_by_field_name("consequence")
        alt = node.child_by_field_name("alternative")
        if cond is None or then is None:
            continue
        out.append(Branch(node, cond, _arm(then, fn, launch_nodes), _arm(alt, fn, launch_nodes)))
    return out


def _arm(node: ts.Node | None, fn: Function, launch_nodes: list[ts.Node]) -> Arm:
    if node is None:
        return Arm(None, False, False)
    # a lambda's ``return`` (``std::any_of(b, e, [](float v) { return !isfinite(v); })`` in an
    # ``else if`` condition) returns from the lambda, not from the function
    rets = tuple(r for r in fn.of_type("return_statement") if contains(node, r) and not _in_lambda(r, node))
    launches = any(contains(node, n) for n in launch_nodes)
    return Arm(node, bool(rets), launches, rets)


def _in_lambda(node: ts.Node, within: ts.Node) -> bool:
    cur = node.parent
    while cur is not None and cur != within:
        if cur.type == "lambda_expression":
            return True
        cur = cur.parent
    return False


def _launch_sites(fn: Function, flow: CudaFlow) -> list[ts.Node]:
    """Nodes in ``fn`` that do the work: kernel launches, calls of host helpers that launch, and
    for CPU extensions the host loops that write tensor memory (``at::parallel_for``, stores
    through a ``data_ptr``)."""
    cached = flow._work_sites.get(id(fn))
    if cached is not None:
        return cached
    sites = [lc.node for lc in fn.launches]
    x = flow.facts.extensions[fn.ext]
    for c in fn.calls:
        if c.is_method:
            continue
        if c.base in ("parallel_for", "parallel_reduce"):
            sites.append(c.node)
            continue
        for g in x.lookup(c.name, "host"):
            if g is not fn and (flow.launches_from(g) or _writes_tensors(g, flow)):
                sites.append(c.node)
                break
    for node, origins in flow.host_stores(fn):
        if any(o.kind in ("alloc", "input", "copy") for o in origins):
            sites.append(node)
    flow._work_sites[id(fn)] = sites
    return sites


def _writes_tensors(fn: Function, flow: CudaFlow) -> bool:
    return any(any(o.kind in ("alloc", "input", "copy") for o in origins) for _, origins in flow.host_stores(fn))


def launch_effect(br: Branch, fn: Function, flow: CudaFlow) -> tuple[str, bool]:
    """What a branch does to the launch, and whether that skips or shortcuts it."""
    elsewhere = launches_after(fn, flow, br.node)
    then, other = br.then, br.other
    if then.returns and not then.launches and (elsewhere or other.launches):
        return "returns without launching the kernel", True
    if other.node is not None and other.returns and not other.launches and (elsewhere or then.launches):
        return "returns without launching the kernel on its else branch", True
    if then.launches != other.launches and not elsewhere:
        return "launches the kernel on one branch only", True
    if then.launches and other.launches:
        a = arm_kernels(then.node, fn, flow)
        b = arm_kernels(other.node, fn, flow)
        trivial_a = bool(a) and all(trivial_kernel(k, flow) for k in a)
        trivial_b = bool(b) and all(trivial_kernel(k, flow) for k in b)
        if trivial_a != trivial_b:
            cheap = a if trivial_a else b
            return f"launches only a copy/fill kernel (`{cheap[0].name}`) on one branch", True
        return "launches a different kernel depending on them", False
    return "", False


def arm_kernels(node: ts.Node | None, fn: Function, flow: CudaFlow) -> list[Function]:
    """Kernels launched inside ``node`` (directly or through host helpers called there)."""
    if node is None:
        return []
    x = flow.facts.extensions[fn.ext]
    out: list[Function] = []
    for lc in fn.launches:
        if contains(node, lc.node):
            k = x.kernel(lc.kernel)
            if k is not None:
                out.append(k)
    for c in fn.calls:
        if c.is_method or not contains(node, c.node):
            continue
        for g in x.lookup(c.name, "host"):
            if g is not fn:
                for lc in flow.launches_from(g):
                    k = x.kernel(lc.kernel)
                    if k is not None:
                        out.append(k)
    return out


def trivial_kernel(kernel: Function, flow: CudaFlow) -> bool:
    """A kernel whose every store writes a plain load of another parameter or a literal: a copy or
    a fill, the cheap arm of a data-dependent shortcut."""
    stores = flow.stores(kernel)
    sites = [s for sites in stores.by_param.values() for s in sites]
    if not sites or any(s.how != "assign" for s in sites):
        return False
    for s in sites:
        right = s.node.child_by_field_name("right")
        op = s.node.child_by_field_name("operator")
        if right is None or op is None or op.type != "=":
            return False
        r = right
        while r.type == "parenthesized_expression" and r.named_child_count:
            r = r.named_children[0]
        if r.type not in ("subscript_expression", "number_literal", "pointer_expression", "identifier"):
            return False
        if r.type == "identifier" and text(r) not in ("0", "zero"):
            # ``y[i] = v;`` where v was computed: trivial only if v is itself a plain load
            values = kernel.assigned.get(text(r), [])
            if not values or any(v.type not in ("subscript_expression", "number_literal") for v in values):
                return False
    return True


def launches_after(fn: Function, flow: CudaFlow, node: ts.Node) -> bool:
    """Does ``fn`` launch (directly or through a helper) anywhere outside ``node``?"""
    return any(not contains(node, s) for s in _launch_sites(fn, flow))


def launch_sites(fn: Function, flow: CudaFlow) -> list[ts.Node]:
    return _launch_sites(fn, flow)


def is_shape_only(cond: ts.Node) -> bool:
    return bool(_SHAPE_ONLY.search(text(cond)))


def enclosing(node: ts.Node, types: Iterable[str], stop: ts.Node | None = None) -> ts.Node | None:
    wanted = set(types)
    cur = node.parent
    while cur is not None and cur != stop:
        if cur.type in wanted:
            return cur
        cur = cur.parent
    return None


def in_condition(node: ts.Node, stop: ts.Node | None = None) -> ts.Node | None:
    """The if / conditional / switch / loop whose *condition* contains ``node``, if any."""
    child = node
    cur = node.parent
    while cur is not None and cur != stop:
        t = cur.type
        if t in ("if_statement", "while_statement", "switch_statement", "do_statement"):
            cond = cur.child_by_field_name("condition")
            if cond is not None and contains(cond, node):
                return cur
            return None
        if t == "conditional_expression":
            cond = cur.child_by_field_name("condition")
            if cond is not None and contains(cond, node):
                return cur
        if t in ("compound_statement", "expression_statement", "declaration", "for_statement"):
            return None
        child = cur
        cur = cur.parent
    del child
    return None


def first(items: Iterable, pred: Callable) -> object | None:
    for i in items:
        if pred(i):
            return i
    return None


__all__ = ["ValueRead", "Arm", "Branch", "value_reads", "tainted_names", "depends_on", "branches", "launch_effect",
           "launches_after", "launch_sites", "is_shape_only", "enclosing", "in_condition", "Launch"]
