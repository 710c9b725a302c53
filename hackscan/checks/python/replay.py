"""Seed or input replay (TAXONOMY class 18): knowing the test inputs in advance.

KernelBench-style harnesses draw inputs with ``get_inputs()`` (often under a fixed seed).  A
candidate that calls ``get_inputs`` itself, or re-seeds the generator and draws tensors of the
same shapes, has the test inputs at ``__init__`` and can precompute the answers; one that compares
its arguments with stored tensors can tell a known input from a new one.  Deterministic weight
initialisation (a seed before ``nn.Linear`` or parameter draws) is the legitimate look-alike.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ...context import Hit, ScanContext
from ...model import Confidence, Severity
from ...python.patterns import is_alias_expr, state_key, value_refs

SEED_CALLS = {"torch.manual_seed", "torch.cuda.manual_seed", "torch.cuda.manual_seed_all", "torch.random.manual_seed",
              "numpy.random.seed", "random.seed", "torch.seed", "numpy.random.default_rng", "numpy.random.RandomState"}
_SEED_ATTRS = frozenset(n.rsplit(".", 1)[-1] for n in SEED_CALLS) | {"manual_seed"}
RANDOM_TENSORS = {"torch.rand", "torch.randn", "torch.randint", "torch.randperm", "torch.normal", "torch.rand_like",
                  "torch.randn_like", "torch.randint_like", "numpy.random.rand", "numpy.random.randn",
                  "numpy.random.random", "numpy.random.uniform", "numpy.random.normal", "numpy.random.randint"}
_COMPARE_ATTRS = frozenset({"equal", "allclose", "isclose", "eq", "array_equal", "all", "any"})
COMPARISONS = {"torch.equal", "torch.allclose", "torch.isclose", "torch.eq", "numpy.array_equal", "numpy.allclose"}


def harness_input_call(ctx: ScanContext) -> Iterator[Hit]:
    """HS180: the candidate calls get_inputs() itself (outside its own definition and __main__)."""
    host = ctx.host
    if host is None:
        return
    facts = ctx.patterns
    for call in facts.calls_named("get_inputs"):
        if facts.is_main_guarded(call) or facts.in_input_factory(call):
            continue
        fn = facts.owner(call)
        live = fn in facts.runs
        where = f"{fn.name}()" if fn is not None else "module level"
        yield ctx.hit(ctx.at(call), args={"where": where},
                      severity=None if live else Severity.WARNING, confidence=None if live else Confidence.LOW,
                      evidence={"where": where, "runs": live})


def _const_int(host, expr: ast.AST) -> int | None:
    v = host.resolver.try_value(expr, host.scope_of(expr), getattr(expr, "lineno", None))
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _shape_of(host, call: ast.Call) -> tuple[int, ...] | None:
    """The shape a random-tensor call draws, when every dim is a constant."""
    args = list(call.args)
    name = host.canonical(call.func)
    if name in ("torch.randint", "numpy.random.randint"):
        args = [a for a in args if isinstance(a, (ast.Tuple, ast.List))] or [k.value for k in call.keywords
                                                                            if k.arg == "size"]
    elif name in ("torch.normal",):
        args = [k.value for k in call.keywords if k.arg == "size"]
    elif not args:
        args = [k.value for k in call.keywords if k.arg == "size"]
    dims: list[int] = []
    for a in args:
        if isinstance(a, (ast.Tuple, ast.List)):
            for e in a.elts:
                d = _const_int(host, e)
                if d is None:
                    return None
                dims.append(d)
        else:
            v = host.resolver.try_value(a, host.scope_of(a), a.lineno)
            if isinstance(v, list) and all(isinstance(x, int) for x in v):
                dims.extend(v)
            elif isinstance(v, int) and not isinstance(v, bool):
                dims.append(v)
            else:
                return None
    return tuple(dims) if dims else None


def _is_param_init(host, node: ast.AST) -> bool:
    """Wrapped in nn.Parameter / register_buffer / stored as a parameter: weight initialisation."""
    for anc in host.ancestors(node):
        if isinstance(anc, ast.Call):
            name = host.canonical(anc.func)
            if name.endswith(("nn.Parameter", "nn.parameter.Parameter")) or (
                    isinstance(anc.func, ast.Attribute) and anc.func.attr in ("register_buffer", "register_parameter",
                                                                              "copy_", "normal_", "uniform_")):
                return True
        if isinstance(anc, ast.stmt):
            break
    return False


def seeded_input_regeneration(ctx: ScanContext) -> Iterator[Hit]:
    """HS181: a constant seed followed by random tensors of exactly the reference's input shapes."""
    host = ctx.host
    ref = ctx.reference
    if host is None or ref is None:
        return
    wanted = {tuple(s.shape) for s in ref.inputs if s.shape and all(isinstance(d, int) for d in s.shape)}
    if not wanted:
        return
    facts = ctx.patterns
    if not facts.uses(*_SEED_ATTRS):
        return
    seeds_by_owner: dict[ast.AST | None, list[ast.Call]] = {}
    for call in facts.calls_named(*_SEED_ATTRS):
        name = facts.cname(call)
        is_seed = name in SEED_CALLS or (isinstance(call.func, ast.Attribute) and call.func.attr == "manual_seed")
        if not is_seed or facts.is_main_guarded(call) or facts.in_input_factory(call):
            continue
        if call.args and _const_int(host, call.args[0]) is None:
            continue  # a seed from os.urandom / time is not a replay
        seeds_by_owner.setdefault(facts.owner(call), []).append(call)
    for owner, seeds in seeds_by_owner.items():
        first = min(s.lineno for s in seeds)
        for call in facts.nodes_by_owner(ast.Call).get(owner, ()):
            if call.lineno < first or facts.cname(call) not in RANDOM_TENSORS:
                continue
            shape = _shape_of(host, call)
            if shape is None or shape not in wanted or _is_param_init(host, call):
                continue
            seed = min(seeds, key=lambda s: s.lineno)
            kept = _kept(facts, call, owner)
            yield ctx.hit(ctx.at(call), args={"shape": "x".join(map(str, shape)), "line": seed.lineno,
                                              "what": "and keeps it (or what is computed from it)" if kept else
                                                      "(used only locally here, e.g. a warm-up)"},
                          severity=None if kept else Severity.WARNING, confidence=None if kept else Confidence.LOW,
                          evidence={"shape": list(shape), "seed_line": seed.lineno, "kept": kept})
            break


def _kept(facts, call: ast.Call, owner: ast.AST | None) -> bool:
    """The drawn tensor (or a value computed from it) outlives the function: module level, self, globals."""
    host = facts.host
    stmt = next((a for a in host.ancestors(call) if isinstance(a, ast.stmt)), None)
    if owner is None:
        return True  # a module-level tensor lives as long as the module
    if not isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        return False
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    if any(not isinstance(t, ast.Name) for t in targets):
        return True  # self.x = torch.rand(...)
    names = facts.value_taint(owner, {t.id for t in targets if isinstance(t, ast.Name)})
    for node in facts.in_functions([owner], ast.Assign):
        if any(isinstance(t, (ast.Attribute, ast.Subscript)) for t in node.targets) and value_refs(node.value, names):
            return True
    for ret in facts.in_functions([owner], ast.Return):
        if ret.value is not None and value_refs(ret.value, names):
            return True
    return False


def stored_input_comparison(ctx: ScanContext) -> Iterator[Hit]:
    """HS182: forward compares its inputs' values with tensors it stored earlier."""
    host = ctx.host
    if host is None:
        return
    facts = ctx.patterns
    if not facts.uses(*_COMPARE_ATTRS):
        return
    stored_globals = {t.id for s in host.tree.body if isinstance(s, ast.Assign) for t in s.targets
                      if isinstance(t, ast.Name)}

    def stored(expr: ast.AST) -> str | None:
        e = expr
        while isinstance(e, (ast.Subscript,)) or (isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute)
                                                  and e.func.attr in ("to", "cuda", "contiguous", "float", "view")):
            e = e.value if isinstance(e, ast.Subscript) else e.func.value
        key = state_key(e)
        if key:
            return key
        if isinstance(e, ast.Name) and e.id in stored_globals:
            return e.id
        return None

    for fn in facts.reachable:
        inputs: frozenset[str] | None = None
        for call in facts.in_functions([fn], ast.Call):
            f = call.func
            last = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if last not in _COMPARE_ATTRS:
                continue
            if inputs is None:
                inputs = facts.input_values(fn) | facts.input_aliases(fn)
            if not inputs:
                break
            name = facts.cname(call)
            operands: list[ast.AST] = []
            if name in COMPARISONS and len(call.args) >= 2:
                operands = list(call.args[:2])
            elif isinstance(call.func, ast.Attribute) and call.func.attr in ("equal", "allclose", "isclose", "eq") \
                    and call.args and name not in COMPARISONS:
                operands = [call.func.value, call.args[0]]
            elif isinstance(call.func, ast.Attribute) and call.func.attr in ("all", "any") and isinstance(
                    call.func.value, ast.Compare) and len(call.func.value.comparators) == 1:
                operands = [call.func.value.left, call.func.value.comparators[0]]
            if len(operands) != 2:
                continue
            a, b = operands
            for live, kept in ((a, b), (b, a)):
                key = stored(kept)
                if key and (is_alias_expr(live, set(inputs)) or value_refs(live, inputs)) and not stored(live):
                    yield ctx.hit(ctx.at(call), args={"input": ast.unparse(live)[:40], "state": key},
                                  evidence={"state": key, "function": getattr(fn, "name", "")})
                    break
