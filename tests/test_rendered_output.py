"""Rendered reports of one small fixture, compared with stored copies under tests/data/rendered/.

The other output tests check properties (a SARIF document validates, HTML escapes what it must);
these catch any change in what a reader sees: a reordered field, a lost snippet line, a new
summary wording.  When a change is meant, refresh the stored copies and read their diff:

    HACKSCAN_REFRESH_SNAPSHOTS=1 python -m pytest -q tests/test_rendered_output.py
    git diff tests/data/rendered/
"""

from __future__ import annotations

import copy
import json
import os

import pytest

from hackscan.config import Config
from hackscan.engine import StaticScanner
from hackscan.inputs import Submission, discover
from hackscan.output import render

from .conftest import ROOT

# three findings of one rule, two severities, with a reference beside it: small, but every part shows
FIXTURE = "fixtures/python/precision/hack_tf32_flags.py"
STORED = ROOT / "tests" / "data" / "rendered"
REFRESH = os.environ.get("HACKSCAN_REFRESH_SNAPSHOTS") == "1"
FORMATS = {"text": "txt", "markdown": "md", "json": "json", "sarif": "sarif.json"}


def _reports():
    subs = [s for s in discover([FIXTURE]) if isinstance(s, Submission)]
    return [StaticScanner(Config(mode="gate")).scan(s) for s in subs]


def _stable(fmt: str, text: str) -> str:
    """The version number changes with every release and SARIF carries every rule's documentation
    (about 250 kB): both are replaced, keeping the rules the results name."""
    if fmt not in ("json", "sarif"):
        return text
    doc = json.loads(text)
    if fmt == "json":
        doc["version"] = "<version>"
    else:
        doc = copy.deepcopy(doc)
        for run in doc["runs"]:
            driver = run["tool"]["driver"]
            driver["version"] = "<version>"
            used = {r["ruleId"] for r in run.get("results", [])}
            driver["rules"] = [r for r in driver["rules"] if r["id"] in used]
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_rendered_report_matches_the_stored_copy(fmt: str, monkeypatch) -> None:
    # paths relative to the checkout, so the stored copies do not depend on where it lies; the
    # Markdown and text views read their snippet context from the file when they render
    monkeypatch.chdir(ROOT)
    got = _stable(fmt, render(_reports(), fmt))
    path = STORED / f"{os.path.basename(FIXTURE).removesuffix('.py')}.{FORMATS[fmt]}"
    if REFRESH:
        path.write_text(got, encoding="utf-8")
        pytest.skip(f"refreshed {path.relative_to(ROOT)}")
    assert path.is_file(), f"no stored copy: run with HACKSCAN_REFRESH_SNAPSHOTS=1 to write {path.name}"
    want = path.read_text(encoding="utf-8")
    assert got == want, f"{fmt} output changed; if meant, refresh (see this module's docstring)"


def test_the_fixture_still_shows_every_part() -> None:
    """The stored copies are only worth keeping while the fixture has findings of two severities."""
    text = (STORED / "hack_tf32_flags.txt").read_text(encoding="utf-8")
    assert "error[high]" in text and "warning[medium]" in text and "2 errors, 1 warning" in text
