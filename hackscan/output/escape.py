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

# Every format character (Unicode category Cf: invisible, yet it changes what is shown or how it is
# read): the bidi embeddings, overrides, isolates and marks, the zero-width space, joiners and
# word joiner, the soft hyphen, the byte-order mark, the interlinear annotations and the tag
# characters (U+E0000 block: invisible text a model or a viewer may still read).  The list is the
# Cf category of the Unicode database (tests/test_output_escape.py checks it against unicodedata).
_FORMAT = ("\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e"
           "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
           "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f")
# C0 controls (newline and tab are decided by the caller), DEL, the C1 controls (U+0080-U+009F: 0x9B
# is an 8-bit CSI to some terminals), the line and paragraph separators (a new line to some
# viewers, not to others) and the format characters above.
_UNSAFE = "\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029" + _FORMAT
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
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def visible(text: Any, *, keep: str = "\n\t") -> str:
    """``text`` with every control, bidi and separator character shown as its escape.

    ``keep`` lists the characters among newline and tab the format allows through as they are.
    """
    s = text if isinstance(text, str) else str(text)
    return _pattern(keep).sub(_escape_char, s)


# what ``json.dumps(..., ensure_ascii=False)`` leaves raw: it escapes U+0000-U+001F itself, but not
# DEL, the C1 controls, the separators or the format characters
_JSON_RAW = re.compile("[\x7f-\x9f\u2028\u2029" + _FORMAT + "]")


def _json_escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON writes a character outside the BMP as its UTF-16 surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def json_text(dumped: str) -> str:
    """A JSON document with the characters ``json.dumps`` left raw written as ``\\uXXXX`` escapes.

    Valid JSON that parses to the same data: only the file's bytes change, so a ``cat`` or a
    ``less`` of the report cannot be steered by the candidate."""
    return _JSON_RAW.sub(_json_escape, dumped)
