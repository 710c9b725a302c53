"""tree-sitter parsing of CUDA / C++ units, and the small node helpers every fact builder uses.

One grammar (tree-sitter-cuda 0.21.2, a superset of C++) parses both the ``cpp_sources`` and the
``cuda_sources`` of an extension.  The ``Language`` is loaded once per process; ``Parser`` objects
are not thread-safe, so each thread gets its own (a training loop may scan from a thread pool).
"""

from __future__ import annotations

import functools
import operator
import threading
from collections.abc import Iterator

import tree_sitter as ts

_local = threading.local()


@functools.lru_cache(maxsize=1)
def language() -> ts.Language:
    import tree_sitter_cuda

    return ts.Language(tree_sitter_cuda.language())


def parser() -> ts.Parser:
    """This thread's parser."""
    p = getattr(_local, "parser", None)
    if p is None:
        p = ts.Parser(language())
        _local.parser = p
    return p


def parse(text: str) -> ts.Tree:
    return parser().parse(text.encode("utf-8"))


# ---------------------------------------------------------------------------------------------
# node helpers
# ---------------------------------------------------------------------------------------------

def text(node: ts.Node | None) -> str:
    # the hottest helper of the C++ facts and rules (tens of thousands of calls per corpus pass):
    # a plain ``decode()`` is cheaper than one with keyword arguments, and the source is valid
    # UTF-8 (it was encoded from a str) cut at token boundaries, so the fallback is for safety only
    if node is None:
        return ""
    raw = node.text
    if raw is None:
        return ""
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw.decode("utf-8", errors="replace")


# leaf node types whose text never holds whitespace: ``compact`` returns their text as it is
_TOKEN_TYPES = frozenset({"identifier", "primitive_type", "type_identifier", "field_identifier", "number_literal",
                          "namespace_identifier"})


def compact(node: ts.Node | None) -> str:
    """Node text without whitespace: ``at :: matmul`` and ``at::matmul`` compare equal."""
    s = text(node)
    if node is not None and node.type in _TOKEN_TYPES:
        return s
    return "".join(s.split())


# C-level sort keys of nodes (no Python frame per node)
START_BYTE = operator.attrgetter("start_byte")
END_BYTE = operator.attrgetter("end_byte")


def in_walk_order(nodes: list[ts.Node]) -> list[ts.Node]:
    """``nodes`` sorted by end descending, then start ascending: ``sorted(nodes, key=lambda n:
    (-n.end_byte, n.start_byte))`` as two sorts with C-level keys (by start, then stably by end,
    descending: a reverse sort keeps nodes with equal keys in their order)."""
    out = sorted(nodes, key=START_BYTE)
    out.sort(key=END_BYTE, reverse=True)
    return out


_query_cursors = threading.local()  # QueryCursor objects are not thread-safe: one per thread and kind


def nodes_of_kind(body: ts.Node, kind: str) -> list[ts.Node]:
    """The ``kind`` nodes under ``body`` (``body`` itself included), from a tree-sitter query (in C)
    rather than a walk from Python that builds every node, in the order that walk (``descendants``:
    pre-order, last child first) gives them (``in_walk_order``)."""
    cursors = _query_cursors.__dict__
    cur = cursors.get(kind)
    if cur is None:
        cur = cursors[kind] = ts.QueryCursor(ts.Query(language(), f"({kind}) @n"))
    found = cur.captures(body).get("n", [])
    if len(found) > 1:
        found = in_walk_order(found)
    return found


def strip_parens(node: ts.Node) -> ts.Node:
    while node.type == "parenthesized_expression" and node.named_child_count == 1:
        node = node.named_children[0]
    return node


def callee_name(func: ts.Node) -> str:
    """The qualified name a call expression calls, without template arguments.

    ``at::matmul`` / ``torch::nn::functional::relu`` / ``k<float>`` -> ``k`` /
    ``std::thread``; method calls give ``.name`` (see ``method_name``).
    """
    t = func.type
    if t == "identifier":
        return text(func)
    if t == "qualified_identifier":
        parts: list[str] = []
        cur: ts.Node | None = func
        while cur is not None and cur.type == "qualified_identifier":
            scope = cur.child_by_field_name("scope")
            if scope is not None:
                parts.append(_strip_template(scope))
            cur = cur.child_by_field_name("name")
        if cur is not None:
            parts.append(_strip_template(cur))
        return "::".join(parts)
    if t == "template_function":
        name = func.child_by_field_name("name")
        return callee_name(name) if name is not None else compact(func)
    if t == "field_expression":
        field = func.child_by_field_name("field")
        return "." + (_strip_template(field) if field is not None else "")
    if t == "parenthesized_expression" and func.named_child_count == 1:
        return callee_name(func.named_children[0])
    return compact(func)


def _strip_template(node: ts.Node) -> str:
    if node.type in ("template_function", "template_type", "template_method"):
        name = node.child_by_field_name("name")
        if name is not None:
            return text(name)
    return compact(node)


def method_receiver(func: ts.Node) -> ts.Node | None:
    """``x`` of ``x.mm(y)`` (the call's function node is a field_expression)."""
    if func.type == "field_expression":
        return func.child_by_field_name("argument")
    return None


def call_args(call: ts.Node) -> list[ts.Node]:
    args = call.child_by_field_name("arguments")
    if args is None:
        return []
    return [c for c in args.named_children if c.type != "comment"]


def kernel_config(call: ts.Node) -> list[ts.Node] | None:
    """The ``<<<grid, block, smem, stream>>>`` expressions of a launch, or None for a plain call."""
    for c in call.children:
        if c.type == "kernel_call_syntax":
            return [x for x in c.named_children if x.type != "comment"]
    return None


def identifiers(node: ts.Node) -> Iterator[ts.Node]:
    """Every identifier under ``node`` (field names of ``a.b`` are not identifiers)."""
    stack = [node]
    pop, extend = stack.pop, stack.extend
    while stack:
        n = pop()
        if n.type == "identifier":
            yield n
        elif n.named_child_count:
            extend(n.named_children)


def descendants(node: ts.Node, *types: str) -> Iterator[ts.Node]:
    """Named descendants of the given types (``node`` included), in no particular order."""
    wanted = set(types)
    stack = [node]
    pop, extend = stack.pop, stack.extend
    while stack:
        n = pop()
        if n.type in wanted:
            yield n
        if n.named_child_count:
            extend(n.named_children)


def contains(outer: ts.Node, inner: ts.Node) -> bool:
    return outer.start_byte <= inner.start_byte and inner.end_byte <= outer.end_byte


_NAME_TYPES = frozenset({"identifier", "field_identifier", "qualified_identifier", "operator_name", "destructor_name"})
_SUFFIXES = {"pointer_declarator": "*", "reference_declarator": "&", "array_declarator": "[]"}


def declarator_parts(decl: ts.Node | None) -> tuple[ts.Node | None, str]:
    """The identifier a (possibly nested) declarator declares (``*out``, ``s[32]``, ``&e``), and
    the pointer / reference / array suffix of the declared type (``*``, ``&``, ``[]``) met on
    the way down its ``declarator`` fields: one walk for both."""
    out = ""
    while decl is not None:
        t = decl.type
        if t in _NAME_TYPES:
            return decl, out
        out += _SUFFIXES.get(t, "")
        nxt = decl.child_by_field_name("declarator")
        if nxt is None:
            # abstract declarators and odd shapes: take the first identifier child
            for c in decl.named_children:
                if c.type == "identifier":
                    return c, out
            return None, out
        decl = nxt
    return None, out


def declarator_name(decl: ts.Node | None) -> ts.Node | None:
    """The identifier a (possibly nested) declarator declares: ``*out``, ``s[32]``, ``&e``."""
    return declarator_parts(decl)[0]


def first_error(root: ts.Node) -> ts.Node | None:
    """The first ERROR or MISSING node in source order, or None."""
    if not root.has_error:
        return None
    stack = [root]
    while stack:
        n = stack.pop()
        if n.is_error or n.is_missing:
            return n
        kids = [c for c in n.children if c.has_error or c.is_missing]
        stack.extend(reversed(kids))
    return None
