"""The parsed host file and the units extracted from it.

``HostModule.parse`` reads a candidate ``.py`` once: the ``ast``, import aliases, scopes for
constant folding, a parent map, every CUDA/C++ source handed to ``load_inline`` / ``load`` /
``cupy.RawKernel`` (resolved through variables and string operations), and every ``@triton.jit``
function.  Everything downstream (facts, rules, the dynamic stage's steering) reads from here.
All but the tree are computed on first use (see ``HostModule``): a reference file needs few of them.
"""

from __future__ import annotations

import ast
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..units import MappedText, Unit
from ..util.lazy import cached_property
from ..util.quick_init import quick_init
from .imports import ImportMap
from .literals import HostSource
from .resolve import Resolver, Scope, Unresolved, build_scope, dotted_name

LOAD_INLINE = "torch.utils.cpp_extension.load_inline"
LOAD = "torch.utils.cpp_extension.load"
CUPY_KERNELS = ("cupy.RawKernel", "cupy.RawModule", "cupy.ElementwiseKernel", "cupy.ReductionKernel")
TRITON_DECORATORS = ("triton.jit", "triton.autotune", "triton.heuristics", "triton.language.jit")

_LOADER_NAMES = frozenset({"load_inline", "load", "RawKernel", "RawModule", "ElementwiseKernel", "ReductionKernel"})
_LOADER_HINTS = ("load", "Kernel", "RawModule")  # each name above contains one
# the last part of a name that ends in ``cpp_extension.load`` or is one of ``CUPY_KERNELS``
_LOAD_LASTS = frozenset({"load", "RawKernel", "RawModule", "ElementwiseKernel", "ReductionKernel"})
_EXTRACTED = ("units", "extensions", "triton_kernels", "problems")  # what ``HostModule._extract`` fills
_EXTRACT_LOCK = threading.RLock()

# load_inline(name, cpp_sources, cuda_sources=None, ...): the positional order that matters
_LOAD_INLINE_POS = ("name", "cpp_sources", "cuda_sources")
_LOAD_POS = ("name", "sources")


_SKIP = (ast.expr_context, ast.boolop, ast.operator, ast.unaryop, ast.cmpop)
# ASDL field types that never hold a child worth indexing: values, and the operator / context
# singletons (a parent map for those would be wrong anyway: one object is shared by every use)
_LEAF_TYPES = frozenset({"identifier", "string", "constant", "int", "object", "expr_context", "boolop", "operator",
                         "unaryop", "cmpop"})
_FIELD_SPEC = re.compile(r"(\w+)([*?]?) (\w+)")


def _child_fields(t: type) -> tuple[tuple[str, bool], ...] | None:
    """The fields of node type ``t`` that hold child nodes, each with whether it is a list.

    Read from the ASDL signature CPython puts in each node class's docstring
    (``Call(expr func, expr* args, keyword* keywords)``); None when it cannot be read, and the
    caller then inspects every field's value.
    """
    doc = (t.__doc__ or "").strip()
    fields = getattr(t, "_fields", ())
    head = f"{t.__name__}("
    if not doc.startswith(head) or not doc.endswith(")"):
        return () if not fields else None
    inner = doc[len(head):-1].strip()
    specs = [_FIELD_SPEC.fullmatch(part.strip()) for part in inner.split(",")] if inner else []
    if any(m is None for m in specs) or tuple(m.group(3) for m in specs) != tuple(fields):
        return None
    return tuple((m.group(3), m.group(2) == "*") for m in specs if m.group(1) not in _LEAF_TYPES)


_CHILD_FIELDS: dict[type, tuple[tuple[str, bool], ...] | None] = {}

# list fields that may hold None (``{**d}``'s key, a keyword-only argument without a default);
# every other list of child nodes holds nodes only
_LISTS_WITH_NONE = frozenset({("Dict", "keys"), ("arguments", "kw_defaults")})


def _optional_fields(t: type) -> frozenset[str]:
    """The ``?`` fields of node type ``t`` (from its ASDL signature): the only single-child
    fields a parsed tree may leave None."""
    doc = (t.__doc__ or "").strip()
    head = f"{t.__name__}("
    inner = doc[len(head):-1] if doc.startswith(head) and doc.endswith(")") else ""
    return frozenset(m.group(3) for m in (_FIELD_SPEC.fullmatch(p.strip()) for p in inner.split(",") if p.strip())
                     if m is not None and m.group(2) == "?")


# per node type, a function that appends the node's children to a walk, and one that records the
# parent of each child and pushes the children on the indexing stack (None for a type without
# children); generated once per type and process
_WALKERS: dict[type, Any] = {}
_INDEXERS: dict[type, Any] = {}


def _generated(t: type) -> Any:
    """Build ``_WALKERS[t]``: straight-line code for the type's child fields.

    The generic loop over a type's fields (``getattr`` by name, a test per field) costs more than
    the work it guards; one small function per node type does the same in the same order with
    plain attribute loads.  Types whose signature cannot be read keep the generic code.
    """
    spec = _spec(t)
    fn: Any
    if spec is None:
        def fn(node: ast.AST, push: Any, extend: Any) -> None:
            extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, _SKIP))
        _WALKERS[t] = fn
        return fn
    if not spec:
        _WALKERS[t] = None
        return None
    optional = _optional_fields(t)
    lines = ["def visit(node, push, extend):"]
    for name, many in spec:
        lines.append(f"    v = node.{name}")
        if many and (t.__name__, name) in _LISTS_WITH_NONE:
            lines += ["    for c in v:", "        if c is not None:", "            push(c)"]
        elif many:
            lines += ["    if v:", "        extend(v)"]
        elif name in optional:
            lines += ["    if v is not None:", "        push(v)"]
        else:
            lines += ["    push(v)"]
    namespace: dict[str, Any] = {}
    exec(compile("\n".join(lines), f"<walk {t.__name__}>", "exec"), namespace)
    fn = _WALKERS[t] = namespace["visit"]
    return fn


def _spec(t: type) -> tuple[tuple[str, bool], ...] | None:
    spec = _CHILD_FIELDS.get(t, False)
    if spec is False:
        spec = _CHILD_FIELDS[t] = _child_fields(t)
    return spec


def _indexer(t: type) -> Any:
    """Build ``_INDEXERS[t]``: the indexer of node type ``t`` (None for a type without
    children), called by ``index_tree`` with the node, the tree's parent map and the ``push`` and
    ``extend`` of its indexing stack, for the types it does not handle inline.

    It records the parent of each child and pushes the children in field order, except that a
    last field holding one child is returned instead of pushed: ``index_tree`` would pop it at
    once, so it goes on with it directly (same order, one push and pop fewer).
    """
    spec = _spec(t)
    fn: Any
    if spec is None:
        def fn(node: ast.AST, parents: dict, push: Any, extend: Any) -> None:  # type: ignore[type-arg]
            _index_fields_generic(node, parents, push)
        _INDEXERS[t] = fn
        return fn
    if not spec:
        _INDEXERS[t] = None
        return None
    # the last single child is returned (None when its optional field is empty: the stack's next)
    lines = ["def visit(node, parents, push, extend):"] + _child_code(t, "    ", "return v")
    namespace: dict[str, Any] = {}
    exec(compile("\n".join(lines), f"<index {t.__name__}>", "exec"), namespace)
    fn = _INDEXERS[t] = namespace["visit"]
    return fn


def _child_code(t: type, indent: str, last_goes_on: str) -> list[str]:
    """Lines that record the parent of each child of a ``t`` node (``node``) and push the children
    in field order, except a last field holding one child: ``last_goes_on`` (with the child in
    ``v``) makes it the next node at once, as the stack would pop it next anyway."""
    spec = _spec(t)
    assert spec is not None
    optional = _optional_fields(t)
    lines: list[str] = []
    last = len(spec) - 1
    for i, (name, many) in enumerate(spec):
        lines.append(f"v = node.{name}")
        if many and (t.__name__, name) in _LISTS_WITH_NONE:
            lines += ["for c in v:", "    if c is not None:", "        parents[c] = node", "        push(c)"]
        elif many:
            lines += ["if v:", "    for c in v:", "        parents[c] = node", "    extend(v)"]
        elif i == last:
            if name in optional:
                lines += ["if v is not None:", "    parents[v] = node", "    " + last_goes_on]
            else:
                lines += ["parents[v] = node", last_goes_on]
        elif name in optional:
            lines += ["if v is not None:", "    parents[v] = node", "    push(v)"]
        else:
            lines += ["parents[v] = node", "push(v)"]
    return [indent + line for line in lines]


# the node types a host file has most of (``Name`` alone is a third of the nodes), most common
# first: ``index_tree`` tests for them inline (an identity test each) instead of a dictionary
# lookup and a call per node
_HOT_TYPES = (ast.Name, ast.Attribute, ast.Constant, ast.Call, ast.Assign, ast.keyword, ast.arg, ast.Expr,
              ast.Return)


class _End:
    """The type of ``index_tree``'s stack sentinel (no node of a tree has it)."""

    __slots__ = ()


def _make_index_tree() -> Any:
    """Generate ``index_tree``'s loop, with one branch per type of ``_HOT_TYPES`` (code from the
    type's child fields, as ``_indexer``'s) and ``_indexer``'s indexers for the others."""
    hot = [t for t in _HOT_TYPES if _spec(t) is not None]
    lines = ["def index_tree(tree):",
             "    parents = {}",
             "    nodes = {}  # by type (the other types as first met, then the hot ones)",
             "    seen = {}  # per other node type met in this tree: its indexer and its list's append",
             "    seen_get = seen.get",
             "    stack = [END]  # popped last: the end of the walk, without an IndexError from pop",
             "    pop, push, extend = stack.pop, stack.append, stack.extend"]
    for i in range(len(hot)):
        lines += [f"    T{i} = HOT[{i}]", f"    L{i} = []", f"    A{i} = L{i}.append"]
    lines += ["    node = tree", "    while True:", "        t = type(node)"]
    for i, t in enumerate(hot):
        lines += [f"        {'if' if i == 0 else 'elif'} t is T{i}:",
                  f"            A{i}(node)"]
        lines += _child_code(t, "            ", "node = v; continue")
    # ``seen_get``, not a subscript in a ``try``: each type's first node in a tree misses, and a
    # KeyError raised and caught costs ten lookups (a dozen such types per file).  The walk ends at
    # the sentinel under the stack, found on that same miss path: an ``IndexError`` from ``pop`` on
    # the empty stack cost more than indexing a small tree (Python 3.11 works out the raising
    # line of this long function for the traceback)
    lines += ["        else:",
              "            got = seen_get(t)",
              "            if got is None:",
              "                if t is End:",
              "                    break",
              "                try:",
              "                    index = MAKERS[t]",
              "                except KeyError:",
              "                    index = make(t)",
              "                append = nodes.setdefault(t, []).append",
              "                seen[t] = (index, append)",
              "            else:",
              "                index, append = got",
              "            append(node)",
              "            if index is not None:",
              "                node = index(node, parents, push, extend)",
              "                if node is not None:",
              "                    continue",
              "        node = pop()",
              ]
    lines += [f"    if L{i}:\n        nodes[T{i}] = L{i}" for i in range(len(hot))]
    lines += ["    return parents, nodes"]
    namespace: dict[str, Any] = {"HOT": tuple(hot), "MAKERS": _INDEXERS, "make": _indexer, "End": _End, "END": _End()}
    exec(compile("\n".join(lines), "<index_tree>", "exec"), namespace)
    return namespace["index_tree"]


index_tree = _make_index_tree()
index_tree.__doc__ = """One pass over the tree: the parent of every node, and every node by type
(``tree`` -> ``(parents, nodes)``: ``dict[ast.AST, ast.AST]``, ``dict[type, list[ast.AST]]``).

Hand-rolled rather than ``ast.walk``: this runs for every scanned file, and a walk that inspects
every field of every node costs half as much again as the parse.  The loop is generated once per
process (``_make_index_tree``): the most common node types are handled inline, the others by a
function per type (``_indexer``), so no node costs a generic look at its fields.  Operator and
context nodes are singletons in CPython's ``ast`` and are skipped (a parent map for them would be
wrong anyway).  Children are pushed in ``_fields`` order and popped last first: the order of the
lists in ``nodes`` is the one rules have always seen (the order of its keys means nothing: it is
read by type).
"""


def subtree(node: ast.AST) -> list[ast.AST]:
    """``node`` and every node under it in ``ast.walk`` order (breadth first), operator and context
    singletons left out: a list built by the generated per-type walkers, several times cheaper
    than ``ast.walk``'s generators."""
    out = [node]
    append, extend = out.append, out.extend
    table = _WALKERS
    # a list's iterator reads its length at each step, so it also yields what the walkers append
    # behind it: the queue of a breadth-first walk without an index kept by hand
    for n in out:
        t = type(n)
        try:
            walk = table[t]
        except KeyError:
            walk = _generated(t)
        if walk is not None:
            walk(n, append, extend)
    return out


def children(node: ast.AST) -> list[ast.AST]:
    """The direct children of ``node`` in ``ast.iter_child_nodes`` order, operator and context
    singletons left out."""
    t = type(node)
    spec = _CHILD_FIELDS.get(t, False)
    if spec is False:
        spec = _CHILD_FIELDS[t] = _child_fields(t)
    if spec is None:
        return [c for c in ast.iter_child_nodes(node) if not isinstance(c, _SKIP)]
    out: list[ast.AST] = []
    for name, many in spec:
        v = getattr(node, name, None)
        if v is None:
            continue
        if many:
            out.extend(c for c in v if c is not None)
        else:
            out.append(v)
    return out


def _index_fields_generic(node: ast.AST, parents: dict[ast.AST, ast.AST], push) -> None:  # type: ignore[no-untyped-def]
    AST = ast.AST
    for name in node._fields:
        v = getattr(node, name, None)
        if type(v) is list:
            for c in v:
                if isinstance(c, AST) and not isinstance(c, _SKIP):
                    parents[c] = node
                    push(c)
        elif isinstance(v, AST) and not isinstance(v, _SKIP):
            parents[v] = node
            push(v)


@quick_init
@dataclass(frozen=True)
class SourceProblem:
    """A source handed to a compiler that cannot be resolved statically (rule HS002)."""

    line: int
    column: int
    argument: str
    reason: str
    extension: str


@dataclass
class Extension:
    """One ``load_inline`` / ``load`` / ``cupy`` compilation in the host file."""

    name: str
    kind: str  # load_inline | load | cupy
    call: ast.Call
    # dotted names the returned module is stored under: "ext", "self.ext", "_load()"
    bound_to: set[str] = field(default_factory=set)
    functions: tuple[str, ...] | None = None
    unit_ids: list[str] = field(default_factory=list)
    flags: dict[str, list[str]] = field(default_factory=dict)
    in_try: bool = False

    @property
    def line(self) -> int:
        return self.call.lineno


# the fields of a statement (or except handler / match case) that hold statements, in ``_fields``
# order; a statement type not listed holds none
_STMT_FIELDS: dict[type, tuple[str, ...]] = {}
_STMT_LISTS = frozenset({"body", "orelse", "finalbody", "handlers", "cases"})


def _stmt_fields(t: type) -> tuple[str, ...]:
    got = _STMT_FIELDS[t] = tuple(f for f in getattr(t, "_fields", ()) if f in _STMT_LISTS)
    return got


def _statement_imports(tree: ast.AST) -> list[ast.AST]:
    """Every ``Import`` then every ``ImportFrom`` in the tree, each in the order ``index_tree``
    lists them.

    Imports are statements, and statements only ever sit in the statement lists of other
    statements (and of except handlers and match cases), so walking those lists alone finds all
    of them at a fraction of the cost of indexing every expression.  The walk pops its stack like
    ``index_tree`` does, so two imports on one line (``import a as x; import b as x``) come out in
    the same order, and ``ImportMap.of_nodes`` resolves the clash the same way.
    """
    plain: list[ast.AST] = []
    froms: list[ast.AST] = []
    stack: list[ast.AST] = [tree]
    pop, extend = stack.pop, stack.extend
    table = _STMT_FIELDS
    while stack:
        node = pop()
        t = type(node)
        if t is ast.Import:
            plain.append(node)
            continue
        if t is ast.ImportFrom:
            froms.append(node)
            continue
        spec = table.get(t)
        if spec is None:
            spec = _stmt_fields(t)
        for name in spec:
            v = getattr(node, name)
            if v and type(v) is list:  # a Lambda / IfExp ``body`` is one expression (never reached)
                extend(v)
    return plain + froms  # as ``nodes[Import] + nodes[ImportFrom]``


def statements(root: ast.AST) -> tuple[list[ast.AST], dict[ast.AST, ast.AST]]:
    """``root`` and every statement, except handler and match case under it, in ``ast.walk``
    order, with the parent of each.

    The nodes ``subtree(root)`` would give, expressions left out, in the same relative order
    (statements only sit in statement lists, so their ancestors are statements too): enough for a
    question about assignments or returns, at a fraction of the cost of a full walk.  The parent
    map holds every ancestor of a listed node up to ``root``, which is all ``HostModule.scope_of``
    needs when ``root`` is a top-level statement.
    """
    out = [root]
    parents: dict[ast.AST, ast.AST] = {}
    append = out.append
    table = _STMT_FIELDS
    for n in out:  # it grows behind the iterator (as in ``subtree``)
        t = type(n)
        spec = table.get(t)
        if spec is None:
            spec = _stmt_fields(t)
        for name in spec:
            v = getattr(n, name)
            if v and type(v) is list:
                for c in v:
                    parents[c] = n
                    append(c)
    return out, parents


@dataclass
class HostModule:
    """A parsed host file.

    ``parse`` makes the tree and the source (and the units, see there); the rest is computed on
    first use: the parent map and the nodes by type in one indexing pass, the import map, the
    module scope.  A candidate asks for all of them at once; a reference usually needs only its
    imports, module scope and a few functions' statements, and skips indexing every expression
    unless a rule asks for it.
    """

    path: str
    source: HostSource
    tree: ast.Module
    resolver: Resolver

    # ------------------------------------------------------------------ construction
    @staticmethod
    def parse(text: str, path: str = "<string>") -> HostModule:
        """Parse host code.  Raises ``SyntaxError`` (the caller turns it into a finding).

        The units are extracted here when the text could hold a compiler call: extraction then
        may raise (a ``load(sources=...)`` path with a NUL byte raises ``ValueError``), and the
        caller must see that at parse time, as it always has.  Otherwise extraction can find
        Triton kernels at most, which cannot fail, and it waits for the first access: a
        reference file (no compiler calls) is then never indexed unless a rule asks.
        """
        tree = ast.parse(text, filename=path, type_comments=False)
        host = HostSource.of(text)
        mod = HostModule(path=path, source=host, tree=tree, resolver=Resolver(host))
        # every loader name contains one of these; a non-ASCII text may spell one in letters that
        # identifier normalisation folds to ASCII
        if not text.isascii() or "load" in text or "Kernel" in text or "RawModule" in text:  # _LOADER_HINTS
            mod._extract()
        elif "@" not in text or ("triton" not in text and "tl" not in text):
            # no loader call, and no decorator at all (an ASCII text spells each with ``@``) or none
            # that ``_is_triton_decorator`` can take for Triton's (the name it resolves to starts with
            # ``triton``: an import or a root spelling ``triton``, or the conventional ``tl``):
            # extraction finds nothing, and a reference need not be indexed to learn that
            d = mod.__dict__
            d["units"], d["extensions"], d["triton_kernels"], d["problems"] = [], [], {}, []  # _EXTRACTED
        return mod

    def _index(self) -> None:
        parents, nodes = index_tree(self.tree)
        d = self.__dict__
        d["parents"] = parents
        # every node of the tree by type, from the one indexing pass (rules iterate these lists
        # instead of walking the tree again: a walk costs more than the parse's share of the budget)
        d["nodes"] = nodes

    @cached_property
    def parents(self) -> dict[ast.AST, ast.AST]:
        self._index()
        return self.__dict__["parents"]  # type: ignore[no-any-return]

    @cached_property
    def nodes(self) -> dict[type, list[ast.AST]]:
        self._index()
        return self.__dict__["nodes"]  # type: ignore[no-any-return]

    @cached_property
    def imports(self) -> ImportMap:
        nodes = self.__dict__.get("nodes")
        if nodes is not None:
            return ImportMap.of_nodes(nodes.get(ast.Import, []) + nodes.get(ast.ImportFrom, []))
        # Every import statement spells the keyword ``import`` (in ASCII: a keyword is matched on
        # its bytes) inside its own span, so the text holds at least one ``import`` per import
        # statement.  When the top-level imports alone account for every occurrence, no nested
        # one exists, and the walk of every statement list can be skipped (a reference file).
        body = self.tree.body[::-1]  # the walk pops the last statement first
        top = [n for n in body if type(n) is ast.Import]
        top += [n for n in body if type(n) is ast.ImportFrom]
        if len(top) == self.source.text.count("import"):
            return ImportMap.of_nodes(top)  # in the order ``_statement_imports`` gives them
        return ImportMap.of_nodes(_statement_imports(self.tree))

    @cached_property
    def module_scope(self) -> Scope:
        return build_scope(self.tree)

    # The units and what they came from: one extraction pass fills all four.  A reference module
    # is shared by scans in several threads (``context.ReferenceCache``): the pass runs under a
    # lock on a copy, and its results are published only when complete, so no thread sees a
    # half-filled list.  (The other lazy values may be computed twice by racing threads; either
    # result is the same.)
    def _extracted(self, name: str) -> Any:
        with _EXTRACT_LOCK:
            d = self.__dict__
            if name not in d:
                self.nodes  # index the shared module, not the copy  # noqa: B018
                # a shallow copy (what ``copy.copy`` makes of a dataclass, without its protocol)
                work = object.__new__(HostModule)
                work.__dict__.update(d)
                work._extract()
                done = work.__dict__
                for key in _EXTRACTED:
                    d.setdefault(key, done[key])
                for key in ("imports", "module_scope", "_scopes"):  # keep what the pass needed
                    if key in done:
                        d.setdefault(key, done[key])
            return d[name]

    @cached_property
    def units(self) -> list[Unit]:
        return self._extracted("units")  # type: ignore[no-any-return]

    @cached_property
    def extensions(self) -> list[Extension]:
        return self._extracted("extensions")  # type: ignore[no-any-return]

    @cached_property
    def triton_kernels(self) -> dict[str, ast.FunctionDef]:
        return self._extracted("triton_kernels")  # type: ignore[no-any-return]

    @cached_property
    def problems(self) -> list[SourceProblem]:
        return self._extracted("problems")  # type: ignore[no-any-return]

    def of_type(self, *types: type) -> list[ast.AST]:
        """All nodes of the given types, in no particular order."""
        if len(types) == 1:
            return self.nodes.get(types[0], [])
        out: list[ast.AST] = []
        for t in types:
            out.extend(self.nodes.get(t, []))
        return out

    # ------------------------------------------------------------------ navigation helpers
    @cached_property
    def _scopes(self) -> dict[ast.AST, Scope]:
        return {self.tree: self.module_scope}

    def scope_of(self, node: ast.AST, parents: dict[ast.AST, ast.AST] | None = None) -> Scope:
        """The innermost function/class scope containing ``node`` (built on demand).

        ``parents``: a partial parent map to use instead of the module's (``statements``' map of
        a top-level statement); it must hold every function or class ancestor of ``node``.
        """
        if parents is None:
            parents = self.parents
        chain: list[ast.AST] = []
        cur = parents.get(node)
        while cur is not None:
            if isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                chain.append(cur)
            cur = parents.get(cur)
        scope = self.module_scope
        klass: Scope | None = None
        for owner in reversed(chain):
            cached = self._scopes.get(owner)
            if cached is None:
                cached = build_scope(owner, scope, klass)
                self._scopes[owner] = cached
            if isinstance(owner, ast.ClassDef):
                klass = cached
            scope = cached
        return scope

    def enclosing(self, node: ast.AST, *types: type) -> ast.AST | None:
        cur = self.parents.get(node)
        while cur is not None:
            if isinstance(cur, types):
                return cur
            cur = self.parents.get(cur)
        return None

    def ancestors(self, node: ast.AST) -> list[ast.AST]:
        """The parent of ``node``, its parent, and so on up to the module, innermost first.

        A list, not a generator: most callers stop at the first ancestor of some kind, and a
        generator left suspended is closed by throwing ``GeneratorExit`` into it, whose traceback
        costs more than walking the few parents left to the module."""
        parents = self.parents
        out = []
        cur = parents.get(node)
        while cur is not None:
            out.append(cur)
            cur = parents.get(cur)
        return out

    def in_try_body(self, node: ast.AST) -> ast.Try | None:
        """The ``try`` whose body (not handler) contains ``node``, if any."""
        # ``ancestors`` and ``any`` written out: a generator left before its end is closed by a
        # raised GeneratorExit, which costs more than this whole walk
        parents = self.parents
        child = node
        anc = parents.get(node)
        while anc is not None:
            if isinstance(anc, ast.Try):
                for s in anc.body:
                    if child is s:
                        return anc
            if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                return None
            child = anc
            anc = parents.get(anc)
        return None

    def canonical(self, expr: ast.AST) -> str:
        """The import-resolved dotted name of ``expr`` (``F.relu`` -> ``torch.nn.functional.relu``).

        Memoised per node for every consumer at once (the data flow, the member scan and the rules
        each name the same callees): one shared memo rather than a private cache in each.
        """
        memo = self._canonical_memo
        got = memo.get(expr)
        if got is None:
            got = memo[expr] = self.imports.canonical(expr)
        return got

    @cached_property
    def _canonical_memo(self) -> dict[ast.AST, str]:
        return {}

    def position(self, node: ast.AST) -> tuple[int, int]:
        """1-based line, 1-based character column of a node."""
        line = getattr(node, "lineno", 1)
        return line, self.source.char_col(line, getattr(node, "col_offset", 0)) + 1

    def classes(self) -> dict[str, ast.ClassDef]:
        return {n.name: n for n in self.tree.body if isinstance(n, ast.ClassDef)}

    # ------------------------------------------------------------------ extraction
    def _extract(self) -> None:
        d = self.__dict__
        d["units"], d["extensions"], d["triton_kernels"], d["problems"] = [], [], {}, []  # _EXTRACTED
        loaders = []
        for node in self.of_type(ast.Call):
            func = node.func
            t = type(func)
            last = func.attr if t is ast.Attribute else func.id if t is ast.Name else ""
            if last in _LOADER_NAMES:
                loaders.append(node)
        # a stable sort of the loader calls alone keeps the order a sort of every call would give them
        loaders.sort(key=lambda c: (c.lineno, c.col_offset))
        for node in loaders:
            name = self.canonical(node.func)
            if name == LOAD_INLINE or name.endswith("cpp_extension.load_inline"):
                self._extension(node, "load_inline")
            elif name == LOAD or name.endswith("cpp_extension.load"):
                self._extension(node, "load")
            elif name in CUPY_KERNELS:
                self._extension(node, "cupy")
        decorated = [f for f in self.of_type(ast.FunctionDef, ast.AsyncFunctionDef) if f.decorator_list]
        decorated.sort(key=lambda f: f.lineno)
        for fn in decorated:
            if any(self._is_triton_decorator(d) for d in fn.decorator_list):
                self._triton_unit(fn)
        for e in self.extensions:  # a loop, not an early-exited any(generator): see ``ancestors``
            if self.enclosing(e.call, ast.FunctionDef, ast.AsyncFunctionDef):
                self._bind_returned_extensions(self._functions_returning_loads())
                break

    def _is_triton_decorator(self, dec: ast.AST) -> bool:
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = self.canonical(target)
        return name in TRITON_DECORATORS or name.endswith(".jit") and name.startswith("triton")

    def _triton_unit(self, fn: ast.FunctionDef) -> None:
        first = min([fn.lineno] + [d.lineno for d in fn.decorator_list])
        end = fn.end_lineno or fn.lineno
        text = "".join(self.source.lines[first - 1 : end])
        unit = Unit(
            id=f"triton:{fn.name}",
            language="triton",
            mapped=MappedText.verbatim(text, first, 0),
            role="triton.jit",
            attrs={"function": fn.name, "line": fn.lineno},
        )
        self.units.append(unit)
        self.triton_kernels[fn.name] = fn

    def _arg(self, call: ast.Call, name: str, positional: tuple[str, ...]) -> ast.AST | None:
        for kw in call.keywords:
            if kw.arg == name:
                return kw.value
        if name in positional:
            idx = positional.index(name)
            if idx < len(call.args) and not isinstance(call.args[idx], ast.Starred):
                return call.args[idx]
        return None

    def _extension(self, call: ast.Call, kind: str) -> None:
        scope = self.scope_of(call)
        resolver = self.resolver
        positional = _LOAD_INLINE_POS if kind == "load_inline" else _LOAD_POS
        name_node = self._arg(call, "name", positional) if kind != "cupy" else None
        ext_name = f"ext@{call.lineno}"
        if name_node is not None:
            v = resolver.try_value(name_node, scope, call.lineno)
            if isinstance(v, MappedText):
                ext_name = v.text
        elif kind == "cupy" and len(call.args) >= 2:
            v = resolver.try_value(call.args[1], scope, call.lineno)
            if isinstance(v, MappedText):
                ext_name = v.text
        ext = Extension(name=ext_name, kind=kind, call=call, in_try=self.in_try_body(call) is not None)

        fn_node = self._arg(call, "functions", ())
        if fn_node is not None:
            v = resolver.try_value(fn_node, scope, call.lineno)
            if isinstance(v, MappedText):
                ext.functions = (v.text,)
            elif isinstance(v, list) and all(isinstance(x, MappedText) for x in v):
                ext.functions = tuple(x.text for x in v)
            elif isinstance(v, list):
                ext.functions = tuple(x.text for x in v if isinstance(x, MappedText))
        for flag in ("extra_cflags", "extra_cuda_cflags", "extra_ldflags"):
            node = self._arg(call, flag, ())
            if node is not None:
                v = resolver.try_value(node, scope, call.lineno)
                if isinstance(v, list):
                    ext.flags[flag] = [x.text if isinstance(x, MappedText) else str(x) for x in v]
                elif isinstance(v, MappedText):
                    ext.flags[flag] = [v.text]
                else:
                    ext.flags[flag] = ["<unresolved>"]

        if kind == "load_inline":
            for role, language in (("cpp_sources", "cpp"), ("cuda_sources", "cuda")):
                node = self._arg(call, role, positional)
                if node is not None and not (isinstance(node, ast.Constant) and node.value is None):
                    self._source_unit(ext, node, role, language, scope, call)
        elif kind == "load":
            node = self._arg(call, "sources", positional)
            if node is not None:
                self._file_units(ext, node, scope, call)
        else:  # cupy: the code is the first argument
            node = call.args[0] if call.args else self._arg(call, "code", ())
            if node is not None:
                self._source_unit(ext, node, "code", "cuda", scope, call)
        self._bind_extension(ext, call)
        self.extensions.append(ext)

    def _source_unit(self, ext: Extension, node: ast.AST, role: str, language: str, scope: Scope,
                     call: ast.Call) -> None:
        try:
            value = self.resolver.value(node, scope, call.lineno)
        except (Unresolved, RecursionError) as exc:
            line, col = self.position(node)
            self.problems.append(SourceProblem(line, col, role, str(exc) or "not constant", ext.name))
            return
        pieces: list[MappedText]
        if isinstance(value, MappedText):
            pieces = [value]
        elif isinstance(value, list) and all(isinstance(v, MappedText) for v in value):
            pieces = value
        else:
            line, col = self.position(node)
            self.problems.append(SourceProblem(line, col, role, "not a string or list of strings", ext.name))
            return
        if not pieces or not any([p.text.strip() for p in pieces]):  # a list: see ``in_try_body``
            return
        label = node.id if isinstance(node, ast.Name) else dotted_name(node) or role
        unit_id = f"{ext.name}:{label}"
        if any(u.id == unit_id for u in self.units):
            unit_id = f"{unit_id}@{call.lineno}"
        mapped = MappedText.join(pieces, "\n")
        self.units.append(Unit(
            id=unit_id, language=language, mapped=mapped, role=role, extension=ext.name,
            attrs={"functions": ext.functions, "call_line": call.lineno, "flags": dict(ext.flags)},
        ))
        ext.unit_ids.append(unit_id)

    def _file_units(self, ext: Extension, node: ast.AST, scope: Scope, call: ast.Call) -> None:
        value = self.resolver.try_value(node, scope, call.lineno)
        files = [value] if isinstance(value, MappedText) else value if isinstance(value, list) else None
        if files is None or not all(isinstance(f, MappedText) for f in files):
            line, col = self.position(node)
            self.problems.append(SourceProblem(line, col, "sources", "file list not constant", ext.name))
            return
        # Only files beside the candidate are read: a path the candidate names outside its own
        # folder (an absolute /tmp path, ../..) says nothing reliable about the submission, would
        # make the static verdict depend on the machine it runs on, and must not let untrusted code
        # steer what the analyser reads.  A JSONL record has no folder of its own.
        is_file = bool(self.path) and not self.path.startswith("<") and not self.path.endswith((".jsonl", ".ndjson"))
        base = Path(self.path).resolve().parent if is_file else None
        for f in files:
            line, col = self.position(node)
            if base is None:
                self.problems.append(SourceProblem(line, col, "sources", f"{f.text} is not part of the submission", ext.name))
                continue
            p = (base / f.text).resolve()
            if base not in p.parents:
                self.problems.append(SourceProblem(line, col, "sources", f"{f.text} lies outside the candidate's folder", ext.name))
                continue
            try:
                if p.stat().st_size > 2_000_000:
                    raise OSError("too large")
                text = p.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                self.problems.append(SourceProblem(line, col, "sources", f"cannot read {f.text}", ext.name))
                continue
            language = "cpp" if p.suffix in (".cpp", ".cc", ".cxx", ".c") else "cuda"
            unit_id = f"{ext.name}:{p.name}"
            self.units.append(Unit(
                id=unit_id, language=language, mapped=MappedText.verbatim(text, 1, 0), role="file",
                extension=ext.name, attrs={"file": str(p), "functions": ext.functions, "call_line": call.lineno},
            ))
            ext.unit_ids.append(unit_id)

    # ------------------------------------------------------------------ where the module goes
    def _bind_extension(self, ext: Extension, call: ast.Call) -> None:
        parent = self.parents.get(call)
        if isinstance(parent, (ast.Assign, ast.AnnAssign)):
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            for t in targets:
                name = dotted_name(t)
                if name:
                    ext.bound_to.add(name)
        elif isinstance(parent, ast.Return):
            fn = self.enclosing(call, ast.FunctionDef, ast.AsyncFunctionDef)
            if fn is not None:
                ext.bound_to.add(f"{fn.name}()")
        elif isinstance(parent, ast.NamedExpr):
            ext.bound_to.add(parent.target.id)

    def _functions_returning_loads(self) -> dict[str, ast.AST]:
        """Functions whose return value is a local bound to a load call (``m = load_inline(); return m``)."""
        found: dict[str, ast.AST] = {}
        # only a function that contains such an assignment (nested functions included) can
        # return one: walk those alone
        holders: set[ast.AST] = set()
        for node in self.of_type(ast.Assign):
            if isinstance(node.value, ast.Call):
                func = node.value.func
                # the canonical name of ``a.b.c`` ends in ``c``: only these can match the test below
                if type(func) is ast.Attribute and not (func.attr.endswith("load_inline") or func.attr in _LOAD_LASTS):
                    continue
                name = self.canonical(func)
                if name.endswith(("load_inline", "cpp_extension.load")) or name in CUPY_KERNELS:
                    holders.update(a for a in self.ancestors(node)
                                   if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)))
        if not holders:
            return found
        for fn in self.of_type(ast.FunctionDef, ast.AsyncFunctionDef):
            if fn not in holders:
                continue
            locals_from_load: set[str] = set()
            assign_t, return_t, call_t, name_t = ast.Assign, ast.Return, ast.Call, ast.Name
            for node in subtree(fn):
                t = type(node)  # exact types (a parsed tree holds no subclasses): the walk's every node
                if t is assign_t:
                    if type(node.value) is call_t:  # type: ignore[attr-defined]
                        name = self.canonical(node.value.func)  # type: ignore[attr-defined]
                        if name.endswith(("load_inline", "cpp_extension.load")) or name in CUPY_KERNELS:
                            locals_from_load.update(tg.id for tg in node.targets if isinstance(tg, ast.Name))  # type: ignore[attr-defined]
                elif t is return_t and type(node.value) is name_t and node.value.id in locals_from_load:  # type: ignore[attr-defined]
                    found[fn.name] = fn
        return found

    def _bind_returned_extensions(self, returners: dict[str, ast.AST]) -> None:
        """Follow ``m = _build()`` where ``_build`` returns the loaded module."""
        if not self.extensions:
            return
        by_func: dict[str, list[Extension]] = {}
        for ext in self.extensions:
            fn = self.enclosing(ext.call, ast.FunctionDef, ast.AsyncFunctionDef)
            if fn is not None and (f"{fn.name}()" in ext.bound_to or fn.name in returners):
                ext.bound_to.add(f"{fn.name}()")
                by_func.setdefault(fn.name, []).append(ext)
        if not by_func:
            return
        for node in self.of_type(ast.Assign, ast.AnnAssign):
            if isinstance(node.value, ast.Call):
                callee = dotted_name(node.value.func).split(".")[-1]
                if callee in by_func:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for ext in by_func[callee]:
                        for t in targets:
                            name = dotted_name(t)
                            if name:
                                ext.bound_to.add(name)

    # ------------------------------------------------------------------ queries used by rules
    def extension_for_call(self, call: ast.Call) -> tuple[Extension, str] | None:
        """If ``call`` invokes a function exported by a compiled extension, which one.

        ``ext.fn(...)``, ``self.ext.fn(...)``, ``_build().fn(...)``; as a fallback, any
        ``<obj>.<name>(...)`` whose name is exported by exactly one extension.
        """
        func = call.func
        if not isinstance(func, ast.Attribute):
            return None
        owner = dotted_name(func.value)
        if not owner and isinstance(func.value, ast.Call):
            owner = dotted_name(func.value.func) + "()"
        for ext in self.extensions:
            if owner and owner in ext.bound_to:
                return ext, func.attr
        matches = [e for e in self.extensions if e.functions and func.attr in e.functions]
        if len(matches) == 1 and not owner.startswith(("torch", "F", "nn")):
            return matches[0], func.attr
        return None
