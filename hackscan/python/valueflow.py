"""The model's value flow (def-use and taint from forward's inputs): one abstract interpretation of
forward, helpers inlined, filling the records of ``facts`` (``build_model_flow``, lazy as ``ctx.model_flow``).

Statements are visited once in order (loop bodies twice, so loop-carried values settle); each
expression gets a ``Provenance``.  Calls are classified by ``catalog``: a custom kernel launch adds a
kernel id, torch compute adds an op id, an allocation an alloc id, a view keeps the input's alias,
metadata keeps only the shape dependency.  A call to a helper defined in the file (a method, a
module function, ``Function.apply``, a submodule class's ``forward``) is analysed in place with
its parameters bound to the argument flows, so facts in helpers are expressed in terms of
forward's own arguments.  Kernels write their outputs through pointer arguments, so a launch also
flows into the fresh buffers passed to it (``out = empty_like(x); k[grid](x, out)``).

Branches, ``try`` blocks and arms are recorded as events in one log; an arm is a slice of that log,
which is how an arm "sees" the ops and kernels of the helpers it calls.
"""

from __future__ import annotations

import ast
import builtins
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ..util.lazy import cached_property
from .catalog import (
    BROADCASTS,
    CONSTANT_FILL,
    INPLACE_FUNCS,
    META_ATTRS,
    META_BUILTINS,
    REDUCTIONS,
    UNINITIALISED,
    classify_method,
    classify_torch,
    is_inplace_method,
    module_kind,
)
from .facts import (
    Alloc,
    Arm,
    Branch,
    CallEdge,
    Condition,
    FunctionInfo,
    Handler,
    Holder,
    KernelCall,
    ModelFlow,
    Mutation,
    PartialUse,
    ReferenceUse,
    Return,
    ShapeUse,
    Slice,
    TorchOp,
    TryBlock,
)
from .imports import CONVENTIONAL
from .indirection import callees, lookup, two_way
from .members import FunctionIndex, MemberScanner, fallback_flags, self_chain, subtree
from .module import HostModule, children
from .program import host_model
from .provenance import EMPTY, KERNELS, OPAQUE, OPS, PARTIAL, SLICES, STATE, VIA, Provenance
from .resolve import Unresolved, dotted_name

MAX_DEPTH = 6
# statements visited per file; beyond it the analysis stops inlining (a pathological file must not
# cost more than a normal one by orders of magnitude)
BUDGET = 6000

_OPERATOR_NAMES = {
    ast.Add: "torch.add", ast.Sub: "torch.sub", ast.Mult: "torch.mul", ast.Div: "torch.div",
    ast.FloorDiv: "torch.floor_divide", ast.Mod: "torch.remainder", ast.Pow: "torch.pow",
    ast.MatMult: "torch.matmul", ast.BitAnd: "torch.bitwise_and", ast.BitOr: "torch.bitwise_or",
    ast.BitXor: "torch.bitwise_xor", ast.LShift: "torch.bitwise_left_shift", ast.RShift: "torch.bitwise_right_shift",
}
_COMPARE_NAMES = {ast.Gt: "torch.gt", ast.GtE: "torch.ge", ast.Lt: "torch.lt", ast.LtE: "torch.le",
                  ast.Eq: "torch.eq", ast.NotEq: "torch.ne"}
_BROAD_EXCEPTIONS = frozenset({"", "Exception", "BaseException", "RuntimeError", "builtins.Exception",
                               "builtins.BaseException", "torch.cuda.OutOfMemoryError", "OSError", "ImportError",
                               "subprocess.CalledProcessError", "AssertionError", "ValueError", "TypeError"})
# ``range(n)`` is a shape use of ``n`` (a loop bound), as metadata-only as ``len``
_META_BUILTINS = META_BUILTINS | {"range"}
_UNION_BUILTINS = frozenset({"max", "min", "abs", "round", "sum", "tuple", "list", "zip", "enumerate", "sorted",
                             "reversed", "divmod", "pow", "iter", "next", "map", "filter", "dict", "set", "any", "all",
                             "str", "repr", "format", "complex"})
_HOST_BUILTINS = frozenset({"float", "int", "bool"})
_QUIET_BUILTINS = frozenset({"print", "setattr", "delattr", "globals", "locals", "vars", "open", "super", "object",
                             "NotImplementedError", "RuntimeError", "ValueError", "TypeError", "Exception",
                             "AssertionError", "warnings.warn", "logging.warning", "logging.info", "logging.debug"})
_ARITH_MODULES = ("math.", "triton.cdiv", "triton.next_power_of_2", "operator.", "functools.reduce", "numpy.prod",
                  "numpy.ceil", "numpy.floor", "numpy.log2", "builtins.")
_PY_METHODS = frozenset({"get", "items", "keys", "values", "pop", "format", "join", "split", "startswith", "endswith",
                         "strip", "lower", "upper", "copy", "index", "count", "popitem", "clear", "replace",
                         "encode", "decode", "setdefault", "update", "append", "extend", "insert"})
_LIST_MUTATORS = frozenset({"append", "extend", "insert", "add", "update", "setdefault", "appendleft"})
_ALIAS_VIEWS = frozenset({
    "view", "view_as", "reshape", "reshape_as", "contiguous", "permute", "transpose", "t", "expand", "expand_as",
    "broadcast_to", "flatten", "unflatten", "squeeze", "unsqueeze", "narrow", "select", "detach", "movedim",
    "moveaxis", "swapaxes", "swapdims", "as_strided", "unfold", "split", "chunk", "unbind", "tensor_split", "diagonal",
    "real", "view_as_real", "view_as_complex", "requires_grad_", "squeeze_", "unsqueeze_", "t_", "transpose_",
    "as_strided_", "detach_",
})
_SHAPE_VIEWS = frozenset({"view", "reshape", "expand", "broadcast_to", "repeat", "tile", "new_empty", "new_zeros",
                          "new_ones", "unflatten"})
_TABLES = (ast.Tuple, ast.List, ast.Dict)  # literals a local table is bound to
_WRAPPERS = frozenset({"torch.compile", "torch.jit.script", "torch.jit.trace", "functools.partial",
                       "torch.cuda.make_graphed_callables", "torch._dynamo.optimize"})
# the last names of _WRAPPERS: an attribute call with another last name cannot canonicalise to one
_WRAPPER_LASTS = frozenset(w.rsplit(".", 1)[-1] for w in _WRAPPERS)


def _may_wrap(func: ast.AST) -> bool:
    """Cheap pre-check for ``canonical(func) in _WRAPPERS``: an attribute chain keeps its last name
    (``x.y.compile`` -> ``....compile``); a bare name may be an alias of anything."""
    return type(func) is not ast.Attribute or func.attr in _WRAPPER_LASTS  # type: ignore[attr-defined]


_PARAM_HOLDERS = frozenset({"module", "parameter", "buffer", "tensor", "container", "stateless"})
_DYNAMIC_SELF = frozenset({"parameters", "named_parameters", "state_dict", "modules", "named_modules", "children",
                           "named_children", "buffers", "named_buffers", "__dict__", "_modules", "_parameters",
                           "_buffers", "load_state_dict", "apply"})
REFERENCE_MODULES = frozenset({"reference", "ref", "problem", "model", "task", "baseline", "original"})


@dataclass
class _Frame:
    qualname: str
    cls: str | None
    prefix: str  # self attribute prefix for a submodule instance ("block.")
    depth: int
    self_name: str | None
    state: dict[str, Provenance] = field(default_factory=dict)
    # locals bound to something callable: a module held by self, a kernel, a torch function
    callables: dict[str, tuple[str, str]] = field(default_factory=dict)
    # locals that are views of other locals: a write through one reaches the base
    views: dict[str, str] = field(default_factory=dict)
    returns: list[Provenance] = field(default_factory=list)
    # names bound so far, in order (an arm's bindings are a slice of it)
    bound: list[str] = field(default_factory=list)
    # locals holding a raw pointer of a tensor: ``p = out.data_ptr()``, ``p = cp.asarray(out.data_ptr())``
    pointers: dict[str, list[ast.AST]] = field(default_factory=dict)
    # locals bound to a tuple, list or dict literal: a table a call may index (``_paths[i](x)``)
    tables: dict[str, ast.AST] = field(default_factory=dict)
    # locals bound to an ``arange`` call: an index ``index_select`` may be handed (``cols = torch.arange(0, n, 8)``)
    aranges: dict[str, ast.Call] = field(default_factory=dict)


def _out_keyword(keywords: list[ast.keyword]) -> ast.AST | None:
    """The value of a call's first ``out=`` keyword (a loop, not an early-exited next(generator))."""
    for k in keywords:
        if k.arg == "out":
            return k.value
    return None


def _inplace_keyword(keywords: list[ast.keyword]) -> bool:
    """``inplace=True`` among a call's keywords (a loop, not an early-exited any(generator): see
    ``HostModule.ancestors``)."""
    for k in keywords:
        if k.arg == "inplace" and isinstance(k.value, ast.Constant) and k.value.value is True:
            return True
    return False


class _Analyser:
    def __init__(self, host: HostModule, facts: ModelFlow):
        self.host = host
        self.facts = facts
        self.flows = facts._flows  # written once per expression evaluated: bound once
        self._canon: Callable[[ast.AST], str] = host.canonical  # bound once: called per callee
        # ``_pointer_bases`` finds ``.data_ptr()`` and ``from_dlpack`` calls only: an identifier is a contiguous token, so a
        # file whose text never spells it has none (a non-ASCII file may spell it in another
        # normalisation form and is walked as before)
        text = host.source.text
        self.any_data_ptr = "data_ptr" in text or "dlpack" in text or not text.isascii()
        self.rebound_cache: dict[ast.FunctionDef, frozenset[str]] = {}
        self.own_package, package_root = _own_package(host.path)
        self.own_extensions = _built_extensions(package_root)
        # one pass over the module's statements: classes, decorated functions (possible JIT kernels) and
        # module-level ``name = value`` (the last one: ``relu = ext.relu_forward`` makes ``relu(x)`` a launch)
        self.classes: dict[str, ast.ClassDef] = {}
        self.module_values: dict[str, ast.AST] = {}
        decorated: list[ast.FunctionDef] = []
        # the same pass also lists the module-level functions (``_module_level_defs`` when some block
        # may define more) and what each module-level def / class name is (``_module_bindings``)
        top_defs: list[ast.FunctionDef] = []
        blocks = False
        triton = host.triton_kernels
        names: dict[str, str] = {}
        for stmt in host.tree.body:
            t = type(stmt)  # exact types: a parsed tree has no subclasses
            if t is ast.ClassDef:
                self.classes[stmt.name] = stmt  # type: ignore[attr-defined]
                names[stmt.name] = "class"  # type: ignore[attr-defined]
            elif t is ast.Assign:
                targets = stmt.targets  # type: ignore[attr-defined]
                if len(targets) == 1 and type(targets[0]) is ast.Name:
                    self.module_values[targets[0].id] = stmt.value  # type: ignore[attr-defined]
            elif t is ast.FunctionDef or t is ast.AsyncFunctionDef:
                top_defs.append(stmt)  # type: ignore[arg-type]
                names[stmt.name] = "triton" if stmt.name in triton else "function"  # type: ignore[attr-defined]
                if t is ast.FunctionDef and stmt.decorator_list:  # type: ignore[attr-defined]
                    decorated.append(stmt)  # type: ignore[arg-type]
            elif t is ast.If or t is ast.Try or t is ast.With:
                blocks = True
        self.jit_kernels = frozenset(
            f.name for f in decorated if f.name not in host.triton_kernels
            and any(_jit_name(self._canon(d.func if isinstance(d, ast.Call) else d)) for d in f.decorator_list))
        facts.jit_kernels = self.jit_kernels
        # host functions compiled by a kernel DSL (CuTe ``@cute.jit``): calling one launches device code
        self.dsl_functions = frozenset(
            f.name for f in decorated
            if any(_dsl_name(self._canon(d.func if isinstance(d, ast.Call) else d)) for d in f.decorator_list))
        # module functions by name; a name defined in several module-level branches keeps every definition
        self.function_alts: dict[str, list[ast.FunctionDef]] = {}
        # without a module-level if / try / with block the walk would find the top-level defs, in order
        for f in (_module_level_defs(host.tree) if blocks else top_defs):
            if f.name not in host.triton_kernels and f.name not in self.jit_kernels:
                self.function_alts.setdefault(f.name, []).append(f)
        self.functions = {name: defs[-1] for name, defs in self.function_alts.items()}
        self.local_bases: dict[str, list[str]] = {}
        self.autograd: set[str] = set()
        for c in self.classes.values():
            chain: list[str] = []
            for b in c.bases:
                bn = self._canon(b)
                if bn in ("torch.autograd.Function", "torch.autograd.function.Function", "Function"):
                    self.autograd.add(c.name)
                if isinstance(b, ast.Name) and b.id in self.classes and b.id != c.name:
                    chain.append(b.id)
            self.local_bases[c.name] = chain
        self.module_names = self._module_bindings(names)
        self.index = FunctionIndex(host)
        self.methods_cache: dict[str, dict[str, tuple[ast.FunctionDef, str]]] = {}
        # holders are fixed before forward is walked: a chain's state name never changes
        self.state_names: dict[str, str] = {}
        self.state_flows: dict[str, Provenance] = {}
        self.chain_reads: dict[str, tuple[bool, Provenance | None]] = {}
        self.self_chains: dict[ast.AST, tuple[str, str | None]] = {}
        self.stack: list[_Frame] = []
        self.log: list[tuple[str, object, int]] = []
        self.op_ids: dict[ast.AST, int] = {}
        self.kernel_ids: dict[ast.AST, int] = {}
        self.alloc_ids: dict[ast.AST, int] = {}
        self.slice_ids: dict[ast.AST, int] = {}
        # call node -> the local function ``_invoke`` analysed for it (latest context): a condition that
        # calls a helper (``if _is_tuned(x):``) reads the comparisons the helper returns
        self.invoked: dict[ast.AST, ast.FunctionDef] = {}
        self.partial_ids: dict[tuple[int, ast.AST], int] = {}
        self.returns: dict[ast.AST, Return] = {}
        self.branch_nodes: set[ast.AST] = set()
        self.try_nodes: set[ast.AST] = set()
        self.mutation_keys: set[tuple[ast.AST, str]] = set()
        self.shape_nodes: set[ast.AST] = set()
        self.void_cache: dict[tuple[str, str], bool] = {}
        self.returns_of: dict[ast.AST, list[ast.AST]] = {}
        self.hidden_results: dict[str, Provenance] = {}
        self.self_state: dict[str, Provenance] = {}
        # ``self.kernel = mod.get_function(...)`` / ``Cls._fn = load_inline(...).fn``: what the attribute runs
        self.attr_callables: dict[str, tuple[str, str]] = {}
        self.budget = BUDGET
        self.global_flows: dict[str, Provenance] = {}
        # names any extension exports; extensions with an unknown list match any attribute call
        self.ext_functions = frozenset(f for ext in host.extensions for f in (ext.functions or ()))
        self.ext_unlisted = bool([ext for ext in host.extensions if ext.functions is None and ext.bound_to])
        self.ext_by_bound: dict[str, object] = {}
        self.cupy_extensions = [ext for ext in host.extensions if ext.kind == "cupy"]
        for ext in host.extensions:
            for b in ext.bound_to:
                self.ext_by_bound[b] = ext

    # the tables below are read by few files (a callable naming a nested def, a container holding
    # unknown members); each depends on the module alone, so it is built on first use

    @cached_property
    def defs_by_pos(self) -> dict[str, ast.AST]:
        """Nested functions and lambdas by position, for callables that name them (``def:12:8``)."""
        out: dict[str, ast.AST] = {}
        for n in self.host.of_type(ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda):
            out[f"{n.lineno}:{n.col_offset}"] = n
        return out

    @cached_property
    def module_classes(self) -> list[str]:
        """Classes defined here that are nn.Modules with a forward (possible members of containers)."""
        return [
            c.name for c in self.classes.values()
            if c.name not in self.autograd and c.name != "Model"
            and any(isinstance(f, ast.FunctionDef) and f.name == "forward" for f in c.body)
            and any(self._canon(b).startswith("torch.nn.") or (isinstance(b, ast.Name) and b.id in self.classes)
                    for b in c.bases)]

    @cached_property
    def kernel_classes(self) -> list[str]:
        """Module classes whose source mentions a kernel: the only hidden members worth analysing."""
        host = self.host
        kernel_words = {b.split(".")[0] for e in host.extensions for b in e.bound_to} | \
            set(host.triton_kernels) | set(self.ext_functions) | {"load_inline", "get_function"}
        lines = host.source.lines
        spans: dict[tuple[int, int | None], str] = {}
        # module functions that mention a kernel count as kernel words too (``residual_relu(out, x)``)
        for _ in range(2):
            for name, defs in self.function_alts.items():
                if name not in kernel_words and any(
                        _mentions(lines, f.lineno - 1, f.end_lineno, kernel_words, spans) for f in defs):
                    kernel_words.add(name)
        return [c for c in self.module_classes
                if _mentions(lines, self.classes[c].lineno - 1, self.classes[c].end_lineno, kernel_words, spans)]

    # ================================================================== module-level knowledge
    def _module_bindings(self, out: dict[str, str]) -> dict[str, str]:
        """What each module-level name is: const, extension, function, class, triton, other.

        ``out`` holds the module-level defs and classes already (found by ``__init__``'s pass over the
        module's statements); the names extensions are bound to are added here."""
        for ext in self.host.extensions:
            for b in ext.bound_to:
                if "." not in b and not b.endswith("()"):
                    out[b] = "extension"
        return out

    # ================================================================== entry
    def run(self, class_name: str | None) -> ModelFlow:
        facts = self.facts
        model = self._find_model(class_name)
        facts.fallback_flags = fallback_flags(self.host)
        self._reference_imports()
        if model is None:
            return facts
        facts.model = model
        facts.model_name = model.name
        facts.bases = tuple(self._canon(b) for b in model.bases)
        members = MemberScanner(self.host, self.classes, self.local_bases, self.index)
        members.scan(model.name)
        facts.holders = members.holders
        facts.derived = members.derived
        self._reference_inheritance(model)
        methods = self._methods(model.name)
        init = methods.get("__init__")
        if init is not None:
            facts.init = FunctionInfo(f"{init[1]}.__init__", init[0], init[1], "method")
            self._init_reference_uses(init[0])
        fwd = methods.get("forward")
        if fwd is None:
            return facts
        node, owner = fwd
        if owner == "Model" and model.name != "Model" and "Model" not in self._all_bases(model.name):
            # ``forward = Model.forward`` in the model's body: the reference's forward is the model's
            alias = next((s for s in model.body if type(s) is ast.Assign and any(
                type(t) is ast.Name and t.id == "forward" for t in s.targets)), model)
            self._reference_call(alias, "model-forward", "forward is Model.forward")
        info = FunctionInfo(f"{owner}.forward", node, owner, "forward")
        facts.forward = info
        facts.functions[info.qualname] = info
        params = self._params(node, skip_self=True)
        facts.args = tuple(p.arg for p in params)
        facts.arg_annotations = {p.arg: _annotation_text(p.annotation) for p in params if p.annotation is not None}
        frame = _Frame(info.qualname, owner, "", 0, node.args.args[0].arg if node.args.args else None)
        flags = _flag_params(node)
        for p in params:
            if p.arg in flags:
                # ``prenorm: bool = False``: a Python switch of the call, never a tensor; a branch on
                # it picks a configuration, it does not look at the data
                frame.state[p.arg] = EMPTY
                continue
            frame.state[p.arg] = Provenance(inputs=frozenset([p.arg]), alias=frozenset([p.arg]))
        self.stack.append(frame)
        self._block(node.body)
        self.stack.pop()
        self._finish()
        return facts

    def _find_model(self, class_name: str | None) -> ast.ClassDef | None:
        if class_name is not None:
            return self.classes.get(class_name)
        return host_model(self.host)  # the one rule (``program.model_class``)

    def _methods(self, cls_name: str) -> dict[str, tuple[ast.FunctionDef, str]]:
        """Methods of a class defined here, its local bases' included (read-only: shared by every caller)."""
        cached = self.methods_cache.get(cls_name)
        if cached is None:
            cached = self.methods_cache[cls_name] = self._collect_methods(cls_name)
        return cached

    def _collect_methods(self, cls_name: str) -> dict[str, tuple[ast.FunctionDef, str]]:
        out: dict[str, tuple[ast.FunctionDef, str]] = {}
        for name in reversed([cls_name, *self._all_bases(cls_name)]):
            cls = self.classes.get(name)
            if cls is None:
                continue
            for f in cls.body:
                if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out[f.name] = (f, name)
                elif type(f) is ast.Assign and len(f.targets) == 1 and type(f.targets[0]) is ast.Name:
                    # ``forward = Other.forward`` / ``forward = getattr(Other, "forward")`` in the class
                    # body: the method is Other's function, run with this class's ``self``
                    alias = self._method_alias(f.value, name)
                    if alias is not None:
                        out[f.targets[0].id] = alias
        return out

    def _method_alias(self, value: ast.AST, cls_name: str) -> tuple[ast.FunctionDef, str] | None:
        direct = lookup(value, self._canon) if type(value) in (ast.Call, ast.Subscript) else None
        value = direct if direct is not None else value
        if type(value) is not ast.Attribute or type(value.value) is not ast.Name:
            return None
        other = value.value.id
        if other == cls_name or other not in self.classes:
            return None
        return self._methods(other).get(value.attr)

    def _all_bases(self, cls_name: str, seen: set[str] | None = None) -> list[str]:
        seen = seen or {cls_name}
        out: list[str] = []
        for b in self.local_bases.get(cls_name, []):
            if b not in seen:
                seen.add(b)
                out.append(b)
                out.extend(self._all_bases(b, seen))
        return out

    @staticmethod
    def _params(fn: ast.FunctionDef, skip_self: bool) -> list[ast.arg]:
        a = fn.args
        params = list(a.posonlyargs) + list(a.args)
        if skip_self and params:
            params = params[1:]
        params += list(a.kwonlyargs)
        if a.vararg is not None:
            params.append(a.vararg)
        return params

    # ================================================================== reference reuse (class 12)
    def _reference_imports(self) -> None:
        for node in self.host.of_type(ast.ImportFrom):
            mod = (node.module or "").split(".")[-1]
            names = {a.name for a in node.names}
            if mod in REFERENCE_MODULES or ("Model" in names and mod not in ("torch", "nn")):
                self.facts.reference_uses.append(ReferenceUse(node, "import", f"from {'.' * node.level}{node.module or ''} import {', '.join(sorted(names))}", False))
        for node in self.host.of_type(ast.Import):
            for a in node.names:
                if a.name.split(".")[-1] in REFERENCE_MODULES:
                    self.facts.reference_uses.append(ReferenceUse(node, "import", f"import {a.name}", False))

    def _reference_inheritance(self, model: ast.ClassDef) -> None:
        for b in model.bases:
            name = self._canon(b)
            if name == "Model" or name.endswith(".Model"):
                self.facts.reference_uses.append(ReferenceUse(b, "inherits", f"class {model.name}({name})", True))

    def _init_reference_uses(self, init: ast.FunctionDef) -> None:
        for node in self.index.calls(init):
            func = node.func
            t = type(func)
            # an attribute chain's canonical name ends in its own last name: only ``x.Model`` can be one
            if t is ast.Name or t is ast.Attribute and func.attr == "Model":  # type: ignore[attr-defined]
                name = self._canon(func)
                if name == "Model" or name.endswith(".Model") and name.split(".")[0] in REFERENCE_MODULES:
                    self.facts.reference_uses.append(ReferenceUse(node, "instantiate", f"{name}(...)", False))

    # ================================================================== statements
    def _block(self, stmts: list[ast.stmt]) -> bool:
        """Visit a block; True when it always ends in return / raise (its state does not flow on)."""
        stmt_ = self._stmt  # bound once per block
        for stmt in stmts:
            if stmt_(stmt):
                return True
        return False

    def _stmt(self, s: ast.stmt) -> bool:
        budget = self.budget = self.budget - 1
        if budget < 0:
            self.facts.truncated = True
        t = type(s)  # parsed trees hold the concrete node classes only: no subclass to miss
        if t is ast.Assign:
            value_node = s.value
            value = self._ev(value_node)
            targets = s.targets
            if len(targets) == 1:  # ``x = ...``: one target, no loop
                self._bind(targets[0], value, value_node)
            else:
                for target in targets:
                    self._bind(target, value, value_node)
            return False
        if t is ast.Expr:  # the commonest kinds first: the tests are exclusive, so order is free
            self._ev(s.value, True)
            return False
        frame = self.stack[-1]  # the rarer kinds below read the frame
        if t is ast.AnnAssign:
            if s.value is not None:
                self._bind(s.target, self._ev(s.value), s.value)
        elif t is ast.AugAssign:
            self._augassign(s)
        elif t is ast.Return:
            flow = self._ev(s.value) if s.value is not None else EMPTY
            frame.returns.append(flow)
            ret = self.returns.get(s)
            if ret is None:
                ret = Return(s, frame.qualname, frame.depth, flow)
                self.returns[s] = ret
            else:
                ret.flow = ret.flow.join(flow)
            self.log.append(("return", ret, frame.depth))
            return True
        elif t is ast.If:
            return self._if(s)
        elif t is ast.For or t is ast.AsyncFor:
            self._for(s)
        elif t is ast.While:
            self._while(s)
        elif t is ast.Try or t.__name__ == "TryStar":
            return self._try(s)  # type: ignore[arg-type]
        elif t is ast.With or t is ast.AsyncWith:
            suppressed = None
            for item in s.items:
                f = self._ev(item.context_expr)
                if item.optional_vars is not None:
                    self._bind(item.optional_vars, f, item.context_expr)
                ce = item.context_expr
                if type(ce) is ast.Call and self._canon(ce.func) == "contextlib.suppress":  # type: ignore[attr-defined]
                    suppressed = ce
            if suppressed is not None:
                return self._suppress(s, suppressed)  # type: ignore[arg-type]
            return self._block(s.body)
        elif t is ast.Raise:
            if s.exc is not None:
                self._ev(s.exc)
            self.log.append(("raise", s, frame.depth))
            return True
        elif t is ast.Assert:
            self._branch_expr(s, s.test, None, None, "assert")
        elif t is ast.Match:
            self._ev(s.subject)
            before = dict(frame.state)
            states = []
            for case in s.cases:
                frame.state = dict(before)
                if not self._block(case.body):
                    states.append(frame.state)
            frame.state = self._join_states(states or [before])
        elif t is ast.FunctionDef or t is ast.AsyncFunctionDef:
            frame.callables[s.name] = ("def", f"{s.lineno}:{s.col_offset}")
        elif t is ast.Delete:
            for t in s.targets:
                if isinstance(t, ast.Name):
                    frame.state.pop(t.id, None)
        # FunctionDef / ClassDef / Import / Global / Pass / Break / Continue: nothing flows
        return False

    # ------------------------------------------------------------------ binding
    def _bind(self, target: ast.AST, value: Provenance, value_node: ast.AST | None) -> None:
        frame = self.stack[-1]
        tt = type(target)  # exact types: a parsed tree has no subclasses
        if tt is ast.Name:
            name = target.id
            frame.state[name] = value
            frame.bound.append(name)
            # a rebinding forgets what the name was: tested first, most names are in none of the tables
            views, callables, pointers = frame.views, frame.callables, frame.pointers
            if name in views:
                del views[name]
            if name in callables:
                del callables[name]
            if name in pointers:
                del pointers[name]
            tables = frame.tables
            if name in tables:
                del tables[name]
            aranges = frame.aranges
            if name in aranges:
                del aranges[name]
            if value_node is not None:
                vt = type(value_node)
                if vt in _TABLES:
                    tables[name] = value_node
                elif vt is ast.Call:
                    # ``_names_arange`` inlined: asked for every name bound to a call
                    f = value_node.func  # type: ignore[attr-defined]
                    ft = type(f)
                    if ft is ast.Attribute and f.attr == "arange" or ft is ast.Name and f.id == "arange":
                        aranges[name] = value_node  # type: ignore[assignment]
                # ``fn = ext.relu`` / ``k = self.kernel`` / ``act = torch.relu``: what ``fn(...)`` runs
                desc = self._callable_of_value(value_node)
                if desc is not None:
                    callables[name] = desc
                if self.any_data_ptr and type(value_node) is ast.Call:
                    bases = _pointer_bases(value_node)
                    if bases:
                        pointers[name] = bases
                base = self._view_base(value_node)
                if base is not None and base != name:
                    views[name] = base
        elif tt is ast.Tuple or tt is ast.List:
            elts = value_node.elts if isinstance(value_node, (ast.Tuple, ast.List)) and \
                len(value_node.elts) == len(target.elts) else None
            for i, t in enumerate(target.elts):
                if isinstance(t, ast.Starred):
                    t = t.value
                if elts is not None:
                    self._bind(t, self._ev(elts[i]), elts[i])
                else:
                    self._bind(t, value, None)
        elif isinstance(target, ast.Attribute):
            chain = self._chain(target)
            if value_node is not None:
                desc = self._callable_of_value(value_node)
                key = "self." + chain if chain is not None else dotted_name(target)
                if desc is not None and key:
                    self.attr_callables[key] = desc
            if chain is not None:
                if chain.endswith(".data") or chain == "data":
                    pass
                self.self_state[chain] = self.self_state.get(chain, EMPTY).join(value)
            else:
                base = self._ev(target.value)
                if target.attr == "data" and base.alias:
                    self._mutate(target.value, value, target, "data", lambda: f"{_src(target.value)}.data =")
        elif isinstance(target, ast.Subscript):
            self._ev(target.slice)
            self._mutate(target.value, value, target, "setitem", lambda: f"{_src(target.value)}[...] =")
        elif isinstance(target, ast.Starred):
            self._bind(target.value, value, value_node)

    def _local_function(self, func: ast.AST) -> ast.FunctionDef | None:
        """The function defined in this file that ``func(...)`` calls, if any."""
        t = type(func)  # exact types: a parsed tree has no subclasses
        if t is ast.Name:
            return self.functions.get(func.id)  # type: ignore[attr-defined,return-value]
        if t is ast.Attribute and type(func.value) is ast.Name:  # type: ignore[attr-defined]
            frame = self.stack[-1]
            cls = frame.cls if func.value.id == frame.self_name else func.value.id
            if cls in self.classes:
                found = self._methods(cls).get(func.attr)
                if found is not None:
                    return found[0]  # type: ignore[return-value]
        return None

    def _callable_of_value(self, node: ast.AST, depth: int = 0) -> tuple[str, str] | None:
        """What calling the value of ``node`` runs: a kernel, a torch function, a module held by self."""
        # dispatched on the exact node type (a parsed tree has no subclasses): every binding asks
        t = type(node)
        if t is ast.Call:
            if node.args and depth < 2 and _may_wrap(node.func) and \
                    self._canon(node.func) in _WRAPPERS:
                return self._callable_of_value(node.args[0], depth + 1)
            if depth < 2:
                fn = self._local_function(node.func)
                if fn is not None:
                    # what a function returns depends on its tree alone: walked once per function
                    rets = self.returns_of.get(fn)
                    if rets is None:
                        rets = self.returns_of[fn] = _returns_of(fn)
                    for ret in rets:
                        desc = self._callable_of_value(ret, depth + 1)
                        if desc is None and type(ret) is ast.Name:
                            # a factory returning a function it defines (``def make(): def impl(..): ..;
                            # return impl``): calling the result runs that closure
                            desc = next((("def", f"{d.lineno}:{d.col_offset}") for d in self.index.defs(fn)
                                         if d.name == ret.id), None)
                        if desc is not None:
                            return desc
            if isinstance(node.func, ast.Attribute) and node.func.attr == "compile" and node.args and \
                    isinstance(node.args[0], ast.Name) and node.args[0].id in self.dsl_functions:
                # ``compiled = cute.compile(host_fn, ...)``: calling the result launches ``host_fn``
                return ("dsl", node.args[0].id)
            if isinstance(node.func, ast.Attribute) and node.func.attr in ("get_function", "get_kernel"):
                owner = node.func.value
                chain = self._chain(owner)
                key = dotted_name(owner)
                ext = self.ext_by_bound.get(key) if key else None
                if ext is None and chain is not None:
                    holder = self.facts.holders.get(chain)
                    if holder is not None and holder.kind == "extension":
                        return ("cupy", holder.attr)
                if ext is not None:
                    return ("cupy", ext.name)  # type: ignore[attr-defined]
                if any(e.kind == "cupy" for e in self.host.extensions):
                    return ("cupy", key or "cupy")
            return None
        if t is ast.Attribute:
            frame = self.stack[-1]
            if isinstance(node.value, ast.Name) and node.value.id == frame.self_name and frame.cls is not None \
                    and node.attr in self._methods(frame.cls):
                return ("method", node.attr)
            chain = self._chain(node)
            if chain is not None:
                holder = self.facts.holders.get(chain)
                if holder is not None and holder.kind in ("module", "stateless", "container", "local", "callable"):
                    return ("holder", chain)
                return self.attr_callables.get("self." + chain)
            owner = dotted_name(node.value)
            ext = self.ext_by_bound.get(owner) if owner else None
            if ext is not None:
                return ("extfn", f"{ext.name}.{node.attr}")  # type: ignore[attr-defined]
            if isinstance(node.value, ast.Call):
                for ext in self.host.extensions:
                    if ext.call is node.value:
                        return ("extfn", f"{ext.name}.{node.attr}")
            if node.attr == "apply" and type(node.value) is ast.Name and node.value.id in self.autograd:
                return ("autograd", node.value.id)  # ``relu = _Relu.apply``: runs _Relu.forward
            canon = self._canon(node)
            if canon.startswith("torch.") and classify_torch(canon) == "compute":
                return ("torch", canon)
            return self.attr_callables.get(dotted_name(node)) if dotted_name(node) else None
        if t is ast.Name:
            frame = self.stack[-1]
            if node.id in self.functions and node.id not in frame.state:
                return ("func", node.id)
            if node.id in self.host.triton_kernels:
                return ("triton", node.id)
            return frame.callables.get(node.id)
        if t is ast.Lambda:
            return ("lambda", f"{node.lineno}:{node.col_offset}")
        return None

    def _view_base(self, node: ast.AST) -> str | None:
        """The local a view expression is taken of: ``y = x.view(-1)`` -> ``x``."""
        e = node
        while True:
            t = type(e)  # exact types: a parsed tree has no subclasses
            if t is ast.Call:
                f = e.func  # type: ignore[attr-defined]
                if type(f) is not ast.Attribute or f.attr not in _ALIAS_VIEWS and not (
                        f.attr == "numpy" and _same_storage(f.value)):
                    break
                e = f.value
            elif t is ast.Subscript:
                e = e.value  # type: ignore[attr-defined]
            elif t is ast.Attribute and e.attr in ("T", "mT", "data"):  # type: ignore[attr-defined]
                e = e.value  # type: ignore[attr-defined]
            else:
                break
        if e is node:
            return None
        return e.id if type(e) is ast.Name else None  # type: ignore[attr-defined]

    def _mutate(self, target: ast.AST, value: Provenance, node: ast.AST, kind: str, how: Callable[[], str]) -> None:
        """An in-place write into ``target``: its flow absorbs ``value``; record writes into inputs."""
        frame = self.stack[-1]
        current = self._ev(target)
        if current.alias:
            for arg in sorted(current.alias):
                key = (node, arg)
                if key not in self.mutation_keys:
                    self.mutation_keys.add(key)
                    self.facts.mutations.append(Mutation(node, frame.qualname, arg, how(), kind))
        # the written values are copied in: the target keeps its own storage, not the source's
        value = value.fresh()
        updated = current.join(value)
        if isinstance(target, ast.Name):
            name = target.id
            frame.state[name] = updated
            base = frame.views.get(name)
            seen = {name}
            while base is not None and base not in seen:
                seen.add(base)
                frame.state[base] = frame.state.get(base, EMPTY).join(value)
                base = frame.views.get(base)
            for other, b in list(frame.views.items()):
                if b == name and other not in seen:
                    frame.state[other] = frame.state.get(other, EMPTY).join(value)
        else:
            chain = self._chain(target)
            if chain is not None:
                self.self_state[chain] = self.self_state.get(chain, EMPTY).join(value)
            elif isinstance(target, (ast.Subscript, ast.Attribute)):
                inner = target.value
                while isinstance(inner, (ast.Subscript, ast.Attribute)) and self._chain(inner) is None:
                    inner = inner.value
                if isinstance(inner, ast.Name) and inner.id in frame.state:
                    frame.state[inner.id] = frame.state[inner.id].join(value)

    def _augassign(self, s: ast.AugAssign) -> None:
        value = self._ev(s.value)
        current = self._ev(s.target)
        if type(s.op) is ast.Add and type(s.value) is ast.List and s.value.elts and \
                not all(type(e) is ast.Constant for e in s.value.elts):
            # ``debug_list += [alpha, beta]``: extending a Python list with objects.  A tensor plus a
            # list of tensors is no in-place op (torch cannot make one tensor of them); a tensor plus
            # a list of numbers is, and stays a mutation below
            self._bind(s.target, current.join(value), None)
            return
        if current.tensorish and (value.tensorish or current.alias or current.allocs or current.ops or current.kernels):
            op = self._op(s, _OPERATOR_NAMES.get(type(s.op), "torch.add"), "operator", inputs=current.join(value))
            result = current.join(value).plus(OPS, frozenset([op]))
            if isinstance(s.target, (ast.Name, ast.Subscript, ast.Attribute)) and current.alias:
                self._mutate(s.target if not isinstance(s.target, ast.Subscript) else s.target.value, result, s,
                             "augassign", lambda: f"{_src(s.target)} {_AUG.get(type(s.op), '+')}=")
                return
            if isinstance(s.target, ast.Subscript):
                self._mutate(s.target.value, result, s, "setitem", lambda: f"{_src(s.target)} {_AUG.get(type(s.op), '+')}=")
                return
            self._bind(s.target, result, None)
        else:
            self._bind(s.target, current.join(value), None)

    # ------------------------------------------------------------------ control flow
    def _arm(self, label: str, stmts: list[ast.stmt], start: int, depth: int, terminates: bool,
             bindings: dict[str, Provenance] | None = None, value: Provenance | None = None) -> Arm:
        events = self.log[start:]
        kernels, ops, allocs, returns = [], [], [], []
        raises = False
        for kind, obj, d in events:
            if kind == "kernel":
                kernels.append(obj)
            elif kind == "op":
                ops.append(obj)
            elif kind == "alloc":
                allocs.append(obj)
            elif kind == "return" and d == depth:
                returns.append(obj)
            elif kind == "raise" and d == depth:
                raises = True
        first = stmts[0].lineno if stmts else 0
        last = (stmts[-1].end_lineno or stmts[-1].lineno) if stmts else 0
        # ``tuple(_uniq(x))`` without the call for the short lists most arms have
        return Arm(label, first, last,
                   tuple(kernels) if len(kernels) < 2 else tuple(_uniq(kernels)),
                   tuple(ops) if len(ops) < 2 else tuple(_uniq(ops)),
                   tuple(allocs) if len(allocs) < 2 else tuple(_uniq(allocs)),
                   tuple(returns) if len(returns) < 2 else tuple(_uniq(returns)),
                   raises, bindings or {}, value, terminates)

    @staticmethod
    def _bound_since(frame: _Frame, mark: int) -> set[str]:
        return set(frame.bound[mark:])

    def _if(self, s: ast.If) -> bool:
        frame = self.stack[-1]
        self._ev(s.test)
        # a branch is recorded on its first visit only (a helper called twice, a loop body): the
        # condition and the arms, pure summaries of that visit, are built only while the node is not
        # yet recorded.  Each is checked where it is built, so a re-entrant visit that records the
        # node in between skips exactly the summaries that would have been thrown away.
        branches = self.branch_nodes
        cond = self._condition(s.test) if s not in branches else None
        before = dict(frame.state)
        start, mark = len(self.log), len(frame.bound)
        body_term = self._block(s.body)
        body_state = frame.state
        body = body_names = None
        if s not in branches:
            body_names = self._bound_since(frame, mark)
            body = self._arm("body", s.body, start, frame.depth, body_term,
                             {n: body_state[n] for n in body_names if n in body_state})
        # the else arm starts from ``before`` itself, not a copy: nothing reads ``before`` after the else
        # block but the no-else bindings below, and without an else nothing writes into it
        frame.state = before
        start, mark = len(self.log), len(frame.bound)
        else_term = self._block(s.orelse) if s.orelse else False
        else_state = frame.state
        if s not in branches:
            if not s.orelse:  # no else: the names the body rebinds keep their old values on this path
                else_bindings = {n: before[n] for n in body_names if n in before}  # type: ignore[union-attr]
            else:
                else_names = self._bound_since(frame, mark)
                else_bindings = {n: else_state[n] for n in else_names if n in else_state}
            orelse = self._arm("orelse", s.orelse, start, frame.depth, else_term, else_bindings)
            branches.add(s)
            self.facts.branches.append(Branch(s, "if", frame.qualname, frame.depth, cond, body, orelse))
        live = [st for st, term in ((body_state, body_term), (else_state, else_term)) if not term]
        frame.state = self._join_states(live) if live else else_state
        return body_term and else_term

    def _join_states(self, states: list[dict[str, Provenance]]) -> dict[str, Provenance]:
        # the first state copied whole (the keys keep its order), the others joined into it
        out = dict(states[0])
        get = out.get
        for st in states[1:]:
            for k, v in st.items():
                cur = get(k)
                if cur is None:
                    out[k] = v
                elif cur is not v:  # most names hold the same flow in every state: ``join`` would return it
                    out[k] = cur.join(v)
        return out

    def _for(self, s: ast.For) -> None:
        frame = self.stack[-1]
        self._bind(s.target, self._ev(s.iter), None)
        if isinstance(s.target, ast.Name) and isinstance(s.iter, ast.Attribute):
            chain = self._chain(s.iter)
            if chain is not None and self.facts.holders.get(chain) is not None:
                frame.callables[s.target.id] = ("holder", chain)
        # one pass: flows are sets, and the rules need what reaches the output, not a fixpoint
        before = dict(frame.state)
        self._block(s.body)
        frame.state = self._join_states([before, frame.state])
        if s.orelse:
            self._block(s.orelse)

    def _while(self, s: ast.While) -> None:
        frame = self.stack[-1]
        before = dict(frame.state)
        self._ev(s.test)
        cond = self._condition(s.test) if s not in self.branch_nodes else None  # first visit only (see _if)
        start = len(self.log)
        term = self._block(s.body)
        if s not in self.branch_nodes:
            self.branch_nodes.add(s)
            body = self._arm("body", s.body, start, frame.depth, term)
            self.facts.branches.append(Branch(s, "while", frame.qualname, frame.depth, cond, body,
                                              Arm("orelse", 0, 0)))
        frame.state = self._join_states([before, frame.state])
        if s.orelse:
            self._block(s.orelse)

    def _branch_expr(self, node: ast.AST, test: ast.expr, a: ast.expr | None, b: ast.expr | None,
                     kind: str) -> Provenance:
        frame = self.stack[-1]
        branches = self.branch_nodes
        self._ev(test)
        # summaries of the first visit only (see _if)
        cond = self._condition(test) if node not in branches else None
        start = len(self.log)
        fa = self._ev(a) if a is not None else EMPTY
        arm_a = _with_lines(self._arm("body", [], start, frame.depth, False, value=fa), a) \
            if node not in branches else None
        start = len(self.log)
        fb = self._ev(b) if b is not None else EMPTY
        if node not in branches:
            arm_b = _with_lines(self._arm("orelse", [], start, frame.depth, False, value=fb), b)
            self.branch_nodes.add(node)
            self.facts.branches.append(Branch(node, kind, frame.qualname, frame.depth, cond, arm_a, arm_b))
        return fa.join(fb)

    def _try(self, s: ast.Try) -> bool:
        frame = self.stack[-1]
        before = dict(frame.state)
        start = len(self.log)
        # a handler runs when some statement of the body raised: that statement's own binding never
        # happened (``try: x = kernel(x) except: x = torch_op(x)`` sees the original x)
        body_term = self._block(s.body[:-1])
        before_last = dict(frame.state)
        if not body_term and s.body:
            body_term = self._stmt(s.body[-1])
        else_term = False
        if s.orelse and not body_term:
            else_term = self._block(s.orelse)
        after_body = frame.state
        # the arms and handlers summarise the first visit only (see _if)
        tries = self.try_nodes
        body = self._arm("try", s.body, start, frame.depth, body_term or else_term) if s not in tries else None
        handlers = []
        states = [] if (body_term or else_term) else [after_body]
        all_term = body_term or else_term
        for h in s.handlers:
            frame.state = self._join_states([before, before_last])
            if h.name:
                frame.state[h.name] = EMPTY
            start, mark = len(self.log), len(frame.bound)
            term = self._block(h.body)
            if s not in tries:
                names = self._bound_since(frame, mark)
                arm = self._arm("handler", h.body, start, frame.depth, term,
                                {n: frame.state[n] for n in names if n in frame.state})
                types = self._exception_types(h.type)
                broad = _broad(types)
                handlers.append(Handler(h, types, broad, arm))
            if not term:
                states.append(frame.state)
            all_term = all_term and term
        frame.state = self._join_states(states) if states else self._join_states([before, after_body])
        if s not in self.try_nodes:
            self.try_nodes.add(s)
            self.facts.tries.append(TryBlock(s, frame.qualname, frame.depth, body, tuple(handlers)))
        if s.finalbody:
            if self._block(s.finalbody):
                return True
        return all_term and bool(s.handlers)

    def _suppress(self, s: ast.With, cm: ast.Call) -> bool:
        """``with contextlib.suppress(E): body`` is ``try: body except E: pass``: an exception skips the
        rest of the body and forward goes on after the block, where a fallback can wait.  Recorded as a
        try whose one handler falls through (its node a stand-in at the ``with``), so HS107 reads the code
        after the block as the handler's work, as it does for ``except: pass``."""
        frame = self.stack[-1]
        before = dict(frame.state)
        start = len(self.log)
        body_term = self._block(s.body)
        first = s not in self.try_nodes
        if first:
            body = self._arm("try", s.body, start, frame.depth, body_term)
            handler = ast.copy_location(ast.ExceptHandler(type=None, name=None, body=[ast.Pass()]), s)
            types = tuple(self._canon(a) or dotted_name(a) for a in cm.args)
            broad = _broad(types)
            arm = self._arm("handler", [], len(self.log), frame.depth, False, {})
            self.try_nodes.add(s)
            self.facts.tries.append(TryBlock(s, frame.qualname, frame.depth, body,  # type: ignore[arg-type]
                                             (Handler(handler, types, broad, arm),)))
        # the body may stop at any statement: what follows sees the state before it and after it
        frame.state = self._join_states([before, frame.state]) if not body_term else before
        return False

    def _exception_types(self, node: ast.AST | None) -> tuple[str, ...]:
        if node is None:
            return ()
        elts = node.elts if isinstance(node, ast.Tuple) else [node]
        return tuple(self._canon(e) or dotted_name(e) for e in elts)

    # ------------------------------------------------------------------ conditions
    def _condition(self, test: ast.expr) -> Condition:
        flow = self.facts._flows.get(test, EMPTY)
        value_reads: list[tuple[str, ast.AST]] = []
        shape_lits: list[tuple[int, ast.AST]] = []
        state: set[str] = set()
        frame = self.stack[-1]
        flows = self.facts._flows
        if flow.inputs:
            stack = [test]
            while stack:
                n = stack.pop()
                f = flows.get(n)
                if isinstance(n, (ast.Call, ast.Subscript)) and f is not None and f.inputs:
                    value_reads.append((_src(n, 60), n))
                    continue
                if isinstance(n, ast.Name) and f is not None and f.inputs and n.id in frame.state:
                    value_reads.append((n.id, n))
                    continue
                stack.extend(children(n))
        fstate = frame.state
        for n in subtree(test):
            t = type(n)  # exact types: a parsed tree has no subclasses
            if t is ast.Name:
                if type(n.ctx) is ast.Load and n.id not in fstate:  # type: ignore[attr-defined]
                    state.add(n.id)  # type: ignore[attr-defined]
            elif t is ast.Attribute:
                chain = self._chain(n)
                if chain is not None:
                    state.add("self." + chain)
            elif t is ast.Compare:
                shape_lits.extend(self._meta_compare_literals(n, flows))  # type: ignore[arg-type]
            elif t is ast.Call and flows.get(n, EMPTY).meta:
                helper = self.invoked.get(n)
                if helper is not None:
                    shape_lits.extend(self._returned_shape_literals(helper))
        return Condition(test, flow, frozenset(flow.inputs), tuple(value_reads), frozenset(flow.meta),
                         tuple(shape_lits), frozenset(state))

    def _returned_shape_literals(self, fn: ast.FunctionDef, depth: int = 0) -> list[tuple[int, ast.AST]]:
        """Literals compared with metadata in what a helper returns (``return t.shape[-1] == 4096``): a
        condition written as ``if _is_tuned(x):`` tests the shape as much as the comparison inlined.
        Only the returned expressions are read (a helper's body is its own business), through helpers
        they call in turn, two levels deep; the flows are those of the helper's latest analysis."""
        out: list[tuple[int, ast.AST]] = []
        flows = self.facts._flows
        rets = self.returns_of.get(fn)
        if rets is None:
            rets = self.returns_of[fn] = _returns_of(fn)
        for r in rets:
            for n in subtree(r):
                t = type(n)
                if t is ast.Compare:
                    out.extend(self._meta_compare_literals(n, flows))  # type: ignore[arg-type]
                elif t is ast.Call and depth < 1:
                    inner = self.invoked.get(n)
                    if inner is not None and inner is not fn:
                        out.extend(self._returned_shape_literals(inner, depth + 1))
        return out

    def _meta_compare_literals(self, n: ast.Compare, flows: dict[ast.AST, Provenance]) -> list[tuple[int, ast.AST]]:
        """The integer literals of a comparison one of whose sides reads metadata (``x.shape[1] == 4096``)."""
        sides = [n.left, *n.comparators]
        if any([flows.get(x, EMPTY).meta for x in sides]):  # a list: a generator left early is closed by a raised GeneratorExit
            return [lit for x in sides for lit in self._int_literals(x)]
        return []

    def _int_literals(self, node: ast.AST) -> list[tuple[int, ast.AST]]:
        out: list[tuple[int, ast.AST]] = []
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            out.append((node.value, node))
        elif isinstance(node, (ast.Tuple, ast.List)):
            for e in node.elts:
                out.extend(self._int_literals(e))
        elif isinstance(node, ast.Name) and node.id not in self.stack[-1].state:
            v = self.host.resolver.try_value(node, self.host.module_scope, 10**9)
            if isinstance(v, int) and not isinstance(v, bool):
                out.append((v, node))
        return out

    # ================================================================== expressions
    def _chain(self, node: ast.AST) -> str | None:
        if type(node) is not ast.Attribute:  # self_chain's own first test, without the call
            return None
        frame = self.stack[-1]
        name = frame.self_name
        if name is None:
            return None
        v = node.value  # type: ignore[attr-defined]
        if type(v) is ast.Name:  # one level (``self.fc``, ``torch.relu``): ``self_chain`` without the memo
            if v.id != name:  # type: ignore[attr-defined]
                return None
            c = node.attr  # type: ignore[attr-defined]
        else:
            # a node's chain depends on the node and the frame's self name alone; a call asks for its
            # callee's chain several times and helpers are revisited at each call site: once per node
            got = self.self_chains.get(node)
            if got is not None and got[0] == name:
                c = got[1]
            else:
                c = self_chain(node, name)
                self.self_chains[node] = (name, c)
            if c is None:
                return None
        return frame.prefix + c if frame.prefix else c

    def _ev(self, e: ast.AST, discarded: bool = False) -> Provenance:
        t = type(e)
        if t is ast.Constant:
            return EMPTY
        if t is ast.Name:
            flow = self.stack[-1].state.get(e.id)  # type: ignore[attr-defined]
            if flow is None:
                flow = self._global(e)  # type: ignore[arg-type]
        else:
            handler = _EVAL.get(t)
            flow = handler(self, e, discarded) if handler is not None else EMPTY
        # the latest context wins: conditions and rules read it right after evaluation
        self.flows[e] = flow
        return flow

    def _ev_binop(self, e: ast.BinOp, discarded: bool) -> Provenance:
        left, right = self._ev(e.left), self._ev(e.right)
        joined = left.join(right)
        if left.tensorish or right.tensorish:
            op = self._op(e, _OPERATOR_NAMES.get(type(e.op), "torch.add"), "operator", inputs=joined)
            return joined.fresh().plus(OPS, frozenset([op]))
        return joined

    def _ev_unary(self, e: ast.UnaryOp, discarded: bool) -> Provenance:
        inner = self._ev(e.operand)
        if isinstance(e.op, ast.USub) and inner.tensorish:
            op = self._op(e, "torch.neg", "operator", inputs=inner)
            return inner.fresh().plus(OPS, frozenset([op]))
        return inner.fresh()

    def _ev_compare(self, e: ast.Compare, discarded: bool) -> Provenance:
        ops = e.ops
        if len(ops) == 1:  # ``a < b``, ``x is None``: the general path below for one operator, unrolled
            left, right = self._ev(e.left), self._ev(e.comparators[0])
            ot = type(ops[0])
            if ot is ast.Is or ot is ast.IsNot:
                return left.join(right).metadata()
            out = left.join(right).fresh()
            if (left.tensorish or right.tensorish) and ot is not ast.In and ot is not ast.NotIn:
                op = self._op(e, _COMPARE_NAMES.get(ot, "torch.eq"), "operator", inputs=out)
                out = out.plus(OPS, frozenset([op]))
            return out
        flows = [self._ev(e.left)] + [self._ev(c) for c in e.comparators]
        if all(isinstance(o, (ast.Is, ast.IsNot)) for o in e.ops):
            return Provenance.join_all(flows).metadata()  # identity (``x is None``), not values
        out = Provenance.join_all(flows).fresh()
        if any(f.tensorish for f in flows) and not all(isinstance(o, (ast.Is, ast.IsNot, ast.In, ast.NotIn))
                                                       for o in e.ops):
            op = self._op(e, _COMPARE_NAMES.get(type(e.ops[0]), "torch.eq"), "operator", inputs=out)
            out = out.plus(OPS, frozenset([op]))
        return out

    def _ev_boolop(self, e: ast.BoolOp, discarded: bool) -> Provenance:
        return self._fold(e.values)

    def _fold(self, nodes: list[ast.expr]) -> Provenance:
        """``Provenance.join_all`` of the nodes' flows, folded as they are evaluated (same order, no list)."""
        out = EMPTY
        ev = self._ev
        for n in nodes:
            out = out.join(ev(n))
        return out

    def _ev_ifexp(self, e: ast.IfExp, discarded: bool) -> Provenance:
        return self._branch_expr(e, e.test, e.body, e.orelse, "ifexp")

    def _ev_seq(self, e: ast.Tuple, discarded: bool) -> Provenance:
        return self._fold(e.elts)

    def _ev_dict(self, e: ast.Dict, discarded: bool) -> Provenance:
        return Provenance.join_all([self._ev(v) for v in e.values if v is not None] +
                             [self._ev(k) for k in e.keys if k is not None])

    def _ev_starred(self, e: ast.Starred, discarded: bool) -> Provenance:
        return self._ev(e.value)

    def _ev_named(self, e: ast.NamedExpr, discarded: bool) -> Provenance:
        f = self._ev(e.value)
        self._bind(e.target, f, e.value)
        return f

    def _ev_comp(self, e: ast.ListComp, discarded: bool) -> Provenance:
        for g in e.generators:
            self._bind(g.target, self._ev(g.iter), None)
            for cond in g.ifs:
                self._ev(cond)
        if isinstance(e, ast.DictComp):
            return self._ev(e.key).join(self._ev(e.value))
        return self._ev(e.elt)

    def _ev_value(self, e: ast.Await, discarded: bool) -> Provenance:
        return self._ev(e.value) if e.value is not None else EMPTY

    def _ev_joined(self, e: ast.JoinedStr, discarded: bool) -> Provenance:
        for v in e.values:
            self._ev(v)
        return EMPTY

    def _ev_slice(self, e: ast.Slice, discarded: bool) -> Provenance:
        return Provenance.join_all([self._ev(x) for x in (e.lower, e.upper, e.step) if x is not None])

    def _global(self, e: ast.Name) -> Provenance:
        """A name not bound in the function: a constant, an import, a def, or module state."""
        name = e.id
        if name in self.module_names or name in _BUILTIN_NAMES or name in self.host.imports.aliases \
                or name in CONVENTIONAL:
            return EMPTY
        cached = self.global_flows.get(name)
        if cached is None:
            v = self.host.resolver.try_value(e, self.host.module_scope, 10**9)
            cached = Provenance(state=frozenset([f"global:{name}"])) if v is Unresolved else EMPTY
            self.global_flows[name] = cached
        return cached

    def _attribute(self, e: ast.Attribute, discarded: bool = False) -> Provenance:
        chain = self._chain(e)
        if chain is not None:
            return self._self_read(chain, e)
        base = self._ev(e.value)
        if e.attr in META_ATTRS:
            return base.metadata()
        # a view attribute (``x.T``), a module attribute (torch.float32, math.pi), an unknown global's or
        # any other value's attribute: the base's flow
        return base

    def _self_read(self, chain: str, node: ast.AST) -> Provenance:
        reads = self.facts.attr_reads.get(chain)
        if reads is None:
            self.facts.attr_reads[chain] = [node]
        elif reads[-1] is not node:
            reads.append(node)
        # what a chain reads apart from its assigned state depends on the chain alone (holders are
        # fixed before forward is walked): (dynamic access, state flow or None for a config / EMPTY
        # for ``training``), computed once per chain
        got = self.chain_reads.get(chain)
        if got is None:
            got = self.chain_reads[chain] = self._chain_read(chain)
        dynamic, base = got
        if dynamic:
            self.facts.dynamic_self_access.append(node)
        if base is EMPTY:
            return EMPTY
        assigned = self.self_state.get(chain)
        if base is None:  # a config holder: only what was assigned
            return assigned or EMPTY
        return base.join(assigned) if assigned is not None else base

    def _chain_read(self, chain: str) -> tuple[bool, Provenance | None]:
        last = chain.rsplit(".", 1)[-1]
        dynamic = last in _DYNAMIC_SELF
        if last == "training":
            return dynamic, EMPTY
        holder = self.facts.holders.get(chain)
        if holder is not None and holder.kind == "config":
            return dynamic, None
        return dynamic, self._state_flow(chain)

    def _state_flow(self, chain: str) -> Provenance:
        """``Provenance(state={_state_name(chain)})``, one per chain."""
        got = self.state_flows.get(chain)
        if got is None:
            got = self.state_flows[chain] = Provenance(state=frozenset([self._state_name(chain)]))
        return got

    def _state_name(self, chain: str) -> str:
        """``param:fc.weight`` for learned state held by a parameter holder, ``self.cache`` otherwise."""
        got = self.state_names.get(chain)
        if got is None:
            got = self.state_names[chain] = self._holder_state_name(chain)
        return got

    def _holder_state_name(self, chain: str) -> str:
        # the chain, then its prefixes shorter by one name at a time (``a.b.c``, ``a.b``, ``a``): the
        # nearest holder decides.  ``rpartition`` yields the keys the joins of ``split``'s parts did
        holders = self.facts.holders
        key = chain
        while True:
            holder = holders.get(key)
            if holder is not None:
                if holder.kind in _PARAM_HOLDERS:
                    return f"param:{chain}"
                break
            key, dot, _last = key.rpartition(".")
            if not dot:
                break
        return f"self.{chain}"

    # ------------------------------------------------------------------ subscripts and slices
    def _subscript(self, e: ast.Subscript, discarded: bool = False) -> Provenance:
        base = self._ev(e.value)
        index = self._ev(e.slice)
        if not base.tensorish:
            return base.join(index)
        out = base.join(index.fresh()) if index.tensorish else base
        sl = self._partial_slice(e) if base.inputs else None
        if sl is not None:
            out = out.plus(SLICES, frozenset([sl]))
        return out

    def _partial_slice(self, e: ast.Subscript) -> int | None:
        idx = e.slice
        if type(idx) is ast.Subscript or type(idx) is ast.Name and idx.id not in self.stack[-1].state:
            # an index kept in a module-level table (``x[_SAMPLE[x.shape[1] > 1024]]`` with ``_SAMPLE =
            # (slice(None), (slice(None), slice(None, None, 4)))``): any entry the key can pick may be used
            for entry in self._index_table(idx):
                sid = self._partial_slice_of(e, entry)
                if sid is not None:
                    return sid
            return None
        return self._partial_slice_of(e, idx)

    def _index_table(self, idx: ast.Subscript | ast.Name) -> list[ast.expr]:
        """The indices a module-level table of ``slice(...)`` objects holds, as subscript syntax (``slice(None,
        None, 4)`` as ``::4``); empty when the table is not one.  Only a literal tuple / list / dict bound once
        at module level is read."""
        name = idx.value if type(idx) is ast.Subscript else idx
        value = self.module_values.get(name.id) if type(name) is ast.Name else None  # type: ignore[union-attr]
        if value is None:
            return []
        key = self._const_int(idx.slice) if type(idx) is ast.Subscript else None
        if type(idx) is ast.Name:
            entries = [value]
        elif type(value) in (ast.Tuple, ast.List):
            entries = list(value.elts)  # type: ignore[attr-defined]
            if key is not None:  # ``_HALVES[1]``: that entry alone
                entries = [entries[key]] if -len(entries) <= key < len(entries) else []
        elif type(value) is ast.Dict:
            entries = [v for v in value.values if v is not None]  # type: ignore[attr-defined]
        else:
            return []
        out = []
        for entry in entries:
            parts = entry.elts if type(entry) is ast.Tuple else [entry]  # type: ignore[attr-defined]
            conv = [_as_slice(p) for p in parts]
            if any(c is None for c in conv):
                continue
            out.append(ast.Tuple(elts=conv, ctx=ast.Load()) if type(entry) is ast.Tuple else conv[0])
        return out  # type: ignore[return-value]

    def _partial_slice_of(self, e: ast.Subscript, idx: ast.expr) -> int | None:
        it = type(idx)  # exact types: parsed trees and ``_index_table``'s built nodes have no subclasses
        if it is not ast.Tuple and it is not ast.Slice and it is not ast.Constant:
            return None  # ``x[i]``, ``x[mask]``: one index that is neither a slice nor ``0`` marks no partial use
        elts = list(idx.elts) if it is ast.Tuple else [idx]  # type: ignore[attr-defined]
        kind, step, start, axis = None, 1, 0, 0
        for i, el in enumerate(elts):
            if isinstance(el, ast.Slice):
                st = self._const_int(el.step) if el.step is not None else 1
                lo = self._const_int(el.lower) if el.lower is not None else 0
                hi = self._const_int(el.upper) if el.upper is not None else None
                if st is not None and st > 1:
                    kind, step, start, axis = "strided", st, lo or 0, i
                    break
                if st is None and self._size_derived(el.step):
                    # ``flat[::max(1, flat.numel() // 1024)]``: a step computed from the input's size samples
                    # a fixed number of elements whatever the size; step 0 records "computed", start -1 a
                    # start that is not a literal (``flat[s::step]`` in a loop over ``s`` covers everything)
                    kind, step, start, axis = "strided", 0, lo if lo is not None else -1, i
                    break
                if lo == 0 and hi == 1 and kind is None:
                    kind, axis = "first", i
            elif isinstance(el, ast.Constant) and el.value == 0 and kind is None and len(elts) == 1:
                kind, axis = "first", i
        if kind is None:
            return None
        sid = self.slice_ids.get(e)
        if sid is None:
            sid = len(self.facts.slices)
            self.slice_ids[e] = sid
            self.facts.slices.append(Slice(sid, e, self.stack[-1].qualname, kind, _src(e.value, 80), step, start, axis))
        return sid

    def _size_derived(self, node: ast.AST | None) -> bool:
        """An integer computed from an input's metadata (its numel, a dim) and not from its values."""
        flow = self.flows.get(node) if node is not None else None
        return flow is not None and bool(flow.meta) and not flow.inputs and not flow.tensorish

    def _const_int(self, node: ast.AST | None) -> int | None:
        if node is None:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            v = self._const_int(node.operand)
            return -v if v is not None else None
        if isinstance(node, ast.Name) and node.id not in self.stack[-1].state:
            v = self.host.resolver.try_value(node, self.host.module_scope, 10**9)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
        return None

    def _consume_slices(self, flow: Provenance, consumer: ast.AST, op: str, want: str) -> Provenance:
        """A reduction (``want='strided'``) or broadcast (``'first'``) consumes pending slices."""
        if not flow.slices:
            return flow
        new: set[int] = set()
        for sid in flow.slices:
            sl = self.facts.slices[sid]
            if sl.kind != want:
                continue
            key = (sid, consumer)
            pid = self.partial_ids.get(key)
            if pid is None:
                pid = len(self.facts.partials)
                self.partial_ids[key] = pid
                kind = "strided-reduction" if want == "strided" else "first-broadcast"
                if want == "strided" and consumer in self.kernel_ids:
                    kind = "strided-kernel"
                self.facts.partials.append(PartialUse(pid, sl, consumer, op, kind))
            new.add(pid)
        return flow.plus(PARTIAL, frozenset(new)) if new else flow

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
        is_attr, is_name, is_sub = ft is ast.Attribute, ft is ast.Name, ft is ast.Subscript
        # the receiver's name of ``name.attr(...)`` (None for any other callee), read once for the tests below
        recv = func.value.id if is_attr and type(func.value) is ast.Name else None  # type: ignore[attr-defined]
        # --- Triton launch: kernel[grid](...)
        if is_sub:
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
        # --- extension function (not a method of a local tensor that happens to share its name)
        found = None
        if is_attr and (func.attr in self.ext_functions or self.ext_unlisted):
            receiver = frame.state.get(recv) if recv is not None else None
            if receiver is None or not receiver.tensorish:
                found = self.host.extension_for_call(e)
        if found is not None:
            ext, fn = found
            return self._launch(e, "extension", f"export:{ext.name}.{fn}", fn, ext.name, discarded)
        if self.cupy_extensions:  # the callee's dotted name is needed here only in a file with CuPy kernels
            dotted = dotted_name(func)
            if dotted:
                for ext in self.cupy_extensions:
                    if dotted in ext.bound_to:
                        return self._launch(e, "cupy", f"cupy:{ext.name}", ext.name, ext.name, discarded=True)
        canon = self._canon(func)
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
            parts = canon.split(".")
            if len(parts) >= 4 and parts[2] not in ("aten", "prims", "prim", "quantized", "_c10d_functional"):
                ns_op = ".".join(parts[2:4])
                return self._launch(e, "torch_ops", f"op:{ns_op}", ns_op, None, discarded)
            args = self._args(e)
            op = self._op(e, canon, "call", inputs=args)
            return args.fresh().plus(OPS, frozenset([op]))
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
        # --- self.something(...)
        if recv is not None and recv == frame.self_name and frame.cls is not None:
            methods = self._methods(frame.cls)
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
        # --- super().method(...)
        if is_attr and recv is None and type(func.value) is ast.Call and \
                type(func.value.func) is ast.Name and func.value.func.id == "super":
            return self._super_call(e, func.attr)
        # --- LocalClass.apply(...) / Model.forward(self, ...) / LocalClass.method(...)
        if recv is not None and recv in self.classes and recv not in frame.state:
            cls = recv
            methods = self._methods(cls)
            if func.attr == "apply" and cls in self.autograd and "forward" in methods:
                node, owner = methods["forward"]
                return self._invoke(node, f"{owner}.forward", owner, "", e, bind_self=False, kind="autograd",
                                    leading=EMPTY)
            if func.attr in methods:
                node, owner = methods[func.attr]
                if cls == "Model":
                    self._reference_call(e, "model-forward", f"Model.{func.attr}(...)")
                return self._invoke(node, f"{owner}.{func.attr}", owner, "", e, bind_self=not _is_static(node),
                                    kind="method", explicit_self=not _is_static(node))
        if is_attr and canon == "Model.forward" and "Model" not in self.classes:
            self._reference_call(e, "model-forward", "Model.forward(...)")
            return self._args(e).fresh().plus(OPAQUE, frozenset([e.lineno]))
        # --- a CuTe DSL function: it launches device code that writes through its tensor arguments
        #     (``from_dlpack(out)`` shares ``out``'s memory; ``_pointer_targets`` looks inside calls)
        if is_name and func.id in self.dsl_functions and func.id not in frame.state:
            return self._launch(e, "dsl", f"dsl:{func.id}", func.id, None, discarded)
        # --- module-level function / class instantiation
        if is_name and func.id not in frame.state:
            if func.id in self.functions:
                alts = self.function_alts[func.id]
                out = EMPTY
                for i, fn in enumerate(alts):
                    qual = func.id if i == len(alts) - 1 else f"{func.id}@{fn.lineno}"
                    out = out.join(self._invoke(fn, qual, None, "", e, bind_self=False, kind="function"))
                return out
            if func.id in self.classes:
                args = self._args(e)
                if func.id == "Model":
                    self._reference_call(e, "instantiate", "Model(...)")
                return args.fresh().plus(OPAQUE, frozenset([e.lineno]))
            if func.id == "Model" or canon.endswith(".Model"):
                self._reference_call(e, "instantiate", "Model(...)")
                return self._args(e).fresh().plus(OPAQUE, frozenset([e.lineno]))
        # --- torch.*
        if torchy:
            return self._torch_call(e, canon, discarded)
        # --- builtins and arithmetic helpers
        if is_name and func.id not in frame.state:
            name = func.id
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
        if canon.startswith(_ARITH_MODULES) or canon in ("triton.cdiv", "triton.next_power_of_2"):
            return self._args(e)
        # --- a method on a value
        if is_attr:
            return self._method(e, func, discarded)
        # --- anything else: an unknown callable
        callee = self._ev(func)
        return callee.join(self._args(e)).fresh().plus(OPAQUE, frozenset([e.lineno]))

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
        own = self.own_package
        if own is not None and canon.split(".", 1)[0] == own and "." in canon:
            return True  # ``from flash_attn.ops.triton.rotary import apply_rotary`` inside flash_attn/
        if self.own_extensions and "." in canon and canon.split(".", 1)[0] in self.own_extensions:
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

    def _finish(self) -> None:
        facts = self.facts
        facts.returns = sorted(self.returns.values(), key=lambda r: (r.depth, r.node.lineno))  # r.line
        # ``if c: ...`` with no else: the path where c is false runs the rest of the function
        for i, br in enumerate(facts.branches):
            if br.kind == "if" and not br.node.orelse:
                arm = self._after_arm(br.node, br.function, br.orelse.bindings)
                if arm is not None:
                    facts.branches[i] = Branch(br.node, br.kind, br.function, br.depth, br.condition, br.body, arm)
        # ``try: ... except: pass`` falls through: the fallback is what follows the try
        for i, t in enumerate(facts.tries):
            for h in t.handlers:  # a loop, not an early-exited any(generator): see HostModule.ancestors
                if not h.arm.terminates:
                    after = self._after_arm(t.node, t.function, {})
                    if after is not None:
                        facts.tries[i] = TryBlock(t.node, t.function, t.depth, t.body, t.handlers, after)
                    break

    @cached_property
    def _by_function(self) -> tuple[dict[str, list], dict[str, list], dict[str, list], dict[str, list],
                                    dict[str, list[CallEdge]]]:
        """Returns, kernels, ops, allocs and call edges grouped by function, each group in the order of
        its list: ``_after_arm`` runs once per ``if`` without ``else`` and would scan every list each time.
        Built after the walk (the lists are final then)."""
        facts = self.facts
        groups: list[dict[str, list]] = []
        for records in (facts.returns, facts.kernels, facts.ops, facts.allocs):
            by: dict[str, list] = {}
            for r in records:
                got = by.get(r.function)
                if got is None:
                    by[r.function] = [r]
                else:
                    got.append(r)
            groups.append(by)
        calls: dict[str, list[CallEdge]] = {}
        for e in facts.calls:
            got = calls.get(e.caller)
            if got is None:
                calls[e.caller] = [e]
            else:
                got.append(e)
        return groups[0], groups[1], groups[2], groups[3], calls

    def _after_arm(self, node: ast.AST, function: str, bindings: dict[str, Provenance]) -> Arm | None:
        """The rest of ``function`` after ``node``: its ops, kernels and returns (helpers included)."""
        end = node.end_lineno or node.lineno  # type: ignore[attr-defined]
        returns, kernels_of, ops_of, allocs_of, calls_of = self._by_function
        # ``.line`` read as the node's line (the records' property) without the property call
        after = [r for r in returns.get(function, ()) if r.node.lineno > end]
        if not after:
            return None
        first, last = after[0].node.lineno, max(r.node.lineno for r in after)
        start_line = end + 1
        # lists built by comprehensions, not generators: ``_after_arm`` runs for every ``if`` without ``else``
        kernels = tuple([k for k in kernels_of.get(function, ()) if k.node.lineno >= start_line])
        ops = tuple([o for o in ops_of.get(function, ()) if getattr(o.node, "lineno", 0) >= start_line])
        allocs = tuple([a for a in allocs_of.get(function, ()) if a.node.lineno >= start_line])
        # helpers called after the node, and what they call, contribute their kernels and ops
        callees = {e.callee for e in calls_of.get(function, ()) if e.node.lineno >= start_line}
        frontier = list(callees)
        while frontier:
            fn = frontier.pop()
            for e in calls_of.get(fn, ()):
                if e.callee not in callees and e.callee != function:
                    callees.add(e.callee)
                    frontier.append(e.callee)
        if callees:  # the lists in their own order, as a reader of the whole list would meet them
            kernels += tuple([k for k in self.facts.kernels if k.function in callees])
            ops += tuple([o for o in self.facts.ops if o.function in callees])
            kernels, ops = tuple(_uniq(list(kernels))), tuple(_uniq(list(ops)))
        # without callees each record came from its function's group once: no repeat to drop
        return Arm("after", min(first, start_line), last, kernels, ops, allocs, tuple(after), False, bindings,
                   None, True)


# attributes, calls and subscripts go straight to their workers (no forwarding frame: the commonest kinds)
_EVAL = {
    ast.Attribute: _Analyser._attribute, ast.Call: _Analyser._call, ast.BinOp: _Analyser._ev_binop,
    ast.UnaryOp: _Analyser._ev_unary, ast.Compare: _Analyser._ev_compare, ast.BoolOp: _Analyser._ev_boolop,
    ast.IfExp: _Analyser._ev_ifexp, ast.Subscript: _Analyser._subscript, ast.Tuple: _Analyser._ev_seq,
    ast.List: _Analyser._ev_seq, ast.Set: _Analyser._ev_seq, ast.Dict: _Analyser._ev_dict,
    ast.Starred: _Analyser._ev_starred, ast.NamedExpr: _Analyser._ev_named, ast.ListComp: _Analyser._ev_comp,
    ast.GeneratorExp: _Analyser._ev_comp, ast.SetComp: _Analyser._ev_comp, ast.DictComp: _Analyser._ev_comp,
    ast.Await: _Analyser._ev_value, ast.Yield: _Analyser._ev_value, ast.YieldFrom: _Analyser._ev_value,
    ast.FormattedValue: _Analyser._ev_value, ast.JoinedStr: _Analyser._ev_joined, ast.Slice: _Analyser._ev_slice,
}
_AUG = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.MatMult: "@", ast.Pow: "**",
        ast.FloorDiv: "//", ast.Mod: "%", ast.BitAnd: "&", ast.BitOr: "|"}
_BUILTIN_NAMES = frozenset(dir(builtins))


def _mentions(lines: tuple[str, ...], start: int, end: int | None, words: set[str],
              spans: dict[tuple[int, int | None], str]) -> bool:
    """Whether some line of ``lines[start:end]`` contains one of ``words``.

    One substring search per word over the joined span rather than one per line and word.  A word
    with a non-printable character (every line break is one) could match across lines in the
    joined text, and the empty word matches any line but no empty span: those take the
    line-by-line path.
    """
    span = lines[start:end]
    if not span:
        return False
    if any(not w or not w.isprintable() for w in words):
        return any(w in line for line in span for w in words)
    text = spans.get((start, end))
    if text is None:
        text = spans[(start, end)] = "".join(span)
    return any(w in text for w in words)


def _uniq(items: list) -> list:
    """``items`` without repeats of one object, first occurrences in order."""
    if len(items) < 2:
        return items
    # a dict keeps each key where it was first inserted; a repeated id maps to the same object
    return list({id(it): it for it in items}.values())


def _with_lines(arm: Arm, node: ast.AST | None) -> Arm:
    if node is None:
        return arm
    return Arm(arm.label, node.lineno, node.end_lineno or node.lineno, arm.kernels, arm.ops, arm.allocs, arm.returns,
               arm.raises, arm.bindings, arm.value, arm.terminates)


def _module_level_defs(tree: ast.Module) -> list[ast.FunctionDef]:
    """Module-level functions, including those defined inside module-level ``if`` / ``try`` blocks."""
    out = []
    stack: list[ast.AST] = list(reversed(tree.body))
    while stack:
        n = stack.pop()
        t = type(n)  # exact types: a parsed tree has no subclasses
        if t is ast.FunctionDef or t is ast.AsyncFunctionDef:
            out.append(n)
        elif t is ast.If or t is ast.Try or t is ast.With:
            for name in ("finalbody", "orelse", "handlers", "body"):
                stack.extend(reversed(getattr(n, name, []) or []))
        elif t is ast.ExceptHandler:
            stack.extend(reversed(n.body))  # type: ignore[attr-defined]
    return out  # type: ignore[return-value]


def _broad(types: tuple[str, ...]) -> bool:
    """Whether a handler of these exception types (none: a bare ``except``) catches whatever a kernel raises."""
    return not types or any([t.rsplit(".", 1)[-1] in _BROAD_EXCEPTIONS for t in types])


# calls that may copy to another device or dtype: ``x.cpu().numpy()`` of a CUDA tensor is a copy
_COPYING = frozenset({"cpu", "cuda", "to", "float", "double", "half", "type", "clone", "contiguous"})


def _same_storage(e: ast.AST) -> bool:
    """Whether ``e.numpy()`` shares ``e``'s storage as written: a chain of views (``x.detach()``,
    ``x.view(-1)``) only.  ``.numpy()`` raises on a CUDA tensor, so a chain without ``.cpu()`` / ``.to()``
    is a CPU tensor whose array is a view; one with them may be a copy, and is not taken for a view."""
    while type(e) is ast.Call:
        f = e.func  # type: ignore[attr-defined]
        if type(f) is not ast.Attribute or f.attr in _COPYING or f.attr not in _ALIAS_VIEWS:
            return False
        e = f.value
    return True


def _names_arange(func: ast.AST) -> bool:
    """``torch.arange`` / ``arange`` spelled at a call: the callee's name alone (a bind asks it for every call)."""
    t = type(func)
    return t is ast.Attribute and func.attr == "arange" or t is ast.Name and func.id == "arange"  # type: ignore[attr-defined]


def _as_slice(node: ast.expr) -> ast.expr | None:
    """``slice(a, b, c)`` as the subscript syntax ``a:b:c`` (a ``Constant`` index stays one); None otherwise."""
    if type(node) is ast.Constant:
        return node
    if type(node) is not ast.Call or type(node.func) is not ast.Name or node.func.id != "slice" or node.keywords:
        return None
    a = [None if type(x) is ast.Constant and x.value is None else x for x in node.args]  # type: ignore[attr-defined]
    if len(a) == 1:
        return ast.Slice(lower=None, upper=a[0], step=None)
    if len(a) in (2, 3):
        return ast.Slice(lower=a[0], upper=a[1], step=a[2] if len(a) == 3 else None)
    return None


def _returns_of(fn: ast.FunctionDef) -> list[ast.AST]:
    """The expressions a (small) function returns, outer body and nested blocks."""
    out = []
    stack: list[ast.AST] = list(fn.body)
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Return):
            if n.value is not None:
                out.append(n.value)
        elif isinstance(n, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
            for name in ("body", "orelse", "finalbody", "handlers"):
                stack.extend(getattr(n, name, []) or [])
        elif isinstance(n, ast.ExceptHandler):
            stack.extend(n.body)
    return out


def _own_package(path: str) -> tuple[str | None, str | None]:
    """The top-level package a file on disk belongs to (the highest folder above it, unbroken, that
    holds an ``__init__.py``) and the folder that holds that package, or (None, None): a dataset
    record or a lone file has none."""
    folder = os.path.dirname(os.path.abspath(path)) if path else ""
    top = root = None
    while folder and os.path.isfile(os.path.join(folder, "__init__.py")):
        top = os.path.basename(folder)
        parent = os.path.dirname(folder)
        root = parent
        if parent == folder:
            break
        folder = parent
    return top, root


_EXTENSION_NAME = re.compile(r"\b(?:CUDAExtension|CppExtension|Extension)\(\s*(?:name\s*=\s*)?[\"']([\w.]+)[\"']")


def _built_extensions(root: str | None) -> frozenset[str]:
    """Modules the package's build script compiles (``CUDAExtension(name="fused_ln_cuda", ...)`` in
    the ``setup.py`` beside the top package): importing one imports the package's own kernels."""
    if root is None:
        return frozenset()
    try:
        with open(os.path.join(root, "setup.py"), encoding="utf-8", errors="replace") as f:
            text = f.read(1_000_000)
    except OSError:
        return frozenset()
    return frozenset(n.rsplit(".", 1)[-1] for n in _EXTENSION_NAME.findall(text))


def _flag_params(fn: ast.FunctionDef) -> frozenset[str]:
    """Parameters that are Python flags: a ``bool`` or ``int`` default or annotation
    (``prenorm=False``, ``training: bool``, ``checkpoint_lvl: int = 0``).  Never tensors, whatever
    the harness passes: a branch on one picks a configuration, it does not read the data."""
    a = fn.args
    positional = list(a.posonlyargs) + list(a.args)
    defaults: dict[str, ast.expr] = dict(zip([p.arg for p in positional[len(positional) - len(a.defaults):]],
                                             a.defaults, strict=True))
    defaults.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None})
    out = set()
    for p in positional + list(a.kwonlyargs):
        d = defaults.get(p.arg)
        if isinstance(d, ast.Constant) and isinstance(d.value, (bool, int)):
            out.add(p.arg)
        elif isinstance(p.annotation, ast.Name) and p.annotation.id in ("bool", "int"):
            out.add(p.arg)
    return frozenset(out)


def _pointer_bases(call: ast.Call) -> list[ast.AST]:
    """The tensors whose ``data_ptr()`` an expression wraps: ``cp.asarray(out.data_ptr())`` -> [out];
    ``from_dlpack(out)`` (a DLPack view of the same memory) -> [out]."""
    out = []
    stack: list[ast.AST] = [call]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Call):
            if isinstance(n.func, ast.Attribute) and n.func.attr == "data_ptr":
                out.append(n.func.value)
                continue
            fname = n.func.attr if isinstance(n.func, ast.Attribute) else n.func.id if isinstance(n.func, ast.Name) else ""
            if fname == "from_dlpack" and n.args:
                # another framework's view of the tensor (CuTe, CuPy, JAX through DLPack): same memory
                out.append(n.args[0])
                continue
            if isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Call):
                stack.append(n.func.value)  # ``from_dlpack(x).mark_layout_dynamic()``: a method of the view
            stack.extend(n.args)
            stack.extend(k.value for k in n.keywords)
    return out


def _dsl_name(name: str) -> bool:
    """CuTe DSL decorators (``cutlass.cute.jit`` / ``cute.kernel``): Python compiled to device code."""
    return name.endswith(("cute.jit", "cute.kernel"))


def _jit_name(name: str) -> bool:
    """``numba.cuda.jit`` and friends: device kernels compiled by a JIT other than Triton."""
    return name in ("numba.cuda.jit", "cuda.jit", "numba.cuda.jit.jit") or name.endswith(".cuda.jit")


def _is_static(fn: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)


def _literal(node: ast.AST) -> float | int | bool | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool)):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, (int, float)):
        return -node.operand.value
    return None


def _annotation_text(node: ast.AST) -> str:
    """``ast.unparse(node)``; a name or a dotted chain of names (``torch.Tensor``, the common
    annotations) is spelled directly, as unparse spells it, without building an unparser."""
    return dotted_name(node) or ast.unparse(node)


def _src(node: ast.AST, limit: int = 60) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # pragma: no cover - unparse of odd nodes
        return "<expr>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def build_model_flow(host: HostModule, class_name: str | None = None) -> ModelFlow:
    """The value flow of the model (``program.model_class``), or of ``class_name`` (``Model`` in a reference)."""
    facts = ModelFlow(host=host)
    _Analyser(host, facts).run(class_name)
    return facts


def build_model_holders(host: HostModule, class_name: str | None = None) -> dict[str, Holder]:
    """``build_model_flow(host, class_name).holders`` without the walk of forward.

    ``_Analyser.run`` fixes the holders by the member scan before it walks forward (the walk only
    reads them), so a rule that needs no more of the reference than its members (HS116: does it
    hold parameters?) need not pay for the walk.  The same scan, on the same tables, as ``run``.
    """
    analyser = _Analyser(host, ModelFlow(host=host))
    model = analyser._find_model(class_name)
    if model is None:
        return {}
    members = MemberScanner(host, analyser.classes, analyser.local_bases, analyser.index)
    members.scan(model.name)
    return members.holders
