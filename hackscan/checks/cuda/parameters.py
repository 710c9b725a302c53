"""HS219: a tensor the exported C++ function accepts and never reads (class 17, parameter blind spot).

``scale_shift(x, scale, shift)`` that computes ``y = x`` passes every harness that keeps ``scale`` at
ones and ``shift`` at zeros: the Python side hands the parameters over, so the Python rules see them
read.  This follows each tensor parameter of an exported function through the locals that carry
its data (``sc = scale.contiguous()``, ``a = sc.data_ptr<float>()``) and into the kernels and
helpers it is passed to, and reports it when nothing reads its values: it is only checked
(``TORCH_CHECK``), asked for its metadata (``.size(1)``, ``.numel()``, ``.options()``), or handed to
a kernel whose matching parameter is itself never read.
"""

from __future__ import annotations

from collections.abc import Iterator

import tree_sitter as ts

from ...context import Hit, ScanContext
from ...cuda.facts import CudaFacts
from ...cuda.parser import call_args, callee_name, nodes_of_kind, text
from ...cuda.records import Function, pos_of
from ...model import Confidence, Severity

# methods that read a tensor's metadata, not its values
_META = frozenset({"size", "sizes", "numel", "dim", "ndimension", "options", "scalar_type", "dtype", "device",
                   "is_cuda", "is_cpu", "stride", "strides", "is_contiguous", "defined", "layout", "element_size",
                   "get_device", "has_value", "nbytes", "itemsize", "type", "is_floating_point", "requires_grad"})
_CHECKS = frozenset({"TORCH_CHECK", "TORCH_INTERNAL_ASSERT", "AT_ASSERT", "AT_ASSERTM", "assert", "CHECK",
                     "CHECK_INPUT", "CHECK_CUDA", "CHECK_CONTIGUOUS", "CHECK_EQ", "TORCH_CHECK_EQ", "AT_CHECK"})
_BOUNDARY = frozenset({"expression_statement", "return_statement", "compound_statement", "function_definition",
                       "if_statement", "for_statement", "while_statement", "lambda_expression"})
_MAX_DEPTH = 3


def _direct_arg(call: ts.Node, node: ts.Node) -> int | None:
    """The index of the argument of ``call`` that holds ``node``."""
    for i, a in enumerate(call_args(call)):
        if a.start_byte <= node.start_byte and node.end_byte <= a.end_byte:
            return i
    return None


def _identifiers(body: ts.Node) -> list[ts.Node]:
    """``parser.identifiers(body)``, from a query: identifiers are leaves, so the walk's order
    (``in_walk_order``) is descending position."""
    return nodes_of_kind(body, "identifier")


# bytes that continue an identifier on its right, or end a token that would take in a following
# letter on its left (an identifier or keyword; a number's suffix letters are taken by the number)
_WORD_AFTER = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_WORD_BEFORE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")


def _identifiers_named(body: ts.Node, name: str) -> list[ts.Node]:
    """The ``identifier`` nodes of ``body`` spelled ``name``, in ``_identifiers``' order (last first).

    Found from the name's occurrences in the body's bytes, one node lookup each, rather than from
    a query that builds every identifier of the body and decodes each one's text: a parameter is
    followed through a handful of names, a body holds hundreds of identifiers.  An occurrence is
    an identifier exactly when the smallest node spanning it is an identifier of the same span;
    those glued to a word character are skipped first (the lexer would have made them part of a
    longer token)."""
    raw = body.text
    key = name.encode()
    if not raw or not key:
        return []
    base, size, end = body.start_byte, len(key), len(raw)
    out: list[ts.Node] = []
    i = raw.find(key)
    while i != -1:
        j = i + size
        if (i == 0 or raw[i - 1] not in _WORD_BEFORE) and (j == end or raw[j] not in _WORD_AFTER):
            node = body.descendant_for_byte_range(base + i, base + j)
            if node is not None and node.type == "identifier" and node.start_byte == base + i and \
                    node.end_byte == base + j:
                out.append(node)
        i = raw.find(key, j)
    out.reverse()
    return out


class _Reads:
    """Whether a function reads the values held by a parameter, following locals and callees."""

    def __init__(self, facts: CudaFacts) -> None:
        self.facts = facts
        self._memo: dict[tuple[int, str], bool] = {}
        self._idents: dict[tuple[int, str], list[ts.Node]] = {}

    def param_read(self, fn: Function, name: str, depth: int = 0) -> bool:
        key = (id(fn), name)
        got = self._memo.get(key)
        if got is None:
            self._memo[key] = True  # a recursive cycle counts as read: never report on a guess
            got = self._memo[key] = self._param_read(fn, name, depth)
        return got

    def _param_read(self, fn: Function, name: str, depth: int) -> bool:
        if fn.body is None:
            return True
        names = {name}
        work = [name]
        idents = self._idents
        while work:
            n = work.pop()
            # each name followed visits its own uses (in body order, as a scan of the whole list
            # would), found once per function and name
            uses = idents.get((id(fn), n))
            if uses is None:
                uses = idents[(id(fn), n)] = _identifiers_named(fn.body, n)
            for node in uses:
                use = self._use(fn, node, depth)
                if use is True:
                    return True
                if isinstance(use, str) and use not in names:
                    names.add(use)
                    work.append(use)
        return False

    def _use(self, fn: Function, node: ts.Node, depth: int) -> bool | str | None:
        """True: the values are read here; a local's name: they flow into it; None: not read here."""
        child, cur = node, node.parent
        while cur is not None and cur.type not in _BOUNDARY:
            t = cur.type
            if t == "field_expression" and cur.child_by_field_name("argument") == child:
                field = cur.child_by_field_name("field")
                call = cur.parent
                if field is not None and text(field) in _META and call is not None and call.type == "call_expression":
                    return None  # ``x.size(1)``: metadata
                if field is not None and text(field) in _META:
                    return None
            elif t == "call_expression" and child != cur.child_by_field_name("function"):
                func = cur.child_by_field_name("function")
                callee = callee_name(func) if func is not None else ""
                base = callee.rsplit("::", 1)[-1]
                if base in _CHECKS or base.startswith(("CHECK_", "TORCH_CHECK")):
                    return None  # a check rejects inputs; it computes nothing of the output
                if func is not None and func.type == "field_expression":
                    child, cur = cur, cur.parent  # ``x.contiguous()``, ``sc.data_ptr<float>()``: the value goes on
                    continue
                i = _direct_arg(cur, node)
                target = self._callee(fn, cur, base)
                if i is None or target is None or depth >= _MAX_DEPTH or i >= len(target.params):
                    return True  # an op, a library call: the values are read
                return self.param_read(target, target.params[i].name, depth + 1) or None
            elif t in ("init_declarator", "assignment_expression"):
                left = cur.child_by_field_name("declarator") or cur.child_by_field_name("left")
                if left is None:
                    return True
                if child == left or (left.start_byte <= node.start_byte < left.end_byte):
                    return None if left.type in ("identifier", "pointer_declarator", "reference_declarator") \
                        else True  # the definition itself; a store through a subscript is a use
                tname = left
                while tname.type in ("pointer_declarator", "reference_declarator"):
                    inner = tname.child_by_field_name("declarator") or (tname.named_children[-1]
                                                                        if tname.named_children else None)
                    if inner is None:
                        break
                    tname = inner
                if tname.type == "identifier":
                    op = cur.child_by_field_name("operator")
                    if op is None or op.type == "=":
                        return text(tname)  # the data now lives in this local too
                return True
            elif t == "declaration" or t == "parameter_declaration":
                return None
            child, cur = cur, cur.parent
        if cur is not None and cur.type == "function_definition":
            return None  # a parameter's own declaration
        return True

    def _callee(self, fn: Function, call: ts.Node, base: str) -> Function | None:
        """The function of this extension a launch or plain call runs."""
        for lc in fn.launches:
            if lc.node == call:
                return self.facts.kernel_for(lc)
        for f in self.facts.callees(fn):
            if f.name == base:
                return f
        return None


def cuda_unread_parameter(ctx: ScanContext) -> Iterator[Hit]:
    """HS219: a tensor parameter of an exported function whose values nothing reads."""
    facts = ctx.cuda
    reads: _Reads | None = None
    seen: set[int] = set()
    for export, fn in facts.exported_functions():
        if id(fn) in seen or fn.body is None:
            continue
        seen.add(id(fn))
        tensors = [p for p in fn.params if p.tensor]
        if len(tensors) < 2:
            continue  # the only tensor is the input: whatever is done with it, HS206 / HS207 say it
        if reads is None:
            reads = _Reads(facts)
        unread = [p for p in tensors if not reads.param_read(fn, p.name)]
        if not unread:
            continue
        shown = ", ".join(f"`{p.name}`" for p in unread)
        yield ctx.hit(pos_of(fn.unit, fn.node), severity=Severity.WARNING, confidence=Confidence.MEDIUM,
                      args={"params": shown, "function": fn.name, "export": export.name,
                            "verb": "is" if len(unread) == 1 else "are"},
                      evidence={"params": [p.name for p in unread], "indices": [p.index for p in unread]})


__all__ = ["cuda_unread_parameter"]
