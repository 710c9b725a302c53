"""Facts about the ``@triton.jit`` kernels of a host file and the places that launch them.

Triton kernels are Python functions, so they come from the host's ``ast`` (``host.triton_kernels``),
not from tree-sitter.  Per kernel: pointer / constexpr / scalar parameters, every ``tl.load`` /
``tl.store`` / atomic with the pointer parameters its address derives from and whether it is masked,
``tl.arange`` bounds, ``program_id`` uses, loops and their steps, ``tl.dot`` and its precision,
casts, reductions, and ``if`` statements that branch on loaded values.  Per launch
(``kernel[grid](args...)``): the grid, each argument mapped to its parameter and classified (a
forward input, a fresh allocation, a module attribute, a constant), and the constexpr values passed.

Built lazily once per file as ``ctx.triton``; a file without Triton kernels never pays for it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ..python.module import HostModule
from ..python.patterns import ALLOC_FUNCS, ALLOC_METHODS, MiscFacts, is_alias_expr
from ..python.resolve import dotted_name

TL = "triton.language."
LOADS = {TL + "load"}
STORES = {TL + "store"}
ATOMICS = {TL + f"atomic_{op}" for op in ("add", "xchg", "cas", "max", "min", "and", "or", "xor")}
REDUCTIONS = {"sum", "max", "min", "argmax", "argmin", "reduce", "xor_sum", "prod"}
SCANS = {"cumsum", "cumprod", "associative_scan"}
LOW_DTYPES = {
    TL + "float16": "float16", TL + "bfloat16": "bfloat16", TL + "float8e4nv": "float8", TL + "float8e5": "float8",
    TL + "float8e4b15": "float8", TL + "float8e4b8": "float8", TL + "float8e5b16": "float8", TL + "float8_e4m3fn": "float8",
    TL + "float8e4m3fn": "float8", TL + "float8e5m2": "float8", TL + "int8": "int8",
}
OTHER_DTYPES = {TL + "float32": "float32", TL + "float64": "float64", TL + "int32": "int32", TL + "int64": "int64",
                TL + "int1": "int1", TL + "uint8": "uint8", TL + "int16": "int16"}
_RANGE_FUNCS = {"range", TL + "range", TL + "static_range", "triton.language.range", "tl.range"}


@dataclass(frozen=True)
class Arange:
    """``tl.arange(start, end)``: ``end`` as written (an int or a name) and its value where known."""

    node: ast.Call
    start: int | str | None
    end: int | str | None
    end_value: int | None


@dataclass(frozen=True)
class Access:
    """One ``tl.load`` / ``tl.store`` / ``tl.atomic_*``."""

    kind: str  # load | store | atomic
    node: ast.Call
    pointers: frozenset[str]  # pointer parameters the address derives from
    masked: bool
    aranges: tuple[Arange, ...]  # aranges the address is built from
    loop: ast.AST | None  # innermost enclosing loop
    block_ptr: bool
    scalar_offsets: bool  # no arange in the address: one element per program (or per iteration)
    multipliers: tuple[int, ...] = ()  # literal factors applied to an arange in the address (``arange * 16``)


@dataclass(frozen=True)
class Loop:
    node: ast.AST
    var: str | None
    start: ast.AST | None
    stop: ast.AST | None
    step: ast.AST | None
    start_value: int | None
    stop_value: int | None
    step_value: int | None


@dataclass(frozen=True)
class Dot:
    node: ast.Call
    allow_tf32: bool | None
    input_precision: str | None
    out_dtype: str | None
    operand_casts: tuple[str | None, str | None]


@dataclass(frozen=True)
class Cast:
    node: ast.Call
    dtype: str
    value_derived: bool  # the cast value comes from loaded data (not an index or a constant)


@dataclass(frozen=True)
class Guard:
    """An ``if`` in a kernel whose condition depends on loaded values."""

    node: ast.If
    depends_on: str  # reduction | scalar-load
    returns: bool  # an arm returns early
    store_asymmetry: bool  # one arm stores and the other does not


@dataclass
class KernelFacts:
    name: str
    node: ast.FunctionDef
    params: tuple[str, ...]
    constexpr_params: dict[str, int | str | None]  # name -> default value (None when none)
    pointer_params: tuple[str, ...]
    scalar_params: tuple[str, ...]
    autotune_values: dict[str, set[int]] = field(default_factory=dict)
    accesses: list[Access] = field(default_factory=list)
    aranges: list[Arange] = field(default_factory=list)
    program_ids: list[ast.Call] = field(default_factory=list)
    loops: list[Loop] = field(default_factory=list)
    dots: list[Dot] = field(default_factory=list)
    casts: list[Cast] = field(default_factory=list)
    reductions: list[ast.Call] = field(default_factory=list)
    guards: list[Guard] = field(default_factory=list)
    value_names: frozenset[str] = frozenset()
    defs: dict[str, list[ast.AST]] = field(default_factory=dict)

    @property
    def loads(self) -> list[Access]:
        return [a for a in self.accesses if a.kind == "load"]

    @property
    def stores(self) -> list[Access]:
        return [a for a in self.accesses if a.kind in ("store", "atomic")]

    def stores_to(self, param: str) -> list[Access]:
        return [a for a in self.stores if param in a.pointers]

    def constexpr_value(self, name: str, passed: dict[str, int | None] | None = None) -> int | None:
        """A constexpr's value: passed at a launch, else its default, else a single autotune value."""
        if passed and isinstance(passed.get(name), int):
            return passed[name]
        default = self.constexpr_params.get(name)
        if isinstance(default, int) and not isinstance(default, bool):
            return default
        tuned = self.autotune_values.get(name)
        if tuned and len(tuned) == 1:
            return next(iter(tuned))
        return None


@dataclass(frozen=True)
class LaunchArg:
    param: str | None
    expr: ast.AST
    source: str  # forward-input | allocation | attribute | constant | metadata | other
    detail: str = ""
    value: int | float | None = None
    root: str | None = None  # the host name the argument is (a view of)


@dataclass
class Launch:
    kernel: str
    call: ast.Call
    grid: ast.AST | None
    grid_value: tuple[int, ...] | None
    args: tuple[LaunchArg, ...]
    constexprs: dict[str, int | None]
    function: ast.AST | None

    def arg_for(self, param: str) -> LaunchArg | None:
        return next((a for a in self.args if a.param == param), None)


@dataclass
class TritonFacts:
    kernels: dict[str, KernelFacts]
    launches: list[Launch]

    def launches_of(self, kernel: str) -> list[Launch]:
        return [launch for launch in self.launches if launch.kernel == kernel]


# ---------------------------------------------------------------------- kernels
def _canon(host: HostModule, expr: ast.AST) -> str:
    name = host.canonical(expr)
    if name.startswith("tl."):
        return TL + name[3:]
    return name


def _int(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _int(node.operand)
        return -v if v is not None else None
    return None


def _kw(call: ast.Call, name: str, pos: int | None = None) -> ast.AST | None:
    for k in call.keywords:
        if k.arg == name:
            return k.value
    if pos is not None and pos < len(call.args):
        return call.args[pos]
    return None


class _KernelReader:
    def __init__(self, host: HostModule, fn: ast.FunctionDef):
        self.host = host
        self.fn = fn
        self.nodes = list(ast.walk(fn))
        self.parents: dict[ast.AST, ast.AST] = {}
        for n in self.nodes:
            for c in ast.iter_child_nodes(n):
                self.parents[c] = n
        args = fn.args
        self.params = tuple(a.arg for a in args.posonlyargs + args.args)
        defaults = list(args.defaults)
        self.defaults: dict[str, ast.AST] = dict(zip(self.params[len(self.params) - len(defaults):], defaults, strict=True))
        self.constexpr: dict[str, int | str | None] = {}
        for a in args.posonlyargs + args.args:
            ann = a.annotation
            if ann is not None and (_canon(host, ann).endswith("constexpr") or (
                    isinstance(ann, ast.Constant) and "constexpr" in str(ann.value))):
                d = self.defaults.get(a.arg)
                self.constexpr[a.arg] = _int(d) if d is not None and _int(d) is not None else (
                    d.value if isinstance(d, ast.Constant) else None)
        self.defs: dict[str, list[ast.AST]] = {}
        for n in self.nodes:
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    for name in _names(t):
                        self.defs.setdefault(name, []).append(n.value)
            elif isinstance(n, (ast.AugAssign, ast.AnnAssign)) and isinstance(n.target, ast.Name) and n.value is not None:
                self.defs.setdefault(n.target.id, []).append(n.value)
            elif isinstance(n, ast.For):
                for name in _names(n.target):
                    self.defs.setdefault(name, []).append(n.iter)

    def canon(self, expr: ast.AST) -> str:
        return _canon(self.host, expr)

    # --- pointers ---------------------------------------------------------------------------
    def pointers(self, expr: ast.AST, seen: set[str] | None = None) -> set[str]:
        """Parameters in additive position of an address expression, through local names."""
        seen = set() if seen is None else seen
        out: set[str] = set()
        e = expr
        if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub)):
            out |= self.pointers(e.left, seen)
            if isinstance(e.op, ast.Add):
                out |= self.pointers(e.right, seen)
        elif isinstance(e, ast.Name):
            if e.id in self.params and e.id not in self.constexpr and not self.killed(e):
                out.add(e.id)
            elif e.id in self.defs and e.id not in seen:
                seen.add(e.id)
                for d in self.reaching(e):
                    out |= self.pointers(d, seen)
        elif isinstance(e, ast.Subscript):
            out |= self.pointers(e.value, seen)
        elif isinstance(e, ast.IfExp):
            out |= self.pointers(e.body, seen) | self.pointers(e.orelse, seen)
        elif isinstance(e, ast.Call):
            name = self.canon(e.func)
            if name == TL + "make_block_ptr":
                base = _kw(e, "base", 0)
                if base is not None:
                    out |= self.pointers(base, seen)
            elif name in (TL + "advance", TL + "broadcast_to", TL + "reshape", TL + "expand_dims", TL + "view",
                          TL + "multiple_of", TL + "max_contiguous", TL + "max_constancy") and e.args:
                out |= self.pointers(e.args[0], seen)
            elif isinstance(e.func, ast.Attribute) and e.func.attr in ("to",) and e.args:
                out |= self.pointers(e.func.value, seen)
        return out

    # --- reaching definitions ---------------------------------------------------------------
    # ``ptr = x_ptr + row * stride; x = tl.load(ptr ...); ptr = y_ptr + row * stride; tl.store(ptr ...)``:
    # the store goes through the second assignment only.  A use sees the last plain assignment that
    # dominates it (same block or an enclosing one, above it) and any later ones (a loop carries them
    # round, a branch may skip them); ``+=`` keeps what the name held.
    def _stmt(self, node: ast.AST) -> ast.AST:
        while not isinstance(node, ast.stmt) and node in self.parents:
            node = self.parents[node]
        return node

    def _dominates(self, stmt: ast.AST, use: ast.AST) -> bool:
        block = self.parents.get(stmt)
        if block is None:
            return False
        for attr in ("body", "orelse", "finalbody"):
            lst = getattr(block, attr, None)
            if isinstance(lst, list) and stmt in lst:
                i = lst.index(stmt)
                cur = use
                while cur is not None and cur is not block:
                    if cur in lst:
                        return lst.index(cur) > i
                    cur = self.parents.get(cur)
        return False

    def _plain_assigns(self, name: str) -> list[ast.Assign]:
        sites = self.__dict__.setdefault("_assign_sites", {})
        got = sites.get(name)
        if got is None:
            got = sites[name] = [n for n in self.nodes if isinstance(n, ast.Assign) and any(
                name in _names(t) for t in n.targets)]
        return got

    def _last_killer(self, name: str, use: ast.AST) -> ast.Assign | None:
        line = getattr(use, "lineno", 0)
        killers = [a for a in self._plain_assigns(name) if a.lineno < line and self._dominates(a, use)]
        return max(killers, key=lambda a: a.lineno) if killers else None

    def killed(self, use: ast.Name) -> bool:
        """A parameter reassigned above ``use`` (on every path): the name no longer holds the argument."""
        return self._last_killer(use.id, use) is not None

    def reaching(self, use: ast.Name) -> list[ast.AST]:
        """The definitions of ``use``'s name that can reach it (values, as ``defs`` holds them)."""
        kill = self._last_killer(use.id, use)
        if kill is None:
            return self.defs[use.id]
        stmt = self._stmt(use)
        out = []
        for n in self.nodes:
            if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For)) and n.lineno >= kill.lineno:
                value = n.iter if isinstance(n, ast.For) else n.value
                if value is None or value not in self.defs.get(use.id, ()):
                    continue
                if n.lineno < stmt.lineno or (n is not stmt and self._same_loop(n, use)):
                    out.append(value)
        return out or self.defs[use.id]

    def _same_loop(self, a: ast.AST, b: ast.AST) -> bool:
        """``a`` and ``b`` sit in one loop's body: a definition below a use reaches it next round."""
        loops = set()
        cur = self.parents.get(b)
        while cur is not None:
            if isinstance(cur, (ast.For, ast.While)):
                loops.add(cur)
            cur = self.parents.get(cur)
        cur = self.parents.get(a)
        while cur is not None:
            if cur in loops:
                return True
            cur = self.parents.get(cur)
        return False

    def is_block_ptr(self, expr: ast.AST, seen: set[str] | None = None) -> bool:
        seen = set() if seen is None else seen
        if isinstance(expr, ast.Call) and self.canon(expr.func) in (TL + "make_block_ptr", TL + "advance"):
            return True
        if isinstance(expr, ast.Name) and expr.id in self.defs and expr.id not in seen:
            seen.add(expr.id)
            return any(self.is_block_ptr(d, seen) for d in self.defs[expr.id])
        return False

    def closure(self, expr: ast.AST) -> list[ast.AST]:
        """Every node of ``expr`` and of the definitions of the local names it uses (transitively)."""
        out: list[ast.AST] = []
        seen: set[str] = set()
        todo = [expr]
        while todo:
            e = todo.pop()
            for n in ast.walk(e):
                out.append(n)
                if isinstance(n, ast.Name) and n.id in self.defs and n.id not in seen:
                    seen.add(n.id)
                    todo.extend(d for d in self.defs[n.id] if not isinstance(d, ast.Call) or self.canon(d.func)
                                not in _RANGE_FUNCS)
        return out

    def arange_of(self, call: ast.Call) -> Arange:
        start = _int(call.args[0]) if call.args else None
        end_node = call.args[1] if len(call.args) > 1 else _kw(call, "end")
        end: int | str | None = _int(end_node)
        end_value = end if isinstance(end, int) else None
        if end is None and isinstance(end_node, ast.Name):
            end = end_node.id
            default = self.constexpr.get(end_node.id)
            end_value = default if isinstance(default, int) else None
        return Arange(call, start, end, end_value)

    def enclosing_loop(self, node: ast.AST) -> ast.AST | None:
        cur = self.parents.get(node)
        while cur is not None and cur is not self.fn:
            if isinstance(cur, (ast.For, ast.While)):
                return cur
            cur = self.parents.get(cur)
        return None

    def value_names(self) -> tuple[frozenset[str], frozenset[str]]:
        """Names holding loaded values, and the subset derived from reductions of them."""
        loaded: set[str] = set()
        reduced: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, exprs in self.defs.items():
                for e in exprs:
                    has_load = any(isinstance(n, ast.Call) and self.canon(n.func) in LOADS for n in ast.walk(e))
                    uses = any(isinstance(n, ast.Name) and n.id in loaded for n in ast.walk(e))
                    if (has_load or uses) and name not in loaded:
                        loaded.add(name)
                        changed = True
                    red = any(self._is_reduction(n) and any(
                        (isinstance(m, ast.Name) and m.id in loaded) or (
                            isinstance(m, ast.Call) and self.canon(m.func) in LOADS) for m in ast.walk(n))
                        for n in ast.walk(e))
                    from_red = any(isinstance(n, ast.Name) and n.id in reduced for n in ast.walk(e))
                    if (red or from_red) and name not in reduced:
                        reduced.add(name)
                        changed = True
        return frozenset(loaded), frozenset(reduced)

    def _is_reduction(self, n: ast.AST) -> bool:
        if not isinstance(n, ast.Call):
            return False
        name = self.canon(n.func)
        if name.startswith(TL) and name[len(TL):] in REDUCTIONS:
            return True
        return isinstance(n.func, ast.Attribute) and n.func.attr in REDUCTIONS and not name.startswith(TL) and \
            not name.startswith(("torch.", "math.", "builtins."))

    def cast_dtype(self, call: ast.Call) -> str | None:
        f = call.func
        dtype_node = None
        if isinstance(f, ast.Attribute) and f.attr == "to" and call.args:
            dtype_node = call.args[0]
        elif self.canon(f) == TL + "cast" and len(call.args) >= 2:
            dtype_node = call.args[1]
        if dtype_node is None:
            return None
        name = self.canon(dtype_node)
        return LOW_DTYPES.get(name) or OTHER_DTYPES.get(name)


def _names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for e in target.elts for n in _names(e)]
    return []


def _autotune_values(host: HostModule, fn: ast.FunctionDef) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for dec in fn.decorator_list:
        if not isinstance(dec, ast.Call) or not host.canonical(dec.func).endswith("autotune"):
            continue
        configs = _kw(dec, "configs", 0)
        if not isinstance(configs, (ast.List, ast.Tuple)):
            continue
        for cfg in configs.elts:
            if isinstance(cfg, ast.Call) and cfg.args and isinstance(cfg.args[0], ast.Dict):
                for k, v in zip(cfg.args[0].keys, cfg.args[0].values, strict=True):
                    if isinstance(k, ast.Constant) and isinstance(k.value, str) and _int(v) is not None:
                        out.setdefault(k.value, set()).add(_int(v))  # type: ignore[arg-type]
    return out


def read_kernel(host: HostModule, fn: ast.FunctionDef) -> KernelFacts:
    r = _KernelReader(host, fn)
    accesses: list[Access] = []
    aranges: list[Arange] = []
    pids: list[ast.Call] = []
    dots: list[Dot] = []
    casts_raw: list[tuple[ast.Call, str]] = []
    reductions: list[ast.Call] = []
    address_params: set[str] = set()
    for n in r.nodes:
        if not isinstance(n, ast.Call):
            continue
        name = r.canon(n.func)
        if name in LOADS or name in STORES or name in ATOMICS:
            kind = "load" if name in LOADS else "store" if name in STORES else "atomic"
            ptr = _kw(n, "pointer", 0)
            if ptr is None:
                continue
            mask_pos = 1 if kind == "load" else 2
            mask = _kw(n, "mask", mask_pos)
            boundary = _kw(n, "boundary_check")
            masked = (mask is not None and not (isinstance(mask, ast.Constant) and mask.value is None)) or (
                isinstance(boundary, (ast.Tuple, ast.List)) and bool(boundary.elts))
            pointers = r.pointers(ptr)
            address_params |= pointers
            closure = r.closure(ptr)
            ars = tuple(r.arange_of(c) for c in closure if isinstance(c, ast.Call) and r.canon(c.func) == TL + "arange")
            mults = tuple(v for c in closure if isinstance(c, ast.BinOp) and isinstance(c.op, ast.Mult)
                          for side, other in ((c.left, c.right), (c.right, c.left))
                          if _mentions_arange(r, side) and (v := _int(other)) is not None and v > 1)
            accesses.append(Access(kind, n, frozenset(pointers), masked, ars, r.enclosing_loop(n), r.is_block_ptr(ptr),
                                   not ars and not r.is_block_ptr(ptr), mults))
        elif name == TL + "arange":
            aranges.append(r.arange_of(n))
        elif name == TL + "program_id":
            pids.append(n)
        elif name == TL + "dot":
            allow = _kw(n, "allow_tf32")
            if allow is None and len(n.args) >= 3 and isinstance(n.args[2], ast.Constant) and isinstance(
                    n.args[2].value, bool):
                allow = n.args[2]
            prec = _kw(n, "input_precision")
            out_dtype = _kw(n, "out_dtype")
            ops = tuple(_operand_cast(r, a) for a in n.args[:2])
            dots.append(Dot(n, allow.value if isinstance(allow, ast.Constant) else None,
                            prec.value if isinstance(prec, ast.Constant) else None,
                            (LOW_DTYPES.get(r.canon(out_dtype)) or OTHER_DTYPES.get(r.canon(out_dtype)))
                            if out_dtype is not None else None,
                            (ops + (None, None))[:2]))  # type: ignore[arg-type]
        elif r._is_reduction(n):
            reductions.append(n)
        dtype = r.cast_dtype(n)
        if dtype is not None:
            casts_raw.append((n, dtype))
    loaded, reduced = r.value_names()
    casts = [Cast(c, d, _derived(r, c, loaded)) for c, d in casts_raw]
    loops = []
    for n in r.nodes:
        if isinstance(n, ast.For) and isinstance(n.iter, ast.Call) and (
                r.canon(n.iter.func) in _RANGE_FUNCS or dotted_name(n.iter.func) in ("range", "tl.range",
                                                                                     "tl.static_range")):
            a = n.iter.args
            start, stop, step = (a[0], a[1], a[2] if len(a) > 2 else None) if len(a) >= 2 else (None, a[0] if a else None, None)
            loops.append(Loop(n, n.target.id if isinstance(n.target, ast.Name) else None, start, stop, step,
                              _value(r, start), _value(r, stop), _value(r, step) if step is not None else 1))
        elif isinstance(n, ast.While):
            loops.append(Loop(n, None, None, None, None, None, None, None))
    guards = _guards(r, loaded, reduced)
    scalar_uses = _scalar_uses(r)
    pointer_params = tuple(p for p in r.params if p in address_params and p not in r.constexpr and (
        "ptr" in p.lower() or p not in scalar_uses))
    accesses = [Access(a.kind, a.node, frozenset(p for p in a.pointers if p in pointer_params), a.masked, a.aranges,
                       a.loop, a.block_ptr, a.scalar_offsets, a.multipliers) for a in accesses]
    scalar_params = tuple(p for p in r.params if p not in pointer_params and p not in r.constexpr)
    return KernelFacts(
        name=fn.name, node=fn, params=r.params, constexpr_params=r.constexpr, pointer_params=pointer_params,
        scalar_params=scalar_params, autotune_values=_autotune_values(host, fn), accesses=accesses, aranges=aranges,
        program_ids=pids, loops=loops, dots=dots, casts=casts, reductions=reductions, guards=guards,
        value_names=loaded, defs=r.defs,
    )


def _mentions_arange(r: _KernelReader, expr: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and r.canon(n.func) == TL + "arange" for n in r.closure(expr))


def _value(r: _KernelReader, node: ast.AST | None) -> int | None:
    v = _int(node)
    if v is not None:
        return v
    if isinstance(node, ast.Name):
        d = r.constexpr.get(node.id)
        return d if isinstance(d, int) else None
    return None


def _operand_cast(r: _KernelReader, expr: ast.AST) -> str | None:
    for n in r.closure(expr):
        if isinstance(n, ast.Call):
            d = r.cast_dtype(n)
            if d is not None:
                return d
    return None


def _derived(r: _KernelReader, call: ast.Call, loaded: frozenset[str]) -> bool:
    inner = call.func.value if isinstance(call.func, ast.Attribute) and call.func.attr == "to" else (
        call.args[0] if call.args else call)
    return any((isinstance(n, ast.Name) and n.id in loaded) or (isinstance(n, ast.Call) and r.canon(n.func) in LOADS)
               or (isinstance(n, ast.Call) and r.canon(n.func) == TL + "dot") for n in ast.walk(inner))


def _scalar_uses(r: _KernelReader) -> set[str]:
    """Parameters used as numbers: compared, multiplied, loop bounds, arange bounds."""
    out: set[str] = set()
    for n in r.nodes:
        if isinstance(n, ast.Compare):
            # ``C.dtype.element_ty == tl.bfloat16`` compares the pointer's element type, not a number
            typed = {id(a.value) for a in ast.walk(n) if isinstance(a, ast.Attribute) and a.attr == "dtype"}
            out.update(x.id for x in ast.walk(n) if isinstance(x, ast.Name) and id(x) not in typed)
        elif isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Mult, ast.FloorDiv, ast.Mod, ast.Div)):
            out.update(x.id for x in (n.left, n.right) if isinstance(x, ast.Name))
        elif isinstance(n, ast.Call) and (r.canon(n.func) in _RANGE_FUNCS or r.canon(n.func) in (
                TL + "arange", TL + "cdiv", "triton.cdiv")):
            out.update(x.id for a in n.args for x in ast.walk(a) if isinstance(x, ast.Name))
    return out & set(r.params)


def _guards(r: _KernelReader, loaded: frozenset[str], reduced: frozenset[str]) -> list[Guard]:
    out: list[Guard] = []
    for n in r.nodes:
        if not isinstance(n, ast.If):
            continue
        names = {x.id for x in ast.walk(n.test) if isinstance(x, ast.Name)}
        direct_red = any(r._is_reduction(x) for x in ast.walk(n.test))
        direct_load = any(isinstance(x, ast.Call) and r.canon(x.func) in LOADS for x in ast.walk(n.test))
        if not (names & loaded or direct_red or direct_load):
            continue
        depends = "reduction" if (names & reduced or direct_red) else "scalar-load"
        body_nodes = [x for s in n.body for x in ast.walk(s)]
        else_nodes = [x for s in n.orelse for x in ast.walk(s)]
        returns = any(isinstance(x, ast.Return) for x in body_nodes + else_nodes)
        store_b = any(isinstance(x, ast.Call) and r.canon(x.func) in STORES | ATOMICS for x in body_nodes)
        store_e = any(isinstance(x, ast.Call) and r.canon(x.func) in STORES | ATOMICS for x in else_nodes)
        out.append(Guard(n, depends, returns, store_b != store_e))
    return out


# ---------------------------------------------------------------------- launches
def _kernel_of(host: HostModule, call: ast.Call) -> tuple[str, ast.AST | None] | None:
    f = call.func
    if isinstance(f, ast.Subscript):
        name = dotted_name(f.value).rsplit(".", 1)[-1]
        if name in host.triton_kernels:
            return name, f.slice
    elif isinstance(f, ast.Attribute) and f.attr == "run" and dotted_name(f.value).rsplit(".", 1)[-1] in host.triton_kernels:
        grid = next((k.value for k in call.keywords if k.arg == "grid"), None)
        return dotted_name(f.value).rsplit(".", 1)[-1], grid
    return None


def _alloc_name(host: HostModule, expr: ast.AST) -> str | None:
    if isinstance(expr, ast.Call):
        name = host.canonical(expr.func)
        if name in ALLOC_FUNCS:
            return name
        if isinstance(expr.func, ast.Attribute) and expr.func.attr in ALLOC_METHODS:
            return f"Tensor.{expr.func.attr}"
        if isinstance(expr.func, ast.Attribute) and expr.func.attr in ("contiguous", "view", "reshape", "to"):
            return _alloc_name(host, expr.func.value)
    return None


def _classify(host: HostModule, facts: MiscFacts, fn: ast.AST | None, expr: ast.AST,
              depth: int = 0) -> tuple[str, str, int | float | None, str | None]:
    """(source, detail, value, root) of one host-side launch argument."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, (int, float)) and not isinstance(expr.value, bool):
        return "constant", repr(expr.value), expr.value, None
    v = host.resolver.try_value(expr, host.scope_of(expr), getattr(expr, "lineno", None))
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return "constant", ast.unparse(expr), v, None
    alloc = _alloc_name(host, expr)
    if alloc:
        return "allocation", alloc, None, None
    if isinstance(expr, ast.Attribute) and expr.attr in ("shape", "dtype", "device") or (
            isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in (
            "stride", "size", "numel", "dim", "element_size")) or isinstance(expr, ast.Subscript) and isinstance(
            expr.value, ast.Attribute) and expr.value.attr == "shape":
        return "metadata", ast.unparse(expr)[:40], None, None
    root = _root_name(expr)
    if fn is not None and root is not None:
        inputs = facts.input_aliases(fn)
        if root in inputs and is_alias_expr(expr, set(inputs)):
            return "forward-input", root, None, root
        flow = facts.flow(fn)
        defs = flow.defs.get(root, [])
        if defs and depth < 4:
            kinds = [_classify(host, facts, fn, d, depth + 1) for d in defs if not (
                isinstance(d, ast.Name) and d.id == root)]
            for k in ("forward-input", "allocation"):
                hit = next((c for c in kinds if c[0] == k), None)
                if hit is not None:
                    return k, hit[1], None, root if k == "forward-input" else root
        if root in flow.params and root not in ("self", "cls"):
            via = _param_source(host, facts, fn, root, depth)
            if via is not None:
                return via[0], via[1], None, root
    if dotted_name(expr).startswith("self."):
        return "attribute", dotted_name(expr), None, dotted_name(expr)
    return "other", ast.unparse(expr)[:40], None, root


def _root_name(expr: ast.AST) -> str | None:
    e = expr
    while True:
        if isinstance(e, ast.Name):
            return e.id
        if isinstance(e, ast.Subscript):
            e = e.value
        elif isinstance(e, ast.Attribute) and e.attr in ("data", "T", "mT"):
            e = e.value
        elif isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in (
                "view", "reshape", "contiguous", "flatten", "t", "transpose", "permute", "squeeze", "unsqueeze",
                "expand", "view_as", "detach", "to", "cuda", "float"):
            e = e.func.value
        else:
            return None


def _param_source(host: HostModule, facts: MiscFacts, fn: ast.AST, param: str,
                  depth: int) -> tuple[str, str] | None:
    """How callers fill a helper's parameter: with a forward input or an allocation."""
    if depth >= 3:
        return None
    params = facts.flow(fn).params
    idx = params.index(param)
    if params and params[0] in ("self", "cls"):
        idx -= 1
    found: list[tuple[str, str]] = []
    for caller in facts.runs:
        for call in facts.nodes_by_owner(ast.Call).get(caller, ()):
            if fn not in facts.call_targets(call):
                continue
            arg = next((k.value for k in call.keywords if k.arg == param), None)
            if arg is None and 0 <= idx < len(call.args):
                arg = call.args[idx]
            if arg is None:
                continue
            src = _classify(host, facts, caller, arg, depth + 1)
            if src[0] in ("forward-input", "allocation"):
                found.append((src[0], src[1]))
    if any(k == "forward-input" for k, _ in found):
        return next(f for f in found if f[0] == "forward-input")
    return found[0] if found else None


def _grid_value(host: HostModule, grid: ast.AST | None, fn: ast.AST | None, facts: MiscFacts) -> tuple[int, ...] | None:
    if grid is None:
        return None
    g = grid
    if isinstance(g, ast.Name) and fn is not None:
        defs = facts.flow(fn).defs.get(g.id, [])
        if len(defs) == 1:
            g = defs[0]
    v = host.resolver.try_value(g, host.scope_of(g), getattr(g, "lineno", None))
    if isinstance(v, int) and not isinstance(v, bool):
        return (v,)
    if isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return tuple(v)
    return None


def read_launches(host: HostModule, kernels: dict[str, KernelFacts], facts: MiscFacts) -> list[Launch]:
    out: list[Launch] = []
    for call in host.of_type(ast.Call):
        got = _kernel_of(host, call)
        if got is None:
            continue
        name, grid = got
        kernel = kernels[name]
        fn = facts.owner(call)
        args: list[LaunchArg] = []
        for i, a in enumerate(call.args):
            param = kernel.params[i] if i < len(kernel.params) else None
            src, detail, value, root = _classify(host, facts, fn, a)
            args.append(LaunchArg(param, a, src, detail, value, root))
        for k in call.keywords:
            if k.arg is None or k.arg in ("num_warps", "num_stages", "grid", "num_ctas", "enable_fp_fusion"):
                continue
            src, detail, value, root = _classify(host, facts, fn, k.value)
            args.append(LaunchArg(k.arg, k.value, src, detail, value, root))
        constexprs = {a.param: (int(a.value) if isinstance(a.value, (int, float)) and float(a.value).is_integer()
                                else None)
                      for a in args if a.param in kernel.constexpr_params}
        out.append(Launch(name, call, grid, _grid_value(host, grid, fn, facts), tuple(args), constexprs, fn))
    out.sort(key=lambda launch: (launch.call.lineno, launch.call.col_offset))
    return out


def _inline_helper_stores(host: HostModule, kernels: dict[str, KernelFacts]) -> None:
    """A kernel that hands a pointer to another ``@triton.jit`` function stores through it when
    that function does (``_store_tile(out_ptr + offs, acc, mask)``): credit the caller's parameter."""
    for _ in range(2):  # helpers of helpers
        for k in kernels.values():
            reader = None
            for call in (n for n in ast.walk(k.node) if isinstance(n, ast.Call)):
                callee = call.func.id if isinstance(call.func, ast.Name) else None
                helper = kernels.get(callee) if callee and callee != k.name else None
                if helper is None:
                    continue
                reader = reader or _KernelReader(host, k.node)
                bound = [(helper.params[i], a) for i, a in enumerate(call.args) if i < len(helper.params)]
                bound += [(kw.arg, kw.value) for kw in call.keywords if kw.arg in helper.params]
                for hp, arg in bound:
                    if not helper.stores_to(hp):
                        continue
                    mine = frozenset(p for p in reader.pointers(arg) if p in k.params)
                    if mine and not any(a.node is call for a in k.accesses):
                        k.accesses.append(Access("store", call, mine, True, (), reader.enclosing_loop(call),
                                                 False, False))
                        if not set(mine) <= set(k.pointer_params):
                            k.pointer_params = tuple(p for p in k.params if p in set(k.pointer_params) | mine)


def build_triton_facts(host: HostModule, patterns: MiscFacts | None = None) -> TritonFacts:
    """Facts for every ``@triton.jit`` kernel of ``host`` and every launch of one; ``patterns`` is
    the host's def-use facts when the caller has them (the scan context shares its own)."""
    kernels = {name: read_kernel(host, fn) for name, fn in host.triton_kernels.items()}
    _inline_helper_stores(host, kernels)
    facts = patterns if patterns is not None else MiscFacts(host)
    return TritonFacts(kernels=kernels, launches=read_launches(host, kernels, facts))


