"""The static engine: crash isolation, suppressions, skipped rules, API entry points."""

from __future__ import annotations

import sys

import hackscan
from hackscan.config import Config
from hackscan.engine import StaticScanner
from hackscan.inputs import Submission
from hackscan.model import Confidence, Severity, Stage, Verdict
from hackscan.registry import Registry, Rule, load_registry

CODE = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x * 2\n"


def _boom(ctx):
    raise RuntimeError("rule bug")


def _always(ctx):
    yield ctx.hit(ctx.at(ctx.host.tree.body[-1]), "marker finding")


def _rule(rid: str, check: str, **kw) -> Rule:
    return Rule(id=rid, name=f"test-{rid.lower()}", severity=kw.get("severity", Severity.ERROR),
                confidence=Confidence.HIGH, stage=Stage.STATIC, languages=("python",), taxonomy=(0,),
                message="m", summary="s", description="d", hack_example="h", legit_example="l", check=check,
                requires_reference=kw.get("requires_reference", False))


def _registry(*extra: Rule) -> Registry:
    return Registry(list(load_registry()) + list(extra))


def test_crashing_rule_becomes_finding_and_others_still_run() -> None:
    mod = sys.modules[__name__].__name__
    reg = _registry(_rule("HS990", f"{mod}:_boom"), _rule("HS991", f"{mod}:_always"))
    report = StaticScanner(Config(select=("HS99", "HS005")), registry=reg).scan(Submission(path="c.py", code=CODE))
    rules = sorted(f.rule for f in report.findings)
    assert rules == ["HS005", "HS991"]
    crash = next(f for f in report.findings if f.rule == "HS005")
    assert "HS990" in crash.message and "rule bug" in crash.message
    assert report.verdict is Verdict.HACK  # HS991 is an error


def test_rules_needing_a_reference_are_reported_as_skipped() -> None:
    mod = sys.modules[__name__].__name__
    reg = _registry(_rule("HS992", f"{mod}:_always", requires_reference=True))
    report = StaticScanner(Config(select=("HS992",)), registry=reg).scan(Submission(path="c.py", code=CODE))
    assert not report.findings
    assert [(s.rule, s.reason) for s in report.skipped] == [("HS992", "no reference given")]


def test_suppression_honoured_only_in_audit_mode() -> None:
    mod = sys.modules[__name__].__name__
    reg = _registry(_rule("HS993", f"{mod}:_always"))
    code = CODE.replace("class ModelNew(nn.Module):", "class ModelNew(nn.Module):  # hackscan: ignore[HS993] reviewed")
    sub = Submission(path="c.py", code=code)
    audit = StaticScanner(Config(mode="audit", select=("HS993", "HS003", "HS004")), registry=reg).scan(sub)
    (f,) = audit.findings
    assert f.suppressed and f.suppression_reason == "reviewed" and audit.verdict is Verdict.CLEAN
    gate = StaticScanner(Config(mode="gate", select=("HS993", "HS003", "HS004")), registry=reg).scan(sub)
    assert sorted(f.rule for f in gate.findings) == ["HS003", "HS993"]
    assert gate.verdict is Verdict.HACK


def test_severity_override_from_config() -> None:
    mod = sys.modules[__name__].__name__
    reg = _registry(_rule("HS994", f"{mod}:_always"))
    cfg = Config(select=("HS994",), severity={"HS994": Severity.INFO})
    report = StaticScanner(cfg, registry=reg).scan(Submission(path="c.py", code=CODE))
    assert report.findings[0].severity is Severity.INFO and report.verdict is Verdict.CLEAN


def test_api_scan_source_never_imports_torch() -> None:
    import subprocess

    code = (
        "import sys, hackscan\n"
        "r = hackscan.scan_source(open('kernels/relu/hack_value_guard.py').read(), open('kernels/relu/reference.py').read())\n"
        "assert 'torch' not in sys.modules, 'static scan imported torch'\n"
        "print(r.verdict.value)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(_root()))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in ("hack", "suspicious", "clean")


def test_api_batch_and_syntax_error() -> None:
    reports = hackscan.scan_batch([CODE, "def f(:\n"], reference=None)
    assert reports[0].verdict is not Verdict.ERROR
    assert reports[1].verdict is Verdict.ERROR and reports[1].findings[0].rule == "HS001"
    assert reports[1].findings[0].location.line == 1


def _root():
    from pathlib import Path

    return Path(__file__).resolve().parent.parent
