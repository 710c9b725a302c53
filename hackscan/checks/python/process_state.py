"""HS124: a computation choice keyed on the process's global state (TAXONOMY class 11).

Grad mode, inference mode, deterministic algorithms, the thread count, the RNG's seed, the calling
thread and the clock differ between a harness's correctness check and its timing loop, and between
harnesses; an honest kernel's output cannot depend on them.  The value flow marks what a read of
them returns (``python/processstate.py``) and carries it through locals, attributes, containers,
helpers and closures like any value.  A branch whose condition carries it, or a table indexed by it,
is a finding when the arms compute the output differently (other ops or kernels, or one arm
returning early): keeping tensors for backward, choosing a workspace or logging under the same
condition computes the same output and is left alone.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ...context import Hit, ScanContext
from ...python.facts import Arm, Branch, ModelFlow
from ...python.processstate import LAST_NAMES, PREFIX, PROCESS_CALLS, describe
from ...python.provenance import Provenance
from ...python.resolve import dotted_name
from .guards import _arm_outputs, _src


def _process(flow: Provenance | None) -> frozenset[str]:
    if flow is None or not flow.state:
        return frozenset()
    return frozenset(s for s in flow.state if s.startswith(PREFIX))


def _signature(facts: ModelFlow, b: Branch, arm: Arm, stmts: list[ast.AST]) -> tuple[frozenset[str], frozenset[str], bool]:
    """What the arm computes: the kernels and ops it runs (writes into a buffer included) and those
    of the values it hands back, and whether it slices an input (works on part of it)."""
    outs = _arm_outputs(facts, b, arm)
    kernels = {k.name for k in arm.kernels} | {k.name for f in outs for k in facts.kernels_of(f)}
    ops = {o.name for o in arm.ops} | {o.name for f in outs for o in facts.ops_of(f)}
    flows = facts._flows
    sliced = any(f.slices or f.partial for f in outs) or any(
        type(n) is ast.Subscript and type(n.ctx) is ast.Load and any(type(p) is ast.Slice for p in ast.walk(n.slice))
        and bool(getattr(flows.get(n.value), "inputs", None)) for st in stmts for n in ast.walk(st))
    return frozenset(ops), frozenset(kernels), sliced


def _arm_statements(facts: ModelFlow, b: Branch) -> tuple[list[ast.AST], list[ast.AST]]:
    """The statements (expressions of a ternary) of each path: for an ``if`` without ``else``, the
    ones after it in its block."""
    node = b.node
    if isinstance(node, ast.IfExp):
        return [node.body], [node.orelse]
    if not isinstance(node, ast.If):
        return [], []
    if node.orelse:
        return list(node.body), list(node.orelse)
    fn = facts.host.tree if hasattr(facts, "host") else None
    for parent in ast.walk(fn) if fn is not None else ():
        for field in ("body", "orelse", "finalbody"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and node in block:
                return list(node.body), block[block.index(node) + 1:]
    return list(node.body), []


def _differs(facts: ModelFlow, b: Branch) -> str | None:
    """Why the two paths compute the output differently, or None."""
    body, orelse = b.body, b.orelse
    if orelse.label == "after" and not body.terminates:
        # no else, and the arm falls through to what follows: it only adds work (keeping tensors
        # for backward, logging) unless it launches a kernel the other path never does
        if body.kernels and not body.returns:
            return "a kernel runs only under it"
        return None
    first, second = _arm_statements(facts, b)
    a, c = _signature(facts, b, body, first), _signature(facts, b, orelse, second)
    if a == c:
        return None
    if a[1] != c[1]:
        return "the paths run different kernels"
    if a[2] != c[2]:
        return "one path computes on a slice of the input"
    return "the paths compute the output with different ops"


def _property_reads(ctx: ScanContext, facts: ModelFlow, state: frozenset[str]) -> frozenset[str]:
    """Process state read by the properties of ModelNew a condition reads (``self.timed``)."""
    if not any(s.startswith("self.") for s in state):
        return frozenset()
    cls = facts.model_class if hasattr(facts, "model_class") else None
    host = ctx.host
    if cls is None and host is not None:
        cls = host.classes().get("ModelNew")
    if cls is None:
        return frozenset()
    out = set()
    for fn in cls.body:
        if not isinstance(fn, ast.FunctionDef) or f"self.{fn.name}" not in state:
            continue
        if not any(dotted_name(d) in ("property", "functools.cached_property", "cached_property")
                   for d in fn.decorator_list):
            continue
        for n in ast.walk(fn):
            if isinstance(n, ast.Call) and host.canonical(n.func) in PROCESS_CALLS:
                out.add(PREFIX + host.canonical(n.func))
    return frozenset(out)


def _lookup_reads(ctx: ScanContext, flows: dict[ast.AST, Provenance], index: ast.AST) -> frozenset[str]:
    """Process state an index reads, by its flow or, where the analysis kept none, by its calls."""
    out = set(_process(flows.get(index)))
    for n in ast.walk(index):
        out |= _process(flows.get(n))
        if isinstance(n, ast.Call) and ctx.host is not None and ctx.host.canonical(n.func) in PROCESS_CALLS:
            out.add(PREFIX + ctx.host.canonical(n.func))
    return frozenset(out)


def _same_entries(ctx: ScanContext, table: ast.AST) -> bool:
    """Whether a table looked up by process state holds one path only: a dict literal assigned to
    the same name (``self._paths = {...}``, ``paths = {...}``) whose values are all the same."""
    want = dotted_name(table)
    if not want or ctx.host is None:
        return False
    found = False
    for node in ctx.host.of_type(ast.Assign):
        if not isinstance(node.value, ast.Dict) or not any(dotted_name(t) == want for t in node.targets):
            continue
        found = True
        if len({ast.unparse(v) for v in node.value.values if v is not None}) > 1:
            return False
    return found


def choice_keyed_on_process_state(ctx: ScanContext) -> Iterator[Hit]:
    """HS124: a branch or a table lookup keyed on grad / inference mode, thread count, RNG seed,
    thread or clock whose choices compute the output differently."""
    # every read the value flow marks is spelled with one of these names in the file: most candidates
    # have none, and the rule then costs a set test instead of a walk over every flow
    if ctx.host is None or not ctx.patterns.uses(*LAST_NAMES):
        return
    facts = ctx.model_flow
    if facts is None or facts.forward is None:
        return
    seen: set[int] = set()
    for b in facts.branches:
        if b.kind not in ("if", "ifexp") or not facts.feeds_output(b.function):
            continue
        reads = _process(b.condition.flow) | _property_reads(ctx, facts, b.condition.state)
        if not reads:
            continue
        why = _differs(facts, b)
        if why is None or b.node.lineno in seen:
            continue
        seen.add(b.node.lineno)
        yield ctx.hit(ctx.at(b.node), args={"what": describe(reads), "how": _src(b.condition.node), "why": why},
                      evidence={"condition": _src(b.condition.node, 200), "reads": sorted(reads),
                                "arms": [b.body.first_line, b.orelse.first_line]})
    flows = facts._flows
    for node in list(flows):
        # ``table[torch.is_inference_mode_enabled()](x)``: a path looked up by the state
        if type(node) is not ast.Call or type(node.func) is not ast.Subscript:
            continue
        reads = _lookup_reads(ctx, flows, node.func.slice)
        if not reads or node.lineno in seen or _same_entries(ctx, node.func.value):
            continue
        seen.add(node.lineno)
        yield ctx.hit(ctx.at(node), args={"what": describe(reads), "how": _src(node.func, 70),
                                          "why": "the table's entries are different paths"},
                      evidence={"lookup": _src(node.func, 200), "reads": sorted(reads)})
