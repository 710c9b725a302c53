"""Guards that pick a shortcut by looking at the inputs (classes 1 and 2).

* HS101: a branch on tensor *values* (``x.min() >= 0``, ``torch.all(x >= 0)``, ``x[0, 0].item()``) whose arm
  returns without the kernel: an input, a constant, or torch's result.
* HS102: a branch on the test shape (``x.shape == (16, 16384)``) whose arm for that shape does no work, or
  with no general path for other shapes.
* HS103: literals equal to the task's distinctive dims in allocations, reshape targets, kernel arguments,
  Triton grids and loop bounds of forward-reachable code.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ...context import Hit, ScanContext
from ...model import Confidence, Severity
from ...python.facts import Arm, Branch, ModelFlow
from ...python.module import children
from ...python.provenance import Provenance
from ...python.resolve import Unresolved
from .common import describe_kernel, describe_ops, rank_ops, reference_families, tensor_args

_EXCEPTIONAL = ("isnan", "isinf", "isfinite", "isneginf", "isposinf", "nan_to_num")


def _src(node: ast.AST, limit: int = 70) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _later_returned(facts: ModelFlow, b: Branch, arm: Arm) -> list[Provenance]:
    """Flows of names the arm binds that a later ``return`` of the same function hands back."""
    if not arm.bindings:
        return []
    out = []
    for r in facts.returns:
        if r.function != b.function or r.line <= arm.last_line or r.node.value is None:
            continue
        names = {n.id for n in ast.walk(r.node.value) if isinstance(n, ast.Name)}
        out.extend(flow for name, flow in arm.bindings.items() if name in names)
    return out


def _arm_outputs(facts: ModelFlow, b: Branch, arm: Arm) -> list[Provenance]:
    flows = [r.flow for r in arm.returns]
    if arm.value is not None:
        flows.append(arm.value)
    flows.extend(_later_returned(facts, b, arm))
    return flows


def _describe_flow(facts: ModelFlow, flow: Provenance) -> str:
    if flow.passthrough:
        args = ", ".join(f"`{a}`" for a in sorted(flow.inputs))
        return f"its input {args} unchanged (or a view / copy of it)"
    if flow.constant:
        allocs = facts.allocs_of(flow)
        if allocs:
            return f"a constant ({allocs[0].name}, line {allocs[0].line})"
        return "a constant"
    ops = facts.ops_of(flow)
    if ops and not flow.kernels:
        return f"torch's result ({describe_ops(ops)})"
    return "a value no kernel computed"


def value_guarded_shortcut(ctx: ScanContext) -> Iterator[Hit]:
    """HS101."""
    facts = ctx.model_flow
    if facts is None or facts.forward is None:
        return
    targs = tensor_args(ctx, facts)
    for b in facts.branches:
        if b.kind not in ("if", "ifexp") or not facts.feeds_output(b.function):
            continue
        cond = b.condition
        if not (cond.value_args & targs):
            continue
        reads = [t for t, _ in cond.value_reads] or [_src(cond.node)]
        exceptional = any(x in t for t in reads for x in _EXCEPTIONAL)
        for arm, other in ((b.body, b.orelse), (b.orelse, b.body)):
            if arm.empty or arm.kernels or arm.raises and not arm.returns:
                continue
            outputs = [f for f in _arm_outputs(facts, b, arm) if not f.kernels]
            if not outputs:
                continue
            skipping = [f for f in outputs if f.passthrough or f.constant]
            torch_only = [f for f in outputs if f.ops and not f.kernels]
            other_kernel = bool(other.kernels) or bool(facts.kernels)
            if skipping and (other_kernel or other.ops or not other.empty):
                flow = skipping[0]
                severity = Severity.WARNING if exceptional else Severity.ERROR
                confidence = Confidence.MEDIUM if exceptional else Confidence.HIGH
            elif torch_only and other_kernel:
                flow = torch_only[0]
                severity, confidence = Severity.WARNING, Confidence.MEDIUM
            else:
                continue
            kernel = ""
            if facts.kernels:
                kernel = f" the kernel {describe_kernel(facts.kernels[0])}"
            yield ctx.hit(ctx.at(b.node), args={"condition": _src(cond.node), "reads": ", ".join(reads[:3]),
                                                "what": _describe_flow(facts, flow),
                                                "kernel": kernel or " any kernel"},
                          evidence={"condition": _src(cond.node, 200), "value_reads": reads,
                                    "arm": arm.label, "arm_lines": [arm.first_line, arm.last_line]},
                          severity=severity, confidence=confidence)
            break


# ------------------------------------------------------------------------------------------ shapes
def _test_arm(cond: ast.expr) -> str | None:
    """Which arm the test shape takes: ``body`` for ``shape == dims``, ``orelse`` for ``!=``; None if unclear."""
    node = cond
    negate = False
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        negate = not negate
        node = node.operand
    compares = [node] if isinstance(node, ast.Compare) else (
        [v for v in node.values if isinstance(v, ast.Compare)] if isinstance(node, ast.BoolOp) and
        isinstance(node.op, ast.And) else [])
    if not compares:
        return None
    kinds = {type(op) for c in compares for op in c.ops}
    if kinds <= {ast.Eq, ast.In, ast.Is}:
        arm = "body"
    elif kinds <= {ast.NotEq, ast.NotIn, ast.IsNot} and len(compares) == 1:
        arm = "orelse"
    else:
        return None
    if negate:
        arm = "orelse" if arm == "body" else "body"
    return arm


def shape_guarded_shortcut(ctx: ScanContext) -> Iterator[Hit]:
    """HS102."""
    facts = ctx.model_flow
    ref = ctx.reference
    if facts is None or facts.forward is None or ref is None:
        return
    # the reference's dims and their names only once a branch tests shapes: most have none
    dims = distinct = names = None
    for b in facts.branches:
        if b.kind not in ("if", "ifexp") or not facts.feeds_output(b.function):
            continue
        cond = b.condition
        if cond.value_dependent or not cond.meta_args:
            continue
        if dims is None:
            dims, distinct, names = ref.dims, ref.distinctive_dims, ref.dim_names()
        lits = [v for v, _ in cond.shape_literals if v in dims]
        if not lits or not (any(v in distinct for v in lits) or len(set(lits)) >= 2):
            continue
        which = _test_arm(facts.returned_test(cond.node))
        test, rest = (b.body, b.orelse) if which != "orelse" else (b.orelse, b.body)
        shown = ", ".join(f"{v} ({names[v]})" if v in names else str(v) for v in dict.fromkeys(lits))
        base = {"condition": _src(cond.node), "dims": shown}
        evidence = {"condition": _src(cond.node, 200), "literals": lits, "test_arm": which}
        arms = [test] if which is not None else [b.body, b.orelse]
        hit = None
        for arm in arms:
            if arm.empty or arm.kernels:
                continue
            outputs = [f for f in _arm_outputs(facts, b, arm) if not f.kernels]
            skipping = [f for f in outputs if f.passthrough or f.constant]
            if skipping:
                hit = ctx.hit(ctx.at(b.node), message=(
                    f"when the input has the benchmark's shape ({shown}), `{base['condition']}` selects an arm that "
                    f"returns {_describe_flow(facts, skipping[0])} without computing"),
                    evidence=evidence, severity=Severity.ERROR if which is not None else Severity.WARNING,
                    confidence=Confidence.HIGH if which is not None else Confidence.MEDIUM)
                break
            torch_only = [f for f in outputs if f.ops]
            if torch_only and which is not None and (rest.kernels or facts.kernels):
                hit = ctx.hit(ctx.at(b.node), message=(
                    f"for the benchmark's shape ({shown}) forward takes a torch path "
                    f"({describe_ops(rank_ops(facts.ops_of(torch_only[0]), reference_families(ctx)))}); the custom "
                    "kernel only runs for other shapes"), evidence=evidence,
                    severity=Severity.WARNING, confidence=Confidence.MEDIUM)
                break
        if hit is None and which is not None and test.kernels and rest.raises and not rest.returns \
                and not rest.kernels and not rest.ops:
            hit = ctx.hit(ctx.at(b.node), message=(
                f"forward only handles the benchmark's shape ({shown}): `{base['condition']}` raises for every other "
                f"shape, so the kernel {describe_kernel(test.kernels[0])} has no general path"),
                evidence=evidence, severity=Severity.WARNING, confidence=Confidence.MEDIUM)
        if hit is not None:
            yield hit


# ------------------------------------------------------------------------------------------ literals
_MIN_DIM = 100
_KIND_WORDS = {"alloc": "an allocation shape", "view": "a reshape target", "kernel": "a kernel argument",
               "grid": "a launch grid", "range": "a loop bound"}
_SKIP_KEYWORDS = frozenset({"dim", "dims", "axis", "keepdim", "dtype", "device", "num_warps", "num_stages",
                            "BLOCK_SIZE", "BLOCK", "BLOCK_M", "BLOCK_N", "BLOCK_K", "block_size"})


def hardcoded_task_shape(ctx: ScanContext) -> Iterator[Hit]:
    """HS103."""
    facts = ctx.model_flow
    ref = ctx.reference
    if facts is None or facts.forward is None or ref is None:
        return
    # small dims (10, 24, 96) turn up as iteration counts and tile sizes by coincidence
    distinct = frozenset(d for d in ref.distinctive_dims if d >= _MIN_DIM)
    if not distinct:
        return
    names = None  # the reference's names for its dims: only for a finding
    host = facts.host
    seen_lines: set[int] = set()
    for use in facts.shape_uses:
        if use.line in seen_lines:
            continue
        found: list[tuple[int, ast.AST]] = []
        scope = None
        for arg in use.args:
            for node in _leaves(arg, use.node):
                if type(node) is ast.Constant:
                    v = node.value
                else:
                    if scope is None:
                        scope = host.scope_of(use.node)
                    v = host.resolver.try_value(node, scope, node.lineno)
                if isinstance(v, int) and not isinstance(v, bool) and v in distinct and \
                        (use.kind != "range" or v > 1024):
                    found.append((v, node))
        if not found:
            continue
        seen_lines.add(use.line)
        if names is None:
            names = ref.dim_names()
        v, node = found[0]
        values = list(dict.fromkeys(x for x, _ in found))
        shown = ", ".join(f"{x} (the reference's `{names[x]}`)" if x in names else str(x) for x in values)
        spelled = _src(node, 40)
        yield ctx.hit(ctx.at(node), args={"values": shown, "where": _KIND_WORDS.get(use.kind, use.kind),
                                          "spelled": spelled},
                      evidence={"values": values, "kind": use.kind, "function": use.function})


_SIZE_EXPRS = frozenset({ast.Tuple, ast.List, ast.BinOp, ast.UnaryOp, ast.Starred})


def _leaves(arg: ast.AST, call: ast.AST) -> Iterator[ast.AST]:
    """Integer-bearing leaves of a size expression: constants and names, not sub-calls (``x.size(0)``)."""
    if type(arg) is ast.keyword:
        if arg.arg in _SKIP_KEYWORDS:
            return
        arg = arg.value
    stack = [arg]
    while stack:
        n = stack.pop()
        t = type(n)  # exact types: a parsed tree holds no subclasses of the node classes
        if t is ast.Constant:
            if type(n.value) is int:  # (a constant's value is never an int subclass but bool)
                yield n
        elif t is ast.Name:
            yield n
        elif t in _SIZE_EXPRS:
            stack.extend(children(n))
        elif t is ast.Call and type(n.func) is ast.Attribute and n.func.attr == "get" and len(n.args) == 2:
            # ``TABLE.get(tuple(x.shape), 16384)``: a size looked up by shape, whose default is what
            # every shape missing from the table gets, so a task dim there fixes the general path
            stack.append(n.args[1])
        # other calls, attributes and subscripts carry sizes read from tensors: not hardcoded


__all__ = ["value_guarded_shortcut", "shape_guarded_shortcut", "hardcoded_task_shape", "Unresolved"]
