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
from typing import Iterable

from .catalog import IDENTITY_INIT_MODULES, MODULE_PARAMS, STATELESS_MODULES, CONTAINER_MODULES
from .facts import Holder
from .module import CUPY_KERNELS, HostModule
from .resolve import dotted_name

_TENSOR_FACTORIES = frozenset({"randn", "rand", "zeros", "ones", "empty", "full", "tensor", "arange", "eye",
                               "randint", "linspace", "zeros_like", "ones_like", "empty_like", "randn_like",
                               "rand_like", "full_like", "as_tensor", "from_numpy"})
_IDENTITY_FILL = frozenset({"ones", "zeros", "ones_like", "zeros_like", "eye"})
_LOADERS = ("load_inline", "cpp_extension.load")
_NONTENSOR_BUILTINS = frozenset({"int", "float", "str", "bool", "dict", "list", "tuple", "set", "len", "max", "min",
                                 "abs", "round", "sum", "getattr", "hasattr", "isinstance", "range", "print", "object",
                                 "super", "type", "frozenset", "sorted", "math.ceil", "math.floor", "math.sqrt",
                                 "math.prod", "math.log2", "threading.Lock", "collections.OrderedDict",
                                 "collections.defaultdict"})


class FunctionIndex:
    """Assignments and calls of each function, from the host's one indexing pass (no tree walks)."""

    def __init__(self, host: HostModule):
        self.host = host
        self._assigns: dict[ast.AST, list[ast.AST]] | None = None
        self._calls: dict[ast.AST, list[ast.Call]] | None = None

    def _owner(self, node: ast.AST) -> ast.AST:
        cur = self.host.parents.get(node)
        while cur is not None and not isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            cur = self.host.parents.get(cur)
        return cur if cur is not None else self.host.tree

    def assigns(self, fn: ast.AST) -> list[ast.AST]:
        if self._assigns is None:
            self._assigns = {}
            for n in self.host.of_type(ast.Assign, ast.AnnAssign):
                self._assigns.setdefault(self._owner(n), []).append(n)
        return self._assigns.get(fn, [])

    def calls(self, fn: ast.AST) -> list[ast.Call]:
        if self._calls is None:
            self._calls = {}
            for n in self.host.of_type(ast.Call):
                self._calls.setdefault(self._owner(n), []).append(n)  # type: ignore[arg-type]
        return self._calls.get(fn, [])


def self_chain(node: ast.AST, self_name: str = "self") -> str | None:
    """``self.a.b`` -> ``a.b``; None when the chain is not rooted at ``self``."""
    parts: list[str] = []
    e = node
    while isinstance(e, ast.Attribute):
        parts.append(e.attr)
        e = e.value
    if isinstance(e, ast.Name) and e.id == self_name and parts:
        return ".".join(reversed(parts))
    return None


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

    def scan(self, cls_name: str, prefix: str = "", depth: int = 0) -> None:
        if (cls_name, prefix) in self._seen or depth > 3:
            return
        self._seen.add((cls_name, prefix))
        for fn in self._init_functions(cls_name):
            for node in sorted(self.index.assigns(fn), key=lambda n: (n.lineno, n.col_offset)):
                if node.value is not None:  # type: ignore[attr-defined]
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]  # type: ignore[attr-defined]
                    for t in targets:
                        chain = self_chain(t)
                        if chain is not None and "." not in chain:
                            self._assign(prefix + chain, node.value, prefix, depth)  # type: ignore[attr-defined]
            for node in self.index.calls(fn):
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
                    self.holders[attr] = Holder(attr, kind, f"nn.Module.{node.func.attr}", node,
                                                identity_init=self._identity_fill(value))

    def _init_functions(self, cls_name: str) -> list[ast.FunctionDef]:
        """``__init__`` of the class and its local bases, and methods they call on self (one level)."""
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

    def _identity_fill(self, value: ast.AST | None) -> bool:
        if not isinstance(value, ast.Call):
            return False
        name = self.host.canonical(value.func)
        if name in ("torch.nn.Parameter", "torch.nn.parameter.Parameter") and value.args:
            return self._identity_fill(value.args[0])
        return name.startswith("torch.") and name.rsplit(".", 1)[-1] in _IDENTITY_FILL

    def _assign(self, attr: str, value: ast.AST, prefix: str, depth: int) -> None:
        host = self.host
        reads = frozenset(prefix + c for c in _self_reads(value))
        if isinstance(value, ast.Call):
            name = host.canonical(value.func)
            short = name.rsplit(".", 1)[-1]
            if name in ("torch.nn.Parameter", "torch.nn.parameter.Parameter"):
                if reads:
                    self.derived[attr] = reads
                self.holders[attr] = Holder(attr, "parameter", "torch.nn.Parameter", value,
                                            identity_init=self._identity_fill(value))
                return
            if name.startswith("torch.nn.") and short[:1].isupper():
                if short in CONTAINER_MODULES:
                    members = tuple(host.canonical(a.func) for a in value.args if isinstance(a, ast.Call))
                    self.holders[attr] = Holder(attr, "container", name, value, target=",".join(members))
                elif short in STATELESS_MODULES:
                    self.holders[attr] = Holder(attr, "stateless", name, value)
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
                return
            if name.endswith(_LOADERS) or name in CUPY_KERNELS:
                self.holders[attr] = Holder(attr, "extension", name, value)
                return
            if isinstance(value.func, ast.Name) and value.func.id in self.classes:
                self.holders[attr] = Holder(attr, "local", value.func.id, value)
                self.scan(value.func.id, attr + ".", depth + 1)
                return
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
            if reads:
                self.derived[attr] = reads
                return
            self.holders[attr] = Holder(attr, "unknown", name or "<call>", value)
            return
        if isinstance(value, ast.Attribute) and not reads:
            self.holders[attr] = Holder(attr, "callable", host.canonical(value) or dotted_name(value), value,
                                        target=host.canonical(value) or dotted_name(value))
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
    nodes = list(ast.walk(value))
    methods = {n.func for n in nodes if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Attribute):
            chain = self_chain(node.value if node in methods else node)
            if chain is not None:
                out.add(chain)
    # keep the longest chains only: ``fc.weight`` rather than ``fc`` as well
    return {c for c in out if not any(o != c and o.startswith(c + ".") for o in out)}


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

    handlers = set(host.of_type(ast.ExceptHandler))
    assigns = host.of_type(ast.Assign, ast.AnnAssign, ast.AugAssign)
    if handlers:
        for node in assigns:
            cur = host.parents.get(node)
            while cur is not None and not isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
                if cur in handlers:
                    for name in targets_of(node):
                        flags.setdefault(name, f"set in the except handler at line {cur.lineno}")
                    break
                cur = host.parents.get(cur)
    for ext in host.extensions:
        tr = host.in_try_body(ext.call)
        if tr is not None:
            for s in tr.body:
                for name in targets_of(s):
                    flags.setdefault(name, f"set where the extension is compiled (line {s.lineno})")
    # flag = ext is not None / hasattr(ext, ...) / bool(ext)
    known = ext_names | set(flags)
    for node in assigns:
        value = node.value
        if not isinstance(value, (ast.Compare, ast.BoolOp, ast.UnaryOp, ast.Call)):
            continue
        if isinstance(value, ast.Call) and not (isinstance(value.func, ast.Name) and
                                                value.func.id in ("hasattr", "bool", "callable", "all", "any")):
            continue
        mentioned = {dotted_name(n) for n in ast.walk(value) if isinstance(n, (ast.Name, ast.Attribute))}
        if mentioned & known:
            for name in targets_of(node):
                flags.setdefault(name, f"derived from whether the extension loaded (line {node.lineno})")
    return flags
