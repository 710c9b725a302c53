"""HS118: the branch the benchmark takes runs torch, not the kernel (classes 3 and 5).

Dispatch on metadata is legitimate when the kernel serves the benchmark's case (``if not x.is_cuda:
return torch.relu(x)`` never fires under the harness).  It is a fallback in disguise when the arm the
harness takes is the torch one: ``if not x.requires_grad: return torch.relu_(x)`` (benchmark inputs do
not require grad), ``if not self.training: kernel`` (KernelBench never calls ``.eval()``),
``if x.size(0) <= 128: torch`` when the benchmark's batch is 128.  This module decides such conditions
under what a KernelBench-style harness guarantees: inputs from ``get_inputs()`` on CUDA, with the
reference's shapes and dtype, contiguous, not requiring grad; the model in training mode; CUDA available.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Iterator
from typing import Any

from ...context import Hit, ScanContext
from ...cuda.buildability import never_runs
from ...model import Confidence, Severity
from ...python.facts import Arm, ModelFlow
from ...python.reference import InputSpec
from .common import describe_kernel, describe_ops, is_reference_op, rank_ops, reference_families

_DTYPES = {"torch.float32": "float32", "torch.float": "float32", "torch.float16": "float16", "torch.half": "float16",
           "torch.bfloat16": "bfloat16", "torch.float64": "float64", "torch.double": "float64",
           "torch.int64": "int64", "torch.long": "int64", "torch.int32": "int32", "torch.int": "int32"}
_ARITH = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
          ast.Mod: operator.mod, ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.Pow: operator.pow}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge}


class HarnessModel:
    """Three-valued evaluation (True / False / None = unknown) of metadata conditions under the harness."""

    def __init__(self, ctx: ScanContext, facts: ModelFlow):
        self.host = facts.host
        self.inputs: dict[str, InputSpec] = {}
        ref = ctx.reference
        if ref is not None:
            for name, spec in zip(facts.args, ref.inputs, strict=False):
                if spec.kind not in ("scalar", "unknown") or spec.shape is not None:
                    self.inputs[name] = spec
        self.self_name = "self"
        fwd = facts.forward
        if fwd is not None and fwd.node.args.args:
            self.self_name = fwd.node.args.args[0].arg
        # why a condition has its truth, as (node, text): rendered only for a branch that is reported,
        # since ``ast.unparse`` costs more than the whole evaluation and most branches report nothing
        self.reasons: list[tuple[ast.AST | None, str]] = []
        self.depth = 0
        self.flags = frozenset(facts.fallback_flags)
        self.profile = ctx.profile
        self.holders = facts.holders
        self.flow_of = facts.flow_of
        self.model = facts.model
        self._stored: frozenset[str] | None = None

    # ------------------------------------------------------------------ values
    def value(self, e: ast.AST) -> Any:
        """A Python value for a metadata expression, or ``None`` when unknown."""
        if isinstance(e, ast.Constant):
            return e.value
        if isinstance(e, (ast.Tuple, ast.List)):
            vals = [self.value(x) for x in e.elts]
            return None if any(v is None for v in vals) else tuple(vals)
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
            v = self.value(e.operand)
            return -v if isinstance(v, (int, float)) else None
        if isinstance(e, ast.BinOp) and type(e.op) in _ARITH:
            # ``1 << 28``, ``64 * 1024``, ``x.size(0) * x.size(1)``: integer arithmetic on known values
            a, b = self.value(e.left), self.value(e.right)
            if type(a) is int and type(b) is int and (type(e.op) is not ast.Pow or 0 <= b <= 64) and \
                    (type(e.op) not in (ast.LShift, ast.RShift) or 0 <= b <= 64) and \
                    (type(e.op) not in (ast.FloorDiv, ast.Mod) or b != 0):
                return _ARITH[type(e.op)](a, b)
            return None
        canon = self.host.canonical(e) if isinstance(e, (ast.Name, ast.Attribute)) else ""
        if canon in _DTYPES:
            return ("dtype", _DTYPES[canon])
        if isinstance(e, ast.Attribute):
            spec = self._input(e.value)
            if spec is None and e.attr in ("is_cuda", "requires_grad", "dtype"):
                spec = self._input_alias(e.value)
            if spec is not None:
                if e.attr == "is_cuda":
                    return self._note(True, e, "is True (inputs are on the GPU)")
                if e.attr == "requires_grad":
                    return self._note(False, e, "is False (benchmark inputs do not require grad)")
                if e.attr == "dtype":
                    return ("dtype", spec.dtype)
                if e.attr == "shape" and spec.shape and all(d is not None for d in spec.shape):
                    return tuple(spec.shape)
                if e.attr == "ndim" and spec.shape:
                    return len(spec.shape)
            if isinstance(e.value, ast.Name) and e.value.id == self.self_name and f"self.{e.attr}" in self.flags:
                return None
            if isinstance(e.value, ast.Name) and e.value.id == self.self_name:
                threshold = self._init_constant(e.attr)
                if threshold is not None:
                    return self._note(threshold, e, f"is {threshold:g} (a constant set in __init__)")
            if e.attr == "training" and self._is_self_chain(e.value):
                # the premise is the harness profile's: KernelBench never calls ``.eval()``, others do
                if self.profile.eval_mode:
                    return self._note(False, e, f"is False (the {self.profile.name} harness calls .eval())")
                return self._note(True, e, f"is True (the {self.profile.name} harness never calls .eval())")
            if e.attr == "type" and isinstance(e.value, ast.Attribute) and e.value.attr == "device" and \
                    self._input_alias(e.value.value) is not None:
                return "cuda"
        if isinstance(e, ast.Subscript):
            base = self.value(e.value)
            idx = self.value(e.slice)
            if isinstance(base, tuple) and isinstance(idx, int) and -len(base) <= idx < len(base):
                return base[idx]
            return None
        if isinstance(e, ast.Call):
            return self._call(e)
        if isinstance(e, ast.Name) and e.id not in self.inputs:
            if e.id in self.flags:
                return None  # whether the kernel built: unknown by design
            scope = self.host.scope_of(e)
            found = scope.lookup(e.id, e.lineno)
            # ``N = x.shape[0]`` then ``if N <= 128``: follow one local assignment of a metadata expression
            if found is not None and found[1] == "assign" and self.depth < 3 and \
                    isinstance(found[0], (ast.Attribute, ast.Subscript, ast.Call)):
                self.depth += 1
                try:
                    return self.value(found[0])
                finally:
                    self.depth -= 1
            v = self.host.resolver.try_value(e, scope, e.lineno)
            return v if isinstance(v, (int, float, bool)) else None
        return None

    def _call(self, e: ast.Call) -> Any:
        canon = self.host.canonical(e.func)
        if canon == "torch.cuda.is_available":
            return self._note(True, None, "`torch.cuda.is_available()` is True")
        if isinstance(e.func, ast.Name) and e.func.id == "len" and len(e.args) == 1:
            v = self.value(e.args[0])
            return len(v) if isinstance(v, tuple) else None
        if isinstance(e.func, ast.Name) and e.func.id == "isinstance" and len(e.args) == 2 and \
                self._input(e.args[0]) is not None and self.host.canonical(e.args[1]) == "torch.Tensor":
            return True
        if not isinstance(e.func, ast.Attribute):
            return None
        spec = self._input(e.func.value)
        if spec is None:
            return None
        m = e.func.attr
        shape = spec.shape if spec.shape and all(d is not None for d in spec.shape) else None
        if m == "is_contiguous" and not e.args and not e.keywords:
            return self._note(True, e, "is True (fresh inputs are contiguous)")
        if m in ("dim", "ndimension") and spec.shape:
            return len(spec.shape)
        if m in ("numel", "nelement") and shape:
            n = 1
            for d in shape:
                n *= d
            return n
        if m == "size" and shape:
            if not e.args:
                return tuple(shape)
            i = self.value(e.args[0])
            return shape[i] if isinstance(i, int) and -len(shape) <= i < len(shape) else None
        if m == "is_floating_point":
            return spec.dtype.startswith(("float", "bfloat"))
        return None

    def _init_constant(self, attr: str) -> int | float | None:
        """``self.min_size = 10**9`` in ``__init__`` and never stored again: the threshold's value.

        A size threshold kept in an attribute decides the harness's path as a literal would; one
        that other methods rewrite (an autotuner's measured cut-over) is unknown.
        """
        holder = self.holders.get(attr)
        if holder is None or holder.kind != "config":
            return None
        v = _fold(holder.node)
        if v is None or attr in self._restored():
            return None
        return v

    def _restored(self) -> frozenset[str]:
        """``self`` attributes stored outside ``__init__`` (asked only when a branch reads a config one)."""
        if self._stored is None:
            out: set[str] = set()
            model = self.model
            for fn in (model.body if model is not None else ()):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.name == "__init__":
                    continue
                for n in ast.walk(fn):
                    targets = n.targets if isinstance(n, ast.Assign) else \
                        [n.target] if isinstance(n, (ast.AugAssign, ast.AnnAssign)) else ()
                    for t in targets:
                        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                            out.add(t.attr)
                    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "setattr":
                        out.add("*")  # ``setattr(self, name, v)``: any attribute may be rewritten
            self._stored = frozenset(out)
        return self._stored if "*" not in self._stored else frozenset(self.holders)

    def _input(self, e: ast.AST) -> InputSpec | None:
        return self.inputs.get(e.id) if isinstance(e, ast.Name) else None

    def _input_alias(self, e: ast.AST) -> InputSpec | None:
        """The input ``e`` is or shares storage with, for what every view of it keeps (``requires_grad``,
        ``is_cuda``, ``dtype``, device): a submodule's parameter (``def forward(self, t)`` of a child
        called with ``x``) is the input whatever it is called there.  Not for shapes: a view has its own."""
        spec = self._input(e)
        if spec is not None or not isinstance(e, ast.Name):
            return spec
        flow = self.flow_of(e)
        if flow is not None and len(flow.alias) == 1 and not flow.ops and not flow.kernels:
            return self.inputs.get(next(iter(flow.alias)))
        return None

    def _is_self_chain(self, e: ast.AST) -> bool:
        while isinstance(e, ast.Attribute):
            e = e.value
        return isinstance(e, ast.Name) and e.id == self.self_name

    def _note(self, value: Any, node: ast.AST | None, reason: str) -> Any:
        self.reasons.append((node, reason))
        return value

    # ------------------------------------------------------------------ truth
    def truth(self, e: ast.AST) -> bool | None:
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            t = self.truth(e.operand)
            return None if t is None else not t
        if isinstance(e, ast.BoolOp):
            outer = self.reasons
            parts = []
            for v in e.values:
                self.reasons = []
                parts.append((self.truth(v), self.reasons))
            self.reasons = outer
            vals = [t for t, _ in parts]
            decisive = False if isinstance(e.op, ast.And) else True
            if decisive in vals:  # one part decides: only its reasons explain the outcome
                self.reasons.extend(next(r for t, r in parts if t is decisive))
                return decisive
            if all(v is (not decisive) for v in vals):
                for _, r in parts:
                    self.reasons.extend(r)
                return not decisive
            return None
        if isinstance(e, ast.Compare):
            left = self.value(e.left)
            result: bool | None = True
            for op, right_node in zip(e.ops, e.comparators, strict=False):
                right = self.value(right_node)
                if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right_node, (ast.Tuple, ast.List, ast.Set)):
                    opts = [self.value(x) for x in right_node.elts]
                    if left is None or any(o is None for o in opts):
                        return None
                    ok = left in opts
                    step = ok if isinstance(op, ast.In) else not ok
                elif type(op) in _CMP and left is not None and right is not None:
                    try:
                        step = bool(_CMP[type(op)](left, right))
                    except TypeError:
                        return None
                else:
                    return None
                if not step:
                    result = False
                left = right
            if result is not None:
                self.reasons.append((e, f"is {result} for the benchmark's inputs"))
            return result
        v = self.value(e)
        return v if isinstance(v, bool) else None


_ARITH = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
          ast.Pow: operator.pow, ast.LShift: operator.lshift}


def _fold(e: ast.AST, depth: int = 0) -> int | float | None:
    """The number a constant expression (``10**9``, ``1 << 20``, ``4096 * 4096``, ``float("inf")``) stands for."""
    if isinstance(e, ast.Constant) and isinstance(e.value, (int, float)) and not isinstance(e.value, bool):
        return e.value
    if depth > 4:
        return None
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        v = _fold(e.operand, depth + 1)
        return -v if v is not None else None
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in ("float", "int") and \
            len(e.args) == 1 and isinstance(e.args[0], ast.Constant) and e.args[0].value in ("inf", "Infinity"):
        return float("inf")
    if isinstance(e, ast.BinOp) and type(e.op) in _ARITH:
        a, b = _fold(e.left, depth + 1), _fold(e.right, depth + 1)
        # exponents and shifts stay small: a literal such as ``2 ** 10**9`` must not hang the scan
        if a is None or b is None or (isinstance(e.op, (ast.Pow, ast.LShift)) and not 0 <= b <= 64):
            return None
        try:
            return _ARITH[type(e.op)](a, b)
        except (ArithmeticError, TypeError, ValueError):
            return None
    return None


def _reason_text(reason: tuple[ast.AST | None, str]) -> str:
    node, text = reason
    return text if node is None else f"`{ast.unparse(node)}` {text}"


def harness_path_torch_fallback(ctx: ScanContext) -> Iterator[Hit]:
    """HS118."""
    facts = ctx.model_flow
    if facts is None or facts.forward is None or not facts.kernels:
        return
    model = HarnessModel(ctx, facts)
    ref = reference_families(ctx)
    for b in facts.branches:
        if b.kind not in ("if", "ifexp") or not facts.feeds_output(b.function):
            continue
        cond = b.condition
        if cond.value_dependent:
            continue  # HS101 speaks for these; a flag only matters if the truth depends on it (then it is None)
        # whichever arm the harness takes, it must be a torch path with a kernel on the other arm:
        # when neither way round qualifies, the condition's truth (the costly part) cannot matter
        if not ((b.orelse.kernels and _bypass(facts, b.body, b.body.terminates)) or
                (b.body.kernels and _bypass(facts, b.orelse, b.body.terminates))):
            continue
        model.reasons = []
        t = model.truth(cond.node)
        if t is None:
            continue
        taken, other = (b.body, b.orelse) if t else (b.orelse, b.body)
        # the kernel must sit on the arm the benchmark skips: a choice between two torch paths is not ours
        if not _bypass(facts, taken, b.body.terminates) or not other.kernels:
            continue
        ranked = rank_ops(taken.ops, ref)
        ref_ops = [o for o in ranked if is_reference_op(o, ref)]
        kernel = other.kernels[0]
        why = "; ".join(dict.fromkeys(map(_reason_text, model.reasons))) or f"`{ast.unparse(cond.node)}` is {t}"
        args = {"why": why, "ops": describe_ops(ref_ops or ranked), "kernel": describe_kernel(kernel),
                "kernel_line": kernel.line, "harness": model.profile.name}
        message = None
        skipped = None if _torch_path(taken, b.body.terminates) else _skipping(facts, taken)
        if skipped is not None and ctx.reference is not None and \
                any(v in ctx.reference.dims for v, _ in cond.shape_literals):
            continue  # a test against the task's own dims that skips the work is HS102's finding
        if skipped is not None:
            # ``x if x.numel() > 0 else kernel(x)``: the benchmark's arm computes nothing at all
            message = (f"under the benchmark ({model.profile.name} harness) {why}, so forward returns {skipped} "
                       f"without computing; the kernel {args['kernel']} (line {kernel.line}) only runs in cases "
                       "the benchmark never exercises")
        elif never_runs(ctx, other.kernels) is not None:  # HS119 says why; the torch path is all that runs
            message = (f"under the benchmark ({model.profile.name} harness) {why}, so forward takes the torch path ({args['ops']}); the kernel "
                       f"{args['kernel']} (line {kernel.line}) can never run at all (HS119), so the torch path is "
                       "what runs")
        yield ctx.hit(ctx.at(b.node), message=message, args=args,
                      evidence={"condition": ast.unparse(cond.node)[:200], "truth": t, "arm": taken.label,
                                "harness": model.profile.name,
                                "ops": [o.name for o in ranked]},
                      # an error when the torch path computes the reference's op, or nothing is computed at all
                      severity=Severity.ERROR if ref_ops or skipped else Severity.WARNING,
                      confidence=Confidence.HIGH if ref_ops or skipped else Confidence.MEDIUM)


def _skipping(facts: ModelFlow, arm: Arm) -> str | None:
    """What an arm with no kernel and no torch compute hands back, when that is an input (or a view of
    one) or a constant: ``"its input `x`"`` / ``"a constant"``; None otherwise."""
    if arm.empty or arm.kernels or arm.raises and not arm.returns:
        return None
    for f in [r.flow for r in arm.returns] + ([arm.value] if arm.value is not None else []):
        if f.kernels:
            continue
        if f.passthrough:
            return "its input " + ", ".join(f"`{a}`" for a in sorted(f.inputs)) + " unchanged"
        if f.constant:
            allocs = facts.allocs_of(f)
            return f"a constant ({allocs[0].name}, line {allocs[0].line})" if allocs else "a constant"
    return None


def _bypass(facts: ModelFlow, arm: Arm, body_terminates: bool) -> bool:
    """The arm computes with torch, or hands back an input or a constant, and no kernel touched it."""
    return _torch_path(arm, body_terminates) or _skipping(facts, arm) is not None


def _torch_path(arm: Arm, body_terminates: bool) -> bool:
    """The arm computes with torch and hands back a value no kernel touched."""
    if arm.empty or arm.kernels or not arm.ops:
        return False
    if arm.label == "after" and not body_terminates:
        return any(not r.flow.kernels for r in arm.returns) and all(not r.flow.kernels for r in arm.returns)
    outputs = [r.flow for r in arm.returns] + ([arm.value] if arm.value is not None else [])
    return any([not f.kernels for f in outputs]) or bool(arm.bindings and not arm.raises)
