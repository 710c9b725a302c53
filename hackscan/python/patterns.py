"""Shared AST facts for the state, stream, tampering, harness, precision, replay and obfuscation rules.

The HS13x-HS19x rules (``hackscan/checks/python/``) ask the same few questions of a host file: which
functions run when the model is called (forward and what it reaches), which local names carry the
*values* of forward's inputs (as opposed to their shape or identity), which names are aliases of an
input's storage, what state outlives a call (``self.x``, module globals), and what a statement path
writes before it returns.  ``MiscFacts`` answers them once per file, served to the rules as
``ctx.patterns``; every answer is built lazily from the node lists of ``HostModule`` (never a fresh
walk of the whole tree) and kept by the scan context, which lives exactly as long as one scan.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from ..util.lazy import cached_property
from . import catalog as _catalog
from .module import HostModule, children
from .program import forward_of, host_model
from .resolve import dotted_name

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
_ID, _ATTR, _NAME = operator.attrgetter("id"), operator.attrgetter("attr"), operator.attrgetter("name")
_ARG = operator.attrgetter("arg")
_DEF_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_FUNC_TYPES = frozenset(_FUNCS)  # exact-type test: AST node classes are never subclassed
_UNSET = object()  # "not memoised yet" (None is a valid owner: module level)

# Attributes, methods and builtins that read metadata or identity, not values (the vocabulary of
# ``catalog``): an expression that touches an input only through these does not depend on its data.
META_ATTRS = _catalog.META_ATTRS | _catalog.META_METHODS
META_FUNCS = _catalog.META_BUILTINS | {"print"}  # print returns None: nothing of its argument flows on
# Allocation: the result holds no input values even when an input is passed (``empty_like(x)``).
ALLOC_FUNCS = frozenset({
    "torch.empty", "torch.empty_like", "torch.zeros", "torch.zeros_like", "torch.ones", "torch.ones_like",
    "torch.full", "torch.full_like", "torch.empty_strided", "torch.rand_like", "torch.randn_like",
    "torch.arange",
})
ALLOC_METHODS = frozenset({"new_empty", "new_zeros", "new_ones", "new_full", "new_empty_strided"})
# Methods that return a view of (or the very same) storage: writes through them reach the input.
VIEW_METHODS = frozenset({
    "view", "view_as", "reshape", "reshape_as", "contiguous", "flatten", "ravel", "t", "T", "mT", "transpose",
    "permute", "squeeze", "unsqueeze", "expand", "expand_as", "as_strided", "detach", "narrow", "select",
    "unflatten", "movedim", "swapaxes", "data", "to", "cuda", "float", "type_as", "unbind", "split", "chunk",
    "diagonal", "real", "imag", "view_as_real", "requires_grad_",
})

# Modules and objects a benchmark harness calls to time or compare; writes to them are tampering.
HARNESS_ROOTS = ("torch", "time", "timeit", "triton", "numpy", "builtins", "gc", "sys", "os", "random",
                 "functools", "importlib", "inspect", "threading", "cupy")
# Settings written for performance or configuration, not functions a harness calls.
CONFIG_PREFIXES = (
    "torch.backends.", "torch._inductor.config.", "torch._dynamo.config.", "torch._functorch.config.",
    "torch.jit._state.", "torch._C._jit", "torch.fx.experimental.", "torch._logging.",
    "torch.set_num_threads", "os.environ", "triton.Config",
)


@dataclass
class LocalDefs:
    """Flow-insensitive def-use facts of one function: what each local name may hold.

    ``defs[name]`` lists the expressions assigned to ``name`` anywhere in the function (augmented
    assignments contribute their right-hand side; loop targets their iterable; ``with ... as n``
    the context expression).  That is coarse, but kernels' host code is short and straight-line,
    and the rules use it only to ask "can this name hold something derived from an input?".
    """

    fn: ast.AST
    params: tuple[str, ...]
    defs: dict[str, list[ast.AST]] = field(default_factory=dict)
    # local names bound by ``for`` / comprehension targets (their def is the iterable)
    loop_names: set[str] = field(default_factory=set)


def _assigned_names(target: ast.AST) -> Iterator[tuple[str, ast.AST | None]]:
    """Names bound by an assignment target, with the element of a tuple target when unpacked."""
    if isinstance(target, ast.Name):
        yield target.id, None
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            if isinstance(elt, ast.Starred):
                elt = elt.value
            yield from _assigned_names(elt)


def _function_params(fn: ast.AST) -> tuple[str, ...]:
    args = getattr(fn, "args", None)
    if args is None:
        return ()
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    if args.vararg:
        names.append(args.vararg.arg)
    if args.kwarg:
        names.append(args.kwarg.arg)
    return tuple(names)


def value_refs(expr: ast.AST | None, names: set[str] | frozenset[str]) -> bool:
    """Whether ``expr`` can carry the *values* held by any of ``names``.

    A name reached only through metadata (``x.shape``, ``x.size(0)``, ``len(x)``, ``id(x)``,
    ``x.data_ptr()``) or through an allocation (``torch.empty_like(x)``) does not count.
    """
    if expr is None or not names:
        return False
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, ast.Name):
            if e.id in names:
                return True
            continue
        if isinstance(e, ast.Attribute):
            if e.attr in META_ATTRS:
                continue
            stack.append(e.value)
            continue
        if isinstance(e, ast.Call):
            f = e.func
            if isinstance(f, ast.Name) and f.id in META_FUNCS:
                continue
            if isinstance(f, ast.Attribute):
                if f.attr in META_ATTRS or f.attr in ALLOC_METHODS:
                    continue
                if f.attr in ("empty_like", "zeros_like", "ones_like", "full_like", "empty", "zeros", "ones",
                              "full", "empty_strided") and isinstance(f.value, ast.Name) and f.value.id == "torch":
                    continue
            stack.append(f)
            stack.extend(e.args)
            stack.extend(k.value for k in e.keywords)
            continue
        if isinstance(e, (ast.Lambda, *_FUNCS)):
            continue
        stack.extend(children(e))
    return False


def value_names(expr: ast.AST | None) -> set[str]:
    """Names whose values ``expr`` can carry (the names ``value_refs`` would match)."""
    out: set[str] = set()
    if expr is None:
        return out
    # exact-type dispatch (AST classes are not subclassed): this runs on every def and call
    # argument of the reachable functions, and constants, the commonest leaf, need no children
    stack = [expr]
    pop, push, extend, add = stack.pop, stack.append, stack.extend, out.add
    while stack:
        e = pop()
        t = type(e)
        if t is _Name:
            add(e.id)
        elif t is _Attribute:
            if e.attr not in META_ATTRS:
                push(e.value)
        elif t is _Call:
            f = e.func
            ft = type(f)
            if ft is _Name and f.id in META_FUNCS:
                continue
            if ft is _Attribute:
                if f.attr in META_ATTRS or f.attr in ALLOC_METHODS:
                    continue
                if f.attr in _TORCH_ALLOC_ATTRS and type(f.value) is _Name and f.value.id == "torch":
                    continue
            push(f)
            extend(e.args)
            for k in e.keywords:
                push(k.value)
        elif t is _Constant:
            continue
        elif t not in _NO_VALUE_SCOPES:
            extend(children(e))
    return out


_Name, _Attribute, _Call, _Constant = ast.Name, ast.Attribute, ast.Call, ast.Constant
_NO_VALUE_SCOPES = frozenset({ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef})


def alias_names(expr: ast.AST) -> set[str]:
    """Names ``expr`` is a view of (what ``is_alias_expr`` would match)."""
    e = expr
    while True:
        if isinstance(e, ast.Name):
            return {e.id}
        if isinstance(e, ast.Subscript):
            e = e.value
            continue
        if isinstance(e, ast.Attribute) and e.attr in ("data", "T", "mT", "real", "imag"):
            e = e.value
            continue
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in VIEW_METHODS:
            e = e.func.value
            continue
        if isinstance(e, ast.IfExp):
            return alias_names(e.body) | alias_names(e.orelse)
        return set()


_PURE_BUILTINS = frozenset({"print", "len", "isinstance", "range", "zip", "enumerate", "list", "tuple", "dict", "set",
                            "min", "max", "sum", "sorted", "int", "float", "str", "bool", "getattr", "hasattr",
                            "setattr", "id", "hash", "type", "super", "repr", "abs", "round", "any", "all", "map"})
_PURE_PREFIXES = ("torch.", "math.", "numpy.", "triton.cdiv", "triton.next_power_of_2", "F.", "self.__class__")
_CONTAINER_WRITERS = frozenset({"append", "extend", "insert", "update", "setdefault", "add", "__setitem__", "put"})
_TORCH_ALLOC_ATTRS = frozenset({"empty_like", "zeros_like", "ones_like", "full_like", "empty", "zeros", "ones",
                                "full", "empty_strided"})


def is_alias_expr(expr: ast.AST, names: set[str]) -> bool:
    """``expr`` is (a view of) one of ``names``: ``x``, ``x.view(-1)``, ``x[0]``, ``x.contiguous()``."""
    e = expr
    while True:
        if isinstance(e, ast.Name):
            return e.id in names
        if isinstance(e, ast.Subscript):
            e = e.value
            continue
        if isinstance(e, ast.Attribute) and e.attr in ("data", "T", "mT", "real", "imag"):
            e = e.value
            continue
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in VIEW_METHODS:
            e = e.func.value
            continue
        if isinstance(e, ast.IfExp):
            return is_alias_expr(e.body, names) or is_alias_expr(e.orelse, names)
        return False


def state_key(expr: ast.AST) -> str | None:
    """The persistent state an expression reads: ``self.cache`` for ``self.cache[k]``, ``self.out``."""
    e = expr
    while type(e) is ast.Subscript:
        e = e.value
    if type(e) is ast.Call and type(e.func) is ast.Attribute and e.func.attr in ("get", "setdefault"):
        e = e.func.value
    # ``self.<attr>[.<more>]``: walk the attribute chain to its root without building its dotted name
    first = None
    while type(e) is ast.Attribute:
        first = e.attr
        e = e.value
    if first is not None and type(e) is ast.Name and e.id in ("self", "cls"):
        return "self." + first
    return None


@dataclass
class MiscFacts:
    host: HostModule
    _owner: dict[ast.AST, ast.AST | None] = field(default_factory=dict)
    _flows: dict[ast.AST, LocalDefs] = field(default_factory=dict)
    _by_owner: dict[type, dict[ast.AST | None, list[ast.AST]]] = field(default_factory=dict)
    _methods: dict[ast.AST, dict[str, FunctionNode]] = field(default_factory=dict)
    _sub_classes: dict[ast.AST, dict[str, ast.ClassDef]] = field(default_factory=dict)
    _class_of: dict[ast.AST, ast.ClassDef | None] = field(default_factory=dict)

    _cnames: dict[int, str] = field(default_factory=dict)
    _deps: dict[tuple[ast.AST, str], dict[str, set[str]]] = field(default_factory=dict)
    _targets: dict[ast.AST, list[FunctionNode]] = field(default_factory=dict)
    _shared: dict[object, object] = field(default_factory=dict)

    def shared(self, key: object, compute: Callable[[], object]) -> object:
        """A value several rules derive from the same scan's inputs, computed by the first that asks
        (``key`` names what is computed; the result must not be changed by its readers)."""
        got = self._shared.get(key, _UNSET)
        if got is _UNSET:
            got = self._shared[key] = compute()
        return got

    # ------------------------------------------------------------------ cheap pre-checks
    def mentions(self, *needles: str) -> bool:
        """Whether the source text contains any of ``needles``: rules use it to skip a file in
        microseconds when the construct they look for cannot be there."""
        text = self.host.source.text
        return any(n in text for n in needles)

    @cached_property
    def _calls_by_last(self) -> dict[str, list[ast.Call]]:
        out: dict[str, list[ast.Call]] = {}
        attr, name = ast.Attribute, ast.Name
        for c in self.host.of_type(ast.Call):
            f = c.func
            tf = type(f)  # exact types: AST node classes are never subclassed
            last = f.attr if tf is attr else f.id if tf is name else ""
            bucket = out.get(last)
            if bucket is None:
                out[last] = [c]
            else:
                bucket.append(c)
        return out

    def calls_named(self, *names: str) -> list[ast.Call]:
        """Calls whose function's last name component is one of ``names`` (``x.data_ptr()`` for
        ``data_ptr``): one dictionary lookup per name instead of a pass over every call.

        A call's last name is a ``Name`` id or an ``Attribute`` attr, both in ``idents`` (which
        every file builds for the rules' ``uses`` pre-checks): when none of ``names`` is there,
        no call can match, and the index of calls is not built (most files never need it)."""
        if self.idents.isdisjoint(names):
            return []
        by = self._calls_by_last
        if len(names) == 1:
            return by.get(names[0], [])
        out: list[ast.Call] = []
        for n in names:
            out.extend(by.get(n, ()))
        return out

    @cached_property
    def idents(self) -> set[str]:
        """Every identifier the file uses: names, attributes, keyword arguments, defined and imported names.

        Rules test their trigger words against it (``facts.uses("autocast")``): one set lookup per
        word, where a substring search of the source would cost a pass over the text each.  A plain
        set, read only (a frozen copy of it would cost a pass more on every file).
        """
        get = self.host.nodes.get
        out: set[str] = set(map(_ID, get(ast.Name, ())))
        out.update(map(_ATTR, get(ast.Attribute, ())))
        kws = get(ast.keyword)
        if kws:
            out.update(map(_ARG, kws))
            out.discard(None)  # ``**kwargs``: a keyword without a name
        for t in _DEF_TYPES:
            defs = get(t)
            if defs:
                out.update(map(_NAME, defs))
        for a in get(ast.alias, ()):
            out.update(a.name.split("."))
            if a.asname:
                out.add(a.asname)
        return out

    def uses(self, *names: str) -> bool:
        """Whether the file uses any of these identifiers (see ``idents``)."""
        return not self.idents.isdisjoint(names)

    def cname(self, call: ast.Call) -> str:
        """Canonical name of a call's function, computed once per call node for all rules."""
        key = id(call)
        got = self._cnames.get(key)
        if got is None:
            got = self.host.canonical(call.func)
            self._cnames[key] = got
        return got

    # ------------------------------------------------------------------ structure
    def owner(self, node: ast.AST) -> ast.AST | None:
        """The innermost function containing ``node`` (None at module or class level)."""
        cache = self._owner
        found = cache.get(node, _UNSET)
        if found is not _UNSET:
            return found  # type: ignore[return-value]
        parents = self.host.parents
        chain = [node]
        cur = parents.get(node)
        found = None
        while cur is not None:
            if type(cur) in _FUNC_TYPES:
                found = cur
                break
            hit = cache.get(cur, _UNSET)
            if hit is not _UNSET:
                found = hit
                break
            chain.append(cur)
            cur = parents.get(cur)
        for c in chain:
            cache[c] = found
        return found  # type: ignore[return-value]

    def nodes_by_owner(self, typ: type) -> dict[ast.AST | None, list[ast.AST]]:
        """Every node of one type, grouped by the function that contains it."""
        got = self._by_owner.get(typ)
        if got is None:
            # ``owner`` inlined: this runs for every Call / Assign / Return of the file, and the
            # per-node method call cost more than the parent walk itself (same memo, same answers)
            got = {}
            cache = self._owner
            cache_get = cache.get
            parents_get = self.host.parents.get
            funcs = _FUNC_TYPES
            for n in self.host.of_type(typ):
                o = cache_get(n, _UNSET)
                if o is _UNSET:
                    # the parent first, without a chain: most nodes sit right in a function or
                    # under a node an earlier one cached (the memo ends up the same as ``owner``'s)
                    cur = parents_get(n)
                    if cur is None:
                        o = None
                    elif type(cur) in funcs:
                        o = cur
                    else:
                        o = cache_get(cur, _UNSET)
                        if o is _UNSET:
                            chain = [cur]
                            cur = parents_get(cur)
                            o = None
                            while cur is not None:
                                if type(cur) in funcs:
                                    o = cur
                                    break
                                hit = cache_get(cur, _UNSET)
                                if hit is not _UNSET:
                                    o = hit
                                    break
                                chain.append(cur)
                                cur = parents_get(cur)
                            for c in chain:
                                cache[c] = o
                    cache[n] = o
                bucket = got.get(o)
                if bucket is None:
                    got[o] = [n]
                else:
                    bucket.append(n)
            self._by_owner[typ] = got
        return got

    def in_functions(self, fns: Iterable[ast.AST | None], *types: type) -> list[ast.AST]:
        out: list[ast.AST] = []
        for t in types:
            groups = self.nodes_by_owner(t)
            for fn in fns:
                out.extend(groups.get(fn, ()))
        return out

    @cached_property
    def module_functions(self) -> dict[str, FunctionNode]:
        return {n.name: n for n in self.host.tree.body if isinstance(n, _FUNCS)}

    @cached_property
    def module_classes(self) -> dict[str, ast.ClassDef]:
        return {n.name: n for n in self.host.tree.body if isinstance(n, ast.ClassDef)}

    @cached_property
    def model(self) -> ast.ClassDef | None:
        """The model class by the one rule of ``program.model_class``."""
        return host_model(self.host)

    @cached_property
    def forward(self) -> FunctionNode | None:
        return forward_of(self.model)

    def _closure(self, roots: list[FunctionNode]) -> tuple[FunctionNode, ...]:
        """Functions reachable from ``roots``: self-methods, module functions, autograd
        ``Function.apply``, local nn.Module classes' forward, and functions nested in those."""
        calls_by_owner = self.nodes_by_owner(ast.Call)
        defs_by_owner = self.nodes_by_owner(ast.FunctionDef)
        seen: dict[ast.AST, None] = {}
        todo = list(roots)
        while todo:
            fn = todo.pop()
            if fn in seen:
                continue
            seen[fn] = None
            todo.extend(defs_by_owner.get(fn, ()))  # closures defined inside run when called there
            for call in calls_by_owner.get(fn, ()):
                for target in self.call_targets(call):
                    if target not in seen:
                        todo.append(target)
        return tuple(seen)

    def class_of(self, fn: ast.AST | None) -> ast.ClassDef | None:
        """The class whose method (or method's closure) ``fn`` is."""
        if fn is None:
            return None
        got = self._class_of.get(fn, 0)
        if got == 0:
            cls = self.host.enclosing(fn, ast.ClassDef)
            got = cls if isinstance(cls, ast.ClassDef) else None
            self._class_of[fn] = got
        return got  # type: ignore[return-value]

    def methods_of(self, cls: ast.ClassDef | None) -> dict[str, FunctionNode]:
        if cls is None:
            return {}
        got = self._methods.get(cls)
        if got is None:
            got = {}
            for c in self._class_chain(cls):
                for stmt in c.body:
                    if isinstance(stmt, _FUNCS):
                        got.setdefault(stmt.name, stmt)
            self._methods[cls] = got
        return got

    def call_targets(self, call: ast.Call) -> list[FunctionNode]:
        """Functions of this file that ``call`` may invoke (the list is shared: do not change it)."""
        got = self._targets.get(call)
        if got is None:
            got = self._targets[call] = self._call_targets(call)
        return got

    def _call_targets(self, call: ast.Call) -> list[FunctionNode]:
        # Only ``name(...)`` and ``name.attr(...)`` can reach a function of this file; the common
        # ``torch.x(...)`` / ``t.view(...)`` / ``F.relu(...)`` leave after a type test or two.
        f = call.func
        out: list[FunctionNode] = []
        tf = type(f)
        if tf is ast.Name:
            fn = self.module_functions.get(f.id)
            if fn is not None:
                out.append(fn)
            cls = self.module_classes.get(f.id)
            if cls is not None:
                init = _method(cls, "__init__")
                if init is not None:
                    out.append(init)
            return out
        if tf is not ast.Attribute:
            return out
        base = f.value
        if type(base) is not ast.Name:
            return out
        vid = base.id
        classes = self.module_classes
        if vid in ("self", "cls"):
            cls = self.class_of(self.owner(call))
            m = self.methods_of(cls).get(f.attr)
            if m is not None:
                out.append(m)
            else:  # self.block(x) where self.block = LocalModule(...)
                sub = self._attr_classes(cls).get(f.attr)
                if sub is not None:
                    out.extend(m for m in (_method(sub, "forward"), _method(sub, "__call__")) if m is not None)
        elif f.attr in ("apply", "forward"):
            cls = classes.get(vid)
            if cls is not None:
                m = _method(cls, "forward")
                if m is not None:
                    out.append(m)
        cls = classes.get(vid)
        if cls is not None:  # ``LocalClass.method(...)``
            m = _method(cls, f.attr)
            if m is not None and m not in out:
                out.append(m)
        return out

    def _attr_classes(self, cls: ast.ClassDef | None) -> dict[str, ast.ClassDef]:
        """``self.<attr> = LocalClass(...)`` assignments in the methods of ``cls``."""
        if cls is None:
            return {}
        got = self._sub_classes.get(cls)
        if got is not None:
            return got
        got = {}
        for node in self.in_functions(list(self.methods_of(cls).values()), ast.Assign):
            if isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name):
                sub = self.module_classes.get(node.value.func.id)
                if sub is None:
                    continue
                for t in node.targets:
                    name = dotted_name(t)
                    if name.startswith("self."):
                        got[name[5:]] = sub
        self._sub_classes[cls] = got
        return got

    def _class_chain(self, cls: ast.ClassDef) -> list[ast.ClassDef]:
        """The class and its bases defined in this file (a ModelNew may inherit its helpers)."""
        out = [cls]
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in self.module_classes and base.id != cls.name:
                b = self.module_classes[base.id]
                if b not in out:
                    out.append(b)
        return out

    @cached_property
    def reachable(self) -> tuple[FunctionNode, ...]:
        """forward and every function it can reach (see ``_closure``)."""
        if self.forward is None:
            return ()
        roots = [self.forward]
        call = _method(self.model, "__call__") if self.model is not None else None
        if call is not None:
            roots.append(call)
        return self._closure(roots)

    @cached_property
    def reachable_set(self) -> frozenset[ast.AST]:
        return frozenset(self.reachable)

    @cached_property
    def init_reachable(self) -> tuple[FunctionNode, ...]:
        """``__init__`` of the model and what it reaches (runs once, before any timed call)."""
        if self.model is None:
            return ()
        init = _method(self.model, "__init__")
        return self._closure([init]) if init is not None else ()

    @cached_property
    def runs(self) -> frozenset[ast.AST | None]:
        """Code that runs when the harness imports, builds and calls the model (None: module level)."""
        return frozenset(self.reachable) | frozenset(self.init_reachable) | {None}

    def in_input_factory(self, node: ast.AST) -> bool:
        """Inside the file's own ``get_inputs`` / ``get_init_inputs`` (the harness uses the reference's)."""
        fn = self.owner(node)
        while fn is not None:
            if getattr(fn, "name", "") in ("get_inputs", "get_init_inputs") and fn in self.module_functions.values():
                return True
            fn = self.owner(fn)
        return False

    def is_main_guarded(self, node: ast.AST) -> bool:
        """Inside ``if __name__ == "__main__":`` (never runs under a harness import)."""
        for anc in self.host.ancestors(node):
            if isinstance(anc, ast.If) and _is_main_test(anc.test):
                return True
        return False

    # ------------------------------------------------------------------ data flow
    def flow(self, fn: ast.AST) -> LocalDefs:
        got = self._flows.get(fn)
        if got is not None:
            return got
        flow = LocalDefs(fn=fn, params=_function_params(fn))
        defs = flow.defs
        for node in self.in_functions([fn], ast.Assign, ast.AugAssign, ast.AnnAssign, ast.NamedExpr, ast.For,
                                      ast.withitem, ast.comprehension):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    for name, _ in _assigned_names(t):
                        defs.setdefault(name, []).append(node.value)
            elif isinstance(node, ast.AugAssign):
                if isinstance(node.target, ast.Name):
                    defs.setdefault(node.target.id, []).append(node.value)
            elif isinstance(node, ast.AnnAssign):
                if isinstance(node.target, ast.Name) and node.value is not None:
                    defs.setdefault(node.target.id, []).append(node.value)
            elif isinstance(node, ast.NamedExpr):
                defs.setdefault(node.target.id, []).append(node.value)
            elif isinstance(node, (ast.For, ast.comprehension)):
                for name, _ in _assigned_names(node.target):
                    defs.setdefault(name, []).append(node.iter)
                    flow.loop_names.add(name)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                for name, _ in _assigned_names(node.optional_vars):
                    defs.setdefault(name, []).append(node.context_expr)
        self._flows[fn] = flow
        return flow

    def _dependencies(self, fn: ast.AST, kind: str) -> dict[str, set[str]]:
        """name -> local names whose defs carry it (``value``: in value position; ``alias``: as a view)."""
        key = (fn, kind)
        got = self._deps.get(key)
        if got is not None:
            return got
        flow = self.flow(fn)
        rev: dict[str, set[str]] = {}
        for name, exprs in flow.defs.items():
            if kind == "alias" and name in flow.loop_names:
                continue
            for e in exprs:
                used = value_names(e) if kind == "value" else alias_names(e)
                for u in used:
                    if u != name:
                        rev.setdefault(u, set()).add(name)
        if kind == "value":
            # calls may write their arguments: a kernel launch fills `out` from `x`, `buf.copy_(x)`,
            # `parts.append(y)`; the written names then carry the values of the others
            for call in self.in_functions([fn], ast.Call):
                for src, dst in self._call_writes(call):
                    if src != dst:
                        rev.setdefault(src, set()).add(dst)
        self._deps[key] = rev
        return rev

    def _call_writes(self, call: ast.Call) -> Iterator[tuple[str, str]]:
        f = call.func
        if isinstance(f, ast.Name) and f.id in _PURE_BUILTINS:
            return
        args = list(call.args) + [k.value for k in call.keywords]
        if not args:
            return
        # the written names first: most calls write nothing, and then their arguments' value
        # names (the costlier half) are never needed
        targets: set[str] = set()
        if isinstance(f, ast.Attribute) and (
                (f.attr.endswith("_") and not f.attr.startswith("__")) or f.attr in _CONTAINER_WRITERS):
            targets |= alias_names(f.value)
        out_kw = next((k.value for k in call.keywords if k.arg == "out"), None)
        if out_kw is not None:
            targets |= alias_names(out_kw)
        name = self.cname(call) if not isinstance(f, ast.Subscript) else ""
        if isinstance(f, ast.Subscript) or not name.startswith(_PURE_PREFIXES):
            for a in args:  # a kernel launch or an extension/helper call: any tensor argument may be written
                targets |= alias_names(a)
        if not targets:
            return
        sources: set[str] = set()
        for a in args:
            sources |= value_names(a)
        for t in targets:
            for src in sources:
                yield src, t

    def _propagate(self, fn: ast.AST, seeds: Iterable[str], kind: str) -> frozenset[str]:
        rev = self._dependencies(fn, kind)
        out = set(seeds)
        todo = list(out)
        while todo:
            for nxt in rev.get(todo.pop(), ()):
                if nxt not in out:
                    out.add(nxt)
                    todo.append(nxt)
        return frozenset(out)

    def value_taint(self, fn: ast.AST, seeds: Iterable[str]) -> frozenset[str]:
        """Local names of ``fn`` that may hold values computed from ``seeds``."""
        return self._propagate(fn, seeds, "value")

    def alias_taint(self, fn: ast.AST, seeds: Iterable[str]) -> frozenset[str]:
        """Local names of ``fn`` that may share storage with ``seeds`` (views, ``contiguous()``)."""
        return self._propagate(fn, seeds, "alias")

    @cached_property
    def _input_seeds(self) -> dict[ast.AST, tuple[frozenset[str], frozenset[str]]]:
        """For each reachable function, (parameters that may receive forward's input values,
        parameters that may receive forward's input tensors themselves or views of them).

        forward's own parameters are both; a helper's parameter is one when some call site in
        reachable code passes such a value in its position (one propagation pass in reachability
        order is enough for the short helper chains kernels use).
        """
        values: dict[ast.AST, set[str]] = {}
        aliases: dict[ast.AST, set[str]] = {}
        if self.forward is None:
            return {}
        own = set(p for p in _function_params(self.forward) if p not in ("self", "cls"))
        values[self.forward] = set(own)
        aliases[self.forward] = set(own)
        calls_by_owner = self.nodes_by_owner(ast.Call)
        # the seeds each function was last processed with: processing a function again with the
        # same seeds adds exactly what the first time added, so the second round skips it
        done: dict[ast.AST, tuple[frozenset[str], frozenset[str]]] = {}
        for _ in range(2):
            for fn in self.reachable:
                vseeds = values.get(fn, set()) | aliases.get(fn, set())
                if not vseeds:
                    continue
                state = (frozenset(vseeds), frozenset(aliases.get(fn, ())))
                if done.get(fn) == state:
                    continue
                done[fn] = state
                vt = self.value_taint(fn, vseeds)
                at = set(self.alias_taint(fn, aliases.get(fn, set())))
                for call in calls_by_owner.get(fn, ()):
                    for target in self.call_targets(call):
                        params = list(_function_params(target))
                        bound = params[1:] if params and params[0] in ("self", "cls", "ctx") else params
                        vgot = values.setdefault(target, set())
                        agot = aliases.setdefault(target, set())
                        pairs = [(bound[i], a) for i, a in enumerate(call.args) if i < len(bound)]
                        pairs += [(k.arg, k.value) for k in call.keywords if k.arg in params]
                        for param, a in pairs:
                            if is_alias_expr(a, at):
                                agot.add(param)
                            elif value_refs(a, vt):
                                vgot.add(param)
                # nested closures see the enclosing function's input names
                for inner in self.nodes_by_owner(ast.FunctionDef).get(fn, ()):
                    values.setdefault(inner, set()).update(vt)
                    aliases.setdefault(inner, set()).update(at)
        return {k: (frozenset(values.get(k, ())), frozenset(aliases.get(k, ())))
                for k in set(values) | set(aliases)}

    @property
    def input_params(self) -> dict[ast.AST, frozenset[str]]:
        """For each reachable function, the parameters that may receive forward's inputs (values or tensors)."""
        return {k: v | a for k, (v, a) in self._input_seeds.items()}

    def input_values(self, fn: ast.AST) -> frozenset[str]:
        """Names in ``fn`` that may hold values of forward's inputs."""
        v, a = self._input_seeds.get(fn, (frozenset(), frozenset()))
        seeds = v | a
        return self.value_taint(fn, seeds) if seeds else frozenset()

    def input_aliases(self, fn: ast.AST) -> frozenset[str]:
        """Names in ``fn`` that may share storage with forward's inputs."""
        _, a = self._input_seeds.get(fn, (frozenset(), frozenset()))
        return self.alias_taint(fn, a) if a else frozenset()

    # ------------------------------------------------------------------ paths
    def dominating_prefix(self, node: ast.AST, fn: ast.AST | None) -> list[ast.AST]:
        """Statements and tests that always run before ``node`` within ``fn`` on the path to it.

        For a node in an ``if`` arm that is the test plus everything above the ``if`` in its block,
        recursively.  A preceding ``if`` without ``else`` contributes only its test (its arm may not
        have run: ``if key not in cache: cache[key] = f(x)`` does not refresh on a hit); an
        ``if``/``else`` contributes both arms, a loop its body, a ``try`` its body before a handler
        (conservative: more code counts as having run, so fewer paths look like they skipped work).
        """
        out: list[ast.AST] = []
        child = node
        for anc in self.host.ancestors(node):
            for fld in ("body", "orelse", "finalbody", "handlers"):
                block = getattr(anc, fld, None)
                if isinstance(block, list) and any(s is child for s in block):
                    for s in block:
                        if s is child:
                            break
                        if isinstance(s, ast.If) and not s.orelse:
                            out.append(s.test)  # its arm may not have run
                        elif isinstance(s, ast.While):
                            out.append(s.test)
                        else:
                            out.append(s)
                    if isinstance(anc, ast.Try) and fld in ("handlers", "orelse", "finalbody"):
                        out.extend(anc.body)
                    break
            if isinstance(anc, (ast.If, ast.While)):
                out.append(anc.test)
            elif isinstance(anc, (ast.For, ast.AsyncFor)):
                out.append(anc.iter)
            elif isinstance(anc, (ast.With, ast.AsyncWith)):
                out.extend(i.context_expr for i in anc.items)
            if anc is fn:
                break
            child = anc
        return out


def _method(cls: ast.ClassDef | None, name: str) -> FunctionNode | None:
    if cls is None:
        return None
    for stmt in cls.body:
        if isinstance(stmt, _FUNCS) and stmt.name == name:
            return stmt
    return None


def _is_main_test(test: ast.AST) -> bool:
    if isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__":
        return any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    return False


def call_name(host: HostModule, call: ast.Call) -> str:
    """Canonical dotted name of a call's function, '' when it is not a name chain."""
    return host.canonical(call.func)


def keyword(call: ast.Call, name: str, pos: int | None = None) -> ast.AST | None:
    for k in call.keywords:
        if k.arg == name:
            return k.value
    if pos is not None and pos < len(call.args) and not isinstance(call.args[pos], ast.Starred):
        return call.args[pos]
    return None


# ---------------------------------------------------------------------- module objects through aliases
_CONVENTIONAL_ROOTS = frozenset({"torch", "triton", "tl", "F", "nn", "np"})


@dataclass
class ObjectNames:
    """Resolves expressions that denote module objects, through every way a file can alias them.

    ``torch.cuda`` / ``import torch.cuda as tc`` (imports), ``cuda = torch.cuda`` (local aliases,
    per function and module), ``getattr(torch.cuda, "Ev" + "ent")`` (folded where constant,
    ``<computed>`` otherwise), ``importlib.import_module("time")``, ``__import__("time")`` and
    ``sys.modules["time"]``.  The answer is a dotted name such as ``torch.cuda.Event``, or '' when
    the expression is not (known to be) a module object.
    """

    facts: MiscFacts
    # name -> owner -> the value of the last ``name = <value>`` in that function (None: module level)
    _aliases: dict[str, dict[ast.AST | None, ast.AST]] = field(default_factory=dict)
    # name -> every ``name = <value>`` that may alias an object, in the order of ``of_type``
    _by_name: dict[str, list[ast.Assign]] | None = None

    def _alias(self, scope: ast.AST | None, name: str) -> ast.AST | None:
        """The value last assigned to ``name`` in ``scope``.  The assignments are grouped by name
        first and their owners found only for the names asked about (an owner costs a walk up the
        parents, and few names are ever asked)."""
        by_scope = self._aliases.get(name)
        if by_scope is None:
            by_name = self._by_name
            if by_name is None:
                by_name = self._by_name = {}
                name_t = ast.Name
                for node in self.facts.host.of_type(ast.Assign):
                    targets = node.targets
                    if len(targets) != 1 or type(targets[0]) is not name_t:
                        continue
                    if isinstance(node.value, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
                        by_name.setdefault(targets[0].id, []).append(node)
            by_scope = self._aliases[name] = {}
            owner = self.facts.owner
            for node in by_name.get(name, ()):
                by_scope[owner(node)] = node.value  # the last one in each function wins
        return by_scope.get(scope)

    def resolve(self, expr: ast.AST, owner: ast.AST | None, depth: int = 0) -> str:
        if depth > 8:
            return ""
        host = self.facts.host
        if isinstance(expr, ast.Name):
            for scope in (owner, None):
                alias = self._alias(scope, expr.id)
                if alias is not None and alias is not expr:
                    got = self.resolve(alias, scope, depth + 1)
                    if got:
                        return got
                    break
            if expr.id in host.imports.aliases or expr.id in _CONVENTIONAL_ROOTS:
                return host.imports.resolve_name(expr.id)
            if expr.id in ("__builtins__",):
                return "builtins"
            return ""
        if isinstance(expr, ast.Attribute):
            base = self.resolve(expr.value, owner, depth + 1)
            return f"{base}.{expr.attr}" if base else ""
        if isinstance(expr, ast.Call):
            fname = host.canonical(expr.func)
            if fname in ("getattr", "builtins.getattr") and len(expr.args) >= 2:
                base = self.resolve(expr.args[0], owner, depth + 1)
                if not base:
                    return ""
                attr = self.fold_text(expr.args[1], owner)
                return f"{base}.{attr if attr is not None else '<computed>'}"
            if fname in ("importlib.import_module", "__import__", "builtins.__import__") and expr.args:
                name = self.fold_text(expr.args[0], owner)
                return name or ""
            return ""
        if isinstance(expr, ast.Subscript):
            if host.canonical(expr.value) == "sys.modules":
                name = self.fold_text(expr.slice, owner)
                return name or ""
        return ""

    def fold_text(self, expr: ast.AST, owner: ast.AST | None) -> str | None:
        """The string an expression evaluates to when it is constant, else None."""
        if isinstance(expr, ast.Constant):
            return expr.value if isinstance(expr.value, str) else None
        host = self.facts.host
        scope = host.scope_of(expr)
        v = host.resolver.try_value(expr, scope, getattr(expr, "lineno", None))
        text = getattr(v, "text", None)
        return text if isinstance(text, str) else None


def object_names(facts: MiscFacts) -> ObjectNames:
    cached = facts.host.__dict__.get("_object_names")
    if cached is None:
        cached = ObjectNames(facts)
        facts.host.__dict__["_object_names"] = cached
    return cached
