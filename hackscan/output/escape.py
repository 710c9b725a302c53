"""Untrusted text made inert before it reaches a terminal, a Markdown viewer, a browser or a JSON file.

A candidate controls its error messages, its source lines (snippets), the paths and names it
is stored under, and anything it prints into evidence.  A terminal obeys control characters: an
ESC sequence can clear the screen and print a fake "clean" line, a carriage return can overwrite
the verdict, and a bidi override (U+202E) can make ``hack`` read as ``kcah`` or reorder a source
line so that the code a reviewer reads is not the code that runs.  ``visible`` turns every such
character into its Python escape (``\\x1b``, ``\\u202e``), so the report still says exactly what the
candidate produced but nothing in it acts.  Every renderer (text, Markdown, HTML, and the raw
characters JSON leaves alone) goes through this one function.
"""

from __future__ import annotations

import re
from typing import Any

# C0 controls (newline and tab are decided by the caller), DEL, the C1 controls (U+0080-U+009F: 0x9B
# is an 8-bit CSI to some terminals), the bidi embeddings, overrides and isolates, the implicit
# direction marks, the line and paragraph separators (a new line to some viewers, not to others)
# and the byte-order mark / zero-width no-break space.
_UNSAFE = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff"
_PATTERNS: dict[str, re.Pattern[str]] = {}


def _pattern(keep: str) -> re.Pattern[str]:
    pat = _PATTERNS.get(keep)
    if pat is None:
        # newline and tab are escaped unless the format keeps them (a code block keeps both; a
        # one-line message keeps neither)
        extra = "".join(c for c in "\n\t" if c not in keep)
        pat = _PATTERNS[keep] = re.compile("[" + _UNSAFE + re.escape(extra) + "]")
    return pat


def _escape_char(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(text: Any, *, keep: str = "\n\t") -> str:
    """``text`` with every control, bidi and separator character shown as its escape.

    ``keep`` lists the characters among newline and tab the format allows through as they are.
    """
    s = text if isinstance(text, str) else str(text)
    return _pattern(keep).sub(_escape_char, s)


# what ``json.dumps(..., ensure_ascii=False)`` leaves raw: it escapes U+0000-U+001F itself, but not
# DEL, the C1 controls or the bidi characters
_JSON_RAW = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]")


def json_text(dumped: str) -> str:
    """A JSON document with the characters ``json.dumps`` left raw written as ``\\uXXXX`` escapes.

    Valid JSON that parses to the same data: only the file's bytes change, so a ``cat`` or a
    ``less`` of the report cannot be steered by the candidate."""
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", dumped)
