"""HS203: literals and named constants equal to the task's dimensions that fix loop bounds, grids,
indices or allocations, with no general path for other sizes."""

from __future__ import annotations

import re
from collections.abc import Iterator

import tree_sitter as ts

from ...context import Hit, ScanContext
from ...cuda import names
from ...cuda.facts import CudaFacts
from ...cuda.flow import ALLOC_CALLS
from ...cuda.parser import callee_name, identifiers, text
from ...cuda.records import Constant, ExtensionFacts, Function, pos_of
from ...model import Confidence, Severity

_CHECKS = frozenset({"TORCH_CHECK", "TORCH_INTERNAL_ASSERT", "AT_ASSERT", "AT_ASSERTM", "assert", "static_assert",
                     "CHECK", "CHECK_EQ", "TORCH_CHECK_EQ", "AT_CHECK"})
_USE_WORDS = {"loop": "a loop bound", "launch": "a launch configuration", "index": "an index stride",
              "alloc": "an allocation shape", "bound": "a bounds check", "array": "an array size",
              "expr": "a size in arithmetic"}
# what a shape dimension is called when it is read from a tensor (``const int rows = x.size(0)``)
_SIZE_NAME = re.compile(r"^(rows|cols|num_rows|num_cols|n_rows|n_cols|batch|batch_size|bs|seq_len|seqlen|"
                        r"features|in_features|out_features|channels|height|width|dim|hidden|hidden_size|"
                        r"numel|total|total_elements|num_elements|n_elements|[NMKBCHWLD])$", re.I)
_RUNTIME_SIZE = re.compile(r"\.(size|sizes|numel|dim|stride|shape)\s*\(|\b(size|numel|shape)\(|->\s*size")
_STOP = frozenset({"compound_statement", "function_definition", "translation_unit", "lambda_expression"})


def _runtime_size(cond: ts.Node, fn: Function | None) -> bool:
    """Does a condition read a size at run time (``x.size(1)``, or a local / parameter holding one)?"""
    if _RUNTIME_SIZE.search(text(cond)):
        return True
    if fn is None:
        return False
    for ident in identifiers(cond):
        name = text(ident)
        p = fn.param(name)
        if p is not None and not p.pointer:
            return True
        if any(_RUNTIME_SIZE.search(text(v)) for v in fn.assigned.get(name, ())):
            return True
    return False


# ``std::min(blocks_needed, 8192)``: the literal caps a size computed from the input, it does not fix it
_MIN_CALLS = frozenset({"min", "MIN", "imin", "llmin", "umin"})


def _context(node: ts.Node, kind: str, fn: Function | None = None) -> str:
    """How a literal / constant use is used, walking up to the statement."""
    child = node
    cur = node.parent
    # an argument of min(): in a launch configuration that is a cap on the grid (the kernel's
    # grid-stride loop, or the shape probes if it has none, covers the rest), not a shape
    capped = False
    while cur is not None and cur.type not in _STOP:
        t = cur.type
        if t == "call_expression":
            func = cur.child_by_field_name("function")
            name = callee_name(func) if func is not None else ""
            base = name.rsplit("::", 1)[-1]
            args = cur.child_by_field_name("arguments")
            in_args = args is not None and args.start_byte <= node.start_byte < args.end_byte
            if in_args and (base in _CHECKS or base.startswith(("CHECK_", "TORCH_CHECK"))):
                return "check"
            if in_args and base in ALLOC_CALLS and name.startswith(("torch::", "at::", ".")):
                return "alloc"
            if in_args and base in _MIN_CALLS and args is not None and args.named_child_count >= 2:
                capped = True
        if t == "kernel_call_syntax":
            return "cap" if capped else "launch"
        if t in ("if_statement", "while_statement", "switch_statement", "conditional_expression", "case_statement"):
            cond = cur.child_by_field_name("condition") or cur.child_by_field_name("value")
            if t == "case_statement":
                value = cur.child_by_field_name("value")
                if value is None or not (value.start_byte <= node.start_byte < value.end_byte):
                    child = cur  # in the arm's statements, not the label: keep walking up
                    cur = cur.parent
                    continue
                # ``case kCols:`` compares with what the enclosing switch reads (``switch (cols)``)
                body = cur.parent  # the switch's ``{ ... }``
                sw = body.parent if body is not None else None
                if sw is not None and sw.type == "switch_statement":
                    cond = sw.child_by_field_name("condition")
            if t == "case_statement" or (cond is not None and cond.start_byte <= node.start_byte < cond.end_byte):
                if kind != "host":
                    return "bound"
                # a fast path picks the shape by comparing it with a size read at run time; comparing
                # the constant with 0 or with another constant picks nothing
                return "guard" if cond is not None and _runtime_size(cond, fn) else "expr"
            return "expr"
        if t == "for_statement":
            body = cur.child_by_field_name("body")
            if body is None or child != body:
                return "loop"
            return "expr"
        if t == "subscript_argument_list":
            return "index"
        if t == "array_declarator":
            return "array"
        if t == "init_declarator":
            decl = cur.child_by_field_name("declarator")
            if decl is not None and re.search(r"grid|block|thread|blocks", text(decl), re.I):
                return "cap" if capped else "launch"
        if t == "declaration":
            tnode = cur.child_by_field_name("type")
            if tnode is not None and text(tnode) == "dim3":
                return "cap" if capped else "launch"
        if t == "template_argument_list":
            parent = cur.parent
            if parent is not None and parent.parent is not None and parent.parent.type == "call_expression":
                return "launch"
        child = cur
        cur = cur.parent
    return "expr"


def _function_of(node: ts.Node, by_node: dict[int, Function]) -> Function | None:
    cur = node.parent
    while cur is not None:
        if cur.type in ("function_definition", "lambda_expression"):
            fn = by_node.get(cur.id)
            if fn is not None:
                return fn
        cur = cur.parent
    return None


_WORD_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_WORD_OR_DOT = _WORD_BYTES | {ord(".")}
# a non-empty run of ``_WORD_BYTES`` (in a bytes pattern ``\w`` is ASCII only)
_WORD_TOKEN = re.compile(rb"\w+")


def _token_matches(tokens: list[bytes], tail: bytes, raw: bytes) -> list[re.Match[bytes]]:
    r"""``re.finditer(rb"(?<![\w.])(tok1|tok2...)" + tail, raw)``, longest token first, fast.

    A pattern that starts with a look-behind makes the regex engine try every position of a
    kernel source; without it the engine skips ahead to candidate starts.  The look-behind is then
    checked by hand, which finds the same matches: a rejected match only covers word bytes
    (the tokens are ASCII words and the tails add word bytes), and every start inside it follows a
    word byte, where the look-behind would have failed as well.
    """
    if not any(t in raw for t in tokens):
        return []
    alt = b"|".join(re.escape(t) for t in tokens)
    out = []
    for m in re.compile(rb"(" + alt + rb")" + tail).finditer(raw):
        start = m.start()
        if start == 0 or raw[start - 1] not in _WORD_OR_DOT:
            out.append(m)
    return out


def _occurrences(facts: CudaFacts, x: ExtensionFacts, tokens: list[bytes], tail: bytes, node_types: tuple[str, ...],
                 by_node: dict[int, Function]) -> list[tuple[bytes, Function | None, ts.Node]]:
    r"""Every match of ``(?<![\w.])(tokens)tail`` in the extension's units that is a node of
    ``node_types``, with the matched token (group 1) and the function it sits in."""
    out = []
    if not all(_WORD_TOKEN.fullmatch(t) for t in tokens):  # the fast path's premise
        alt = b"|".join(re.escape(t) for t in tokens)
        rx = re.compile(rb"(?<![\w.])(" + alt + rb")" + tail)
        scan = rx.finditer
    else:
        def scan(raw: bytes) -> list[re.Match[bytes]]:
            return _token_matches(tokens, tail, raw)
    for unit in x.units:
        tree = facts.trees.get(unit.id)
        if tree is None:
            continue
        raw = unit.text.encode("utf-8")
        root = tree.root_node
        for m in scan(raw):
            node = root.descendant_for_byte_range(m.start(1), m.end(1))
            if node is None or node.type not in node_types:
                continue
            out.append((m.group(1), _function_of(node, by_node), node))
    return out


def _ref_names(ctx: ScanContext, dims: set[int]) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    assert ctx.reference is not None
    for k, v in ctx.reference.constants.items():
        if isinstance(v, int) and not isinstance(v, bool) and v in dims:
            out.setdefault(v, set()).add(_norm(k))
    return out


def _products(ref) -> dict[int, str]:
    """Products of trailing input dims (the numel, rows x cols, H x W) with a label for messages."""
    names_by_value = {v: k for k, v in ref.constants.items() if isinstance(v, int) and not isinstance(v, bool)}
    out: dict[int, str] = {}
    for spec in ref.inputs:
        shape = spec.shape
        if not shape or len(shape) < 2 or not all(isinstance(d, int) and d > 1 for d in shape):
            continue
        for start in range(len(shape) - 1):
            part = shape[start:]
            value = 1
            for d in part:
                value *= d  # type: ignore[operator]
            label = " * ".join(names_by_value.get(d, str(d)) for d in part)  # type: ignore[arg-type]
            out.setdefault(value, label)
    return out


def _norm(name: str) -> str:
    return name.lower().replace("_", "")


def cuda_hardcoded_shape(ctx: ScanContext) -> Iterator[Hit]:
    ref = ctx.reference
    if ref is None:
        return
    min_value = int(ctx.options.get("min_value", 8))
    dims = {d for d in ref.dims if d >= min_value}
    distinctive = set(ref.distinctive_dims) & dims
    # dims of get_inputs() shapes: a hidden test changes these; init arguments fix the module
    # itself (its weights have those shapes), so hardcoding them is a much weaker sign
    input_dims = {d for spec in ref.inputs if spec.shape for d in spec.shape if isinstance(d, int)}
    dim_label = {v: k for k, v in ref.constants.items() if isinstance(v, int) and v in dims}
    # element counts: ``i < 262144`` hardcodes 16 x 16384 as surely as ``16384`` does
    for value, label in _products(ref).items():
        if value not in dims and value > 1024:
            dims.add(value)
            distinctive.add(value)
            input_dims.add(value)
            dim_label.setdefault(value, label)
    if not dims:
        return
    ref_names = _ref_names(ctx, dims)
    facts = ctx.cuda
    by_node = {f.node.id: f for f in facts.functions}
    for x in facts.extensions.values():
        consts: list[Constant] = list(x.constants.values())
        for table in x.local_constants.values():
            consts.extend(table.values())
        named_values: set[int] = set()
        wanted: dict[str, tuple[Constant, bool, bool]] = {}
        for const in consts:
            v = const.value
            if not isinstance(v, int) or v not in dims:
                continue
            name_match = _norm(const.name) in ref_names.get(v, set()) or (
                v in input_dims and bool(_SIZE_NAME.match(const.name)))
            if not name_match and (names.TILE_NAME.search(const.name) or v not in distinctive):
                continue
            named_values.add(v)
            unit = facts.unit(const.unit_id)
            init_only = v not in input_dims
            if unit is not None and const.interpolated(unit) and (init_only or _specialised(ctx, unit, const)):
                continue  # specialised at build time on the module's own hyperparameter or a run-time shape
            wanted.setdefault(const.name, (const, name_match, init_only))
        if wanted:
            # one pass over the text for every constant of interest
            tokens = [n.encode() for n in sorted(wanted, key=len, reverse=True)]
            uses_by_name: dict[str, list] = {n: [] for n in wanted}
            # a constant passed as a template argument (``kernel<kCols><<<...>>>``) parses as a type name
            for token, fn, node in _occurrences(facts, x, tokens, rb"(?![\w])", ("identifier", "type_identifier"),
                                                by_node):
                name = token.decode()
                const = wanted[name][0]
                if fn is None or (const.function and fn.name != const.function) or _is_definition(node):
                    continue
                if node.type == "type_identifier" and not _template_argument(node):
                    continue
                uses_by_name[name].append((fn, node, _context(node, "host" if fn.kind == "host" else "kernel", fn)))
            for name, (const, name_match, init_only) in wanted.items():
                hit = _judge(ctx, uses_by_name[name], f"`{const.name}` ({const.value})", int(const.value), dim_label,
                             distinctive, name_match, const_pos=const.pos, weak=init_only)
                if hit is not None:
                    yield hit
        literals = sorted(distinctive - named_values)
        if not literals:
            continue
        tokens = [str(v).encode() for v in sorted(literals, key=lambda v: -len(str(v)))]
        by_value: dict[int, dict[int, list]] = {}
        for token, fn, node in _occurrences(facts, x, tokens, rb"[uUlL]*(?![\w.])", ("number_literal",), by_node):
            if fn is None:
                continue
            by_value.setdefault(int(token), {}).setdefault(id(fn), []).append(
                (fn, node, _context(node, "host" if fn.kind == "host" else "kernel", fn)))
        for v, by_fn in sorted(by_value.items()):
            if any(c == "guard" for uses in by_fn.values() for _, _, c in uses):
                continue
            for uses in by_fn.values():
                hit = _judge(ctx, uses, f"the literal {v}", v, dim_label, distinctive, False, const_pos=None,
                             weak=v not in input_dims)
                if hit is not None:
                    yield hit


def _specialised(ctx: ScanContext, unit, const: Constant) -> bool:
    """The interpolated value comes from the module or the input (``{self.out_channels}``,
    ``{x.shape[1]}``), so the extension is built for whatever shape it is given."""
    if ctx.host is None or const.offset < 0:
        return False
    line, col = unit.byte_position(const.offset)
    lines = ctx.host.source.lines
    if not 1 <= line <= len(lines):
        return False
    # the f-string field the value came from starts at (or just before) the mapped column
    window = lines[line - 1][col:]
    return bool(re.match(r"\{?\s*(self\.|[\w.]*shape|[\w.]*size\()", window))


def _template_argument(node: ts.Node) -> bool:
    """``kCols`` in ``kernel<kCols>``: a type name standing alone as a template argument."""
    parent = node.parent
    if parent is not None and parent.type == "type_descriptor":
        parent = parent.parent
    return parent is not None and parent.type == "template_argument_list"


def _is_definition(node: ts.Node) -> bool:
    parent = node.parent
    if parent is None:
        return False
    if parent.type in ("preproc_def", "preproc_function_def"):
        return True
    if parent.type == "init_declarator" and parent.child_by_field_name("declarator") == node:
        return True
    return False


def _judge(ctx: ScanContext, uses: list, what: str, value: int, dim_label: dict[int, str], distinctive: set[int],
           name_match: bool, const_pos, weak: bool = False) -> Hit | None:
    contexts = {c for _, _, c in uses}
    if "guard" in contexts:
        return None  # a tuned path picked by comparing the runtime size: the other arm is the general one
    real = [(fn, node, c) for fn, node, c in uses if c not in ("check", "guard", "cap")]
    if not real:
        return None
    kinds = sorted({c for _, _, c in real}, key=list(_USE_WORDS).index)
    checked = "check" in contexts
    if checked or weak:
        sev, conf = Severity.WARNING, Confidence.LOW
    elif value in distinctive:
        sev, conf = Severity.ERROR, Confidence.MEDIUM
    else:
        sev, conf = Severity.WARNING, Confidence.MEDIUM
    label = dim_label.get(value)
    dim = f"`{label}` ({value})" if label else f"dimension {value}"
    uses_text = ", ".join(_USE_WORDS[k] for k in kinds)
    if checked:
        uses_text += " (other sizes are rejected by a check rather than computed)"
    elif weak:
        uses_text += " (an init argument of the module, not an input size)"
    fn, node, _ = real[0]
    pos = const_pos if const_pos is not None else pos_of(fn.unit, node)
    return ctx.hit(pos, severity=sev, confidence=conf, args={"what": what, "dim": dim, "uses": uses_text},
                   evidence={"value": value, "uses": [c for _, _, c in real][:12], "checked": checked,
                             "functions": sorted({f.name for f, _, _ in real})})


__all__ = ["cuda_hardcoded_shape"]
