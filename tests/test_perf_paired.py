"""The speedup a user acts on is a paired statistic: candidate and baseline timed in alternating
short blocks, the ratio taken per round, the median over rounds with an order-statistic interval
widened by the drift between halves of the run (stats.paired_speedup).  Known pairs -> known
interval; drift that must widen it; the repeat criterion of benchmarks/timing_repeat.py; the
parent side with forged absolute times that swing with the load; the round loop of
perf_run.paired_rounds against fake workers."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest

from hackscan.dynamic import perf_run
from hackscan.dynamic.pool import WorkerFailure
from hackscan.model import Location
from hackscan.perf.parent_side import evaluate
from hackscan.perf.render import table
from hackscan.perf.stats import agreement, block_statistic, median_interval, paired_speedup

from . import test_perf_support as raw

LOC = Location("kernels/x.py", line=42)


def _pairs(logs: list[float], cand_ms: float = 1.0) -> list[tuple[float, float]]:
    return [(cand_ms * math.exp(v), cand_ms) for v in logs]


def test_known_pairs_give_the_order_statistic_interval() -> None:
    # 11 rounds, log-ratios -0.05 .. 0.05: the median is 0 (speedup 1.0); for n = 11 the 95 %
    # distribution-free interval runs from the 2nd to the 10th smallest (P(Bin(11, .5) <= 1) =
    # 12/2048 <= 2.5 % < P(<= 2) = 67/2048), that is -0.04 .. 0.04
    logs = [0.01 * k for k in range(-5, 6)]
    sp = paired_speedup(_pairs(logs))
    assert sp["n"] == 11
    assert sp["speedup"] == pytest.approx(1.0)
    assert sp["ci"] == pytest.approx([math.exp(-0.04), math.exp(0.04)])
    assert sp["widened_by_drift"] is False
    assert sp["spread"] == pytest.approx(math.exp(0.04) - 1)
    # the re-run interval is sqrt(2) wider in log space
    assert sp["rerun_ci"] == pytest.approx([math.exp(-0.04 * math.sqrt(2)), math.exp(0.04 * math.sqrt(2))])
    # the same pairs at another absolute time (a slower host): the same speedup and interval
    slow = paired_speedup(_pairs(logs, cand_ms=2.7))
    assert slow["ci"] == pytest.approx(sp["ci"])


def test_drift_between_quarters_widens_the_interval() -> None:
    # the ratio creeps up through the run: the order-statistic interval of all 40 pairs is
    # [0.13, 0.26] in log space, but the quarters' medians are 0.045, 0.145, 0.245 and 0.345
    drifting = [0.01 * i for i in range(40)]
    sp = paired_speedup(_pairs(drifting))
    assert sp["order_ci"] == pytest.approx([math.exp(0.13), math.exp(0.26)])
    assert sp["widened_by_drift"] is True
    assert sp["ci"] == pytest.approx([math.exp(0.045), math.exp(0.345)])
    assert sp["group_speedups"] == pytest.approx([math.exp(v) for v in (0.045, 0.145, 0.245, 0.345)])
    # the same spread of ratios without drift (every quarter holds the same mix): nothing widened
    steady = [0.01 * ((7 * i) % 11 - 5) for i in range(44)]
    still = paired_speedup(_pairs(steady))
    assert still["group_speedups"] == pytest.approx([1.0] * 4)
    assert still["widened_by_drift"] is False
    assert still["ci"] == pytest.approx(still["order_ci"])
    # drift that the halves cannot see (up, down, up, down by quarter) still widens it
    zigzag = [0.05 * ((i // 10) % 2) + 0.001 * (i % 10) for i in range(40)]
    zz = paired_speedup(_pairs(zigzag))
    assert zz["widened_by_drift"] is True and zz["ci"][1] >= math.exp(0.054)


def test_too_few_pairs_state_the_whole_range_and_unusable_pairs_are_dropped() -> None:
    sp = paired_speedup([(2.0, 1.0), (3.0, 1.0), (0.0, 1.0), (float("nan"), 1.0), (2.5, -1.0)])
    assert sp["n"] == 2
    assert sp["ci"] == pytest.approx([2.0, 3.0])
    assert paired_speedup([]) == {"n": 0}
    assert median_interval([1.0, 2.0, 3.0]) == (1.0, 3.0)


def test_block_statistic() -> None:
    assert block_statistic([3.0, 1.0, 2.0, float("nan")], "min") == 1.0
    assert block_statistic([3.0, 1.0, 2.0, 10.0], "median") == 2.5
    assert block_statistic([], "min") is None


def test_agreement_holds_only_when_every_point_is_inside_every_other_interval() -> None:
    points = [1.00, 1.02, 0.99]
    cis = [(0.97, 1.04), (0.98, 1.05), (0.96, 1.03)]
    ok = agreement(points, cis)
    assert ok["holds"] is True and (ok["inside"], ok["total"]) == (6, 6)
    # one run strays: its point falls outside the others' intervals, theirs inside its own
    bad = agreement([*points, 1.10], [*cis, (0.98, 1.20)])
    assert bad["holds"] is False
    assert bad["inside"] == 9 and bad["total"] == 12
    assert sorted(bad["misses"]) == [(3, 0), (3, 1), (3, 2)]
    assert (bad["inside_first"], bad["total_first"]) == (2, 3)
    # a run that stated no interval holds nobody to anything: a miss, never a pass
    assert agreement([1.0, 1.0], [(0.9, 1.1), None])["holds"] is False


# ----------------------------------------------------------------------------- parent side
def _rounds(ratios: list[float], cand_ms: float = 1.0, name: str = "eager_fp32", calls: int = 5) -> dict[str, Any]:
    rounds = []
    for r, q in enumerate(ratios):
        load = 1.0 + (r % 3) * 0.5  # the host's load moves both sides of a round alike
        c = [cand_ms * load * (1 + 0.2 * k) for k in range(calls)]
        b = [cand_ms * q * load * (1 + 0.2 * k) for k in range(calls)]
        order = ["candidate", name] if r % 2 == 0 else [name, "candidate"]
        rounds.append({"order": order, "blocks": {"candidate": {"wall_ms": c, "event_ms": c, "timers_changed": 0},
                                                  name: {"wall_ms": b, "event_ms": b, "timers_changed": 0}}})
    return {"rounds": rounds, "calls_per_block": calls, "statistic": "min", "headline": name, "target": 0.05,
            "cap_s": 20.0, "stopped": "narrow", "elapsed_s": 1.5}


def test_paired_speedup_replaces_the_one_from_absolute_times_that_the_load_skewed() -> None:
    # the reference's series ran while the host was twice as loaded: absolute times say 6x; the
    # paired rounds, both sides under the same load, say 3x
    paired = _rounds([3.0 * (1 + 0.005 * ((i % 5) - 2)) for i in range(20)])
    perf, findings = evaluate(raw.candidate(1.0, device="cpu"), raw.reference(strict_ms=6.0, device="cpu"),
                              location=LOC, paired=paired)
    json.dumps(perf)
    assert perf["unpaired_speedup"]["eager_fp32"] == pytest.approx(6.0, rel=0.02)
    assert perf["speedup"]["eager_fp32"] == pytest.approx(3.0, rel=0.01)
    lo, hi = perf["speedup_ci"]["eager_fp32"]
    assert lo <= 3.0 <= hi and hi / lo < 1.05
    assert perf["speedup_confidence"] == 0.95
    assert perf["headline_speedup"] == perf["speedup"]["eager_fp32"]
    # one pair of worker processes: narrow over its rounds, but the spread between processes (the
    # bias each pair carries for its whole life) is unknown, so it is not called converged
    conv = perf["convergence"]["paired"]
    assert conv["converged"] is False and conv["between_processes"] is False
    assert "one pair of worker processes only" in conv["note"]
    assert "not comparable across runs" in perf["absolute_times_note"]
    assert "speedups paired: 20 rounds" in table(perf)
    assert not findings


def test_paired_speedup_over_several_process_pairs_converges_when_they_agree() -> None:
    procs = [_rounds([q * (1 + 0.005 * ((i % 5) - 2)) for i in range(20)]) for q in (2.97, 3.0, 3.03, 3.0)]
    perf, findings = evaluate(raw.candidate(1.0, device="cpu"), raw.reference(strict_ms=6.0, device="cpu"),
                              location=LOC, paired={"processes": procs, "target": 0.05, "stopped": "narrow",
                                                    "headline": "eager_fp32", "elapsed_s": 9.0})
    assert perf["speedup"]["eager_fp32"] == pytest.approx(3.0, rel=0.01)
    conv = perf["convergence"]["paired"]
    assert conv["converged"] is True and conv["processes"] == 4
    assert perf["paired"]["rounds"] == 80 and perf["paired"]["rounds_per_process"] == [20] * 4
    assert perf["speedup_rerun_confidence"] == 0.99
    text = table(perf)
    assert "in 4 pair(s) of worker processes" in text and "(99%)" in text
    assert not findings


def test_paired_rounds_too_noisy_say_they_did_not_converge() -> None:
    rng = random.Random(1)
    paired = {"processes": [_rounds([3.0 * math.exp(rng.gauss(0, 0.4)) for _ in range(16)]) for _ in range(4)],
              "target": 0.05, "stopped": "max_processes", "headline": "eager_fp32", "elapsed_s": 30.0}
    perf, _ = evaluate(raw.candidate(1.0, device="cpu"), raw.reference(strict_ms=3.0, device="cpu"),
                       location=LOC, paired=paired)
    conv = perf["convergence"]["paired"]
    assert conv["converged"] is False
    assert conv["note"].startswith("paired speedup did not converge")
    assert "paired speedup did not converge" in table(perf)


def test_implausible_speedup_is_decided_on_the_paired_interval() -> None:
    # absolute times say 50x (an HS605 past its ceiling); the paired rounds say 2x: no finding
    perf, findings = evaluate(raw.candidate(0.04), raw.reference(strict_ms=2.0, tf32_ms=2.0), location=LOC,
                              paired=_rounds([2.0] * 12, name="eager_tf32"))
    assert perf["speedup"]["eager_tf32"] == pytest.approx(2.0)
    assert "HS605" not in {f.rule for f in findings}
    _, findings = evaluate(raw.candidate(0.04), raw.reference(strict_ms=2.0, tf32_ms=2.0), location=LOC,
                           paired=_rounds([50.0] * 12, name="eager_tf32"))
    assert "HS605" in {f.rule for f in findings}


def test_forged_paired_rounds_never_crash_the_parent() -> None:
    for forged in ({"rounds": "x"}, {"rounds": [1, None, {"blocks": {"candidate": {"wall_ms": ["a"]}}}]},
                   {"rounds": [{"blocks": {"candidate": {"wall_ms": [1.0]}, "eager_fp32": {"wall_ms": [-1.0]}}}]},
                   {"rounds": [{"blocks": {"candidate": {"wall_ms": [1.0]},
                                           "eager_fp32": {"wall_ms": [2.0], "timers_changed": 3}}}]}):
        perf, _ = evaluate(raw.candidate(1.0, device="cpu"), raw.reference(strict_ms=3.0, device="cpu"),
                           location=LOC, paired=forged)
        assert perf["measured"] is True
        assert "paired" not in perf  # nothing usable: the unpaired figure stands
        assert perf["speedup"]["eager_fp32"] == pytest.approx(3.0, rel=0.02)


# ----------------------------------------------------------------------------- the round loop
class FakeSession:
    """A worker answering ``perf_block`` with calls whose time is ``ms`` times the host's load, which
    the shared ``load`` list moves between requests."""

    def __init__(self, log: list[str], ms: dict[str, float], load: list[float], fail_at: int | None = None):
        self.log, self.ms, self.load, self.fail_at = log, ms, load, fail_at

    def restart_clock(self, timeout: float) -> None:
        pass

    def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        side = msg.get("baseline", "candidate")
        self.log.append(side)
        if self.fail_at is not None and len(self.log) >= self.fail_at:
            raise WorkerFailure("crashed", "gone")
        self.load[0] *= 1.3  # the load climbs steadily: a fixed order would favour one side
        t = self.ms[side] * self.load[0]
        return {"ok": True, "block": {"wall_ms": [t] * msg["calls"], "event_ms": [t] * msg["calls"],
                                      "timers_changed": 0}}


def _cpu_raws(cand_ms: float, ref_ms: float) -> tuple[dict[str, Any], dict[str, Any]]:
    return raw.candidate(cand_ms, device="cpu"), raw.reference(strict_ms=ref_ms, device="cpu")


def test_rounds_alternate_in_mirror_order_so_a_rising_load_cancels() -> None:
    log: list[str] = []
    load = [1.0]
    ms = {"candidate": 1.0, "eager_fp32": 2.0}
    cand, ref = FakeSession(log, ms, load), FakeSession(log, ms, load)
    c_raw, r_raw = _cpu_raws(1.0, 2.0)
    out = perf_run.paired_rounds(ref, cand, c_raw, r_raw, "cpu", target_rel=0.05, cap_s=30.0)
    assert out is not None and "error" not in out
    assert log[:4] == ["candidate", "eager_fp32", "eager_fp32", "candidate"]
    # every pair is off by the load's 1.3x step, one way in even rounds, the other in odd ones:
    # the median over an even number of pairs lands on the true 2x
    perf, _ = evaluate(c_raw, r_raw, location=LOC, paired=out)
    assert perf["paired"]["rounds"] == len(out["rounds"]) >= perf_run.PAIR_MIN_ROUNDS
    assert perf["speedup"]["eager_fp32"] == pytest.approx(2.0, rel=0.01)


def test_rounds_stop_at_a_worker_failure_and_keep_what_was_timed() -> None:
    log: list[str] = []
    load = [1.0]
    ms = {"candidate": 1.0, "eager_fp32": 2.0}
    c_raw, r_raw = _cpu_raws(1.0, 2.0)
    out = perf_run.paired_rounds(FakeSession(log, ms, load), FakeSession(log, ms, load, fail_at=7), c_raw, r_raw,
                                 "cpu", target_rel=0.05, cap_s=30.0)
    assert out is not None
    assert out["stopped"] == "error" and "crashed" in out["error"]
    assert len(out["rounds"]) == 3
    assert perf_run.paired_rounds(FakeSession([], ms, load), FakeSession([], ms, load), {"error": "x"}, r_raw,
                                  "cpu", 0.05) is None


# ----------------------------------------------------------------------------- the parent's clock bounds the claims
def _timed_rounds(true_ratio: float, claimed_factor: float, rounds: int = 12, calls: int = 5,
                  overhead_ms: float = 4.0, noise: float = 0.1) -> dict[str, Any]:
    """Rounds whose blocks carry the parent's request time: the candidate's true calls take 1 ms
    (with the baseline's shape of scatter) and it claims ``claimed_factor`` of that; the request
    times are the true calls plus a non-call overhead of its own on each side (``noise``: each
    block's overhead off by up to 2 x noise of it, independently)."""
    out = _rounds([true_ratio] * rounds, calls=calls)
    for i, rd in enumerate(out["rounds"]):
        c, b = rd["blocks"]["candidate"], rd["blocks"]["eager_fp32"]
        b["request_s"] = (sum(b["wall_ms"]) + overhead_ms * (1 + noise * ((i % 5) - 2))) / 1e3
        c["request_s"] = (sum(c["wall_ms"]) + overhead_ms * (1 + noise * (((i * 3) % 5) - 2))) / 1e3
        c["wall_ms"] = c["event_ms"] = [v * claimed_factor for v in c["wall_ms"]]
    return out


def test_the_parent_clock_floors_a_candidate_that_forges_its_block_times() -> None:
    # honest: the floor from the parent's clock stays under the claim, nothing changes
    honest, findings = evaluate(raw.candidate(1.0, device="cpu"), raw.reference(strict_ms=3.0, device="cpu"),
                                location=LOC, paired=_timed_rounds(3.0, 1.0))
    assert honest["speedup"]["eager_fp32"] == pytest.approx(3.0, rel=0.01)
    bound = honest["paired"]["outside_bound"]
    assert bound["rounds"] == 12 and bound["raised"] == 0 and not bound["contradicts"]
    assert not [f for f in findings if f.rule == "HS609"]
    # forged: the candidate's process reports a tenth of its calls' time; the speedup decided is
    # the parent's (one floor per pair of processes, within OUTSIDE_SLACK, against rounds whose
    # load swings 2x), not the claimed 30x, and the claims are HS609
    forged, findings = evaluate(raw.candidate(0.1, device="cpu"), raw.reference(strict_ms=3.0, device="cpu"),
                                location=LOC, paired=_timed_rounds(3.0, 0.1))
    assert forged["speedup"]["eager_fp32"] <= 3.0 / 0.8 * 2.0
    bound = forged["paired"]["outside_bound"]
    assert bound["raised"] == 12 and bound["contradicts"]
    assert [f for f in findings if f.rule == "HS609"]


def test_a_round_without_the_parents_request_time_is_left_as_claimed() -> None:
    # older raw records (no request_s): no floor, the claims as before, nothing contradicted
    perf, _ = evaluate(raw.candidate(1.0, device="cpu"), raw.reference(strict_ms=3.0, device="cpu"),
                       location=LOC, paired=_rounds([3.0] * 12))
    assert perf["paired"]["outside_bound"] == {"rounds": 0, "raised": 0, "median_floor_over_claim": None,
                                               "contradicts": False, "claimed_ms": None, "floor_ms": None}


def test_an_overhead_that_swamps_the_calls_gives_no_floor() -> None:
    # a shared CPU: each call's flush takes 50x the call and scatters by 40 %: the parent's clock
    # cannot prove anything about a 1 ms call, so the honest claim stands as it is
    perf, findings = evaluate(raw.candidate(1.0, device="cpu"), raw.reference(strict_ms=3.0, device="cpu"),
                              location=LOC, paired=_timed_rounds(3.0, 1.0, overhead_ms=250.0, noise=0.2))
    assert perf["speedup"]["eager_fp32"] == pytest.approx(3.0, rel=0.01)
    assert perf["paired"]["outside_bound"]["rounds"] == 0
    assert not [f for f in findings if f.rule == "HS609"]
