"""Constant folding of host-code expressions: what string, number or list does this expression hold?

Used to recover the CUDA sources handed to ``load_inline`` (built through variables, ``+``, lists,
f-strings, ``.format``, ``textwrap.dedent``, ``"".join``), the exported function names, compiler
flags, and integer literals such as shape constants.  Resolution is flow-insensitive within a
scope except for one rule that matches how such files are written: the value of a name at a line
is its last assignment above that line in the nearest scope that assigns it.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from ..units import MappedText
from ..util.lazy import cached_property
from .literals import HostSource, decode_literal

MAX_DEPTH = 40
# the resolver's work is bounded by what it builds, not only by depth: one line of constant string
# arithmetic (``s = "x" * 10**9``, or forty lines of ``s = s + s``, each evaluated twice per use)
# made it build GiBs or recurse 2**40 times, and held the static gate for hours.  A value longer
# than MAX_TEXT characters or MAX_ITEMS list items, an int wider than MAX_INT_BITS, more than
# MAX_STEPS evaluations for one question or MAX_TOTAL_STEPS for one file: not known statically
# (real kernel sources are a few hundred KiB at most)
MAX_TEXT = 1 << 21
MAX_ITEMS = 1 << 16
MAX_INT_BITS = 4096
MAX_STEPS = 50_000
MAX_TOTAL_STEPS = 2_000_000


# the method names ``Resolver._call`` evaluates (a call of any other method is ``Unresolved``)
_EVALUATED_METHODS = frozenset({"dedent", "strip", "lstrip", "rstrip", "join", "format", "replace"})
# ... and the functions it evaluates (``dedent(s)``, ``str(x)``, ``int(x)``, ``list(x)``, ``tuple(x)``)
_EVALUATED_FUNCTIONS = frozenset({"dedent", "str", "int", "list", "tuple"})


class Unresolved(Exception):
    """The expression's value is not known statically."""


@dataclass
class Scope:
    """Assignments in one function, class or module body, by name, in line order."""

    node: ast.AST
    parent: Scope | None = None
    bindings: dict[str, list[tuple[int, str, ast.AST]]] = field(default_factory=dict)
    klass: Scope | None = None

    @cached_property
    def self_bindings(self) -> dict[str, list[tuple[int, str, ast.AST]]]:
        """Attributes assigned as ``self.name = ...`` in the methods of this class scope (empty for
        any other scope), by name, in line order.

        Worked out on first use: only a lookup of ``self.x`` that the class body does not bind
        reads them, while every class scope built for ``scope_of`` would otherwise flatten each
        method's body for them (the method's own scope flattens it again)."""
        return _self_bindings(self.node)

    def lookup(self, name: str, line: int) -> tuple[ast.AST, str, Scope, int] | None:
        """The assignment of ``name`` that is visible at ``line``, with its scope and line.

        In the scope where the use sits, that is the last assignment above the use.  In enclosing
        scopes (a function reading a module constant) it is the last one above the use if any,
        else the last overall: module code below a def runs before the function is called.
        Class bodies are not enclosing scopes for their methods (Python's rule).
        """
        scope: Scope | None = self
        first = True
        while scope is not None:
            if first or not isinstance(scope.node, ast.ClassDef):
                entries = scope.bindings.get(name)
                if entries:
                    # most names are bound once: no list of lines to build and search
                    k = (1 if entries[0][0] < line else 0) if len(entries) == 1 else bisect.bisect_left(
                        [e[0] for e in entries], line)
                    if k > 0:
                        ln, kind, node = entries[k - 1]
                        return node, kind, scope, ln
                    if not first:
                        ln, kind, node = entries[-1]
                        return node, kind, scope, ln
            scope = scope.parent
            first = False
        return None


def build_scope(node: ast.AST, parent: Scope | None = None, klass: Scope | None = None) -> Scope:
    scope = Scope(node=node, parent=parent, klass=klass)
    body = getattr(node, "body", [])
    if not isinstance(body, list):  # a Lambda's body is one expression, not statements
        body = []
    stmts: list[ast.stmt] = []
    _flatten(body, stmts)
    bindings = scope.bindings
    Assign, Name = ast.Assign, ast.Name
    for stmt in stmts:
        t = type(stmt)
        if t is Assign:
            # the common case inline: what ``_record`` does for an assignment
            value = stmt.value  # type: ignore[attr-defined]
            for target in stmt.targets:  # type: ignore[attr-defined]
                if type(target) is Name:
                    entries = bindings.get(target.id)  # type: ignore[attr-defined]
                    if entries is None:
                        bindings[target.id] = [(stmt.lineno, "assign", value)]  # type: ignore[attr-defined]
                    else:
                        entries.append((stmt.lineno, "assign", value))
                    continue
                for tgt, v, kind in _unpack(target, value):
                    if isinstance(tgt, Name):
                        bindings.setdefault(tgt.id, []).append((stmt.lineno, kind, v))
        elif t in _BINDERS:  # ``_record`` binds nothing for any other statement
            _record(scope, stmt)
    for entries in scope.bindings.values():
        if len(entries) > 1:  # (a stable sort of one entry is a no-op)
            entries.sort(key=_first)
    return scope


def _self_bindings(node: ast.AST) -> dict[str, list[tuple[int, str, ast.AST]]]:
    """``Scope.self_bindings`` of the scope of ``node``."""
    self_bindings: dict[str, list[tuple[int, str, ast.AST]]] = {}
    Assign, Name = ast.Assign, ast.Name
    if isinstance(node, ast.ClassDef):
        # ``self.x = ...`` inside methods, for lookups of ``self.x``
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                subs: list[ast.stmt] = []
                _flatten(stmt.body, subs)
                for sub in subs:
                    t = type(sub)
                    if t is Assign:
                        # ``_assign_pairs`` of an assignment, read target by target: a plain
                        # attribute target is paired with the whole value
                        for target in sub.targets:  # type: ignore[attr-defined]
                            tt = type(target)
                            if tt is ast.Attribute:
                                if type(target.value) is Name and target.value.id == "self":  # type: ignore[attr-defined]
                                    self_bindings.setdefault(target.attr, []).append(  # type: ignore[attr-defined]
                                        (sub.lineno, "assign", sub.value))  # type: ignore[attr-defined]
                            elif tt is ast.Tuple or tt is ast.List:
                                for tgt, value, kind in _unpack(target, sub.value):  # type: ignore[attr-defined]
                                    if (isinstance(tgt, ast.Attribute) and isinstance(tgt.value, Name)
                                            and tgt.value.id == "self"):
                                        self_bindings.setdefault(tgt.attr, []).append((sub.lineno, kind, value))
                            # any other target (a name, a subscript) is never ``self.x``
                        continue
                    if t is not ast.AnnAssign and t is not ast.AugAssign:
                        continue  # _assign_pairs yields nothing for other statements
                    for target, value, kind in _assign_pairs(sub):
                        if (isinstance(target, ast.Attribute) and isinstance(target.value, Name)
                                and target.value.id == "self"):
                            self_bindings.setdefault(target.attr, []).append((sub.lineno, kind, value))
    for entries in self_bindings.values():
        if len(entries) > 1:
            entries.sort(key=_first)
    return self_bindings


_first = itemgetter(0)


_NESTED = ("body", "orelse", "finalbody")
_OPAQUE = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
# per statement type: the fields ``_flat_statements`` descends into, as (statement list fields,
# has ``handlers``, has ``cases``); () for a def, class or simple statement (nothing to descend into)
_BLOCK_FIELDS: dict[type, tuple[tuple[str, ...], bool, bool] | tuple[()]] = {}


def _block_fields(t: type) -> tuple[tuple[str, ...], bool, bool] | tuple[()]:
    fields = getattr(t, "_fields", ())
    got: tuple[tuple[str, ...], bool, bool] | tuple[()] = (
        tuple(f for f in _NESTED if f in fields), "handlers" in fields, "cases" in fields)
    if issubclass(t, _OPAQUE) or got == ((), False, False):
        got = ()
    _BLOCK_FIELDS[t] = got
    return got


def _flatten(body: list[ast.stmt], out: list[ast.stmt]) -> None:
    """``_flat_statements`` into a list, without a generator per nesting level."""
    append = out.append
    table = _BLOCK_FIELDS
    for stmt in body:
        append(stmt)
        t = type(stmt)
        spec = table.get(t)
        if spec is None:
            spec = _block_fields(t)
        if not spec:
            continue  # most statements: a simple one, or a def / class (not descended into)
        nested, handlers, cases = spec
        for name in nested:
            sub = getattr(stmt, name, None)
            if isinstance(sub, list):
                _flatten(sub, out)
        if handlers:
            for handler in getattr(stmt, "handlers", []) or []:
                _flatten(handler.body, out)
        if cases:
            for case in getattr(stmt, "cases", []) or []:
                _flatten(case.body, out)


def _flat_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements of a body, descending into compound statements but not into defs or classes."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        for name in ("body", "orelse", "finalbody"):
            sub = getattr(stmt, name, None)
            if isinstance(sub, list):
                yield from _flat_statements(sub)
        for handler in getattr(stmt, "handlers", []) or []:
            yield from _flat_statements(handler.body)
        for case in getattr(stmt, "cases", []) or []:
            yield from _flat_statements(case.body)


def _assign_pairs(stmt: ast.stmt) -> Iterator[tuple[ast.AST, ast.AST, str]]:
    if isinstance(stmt, ast.Assign):
        for target in stmt.targets:
            yield from _unpack(target, stmt.value)
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        yield stmt.target, stmt.value, "assign"
    elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add):
        yield stmt.target, stmt.value, "aug"
    elif isinstance(stmt, ast.AugAssign):
        yield stmt.target, stmt, "opaque"


def _unpack(target: ast.AST, value: ast.AST) -> Iterator[tuple[ast.AST, ast.AST, str]]:
    if isinstance(target, (ast.Tuple, ast.List)):
        if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
            for t, v in zip(target.elts, value.elts, strict=True):
                yield from _unpack(t, v)
        else:
            for t in target.elts:
                yield t, value, "opaque"
    else:
        yield target, value, "assign"


_ASSIGNS = (ast.Assign, ast.AnnAssign, ast.AugAssign)
# the statement types ``_record`` binds a name for (parsed trees hold these exact classes)
_BINDERS = frozenset({ast.Assign, ast.AnnAssign, ast.AugAssign, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                      ast.Import, ast.ImportFrom, ast.For, ast.AsyncFor, ast.With, ast.AsyncWith})


_DEFS = frozenset({ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef})
_IMPORTS = frozenset({ast.Import, ast.ImportFrom})


def _record(scope: Scope, stmt: ast.stmt) -> None:
    bindings = scope.bindings
    t = type(stmt)
    # defs and imports are most of what ``build_scope`` hands here (it binds plain assignments
    # itself): tested first, by exact type (a parsed tree holds no subclasses)
    if t in _DEFS:
        bindings.setdefault(stmt.name, []).append((stmt.lineno, "def", stmt))  # type: ignore[attr-defined]
        return
    if t in _IMPORTS:
        lineno = stmt.lineno
        for alias in stmt.names:  # type: ignore[attr-defined]
            name = alias.asname or alias.name.split(".")[0]
            bindings.setdefault(name, []).append((lineno, "import", stmt))
        return
    if t is ast.Assign:
        value = stmt.value  # type: ignore[attr-defined]
        for target in stmt.targets:  # type: ignore[attr-defined]
            if type(target) is ast.Name:  # the common case, without the generators of _unpack
                bindings.setdefault(target.id, []).append((stmt.lineno, "assign", value))
                continue
            for tgt, v, kind in _unpack(target, value):
                if isinstance(tgt, ast.Name):
                    bindings.setdefault(tgt.id, []).append((stmt.lineno, kind, v))
        return
    if issubclass(t, _ASSIGNS):
        for target, value, kind in _assign_pairs(stmt):
            if isinstance(target, ast.Name):
                bindings.setdefault(target.id, []).append((stmt.lineno, kind, value))
        return
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        for t, v, _ in _unpack(stmt.target, stmt.iter):
            if isinstance(t, ast.Name):
                bindings.setdefault(t.id, []).append((stmt.lineno, "opaque", v))
    elif isinstance(stmt, (ast.With, ast.AsyncWith)):
        for item in stmt.items:
            if isinstance(item.optional_vars, ast.Name):
                bindings.setdefault(item.optional_vars.id, []).append((stmt.lineno, "opaque", item.context_expr))


def _never_evaluated(func: ast.AST) -> bool:
    """Whether ``Resolver._call`` gives up on a call to ``func`` at once: a method or function none
    of its branches evaluates, or a callee that is no name or attribute."""
    tf = type(func)
    if tf is ast.Attribute:
        return func.attr not in _EVALUATED_METHODS  # type: ignore[attr-defined]
    if tf is ast.Name:
        return func.id not in _EVALUATED_FUNCTIONS  # type: ignore[attr-defined]
    return True


class Resolver:
    """Evaluates constant expressions of one host file."""

    def __init__(self, host: HostSource):
        self.host = host
        # evaluations left for this question (``value``/``try_value``) and for the whole file
        self._steps = MAX_STEPS
        self._total = MAX_TOTAL_STEPS

    # ------------------------------------------------------------------ public
    def value(self, expr: ast.AST, scope: Scope, line: int | None = None) -> Any:
        """The value of ``expr``: MappedText for strings, int/float/bool/None, lists of values.

        Raises ``Unresolved`` when the value depends on anything not known statically.
        """
        self._steps = MAX_STEPS
        return self._eval(expr, scope, expr.lineno if line is None else line, 0)

    def try_value(self, expr: ast.AST, scope: Scope, line: int | None = None) -> Any:
        line = expr.lineno if line is None else line
        self._steps = MAX_STEPS
        if type(expr) is ast.Name:
            # what ``_eval`` does for a name, with the commonest failures answered without raising:
            # a raised ``Unresolved`` goes through three or four frames, and Python 3.11 works out
            # each frame's line for the traceback, more than the whole evaluation costs.  A name
            # that is unknown, bound other than by an assignment, or bound to a method call that
            # ``_call`` does not evaluate (``n = x.size(0)``) is ``Unresolved`` however it is asked
            found = scope.lookup(expr.id, line)
            if found is None:
                return Unresolved
            node, kind, where, at = found
            if kind == "assign":
                if type(node) is ast.Call and _never_evaluated(node.func):  # type: ignore[attr-defined]
                    return Unresolved
            elif kind != "aug":
                return Unresolved
            try:
                return self._binding_value(expr.id, node, kind, where, at, 1)  # ``_eval``'s depth + 1
            except (Unresolved, RecursionError):
                return Unresolved
        if type(expr) is ast.Call and _never_evaluated(expr.func):  # type: ignore[attr-defined]
            return Unresolved  # what ``_call`` raises at once, without the raise
        try:
            return self._eval(expr, scope, line, 0)  # ``value``, one call less
        except (Unresolved, RecursionError):
            return Unresolved

    def text(self, expr: ast.AST, scope: Scope, line: int | None = None) -> MappedText:
        v = self.value(expr, scope, line)
        if isinstance(v, MappedText):
            return v
        if isinstance(v, list) and all(isinstance(x, MappedText) for x in v):
            return MappedText.join(v, "\n")
        raise Unresolved(f"not a string: {type(v).__name__}")

    # ------------------------------------------------------------------ evaluation
    def _eval(self, e: ast.AST, scope: Scope, line: int, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise Unresolved("too deep")
        self._steps -= 1
        self._total -= 1
        if self._steps < 0 or self._total < 0:
            raise Unresolved("too much work")
        d = depth + 1
        # dispatch on the exact class (a parsed tree holds no subclasses of these), the most
        # common first
        t = type(e)
        if t is ast.Name:
            found = scope.lookup(e.id, line)  # type: ignore[attr-defined]
            if found is None:
                raise Unresolved(f"unknown name {e.id}")  # type: ignore[attr-defined]
            node, kind, where, at = found
            return self._binding_value(e.id, node, kind, where, at, d)  # type: ignore[attr-defined]
        if t is ast.Call:  # near the top: most calls raise, and a raise's traceback line is looked up
            return _bounded(self._call(e, scope, line, d))  # type: ignore[arg-type]
        if t is ast.Constant:
            if isinstance(e.value, str):
                decoded = decode_literal(self.host, e)
                if decoded is not None and decoded[0].text == e.value:
                    return decoded[0]
                return MappedText.opaque(e.value, e.lineno, self.host.char_col(e.lineno, e.col_offset))
            if isinstance(e.value, bytes):
                raise Unresolved("bytes")
            return e.value
        if t is ast.JoinedStr:
            def field_eval(index: int, src: str) -> Any:
                fv = [v for v in e.values if isinstance(v, ast.FormattedValue)]
                if index >= len(fv):
                    return None
                node = fv[index]
                try:
                    val = self._eval(node.value, scope, line, d)
                except Unresolved:
                    return None
                return self._format(val, node)
            decoded = decode_literal(self.host, e, field_eval)
            if decoded is None or decoded[1]:
                raise Unresolved("f-string with unknown fields")
            return _bounded(decoded[0])
        if t is ast.Attribute:
            return self._attribute(e, scope, line, d)  # type: ignore[arg-type]
        if t is ast.List or t is ast.Tuple:
            out: list[Any] = []
            for elt in e.elts:
                if isinstance(elt, ast.Starred):
                    inner = self._eval(elt.value, scope, line, d)
                    if not isinstance(inner, list):
                        raise Unresolved("starred non-list")
                    out.extend(inner)
                else:
                    out.append(self._eval(elt, scope, line, d))
            return _bounded(out)
        if t is ast.BinOp:
            left = self._eval(e.left, scope, line, d)
            right = self._eval(e.right, scope, line, d)
            return _bounded(self._binop(e, left, right))
        if t is ast.UnaryOp and isinstance(e.op, (ast.USub, ast.UAdd)):  # type: ignore[attr-defined]
            v = self._eval(e.operand, scope, line, d)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return -v if isinstance(e.op, ast.USub) else v
            raise Unresolved("unary on non-number")
        if t is ast.IfExp:
            raise Unresolved("conditional")
        raise Unresolved(type(e).__name__)

    def _binding_value(self, name: str, node: ast.AST, kind: str, where: Scope, at: int, d: int) -> Any:
        if kind == "assign":
            return self._eval(node, where, at, d)
        if kind == "aug":
            found = where.lookup(name, at)
            if found is None:
                raise Unresolved(f"+= on unknown {name}")
            prev = self._binding_value(name, *found[:3], found[3], d + 1)
            return _bounded(self._binop(ast.BinOp(op=ast.Add()), prev, self._eval(node, where, at, d)))
        raise Unresolved(f"{name} is bound by {kind}")

    def _attribute(self, e: ast.Attribute, scope: Scope, line: int, d: int) -> Any:
        # self.X / ClassName.X: class attribute, or attribute assigned in a method
        if isinstance(e.value, ast.Name):
            klass = None
            if e.value.id in ("self", "cls"):
                klass = scope.klass
            else:
                found = scope.lookup(e.value.id, line)
                if found and found[1] == "def" and isinstance(found[0], ast.ClassDef):
                    klass = build_scope(found[0], found[2])
            if klass is not None:
                entries = klass.bindings.get(e.attr)
                if entries:
                    ln, kind, node = entries[-1]
                    return self._binding_value(e.attr, node, kind, klass, ln + 1, d)
                entries = klass.self_bindings.get(e.attr)
                if entries and len(entries) == 1 and entries[0][1] == "assign":
                    ln, kind, node = entries[0]
                    return self._eval(node, klass, ln, d)
        raise Unresolved("attribute")

    def _format(self, val: Any, node: ast.FormattedValue) -> Any:
        if isinstance(val, MappedText) and node.format_spec is None and node.conversion in (-1, 115):
            return val
        raw = val.text if isinstance(val, MappedText) else val
        if node.conversion == 114:
            raw = repr(raw)
        spec = ""
        if node.format_spec is not None:
            if all(isinstance(v, ast.Constant) for v in node.format_spec.values):
                spec = "".join(str(v.value) for v in node.format_spec.values)
            else:
                return None
        try:
            _not_wide(spec, [])
            return format(raw, spec)
        except (ValueError, TypeError, Unresolved):
            return None

    def _binop(self, e: ast.BinOp, left: Any, right: Any) -> Any:
        op = e.op
        _bounded(left)
        _bounded(right)
        if isinstance(op, ast.Add) and _size(left) + _size(right) > (
                MAX_TEXT if isinstance(left, MappedText) else MAX_ITEMS):
            raise Unresolved("too large")
        if isinstance(op, ast.Add):
            if isinstance(left, MappedText) and isinstance(right, MappedText):
                return left + right
            if isinstance(left, list) and isinstance(right, list):
                return left + right
        if isinstance(left, MappedText) and isinstance(op, ast.Mod):
            args = right if isinstance(right, list) else [right]
            plain = [a.text if isinstance(a, MappedText) else a for a in args]
            _not_wide(left.text, plain)
            try:
                text = left.text % tuple(plain)
            except (TypeError, ValueError) as exc:
                raise Unresolved(str(exc)) from None
            return _remap_like(left, text)
        if isinstance(left, MappedText) and isinstance(right, int) and isinstance(op, ast.Mult):
            if len(left.text) * max(right, 0) > MAX_TEXT:
                raise Unresolved("too large")
            if right > 64:
                # a long repeat (a rule of dashes): one opaque piece, not a join of many pieces
                line, col = left.position(0)
                return MappedText.opaque(left.text * right, line, col)
            return MappedText.join([left] * right)
        if isinstance(left, list) and isinstance(right, int) and isinstance(op, ast.Mult):
            raise Unresolved("list repeat")
        nums = (int, float)
        if isinstance(left, nums) and isinstance(right, nums) and not isinstance(left, bool):
            try:
                if isinstance(op, ast.Add):
                    return left + right
                if isinstance(op, ast.Sub):
                    return left - right
                if isinstance(op, ast.Mult):
                    if isinstance(left, int) and isinstance(right, int) and \
                            left.bit_length() + right.bit_length() > MAX_INT_BITS:
                        raise Unresolved("too large")
                    return left * right
                if isinstance(op, ast.FloorDiv):
                    return left // right
                if isinstance(op, ast.Div):
                    return left / right
                if isinstance(op, ast.Mod):
                    return left % right
                if isinstance(op, ast.Pow) and abs(right) < 64:
                    if isinstance(left, int) and left.bit_length() * abs(right) > MAX_INT_BITS:
                        raise Unresolved("too large")
                    return left**right
                if isinstance(op, ast.LShift) and 0 <= right < 64:
                    return left << right
                if isinstance(op, ast.RShift):
                    return left >> right
            except (ZeroDivisionError, OverflowError, TypeError):
                pass
        raise Unresolved("binop")

    def _call(self, e: ast.Call, scope: Scope, line: int, d: int) -> Any:
        func = e.func
        # a callee none of the branches below evaluates, answered here rather than at the end: the
        # traceback of a raise records its line, and Python 3.11 finds it by reading the function's
        # line table up to the raise
        if _never_evaluated(func):
            raise Unresolved("call")
        # str methods: "".join(...), s.format(...), s.strip(), s.replace(...)
        if isinstance(func, ast.Attribute):
            attr = func.attr
            if attr == "dedent" and _dotted(func.value) in ("textwrap",) and len(e.args) == 1:
                return self._eval_text(e.args[0], scope, line, d).dedent()
            if attr in ("strip", "lstrip", "rstrip") and not e.args:
                base = self._eval_text(func.value, scope, line, d)
                if attr == "strip":
                    return base.strip()
                if attr == "lstrip":
                    lead = len(base.text) - len(base.text.lstrip())
                    return base.slice(lead)
                return base.slice(0, len(base.text.rstrip()))
            if attr == "join" and len(e.args) == 1:
                sep = self._eval_text(func.value, scope, line, d)
                items = self._eval(e.args[0], scope, line, d)
                if isinstance(items, list) and all(isinstance(x, MappedText) for x in items):
                    return MappedText.join(items, sep.text)
                raise Unresolved("join of non-strings")
            if attr == "format":
                base = self._eval_text(func.value, scope, line, d)
                args = [self._plain(self._eval(a, scope, line, d)) for a in e.args]
                kwargs = {k.arg: self._plain(self._eval(k.value, scope, line, d)) for k in e.keywords if k.arg}
                _not_wide(base.text, [*args, *kwargs.values()])
                try:
                    return _remap_like(base, base.text.format(*args, **kwargs))
                except (IndexError, KeyError, ValueError) as exc:
                    raise Unresolved(str(exc)) from None
            if attr == "replace" and len(e.args) == 2:
                base = self._eval_text(func.value, scope, line, d)
                a = self._plain(self._eval(e.args[0], scope, line, d))
                b = self._plain(self._eval(e.args[1], scope, line, d))
                a, b = str(a), str(b)
                grow = len(b) - len(a)
                if grow > 0 and len(base.text) + (len(base.text) + 1) * grow > MAX_TEXT and \
                        len(base.text) + base.text.count(a) * grow > MAX_TEXT:
                    raise Unresolved("too large")
                return _remap_like(base, base.text.replace(a, b))
        if isinstance(func, ast.Name):
            if func.id == "dedent" and len(e.args) == 1:
                return self._eval_text(e.args[0], scope, line, d).dedent()
            if func.id in ("str",) and len(e.args) == 1:
                v = self._eval(e.args[0], scope, line, d)
                return v if isinstance(v, MappedText) else MappedText.opaque(str(v), e.lineno, e.col_offset)
            if func.id in ("int",) and len(e.args) == 1:
                v = self._plain(self._eval(e.args[0], scope, line, d))
                try:
                    return int(v)
                except (TypeError, ValueError):
                    raise Unresolved("int()") from None
            if func.id in ("list", "tuple") and len(e.args) == 1:
                v = self._eval(e.args[0], scope, line, d)
                if isinstance(v, list):
                    return v
        raise Unresolved("call")

    def _eval_text(self, e: ast.AST, scope: Scope, line: int, d: int) -> MappedText:
        v = self._eval(e, scope, line, d)
        if isinstance(v, MappedText):
            return v
        raise Unresolved("not a string")

    @staticmethod
    def _plain(v: Any) -> Any:
        if isinstance(v, MappedText):
            return v.text
        if isinstance(v, list):
            return [Resolver._plain(x) for x in v]
        return v


# a width or precision of a million or more written in a conversion (``%1000000000s``,
# ``{:>1000000000}``; an f-string's spec is checked whole)
_WIDE = re.compile(r"%[-+ #0]*\d{7,}|%[-+ #0]*\d*\.\d{7,}|\{[^{}]*:[^{}]*\d{7,}|^[^{}%]*\d{7,}[^{}%]*$")
# a width or precision taken from an argument: ``%*s``, ``{:{}}``
_ARG_WIDTH = re.compile(r"%[-+ #0]*\*|%[^%a-zA-Z]*\.\*|\{[^{}]*:[^{}]*\{")


def _not_wide(template: str, args: list[Any]) -> None:
    """``Unresolved`` when formatting could build a huge string from a short template: a width of
    a million or more, written out or taken from an argument (``"%*s" % (10**9, "")``)."""
    if _WIDE.search(template) or (_ARG_WIDTH.search(template) and
                                  any(isinstance(a, int) and abs(a) >= 10**6 for a in args)):
        raise Unresolved("too large")


def _size(v: Any) -> int:
    if isinstance(v, MappedText):
        return len(v.text)
    if isinstance(v, list):
        return len(v)
    return 0


def _bounded(v: Any) -> Any:
    """``v`` when it is within the resolver's size bounds; else ``Unresolved``."""
    if isinstance(v, MappedText):
        if len(v.text) > MAX_TEXT:
            raise Unresolved("too large")
    elif isinstance(v, list):
        if len(v) > MAX_ITEMS:
            raise Unresolved("too large")
    elif isinstance(v, int) and v.bit_length() > MAX_INT_BITS:
        raise Unresolved("too large")
    return v


def _remap_like(base: MappedText, new_text: str) -> MappedText:
    """A string derived from ``base`` by formatting: keep the map line by line where lines agree.

    ``%`` and ``.format`` mostly substitute inside lines, so each output line maps to the start of
    the input line with the same index (exact when the line is unchanged).
    """
    if new_text == base.text:
        return base
    old_lines = base.text.splitlines(keepends=True)
    new_lines = new_text.splitlines(keepends=True)
    if len(old_lines) != len(new_lines):
        line, col = base.position(0)
        return MappedText.opaque(new_text, line, col)
    out = MappedText("", ())
    off = 0
    for old, new in zip(old_lines, new_lines, strict=True):
        if old == new:
            out = out + base.slice(off, off + len(old))
        else:
            line, col = base.position(off)
            out = out + MappedText.opaque(new, line, col)
        off += len(old)
    return out


def _dotted(e: ast.AST) -> str:
    t = type(e)
    if t is ast.Name:
        return e.id  # type: ignore[attr-defined]
    if t is not ast.Attribute:
        return ""
    parts: list[str] = []
    while type(e) is ast.Attribute:
        parts.append(e.attr)  # type: ignore[attr-defined]
        e = e.value  # type: ignore[attr-defined]
    if type(e) is ast.Name:
        parts.append(e.id)  # type: ignore[attr-defined]
        return ".".join(reversed(parts))
    return ""


dotted_name = _dotted


def returns_of(fn: ast.FunctionDef) -> list[ast.AST]:
    """The expressions a (small) function returns, outer body and nested blocks."""
    out = []
    stack: list[ast.AST] = list(fn.body)
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Return):
            if n.value is not None:
                out.append(n.value)
        elif isinstance(n, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
            for name in ("body", "orelse", "finalbody", "handlers"):
                stack.extend(getattr(n, name, []) or [])
        elif isinstance(n, ast.ExceptHandler):
            stack.extend(n.body)
    return out
