"""What a model holds (``__init__``) and which names record whether a kernel is usable.

Parameter holders feed the parameter blind-spot rules (class 17): an ``nn.Linear`` kept in
``__init__`` whose ``weight`` forward never reads, or a ``BatchNorm`` ignored because its default
initialisation is the identity.  Derived attributes (``self.w_t = self.fc.weight.t()``) count as
reads of their sources, which is how a legitimate candidate folds parameters at init.

Fallback flags are the names a conditional fallback (class 5) tests: a module global or ``self``
attribute set in an ``except`` handler (``cuda_available = False``), compared with ``None`` against
an extension (``self.use_custom = ext is not None``), or the extension's own name (``if ext is None``).
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Iterable

from ..util.lazy import cached_property
from .catalog import CONTAINER_MODULES, IDENTITY_INIT_MODULES, MODULE_PARAMS, STATELESS_MODULES
from .facts import Holder
from .module import CUPY_KERNELS, HostModule, index_tree, subtree  # noqa: F401  (subtree: re-exported)
from .resolve import dotted_name, returns_of

_TENSOR_FACTORIES = frozenset({"randn", "rand", "zeros", "ones", "empty", "full", "tensor", "arange", "eye",
                               "randint", "linspace", "zeros_like", "ones_like", "empty_like", "randn_like",
                               "rand_like", "full_like", "as_tensor", "from_numpy"})
# wrappers that return the function they are given, compiled or traced
_WRAPPERS = frozenset({"torch.compile", "torch.jit.script", "torch.jit.trace", "functools.partial",
                       "torch.cuda.make_graphed_callables", "torch._dynamo.optimize"})
_IDENTITY_FILL = frozenset({"ones", "zeros", "ones_like", "zeros_like", "eye"})
_LOADERS = ("load_inline", "cpp_extension.load")
_NONTENSOR_BUILTINS = frozenset({"int", "float", "str", "bool", "dict", "list", "tuple", "set", "len", "max", "min",
                                 "abs", "round", "sum", "getattr", "hasattr", "isinstance", "range", "print", "object",
                                 "super", "type", "frozenset", "sorted", "math.ceil", "math.floor", "math.sqrt",
                                 "math.prod", "math.log2", "threading.Lock", "collections.OrderedDict",
                                 "collections.defaultdict"})


_POSITION = operator.attrgetter("lineno", "col_offset")
_DEF_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_ASSIGN_TYPES = (ast.Assign, ast.AnnAssign)


class FunctionIndex:
    """Assignments, calls and nested defs of one function, collected on demand from its own subtree.

    Only the few functions the member scan asks about (``__init__`` and what it calls) are walked, not
    the whole file.  Nested functions and lambdas are not entered: their bodies belong to them.
    """

    def __init__(self, host: HostModule):
        self.host = host
        self._cache: dict[ast.AST, tuple[list[ast.AST], list[ast.Call], list[ast.FunctionDef]]] = {}

    def _within(self, types: tuple[type, ...], lo: tuple[int, int], hi: tuple[int, int],
                start: tuple[int, int]) -> list[ast.AST]:
        """The nodes of ``types`` that start after ``lo`` and lie within ``hi``, by position.

        ``start`` is where the function's decorators begin (``lo`` without them).  The nodes between
        ``start`` and ``hi`` are exactly the function's subtree, and ``index_tree`` lists each type's
        nodes in pre-order (depth first): a subtree's nodes of a type are one contiguous run of its
        list.  So each list is read up to the end of that run only (the nodes before and after it lie
        outside the span), not to its end; within the run the decorators' nodes are left out by ``lo``.
        The stable sort of the nodes found orders them exactly as the filtered run of the sorted file
        would (ties too)."""
        out: list[ast.AST] = []
        s0, l1 = start[0], hi[0]
        nodes_of = self.host.nodes
        for t in types:
            nodes = nodes_of.get(t)
            if not nodes:
                continue
            it = iter(nodes)
            for n in it:  # up to the first node of the run
                ln = n.lineno  # type: ignore[attr-defined]
                if s0 <= ln <= l1 and start <= (ln, n.col_offset) and \
                        ((n.end_lineno or ln), n.end_col_offset or 0) <= hi:  # type: ignore[attr-defined]
                    break
            else:
                continue
            while True:  # the run: nodes within ``start`` .. ``hi``
                pos = (n.lineno, n.col_offset)  # type: ignore[attr-defined]
                if lo < pos:
                    out.append(n)
                n = next(it, None)
                if n is None:
                    break
                ln = n.lineno  # type: ignore[attr-defined]
                if not (s0 <= ln <= l1 and start <= (ln, n.col_offset) and
                        ((n.end_lineno or ln), n.end_col_offset or 0) <= hi):  # type: ignore[attr-defined]
                    break
        if len(out) > 1:
            out.sort(key=_POSITION)
        return out

    def _collect(self, fn: ast.AST) -> tuple[list[ast.AST], list[ast.Call], list[ast.FunctionDef]]:
        found = self._cache.get(fn)
        if found is not None:
            return found
        if isinstance(fn, ast.Module):
            lo, hi = (0, -1), (10**9, 0)
            start = lo
        else:
            lo, hi = (fn.lineno, fn.col_offset), (fn.end_lineno or fn.lineno, fn.end_col_offset or 0)
            decorators = getattr(fn, "decorator_list", None)
            start = min(lo, *((d.lineno, d.col_offset) for d in decorators)) if decorators else lo

        if "nodes" in self.host.__dict__ or type(fn) is ast.Module:
            def within(*types: type) -> list[ast.AST]:
                return self._within(types, lo, hi, start)
        else:
            # a module nothing has indexed yet (a reference, whose members are all most scans ask
            # of it): the function's own subtree indexed instead of the whole file.  Its lists are
            # the whole file's runs for the function (a subtree's nodes come out of ``index_tree``
            # in the same relative order), so ``lo`` and the stable sort give what ``_within`` gives
            own = index_tree(fn)[1]

            def within(*types: type) -> list[ast.AST]:
                out = [n for t in types for n in own.get(t, ()) if lo < (n.lineno, n.col_offset)]  # type: ignore[attr-defined]
                if len(out) > 1:
                    out.sort(key=_POSITION)
                return out

        nested = [((d.lineno, d.col_offset), ((d.end_lineno or d.lineno), d.end_col_offset or 0), d)
                  for d in within(ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda) if d is not fn]

        def mine(n: ast.AST) -> bool:
            if not nested:
                return True
            a = (n.lineno, n.col_offset)  # type: ignore[attr-defined]
            b = ((n.end_lineno or n.lineno), n.end_col_offset or 0)  # type: ignore[attr-defined]
            return not any(da <= a and b <= db and n is not d for da, db, d in nested)

        assigns = within(ast.Assign, ast.AnnAssign)
        calls = within(ast.Call)
        if nested:  # without nested functions every node found is the function's own (``mine`` is True)
            assigns = [n for n in assigns if mine(n)]
            calls = [n for n in calls if mine(n)]
        defs = [d for _a, _b, d in nested if not isinstance(d, ast.Lambda) and mine(d)]
        found = (assigns, calls, defs)  # type: ignore[assignment]
        self._cache[fn] = found  # type: ignore[assignment]
        return found  # type: ignore[return-value]

    def _owner(self, node: ast.AST) -> ast.AST:
        cur = self.host.parents.get(node)
        while cur is not None and not isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            cur = self.host.parents.get(cur)
        return cur if cur is not None else self.host.tree

    def assigns(self, fn: ast.AST) -> list[ast.AST]:
        return self._collect(fn)[0]

    def defs(self, fn: ast.AST) -> list[ast.FunctionDef]:
        """Functions defined directly inside ``fn`` (closures)."""
        return self._collect(fn)[2]

    def calls(self, fn: ast.AST) -> list[ast.Call]:
        return self._collect(fn)[1]


def self_chain(node: ast.AST, self_name: str = "self") -> str | None:
    """``self.a.b`` -> ``a.b``; None when the chain is not rooted at ``self``."""
    e = node
    if type(e) is not ast.Attribute:
        return None
    depth = 0
    while type(e) is ast.Attribute:  # find the root first: most chains are not rooted at self
        e = e.value  # type: ignore[attr-defined]
        depth += 1
    if type(e) is not ast.Name or e.id != self_name:  # type: ignore[attr-defined]
        return None
    if depth == 1:
        return node.attr  # type: ignore[attr-defined]
    parts: list[str] = []
    e = node
    while type(e) is ast.Attribute:
        parts.append(e.attr)  # type: ignore[attr-defined]
        e = e.value  # type: ignore[attr-defined]
    return ".".join(reversed(parts))


def _kw(call: ast.Call, name: str) -> ast.AST | None:
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


def _false(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


class MemberScanner:
    """Holders and derived attributes of a model class and of the submodule classes it holds."""

    def __init__(self, host: HostModule, classes: dict[str, ast.ClassDef], local_bases: dict[str, list[str]],
                 index: FunctionIndex):
        self.host = host
        self.index = index
        self.ext_names = {b for e in host.extensions for b in e.bound_to}
        self.classes = classes
        self.local_bases = local_bases
        self.holders: dict[str, Holder] = {}
        self.derived: dict[str, frozenset[str]] = {}
        self._seen: set[tuple[str, str]] = set()
        self._methods_of: dict[str, frozenset[str]] = {}
        self._init_fns: dict[str, list[ast.FunctionDef]] = {}

    def scan(self, cls_name: str, prefix: str = "", depth: int = 0) -> None:
        if (cls_name, prefix) in self._seen or depth > 3:
            return
        self._seen.add((cls_name, prefix))
        for fn in self._init_functions(cls_name):
            # locals computed from attributes (``b = (self.bias - c) * m``) fold parameters at init
            self.local_reads: dict[str, frozenset[str]] = {}
            self._current = (fn, cls_name)
            for node in self.index.assigns(fn):  # in source order already
                if node.value is not None:  # type: ignore[attr-defined]
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]  # type: ignore[attr-defined]
                    for t in targets:
                        chain = self_chain(t)
                        if chain is not None and "." not in chain:
                            self._assign(prefix + chain, node.value, prefix, depth)  # type: ignore[attr-defined]
                        elif isinstance(t, (ast.Name, ast.Tuple)):
                            reads = self._reads(node.value, prefix)  # type: ignore[attr-defined]
                            if reads:
                                for n in (t.elts if isinstance(t, ast.Tuple) else [t]):
                                    if isinstance(n, ast.Name):
                                        self.local_reads[n.id] = reads
            for node in self.index.calls(fn):
                # ``self.conv.weight.copy_(w)`` / ``self.w.data.copy_(...)``: the target now derives from w
                if isinstance(node.func, ast.Attribute) and node.func.attr == "copy_" and node.args:
                    chain = self_chain(node.func.value)
                    if chain is not None:
                        chain = prefix + (chain[:-5] if chain.endswith(".data") else chain)
                        reads = self._reads(node.args[0], prefix)
                        if reads:
                            self.derived[chain] = self.derived.get(chain, frozenset()) | reads
                    continue
                if isinstance(node.func, ast.Attribute) and \
                        node.func.attr in ("register_buffer", "register_parameter") and node.args and \
                        isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str) and \
                        self_chain(node.func.value) is None and isinstance(node.func.value, ast.Name) and \
                        node.func.value.id == "self":
                    kind = "buffer" if node.func.attr == "register_buffer" else "parameter"
                    attr = prefix + node.args[0].value
                    value = node.args[1] if len(node.args) > 1 else None
                    if value is not None and isinstance(value, ast.Constant) and value.value is None:
                        continue
                    reads = self._reads(value, prefix) \
                        if value is not None else frozenset()
                    if reads:
                        self.derived[attr] = reads
                    self.holders[attr] = Holder(attr, kind, f"nn.Module.{node.func.attr}", node,
                                                identity_init=self._identity_fill(value))

    def _reads(self, value: ast.AST, prefix: str) -> frozenset[str]:
        """Attributes ``value`` reads: ``self.x`` chains and, through init locals, what those were made of."""
        t = type(value)  # exact types: a parsed tree has no subclasses
        if t is ast.Constant:
            return frozenset()
        local = getattr(self, "local_reads", None) or {}
        if t is ast.Name:  # a lone name (common): what the local was made of, without the walk below
            return frozenset(local.get(value.id, ()))  # type: ignore[attr-defined]
        nodes = subtree(value)
        # the callee of a method call (``self.fc.weight.t()``) names its receiver: one pass, since
        # ``subtree`` is breadth first and a call comes before its callee
        methods: set[ast.AST] = set()
        chains: set[str] = set()
        out: set[str] = set()
        for n in nodes:
            t = type(n)
            if t is ast.Attribute:
                chain = self_chain(n.value if n in methods else n)  # type: ignore[attr-defined]
                if chain is not None:
                    chains.add(chain)
            elif t is ast.Call:
                if type(n.func) is ast.Attribute:  # type: ignore[attr-defined]
                    methods.add(n.func)  # type: ignore[attr-defined]
            elif t is ast.Name and n.id in local:  # type: ignore[attr-defined]
                out |= local[n.id]  # type: ignore[attr-defined]
        if len(chains) == 1:  # one chain: no longer chain to prefer over it
            for c in chains:
                out.add(prefix + c)
        elif chains:
            out.update(prefix + c for c in chains if not any(o != c and o.startswith(c + ".") for o in chains))
        return frozenset(out)

    def _init_functions(self, cls_name: str) -> list[ast.FunctionDef]:
        """``__init__`` of the class and its local bases, and methods they call on self (one level).

        A function of the class alone (the classes, bases and index are fixed): found once per class,
        though a submodule class held several times is scanned once per holder (prefix)."""
        got = self._init_fns.get(cls_name)
        if got is None:
            got = self._init_fns[cls_name] = self._find_init_functions(cls_name)
        return got

    def _find_init_functions(self, cls_name: str) -> list[ast.FunctionDef]:
        out: list[ast.FunctionDef] = []
        for name in [cls_name, *self.local_bases.get(cls_name, [])]:
            cls = self.classes.get(name)
            if cls is None:
                continue
            methods = {f.name: f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
            init = methods.get("__init__")
            if init is None:
                continue
            out.append(init)
            for node in self.index.calls(init):
                if isinstance(node.func, ast.Attribute) and \
                        isinstance(node.func.value, ast.Name) and node.func.value.id == "self" and \
                        node.func.attr in methods and node.func.attr != "__init__":
                    out.append(methods[node.func.attr])
        return out

    def _closure_reads(self, body: ast.AST, prefix: str) -> frozenset[str]:
        """Attributes a closure reads, directly or through locals of the function defining it."""
        owner = self.index._owner(body)
        local: dict[str, frozenset[str]] = {}
        for node in self.index.assigns(owner):  # in source order already
            value = node.value  # type: ignore[attr-defined]
            if value is None:
                continue
            reads = frozenset(_self_reads(value))
            for n in subtree(value):
                if isinstance(n, ast.Name) and n.id in local:
                    reads |= local[n.id]
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]  # type: ignore[attr-defined]
            for t in targets:
                for n in (t.elts if isinstance(t, ast.Tuple) else [t]):
                    if isinstance(n, ast.Name) and reads:
                        local[n.id] = local.get(n.id, frozenset()) | reads
        out = set(_self_reads(body))
        for n in subtree(body):
            if isinstance(n, ast.Name) and n.id in local:
                out |= local[n.id]
        return frozenset(prefix + c for c in out)

    @cached_property
    def _module_functions(self) -> dict[str, ast.FunctionDef]:
        """Module-level ``def``s (not ``async``) by name, the first of each name: what the searches of
        the module body for ``name(...)``'s function found."""
        out: dict[str, ast.FunctionDef] = {}
        for f in self.host.tree.body:
            if type(f) is ast.FunctionDef and f.name not in out:  # type: ignore[attr-defined]
                out[f.name] = f  # type: ignore[attr-defined,assignment]
        return out

    def _method_names(self, cls_name: str) -> frozenset[str]:
        """Names of the functions defined in a local class's body (empty for an unknown class), once
        per class: every ``self.x = self.y`` in ``__init__`` asks whether ``y`` is a method."""
        got = self._methods_of.get(cls_name)
        if got is None:
            cls = self.classes.get(cls_name)
            got = frozenset(f.name for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))) \
                if cls is not None else frozenset()
            self._methods_of[cls_name] = got
        return got

    def host_def(self, ref: str) -> ast.AST | None:
        line, col = (int(x) for x in ref.split(":", 1)[1].split(":"))
        for n in self.host.of_type(ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda):
            if n.lineno == line and n.col_offset == col:
                return n
        return None

    def _callable_ref(self, value: ast.AST, depth: int = 0) -> str | None:
        """What ``self.fn = <value>`` makes callable: a method, a module function, a nested def, a lambda.

        ``method:<name>``, ``func:<name>``, ``def:<line>:<col>``, ``lambda:<line>:<col>``; wrappers that
        keep the function's meaning (``torch.compile``, ``torch.jit.script``, ``functools.partial``) are
        looked through.
        """
        fn, cls_name = getattr(self, "_current", (None, None))
        t = type(value)  # exact types: a parsed tree has no subclasses
        if t is ast.Lambda:
            return f"lambda:{value.lineno}:{value.col_offset}"  # type: ignore[attr-defined]
        if t is ast.Attribute:
            v = value.value  # type: ignore[attr-defined]
            if type(v) is not ast.Name or v.id != "self":
                return None  # no other attribute is followed (nor is a call below)
            for name in [cls_name, *self.local_bases.get(cls_name or "", [])]:
                if value.attr in self._method_names(name or ""):  # type: ignore[attr-defined]
                    return f"method:{value.attr}"  # type: ignore[attr-defined]
            return None
        if t is ast.Name:
            if fn is not None:
                for node in self.index.defs(fn):
                    if node.name == value.id:
                        return f"def:{node.lineno}:{node.col_offset}"
            if value.id in self._module_functions and value.id not in self.host.triton_kernels:
                return f"func:{value.id}"
            return None
        if t is ast.Call and depth < 2:
            name = self.host.canonical(value.func)
            if name in _WRAPPERS and value.args:
                inner = value.args[0]
                ref = self._callable_ref(inner, depth + 1)
                if ref is None and type(inner) is ast.Attribute and not _self_reads(inner):
                    # ``functools.partial(torch.softmax, dim=1)``: the torch function it binds runs
                    # (a torch name is what a ``callable`` holder's target holds, as for
                    # ``self.act = torch.relu``)
                    target = self.host.canonical(inner)
                    ref = target if target.startswith("torch.") else None
                return ref
            # ``self.fwd = self._build()`` where ``_build`` returns a closure it defines
            target = self._local_callee(value.func, cls_name)
            if target is not None:
                saved = self._current
                self._current = (target, cls_name)
                try:
                    for ret in returns_of(target):
                        ref = self._callable_ref(ret, depth + 1)
                        if ref is not None and ref.startswith(("def:", "lambda:")):
                            return ref
                finally:
                    self._current = saved
        return None

    def _local_callee(self, func: ast.AST, cls_name: str | None) -> ast.FunctionDef | None:
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            for name in [cls_name, *self.local_bases.get(cls_name or "", [])]:
                cls = self.classes.get(name or "")
                if cls is None:
                    continue
                for f in cls.body:
                    if isinstance(f, ast.FunctionDef) and f.name == func.attr:
                        return f
        elif isinstance(func, ast.Name):
            return self._module_functions.get(func.id)
        return None

    def _returned_kernel(self, call: ast.Call) -> str | None:
        """``self._load()`` / ``_build()`` returning ``load_inline(...).fn`` or ``module.fn``: ``extfn:<ext>.<fn>``."""
        if not self.host.extensions:
            return None  # no extension: nothing to return
        func = call.func
        fn: ast.AST | None = None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            for cls in self.classes.values():
                for f in cls.body:
                    if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == func.attr:
                        fn = f
        elif isinstance(func, ast.Name):
            fn = self._module_functions.get(func.id)
        if fn is None:
            return None
        for ext in self.host.extensions:
            if self.host.enclosing(ext.call, ast.FunctionDef, ast.AsyncFunctionDef) is not fn:
                continue
            for stmt in fn.body[::-1]:
                if isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.Attribute):
                    owner = stmt.value.value
                    if owner is ext.call or dotted_name(owner) in ext.bound_to:
                        return f"extfn:{ext.name}.{stmt.value.attr}"
        return None

    def _identity_fill(self, value: ast.AST | None) -> bool:
        if not isinstance(value, ast.Call):
            return False
        name = self.host.canonical(value.func)
        if name in ("torch.nn.Parameter", "torch.nn.parameter.Parameter") and value.args:
            return self._identity_fill(value.args[0])
        return name.startswith("torch.") and name.rsplit(".", 1)[-1] in _IDENTITY_FILL

    def _module_holder(self, attr: str, name: str, short: str, value: ast.Call) -> None:
        """``self.x = nn.Something(...)``: a container, a stateless module, or one with parameters."""
        if short in CONTAINER_MODULES:
            members = tuple(self.host.canonical(a.func) for a in value.args if isinstance(a, ast.Call))
            self.holders[attr] = Holder(attr, "container", name, value, target=",".join(members))
        elif short in STATELESS_MODULES:
            inplace = isinstance(_kw(value, "inplace"), ast.Constant) and _kw(value, "inplace").value is True  # type: ignore[union-attr]
            self.holders[attr] = Holder(attr, "stateless", name, value, inplace=inplace)
        else:
            params = MODULE_PARAMS.get(short, ())
            if "bias" in params and _false(_kw(value, "bias")):
                params = tuple(p for p in params if p != "bias")
            if _false(_kw(value, "affine")) or _false(_kw(value, "elementwise_affine")):
                params = ()
            if short.startswith("InstanceNorm") and isinstance(_kw(value, "affine"), ast.Constant) and \
                    _kw(value, "affine").value is True:  # type: ignore[union-attr]
                params = ("weight", "bias")
            self.holders[attr] = Holder(attr, "module", name, value, params=params,
                                        identity_init=short in IDENTITY_INIT_MODULES and bool(params))

    def _assign(self, attr: str, value: ast.AST, prefix: str, depth: int) -> None:
        host = self.host
        if attr in self.holders and self.holders[attr].kind not in ("config", "unknown") and \
                _self_reads(value) <= {attr[len(prefix):]}:
            return  # ``self.conv = self.conv.to(memory_format=...)``: the same holder, moved or cast
        ref = self._callable_ref(value)
        if ref is not None:
            self.holders[attr] = Holder(attr, "callable", "function", value, target=ref)
            if ref.startswith(("def:", "lambda:")):
                # a closure over init locals (``weight = self.conv.weight; def f(x): ... weight ...``)
                body = self.host_def(ref)
                if body is not None:
                    # ``def f`` defined on several branches: any of them may be the one stored
                    bodies = [body]
                    if isinstance(body, ast.FunctionDef):
                        owner = self.index._owner(body)
                        bodies = [d for d in self.index.defs(owner) if d.name == body.name] or [body]
                    reads = frozenset().union(*(self._closure_reads(b, prefix) for b in bodies))
                    if reads:
                        self.derived[attr] = reads
            return
        # ``self.weight = nn.Parameter(w)``: values computed from ``w`` later fold this parameter
        inner = value.args[0] if isinstance(value, ast.Call) and value.args else value
        if isinstance(inner, ast.Name):
            self.local_reads[inner.id] = self.local_reads.get(inner.id, frozenset()) | {attr}
        if isinstance(value, ast.Call):
            name = self.host.canonical(value.func)
            short = name.rsplit(".", 1)[-1]
            # what the value reads (``_reads``, a pure function) is computed only by the branches that
            # record it: constructors of modules and extensions, held submodules and kernels derive nothing
            if name in ("torch.nn.Parameter", "torch.nn.parameter.Parameter"):
                reads = self._reads(value, prefix)
                if reads:
                    self.derived[attr] = reads
                self.holders[attr] = Holder(attr, "parameter", "torch.nn.Parameter", value,
                                            identity_init=self._identity_fill(value))
                return
            if name.startswith("torch.nn.") and short[:1].isupper():
                self._module_holder(attr, name, short, value)
                return
            if isinstance(value.func, ast.Attribute) and value.func.attr in ("get_function", "get_kernel"):
                owner = dotted_name(value.func.value)
                self.holders[attr] = Holder(attr, "callable", "cupy.RawModule.get_function", value,
                                            target=f"cupy:{owner}")
                return
            if name.endswith(_LOADERS) or name in CUPY_KERNELS:
                self.holders[attr] = Holder(attr, "extension", name, value)
                return
            returned = self._returned_kernel(value)
            if returned is not None:
                self.holders[attr] = Holder(attr, "callable", "extension function", value, target=returned)
                return
            if isinstance(value.func, ast.Name) and value.func.id in self.classes:
                self.holders[attr] = Holder(attr, "local", value.func.id, value)
                self.scan(value.func.id, attr + ".", depth + 1)
                return
            reads = self._reads(value, prefix)
            if name.startswith("torch.") and short in _TENSOR_FACTORIES:
                if reads:
                    self.derived[attr] = reads
                self.holders[attr] = Holder(attr, "tensor", name, value, identity_init=short in _IDENTITY_FILL)
                return
            if name in _NONTENSOR_BUILTINS or name.startswith(("torch.cuda.", "torch.backends.", "time.")):
                self.holders[attr] = Holder(attr, "config", name, value)
                if reads:
                    self.derived[attr] = reads
                return
            # an unknown call may build anything, parameters included (``torch.compile(model)``)
            if reads:
                self.derived[attr] = reads
            self.holders[attr] = Holder(attr, "unknown", name or "<call>", value)
            return
        reads = self._reads(value, prefix)
        if isinstance(value, ast.Attribute) and not reads:
            self.holders[attr] = Holder(attr, "callable", self.host.canonical(value) or dotted_name(value), value,
                                        target=self.host.canonical(value) or dotted_name(value))
            return
        if isinstance(value, ast.Name) and value.id in self.ext_names:
            self.holders[attr] = Holder(attr, "extension", value.id, value, target=value.id)
            return
        if isinstance(value, ast.Name) and (value.id in host.triton_kernels or value.id in self.classes):
            self.holders[attr] = Holder(attr, "callable", value.id, value, target=value.id)
            return
        if reads:
            self.derived[attr] = reads
            return
        if attr not in self.holders:
            self.holders[attr] = Holder(attr, "config", type(value).__name__, value)


def _self_reads(value: ast.AST) -> set[str]:
    if isinstance(value, ast.Constant):
        return set()
    nodes = subtree(value)
    methods = {n.func for n in nodes if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Attribute):
            chain = self_chain(node.value if node in methods else node)
            if chain is not None:
                out.add(chain)
    # keep the longest chains only: ``fc.weight`` rather than ``fc`` as well
    return {c for c in out if not any(o != c and o.startswith(c + ".") for o in out)}


_ASSIGN_STMTS = (ast.Assign, ast.AnnAssign, ast.AugAssign)
# statement lists that may hold assignments; ``handlers`` is left out: a nested handler owns its own
_STMT_LISTS = ("body", "orelse", "finalbody")


def _handler_assigns(handlers: list[ast.AST]) -> dict[ast.AST, ast.ExceptHandler]:
    """Assignment statements -> the innermost ``except`` handler around them, not looking past a
    function definition (a function defined in a handler does not run there)."""
    owner: dict[ast.AST, ast.ExceptHandler] = {}
    for h in handlers:
        stack: list[ast.AST] = list(h.body)  # type: ignore[attr-defined]
        while stack:
            st = stack.pop()
            t = type(st)
            if t in _ASSIGN_STMTS:
                owner[st] = h  # type: ignore[assignment]
            elif t is ast.FunctionDef or t is ast.AsyncFunctionDef:
                continue
            elif t is ast.Match:
                for case in st.cases:  # type: ignore[attr-defined]
                    stack.extend(case.body)
            else:
                for name in _STMT_LISTS:
                    body = getattr(st, name, None)
                    if body:
                        stack.extend(body)
    return owner


# the values a derived flag is computed by: ``ext is not None``, ``a and b``, ``not ext``, ``hasattr(ext, ...)``
_FLAG_VALUES = frozenset({ast.Compare, ast.BoolOp, ast.UnaryOp})
_FLAG_CALLS = frozenset({"hasattr", "bool", "callable", "all", "any"})


def fallback_flags(host: HostModule) -> dict[str, str]:
    """Names (``flag``, ``self.flag``) that record whether a custom kernel compiled or may be used."""
    flags: dict[str, str] = {}
    ext_names: set[str] = set()
    for ext in host.extensions:
        for b in ext.bound_to:
            name = b[:-2] if b.endswith("()") else b
            ext_names.add(name)
            flags.setdefault(name, f"the extension '{ext.name}' (line {ext.line})")
    for name in host.triton_kernels:
        ext_names.add(name)

    def targets_of(stmt: ast.AST) -> Iterable[str]:
        if isinstance(stmt, ast.Assign):
            tgts = stmt.targets
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
            tgts = [stmt.target]
        else:
            return ()
        out = []
        for t in tgts:
            for e in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
                d = dotted_name(e)
                if d:
                    out.append(d)
        return out

    handlers = host.of_type(ast.ExceptHandler)
    assigns = host.of_type(ast.Assign, ast.AnnAssign, ast.AugAssign)
    if handlers:
        # each assignment's innermost enclosing handler within its function, found from the
        # handlers down (their bodies are a small part of the file) rather than from every
        # assignment up; the flags are then set in the order of the assignments
        owner = _handler_assigns(handlers)
        if owner:  # most handlers assign nothing: then no assignment needs looking up
            for node in assigns:
                cur = owner.get(node)
                if cur is not None:
                    for name in targets_of(node):
                        flags.setdefault(name, f"set in the except handler at line {cur.lineno}")
    for ext in host.extensions:
        tr = host.in_try_body(ext.call)
        if tr is not None:
            for s in tr.body:
                for name in targets_of(s):
                    flags.setdefault(name, f"set where the extension is compiled (line {s.lineno})")
    # flag = ext is not None / hasattr(ext, ...) / bool(ext)
    known = ext_names | set(flags)
    if not known:  # nothing to mention: no assignment below can become a flag
        return flags
    for node in assigns:
        value = node.value
        # exact node types (a parsed tree has no subclasses): one set lookup per assignment
        tv = type(value)
        if tv is ast.Call:
            func = value.func
            if type(func) is not ast.Name or func.id not in _FLAG_CALLS:
                continue
        elif tv not in _FLAG_VALUES:
            continue
        mentioned = {dotted_name(n) for n in subtree(value) if isinstance(n, (ast.Name, ast.Attribute))}
        if mentioned & known:
            for name in targets_of(node):
                flags.setdefault(name, f"derived from whether the extension loaded (line {node.lineno})")
    return flags
