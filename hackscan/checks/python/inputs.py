"""What forward does to its inputs: writes into them (class 13), or reads only part of them (class 15).

* HS113: in-place writes into a forward argument or a view of one (``x.relu_()``, ``x[...] = 0``, ``out=x``,
  ``inplace=True``, ``x += 1``, a kernel whose only tensor argument is the input and whose result is dropped).
  Not flagged: in-place work on the candidate's own buffers, and in-place ops the reference itself does.
* HS114: a strided slice of an input reduced (``x[:, ::16].mean()``), or a first row broadcast back to the
  full shape (``x[0:1].expand_as(x)``), reaching the output.
"""

from __future__ import annotations

from collections.abc import Iterator

from ...context import Hit, ScanContext
from ...model import Confidence, Severity
from ...python.facts import ModelFlow, PartialUse
from .common import tensor_args


def _reference_mutates(ctx: ScanContext, position: int) -> bool:
    ref = ctx.reference_flow
    if ref is None or ref.forward is None:
        return False
    if position < len(ref.args):
        name = ref.args[position]
        return any(m.arg == name for m in ref.mutations)
    return bool(ref.mutations)


def mutates_input(ctx: ScanContext) -> Iterator[Hit]:
    """HS113."""
    facts = ctx.model_flow
    if facts is None or facts.forward is None or not facts.mutations:
        return
    targs = tensor_args(ctx, facts)
    seen: set[tuple[int, str]] = set()
    for m in facts.mutations:
        if m.arg not in targs or (m.line, m.arg) in seen:
            continue
        position = facts.args.index(m.arg) if m.arg in facts.args else -1
        if _reference_mutates(ctx, position):
            continue
        seen.add((m.line, m.arg))
        inferred = m.kind == "kernel"
        detail = ("the kernel's only tensor argument is the input and its result is dropped, so it must write "
                  "into the input" if inferred else "")
        yield ctx.hit(ctx.at(m.node), args={"arg": m.arg, "how": m.how, "detail": f" ({detail})" if detail else ""},
                      evidence={"arg": m.arg, "kind": m.kind, "function": m.function},
                      severity=Severity.WARNING if inferred else Severity.ERROR,
                      confidence=Confidence.MEDIUM if inferred else Confidence.HIGH)


def _covered(facts: ModelFlow, p: PartialUse) -> bool:
    """``x[::2]`` and ``x[1::2]`` together read everything: an even/odd split, not a subsample."""
    sl = p.slice
    if sl.kind != "strided":
        return False
    if sl.step == 0:  # a computed step: covered when a slice of the same base starts at a variable offset
        return any(s.kind == "strided" and s.base == sl.base and s.step == 0 and s.start == -1 for s in facts.slices)
    starts = {s.start % sl.step for s in facts.slices
              if s.kind == "strided" and s.base == sl.base and s.step == sl.step and s.axis == sl.axis}
    return len(starts) >= sl.step


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _reference_reduces_all(ctx: ScanContext) -> bool:
    """The reference reduces (``sum``, ``mean``, ``norm``, ``softmax`` ...) and takes no strided slice itself:
    a kernel handed every k-th element of the input then cannot be computing the same function.  A strided
    view passed to a kernel is otherwise ordinary (a stride-2 1x1 convolution, a pooling window, the
    reference's own ``x[:, ::2]``)."""
    from ...python.catalog import REDUCTIONS

    ref = ctx.reference
    if ref is None or not (ref.families & REDUCTIONS):
        return False
    flow = ctx.reference_flow
    return flow is not None and not any(s.kind == "strided" for s in flow.slices)


def partial_computation(ctx: ScanContext) -> Iterator[Hit]:
    """HS114."""
    facts = ctx.model_flow
    if facts is None or facts.forward is None or not facts.partials:
        return
    reaching: set[int] = set()
    for r in facts.forward_returns:
        reaching |= r.flow.partial
    seen: set[int] = set()
    reduces: bool | None = None  # asked once, and only when a strided slice reaches a kernel
    for pid in sorted(reaching):
        p = facts.partials[pid]
        if _covered(facts, p) or p.line in seen:
            continue
        if p.kind == "strided-kernel":
            if reduces is None:
                reduces = _reference_reduces_all(ctx)
            if not reduces:
                continue
        seen.add(p.line)
        sl = p.slice
        if p.kind == "strided-kernel":
            every = _ordinal(sl.step) if sl.step else "n-th (a step computed from the input's size)"
            what = (f"hands the kernel only every {every} element of `{sl.base}` (slice at line {sl.node.lineno}), "
                    f"while the reference reduces over all of them: the rest of the input never reaches the output")
        elif p.kind == "strided-reduction":
            every = _ordinal(sl.step) if sl.step else "n-th (a step computed from the input's size)"
            what = (f"reduces only every {every} element of `{sl.base}` (slice at line {sl.node.lineno}) with "
                    f"{p.op.replace('torch.', 'torch.').replace('Tensor.', '.')}: the rest of the input never "
                    "reaches the output")
        else:
            what = (f"broadcasts the first row of `{sl.base}` (slice at line {sl.node.lineno}) with "
                    f"{p.op.replace('Tensor.', '.')}: every other row of the input is ignored")
        yield ctx.hit(ctx.at(p.consumer), args={"what": what},
                      evidence={"kind": p.kind, "step": sl.step, "base": sl.base, "slice_line": sl.node.lineno},
                      severity=Severity.WARNING, confidence=Confidence.MEDIUM)
