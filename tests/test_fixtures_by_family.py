"""The state, stream, tampering, harness, precision, replay, obfuscation and Triton rules, on their own.

``test_fixtures_static.py`` scans every fixture with every rule; this file scans the fixtures of
these rule families with only these rules (plus the meta rules), so a regression here is told
apart from a finding of another family, and severities are checked where the fixture's point is
the severity (a warning must not become an error, which would cost an RL run real reward).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hackscan.annotations import compare, parse_annotations
from hackscan.config import Config
from hackscan.engine import StaticScanner
from hackscan.inputs import Submission, discover
from hackscan.model import Severity, Stage
from hackscan.registry import load_registry, rules_dir

from .conftest import FIXTURES

FAMILIES = ("HS00", "HS13", "HS14", "HS15", "HS16", "HS17", "HS18", "HS19", "HS3")
FOLDERS = [FIXTURES / "python" / t for t in ("detection", "obfuscation", "precision", "precision_half_ref", "replay", "state",
                                       "tamper", "timing")] + [FIXTURES / "triton"]


@pytest.fixture(scope="module")
def scanner(tmp_path_factory) -> StaticScanner:
    d = tmp_path_factory.mktemp("rules")
    for f in rules_dir().glob("HS*.toml"):
        if f.name.startswith(FAMILIES):
            shutil.copy(f, d / f.name)
    return StaticScanner(Config(mode="gate"), registry=load_registry(Path(d)))


def _subs() -> list[Submission]:
    found = [s for s in discover([str(f) for f in FOLDERS if f.is_dir()]) if isinstance(s, Submission)]
    return sorted(found, key=lambda s: s.path)


SUBS = _subs()


def _mine(rule: str) -> bool:
    return rule.startswith(FAMILIES[1:])


@pytest.mark.parametrize("sub", SUBS, ids=[str(Path(s.path).relative_to(FIXTURES)) for s in SUBS])
def test_family_fixture_matches_annotations(sub: Submission, scanner: StaticScanner) -> None:
    report = scanner.scan(sub)
    ids = {r.id for r in scanner.rules if _mine(r.id)}
    ann = parse_annotations(sub.code).restricted(ids)
    actual = {(f.rule, f.location.line) for f in report.findings if f.stage is Stage.STATIC and _mine(f.rule)}
    crashes = [f.message for f in report.findings if f.rule == "HS005"]
    assert not crashes, crashes
    cmp = compare(sub.path, ann, actual)
    detail = "\n".join(f"  {f.rule}@{f.location.line} {f.severity.value}: {f.message}" for f in report.findings)
    assert cmp.ok, cmp.describe() + "\n" + detail


def _scan_one(scanner: StaticScanner, rel: str):
    sub = next(s for s in SUBS if s.path.endswith(rel))
    return scanner.scan(sub)


def _severity(report, rule: str, line: int) -> Severity:
    return next(f.severity for f in report.findings if f.rule == rule and f.location.line == line)


def test_cudnn_tf32_default_is_only_a_warning(scanner) -> None:
    rep = _scan_one(scanner, "precision/hack_tf32_flags.py")
    sev = {f.location.line: f.severity for f in rep.findings if f.rule == "HS172"}
    assert sev[6] is Severity.ERROR  # matmul.allow_tf32 with a matmul reference
    assert sev[7] is Severity.WARNING  # cudnn.allow_tf32 = True is PyTorch's default
    assert sev[8] is Severity.ERROR  # set_float32_matmul_precision("high")


def test_pointer_keyed_branch_without_stale_copy_is_a_warning(scanner) -> None:
    src = '''
import torch
import torch.nn as nn
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._last_ptr = None
        self._cl = False
    def forward(self, x):
        if self._last_ptr == x.data_ptr():
            fmt_ok = self._cl
        else:
            self._last_ptr = x.data_ptr()
            self._cl = x.is_contiguous()
            fmt_ok = self._cl
        return self.ext.run(x if fmt_ok else x.contiguous())
'''
    rep = scanner.scan(Submission(path="t.py", code=src))
    got = [(f.rule, f.severity) for f in rep.findings if f.rule == "HS131"]
    assert got == [("HS131", Severity.WARNING)]


def test_memo_filled_in_a_conditional_arm_is_still_stale(scanner) -> None:
    src = '''
import torch.nn as nn
class ModelNew(nn.Module):
    def forward(self, x):
        k = tuple(x.shape)
        if k not in self.cache:
            self.cache[k] = self.ext.run(x)
        return self.cache[k]
'''
    rep = scanner.scan(Submission(path="t.py", code=src))
    assert [(f.rule, f.location.line) for f in rep.findings if f.rule == "HS130"] == [("HS130", 8)]
