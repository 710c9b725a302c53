"""Data flow over the C++ facts: what a kernel stores to, where a launch argument comes from, what
an exported function returns, and which host values feed which branch.

Flow-insensitive and intra-extension by design: a local's value is the union of everything
assigned to it, a host function's parameter is the union of what its call sites pass, and a
``__device__`` helper's stores count as its kernel's.  That is what these files need (outputs are
allocated, passed down one or two helpers and launched on) and it keeps the analysis linear.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import tree_sitter as ts

from ..util.lazy import cached_property
from . import names
from .consts import fold
from .parser import call_args, callee_name, contains, identifiers, strip_parens, text

if TYPE_CHECKING:
    from .facts import CudaFacts
    from .records import Call, Function, Launch, Param, Variable

ALLOC_CALLS = frozenset({"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
                         "full_like", "new_empty", "new_zeros", "new_ones", "new_full", "new_empty_strided",
                         "rand", "randn", "rand_like", "randn_like", "arange", "tensor", "from_blob"})
# allocations whose contents are undefined until something writes them (class 7: stale memory)
UNINITIALISED = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})
# calls and methods that give the same storage back (or a view of it)
ALIAS_METHODS = frozenset({"data_ptr", "data", "const_data_ptr", "mutable_data_ptr", "contiguous", "view", "reshape",
                           "flatten", "unsqueeze", "squeeze", "view_as", "reshape_as", "expand", "expand_as",
                           "transpose", "t", "permute", "narrow", "select", "slice", "as_strided", "unflatten",
                           "packed_accessor", "packed_accessor32", "packed_accessor64", "accessor", "to", "cuda",
                           "type", "toType", "unsqueeze_", "squeeze_", "resize_", "view_as_real", "detach",
                           "generic_packed_accessor", "get", "value", "stream", "at"})
# methods that may or may not copy: ``x.contiguous()`` is ``x`` when it already is
MAYBE_COPY = frozenset({"contiguous", "to", "cuda", "type", "toType", "reshape"})
COPY_METHODS = frozenset({"clone", "copy", "detach_clone", "cpu"})
CAST_CALLS = frozenset({"reinterpret_cast", "static_cast", "const_cast", "dynamic_cast", "__cvta_generic_to_global"})
ATOMIC_PREFIX = ("atomic", "__atomic", "__nv_atomic", "red_", "cuda::atomic")
STORE_INTRINSICS = frozenset({"__stcs", "__stcg", "__stwb", "__stwt", "store_matrix_sync", "memcpy", "memset",
                              "__pipeline_memcpy_async", "cudaMemcpyAsync", "cudaMemsetAsync", "cudaMemcpy",
                              "cudaMemset", "st_global", "store", "__builtin_memcpy", "cp_async", "stmatrix"})
# host calls that write through their first argument (``host_fills``)
HOST_FILLS = frozenset({"memset", "memcpy", "memmove", "__builtin_memset", "__builtin_memcpy", "cudaMemset",
                        "cudaMemsetAsync", "cudaMemcpy", "cudaMemcpyAsync", "cudaMemset2D", "cudaMemset2DAsync",
                        "cudaMemcpy2D", "cudaMemcpy2DAsync", "cuMemsetD8", "cuMemsetD32", "cuMemsetD8Async",
                        "cuMemsetD32Async", "fill", "fill_n"})
# kernel-side calls that read pointers but never store through them
PURE_READS = frozenset({"__ldg", "__ldcs", "__ldca", "__ldcg", "__ldlu", "__ldcv", "load_matrix_sync", "printf",
                        "min", "max", "fminf", "fmaxf", "__shfl_sync", "__shfl_down_sync", "__shfl_xor_sync",
                        "__shfl_up_sync", "sizeof", "assert", "__builtin_assume_aligned", "__prefetch_global_l2",
                        "__syncthreads", "__syncwarp", "prefetch", "__ldg4", "__builtin_prefetch"})


@dataclass(frozen=True)
class Origin:
    """Where a host value comes from.

    kind: ``alloc`` (a torch factory: ``detail`` names it), ``input`` (an exported function's
    parameter: the tensor Python passed), ``param`` (a parameter of a function nobody in the
    extension calls), ``copy`` (``.clone()``), ``aten`` (the result of another torch call),
    ``global`` / ``static`` (state that outlives the call), ``literal``, ``unknown``.
    """

    kind: str
    function: Function | None = None
    detail: str = ""
    index: int = -1  # parameter index for input / param
    node: ts.Node | None = None  # the expression that created the value
    maybe: bool = False  # through ``contiguous()`` / ``to()``: the same storage only sometimes
    var: Variable | None = None
    # one member of a struct / brace list passed as a whole (``Params p{x_ptr, y_ptr, n}``): a
    # store through the struct may or may not be a store to this member
    aggregate: bool = False

    def __repr__(self) -> str:
        where = self.function.name if self.function is not None else "-"
        return f"Origin({self.kind} {self.detail} {where}#{self.index}{' maybe' if self.maybe else ''})"


@dataclass
class StoreSite:
    node: ts.Node
    how: str  # assign | atomic | intrinsic | call:<fn> | asm | escape:<fn>

    @property
    def certain(self) -> bool:
        return not self.how.startswith(("escape", "asm"))


@dataclass
class Stores:
    """Per parameter index of a kernel / device function: the sites that store through it."""

    by_param: dict[int, list[StoreSite]] = field(default_factory=dict)

    def add(self, index: int, site: StoreSite) -> None:
        self.by_param.setdefault(index, []).append(site)

    def stores(self, index: int) -> bool:
        return bool(self.by_param.get(index))

    def certain(self, index: int) -> bool:
        return any(s.certain for s in self.by_param.get(index, ()))


# the node types ``strip_casts`` may look through; it returns a node of any other type unchanged
_CAST_WRAPPERS = frozenset({"parenthesized_expression", "cast_expression", "call_expression"})


def strip_casts(node: ts.Node) -> ts.Node:
    """Remove parentheses, C casts and ``*_cast<T>(x)``."""
    for _ in range(16):
        node = strip_parens(node)
        t = node.type
        if t == "cast_expression":
            value = node.child_by_field_name("value")
            if value is None:
                return node
            node = value
            continue
        if t == "call_expression":
            func = node.child_by_field_name("function")
            if func is not None and func.type == "template_function" and callee_name(func) in CAST_CALLS:
                args = call_args(node)
                if len(args) == 1:
                    node = args[0]
                    continue
        return node
    return node


def pointer_base(node: ts.Node, known: Container[str] | None = None) -> ts.Node | None:
    """The identifier a pointer expression is based on: ``out`` for ``out + i``, ``&out[i]``,
    ``reinterpret_cast<float4*>(out)[i]``, ``*(out + i)``, ``acc[b][i]``, ``out4[i].x``.

    With ``known`` (the names that are pointers), ``i + out`` resolves to ``out``."""
    cur: ts.Node | None = node
    for _ in range(24):
        if cur is None:
            return None
        cur = strip_casts(cur)
        t = cur.type
        if t == "identifier":
            return cur
        if t in ("subscript_expression", "pointer_expression", "field_expression"):
            cur = cur.child_by_field_name("argument")
        elif t == "binary_expression":
            op = cur.child_by_field_name("operator")
            if op is None or op.type not in ("+", "-"):
                return None
            left = cur.child_by_field_name("left")
            found = pointer_base(left, known) if left is not None else None
            if found is not None and (known is None or text(found) in known):
                return found
            cur = cur.child_by_field_name("right")
        elif t == "conditional_expression":
            cur = cur.child_by_field_name("consequence")
        else:
            return None
    return None


_SCALAR_TYPES = re.compile(r"^(const)?(unsigned|signed)?(int|long|longlong|short|char|float|double|bool|size_t|half|__half|"
                           r"u?int\d+_t|int64_t|scalar_t|T|__nv_bfloat16|half2|__half2|float[234]|int[234]|dim3|"
                           r"uint[234]|c10::Half|at::Half|auto)&?$")


def _struct_param(p: Param) -> bool:
    """A by-value struct parameter (``Params p``): kernels store through its pointer members."""
    return not p.tensor and not _SCALAR_TYPES.match(p.type)


def pointer_arg(node: ts.Node, known: Container[str]) -> ts.Node | None:
    """The pointer an argument passes, if it passes one: ``out``, ``out + off``, ``&out[i]``,
    ``(float4*)out``; not ``out[i]`` (a value)."""
    cur = strip_casts(node)
    t = cur.type
    if t == "identifier":
        return cur if text(cur) in known else None
    if t == "pointer_expression":
        op = cur.child_by_field_name("operator")
        if op is not None and op.type == "&":
            arg = cur.child_by_field_name("argument")
            return pointer_base(arg, known) if arg is not None else None
        return None
    if t == "binary_expression":
        op = cur.child_by_field_name("operator")
        if op is None or op.type not in ("+", "-"):
            return None
        for f in ("left", "right"):
            sub = cur.child_by_field_name(f)
            if sub is not None:
                got = pointer_arg(sub, known)
                if got is not None:
                    return got
        return None
    if t == "conditional_expression":
        for f in ("consequence", "alternative"):
            sub = cur.child_by_field_name(f)
            if sub is not None:
                got = pointer_arg(sub, known)
                if got is not None:
                    return got
    return None


class CudaFlow:
    """Analyses over one submission's ``CudaFacts``; every result is cached."""

    def __init__(self, facts: CudaFacts):
        self.facts = facts
        self._stores: dict[int, Stores] = {}
        self._aliases: dict[int, dict[str, int]] = {}
        # per function: the nodes that do its work (see branches.launch_sites)
        self._work_sites: dict[int, list[ts.Node]] = {}
        # ``origins`` of (expression node id, function id), for the questions asked from outside
        self._origins: dict[tuple[int, int], list[Origin]] = {}
        self._host_stores: dict[int, list[tuple[ts.Node, list[Origin]]]] = {}
        # per function: None for an entry point, else its call sites (``_origins_of_param``)
        self._callers: dict[int, tuple[bool, list[tuple[Function, Call]]]] = {}

    # ------------------------------------------------------------------ kernel stores
    def aliases(self, fn: Function) -> dict[str, int]:
        """Pointer name -> the parameter index it points into: the pointer parameters themselves
        and locals like ``float* row = out + r * n`` or ``float& acc = out[i]``."""
        got = self._aliases.get(id(fn))
        if got is not None:
            return got
        amap: dict[str, int] = {p.name: p.index for p in fn.params if p.name and (p.pointer or _struct_param(p))}
        changed = True
        rounds = 0
        while changed and rounds < 6:
            changed = False
            rounds += 1
            for name, values in fn.assigned.items():
                if name in amap:
                    continue
                ltype = fn.local_types.get(name, "")
                reference = ltype.endswith("&")
                if "*" not in ltype and not reference and not ltype.startswith("auto"):
                    continue
                for v in values:
                    if reference:
                        base = pointer_base(v, amap)
                    else:
                        base = pointer_arg(v, amap)
                    if base is not None:
                        b = text(base)
                        if b in amap and b != name:
                            amap[name] = amap[b]
                            changed = True
                            break
        self._aliases[id(fn)] = amap
        return amap

    def stores(self, fn: Function, _stack: tuple[int, ...] = ()) -> Stores:
        """Which parameters of a kernel / device function are stored through, and where."""
        got = self._stores.get(id(fn))
        if got is not None:
            return got
        out = Stores()
        if id(fn) in _stack or len(_stack) > 8:
            return out
        amap = self.aliases(fn)
        params = {p.index for p in fn.params}

        def param_of(node: ts.Node | None) -> int | None:
            if node is None:
                return None
            base = pointer_base(node, amap)
            if base is None:
                return None
            return amap.get(text(base))

        for asg in fn.of_type("assignment_expression"):
            left = asg.child_by_field_name("left")
            if left is None:
                continue
            # ``strip_casts`` returns a node of any other type as it is: most stores go to a local
            # or through a subscript, which need no call
            lt = left.type
            if lt == "identifier" or (lt in _CAST_WRAPPERS and strip_casts(left).type == "identifier"):
                continue
            idx = param_of(left)
            if idx is not None:
                out.add(idx, StoreSite(asg, "assign"))
        for upd in fn.of_type("update_expression"):
            arg = upd.child_by_field_name("argument")
            if arg is not None and arg.type != "identifier" and (
                    arg.type not in _CAST_WRAPPERS or strip_casts(arg).type != "identifier"):
                idx = param_of(arg)
                if idx is not None:
                    out.add(idx, StoreSite(upd, "assign"))
        self._call_stores(fn, out, param_of, amap, _stack)
        for asm in fn.of_type("gnu_asm_expression"):
            body = text(asm)
            if "st." not in body and "red." not in body and "atom." not in body and "cp." not in body:
                continue
            for ident in identifiers(asm):
                idx = amap.get(text(ident))
                if idx is not None:
                    out.add(idx, StoreSite(asm, "asm"))
        out.by_param = {k: v for k, v in out.by_param.items() if k in params}
        self._stores[id(fn)] = out
        return out

    def _call_stores(self, fn: Function, out: Stores, param_of: Callable[[ts.Node | None], int | None],
                     amap: dict[str, int], _stack: tuple[int, ...]) -> None:
        """The stores ``fn``'s calls make through its parameters: atomics and store intrinsics, methods
        of atomic refs and functors, helpers that store through a pointer argument (followed)."""
        x = self.facts.extensions[fn.ext]
        # by-value functors / parameter structs (not accessors, which index like pointers)
        struct_params = {p.name: p.index for p in fn.params
                         if p.name and _struct_param(p) and not p.pointer and not p.const}
        for call in fn.calls:
            base = call.base
            if call.is_method:
                # ``ptr.store(...)`` / ``ref.fetch_add`` on cuda::atomic_ref
                recv = call.receiver
                idx = param_of(recv) if recv is not None else None
                if idx is not None and base in ("store", "fetch_add", "fetch_max", "fetch_min", "exchange"):
                    out.add(idx, StoreSite(call.node, "atomic"))
                elif recv is not None and recv.type == "identifier" and text(recv) in struct_params:
                    # ``op.apply(i)`` on a functor parameter: its members may be stored through
                    out.add(struct_params[text(recv)], StoreSite(call.node, f"escape:{text(recv)}{call.name}"))
                continue
            if call.name in struct_params:  # ``f(i)``: a functor / device lambda parameter
                out.add(struct_params[call.name], StoreSite(call.node, f"escape:{call.name}()"))
                continue
            args = call.args
            if not args:
                continue
            if base.startswith(ATOMIC_PREFIX) or base in STORE_INTRINSICS:
                idx = param_of(args[0])
                if idx is not None:
                    out.add(idx, StoreSite(call.node, "atomic" if base.startswith(ATOMIC_PREFIX) else "intrinsic"))
                continue
            if base in PURE_READS or base in CAST_CALLS:
                continue
            callees = x.lookup(call.name, "device", "host")
            if not callees and base[:1].isupper() and "::" not in call.name:
                continue  # a capitalised unknown name (a type, a macro): the loop below adds nothing
            for i, a in enumerate(args):
                ptr = pointer_arg(a, amap)
                idx = amap.get(text(ptr)) if ptr is not None else None
                if idx is None:
                    continue
                if callees:
                    for g in callees:
                        sub = self.stores(g, _stack + (id(fn),))
                        if sub.stores(i):
                            out.add(idx, StoreSite(call.node, f"call:{g.name}"))
                elif not base[:1].isupper() or "::" in call.name:
                    # an unknown helper (a library template, a macro): it may store
                    out.add(idx, StoreSite(call.node, f"escape:{call.name}"))

    def host_stores(self, fn: Function) -> list[tuple[ts.Node, list[Origin]]]:
        """Stores through pointers in host code (a CPU loop over ``C.data_ptr<float>()``), with where
        the pointer's storage comes from.  Kept per function (several rules and the work-site
        search ask it of the same functions); read the list, do not change it."""
        got = self._host_stores.get(id(fn))
        if got is None:
            got = self._host_stores[id(fn)] = self._find_host_stores(fn)
        return got

    def host_fills(self, fn: Function) -> list[tuple[ts.Node, list[Origin]]]:
        """Writes host code makes through a library call rather than an assignment: ``std::memset(
        x.data_ptr(), 0, x.nbytes())``, ``cudaMemcpyAsync(dst, ...)``, ``std::fill(p, p + n, v)``, with where
        the destination's storage comes from (the call's first argument).  Not part of ``host_stores``,
        whose readers count assignments."""
        out: list[tuple[ts.Node, list[Origin]]] = []
        for call in fn.calls:
            if call.is_method or call.base not in HOST_FILLS:
                continue
            if call.base.startswith("fill") and call.namespace != "std":
                continue  # a helper of the file's own named ``fill`` is followed by ``stores``
            args = call.args
            if args:
                out.append((call.node, self.origins(args[0], fn)))
        return out

    def _find_host_stores(self, fn: Function) -> list[tuple[ts.Node, list[Origin]]]:
        out: list[tuple[ts.Node, list[Origin]]] = []
        targets = [(a, a.child_by_field_name("left")) for a in fn.of_type("assignment_expression")]
        targets += [(u, u.child_by_field_name("argument")) for u in fn.of_type("update_expression")]
        for node, left in targets:
            if left is None:
                continue
            stripped = strip_casts(left)
            if stripped.type not in ("subscript_expression", "pointer_expression", "field_expression"):
                continue
            if stripped.type == "pointer_expression":
                op = stripped.child_by_field_name("operator")
                if op is None or op.type != "*":
                    continue
            base = pointer_base(stripped)
            if base is None:
                continue
            out.append((node, self.origins(base, fn)))
        return out

    # ------------------------------------------------------------------ host origins
    def origins(self, expr: ts.Node, fn: Function, depth: int = 0,
                seen: frozenset[tuple[int, str]] = frozenset()) -> list[Origin]:
        """Where a host expression's storage comes from (see ``Origin``)."""
        if not depth and not seen:
            # a question asked from outside: several rules ask it of the same launch arguments and
            # returns, and the answer depends on the expression and function only (the facts do
            # not change), so it is kept; a copy goes out, callers may extend what they get
            key = (expr.id, id(fn))
            got = self._origins.get(key)
            if got is None:
                got = self._origins[key] = self._origins_of(expr, fn, 0, seen)
            return list(got)
        return self._origins_of(expr, fn, depth, seen)

    def _origins_of_call(self, expr: ts.Node, fn: Function, depth: int,
                         seen: frozenset[tuple[int, str]]) -> list[Origin]:
        """Where a call's result's storage comes from: an alias method's receiver, a copy, an
        allocation, ATen, or what a helper of the file returns."""
        func = expr.child_by_field_name("function")
        if func is None:
            return [Origin("unknown", fn, node=expr)]
        name = callee_name(func)
        base = name.rsplit("::", 1)[-1].lstrip(".")
        if name.startswith("."):
            recv = func.child_by_field_name("argument")
            if base in ALIAS_METHODS and recv is not None:
                found = self.origins(recv, fn, depth + 1, seen)
                if base in MAYBE_COPY:
                    return [_maybe(o) for o in found]
                return found
            if base in COPY_METHODS:
                return [Origin("copy", fn, base, node=expr)]
            if base in ALLOC_CALLS:
                return [Origin("alloc", fn, base, node=expr)]
            return [Origin("aten", fn, base, node=expr)]
        if base in ALLOC_CALLS and (name.startswith(("torch::", "at::")) or "::" not in name):
            return [Origin("alloc", fn, base, node=expr)]
        x = self.facts.extensions[fn.ext]
        helpers = x.lookup(name, "host")
        if helpers:
            out: list[Origin] = []
            for h in helpers:
                for r in self.returns(h):
                    if r.value is not None:
                        out.extend(self.origins(r.value, h, depth + 1, seen))
            return out or [Origin("call", fn, name, node=expr)]
        if name.startswith(("torch::", "at::")):
            return [Origin("aten", fn, base, node=expr)]
        return [Origin("call", fn, name, node=expr)]

    def _origins_of(self, expr: ts.Node, fn: Function, depth: int,
                    seen: frozenset[tuple[int, str]]) -> list[Origin]:
        if depth > 12:
            return [Origin("unknown", fn, node=expr)]
        expr = strip_casts(expr)
        t = expr.type
        if t == "identifier" or t == "type_identifier":  # the latter from ``Guard g(side);`` (a vexing parse)
            return self._origins_of_name(text(expr), expr, fn, depth, seen)
        if t == "call_expression":
            return self._origins_of_call(expr, fn, depth, seen)
        if t == "subscript_expression":
            arg = expr.child_by_field_name("argument")
            return self.origins(arg, fn, depth + 1, seen) if arg is not None else [Origin("unknown", fn, node=expr)]
        if t == "pointer_expression":
            arg = expr.child_by_field_name("argument")
            return self.origins(arg, fn, depth + 1, seen) if arg is not None else [Origin("unknown", fn, node=expr)]
        if t == "binary_expression":
            op = expr.child_by_field_name("operator")
            if op is not None and op.type in ("+", "-"):
                left = expr.child_by_field_name("left")
                found = self.origins(left, fn, depth + 1, seen) if left is not None else []
                if all(o.kind in ("unknown", "literal") for o in found):
                    right = expr.child_by_field_name("right")
                    if right is not None:
                        found = self.origins(right, fn, depth + 1, seen)
                return found
            return [Origin("aten", fn, "operator", node=expr)]
        if t == "conditional_expression":
            out = []
            for f in ("consequence", "alternative"):
                sub = expr.child_by_field_name(f)
                if sub is not None:
                    out.extend(self.origins(sub, fn, depth + 1, seen))
            return out
        if t in ("number_literal", "null", "nullptr", "true", "false", "string_literal"):
            return [Origin("literal", fn, text(expr), node=expr)]
        if t in ("initializer_list", "argument_list") and expr.named_child_count == 1:
            return self.origins(expr.named_children[0], fn, depth + 1, seen)
        if t in ("initializer_list", "argument_list", "compound_literal_expression"):
            members = []
            for child in expr.named_children:
                if child.type in ("comment", "type_identifier", "qualified_identifier"):
                    continue
                for o in self.origins(child, fn, depth + 1, seen):
                    members.append(_aggregate(o))
            return members or [Origin("unknown", fn, node=expr)]
        return [Origin("unknown", fn, node=expr)]

    def _origins_of_name(self, name: str, node: ts.Node, fn: Function, depth: int,
                         seen: frozenset[tuple[int, str]]) -> list[Origin]:
        key = (id(fn), name)
        out: list[Origin] = []
        param = fn.param(name)
        if key not in seen:
            for value in fn.assigned.get(name, ()):
                out.extend(self.origins(value, fn, depth + 1, seen | {key}))
            for value in fn.member_assigned.get(name, ()):
                out.extend(_aggregate(o) for o in self.origins(value, fn, depth + 1, seen | {key}))
            if out and fn.member_assigned.get(name) and not fn.assigned.get(name):
                return out
        if param is not None:
            out.extend(self._origins_of_param(fn, param, depth, seen))
        elif not fn.assigned.get(name):
            var = self._global(fn, name)
            if var is not None:
                out.append(Origin("static" if var.function is not None else "global", fn, name, node=node, var=var))
            elif name in fn.local_types:
                out.append(Origin("local", fn, name, node=node))
            else:
                out.append(Origin("unknown", fn, name, node=node))
        return out

    def _origins_of_param(self, fn: Function, param: Param, depth: int,
                          seen: frozenset[tuple[int, str]]) -> list[Origin]:
        # whether ``fn`` is an entry point, else its call sites: a scan of every call of the
        # extension, asked again for each parameter traced back, so kept per function
        key = id(fn)
        if key in self._callers:
            exported, callers = self._callers[key]
        else:
            exported = self.facts.is_exported(fn) or fn.lambda_export
            # an exported function the extension also calls itself (``gelu`` allocating the output
            # and handing it to the exported ``gelu_out`` that launches): its parameters are the
            # caller's tensors as well as Python's, or an output written that way looks unwritten
            callers = self.facts.callers(fn)
            self._callers[key] = (exported, callers)
        if exported:
            out = [Origin("input", fn, param.name, param.index)]
            for caller, call in callers or ():
                if param.index < len(call.args) and caller is not fn:
                    out.extend(self.origins(call.args[param.index], caller, depth + 1, seen))
            return out
        if not callers:
            return [Origin("param", fn, param.name, param.index)]
        out: list[Origin] = []
        for caller, call in callers:
            args = call.args
            if param.index < len(args):
                out.extend(self.origins(args[param.index], caller, depth + 1, seen))
        return out or [Origin("param", fn, param.name, param.index)]

    def _global(self, fn: Function, name: str) -> Variable | None:
        for v in fn.static_locals:
            if v.name == name:
                return v
        for v in self.facts.extensions[fn.ext].globals:
            if v.name == name:
                return v
        return None

    # ------------------------------------------------------------------ returns
    def returns(self, fn: Function) -> list[ReturnSite]:
        got = self._returns.get(id(fn))
        if got is not None:
            return got
        lambdas = [lam for lam in fn.of_type("lambda_expression") if lam is not fn.node]
        out = []
        for r in fn.of_type("return_statement"):
            if any(contains(lam, r) for lam in lambdas):
                continue
            value = r.named_children[0] if r.named_child_count else None
            if value is not None and value.type == "comment":
                value = None
            out.append(ReturnSite(r, value))
        self._returns[id(fn)] = out
        return out

    @cached_property
    def _returns(self) -> dict[int, list[ReturnSite]]:
        return {}

    # ------------------------------------------------------------------ launches reachable
    def launches_from(self, fn: Function) -> list[Launch]:
        """Launches in ``fn`` and in the host functions it calls, transitively."""
        out: list[Launch] = []
        seen: set[int] = set()
        stack = [fn]
        while stack:
            f = stack.pop()
            if id(f) in seen:
                continue
            seen.add(id(f))
            out.extend(f.launches)
            stack.extend(g for g in self.facts.callees(f) if g.kind == "host")
        return out

    def host_closure(self, fn: Function) -> list[Function]:
        """``fn`` and the host functions it calls, transitively."""
        out: list[Function] = []
        seen: set[int] = set()
        stack = [fn]
        while stack:
            f = stack.pop()
            if id(f) in seen:
                continue
            seen.add(id(f))
            out.append(f)
            stack.extend(g for g in self.facts.callees(f) if g.kind == "host")
        return out

    def host_calls_from(self, fn: Function) -> Iterator[tuple[Function, Call]]:
        seen: set[int] = set()
        stack = [fn]
        while stack:
            f = stack.pop()
            if id(f) in seen:
                continue
            seen.add(id(f))
            for c in f.calls:
                yield f, c
            stack.extend(g for g in self.facts.callees(f) if g.kind == "host")

    def stored_origins(self, launch: Launch) -> list[tuple[int, Origin, list[StoreSite]]]:
        """(param index, origin, store sites) for every argument the launched kernel stores through."""
        kernel = self.facts.kernel_for(launch)
        if kernel is None:
            return []
        st = self.stores(kernel)
        out = []
        for idx, sites in st.by_param.items():
            if idx < len(launch.args):
                for o in self.origins(launch.args[idx], launch.function):
                    out.append((idx, o, sites))
        return out

    # ------------------------------------------------------------------ constants
    def fold(self, node: ts.Node | None, fn: Function) -> int | float | None:
        """Fold an expression with the extension's constants and the function's constant locals."""
        if node is None:
            return None
        # ``_LocalEnv`` reads the environment it is given and keeps the locals it folds to itself,
        # so the shared table ``env_for`` returns is passed as it is
        return fold(node, _LocalEnv(self.facts.extensions[fn.ext].env_for(fn), fn, self))


class _LocalEnv(dict):
    """Constant environment that also folds single-assignment integer locals on demand
    (``int threads = 256; k<<<blocks, threads>>>``).

    Only ``get`` is its interface (``consts.fold`` asks nothing else): the named constants are
    looked up in ``base``, which is not copied (a fold reads a name or two of a table that can
    hold every ``#define`` of the file); the dict itself holds the locals folded here."""

    def __init__(self, base: dict, fn: Function, flow: CudaFlow):
        super().__init__()
        self.base = base
        self.fn = fn
        self.flow = flow
        self._busy: set[str] = set()

    def get(self, key, default=None):  # type: ignore[override]
        if key in self:
            return self[key]
        base = self.base
        if key in base:
            return base[key]
        if key in self._busy:
            return default
        values = self.fn.assigned.get(key)
        if not values or len(values) != 1 or self.fn.param(key) is not None:
            return default
        v = values[0]
        if v.type in ("argument_list", "initializer_list"):
            kids = v.named_children
            if len(kids) != 1:
                return default
            v = kids[0]
        self._busy.add(key)
        try:
            got = fold(v, self)
        finally:
            self._busy.discard(key)
        if got is not None:
            self[key] = got
            return got
        return default


@dataclass
class ReturnSite:
    node: ts.Node
    value: ts.Node | None


def _aggregate(o: Origin) -> Origin:
    if o.aggregate:
        return o
    return Origin(o.kind, o.function, o.detail, o.index, o.node, o.maybe, o.var, True)


def _maybe(o: Origin) -> Origin:
    if o.maybe:
        return o
    return Origin(o.kind, o.function, o.detail, o.index, o.node, True, o.var, o.aggregate)


__all__ = ["CudaFlow", "Origin", "StoreSite", "Stores", "ReturnSite", "pointer_base", "strip_casts", "ALLOC_CALLS",
           "UNINITIALISED", "names"]
