"""The paired timing, parent side: each fresh pair of worker processes' blocks of calls, the speedup
over the pairs and its spread between processes, and the parent's own clock per block (HS609's
floor).  ``parent_side._evaluate`` reads it into the report."""
from __future__ import annotations

from typing import Any

from .reading import _d, _f, _floats, _s, _spread_words
from .stats import (
    between_processes,
    block_statistic,
    median_interval,
    paired_speedup,
)

# The candidate's block time is what its own process reports, and code in that process can rewrite
# the clock, the timing loop and the reply in place.  The parent times every block request itself
# (``request_s``, perf_run.paired_rounds; the worker synchronises the device after each call before
# it answers); the baseline blocks of the same round, from the reference worker the candidate cannot
# reach, say how much of a block's request is not the calls (the cache flushes, the input refills,
# the round trip) and how the block's statistic relates to its mean call.  So each round gives an
# outside estimate of the candidate's per-call statistic: (its request - the baseline's non-call
# time) / calls x the baseline's statistic-to-mean ratio.  A round's estimate carries the noise of
# two blocks' non-call time (on a shared CPU, where a call's flush can take 50x the call, it
# swamps a sub-millisecond call), so the floor of a pair of processes is the lower end of the
# distribution-free interval of the median of its rounds' estimates, times OUTSIDE_SLACK: what the
# parent's clock shows beyond doubt.  The time that decides the paired speedup is the larger of the
# claim and that floor; a floor above OUTSIDE_FLAG x the median claim is HS609.
OUTSIDE_SLACK = 0.8


OUTSIDE_FLAG = 2.0


OUTSIDE_MIN_ROUNDS = 5


def _outside_estimate(blocks: dict[str, Any], key: str, stat: str) -> float | None:
    """One round's estimate (ms, signed: noise may make it negative) of the candidate's per-call
    statistic from the parent's clock, or None when the round lacks what it needs."""
    c_req = _f(_d(blocks.get("candidate")).get("request_s"))
    if c_req is None:
        return None
    est = None
    for name, block in blocks.items():
        b = _d(block)
        if name == "candidate" or b.get("timers_changed"):
            continue
        walls, b_req = _floats(b.get("wall_ms")), _f(b.get("request_s"))
        b_stat = block_statistic(_floats(b.get(key)), stat)
        if not walls or b_req is None or b_stat is None:
            continue
        overhead = max(0.0, b_req * 1e3 - sum(walls))
        e = (c_req * 1e3 - overhead) / len(walls) * min(1.0, b_stat / (sum(walls) / len(walls)))
        est = e if est is None else min(est, e)  # the lowest: the benefit of the doubt
    return est


def _outside_floor(rounds: list[dict[str, Any]], key: str, stat: str) -> float | None:
    """A pair of processes' floor for the candidate's per-call statistic (see above), or None."""
    est = sorted(e for e in (_outside_estimate(_d(r.get("blocks")), key, stat) for r in rounds) if e is not None)
    if len(est) < OUTSIDE_MIN_ROUNDS:
        return None
    lo = median_interval(est)[0]
    return lo * OUTSIDE_SLACK if lo > 0 else None


def _process_pairs(raw: dict[str, Any], cuda: bool, escaped: bool, c_cal: float,
                   floors: list[tuple[float, float]] | None = None,
                   ) -> tuple[list[dict[str, Any]], dict[str, list[tuple[float, float]]]]:
    """One pair of workers' rounds (``perf_run.paired_rounds``) as (usable rounds, per baseline
    its (baseline, candidate) block statistics in time order), recomputed from the calls: per
    round, each baseline's block statistic over the candidate's block of the same round (the
    minimum of the wall clock on a CPU, the median of events on a GPU; the candidate's median wall
    clock, less the host overhead, once its work escaped the events, as the unpaired figures do)."""
    rounds = [r for r in raw.get("rounds", [])[:10_000] if isinstance(r, dict)] if isinstance(raw.get("rounds"), list) else []
    stat = "median" if cuda else "min"
    key = "event_ms" if cuda else "wall_ms"
    per: dict[str, list[tuple[float, float]]] = {}
    floor = _outside_floor(rounds, key, stat)
    for r in rounds:
        blocks = _d(r.get("blocks"))
        c_block = _d(blocks.get("candidate"))
        if escaped:
            w = block_statistic(_floats(c_block.get("wall_ms")), "median")
            c = w - c_cal if w is not None and w - c_cal > 0 else None
        else:
            c = block_statistic(_floats(c_block.get(key)), stat)
        if c is None:
            continue
        if floor is not None:
            if floors is not None:
                floors.append((c, floor))
            c = max(c, floor)
        for name, block in blocks.items():
            name = _s(name, 40)
            if name == "candidate" or _d(block).get("timers_changed"):
                continue
            b = block_statistic(_floats(_d(block).get(key)), stat)
            if b is not None:
                per.setdefault(name, []).append((b, c))
    return rounds, per


def _outside_summary(floors: list[tuple[float, float]]) -> dict[str, Any]:
    """How the parent's clock bounded the candidate's blocks: rounds with a floor, rounds where the
    floor was above the claim (and so decided), the median floor / claim, and whether that median
    contradicts the claims (HS609)."""
    factors = sorted(f / c for c, f in floors if c > 0)
    med = factors[len(factors) // 2] if factors else None
    claims = sorted(c for c, _ in floors)
    return {"rounds": len(floors), "raised": sum(1 for c, f in floors if f > c),
            "median_floor_over_claim": round(med, 4) if med is not None else None,
            "contradicts": bool(med is not None and med > OUTSIDE_FLAG),
            "claimed_ms": round(claims[len(claims) // 2], 6) if claims else None,
            "floor_ms": round(sorted(f for _, f in floors)[len(floors) // 2], 6) if floors else None}


def _paired(raw: dict[str, Any], cuda: bool, escaped: bool, c_cal: float) -> dict[str, Any] | None:
    """The paired speedups from the alternating blocks, None when no round is usable.

    ``raw`` is ``perf_run.process_pairs``'s: the rounds of several pairs of worker processes
    (``processes``), each pair's speedup taken over its own rounds (``stats.paired_speedup``) and
    the pairs combined by ``stats.between_processes`` (the headline's interval then holds the
    spread between processes).  A bare ``paired_rounds`` result (one pair) is read as one process."""
    procs_raw = raw.get("processes") if isinstance(raw.get("processes"), list) else [raw]
    procs_raw = [_d(p) for p in procs_raw[:64]]
    stat = "median" if cuda else "min"
    per_proc: list[dict[str, list[tuple[float, float]]]] = []
    n_rounds: list[int] = []
    first: dict[str, Any] = {}
    floors: list[tuple[float, float]] = []
    for praw in procs_raw:
        rounds, per = _process_pairs(praw, cuda, escaped, c_cal, floors)
        if per:
            per_proc.append(per)
            n_rounds.append(len(rounds))
            first = first or praw
    if not per_proc:
        return None
    names = sorted({n for per in per_proc for n in per})
    baselines: dict[str, Any] = {}
    for n in names:
        rows = [paired_speedup(per[n]) for per in per_proc if per.get(n)]
        rows = [r for r in rows if r.get("n")]
        if not rows:
            continue
        comb = between_processes(rows)
        if not comb.get("k"):
            continue
        baselines[n] = dict(comb, n=sum(r["n"] for r in rows),
                            processes=[{"n": r["n"], "speedup": r["speedup"], "ci": r["ci"],
                                        "group_speedups": r["group_speedups"]} for r in rows])
    if not baselines:
        return None
    out: dict[str, Any] = {"baselines": baselines, "rounds": sum(n_rounds), "rounds_per_process": n_rounds,
                           "processes": len(per_proc),
                           "calls_per_block": first.get("calls_per_block") if isinstance(first.get("calls_per_block"), int) else None,
                           "relayout": bool(first.get("relayout")), "pinned": bool(first.get("pinned")),
                           # blocks whose worker said which CPU it was pinned to (time_block's "cpu")
                           "pinned_blocks": sum(1 for p in procs_raw for r in (p.get("rounds") or [])[:10_000]
                                                if isinstance(r, dict) for b in _d(r.get("blocks")).values()
                                                if isinstance(_d(b).get("cpu"), int)),
                           "statistic": f"{stat} of each block; per pair of worker processes the median over its rounds "
                                        "of baseline block / candidate block; the speedup is the geometric mean over "
                                        "the pairs, its interval a t-interval over them"}
    out["outside_bound"] = _outside_summary(floors)
    spawn_errors = [_s(e, 300) for e in raw.get("spawn_errors", [])[:8]] if isinstance(raw.get("spawn_errors"), list) else []
    if spawn_errors:
        out["spawn_errors"] = spawn_errors
    if isinstance(raw.get("spawn_s"), list):
        out["spawn_s"] = _floats(raw["spawn_s"])[:64]
    head = _s(raw.get("headline") or first.get("headline"), 40)
    row = baselines.get(head) or next(iter(baselines.values()))
    head_name = head if head in baselines else next(iter(baselines))
    # the headline's pairs themselves (baseline ms, candidate ms per round, in time order, pair of
    # processes after pair): what a reader needs to see the load the run went through
    out["pairs"] = [[round(b, 6), round(c, 6)] for per in per_proc for b, c in per.get(head_name, [])][:2000]
    target = _f(raw.get("target"))
    spread = row.get("spread")
    elapsed = _f(raw.get("elapsed_s"))
    conv: dict[str, Any] = {"target": target, "calls": sum(n_rounds), "unit": "rounds", "processes": len(per_proc),
                            "elapsed_s": elapsed, "cap_s": _f(raw.get("cap_s")), "stopped": _s(raw.get("stopped"), 20),
                            "spread": spread, "between_processes": bool(row.get("between_processes")),
                            "converged": (spread is not None and target is not None and spread <= target
                                          and bool(row.get("between_processes")))}
    if not conv["converged"]:
        goal = f"+-{target:.0%}" if target is not None else "?"
        if not row.get("between_processes"):
            conv["note"] = (f"paired speedup timed in one pair of worker processes only: "
                            f"{_spread_words(spread if isinstance(spread, float) else None)} over its "
                            f"{sum(n_rounds)} rounds, but the spread between processes is not known")
        else:
            conv["note"] = (f"paired speedup did not converge: "
                            f"{_spread_words(spread if isinstance(spread, float) else None, goal)} after {len(per_proc)} "
                            f"pairs of worker processes, {sum(n_rounds)} rounds/{elapsed or 0:.1f} s")
    errors = [_s(p.get("error"), 200) for p in procs_raw if p.get("error")]
    if errors or spawn_errors:
        conv["note"] = (conv.get("note", "") + "; " if conv.get("note") else "") + \
            f"stopped early: {(errors + spawn_errors)[0]}"
    out["convergence"] = conv
    return out
