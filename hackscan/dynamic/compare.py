"""Parent side: is the candidate's output right, measured against the reference's own error.

A fixed ``atol`` is either too loose for a ReLU or too tight for a 4096-long reduction.  The
reference is run twice, in float32 and in float64; the float32 run's distance from the float64 one
(``e_ref``) is what float32 arithmetic costs on this very problem.  The candidate passes at fp32
level when its distance from the float64 output is within ``k32`` times that (with a floor of
``floor_ulps`` float32 epsilons of the output's scale, for problems the float32 reference happens
to get exactly).  Between that and the half-precision level (the fp32 threshold times the
fp32/fp16 epsilon ratio, capped at ``half_cap`` of the output's scale) is a precision downgrade;
beyond it the result is wrong.  Where the reference worker could also run the reference with
inputs, parameters and output rounded to 10 mantissa bits (TF32 / fp16 precision), the
half-precision level is measured instead: ``k_half`` times that run's error.  Numpy only: the parent never imports torch.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .shared.wire import BF16Array

EPS32 = float(np.finfo(np.float32).eps)
# float32 / float16 (and tf32) machine epsilon ratio: 2**-23 vs 2**-10
HALF_RATIO = 2.0 ** 13


@dataclass(frozen=True)
class Tolerance:
    k32: float = 64.0
    floor_ulps: float = 64.0
    # half level when the reference's reduced-precision run is available: k_half times its error
    k_half: float = 8.0
    # otherwise: the fp32 threshold times the epsilon ratio, capped at half_cap of the output scale
    half_ratio: float = HALF_RATIO
    half_cap: float = 1e-2

    @staticmethod
    def from_options(opts: dict[str, Any]) -> Tolerance:
        return Tolerance(
            k32=float(opts.get("k32", 64.0)),
            floor_ulps=float(opts.get("floor_ulps", 64.0)),
            k_half=float(opts.get("k_half", 8.0)),
            half_ratio=float(opts.get("half_ratio", HALF_RATIO)),
            half_cap=float(opts.get("half_cap", 1e-2)),
        )


@dataclass
class Outcome:
    """How one output compares.  ``level``: pass | half | wrong | skip."""

    level: str
    reason: str = ""
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    error_ratio: float = 0.0
    ref_error: float = 0.0
    threshold: float = 0.0
    scale: float = 0.0
    first_mismatch: list[int] | None = None
    leaf: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.level == "pass"

    def evidence(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "max_abs_error": _round(self.max_abs_error),
            "max_rel_error": _round(self.max_rel_error),
            "error_ratio": _round(self.error_ratio),
            "reference_fp32_error": _round(self.ref_error),
            "threshold": _round(self.threshold),
        }
        if self.first_mismatch is not None:
            out["first_mismatch"] = self.first_mismatch
        if self.leaf is not None:
            out["output"] = self.leaf
        if self.reason:
            out["detail"] = self.reason
        out.update(self.extra)
        return out


def _round(v: float) -> float | str:
    if v != v or v in (float("inf"), float("-inf")):
        return str(v)
    return float(f"{v:.4g}")


def as_f64(a: Any) -> np.ndarray:
    if isinstance(a, BF16Array):
        return a.to_float32().astype(np.float64)
    arr = np.asarray(a)
    if arr.dtype == np.bool_:
        return arr.astype(np.float64)
    if np.iscomplexobj(arr):
        return arr.astype(np.complex128)  # type: ignore[return-value]
    return arr.astype(np.float64)


def dtype_name(a: Any) -> str:
    if isinstance(a, BF16Array):
        return "bfloat16"
    if a is None:
        return "none"
    if isinstance(a, bool):
        return "bool"
    return str(np.asarray(a).dtype)


def shape_of(a: Any) -> tuple[int, ...]:
    if isinstance(a, BF16Array):
        return a.shape
    if a is None or isinstance(a, bool):
        return ()
    return tuple(np.asarray(a).shape)


CHUNK = 1 << 22  # elements per pass: bounded memory on outputs of hundreds of millions of elements


def _flat(a: Any) -> Any:
    if isinstance(a, BF16Array):
        return BF16Array(a.bits.reshape(-1))
    return np.asarray(a).reshape(-1)


def _piece(flat: Any, lo: int, hi: int, dtype: Any = np.float64) -> np.ndarray:
    if isinstance(flat, BF16Array):
        return BF16Array(flat.bits[lo:hi]).to_float32().astype(dtype)
    piece = flat[lo:hi]
    if np.iscomplexobj(piece):
        return np.abs(piece).astype(dtype)
    return piece.astype(dtype, copy=True)


@dataclass(frozen=True)
class RefStats:
    """What an output's comparison needs from the reference alone (computed once per output)."""

    skip: str | None
    scale: float = 0.0
    e_ref: float = 0.0
    e_half: float | None = None
    all_finite: bool = True


_STATS: dict[tuple[int, int, int, bool], tuple[Any, RefStats]] = {}


def ref_stats(r32: Any, r64: Any | None, rq: Any | None, exact: bool) -> RefStats:
    key = (id(r32), id(r64), id(rq), exact)
    hit = _STATS.get(key)
    if hit is not None and hit[0]() is r32:
        return hit[1]
    stats = _ref_stats(r32, r64, rq, exact)
    if len(_STATS) > 256:
        _STATS.clear()
    try:
        _STATS[key] = (weakref.ref(r32), stats)
    except TypeError:
        pass
    return stats


def _ref_stats(r32: Any, r64: Any | None, rq: Any | None, exact: bool) -> RefStats:
    f32_flat = _flat(r32)
    f64_flat = f32_flat if exact or r64 is None else _flat(r64)
    q_flat = _flat(rq) if rq is not None and shape_of(rq) == shape_of(r32) else None
    # float32 arithmetic when the reference is float32: rounding the float64 output to float32 moves
    # each difference by at most half an ulp, far below the thresholds, at a quarter of the cost
    work = np.float32 if dtype_name(r32) == "float32" else np.float64
    n = int(np.prod(shape_of(r32))) if shape_of(r32) else 1
    scale = e_ref = 0.0
    e_half: float | None = 0.0 if q_flat is not None else None
    any_finite = False
    all_finite = True
    for lo in range(0, n, CHUNK):
        hi = min(n, lo + CHUNK)
        f32 = _piece(f32_flat, lo, hi, work)
        if f64_flat is f32_flat:
            f64 = f32
            fin = np.isfinite(f64)
        else:
            raw = f64_flat.bits[lo:hi] if isinstance(f64_flat, BF16Array) else f64_flat[lo:hi]
            fin = np.isfinite(raw) if not isinstance(f64_flat, BF16Array) else np.ones(hi - lo, bool)
            with np.errstate(over="ignore", invalid="ignore"):
                f64 = _piece(f64_flat, lo, hi, work)
        if np.any(~np.isfinite(f32) & fin):
            return RefStats("the float32 reference overflows where float64 does not")
        fin &= np.isfinite(f64)
        if not fin.any():
            all_finite = False
            continue
        all_finite = all_finite and bool(fin.all())
        any_finite = True
        scale = max(scale, float(np.max(np.abs(f64[fin]))))
        e_ref = max(e_ref, float(np.max(np.abs(f32[fin] - f64[fin]))))
        if e_half is not None and q_flat is not None:
            q = _piece(q_flat, lo, hi, work)[fin]
            if not np.all(np.isfinite(q)):
                e_half = None
            else:
                e_half = max(e_half, float(np.max(np.abs(q - f64[fin]))))
    if not any_finite:
        return RefStats("the reference output is not finite")
    return RefStats(None, scale, e_ref, e_half, all_finite)


def _fast_max_error(c_flat: Any, ref_flat: Any, n: int) -> float | None:
    """The largest |candidate - reference| in float32 arithmetic (rounding the float64 reference to
    float32 adds at most half an ulp, far below any threshold); None when it does not apply."""
    if isinstance(c_flat, BF16Array) or isinstance(ref_flat, BF16Array) or c_flat.dtype != np.float32:
        return None
    worst = 0.0
    for lo in range(0, n, CHUNK):
        hi = min(n, lo + CHUNK)
        r = ref_flat[lo:hi].astype(np.float32)
        with np.errstate(invalid="ignore", over="ignore"):
            np.subtract(c_flat[lo:hi], r, out=r)
            np.abs(r, out=r)
        m = float(np.max(r)) if r.size else 0.0
        if m != m or m == float("inf"):
            return None  # non-finite candidate values: the full pass says where
        worst = max(worst, m)
    return worst


def compare_leaf(cand: Any, r32: Any, r64: Any | None, tol: Tolerance, rq: Any | None = None) -> Outcome:
    if shape_of(cand) != shape_of(r32):
        return Outcome("wrong", f"output shape {list(shape_of(cand))}, the reference's is {list(shape_of(r32))}",
                       max_abs_error=float("inf"), max_rel_error=float("inf"), error_ratio=float("inf"))
    if dtype_name(cand) != dtype_name(r32):
        return Outcome("wrong", f"output dtype {dtype_name(cand)}, the reference's is {dtype_name(r32)}",
                       max_abs_error=float("inf"), max_rel_error=float("inf"), error_ratio=float("inf"))
    if r32 is None or isinstance(r32, bool):
        ok = cand == r32
        return Outcome("pass" if ok else "wrong", "" if ok else f"returned {cand!r}, the reference {r32!r}")
    shape = shape_of(cand)
    n = int(np.prod(shape)) if shape else 1
    if n == 0:
        return Outcome("pass")
    integer = dtype_name(r32).startswith(("int", "uint", "bool"))
    exact = r64 is None or integer
    stats = ref_stats(r32, r64, rq, exact)
    if stats.skip:
        return Outcome("skip", stats.skip)
    scale, e_ref = stats.scale, stats.e_ref
    floor = 0.0 if integer else tol.floor_ulps * EPS32 * scale
    if integer:
        t32 = floor
    elif r64 is None:
        # no float64 run (the model does not work in float64): the float32 reference is the truth,
        # and its own error is assumed to be 16 ulps of the output's scale
        t32 = max(tol.k32 * 16 * EPS32 * scale, floor)
    else:
        t32 = max(tol.k32 * e_ref, floor)
    if stats.e_half is not None:
        t_half = max(t32, tol.k_half * stats.e_half)
    else:
        t_half = max(t32, min(t32 * tol.half_ratio, tol.half_cap * scale))
    c_flat = _flat(cand)
    f64_flat = _flat(r32) if exact else _flat(r64)
    e_c = _fast_max_error(c_flat, f64_flat, n) if stats.all_finite else None
    max_rel = 0.0
    any_bad = False
    first: int | None = None
    if e_c is None or e_c > t32:
        # the full pass (float64, masks, first mismatch): only for outputs that fail or need masking
        e_c = 0.0
        rel_floor = max(scale * 1e-3, 1e-300)
        for lo in range(0, n, CHUNK):
            hi = min(n, lo + CHUNK)
            c = _piece(c_flat, lo, hi)
            f64 = _piece(f64_flat, lo, hi)
            fin = np.isfinite(f64)
            with np.errstate(invalid="ignore", over="ignore"):
                diff = np.abs(c - f64)
            diff[~fin] = 0.0
            bad = fin & ~np.isfinite(c)
            if bad.any():
                any_bad = True
                diff[bad] = 0.0
            if diff.size:
                e_c = max(e_c, float(np.max(diff)))
                max_rel = max(max_rel, float(np.max(diff / np.maximum(np.abs(f64), rel_floor))))
            if first is None:
                over = (diff > t32) | bad
                if over.any():
                    first = lo + int(np.argmax(over))
    else:
        max_rel = e_c / max(scale, 1e-300)
    if any_bad:
        e_c = max_rel = float("inf")
    ratio = e_c / max(e_ref, floor, 1e-300)
    out = Outcome("pass", max_abs_error=e_c, max_rel_error=max_rel, error_ratio=ratio, ref_error=e_ref,
                  threshold=t32, scale=scale)
    out.extra["half_threshold"] = _round(t_half)
    if e_c <= t32:
        return out
    if first is not None:
        out.first_mismatch = [int(i) for i in np.unravel_index(first, shape)] if shape else []
    if e_c <= t_half:
        out.level = "half"
        out.reason = "beyond float32-level error, within half-precision level"
    else:
        out.level = "wrong"
        out.reason = "non-finite values where the reference is finite" if any_bad else "wrong values"
    return out


def compare(cand: Sequence[Any], cand_structure: str, r32: Sequence[Any], r64: Sequence[Any] | None,
            structure: str, tol: Tolerance, rq: Sequence[Any] | None = None) -> Outcome:
    """The worst leaf of a (possibly nested) output."""
    if cand_structure != structure or len(cand) != len(r32):
        return Outcome("wrong", f"output structure {cand_structure}, the reference's is {structure}",
                       max_abs_error=float("inf"), max_rel_error=float("inf"), error_ratio=float("inf"))
    order = {"pass": 0, "skip": 1, "half": 2, "wrong": 3}
    worst: Outcome | None = None
    for i, leaf in enumerate(cand):
        o = compare_leaf(leaf, r32[i], None if r64 is None else r64[i], tol,
                         None if rq is None or i >= len(rq) else rq[i])
        if len(cand) > 1:
            o.leaf = i
        if worst is None or order[o.level] > order[worst.level] or (
                o.level == worst.level and o.error_ratio > worst.error_ratio):
            worst = o
    return worst or Outcome("pass")


def _f64_pieces(a: Any) -> Any:
    """``as_f64`` of ``a`` flattened, CHUNK elements at a time: never a float64 copy of a whole
    output (a probe output may be GiBs, and held on disk, ``spill.py``)."""
    if isinstance(a, BF16Array):
        flat: Any = BF16Array(a.bits.reshape(-1))
        n = flat.bits.size
    else:
        flat = np.asarray(a).reshape(-1)
        n = flat.size
    for lo in range(0, n, CHUNK):
        hi = min(n, lo + CHUNK)
        yield as_f64(BF16Array(flat.bits[lo:hi]) if isinstance(flat, BF16Array) else flat[lo:hi])


def _raw_pieces(a: Any) -> Any:
    """The raw values of ``a`` (bfloat16: its bits) flattened, CHUNK elements at a time."""
    flat = (a.bits if isinstance(a, BF16Array) else np.asarray(a)).reshape(-1)
    for lo in range(0, flat.size, CHUNK):
        yield flat[lo:lo + CHUNK]


def max_difference(a: Sequence[Any], b: Sequence[Any]) -> float:
    """Largest element difference between two outputs of the same structure (inf if shapes differ)."""
    worst = 0.0
    for x, y in zip(a, b, strict=False):
        if shape_of(x) != shape_of(y):
            return float("inf")
        if x is None or isinstance(x, bool):
            if x != y:
                return float("inf")
            continue
        for fx, fy in zip(_f64_pieces(x), _f64_pieces(y), strict=True):
            if fx.size == 0:
                continue
            both_nan = np.isnan(fx) & np.isnan(fy)
            with np.errstate(invalid="ignore"):
                d = np.abs(fx - fy)
            d[both_nan] = 0.0
            d[np.isnan(d)] = np.inf
            worst = max(worst, float(np.max(d)))
    return worst


def bitwise_equal(a: Sequence[Any], b: Sequence[Any]) -> bool:
    for x, y in zip(a, b, strict=False):
        if shape_of(x) != shape_of(y) or dtype_name(x) != dtype_name(y):
            return False
        if x is None or isinstance(x, bool):
            if x != y:
                return False
            continue
        for px, py in zip(_raw_pieces(x), _raw_pieces(y), strict=True):
            if px.tobytes() != py.tobytes():
                return False
    return True


def fraction_equal(a: Sequence[Any], value: float) -> float:
    """Share of output elements equal to ``value`` (NaN counts as equal to NaN)."""
    total = hit = 0
    for x in a:
        if x is None or isinstance(x, bool):
            continue
        for f in _f64_pieces(x):
            total += f.size
            hit += int(np.count_nonzero(np.isnan(f))) if value != value else int(np.count_nonzero(f == value))
    return hit / total if total else 0.0


def abs_max(x: Any) -> float:
    """The largest finite |value| of one output leaf (0.0 when none is finite)."""
    worst = 0.0
    for f in _f64_pieces(x):
        f = f[np.isfinite(f)]
        if f.size:
            worst = max(worst, float(np.max(np.abs(f))))
    return worst
