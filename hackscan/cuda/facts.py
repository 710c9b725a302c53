"""Facts about the CUDA / C++ units of a submission, built once per submission (``ctx.cuda``).

One tree-sitter parse and one walk per unit collect every function (kernel, device, host) with its
parameters and the nodes of its body by type, the launches, the calls, file-scope variables and
macros, and the exported entry points.  The analyses rules share (what a kernel stores to, where a
launch argument comes from, which host values feed a branch) live in ``flow.py`` and read these
facts; they run only when a rule asks for them.

Units that share ``unit.extension`` belong to one extension: the exported declarations are
usually in the ``cpp_sources`` unit and the definitions in the ``cuda_sources`` unit, so functions
are looked up per extension, never per unit.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import tree_sitter as ts

from ..context import Pos
from ..python.lazy import cached_property
from ..python.records import quick_init
from ..units import Unit
from . import names
from .consts import fold, fold_text, never_folds
from .parser import (
    END_BYTE,
    START_BYTE,
    call_args,
    callee_name,
    compact,
    declarator_name,
    declarator_parts,
    first_error,
    identifiers,
    kernel_config,
    language,
    method_receiver,
    parse,
    text,
)

if TYPE_CHECKING:
    import networkx as nx

# top-level nodes that only wrap other top-level nodes
_CONTAINERS = frozenset({"translation_unit", "linkage_specification", "declaration_list", "namespace_definition",
                         "preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "preproc_elifdef",
                         "template_declaration", "export_declaration"})
_MODULE_MACROS = frozenset({"PYBIND11_MODULE", "TORCH_LIBRARY", "TORCH_LIBRARY_IMPL", "TORCH_LIBRARY_FRAGMENT"})
_TENSOR_TYPE = re.compile(r"^(const)?(torch::|at::)?Tensor&?$")
_ACCESSOR_TYPE = re.compile(r"(Packed)?TensorAccessor|GenericPackedTensorAccessor")


def pos_of(unit: Unit, node: ts.Node) -> Pos:
    line, col = unit.byte_position(node.start_byte)
    return Pos(line, col + 1, unit.id, unit.attrs.get("file"))  # type: ignore[arg-type]


def interpolated(unit: Unit, byte_offset: int) -> bool:
    """Does this offset of the unit come from an interpolated value (an f-string field, a
    ``.format`` argument) rather than from literal source text?"""
    mapped = unit.mapped
    segs = mapped.segments
    if len(segs) <= 1:
        return bool(segs) and not segs[0].verbatim
    return not segs[mapped._seg_index(mapped.char_offset(byte_offset))].verbatim


@quick_init
@dataclass(frozen=True)
class Param:
    name: str
    index: int
    type: str  # the declared type, whitespace removed, without the name
    pointer: bool  # a raw pointer or a tensor accessor: something a kernel can store through
    const: bool
    tensor: bool  # torch::Tensor / at::Tensor, by value or reference


@dataclass(eq=False)
class Function:
    """One function definition (``__global__`` kernel, ``__device__`` function or host function)."""

    name: str
    kind: str  # kernel | device | host
    ext: str
    unit: Unit
    node: ts.Node
    body: ts.Node | None
    params: tuple[Param, ...]
    static: bool = False
    template: bool = False
    # named nodes of the body by type, from the one walk (lambdas inside count as this function's)
    nodes: dict[str, list[ts.Node]] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    # local name -> the expressions assigned to it (initialiser and plain ``=``), in source order
    assigned: dict[str, list[ts.Node]] = field(default_factory=dict)
    local_types: dict[str, str] = field(default_factory=dict)
    # struct locals filled member by member: ``p.y = y.data_ptr<float>()`` -> {"p": [that value]}
    member_assigned: dict[str, list[ts.Node]] = field(default_factory=dict)
    static_locals: list[Variable] = field(default_factory=list)
    # a PYBIND11 lambda export: the Python name it is bound to
    lambda_export: str | None = None
    # host functions: the ``a op b`` nodes of the body with an arithmetic operator (``ARITH_OPS``),
    # captured by the body's query (HS204 reads them: ATen arithmetic through operator overloads);
    # in no particular order.  Empty for kernels and device functions.
    arith: list[ts.Node] = field(default_factory=list, repr=False)

    @property
    def key(self) -> str:
        return f"{self.ext}:{self.name}"

    @cached_property
    def pos(self) -> Pos:
        decl = self.node.child_by_field_name("declarator")
        return pos_of(self.unit, decl if decl is not None else self.node)

    @cached_property
    def assigned_texts(self) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
        """``assigned`` as text: each value's source and the identifiers it reads (fixpoints over the
        locals read these every round)."""
        return {name: [_value_texts(v) for v in values] for name, values in self.assigned.items()}

    def param(self, name: str) -> Param | None:
        for p in self.params:
            if p.name == name:
                return p
        return None

    def of_type(self, *types: str) -> list[ts.Node]:
        if len(types) == 1:
            return self.nodes.get(types[0], [])
        out: list[ts.Node] = []
        for t in types:
            out.extend(self.nodes.get(t, []))
        return out

    def __repr__(self) -> str:  # keep test failure output short
        return f"Function({self.kind} {self.key})"


def _value_texts(value: ts.Node) -> tuple[str, tuple[str, ...]]:
    """A value's source and the identifiers it reads, in ``identifiers`` order."""
    vtext = text(value)
    t = value.type
    if t == "identifier":
        return vtext, (vtext,)
    if not value.named_child_count:
        return vtext, ()
    if vtext.isascii():  # byte offsets are character offsets: slice instead of decoding each name
        base = value.start_byte
        return vtext, tuple(vtext[i.start_byte - base:i.end_byte - base] for i in identifiers(value))
    return vtext, tuple(text(i) for i in identifiers(value))


@dataclass(eq=False)
class Call:
    """A call in a function body (launches are ``Launch``; method calls have names like ``.mm``)."""

    name: str
    node: ts.Node
    function: Function
    receiver: ts.Node | None = None
    # the macro the name was expanded from (``RT(StreamCreate)`` -> ``cudaStreamCreate``)
    macro: str | None = None
    # ``x.mm(y)`` (names like ``.mm``): a plain attribute, not a property, because the rules and
    # the call graph ask it of every call, often several times.  Set once from the name; the only
    # later rename (macro expansion) applies to non-method calls and yields a plain name.
    is_method: bool = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.is_method = self.name.startswith(".")

    @property
    def unit(self) -> Unit:
        return self.function.unit

    @cached_property
    def pos(self) -> Pos:
        return pos_of(self.function.unit, self.node)

    @cached_property
    def base(self) -> str:
        """The last name segment: ``at::cuda::getCurrentCUDAStream`` -> ``getCurrentCUDAStream``."""
        return self.name.rsplit("::", 1)[-1].lstrip(".")

    @property
    def namespace(self) -> str:
        return self.name.rsplit("::", 1)[0] if "::" in self.name else ""

    @cached_property
    def args(self) -> list[ts.Node]:
        return call_args(self.node)

    def __repr__(self) -> str:
        return f"Call({self.name} @{self.pos.line})"


@dataclass(eq=False)
class Launch:
    """A kernel launch: ``k<<<grid, block, smem, stream>>>(args)`` or ``cudaLaunchKernel(k, ...)``."""

    kernel: str
    node: ts.Node
    function: Function  # the host function the launch sits in
    grid: ts.Node | None
    block: ts.Node | None
    smem: ts.Node | None
    stream: ts.Node | None
    args: list[ts.Node]
    api: str = "<<<>>>"

    @cached_property
    def pos(self) -> Pos:
        return pos_of(self.function.unit, self.node)

    @property
    def ext(self) -> str:
        return self.function.ext

    def __repr__(self) -> str:
        return f"Launch({self.kernel} @{self.pos.line})"


@dataclass(eq=False)
class Variable:
    """A file-scope variable or a ``static`` local."""

    name: str
    type: str
    ext: str
    unit: Unit
    node: ts.Node  # the declaration
    function: Function | None = None  # None at file scope
    static: bool = False
    const: bool = False
    device: bool = False  # __device__ / __constant__ / __shared__: lives on the GPU
    init: ts.Node | None = None

    @cached_property
    def pos(self) -> Pos:
        return pos_of(self.unit, self.node)

    @property
    def tensor_like(self) -> bool:
        return bool(re.search(r"(^|::|<|,)Tensor\b", self.type))

    @property
    def container(self) -> bool:
        return bool(re.search(r"(map|unordered_map|set|vector|list|deque|array)<", self.type))

    @property
    def pointer(self) -> bool:
        return "*" in self.type or "uintptr_t" in self.type or "intptr_t" in self.type


@quick_init
@dataclass(frozen=True)
class Constant:
    """A named compile-time number: ``#define N 1024``, ``constexpr int N = 1024``, ``const int N``."""

    name: str
    value: int | float
    kind: str  # define | constexpr | const
    ext: str
    unit_id: str
    pos: Pos
    function: str | None = None  # the function a local constant sits in
    offset: int = -1  # byte offset of the value in its unit

    def interpolated(self, unit: Unit) -> bool:
        """Was the value filled in from Python (``#define N {self.n}`` in an f-string)?"""
        return self.offset >= 0 and interpolated(unit, self.offset)


@dataclass(frozen=True)
class Macro:
    name: str
    params: tuple[str, ...] | None  # None for an object-like macro
    body: str
    ext: str
    unit_id: str
    pos: Pos

    @property
    def pastes(self) -> bool:
        return "##" in self.body


@quick_init
@dataclass(frozen=True)
class Export:
    """A function Python can call: a ``functions=`` entry, a PYBIND11 ``m.def`` or a cupy kernel."""

    name: str  # the Python-visible name
    target: str  # the C++ function it binds
    ext: str
    via: str  # functions | pybind | cupy | file
    pos: Pos | None = None

    @property
    def node_name(self) -> str:
        return f"export:{self.ext}.{self.name}"


@dataclass(frozen=True)
class ParseError:
    unit_id: str
    pos: Pos
    snippet: str


@dataclass(eq=False)
class ExtensionFacts:
    """The units of one extension, looked up together."""

    name: str
    units: list[Unit] = field(default_factory=list)
    functions: dict[str, list[Function]] = field(default_factory=dict)
    exports: list[Export] = field(default_factory=list)
    constants: dict[str, Constant] = field(default_factory=dict)
    macros: dict[str, Macro] = field(default_factory=dict)
    globals: list[Variable] = field(default_factory=list)
    flags: dict[str, list[str]] = field(default_factory=dict)
    # names declared (not defined) with ``__global__`` etc., for launches of kernels defined elsewhere
    declared_kernels: set[str] = field(default_factory=set)
    # constants whose value is folded once every unit of the extension is read
    pending_constants: list[tuple] = field(default_factory=list, repr=False)
    # function-local constants, folded per function when first asked for (most never are)
    local_pending: dict[str, list[tuple]] = field(default_factory=dict, repr=False)
    _locals_done: dict[str, dict[str, Constant]] = field(default_factory=dict, repr=False)
    # ``env_for`` per function name
    _envs: dict[str, dict[str, int | float]] = field(default_factory=dict, repr=False)

    def lookup(self, name: str, *kinds: str) -> list[Function]:
        fns = self.functions.get(name.rsplit("::", 1)[-1], [])
        return [f for f in fns if not kinds or f.kind in kinds]

    def kernel(self, name: str) -> Function | None:
        found = self.lookup(name, "kernel")
        return found[0] if found else None

    @property
    def all_functions(self) -> Iterator[Function]:
        for fns in self.functions.values():
            yield from fns

    @cached_property
    def const_env(self) -> dict[str, int | float]:
        return {name: c.value for name, c in self.constants.items()}

    def locals_of(self, fn: Function | str) -> dict[str, Constant]:
        """Constants declared inside one function (``const int BM = 64;``), by name."""
        name = fn.name if isinstance(fn, Function) else fn
        done = self._locals_done.get(name)
        if done is None:
            pending = self.local_pending.pop(name, None)
            # no local constants (most functions): nothing to fold, and no copy of the file's table
            done = self._locals_done[name] = (_fold_pending(self, pending, {}, dict(self.const_env)) if pending
                                              else {})
        return done

    @property
    def local_constants(self) -> dict[str, dict[str, Constant]]:
        """Function-local constants of every function, by function name then constant name."""
        for name in list(self.local_pending):
            self.locals_of(name)
        return {k: v for k, v in self._locals_done.items() if v}

    def env_for(self, fn: Function | str | None) -> dict[str, int | float]:
        """Named constants visible in a function: file scope, then the function's own.

        A table shared by every caller (merged once per function: ``CudaFlow.fold`` asks it for every
        expression it folds); read it, do not change it."""
        if fn is None:
            return self.const_env
        name = fn.name if isinstance(fn, Function) else fn
        got = self._envs.get(name)
        if got is None:
            local = self.locals_of(name)
            got = self._envs[name] = ({**self.const_env, **{k: c.value for k, c in local.items()}} if local
                                      else self.const_env)
        return got


class CudaFacts:
    """Everything the C++ rules read about one submission's CUDA / C++ units."""

    def __init__(self, units: list[Unit]):
        self.units = units
        self.extensions: dict[str, ExtensionFacts] = {}
        self.functions: list[Function] = []
        self.parse_errors: list[ParseError] = []
        self.trees: dict[str, ts.Tree] = {}
        self._callees: dict[int, list[Function]] = {}
        # ``branches.value_reads`` per (function, depth): several rules ask it of the same functions
        self._value_reads: dict[tuple[int, int], list] = {}

    # --------------------------------------------------------------- lookups
    def ext(self, name: str) -> ExtensionFacts:
        return self.extensions[name]

    @property
    def kernels(self) -> list[Function]:
        return [f for f in self.functions if f.kind == "kernel"]

    @property
    def host_functions(self) -> list[Function]:
        return [f for f in self.functions if f.kind == "host"]

    @property
    def launches(self) -> list[Launch]:
        return [lc for f in self.functions for lc in f.launches]

    @property
    def calls(self) -> list[Call]:
        return [c for f in self.functions for c in f.calls]

    @property
    def exports(self) -> list[Export]:
        return [e for x in self.extensions.values() for e in x.exports]

    @property
    def globals(self) -> list[Variable]:
        return [g for x in self.extensions.values() for g in x.globals]

    @property
    def static_locals(self) -> list[Variable]:
        return [v for f in self.functions for v in f.static_locals]

    @property
    def constants(self) -> list[Constant]:
        """File-scope and function-local named constants of every extension."""
        out = [c for x in self.extensions.values() for c in x.constants.values()]
        out += [c for x in self.extensions.values() for t in x.local_constants.values() for c in t.values()]
        return out

    @property
    def macros(self) -> list[Macro]:
        return [m for x in self.extensions.values() for m in x.macros.values()]

    def unit(self, unit_id: str) -> Unit | None:
        for u in self.units:
            if u.id == unit_id:
                return u
        return None

    def kernel_for(self, launch: Launch) -> Function | None:
        return self.extensions[launch.ext].kernel(launch.kernel)

    def export_targets(self, ext: ExtensionFacts) -> list[Function]:
        out: list[Function] = []
        for e in ext.exports:
            out.extend(ext.lookup(e.target, "host", "kernel"))
        return out

    def exported_functions(self) -> list[tuple[Export, Function]]:
        """(export, function it binds) pairs.  Several rules ask; the list is worked out once the
        facts are built and shared by every caller: read it, do not change it."""
        got = self.__dict__.get("_exported")
        if got is None:
            got = self._exported = self._find_exported_functions()
        return got

    def _find_exported_functions(self) -> list[tuple[Export, Function]]:
        out = []
        for x in self.extensions.values():
            for e in x.exports:
                for fn in x.lookup(e.target, "host", "kernel"):
                    out.append((e, fn))
        return out

    def callees(self, fn: Function) -> list[Function]:
        """Functions of the same extension that ``fn`` calls or launches (by name); the list is
        shared by every caller (the call graph is fixed once the facts are built)."""
        got = self._callees.get(id(fn))
        if got is None:
            got = self._callees[id(fn)] = self._find_callees(fn)
        return got

    def _find_callees(self, fn: Function) -> list[Function]:
        x = self.extensions[fn.ext]
        out: list[Function] = []
        seen: set[int] = set()
        for c in fn.calls:
            if c.is_method:
                continue
            for g in x.lookup(c.name):
                if id(g) not in seen and g is not fn:
                    seen.add(id(g))
                    out.append(g)
        for lc in fn.launches:
            k = x.kernel(lc.kernel)
            if k is not None and id(k) not in seen:
                seen.add(id(k))
                out.append(k)
        return out

    @cached_property
    def reachable(self) -> set[Function]:
        """Functions reachable from an exported entry point.

        An extension whose entry points are unknown (a ``.cu`` file with neither ``functions=`` nor a
        PYBIND11 module) counts every host function as an entry point.
        """
        roots: list[Function] = []
        for x in self.extensions.values():
            targets = self.export_targets(x)
            if targets:
                roots.extend(targets)
            else:
                roots.extend(f for f in x.all_functions if f.kind in ("host", "kernel"))
        seen: set[Function] = set()
        stack = list(roots)
        while stack:
            f = stack.pop()
            if f in seen:
                continue
            seen.add(f)
            stack.extend(self.callees(f))
        return seen

    def callers(self, fn: Function) -> list[tuple[Function, Call]]:
        """Host call sites of ``fn`` within its extension."""
        out = []
        for g in self.extensions[fn.ext].all_functions:
            for c in g.calls:
                if not c.is_method and c.base == fn.name:
                    out.append((g, c))
        return out

    def is_exported(self, fn: Function) -> bool:
        return any(fn.name == e.target for e in self.extensions[fn.ext].exports)

    def exports_of(self, fn: Function) -> list[Export]:
        return [e for e in self.extensions[fn.ext].exports if e.target == fn.name]

    @cached_property
    def graph(self) -> nx.DiGraph:
        from .graph import cuda_graph

        return cuda_graph(self)

    @cached_property
    def flow(self):  # -> flow.CudaFlow (analyses over these facts); imported lazily so building facts does not pay for it
        from .flow import CudaFlow

        return CudaFlow(self)

    # --------------------------------------------------------------- end of scan
    def release(self) -> None:
        """Break the cycles these facts hold, so that reference counting frees them when the scan
        ends: the data flow (``flow``) points back at the facts, and each function's calls,
        launches and static locals point back at it.  Left alone, every CUDA fact of the scan
        (functions, calls, parameters, units) waits for the collector, which walks them all before
        it frees them.  The lists are replaced, not emptied: whatever else still holds one keeps
        what it holds."""
        self.__dict__.pop("flow", None)
        for fn in self.functions:
            fn.calls = []
            fn.launches = []
            fn.static_locals = []


# -------------------------------------------------------------------------------------------------
# building
# -------------------------------------------------------------------------------------------------

def build_cuda_facts(units: list[Unit]) -> CudaFacts:
    facts = CudaFacts(units)
    for unit in units:
        ext_name = unit.extension or unit.id
        x = facts.extensions.get(ext_name)
        if x is None:
            x = facts.extensions[ext_name] = ExtensionFacts(ext_name)
        x.units.append(unit)
        flags = unit.attrs.get("flags")
        if isinstance(flags, dict):
            for k, v in flags.items():
                x.flags.setdefault(k, list(v))
        _UnitBuilder(facts, x, unit).build()
    for x in facts.extensions.values():
        _finish_constants(x)
        _exports_from_attrs(x)
        if x.macros:
            _expand_call_macros(x)
    return facts


_MACRO_CALL = re.compile(r"^(\w+)\((.*)\)$", re.S)
_SIMPLE_NAME = re.compile(r"^[A-Za-z_][\w:]*$")


def expand_macro_name(name: str, macros: dict[str, Macro]) -> str | None:
    """What a called name becomes after macro expansion, when that is a plain name.

    ``RT(StreamCreate)`` with ``#define RT(x) cuda##x`` -> ``cudaStreamCreate``;
    ``cudaDeviceSynchronize`` with ``#define cudaDeviceSynchronize() cudaSuccess`` -> ``cudaSuccess``.
    """
    m = _MACRO_CALL.match(name)
    if m is not None and m.group(1) in macros and macros[m.group(1)].params is not None:
        mac = macros[m.group(1)]
        args = [a.strip() for a in _split_args(m.group(2))]
        body = mac.body
        for p, a in zip(mac.params or (), args, strict=False):
            body = re.sub(rf"(?<![\w]){re.escape(p)}(?![\w])", a, body)
        body = re.sub(r"\s*##\s*", "", body).strip()
        return body if _SIMPLE_NAME.match(body) else None
    mac = macros.get(name)
    if mac is not None:
        body = mac.body.strip()
        return body if _SIMPLE_NAME.match(body) else None
    return None


def _split_args(raw: str) -> list[str]:
    out, depth, cur = [], 0, []
    for ch in raw:
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
            continue
        depth += ch in "([{"
        depth -= ch in ")]}"
        cur.append(ch)
    out.append("".join(cur))
    return out


def _expand_call_macros(x: ExtensionFacts) -> None:
    for fns in x.functions.values():
        for fn in fns:
            for c in fn.calls:
                if c.is_method:
                    continue
                expanded = expand_macro_name(c.name, x.macros)
                if expanded is not None and expanded != c.name:
                    c.macro = c.name
                    c.name = expanded
                    c.__dict__.pop("base", None)


def _finish_constants(x: ExtensionFacts) -> None:
    """Fold file-scope constants that refer to other constants (``#define N (B * D)``) now that
    all are known; function-local ones wait until someone asks (``ExtensionFacts.locals_of``)."""
    file_scope = []
    for entry in x.pending_constants:
        if entry[6]:
            x.local_pending.setdefault(entry[6], []).append(entry)
        else:
            file_scope.append(entry)
    env: dict[str, int | float] = {}
    _fold_pending(x, file_scope, x.constants, env)
    x.__dict__.pop("const_env", None)
    x.pending_constants = []


def _fold_pending(x: ExtensionFacts, pending: list[tuple], table: dict[str, Constant],
                  env: dict[str, int | float]) -> dict[str, Constant]:
    """Fold ``pending`` into ``table``, a few rounds so constants may use later ones."""
    env.update({k: c.value for k, c in table.items()})
    # A value that did not fold can fold in a later round only if a name set in ``env`` since
    # then is one its fold looks up, and every name ``fold`` looks up is part of the value's text
    # (an identifier, or the last part of a qualified one).  So a retried value whose text holds
    # none of the names set since its last try is not folded again: it would fail the same way.
    # (Macro bodies, folded by ``fold_text`` once comments are cut out, are always retried.)
    added: list[str] = []  # the names set in ``env``, in order
    tried: dict[int, int] = {}  # id(value node) -> len(added) at its last try
    for _ in range(4):
        progress = False
        rest = []
        for entry in pending:
            name, kind, value_node, body, unit, pos, fn = entry
            if name in table:
                continue
            if value_node is not None:
                mark = tried.get(id(value_node))
                if mark is not None:
                    # nothing set since the last try, or none of it named in the value: skip (the
                    # value's text is decoded only when there are new names to look for)
                    new = added[mark:]
                    src = text(value_node) if new else ""
                    if not any(n in src for n in new):
                        tried[id(value_node)] = len(added)
                        rest.append(entry)
                        continue
                v = fold(value_node, env)
                if v is None:
                    tried[id(value_node)] = len(added)
                    rest.append(entry)
                    continue
            else:
                v = fold_text(body, env)
                if v is None:
                    rest.append(entry)
                    continue
            offset = -1
            if not isinstance(pos, Pos):
                holder = value_node if value_node is not None else pos.child_by_field_name("value")
                offset = holder.start_byte if holder is not None else -1
                pos = pos_of(unit, pos)
            table[name] = Constant(name, v, kind, x.name, unit.id, pos, fn, offset)
            env[name] = v
            added.append(name)
            progress = True
        pending = rest
        if not progress:
            break
    return table


def _exports_from_attrs(x: ExtensionFacts) -> None:
    known = {e.name for e in x.exports}
    for unit in x.units:
        fns = unit.attrs.get("functions")
        if not fns:
            continue
        for name in fns:  # type: ignore[union-attr]
            if name in known:
                continue
            known.add(name)
            defs = x.lookup(str(name))
            x.exports.append(Export(str(name), str(name), x.name, "functions", defs[0].pos if defs else None))
    if not x.exports and any(u.role == "code" for u in x.units):
        # cupy RawKernel / RawModule: Python launches the __global__ kernels directly
        for fn in x.all_functions:
            if fn.kind == "kernel":
                x.exports.append(Export(fn.name, fn.name, x.name, "cupy", fn.pos))


class _UnitBuilder:
    def __init__(self, facts: CudaFacts, x: ExtensionFacts, unit: Unit):
        self.facts = facts
        self.x = x
        self.unit = unit
        self.pending = x.pending_constants

    def build(self) -> None:
        tree = parse(self.unit.text)
        self.facts.trees[self.unit.id] = tree
        root = tree.root_node
        err = first_error(root)
        if err is not None:
            snippet = text(err)[:60] or err.type
            self.facts.parse_errors.append(ParseError(self.unit.id, pos_of(self.unit, err), snippet))
        self._top(root, template=False)

    # ----------------------------------------------------------------- top level
    def _top(self, node: ts.Node, template: bool) -> None:
        for child in node.named_children:
            t = child.type
            if t == "function_definition":
                self._function(child, template)
            elif t in _CONTAINERS:
                self._top(child, template or t == "template_declaration")
            elif t == "declaration":
                self._global_declaration(child)
            elif t == "preproc_def":
                self._define(child)
            elif t == "preproc_function_def":
                self._macro_function(child)
            elif t == "ERROR":
                # a macro tree-sitter does not understand can swallow a function: look inside
                self._top(child, template)

    def _define(self, node: ts.Node) -> None:
        name_node = node.child_by_field_name("name")
        value = node.child_by_field_name("value")
        if name_node is None:
            return
        name = text(name_node)
        body = _strip_comments(text(value)) if value is not None else ""
        self.x.macros[name] = Macro(name, None, body, self.x.name, self.unit.id, pos_of(self.unit, node))
        if body:
            self.pending.append((name, "define", None, body, self.unit, node, None))

    def _macro_function(self, node: ts.Node) -> None:
        name_node = node.child_by_field_name("name")
        params = node.child_by_field_name("parameters")
        value = node.child_by_field_name("value")
        if name_node is None:
            return
        plist = tuple(text(p) for p in params.named_children) if params is not None else ()
        self.x.macros[text(name_node)] = Macro(text(name_node), plist, _strip_comments(text(value)) if value else "",
                                               self.x.name, self.unit.id, pos_of(self.unit, node))

    def _global_declaration(self, node: ts.Node) -> None:
        specs = _specifiers(node)
        type_node = node.child_by_field_name("type")
        type_text = compact(type_node)
        for decl in node.children_by_field_name("declarator"):
            if decl.type == "function_declarator" or _is_function_declarator(decl):
                name = declarator_name(decl)
                if name is not None and ("__global__" in specs):
                    self.x.declared_kernels.add(text(name))
                continue
            init = decl.child_by_field_name("value") if decl.type == "init_declarator" else None
            target = decl.child_by_field_name("declarator") if decl.type == "init_declarator" else decl
            name_node, suffix = declarator_parts(target)
            if name_node is None:
                continue
            name = text(name_node)
            vtype = type_text + suffix
            # ``static const void* last``: the pointee is const, the variable is not
            const = ("const" in specs or "constexpr" in specs) and "*" not in vtype
            var = Variable(name, vtype, self.x.name, self.unit, node, None, static="static" in specs, const=const,
                           device=bool(specs & {"__device__", "__constant__", "__shared__", "__managed__"}),
                           init=init)
            self.x.globals.append(var)
            if const and init is not None and init.type not in ("initializer_list", "argument_list"):
                self.pending.append((name, "constexpr" if "constexpr" in specs else "const", init, "",
                                     self.unit, node, None))

    # ----------------------------------------------------------------- functions
    def _function(self, node: ts.Node, template: bool, lambda_export: str | None = None) -> None:
        decl = node.child_by_field_name("declarator")
        fdecl = _function_declarator(decl)
        if fdecl is None:
            return
        name_node = fdecl.child_by_field_name("declarator")
        name = callee_name(name_node) if name_node is not None else ""
        if name in _MODULE_MACROS:
            self._module(node)
            return
        specs = _specifiers(node)
        kind = "kernel" if "__global__" in specs else "device" if "__device__" in specs else "host"
        params = _params(fdecl.child_by_field_name("parameters"))
        body = node.child_by_field_name("body")
        fn = Function(name=name.rsplit("::", 1)[-1], kind=kind, ext=self.x.name, unit=self.unit, node=node,
                      body=body, params=params, static="static" in specs, template=template,
                      lambda_export=lambda_export)
        if body is not None:
            self._walk_body(fn, body)
        self.x.functions.setdefault(fn.name, []).append(fn)
        self.facts.functions.append(fn)

    def _module(self, node: ts.Node) -> None:
        """PYBIND11_MODULE / TORCH_LIBRARY: ``m.def("name", &fn)`` binds a C++ function."""
        body = node.child_by_field_name("body")
        if body is None:
            return
        stack = [body]
        while stack:
            n = stack.pop()
            if n.type == "call_expression":
                func = n.child_by_field_name("function")
                if func is not None and func.type == "field_expression" and callee_name(func) in (".def", ".impl"):
                    self._module_def(n)
            stack.extend(n.named_children)

    def _module_def(self, call: ts.Node) -> None:
        args = call_args(call)
        if len(args) < 2 or args[0].type not in ("string_literal", "raw_string_literal"):
            return
        py_name = text(args[0]).strip('"').split("(")[0].split("::")[-1]
        target = args[1]
        while target.type in ("pointer_expression", "parenthesized_expression", "cast_expression"):
            inner = target.child_by_field_name("argument") or target.child_by_field_name("value")
            if inner is None and target.named_child_count:
                inner = target.named_children[-1]
            if inner is None:
                break
            target = inner
        pos = pos_of(self.unit, call)
        if target.type == "lambda_expression":
            self._lambda_function(target, py_name)
            self.x.exports.append(Export(py_name, f"<lambda {py_name}>", self.x.name, "pybind", pos))
            return
        if target.type == "call_expression":  # torch::wrap_pybind_function(fn), py::overload_cast<...>(&fn)
            inner_args = call_args(target)
            if inner_args:
                target = inner_args[0]
                while target.type == "pointer_expression":
                    target = target.child_by_field_name("argument") or target
                    if target.type != "pointer_expression":
                        break
        name = callee_name(target) if target.type in ("identifier", "qualified_identifier", "template_function") else ""
        if name:
            self.x.exports.append(Export(py_name, name.rsplit("::", 1)[-1], self.x.name, "pybind", pos))

    def _lambda_function(self, lam: ts.Node, py_name: str) -> None:
        decl = lam.child_by_field_name("declarator")
        params = _params(decl.child_by_field_name("parameters")) if decl is not None else ()
        body = lam.child_by_field_name("body")
        fn = Function(name=f"<lambda {py_name}>", kind="host", ext=self.x.name, unit=self.unit, node=lam, body=body,
                      params=params, lambda_export=py_name)
        if body is not None:
            self._walk_body(fn, body)
        self.x.functions.setdefault(fn.name, []).append(fn)
        self.facts.functions.append(fn)

    def _walk_body(self, fn: Function, body: ts.Node) -> None:
        """Collect the body's nodes of the types rules read, with one query over the body."""
        host = fn.kind == "host"
        # host bodies: the same query with one more pattern, the arithmetic HS204 reads (one pass
        # over the body instead of a second query later)
        caps = (_host_body_query_cursor() if host else _body_query_cursor()).captures(body)
        if host:
            arith = caps.pop(_ARITH_CAPTURE, None)
            if arith:
                fn.arith = arith
        nodes = fn.nodes
        for t, found in caps.items():
            if len(found) > 1:
                # source order, outer node first where several start at the same byte (the calls
                # of a chain ``a.b().c()``): the query returns those in an order that varies
                # between processes, so sort by end descending, then (stably) by start
                found.sort(key=END_BYTE, reverse=True)
                found.sort(key=START_BYTE)
            nodes[t] = found
        calls = nodes.get("call_expression")
        if calls:
            call = self._call
            for c in calls:
                call(fn, c)
        decls = nodes.get("declaration")
        if decls:
            local = self._local_declaration
            for d in decls:
                local(fn, d)
        for asg in nodes.get("assignment_expression", ()):
            kids = asg.children
            if len(kids) == 3 and not asg.has_error:
                # ``left op right``: three required parts and no room for anything else
                left, op, right = kids
            else:
                left = asg.child_by_field_name("left")
                op = right = None
            if left is None:
                continue
            lt = left.type
            if lt == "identifier" or (host and lt == "field_expression"):
                if op is None:
                    op = asg.child_by_field_name("operator")
                if op is None or op.type != "=":
                    continue
                if right is None:
                    right = asg.child_by_field_name("right")
                if right is None:
                    continue
                if lt == "identifier":
                    fn.assigned.setdefault(text(left), []).append(right)
                else:
                    owner = left.child_by_field_name("argument")
                    if owner is not None and owner.type == "identifier":
                        fn.member_assigned.setdefault(text(owner), []).append(right)
        for c in nodes.get("preproc_def", ()):
            self._define(c)

    def _call(self, fn: Function, call: ts.Node) -> None:
        # ``function`` is the first part of every call_expression rule, and a node's leading
        # comments belong to its parent, so in an error-free call it is the first child: read by
        # position, the field lookup costs more.  A launch's ``<<<...>>>`` (``kernel_call_syntax``)
        # comes right after it (the CUDA rule: function, kernel_call_syntax, arguments), or after
        # comments; so only a call whose second child is one of these two needs its children
        # searched (``kernel_config``).  An erroneous call is searched as it is.
        if call.has_error:
            func = call.child_by_field_name("function")
            launch = True
        else:
            kids = call.children
            func = kids[0] if kids else None
            launch = len(kids) > 2 and kids[1].type in _LAUNCH_SECOND
        if func is None:
            return
        config = kernel_config(call) if launch else None
        if config is not None:
            cfg = config + [None] * (4 - len(config))
            fn.launches.append(Launch(callee_name(func), call, fn, cfg[0], cfg[1], cfg[2], cfg[3], call_args(call)))
            return
        name = callee_name(func)
        fn.calls.append(Call(name, call, fn, method_receiver(func)))
        base = name.rsplit("::", 1)[-1]
        if base in _LAUNCH_APIS:
            args = call_args(call)
            if args:
                kname = _launched_symbol(args[0])
                if kname:
                    cfg = args[1:3] + [None, None]
                    stream = args[5] if len(args) > 5 else None
                    smem = args[4] if len(args) > 4 else None
                    fn.launches.append(Launch(kname, call, fn, cfg[0], cfg[1], smem, stream, [], api=base))

    def _local_declaration(self, fn: Function, node: ts.Node) -> None:
        # the children list is one C call (and cached on the node); a field lookup costs several
        # times as much, so the common shapes are read by position (``_declaration_parts``)
        static = const = constexpr = False
        type_node = None
        kids = node.children
        type_at = -1
        for i, c in enumerate(kids):
            t = c.type
            if t == "storage_class_specifier":
                static = static or c.text == b"static"
            elif t == "type_qualifier":
                raw = c.text
                const = const or raw == b"const"
                constexpr = constexpr or raw == b"constexpr"
            elif t != "comment":
                type_node, type_at = _type_field(node, kids, i, c)
                break
        type_text = compact(type_node)
        local_types = fn.local_types
        for decl in _declarators(node, kids, type_at):
            if decl.type == "init_declarator":
                target, value = _init_parts(decl)
            else:
                target, value = decl, None
            if target is not None and target.type == "identifier":
                name_node: ts.Node | None = target
                suffix = ""
            else:
                name_node, suffix = declarator_parts(target)
            if name_node is None:
                continue
            name = text(name_node)
            local_types[name] = vtype = type_text + suffix
            if value is not None:
                fn.assigned.setdefault(name, []).append(value)
            if static:
                fn.static_locals.append(Variable(name, vtype, self.x.name, self.unit, node, fn,
                                                 static=True, const=(const or constexpr) and "*" not in suffix,
                                                 init=value))
            if value is not None and (constexpr or (const and type_text in _INT_TYPES)):
                if not never_folds(value):  # such a constant is not queued for folding
                    self.pending.append((name, "constexpr" if constexpr else "const", value, "",
                                         self.unit, node, fn.name))


# Reading a declaration's parts by position instead of by field name (``child_by_field_name`` is
# the costly call of the C++ facts).  Each shortcut applies only where the grammar leaves one
# reading: an error-free node whose children have the exact shape named; anything else takes the
# field lookups, as before.

# node types that are only ever a declaration's type specifier, never a modifier or a declarator:
# the first child of one of these types that follows the leading modifiers is the ``type`` field
_TYPE_SPECIFIERS = frozenset({"primitive_type", "type_identifier", "sized_type_specifier",
                              "placeholder_type_specifier", "template_type"})


def _type_field(node: ts.Node, kids: list[ts.Node], i: int, first: ts.Node) -> tuple[ts.Node | None, int]:
    """The ``type`` of a declaration whose first child after its leading modifiers is
    ``first`` (``kids[i]``), and that child's index when it is the type (-1 otherwise)."""
    if first.type in _TYPE_SPECIFIERS and not node.has_error:
        return first, i
    return node.child_by_field_name("type"), -1


def _declarators(node: ts.Node, kids: list[ts.Node], type_at: int) -> list[ts.Node]:
    """A declaration's ``declarator`` children: ``type x;`` (the type then exactly one child and
    the ``;``) has one, the child after the type (a declaration needs at least one declarator, so
    in an error-free node that child is it)."""
    if type_at >= 0 and len(kids) == type_at + 3:
        only, last = kids[type_at + 1], kids[type_at + 2]
        if last.type == ";" and only.type != "comment":
            return [only]
    return node.children_by_field_name("declarator")


def _init_parts(decl: ts.Node) -> tuple[ts.Node | None, ts.Node | None]:
    """``declarator`` and ``value`` of an init_declarator: ``x = v`` or ``x{v}`` / ``x(v)``;
    both are required, so with no room left for anything else they are read by position."""
    if not decl.has_error:
        kids = decl.children
        n = len(kids)
        if n == 3 and kids[1].type == "=":
            return kids[0], kids[2]
        if n == 2 and kids[0].type != "comment" and kids[1].type != "comment":
            return kids[0], kids[1]
    return decl.child_by_field_name("declarator"), decl.child_by_field_name("value")


# node types of function bodies that facts and rules read; one query captures them all (cheaper
# than walking every node from Python: the walk would visit ten times as many)
BODY_TYPES = ("call_expression", "declaration", "assignment_expression", "update_expression", "if_statement",
              "for_statement", "while_statement", "do_statement", "return_statement", "try_statement",
              "lambda_expression", "conditional_expression", "gnu_asm_expression", "preproc_def", "switch_statement")
_local_cursor = threading.local()


# the second child of an error-free call that may be a launch (see ``_UnitBuilder._call``)
_LAUNCH_SECOND = frozenset({"kernel_call_syntax", "comment"})
_LAUNCH_APIS = frozenset({"cudaLaunchKernel", "cudaLaunchCooperativeKernel", "cudaLaunchKernelEx", "cuLaunchKernel"})


def _body_patterns() -> str:
    """What a function body's query captures: every ``BODY_TYPES`` node (launches are calls,
    told apart by their children: ``_UnitBuilder._call``)."""
    return " ".join(f"({t}) @{t}" for t in BODY_TYPES)


@functools.lru_cache(maxsize=1)
def _body_query() -> ts.Query:
    # compiled once per process (the Query is immutable; each thread has its own cursor)
    return ts.Query(language(), _body_patterns())


def _body_query_cursor() -> ts.QueryCursor:
    cur = getattr(_local_cursor, "cursor", None)
    if cur is None:
        cur = _local_cursor.cursor = ts.QueryCursor(_body_query())
    return cur


_ARITH_CAPTURE = "arith.op"  # a capture name no node type has: host arithmetic (``Function.arith``)
ARITH_OPS = frozenset({"+", "-", "*", "/"})


@functools.lru_cache(maxsize=1)
def _host_body_query() -> ts.Query:
    # the body patterns plus host arithmetic (HS204), so a host body needs one query, not two
    return ts.Query(language(), _body_patterns() +
                    " (binary_expression operator: [" + " ".join(f'"{op}"' for op in sorted(ARITH_OPS)) +
                    f"]) @{_ARITH_CAPTURE}")


def _host_body_query_cursor() -> ts.QueryCursor:
    cur = getattr(_local_cursor, "host_cursor", None)
    if cur is None:
        cur = _local_cursor.host_cursor = ts.QueryCursor(_host_body_query())
    return cur


_INT_TYPES = frozenset({"int", "unsigned", "unsignedint", "int64_t", "int32_t", "size_t", "long", "uint32_t",
                        "uint64_t", "short", "longlong", "float", "double"})


def _strip_comments(body: str) -> str:
    body = re.sub(r"/\*.*?\*/", " ", body, flags=re.S)
    body = re.sub(r"//[^\n]*", "", body)
    return body.replace("\\\n", " ").strip()


def _launched_symbol(arg: ts.Node) -> str:
    """The kernel named by ``(void*)k``, ``(const void*)&k<float>``, ``reinterpret_cast<void*>(k)``."""
    stack = [arg]
    while stack:
        n = stack.pop()
        if n.type in ("identifier", "template_function", "qualified_identifier"):
            name = callee_name(n)
            if name not in ("void", "reinterpret_cast", "static_cast"):
                return name
        if n.type in ("cast_expression", "pointer_expression", "parenthesized_expression"):
            stack.extend(reversed(n.named_children))
        elif n.type == "call_expression":
            stack.extend(reversed(call_args(n)))
    return ""


def _specifiers(node: ts.Node) -> set[str]:
    """Storage classes, qualifiers and CUDA execution-space tokens of a declaration or definition."""
    out: set[str] = set()
    for c in node.children:
        t = c.type
        if t in ("storage_class_specifier", "type_qualifier", "virtual_specifier"):
            out.add(compact(c))
        elif t.startswith("__") or t in ("static", "inline", "extern", "constexpr"):
            out.add(t)
        elif t == "attribute_declaration" or t == "launch_bounds":
            continue
    return out


def _function_declarator(decl: ts.Node | None) -> ts.Node | None:
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    return decl


def _is_function_declarator(decl: ts.Node) -> bool:
    return _function_declarator(decl) is not None


def _params(plist: ts.Node | None) -> tuple[Param, ...]:
    if plist is None:
        return ()
    out: list[Param] = []
    for p in plist.named_children:
        if p.type not in ("parameter_declaration", "optional_parameter_declaration"):
            continue
        kids = p.children
        type_node, decl, const_seen = _param_parts(p, kids)
        name_node, suffix = declarator_parts(decl)
        name = text(name_node) if name_node is not None else ""
        ptype = compact(type_node)
        # both patterns need "Tensor" in the type: most parameters (``float*``, ``int``) skip them
        tensor_named = "Tensor" in ptype
        is_tensor = tensor_named and (bool(_TENSOR_TYPE.match(ptype)) or
                                      ptype in ("torch::Tensor", "at::Tensor", "Tensor"))
        pointer = "*" in suffix or "[]" in suffix or (tensor_named and bool(_ACCESSOR_TYPE.search(ptype)))
        # ``const float* x`` is a pointer to const; ``float* const x`` is a const pointer (storable).
        # A qualifier node is its one keyword, so its bytes compare as its compacted text would
        # (``_param_parts`` already looked at every child when it read the common shape by position)
        const = ("*" in suffix or not pointer) and (
            const_seen if const_seen is not None else
            any(c.type == "type_qualifier" and c.text == b"const" for c in kids))
        out.append(Param(name, len(out), ptype + suffix, pointer, const, is_tensor))
    return tuple(out)


# declarator node types of a parameter: none of them is ever a modifier, so one of these as the
# only child after the type is the ``declarator`` field
_PARAM_DECLARATORS = frozenset({"identifier", "pointer_declarator", "reference_declarator", "array_declarator",
                                "abstract_pointer_declarator", "abstract_reference_declarator",
                                "abstract_array_declarator"})
_MODIFIERS = ("storage_class_specifier", "type_qualifier", "comment")


def _param_parts(p: ts.Node, kids: list[ts.Node]) -> tuple[ts.Node | None, ts.Node | None, bool | None]:
    """``type`` and ``declarator`` of a parameter declaration, by position for the common shapes
    (leading qualifiers, the type, then nothing or one declarator) of an error-free node; and
    whether a child is the qualifier ``const``, known in those shapes (every child but the type
    and the declarator was a leading modifier looked at here), None otherwise."""
    if not p.has_error:
        const = False
        for i, c in enumerate(kids):
            t = c.type
            if t in _MODIFIERS:
                if t == "type_qualifier" and c.text == b"const":
                    const = True
                continue
            if t in _TYPE_SPECIFIERS:
                rest = len(kids) - i - 1
                if rest == 0:
                    return c, None, const
                if rest == 1 and kids[i + 1].type in _PARAM_DECLARATORS:
                    return c, kids[i + 1], const
            break
    return p.child_by_field_name("type"), p.child_by_field_name("declarator"), None


def functions_named(facts: CudaFacts, names_: Iterable[str]) -> list[Function]:
    wanted = set(names_)
    return [f for f in facts.functions if f.name in wanted]


__all__ = ["CudaFacts", "ExtensionFacts", "Function", "Call", "Launch", "Variable", "Constant", "Macro", "Export",
           "Param", "ParseError", "build_cuda_facts", "pos_of", "names"]
