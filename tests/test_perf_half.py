"""A candidate that passes correctness only at the half-precision level (HS406 as a warning) is still
timed; one whose error is below float32 by kind (fp16 math) is rejected by HS406 as an error.  The
performance stage used to take only probes with status "pass" as timing sets, so such a candidate (CUDA-L1 level-1 tasks 63 and 86, convolutions run in TF32/half) got "the reference
measurement failed: no input sets to time" although its correctness probes had run."""

from __future__ import annotations

from typing import Any

import pytest

from hackscan.config import Config
from hackscan.inputs import Submission
from hackscan.model import Severity
from hackscan.pipeline import RunOptions

from .conftest import FIXTURES


def _dynamic(name: str) -> Any:
    pytest.importorskip("torch")
    from hackscan.dynamic import run_dynamic_stage
    from hackscan.dynamic.pool import WorkerPool
    from hackscan.engine import StaticScanner
    from hackscan.inputs import discover

    path = FIXTURES / "dynamic" / "softmax" / name
    sub = next(s for s in discover([str(path.parent)]) if isinstance(s, Submission) and s.path.endswith(path.name))
    pool = WorkerPool()
    try:
        return run_dynamic_stage(sub, StaticScanner(Config()).scan(sub),
                                 RunOptions(device="cpu", timeout=120.0, seed=11), Config(), pool=pool)
    finally:
        pool.close()


@pytest.mark.slow
def test_half_precision_candidate_is_timed() -> None:
    report = _dynamic("hack_mantissa_truncated.py")
    statuses = {p["id"]: p["status"] for p in report.dynamic["probes"] if p["family"] == "original"}
    assert "half" in statuses.values(), statuses  # the case at hand: originals passed at the half level
    (hs406,) = [f for f in report.findings if f.rule == "HS406"]
    assert hs406.severity is Severity.WARNING, hs406.evidence
    perf = report.performance or {}
    assert perf.get("measured"), perf
    assert "no input sets" not in str(perf)
    # every drawn original set is timed, not only the value-transformed ones
    assert perf["input_sets"]["passed"] == perf["input_sets"]["drawn"], perf["input_sets"]


@pytest.mark.slow
def test_float16_math_on_a_float32_task_is_rejected() -> None:
    report = _dynamic("hack_half_precision.py")
    (hs406,) = [f for f in report.findings if f.rule == "HS406"]
    assert hs406.severity is Severity.ERROR and hs406.evidence["error_of_scale"] > 2.0 ** -13, hs406.evidence
    assert report.verdict == "hack"
