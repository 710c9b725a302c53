"""Parameter blind spots (class 17): parameters the candidate holds but never reads, or never holds.

A harness that builds ``Model`` and ``ModelNew`` from the same seed and never re-draws parameters cannot
tell a BatchNorm / LayerNorm (weight 1, bias 0) or a ``Parameter(torch.ones(...))`` from nothing at all, so
a candidate may drop them.  Reads count through attributes folded at init from the parameters themselves
(``self.w_t = self.fc.weight.t()``): that is the legitimate way to pre-transform weights.

* HS115: a parameter held in ``__init__`` (module weight / bias, ``nn.Parameter``, buffer) that no
  forward-reachable code reads.
* HS116: the reference has parameters; the candidate holds none at all.
* HS123: a parameter of the reference's name holds another number of elements than the reference's.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ...context import Hit, ScanContext
from ...model import Confidence, Severity
from ...python.catalog import META_ATTRS, META_BUILTINS, META_METHODS
from ...python.facts import Holder, ModelFlow

# ``torch.ones_like(self.w)``: a fresh tensor with the parameter's shape and dtype, not its values
_LIKE_FUNCS = frozenset({"ones_like", "zeros_like", "empty_like", "full_like", "rand_like", "randn_like"})


def _read(facts: ModelFlow, chain: str) -> bool:
    """``self.<chain>`` read, or something inside it, or the module holding it used whole."""
    if facts.reads(chain):
        return True
    parts = chain.split(".")
    return any(".".join(parts[:i]) in facts.attr_reads for i in range(1, len(parts)))


class _DerivedReads:
    """Whether ``self.<chain>`` is read through an attribute folded from it at init, to a depth of
    three folds.  One per rule call: the question is asked for every held chain and again for each
    of its parameters, so the answers (pure functions of the flow) are kept by chain and depth, and
    the folded attributes are indexed by the chains their sources name: a question looks up the
    chain and its prefixes instead of walking every folded attribute's sources (a model with
    hundreds of folds made that walk most of its scan)."""

    def __init__(self, facts: ModelFlow):
        self.facts = facts
        self.memo: dict[tuple[str, int], bool] = {}
        # source chain -> attributes folded from it; and every chain above a source (the source
        # itself included) -> the attributes folded from something inside it
        self.exact: dict[str, list[str]] = {}
        self.inside: dict[str, list[str]] = {}
        for derived, sources in facts.derived.items():
            for s in sources:
                self.exact.setdefault(s, []).append(derived)
                parts = s.split(".")
                for i in range(1, len(parts) + 1):
                    self.inside.setdefault(".".join(parts[:i]), []).append(derived)

    def __call__(self, chain: str, depth: int = 0) -> bool:
        if depth > 3:
            return False
        key = (chain, depth)
        got = self.memo.get(key)
        if got is None:
            got = self.memo[key] = self._search(chain, depth)
        return got

    def _related(self, chain: str) -> list[str]:
        """Attributes folded from ``chain``, from something inside it, or from a chain above it."""
        out = list(self.inside.get(chain, ()))
        parts = chain.split(".")
        for i in range(1, len(parts)):
            out += self.exact.get(".".join(parts[:i]), ())
        return list(dict.fromkeys(out))

    def _search(self, chain: str, depth: int) -> bool:
        facts = self.facts
        for derived in self._related(chain):
            if _read(facts, derived) or self(derived, depth + 1):
                return True
        return False


def _metadata_use(parents: dict[ast.AST, ast.AST], node: ast.AST, rest: str) -> bool:
    """Does this read of ``self.<chain>`` (``rest``: the attributes the recorded read adds after
    the chain) use only the tensor's metadata: ``.shape``, ``.size(0)``, ``.new_ones(...)``,
    ``torch.zeros_like(...)``, ``len(...)``?  Its values never reach anything then."""
    if rest:
        head = rest.split(".", 1)[0]
        return head in META_ATTRS or head in META_METHODS or head.startswith("new_")
    parent = parents.get(node)
    if type(parent) is ast.Attribute:
        return parent.attr in META_ATTRS or parent.attr in META_METHODS or parent.attr.startswith("new_")
    if type(parent) is ast.Call and parent.args and parent.args[0] is node:
        f = parent.func
        name = f.attr if type(f) is ast.Attribute else f.id if type(f) is ast.Name else ""
        return name in _LIKE_FUNCS or name in META_BUILTINS
    return False


def _values_read(facts: ModelFlow, chain: str) -> bool:
    """Some read of ``self.<chain>`` (or of something inside it) uses its values, not only its
    shape: ``self.w.new_ones(self.w.shape)`` handed to the kernel in place of ``self.w`` reads
    the parameter and ignores it all the same."""
    parents = facts.host.parents
    prefix = chain + "."
    for key, nodes in facts.attr_reads.items():
        if key != chain and not key.startswith(prefix):
            continue
        rest = key[len(prefix):] if key != chain else ""
        if not all(_metadata_use(parents, n, rest) for n in nodes):
            return True
    return False


def _param_read(facts: ModelFlow, through_derived: _DerivedReads, attr: str, param: str) -> bool:
    chain = f"{attr}.{param}" if param else attr
    return _values_read(facts, chain) or through_derived(chain)


def _whole_read(facts: ModelFlow, attr: str) -> bool:
    """The holder itself is used (called, passed along), not just an attribute of it."""
    if attr in facts.attr_reads:
        return True
    return _parent_read(facts, attr)


def _parent_read(facts: ModelFlow, attr: str) -> bool:
    # a parent read whole (``self.block`` called: its forward was analysed and reads its own members)
    parts = attr.split(".")
    return any(".".join(parts[:i]) in facts.attr_reads and ".".join(parts[:i]) in facts.holders
               and facts.holders[".".join(parts[:i])].kind not in ("local",) for i in range(1, len(parts)))


def _reference_has_same(ctx: ScanContext, h: Holder) -> bool:
    holders = ctx.reference_holders
    if holders is None:
        return False
    for rh in holders.values():
        if h.kind == "module" and rh.kind == "module" and rh.cls == h.cls:
            return True
        if h.kind in ("parameter", "buffer", "tensor") and rh.attr == h.attr:
            return True
    return False


def _reference_ignores(ctx: ScanContext, attr: str) -> bool:
    """The reference holds the same attribute but its own output does not depend on it (task degeneracy)."""
    ref = ctx.reference_flow
    if ref is None or ref.forward is None or attr not in ref.holders or not ref.forward_returns:
        return False
    out = ref.output
    if not out.understood and any(not s.startswith("param:") for s in out.state):
        return False
    return not any(s == f"param:{attr}" or s.startswith(f"param:{attr}.") for s in out.state)


def _reference_has_parameters(ctx: ScanContext) -> bool:
    ref = ctx.reference
    if ref is not None and ref.parameters:
        return True
    holders = ctx.reference_holders
    return holders is not None and any(h.holds_parameters for h in holders.values())


def unread_parameters(ctx: ScanContext) -> Iterator[Hit]:
    """HS115."""
    facts = ctx.model_flow
    if facts is None or facts.forward is None or facts.dynamic_self_access or facts.truncated:
        return
    checked_reference = False
    through_derived = _DerivedReads(facts)
    for attr, h in sorted(facts.holders.items(), key=lambda kv: kv[1].line):
        if h.kind not in ("module", "parameter", "buffer", "tensor", "container"):
            continue
        if h.kind == "module" and not h.params:
            continue
        if h.kind == "module" and _whole_read(facts, attr) or through_derived(attr):
            continue
        if h.kind != "module" and (_values_read(facts, attr) or _parent_read(facts, attr)):
            continue
        params = h.params if h.kind == "module" else ("",)
        missing = [p for p in params if not _param_read(facts, through_derived, attr, p)]
        if not missing:
            continue
        if not checked_reference:  # the reference is consulted only once something is unread
            if not _reference_has_parameters(ctx):
                return
            checked_reference = True
        if _reference_ignores(ctx, attr):
            continue
        what = f"self.{attr}" if not missing[0] else " and ".join(f"self.{attr}.{p}" for p in missing)
        identity = h.identity_init
        strong = identity and _reference_has_same(ctx, h)
        init = " (default 1 and 0: the identity)" if identity and h.kind == "module" else \
            " (initialised to the identity)" if identity else ""
        yield ctx.hit(ctx.at(h.node), args={"what": what, "init": init,
                                            "how": _how(facts, attr, missing)},
                      evidence={"attr": attr, "missing": missing, "identity_init": identity, "class": h.cls},
                      severity=Severity.ERROR if strong else Severity.WARNING,
                      confidence=Confidence.HIGH if strong else Confidence.MEDIUM)


def _how(facts: ModelFlow, attr: str, missing: list[str]) -> str:
    chains = [f"{attr}.{p}" if p else attr for p in missing]
    if all(facts.reads(c) for c in chains):  # read, but only for its shape, dtype or device
        return "is read only for its shape" if len(chains) == 1 else "are read only for their shapes"
    return "is never read" if len(chains) == 1 else "are never read"


def parameters_missing(ctx: ScanContext) -> Iterator[Hit]:
    """HS116."""
    facts = ctx.model_flow
    if facts is None or facts.forward is None or facts.model is None or facts.dynamic_self_access:
        return
    if any(h.holds_parameters or h.kind == "unknown" for h in facts.holders.values()):
        return
    # the reference's members alone: its forward's flow is not needed to know what it holds
    ref_members = ctx.reference_holders
    ref = ctx.reference
    ref_holders = [h for h in (ref_members.values() if ref_members is not None else ())
                   if h.holds_parameters and (h.kind != "module" or h.params)]
    if not ref_holders and not (ref is not None and ref.parameters):
        return
    if any(s.startswith("global:") for s in facts.output.state):
        return  # weights kept in module globals: held, just not by the model
    names = ", ".join(f"self.{h.attr} ({h.cls.replace('torch.nn.', 'nn.')})" for h in ref_holders[:4]) or \
        ", ".join(ref.parameters[:4]) if ref is not None else ""
    identity = bool(ref_holders) and all(h.identity_init for h in ref_holders)
    yield ctx.hit(ctx.at(facts.model), args={"model": facts.model_name, "params": names,
                                             "why": " whose default initialisation is the identity" if identity
                                             else ""},
                  evidence={"reference_parameters": [h.attr for h in ref_holders], "identity_init": identity},
                  severity=Severity.ERROR if identity else Severity.WARNING,
                  confidence=Confidence.HIGH if identity else Confidence.MEDIUM)


_SHAPED_FACTORIES = frozenset({"ones", "zeros", "randn", "rand", "empty", "full", "eye"})
_IDENTITY_FACTORIES = frozenset({"ones", "zeros", "eye"})


def parameter_shape_mismatch(ctx: ScanContext) -> Iterator[Hit]:
    """HS123: an ``nn.Parameter`` whose element count differs from the reference's parameter of the
    same name, both shapes evaluated from the harness's ``get_init_inputs()``.

    ``nn.Parameter(torch.ones(1))`` for the reference's ``torch.ones(channels, 1, 1)`` passes because
    every element of the reference's is 1: a scale kept as one scalar.  A reshape that keeps the
    element count (``(C,)`` for ``(C, 1, 1)``) holds the same values under the same seed and is left
    alone, as are parameters whose shape cannot be evaluated.
    """
    facts = ctx.model_flow
    if facts is None or facts.init is None:
        return
    mine = {a: h for a, h in facts.holders.items() if h.kind == "parameter" and "." not in a}
    # most candidates hold no bare nn.Parameter: stop before the reference's value flow is built
    ref = ctx.reference
    # ... or none the reference (its cheap facts) holds under the same name
    if not mine or ref is None or not any(a in ref.parameters for a in mine):
        return
    ref_flow = ctx.reference_flow
    if ref_flow is None or ref_flow.init is None:
        return
    theirs = {a: h for a, h in ref_flow.holders.items() if h.kind == "parameter" and "." not in a}
    common = [a for a in mine if a in theirs]
    if not common:
        return
    init_args = tuple(ref.init_inputs)
    for attr in common:
        h, rh = mine[attr], theirs[attr]
        got = _parameter_shape(facts.host, facts.init.node, h.node, init_args)
        want = _parameter_shape(ref_flow.host, ref_flow.init.node, rh.node, init_args)
        if got is None or want is None or _numel(got) == _numel(want):
            continue
        factory = _factory(h.node)
        why = (" (it passes only because both start as the same constant)"
               if factory in _IDENTITY_FACTORIES and _factory(rh.node) in _IDENTITY_FACTORIES else "")
        yield ctx.hit(ctx.at(h.node), args={"attr": attr, "shape": _fmt(got), "numel": _numel(got),
                                            "ref_shape": _fmt(want), "ref_numel": _numel(want), "why": why,
                                            "ref_line": rh.line},
                      evidence={"shape": list(got), "reference_shape": list(want)},
                      severity=Severity.ERROR if why else Severity.WARNING,
                      confidence=Confidence.HIGH if why else Confidence.MEDIUM)


def _fmt(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _factory(node: ast.AST) -> str | None:
    """``ones`` for ``nn.Parameter(torch.ones(...))``."""
    inner = node.args[0] if isinstance(node, ast.Call) and node.args else None
    if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute):
        return inner.func.attr
    return None


def _parameter_shape(host, init: ast.FunctionDef, node: ast.AST, init_args: tuple) -> tuple[int, ...] | None:
    """The shape ``nn.Parameter(torch.<factory>(...))`` gets when ``__init__`` is called with ``init_args``."""
    factory = _factory(node)
    if factory not in _SHAPED_FACTORIES:
        return None
    call = node.args[0]  # type: ignore[attr-defined]
    params = [a.arg for a in init.args.args[1:]]
    defaults = init.args.defaults
    env: dict[str, object] = {}
    for i, name in enumerate(params):
        if i < len(init_args):
            env[name] = init_args[i]
        else:
            j = i - (len(params) - len(defaults))
            if j >= 0:
                env[name] = _const(host, defaults[j], env)
    args = call.args[:1] if factory in ("full", "eye") and call.args else call.args
    if factory == "eye":
        n = _const(host, args[0], env) if args else None
        return (n, n) if isinstance(n, int) else None
    dims: list[int] = []
    for a in args:
        starred = isinstance(a, ast.Starred)
        v = _const(host, a.value if starred else a, env)
        if isinstance(v, int) and not isinstance(v, bool) and not starred:
            dims.append(v)
        elif isinstance(v, (tuple, list)) and all(isinstance(d, int) and not isinstance(d, bool) for d in v):
            dims.extend(v)
        else:
            return None
    return tuple(dims)


def _const(host, e: ast.AST, env: dict[str, object], depth: int = 0) -> object:
    """An int or a tuple of ints from literals, ``__init__``'s arguments and module constants; else None."""
    if depth > 6:
        return None
    if isinstance(e, ast.Constant):
        return e.value if isinstance(e.value, int) else None
    if isinstance(e, (ast.Tuple, ast.List)):
        vals = [_const(host, x, env, depth + 1) for x in e.elts]
        return tuple(vals) if all(isinstance(v, int) for v in vals) else None
    if isinstance(e, ast.Name):
        if e.id in env:
            v = env[e.id]
            return tuple(v) if isinstance(v, list) else v
        v = host.resolver.try_value(e, host.module_scope, 10**9)
        return v if isinstance(v, (int, tuple)) and not isinstance(v, bool) else None
    if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
        a, b = _const(host, e.left, env, depth + 1), _const(host, e.right, env, depth + 1)
        if isinstance(a, int) and isinstance(b, int):
            if isinstance(e.op, ast.Add):
                return a + b
            if isinstance(e.op, ast.Sub):
                return a - b
            if isinstance(e.op, ast.Mult):
                return a * b
            return a // b if b else None
    return None
