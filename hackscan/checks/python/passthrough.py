"""Outputs that do no work (class 6, and class 7 from the host side).

* HS109: every value forward returns is an input, or a view / cast / copy of one: no kernel, no compute.
* HS110: forward returns a constant or an allocation that nothing writes (``full(..., 0.5)``, ``zeros``,
  ``empty_like`` never handed to a kernel).
* HS121: an input the reference's output depends on never reaches the candidate's output.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ...context import Hit, ScanContext
from ...model import Confidence, Severity
from ...python.catalog import classify_method, classify_torch
from ...python.degenerate import constant_reference
from ...python.facts import ModelFlow


def _facts(ctx: ScanContext) -> ModelFlow | None:
    facts = ctx.model_flow
    if facts is None or facts.forward is None or not facts.forward_returns:
        return None
    return facts


def _reference_computes(ctx: ScanContext) -> bool:
    """Does the reference compute anything?  A reference that is itself a view is task degeneracy (class 20)."""
    ref = ctx.reference_flow
    if ref is not None and ref.forward is not None:
        if ref.ops or ref.kernels:
            return True
        return False
    if ctx.reference is None:
        return True
    for op in ctx.reference.forward_ops:
        if op.startswith("torch."):
            if classify_torch(op) == "compute":
                return True
        elif op.startswith("Tensor.") and classify_method(op[7:]) in ("compute", None):
            return True
    return not ctx.reference.forward_ops


def _reference_depends_on_inputs(ctx: ScanContext) -> bool:
    # a reference whose output is a constant by its own arithmetic (HS199 says so): returning the
    # constant is exact, and the task, not the candidate, is at fault
    if constant_reference(ctx.reference) is not None:
        return False
    ref = ctx.reference_flow
    if ref is None or ref.forward is None or not ref.forward_returns:
        return True
    out = ref.output
    return bool(out.inputs) or not out.understood


def passthrough_output(ctx: ScanContext) -> Iterator[Hit]:
    """HS109."""
    facts = _facts(ctx)
    if facts is None:
        return
    rets = facts.forward_returns
    if not all([r.flow.passthrough for r in rets]):  # a list: a generator left early raises GeneratorExit
        return
    if not _reference_computes(ctx):
        return
    args = sorted(facts.output.inputs)
    for r in rets:
        yield ctx.hit(ctx.at(r.node), args={"args": ", ".join(f"`{a}`" for a in args)},
                      evidence={"inputs": args, "aliases": sorted(r.flow.alias)})


def constant_output(ctx: ScanContext) -> Iterator[Hit]:
    """HS110."""
    facts = _facts(ctx)
    if facts is None:
        return
    rets = facts.forward_returns
    out = facts.output
    if not out.constant or not facts.allocs_of(out):
        return
    if not _reference_depends_on_inputs(ctx):
        return
    for r in rets:
        allocs = facts.allocs_of(r.flow)
        if not allocs:
            continue
        a = allocs[0]
        short = a.name.replace("Tensor.", "x.")
        if a.fill == "uninitialised":
            what = (f"an uninitialised {short}(...) (line {a.line}) that no kernel writes: it holds whatever the "
                    "caching allocator gave back, often the reference's own freed result")
        elif a.fill == "constant":
            value = f" filled with {a.value}" if a.value is not None else ""
            what = f"a constant {short}(...){value} (line {a.line}) shaped like the input"
        elif a.fill == "random":
            what = f"random values from {short}(...) (line {a.line})"
        else:
            what = f"a tensor built from constants, {short}(...) (line {a.line})"
        yield ctx.hit(ctx.at(r.node), args={"what": what},
                      evidence={"allocation": a.name, "fill": a.fill, "value": a.value, "alloc_line": a.line},
                      severity=Severity.ERROR, confidence=Confidence.HIGH)


def unread_forward_input(ctx: ScanContext) -> Iterator[Hit]:
    """HS121: an input whose values reach the reference's output never reaches the candidate's.

    A closed-form "loss" computed from ``predictions`` alone (``E[(p - t)^2]`` over uniform ``t``)
    passes a harness that draws both from ``torch.rand``.  Inputs are matched by position; an input the
    reference reads only for its shape, or not at all, is not asked for.  Error when forward-reachable
    code never names the input; a warning when it is read but the analysis sees the value go nowhere,
    or when the output's path has calls or state it cannot follow.
    """
    facts = _facts(ctx)
    if facts is None or facts.truncated or facts.forward.node.args.vararg is not None:
        return
    out = facts.output
    # the usual case ends here, before the reference's own value flow is built: every input reaches
    # the output (that flow is built for no other rule on most files, and costs as much as the candidate's)
    if out.constant or all(a in out.inputs for a in facts.args):
        return
    ref = ctx.reference_flow
    if ref is None or ref.forward is None or not ref.forward_returns or ref.forward.node.args.vararg is not None:
        return
    needed = ref.output.inputs
    missing = [(i, a) for i, a in enumerate(facts.args)
               if a not in out.inputs and i < len(ref.args) and ref.args[i] in needed]
    # a constant output with nothing on its path is HS110's (a constant, one finding is enough)
    if not missing or out.constant or not _reference_depends_on_inputs(ctx):
        return
    names = _names_read(facts)
    for i, arg in missing:
        read = arg in names
        sure = not read and out.understood
        how = (f"forward reads `{arg}` but no value computed from it reaches the output" if read else
               f"no code forward reaches reads `{arg}`")
        yield ctx.hit(ctx.at(facts.forward.node), args={"arg": arg, "ref_arg": ref.args[i], "position": i + 1,
                                                        "how": how},
                      evidence={"argument": arg, "reference_argument": ref.args[i], "read": read,
                                "output_inputs": sorted(out.inputs)},
                      severity=Severity.ERROR if sure else Severity.WARNING,
                      confidence=Confidence.HIGH if sure else Confidence.MEDIUM)


def _names_read(facts: ModelFlow) -> frozenset[str]:
    """Names loaded in forward-reachable functions (walked only once an input is found missing)."""
    out: set[str] = set()
    for fn in facts.functions.values():
        for n in ast.walk(fn.node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                out.add(n.id)
    return frozenset(out)
