"""Summary statistics of a timing series, without numpy (the parent side stays import-light)."""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile of an already sorted list (numpy's default method)."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = math.ceil(pos)
    if lo == hi:
        return sorted_values[lo]
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(values: Iterable[float]) -> dict[str, Any]:
    """Median and spread of a series in its own unit: n, median, p10/p25/p75/p90, min, max, mean, std, iqr."""
    vals = sorted(float(v) for v in values if v is not None and math.isfinite(float(v)))
    n = len(vals)
    if n == 0:
        return {"n": 0}
    mean = sum(vals) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1)) if n > 1 else 0.0
    p25, p75 = quantile(vals, 0.25), quantile(vals, 0.75)
    return {
        "n": n,
        "median": quantile(vals, 0.5),
        "p10": quantile(vals, 0.1),
        "p25": p25,
        "p75": p75,
        "p90": quantile(vals, 0.9),
        "min": vals[0],
        "max": vals[-1],
        "mean": mean,
        "std": std,
        "iqr": p75 - p25,
    }


def median_of(stats: Mapping[str, Any] | None) -> float | None:
    if not stats or not stats.get("n"):
        return None
    value = stats.get("median")
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0 or not math.isfinite(numerator):
        return None
    return numerator / denominator
