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

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .wire import BF16Array

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
    c = as_f64(cand)
    f32 = as_f64(r32)
    exact = r64 is None or dtype_name(r32) in ("int64", "int32", "int16", "int8", "uint8", "bool")
    f64 = f32 if exact else as_f64(r64)
    if c.size == 0:
        return Outcome("pass")
    fin64 = np.isfinite(f64)
    if np.any(~np.isfinite(f32) & fin64):
        return Outcome("skip", "the float32 reference overflows where float64 does not")
    if not fin64.any():
        return Outcome("skip", "the reference output is not finite")
    d_ref = np.abs(f32 - f64)
    d_ref[~fin64] = 0.0
    diff = np.abs(c - f64)
    bad_nonfinite = fin64 & ~np.isfinite(c)
    diff[~fin64] = 0.0
    scale = float(np.max(np.abs(np.where(fin64, f64, 0.0))))
    e_ref = float(np.max(d_ref))
    e_c = float(np.max(np.where(bad_nonfinite, 0.0, diff)))
    if bad_nonfinite.any():
        e_c = float("inf")
    if exact:
        floor = 0.0 if dtype_name(r32).startswith(("int", "uint", "bool")) else tol.floor_ulps * EPS32 * scale
        t32 = floor
    else:
        floor = tol.floor_ulps * EPS32 * scale
        t32 = max(tol.k32 * e_ref, floor)
    denom = max(e_ref, floor, 1e-300)
    ratio = e_c / denom
    e_half = _half_error(rq, f64, fin64)
    if e_half is not None:
        t_half = max(t32, tol.k_half * e_half)
    else:
        t_half = max(t32, min(t32 * tol.half_ratio, tol.half_cap * scale))
    rel_den = np.maximum(np.abs(f64), max(scale * 1e-3, 1e-300))
    with np.errstate(invalid="ignore", over="ignore"):
        rel = diff / rel_den
        rel[bad_nonfinite] = np.inf
    out = Outcome("pass", max_abs_error=e_c, max_rel_error=float(np.max(rel)), error_ratio=ratio, ref_error=e_ref,
                  threshold=t32, scale=scale)
    out.extra["half_threshold"] = _round(t_half)
    if e_c <= t32:
        return out
    over = (diff > t32) | bad_nonfinite
    idx = int(np.argmax(over.reshape(-1)))
    out.first_mismatch = [int(i) for i in np.unravel_index(idx, c.shape)] if c.ndim else []
    if e_c <= t_half:
        out.level = "half"
        out.reason = "beyond float32-level error, within half-precision level"
    else:
        out.level = "wrong"
        out.reason = "non-finite values where the reference is finite" if bad_nonfinite.any() else "wrong values"
    return out


def _half_error(rq: Any | None, f64: np.ndarray, fin64: np.ndarray) -> float | None:
    """The reduced-precision reference's error, when it ran and gave a finite, same-shaped output."""
    if rq is None or shape_of(rq) != tuple(f64.shape):
        return None
    q = as_f64(rq)
    if not np.all(np.isfinite(q[fin64])):
        return None
    d = np.abs(q - f64)
    d[~fin64] = 0.0
    return float(np.max(d)) if d.size else 0.0


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
        fx, fy = as_f64(x), as_f64(y)
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
        xa = x.bits if isinstance(x, BF16Array) else np.asarray(x)
        ya = y.bits if isinstance(y, BF16Array) else np.asarray(y)
        if xa.tobytes() != ya.tobytes():
            return False
    return True


def fraction_equal(a: Sequence[Any], value: float) -> float:
    """Share of output elements equal to ``value`` (NaN counts as equal to NaN)."""
    total = hit = 0
    for x in a:
        if x is None or isinstance(x, bool):
            continue
        f = as_f64(x)
        total += f.size
        hit += int(np.count_nonzero(np.isnan(f))) if value != value else int(np.count_nonzero(f == value))
    return hit / total if total else 0.0
