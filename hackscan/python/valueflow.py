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
from collections.abc import Callable

from ..util.lazy import cached_property
from .catalog import (
    META_ATTRS,
    classify_torch,
)
from .facts import (
    FunctionInfo,
    Holder,
    ModelFlow,
    Mutation,
    PartialUse,
    Return,
    Slice,
)
from .flowbranches import BranchEvents
from .flowcalls import CallSemantics
from .flowindex import ModuleIndex
from .flowtables import (
    _ALIAS_VIEWS,
    _AUG,
    _BUILTIN_NAMES,
    _COMPARE_NAMES,
    _DYNAMIC_SELF,
    _OPERATOR_NAMES,
    _PARAM_HOLDERS,
    _TABLES,
    _WRAPPERS,
    BUDGET,
    _annotation_text,
    _as_slice,
    _built_extensions,
    _dsl_name,
    _flag_params,
    _Frame,
    _jit_name,
    _may_wrap,
    _module_level_defs,
    _own_package,
    _pointer_bases,
    _same_storage,
    _src,
)
from .imports import CONVENTIONAL
from .members import FunctionIndex, MemberScanner, fallback_flags, self_chain
from .module import HostModule
from .processstate import LAST_NAMES, PREFIX, PROCESS_ATTRS
from .provenance import EMPTY, OPS, PARTIAL, SLICES, Provenance
from .resolve import Unresolved, dotted_name, returns_of

# tensor methods that return a tuple of tensors: the truth of what they return is its length (a
# shape), never the values of its elements
_SPLITS = frozenset({"split", "chunk", "unbind", "tensor_split", "hsplit", "vsplit", "dsplit", "split_with_sizes"})


class _Analyser(ModuleIndex, BranchEvents, CallSemantics):
    # The package the file on disk belongs to and the extensions its setup.py builds: read only when
    # a call's dotted name could name one (``CallSemantics._imported_code``), since finding them stats
    # every folder above the file and most candidates never make such a call
    @cached_property
    def _package(self) -> tuple[str | None, frozenset[str]]:
        own, root = _own_package(self.host.path)
        return own, _built_extensions(root)

    @property
    def own_package(self) -> str | None:
        return self._package[0]

    @property
    def own_extensions(self) -> frozenset[str]:
        return self._package[1]

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
    def _bind_iteration(self, target: ast.AST, it: ast.AST, flow: Provenance) -> None:
        """Bind a loop's (or a comprehension's) target to an element of ``it``, whose flow is ``flow``.

        ``for src, dst in zip(rows.chunk(n), out.chunk(n))`` gives ``src`` an element of the first
        argument and ``dst`` one of the second, not both the union: writing ``dst`` then writes the
        candidate's own buffer, not the input.  ``enumerate`` gives an index (the iterable's length,
        metadata) and an element.  Any other iterable (or a starred target) binds every name to the
        whole flow, and an element bound to a name is a view of the iterable's base."""
        if (type(target) is ast.Tuple or type(target) is ast.List) and type(it) is ast.Call and \
                not it.keywords and type(it.func) is ast.Name and it.func.id not in self.stack[-1].state and \
                not any(type(t) is ast.Starred for t in target.elts) and \
                not any(type(a) is ast.Starred for a in it.args):  # type: ignore[attr-defined]
            name, args, elts = self._canon(it.func), it.args, target.elts  # type: ignore[attr-defined]
            if name == "zip" and len(args) == len(elts):
                for t, a in zip(elts, args, strict=True):
                    self._bind_iteration(t, a, self.flows.get(a, flow))
                return
            if name == "enumerate" and len(args) == 1 and len(elts) == 2:
                whole = self.flows.get(args[0], flow)
                self._bind(elts[0], whole.metadata(), None)  # the index: how long it is, not its values
                self._bind_iteration(elts[1], args[0], whole)
                return
        self._bind(target, flow, None)
        if type(target) is ast.Name:
            # an element of a tensor, of its chunks or of a list shares the iterable's storage: a
            # write into it (``out=dst``) writes the iterable's base, as a view's would
            base = it.id if type(it) is ast.Name else self._view_base(it)  # type: ignore[attr-defined]
            if base is not None and base != target.id:  # type: ignore[attr-defined]
                self.stack[-1].views[target.id] = base  # type: ignore[attr-defined]

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
            sequences = frame.sequences
            if name in sequences:
                sequences.discard(name)
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
                    elif ft is ast.Attribute and f.attr in _SPLITS:
                        sequences.add(name)
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
                        rets = self.returns_of[fn] = returns_of(fn)
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
            self._bind_iteration(g.target, g.iter, self._ev(g.iter))
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
        if e.attr in LAST_NAMES:
            canon = self._canon(e)
            if canon in PROCESS_ATTRS:
                return Provenance(state=frozenset([PREFIX + canon]))  # a global flag (processstate.py)
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
