"""Output caching and memoization (TAXONOMY class 8): state that outlives a call and stands in for work.

A harness calls ``forward`` many times, often with the very same input tensors.  A candidate that
keeps the previous output (in ``self``, a module-level dict, an ``lru_cache``, a captured CUDA
graph) and hands it back instead of computing is fast and, on those inputs, right.  What separates
it from a legitimate cache is *what* is cached: compiled modules, workspaces, autotune choices and
weight transforms do not depend on forward's input values; an output does.  The checks below use
the input-value taint of ``patterns.MiscFacts``: state counts as an output cache only when some
call writes it with values computed from forward's inputs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from ...context import Hit, ScanContext
from ...model import Confidence, Severity
from ...python.indirection import namespace_of, write_call
from ...python.module import HostModule, subtree
from ...python.patterns import (
    VIEW_METHODS,
    MiscFacts,
    _assigned_names,
    _function_params,
    is_alias_expr,
    state_key,
    value_names,
    value_refs,
)
from ...python.resolve import dotted_name

_HARMLESS_CALLS = {"len", "isinstance", "id", "hash", "print", "type", "getattr", "hasattr", "str", "repr", "bool",
                   "torch.equal", "torch.allclose", "torch.is_tensor", "logging.debug", "logging.info"}
_MUTATORS = ("copy_", "fill_", "zero_", "add_", "mul_", "sub_", "div_", "clamp_", "relu_", "index_copy_", "scatter_",
             "masked_fill_", "set_", "resize_", "normal_", "uniform_")
_CLONES = frozenset(VIEW_METHODS | {"clone", "detach", "float", "to", "cpu", "cuda", "contiguous"})


def _global_containers(facts: MiscFacts) -> set[str]:
    """Module-level state functions may fill: containers bound at module level (``_CACHE = {}``,
    read through a subscript) and names that some function declares ``global``.  Worked out once per
    scan (HS130 and HS131 both ask; neither changes the set)."""
    return facts.shared("state.global_containers", lambda: _find_global_containers(facts))  # type: ignore[return-value]


def _find_global_containers(facts: MiscFacts) -> set[str]:
    out: set[str] = set()
    host = facts.host
    for stmt in host.tree.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, (ast.Dict, ast.List, ast.Call)):
            for t in stmt.targets:
                if isinstance(t, ast.Name):
                    out.add(t.id)
        elif isinstance(stmt, ast.ClassDef):
            # a container in a module-level class's body (``class _Store: entries = {}``) is module
            # state too, shared by every instance and every call
            for sub in stmt.body:
                if isinstance(sub, ast.Assign) and isinstance(sub.value, (ast.Dict, ast.List)):
                    out.update(f"{stmt.name}.{t.id}" for t in sub.targets if isinstance(t, ast.Name))
    for g in host.of_type(ast.Global):
        out.update("global:" + n for n in g.names)
    # the module's namespace written through ``globals()`` / ``vars(sys.modules[__name__])``: the
    # names written are module state as a ``global`` declaration makes them, and a local that holds
    # the namespace itself (``ns = globals()``) or one of its entries (``memo =
    # globals().setdefault("memo", {})``) reads and writes that state
    if not facts.uses("globals", "vars", "__dict__", "setattr", "__setattr__"):
        return out  # no namespace is written or held: most files (a pass over every call is not free)
    canonical = host.canonical
    for node in host.of_type(ast.Call, ast.Assign):
        if type(node) is ast.Call:
            out.update("global:" + t.id for t, _ in write_call(node, canonical) if type(t) is ast.Name)
            continue
        if _namespace_handle(node.value, host):
            out.update("global:" + t.id for t in node.targets if type(t) is ast.Name)
    return out


def _namespace_handle(value: ast.AST, host: HostModule) -> bool:
    """Whether ``value`` is the module's namespace or an entry fetched from it (``globals()``,
    ``vars(sys.modules[__name__])``, ``globals().setdefault("memo", {})``, ``globals().get("memo")``)."""
    held = namespace_of(value, host.canonical)
    if held is None and type(value) is ast.Call and type(value.func) is ast.Attribute and \
            value.func.attr in ("setdefault", "get"):
        held = namespace_of(value.func.value, host.canonical)
    return held is not None and type(held) is ast.Name and held.id == "__module__"


def _state_of(expr: ast.AST, globals_: set[str]) -> str | None:
    """``self.cache`` / ``_CACHE`` for an expression that reads or writes persistent state."""
    if type(expr) is ast.Name:  # ``state_key`` of a bare name is None: settled by the globals alone
        name = expr.id
        return name if globals_ and (name in globals_ or "global:" + name in globals_) else None
    key = state_key(expr)
    if key is not None:
        return key
    e, through = expr, False
    while isinstance(e, ast.Subscript):
        e, through = e.value, True
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in ("get", "setdefault"):
        e, through = e.func.value, True
    if through and isinstance(e, ast.Name) and (e.id in globals_ or "global:" + e.id in globals_):
        return e.id
    if type(e) is ast.Attribute and type(e.value) is ast.Name and f"{e.value.id}.{e.attr}" in globals_:
        return f"{e.value.id}.{e.attr}"  # a module-level class's container
    return None


def _unwrap(expr: ast.AST) -> ast.AST:
    """``self.out.clone()`` -> ``self.out``: a copy of stale state is stale."""
    e = expr
    while isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in _CLONES:
        e = e.func.value
    return e


@dataclass
class _Writes:
    """Writes of persistent state in code reachable from forward, keyed by state name."""

    tainted: dict[str, ast.AST]  # state -> first write with input-derived values


def _state_writes(facts: MiscFacts, globals_: set[str], keys: set[str]) -> _Writes:
    """The first write of each state in ``keys`` with values derived from forward's inputs."""
    tainted: dict[str, ast.AST] = {}
    for fn in facts.reachable:
        cands: list[tuple[str, ast.AST, list[ast.AST]]] = []
        for node in facts.in_functions([fn], ast.Assign, ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for tt in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
                    key = _state_of(tt, globals_) if isinstance(tt, (ast.Attribute, ast.Subscript, ast.Name)) else None
                    if key in keys:
                        cands.append((key, node, [node.value]))
        for call in facts.in_functions([fn], ast.Call):
            f = call.func
            if not isinstance(f, ast.Attribute) or f.attr not in _STATE_WRITERS:
                continue
            key = _state_of(f.value, globals_)
            if key in keys:
                cands.append((key, call, list(call.args) + [k.value for k in call.keywords]))
        # a write whose values carry no names at all (``self.out = torch.empty(n, device=x.device)``:
        # allocations and metadata carry none) can never be tainted, whatever the inputs are; when
        # no write of ``fn`` carries any, its input taint (the costliest fact here) is not needed
        cands = [c for c in cands if any(value_names(v) for v in c[2])]
        if not cands:
            continue
        # the input taint of ``fn`` grows from seeds (``MiscFacts._input_seeds``, a pass over every
        # reachable function) that lie within ``_seed_bound``; the taint grown from the whole bound
        # (one function's propagation) holds it: a write whose values read none of that can never
        # be tainted, and when no write of ``fn`` reads any, the program-wide seeds are not needed
        bound = _seed_bound(facts, fn)
        if bound is not None:
            reach = facts.value_taint(fn, bound)
            cands = [c for c in cands if any(value_refs(v, reach) for v in c[2])]
            if not cands:
                continue
        inputs = facts.input_values(fn)
        if not inputs:
            continue
        for key, node, values in cands:
            if key not in tainted and any(value_refs(v, inputs) for v in values):
                tainted[key] = node
    return _Writes(tainted)


def _seed_bound(facts: MiscFacts, fn: ast.AST) -> frozenset[str] | None:
    """Names that hold every seed ``_input_seeds`` can give ``fn``, or None for a function nested in
    another (a closure is seeded with any name its enclosing function taints).  A function at module
    or class level is seeded only with its parameters: forward with its own, the others with those
    a call site binds, never the leading ``self`` / ``cls`` / ``ctx`` unless a keyword names it (and
    forward's own seeds leave out ``self`` and ``cls`` only)."""
    if facts.owner(fn) is not None:
        return None
    params = _function_params(fn)
    first = params[0] if params else None
    if (first in ("self", "cls") or (first == "ctx" and fn is not facts.forward)) and \
            not any(k.arg == first for k in facts.host.of_type(ast.keyword)):
        params = params[1:]
    return frozenset(params)


_STATE_WRITERS = frozenset(_MUTATORS + ("update", "setdefault", "__setitem__", "append", "extend", "insert"))


def _refreshes(facts: MiscFacts, nodes: list[ast.AST], key: str | None, local: str | None, inputs: frozenset[str],
               globals_: set[str], depth: int = 0) -> bool:
    """Whether any of ``nodes`` (re)writes the state ``key`` or the storage of ``local`` this call."""
    host = facts.host
    for root in nodes:
        for n in subtree(root):
            if isinstance(n, ast.Call):
                f = n.func
                if isinstance(f, ast.Attribute) and f.attr == "replay":
                    return True
                if isinstance(f, ast.Attribute) and f.attr in _MUTATORS:
                    recv = _unwrap(f.value)
                    if (key and _state_of(recv, globals_) == key) or (
                            local and isinstance(recv, ast.Name) and recv.id == local):
                        return True
                name = host.canonical(f)
                if name in _HARMLESS_CALLS:
                    continue
                args = list(n.args) + [k.value for k in n.keywords]
                for a in args:
                    a = _unwrap(a)
                    if (key and _state_of(a, globals_) == key) or (local and isinstance(a, ast.Name) and a.id == local):
                        return True
                if depth < 2 and key:
                    for target in facts.call_targets(n):
                        body = list(target.body)
                        if _refreshes(facts, body, key, None, facts.input_values(target), globals_, depth + 1):
                            return True
            elif isinstance(n, (ast.Assign, ast.AugAssign)) and key:
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                for t in targets:
                    if isinstance(t, (ast.Attribute, ast.Subscript, ast.Name)) and _state_of(t, globals_) == key:
                        if _namespace_handle(n.value, host):
                            continue  # ``memo = globals().setdefault("memo", {})`` fetches the state, keeps it
                        if depth > 0 or value_refs(n.value, inputs) or isinstance(n.value, ast.Call):
                            return True
            elif isinstance(n, ast.Assign) and local:
                for t in n.targets:
                    if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == local:
                        return True
    return False


def _key_kind(facts: MiscFacts, point: ast.AST, fn: ast.AST) -> str:
    """How the path to ``point`` is keyed: pointer, identity, content, shape, flag or nothing."""
    tests: list[ast.AST] = []
    for anc in facts.host.ancestors(point):
        if isinstance(anc, (ast.If, ast.While, ast.IfExp)):
            tests.append(anc.test)
        if anc is fn:
            break
    flow = facts.flow(fn)
    names = {n.id for t in tests for n in subtree(t) if isinstance(n, ast.Name)}
    exprs = tests + [e for nm in names for e in flow.defs.get(nm, [])]
    text = " ".join(ast.unparse(e) for e in exprs)
    if "data_ptr" in text:
        return "keyed by the input's data_ptr()"
    if "id(" in text:
        return "keyed by the input's id()"
    if any(w in text for w in ("tobytes", "tolist", "hash", "equal(", "allclose", ".item()")):
        return "keyed by the input's contents"
    if any(w in text for w in ("shape", "size(", "numel")):
        return "keyed by the input's shape only"
    if tests:
        return "guarded by a flag"
    return "unconditionally"


def _returned_state(host: HostModule, globals_: set[str]) -> set[str]:
    """Every state some ``return`` of the file may hand back: a returned value that is state itself,
    or a returned name that some assignment binds to state.  HS130's candidates are the same
    returns and assignments of the reachable functions (a subset of the file's), tested the same
    way, so their state keys are a subset of these."""
    keys: set[str] = set()
    returned: set[str] = set()
    name_t, tuple_t, list_t = ast.Name, ast.Tuple, ast.List
    for ret in host.of_type(ast.Return):
        value = ret.value
        if value is None:
            continue
        for v in (value.elts if type(value) is tuple_t else (value,)):
            v = _unwrap(v)
            key = _state_of(v, globals_) if isinstance(v, (ast.Attribute, ast.Subscript, ast.Call, ast.Name)) \
                else None
            if key is not None:
                keys.add(key)
            elif type(v) is name_t:
                returned.add(v.id)
    if not returned:
        return keys
    for node in host.of_type(ast.Assign):
        targets = node.targets
        if len(targets) == 1:
            t = targets[0]
            tt = type(t)
            if tt is name_t:  # ``out = ...``, most assignments: one set lookup
                if t.id not in returned:
                    continue
            elif tt is not tuple_t and tt is not list_t:
                continue  # ``self.x = ...`` / ``d[k] = ...`` bind no local name
            # the value's state before an unpacking target's names (a walk each)
            key = _state_of(_unwrap(node.value), globals_)
            if key is not None and (tt is name_t or _binds(t, returned)):
                keys.add(key)
            continue
        key = _state_of(_unwrap(node.value), globals_)  # ``a = b = ...``: one value for every target
        if key is not None and any(_binds(t, returned) for t in targets):
            keys.add(key)
    return keys


def _binds(target: ast.AST, names: set[str]) -> bool:
    """Whether an assignment target binds one of ``names`` (the names ``MiscFacts.flow`` records for
    it: ``self.x = ...`` / ``d[k] = ...`` bind no local name)."""
    tt = type(target)
    if tt is ast.Name:
        return target.id in names
    if tt is ast.Tuple or tt is ast.List:
        return any(name in names for name, _ in _assigned_names(target))
    return False


def _written_state(host: HostModule, globals_: set[str], keys: set[str]) -> bool:
    """Whether some write anywhere in the file may put names' values into one of ``keys``: the
    writes ``_state_writes`` considers are those of the reachable functions (a subset of the
    file's), and it drops the same ones whose values carry no names, so none of them can be
    tainted when this is False."""
    for node in host.of_type(ast.Assign, ast.AugAssign):
        targets = node.targets if type(node) is ast.Assign else [node.target]
        for t in targets:
            for tt in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
                if isinstance(tt, (ast.Attribute, ast.Subscript, ast.Name)) and _state_of(tt, globals_) in keys \
                        and value_names(node.value):
                    return True
    for call in host.of_type(ast.Call):
        f = call.func
        if type(f) is ast.Attribute and f.attr in _STATE_WRITERS and _state_of(f.value, globals_) in keys and \
                any(value_names(v) for v in list(call.args) + [k.value for k in call.keywords]):
            return True
    return False


def stale_cached_output(ctx: ScanContext) -> Iterator[Hit]:
    """HS130: forward returns state computed from an earlier call's inputs without recomputing it."""
    host = ctx.host
    if host is None:
        return
    facts = ctx.patterns
    globals_ = _global_containers(facts)
    returned = _returned_state(host, globals_)
    if not returned or not _written_state(host, globals_, returned):
        return  # most files: no return anywhere can hand back state that some write fills with
        # values, and neither reachability nor the inputs' taint is needed
    if not facts.reachable:
        return
    # returns of persistent state come first: most files return a fresh local and stop here
    found: list[tuple[ast.AST, ast.Return, ast.AST, str, str | None]] = []
    for fn in facts.reachable:
        flow = None
        for ret in facts.in_functions([fn], ast.Return):
            if ret.value is None:
                continue
            values = ret.value.elts if isinstance(ret.value, ast.Tuple) else [ret.value]
            for v in values:
                v = _unwrap(v)
                key = _state_of(v, globals_) if isinstance(v, (ast.Attribute, ast.Subscript, ast.Call, ast.Name)) \
                    else None
                if key is not None:
                    found.append((fn, ret, ret, key, None))
                elif isinstance(v, ast.Name):
                    flow = flow or facts.flow(fn)
                    for d in flow.defs.get(v.id, []):
                        dk = _state_of(_unwrap(d), globals_)
                        stmt = host.parents.get(d)
                        if dk is not None and isinstance(stmt, ast.Assign):
                            found.append((fn, ret, stmt, dk, v.id))
    if not found:
        return
    writes = _state_writes(facts, globals_, {f[3] for f in found})
    reported: set[int] = set()
    for fn, ret, point, k, local in found:
        if k not in writes.tainted or id(ret) in reported:
            continue
        inputs = facts.input_values(fn)
        prefix = facts.dominating_prefix(point, fn)
        if local is not None:
            between = [s for s in facts.in_functions([fn], ast.Expr, ast.Assign, ast.AugAssign)
                       if point.lineno < s.lineno <= ret.lineno]
            if _refreshes(facts, between, None, local, inputs, globals_):
                continue
        if _refreshes(facts, prefix, k, local, inputs, globals_):
            continue
        if fn is not facts.forward and not _stale_at_some_call_site(facts, fn, globals_):
            continue  # a helper hands back cached buffers that its callers refill (per-shape graph caches)
        stored = writes.tainted[k]
        reported.add(id(ret))
        yield ctx.hit(ctx.at(point), args={"state": k, "line": stored.lineno, "how": _key_kind(facts, point, fn)},
                      evidence={"state": k, "stored_at": stored.lineno, "function": getattr(fn, "name", "")})


def _stale_at_some_call_site(facts: MiscFacts, helper: ast.AST, globals_: set[str]) -> bool:
    """Whether some caller returns what ``helper`` returned without refreshing it first."""
    host = facts.host
    sites = [c for g in facts.reachable for c in facts.in_functions([g], ast.Call) if helper in facts.call_targets(c)]
    for call in sites:
        caller = facts.owner(call)
        stmt = next((a for a in host.ancestors(call) if isinstance(a, ast.stmt)), None)
        if isinstance(stmt, ast.Return):
            return True
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            continue
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        if not all(isinstance(t, (ast.Name, ast.Tuple, ast.List)) for t in targets):
            return True  # stored into persistent state: the stale value outlives this call too
        names = {n.id for t in targets for n in subtree(t) if isinstance(n, ast.Name)}
        rets = [r for r in facts.in_functions([caller], ast.Return) if r.lineno > stmt.lineno and r.value is not None
                and any(isinstance(n, ast.Name) and n.id in names for n in subtree(r.value))]
        if not rets:
            continue  # the cached value is not what the caller returns
        last = max(r.lineno for r in rets)
        between = [x for x in facts.in_functions([caller], ast.Expr, ast.Assign, ast.AugAssign)
                   if stmt.lineno < x.lineno <= last]
        inputs = facts.input_values(caller)
        if not any(_refreshes(facts, between, None, n, inputs, globals_) for n in names):
            return True
    return False


_IDENTITY_METHODS = ("data_ptr", "_version")
_KEY_ATTRS = frozenset({"data_ptr", "tobytes", "tolist", "numpy", "item"})
_CONTENT_CALLS = ("tobytes", "tolist", "numpy")


def _identity_keys(facts: MiscFacts, fn: ast.AST) -> tuple[dict[ast.AST, str], set[str]]:
    """Expressions keyed on an input's identity or contents in ``fn``, and local names that hold them."""
    host = facts.host
    aliases = facts.input_aliases(fn) | facts.input_values(fn)
    if not aliases:
        return {}, set()
    found: dict[ast.AST, str] = {}
    for call in facts.in_functions([fn], ast.Call):
        f = call.func
        if isinstance(f, ast.Attribute) and f.attr == "data_ptr" and _roots_in(f.value, aliases):
            found[call] = "data_ptr()"
        elif isinstance(f, ast.Name) and f.id in ("id", "hash") and call.args and _roots_in(call.args[0], aliases) \
                and f.id not in host.imports.aliases:
            found[call] = f"{f.id}()"
        elif isinstance(f, ast.Attribute) and f.attr in _CONTENT_CALLS and _roots_in(f.value, aliases):
            found[call] = "contents"
        elif isinstance(f, ast.Attribute) and f.attr == "item" and _roots_in(f.value, aliases) and any(
                isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr in ("sum", "mean", "norm")
                for c in subtree(f.value)):
            found[call] = "contents"
    # the least set of names whose definitions hold a key expression or read a name of the set: each
    # definition's subtree is walked once (what it holds and which names it reads), then the set
    # grows to its fixed point over those facts alone (the same set whatever the order of growth)
    names: set[str] = set()
    reads: dict[str, set[str]] = {}
    for name, exprs in facts.flow(fn).defs.items():
        read: set[str] = set()
        holds_key = False
        for e in exprs:
            for n in subtree(e):
                if n in found:
                    holds_key = True
                elif type(n) is ast.Name:  # parsed trees hold the concrete node classes only
                    read.add(n.id)  # type: ignore[attr-defined]
        if holds_key:
            names.add(name)
        else:
            reads[name] = read
    changed = bool(names)
    while changed:
        changed = False
        for name, read in reads.items():
            if name not in names and not read.isdisjoint(names):
                names.add(name)
                changed = True
    return found, names


def _reduced(expr: ast.AST) -> bool:
    """``x.sum()`` / ``x.mean()`` / ``x.norm()``: the receiver of an ``.item()`` that fingerprints contents."""
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in (
        "sum", "mean", "norm", "abs", "max", "min")


def _roots_in(expr: ast.AST, names: frozenset[str] | set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in subtree(expr))


def _miss_arm(test: ast.AST) -> str | None:
    """Which arm runs when the key differs from what is stored: 'body', 'orelse' or None."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op = test.ops[0]
        if isinstance(op, (ast.NotEq, ast.IsNot, ast.NotIn)):
            return "body"
        if isinstance(op, (ast.Eq, ast.Is, ast.In)):
            return "orelse"
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _miss_arm(test.operand)
        return {"body": "orelse", "orelse": "body"}.get(inner or "")
    return None


def identity_keyed_state(ctx: ScanContext) -> Iterator[Hit]:
    """HS131: state compared with or keyed by an input's data_ptr / id / contents."""
    host = ctx.host
    if host is None:
        return
    facts = ctx.patterns
    if not facts.uses("data_ptr", "id", "hash", "tobytes", "tolist", "item", "numpy"):
        return
    globals_ = _global_containers(facts)
    key_calls = [c for c in facts.calls_named("data_ptr", "tobytes", "tolist", "id", "hash", "item", "numpy")
                 if not (isinstance(c.func, ast.Attribute) and c.func.attr == "item" and not _reduced(c.func.value))]
    owners = {facts.owner(c) for c in key_calls}
    # a finding needs an ``if`` whose test reads state, in a function that makes a key call: tested
    # first, as it depends neither on the keys nor on reachability, so most files need neither the
    # functions forward reaches nor the taint of their inputs
    state_ifs: dict[ast.AST, list[ast.AST]] = {}
    for fn in owners:
        if fn is None:
            continue  # module level is never among the reachable functions
        ifs = [node for node in facts.in_functions([fn], ast.If)
               if any(_state_of(n, globals_) for n in subtree(node.test)
                      if isinstance(n, (ast.Attribute, ast.Subscript, ast.Call)))]
        if ifs:
            state_ifs[fn] = ifs
    if not state_ifs:
        return
    for fn in facts.reachable:
        ifs = state_ifs.get(fn)
        if not ifs:
            continue
        found, names = _identity_keys(facts, fn)
        if not found:
            continue
        inputs = facts.input_values(fn)
        for node in ifs:
            test = node.test
            if not any((n in found) or (isinstance(n, ast.Name) and n.id in names) for n in subtree(test)):
                continue
            kinds = sorted({found[n] for n in subtree(test) if n in found} or
                           {found[c] for nm in names for e in facts.flow(fn).defs.get(nm, []) for c in subtree(e)
                            if c in found})
            kind = ", ".join(kinds) or "identity"
            returns_state = any(isinstance(r, ast.Return) and r.value is not None and _state_of(
                _unwrap(r.value), globals_) for arm in (node.body, node.orelse) for s in arm for r in subtree(s))
            if returns_state:
                continue  # HS130 reports the stale return itself
            refresh = {arm: _arm_refreshes_input_copy(facts, getattr(node, arm), inputs, globals_)
                       for arm in ("body", "orelse")}
            miss = _miss_arm(test)
            stale = (miss is not None and refresh[miss] and not refresh[{"body": "orelse", "orelse": "body"}[miss]]) or (
                miss is None and refresh["body"] != refresh["orelse"])
            if stale:
                yield ctx.hit(ctx.at(test), args={
                    "kind": kind, "what": "refreshes its copy of the input only when the key changes: new values "
                                          "written into the same tensor are never seen"},
                              evidence={"key": kind, "refresh_arm": miss})
            else:
                yield ctx.hit(ctx.at(test), args={"kind": kind, "what": "behaviour depends on which tensor object "
                                                                       "is passed, not on its values"},
                              severity=Severity.WARNING, confidence=Confidence.MEDIUM, evidence={"key": kind})


def _arm_refreshes_input_copy(facts: MiscFacts, stmts: list[ast.stmt], inputs: frozenset[str],
                              globals_: set[str]) -> bool:
    """The arm copies input values into persistent state (or computes state from them)."""
    for s in stmts:
        for n in subtree(s):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _MUTATORS and \
                    _state_of(_unwrap(n.func.value), globals_) and any(value_refs(a, inputs) for a in n.args):
                return True
            if isinstance(n, ast.Assign) and any(isinstance(t, (ast.Attribute, ast.Subscript)) and _state_of(t, globals_)
                                                 for t in n.targets) and value_refs(n.value, inputs):
                return True
    return False


_CACHE_DECORATORS = {"functools.lru_cache", "functools.cache", "lru_cache", "cache", "functools.cached_property"}


def lru_cache_on_tensors(ctx: ScanContext) -> Iterator[Hit]:
    """HS132: functools.lru_cache / cache on a function that forward calls with its input tensors."""
    host = ctx.host
    if host is None:
        return
    facts = ctx.patterns
    if not facts.uses("lru_cache", "cache"):
        return
    decorated: dict[ast.AST, ast.AST] = {}
    for fn in host.of_type(ast.FunctionDef, ast.AsyncFunctionDef):
        for dec in fn.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            name = host.canonical(target)
            if name in _CACHE_DECORATORS and name != "functools.cached_property":
                decorated[fn] = dec
    if not decorated:
        return
    reported: set[ast.AST] = set()
    for caller in facts.reachable:
        tainted = facts.input_values(caller) | facts.input_aliases(caller)
        if not tainted:
            continue
        for call in facts.in_functions([caller], ast.Call):
            targets = [t for t in facts.call_targets(call) if t in decorated]
            if not targets:
                continue
            args = list(call.args) + [k.value for k in call.keywords]
            passed = [a for a in args if is_alias_expr(a, set(tainted)) or value_refs(a, tainted)]
            # a shape, dtype or device is a fine cache key; a tensor is keyed by its id
            passed = [a for a in passed if not _metadata_only(a)]
            for target in targets:
                if not passed or target in reported:
                    continue
                reported.add(target)
                yield ctx.hit(ctx.at(decorated[target]), args={"fn": target.name, "line": call.lineno,
                                                               "arg": ast.unparse(passed[0])[:60]},
                              evidence={"function": target.name, "call_line": call.lineno})


def _metadata_only(expr: ast.AST) -> bool:
    return isinstance(expr, ast.Attribute) and expr.attr in ("shape", "dtype", "device") or (
        isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in ("size", "dim",
                                                                                                 "numel", "stride"))


def graph_replay_stale_inputs(ctx: ScanContext) -> Iterator[Hit]:
    """HS133: a CUDA graph replayed on a path that copies none of the current inputs into its buffers."""
    host = ctx.host
    if host is None:
        return
    facts = ctx.patterns
    if not facts.uses("replay"):
        return
    for fn in facts.reachable:
        for call in facts.in_functions([fn], ast.Call):
            f = call.func
            if not (isinstance(f, ast.Attribute) and f.attr == "replay" and not call.args):
                continue
            if _inputs_copied_before(facts, call, fn, 0):
                continue
            keyed = any(isinstance(c.func, ast.Attribute) and c.func.attr == "data_ptr"
                        for c in facts.in_functions([fn], ast.Call))
            if keyed:
                yield ctx.hit(ctx.at(call), args={"graph": dotted_name(f.value) or "graph",
                                                  "why": "the graph is keyed by data_ptr(), so it reads the live input "
                                                         "only while the harness reuses the same buffer"},
                              severity=Severity.WARNING, confidence=Confidence.MEDIUM, evidence={"keyed": "data_ptr"})
            else:
                yield ctx.hit(ctx.at(call), args={"graph": dotted_name(f.value) or "graph",
                                                  "why": "it recomputes the inputs it was captured with, so every "
                                                         "call returns the output of an earlier input"},
                              evidence={"keyed": None})


def _inputs_copied_before(facts: MiscFacts, node: ast.AST, fn: ast.AST, depth: int) -> bool:
    inputs = facts.input_values(fn) | facts.input_aliases(fn)
    prefix = facts.dominating_prefix(node, fn)
    host = facts.host
    for root in prefix:
        for n in subtree(root):
            if isinstance(n, ast.Call):
                name = host.canonical(n.func)
                if name in _HARMLESS_CALLS:
                    continue
                args = list(n.args) + [k.value for k in n.keywords]
                if any(value_refs(a, inputs) or is_alias_expr(a, set(inputs)) for a in args):
                    return True
            elif isinstance(n, ast.Assign) and any(isinstance(t, ast.Subscript) for t in n.targets) and \
                    value_refs(n.value, inputs):
                return True
    if depth >= 2 or fn is facts.forward:
        return False
    # the replay sits in a helper: look at what the callers did before calling it
    sites = [c for g in facts.reachable for c in facts.in_functions([g], ast.Call) if fn in facts.call_targets(c)]
    return bool(sites) and all(_inputs_copied_before(facts, c, facts.owner(c), depth + 1) for c in sites)
