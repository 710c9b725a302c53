"""Rules over Triton kernels and their launches (HS3xx), built on ``ctx.triton``.

Value guards inside kernels (class 1), shapes baked into aranges and loop bounds (2), outputs no
store reaches (7), stores into the caller's inputs (13), half-precision casts and TF32 dots (14),
and loops that stride past most of a reduction (15).  Each rule reads ``TritonFacts``; none walks
the tree itself.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterator

from ..context import Hit, ScanContext
from ..model import Confidence, Severity
from ..triton.facts import Access, Arange, KernelFacts, Launch, TritonFacts

_UNINITIALISED = {"torch.empty", "torch.empty_like", "torch.empty_strided", "Tensor.new_empty",
                  "Tensor.new_empty_strided"}
_LOW = ("float16", "bfloat16", "float8")


def _facts(ctx: ScanContext) -> TritonFacts | None:
    return ctx.triton if ctx.host is not None and ctx.host.triton_kernels else None


# ---------------------------------------------------------------------- HS301
def triton_value_guard(ctx: ScanContext) -> Iterator[Hit]:
    """HS301: an ``if`` on loaded values that returns early or stores in one arm only."""
    tf = _facts(ctx)
    if tf is None:
        return
    for k in tf.kernels.values():
        for g in k.guards:
            if not (g.returns or g.store_asymmetry):
                continue
            what = "returns early" if g.returns else "stores in one arm only"
            if g.depends_on == "reduction":
                yield ctx.hit(ctx.at(g.node.test), args={
                    "kernel": k.name, "what": what,
                    "on": "a reduction of the loaded block (a statistic of the data, e.g. tl.min / tl.max / tl.sum)"},
                    evidence={"kernel": k.name, "depends_on": g.depends_on})
            else:
                yield ctx.hit(ctx.at(g.node.test), args={
                    "kernel": k.name, "what": what,
                    "on": "a loaded scalar (legitimate for sparse routing indices, a shortcut for data values)"},
                    severity=Severity.WARNING, confidence=Confidence.LOW,
                    evidence={"kernel": k.name, "depends_on": g.depends_on})


# ---------------------------------------------------------------------- HS302
def _uses(k: KernelFacts, a: Arange) -> list[Access]:
    return [acc for acc in k.accesses if any(x.node is a.node for x in acc.aranges)]


def _constexpr_sources(tf: TritonFacts, k: KernelFacts, name: str) -> list[tuple[int, str, ast.AST | None]]:
    """Values a constexpr takes: (value, where, launch call) for each launch, or its default."""
    out: list[tuple[int, str, ast.AST | None]] = []
    for launch in tf.launches_of(k.name):
        v = launch.constexprs.get(name)
        if isinstance(v, int):
            out.append((v, f"{name}={v} passed at line {launch.call.lineno}", launch.call))
    if not out:
        v = k.constexpr_value(name)
        if isinstance(v, int):
            # no default: the value is the one every autotune config fixes (tuning only the warps)
            tuned = not isinstance(k.constexpr_params.get(name), int) and k.autotune_values.get(name)
            out.append((v, f"every autotune config's {name}={v}" if tuned else f"the default {name}={v}", None))
    return out


def triton_hardcoded_shape(ctx: ScanContext) -> Iterator[Hit]:
    """HS302: arange widths and loop bounds in a kernel equal to the task's distinctive dims."""
    tf = _facts(ctx)
    ref = ctx.reference
    if tf is None or ref is None:
        return
    dims = ref.distinctive_dims
    if not dims:
        return
    names = ref.dim_names()
    for k in tf.kernels.values():
        for a in k.aranges:
            if isinstance(a.end, int):
                sources = [(a.end, f"the literal {a.end}", None)] if a.end in dims else []
            elif isinstance(a.end, str):
                sources = [s for s in _constexpr_sources(tf, k, a.end) if s[0] in dims]
            else:
                sources = []
            if not sources:
                continue
            uses = _uses(k, a)
            if not uses:
                continue
            value, where, _ = sources[0]
            dim = f"{value}" + (f" (`{names[value]}` in the reference)" if value in names else "")
            if any(not u.masked for u in uses):
                yield ctx.hit(ctx.at(a.node), args={
                    "kernel": k.name, "what": f"tl.arange width {dim}", "where": where,
                    "why": "and the loads/stores it addresses are unmasked: any other size reads and writes out of "
                           "bounds or leaves elements out"}, evidence={"value": value, "masked": False})
            elif not any(u.loop is not None for u in uses):
                yield ctx.hit(ctx.at(a.node), args={
                    "kernel": k.name, "what": f"tl.arange width {dim}", "where": where,
                    "why": "with no loop over the dimension: a larger size silently computes only the first "
                           f"{value} elements"}, severity=Severity.WARNING, confidence=Confidence.MEDIUM,
                    evidence={"value": value, "masked": True})
        yield from _constant_grids(ctx, tf, k, dims, names)
        for loop in k.loops:
            if loop.stop is None:
                continue
            if loop.stop_value is not None and isinstance(loop.stop, ast.Constant):
                sources = [(loop.stop_value, f"the literal {loop.stop_value}", None)] if loop.stop_value in dims else []
            elif isinstance(loop.stop, ast.Name) and loop.stop.id in k.constexpr_params:
                sources = [s for s in _constexpr_sources(tf, k, loop.stop.id) if s[0] in dims]
            else:
                sources = []
            if sources:
                value, where, _ = sources[0]
                dim = f"{value}" + (f" (`{names[value]}` in the reference)" if value in names else "")
                yield ctx.hit(ctx.at(loop.node), args={
                    "kernel": k.name, "what": f"a loop bound of {dim}", "where": where,
                    "why": "instead of a size argument: other shapes run the wrong number of iterations"},
                    evidence={"value": value, "loop": True})


def _grid_literals(ctx: ScanContext, launch: Launch) -> list[int]:
    """Integer literals the grid is computed from (through one local name)."""
    g = launch.grid
    if g is None:
        return []
    if isinstance(g, ast.Name) and launch.function is not None:
        defs = ctx.patterns.flow(launch.function).defs.get(g.id, [])
        g = defs[0] if len(defs) == 1 else g
    return [n.value for n in ast.walk(g) if isinstance(n, ast.Constant) and isinstance(n.value, int)
            and not isinstance(n.value, bool)]


def _constant_grids(ctx: ScanContext, tf: TritonFacts, k: KernelFacts, dims: frozenset[int],
                    names: dict[int, str]) -> Iterator[Hit]:
    """A constant launch grid built from a task dim, or sized for exactly one test input."""
    ref = ctx.reference
    numels = {math.prod(s.shape): s for s in ref.inputs if s.shape and all(isinstance(d, int) for d in s.shape)}
    for launch in tf.launches_of(k.name):
        if launch.grid_value is None:
            continue
        hard = [v for v in _grid_literals(ctx, launch) if v in dims]
        if hard:
            v = hard[0]
            dim = f"{v}" + (f" (`{names[v]}` in the reference)" if v in names else "")
            yield ctx.hit(ctx.at(launch.call), args={
                "kernel": k.name, "what": f"a constant grid {launch.grid_value}", "where": f"the literal {dim}",
                "why": "instead of the input's size: other shapes launch the wrong number of programs"},
                evidence={"grid": list(launch.grid_value), "literal": v})
            continue
        stores = [s for s in k.stores if not s.block_ptr and s.aranges]
        if not stores or not k.program_ids or k.loops or any(s.masked for s in stores):
            continue
        covered = _coverage(k, launch, stores[:1])
        if covered is not None and covered in numels:
            yield ctx.hit(ctx.at(launch.call), args={
                "kernel": k.name, "what": f"a constant grid {launch.grid_value} with unmasked stores",
                "where": f"programs x block = {covered} elements, exactly a test input's size",
                "why": "so any other size is written out of bounds or only in part"},
                evidence={"grid": list(launch.grid_value), "covered": covered})


# ---------------------------------------------------------------------- HS303 / HS304
def _returned(ctx: ScanContext, fn: ast.AST | None, root: str | None) -> bool:
    if root is None:
        return False
    facts = ctx.patterns
    for ret in facts.nodes_by_owner(ast.Return).get(fn, ()):
        if ret.value is not None and any(isinstance(n, ast.Name) and n.id == root for n in ast.walk(ret.value)):
            return True
    return False


def _written_elsewhere(ctx: ScanContext, tf: TritonFacts, launch: Launch, root: str) -> bool:
    """Another launch whose kernel stores to it, or a host call that takes it (copy_, out=)."""
    for other in tf.launches:
        if other is launch or other.function is not launch.function:
            continue
        k = tf.kernels[other.kernel]
        for arg in other.args:
            if arg.root == root and arg.param and k.stores_to(arg.param):
                return True
    facts = ctx.patterns
    launch_calls = {id(x.call) for x in tf.launches}
    for call in facts.nodes_by_owner(ast.Call).get(launch.function, ()):
        if id(call) in launch_calls:
            continue
        f = call.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == root and (
                f.attr.endswith("_") and not f.attr.startswith("_")):
            return True
        args = list(call.args) + [kw.value for kw in call.keywords]
        if any(isinstance(a, ast.Name) and a.id == root for a in args) and ctx.host.canonical(f) not in (
                "len", "print", "isinstance", "id", "torch.empty_like", "torch.zeros_like"):
            return True  # handed to a helper or an op that may fill it
    return False


def _numel(ctx: ScanContext, launch: Launch, root: str) -> int | None:
    """Elements of an ``empty_like(x)`` output, from the reference's shape for input ``x``."""
    ref = ctx.reference
    facts = ctx.patterns
    if ref is None or launch.function is None or facts.forward is None:
        return None
    for d in facts.flow(launch.function).defs.get(root, []):
        if isinstance(d, ast.Call) and ctx.host.canonical(d.func) == "torch.empty_like" and d.args and isinstance(
                d.args[0], ast.Name):
            src = d.args[0].id
            fwd = [p for p in facts.flow(facts.forward).params if p not in ("self", "cls")]
            if src in fwd:
                i = fwd.index(src)
            else:
                # x = x.contiguous() keeps the name; a helper's parameter named like forward's
                return None
            if i < len(ref.inputs) and ref.inputs[i].shape and all(isinstance(s, int) for s in ref.inputs[i].shape):
                return math.prod(ref.inputs[i].shape)  # type: ignore[arg-type]
    return None


def triton_unwritten_output(ctx: ScanContext) -> Iterator[Hit]:
    """HS303: an uninitialised output handed to a kernel that never stores to it (or whose grid is too small)."""
    tf = _facts(ctx)
    if tf is None:
        return
    for launch in tf.launches:
        k = tf.kernels[launch.kernel]
        stored_roots = {a.root for a in launch.args if a.root and a.param and k.stores_to(a.param)}
        for arg in launch.args:
            if arg.source != "allocation" or arg.detail not in _UNINITIALISED or arg.param is None:
                continue
            if arg.param not in k.params or arg.param in k.constexpr_params:
                continue
            if not _returned(ctx, launch.function, arg.root):
                continue
            stores = k.stores_to(arg.param)
            if not stores and arg.root in stored_roots:
                continue  # the same buffer is also passed through a parameter the kernel stores to
            if not stores:
                if arg.root and _written_elsewhere(ctx, tf, launch, arg.root):
                    continue
                yield ctx.hit(ctx.at(launch.call), args={
                    "arg": arg.root or ast.unparse(arg.expr), "param": arg.param, "kernel": k.name,
                    "why": f"{k.name} never stores to `{arg.param}`"},
                    evidence={"param": arg.param, "allocation": arg.detail})
                continue
            covered = _coverage(k, launch, stores)
            numel = _numel(ctx, launch, arg.root) if arg.root else None
            if covered is not None and numel is not None and covered < numel:
                yield ctx.hit(ctx.at(launch.call), args={
                    "arg": arg.root, "param": arg.param, "kernel": k.name,
                    "why": f"the grid {launch.grid_value} covers {covered} of its {numel} elements "
                           f"(one block per program, no loop)"},
                    evidence={"covered": covered, "numel": numel})


def _coverage(k: KernelFacts, launch: Launch, stores: list[Access]) -> int | None:
    """Elements one launch can store: programs x block width, when the kernel has no loop."""
    if launch.grid_value is None or k.loops or len(stores) != 1:
        return None
    s = stores[0]
    if s.block_ptr or not s.aranges:
        return None
    width = 1
    for a in s.aranges:
        end = a.end if isinstance(a.end, int) else k.constexpr_value(a.end, launch.constexprs) if isinstance(
            a.end, str) else None
        if end is None:
            return None
        width *= end - (a.start or 0)
    return math.prod(launch.grid_value) * width


def triton_store_to_input(ctx: ScanContext) -> Iterator[Hit]:
    """HS304: a kernel stores through a pointer that the launch fills with a forward input."""
    tf = _facts(ctx)
    if tf is None:
        return
    ref = ctx.reference
    inplace_ref = bool(ref) and any(op.endswith("_") for op in ref.forward_ops)
    seen: set[int] = set()
    for launch in tf.launches:
        k = tf.kernels[launch.kernel]
        for arg in launch.args:
            if arg.source != "forward-input" or arg.param not in k.pointer_params:
                continue
            for store in k.stores_to(arg.param):
                if id(store.node) in seen:
                    continue
                seen.add(id(store.node))
                yield ctx.hit(ctx.at(store.node), args={
                    "kernel": k.name, "param": arg.param, "arg": arg.root or ast.unparse(arg.expr),
                    "line": launch.call.lineno},
                    severity=Severity.WARNING if inplace_ref else None,
                    evidence={"param": arg.param, "launch_line": launch.call.lineno, "reference_inplace": inplace_ref})


# ---------------------------------------------------------------------- HS305 / HS306
def _low_precision_reference(ctx: ScanContext) -> bool:
    from .python.precision import reference_uses_low_precision

    return reference_uses_low_precision(ctx)


def triton_low_precision_cast(ctx: ScanContext) -> Iterator[Hit]:
    """HS305: loaded data cast to float16 / bfloat16 / float8 (or a half-precision dot) for a float32 task."""
    tf = _facts(ctx)
    ref = ctx.reference
    if tf is None or ref is None or not ref.is_fp32 or _low_precision_reference(ctx):
        return
    for k in tf.kernels.values():
        sites: list[tuple[ast.AST, str]] = [(c.node, c.dtype) for c in k.casts if c.dtype in _LOW and c.value_derived]
        sites += [(d.node, d.out_dtype) for d in k.dots if d.out_dtype in _LOW]
        if not sites:
            continue
        sites.sort(key=lambda s: (s[0].lineno, s[0].col_offset))
        node, dtype = sites[0]
        more = f" (and {len(sites) - 1} more in this kernel)" if len(sites) > 1 else ""
        yield ctx.hit(ctx.at(node), args={"kernel": k.name, "dtype": dtype, "more": more},
                      evidence={"dtype": dtype, "lines": [n.lineno for n, _ in sites]})


def triton_tf32_dot(ctx: ScanContext) -> Iterator[Hit]:
    """HS306: tl.dot on float32 operands without input_precision="ieee" (Triton's default is TF32)."""
    tf = _facts(ctx)
    ref = ctx.reference
    if tf is None or ref is None or not ref.is_fp32 or _low_precision_reference(ctx):
        return
    for k in tf.kernels.values():
        for d in k.dots:
            if d.allow_tf32 is False or d.input_precision in ("ieee", "tf32x3", "bf16x3", "bf16x6"):
                continue
            if any(c in _LOW for c in d.operand_casts if c):
                continue  # HS305 reports the half-precision operands
            explicit = d.allow_tf32 is True or d.input_precision == "tf32"
            how = ("asks for TF32 explicitly" if explicit else
                   "leaves input_precision at its default, which for float32 operands is TF32")
            yield ctx.hit(ctx.at(d.node), args={"kernel": k.name, "how": how},
                          confidence=Confidence.HIGH if explicit else Confidence.MEDIUM,
                          evidence={"explicit": explicit, "allow_tf32": d.allow_tf32,
                                    "input_precision": d.input_precision})


# ---------------------------------------------------------------------- HS307
def _symbolic(expr: ast.AST | None, known: dict[str, int] | None = None) -> tuple[int, str | None] | None:
    """``4 * BLOCK`` -> (4, "BLOCK"); ``BLOCK`` -> (1, "BLOCK"); ``16`` -> (16, None).

    ``known`` maps constexprs with one known value to it (``SAMPLE * BLOCK`` with SAMPLE=4 -> (4, "BLOCK")).
    """
    if isinstance(expr, ast.Constant) and isinstance(expr.value, int) and not isinstance(expr.value, bool):
        return expr.value, None
    if isinstance(expr, ast.Name):
        if known and expr.id in known:
            return known[expr.id], None
        return 1, expr.id
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mult):
        a, b = _symbolic(expr.left, known), _symbolic(expr.right, known)
        if a and b and (a[1] is None or b[1] is None):
            return a[0] * b[0], a[1] or b[1]
        if a and b and known is not None:
            # two symbols: keep the one an arange uses, fold the other when it has one value
            return None
    return None


def _known_constexprs(tf: TritonFacts, k: KernelFacts) -> dict[str, int]:
    out: dict[str, int] = {}
    for name in k.constexpr_params:
        vals = {v for v, _, _ in _constexpr_sources(tf, k, name)}
        if len(vals) == 1:
            out[name] = next(iter(vals))
    return out


def _step(tf: TritonFacts, k: KernelFacts, loop) -> int | None:
    if loop.step_value is not None:
        return loop.step_value
    sym = _symbolic(loop.step)
    if sym is not None and sym[1] is not None:
        vals = {v for v, _, _ in _constexpr_sources(tf, k, sym[1])}
        return sym[0] * min(vals) if vals else None
    return None


def _width(tf: TritonFacts, k: KernelFacts, a: Arange) -> int | None:
    if isinstance(a.end, int):
        return a.end - (a.start or 0)
    if isinstance(a.end, str):
        vals = {v for v, _, _ in _constexpr_sources(tf, k, a.end)}
        return max(vals) - (a.start or 0) if vals else None
    return None


def _symbolic_ratio(loop, aranges: tuple[Arange, ...], known: dict[str, int]) -> int | None:
    """Step / widest arange when both are multiples of the same constexpr (``range(0, N, 4 * BLOCK)``
    over ``tl.arange(0, BLOCK)``): the ratio holds whatever value BLOCK takes."""
    if not aranges or any(not isinstance(a.end, str) or a.start for a in aranges):
        return None
    ends = {a.end for a in aranges}
    if len(ends) != 1:
        return None
    symbol = next(iter(ends))
    sym = _symbolic(loop.step, {n: v for n, v in known.items() if n != symbol})
    if sym is None or sym[1] != symbol:
        return None
    return sym[0]


def _within(loop_node: ast.AST, node: ast.AST) -> bool:
    return any(n is node for n in ast.walk(loop_node))


def _mentions(tree: ast.AST, name: str | None, k: KernelFacts) -> bool:
    """``tree`` uses ``name`` directly or through local definitions."""
    if name is None:
        return False
    seen: set[str] = set()
    todo = [tree]
    while todo:
        t = todo.pop()
        for n in ast.walk(t):
            if isinstance(n, ast.Name):
                if n.id == name:
                    return True
                if n.id in k.defs and n.id not in seen and n.id != name:
                    seen.add(n.id)
                    todo.extend(d for d in k.defs[n.id] if not isinstance(d, ast.Call) or not (
                        isinstance(d.func, ast.Name) and d.func.id == "range"))
    return False


def triton_strided_partial(ctx: ScanContext) -> Iterator[Hit]:
    """HS307: a reduction loop whose step exceeds what each iteration loads; arange * constant sampling."""
    tf = _facts(ctx)
    if tf is None:
        return
    for k in tf.kernels.values():
        for loop in k.loops:
            step = _step(tf, k, loop)
            if loop.var is None or (step is not None and step <= 1):
                continue
            known = _known_constexprs(tf, k)
            if step is None and _symbolic(loop.step, known) is None and not isinstance(loop.step, ast.BinOp):
                continue
            accumulates = any(isinstance(n, ast.AugAssign) for n in ast.walk(loop.node))
            if not accumulates:
                continue
            for acc in k.loads:
                if not _within(loop.node, acc.node) or acc.block_ptr:
                    continue
                ptr = acc.node.args[0] if acc.node.args else acc.node
                if not _mentions(ptr, loop.var, k):
                    continue
                ratio = _symbolic_ratio(loop, acc.aranges, known)
                if ratio is not None:
                    if ratio > 1:
                        yield ctx.hit(ctx.at(loop.node), args={
                            "kernel": k.name, "what": f"the loop steps by {ast.unparse(loop.step)} but each iteration "
                                                      f"loads tl.arange(0, {acc.aranges[0].end})",
                            "frac": f"{ratio - 1} of every {ratio}"},
                            evidence={"ratio": ratio, "load_line": acc.node.lineno})
                        break
                    continue
                widths = [_width(tf, k, a) for a in acc.aranges]
                if step is None or any(w is None for w in widths):
                    continue
                width = max(widths) if widths else 1
                if width < step:
                    yield ctx.hit(ctx.at(loop.node), args={
                        "kernel": k.name, "what": f"the loop steps by {step} but each iteration loads {width} "
                                                  f"element{'s' if width > 1 else ''}",
                        "frac": f"{step - width} of every {step}"},
                        evidence={"step": step, "width": width, "load_line": acc.node.lineno})
                    break
        if k.reductions:
            for acc in k.loads:
                if acc.multipliers and not acc.block_ptr:
                    c = max(acc.multipliers)
                    yield ctx.hit(ctx.at(acc.node), args={
                        "kernel": k.name, "what": f"the load's offsets are tl.arange(...) * {c}",
                        "frac": f"{c - 1} of every {c}"},
                        severity=Severity.WARNING, confidence=Confidence.LOW,
                        evidence={"multiplier": c})
