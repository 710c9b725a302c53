"""Call semantics of the value flow: what a call does to the values it is handed (a kernel launch, a
torch op, an allocation, a module or helper call analysed in place with its parameters bound, a
method on a tensor), and the records (ops, kernels, allocations, shape uses) it leaves."""

from __future__ import annotations

import ast
import re

from .catalog import (
    BROADCASTS,
    CONSTANT_FILL,
    INPLACE_FUNCS,
    REDUCTIONS,
    UNINITIALISED,
    classify_method,
    classify_torch,
    is_inplace_method,
    module_kind,
)
from .facts import (
    Alloc,
    CallEdge,
    FunctionInfo,
    Holder,
    KernelCall,
    ReferenceUse,
    ShapeUse,
    Slice,
    TorchOp,
)
from .flowtables import (
    _ALIAS_VIEWS,
    _ARITH_MODULES,
    _DYNAMIC_SELF,
    _HOST_BUILTINS,
    _LIST_MUTATORS,
    _META_BUILTINS,
    _PY_METHODS,
    _QUIET_BUILTINS,
    _SHAPE_VIEWS,
    _UNION_BUILTINS,
    MAX_DEPTH,
    _Frame,
    _inplace_keyword,
    _is_static,
    _literal,
    _names_arange,
    _out_keyword,
    _same_storage,
    _src,
)
from .indirection import callees, two_way
from .processstate import LAST_NAMES, PREFIX, PROCESS_CALLS
from .provenance import EMPTY, KERNELS, OPAQUE, OPS, SLICES, STATE, VIA, Provenance
from .resolve import dotted_name


class CallSemantics:
    """Calls and their records, mixed into ``valueflow._Analyser``."""

    # ------------------------------------------------------------------ records
    def _op(self, node: ast.AST, name: str, kind: str, members: tuple[str, ...] = (),
            inputs: Provenance = EMPTY) -> int:
        oid = self.op_ids.get(node)
        if oid is None:
            oid = len(self.facts.ops)
            self.op_ids[node] = oid
            self.facts.ops.append(TorchOp(oid, name, node, self.stack[-1].qualname, kind, members))
            # first context only, like KernelCall.input_ops: a helper re-entered with a kernel's
            # result (a warm-up, a JIT trace) must not make every later call look like an epilogue
            if inputs.kernels:
                self.facts.op_input_kernels[oid] = inputs.kernels
        self.log.append(("op", self.facts.ops[oid], self.stack[-1].depth))
        return oid

    def _kernel(self, node: ast.Call, kind: str, name: str, target: str, ext: str | None, args: Provenance,
                used: bool) -> int:
        kid = self.kernel_ids.get(node)
        if kid is None:
            kid = len(self.facts.kernels)
            self.kernel_ids[node] = kid
            self.facts.kernels.append(KernelCall(kid, kind, name, target, node, self.stack[-1].qualname, ext,
                                                 frozenset(args.inputs), used, args.ops))
            args_nodes = tuple(node.args) + tuple(node.keywords)
            self._shape_use(node, "kernel", args_nodes)
            if isinstance(node.func, ast.Subscript):
                self._shape_use(node.func.slice, "grid", (node.func.slice,))
        self.log.append(("kernel", self.facts.kernels[kid], self.stack[-1].depth))
        return kid

    def _shape_use(self, node: ast.AST, kind: str, args: tuple[ast.AST, ...]) -> None:
        if node not in self.shape_nodes:
            self.shape_nodes.add(node)
            self.facts.shape_uses.append(ShapeUse(node, kind, self.stack[-1].qualname, args))

    def _alloc(self, node: ast.Call, name: str) -> int:
        aid = self.alloc_ids.get(node)
        if aid is None:
            size_args = tuple(node.args) + tuple(k.value for k in node.keywords if k.arg in ("size", "shape"))
            if name.rsplit(".", 1)[-1] in ("full", "full_like", "new_full"):
                size_args = tuple(node.args[:1]) + tuple(k.value for k in node.keywords if k.arg == "size")
            elif name.rsplit(".", 1)[-1].endswith("_like"):
                size_args = ()
            self._shape_use(node, "alloc", size_args)
            aid = len(self.facts.allocs)
            self.alloc_ids[node] = aid
            short = name.rsplit(".", 1)[-1]
            if short in UNINITIALISED:
                fill = "uninitialised"
            elif short in CONSTANT_FILL:
                fill = "constant"
            elif short in ("tensor", "as_tensor", "from_numpy", "new_tensor", "frombuffer"):
                fill = "data"
            else:
                fill = "random"
            value = None
            if short in ("full", "new_full") and len(node.args) >= 2:
                value = _literal(node.args[1])
            elif short == "full_like" and len(node.args) >= 2:
                value = _literal(node.args[1])
            for k in node.keywords:
                if k.arg == "fill_value":
                    value = _literal(k.value)
            self.facts.allocs.append(Alloc(aid, name, node, self.stack[-1].qualname, fill, value))
        self.log.append(("alloc", self.facts.allocs[aid], self.stack[-1].depth))
        return aid

    # ================================================================== calls
    def _call(self, e: ast.Call, discarded: bool) -> Provenance:
        func = e.func
        ft = type(func)
        if ft is not ast.Name and ft is not ast.Attribute or ft is ast.Name and func.id == "getattr":  # type: ignore[attr-defined]
            # ``getattr(X, "n")(...)``, ``partial(f, a)(...)``, ``(f, g)[i](...)``: call what it names
            spelled = self._with_table(e)
            direct = callees(spelled, self._canon)
            if direct is not None:
                return self._indirect_call(e, spelled.func, direct, discarded)
            if ft is ast.Lambda:  # ``(lambda t: ...)(x)``, as a table's element gives it
                return self._lambda(func, e)  # type: ignore[arg-type]
        frame = self.stack[-1]
        is_attr, is_name = ft is ast.Attribute, ft is ast.Name
        # the receiver's name of ``name.attr(...)`` (None for any other callee), read once for the tests below
        recv = func.value.id if is_attr and type(func.value) is ast.Name else None  # type: ignore[attr-defined]
        # --- Triton launch: kernel[grid](...)
        if ft is ast.Subscript:
            return self._subscript_call(e, func, discarded)  # type: ignore[arg-type]
        # --- extension function (not a method of a local tensor that happens to share its name)
        if is_attr and (func.attr in self.ext_functions or self.ext_unlisted):
            out = self._extension_launch(e, frame.state.get(recv) if recv is not None else None, discarded)
            if out is not None:
                return out
        if self.cupy_extensions:  # the callee's dotted name is needed here only in a file with CuPy kernels
            out = self._cupy_launch(e, func)
            if out is not None:
                return out
        canon = self._canon(func)
        if (func.attr if is_attr else func.id if is_name else "") in LAST_NAMES and canon in PROCESS_CALLS:  # type: ignore[attr-defined]
            # the process's global state (processstate.py): marked, so a choice keyed on it is seen
            # wherever the value goes
            self._args(e)
            return Provenance(state=frozenset([PREFIX + canon]))
        torchy = canon.startswith("torch.")  # asked twice below; ``torch.ops.`` implies it
        # --- code of the candidate's own package, defined in another of its files: an imported
        #     autograd Function's ``.apply`` (``from mylib.ops import FusedGELU``), or any callable of
        #     a relative import (``from .kernels import rms_norm``).  What it runs is not in this
        #     file; it is custom code reached from here, not torch and not nothing
        if not torchy and (is_name or recv is not None) and \
                (func.id if is_name else recv) not in frame.state and self._imported_code(func, canon, recv):
            return self._launch(e, "imported", f"imported:{canon}", canon, None, discarded)
        # --- torch.ops.<ns>.<op>
        if torchy and canon.startswith("torch.ops."):
            return self._torch_ops_call(e, canon, discarded)
        # --- local callables (fn = ext.relu; layer in self.layers; self.kernel = mod.get_function(...))
        desc = frame.callables.get(func.id) if is_name else None
        if desc is None and is_name and func.id in self.module_values and \
                func.id not in frame.state:
            desc = self._callable_of_value(self.module_values[func.id])
        if desc is None and is_attr:
            chain = self._chain(func)
            if self.attr_callables:  # most files store no callable in an attribute: no key to build
                key = "self." + chain if chain is not None else dotted_name(func)
                desc = self.attr_callables.get(key) if key else None
            if desc is None and chain is not None:
                holder = self.facts.holders.get(chain)
                if holder is not None and holder.kind == "callable" and holder.target.startswith("cupy:"):
                    desc = ("cupy", holder.target[5:])
        if desc is not None:
            out = self._callable_call(e, desc, discarded)
            if out is not None:
                return out
        # --- self.something(...)
        if recv is not None and recv == frame.self_name and frame.cls is not None:
            return self._self_call(e, func, frame)  # type: ignore[arg-type]
        # --- super().method(...)
        if is_attr and recv is None and type(func.value) is ast.Call and \
                type(func.value.func) is ast.Name and func.value.func.id == "super":
            return self._super_call(e, func.attr)
        # --- LocalClass.apply(...) / Model.forward(self, ...) / LocalClass.method(...)
        if recv is not None and recv in self.classes and recv not in frame.state:
            out = self._class_call(e, recv, func.attr)
            if out is not None:
                return out
        if is_attr and canon == "Model.forward" and "Model" not in self.classes:
            self._reference_call(e, "model-forward", "Model.forward(...)")
            return self._args(e).fresh().plus(OPAQUE, frozenset([e.lineno]))
        if is_name and func.id not in frame.state:
            # a DSL function, a module-level function or class, torch by a bare name, a builtin
            out = self._name_call(e, func.id, canon, torchy, frame, discarded)
            if out is not None:
                return out
        # --- torch.*
        elif torchy:
            return self._torch_call(e, canon, discarded)
        # --- arithmetic helpers
        if canon.startswith(_ARITH_MODULES) or canon in ("triton.cdiv", "triton.next_power_of_2"):
            return self._args(e)
        # --- a method on a value
        if is_attr:
            return self._method(e, func, discarded)
        # --- anything else: an unknown callable
        callee = self._ev(func)
        return callee.join(self._args(e)).fresh().plus(OPAQUE, frozenset([e.lineno]))

    def _extension_launch(self, e: ast.Call, receiver: Provenance | None, discarded: bool) -> Provenance | None:
        """A call of an extension's exported function (not a method of a local tensor that happens to
        share its name), as a launch; None when it is not one."""
        if receiver is None or not receiver.tensorish:
            found = self.host.extension_for_call(e)
            if found is not None:
                ext, fn = found
                return self._launch(e, "extension", f"export:{ext.name}.{fn}", fn, ext.name, discarded)
        return None

    def _cupy_launch(self, e: ast.Call, func: ast.expr) -> Provenance | None:
        """A call of a name a CuPy kernel is bound to (``kernel = cp.RawKernel(...)``; ``kernel(...)``)."""
        dotted = dotted_name(func)
        if dotted:
            for ext in self.cupy_extensions:
                if dotted in ext.bound_to:
                    return self._launch(e, "cupy", f"cupy:{ext.name}", ext.name, ext.name, discarded=True)
        return None

    def _subscript_call(self, e: ast.Call, func: ast.Subscript, discarded: bool) -> Provenance:
        """``kernel[grid](...)`` (Triton, Numba) or a call of a subscripted value (``self.layers[i](x)``)."""
        tname = self._triton_name(func.value)
        if tname is not None:
            self._ev(func.slice)
            return self._launch(e, "triton", f"triton:{tname}", tname, None, discarded=True)
        if isinstance(func.value, ast.Name) and func.value.id in self.jit_kernels:
            self._ev(func.slice)
            return self._launch(e, "numba", f"numba:{func.value.id}", func.value.id, None, discarded=True)
        holder = self._holder_of(func.value)
        callee = self._ev(func.value)
        if holder is not None:
            return self._module_call(e, holder)
        return callee.join(self._args(e)).fresh().plus(OPAQUE, frozenset([e.lineno]))

    def _torch_ops_call(self, e: ast.Call, canon: str, discarded: bool) -> Provenance:
        """``torch.ops.<ns>.<op>(...)``: a custom namespace's op is a launch, aten's and friends an op."""
        parts = canon.split(".")
        if len(parts) >= 4 and parts[2] not in ("aten", "prims", "prim", "quantized", "_c10d_functional"):
            ns_op = ".".join(parts[2:4])
            return self._launch(e, "torch_ops", f"op:{ns_op}", ns_op, None, discarded)
        args = self._args(e)
        op = self._op(e, canon, "call", inputs=args)
        return args.fresh().plus(OPS, frozenset([op]))

    def _callable_call(self, e: ast.Call, desc: tuple[str, str], discarded: bool) -> Provenance | None:
        """A call of a local callable by what it was bound to; None when that says nothing."""
        kind, target = desc
        if kind in ("def", "lambda", "method", "func"):
            out = self._call_ref(e, f"{kind}:{target}")
            if out is not None:
                return out
        if kind == "cupy":
            return self._launch(e, "cupy", f"cupy:{target}", target, target, discarded=True)
        if kind == "extfn":
            ext_name, _, fn = target.rpartition(".")
            return self._launch(e, "extension", f"export:{ext_name}.{fn}", fn, ext_name, discarded)
        if kind == "holder":
            return self._module_call(e, self.facts.holders[target])
        if kind == "autograd":
            methods = self._methods(target)
            if "forward" in methods:
                node, owner = methods["forward"]
                return self._invoke(node, f"{owner}.forward", owner, "", e, bind_self=False, kind="autograd",
                                    leading=EMPTY)
        if kind == "triton":
            return self._launch(e, "triton", f"triton:{target}", target, None, discarded=True)
        if kind == "dsl":
            return self._launch(e, "dsl", f"dsl:{target}", target, None, discarded)
        if kind == "torch":
            return self._torch_call(e, target, discarded)
        return None

    def _self_call(self, e: ast.Call, func: ast.Attribute, frame: _Frame) -> Provenance:
        """``self.something(...)``: a method analysed in place, a held module, or state read."""
        methods = self._methods(frame.cls)  # type: ignore[arg-type]
        if func.attr in methods:
            node, owner = methods[func.attr]
            if _is_static(node):
                return self._invoke(node, f"{owner}.{func.attr}", owner, frame.prefix, e, bind_self=False,
                                    kind="method")
            return self._invoke(node, f"{owner}.{func.attr}", owner, frame.prefix, e, bind_self=True,
                                kind="method")
        chain = frame.prefix + func.attr
        holder = self.facts.holders.get(chain)
        self._self_read(chain, func)
        if holder is not None:
            return self._module_call(e, holder)
        args = self._args(e)
        if func.attr in _DYNAMIC_SELF:
            return args.join(Provenance(state=frozenset(["self.*"])))
        assigned = self.self_state.get(chain)
        return args.fresh().join(assigned or EMPTY).plus(OPAQUE, frozenset([e.lineno]))

    def _class_call(self, e: ast.Call, cls: str, attr: str) -> Provenance | None:
        """``LocalClass.apply(...)`` / ``Model.forward(self, ...)`` / ``LocalClass.method(...)``."""
        methods = self._methods(cls)
        if attr == "apply" and cls in self.autograd and "forward" in methods:
            node, owner = methods["forward"]
            return self._invoke(node, f"{owner}.forward", owner, "", e, bind_self=False, kind="autograd",
                                leading=EMPTY)
        if attr in methods:
            node, owner = methods[attr]
            if cls == "Model":
                self._reference_call(e, "model-forward", f"Model.{attr}(...)")
            return self._invoke(node, f"{owner}.{attr}", owner, "", e, bind_self=not _is_static(node),
                                kind="method", explicit_self=not _is_static(node))
        return None

    def _name_call(self, e: ast.Call, name: str, canon: str, torchy: bool, frame: _Frame,
                   discarded: bool) -> Provenance | None:
        """A call by a bare name that is not a local: None when it is none of these and the caller goes on."""
        # --- a CuTe DSL function: it launches device code that writes through its tensor arguments
        #     (``from_dlpack(out)`` shares ``out``'s memory; ``_pointer_targets`` looks inside calls)
        if name in self.dsl_functions:
            return self._launch(e, "dsl", f"dsl:{name}", name, None, discarded)
        # --- module-level function (every definition of it) / class instantiation
        if name in self.functions:
            alts = self.function_alts[name]
            out = EMPTY
            for i, fn in enumerate(alts):
                qual = name if i == len(alts) - 1 else f"{name}@{fn.lineno}"
                out = out.join(self._invoke(fn, qual, None, "", e, bind_self=False, kind="function"))
            return out
        if name in self.classes:
            args = self._args(e)
            if name == "Model":
                self._reference_call(e, "instantiate", "Model(...)")
            return args.fresh().plus(OPAQUE, frozenset([e.lineno]))
        if name == "Model" or canon.endswith(".Model"):
            self._reference_call(e, "instantiate", "Model(...)")
            return self._args(e).fresh().plus(OPAQUE, frozenset([e.lineno]))
        # --- torch.* by a bare name (``from torch import relu``)
        if torchy:
            return self._torch_call(e, canon, discarded)
        # --- builtins
        if name in _META_BUILTINS:
            if name == "range":
                self._shape_use(e, "range", tuple(e.args))
            if name == "getattr" and e.args and isinstance(e.args[0], ast.Name) and \
                    e.args[0].id == frame.self_name:
                if len(e.args) > 1 and isinstance(e.args[1], ast.Constant) and isinstance(e.args[1].value, str):
                    return self._self_read(frame.prefix + e.args[1].value, e)
                self.facts.dynamic_self_access.append(e)
            return self._args(e).metadata()
        if name == "getattr" and e.args and isinstance(e.args[0], ast.Name) and e.args[0].id == frame.self_name:
            if len(e.args) > 1 and isinstance(e.args[1], ast.Constant) and isinstance(e.args[1].value, str):
                return self._self_read(frame.prefix + e.args[1].value, e)
            self.facts.dynamic_self_access.append(e)
            return self._args(e).plus(STATE, frozenset(["self.*"]))
        if name == "vars" and e.args and isinstance(e.args[0], ast.Name) and e.args[0].id == frame.self_name:
            self.facts.dynamic_self_access.append(e)
        if name in _HOST_BUILTINS:
            return self._args(e).fresh()
        if name in _UNION_BUILTINS:
            return self._args(e)
        if name in _QUIET_BUILTINS:
            self._args(e)
            return EMPTY
        return None

    def _with_table(self, e: ast.Call) -> ast.Call:
        """``e`` with a local table it indexes written in place (``t = (f, g); t[i](x)`` ->
        ``(f, g)[i](x)``), so ``indirection.callees`` sees the table; ``e`` itself otherwise."""
        tables = self.stack[-1].tables
        if not tables:
            return e
        func = e.func
        if type(func) is ast.Subscript and type(func.value) is ast.Name and func.value.id in tables:
            new = ast.Subscript(value=tables[func.value.id], slice=func.slice, ctx=ast.Load())
        elif type(func) is ast.Call and type(func.func) is ast.Attribute and func.func.attr == "get" and \
                type(func.func.value) is ast.Name and func.func.value.id in tables:
            new = ast.Call(func=ast.Attribute(value=tables[func.func.value.id], attr="get", ctx=ast.Load()),
                           args=func.args, keywords=func.keywords)
        else:
            return e
        ast.copy_location(new, func)
        out = ast.Call(func=new, args=e.args, keywords=e.keywords)
        return ast.copy_location(out, e)

    def _indirect_call(self, e: ast.Call, func: ast.AST, direct: list[ast.AST], discarded: bool) -> Provenance:
        """An indirectly spelled call (``indirection.callees``): the flows of everything it may run,
        joined; a table's index is evaluated once, for the conditions it reads.  ``func`` is the callee
        with a local table written in (``_with_table``)."""
        index: ast.expr | None = None
        if type(func) is ast.Subscript:
            index = func.slice
        elif type(func) is ast.Call and type(func.func) is ast.Attribute and func.func.attr == "get" and func.args:
            index = func.args[0]
        parents = self.host.parents
        if e in parents:
            for alt in direct:
                if alt is not e and alt not in parents:
                    parents[alt] = parents[e]  # rules that climb from an op's node find the statement it is in
        cond = two_way(func, direct) if index is not None else None
        if cond is not None:
            # a two-way table is a conditional on its index: ``(f, g)[c]()`` is ``g() if c else f()``,
            # ``{k: f}.get(key, g)()`` is ``f() if key == k else g()``; the branch rules read it as one
            test, taken, other = cond
            if test is not index and e in parents:
                parents[test] = parents[e]
            return self._branch_expr(e, test, taken, other, "ifexp")  # type: ignore[arg-type]
        if index is not None:
            self._ev(index)
        out = EMPTY
        for alt in direct:
            out = out.join(self._ev(alt, discarded))
        return out

    def _triton_name(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Call) and node.args and not node.keywords and len(node.args) == 1 and \
                self._canon(node.func).rsplit(".", 1)[-1] in ("wrap_triton", "capture_triton"):
            node = node.args[0]  # ``torch.library.wrap_triton(kernel)[grid](...)``: the kernel, launched
        if isinstance(node, ast.Name) and node.id in self.host.triton_kernels and node.id not in self.stack[-1].state:
            return node.id
        if isinstance(node, ast.Name) and self.stack[-1].callables.get(node.id, ("", ""))[0] == "triton":
            return self.stack[-1].callables[node.id][1]
        chain = self._chain(node)
        if chain is not None:
            holder = self.facts.holders.get(chain)
            if holder is not None and holder.target in self.host.triton_kernels:
                return holder.target
        if isinstance(node, ast.Attribute) and node.attr in self.host.triton_kernels:
            return node.attr
        return None

    def _holder_of(self, node: ast.AST) -> Holder | None:
        """``self.layers[i]`` -> the ModuleList holder; ``self.conv`` -> its holder."""
        while isinstance(node, ast.Subscript):
            node = node.value
        chain = self._chain(node)
        if chain is None:
            return None
        return self.facts.holders.get(chain)

    def _args(self, e: ast.Call) -> Provenance:
        # ``Provenance.join_all`` of the arguments' flows, folded as they are evaluated (same order, no lists)
        out = EMPTY
        ev = self._ev
        for a in e.args:
            out = out.join(ev(a))
        for k in e.keywords:
            out = out.join(ev(k.value))
        return out

    def _positional(self, e: ast.Call) -> tuple[list[Provenance], Provenance]:
        """The flows of ``e``'s positional arguments, in order, and their join, folded as evaluated."""
        ev = self._ev
        flows = []
        joined = EMPTY
        for a in e.args:
            f = ev(a)
            flows.append(f)
            joined = joined.join(f)
        return flows, joined

    def _launch(self, e: ast.Call, kind: str, name: str, target: str, ext: str | None, discarded: bool) -> Provenance:
        arg_nodes = [a.value if isinstance(a, ast.Starred) else a for a in e.args] + [k.value for k in e.keywords]
        arg_flows = [self._ev(a) for a in arg_nodes]
        joined = Provenance.join_all(arg_flows)
        kid = self._kernel(e, kind, name, target, ext, joined, not discarded)
        result = joined.fresh().plus(KERNELS, frozenset([kid]))
        # a first row stays a first row.  A strided slice handed to a kernel is consumed there: what the
        # kernel does with it is its business, so it is recorded as a use of its own kind
        # (``strided-kernel``), which HS114 weighs against what the reference computes
        if result.slices:
            first = frozenset(i for i in result.slices if self.facts.slices[i].kind == "first")
            result = self._consume_slices(result, e, name, "strided")
            result = Provenance(result.inputs, result.meta, frozenset(), result.kernels, result.ops, result.allocs,
                                result.state, result.opaque, first, result.partial, result.via)
        # the kernel writes through pointer arguments: fresh buffers passed to it carry its result.
        # Inputs passed to it are written only when nothing else could be the output.
        buffers, inputs = [], []
        for ptr, f in self._pointer_targets(arg_nodes):
            if f.alias:
                inputs.append(ptr)
            elif f.allocs or (discarded and (f.ops or f.kernels or f.opaque)):
                buffers.append(ptr)
        if buffers:
            for n in buffers:
                self._write_through(n, result)
        elif discarded and (kind != "extension" or self._returns_void(ext, target)):
            for n in inputs:
                self._mutate(n, result, e, "kernel", lambda n=n: f"{name.split(':', 1)[-1]} writes {_src(n, 40)}")
        return result

    def _imported_code(self, func: ast.expr, canon: str, recv: str | None) -> bool:
        """Whether ``func`` names code imported from the candidate's own package (see the caller)."""
        if canon.startswith("."):
            return True  # a relative import: a sibling module of this file
        if "." in canon:  # only a dotted name can name a package's module (asked first: finding the package stats)
            head = canon.split(".", 1)[0]
            own = self.own_package
            if own is not None and head == own:
                return True  # ``from flash_attn.ops.triton.rotary import apply_rotary`` inside flash_attn/
            if head in self.own_extensions:
                return True  # ``import transducer_loss_cuda``: an extension the package's setup.py builds
        if recv is None or type(func) is not ast.Attribute or func.attr != "apply" or recv in self.classes:
            return False
        # ``X.apply`` with X bound by an import (its canonical name is not its own spelling)
        return canon != f"{recv}.apply" and not canon.startswith(("numpy.", "pandas.", "functools."))

    def _returns_void(self, ext_name: str | None, fn: str) -> bool:
        """Whether an extension function is declared ``void fn(...)``: it can only work in place."""
        key = (ext_name or "", fn)
        cached = self.void_cache.get(key)
        if cached is None:
            pattern = re.compile(r"\bvoid\s+" + re.escape(fn) + r"\s*\(")
            cached = any(u.extension == ext_name and pattern.search(u.mapped.text) for u in self.host.units)
            self.void_cache[key] = cached
        return cached

    def _pointer_targets(self, arg_nodes: list[ast.AST]) -> list[tuple[ast.AST, Provenance]]:
        """Tensors a kernel can write through: the arguments themselves, and the tensors inside lists,
        ``x.data_ptr()``, ``x.contiguous()`` or ``ctypes.c_void_p(...)`` wrappers."""
        frame = self.stack[-1]
        out: list[tuple[ast.AST, Provenance]] = []
        seen: set[str] = set()
        stack = list(arg_nodes)
        while stack:
            n = stack.pop()
            if isinstance(n, ast.Name):
                if n.id in frame.pointers and n.id not in seen:
                    seen.add(n.id)
                    stack.extend(frame.pointers[n.id])
                    continue
                f = frame.state.get(n.id)
                if f is not None and f.tensorish and n.id not in seen:
                    seen.add(n.id)
                    out.append((n, f))
            elif isinstance(n, ast.Attribute):
                chain = self._chain(n)
                if chain is not None:
                    if chain not in seen:
                        seen.add(chain)
                        f = self.self_state.get(chain, EMPTY).join(self._state_flow(chain))
                        out.append((n, f))
                else:
                    stack.append(n.value)
            elif isinstance(n, ast.Subscript):
                stack.append(n.value)
            elif isinstance(n, (ast.List, ast.Tuple)):
                stack.extend(n.elts)
            elif isinstance(n, ast.Starred):
                stack.append(n.value)
            elif isinstance(n, ast.Call):
                if isinstance(n.func, ast.Attribute) and (n.func.attr in _ALIAS_VIEWS or n.func.attr in
                                                          ("data_ptr", "contiguous", "cuda", "to", "float")):
                    stack.append(n.func.value)
                stack.extend(n.args)
        return out

    def _write_through(self, node: ast.AST, value: Provenance) -> None:
        frame = self.stack[-1]
        while isinstance(node, ast.Subscript):
            node = node.value
        if isinstance(node, ast.Name):
            if node.id in frame.state:
                frame.state[node.id] = frame.state[node.id].join(value)
                base = frame.views.get(node.id)
                if base is not None and base in frame.state:
                    frame.state[base] = frame.state[base].join(value)
                for other, b in frame.views.items():
                    if b == node.id and other in frame.state:
                        frame.state[other] = frame.state[other].join(value)
            return
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            self._write_through(node.func.value, value)
            return
        chain = self._chain(node)
        if chain is not None:
            self.self_state[chain] = self.self_state.get(chain, EMPTY).join(value)
        elif isinstance(node, ast.Attribute):
            self._write_through(node.value, value)

    def _module_call(self, e: ast.Call, holder: Holder) -> Provenance:
        if holder.kind == "local":
            cls = holder.cls
            methods = self._methods(cls)
            if "forward" in methods:
                node, owner = methods["forward"]
                return self._invoke(node, f"{owner}.forward", owner, holder.attr + ".", e, bind_self=True,
                                    kind="submodule")
            return self._args(e).fresh().plus(OPAQUE, frozenset([e.lineno]))
        if holder.kind == "callable":
            target = holder.target
            ref = self._call_ref(e, target)
            if ref is not None:
                return ref
            if target.startswith("extfn:"):
                ext_name, _, fn = target[6:].rpartition(".")
                return self._launch(e, "extension", f"export:{ext_name}.{fn}", fn, ext_name, False)
            if target.startswith("cupy:"):
                return self._launch(e, "cupy", f"cupy:{target[5:]}", target[5:], target[5:], discarded=True)
            if target in self.host.triton_kernels:
                return self._launch(e, "triton", f"triton:{target}", target, None, discarded=True)
            owner, _, fn = target.rpartition(".")
            ext = self.ext_by_bound.get(owner)
            if ext is not None:
                return self._launch(e, "extension", f"export:{ext.name}.{fn}", fn, ext.name, False)  # type: ignore[attr-defined]
            if target.startswith("torch."):
                return self._torch_call(e, target, False)
            if fn == "apply" and owner in self.autograd:
                methods = self._methods(owner)
                if "forward" in methods:
                    node, own = methods["forward"]
                    return self._invoke(node, f"{own}.forward", own, "", e, bind_self=False, kind="autograd",
                                        leading=EMPTY)
            return self._args(e).fresh().plus(OPAQUE, frozenset([e.lineno]))
        args = self._args(e)
        if holder.kind in ("module", "stateless", "container"):
            mk = module_kind(holder.cls)
            state = self._state_flow(holder.attr) if holder.kind != "stateless" else EMPTY
            if mk == "passthrough":
                return args
            members = tuple(m for m in holder.target.split(",") if m) if holder.kind == "container" else ()
            op = self._op(e, holder.cls, "module", members, inputs=args)
            out = args.fresh().join(state).plus(OPS, frozenset([op]))
            if holder.inplace and e.args:
                self._mutate(e.args[0], out, e, "inplace",
                             lambda: f"self.{holder.attr}({_src(e.args[0], 30)}) with inplace=True")
            if holder.kind == "container":
                out = out.join(self._hidden_modules(e, holder, members))
            return out
        out = args.fresh().with_(opaque=frozenset([e.lineno]), state=frozenset([f"self.{holder.attr}"]))
        return out.join(self._hidden_modules(e, holder, ()))

    def _call_ref(self, e: ast.Call, target: str) -> Provenance | None:
        """Call what a callable reference names: ``method:m``, ``func:f``, ``def:L:C``, ``lambda:L:C``."""
        frame = self.stack[-1]
        kind, _, rest = target.partition(":")
        if kind == "method" and frame.cls is not None:
            found = self._methods(frame.cls).get(rest)
            if found is not None:
                node, owner = found
                return self._invoke(node, f"{owner}.{rest}", owner, frame.prefix, e,
                                    bind_self=not _is_static(node), kind="method")
        elif kind == "func" and rest in self.functions:
            return self._invoke(self.functions[rest], rest, None, "", e, bind_self=False, kind="function")  # type: ignore[arg-type]
        elif kind in ("def", "lambda"):
            node = self.defs_by_pos.get(rest)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return self._invoke(node, f"{frame.qualname}.<locals>.{node.name}", frame.cls, frame.prefix, e,
                                    bind_self=False, kind="closure", closure_self="self")
            if isinstance(node, ast.Lambda):
                return self._lambda(node, e)
        return None

    def _lambda(self, node: ast.Lambda, e: ast.Call) -> Provenance:
        caller = self.stack[-1]
        arg_flows = [self._ev(a.value if isinstance(a, ast.Starred) else a) for a in e.args]
        if len(self.stack) > MAX_DEPTH:
            return Provenance.join_all(arg_flows).fresh().plus(OPAQUE, frozenset([e.lineno]))
        frame = _Frame(f"{caller.qualname}.<lambda>", caller.cls, caller.prefix, caller.depth + 1, "self")
        params = list(node.args.posonlyargs) + list(node.args.args)
        for i, p in enumerate(params):
            frame.state[p.arg] = arg_flows[i] if i < len(arg_flows) else EMPTY
        self.stack.append(frame)
        out = self._ev(node.body)
        self.stack.pop()
        return out

    def _hidden_modules(self, e: ast.Call, holder: Holder, members: tuple[str, ...]) -> Provenance:
        """A container or an unknown module may hold submodule classes defined in this file
        (``nn.Sequential(*[Block() ...])``, ``self._make_layer()``): analyse their forwards as possible callees."""
        local = [m for m in members if m in self.module_classes]
        if not local and (not members or holder.kind != "container"):
            # a file with no kernel: its module classes show which torch ops do the work (HS105)
            pool = self.kernel_classes if self.facts.defines_kernel else self.module_classes
            local = [c for c in pool if c != self.facts.model_name]
        out = EMPTY
        for cls in local:
            fwd = self._methods(cls).get("forward")
            if fwd is None or any(f.qualname == f"{fwd[1]}.forward" for f in self.stack):
                continue
            # each possible member class is analysed once per file: a ResNet calls its layers many times
            cached = self.hidden_results.get(cls)
            if cached is None:
                cached = self._invoke(fwd[0], f"{fwd[1]}.forward", fwd[1], f"{holder.attr}.*.", e, bind_self=True,
                                      kind="submodule")
                self.hidden_results[cls] = cached
            out = out.join(cached)
        return out

    def _super_call(self, e: ast.Call, method: str) -> Provenance:
        frame = self.stack[-1]
        if frame.cls is not None:
            bases = self._all_bases(frame.cls)
            for b in bases:
                if b == "Model" and method == "forward":
                    self._reference_call(e, "super-forward", "super().forward(...)")
                methods = {f.name: f for f in self.classes[b].body if isinstance(f, (ast.FunctionDef,
                                                                                      ast.AsyncFunctionDef))}
                if method in methods:
                    return self._invoke(methods[method], f"{b}.{method}", b, frame.prefix, e, bind_self=True,
                                        kind="method")
        if method == "forward":
            self._reference_call(e, "super-forward", "super().forward(...)")
        args = self._args(e)
        if method == "__init__":
            return EMPTY
        return args.fresh().plus(OPAQUE, frozenset([e.lineno]))

    def _reference_call(self, node: ast.AST, kind: str, detail: str) -> None:
        if not any(u.node is node for u in self.facts.reference_uses):
            self.facts.reference_uses.append(ReferenceUse(node, kind, detail, True))

    # ------------------------------------------------------------------ torch functions
    def _torch_call(self, e: ast.Call, canon: str, discarded: bool) -> Provenance:
        kind = classify_torch(canon)
        short = canon.rsplit(".", 1)[-1]
        # ``Provenance.join_all`` of the arguments' flows then the keywords', folded as they are evaluated
        ev = self._ev
        arg_flows, joined = self._positional(e)
        keywords = e.keywords
        if keywords:
            if len(keywords) == 1:
                joined = joined.join(ev(keywords[0].value))
            else:
                # by name: of two ``**`` keywords (both named None) only the last one's flow is joined
                kw_flows = {k.arg: ev(k.value) for k in keywords}
                for f in kw_flows.values():
                    joined = joined.join(f)
        first = arg_flows[0] if arg_flows else EMPTY
        if kind == "misc":
            return EMPTY if not joined.tensorish else joined.fresh().plus(OPAQUE, frozenset([e.lineno]))
        if kind == "meta":
            return joined.metadata()
        if kind == "alloc":
            aid = self._alloc(e, canon)
            if short in ("tensor", "as_tensor", "from_numpy", "frombuffer"):
                # the same values in a new tensor: a strided subsample stays one through a numpy round trip
                return Provenance(inputs=joined.inputs, meta=joined.meta, allocs=frozenset([aid]), state=joined.state,
                            opaque=joined.opaque, slices=joined.slices, partial=joined.partial)
            return Provenance(meta=joined.meta | joined.inputs | joined.alias, allocs=frozenset([aid]), state=joined.state,
                        opaque=joined.opaque)
        if kind == "view":
            if short in _SHAPE_VIEWS:
                self._shape_use(e, "view", tuple(e.args[1:]))
            out = joined if short in _ALIAS_VIEWS else joined.fresh()
            if short in ("narrow", "select") and len(e.args) >= 3:
                out = self._narrow_slice(e, out)
            elif short == "index_select" and len(e.args) >= 3:
                out = self._index_slice(e, e.args[0], e.args[1], e.args[2], out)
            if short in BROADCASTS:
                out = self._consume_slices(out, e, canon, "first")
            return out
        # compute
        out_target = _out_keyword(keywords) if keywords else None
        inplace = short in INPLACE_FUNCS or bool(keywords) and _inplace_keyword(keywords)
        op = self._op(e, canon, "call", inputs=joined)
        result = joined.fresh().plus(OPS, frozenset([op]))
        if short in REDUCTIONS and not (short in ("max", "min") and len(e.args) >= 2 and arg_flows[1].tensorish):
            result = self._consume_slices(result, e, canon, "strided")
        if out_target is not None:
            self._mutate(out_target, result, e, "out", lambda: f"{canon}(..., out={_src(out_target, 30)})")
        if inplace and e.args:
            def how() -> str:
                return f"{canon}(..., inplace=True)" if not short.endswith("_") else f"{canon}({_src(e.args[0], 30)})"
            if first.alias or isinstance(e.args[0], ast.Name):
                self._mutate(e.args[0], result, e, "inplace" if not short.endswith("_") else "function", how)
        return result

    def _narrow_slice(self, e: ast.Call, out: Provenance) -> Provenance:
        # x.narrow(0, 0, 1) / torch.narrow(x, 0, 0, 1): a first-row slice
        args = e.args[1:] if not isinstance(e.func, ast.Attribute) or self._canon(e.func).startswith(
            "torch.") else e.args
        vals = [self._const_int(a) for a in args[:3]]
        if len(vals) == 3 and vals[1] == 0 and vals[2] == 1 and out.inputs:
            sid = self.slice_ids.get(e)
            if sid is None:
                sid = len(self.facts.slices)
                self.slice_ids[e] = sid
                base = e.func.value if isinstance(e.func, ast.Attribute) else e.args[0]
                self.facts.slices.append(Slice(sid, e, self.stack[-1].qualname, "first", _src(base, 80), 1, 0,
                                               vals[0] or 0))
            return out.plus(SLICES, frozenset([sid]))
        return out

    def _index_slice(self, e: ast.Call, base: ast.AST, dim: ast.AST, index: ast.AST, out: Provenance) -> Provenance:
        """``x.index_select(1, torch.arange(0, n, 4))``: the same every-k-th subsample as ``x[:, ::4]``."""
        if type(index) is ast.Name:
            index = self.stack[-1].aranges.get(index.id, index)
        if not out.inputs or type(index) is not ast.Call or not _names_arange(index.func):
            return out
        a = index.args
        step_node = a[2] if len(a) >= 3 else next((k.value for k in index.keywords if k.arg == "step"), None)
        step = self._const_int(step_node)
        if step is None or step <= 1:
            return out
        start = self._const_int(a[0]) if len(a) >= 2 else 0
        sid = self.slice_ids.get(e)
        if sid is None:
            sid = len(self.facts.slices)
            self.slice_ids[e] = sid
            self.facts.slices.append(Slice(sid, e, self.stack[-1].qualname, "strided", _src(base, 80), step,
                                           start if start is not None else -1, self._const_int(dim) or 0))
        return out.plus(SLICES, frozenset([sid]))

    # ------------------------------------------------------------------ methods on values
    def _method(self, e: ast.Call, func: ast.Attribute, discarded: bool) -> Provenance:
        frame = self.stack[-1]
        name = func.attr
        holder = self._holder_of(func.value) if isinstance(func.value, ast.Attribute) else None
        if holder is not None:
            if name in ("forward", "__call__"):
                return self._module_call(e, holder)
            if holder.kind == "local":
                methods = self._methods(holder.cls)
                if name in methods:
                    node, owner = methods[name]
                    return self._invoke(node, f"{owner}.{name}", owner, holder.attr + ".", e,
                                        bind_self=not _is_static(node), kind="method")
        ev = self._ev
        base = ev(func.value)
        # ``Provenance.join_all`` of the arguments' and keywords' flows, folded as they are evaluated
        arg_flows, args = self._positional(e)
        for k in e.keywords:
            args = args.join(ev(k.value))
        kind = classify_method(name)
        # a tensor for sure: an input, a computation, a kernel result or an allocation (``state`` alone
        # may be a dict, a flag or a cache as well as a parameter)
        tensor = bool(base.inputs or base.alias or base.ops or base.kernels or base.allocs)
        if name in _LIST_MUTATORS and not tensor:
            if isinstance(func.value, ast.Name) and func.value.id in frame.state:
                frame.state[func.value.id] = base.join(args)
            else:
                chain = self._chain(func.value)
                if chain is not None:
                    self.self_state[chain] = self.self_state.get(chain, EMPTY).join(args)
            return EMPTY
        if name in _PY_METHODS and not tensor:
            return base.join(args)
        if kind is None and not tensor:
            return base.join(args).plus(OPAQUE, frozenset([e.lineno])) if (args.tensorish or base.state) \
                else base.join(args)
        if not base.tensorish and kind in ("compute", "view", "cast", "alloc"):
            return base.join(args)
        if kind == "meta":
            return base.metadata()
        if kind == "host":
            if name == "numpy" and base.alias and not e.args and _same_storage(func.value):
                return base  # ``x.detach().numpy()`` shares x's memory: a write through it writes x
            return base.fresh()
        if kind == "cast":
            return base.join(args.metadata())
        if kind == "alloc":
            aid = self._alloc(e, f"Tensor.{name}")
            return Provenance(meta=base.meta | base.inputs | base.alias | args.meta | args.inputs, allocs=frozenset([aid]))
        if kind == "view":
            if name in _SHAPE_VIEWS:
                self._shape_use(e, "view", tuple(e.args))
            # a view's arguments are shapes, dims or a tensor whose shape is borrowed (``view_as(x)``)
            extra = args.metadata() if name in _ALIAS_VIEWS or name.endswith("_as") else args
            out = base.join(extra) if name in _ALIAS_VIEWS else base.join(extra).fresh()
            if name == "narrow":
                out = self._narrow_slice(e, out)
            elif name == "index_select" and len(e.args) >= 2:
                out = self._index_slice(e, func.value, e.args[0], e.args[1], out)
            if name in BROADCASTS:
                out = self._consume_slices(out, e, f"Tensor.{name}", "first")
            if is_inplace_method(name) and base.alias:
                pass  # squeeze_/t_ change metadata only
            return out
        # compute, known or not
        oname = f"Tensor.{name}"
        if is_inplace_method(name):
            op = self._op(e, oname, "method", inputs=base.join(args))
            result = base.join(args.fresh()).plus(OPS, frozenset([op]))
            self._mutate(func.value, result, e, "method", lambda: f"{_src(func.value, 30)}.{name}(...)")
            return result
        op = self._op(e, oname, "method", inputs=base.join(args))
        result = base.join(args).fresh().plus(OPS, frozenset([op]))
        if name in REDUCTIONS and not (name in ("max", "min") and e.args and arg_flows[0].tensorish):
            result = self._consume_slices(result, e, oname, "strided")
        for k in e.keywords:
            if k.arg == "out":
                self._mutate(k.value, result, e, "out", lambda k=k: f"{oname}(..., out={_src(k.value, 30)})")
        return result

    # ------------------------------------------------------------------ inlining
    def _invoke(self, fn: ast.FunctionDef, qualname: str, cls: str | None, prefix: str, call: ast.Call,
                bind_self: bool, kind: str, leading: Provenance | None = None, explicit_self: bool = False,
                closure_self: str | None = None) -> Provenance:
        stack = self.stack
        caller = stack[-1]
        pos = call.args
        ev = self._ev
        arg_flows = [ev(a.value if type(a) is ast.Starred else a) for a in pos]
        kw_flows = {k.arg: ev(k.value) for k in call.keywords if k.arg} if call.keywords else {}
        facts = self.facts
        facts.calls.append(CallEdge(caller.qualname, qualname, call))
        self.invoked[call] = fn
        if qualname not in facts.functions:
            facts.functions[qualname] = FunctionInfo(qualname, fn, cls, kind)
        recursive = False
        for f in stack:
            if f.qualname == qualname:
                recursive = True
                break
        if recursive or len(stack) > MAX_DEPTH or self.budget < 0:
            facts.truncated = True
            joined = Provenance.join_all(arg_flows + list(kw_flows.values()))
            return joined.fresh().plus(OPAQUE, frozenset([call.lineno]))
        a = fn.args
        params = list(a.posonlyargs) + list(a.args)
        self_name = None
        if bind_self and params:
            self_name = params[0].arg
            params = params[1:]
            if explicit_self and arg_flows:
                arg_flows = arg_flows[1:]
        frame = _Frame(qualname, cls, prefix, caller.depth + 1, self_name or closure_self)
        if closure_self is not None:  # a closure sees its enclosing function's locals
            frame.state.update(caller.state)
            frame.callables.update(caller.callables)
        if leading is not None and not bind_self and params:  # Function.forward(ctx, ...)
            frame.state[params[0].arg] = leading
            params = params[1:]
        defaults = list(a.defaults)
        # the first ``*args`` among the call's arguments: positions from it on are unknown
        starred = next((i for i, x in enumerate(pos) if type(x) is ast.Starred), len(pos))
        for i, p in enumerate(params):
            if i < len(arg_flows) and i < starred:
                frame.state[p.arg] = arg_flows[i]
            elif p.arg in kw_flows:
                frame.state[p.arg] = kw_flows[p.arg]
            elif starred < len(pos):
                frame.state[p.arg] = Provenance.join_all(arg_flows)
            else:
                d_index = i - (len(params) - len(defaults))
                frame.state[p.arg] = self._ev(defaults[d_index]) if 0 <= d_index < len(defaults) else EMPTY
        for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=False):
            frame.state[p.arg] = kw_flows.get(p.arg, EMPTY if d is None else EMPTY)
        if a.vararg is not None:
            frame.state[a.vararg.arg] = Provenance.join_all(arg_flows[len(params):])
        if a.kwarg is not None:
            frame.state[a.kwarg.arg] = Provenance.join_all(list(kw_flows.values()))
        self.stack.append(frame)
        self._block(fn.body)
        self.stack.pop()
        # a helper that launches a kernel writing through a tensor it was handed (``_impl(x, out)``
        # returning nothing): the caller's tensor holds that kernel's result afterwards
        if any(f.allocs for f in arg_flows):
            rebound = self._rebound_params(fn)
            for i, p in enumerate(params[:min(len(arg_flows), starred)]):
                before, after = arg_flows[i], frame.state.get(p.arg)
                if after is None or p.arg in rebound or not before.allocs:
                    continue
                added = after.kernels - before.kernels
                if added:
                    self._write_through(pos[i], after)
        return Provenance.join_all(frame.returns).plus(VIA, frozenset([qualname]))

    def _rebound_params(self, fn: ast.FunctionDef) -> frozenset[str]:
        """Names ``fn`` assigns anywhere in its body (a parameter rebound no longer is the caller's tensor)."""
        got = self.rebound_cache.get(fn)
        if got is None:
            got = self.rebound_cache[fn] = frozenset(
                n.id for n in ast.walk(fn) if type(n) is ast.Name and type(n.ctx) is ast.Store)
        return got
