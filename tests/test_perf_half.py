"""A candidate that passes correctness only at the half-precision level (HS406, a warning) is still
timed.  The performance stage used to take only probes with status "pass" as timing sets, so such
a candidate (CUDA-L1 level-1 tasks 63 and 86, convolutions run in TF32/half) got "the reference
measurement failed: no input sets to time" although its correctness probes had run."""

from __future__ import annotations

import pytest

from hackscan.config import Config
from hackscan.inputs import Submission
from hackscan.pipeline import RunOptions

from .conftest import FIXTURES


@pytest.mark.slow
def test_half_precision_candidate_is_timed() -> None:
    pytest.importorskip("torch")
    from hackscan.dynamic import run_dynamic_stage
    from hackscan.dynamic.pool import WorkerPool
    from hackscan.engine import StaticScanner
    from hackscan.inputs import discover

    path = FIXTURES / "dynamic" / "softmax" / "hack_half_precision.py"
    sub = next(s for s in discover([str(path.parent)]) if isinstance(s, Submission) and s.path.endswith(path.name))
    pool = WorkerPool()
    try:
        report = run_dynamic_stage(sub, StaticScanner(Config()).scan(sub),
                                   RunOptions(device="cpu", timeout=120.0, seed=11), Config(), pool=pool)
    finally:
        pool.close()
    statuses = {p["id"]: p["status"] for p in report.dynamic["probes"] if p["family"] == "original"}
    assert "half" in statuses.values(), statuses  # the case at hand: originals passed at the half level
    assert "HS406" in {f.rule for f in report.findings}
    perf = report.performance or {}
    assert perf.get("measured"), perf
    assert "no input sets" not in str(perf)
    # every drawn original set is timed, not only the value-transformed ones
    assert perf["input_sets"]["passed"] == perf["input_sets"]["drawn"], perf["input_sets"]
