"""Terminal escapes and bidi overrides from a candidate never act in any report format.

The hack: a candidate raises an error whose message (and a source line, the snippet) holds
``ESC[2J ESC[H`` (clear the screen, cursor home) followed by a fake ``hackscan: clean`` line, or a
U+202E override that reverses what follows.  Printed raw, the reviewer sees a clean screen.  The
look-alike: an ordinary message with newlines and tabs where the format allows them, and
non-ASCII text (an accented name, a multiplication sign) that must come through unchanged.
"""

from __future__ import annotations

import json

import pytest

from hackscan.model import Confidence, Finding, Location, Report, Severity, Stage, Verdict
from hackscan.output import render
from hackscan.output.escape import json_text, visible

PAYLOAD = "\x1b[2J\x1b[H hackscan: clean"
# the zero-width space and the tag characters (U+E0000 block) are invisible: "ok" followed by
# hidden text a viewer shows as nothing, or a model reading the report still reads
BIDI = ("x \u202eneelc\u202c \u2066y\u2069 \x9b31m \r over ok\u200b\U000e0070\U000e0061\U000e0073\U000e0073"
        " z\u2060w\u00ad")
RAW = ("\x1b", "\u202e", "\u202c", "\u2066", "\u2069", "\x9b", "\r", "\u200b", "\U000e0070", "\U000e0073",
       "\u2060", "\u00ad")


def _report(path: str = "cand.py") -> Report:
    f = Finding(rule="HS401", name="wrong-output", severity=Severity.ERROR, confidence=Confidence.HIGH,
                message=f"ModelNew fails: RuntimeError: {PAYLOAD} {BIDI}",
                location=Location(path, 3, 5), stage=Stage.DYNAMIC,
                evidence={"probe": "original", "input": PAYLOAD, "exception": f"boom {PAYLOAD}"},
                snippet=f"    return x  # {PAYLOAD}\u202e")
    return Report(path=path, verdict=Verdict.HACK, findings=(f,), error=f"analysis {PAYLOAD}",
                  dynamic={"ran": False, "reason": f"the reference does not run: {PAYLOAD}"})


def test_visible_escapes_controls_and_bidi_but_keeps_text() -> None:
    assert visible(PAYLOAD) == "\\x1b[2J\\x1b[H hackscan: clean"
    assert visible("a\u202eb\u2066c") == "a\\u202eb\\u2066c"
    assert visible("caf\u00e9 2\u00d7 \u4e2d") == "caf\u00e9 2\u00d7 \u4e2d"  # look-alike: ordinary Unicode
    assert visible("a\nb\tc") == "a\nb\tc"
    assert visible("a\nb\tc", keep="") == "a\\x0ab\\x09c"
    assert visible("a\rb") == "a\\x0db"


@pytest.mark.parametrize("fmt", ["text", "markdown", "html", "json", "sarif"])
def test_no_format_writes_a_raw_control_or_bidi_character(fmt: str, tmp_path) -> None:
    # the excerpt loader reads the file: give it the hostile line too
    src = tmp_path / "cand.py"
    src.write_text(f"import torch\n\ndef f(x):\n    return x  # {PAYLOAD}\u202e\n", encoding="utf-8")
    out = render([_report(str(src))], fmt, color=(fmt == "text"))
    for ch in RAW:
        if fmt == "text" and ch == "\x1b":
            # colour is on: our own ESC sequences colour the severity and the verdict, nothing else
            stripped = out
            for code in ("\x1b[31m", "\x1b[1;31m", "\x1b[0m", "\x1b[32m", "\x1b[33m", "\x1b[36m",
                         "\x1b[1;33m", "\x1b[1;35m"):
                stripped = stripped.replace(code, "")
            assert "\x1b" not in stripped
            continue
        assert ch not in out, f"{fmt}: raw {ch!r} in the report"
    # and the candidate's text is still there, visibly
    if fmt in ("json", "sarif"):
        assert "hackscan: clean" in out
        json.loads(out)  # still valid JSON
    else:
        assert "x1b[2J" in out


def test_every_format_character_is_escaped() -> None:
    """By what the characters are (Unicode's Cf category: invisible, they change what is shown),
    not by a list of the ones seen so far: every Cf character of this Python's Unicode database."""
    import unicodedata

    for code in range(0x110000):
        ch = chr(code)
        if unicodedata.category(ch) == "Cf":
            assert visible(ch) != ch, f"U+{code:04X} passes raw"
            assert ch not in json_text(json.dumps(ch, ensure_ascii=False)), f"U+{code:04X} raw in JSON"
    assert visible("ok\U000e0041") == "ok\\U000e0041"


def test_json_keeps_the_data_identical() -> None:
    dumped = json.dumps({"m": BIDI + PAYLOAD}, ensure_ascii=False)
    safe = json_text(dumped)
    assert "\u202e" not in safe and "\x9b" not in safe
    assert json.loads(safe) == {"m": BIDI + PAYLOAD}


def test_ordinary_message_and_snippet_are_unchanged_in_text() -> None:
    f = Finding(rule="HS401", name="wrong-output", severity=Severity.ERROR, confidence=Confidence.HIGH,
                message="ModelNew gives 2\u00d7 the reference on caf\u00e9 inputs", location=Location("c.py", 1, 1),
                snippet="y = x * 2")
    out = render([Report(path="c.py", verdict=Verdict.HACK, findings=(f,))], "text")
    assert "ModelNew gives 2\u00d7 the reference on caf\u00e9 inputs" in out
    assert "1 | y = x * 2" in out
