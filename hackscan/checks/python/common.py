"""Shared vocabulary of the Python data-flow rules (HS101-HS129): reference ops, tensor args, naming ops."""

from __future__ import annotations

from collections.abc import Iterable

from ...context import ScanContext
from ...python.catalog import HEAVY_FAMILIES
from ...python.equivalents import reference_work
from ...python.facts import Arm, KernelCall, ModelFlow, Return, TorchOp

_SCALAR_ANNOTATIONS = ("int", "float", "bool", "str", "Optional[int]", "Optional[float]")


def reference_families(ctx: ScanContext) -> frozenset[str]:
    """Op families that compute the reference's work (``matmul``, ``relu``, ``conv``), helpers and modules
    included, closed under the table of equivalent ops (``equivalents``): a candidate's op is the
    reference's op whatever either side's spelling (``addmm`` for ``nn.Linear``, ``F.silu`` for
    ``x * torch.sigmoid(x)``)."""
    if ctx.reference is None:
        return frozenset()
    return reference_work(ctx.reference.families)


def tensor_args(ctx: ScanContext, facts: ModelFlow) -> frozenset[str]:
    """forward's arguments that are tensors: by the reference's ``get_inputs`` when known, else by annotation."""
    ref = ctx.reference
    out: set[str] = set()
    for i, name in enumerate(facts.args):
        if ref is not None and ref.inputs and i < len(ref.inputs):
            spec = ref.inputs[i]
            if spec.kind == "scalar":
                continue
            if spec.kind != "unknown" or spec.shape is not None:
                out.add(name)
                continue
        ann = facts.arg_annotations.get(name, "")
        if ann in _SCALAR_ANNOTATIONS:
            continue
        out.add(name)
    return frozenset(out)


def rank_ops(ops: Iterable[TorchOp], ref_fams: frozenset[str]) -> list[TorchOp]:
    """The ops that best explain where the work happens: the reference's heavy ops first."""
    def key(op: TorchOp) -> tuple[int, int, str, int, int]:
        fams = op.families
        in_ref = bool(fams & ref_fams)
        heavy = bool(fams & HEAVY_FAMILIES)
        node = op.node
        # ties (two modules called on one line) by column, then discovery order: a set of ops
        # iterates in an order that follows memory addresses, so the first op must not depend on it.
        # The line read as ``TorchOp.line`` reads it, without the property call per op
        return (0 if in_ref and heavy else 1 if in_ref else 2 if heavy else 3, getattr(node, "lineno", 0), op.name,
                getattr(node, "col_offset", 0), op.id)
    # duplicates dropped by identity, not by the dataclass's equality (a hash of all six fields per
    # op): every TorchOp is made once per op id (``dataflow._op``) and the ops given here come from
    # one file's facts, so two equal ops are the same object (equal ops have equal ids); ``key`` ends
    # with the id, so the order does not depend on which duplicate was kept either
    return sorted({id(op): op for op in ops}.values(), key=key)


def is_reference_op(op: TorchOp, ref_fams: frozenset[str]) -> bool:
    return bool(op.families & ref_fams)


def short_op(op: TorchOp) -> str:
    name = op.name
    for prefix in ("torch.nn.functional.", "torch."):
        if name.startswith(prefix) and op.kind != "module":
            return ("F." if prefix == "torch.nn.functional." else "torch.") + name[len(prefix):]
    if op.kind == "module":
        return name.replace("torch.nn.", "nn.")
    if op.kind == "operator":
        return _OPERATOR_SYMBOLS.get(name, name)
    return name


_OPERATOR_SYMBOLS = {"torch.add": "+", "torch.sub": "-", "torch.mul": "*", "torch.div": "/", "torch.matmul": "@",
                     "torch.pow": "**", "torch.neg": "unary -", "torch.floor_divide": "//", "torch.remainder": "%",
                     "torch.gt": ">", "torch.ge": ">=", "torch.lt": "<", "torch.le": "<=", "torch.eq": "==",
                     "torch.ne": "!="}


def describe_ops(ops: list[TorchOp], limit: int = 3) -> str:
    """``torch.matmul (line 42), torch.relu (line 43)``."""
    parts = []
    seen: set[tuple[str, int]] = set()
    for op in ops:
        key = (short_op(op), op.line)
        if key not in seen:
            seen.add(key)
            if len(parts) < limit:  # the rest are only counted
                parts.append(f"{key[0]} (line {key[1]})")
    more = len(seen) - limit
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


def describe_kernel(k: KernelCall) -> str:
    if k.kind == "extension":
        return f"{k.extension}.{k.target}"
    if k.kind == "triton":
        return f"Triton kernel {k.target}"
    if k.kind == "imported":
        return f"{k.target} (imported; its code is in another module)"
    return k.name


def returns_of(facts: ModelFlow, arm: Arm) -> list[Return]:
    return list(arm.returns)


def kernel_names(facts: ModelFlow) -> list[str]:
    """What the file defines as custom kernels, for messages: ``ext.fn``, Triton kernels."""
    out = []
    for ext in facts.host.extensions:
        if ext.functions:
            out.extend(f"{ext.name}.{fn}" for fn in ext.functions)
        else:
            out.append(ext.name)
    out.extend(f"Triton kernel {k}" for k in facts.host.triton_kernels)
    return out
