"""Compare output fingerprints from two children (pure Python: this runs in the parent)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


def _num(v: Any) -> float:
    if isinstance(v, str):
        return float(v)  # "nan", "inf", "-inf"
    if v is None:
        return math.nan
    return float(v)


@dataclass
class Agreement:
    """How far one call's candidate outputs are from the reference's."""

    ok: bool
    reason: str = ""
    # the worst |c - r| / (atol + rtol * |r|) over the sampled positions (<= 1 means within tolerance)
    worst_excess: float = 0.0
    # fraction of sampled positions outside tolerance
    bad_fraction: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def gross(self) -> bool:
        """Far outside tolerance (or the wrong shape, count or kind): not a rounding difference."""
        if self.ok:
            return False
        if self.reason in ("values", "sum"):
            return self.worst_excess >= 10.0
        return True


def compare_one(cand: Mapping[str, Any], ref: Mapping[str, Any], atol: float, rtol: float) -> Agreement:
    if "value" in ref or "value" in cand:
        cv, rv = _num(cand.get("value")), _num(ref.get("value"))
        same = (math.isnan(cv) and math.isnan(rv)) or abs(cv - rv) <= atol + rtol * abs(rv)
        return Agreement(same, "" if same else "scalar", 0.0 if same else math.inf)
    if "shape" not in cand or "shape" not in ref:
        return Agreement(False, "type", math.inf, 1.0, {"candidate": cand.get("type"), "reference": ref.get("type")})
    if list(cand["shape"]) != list(ref["shape"]):
        return Agreement(False, "shape", math.inf, 1.0, {"candidate": cand["shape"], "reference": ref["shape"]})
    cs, rs = cand.get("samples", []), ref.get("samples", [])
    if len(cs) != len(rs):
        return Agreement(False, "samples", math.inf, 1.0)
    worst, bad = 0.0, 0
    first_bad: int | None = None
    for i, (c, r) in enumerate(zip(cs, rs, strict=False)):
        c, r = _num(c), _num(r)
        if math.isnan(r) or math.isnan(c):
            ok = math.isnan(r) and math.isnan(c)
            excess = 0.0 if ok else math.inf
        elif math.isinf(r) or math.isinf(c):
            ok = c == r
            excess = 0.0 if ok else math.inf
        else:
            excess = abs(c - r) / (atol + rtol * abs(r))
            ok = excess <= 1.0
        worst = max(worst, excess)
        if not ok:
            bad += 1
            if first_bad is None:
                first_bad = i
    n = max(1, len(rs))
    details: dict[str, Any] = {}
    if first_bad is not None:
        details["first_bad_sample"] = first_bad
    if bad:
        return Agreement(False, "values", worst, bad / n, details)
    # the samples agree; the sums catch a stale or unwritten block between the sampled positions
    numel = int(ref.get("numel", 0)) or 1
    c_sum, r_sum, r_abs = _num(cand.get("sum")), _num(ref.get("sum")), _num(ref.get("abs_sum"))
    if cand.get("nonfinite", 0) != ref.get("nonfinite", 0):
        return Agreement(False, "nonfinite", math.inf, 0.0, {"candidate": cand.get("nonfinite"), "reference": ref.get("nonfinite")})
    if all(math.isfinite(v) for v in (c_sum, r_sum, r_abs)):
        allowed = rtol * r_abs + atol * numel
        if abs(c_sum - r_sum) > allowed:
            return Agreement(False, "sum", abs(c_sum - r_sum) / max(allowed, 1e-30), 0.0,
                             {"candidate_sum": c_sum, "reference_sum": r_sum})
    return Agreement(True, "", worst, 0.0)


def compare_outputs(cand: Sequence[Mapping[str, Any]], ref: Sequence[Mapping[str, Any]],
                    atol: float, rtol: float) -> Agreement:
    """All outputs of one call must agree; the first disagreement is returned."""
    if len(cand) != len(ref):
        return Agreement(False, "count", math.inf, 1.0, {"candidate": len(cand), "reference": len(ref)})
    worst = 0.0
    for i, (c, r) in enumerate(zip(cand, ref, strict=False)):
        a = compare_one(c, r, atol, rtol)
        if not a.ok:
            a.details["output"] = i
            return a
        worst = max(worst, a.worst_excess)
    return Agreement(True, "", worst)
