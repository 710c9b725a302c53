"""Real generated kernels: every record of the CUDA-L1 corpus scans without a crash.

Skipped when ../shared/corpora is absent (it is data beside the project, never copied into it).
"""

from __future__ import annotations

from hackscan.config import Config
from hackscan.engine import StaticScanner
from hackscan.inputs import InputProblem, Submission, discover


def test_every_corpus_record_scans_without_analysis_failure(corpus_path) -> None:
    items = list(discover([str(corpus_path)]))
    assert len(items) == 250
    scanner = StaticScanner(Config(mode="audit"))
    failures = []
    for item in items:
        report = scanner.scan(item)
        if isinstance(item, InputProblem):
            assert report.verdict.value == "error"
            continue
        assert isinstance(item, Submission)
        crashed = [f for f in report.findings if f.rule == "HS005"]
        if crashed:
            failures.append(f"{item.path}: {crashed[0].message}")
        for f in report.findings:
            assert f.location.line >= 0 and f.message
    assert not failures, "\n".join(failures[:20])
