"""Summary statistics of a timing series, without numpy (the parent side stays import-light)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any


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


# a series is cut into this many consecutive blocks; each statistic's interval also spans the
# blocks' own statistics (see drift_widened)
BLOCKS = 5
MIN_BLOCK = 4


def drift_widened(ordered: list[float], key: str, ci: tuple[float, float]) -> tuple[float, float]:
    """``ci`` widened to the range of the statistic over consecutive blocks of the series (in time
    order).  The order-statistic intervals assume independent calls; on a shared host the load
    drifts, and a stretch of slow calls that repeat one another narrows them around the wrong
    value (five scans of one kernel measured 0.66-1.23x, 13 of 20 outside each other's intervals).
    The blocks' spread is the drift the series saw; it is part of the uncertainty."""
    n = len(ordered)
    if n < BLOCKS * MIN_BLOCK:
        return ci
    size = n / BLOCKS
    stats = []
    for b in range(BLOCKS):
        block = sorted(ordered[round(b * size):round((b + 1) * size)])
        stats.append(block[0] if key == "min" else quantile(block, 0.5))
    return (min(ci[0], min(stats)), max(ci[1], max(stats)))


def summarize(values: Iterable[float]) -> dict[str, Any]:
    """Median and spread of a series in its own unit: n, median, p10/p25/p75/p90, min, max, mean, std, iqr."""
    ordered = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    vals = sorted(ordered)
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
        # where the statistic would land on a re-run (see interval_of): the speedups' intervals
        # are built from these
        "median_ci": list(drift_widened(ordered, "median", median_interval(vals))),
        "min_ci": list(drift_widened(ordered, "min", min_interval(vals))),
    }


# Each series' statistic gets a 95 % interval; a ratio of two statistics takes the extreme
# combination of its two intervals, so (Bonferroni) it covers the ratio at least 90 % of the time.
SERIES_CONFIDENCE = 0.95
RATIO_CONFIDENCE = 0.90


def median_interval(sorted_values: list[float], confidence: float = SERIES_CONFIDENCE) -> tuple[float, float]:
    """Distribution-free interval of the median from order statistics: the true median lies between
    the l-th and u-th smallest values with probability >= ``confidence`` whatever the distribution
    (bimodal CPU series included).  Below 6 values no pair of order statistics reaches 95 %: the
    whole range is returned, which is then the honest statement."""
    n = len(sorted_values)
    if n == 0:
        return (math.nan, math.nan)
    alpha = (1.0 - confidence) / 2
    # the l-th smallest value (1-based) lies above the median with probability P(Bin(n, 1/2) < l):
    # lo (0-based) is the largest j with P(Bin(n, 1/2) <= j) <= alpha, accumulated in log space
    # so thousands of calls do not overflow
    log_half_n = n * math.log(0.5)
    cdf, j = 0.0, -1
    while j + 1 <= (n - 1) // 2:
        nxt = cdf + math.exp(math.lgamma(n + 1) - math.lgamma(j + 2) - math.lgamma(n - j) + log_half_n)
        if nxt > alpha:
            break
        cdf, j = nxt, j + 1
    lo = max(j, 0)
    hi = n - 1 - lo  # symmetric: Bin(n, 1/2) is
    return (sorted_values[lo], sorted_values[hi])


def min_interval(sorted_values: list[float], confidence: float = SERIES_CONFIDENCE) -> tuple[float, float]:
    """Interval of the minimum (the CPU statistic): the percentile bootstrap's, computed exactly
    instead of by resampling (so it needs no random numbers and a re-run prints the same).  A
    resampled minimum is never below the observed one and exceeds the k-th smallest value with
    probability ((n - k) / n) ** n, so the upper end is the first order statistic past which that
    falls to (1 - confidence) / 2.  A minimum reached once among slow calls (a lucky call on a
    preempted CPU) gets a wide interval; one that the next calls repeat gets a tight one."""
    n = len(sorted_values)
    if n == 0:
        return (math.nan, math.nan)
    alpha = (1.0 - confidence) / 2
    k = 1
    while k < n and ((n - k) / n) ** n > alpha:
        k += 1
    return (sorted_values[0], sorted_values[k - 1] if k <= n else sorted_values[-1])


def interval_of(stats: Mapping[str, Any] | None, key: str) -> tuple[float, float] | None:
    """The interval summarize() stored for ``key`` ("median" or "min"), if it is finite."""
    if not stats or not stats.get("n"):
        return None
    ci = stats.get(key + "_ci")
    if not isinstance(ci, (list, tuple)) or len(ci) != 2:
        return None
    lo, hi = ci
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (lo, hi)):
        return None
    return (float(min(lo, hi)), float(max(lo, hi)))


def ratio_interval(numerator: tuple[float, float] | None,
                   denominator: tuple[float, float] | None) -> tuple[float, float] | None:
    """Interval of numerator / denominator from the two intervals: the extreme combinations."""
    if numerator is None or denominator is None or denominator[0] <= 0 or numerator[0] < 0:
        return None
    return (numerator[0] / denominator[1], numerator[1] / denominator[0])


def median_of(stats: Mapping[str, Any] | None) -> float | None:
    if not stats or not stats.get("n"):
        return None
    value = stats.get("median")
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0 or not math.isfinite(numerator):
        return None
    return numerator / denominator


# ----------------------------------------------------------------------------- paired speedups
# A speedup taken from two absolute times measured seconds apart moves with the host's load (on a
# shared 2-core machine absolute times swing 2x, and five scans of one kernel gave 0.66-1.23x).
# Timed in short alternating blocks (candidate, baseline, baseline, candidate, ...), both sides of a
# pair see nearly the same load, so the ratio of a pair cancels most of it; the speedup is then a
# statistic over pairs, and its interval comes from the pairs' own scatter.
PAIR_CONFIDENCE = 0.95
# the pairs are split into this many consecutive groups; the interval also spans the groups' medians
# (see paired_speedup), at least MIN_GROUP pairs each.  Quarters, not halves: on the shared 2-core
# host the ratio of one clean kernel moved by +-5 % between quarters of one run (0.81-0.88x) while
# the halves agreed, and five runs' figures spread as far (0.85-0.99x); halves hid that
PAIR_GROUPS = 4
MIN_GROUP = 4


def block_statistic(values: Iterable[float], statistic: str) -> float | None:
    """One block's time: its minimum (CPU: preemption only adds time) or its median (GPU events)."""
    vals = sorted(float(v) for v in values if v is not None and math.isfinite(float(v)) and float(v) > 0)
    if not vals:
        return None
    return vals[0] if statistic == "min" else quantile(vals, 0.5)


def paired_speedup(pairs: Iterable[tuple[float, float]], confidence: float = PAIR_CONFIDENCE) -> dict[str, Any]:
    """The speedup from ``(baseline, candidate)`` block times in time order, one pair per round.

    Each pair gives a log-ratio log(baseline / candidate).  The speedup is exp of their median; its
    interval the order-statistic interval of that median (distribution-free: a bimodal scatter from
    preemption is fine).  The order-statistic interval assumes the pairs are independent draws of
    one ratio; when the ratio itself moves during the run (one side suffers more from the load that
    came, a thermal or frequency step) the pairs are not, and consecutive groups of pairs (quarters
    of the run) disagree.  The interval is then widened to span every group's median: the drift the run saw is part of
    what a re-run may see.  ``rerun_ci`` is where a repeat's figure should land: the interval's
    half-widths scaled by sqrt(2) (a re-run's median carries the same scatter as this one's, and
    the difference of two carries twice the variance).  Returns ``{"n": 0}`` without usable pairs.
    """
    logs = [math.log(b / c) for b, c in pairs
            if isinstance(b, (int, float)) and isinstance(c, (int, float)) and math.isfinite(b) and math.isfinite(c)
            and b > 0 and c > 0]
    n = len(logs)
    if n == 0:
        return {"n": 0}
    ordered = sorted(logs)
    med = quantile(ordered, 0.5)
    lo, hi = median_interval(ordered, confidence)
    groups: list[float] = []
    if n >= PAIR_GROUPS * MIN_GROUP:
        size = n / PAIR_GROUPS
        groups = [quantile(sorted(logs[round(g * size):round((g + 1) * size)]), 0.5) for g in range(PAIR_GROUPS)]
    w_lo, w_hi = min([lo, *groups]), max([hi, *groups])
    spread = max(1.0 - math.exp(w_lo - med), math.exp(w_hi - med) - 1.0)
    root2 = math.sqrt(2.0)
    return {
        "n": n,
        "speedup": math.exp(med),
        "ci": [math.exp(w_lo), math.exp(w_hi)],
        "confidence": confidence,
        # the larger side of the interval, relative to the speedup: what the stopping rule targets
        "spread": spread,
        "rerun_ci": [math.exp(med - root2 * (med - w_lo)), math.exp(med + root2 * (w_hi - med))],
        "order_ci": [math.exp(lo), math.exp(hi)],
        "group_speedups": [math.exp(g) for g in groups],
        "widened_by_drift": w_lo < lo or w_hi > hi,
    }


def agreement(points: list[float], intervals: list[tuple[float, float] | list[float] | None]) -> dict[str, Any]:
    """Do repeated measurements of one figure stay within the spread each states?  For every
    ordered pair of runs (i, j), i != j: is run i's point estimate inside run j's stated interval?
    ``holds`` only when all of them are (a run without an interval counts as a miss: it stated
    nothing to hold to).  Also counts the looser reading, every point inside the first run's
    interval."""
    total = inside = 0
    misses: list[tuple[int, int]] = []
    for i, p in enumerate(points):
        for j, ci in enumerate(intervals):
            if i == j:
                continue
            total += 1
            if ci is not None and len(ci) == 2 and min(ci) <= p <= max(ci):
                inside += 1
            else:
                misses.append((i, j))
    first = intervals[0] if intervals else None
    in_first = sum(1 for p in points[1:] if first is not None and min(first) <= p <= max(first))
    return {"inside": inside, "total": total, "holds": total > 0 and inside == total, "misses": misses,
            "inside_first": in_first, "total_first": max(len(points) - 1, 0)}
