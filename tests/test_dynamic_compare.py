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


def _whole(a, b, value):
    """The whole-array definitions the chunked helpers replaced (issue 16, item 5): the oracle.
    The difference of a and b; the share of b equal to value, and b's largest finite |value|."""
    from hackscan.dynamic.compare import as_f64

    fx, fy = np.atleast_1d(as_f64(a)), np.atleast_1d(as_f64(b))
    both_nan = np.isnan(fx) & np.isnan(fy)
    with np.errstate(invalid="ignore"):
        d = np.abs(fx - fy)
    d[both_nan] = 0.0
    d[np.isnan(d)] = np.inf
    diff = float(np.max(d)) if d.size else 0.0
    frac = (int(np.count_nonzero(np.isnan(fy))) if value != value else int(np.count_nonzero(fy == value))) / fy.size
    fin = fy[np.isfinite(fy)]
    return diff, frac, float(np.max(np.abs(fin))) if fin.size else 0.0


@pytest.mark.parametrize("kind", ["float32", "complex64", "bfloat16", "nan"])
def test_chunked_helpers_equal_the_whole_array_definitions(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """max_difference, fraction_equal, bitwise_equal and abs_max read an output CHUNK elements at a
    time, so the parent never makes a float64 copy of a whole output; the answers are the same."""
    import hackscan.dynamic.compare as cmp
    from hackscan.dynamic.compare import abs_max, max_difference
    from hackscan.dynamic.shared.wire import BF16Array

    monkeypatch.setattr(cmp, "CHUNK", 7)  # many pieces, the last one short
    rng = np.random.default_rng(3)
    a = rng.standard_normal((5, 11)).astype(np.float32)
    b = a.copy()
    b[3, 4] += 0.5
    b[0, 0] = 0.25
    value = 0.25
    if kind == "complex64":
        a = (a + 1j * a[::-1]).astype(np.complex64)
        b = (b + 1j * a.imag).astype(np.complex64)
    elif kind == "nan":
        a[1, 2] = b[1, 2] = np.nan  # both NaN: no difference
        b[4, 10] = np.nan  # NaN on one side only: infinite
        value = float("nan")
    if kind == "bfloat16":
        a16 = BF16Array((a.view(np.uint32) >> 16).astype(np.uint16))
        b16 = BF16Array((b.view(np.uint32) >> 16).astype(np.uint16))
        want = _whole(a16.to_float32(), b16.to_float32(), value)
        a, b = a16, b16
    else:
        want = _whole(a, b, value)
    assert max_difference([a], [b]) == want[0]
    assert fraction_equal([b], value) == want[1]
    assert abs_max(b) == want[2]
    assert bitwise_equal([a], [a]) and not bitwise_equal([a], [b])
    assert max_difference([a], [a]) == 0.0
