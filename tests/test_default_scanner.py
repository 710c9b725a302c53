"""``hackscan.scan_source`` / ``scan_batch`` reuse one scanner per setting instead of building one per call."""

from __future__ import annotations

from pathlib import Path

import pytest

import hackscan
from hackscan import engine

CODE = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x * 2\n"
REFERENCE = CODE.replace("ModelNew", "Model")
KERNELS = Path(__file__).resolve().parent.parent / "kernels"


@pytest.fixture
def built(monkeypatch) -> list[engine.StaticScanner]:
    """Every StaticScanner built while the test runs, from an empty cache of default scanners."""
    made: list[engine.StaticScanner] = []
    real = engine.StaticScanner

    class Counting(real):  # type: ignore[misc, valid-type]
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made.append(self)

    monkeypatch.setattr(engine, "StaticScanner", Counting)
    hackscan.default_scanner.cache_clear()
    yield made
    hackscan.default_scanner.cache_clear()  # later tests must not get a Counting scanner


def test_two_calls_share_one_scanner(built) -> None:
    first = hackscan.scan_source(CODE, REFERENCE)
    second = hackscan.scan_source(CODE, REFERENCE)
    hackscan.scan_batch([CODE, CODE], REFERENCE)
    assert len(built) == 1
    assert first.to_dict() == second.to_dict()


def test_other_settings_get_their_own_scanner(built) -> None:
    hackscan.scan_source(CODE)
    hackscan.scan_source(CODE, mode="audit")
    hackscan.scan_source(CODE, select=["HS1"])
    hackscan.scan_source(CODE, select=("HS1",))  # a list and a tuple of the same rules are one setting
    hackscan.scan_source(CODE, ignore=["HS101"])
    assert len(built) == 4
    assert [s.config.mode for s in built] == ["gate", "audit", "gate", "gate"]
    assert built[2].config.select == ("HS1",) and built[3].config.ignore == ("HS101",)


def test_a_cached_scanner_gives_what_a_fresh_one_gives() -> None:
    hack = (KERNELS / "relu" / "hack_value_guard.py").read_text()
    ref = (KERNELS / "relu" / "reference.py").read_text()
    hackscan.scan_source(CODE, REFERENCE)  # the cached scanner has scanned something else first
    cached = hackscan.scan_source(hack, ref)
    fresh = hackscan.Scanner().scan(hack, ref)
    assert cached.findings and cached.to_dict() == fresh.to_dict()


@pytest.mark.parametrize("code", ["", "  \n", "None", None, 42])
def test_no_code_is_an_error_the_gate_rejects(code) -> None:
    # an empty generation must score the floor: half-analysed, it would be a warning-only
    # ``suspicious`` result that a gate accepting warnings rewards
    report = hackscan.scan_source(code, reference="import torch\n")
    assert report.verdict.value == "error"
    assert [f.rule for f in report.findings] == ["HS006"]
    assert hackscan.Scanner(reject_classes=["gaming"]).rejects(report)


def test_a_model_less_generation_is_still_analysed() -> None:
    report = hackscan.scan_source("x = 1\n", reference="import torch\n")
    assert report.verdict.value != "error"
    assert "HS117" in {f.rule for f in report.findings}
