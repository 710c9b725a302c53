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


# ----------------------------------------------------------------------------- between processes
# Within one pair of worker processes the paired rounds agree to about +-4 %, yet five scans of one
# clean kernel on the shared 2-core host spread with log sd 0.074 (0.70-0.91x): each pair of
# processes carries a bias of its own for as long as it lives (where the scheduler placed it, how
# its allocator laid out the buffers, how its code happened to be aligned), and no statistic over
# that pair's rounds can see a bias that is constant over them.  So one scan times several pairs
# of fresh processes; each pair gives its own paired speedup, and the headline is combined over
# pairs, its interval from the spread between them (the process-to-process variance is in it).
# Measured there with 2 s of rounds a pair: 75 pairs of processes spread with log sd 0.106
# (docs/measured.md), a pair's own rounds accounting for about 0.06 of it.
PROCESS_CONFIDENCE = 0.95
# A re-run's figure is checked against this one's in every ordered pair of five scans (twenty
# checks, benchmarks/timing_repeat.py): at 95 % one of twenty misses on average, so the stated
# re-run interval is a 99 % prediction interval.
RERUN_CONFIDENCE = 0.99
_Z975 = 1.959963984540054


def t_two_sided(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with ``df`` (a positive integer) degrees of freedom, exactly
    (Abramowitz and Stegun 26.7.3-4: a finite sum in cos^2 of atan(t / sqrt(df)))."""
    if df < 1:
        raise ValueError("df must be a positive integer")
    if t <= 0:
        return 0.0
    if math.isinf(t):
        return 1.0
    theta = math.atan(t / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df == 1:
        return 2.0 / math.pi * theta
    if df % 2 == 1:
        total, term = 1.0, 1.0
        for k in range(1, (df - 3) // 2 + 1):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        return 2.0 / math.pi * (theta + s * math.cos(theta) * total)
    total, term = 1.0, 1.0
    for k in range(1, (df - 2) // 2 + 1):
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return s * total


def t_quantile(confidence: float, df: int) -> float:
    """The t such that P(|T| < t) = ``confidence`` for ``df`` degrees of freedom (two-sided), by
    bisection on ``t_two_sided``: no scipy on the parent side."""
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must be in (0, 1)")
    lo, hi = 0.0, 1.0
    while t_two_sided(hi, df) < confidence:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_two_sided(mid, df) < confidence:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2


def between_processes(rows: list[Mapping[str, Any]], confidence: float = PROCESS_CONFIDENCE,
                      rerun_confidence: float = RERUN_CONFIDENCE) -> dict[str, Any]:
    """Combine the paired speedups of k independent pairs of worker processes (``paired_speedup``
    rows, one per pair) into one figure whose interval holds the spread between processes.

    Each pair gives m_i, the log of its speedup.  The headline is exp(mean m_i).  A pair's m_i
    scatters by its own rounds' noise plus the bias that pair of processes carries (a random
    effect); the sample variance of the m_i estimates both together, so the t-interval over them
    is the random-effects interval with equal weights (the pairs time for about as long each).
    With few pairs the sample variance is itself uncertain, and a low draw of it would state an
    interval narrower than even one pair's own rounds justify: the variance used is never below
    the mean within-pair variance (each pair's 95 % interval read as +-1.96 standard errors),
    since Var(m_i) is at least that.  ``rerun_ci`` is the prediction interval of a re-run's
    figure (another k pairs): t at ``rerun_confidence`` times s * sqrt(2 / k).

    Fewer than two usable pairs: no between-process spread is known; the one pair's own interval
    is returned with ``between_processes`` false (what a reader must not take as the whole
    uncertainty).  Returns ``{"k": 0}`` without a usable pair."""
    ms: list[float] = []
    within: list[float] = []
    for row in rows:
        sp, ci = row.get("speedup") if row else None, row.get("ci") if row else None
        if not isinstance(sp, (int, float)) or not sp > 0 or not math.isfinite(sp):
            continue
        m = math.log(sp)
        ms.append(m)
        if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(isinstance(v, (int, float)) and v > 0 for v in ci):
            within.append(max(m - math.log(min(ci)), math.log(max(ci)) - m) / _Z975)
    k = len(ms)
    if k == 0:
        return {"k": 0}
    mean = sum(ms) / k
    s_within = math.sqrt(sum(w * w for w in within) / len(within)) if within else 0.0
    out: dict[str, Any] = {"k": k, "speedup": math.exp(mean), "process_speedups": [math.exp(m) for m in ms],
                           "confidence": confidence, "rerun_confidence": rerun_confidence,
                           "within_sd": s_within}
    if k < 2:
        row = next(r for r in rows if r and isinstance(r.get("speedup"), (int, float)) and r["speedup"] > 0)
        ci = list(row.get("ci") or [out["speedup"], out["speedup"]])
        rr = list(row.get("rerun_ci") or ci)
        out.update(ci=ci, rerun_ci=rr, between_processes=False, between_sd=None, sd=s_within,
                   spread=max(1.0 - min(ci) / out["speedup"], max(ci) / out["speedup"] - 1.0))
        return out
    s_between = math.sqrt(sum((m - mean) ** 2 for m in ms) / (k - 1))
    sd = max(s_between, s_within)
    half = t_quantile(confidence, k - 1) * sd / math.sqrt(k)
    rerun_half = t_quantile(rerun_confidence, k - 1) * sd * math.sqrt(2.0 / k)
    out.update(ci=[math.exp(mean - half), math.exp(mean + half)],
               rerun_ci=[math.exp(mean - rerun_half), math.exp(mean + rerun_half)],
               between_processes=True, between_sd=s_between, sd=sd,
               # the part of the spread the processes add beyond their own rounds' noise
               process_sd=math.sqrt(max(0.0, s_between ** 2 - s_within ** 2)),
               floored=s_within > s_between,
               spread=math.exp(half) - 1.0)
    return out
