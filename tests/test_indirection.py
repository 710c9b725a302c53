"""python/indirection.py: indirect lookups, calls and namespace writes read as their plain forms."""

from __future__ import annotations

import ast

import pytest

from hackscan.python.imports import ImportMap
from hackscan.python.indirection import callees, const_str, lookup, namespace_writes, two_way, write_call

CANON = ImportMap.of(ast.parse("import functools\nimport sys\nimport torch\n")).canonical


def _expr(text: str) -> ast.AST:
    return ast.parse(text, mode="eval").body


def _unparse(nodes: list[ast.AST] | None) -> list[str] | None:
    return None if nodes is None else [ast.unparse(n) for n in nodes]


@pytest.mark.parametrize("text, folded", [('"soft" + "max"', "softmax"), ('f"a{1}"', None), ("x", None),
                                          ('"a" + b', None), ('f"ab" "cd"', "abcd")])
def test_const_str_folds_only_constants(text: str, folded: str | None) -> None:
    assert const_str(_expr(text)) == folded


@pytest.mark.parametrize("text, plain", [
    ('getattr(torch, "soft" + "max")', "torch.softmax"),
    ('vars(torch)["relu"]', "torch.relu"),
    ('Model.__dict__["forward"]', "Model.forward"),
    ('vars(torch.cuda).get("synchronize")', "torch.cuda.synchronize"),
    ('globals()["_calls"]', "_calls"),
    ('vars(sys.modules[__name__])["ModelNew"]', "ModelNew"),
    ("getattr(torch, name)", None),  # a computed name is not followed
    ('d["relu"]', None),  # an ordinary dict is no namespace
])
def test_lookup_reads_the_plain_name(text: str, plain: str | None) -> None:
    got = lookup(_expr(text), CANON)
    assert (ast.unparse(got) if got is not None else None) == plain


@pytest.mark.parametrize("text, calls", [
    ('getattr(torch, "relu")(x)', ["torch.relu(x)"]),
    ("functools.partial(torch.softmax, dim=1)(x)", ["torch.softmax(x, dim=1)"]),
    ("(lambda: k(x), lambda: torch.relu(x))[int(x.numel() > 0)]()", ["k(x)", "torch.relu(x)"]),
    ("{torch.float32: f}.get(x.dtype, g)(x)", ["f(x)", "g(x)"]),
    ("(lambda t: t)(x)", None),  # a lambda with parameters stays a call: the value flow binds them
    ("torch.relu(x)", None),
])
def test_callees_are_what_the_call_runs(text: str, calls: list[str] | None) -> None:
    call = _expr(text)
    assert isinstance(call, ast.Call)
    assert _unparse(callees(call, CANON)) == calls


def test_two_way_table_is_a_conditional_on_its_index() -> None:
    func = _expr("(f, g)[int(x.numel() > 0)]")
    test, taken, other = two_way(func, [_expr("f"), _expr("g")])  # type: ignore[misc]
    assert (ast.unparse(test), ast.unparse(taken), ast.unparse(other)) == ("x.numel() > 0", "g", "f")
    func = _expr("{torch.float32: f}.get(x.dtype, g)")
    test, taken, other = two_way(func, [_expr("f"), _expr("g")])  # type: ignore[misc]
    assert (ast.unparse(test), ast.unparse(taken), ast.unparse(other)) == ("x.dtype == torch.float32", "f", "g")
    assert two_way(_expr("(f, g, h)[i]"), [_expr("f"), _expr("g"), _expr("h")]) is None


@pytest.mark.parametrize("text, writes", [
    ('setattr(torch, "allclose", f)', [("torch.allclose", "f")]),
    ('torch.backends.cudnn.__setattr__("allow_tf32", True)', [("torch.backends.cudnn.allow_tf32", "True")]),
    ('vars(torch.cuda)["synchronize"] = f', [("torch.cuda.synchronize", "f")]),
    ('time.__dict__.update(perf_counter=g)', [("time.perf_counter", "g")]),
    ('globals()["ModelNew"] = Model', [("ModelNew", "Model")]),
    ('functools.partial(setattr, torch)("allclose", f)', [("torch.allclose", "f")]),
    ('setattr(torch, name, f)', []),  # computed name: not a write this analysis can name
    ('cache["key"] = f', []),  # an ordinary dict is no namespace
])
def test_namespace_writes_are_assignments(text: str, writes: list[tuple[str, str]]) -> None:
    stmt = ast.parse(text).body[0]
    got = [(ast.unparse(t), ast.unparse(v)) for t, v in namespace_writes(stmt, CANON)]
    assert got == writes


def test_write_call_of_a_module_namespace_setdefault_binds_the_name() -> None:
    call = _expr('globals().setdefault("_memo", {})')
    assert isinstance(call, ast.Call)
    assert [(ast.unparse(t), ast.unparse(v)) for t, v in write_call(call, CANON)] == [("_memo", "{}")]
