"""Tolerance from the reference's own float32 error: pass, half-precision level, wrong, skip."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")

from hackscan.dynamic.compare import Tolerance, bitwise_equal, compare, compare_leaf, fraction_equal  # noqa: E402

TOL = Tolerance()


def _problem(seed: int = 0, n: int = 4096):
    """A row sum: the float32 reference has a real error, the float64 one is the truth."""
    rng = np.random.default_rng(seed)
    x = rng.random((8, n))
    r64 = x.sum(axis=1)
    r32 = x.astype(np.float32).sum(axis=1, dtype=np.float32)
    return x, r32, r64


def test_a_different_summation_order_in_float32_passes() -> None:
    x, r32, r64 = _problem()
    xf = x.astype(np.float32)
    cand = np.zeros(8, np.float32)
    for j in range(xf.shape[1]):  # naive sequential accumulation, float32 throughout
        cand += xf[:, j]
    o = compare_leaf(cand, r32, r64, TOL)
    assert o.level == "pass", o.evidence()


def test_half_precision_math_is_a_downgrade_not_a_pass() -> None:
    x, r32, r64 = _problem()
    cand = x.astype(np.float16).astype(np.float32).sum(axis=1, dtype=np.float32)
    cand = cand.astype(np.float16).astype(np.float32)
    o = compare_leaf(cand, r32, r64, TOL)
    assert o.level == "half", o.evidence()
    assert o.max_abs_error > o.threshold


def test_a_constant_is_wrong_and_names_the_first_mismatch() -> None:
    x, r32, r64 = _problem()
    cand = np.full(8, x.shape[1] * 0.5, np.float32)
    o = compare_leaf(cand, r32, r64, TOL)
    assert o.level == "wrong"
    assert o.first_mismatch is not None and len(o.first_mismatch) == 1
    ev = o.evidence()
    assert {"max_abs_error", "max_rel_error", "error_ratio", "first_mismatch"} <= set(ev)


def test_an_exact_op_gets_a_floor_not_zero_tolerance() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((16, 64)).astype(np.float32)
    ref = np.maximum(x, 0)
    cand = ref * (1 + 1e-7)  # one ulp-ish of noise: the fp32 reference is exact, the floor allows it
    assert compare_leaf(cand.astype(np.float32), ref, ref.astype(np.float64), TOL).level == "pass"
    assert compare_leaf((ref * 1.01).astype(np.float32), ref, ref.astype(np.float64), TOL).level != "pass"


def test_the_measured_half_level_decides_when_given() -> None:
    x, r32, r64 = _problem()
    rq = (r64 * (1 + 2 ** -11)).astype(np.float32)  # a reduced-precision reference, 1 ulp of fp16 off
    cand = (r64 * (1 + 3 * 2 ** -11)).astype(np.float32)
    assert compare_leaf(cand, r32, r64, TOL, rq).level == "half"
    far = (r64 * (1 + 200 * 2 ** -11)).astype(np.float32)
    assert compare_leaf(far, r32, r64, TOL, rq).level == "wrong"


def test_shape_and_dtype_mismatches_are_wrong() -> None:
    _, r32, r64 = _problem()
    assert compare_leaf(r32[:4], r32, r64, TOL).level == "wrong"
    o = compare_leaf(r32.astype(np.float16), r32, r64, TOL)
    assert o.level == "wrong" and "dtype" in o.reason


def test_nan_where_the_reference_is_finite_is_wrong() -> None:
    _, r32, r64 = _problem()
    cand = r32.copy()
    cand[3] = np.nan
    o = compare_leaf(cand, r32, r64, TOL)
    assert o.level == "wrong" and o.first_mismatch == [3] and "non-finite" in o.reason


def test_a_probe_where_float32_overflows_is_skipped() -> None:
    r64 = np.array([1e39, 1.0])
    r32 = np.array([np.inf, 1.0], np.float32)
    assert compare_leaf(np.array([np.inf, 1.0], np.float32), r32, r64, TOL).level == "skip"


def test_non_finite_reference_positions_are_left_out() -> None:
    r64 = np.array([np.nan, 2.0])
    r32 = np.array([np.nan, 2.0], np.float32)
    assert compare_leaf(np.array([5.0, 2.0], np.float32), r32, r64, TOL).level == "pass"
    assert compare_leaf(np.array([np.nan], np.float32), r32[:1], r64[:1], TOL).level == "skip"


def test_structures_must_match_and_the_worst_leaf_decides() -> None:
    _, r32, r64 = _problem()
    assert compare([r32], "T", [r32, r32], [r64, r64], "(T,T)", TOL).level == "wrong"
    o = compare([r32, r32 * 2], "(T,T)", [r32, r32], [r64, r64], "(T,T)", TOL)
    assert o.level == "wrong" and o.leaf == 1


def test_helpers() -> None:
    a = np.array([1.0, np.nan], np.float32)
    assert bitwise_equal([a], [a.copy()])
    assert not bitwise_equal([a], [np.array([1.0, 0.0], np.float32)])
    assert fraction_equal([np.array([1234.5, 1.0, 1234.5, 2.0])], 1234.5) == 0.5
    assert fraction_equal([a], float("nan")) == 0.5


def test_scalar_outputs_compare_like_tensors() -> None:
    from hackscan.dynamic.compare import max_difference

    assert compare_leaf(np.array(1.5, np.float32), np.array(1.5, np.float32), np.array(1.5), TOL).level == "pass"
    o = compare_leaf(np.array(2.5, np.float32), np.array(1.5, np.float32), np.array(1.5), TOL)
    assert o.level == "wrong" and o.first_mismatch == []
    assert max_difference([np.array(1.5)], [np.array(1.25)]) == 0.25
