"""HS122: the path forward runs is the winner of a timing race between torch and the kernel (or
between float32 and a half-precision path), class 5 with 14.

``t0 = perf_counter(); ext.relu(x); t1 = perf_counter(); torch.relu(x); t2 = perf_counter()`` then
``self.use_kernel = (t1 - t0) < (t2 - t1)``: on the machine that scores the candidate, whichever
path is faster is what gets checked and timed, so a kernel slower than cuBLAS is silently replaced
by torch (and a half-precision matmul by the tensor cores' result).  An autotuner that times several
configurations of the custom kernel is the legitimate look-alike: every contender runs custom code at
the reference's precision.
"""

from __future__ import annotations

import ast
from bisect import bisect_right
from collections.abc import Iterator

from ...context import Hit, ScanContext
from ...python.catalog import classify_torch
from ...python.module import subtree
from ...python.patterns import MiscFacts

_CLOCKS = frozenset({"time.perf_counter", "time.perf_counter_ns", "time.time", "time.time_ns", "time.monotonic",
                     "time.monotonic_ns", "timeit.default_timer"})
_HALF = frozenset({"half", "bfloat16"})
# identifiers that must occur in a file that times anything: a clock's last name or ``elapsed_time``
_CLOCK_WORDS = ("elapsed_time", "perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns",
                "default_timer")
# the last name of a clock or of ``Event.record``: calls spelled otherwise are not resolved
_MARK_NAMES = frozenset({"record"} | {c.rsplit(".", 1)[-1] for c in _CLOCKS})
_HALF_DTYPES = frozenset({"torch.float16", "torch.half", "torch.bfloat16"})
# the last names in ``_HALF`` and ``_HALF_DTYPES``: a file without any of them has no half cast
_HALF_WORDS = tuple(_HALF | {d.rsplit(".", 1)[-1] for d in _HALF_DTYPES})


def timed_path_race(ctx: ScanContext) -> Iterator[Hit]:
    """HS122: a function of the model class times two regions (clock reads or ``Event.record()``), one
    of which runs no custom code or runs in half precision while another does not, and then compares."""
    host = ctx.host
    if host is None:
        return
    misc = ctx.patterns
    # most candidates never read a clock: one set lookup per name in the file's identifiers (shared
    # with the other rules' pre-checks) ends the rule before any node is looked at
    if not misc.uses(*_CLOCK_WORDS):
        return
    facts = ctx.model_flow
    if facts is None or facts.model is None:
        return
    model = facts.model
    # the functions of the model class with three clock reads or more, from the index of calls by
    # their last name (``canonical`` only for calls spelled like a clock)
    marks: dict[ast.AST, int] = {}
    for call in misc.calls_named(*_MARK_NAMES):
        if not _is_mark(host, call):
            continue
        fn = misc.owner(call)
        if fn is not None and host.parents.get(fn) is model:
            marks[fn] = marks.get(fn, 0) + 1
    custom: frozenset[str] | None = None
    for fn, n in marks.items():
        if n < 3:
            continue
        if custom is None:
            custom = _custom_holders(host, misc, facts.holders)
            # a region is "custom" only through custom code (``_custom_possible``), and "half" only
            # through a half cast, which needs one of ``_HALF_WORDS`` among the file's identifiers
            # (``_Paths.half_possible``): with neither, every region is "torch" or nothing, no pair
            # of kinds can be found, and the regions of no function need classifying (a file that
            # only times torch against torch)
            if not _custom_possible(host, custom) and not misc.uses(*_HALF_WORDS):
                return
        yield from _race_in(ctx, host, fn, model, custom)


def _custom_possible(host, custom: frozenset[str]) -> bool:
    """Whether any call can run custom code (``_Paths.call``): through a custom holder (``_self_attr``),
    or ``_custom_call``, which needs a Triton kernel or an extension (``extension_for_call`` finds
    none in a file without one)."""
    return bool(custom or host.extensions or host.triton_kernels)


def _custom_holders(host, misc: MiscFacts, holders) -> frozenset[str]:
    """``self`` attributes that hold custom code: an extension, a function it exports, a Triton kernel,
    or an instance of a class of the file whose methods launch one (``self._cuda_kernel.forward``)."""
    bound = {name for ext in host.extensions for name in ext.bound_to}
    classes = host.classes()
    out = set()
    for attr, h in holders.items():
        root = h.target.split(".", 1)[0]
        if h.kind == "extension" or h.target.startswith(("extfn:", "cupy:", "export:")) or \
                root in bound or root in host.triton_kernels:
            out.add(attr)
        elif h.kind == "local" and h.cls in classes and _class_runs_custom(host, misc, classes[h.cls]):
            out.add(attr)
    return frozenset(out)


def _class_runs_custom(host, facts: MiscFacts, cls: ast.ClassDef) -> bool:
    """A method of ``cls`` calls a compiled extension's function or launches a Triton kernel (from the
    calls grouped by function, not a walk of the class)."""
    by_owner = facts.nodes_by_owner(ast.Call)
    return any(_custom_call(host, c) for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
               for c in by_owner.get(m, ()))


def _custom_call(host, c: ast.Call) -> bool:
    func = c.func
    if isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name) and func.value.id in host.triton_kernels:
        return True
    return host.extension_for_call(c) is not None


def _self_attr(e: ast.AST) -> str | None:
    """``x`` for ``self.x``, ``self.x.forward`` and ``self.x(...)``'s callee."""
    while isinstance(e, ast.Attribute):
        if isinstance(e.value, ast.Name) and e.value.id == "self":
            return e.attr
        e = e.value
    return None


def _race_in(ctx: ScanContext, host, fn: ast.FunctionDef, model: ast.ClassDef,
             custom: frozenset[str]) -> Iterator[Hit]:
    # the module's nodes grouped by function (shared with the stream rules), not a walk of ``fn``
    misc = ctx.patterns
    calls: list[ast.Call] = misc.nodes_by_owner(ast.Call).get(fn, [])  # type: ignore[assignment]
    # an attribute call is a mark only under one of ``_MARK_NAMES`` (``_is_mark``): the others, most
    # of the function's calls, are told from their last name without a call of ``_is_mark`` each
    attr, mark_names = ast.Attribute, _MARK_NAMES
    is_mark = [(type(c.func) is not attr or c.func.attr in mark_names) and _is_mark(host, c)  # type: ignore[attr-defined]
               for c in calls]
    marks = sorted({c.lineno for c, m in zip(calls, is_mark, strict=True) if m})
    if len(marks) < 3:
        return
    # the compares whose innermost function is ``fn``, in the module's order, as
    # ``nodes_by_owner(ast.Compare)`` would group them, without grouping every compare of the
    # file: only those within ``fn``'s lines (its decorators', which it owns too, included) can be ``fn``'s
    first = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
    last = fn.end_lineno or fn.lineno
    compares: list[ast.Compare] = [c for c in host.of_type(ast.Compare)  # type: ignore[misc]
                                   if first <= c.lineno <= last and misc.owner(c) is fn]
    # the decision is a compare after the second mark (``after`` below; ``decide`` falls back to it
    # and is empty only when it is): without one, the regions need not be classified
    after = [c for c in compares if c.lineno > marks[1]]
    if not after:
        return
    # the calls between two consecutive marks are one timed region; regions with nothing that
    # computes (an ``elif`` between ``end.record()`` and the next ``start.record()``) are skipped.
    # Each call falls in at most one region (``a < line < b``, or on ``a`` itself when it is not a
    # mark): one pass that places each by bisection, keeping the calls' order within a region
    inside_of: list[list[ast.Call]] = [[] for _ in marks[1:]]
    for c, m in zip(calls, is_mark, strict=True):
        i = bisect_right(marks, c.lineno) - 1
        if 0 <= i < len(inside_of) and not (m and marks[i] == c.lineno):
            inside_of[i].append(c)
    regions: list[tuple[int, str]] = []
    paths = _Paths(host, misc, model, custom)
    for a, inside in zip(marks, inside_of, strict=False):
        kind = paths.region_kind(inside)
        if kind is not None:
            regions.append((a, kind))
    kinds = {k for _, k in regions}
    if "custom" in kinds and "torch" in kinds:
        what, other = "the custom kernel", "torch"
    elif ("half" in kinds) and (kinds & {"torch", "custom"}):
        what, other = "a float32 path", "a half-precision path"
    else:
        return
    # the decision follows the last clock read (``if ms < best_ms``); a dispatch on the method's name
    # between the regions (``elif method == "half"``) is not it
    # ... and reads a measured time: ``if max_diff > 1e-3`` (a correctness check) is not the decision
    timed = _timing_names(host, calls)
    # (no timing name: no compare reads one, and the walks are skipped)
    decide = [c for c in after if timed and any(isinstance(n, ast.Name) and n.id in timed for n in subtree(c))] or \
        [c for c in after if c.lineno > marks[-1]] or after
    if not decide:
        return
    node = min(decide, key=lambda c: c.lineno)
    lines = ", ".join(str(line) for line, _ in regions)
    yield ctx.hit(ctx.at(node), args={"function": fn.name, "what": what, "other": other, "lines": lines,
                                      "condition": ast.unparse(node)[:120]},
                  evidence={"regions": [{"line": line, "kind": k} for line, k in regions]})


def _timing_names(host, calls: list[ast.Call]) -> frozenset[str]:
    """Names assigned a measured time: a clock read (``dt = time.perf_counter() - t0``) or an
    ``elapsed_time`` of two events; found from those calls up to their statement, not by a walk."""
    out = set()
    parents = host.parents
    for c in calls:
        if not ((isinstance(c.func, ast.Attribute) and c.func.attr == "elapsed_time") or _is_mark(host, c)):
            continue
        node = parents.get(c)
        while node is not None and not isinstance(node, ast.stmt):
            node = parents.get(node)
        if isinstance(node, ast.Assign):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return frozenset(out)


def _is_mark(host, call: ast.Call) -> bool:
    """A clock read or an event record: the ends of a timed region."""
    func = call.func
    if type(func) is ast.Attribute:
        # ``canonical`` keeps an attribute chain's last name: only those of a clock can resolve to one
        attr = func.attr
        if attr == "record" and not call.args:
            return True
        return attr in _MARK_NAMES and host.canonical(func) in _CLOCKS
    return host.canonical(func) in _CLOCKS


class _Paths:
    """What a timed region runs, call by call: custom code, half precision, torch compute.  A method of
    the model called in a region is classified once from its own calls (two levels deep)."""

    def __init__(self, host, misc, model: ast.ClassDef, custom: frozenset[str]):
        self.host, self.model, self.custom = host, model, custom
        self.by_owner = misc.nodes_by_owner(ast.Call)
        self.memo: dict[ast.AST, tuple[bool, bool, bool]] = {}
        # ``fallback._method`` as a dictionary: the first ``def`` of each name, as its scan finds
        self.methods: dict[str, ast.FunctionDef] = {}
        for stmt in model.body:
            if type(stmt) is ast.FunctionDef:
                self.methods.setdefault(stmt.name, stmt)
        # ``_half`` needs ``half`` / ``bfloat16`` as an attribute, or a dtype whose canonical name
        # ends in ``half`` / ``float16`` / ``bfloat16``: ``canonical`` is syntactic (an attribute
        # chain keeps its last name; a bare name is renamed only by an import, whose names are in
        # ``idents`` too), so a file with none of the three identifiers casts nothing to half and
        # the scope look-ups ``_half`` makes for every argument are skipped
        self.half_possible = misc.uses(*_HALF_WORDS)
        # without custom code no call is custom: the two tests of ``call`` are skipped for each
        self.custom_possible = _custom_possible(host, custom)

    def region_kind(self, calls: list[ast.Call]) -> str | None:
        computes = half = False
        for c in calls:
            k_custom, k_half, k_computes = self.call(c, 0, own_half=False)
            if k_custom:
                return "custom"
            half, computes = half or k_half, computes or k_computes
        # whether the region's own calls cast to half (``_half``, pure: asked in any order gives the
        # same answer) matters only for a region with no custom code that computes and has no half
        # cast in the methods it calls: asked last, and only then (its scope look-ups cost the most)
        if computes and not half and self.half_possible:
            half = any(_half(self.host, c) for c in calls)
        if half and computes:
            return "half"
        return "torch" if computes else None

    def call(self, c: ast.Call, depth: int, own_half: bool = True) -> tuple[bool, bool, bool]:
        """(runs custom code, casts to half, computes with torch) for one call; with ``own_half``
        False, the half cast of the methods it calls only (``region_kind`` asks for the rest)."""
        host = self.host
        if self.custom_possible and (_self_attr(c.func) in self.custom or _custom_call(host, c)):
            return True, False, False
        half, computes = own_half and self.half_possible and _half(host, c), _torch_compute(host, c)
        func = c.func
        fn = self.methods.get(func.attr) if type(func) is ast.Attribute and type(func.value) is ast.Name and \
            func.value.id == "self" else None
        if fn is not None and depth < 2:
            m_custom, m_half, m_computes = self.method(fn, depth + 1)
            if m_custom:
                return True, False, False
            half, computes = half or m_half, computes or m_computes
        return False, half, computes

    def method(self, fn: ast.AST, depth: int) -> tuple[bool, bool, bool]:
        got = self.memo.get(fn)
        if got is None:
            self.memo[fn] = (False, False, False)  # a recursive method: nothing more from the cycle
            custom = half = computes = False
            for c in self.by_owner.get(fn, ()):
                k = self.call(c, depth)
                if k[0]:
                    custom = True
                    break
                half, computes = half or k[1], computes or k[2]
            got = self.memo[fn] = (custom, half, computes)
        return got


def _torch_compute(host, call: ast.Call) -> bool:
    name = host.canonical(call.func)
    return name.startswith("torch.") and classify_torch(name) == "compute"


def _half(host, call: ast.Call, depth: int = 0) -> bool:
    """A cast to half / bfloat16, or a call on a local that holds one (``A16 = A.half()`` before the region)."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in _HALF and not call.args:
        return True
    values = [*call.args, *(k.value for k in call.keywords)]
    if any(host.canonical(v) in _HALF_DTYPES for v in values if isinstance(v, (ast.Attribute, ast.Name))):
        return True
    if depth:
        return False
    for v in values:
        if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name):
            v = v.value  # ``B16.T``
        if isinstance(v, ast.Name):
            found = host.scope_of(v).lookup(v.id, v.lineno)
            if found is not None and found[1] == "assign" and isinstance(found[0], ast.Call) and \
                    _half(host, found[0], 1):
                return True
    return False
