"""The HS13x-HS19x and HS3xx rules on the real CUDA-L1 corpus: no crashes, and the cases read by hand.

Skipped when ../shared/corpora is absent.  The expectations below are records whose code was read:
they pin the true positives found there and the look-alikes that must stay quiet (the 24 CUDA-graph
users copy their inputs before every replay; `cudnn.allow_tf32 = True` is PyTorch's default).
"""

from __future__ import annotations

import shutil
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from hackscan.config import Config
from hackscan.engine import StaticScanner
from hackscan.inputs import Submission, discover
from hackscan.model import Severity
from hackscan.registry import load_registry, rules_dir

FAMILIES = ("HS00", "HS13", "HS14", "HS15", "HS16", "HS17", "HS18", "HS19", "HS3")


@pytest.fixture(scope="module")
def corpus_findings(corpus_path, tmp_path_factory):
    d = tmp_path_factory.mktemp("rules")
    for f in rules_dir().glob("HS*.toml"):
        if f.name.startswith(FAMILIES):
            shutil.copy(f, d / f.name)
    scanner = StaticScanner(Config(), registry=load_registry(Path(d)))
    by_record: dict[int, list] = defaultdict(list)
    for sub in discover([str(corpus_path)]):
        if isinstance(sub, Submission):
            by_record[sub.record] = list(scanner.scan(sub).findings)
    return by_record


def _rules(findings, severity: Severity | None = None) -> Counter:
    return Counter(f.rule for f in findings if severity is None or f.severity is severity)


def test_no_rule_crashes_on_the_corpus(corpus_findings) -> None:
    crashes = [(rec, f.message) for rec, fs in corpus_findings.items() for f in fs if f.rule == "HS005"]
    assert not crashes, crashes[:5]


def test_lazy_matmul_tensor_subclass_is_found(corpus_findings) -> None:
    # record 9 returns a LazyMatmul with __torch_function__ for the tall-skinny matmul task
    assert _rules(corpus_findings[9], Severity.ERROR)["HS142"] == 1


def test_fp16_copy_refreshed_by_id_is_found(corpus_findings) -> None:
    # record 13 refreshes its fp16 copies of A and B only when id(A) / id(B) change
    errs = _rules(corpus_findings[13], Severity.ERROR)
    assert errs["HS131"] == 2 and errs["HS170"] == 1 and errs["HS172"] == 1


def test_pointer_keyed_format_check_is_only_a_warning(corpus_findings) -> None:
    # record 55 remembers the last data_ptr only to skip a layout check: not an output cache
    got = [(f.rule, f.severity) for f in corpus_findings[55] if f.rule.startswith("HS13")]
    assert got == [("HS131", Severity.WARNING)]


def test_cuda_graph_users_that_copy_inputs_are_clean(corpus_findings) -> None:
    graph_records = (67, 101, 105, 129, 146, 149, 162, 169, 173, 175, 185, 199, 204, 212, 220, 222, 227, 228, 235,
                     237, 239, 240, 241, 242)
    for rec in graph_records:
        assert not [f for f in corpus_findings[rec] if f.rule in ("HS130", "HS133")], rec


def test_autocast_and_tf32_downgrades_are_counted(corpus_findings) -> None:
    total = Counter()
    for fs in corpus_findings.values():
        total.update(_rules(fs, Severity.ERROR))
    assert total["HS171"] >= 20  # autocast around fp32 work
    assert total["HS172"] >= 8  # matmul TF32 flags with a matmul reference
    cudnn_default = [f for fs in corpus_findings.values() for f in fs
                     if f.rule == "HS172" and "cudnn.allow_tf32" in f.message]
    assert cudnn_default and all(f.severity is Severity.WARNING for f in cudnn_default)
