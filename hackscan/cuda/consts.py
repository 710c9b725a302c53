"""Constant folding for C++ integer expressions: ``#define`` bodies, ``constexpr`` / ``const int``
initialisers, launch configurations and loop strides.

tree-sitter gives syntax, not values; this folds the small integer arithmetic kernels use
(``(N + BLOCK - 1) / BLOCK``, ``1 << 10``, ``sizeof(float)``, casts) against an environment of
named constants.  Anything it cannot fold is ``None``: rules treat unknown as "not a literal".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import tree_sitter as ts

from .parser import strip_parens, text

_INT_SUFFIX = re.compile(r"[uUlL]+$")
_SIZEOF = {"float": 4, "int": 4, "double": 8, "half": 2, "__half": 2, "float4": 16, "float2": 8, "int4": 16,
           "char": 1, "unsigned": 4, "long": 8, "int64_t": 8, "int32_t": 4, "__nv_bfloat16": 2, "half2": 4,
           "__half2": 4, "uint4": 16, "short": 2, "bool": 1, "size_t": 8}

Env = Mapping[str, int | float]


_HEX = re.compile(r"0[xX][0-9a-fA-F]+[uUlL]*")
_BINARY = re.compile(r"0[bB][01]+[uUlL]*")
_DECIMAL = re.compile(r"\d+[uUlL]*")
_FLOAT = re.compile(r"(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?[fFlL]?")


def parse_number(raw: str) -> int | float | None:
    s = raw.replace("'", "").strip()
    if s.isdigit() and s.isascii():
        # plain decimal digits, the usual literal: what the ``_DECIMAL`` branch below returns
        return int(s, 10)
    try:
        if _HEX.fullmatch(s):
            return int(_INT_SUFFIX.sub("", s), 16)
        if _BINARY.fullmatch(s):
            return int(_INT_SUFFIX.sub("", s)[2:], 2)
        if _DECIMAL.fullmatch(s):
            return int(_INT_SUFFIX.sub("", s), 10)
        if _FLOAT.fullmatch(s):
            return float(s.rstrip("fFlL"))
    except ValueError:
        return None
    return None


_BIN: dict[str, Callable[[int | float, int | float], int | float]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "<<": lambda a, b: int(a) << int(b),
    ">>": lambda a, b: int(a) >> int(b),
    "&": lambda a, b: int(a) & int(b),
    "|": lambda a, b: int(a) | int(b),
    "^": lambda a, b: int(a) ^ int(b),
}


def _div(a: int | float, b: int | float) -> int | float | None:
    if b == 0:
        return None
    if isinstance(a, int) and isinstance(b, int):
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    return a / b


# the calls ``fold`` knows the value of (a cast of one value, ``min`` / ``max`` of values)
_FOLDED_CALLS = frozenset({"static_cast", "int", "unsigned", "size_t", "int64_t", "long", "float", "min", "std::min",
                           "fminf", "max", "std::max", "fmaxf"})


# the node types ``fold`` has a rule for; any other folds to None
_FOLDABLE = frozenset({"number_literal", "identifier", "qualified_identifier", "true", "false", "char_literal",
                       "binary_expression", "unary_expression", "cast_expression", "sizeof_expression",
                       "call_expression", "conditional_expression"})


def never_folds(node: ts.Node) -> bool:
    """Whether ``fold`` returns None for ``node`` whatever the constants: a node type it has no rule
    for (``blockIdx.x``, ``p[i]``, ``*p``, ``{...}``)."""
    t = node.type
    return t not in _FOLDABLE and t != "parenthesized_expression"


def fold(node: ts.Node | None, env: Env, depth: int = 0) -> int | float | None:
    """The value of an integer/float expression node, or None."""
    if node is None or depth > 40:
        return None
    t = node.type
    if t == "parenthesized_expression":
        node = strip_parens(node)
        t = node.type
    if t not in _FOLDABLE:
        # ``a.x``, ``p[i]``, ``*p``, strings...: nothing below folds them (the usual failure)
        return None
    if t == "number_literal":
        return parse_number(text(node))
    if t == "identifier":
        return env.get(text(node))
    if t == "qualified_identifier":
        return env.get(text(node).split("::")[-1])
    if t == "true":
        return 1
    if t == "false":
        return 0
    if t == "char_literal":
        s = text(node)
        return ord(s[1]) if len(s) == 3 else None
    if t == "binary_expression":
        kids = node.children
        if len(kids) == 3 and not node.has_error:
            # ``left op right``: three required parts and no room for anything else, so read by
            # position (a field lookup costs several times the one children list)
            left, op, right = kids
        else:
            left, op, right = (node.child_by_field_name("left"), node.child_by_field_name("operator"),
                               node.child_by_field_name("right"))
        a = fold(left, env, depth + 1)
        if a is None:
            return None
        b = fold(right, env, depth + 1)
        if b is None:
            return None
        o = op.type if op is not None else ""
        if o == "/":
            return _div(a, b)
        if o == "%":
            return int(a) % int(b) if b else None
        f = _BIN.get(o)
        try:
            return f(a, b) if f is not None else None
        except (TypeError, ValueError, OverflowError):
            return None
    if t == "unary_expression":
        return _fold_unary(node, env, depth)
    if t == "cast_expression":
        return fold(node.child_by_field_name("value"), env, depth + 1)
    if t == "sizeof_expression":
        inner = node.child_by_field_name("type") or node.child_by_field_name("value")
        return _SIZEOF.get("".join(text(inner).split()).strip("()"))
    if t == "call_expression":
        return _fold_call(node, env, depth)
    if t == "conditional_expression":
        c = fold(node.child_by_field_name("condition"), env, depth + 1)
        if c is None:
            return None
        return fold(node.child_by_field_name("consequence" if c else "alternative"), env, depth + 1)
    return None


def _fold_unary(node: ts.Node, env: Env, depth: int) -> int | float | None:
    """``-x``, ``+x``, ``~x`` of a folded operand."""
    kids = node.children
    if len(kids) == 2 and not node.has_error:  # ``op argument``, as above
        op, arg = kids
    else:
        op, arg = node.child_by_field_name("operator"), node.child_by_field_name("argument")
    v = fold(arg, env, depth + 1)
    if v is None or op is None:
        return None
    if op.type == "-":
        return -v
    if op.type == "+":
        return v
    if op.type == "~" and isinstance(v, int):
        return ~v
    return None


def _fold_call(node: ts.Node, env: Env, depth: int) -> int | float | None:
    """A call that keeps a constant: casts, min/max of constants."""
    # static_cast<int>(x), min/max of constants, int(x)
    func = node.child_by_field_name("function")
    args = node.child_by_field_name("arguments")
    if func is None or args is None:
        return None
    fname = text(func.child_by_field_name("name") if func.type == "template_function" else func)
    if fname not in _FOLDED_CALLS:
        # any other call folds to None whatever its arguments are: do not fold them
        return None
    vals = [fold(a, env, depth + 1) for a in args.named_children]
    for v in vals:  # a loop, not an early-exited any(generator): GeneratorExit costs more
        if v is None:
            return None
    if fname in ("static_cast", "int", "unsigned", "size_t", "int64_t", "long", "float") and len(vals) == 1:
        return vals[0]
    if fname in ("min", "std::min", "fminf") and vals:
        return min(vals)  # type: ignore[type-var]
    if fname in ("max", "std::max", "fmaxf") and vals:
        return max(vals)  # type: ignore[type-var]
    return None


# ``#define`` bodies are raw text; fold them with a tiny tokenizer over the same operators
_TOKEN = re.compile(r"\s*(0[xX][0-9a-fA-F]+[uUlL]*|\d+\.\d*(?:[eE][+-]?\d+)?[fF]?|\d+(?:[eE][+-]?\d+)?[uUlLfF]*|"
                    r"[A-Za-z_]\w*|<<|>>|[-+*/%()&|^~])")


def fold_text(body: str, env: Env) -> int | float | None:
    body = re.sub(r"//.*|/\*.*?\*/", "", body).strip()
    if not body:
        return None
    tokens = []
    pos = 0
    while pos < len(body):
        m = _TOKEN.match(body, pos)
        if not m:
            return None
        tokens.append(m.group(1))
        pos = m.end()
    try:
        value, rest = _expr(tokens, 0, env)
    except (IndexError, ValueError, TypeError, ZeroDivisionError, OverflowError):
        return None
    return value if rest == len(tokens) else None


_PREC = {"|": 1, "^": 2, "&": 3, "<<": 4, ">>": 4, "+": 5, "-": 5, "*": 6, "/": 6, "%": 6}


def _expr(tokens: list[str], i: int, env: Env, min_prec: int = 0) -> tuple[int | float | None, int]:
    lhs, i = _atom(tokens, i, env)
    while i < len(tokens) and tokens[i] in _PREC and _PREC[tokens[i]] >= min_prec:
        op = tokens[i]
        rhs, i = _expr(tokens, i + 1, env, _PREC[op] + 1)
        if lhs is None or rhs is None:
            lhs = None
            continue
        if op == "/":
            lhs = _div(lhs, rhs)
        elif op == "%":
            lhs = int(lhs) % int(rhs)
        else:
            lhs = _BIN[op](lhs, rhs)
    return lhs, i


def _atom(tokens: list[str], i: int, env: Env) -> tuple[int | float | None, int]:
    tok = tokens[i]
    if tok == "(":
        # a cast like (int) or a parenthesised expression
        if i + 2 < len(tokens) and tokens[i + 2] == ")" and tokens[i + 1] in _SIZEOF | {"int": 4, "unsigned": 4}:
            return _atom(tokens, i + 3, env)
        v, j = _expr(tokens, i + 1, env)
        if j >= len(tokens) or tokens[j] != ")":
            raise ValueError("unbalanced")
        return v, j + 1
    if tok == "-":
        v, j = _atom(tokens, i + 1, env)
        return (-v if v is not None else None), j
    if tok == "+":
        return _atom(tokens, i + 1, env)
    if tok == "~":
        v, j = _atom(tokens, i + 1, env)
        return (~int(v) if v is not None else None), j
    n = parse_number(tok)
    if n is not None:
        return n, i + 1
    if re.match(r"[A-Za-z_]", tok):
        return env.get(tok), i + 1
    raise ValueError(tok)
