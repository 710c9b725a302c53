"""Indirect spellings of a lookup, a call or an assignment, and the direct form each one means.

A hack that knows the rules reaches its target through indirection: ``getattr(torch,
"soft" + "max")``, ``vars(torch)["softmax"]``, ``Model.__dict__["forward"]``, ``functools.partial(f,
...)(x)``, a tuple or dict of callables indexed by a value computed from the input, and, for writes,
``setattr(mod, "name", v)``, ``vars(mod)["name"] = v``, ``mod.__dict__.update(name=v)``,
``globals()["name"] = v``.  Each of these means a plain attribute lookup, call or assignment; here
they are rewritten to that plain form once, so the value flow (``valueflow.py``), the model lookup
(``program.py``) and the rules that read assignments see the same thing whichever way it was
spelled.  The rewritten nodes are new nodes that carry the original's position; the source tree is
never changed (the obfuscation rules read the spelled form).

Only names that fold to a constant string are followed: a lookup computed from data at run time is
the obfuscation rules' business, not a name this analysis can know.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

Canonical = Callable[[ast.AST], str]

# the callables that run what they wrap (a partial binds leading arguments, nothing else)
PARTIALS = frozenset({"functools.partial", "partial"})
_NAMESPACE_CALLS = frozenset({"vars", "builtins.vars"})
_GLOBALS_CALLS = frozenset({"globals", "builtins.globals"})
_SETATTRS = frozenset({"setattr", "builtins.setattr", "object.__setattr__", "type.__setattr__"})


def const_str(e: ast.AST) -> str | None:
    """The string a constant expression folds to: a literal, ``"a" + "b"``, a constant f-string."""
    t = type(e)
    if t is ast.Constant:
        v = e.value  # type: ignore[attr-defined]
        return v if isinstance(v, str) else None
    if t is ast.BinOp and isinstance(e.op, ast.Add):  # type: ignore[attr-defined]
        left = const_str(e.left)  # type: ignore[attr-defined]
        if left is None:
            return None
        right = const_str(e.right)  # type: ignore[attr-defined]
        return None if right is None else left + right
    if t is ast.JoinedStr:
        parts = [const_str(v) for v in e.values]  # type: ignore[attr-defined]
        return None if any(p is None for p in parts) else "".join(parts)  # type: ignore[arg-type]
    return None


def _identifier(e: ast.AST) -> str | None:
    name = const_str(e)
    return name if name is not None and name.isidentifier() else None


def _at(new: ast.AST, old: ast.AST) -> ast.AST:
    ast.copy_location(new, old)
    new.end_lineno = getattr(old, "end_lineno", None)  # type: ignore[attr-defined]
    new.end_col_offset = getattr(old, "end_col_offset", None)  # type: ignore[attr-defined]
    return new


def namespace_of(e: ast.AST, canonical: Canonical) -> ast.AST | None:
    """The object whose namespace ``e`` is: ``vars(X)`` and ``X.__dict__`` give ``X``; ``globals()``
    and ``vars(sys.modules[__name__])`` give the module itself (an ``ast.Name`` of ``__module__``)."""
    t = type(e)
    if t is ast.Attribute and e.attr == "__dict__":  # type: ignore[attr-defined]
        return _module_itself(e.value, canonical) or e.value  # type: ignore[attr-defined]
    if t is ast.Call and not e.keywords:  # type: ignore[attr-defined]
        name = canonical(e.func)  # type: ignore[attr-defined]
        if name in _GLOBALS_CALLS and not e.args:  # type: ignore[attr-defined]
            return _at(ast.Name(id="__module__", ctx=ast.Load()), e)
        if name in _NAMESPACE_CALLS and len(e.args) == 1:  # type: ignore[attr-defined]
            return _module_itself(e.args[0], canonical) or e.args[0]  # type: ignore[attr-defined]
    return None


def _module_itself(e: ast.AST, canonical: Canonical) -> ast.AST | None:
    """``sys.modules[__name__]``: the module being analysed."""
    if type(e) is ast.Subscript and canonical(e.value) == "sys.modules" and \
            type(e.slice) is ast.Name and e.slice.id == "__name__":  # type: ignore[attr-defined]
        return _at(ast.Name(id="__module__", ctx=ast.Load()), e)
    return None


def _member(owner: ast.AST, name: str, old: ast.AST, ctx: ast.expr_context) -> ast.AST:
    """``owner.name``; a member of the module itself is the plain name."""
    if type(owner) is ast.Name and owner.id == "__module__":  # type: ignore[attr-defined]
        return _at(ast.Name(id=name, ctx=ctx), old)
    return _at(ast.Attribute(value=owner, attr=name, ctx=ctx), old)


def lookup(e: ast.AST, canonical: Canonical) -> ast.AST | None:
    """The plain attribute or name a dynamic lookup reads, None when ``e`` is none (or the name is not
    a constant): ``getattr(X, "a" + "b")`` -> ``X.ab``; ``vars(X)["n"]``, ``X.__dict__["n"]``,
    ``vars(X).get("n")`` -> ``X.n``; ``globals()["n"]`` -> ``n``."""
    t = type(e)
    if t is ast.Call:
        func = e.func  # type: ignore[attr-defined]
        args = e.args  # type: ignore[attr-defined]
        if type(func) is ast.Name and func.id == "getattr" and len(args) in (2, 3) and not e.keywords:  # type: ignore[attr-defined]
            name = _identifier(args[1])
            return None if name is None else _at(ast.Attribute(value=args[0], attr=name, ctx=ast.Load()), e)
        if type(func) is ast.Attribute and func.attr == "get" and args:
            owner = namespace_of(func.value, canonical)
            name = _identifier(args[0]) if owner is not None else None
            return None if name is None else _member(owner, name, e, ast.Load())  # type: ignore[arg-type]
        return None
    if t is ast.Subscript:
        owner = namespace_of(e.value, canonical)  # type: ignore[attr-defined]
        name = _identifier(e.slice) if owner is not None else None  # type: ignore[attr-defined]
        return None if name is None else _member(owner, name, e, ast.Load())  # type: ignore[arg-type]
    return None


def callees(call: ast.Call, canonical: Canonical) -> list[ast.AST] | None:
    """What calling ``call`` evaluates, as plain expressions, when its callee is spelled indirectly;
    None when it is a plain call.

    * ``getattr(X, "n")(a)`` / ``vars(X)["n"](a)`` -> ``X.n(a)``
    * ``functools.partial(f, a)(b, k=1)`` -> ``f(a, b, k=1)``
    * ``(f, g)[i](a)``, ``{k: f}[i](a)``, ``{k: f}.get(i, g)(a)`` -> ``f(a)`` and ``g(a)``: any element
      may be the one taken (the index is computed from the input)
    * ``(lambda: e)()`` -> ``e``; a lambda with parameters stays a call (``valueflow`` binds them)
    """
    func = call.func
    direct = lookup(func, canonical)
    if direct is not None:
        return [_at(ast.Call(func=direct, args=call.args, keywords=call.keywords), call)]
    t = type(func)
    if t is ast.Call and func.args and canonical(func.func) in PARTIALS:  # type: ignore[attr-defined]
        inner = func.args[0]  # type: ignore[attr-defined]
        return [_call(inner, list(func.args[1:]) + list(call.args),  # type: ignore[attr-defined]
                      list(func.keywords) + list(call.keywords), call)]  # type: ignore[attr-defined]
    elements = table_elements(func)
    if elements is not None:
        return [_call(el, list(call.args), list(call.keywords), call) for el in elements]
    if t is ast.Lambda and not call.args and not call.keywords and not _params(func):  # type: ignore[arg-type]
        return [func.body]  # type: ignore[attr-defined]
    return None


def _params(fn: ast.Lambda) -> list[ast.arg]:
    a = fn.args
    return list(a.posonlyargs) + list(a.args) + ([a.vararg] if a.vararg else []) + list(a.kwonlyargs)


def _call(func: ast.AST, args: list[ast.expr], keywords: list[ast.keyword], old: ast.AST) -> ast.AST:
    if type(func) is ast.Lambda and not args and not keywords and not _params(func):  # type: ignore[arg-type]
        return func.body  # type: ignore[attr-defined]
    return _at(ast.Call(func=func, args=args, keywords=keywords), old)


def table_elements(e: ast.AST) -> list[ast.AST] | None:
    """The elements a table lookup may give: ``(f, g)[i]`` / ``[f, g][i]`` / ``{k: f}[i]`` ->
    ``f, g``; ``{k: f}.get(i, g)`` -> ``f, g``.  None for anything else."""
    t = type(e)
    if t is ast.Subscript:
        table = e.value  # type: ignore[attr-defined]
        if type(table) in (ast.Tuple, ast.List) and table.elts and \
                not any(type(x) is ast.Starred for x in table.elts):  # type: ignore[attr-defined]
            return list(table.elts)  # type: ignore[attr-defined]
        if type(table) is ast.Dict and table.values and None not in table.keys:  # type: ignore[attr-defined]
            return list(table.values)  # type: ignore[attr-defined]
        return None
    if t is ast.Call and type(e.func) is ast.Attribute and e.func.attr == "get" and \
            type(e.func.value) is ast.Dict and e.args and None not in e.func.value.keys:  # type: ignore[attr-defined]
        return list(e.func.value.values) + list(e.args[1:2])  # type: ignore[attr-defined]
    return None


def two_way(func: ast.AST, elements: list[ast.AST]) -> tuple[ast.expr, ast.AST, ast.AST] | None:
    """A two-way table as the conditional it is: (condition, taken when true, taken when false).

    ``(f, g)[int(c)]`` / ``(f, g)[bool(c)]`` / ``(f, g)[c]`` -> ``c``, ``g``, ``f``;
    ``{k: f}.get(key, g)`` / ``{k: f, k2: g}[key]`` -> ``key == k``, ``f``, ``g``.
    """
    if len(elements) != 2:
        return None
    if type(func) is ast.Subscript:
        table, index = func.value, func.slice  # type: ignore[attr-defined]
        if type(table) in (ast.Tuple, ast.List):
            while type(index) is ast.Call and type(index.func) is ast.Name and index.func.id in ("int", "bool") \
                    and len(index.args) == 1:  # type: ignore[attr-defined]
                index = index.args[0]  # type: ignore[attr-defined]
            return index, elements[1], elements[0]  # type: ignore[return-value]
        key = table.keys[0]  # type: ignore[attr-defined]
    else:
        table, index = func.func.value, func.args[0]  # type: ignore[attr-defined]
        if len(table.keys) != 1:  # type: ignore[attr-defined]
            return None
        key = table.keys[0]  # type: ignore[attr-defined]
    test = _at(ast.Compare(left=index, ops=[ast.Eq()], comparators=[key]), index)
    return test, elements[0], elements[1]  # type: ignore[return-value]


def namespace_writes(stmt: ast.stmt, canonical: Canonical) -> list[tuple[ast.AST, ast.AST]]:
    """The plain assignments a namespace write means, as (target, value) pairs: the target an
    ``ast.Attribute`` (``mod.name``) or, for the module's own namespace, an ``ast.Name``.

    ``setattr(X, "n", v)``, ``X.__setattr__("n", v)``, ``type.__setattr__(X, "n", v)``,
    ``functools.partial(setattr, X)("n", v)``, ``vars(X)["n"] = v``, ``X.__dict__["n"] = v``,
    ``globals()["n"] = v``, ``vars(X).update(n=v)`` / ``X.__dict__.update({"n": v})``,
    ``vars(X).setdefault("n", v)``.
    """
    out: list[tuple[ast.AST, ast.AST]] = []
    st = type(stmt)
    if st is ast.Assign:
        for target in stmt.targets:  # type: ignore[attr-defined]
            if type(target) is ast.Subscript:
                owner = namespace_of(target.value, canonical)
                name = _identifier(target.slice) if owner is not None else None
                if name is not None:
                    out.append((_member(owner, name, target, ast.Store()), stmt.value))  # type: ignore[arg-type,attr-defined]
        return out
    if st is ast.Expr and type(stmt.value) is ast.Call:  # type: ignore[attr-defined]
        out.extend(write_call(stmt.value, canonical))  # type: ignore[attr-defined]
    return out


def write_call(call: ast.Call, canonical: Canonical) -> list[tuple[ast.AST, ast.AST]]:
    """The (target, value) assignments one call performs on a namespace (see ``namespace_writes``)."""
    func = call.func
    args = list(call.args)
    owner: ast.AST | None = None
    # functools.partial(setattr, X)("n", v): the bound leading arguments come first
    if type(func) is ast.Call and func.args and canonical(func.func) in PARTIALS:
        args = list(func.args[1:]) + args
        func = func.args[0]
    name = canonical(func)
    if name in _SETATTRS and len(args) == 3:
        owner, key, value = args
    elif type(func) is ast.Attribute and func.attr == "__setattr__" and len(args) == 2:
        owner, (key, value) = func.value, args
    elif type(func) is ast.Attribute and func.attr in ("update", "setdefault", "__setitem__"):
        ns = namespace_of(func.value, canonical)
        if ns is None:
            return []
        if func.attr == "update":
            pairs: list[tuple[ast.AST, ast.AST]] = []
            for kw in call.keywords:
                if kw.arg is not None:
                    pairs.append((_member(ns, kw.arg, kw.value, ast.Store()), kw.value))
            if args and type(args[0]) is ast.Dict:
                for k, v in zip(args[0].keys, args[0].values, strict=True):
                    n = _identifier(k) if k is not None else None
                    if n is not None:
                        pairs.append((_member(ns, n, k, ast.Store()), v))  # type: ignore[arg-type]
            return pairs
        if len(args) != 2:
            return []
        owner, (key, value) = ns, args
        n = _identifier(key)
        return [] if n is None else [(_member(owner, n, key, ast.Store()), value)]
    else:
        return []
    n = _identifier(key)
    if n is None:
        return []
    owner = _module_itself(owner, canonical) or owner
    return [(_member(owner, n, call, ast.Store()), value)]


def loop_iterations(node: ast.AST, ancestors: Iterator[ast.AST]) -> list[dict[str, ast.AST]]:
    """What each name the innermost enclosing ``for`` binds holds on each iteration, when that loop
    runs over a literal table: ``for owner, name in ((torch.cuda, "synchronize"), (torch,
    "allclose")): setattr(owner, name, f)`` is two ``setattr`` calls with those arguments.  Empty when
    ``node`` is in no such loop (or the loop's target or table is anything else); a ``def`` or
    ``class`` between the two ends the search (the loop does not bind its names there)."""
    for anc in ancestors:
        t = type(anc)
        if t in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.Module):
            return []
        if t is not ast.For:
            continue
        target, table = anc.target, anc.iter  # type: ignore[attr-defined]
        if type(table) not in (ast.Tuple, ast.List) or not table.elts:  # type: ignore[attr-defined]
            return []
        names = [target] if type(target) is ast.Name else list(target.elts) \
            if type(target) in (ast.Tuple, ast.List) else []  # type: ignore[attr-defined]
        if not names or any(type(n) is not ast.Name for n in names):
            return []
        out = []
        for row in table.elts:  # type: ignore[attr-defined]
            if len(names) == 1:
                out.append({names[0].id: row})  # type: ignore[attr-defined]
            elif type(row) in (ast.Tuple, ast.List) and len(row.elts) == len(names):  # type: ignore[attr-defined]
                out.append({n.id: v for n, v in zip(names, row.elts, strict=True)})  # type: ignore[attr-defined]
            else:
                return []
        return out
    return []

