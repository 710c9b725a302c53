"""Parallel static scans: same reports in the same order as one process, and no result lost to one bad file."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from hackscan.config import Config
from hackscan.engine import StaticScanner
from hackscan.inputs import Submission, discover
from hackscan.model import Verdict
from hackscan.output.jsonout import as_document
from hackscan.parallel import ParallelScanner, chunk_size, scan_items

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses fork to inject failures")


def _items() -> list:
    return list(discover([str(ROOT / "fixtures"), str(ROOT / "kernels")]))


def _doc(reports) -> dict:
    return as_document(reports)


def test_parallel_reports_equal_serial_reports_in_input_order() -> None:
    items = _items()
    assert len(items) >= 8
    serial = scan_items(items, Config(), jobs=1)
    parallel = ParallelScanner(Config(), jobs=2, start_method="fork").scan(items)
    assert [r.path for r in parallel] == [i.path for i in items]
    assert _doc(parallel) == _doc(serial)


def test_corpus_parallel_equals_serial(corpus_path: Path) -> None:
    items = list(discover([str(corpus_path)]))[:120]
    assert _doc(ParallelScanner(Config(), jobs=2).scan(items)) == _doc(scan_items(items, Config(), jobs=1))


def test_progress_counts_every_item_once() -> None:
    items = _items()
    calls: list[tuple[int, int]] = []
    ParallelScanner(Config(), jobs=2, start_method="fork").scan(items, lambda d, t, p: calls.append((d, t)))
    assert [d for d, _ in calls] == list(range(1, len(items) + 1))
    assert {t for _, t in calls} == {len(items)}


def _synthetic(n: int, bad: dict[int, str]) -> list[Submission]:
    out = []
    for i in range(n):
        code = f"import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x * {i}\n"
        out.append(Submission(path=f"cand_{i}.py", code=code + bad.get(i, ""), file=f"cand_{i}.py"))
    return out


@pytest.fixture
def sabotaged_scanner(monkeypatch: pytest.MonkeyPatch):
    """StaticScanner.scan that kills its process or hangs on marked code (inherited by forked workers)."""
    real = StaticScanner.scan

    def scan(self, item):
        code = getattr(item, "code", "")
        if "# CRASH_ME" in code:
            os._exit(3)
        if "# HANG_ME" in code:
            time.sleep(60)
        return real(self, item)

    monkeypatch.setattr(StaticScanner, "scan", scan)


def test_a_crashing_file_costs_only_its_own_result(sabotaged_scanner) -> None:
    items = _synthetic(30, {7: "# CRASH_ME\n", 21: "# CRASH_ME\n"})
    reports = ParallelScanner(Config(), jobs=2, start_method="fork").scan(items)
    assert [r.path for r in reports] == [i.path for i in items]
    for i, r in enumerate(reports):
        if i in (7, 21):
            assert r.verdict is Verdict.ERROR
            assert r.findings[0].rule == "HS005" and "died" in r.findings[0].message
        else:
            assert r.verdict is not Verdict.ERROR, (i, r.error)


def test_a_hanging_file_times_out_alone(sabotaged_scanner) -> None:
    items = _synthetic(12, {4: "# HANG_ME\n"})
    start = time.monotonic()
    reports = ParallelScanner(Config(), jobs=2, item_timeout=1.5, start_method="fork").scan(items)
    assert time.monotonic() - start < 20
    assert reports[4].verdict is Verdict.ERROR and "timed out" in (reports[4].error or "")
    assert all(r.verdict is not Verdict.ERROR for i, r in enumerate(reports) if i != 4)


def test_chunks_balance_load() -> None:
    assert chunk_size(250, 2) == 16
    assert chunk_size(5, 4) == 1
    assert chunk_size(100_000, 2) == 64
