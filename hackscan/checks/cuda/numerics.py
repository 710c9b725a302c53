"""HS220: numerics that are right only at the magnitudes of ``torch.rand`` (class 16).

Two shapes that the kernel text shows with certainty:

* a softmax whose exponentials are not shifted by the row's maximum: ``sum += expf(x[j])`` or
  ``expf(x[j] - 1.0f)`` (a constant shift) overflows to ``inf`` once inputs reach about 88, where
  ``expf(x[j] - m)`` with a running or two-pass maximum never does;
* ``exp`` replaced by a fixed number of Taylor terms (``acc = 1 + acc * t / k`` for k = 12..1, or
  ``term *= t / k; sum += term``) with no range reduction: exact near 0, wrong by orders of
  magnitude at |t| of 10 or more.  A polynomial on a reduced argument (``t - n * ln2`` scaled back by
  ``ldexpf`` / ``exp2f``) is the legitimate way, and is left alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import tree_sitter as ts

from ...context import Hit, ScanContext
from ...cuda.parser import call_args, identifiers, strip_parens, text
from ...cuda.records import Function, pos_of

_EXP = frozenset({"exp", "expf", "__expf", "std::exp", "hexp", "h2exp", "::exp", "::expf"})
# reference ops that normalise exponentials over a row: their kernels need the max shift
_SOFTMAX_FAMILIES = frozenset({"softmax", "log_softmax", "logsumexp", "cross_entropy", "nll_loss", "softmin",
                               "scaled_dot_product_attention", "multi_head_attention_forward", "multiheadattention"})
# range reduction: the argument is split into n * ln2 + r and the result scaled back by 2^n
_RANGE_REDUCTION = re.compile(r"\b(ldexpf?|scalbnf?|exp2f?|__exp2f|frexpf?|rintf?|floorf?|roundf?|nearbyintf?|"
                              r"__float2int_rn|lrintf?)\s*\(|0\.69314|1\.44269|M_LN2|M_LOG2E|LOG2E|LN2")


def _is_const(node: ts.Node, fn: Function, ctx: ScanContext) -> bool:
    return isinstance(ctx.cuda_flow.fold(node, fn), (int, float))


def _unshifted(arg: ts.Node, fn: Function, ctx: ScanContext) -> bool:
    """``x[j]``, ``v``, ``x[j] - 1.0f``: a data value, at most moved by a constant (no maximum)."""
    arg = strip_parens(arg)
    if arg.type == "binary_expression":
        op = arg.child_by_field_name("operator")
        left, right = arg.child_by_field_name("left"), arg.child_by_field_name("right")
        if op is None or op.type not in ("-", "+") or left is None or right is None:
            return False
        if not _is_const(right, fn, ctx):
            return False  # ``x - m``: shifted by something computed (the max, presumably)
        arg = strip_parens(left)
    if arg.type not in ("subscript_expression", "identifier", "field_expression"):
        return False
    return not _is_const(arg, fn, ctx)


# names that contain ``exp`` and are not an exponential (compiled once: ``_is_exp`` runs for every call)
_NOT_EXP = re.compile(r"expm1|ldexp|expand|expect|export|expr|expl", re.I)


def _is_exp(call, ctx: ScanContext) -> bool:
    """``expf(..)`` and friends, or a helper of this extension named for it (``fast_exp``, ``poly_exp``)."""
    if call.name in _EXP:
        return True
    base = call.base
    if call.is_method or "exp" not in base.lower() or _NOT_EXP.search(base):
        return False
    return bool(ctx.cuda.extensions[call.function.ext].lookup(base))


def _sums_into(asg: ts.Node) -> bool:
    """``s += ..`` or ``s = s * r + ..`` (a running sum rescaled as it goes)."""
    op = asg.child_by_field_name("operator")
    if op is None:
        return False
    if op.type == "+=":
        return True
    left, right = asg.child_by_field_name("left"), asg.child_by_field_name("right")
    if op.type != "=" or left is None or right is None or left.type != "identifier":
        return False
    right = strip_parens(right)
    rop = right.child_by_field_name("operator") if right.type == "binary_expression" else None
    return rop is not None and rop.type == "+" and any(text(i) == text(left) for i in identifiers(right))


def _accumulated(call: ts.Node, fn: Function) -> bool:
    """Is the exponential summed: ``sum += expf(..)``, or a local assigned from it summed?"""
    cur = call.parent
    while cur is not None and cur.type not in ("expression_statement", "declaration", "compound_statement"):
        if cur.type == "assignment_expression":
            if _sums_into(cur):
                return True
        if cur.type == "init_declarator":
            name = cur.child_by_field_name("declarator")
            if name is not None and name.type == "identifier":
                local = text(name)
                for asg in fn.of_type("assignment_expression"):
                    right = asg.child_by_field_name("right")
                    if right is not None and _sums_into(asg) and any(text(i) == local for i in identifiers(right)):
                        return True
            return False
        cur = cur.parent
    return False


def _softmax_without_max(ctx: ScanContext) -> Iterator[Hit]:
    ref = ctx.reference
    if ref is None or not (ref.families & _SOFTMAX_FAMILIES):
        return
    for fn in ctx.cuda.functions:
        exps = [c for c in fn.calls if _is_exp(c, ctx)]
        if not exps:
            continue
        args = [(c, call_args(c.node)) for c in exps]
        if any(a and not _unshifted(a[0], fn, ctx) for _, a in args):
            continue  # some exponential is shifted by a computed value: the max is in use
        summed = [c for c, a in args if a and _accumulated(c.node, fn)]
        if not summed:
            continue
        c = summed[0]
        yield ctx.hit(c.pos, args={"function": fn.name, "what": f"`{' '.join(text(c.node).split())[:60]}`",
                                   "why": "a softmax's exponentials summed without subtracting the row maximum: "
                                          "they overflow to inf once inputs pass about 88 (a constant shift "
                                          "only moves the threshold)"},
                      evidence={"kind": "softmax-no-max", "calls": [text(x.node)[:60] for x in exps]})


def _loop_bounds_const(loop: ts.Node, fn: Function, ctx: ScanContext) -> str | None:
    """The loop variable of ``for (int k = C1; k <op> C2; ...)`` with both ends constant."""
    init = loop.child_by_field_name("initializer")
    cond = loop.child_by_field_name("condition")
    if init is None or cond is None or init.type != "declaration" or cond.type != "binary_expression":
        return None
    decl = init.child_by_field_name("declarator")
    if decl is None or decl.type != "init_declarator":
        return None
    name, value = decl.child_by_field_name("declarator"), decl.child_by_field_name("value")
    right = cond.child_by_field_name("right")
    if name is None or value is None or right is None or not _is_const(value, fn, ctx) or not _is_const(right, fn, ctx):
        return None
    return text(name)


def _truncated_series(ctx: ScanContext) -> Iterator[Hit]:
    for fn in ctx.cuda.functions:
        if fn.body is None or fn.kind == "kernel":
            continue
        floats = [p.name for p in fn.params if not p.pointer and p.type.replace("const", "") in ("float", "double")]
        if len(floats) != 1:
            continue
        t = floats[0]
        body = text(fn.body)
        if _RANGE_REDUCTION.search(body):
            continue
        for loop in fn.of_type("for_statement"):
            k = _loop_bounds_const(loop, fn, ctx)
            if k is None:
                continue
            lbody = loop.child_by_field_name("body")
            if lbody is None:
                continue
            # ``t / k``, ``t / (float)k``, ``t / static_cast<float>(k)``: the k-th Taylor term's factor
            term = re.search(rf"\b{re.escape(t)}\s*/\s*(\(\s*\w+\s*\)\s*)?(static_cast\s*<\s*\w+\s*>\s*\(\s*)?"
                             rf"\(?\s*{re.escape(k)}\b", text(lbody))
            if term is None:
                continue
            yield ctx.hit(pos_of(fn.unit, fn.node), args={
                "function": fn.name, "what": f"a loop over constant bounds (`{text(loop.child_by_field_name('condition'))}`)",
                "why": f"`exp` as a truncated series in `{t}` with no range reduction: exact near 0, wrong by orders "
                       f"of magnitude once |{t}| reaches 10 or so"},
                evidence={"kind": "truncated-series", "param": t, "loop_var": k})
            break


def cuda_unsafe_numerics(ctx: ScanContext) -> Iterator[Hit]:
    """HS220: softmax exponentials without the max shift; exp as a truncated Taylor series."""
    yield from _softmax_without_max(ctx)
    yield from _truncated_series(ctx)


__all__ = ["cuda_unsafe_numerics"]
