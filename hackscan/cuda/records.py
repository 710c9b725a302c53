"""The records of the CUDA / C++ facts: what one walk of a unit finds (functions with their
parameters, calls, launches and body nodes; variables, named constants, macros, exports, parse
errors) and an extension's tables of them (``ExtensionFacts``).

``builder.py`` fills these records; ``facts.CudaFacts`` holds them for one submission; the
analyses (``flow.py``, ``branches.py``, ``graph.py``) and the rules read them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import tree_sitter as ts

from ..units import Pos, Unit
from ..util.lazy import cached_property
from ..util.quick_init import quick_init
from .consts import fold, fold_text
from .parser import call_args, text


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
            done = self._locals_done[name] = (fold_pending(self, pending, {}, dict(self.const_env)) if pending
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


ARITH_OPS = frozenset({"+", "-", "*", "/"})


def fold_pending(x: ExtensionFacts, pending: list[tuple], table: dict[str, Constant],
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
