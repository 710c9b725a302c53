"""The HS101-HS129 rules on the real CUDA-L1 corpus: no crashes, and the cases read by hand.

Skipped when ../shared/corpora is absent.  Records named below were read: they pin true positives
(try/flag fallbacks, in-place inputs, a kernel never called, eval-only kernels) and look-alikes that
must stay quiet (parameters folded at init, closures over them, kernels reached through cupy's
``get_function`` on a helper object, torch on a branch the kernel does not share).
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
from hackscan.python.module import HostModule
from hackscan.python.valueflow import build_model_flow
from hackscan.registry import load_registry, rules_dir

FAMILIES = ("HS00", "HS10", "HS11", "HS12")


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


def _at(findings, rule: str) -> list[tuple[int, Severity]]:
    return sorted((f.location.line, f.severity) for f in findings if f.rule == rule)


def test_no_rule_crashes_on_the_corpus(corpus_findings) -> None:
    crashes = [(rec, f.message) for rec, fs in corpus_findings.items() for f in fs if f.rule == "HS005"]
    assert not crashes, crashes[:5]


def test_facts_build_for_every_record_and_find_a_forward(corpus_path) -> None:
    forwards = 0
    for sub in discover([str(corpus_path)]):
        if not isinstance(sub, Submission):
            continue
        try:
            host = HostModule.parse(sub.code, sub.path)
        except SyntaxError:
            continue
        facts = build_model_flow(host)
        forwards += facts.forward is not None
        assert not facts.truncated or facts.forward is not None
    assert forwards >= 220


def test_try_and_flag_fallbacks_are_found(corpus_findings) -> None:
    # record 2: matmul kernel under try/except and a use_pytorch_impl flag set in the handler
    assert _at(corpus_findings[2], "HS107") == [(323, Severity.ERROR)]
    assert _at(corpus_findings[2], "HS108") == [(310, Severity.ERROR), (318, Severity.ERROR)]
    # record 23: softmax compiled under try/except recording cuda_available; torch.softmax on both paths.
    # The kernel builds, so the flag's torch arm is dead in the harness: a warning (HS107 is the error)
    assert _at(corpus_findings[23], "HS108") == [(208, Severity.WARNING)]
    assert _at(corpus_findings[23], "HS107") == [(224, Severity.ERROR)]
    # record 76: ``except: pass`` falls through to F.conv1d after the try
    assert _at(corpus_findings[76], "HS108") == [(259, Severity.ERROR)]


def test_in_place_inputs_and_benchmark_path(corpus_findings) -> None:
    # record 19: ``if not x.requires_grad: return torch.relu_(x)`` — in place, and the path the harness takes
    assert _at(corpus_findings[19], "HS113") == [(81, Severity.ERROR)]
    assert _at(corpus_findings[19], "HS118") == [(80, Severity.ERROR)]
    # record 151: the fused kernel only runs when not self.training
    assert _at(corpus_findings[151], "HS118") == [(296, Severity.ERROR)]


def test_dead_kernel_and_constant_output(corpus_findings) -> None:
    # record 207: "in a real implementation, we would call inception_cuda.inception_forward here"
    assert _at(corpus_findings[207], "HS104") == [(149, Severity.ERROR)]
    # record 166: returns precomputed ones, and softmax over a single column is 1 on every input: the
    # task is degenerate (HS199, class task: not loaded here), so the constant is not called a fake
    assert _at(corpus_findings[166], "HS110") == []


def test_look_alikes_stay_quiet(corpus_findings) -> None:
    # parameters folded at init (109, 140), read through closures (62, 69) or copied into another module (161)
    for rec in (62, 69, 109, 140, 161):
        assert not _at(corpus_findings[rec], "HS115"), rec
    # record 234: the reference itself never uses h2o's output
    assert not _at(corpus_findings[234], "HS115")
    # record 192: the CUDA conv and F.conv2d sit on different branches, joined only at the return
    assert not _at(corpus_findings[192], "HS106")
    # record 22: the kernel runs through cupy get_function on a helper object's attributes
    assert not _at(corpus_findings[22], "HS104")


def test_torch_rewrites_are_counted(corpus_findings) -> None:
    files = Counter()
    for fs in corpus_findings.values():
        files.update({f.rule for f in fs if f.severity is Severity.ERROR})
    assert files["HS105"] >= 120  # CUDA-L1's plain PyTorch rewrites
    assert files["HS107"] >= 40 and files["HS108"] >= 40
