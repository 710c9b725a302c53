"""Decode Python string literals from their source text, keeping a map to host positions.

``ast`` gives the value of a string but not where each of its characters sits: an escape such as
``\\n`` is two source characters for one value character, implicitly concatenated pieces
(``"a" "b"``) sit on different lines, and in Python 3.11 the parts of an f-string carry the position
of the whole f-string.  This module re-reads the literal's source span and produces a
``MappedText`` whose verbatim runs map character by character.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass

from ..units import MappedText, Segment
from ..util.lazy import cached_property
from ..util.quick_init import quick_init

_ESCAPE = re.compile(
    r"\\(\n|[\\'\"abfnrtv]|[0-7]{1,3}|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|N\{[^}]+\}|.)",
    re.S,
)
_SIMPLE = {"\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
           "t": "\t", "v": "\v"}
_PREFIX = re.compile(r"[rRbBuUfF]{0,2}(?=['\"])")


@quick_init
@dataclass(frozen=True)
class HostSource:
    """The host file's text with helpers to turn ``ast`` byte columns into character columns."""

    text: str

    @staticmethod
    def of(text: str) -> HostSource:
        return HostSource(text)

    # Split on first use: a reference file is mostly read through its tree, and splitting a file
    # into lines costs about as much as a tenth of its parse.
    @cached_property
    def lines(self) -> tuple[str, ...]:
        return tuple(self.text.splitlines(keepends=True))

    @cached_property
    def ascii(self) -> bool:
        """Whether the whole text is ASCII: byte and character columns then coincide everywhere."""
        return self.text.isascii()

    def char_col(self, line: int, byte_col: int) -> int:
        if self.ascii:
            return byte_col  # what the per-line test below gives on every line of an ASCII text
        if not 1 <= line <= len(self.lines):
            return byte_col
        src = self.lines[line - 1]
        if src.isascii():
            return byte_col
        return len(src.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))

    def span(self, node: ast.AST) -> tuple[str, int, int]:
        """Source text of ``node`` and the host (line, col) where it starts."""
        l1, l2 = node.lineno, node.end_lineno or node.lineno
        c1 = self.char_col(l1, node.col_offset)
        c2 = self.char_col(l2, node.end_col_offset or 0)
        if l1 == l2:
            return self.lines[l1 - 1][c1:c2], l1, c1
        parts = [self.lines[l1 - 1][c1:]]
        parts.extend(self.lines[l1 : l2 - 1])
        parts.append(self.lines[l2 - 1][:c2])
        return "".join(parts), l1, c1


class _SpanPos:
    """Maps offsets inside a source span to host (line, col).

    Counted on demand: most spans are asked about one or two offsets (a CUDA source of thousands
    of characters is usually one verbatim run), so the newlines before an offset are counted in C
    when asked, continuing from the previous offset when the next one lies after it (offsets come
    in increasing order while a literal is decoded), instead of indexing every newline up front.
    """

    __slots__ = ("span", "line", "col", "_off", "_k")

    def __init__(self, span: str, line: int, col: int):
        self.span = span
        self.line, self.col = line, col
        self._off = 0  # the newlines before offset ``_off`` number ``_k``
        self._k = 0

    def __call__(self, offset: int) -> tuple[int, int]:
        if offset <= 0:
            return self.line, self.col + offset
        span = self.span
        if offset >= self._off:
            k = self._k + span.count("\n", self._off, offset)
        else:
            k = span.count("\n", 0, offset)
        self._off, self._k = offset, k
        if k == 0:
            return self.line, self.col + offset
        # the last newline before ``offset``: there is one, as k > 0
        return self.line + k, offset - span.rfind("\n", 0, offset) - 1


FieldEval = Callable[[int, str], "MappedText | str | None"]


def decode_literal(host: HostSource, node: ast.AST, field_eval: FieldEval | None = None) -> tuple[MappedText, list[str]] | None:
    """Decode a ``Constant`` str or ``JoinedStr`` node into mapped text.

    Returns the text and the list of f-string fields that could not be resolved (they are left in
    the text as their source expression, so the unit still parses).  Returns ``None`` when the
    span does not look like string literals (the caller then falls back to ``ast``'s value).
    """
    try:
        span, line, col = host.span(node)
    except (IndexError, AttributeError):
        return None
    pos = _SpanPos(span, line, col)
    out = MappedText("", ())
    unresolved: list[str] = []
    field_index = 0
    i, n = 0, len(span)
    while i < n:
        ch = span[i]
        if ch in " \t\r\n(":  # implicit concatenation may sit in parentheses
            i += 1
            continue
        if ch == "\\" and i + 1 < n and span[i + 1] == "\n":
            i += 2
            continue
        if ch == "#":
            j = span.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        if ch == ")":
            i += 1
            continue
        m = _PREFIX.match(span, i)
        if not m:
            return None
        prefix = m.group(0).lower()
        q_start = m.end()
        quote = span[q_start : q_start + 3] if span.startswith(("'''", '"""'), q_start) else span[q_start]
        body_start = q_start + len(quote)
        j = body_start
        while True:
            k = span.find(quote, j)
            if k < 0:
                return None
            # the quote is escaped when preceded by an odd run of backslashes
            bs = 0
            while k - 1 - bs >= body_start and span[k - 1 - bs] == "\\":
                bs += 1
            if bs % 2 == 0:
                break
            j = k + 1
        body_end = k
        raw = "r" in prefix
        is_f = "f" in prefix
        piece, field_index = _decode_body(span, body_start, body_end, raw, is_f, pos, field_eval,
                                          field_index, unresolved)
        out = out + piece
        i = body_end + len(quote)
    return out, unresolved


def _decode_body(span: str, start: int, end: int, raw: bool, is_f: bool, pos: _SpanPos,
                 field_eval: FieldEval | None, field_index: int,
                 unresolved: list[str]) -> tuple[MappedText, int]:
    text_parts: list[str] = []
    segs: list[Segment] = []
    out_len = 0

    def emit(text: str, at: int, verbatim: bool) -> None:
        nonlocal out_len
        if not text:
            return
        line, col = pos(at)
        segs.append(Segment(out_len, line, col, verbatim))
        text_parts.append(text)
        out_len += len(text)

    def emit_plain(a: int, b: int) -> None:
        """Emit span[a:b], which holds no f-string fields, decoding escapes unless raw."""
        if raw:
            emit(span[a:b], a, True)
            return
        cur = a
        for m in _ESCAPE.finditer(span, a, b):
            emit(span[cur : m.start()], cur, True)
            emit(_unescape(m.group(1)), m.start(), False)
            cur = m.end()
        emit(span[cur:b], cur, True)

    if not is_f:
        emit_plain(start, end)
    else:
        cur = i = start
        while i < end:
            ch = span[i]
            if ch in "{}" and i + 1 < end and span[i + 1] == ch:
                emit_plain(cur, i)
                emit(ch, i, False)
                i += 2
                cur = i
                continue
            if ch == "{":
                emit_plain(cur, i)
                close = _field_end(span, i + 1, end)
                expr_src = span[i + 1 : close]
                value = field_eval(field_index, expr_src) if field_eval else None
                field_index += 1
                if value is None:
                    unresolved.append(expr_src.strip())
                    emit(_field_expr(expr_src), i + 1, False)
                elif isinstance(value, MappedText):
                    # a resolved string variable keeps its own map (it came from another literal)
                    shift_parts = MappedText("".join(text_parts), tuple(segs)) + value
                    text_parts[:] = [shift_parts.text]
                    segs[:] = list(shift_parts.segments)
                    out_len = len(shift_parts.text)
                else:
                    emit(str(value), i, False)
                i = close + 1
                cur = i
                continue
            i += 1
        emit_plain(cur, end)
    return MappedText("".join(text_parts), tuple(segs)), field_index


def _field_end(span: str, i: int, end: int) -> int:
    depth = 0
    quote = ""
    while i < end:
        ch = span[i]
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0 and ch == "}":
                return i
            depth -= 1
        i += 1
    return end


def _field_expr(src: str) -> str:
    """The expression of an f-string field, without ``!r`` / ``:spec`` / ``=``."""
    depth = 0
    for i, ch in enumerate(src):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0 and ch in "!:" and not src[i:].startswith("!="):
            return src[:i].strip()
    return src.strip().rstrip("=")


def _unescape(esc: str) -> str:
    if esc == "\n":
        return ""  # backslash-newline continues the line
    if esc in _SIMPLE:
        return _SIMPLE[esc]
    if esc[0] in "01234567":
        return chr(int(esc, 8))
    if esc[0] in "xuU":
        return chr(int(esc[1:], 16))
    if esc[0] == "N":
        import unicodedata

        try:
            return unicodedata.lookup(esc[2:-1])
        except KeyError:
            return "?"
    return "\\" + esc  # unknown escapes are kept as written
