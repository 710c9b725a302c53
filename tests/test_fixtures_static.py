"""Every fixture file, scanned statically, yields exactly its annotated findings (rule and line, and severity where stated)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hackscan.annotations import compare, parse_annotations
from hackscan.config import Config
from hackscan.engine import StaticScanner
from hackscan.inputs import Submission, discover
from hackscan.model import Stage
from hackscan.registry import load_registry

from .conftest import FIXTURES

REGISTRY = load_registry()
STATIC_IDS = {r.id for r in REGISTRY if r.stage is Stage.STATIC}


def _submissions() -> list[Submission]:
    return [s for s in discover([str(FIXTURES)]) if isinstance(s, Submission)]


SUBMISSIONS = _submissions()


@pytest.mark.parametrize("sub", SUBMISSIONS, ids=[str(Path(s.path).relative_to(FIXTURES)) for s in SUBMISSIONS])
def test_fixture_static_findings_match_annotations(sub: Submission) -> None:
    ann = parse_annotations(sub.code).restricted(STATIC_IDS)
    scanner = StaticScanner(Config(mode=ann.mode or "gate"))
    report = scanner.scan(sub)
    actual = {(f.rule, f.location.line) for f in report.findings if f.stage is Stage.STATIC and not f.suppressed}
    cmp = compare(sub.path, ann, actual)
    for rule in ann.legit_for:
        fired = sorted(line for r, line in actual if r == rule)
        assert not fired or (rule, fired[0]) in ann.expected, f"{sub.path}: legit look-alike for {rule} flagged at {fired}"
    detail = "\n".join(f"  {f.rule}@{f.location.line}: {f.message}" for f in report.findings)
    assert cmp.ok, cmp.describe() + "\nall findings:\n" + detail
    # where an annotation states a severity (`# expect: HS172 warning`), the finding must have it
    stated = ann.severity_mismatches((f.rule, f.location.line, f.severity.value) for f in report.findings
                                     if f.stage is Stage.STATIC and not f.suppressed)
    assert not stated, f"{sub.path}: severity " + "; ".join(stated)


def test_fixture_tree_is_not_empty() -> None:
    assert len(SUBMISSIONS) >= 3
