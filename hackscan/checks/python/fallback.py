"""Torch fallbacks on the Python side (classes 3 and 5).

* HS104: the file has a custom kernel but forward's output never passes through it; torch computes it.
* HS105: no custom kernel at all: forward is a PyTorch rewrite of the reference.
* HS106: the output passes through a kernel, but the reference's main op runs in torch (the kernel is an
  epilogue or a prologue around ``torch.matmul`` / ``nn.Conv2d``).
* HS107: ``try: kernel() except: torch op`` — the handler computes the reference's op in torch.
* HS108: ``if not compiled: torch op`` — a branch on a flag recording whether the kernel compiled.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ...context import Hit, ScanContext
from ...cuda.buildability import never_runs
from ...model import Confidence, Severity
from ...python.catalog import HEAVY_FAMILIES
from ...python.equivalents import reference_work
from ...python.facts import Arm, ModelFlow
from ...python.module import subtree
from .common import (
    describe_kernel,
    describe_ops,
    is_reference_op,
    kernel_names,
    rank_ops,
    reference_families,
    short_op,
)


def _facts(ctx: ScanContext) -> ModelFlow | None:
    facts = ctx.model_flow
    if facts is None or facts.forward is None:
        return None
    return facts


def output_bypasses_kernel(ctx: ScanContext) -> Iterator[Hit]:
    """HS104: a kernel exists, yet no value forward returns passes through one; torch computes it."""
    facts = _facts(ctx)
    if facts is None or not facts.defines_kernel:
        return
    rets = facts.forward_returns
    if not rets or any([r.flow.kernels for r in rets]):
        return
    out = facts.output
    # unsorted (not ``ops_of``): ``rank_ops`` orders them totally
    ops = [facts.ops[i] for i in out.ops]
    if not ops:
        return  # a passthrough, a constant or cached state: HS109 / HS110 / the caching rules
    ref = reference_families(ctx)
    ranked = rank_ops(ops, ref)
    primary = ranked[0]
    if facts.kernels:
        k = facts.kernels[0]
        path = ctx.program.path_text(k.name)
        # through helpers the path is the evidence that forward runs the kernel at all
        via = f" (forward reaches it through {path})" if path.count(" -> ") > 1 else ""
        why = (f"the kernel {describe_kernel(k)}{via} runs at line {k.line} but its result never reaches the output")
    else:
        names = kernel_names(facts)
        why = f"the custom kernel{'s' if len(names) > 1 else ''} ({', '.join(names[:3]) or 'compiled here'}) " \
              "is never called from forward"
    strong = is_reference_op(primary, ref) or (not ref and bool(primary.families & HEAVY_FAMILIES))
    severity = Severity.ERROR if strong and out.understood else Severity.WARNING
    confidence = Confidence.HIGH if severity is Severity.ERROR else Confidence.MEDIUM
    yield ctx.hit(ctx.at(primary.node), args={"ops": describe_ops(ranked), "why": why},
                  evidence={"ops": [o.name for o in ranked], "op_lines": [o.line for o in ranked],
                            "kernels_called": [k.name for k in facts.kernels], "reference_op": strong,
                            **({"paths": [ctx.program.path_text(k.name) for k in facts.kernels]} if facts.kernels
                               else {})},
                  severity=severity, confidence=confidence)


def no_custom_kernel(ctx: ScanContext) -> Iterator[Hit]:
    """HS105: no custom kernel anywhere; forward computes with torch."""
    facts = _facts(ctx)
    if facts is None or facts.defines_kernel or facts.kernels:
        return
    out = facts.output
    ops = [facts.ops[i] for i in out.ops]  # unsorted (not ``ops_of``): ``rank_ops`` orders them totally
    ref = reference_families(ctx)
    if ops:
        ranked = rank_ops(ops, ref)
        primary = ranked[0]
        strong = any(is_reference_op(o, ref) for o in ranked)
        # an error whatever the spelling: with no custom code at all the task (write a kernel) is not
        # done, whether the torch ops are the reference's own, its equivalents (``equivalents``) or a
        # better algorithm in torch (``B * A.unsqueeze(1)`` for ``diag(A) @ B``): still no kernel
        message = None if strong or not ref else (
            f"no custom kernel: forward computes the output with torch ({describe_ops(ranked)}), other ops "
            "than the reference's: a better algorithm in torch is still a PyTorch rewrite, not a kernel")
        yield ctx.hit(ctx.at(primary.node), args={"ops": describe_ops(ranked)}, message=message,
                      evidence={"ops": [o.name for o in ranked], "op_lines": [o.line for o in ranked],
                                "reference_op": strong},
                      severity=Severity.ERROR, confidence=Confidence.HIGH)
    elif facts.ops and not out.understood:
        # the output comes from state or an unknown call (a CUDA graph replay, a cache) while forward
        # computes with torch: still no kernel of its own
        ranked = rank_ops(facts.ops, ref)
        yield ctx.hit(ctx.at(ranked[0].node), args={"ops": describe_ops(ranked)},
                      evidence={"ops": [o.name for o in ranked], "output": "state or unknown call"},
                      severity=Severity.WARNING, confidence=Confidence.MEDIUM)


def kernel_only_epilogue(ctx: ScanContext) -> Iterator[Hit]:
    """HS106: the output passes through a kernel, but the reference's main op runs in torch."""
    facts = _facts(ctx)
    if facts is None:
        return
    ref = reference_families(ctx)
    if not ref:
        return
    reported: set[int] = set()
    heavy_ref = ref & HEAVY_FAMILIES  # the reference's heavy families (often none: then no op is heavy)
    # the reference's own families, each covered by any of its equivalents (``equivalents``)
    own = ctx.reference.families if ctx.reference is not None else ref
    core = own - {"add", "mul", "sub", "div", "neg"} or own
    all_ops = facts.ops
    for r in facts.forward_returns:
        if not r.flow.kernels:
            continue
        kernels = facts.kernels_of(r.flow)
        # the heavy op and a kernel on one data path: the op feeds a kernel, or a kernel feeds the op
        # (a kernel on one branch and torch on another only meet in the join).  The (cheap, usually
        # failing) family test first; the flow's ops unsorted: ``rank_ops`` orders them totally
        heavy = [o for o in (all_ops[i] for i in r.flow.ops) if o.families & heavy_ref] if heavy_ref else []
        if heavy:
            before = set().union(*(k.input_ops for k in kernels)) if kernels else set()
            heavy = [o for o in heavy
                     if o.id in before or facts.op_input_kernels.get(o.id, frozenset()) & r.flow.kernels]
        if heavy:
            op = rank_ops(heavy, ref)[0]
            if op.line in reported:
                continue
            reported.add(op.line)
            k = kernels[0]
            yield ctx.hit(ctx.at(op.node),
                          message=f"the reference's main op runs in torch: {short_op(op)} (line {op.line}); the "
                                  f"custom kernel {describe_kernel(k)} (line {k.line}) only handles the rest",
                          evidence={"op": op.name, "kernels": [k.name for k in kernels]})
            continue
        # every reference op applied before the kernel runs: the kernel is an epilogue to torch's result
        for k in kernels:
            pre = [facts.ops[i] for i in k.input_ops]
            covered = set().union(*(o.families for o in pre)) if pre else set()
            if pre and all(covered & reference_work(frozenset({f})) for f in core):
                op = rank_ops(pre, ref)[0]
                if op.line in reported:
                    continue
                reported.add(op.line)
                yield ctx.hit(ctx.at(op.node),
                              message=f"every op of the reference already ran in torch ({describe_ops(rank_ops(pre, ref))}) "
                                      f"before the custom kernel {describe_kernel(k)} (line {k.line}); the kernel "
                                      "only post-processes torch's result",
                              evidence={"ops": [o.name for o in pre], "kernel": k.name})
                break


def exception_fallback_to_torch(ctx: ScanContext) -> Iterator[Hit]:
    """HS107: an except handler around a kernel call computes the result with torch instead."""
    facts = _facts(ctx)
    if facts is None:
        return
    ref = reference_families(ctx)
    for t in facts.tries:
        if not t.body.kernels or not facts.feeds_output(t.function):
            continue
        k = t.body.kernels[0]
        for h in t.handlers:
            arm = h.arm
            if not arm.terminates and not arm.ops and not arm.bindings and t.after is not None:
                arm = t.after  # ``except: pass``: the code after the try is the fallback
            if arm.kernels:
                continue  # retries with another kernel
            ops = list(arm.ops)
            bypass = [r for r in arm.returns if not r.flow.kernels]
            if not ops and not bypass and not (arm.bindings and not arm.raises):
                continue  # logs and re-raises, or only records a flag
            if not ops:
                if not bypass:
                    continue
                what = "returns a value the kernel never touched"
                severity, confidence = Severity.WARNING, Confidence.MEDIUM
                evidence_ops: list[str] = []
            else:
                ranked = rank_ops(ops, ref)
                ref_ops = [o for o in ranked if is_reference_op(o, ref)]
                what = f"computes it with torch instead: {describe_ops(ref_ops or ranked)}"
                if ref_ops:
                    severity, confidence = Severity.ERROR, Confidence.HIGH
                else:
                    severity, confidence = Severity.WARNING, Confidence.MEDIUM
                evidence_ops = [o.name for o in ranked]
            catches = ", ".join(h.types) if h.types else "everything"
            args = {"kernel": describe_kernel(k), "kernel_line": k.line, "catches": catches, "what": what}
            # the kernel provably never runs (HS119 carries why): the handler is not a contingency
            dead = never_runs(ctx, t.body.kernels)
            message = None if dead is None else (
                f"{describe_kernel(k)} (line {k.line}) can never run ({_dead_reason(dead)}, HS119 line "
                f"{dead.pos.line}), so the handler (catching {catches}) always {what}: the torch path is what runs")
            yield ctx.hit(ctx.at(h.node), message=message, args=args,
                          evidence={"kernel": k.name, "handler_line": h.line, "ops": evidence_ops,
                                    "broad": h.broad, "never_runs": dead is not None},
                          severity=severity, confidence=confidence)


def flag_fallback_to_torch(ctx: ScanContext) -> Iterator[Hit]:
    """HS108: a branch on a 'kernel compiled / usable' flag whose arm computes with torch instead."""
    facts = _facts(ctx)
    if facts is None or not facts.fallback_flags:
        return
    ref = reference_families(ctx)
    for b in facts.branches:
        if b.kind not in ("if", "ifexp") or not facts.feeds_output(b.function):
            continue
        cond = b.condition
        if cond.value_dependent:
            continue
        flags = sorted(n for n in cond.state if _flag(n, facts) is not None)
        if not flags:
            continue
        for arm, other in ((b.body, b.orelse), (b.orelse, b.body)):
            if arm.empty or arm.kernels or not arm.ops:
                continue
            if not (other.kernels or facts.kernels):
                continue
            if not _produces_output(arm):
                continue
            if arm.label == "after" and not b.body.terminates and all(r.flow.kernels for r in arm.returns):
                continue  # the rest of the function runs on both paths, after the kernel too
            ranked = rank_ops(arm.ops, ref)
            ref_ops = [o for o in ranked if is_reference_op(o, ref)]
            flag = flags[0]
            args = {"flag": flag, "origin": _flag(flag, facts), "ops": describe_ops(ref_ops or ranked)}
            # the kernel provably never builds (HS119 carries why): the flag is always the torch side
            dead = never_runs(ctx, other.kernels or facts.kernels)
            # A kernel that nothing shows to be unbuildable is built by the harness, and the flag then
            # routes to it: the torch arm is dead code there (a warning; the dynamic stage's census says
            # which path ran).  Only a kernel that can never run makes the torch arm what is scored.
            severity = Severity.ERROR if ref_ops and dead is not None else Severity.WARNING
            message = None if dead is None else (
                f"branch on `{flag}` ({args['origin']}) falls back to torch: {args['ops']}; the custom code can "
                f"never run ({_dead_reason(dead)}, HS119 line {dead.pos.line}), so the torch path is what runs")
            yield ctx.hit(ctx.at(b.node), message=message, args=args,
                          evidence={"flags": flags, "ops": [o.name for o in ranked], "arm": arm.label,
                                    "never_runs": dead is not None},
                          severity=severity, confidence=Confidence.HIGH if ref_ops else Confidence.MEDIUM)
            break


def _dead_reason(fact: object) -> str:
    """A few words for a ``CannotRun`` fact, for the fallback rules' messages."""
    return {"undeclared": "a functions= name main.cpp never declares",
            "duplicate-module": "PYBIND11_MODULE defined twice",
            "cuda-as-cpp": "a CUDA launch compiled as C++",
            "unbindable-call": "its call does not match the binding's signature"}.get(getattr(fact, "reason", ""), "see HS119")


def _flag(name: str, facts: ModelFlow) -> str | None:
    return facts.fallback_flags.get(name)


def _produces_output(arm: Arm) -> bool:
    """The arm returns (or binds) a value: it is an alternative path to the output, not a side step."""
    return bool(arm.returns or arm.value is not None or arm.bindings)


_REBOUND = frozenset({"forward", "__call__"})


def forward_rebound(ctx: ScanContext) -> Iterator[Hit]:
    """HS120: ``self.forward = lambda x: torch.relu(x)``, ``type(self).forward = ...``,
    ``self.__class__.__call__ = lambda self, _: cached``: what the harness calls is rebound at run time
    to a callable that runs no custom kernel, so the ``forward`` the file shows (and the other rules
    read) is not what is checked and timed.

    A forward bound at init to one of several methods that each launch a custom kernel (a vectorised
    and a scalar path chosen by dtype or architecture) is left alone: whichever is bound runs custom code.
    """
    host = ctx.host
    facts = ctx.model_flow
    if host is None or facts is None or facts.model is None:
        return
    model = facts.model
    for node in host.of_type(ast.Assign):
        for target in node.targets:  # type: ignore[attr-defined]
            if not (isinstance(target, ast.Attribute) and target.attr in _REBOUND):
                continue
            how = _rebinding(host, target, model)
            if how is None:
                continue
            bodies = _callable_bodies(host, node.value, model)  # type: ignore[attr-defined]
            if bodies is None or any(_runs_custom(host, b, model, 0) for b in bodies):
                continue
            handler = host.enclosing(node, ast.ExceptHandler)
            where = " in the except handler (when the build fails)" if handler is not None else ""
            dispatch = None if handler is not None else _custom_sibling(host, node, target.attr, model)
            if dispatch is not None:
                where = f" on one arm of a choice whose other arm binds custom code (line {dispatch.lineno})"
            value = ast.unparse(node.value)  # type: ignore[attr-defined]
            yield ctx.hit(ctx.at(node), args={"target": ast.unparse(target), "how": how, "where": where,
                                              "target_attr": "`" + target.attr + "`",
                                              "consequence": "when that arm is taken (init arguments, a build "
                                                             "flag), the harness checks and times torch"
                                              if dispatch is not None else
                                              "the harness calls that instead of the forward the file shows",
                                              "value": value if len(value) <= 80 else value[:77] + "..."},
                          evidence={"target": ast.unparse(target), "value": value[:200],
                                    "dispatch_line": dispatch.lineno if dispatch is not None else None},
                          # which arm runs depends on init arguments or a build flag the static stage
                          # cannot decide (as HS108's flag): the benchmark may well take the kernel's
                          severity=Severity.WARNING if dispatch is not None else None,
                          confidence=Confidence.MEDIUM if dispatch is not None else None)


def _custom_sibling(host, node: ast.AST, attr: str, model: ast.ClassDef) -> ast.Assign | None:
    """Another rebinding of ``attr`` to custom code in an ``if`` that also holds ``node`` (an
    ``if return_indices: torch path / elif ...: kernel path`` chain at init)."""
    for anc in host.ancestors(node):
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            return None
        if not isinstance(anc, ast.If):
            continue
        for n in subtree(anc):  # ``ast.walk``'s order, without its generators
            if n is node or not isinstance(n, ast.Assign):
                continue
            if any(isinstance(t, ast.Attribute) and t.attr == attr for t in n.targets):
                bodies = _callable_bodies(host, n.value, model)
                if bodies and any(_runs_custom(host, b, model, 0) for b in bodies):
                    return n
    return None


def _rebinding(host, target: ast.Attribute, model: ast.ClassDef) -> str | None:
    """Whether ``target`` names the model's (or its instance's) forward / __call__, and how."""
    owner = target.value
    cls = host.enclosing(target, ast.ClassDef)
    if isinstance(owner, ast.Name) and owner.id == model.name:
        return "the class's"
    if cls is not model:
        return None
    if isinstance(owner, ast.Name) and owner.id == "self":
        return "the instance's"
    if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "type" and \
            len(owner.args) == 1 and isinstance(owner.args[0], ast.Name) and owner.args[0].id == "self":
        return "the class's"
    if isinstance(owner, ast.Attribute) and owner.attr == "__class__" and isinstance(owner.value, ast.Name) and \
            owner.value.id == "self":
        return "the class's"
    return None


def _callable_bodies(host, value: ast.AST, model: ast.ClassDef) -> list[ast.AST] | None:
    """The code a rebound forward would run: a lambda's body, a def's or a method's; ``a if c else b``
    gives both.  ``None`` when the value is something the analysis cannot open (a partial, a module)."""
    if isinstance(value, ast.Lambda):
        return [value.body]
    if isinstance(value, ast.IfExp):
        a, b = _callable_bodies(host, value.body, model), _callable_bodies(host, value.orelse, model)
        return None if a is None or b is None else a + b
    fn = _method(value, model)
    if fn is None and isinstance(value, ast.Name):
        found = host.scope_of(value).lookup(value.id, value.lineno)
        fn = found[0] if found is not None and isinstance(found[0], (ast.FunctionDef, ast.AsyncFunctionDef)) else None
    return list(fn.body) if fn is not None else None


def _method(value: ast.AST, model: ast.ClassDef) -> ast.FunctionDef | None:
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self":
        for stmt in model.body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name == value.attr:
                return stmt
    return None


def _runs_custom(host, body: ast.AST, model: ast.ClassDef, depth: int) -> bool:
    """A compiled extension's function, a Triton launch or a method that runs one is called in ``body``."""
    for n in subtree(body):  # ``ast.walk``'s nodes, without its generators
        if not isinstance(n, ast.Call):
            continue
        if host.extension_for_call(n) is not None:
            return True
        func = n.func
        if isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name) and func.value.id in host.triton_kernels:
            return True
        fn = _method(func, model)
        if fn is not None and fn.name not in _REBOUND and depth < 2 and \
                any(_runs_custom(host, s, model, depth + 1) for s in fn.body):
            return True
    return False
