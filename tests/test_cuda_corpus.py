"""The C++ side on the real corpus: no crash on any record, cheap facts, few and explained firings."""

from __future__ import annotations

import collections
import time

from hackscan.config import Config
from hackscan.cuda.builder import build_cuda_facts
from hackscan.engine import StaticScanner
from hackscan.inputs import Submission, discover
from hackscan.model import Severity
from hackscan.python.module import HostModule


def _submissions(path) -> list[Submission]:
    return [s for s in discover([str(path)]) if isinstance(s, Submission)]


def test_every_record_scans_without_analysis_failure(corpus_path) -> None:
    subs = _submissions(corpus_path)
    assert len(subs) >= 200
    scanner = StaticScanner(Config(select=("HS2",)))
    counts: collections.Counter[str] = collections.Counter()
    errors = []
    for sub in subs:
        report = scanner.scan(sub)
        assert not [f for f in report.findings if f.rule == "HS005"], (sub.path, report.findings)
        for f in report.findings:
            counts[f.rule] += 1
            if f.severity is Severity.ERROR and f.rule.startswith("HS2"):
                errors.append((sub.path, f.rule, f.location.line, f.message))
    print("\nHS2xx firings on the corpus:", dict(sorted(counts.items())))
    # the corpus is mostly honest kernels: a burst of errors means a false-positive regression
    assert len(errors) <= 3, errors


def test_cuda_facts_are_cheap_on_the_corpus(corpus_path) -> None:
    units = []
    for sub in _submissions(corpus_path):
        try:
            host = HostModule.parse(sub.code, sub.path)
        except (SyntaxError, ValueError):
            continue
        cu = [u for u in host.units if u.language in ("cuda", "cpp")]
        if cu:
            units.append(cu)
    assert len(units) >= 60
    for group in units[:5]:
        build_cuda_facts(group)  # warm the grammar and the query
    start = time.perf_counter()
    total_launches = 0
    for group in units:
        facts = build_cuda_facts(group)
        total_launches += len(facts.launches)
    elapsed = time.perf_counter() - start
    assert total_launches > 50
    # about 1.5 ms per file with CUDA on a quiet core; allow for a busy shared machine
    assert elapsed / len(units) < 0.012, f"{elapsed / len(units) * 1000:.1f} ms per file"
