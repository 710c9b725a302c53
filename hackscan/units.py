"""Units: one piece of source in one language, with a map back to the host file.

A CUDA string handed to ``load_inline`` is built in Python from literals, variables, ``+``, lists and
f-strings.  Findings inside it must point at the line and column of the *host* file, inside the
string where the construct sits.  ``MappedText`` carries that map through concatenation, slicing
and ``textwrap.dedent`` as a short list of segments rather than a position per character.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import accumulate, count
from operator import add

from .util.lazy import cached_property
from .util.quick_init import quick_init


@quick_init
@dataclass(frozen=True)
class Pos:
    """A place in the host file a finding points at: 1-based line and column, and for a place
    inside a unit, the unit's id and (for units read from another file) that file's path."""

    line: int
    column: int
    unit: str | None = None
    path: str | None = None


@quick_init
@dataclass(frozen=True)
class Segment:
    """``text[start:]`` up to the next segment maps onto the host from (line, col).

    ``verbatim`` segments copy the host characters one to one (newlines included), so any offset
    inside maps exactly.  Other segments (an escape sequence, an interpolated value) map every
    offset to the segment's start.
    """

    start: int
    line: int  # 1-based host line
    col: int  # 0-based host column, in characters
    verbatim: bool


@quick_init
@dataclass(frozen=True)
class MappedText:
    text: str
    segments: tuple[Segment, ...] = ()

    # --- construction -------------------------------------------------------------------------
    @staticmethod
    def verbatim(text: str, line: int, col: int) -> MappedText:
        return MappedText(text, (Segment(0, line, col, True),))

    @staticmethod
    def opaque(text: str, line: int, col: int) -> MappedText:
        """Text with no position of its own (an interpolated value): maps to one place."""
        return MappedText(text, (Segment(0, line, col, False),))

    def __add__(self, other: MappedText) -> MappedText:
        if not self.text:
            return other
        if not other.text:
            return self
        shift = len(self.text)
        segs = self.segments + tuple(
            Segment(s.start + shift, s.line, s.col, s.verbatim) for s in other.segments
        )
        return MappedText(self.text + other.text, segs)

    @staticmethod
    def join(parts: list[MappedText], sep: str = "") -> MappedText:
        out = MappedText("", ())
        for i, part in enumerate(parts):
            if i and sep:
                # separators inserted by the program: map them to the end of the previous part
                line, col = out.position(max(len(out.text) - 1, 0)) if out.text else (part.segments[0].line if part.segments else 1, 0)
                out = out + MappedText.opaque(sep, line, col)
            out = out + part
        return out

    def slice(self, start: int, end: int | None = None) -> MappedText:
        end = len(self.text) if end is None else end
        if start <= 0 and end >= len(self.text):
            return self
        start = max(start, 0)
        if start >= end:
            return MappedText("", ())
        line, col = self.position(start)
        idx = self._seg_index(start)
        first = self.segments[idx]
        segs = [Segment(0, line, col, first.verbatim)]
        for s in self.segments[idx + 1 :]:
            if s.start >= end:
                break
            segs.append(Segment(s.start - start, s.line, s.col, s.verbatim))
        return MappedText(self.text[start:end], tuple(segs))

    def strip(self) -> MappedText:
        lead = len(self.text) - len(self.text.lstrip())
        trail = len(self.text.rstrip())
        return self.slice(lead, trail)

    def dedent(self) -> MappedText:
        """``textwrap.dedent`` that keeps the map: each kept line maps from its old offset."""
        import textwrap

        lines = self.text.splitlines(keepends=True)
        new_lines = textwrap.dedent(self.text).splitlines(keepends=True)
        if len(lines) != len(new_lines):  # pragma: no cover - dedent never changes line count
            return MappedText(textwrap.dedent(self.text), self.segments[:1])
        out = MappedText("", ())
        offset = 0
        for old, new in zip(lines, new_lines, strict=True):
            removed = len(old) - len(new)
            out = out + self.slice(offset + removed, offset + len(old))
            offset += len(old)
        return out

    # --- lookup -------------------------------------------------------------------------------
    @cached_property
    def _starts(self) -> list[int]:
        return [s.start for s in self.segments]

    def _seg_index(self, offset: int) -> int:
        return max(bisect.bisect_right(self._starts, offset) - 1, 0)

    @cached_property
    def _newlines(self) -> list[int]:
        """Offsets of every newline of ``text``, so that a position is two bisects.

        Built from the lengths of the pieces between newlines: the k-th newline (from 0) sits
        after the first k+1 pieces and k newlines, i.e. at the running sum of their lengths plus
        k."""
        pieces = self.text.split("\n")
        pieces.pop()  # the text after the last newline ends no line
        return list(map(add, accumulate(map(len, pieces)), count()))

    def position(self, offset: int) -> tuple[int, int]:
        """Host (line, col) of a character offset in ``text`` (line 1-based, col 0-based)."""
        if not self.segments:
            return (1, 0)
        seg = self.segments[self._seg_index(offset)]
        if not seg.verbatim:
            return (seg.line, seg.col)
        start = seg.start
        if 0 <= start <= offset:
            # the same answer as counting in ``text[start:offset]`` below, from the newline table
            end = min(offset, len(self.text))
            nl = self._newlines
            hi = bisect.bisect_left(nl, end)
            newlines = hi - bisect.bisect_left(nl, start, 0, hi)
            if newlines == 0:
                return (seg.line, seg.col + end - start)
            return (seg.line + newlines, end - nl[hi - 1] - 1)
        chunk = self.text[seg.start : offset]
        newlines = chunk.count("\n")
        if newlines == 0:
            return (seg.line, seg.col + len(chunk))
        return (seg.line + newlines, len(chunk) - chunk.rfind("\n") - 1)

    @cached_property
    def _wide_chars(self) -> tuple[list[int], list[int], list[int], list[int], int] | None:
        """For text that is not ASCII: each non-ASCII character's byte offset, character offset,
        UTF-8 length and the extra bytes up to and including it, and the text's UTF-8 length.
        None for ASCII text (bytes and characters coincide)."""
        text = self.text
        if text.isascii():
            return None
        bstarts: list[int] = []
        cstarts: list[int] = []
        lens: list[int] = []
        extras: list[int] = []
        extra = 0
        for m in _NON_ASCII.finditer(text):
            i = m.start()
            n = len(m.group().encode("utf-8"))
            bstarts.append(i + extra)
            cstarts.append(i)
            lens.append(n)
            extra += n - 1
            extras.append(extra)
        return bstarts, cstarts, lens, extras, len(text) + extra

    def char_offset(self, byte_offset: int) -> int:
        """The character offset of a UTF-8 byte offset of ``text``: the characters wholly inside the
        first ``byte_offset`` bytes (what ``_char_offset`` computes), by bisect on a table built once."""
        wide = self._wide_chars
        if wide is None:
            return byte_offset
        bstarts, cstarts, lens, extras, nbytes = wide
        if byte_offset < 0:
            return _char_offset(self.text, byte_offset)
        if byte_offset >= nbytes:
            return len(self.text)
        j = bisect.bisect_left(bstarts, byte_offset) - 1  # the last wide character starting before it
        if j < 0:
            return byte_offset
        if byte_offset < bstarts[j] + lens[j]:
            return cstarts[j]  # inside that character: it does not count
        return byte_offset - extras[j]


@quick_init
@dataclass(frozen=True)
class Unit:
    """One piece of source in one language.

    ``language`` is ``python`` (the host), ``cuda``, ``cpp`` or ``triton``.  ``role`` says where the
    text came from (``cuda_sources``, ``cpp_sources``, ``file``, ``triton.jit``).  ``extension`` names
    the ``load_inline`` call the unit belongs to, so that units of one extension are analysed
    together (the exported functions live in one, the kernels in another).
    """

    id: str
    language: str
    mapped: MappedText
    role: str = ""
    extension: str | None = None
    # facts recorded at extraction, e.g. exported function names, compiler flags, call line
    attrs: Mapping[str, object] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return self.mapped.text

    def position(self, offset: int) -> tuple[int, int]:
        return self.mapped.position(offset)

    def byte_position(self, byte_offset: int) -> tuple[int, int]:
        """Host position of a UTF-8 byte offset (tree-sitter reports bytes)."""
        mapped = self.mapped
        return mapped.position(mapped.char_offset(byte_offset))


_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def _char_offset(text: str, byte_offset: int) -> int:
    if text.isascii():
        return byte_offset
    return len(text.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore"))
