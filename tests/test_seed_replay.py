"""Reproducible audits: the text report states the dynamic stage's seed, and scanning again with
that seed gives the same findings (rule, line, message)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from hackscan.model import Report, Verdict
from hackscan.output.text import render_text

from .conftest import FIXTURES

ROWSUM = FIXTURES / "dynamic" / "rowsum"


def test_one_seed_is_stated_in_the_summary_with_how_to_replay_it() -> None:
    reports = [Report(path=p, verdict=Verdict.CLEAN, findings=(), dynamic={"ran": True, "seed": 7}) for p in ("a.py", "b.py")]
    out = render_text(reports).splitlines()
    assert out[-1] == "seed: 7 (replay with --seed 7)"
    assert not any(line.startswith("  seed:") for line in out)  # said once, not per submission


def test_seeds_that_differ_are_stated_per_submission() -> None:
    reports = [Report(path=p, verdict=Verdict.CLEAN, findings=(), dynamic={"ran": True, "seed": s})
               for p, s in (("a.py", 7), ("b.py", 8))]
    out = render_text(reports)
    assert "  seed: 7 (replay with --seed 7)" in out and "  seed: 8 (replay with --seed 8)" in out
    assert "seeds: one per submission" in out.splitlines()[-1]


def test_no_seed_line_without_a_dynamic_stage() -> None:
    reports = [Report(path="a.py", verdict=Verdict.CLEAN, findings=()),
               Report(path="b.py", verdict=Verdict.CLEAN, findings=(), dynamic={"ran": False, "seed": 3, "reason": "no GPU"})]
    assert "seed" not in render_text(reports)


def _scan_text(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "hackscan.cli", *args, "--no-progress", "--no-color"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode in (0, 1), out.stderr[-2000:]
    return out.stdout


FINDING = re.compile(r"^(?P<where>\S+:\d+:\d+:) (?P<rule>HS\d+) (?P<rest>.*)$")


@pytest.mark.slow
def test_the_same_seed_gives_the_same_findings_on_the_cpu() -> None:
    pytest.importorskip("torch")
    args = (str(ROWSUM / "hack_clipped_inputs.py"), "--ref", str(ROWSUM / "reference.py"), "--seed", "11",
            "--no-perf", "--device", "cpu")
    first, second = _scan_text(*args), _scan_text(*args)
    found = [m.group("where", "rule", "rest") for m in map(FINDING.match, first.splitlines()) if m]
    assert any(rule.startswith("HS4") for _, rule, _ in found), first  # the dynamic stage found the hack
    assert found == [m.group("where", "rule", "rest") for m in map(FINDING.match, second.splitlines()) if m]
    assert first.splitlines()[-1] == "seed: 11 (replay with --seed 11)"
