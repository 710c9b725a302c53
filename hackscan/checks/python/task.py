"""HS199: the task itself is degenerate (class 20): the reference's output does not depend on its input."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ...context import Hit, ScanContext
from ...python.degenerate import constant_reference


def degenerate_task_static(ctx: ScanContext) -> Iterator[Hit]:
    """HS199: the reference's source returns a constant (``python/degenerate.py``); said at the candidate's
    forward, since the finding is about the task every candidate of it shares."""
    found = constant_reference(ctx.reference)
    if found is None or ctx.host is None:
        return
    line, why = found
    program = ctx.program
    fwd = getattr(program, "forward", None)
    node = fwd if isinstance(fwd, ast.AST) else ctx.host.tree.body[0] if ctx.host.tree.body else None
    if node is None:
        return
    yield ctx.hit(ctx.at(node), args={"why": why, "line": line}, evidence={"reference_line": line})
