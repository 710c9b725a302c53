"""A reference whose output does not depend on its input, read from its source (HS199, HS409's static twin).

The one shape found so far in real tasks: a softmax (or log_softmax) over a dim an earlier reduction
kept with size 1 (``x = x.mean(dim=1, keepdim=True); return torch.softmax(x, dim=1)``) is all ones
(all zeros) whatever the input.  A candidate that returns the constant is exact, not a fake: the task
is at fault.  The chain is followed on one name through forward's straight-line assignments; any
other name mixed in later ends it (the output could depend on it).
"""

from __future__ import annotations

import ast

from .reference import ReferenceFacts

_REDUCE = frozenset({"mean", "sum", "amax", "amin", "max", "min", "prod", "logsumexp", "norm"})
_SOFTMAX = {"softmax": "ones", "log_softmax": "zeros"}
_HARMLESS = frozenset({"self", "torch", "F", "nn"})


def _call(node: ast.AST) -> tuple[str, ast.expr | None, ast.Call] | None:
    """``torch.f(x, ...)`` / ``F.f(x, ...)`` / ``x.f(...)``: (f, x, call)."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return None
    f = node.func
    if isinstance(f.value, ast.Name) and f.value.id in ("torch", "F"):
        return f.attr, (node.args[0] if node.args else None), node
    return f.attr, f.value, node


def _kw(call: ast.Call, name: str, pos: int) -> object:
    for k in call.keywords:
        if k.arg == name and isinstance(k.value, ast.Constant):
            return k.value.value
    if len(call.args) > pos and isinstance(call.args[pos], ast.Constant):
        return call.args[pos].value
    return None


def constant_reference(ref: ReferenceFacts | None) -> tuple[int, str] | None:
    """(line, why) when the reference's forward returns a constant whatever its input, else None."""
    if ref is None or not ref.has_model:
        return None
    model = ref.module.classes().get("Model")
    fwd = None
    for s in (model.body if model else []):  # a loop, not ``next`` on a generator left early (GeneratorExit)
        if isinstance(s, ast.FunctionDef) and s.name == "forward":
            fwd = s
            break
    if fwd is None:
        return None
    kept: dict[str, set[object]] = {}  # name -> dims reduced to size 1
    const: dict[str, tuple[int, str]] = {}
    for stmt in fwd.body:
        if isinstance(stmt, ast.Return):
            v = stmt.value
            if isinstance(v, ast.Name) and v.id in const:
                return const[v.id]
            got = _call(v) if v is not None else None
            if got and got[0] in _SOFTMAX and isinstance(got[1], ast.Name) and \
                    _kw(got[2], "dim", 1 if v.func.value.id in ("torch", "F") else 0) in kept.get(got[1].id, ()):  # type: ignore[union-attr]
                return stmt.lineno, _why(got[0])
            return None
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            continue
        name, value = stmt.targets[0].id, stmt.value
        got = _call(value)
        src = got[1].id if got and isinstance(got[1], ast.Name) else None
        if name in const:
            names = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
            if not names <= _HARMLESS | {name}:
                del const[name]
            continue
        if got and got[0] in _REDUCE and src is not None and _kw(got[2], "keepdim", 2) is True:
            kept[name] = {_kw(got[2], "dim", 1 if value.func.value.id in ("torch", "F") else 0)}  # type: ignore[attr-defined]
        elif got and got[0] in _SOFTMAX and src in kept:
            dim = _kw(got[2], "dim", 1 if value.func.value.id in ("torch", "F") else 0)  # type: ignore[attr-defined]
            if dim in kept[src]:
                const[name] = (stmt.lineno, _why(got[0]))
            kept.pop(name, None)
        else:
            kept.pop(name, None)
    return None


def _why(op: str) -> str:
    return (f"the reference's {op} runs over a dim an earlier keepdim reduction left with size 1, so its output is "
            f"all {_SOFTMAX[op]} whatever the input")
