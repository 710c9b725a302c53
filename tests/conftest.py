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


def pytest_collection_modifyitems(config, items):
    if not _has_cuda():
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
