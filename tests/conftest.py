from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
SHARED = ROOT.parent / "shared"
CORPUS = SHARED / "corpora" / "cuda-l1" / "a100.jsonl"


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


# Test modules that run candidates (the sandbox, the dynamic and performance stages), compile,
# start process pools (parallel scans, measure runs) or a browser: ``make test-fast``
# (``-m "not slow and not gpu and not dynamic"``) leaves them out.  A test elsewhere that needs
# one of these takes ``pytest.mark.slow``.
_DYNAMIC_MODULES = ("test_dynamic_", "test_perf_", "test_hostile", "test_sandbox", "test_measure_",
                    "test_report_html", "test_parallel")
_DYNAMIC_FIXTURES = {"pool", "have_compiler"}


_RAY_MODULES = ("test_cluster", "test_dynamic_verifier")


def pytest_collection_modifyitems(config, items):
    dynamic = pytest.mark.dynamic
    for item in items:
        module = item.module.__name__.rpartition(".")[2]
        if module.startswith(_DYNAMIC_MODULES) or (_DYNAMIC_FIXTURES & set(getattr(item, "fixturenames", ()))):
            item.add_marker(dynamic)
        # under pytest-xdist (`make test` runs one worker per core) the tests that start a Ray
        # cluster share one worker: two heads on one host would race for the same ports
        if module in _RAY_MODULES:
            item.add_marker(pytest.mark.xdist_group("ray"))
    if any("gpu" in item.keywords for item in items) and not _has_cuda():  # torch only when asked
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def corpus_path() -> Path:
    if not CORPUS.is_file():
        pytest.skip("../shared/corpora is absent")
    return CORPUS


@pytest.fixture(scope="session")
def have_compiler() -> bool:
    return shutil.which("g++") is not None or shutil.which("c++") is not None
