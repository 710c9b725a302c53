"""``batch_gc`` tunes the collector only while a batch runs and always puts it back."""

from __future__ import annotations

import gc
import threading

import hackscan
from hackscan.engine import BATCH_GC_THRESHOLD, batch_gc

CODE = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"


def test_batch_gc_restores_thresholds_and_freeze() -> None:
    before = gc.get_threshold()
    frozen = gc.get_freeze_count()
    with batch_gc():
        assert gc.get_threshold()[0] == max(before[0], BATCH_GC_THRESHOLD)
        with batch_gc():  # nested: the outer batch owns the saved state
            pass
        assert gc.get_threshold()[0] == max(before[0], BATCH_GC_THRESHOLD)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == frozen


def test_batch_gc_restores_after_an_exception() -> None:
    before = gc.get_threshold()
    try:
        with batch_gc():
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert gc.get_threshold() == before


def test_batch_gc_leaves_a_disabled_collector_alone() -> None:
    before = gc.get_threshold()
    gc.disable()
    try:
        with batch_gc():
            assert gc.get_threshold() == before
            assert not gc.isenabled()
    finally:
        gc.enable()


def test_batch_gc_keeps_a_callers_freeze() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with batch_gc():
            pass
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_concurrent_batches_restore_once() -> None:
    before = gc.get_threshold()
    barrier = threading.Barrier(4)

    def work() -> None:
        barrier.wait()
        hackscan.scan_batch([CODE] * 3)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert gc.get_threshold() == before


def test_scan_batch_results_match_single_scans() -> None:
    scanner = hackscan.Scanner(mode="audit")
    batch = scanner.scan_batch([CODE, CODE])
    single = scanner.scan(CODE, path="<sample 0>")
    assert [(f.rule, f.location.line) for f in batch[0].findings] == \
        [(f.rule, f.location.line) for f in single.findings]


def test_scan_pauses_the_collector_and_resumes_it() -> None:
    seen: list[bool] = []
    from hackscan.engine import scan_gc

    with scan_gc():
        seen.append(gc.isenabled())
        with scan_gc():  # nested: the outer pause owns the resume
            pass
        seen.append(gc.isenabled())
    assert seen == [False, False]
    assert gc.isenabled()
    hackscan.scan_source(CODE)
    assert gc.isenabled()


def test_scan_gc_leaves_a_disabled_collector_disabled() -> None:
    from hackscan.engine import scan_gc

    gc.disable()
    try:
        with scan_gc():
            pass
        hackscan.scan_source(CODE)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_scan_gc_resumes_after_an_exception() -> None:
    from hackscan.engine import scan_gc

    try:
        with scan_gc():
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert gc.isenabled()
