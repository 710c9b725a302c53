"""The speed tricks give what the plain code they replace gives.

Each trick lives in one named place: the generated AST walkers and indexer of
``hackscan.python.module`` (``index_tree``, ``subtree``, ``children``, ``statements``, the
statement-only import walk and the text count that skips it), ``hackscan.util.lazy.cached_property``
(``functools.cached_property`` without 3.11's lock) and ``hackscan.util.quick_init`` (held to a plain
dataclass in ``tests/test_records.py``).  Here each is compared with its plain version over every
fixture, demo kernel and source file of the project, a file of rare syntax, and the corpus when present.
"""

from __future__ import annotations

import ast
import functools
import json
from collections import defaultdict
from pathlib import Path

import pytest

from hackscan.python.imports import ImportMap
from hackscan.python.module import HostModule, _statement_imports, children, index_tree, statements, subtree
from hackscan.util.lazy import cached_property

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpora" / "cuda-l1" / "a100.jsonl"


def at_least(alone: int, with_corpus: int) -> int:
    """The floor a count must pass: ``with_corpus`` when ../shared/corpora sits beside the clone (the
    loops below then add its first records), ``alone`` (what the fixtures and kernels give) when not,
    so a plain clone without the corpus still checks the shortcuts on every file it has."""
    return with_corpus if CORPUS.is_file() else alone
SKIP = (ast.expr_context, ast.boolop, ast.operator, ast.unaryop, ast.cmpop)  # singletons in CPython's ast

RARE = '''
import a as x; import b as x
from . import y
async def f(p, /, q=1, *r, s: int = 2, **t) -> None:
    async with a as b, c:
        async for i in g():
            yield i
    await z
    x = [i async for i in g() if i]
    lambda: (yield)
def outer():
    import os.path as op
    global G
    nonlocal_ = {k: v for k, v in d.items()} | {**d}
    try:
        pass
    except* ValueError as e:
        raise RuntimeError from e
    else:
        del a[1:2:3], b.c
    finally:
        assert x, "m"
    match cmd:
        case [1, *rest] | {"k": v, **kw} if v:
            pass
        case Point(x=0, y=_) as p:
            pass
        case None | True | -1 | 1 + 2j:
            pass
    with (open(a) as f, open(b)):
        print(f"{x!r:>{w}} {y=}", *args, sep="")
    while (n := n - 1) > 0 and not done or x is not y:
        continue
    for a, *b in c:
        break
    else:
        x @= ~y ** -z if c else {1, 2}
    return (a < b <= c), {None: 1, **e}, t[...], t[1:], x.y.z()
class C(B, metaclass=M):
    @decorate(1)
    def m(self) -> C: ...
    type_ = list[int]
'''


FOLDERS = ("fixtures", "kernels", "hackscan")


def _sources(folder: str) -> list[tuple[str, str]]:
    if folder == "<rare>":
        return [("<rare>", RARE)]
    return [(str(p.relative_to(ROOT)), p.read_text(errors="replace")) for p in sorted((ROOT / folder).rglob("*.py"))]


def _trees(sources: list[tuple[str, str]]) -> list[tuple[str, str, ast.Module]]:
    out = []
    for name, text in sources:
        try:
            out.append((name, text, ast.parse(text)))
        except (SyntaxError, ValueError):
            continue  # a fixture of unparsable code: no tree, nothing indexed
    return out


@functools.cache
def trees(folder: str) -> list[tuple[str, str, ast.Module]]:
    return _trees(_sources(folder))


def all_trees() -> list[tuple[str, str, ast.Module]]:
    return [t for folder in ("<rare>", *FOLDERS) for t in trees(folder)]


def _plain_children(node: ast.AST) -> list[ast.AST]:
    return [c for c in ast.iter_child_nodes(node) if not isinstance(c, SKIP)]


def _plain_index(tree: ast.AST) -> tuple[dict[ast.AST, ast.AST], dict[type, list[ast.AST]]]:
    """``index_tree`` done plainly: pop a node, list it, push its children in field order."""
    parents: dict[ast.AST, ast.AST] = {}
    nodes: dict[type, list[ast.AST]] = defaultdict(list)
    stack = [tree]
    while stack:
        node = stack.pop()
        nodes[type(node)].append(node)
        kids = _plain_children(node)
        for c in kids:
            parents[c] = node
        stack.extend(kids)
    return parents, dict(nodes)


def _ids(nodes: list[ast.AST]) -> list[int]:
    return [id(n) for n in nodes]


def _check_tree(tree: ast.Module) -> None:
    parents, nodes = index_tree(tree)
    want_parents, want_nodes = _plain_index(tree)
    assert {id(k): id(v) for k, v in parents.items()} == {id(k): id(v) for k, v in want_parents.items()}
    assert {t: _ids(v) for t, v in nodes.items()} == {t: _ids(v) for t, v in want_nodes.items()}
    walked = [n for n in ast.walk(tree) if not isinstance(n, SKIP)]
    assert _ids(subtree(tree)) == _ids(walked)
    for fn in tree.body:  # from another root than the module
        assert _ids(subtree(fn)) == _ids([n for n in ast.walk(fn) if not isinstance(n, SKIP)])
    for of_type in want_nodes.values():  # the generated code is per type: a few nodes of each
        for n in of_type[:3]:
            assert _ids(children(n)) == _ids(_plain_children(n))
    kinds = (ast.stmt, ast.excepthandler, ast.match_case)
    for root in [tree, *tree.body]:
        got, got_parents = statements(root)
        plain = [root] + [n for n in list(ast.walk(root))[1:] if isinstance(n, kinds)]
        assert _ids(got) == _ids(plain)
        assert all(want_parents[c] is p for c, p in got_parents.items())
    assert _ids(_statement_imports(tree)) == _ids(want_nodes.get(ast.Import, []) + want_nodes.get(ast.ImportFrom, []))


@pytest.mark.parametrize("folder", ("<rare>", *FOLDERS))
def test_indexer_and_walkers_match_ast_walk(folder: str) -> None:
    for name, _, tree in trees(folder):
        try:
            _check_tree(tree)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from None


def test_the_files_cover_every_kind_of_node() -> None:
    """The comparison means something only if the files reach the generated code of many node
    types: the rare-syntax file is there for the ones the kernels never use."""
    seen = {type(n) for _, _, tree in all_trees() for n in ast.walk(tree)}
    for t in (ast.Match, ast.MatchClass, ast.TryStar, ast.AsyncFor, ast.NamedExpr, ast.Starred, ast.Slice,
              ast.DictComp, ast.JoinedStr, ast.Global, ast.Yield, ast.AsyncWith, ast.MatchMapping):
        assert t in seen, t
    assert len(trees("fixtures")) > 150 and len(trees("hackscan")) > 100


def test_import_map_shortcut_matches_the_indexed_one() -> None:
    """``HostModule.imports`` skips the statement walk when the top-level imports account for
    every ``import`` in the text; without the index it must find what the index would."""
    for name, text, _ in trees("<rare>") + trees("fixtures") + trees("kernels"):
        quick = HostModule.parse(text, name)
        for lazy in ("nodes", "parents", "imports"):  # parse may have indexed the tree (units): forget it
            quick.__dict__.pop(lazy, None)
        indexed = HostModule.parse(text, name)
        _ = indexed.nodes
        assert quick.imports == indexed.imports, name
        assert indexed.imports == ImportMap.of_nodes(_plain_index(indexed.tree)[1].get(ast.Import, []) +
                                                     _plain_index(indexed.tree)[1].get(ast.ImportFrom, []))


def test_corpus_trees(corpus_path: Path) -> None:
    n = 0
    for line in corpus_path.read_text().splitlines()[:120]:
        rec = json.loads(line)
        for field in ("custom_code", "ref_code"):
            try:
                tree = ast.parse(rec.get(field) or "")
            except (SyntaxError, ValueError):
                continue
            _check_tree(tree)
            n += 1
    assert n > 100


class _Lazy:
    def __init__(self) -> None:
        self.calls = 0

    @cached_property
    def ours(self) -> int:
        self.calls += 1
        return self.calls * 10

    @functools.cached_property
    def plain(self) -> int:
        self.calls += 1
        return self.calls * 10


def test_cached_property_behaves_as_functools() -> None:
    for name in ("ours", "plain"):
        obj = _Lazy()
        assert (getattr(obj, name), getattr(obj, name), obj.calls) == (10, 10, 1)  # computed once
        assert obj.__dict__[name] == 10  # stored where attribute lookup finds it first
        del obj.__dict__[name]
        assert getattr(obj, name) == 20  # dropping the stored value recomputes it (``release`` relies on it)
    assert _Lazy.ours.__doc__ == _Lazy.plain.__doc__
    for kind in (cached_property, functools.cached_property):  # one descriptor under two names: refused
        with pytest.raises(RuntimeError) as err:
            type("_Twice", (), {"x": (d := kind(lambda self: 1)), "y": d})
        assert isinstance(err.value.__cause__, TypeError)



def _cuda_sources() -> list[tuple[str, str]]:
    """The CUDA / C++ of the fixtures and demo kernels: ``.cu`` files and the units of the Python files."""
    out = [(str(p.relative_to(ROOT)), p.read_text()) for folder in ("fixtures", "kernels")
           for p in sorted((ROOT / folder).rglob("*.cu"))]
    for folder in ("fixtures", "kernels"):
        for name, src in _sources(folder):
            try:
                host = HostModule.parse(src, name)
            except (SyntaxError, ValueError):
                continue
            out.extend((f"{name}:{u.id}", u.text) for u in host.units if u.language in ("cuda", "cpp"))
    return out


def test_identifier_query_matches_the_walk() -> None:
    """HS219's ``_identifiers`` (a tree-sitter query, sorted) gives ``parser.identifiers``' nodes in
    its walk order, for every function body of the fixtures' and kernels' CUDA: the order decides
    which use of a parameter is followed first."""
    from hackscan.checks.cuda.parameters import _identifiers
    from hackscan.cuda.parser import descendants, identifiers, parse

    bodies = 0
    for name, src in _cuda_sources():
        for fn in descendants(parse(src).root_node, "function_definition"):
            body = fn.child_by_field_name("body")
            if body is None:
                continue
            bodies += 1
            assert [n.id for n in _identifiers(body)] == [n.id for n in identifiers(body)], f"{name}: {fn.start_point}"
    assert bodies > 100  # the comparison reached enough functions to mean something


def test_member_scan_alone_gives_the_flow_holders() -> None:
    """``build_model_holders`` (what HS115 / HS116 read of the reference, without the walk of its
    forward) gives the holders ``build_model_flow`` fixes before that walk, for the model a file
    defines and for a ``Model`` class, over every fixture and demo kernel."""
    from hackscan.python.valueflow import build_model_flow, build_model_holders

    held = 0
    for name, text, _ in trees("fixtures") + trees("kernels"):
        for cls in (None, "Model"):
            host = HostModule.parse(text, name)
            got = build_model_holders(host, cls)
            want = build_model_flow(host, cls).holders
            assert got == want, f"{name} ({cls or 'the model'}): {sorted(got)} != {sorted(want)}"
            held += bool(want)
    assert held > 50  # the comparison covers files that hold parameters, modules and kernels


def test_member_scan_alone_on_corpus_references(corpus_path: Path) -> None:
    """The same on the references of the real corpus, where HS116 asks for them."""
    from hackscan.python.valueflow import build_model_flow, build_model_holders

    held = 0
    for line in corpus_path.read_text().splitlines()[:120]:
        text = json.loads(line).get("ref_code") or ""
        try:
            host = HostModule.parse(text, "<reference>")
        except (SyntaxError, ValueError):
            continue
        got = build_model_holders(host, "Model")
        assert got == build_model_flow(host, "Model").holders
        held += bool(got)
    assert held > 20


def test_try_value_shortcut_matches_evaluation() -> None:
    """``Resolver.try_value`` answers a name that is unknown, bound other than by an assignment or
    bound to a call ``_call`` does not evaluate, and such a call itself, without raising; every name
    and call of every fixture and demo kernel gets what the plain evaluation (``value``,
    ``Unresolved`` when it raises) gives."""
    from hackscan.python.resolve import Unresolved

    shortcut = resolved = 0
    for name, text, _ in trees("fixtures") + trees("kernels"):
        try:
            host = HostModule.parse(text, name)
        except (SyntaxError, ValueError):
            continue
        for node in host.of_type(ast.Name, ast.Call):
            scope = host.scope_of(node)
            try:
                want = host.resolver.value(node, scope)
            except (Unresolved, RecursionError):
                want = Unresolved
            got = host.resolver.try_value(node, scope)
            assert type(got) is type(want) and got == want, f"{name}:{node.lineno} {ast.dump(node)}: {got!r} != {want!r}"
            shortcut += want is Unresolved
            resolved += want is not Unresolved
    assert shortcut > 1000 and resolved > 100


def test_identifiers_by_name_match_the_query() -> None:
    """HS219 follows a parameter through ``_identifiers_named`` (the name's occurrences in the body's
    bytes, one node lookup each): for every function body of the fixtures' and kernels' CUDA and
    every name spelled there (and a few that occur only inside longer words, comments or fields),
    the same nodes in the same order as the query's identifiers with that text."""
    from hackscan.checks.cuda.parameters import _identifiers, _identifiers_named
    from hackscan.cuda.parser import descendants, parse, text

    names_seen = 0
    for name, src in _cuda_sources():
        for fn in descendants(parse(src).root_node, "function_definition"):
            body = fn.child_by_field_name("body")
            if body is None:
                continue
            want: dict[str, list[int]] = {}
            for node in _identifiers(body):
                want.setdefault(text(node), []).append(node.id)
            for n in [*want, "x", "i", "idx", "data", "size", "float", "threadIdx"]:
                got = [node.id for node in _identifiers_named(body, n)]
                assert got == want.get(n, []), f"{name}: {fn.start_point} {n}"
                names_seen += 1
    assert names_seen > 1000


def test_function_index_span_matches_a_filter() -> None:
    """``FunctionIndex._within`` (which reads each type's list only up to the end of the function's
    run, trusting the index's pre-order to keep a subtree's nodes of a type together) gives the nodes
    a plain filter of the whole list gives, in position order (ties in the index's order), for every
    function, lambda and module of the fixtures and kernels."""
    from hackscan.python.members import FunctionIndex

    groups = [(ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda), (ast.Assign, ast.AnnAssign), (ast.Call,)]
    spans = 0
    for name, text, _ in trees("<rare>") + trees("fixtures") + trees("kernels"):
        host = HostModule.parse(text, name)
        index = FunctionIndex(host)
        for fn in [host.tree, *host.of_type(ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)]:
            if isinstance(fn, ast.Module):
                lo, hi, start = (0, -1), (10**9, 0), (0, -1)
            else:
                lo, hi = (fn.lineno, fn.col_offset), (fn.end_lineno, fn.end_col_offset)
                start = min([lo, *((d.lineno, d.col_offset) for d in getattr(fn, "decorator_list", ()))])
            for types in groups:
                want = [n for t in types for n in host.nodes.get(t, ())
                        if start <= (n.lineno, n.col_offset) and (n.end_lineno, n.end_col_offset) <= hi
                        and lo < (n.lineno, n.col_offset)]
                want.sort(key=lambda n: (n.lineno, n.col_offset))
                assert _ids(index._within(types, lo, hi, start)) == _ids(want), f"{name}: {getattr(fn, 'name', fn)}"
                spans += 1
    assert spans > 2000


def _plain_identity_names(facts, fn: ast.AST, found: dict[ast.AST, str]) -> set[str]:
    """HS131's names holding a key, as first written: the whole fixpoint walks every definition's
    subtree again in each round."""
    names: set[str] = set()
    flow = facts.flow(fn)
    changed = True
    while changed:
        changed = False
        for name, exprs in flow.defs.items():
            if name in names:
                continue
            if any(any(n in found for n in subtree(e)) or any(isinstance(n, ast.Name) and n.id in names
                                                              for n in subtree(e)) for e in exprs):
                names.add(name)
                changed = True
    return names


def test_identity_key_names_match_the_plain_fixpoint() -> None:
    """``_identity_keys`` (HS131) grows its set of key-holding names from facts gathered in one walk
    of each definition: the same set as the plain fixpoint, for every function of the fixtures and
    kernels and of the first corpus records when present."""
    from hackscan.checks.python.state import _identity_keys
    from hackscan.python.patterns import MiscFacts

    sources = [(name, text) for name, text, _ in trees("fixtures") + trees("kernels")]
    if CORPUS.is_file():
        for i, line in enumerate(CORPUS.read_text().splitlines()[:120]):
            sources.append((f"corpus:{i}", json.loads(line).get("custom_code") or ""))
    compared = nonempty = 0
    for name, text in sources:
        try:
            host = HostModule.parse(text, name)
        except (SyntaxError, ValueError):
            continue
        facts = MiscFacts(host)
        for fn in host.of_type(ast.FunctionDef, ast.AsyncFunctionDef):
            found, names = _identity_keys(facts, fn)
            assert names == _plain_identity_names(facts, fn, found), f"{name}: {fn.name}"
            compared += 1
            nonempty += bool(names)
    assert compared > 1000 and nonempty >= 5, (compared, nonempty)


def _with_corpus(sources: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``sources`` and the candidates and references of the first corpus records, when present."""
    if CORPUS.is_file():
        for i, line in enumerate(CORPUS.read_text().splitlines()[:120]):
            rec = json.loads(line)
            sources += [(f"corpus:{i}", rec.get("custom_code") or ""), (f"corpus:{i}:ref", rec.get("ref_code") or "")]
    return sources


def _parsed_hosts(extra: list[tuple[str, str]] | None = None):
    """(name, HostModule) for ``extra``, the fixtures, the kernels and the first corpus records
    (``_with_corpus``), those that parse."""
    for name, text in _with_corpus(list(extra or []) + [(n, t) for n, t, _ in trees("fixtures") + trees("kernels")]):
        try:
            host = HostModule.parse(text, name)
        except (SyntaxError, ValueError):
            continue
        yield name, host


def test_function_index_of_an_unindexed_module_matches_the_indexed_one() -> None:
    """``FunctionIndex`` on a module nothing has indexed (a reference, whose members are all most
    scans ask of it) indexes the function's own subtree instead of the whole file: the same
    assignments, calls and nested defs, in the same order, as with the file's index, for every
    function and lambda of a file of rare syntax, the fixtures, the kernels and the corpus."""
    from hackscan.python.members import FunctionIndex

    functions = 0
    for name, text in _with_corpus([(name, text) for name, text, _ in all_trees()
                                    if not name.startswith("hackscan")]):
        try:
            host = HostModule.parse(text, name)
        except (SyntaxError, ValueError):
            continue
        host.__dict__.pop("nodes", None)  # as a module parse() did not extract (it indexes when it does)
        fns = [n for n in ast.walk(host.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
        alone = FunctionIndex(host)
        got = [[_ids(part) for part in alone._collect(fn)] for fn in fns]
        assert "nodes" not in host.__dict__, f"{name}: the subtree path indexed the whole file"
        indexed = FunctionIndex(host)
        _ = host.nodes
        assert got == [[_ids(part) for part in indexed._collect(fn)] for fn in fns], name
        functions += len(fns)
    assert functions > at_least(1000, 2000)


def _extraction(host: HostModule) -> tuple:
    return ([(u.id, u.language, u.mapped.text) for u in host.units],
            [(e.name, e.kind, id(e.call), sorted(e.bound_to), e.functions) for e in host.extensions],
            [(k, id(f)) for k, f in host.triton_kernels.items()],
            list(host.problems))


def test_parse_skips_an_extraction_that_finds_nothing() -> None:
    """``HostModule.parse`` fills the extraction's results with nothing, without indexing the file,
    when an ASCII text has no loader hint and no ``@`` (or no ``@`` that can decorate a Triton
    kernel): what the full extraction finds then, over the fixtures, kernels, corpus candidates
    and references, and a few texts made to sit on the edge of the test."""
    edges = [
        ("tl-only", "@tl.jit\ndef k(x):\n    pass\n"),  # ``tl`` is Triton's language by convention
        ("aliased", "import triton as t\n@t.jit\ndef k(x):\n    pass\n"),
        ("matmul", "class Model:\n    def forward(self, a, b):\n        return a @ b\n"),
        ("no-grad", "import torch\n@torch.no_grad()\ndef f(x):\n    return x\n"),
    ]
    skipped = 0
    for name, text in _with_corpus(edges + [(name, text) for name, text, _ in all_trees()
                                            if not name.startswith("hackscan")]):
        try:
            host = HostModule.parse(text, name)
        except (SyntaxError, ValueError):
            continue
        quick = "units" in host.__dict__ and "nodes" not in host.__dict__
        got = _extraction(host)
        full = object.__new__(HostModule)
        full.__dict__.update({k: v for k, v in host.__dict__.items()
                              if k not in ("units", "extensions", "triton_kernels", "problems")})
        full._extract()
        assert got == _extraction(full), name
        skipped += quick
        if name in ("tl-only", "aliased"):
            assert not quick and list(host.triton_kernels) == ["k"], name
    assert skipped > 100  # the corpus references and the fixtures without kernels


def test_nodes_by_owner_matches_a_plain_parent_walk() -> None:
    """``MiscFacts.nodes_by_owner`` (the owner walk inlined, the parent tried before any chain, one
    memo shared with ``owner``) groups every node of a type under the nearest function or method
    above it (a lambda is not one), as a plain walk up the parent map does, each group in the
    index's order; and ``owner`` answers the same after the memo is filled, for the fixtures,
    kernels and corpus."""
    from hackscan.python.patterns import MiscFacts

    funcs = (ast.FunctionDef, ast.AsyncFunctionDef)

    def plain_owner(host: HostModule, node: ast.AST) -> ast.AST | None:
        cur = host.parents.get(node)
        while cur is not None and not isinstance(cur, funcs):
            cur = host.parents.get(cur)
        return cur

    grouped = 0
    for name, host in _parsed_hosts():
        facts = MiscFacts(host)
        for typ in (ast.Call, ast.Assign, ast.Return, ast.FunctionDef, ast.Name, ast.If, ast.Compare):
            want: dict[ast.AST | None, list[int]] = {}
            for n in host.of_type(typ):
                want.setdefault(plain_owner(host, n), []).append(id(n))
            got = {o: _ids(ns) for o, ns in facts.nodes_by_owner(typ).items()}
            assert got == want, f"{name}: {typ.__name__}"
            grouped += len(host.of_type(typ))
        for n in host.of_type(ast.Attribute, ast.Subscript, ast.keyword):
            assert facts.owner(n) is plain_owner(host, n), f"{name}:{getattr(n, 'lineno', '?')}"
    assert grouped > at_least(15000, 20000)


# two timed regions in a file with no custom code and no half cast: the shortcut's own case, present
# whether or not the corpus is
_TORCH_TIMED = """
import time
import torch
class ModelNew(torch.nn.Module):
    def forward(self, x):
        t0 = time.perf_counter()
        y = torch.relu(x)
        t1 = time.perf_counter()
        z = torch.sigmoid(x)
        t2 = time.perf_counter()
        return y if t1 - t0 < t2 - t1 else z
"""


def test_race_shortcuts_match_the_full_classification(monkeypatch: pytest.MonkeyPatch) -> None:
    """HS122 skips classifying timed regions when no call can be custom and no half cast is spelled
    (``_custom_possible``, ``half_possible``: no pair of kinds can then form), and skips the custom
    tests of each call in a file without custom code: with ``_custom_possible`` forced true (both
    shortcuts off) the rule gives the same hits, for the fixtures, kernels and corpus; and the
    shortcuts are taken on some of those files, so the comparison covers them."""
    from hackscan.checks.python import race
    from hackscan.context import ScanContext
    from hackscan.inputs import Submission

    plain_possible = race._custom_possible
    taken = 0

    def counting(host, custom):  # type: ignore[no-untyped-def]
        nonlocal taken
        got = plain_possible(host, custom)
        taken += not got
        return got

    def hits(name: str, text: str) -> list[tuple[int, dict]]:
        host = HostModule.parse(text, name)
        ctx = ScanContext(Submission(path=name, code=text), host, list(host.units))
        ctx.rule_id = "HS122"
        return [(h.line, h.args) for h in race.timed_path_race(ctx)]

    found = 0
    for name, text in _with_corpus([("<torch-timed>", _TORCH_TIMED)] +
                                   [(name, text) for name, text, _ in trees("fixtures") + trees("kernels")]):
        try:
            HostModule.parse(text, name)
        except (SyntaxError, ValueError):
            continue
        monkeypatch.setattr(race, "_custom_possible", counting)
        fast = hits(name, text)
        monkeypatch.setattr(race, "_custom_possible", lambda host, custom: True)
        assert hits(name, text) == fast, name
        found += len(fast)
    assert found >= at_least(1, 2) and taken >= at_least(1, 2), (found, taken)


def test_state_write_seed_bound_holds_the_input_taint() -> None:
    """HS130 drops a state write whose values read nothing of the taint grown from ``_seed_bound``
    (a function's parameters, for one at module or class level) before it asks for the program-wide
    input taint: for every reachable function of the fixtures, kernels and corpus that bound's taint
    holds ``input_values`` (so no write the full taint would find tainted is dropped), and the bound
    is given for most of them."""
    from hackscan.checks.python.state import _seed_bound
    from hackscan.python.patterns import MiscFacts

    bounded = nested = 0
    for name, host in _parsed_hosts():
        facts = MiscFacts(host)
        for fn in facts.reachable:
            bound = _seed_bound(facts, fn)
            if bound is None:
                nested += 1
                continue
            assert facts.input_values(fn) <= facts.value_taint(fn, bound), f"{name}: {getattr(fn, 'name', fn)}"
            bounded += 1
    assert bounded > 200 and bounded > nested, (bounded, nested)


_TF32_WRITES = '''
import builtins, functools, sys
import torch
from torch.backends import cudnn
setattr(torch.backends.cuda.matmul, "allow_tf32", True)
builtins.setattr(cudnn, "allow_tf32", True)
object.__setattr__(cudnn, "allow_tf32", True)
torch.backends.cudnn.__setattr__("allow_tf32", True)
functools.partial(setattr, cudnn)("allow_tf32", True)
vars(torch.backends.cudnn)["allow_tf32"] = True
cudnn.__dict__["allow_tf32"] = True
vars(cudnn).update(allow_tf32=True)
cudnn.__dict__.setdefault("allow_tf32", True)
globals()["allow_tf32"] = True
vars(sys.modules[__name__])["allow_tf32"] = True
'''


def test_tf32_namespace_writes_need_their_words() -> None:
    """HS172 reads namespace writes (``setattr``, ``vars(X)[...]``, ...) of a TF32 flag only in a file
    that spells ``setattr``, ``__setattr__``, ``__dict__`` or ``vars``: no file of the fixtures, kernels
    and corpus, and none of the spellings ``namespace_writes`` knows, writes a flag that way without
    one of them; the spellings do write flags, so the test sees the writes it guards."""
    from hackscan.checks.python.precision import _NAMESPACE_WORDS, TF32_FLAGS
    from hackscan.python.indirection import namespace_writes
    from hackscan.python.patterns import MiscFacts

    def flag_writes(host: HostModule) -> int:
        n = 0
        for node in host.of_type(ast.Expr, ast.Assign):
            for t, _ in namespace_writes(node, host.canonical):
                n += isinstance(t, ast.Attribute) and host.canonical(t) in TF32_FLAGS
        return n

    sources = [("<tf32-writes>", _TF32_WRITES)]
    # each write alone after the imports (the file then spells only its own words)
    sources += [(f"<tf32-write-{i}>", "\n".join(_TF32_WRITES.splitlines()[:4] + [line]))
                for i, line in enumerate(_TF32_WRITES.splitlines()[4:])]
    found = 0
    for name, host in _parsed_hosts(sources):
        n = flag_writes(host)
        if n:
            assert MiscFacts(host).uses(*_NAMESPACE_WORDS), name
        found += n
    assert found >= 9, found


def test_half_cast_prefilter_skips_only_calls_without_a_cast() -> None:
    """HS170 passes over a call without keywords whose method is not in ``_CAST_ATTRS`` without asking
    ``_cast_of``: on every call of the fixtures, kernels and corpus, such a call is one ``_cast_of``
    finds no cast in, and casts are found."""
    from hackscan.checks.python.precision import _CAST_ATTRS, _cast_of, _dtype_vars
    from hackscan.python.patterns import MiscFacts

    skipped = casts = 0
    for name, host in _parsed_hosts():
        dtype_vars = _dtype_vars(MiscFacts(host))
        for call in host.of_type(ast.Call):
            got = _cast_of(host, call, dtype_vars)
            casts += bool(got)
            if not call.keywords and not (isinstance(call.func, ast.Attribute) and call.func.attr in _CAST_ATTRS):
                skipped += 1
                assert got is None, f"{name}:{call.lineno}"
    assert skipped > at_least(2000, 3000) and casts > at_least(10, 20), (skipped, casts)


def test_dtype_dispatch_callers_index_matches_the_filter() -> None:
    """HS170's ``_dtype_dispatch`` reads a helper's call sites from one index of the running calls by
    target (``_callers_of``) instead of filtering every running call per cast: for every call of the
    fixtures, kernels and corpus both give the same answer, and some answers go through call sites."""
    from hackscan.checks.python.precision import _callers_of, _dtype_dispatch, _dtype_vars
    from hackscan.python.patterns import MiscFacts

    asked = through_sites = 0
    dispatched: set[str] = set()
    for name, host in _parsed_hosts(_DISPATCH):
        facts = MiscFacts(host)
        dtype_vars = _dtype_vars(facts)
        callers: dict = {}
        for call in host.of_type(ast.Call):
            plain = _dtype_dispatch(host, call, dtype_vars, facts, tested={})
            assert _dtype_dispatch(host, call, dtype_vars, facts, tested={}, callers=callers) == plain, \
                f"{name}:{call.lineno}"
            asked += 1
            if plain and isinstance(call.func, ast.Attribute) and call.func.attr == "half":
                dispatched.add(name)
        through_sites += sum(len(v) for k, v in _callers_of(facts, callers).items() if k is not None) > 0
    # the helper called only under a float16 test is a dispatch, the one also called outside is not
    assert "<dispatch-only>" in dispatched and "<dispatch-mixed>" not in dispatched, dispatched
    assert asked > at_least(2500, 5000) and through_sites > at_least(40, 50), (asked, through_sites)


_DISPATCH_SRC = """
import torch
import torch.nn as nn
class ModelNew(nn.Module):
    def forward(self, x):
        if x.dtype == torch.float16:
            y = self._pre(x)
            return self._half_path(y)
        y = self._pre(x)
        MIXED
        return y * 2
    def _pre(self, x):
        return x + 1
    def _half_path(self, x):
        return x.half() * 2
"""
_DISPATCH = [("<dispatch-only>", _DISPATCH_SRC.replace("MIXED", "pass")),
             ("<dispatch-mixed>", _DISPATCH_SRC.replace("MIXED", "y = self._half_path(y)"))]
