"""Intervals in words a triager can read.

An interval from too few samples (two pairs of worker processes, rounds that disagree) can span
0.00-7714x around a 1.05x figure: printed as numbers it reads as a measurement.  Whenever an
interval is wider than the figure it qualifies (or reaches zero, or is not finite) the reports say
"too noisy to tell" instead; the numbers stay in the JSON report and in the detailed block
(``--perf-stats``)."""

from __future__ import annotations

import math
from typing import Any

TOO_NOISY = "too noisy to tell"


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def too_noisy(value: Any, ci: Any) -> bool:
    """Whether ``ci`` (lo, hi) is too wide to print around ``value``: not two finite numbers, a
    bound at or below zero, or a width larger than the figure itself."""
    if not _number(value) or not isinstance(ci, (list, tuple)) or len(ci) != 2:
        return True
    lo, hi = ci
    if not (_number(lo) and _number(hi)) or lo <= 0 or hi < lo:
        return True
    return hi - lo > abs(value)


def interval(value: Any, ci: Any, conf: Any = None, unit: str = "x", word: str = ":") -> str:
    """`` [95%: 0.98-1.12x]`` (``word`` after the confidence) for a usable interval,
    `` (too noisy to tell)`` for one that is not, ``""`` when there is none."""
    if ci is None:
        return ""
    if too_noisy(value, ci):
        return f" ({TOO_NOISY})"
    conf_s = f"{conf:.0%}{word} " if _number(conf) else ""
    return f" [{conf_s}{ci[0]:.2f}-{ci[1]:.2f}{unit}]"


def spread(rel: Any) -> str:
    """``+-3.2%`` for a relative half-width below 100 %, the words otherwise."""
    if not _number(rel) or rel < 0 or rel >= 1.0:
        return TOO_NOISY
    return f"+-{rel:.1%}"
