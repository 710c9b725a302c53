"""The Markdown audit report: summary tables, per-submission evidence, and no way out of an excerpt."""

from __future__ import annotations

import re
from pathlib import Path

from hackscan.output import render
from hackscan.output.markdown import code_span, fence, md_text

from .test_report_data import HOSTILE, sample_reports


def test_summary_counts_verdicts_rules_and_severities(tmp_path: Path) -> None:
    md = render(sample_reports(tmp_path), "markdown")
    assert "4 submissions: 1 hack, 1 suspicious, 1 clean, 1 error." in md
    assert "| hack | 1 |" in md and "| error | 1 |" in md
    assert "| HS101 | value-guarded-shortcut | error | 1 |" in md
    assert re.search(r"\| error \| 2 \|", md)  # two error-severity findings (HS101 and the dynamic HS401)
    assert "| warning | 2 |" in md


def test_finding_shows_excerpt_around_its_line(tmp_path: Path) -> None:
    md = render(sample_reports(tmp_path), "markdown")
    block = md.split("**HS101**", 1)[1].split("**HS", 1)[0]
    assert ">7 |         if x.min() >= 0:" in block
    assert " 6 |     def forward(self, x):" in block and " 9 |         return ext.relu(x)" in block


def test_dynamic_evidence_and_speedups_are_shown(tmp_path: Path) -> None:
    md = render(sample_reports(tmp_path), "markdown")
    assert "probe = `sign_flip`" in md and "seed = `1234`" in md and "error_ratio = `3.2e+06`" in md
    assert "first_mismatch = `[0, 3]`" in md
    assert "claimed speedup: 12.50×" in md
    assert "eager\\_fp32 1.40×, eager\\_tf32 0.70×, compile 0.50×" in md
    assert "peak memory vs reference: 1.80×" in md
    # the TF32 baseline is the headline: 12.5x claimed, 0.7x verified
    assert "| 12.50× | 0.70× | 0.06 |" in md


def test_errors_and_skipped_rules_are_reported(tmp_path: Path) -> None:
    md = render(sample_reports(tmp_path), "markdown")
    assert "**Verdict: error** — syntax error: expected ':'" in md
    assert "rules skipped: HS102 (no reference given)" in md


def test_candidate_text_cannot_escape_its_excerpt(tmp_path: Path) -> None:
    md = render(sample_reports(tmp_path), "markdown")
    prose = next(line for line in md.splitlines() if "message with" in line)
    assert "<script>" not in prose and "\\<script\\>" in prose
    excerpt = md.split("**HS199**", 1)[1]
    assert excerpt.count("````") >= 2  # the fence outgrows the backtick run in the excerpt
    fence_block = fence("a ``` b")
    assert fence_block.startswith("````\n") and fence_block.endswith("\n````")
    assert code_span("a`b") == "`` a`b ``"
    assert md_text("x | y <b>") == "x \\| y \\<b\\>"
    assert HOSTILE not in md.split("## Submissions")[0]


def test_markdown_of_real_scan_is_deterministic(tmp_path: Path) -> None:
    from hackscan import scan_paths

    fixtures = Path(__file__).resolve().parent.parent / "fixtures"
    reports = scan_paths([str(fixtures)])
    assert render(reports, "markdown") == render(reports, "markdown")


def test_headline_named_by_the_performance_stage_wins(tmp_path: Path) -> None:
    from hackscan.model import Report, Verdict
    from hackscan.output.audit import performance_of

    r = Report("a.py", Verdict.CLEAN, performance={"headline": "eager_fp32",
                                                    "speedups": {"eager_tf32": 0.8, "eager_fp32": 2.0}})
    p = performance_of(r)
    assert p is not None and p.headline_speedup == 2.0 and p.headline is None
    assert performance_of(Report("b.py", Verdict.CLEAN, performance={})) is None
    odd = performance_of(Report("c.py", Verdict.CLEAN, performance={"baselines": {"compile": {"speedup": 1.5}},
                                                                    "memory_ratio": 1.1}))
    assert odd is not None and odd.speedups == (("compile", 1.5),) and odd.memory_ratio == 1.1


def test_performance_dict_of_the_perf_stage(tmp_path: Path) -> None:
    """The shape hackscan/perf/parent_side.evaluate returns (PROTOCOL.md, "performance keys")."""
    from hackscan.model import Report, Verdict

    perf = {"measured": True, "valid": False, "invalid_reasons": ["timer patched: time.perf_counter"],
            "device": "cuda", "baselines": {"eager_fp32": {"time_ms": {"median": 2.0}}},
            "speedup": {"eager_fp32": 3.1, "eager_tf32": 0.9, "compile": 0.7}, "headline_baseline": "eager_tf32",
            "headline_speedup": 0.9, "headline": "0.90x vs eager TF32", "memory": {"ratio": 2.5}}
    md = render([Report("k.py", Verdict.SUSPICIOUS, performance=perf, meta={"claimed": {"score_default": 4.0}})],
                "markdown")
    assert "eager\\_fp32 3.10×, eager\\_tf32 0.90×, compile 0.70×" in md
    assert "peak memory vs reference: 2.50×" in md and "timing not trusted: timer patched" in md
    assert "| 4.00× | 0.90× | 0.23 |" in md
    not_run = render([Report("k.py", Verdict.CLEAN, performance={"measured": False, "reason": "no GPU"})], "markdown")
    assert "no GPU" in not_run
