"""Speedups carry a 90 % interval, and a timing finding fires only when the whole interval is past
its threshold; when the interval straddles it, the performance block says the figure was too
noisy to decide.  Synthetic series through the parent side, no worker."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest

from hackscan.model import Location
from hackscan.perf.parent_side import PROCESS_SD_ASSUMED, evaluate
from hackscan.perf.render import table
from hackscan.perf.stats import median_interval, min_interval, summarize

from . import test_perf_support as raw

LOC = Location("kernels/x.py", line=42)


def run(cand: dict[str, Any], ref: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    perf, findings = evaluate(cand, ref, location=LOC)
    json.dumps(perf)
    return perf, {f.rule for f in findings}


def _main(values: list[float]) -> dict[str, Any]:
    s = raw.series(1.0, n=len(values))
    s["event_ms"] = s["wall_ms"] = list(values)
    return s


def _tight(ms: float, n: int = 40) -> list[float]:
    return [ms * (1 + 0.01 * ((i % 5) - 2) / 2) for i in range(n)]


def _straddling(ms: float, n: int = 40) -> list[float]:
    # half the calls at the figure, half three times slower, interleaved: the median could be either
    return [ms if i % 2 else 3 * ms for i in range(n)]


# --------------------------------------------------------------------------- the intervals
def test_median_interval_covers_the_true_median_about_as_often_as_stated() -> None:
    rng = random.Random(5)
    hits = 0
    for _ in range(1000):
        vals = sorted(rng.expovariate(1.0) for _ in range(25))
        lo, hi = median_interval(vals)
        hits += lo <= math.log(2) <= hi
    assert 0.93 <= hits / 1000 <= 0.995


def test_a_lucky_minimum_gets_a_wide_interval_a_repeated_one_a_tight_one() -> None:
    lucky = sorted([0.3] + [24.0] * 39)  # one unpreempted call among slow ones
    steady = sorted([0.3] * 10 + [24.0] * 30)
    assert min_interval(lucky) == (0.3, 24.0)
    assert min_interval(steady) == (0.3, 0.3)
    s = summarize(lucky)
    assert s["min_ci"] == [0.3, 24.0] and s["median_ci"][0] <= s["median"] <= s["median_ci"][1]


def test_every_speedup_has_an_interval_in_json_and_in_the_table() -> None:
    perf, _ = run(raw.candidate(0.8), raw.reference(strict_ms=2.0, tf32_ms=1.0))
    assert perf["speedup_confidence"] == 0.9
    for name, sp in perf["speedup"].items():
        lo, hi = perf["speedup_ci"][name]
        assert lo <= sp <= hi and hi / lo < 1.2  # 2 % jitter: a narrow interval
        assert perf["baselines"][name]["speedup_ci"] == [lo, hi]
    assert "[90%:" in perf["headline"]
    assert "90% interval" in table(perf)


# --------------------------------------------------------------------------- HS605
def test_implausible_speedup_fires_on_a_tight_series_past_the_ceiling() -> None:
    perf, rules = run(raw.candidate(main=_main(_tight(0.04))), raw.reference(strict_ms=2.0, tf32_ms=1.0))
    assert "HS605" in rules  # 25x against a ceiling of 20x, the whole interval above it
    assert perf["speedup_ci"]["eager_tf32"][0] > 20
    assert "too noisy" not in table(perf)


def test_implausible_speedup_straddling_the_ceiling_is_not_a_finding_and_says_why() -> None:
    # median 0.08 or 0.024 ms: 12.5x to 42x against eager TF32, across the 20x ceiling
    perf, rules = run(raw.candidate(main=_main(_straddling(0.024))), raw.reference(strict_ms=2.0, tf32_ms=1.0))
    assert "HS605" not in rules
    (item,) = [u for u in perf["undecided"] if u["rule"] == "HS605"]
    lo, hi = item["interval"]
    assert lo <= 20 < hi and "straddles the ceiling 20x" in item["why"]
    assert "too noisy to decide HS605" in table(perf)


# --------------------------------------------------------------------------- HS606
def _hidden(values: list[float], paired: list[float]) -> dict[str, Any]:
    s = raw.series(1.0, n=len(values), start=100_000, warmup=1, fingerprints={})
    s["event_ms"] = s["wall_ms"] = values
    s["paired_event_ms"] = s["paired_wall_ms"] = paired
    return s


def _collapse(hidden: list[float]) -> tuple[dict[str, Any], dict[str, Any]]:
    cand = raw.candidate(0.1)
    cand["series"]["hidden:mixed"] = _hidden(hidden, _tight(0.1, 20))
    ref = raw.reference(strict_ms=0.3, tf32_ms=0.3)
    ref["baselines"]["eager_tf32"]["series"]["hidden:mixed"] = _hidden(_tight(0.31, 20), _tight(0.3, 20))
    return cand, ref


def test_collapse_on_hidden_inputs_fires_on_a_tight_series() -> None:
    perf, rules = run(*_collapse(_tight(0.4, 20)))
    assert "HS606" in rules
    assert perf["hidden"]["mixed"]["relative_slowdown_ci"][0] >= 3


def test_collapse_straddling_the_ratio_is_not_a_finding_and_says_why() -> None:
    # eight hidden calls (as the worker makes them), seven at 0.4 ms and one at 0.12 ms: the pair
    # test passes (7 of 8 slower) and the figure is 3.9x, but with eight calls the median's interval
    # is their whole range and reaches down to 1.1x, below HS606's 1.5x
    perf, rules = run(*_collapse([0.4, 0.4, 0.12, 0.4, 0.4, 0.4, 0.4, 0.4]))
    assert perf["hidden"]["mixed"]["relative_slowdown"] > 3
    assert "HS606" not in rules
    (item,) = [u for u in perf["undecided"] if u["rule"] == "HS606"]
    assert item["interval"][0] < 1.5 <= item["interval"][1] and "the ratio 1.5x" in item["why"]
    assert "too noisy to decide HS606" in table(perf)


# --------------------------------------------------------------------------- HS604
def _bound_case(main: list[float]) -> tuple[dict[str, Any], set[str]]:
    work = {"bytes_read": 2e9, "bytes_written": 1e6, "flops": 0}
    ceilings = {"bandwidth_Bps": 4e12, "peak_flops": 1e15, "source": "test"}
    return run(raw.candidate(main=_main(main)), raw.reference(strict_ms=2.0, tf32_ms=1.0, work=work, ceilings=ceilings))


@pytest.mark.parametrize("series, fires", [(_tight(0.2), True), ([0.2 if i % 2 else 0.9 for i in range(40)], False)])
def test_below_the_bound_only_when_the_whole_interval_is(series: list[float], fires: bool) -> None:
    perf, rules = _bound_case(series)
    assert perf["bound"]["reliable"], perf["bound"]
    assert ("HS604" in rules) is fires
    assert any(u["rule"] == "HS604" for u in perf.get("undecided", [])) is not fires


# --------------------------------------------------------------------------- between processes
# The first pair of worker processes measured the figures HS604 and HS606 decide on; each pair of
# processes carries a bias of its own (stats.between_processes), so before a finding is decided the
# interval takes in the spread between the pairs the paired speedup was timed in, or the host
# figure PROCESS_SD_ASSUMED when one pair timed (issue 17: HS606 decided in one run and was "too
# noisy" in the next, with the same seed).
def _pairs_of_processes(ratios: tuple[float, ...], cand_ms: tuple[float, ...]) -> dict[str, Any]:
    procs = []
    for q, c in zip(ratios, cand_ms, strict=True):
        rounds = []
        for r in range(20):
            jitter = 1 + 0.005 * ((r % 5) - 2)
            cand = [c * jitter * (1 + 0.01 * k) for k in range(5)]
            base = [c * q * jitter * (1 + 0.01 * k) for k in range(5)]
            rounds.append({"blocks": {"candidate": {"wall_ms": cand, "event_ms": cand, "timers_changed": 0},
                                      "eager_tf32": {"wall_ms": base, "event_ms": base, "timers_changed": 0}}})
        procs.append({"rounds": rounds, "calls_per_block": 5, "headline": "eager_tf32"})
    return {"processes": procs, "target": 0.05, "stopped": "max_processes", "headline": "eager_tf32", "elapsed_s": 9.0}


AGREEING = _pairs_of_processes((3.0, 3.01, 2.99, 3.0), (0.1, 0.1, 0.1, 0.1))
SCATTERED = _pairs_of_processes((2.2, 3.0, 4.1, 2.6), (0.07, 0.1, 0.14, 0.09))


def _decide(case: tuple[dict[str, Any], dict[str, Any]], paired: dict[str, Any] | None) -> tuple[dict[str, Any], set[str]]:
    perf, findings = evaluate(*case, location=LOC, paired=paired)
    json.dumps(perf)
    return perf, {f.rule for f in findings}


def test_collapse_near_the_ratio_takes_in_the_spread_between_processes() -> None:
    # 1.7x relative slowdown on tight series (the first pair's own interval 1.63-1.77x)
    case = _collapse(_tight(0.1757, 20))
    perf, rules = _decide(case, AGREEING)
    spread = perf["between_processes"]
    assert spread["source"].startswith("measured over 4 pairs of worker processes")
    # the pairs agree (measured ~0), the host figure is the floor
    assert spread["measured_ratio_sd"] < 0.01 and spread["ratio_sd"] == PROCESS_SD_ASSUMED["cuda"]
    assert "HS606" in rules and perf["hidden"]["mixed"]["relative_slowdown_ci"][0] >= 1.5
    # the same first pair, but the pairs of processes scatter (2.2-4.1x): undecided, said so
    perf, rules = _decide(case, SCATTERED)
    assert perf["between_processes"]["ratio_sd"] > 0.1
    assert "HS606" not in rules
    (item,) = [u for u in perf["undecided"] if u["rule"] == "HS606"]
    assert item["interval"][0] < 1.5 <= item["interval"][1] and "between worker processes included" in item["why"]
    assert "too noisy to decide HS606" in table(perf)
    # one pair timed: the spread between processes is not known, the host figure stands in
    perf, rules = _decide(case, None)
    assert perf["between_processes"]["source"].startswith("assumed")
    assert "HS606" in rules


def test_collapse_whose_own_interval_clears_the_ratio_by_less_than_the_host_spread_is_undecided() -> None:
    # 1.58x: the first pair's own interval (1.52-1.64x) clears 1.5x, which alone decided it before;
    # the spread a pair of processes carries (at least the host figure) reaches below it
    case = _collapse(_tight(0.1633, 20))
    for paired in (AGREEING, SCATTERED, None):
        perf, rules = _decide(case, paired)
        assert "HS606" not in rules
        assert [u["rule"] for u in perf["undecided"]] == ["HS606"]


def test_collapse_far_past_the_ratio_is_caught_whatever_the_spread_between_processes() -> None:
    case = _collapse(_tight(0.4, 20))  # 3.9x against 1.5x
    for paired in (AGREEING, SCATTERED, None):
        perf, rules = _decide(case, paired)
        assert "HS606" in rules, perf["between_processes"]
        assert not any(u["rule"] == "HS606" for u in perf.get("undecided", []))


def test_below_the_bound_by_less_than_the_spread_between_processes_is_undecided() -> None:
    # against 0.9 x the 0.50 ms bound (0.45 ms)
    work = {"bytes_read": 2e9, "bytes_written": 1e6, "flops": 0}
    ceilings = {"bandwidth_Bps": 4e12, "peak_flops": 1e15, "source": "test"}
    ref = raw.reference(strict_ms=2.0, tf32_ms=1.0, work=work, ceilings=ceilings)
    same = _pairs_of_processes((3.0, 3.01, 2.99, 3.0), (0.4, 0.4, 0.4, 0.4))
    # 0.40 ms: below it with the host spread, not when the candidate's time moves 2x between pairs
    case = (raw.candidate(main=_main(_tight(0.40))), ref)
    for paired, fires in ((same, True), (None, True), (SCATTERED, False)):
        perf, rules = _decide(case, paired)
        assert ("HS604" in rules) is fires, perf["between_processes"]
        assert [u["rule"] for u in perf.get("undecided", [])] == ([] if fires else ["HS604"])
    assert _decide(case, same)[0]["between_processes"]["measured_time_sd"] < 0.01
    # 0.43 ms: the first pair's own interval (up to 0.432 ms) alone is below it; undecided however
    near = (raw.candidate(main=_main(_tight(0.43))), ref)
    for paired in (same, SCATTERED, None):
        perf, rules = _decide(near, paired)
        assert "HS604" not in rules and [u["rule"] for u in perf["undecided"]] == ["HS604"]
    # far below it, caught either way
    far = (raw.candidate(main=_main(_tight(0.2))), ref)
    assert all("HS604" in _decide(far, p)[1] for p in (same, SCATTERED, None))


def test_collapse_is_taken_per_adjacent_pair_of_calls_so_load_between_pairs_cancels() -> None:
    # the host's load moves between pairs of calls (x1, x1.5, x1, ...) but each hidden call and the
    # main call just before it see the same: every pair says 2.5x (candidate) and 1.03x (reference)
    load = [1.0 if i % 2 else 1.5 for i in range(20)]
    cand, ref = _collapse([0.25 * v for v in load])
    cand["series"]["hidden:mixed"]["paired_event_ms"] = cand["series"]["hidden:mixed"]["paired_wall_ms"] = \
        [0.1 * v for v in load]
    r_hidden = ref["baselines"]["eager_tf32"]["series"]["hidden:mixed"]
    r_hidden["event_ms"] = r_hidden["wall_ms"] = [0.31 * v for v in load]
    r_hidden["paired_event_ms"] = r_hidden["paired_wall_ms"] = [0.3 * v for v in load]
    perf, rules = _decide((cand, ref), None)
    row = perf["hidden"]["mixed"]
    assert row["slowdown_method"].startswith("median over adjacent pairs")
    assert row["relative_slowdown"] == pytest.approx(2.5 / 1.0333, rel=0.01)
    assert "HS606" in rules and row["relative_slowdown_ci"][0] > 2
    # the series' own statistics (the medians of calls under either load) could not have told:
    # misaligned pairs fall back to them, and the interval then reaches below 1.5x
    cand["series"]["hidden:mixed"]["paired_event_ms"] = cand["series"]["hidden:mixed"]["paired_wall_ms"] = \
        [0.1 * v for v in load][:-1]
    perf, rules = _decide((cand, ref), None)
    assert perf["hidden"]["mixed"]["slowdown_method"] == "series statistics"
    assert "HS606" not in rules and [u["rule"] for u in perf["undecided"]] == ["HS606"]
