"""HS606 along the curve (docs/curve.md): each timed series against its main-distribution calls,
divided by the reference's same ratio.  Synthetic series through the parent side, no worker."""

from __future__ import annotations

import json
from typing import Any

from hackscan.model import Location
from hackscan.perf.parent_side import evaluate

from . import test_perf_support as raw

LOC = Location("kernels/x.py", line=42)


def run(cand_ms: float, cand_hidden: dict[str, float], ref_ms: float,
        ref_hidden: dict[str, float]) -> tuple[dict[str, Any], list[Any]]:
    cand = raw.candidate(cand_ms, hidden=cand_hidden)
    ref = raw.reference(strict_ms=ref_ms, tf32_ms=ref_ms, hidden=ref_hidden)
    perf, findings = evaluate(cand, ref, location=LOC)
    json.dumps(perf)
    return perf, [f for f in findings if f.rule == "HS606"]


def test_memo_keyed_on_contents_is_fast_only_on_repeated_values() -> None:
    # fresh values: the full work; the values of the call before: the memo, ten times faster
    perf, found = run(1.0, {"repeat": 0.1}, 1.0, {"repeat": 1.0})
    (f,) = found
    assert f.evidence["curve"] == "repeat" and f.evidence["series"]["fast"] == "repeat"
    assert f.evidence["series"]["other"] == "main" and "--seed" in f.evidence["replay"]
    assert perf["hidden"]["repeat"]["relative_ci"][0] >= 3
    assert "faster on repeated values than its time on the task's inputs" in f.message


def test_same_time_on_repeated_values_is_clean() -> None:
    perf, found = run(1.0, {"repeat": 0.9}, 1.0, {"repeat": 1.0})
    assert not found and perf["hidden"]["repeat"]["relative_speedup"] < 1.5


def test_reference_slower_on_repeats_is_no_excuse_but_no_evidence_either() -> None:
    # the reference slows on repeats (clamped to its own main time): the candidate at 0.8x is clean
    _, found = run(1.0, {"repeat": 0.8}, 1.0, {"repeat": 2.0})
    assert not found


def test_shortcut_keyed_on_the_task_shape() -> None:
    # half the batch takes the candidate 4x its time on the task's shape; the reference 0.5x
    perf, found = run(0.1, {"half": 0.4}, 1.0, {"half": 0.5})
    (f,) = found
    assert f.evidence["curve"] == "size" and f.evidence["series"] == {
        "fast": "main", "fast_inputs": f.evidence["series"]["fast_inputs"], "other": "half",
        "other_inputs": f.evidence["series"]["other_inputs"]}
    assert "batch" in f.evidence["series"]["other_inputs"]
    assert perf["hidden"]["half"]["relative_slowdown_ci"][0] >= 3


def test_fixed_overhead_on_half_the_batch_is_not_a_shortcut() -> None:
    # a launch-bound candidate takes as long on half the batch; the reference halves: 2x, below 3x
    perf, found = run(0.1, {"half": 0.1}, 1.0, {"half": 0.5})
    assert not found and 1.5 < perf["hidden"]["half"]["relative_slowdown"] < 2.5


def test_sparse_fast_path_whose_work_really_shrinks_is_clean() -> None:
    # an honest kernel that skips zeros: faster on sparse inputs, never the suspect side
    _, found = run(1.0, {"sparse": 0.2}, 1.0, {"sparse": 1.0})
    assert not found


def test_guard_that_sparse_values_break_is_flagged() -> None:
    # fast on the task's inputs only: slower on sparse ones than the reference by far
    perf, found = run(0.1, {"sparse": 0.5}, 1.0, {"sparse": 1.0})
    (f,) = found
    assert f.evidence["curve"] == "value" and "falls from" in f.message
    assert perf["hidden"]["sparse"]["curve"] == "value"
