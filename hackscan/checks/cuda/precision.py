"""Doing less than the task asks: reduced precision (HS214), fast-math builds (HS215) and strided
loops that sample instead of reduce (HS216)."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Container, Iterator
from fractions import Fraction

import tree_sitter as ts

from ...context import Hit, Pos, ScanContext
from ...cuda import names
from ...cuda.facts import CudaFacts
from ...cuda.flow import CudaFlow, pointer_base, strip_casts
from ...cuda.parser import call_args, contains, identifiers, nodes_of_kind, strip_parens, text
from ...cuda.records import Call, Function, pos_of
from ...model import Confidence, Severity
from ...python.module import subtree

_HALF_CAST = re.compile(rb"static_cast\s*<\s*(at::Half|c10::Half|__half|half|__nv_bfloat16|at::BFloat16|c10::BFloat16)"
                        rb"\s*>\s*\(|\(\s*(__half|half|at::Half|c10::Half|__nv_bfloat16)\s*\)\s*(?=[\w(])")
_HALF_DTYPE = re.compile(r"\b(kHalf|kFloat16|kBFloat16|at::Half|at::BFloat16|c10::Half|torch::Half|ScalarType::Half|"
                         r"ScalarType::BFloat16)\b")
_HALF_FRAGMENT = re.compile(r"fragment<.*\b(half|__half|__nv_bfloat16|bfloat16)\b")
_HALF_NAME = re.compile(r"\b(half|__half|half2|__half2|__nv_bfloat16|__nv_bfloat162|at::Half|c10::Half)\b")
_TF32 = re.compile(r"precision::tf32|\btf32\b|cvt\.rna\.tf32")


def _half_typed(fn: Function) -> bool:
    """A device function or kernel that takes only half-precision data, or a template
    specialisation for a half type: the half path of a type-generic extension, which fp32 inputs
    never reach."""
    if fn.kind == "host":
        return False
    decl = fn.node.child_by_field_name("declarator")
    name_node = decl.child_by_field_name("declarator") if decl is not None else None
    if name_node is not None and name_node.type == "template_function" and _HALF_NAME.search(text(name_node)):
        return True
    ret = fn.node.child_by_field_name("type")
    parent = fn.node.parent
    if (ret is not None and _HALF_NAME.search(text(ret)) and parent is not None
            and parent.type == "template_declaration"):
        return True
    data = [p for p in fn.params if p.pointer or "half" in p.type.lower() or "float" in p.type or
            "bfloat16" in p.type.lower()]
    return bool(data) and all(re.search(r"half|bfloat16|Half|BFloat16", p.type) and not re.search(
        r"\bfloat\b", p.type) for p in data)


def _narrowing(fn: Function, halves: bool = True) -> list[tuple[ts.Node, str]]:
    """``halves``: may the unit's text name a half type ("alf" or "loat16" in it)?  The casts'
    scan needs one, so a caller that knows the unit has none spares reading the body's text."""
    # a half-typed function narrows nothing; asked only of a function that has a candidate (most
    # have none, and ``_half_typed`` reads the declaration and every parameter's type)
    out = _narrowing_sites(fn, halves)
    if out and _half_typed(fn):
        return []
    return out


def _narrowing_sites(fn: Function, halves: bool) -> list[tuple[ts.Node, str]]:
    out: list[tuple[ts.Node, str]] = []
    for c in fn.calls:
        if not c.is_method and c.base in names.TO_HALF:
            if all(strip_casts(a).type in ("number_literal", "unary_expression") and
                   "(" not in text(a) for a in c.args):
                continue  # a constant (``__float2half(0.0f)``), not data
            out.append((c.node, f"narrows fp32 values with `{c.base}`"))
        elif c.is_method and fn.kind == "host":
            if c.base in ("half", "bfloat16") and not c.args:
                out.append((c.node, f"casts a tensor with `.{c.base}()`"))
            elif c.base in ("to", "toType", "type") and any(_HALF_DTYPE.search(text(a)) for a in c.args):
                out.append((c.node, f"casts a tensor to half precision (`{' '.join(text(c.node).split())[:50]}`)"))
    if halves and fn.body is not None and (fn.kind != "host" or fn.of_type("for_statement")):
        # ``static_cast<at::Half>(acc)`` / ``(__half)v``: rounding an fp32 value through half
        raw = fn.body.text or b""
        # every match names a half type, so holds "alf" (half, Half) or "loat16" (bfloat16,
        # BFloat16): two byte searches spare the regex, which tries every "(" of the body
        matches = _HALF_CAST.finditer(raw) if (b"alf" in raw or b"loat16" in raw) else ()
        for m in matches:
            tail = raw[m.end():m.end() + 24].lstrip()
            if re.match(rb"[\d.]+f?\s*\)", tail):
                continue  # a literal
            node = fn.body.descendant_for_byte_range(fn.body.start_byte + m.start(), fn.body.start_byte + m.end())
            if node is not None:
                cast = m.group(0).decode(errors="replace").strip()
                out.append((node, f"rounds fp32 values through half precision (`{cast}...`)"))
                break
    return out


# the float's bits read as an integer: ``memcpy(&bits, &v, 4)``, ``__float_as_uint(v)``, a cast pointer
_FLOAT_BITS = re.compile(rb"memcpy|__float_as_u?int|reinterpret_cast\s*<\s*(unsigned|uint32_t|int32_t|int)\b|"
                         rb"\(\s*(unsigned|uint32_t|int32_t|int)\s*\*\s*\)|union\b")
_HEX_MASK = re.compile(rb"0[xX][0-9a-fA-F]{8}[uU]?")


def _mantissa_mask(fn: Function) -> tuple[ts.Node, int] | None:
    """``bits &= 0xFFFF0000u`` on a float's bit pattern: the sign and exponent kept, the low
    mantissa bits cleared (16: bfloat16, 13: TF32).  Masks that keep any of them (``0x7FFFFFFF``,
    an absolute value) or drop the sign or exponent (``0x7F800000``, an exponent test) are not it."""
    if fn.body is None:
        return None
    raw = fn.body.text or b""
    if b"0x" not in raw and b"0X" not in raw:
        return None
    if not _FLOAT_BITS.search(raw):
        return None
    for m in _HEX_MASK.finditer(raw):
        v = int(m.group(0).rstrip(b"uU"), 16)
        if v >> 23 != 0x1FF:
            continue  # sign and exponent not both kept
        low = (v & -v).bit_length() - 1 if v else 0  # trailing zero bits: the cleared mantissa
        if low < 8 or v & ((1 << 23) - 1) != ((1 << 23) - 1) & ~((1 << low) - 1):
            continue
        node = fn.body.descendant_for_byte_range(fn.body.start_byte + m.start(), fn.body.start_byte + m.end())
        while node is not None and node.parent is not None and node.type not in (
                "assignment_expression", "binary_expression", "init_declarator"):
            node = node.parent
        if node is not None:
            return node, low
    return None


def _half_math(fn: Function, fragments: bool = True) -> list[ts.Node]:
    """``fragments``: may the unit declare WMMA fragments?  Every match of ``_HALF_FRAGMENT``
    holds "fragment<", so a caller that knows the unit has none spares the declarations' scan."""
    out = [c.node for c in fn.calls if not c.is_method and c.base in names.HALF_MATH and c.base not in (
        "load_matrix_sync", "store_matrix_sync")]
    if fragments:
        for decl in fn.of_type("declaration"):
            tnode = decl.child_by_field_name("type")
            if tnode is not None and _HALF_FRAGMENT.search(text(tnode)):
                out.append(decl)
    return out


def _tf32(fn: Function, mentioned: bool = True) -> list[ts.Node]:
    """``mentioned``: does the unit's text hold "tf32" (both tests below need it)?"""
    out: list[ts.Node] = []
    if not mentioned:
        return out
    for decl in fn.of_type("declaration"):
        tnode = decl.child_by_field_name("type")
        if tnode is not None and "fragment<" in text(tnode) and "precision::tf32" in text(tnode):
            out.append(decl)
    for asm in fn.of_type("gnu_asm_expression"):
        if _TF32.search(text(asm)):
            out.append(asm)
    return out


def cuda_reduced_precision(ctx: ScanContext) -> Iterator[Hit]:
    """HS214."""
    ref = ctx.reference
    if ref is None or ref.dtype != "float32":
        return
    facts = ctx.cuda
    reachable = facts.reachable
    # does an extension compute in half precision anywhere?  Only asked of an extension with a
    # narrowing conversion, so worked out then (and only until one function says yes)
    by_ext_math: dict[str, bool] = {}
    # per unit: does its text hold "fragment<" / "tf32" / a half type's name ("alf" of half and
    # Half, "loat16" of bfloat16 and BFloat16) at all (searched once, not per function; a body's
    # bytes are part of its unit's text, which the tree was parsed from)
    # Each word is searched only when first asked for: "fragment<" only where a function narrows,
    # "tf32" only where none does.
    unit_words: dict[tuple[str, int], bool] = {}
    searches = (lambda src: "fragment<" in src, lambda src: "tf32" in src,
                lambda src: "alf" in src or "loat16" in src)

    def word(unit, i: int) -> bool:
        key = (unit.id, i)
        got = unit_words.get(key)
        if got is None:
            got = unit_words[key] = searches[i](unit.text)
        return got

    def computes_half(ext: str) -> bool:
        got = by_ext_math.get(ext)
        if got is None:
            got = by_ext_math[ext] = any(_half_math(g, word(g.unit, 0)) for g in facts.functions if g.ext == ext)
        return got

    for fn in facts.functions:
        if fn not in reachable:
            continue
        # TF32 switches flip the baseline's precision too
        for c in fn.calls:
            if c.base in names.TF32_CONTROLS and any(text(a) in ("true", "1", '"high"', '"medium"') for a in c.args):
                yield ctx.hit(c.pos, severity=Severity.ERROR, confidence=Confidence.HIGH,
                              args={"function": fn.name, "what": f"turns TF32 on with `{c.name}`"},
                              evidence={"call": c.name})
        narrow = _narrowing(fn, word(fn.unit, 2))
        if narrow:
            node, what = narrow[0]
            computes = computes_half(fn.ext)
            sev = Severity.ERROR if computes else Severity.WARNING
            conf = Confidence.HIGH if computes else Confidence.MEDIUM
            suffix = " and computes in half precision" if computes else ""
            yield ctx.hit(pos_of(fn.unit, node), severity=sev, confidence=conf,
                          args={"function": fn.name, "what": what + suffix},
                          evidence={"conversions": len(narrow), "half_math": computes})
            continue
        masked = _mantissa_mask(fn)
        if masked is not None:
            node, bits = masked
            yield ctx.hit(pos_of(fn.unit, node), severity=Severity.WARNING, confidence=Confidence.MEDIUM,
                          args={"function": fn.name,
                                "what": f"clears the low {bits} mantissa bits of fp32 values through their bit "
                                        f"pattern (`{' '.join(text(node).split())[:50]}`): {23 - bits}-bit mantissa"},
                          evidence={"mask": text(node)[:60], "cleared_bits": bits})
            continue
        tf = _tf32(fn, word(fn.unit, 1))
        if tf:
            yield ctx.hit(pos_of(fn.unit, tf[0]), severity=Severity.WARNING, confidence=Confidence.MEDIUM,
                          args={"function": fn.name, "what": "computes with TF32 tensor cores (10-bit mantissa)"},
                          evidence={"sites": len(tf)})


def cuda_fast_math(ctx: ScanContext) -> Iterator[Hit]:
    """HS215."""
    ref = ctx.reference
    if ref is None or ref.dtype != "float32":
        return
    for x in ctx.cuda.extensions.values():
        for key, values in x.flags.items():
            for flag in values:
                if flag not in names.FAST_MATH_FLAGS:
                    continue
                pos = _flag_position(ctx, x.name, flag)
                if pos is None:
                    continue
                yield ctx.hit(pos, args={"ext": x.name, "flag": flag}, evidence={"argument": key, "flag": flag})
                break


def _flag_position(ctx: ScanContext, ext_name: str, flag: str) -> Pos | None:
    host = ctx.host
    if host is None:
        return None
    ext = next((e for e in host.extensions if e.name == ext_name), None)
    if ext is None:
        return None
    best: ast.Constant | None = None
    for kw in ext.call.keywords:
        for node in subtree(kw.value):
            if isinstance(node, ast.Constant) and node.value == flag:
                best = node
                break
        if best is not None:
            break
    if best is None:
        # the list lives in a variable: the closest literal above the call
        for node in host.of_type(ast.Constant):
            if node.value == flag and node.lineno <= ext.call.lineno and (best is None or node.lineno > best.lineno):
                best = node
    if best is None:
        line, col = host.position(ext.call)
        return Pos(line, col)
    return ctx.at(best)


# ------------------------------------------------------------------------------------- HS216

_VECTOR = re.compile(r"\b(float[248]|double2|int[24]|uint[24]|half2|__half2|__nv_bfloat162|bfloat162|longlong2|"
                     r"char4|uchar4|short[24])\b|reinterpret_cast|__ldg4|ld\.global\.v[24]")
_THREAD_SEEDS = frozenset({"threadIdx", "laneid", "lane_id", "lane"})
_THREAD_CALLS = re.compile(r"thread_rank|__lane_id|laneid|threadIdx")
_BLOCK_CALLS = re.compile(r"blockIdx|group_index|block_rank")
_ACCUM_OPS = frozenset({"+=", "-=", "*=", "|=", "&=", "^="})
_ACCUM_CALLS = re.compile(r"\b(max|min|fmaxf|fminf|fmax|fmin|__hmax|__hmin|atomicAdd|atomicMax)\s*\(")


def _sweep(cands: list[tuple[str, bool, frozenset[str]]], out: set[str]) -> None:
    """The locals derived from the seeds (thread ids by default) through assignment chains: at most
    six sweeps over the locals in source order, a local joining ``out`` when it is seeded or reads a
    member (a local added earlier in a sweep
    counts for the later ones of the same sweep)."""
    changed = True
    rounds = 0
    while changed and rounds < 6:
        changed = False
        rounds += 1
        for name, seeded, reads in cands:
            if name in out:
                continue
            if seeded or not reads.isdisjoint(out):
                out.add(name)
                changed = True


class _Derived:
    """Whether ``name`` is derived from the seeds (``_sweep`` over all of ``fn``'s locals), decided per
    asked name.

    HS216 asks this of a few names (a loop's start and index variables), while the whole set needs
    the identifiers of every value of every local.  Whether a local joins in the sweeps of
    ``_sweep`` (and in which sweep) depends only on the locals it reads, transitively, not on the
    others: the sweeps restricted to that backward cone, in the same order and with the same cap,
    treat every local of the cone as the full sweeps do.  So each question runs the sweeps over the
    asked name's cone only, reading identifiers of those values alone.  A seeded local joins in
    the first sweep whatever it reads, so its reads are not followed."""

    __slots__ = ("_fn", "_seeds", "_calls", "_info", "_known")

    def __init__(self, fn: Function, seeds: frozenset[str] = _THREAD_SEEDS,
                 calls: re.Pattern[str] | None = None) -> None:
        self._fn = fn
        self._seeds = seeds
        self._calls = calls or _THREAD_CALLS
        # local -> (seeded, the identifiers its values read; empty when seeded)
        self._info: dict[str, tuple[bool, frozenset[str]]] = {}
        self._known: dict[str, bool] = {}

    def _local(self, name: str) -> tuple[bool, frozenset[str]]:
        got = self._info.get(name)
        if got is None:
            values = self._fn.assigned[name]
            search = self._calls.search
            if any(search(text(v)) for v in values):
                got = (True, frozenset())
            else:
                got = (False, frozenset(text(i) for v in values for i in identifiers(v)))
            self._info[name] = got
        return got

    def __contains__(self, name: object) -> bool:
        if name in self._seeds:
            return True
        known = self._known.get(name)  # type: ignore[arg-type]
        if known is not None:
            return known
        assigned = self._fn.assigned
        if name not in assigned:
            return False  # never assigned: never a candidate of the sweeps
        seeds = self._seeds
        cone = {name}
        stack = [name]
        while stack:
            seeded, reads = self._local(stack.pop())
            for r in reads:
                if r not in cone and r in assigned and r not in seeds:
                    cone.add(r)
                    stack.append(r)
        out = set(seeds)
        _sweep([(n, *self._local(n)) for n in assigned if n in cone], out)
        for n in cone:
            self._known[n] = n in out
        return self._known[name]  # type: ignore[index]

    def intersects(self, names: set[str]) -> bool:
        return any(n in self for n in names)


def _loop_var(loop: ts.Node) -> tuple[str, ts.Node | None] | None:
    init = loop.child_by_field_name("initializer")
    if init is None:
        return None
    if init.type == "declaration":
        for d in init.children_by_field_name("declarator"):
            if d.type == "init_declarator":
                name = d.child_by_field_name("declarator")
                if name is not None and name.type == "identifier":
                    return text(name), d.child_by_field_name("value")
        return None
    if init.type == "assignment_expression":
        left = init.child_by_field_name("left")
        if left is not None and left.type == "identifier":
            return text(left), init.child_by_field_name("right")
    return None


def _step(loop: ts.Node, var: str) -> ts.Node | None:
    upd = loop.child_by_field_name("update")
    if upd is None or upd.type != "assignment_expression":
        return None
    left = upd.child_by_field_name("left")
    op = upd.child_by_field_name("operator")
    right = upd.child_by_field_name("right")
    if left is None or text(left) != var or op is None or right is None:
        return None
    if op.type == "+=":
        return right
    if op.type == "=" and right.type == "binary_expression":
        rl = right.child_by_field_name("left")
        rop = right.child_by_field_name("operator")
        if rl is not None and text(rl) == var and rop is not None and rop.type == "+":
            return right.child_by_field_name("right")
    return None


def _product_terms(node: ts.Node) -> list[ts.Node]:
    node = node if node.type != "parenthesized_expression" or node.named_child_count != 1 else node.named_children[0]
    if node.type == "binary_expression":
        op = node.child_by_field_name("operator")
        if op is not None and op.type == "*":
            left = node.child_by_field_name("left")
            right = node.child_by_field_name("right")
            if left is not None and right is not None:
                return _product_terms(left) + _product_terms(right)
    return [node]


_LAUNCH_DIM = re.compile(r"(blockDim|gridDim)\.[xyz]")


def _thread_count_term(node: ts.Node, fn: Function, depth: int = 0) -> bool:
    t = text(node)
    if _LAUNCH_DIM.fullmatch("".join(t.split())):
        return True
    if node.type == "identifier" and depth < 3:
        values = fn.assigned.get(t, ())
        return bool(values) and all(all(_thread_count_term(x, fn, depth + 1) or x.type == "number_literal"
                                        for x in _product_terms(v)) for v in values)
    return False


def _launch_blocks(facts: CudaFacts, flow: CudaFlow, kernel: Function) -> set[int | None]:
    out: set[int | None] = set()
    for lc in facts.launches:
        if lc.kernel == kernel.name and lc.ext == kernel.ext:
            v = flow.fold(lc.block, lc.function) if lc.block is not None else None
            out.add(v if isinstance(v, int) else None)
    return out


def cuda_strided_subsample(ctx: ScanContext) -> Iterator[Hit]:
    """HS216."""
    facts = ctx.cuda
    flow = ctx.cuda_flow
    for fn in facts.functions:
        loops = fn.of_type("for_statement")
        if not loops:
            continue
        # each loop's variable, worked out once for both checks and for the inner-loop test, and
        # only for the loops that get that far (most fail a cheaper test first)
        var_of = _loop_vars()
        if fn.kind == "host":
            # CPU extensions: loops in host code that write tensor memory
            if not flow.host_stores(fn):
                continue
            yield from _truncated_loops(ctx, fn, loops, var_of)
            # data pointers are locals there (``const float* row = x.data_ptr<float>() + r * cols``)
            amap = {name: -1 for name, t in fn.local_types.items() if "*" in t}
        else:
            amap = flow.aliases(fn)
        if not amap:
            continue
        if fn.kind != "host":
            yield from _truncated_loops(ctx, fn, loops, var_of)
        # the thread- and block-derived locals (a fixpoint over every local's values) are computed
        # on first need: most strided loops start at a literal and index with the loop variable only
        threads: _Derived | None = None
        by_block: _Derived | None = None
        for loop in loops:
            upd = loop.child_by_field_name("update")
            if upd is None or upd.type != "assignment_expression":
                continue  # ``_step`` finds no step: the loop variable is not needed
            lv = var_of(loop)
            if lv is None:
                continue
            var, start = lv
            step = _step(loop, var)
            if step is None:
                continue
            start_names = [text(i) for i in identifiers(start)] if start is not None else []
            if start_names and threads is None:
                threads = _Derived(fn)
            # ``t2 = block.thread_rank()`` (cooperative groups): the start is the thread's own index
            start_threaded = start is not None and _THREAD_CALLS.search(text(start)) is not None
            for n in start_names if not start_threaded else ():  # a loop, not ``any`` on a generator
                if n in threads:  # type: ignore[operator]
                    start_threaded = True
                    break
            c = flow.fold(step, fn)
            if isinstance(c, int):
                if c <= 1:
                    continue
                if not start_threaded and start_names:
                    if by_block is None:
                        by_block = _Derived(fn, frozenset({"blockIdx"}), _BLOCK_CALLS)
                    if any(n in by_block for n in start_names):
                        continue  # a block-stride loop over rows: the step is (presumably) the grid size
                if start_threaded:
                    blocks = _launch_blocks(facts, flow, fn) if fn.kind == "kernel" else {None}
                    if len(blocks) != 1 or None in blocks:
                        continue
                    b = next(iter(blocks))
                    if not b or c <= b or c % b:
                        continue
                    m = c // b
                else:
                    m = c
            else:
                if not start_threaded:
                    continue
                got = _thread_scaled_step(flow, fn, step)
                if got is None:
                    continue
                m = got
            body = loop.child_by_field_name("body")
            if body is None:
                continue
            btext = text(body)
            if _VECTOR.search(btext) or not (_accumulates(body, fn) or _ACCUM_CALLS.search(btext)):
                continue
            covered, per_array, threads = _strided_reads(fn, body, var, amap, loops, var_of, threads)
            if covered or not per_array:
                continue
            array, reads = max(per_array.items(), key=lambda kv: len(kv[1]))
            if len(reads) >= m:
                continue
            sev = Severity.ERROR if m >= 4 and len(reads) == 1 else Severity.WARNING
            conf = Confidence.HIGH if sev is Severity.ERROR else Confidence.MEDIUM
            yield ctx.hit(pos_of(fn.unit, loop), severity=sev, confidence=conf,
                          args={"function": fn.name, "var": var, "step": m, "reads": len(reads), "array": array,
                                "skipped": m - len(reads)},
                          evidence={"step_expr": text(step), "reads": sorted(reads)})


def _thread_scaled_step(flow: CudaFlow, fn: Function, step: ts.Node) -> int | None:
    """The constant part of a step that is a product of constants and thread counts (``4 * blockDim.x``),
    when it is more than 1 and some thread count is in it; else None."""
    terms = _product_terms(step)
    lits = [flow.fold(t, fn) for t in terms]
    if not all(isinstance(v, int) or _thread_count_term(t, fn) for t, v in zip(terms, lits, strict=True)):
        return None
    m = 1
    for v in lits:
        if isinstance(v, int):
            m *= v
    if m <= 1 or not any(v is None for v in lits):
        return None
    return m


def _strided_reads(fn: Function, body: ts.Node, var: str, amap: dict[str, int],
                   loops: list[ts.Node], var_of: Callable[[ts.Node], tuple[str, ts.Node | None] | None],
                   threads: _Derived | None) -> tuple[bool, dict[str, set[str]], _Derived | None]:
    """The distinct reads indexed by ``var`` in a strided loop's body, per array; True first when an
    index also uses an inner loop's variable or a thread-derived local (the step's gaps are covered).
    The thread-derived locals, computed here on first need, are handed back for the next loop."""
    # the loops inside the body are among the function's loops (the body's walk collected
    # every one), so their variables are known already
    inner_vars: set[str] = set()
    for inner in loops:
        if contains(body, inner):
            got = var_of(inner)
            if got is not None:
                inner_vars.add(got[0])
    per_array: dict[str, set[str]] = {}
    for sub in _subscripts(body):
        idx = sub.child_by_field_name("indices")
        if idx is None:
            continue
        idx_text = text(idx)
        if var not in idx_text:
            continue  # every identifier's text is part of the index's: ``var`` is not used
        used = {text(i) for i in identifiers(idx)}
        if var not in used:
            continue
        base = pointer_base(sub, amap)
        if base is None or text(base) not in amap:
            continue
        if used & inner_vars:
            return True, per_array, threads
        others = used - {var}
        if others:
            if threads is None:
                threads = _Derived(fn)
            if threads.intersects(others):
                return True, per_array, threads
        per_array.setdefault(text(base), set()).add("".join(idx_text.split()))
    return False, per_array, threads


_PAIRS = re.compile(r"\b(float2|double2|int2|half2|__half2|__nv_bfloat162|bfloat162)\b")
# a k-wide vector type in a loop body: each step covers k elements (``float4`` over ``n >> 2``)
_WIDE = re.compile(r"\b(?:float|double|u?int|u?short|u?char|u?long|longlong|half|__half|__nv_bfloat16|bfloat16)"
                   r"([248])\b")


def _runtime_name(name: str, fn: Function, consts: Container[str], depth: int = 0) -> bool:
    """A size known only at run time: a scalar parameter, or a local computed from one (in host
    code every non-constant name is, lambda parameters of ``at::parallel_for`` included)."""
    if name in consts:
        return False
    if fn.kind == "host":
        return True
    p = fn.param(name)
    if p is not None:
        return not p.pointer
    if depth > 3:
        return False
    for v in fn.assigned.get(name, ()):
        for i in identifiers(v):
            if _runtime_name(text(i), fn, consts, depth + 1):
                return True
    return False


def _loop_vars() -> Callable[[ts.Node], tuple[str, ts.Node | None] | None]:
    """``_loop_var`` of the loops of one function, each worked out once, when first asked."""
    known: dict[int, tuple[str, ts.Node | None] | None] = {}

    def var_of(loop: ts.Node) -> tuple[str, ts.Node | None] | None:
        key = loop.id
        if key in known:
            return known[key]
        got = known[key] = _loop_var(loop)
        return got

    return var_of


def _fraction_of(node: ts.Node | None, fn: Function, flow: CudaFlow) -> tuple[str, Fraction] | None:
    """``(size, part)`` when ``node`` is a fixed fraction < 1 of one name: ``n / 2``, ``n >> kShift``,
    ``n * 0.5f``, ``n - n / kSplit``, the divisors and shifts folded through the constants (a
    ``constexpr`` or ``#define`` hides the literal as well as a template argument does)."""
    node = strip_parens(node) if node is not None else None
    if node is None or node.type != "binary_expression":
        return None
    op = node.child_by_field_name("operator")
    left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
    if op is None or left is None or right is None:
        return None
    o = op.type
    left = strip_parens(left)
    if o == "-":
        # ``n - n / k``: the rest of ``n`` once a fraction of it is taken off
        if left.type != "identifier":
            return None
        sub = _fraction_of(right, fn, flow)
        if sub is None or sub[0] != text(left):
            return None
        return text(left), 1 - sub[1]
    if o == "*" and left.type != "identifier":
        left, right = strip_parens(right), left
    if left.type != "identifier":
        return None
    c = flow.fold(right, fn)
    if isinstance(c, bool) or c is None:
        return None
    if o == "/" and isinstance(c, int) and c >= 2:
        return text(left), Fraction(1, c)
    if o == ">>" and isinstance(c, int) and 1 <= c <= 16:
        return text(left), Fraction(1, 1 << c)
    if o == "*" and isinstance(c, float) and 0 < c < 1:
        return text(left), Fraction(c).limit_denominator(64)
    return None


def _part_words(part: Fraction) -> str:
    return "half" if part == Fraction(1, 2) else f"{part.numerator}/{part.denominator}"


def _scaled_index(var: str, btext: str, fn: Function, flow: CudaFlow) -> int:
    """The largest constant the loop variable is multiplied by in the body (``4 * i``,
    ``i * VEC``), 1 when none: a step then covers that many elements."""
    env = flow.facts.extensions[fn.ext].env_for(fn)
    best = 1
    v = re.escape(var)
    for m in re.finditer(rf"\b{v}\s*\*\s*(\w+)|\b(\w+)\s*\*\s*{v}\b", btext):
        tok = m.group(1) or m.group(2)
        k = int(tok) if tok.isdigit() else env.get(tok)
        if k is None and tok in fn.assigned and len(fn.assigned[tok]) == 1:
            k = flow.fold(fn.assigned[tok][0], fn)
        if isinstance(k, int) and k > best:
            best = k
    return best


def _reaches_rest(size: str, btext: str, fn: Function, flow: CudaFlow, starts: list[str],
                  part: Fraction = Fraction(1, 2), var: str | None = None, bound: str = "") -> bool:
    """Does the body or a sibling pass reach the part of ``size`` the bound leaves out: a mirror
    (``n - 1 - i``), a partner (``i + n / 2``), two-wide loads, a local holding a fraction of
    ``size`` read in the body, or another loop / ``parallel_for`` that starts where this one stops
    (the tail pass)?"""
    if _PAIRS.search(btext) or re.search(rf"\b{re.escape(size)}\s*-", btext):
        return True  # a mirror (``n - 1 - i``)
    # a partner at the bound (``i + n / 2``, ``i + (n >> kShift)``): the bound's own expression in
    # the body (another size arithmetic there, ``TILE / ROWS`` for an inner loop, reaches nothing)
    if bound and " ".join(bound.strip("()").split()) in " ".join(btext.split()):
        return True
    if part == Fraction(1, 2) and re.search(rf"\b{re.escape(size)}\s*(/\s*2\b|>>\s*1\b)", btext):
        return True
    if any(int(m.group(1)) * part >= 1 for m in _WIDE.finditer(btext)):
        return True  # vector loads of the bound's width: ``float4`` over ``n / 4`` covers all of ``n``
    if var is not None and _scaled_index(var, btext, fn, flow) * part >= 1:
        return True  # ``x[4 * i + j]``: each step covers several elements
    for name, vals in fn.assigned.items():
        if any(_fraction_of(v, fn, flow) is not None and size in text(v) for v in vals) \
                and re.search(rf"\b{re.escape(name)}\b", btext):
            return True
    return any(re.search(rf"\b{re.escape(size)}\b", s) for s in starts)


def _loop_starts(fn: Function, loops: list[ts.Node],
                 var_of: Callable[[ts.Node], tuple[str, ts.Node | None] | None]) -> list[str]:
    """Where the function's loops and ``parallel_for`` ranges start, when not at a literal (the
    names a tail pass starts from), locals followed one step."""
    out = []
    for loop in loops:
        lv = var_of(loop)
        if lv is not None and lv[1] is not None and lv[1].type != "number_literal":
            out.append(text(lv[1]))
    for c in fn.calls:
        if c.base in ("parallel_for", "parallel_reduce"):
            args = call_args(c.node)
            if args and args[0].type != "number_literal":
                out.append(text(args[0]))
    for s in list(out):
        if re.fullmatch(r"\w+", s):
            out.extend(text(v) for v in fn.assigned.get(s, ()))
    return out


def _truncated_loops(ctx: ScanContext, fn: Function, loops: list[ts.Node],
                     var_of: Callable[[ts.Node], tuple[str, ts.Node | None] | None] = _loop_var) -> Iterator[Hit]:
    """``for (i = 0; i < n / 2; ++i)`` over a run-time size (or ``n >> kShift``, ``n - n / kSplit``,
    a fixed fraction through named constants), and ``at::parallel_for(0, n / 2, ...)``, whose body
    never reaches the rest (no ``n - 1 - i`` mirror, no ``i + n / 2`` partner, no two-wide vector
    loads, no tail pass starting where it stops)."""
    consts = None  # the function's constants, looked up for the few loops that get that far
    flow = ctx.cuda_flow
    starts: list[str] | None = None
    # (node reported, bound, the loop variable or None, the body)
    cands: list[tuple[ts.Node, ts.Node, str | None, ts.Node | None]] = []
    for loop in loops:
        # every test here only skips the loop, so the cheap ones go first and the loop variable
        # is worked out for the loops that compare against a fraction of a size alone
        cond = loop.child_by_field_name("condition")
        if cond is None or cond.type != "binary_expression":
            continue
        op = cond.child_by_field_name("operator")
        left, right = cond.child_by_field_name("left"), cond.child_by_field_name("right")
        if op is None or op.type not in ("<", "<=") or left is None or right is None:
            continue
        if strip_parens(right).type != "binary_expression":
            continue
        lv = var_of(loop)
        if lv is None or text(left) != lv[0]:
            continue
        cands.append((loop, right, lv[0], loop.child_by_field_name("body")))
    if fn.kind == "host":
        for c in fn.calls:
            if c.base != "parallel_for":
                continue
            args = call_args(c.node)
            if len(args) == 4 and flow.fold(args[0], fn) == 0 and args[1].type == "binary_expression":
                cands.append((c.node, args[1], None, args[3]))
    for node, bound, var, body in cands:
        got = _fraction_of(bound, fn, flow)
        if got is None:
            continue
        size, part = got
        btext = text(body) if body is not None else ""
        if consts is None:
            consts = ctx.cuda.extensions[fn.ext].env_for(fn)
        if not _runtime_name(size, fn, consts):
            # a compile-time tile: only suspicious when arrays sized by it are indexed by the loop
            # variable itself (the tile is loaded whole and consumed by half)
            # (an array sized by the bound itself, ``acc[TILE / ROWS]``, is covered by it)
            sized = {m.group(1) for m in re.finditer(rf"(\w+)\s*(?:\[[^\]]*\]\s*)*\[\s*{re.escape(size)}\s*(?:\+\s*\d+\s*)?\]",
                                                       text(fn.body) if fn.body else "")}
            if var is None or not any(re.search(rf"\b{re.escape(a)}\s*(?:\[[^\]]*\]\s*)*\[\s*{re.escape(var)}\s*\]", btext)
                                      for a in sized):
                continue
        if starts is None:
            starts = _loop_starts(fn, loops, var_of)
        if _reaches_rest(size, btext, fn, flow, starts, part, var, text(bound)):
            continue
        bound_text = " ".join(text(bound).split())
        what = f"loop in `{fn.name}` runs `{var}`" if var is not None else f"`at::parallel_for` in `{fn.name}` runs"
        yield ctx.hit(pos_of(fn.unit, node), severity=Severity.WARNING, confidence=Confidence.MEDIUM,
                      message=f"{what} over only the first {_part_words(part)} of `{size}` "
                              f"(up to `{bound_text}`), and nothing reaches the rest",
                      evidence={"bound": bound_text, "size": size, "part": str(part)})


def _subscripts(body: ts.Node) -> list[ts.Node]:
    """The subscript expressions under ``body`` in the former walk's order (outer before inner,
    later before earlier): the order picks the reported array on ties."""
    return nodes_of_kind(body, "subscript_expression")


def _accumulates(body: ts.Node, fn: Function) -> bool:
    # the body's assignments are among the function's (any one decides, so their order is moot)
    for asg in fn.of_type("assignment_expression"):
        if not contains(body, asg):
            continue
        op = asg.child_by_field_name("operator")
        left = asg.child_by_field_name("left")
        if op is None or left is None:
            continue
        if op.type in _ACCUM_OPS:
            return True
        if op.type == "=" and left.type == "identifier":
            right = asg.child_by_field_name("right")
            if right is not None and text(left) in {text(i) for i in identifiers(right)}:
                return True
    return False


__all__ = ["cuda_reduced_precision", "cuda_fast_math", "cuda_strided_subsample", "Call", "contains"]
