"""Timing to a target interval (PerfOptions.mode = "target"): a series repeats until its statistic's
interval is within the target, stops at its cap on a noisy host and says so, and the parent states
what was reached from the samples themselves, not from the worker's word."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from hackscan.perf.options import PerfOptions  # noqa: E402
from hackscan.perf.parent_side import _converged  # noqa: E402
from hackscan.perf.render import table  # noqa: E402
from hackscan.perf.stats import summarize  # noqa: E402
from hackscan.perf.worker.clock import Clock, Snapshot  # noqa: E402
from hackscan.perf.worker.plan import InputPlan  # noqa: E402
from hackscan.perf.worker.timing import Flusher, Target, spread_of, time_series  # noqa: E402


class VirtualClock:
    """A clock that moves only when the fake kernel runs: each call takes the next synthetic
    duration, so a test decides exactly how noisy the host is."""

    def __init__(self, durations_ms: Iterator[float]):
        self.t = 0.0
        self.durations = durations_ms

    def now(self) -> float:
        return self.t

    def call(self, _inputs: list[Any]) -> Any:
        self.t += next(self.durations) / 1e3
        return torch.zeros(2)


def run(durations: Iterator[float], target: Target, min_iterations: int = 5) -> Any:
    vc = VirtualClock(durations)
    clock = Clock(now=vc.now, snapshot=Snapshot(), threads_at_capture=0, captured_before_import=True)
    plan = InputPlan([[torch.rand(4)] for _ in range(3)])
    return time_series("main", vc.call, plan, clock, Flusher(torch.device("cpu"), 0), start=0, warmup=1,
                       iterations=10, min_iterations=min_iterations, budget_s=1.0, adaptive=True,
                       keep_fingerprints=False, target=target)


def steady(ms: float = 1.0, jitter: float = 0.001) -> Iterator[float]:
    rng = random.Random(0)
    while True:
        yield ms * (1 + rng.uniform(-jitter, jitter))


def bimodal() -> Iterator[float]:
    # a host that preempts every other call: the median never settles within 5 %
    rng = random.Random(1)
    while True:
        yield rng.choice((1.0, 10.0))


def test_a_steady_series_stops_as_soon_as_its_interval_is_narrow() -> None:
    s = run(steady(), Target(rel=0.05, cap_s=10.0, statistic="median"))
    conv = s.convergence
    assert conv["converged"] and conv["stopped"] == "narrow"
    # never declared narrow before Target.min_calls (20): a short steady stretch is not enough
    assert 20 <= conv["calls"] <= 22, conv
    assert conv["spread"] <= 0.05


def test_a_slowly_settling_minimum_takes_more_calls_than_a_steady_one() -> None:
    rng = random.Random(2)
    spread_out = iter(lambda: rng.uniform(1.0, 3.0), None)
    s = run(spread_out, Target(rel=0.05, cap_s=100.0, statistic="min"))
    assert s.convergence["converged"] and s.convergence["calls"] > 20, s.convergence
    fast = run(steady(), Target(rel=0.05, cap_s=100.0, statistic="min"))
    assert fast.convergence["calls"] < s.convergence["calls"]


def test_a_noisy_series_stops_at_the_cap_and_says_it_did_not_converge() -> None:
    s = run(bimodal(), Target(rel=0.05, cap_s=0.5, statistic="median"))
    conv = s.convergence
    assert not conv["converged"] and conv["stopped"] == "cap"
    assert conv["spread"] > 0.05
    # the cap is kept to within one call (at most 10 ms here)
    assert 0.5 <= conv["elapsed_s"] <= 0.5 + 0.011
    assert conv["calls"] == len(s.wall_ms)


def test_the_call_limit_holds_even_before_the_cap() -> None:
    s = run(bimodal(), Target(rel=0.05, cap_s=1e6, max_calls=40, statistic="median"))
    assert len(s.wall_ms) == 40 and s.convergence["stopped"] == "max_calls" and not s.convergence["converged"]


def test_a_short_steady_stretch_of_a_loaded_host_is_not_taken_for_convergence() -> None:
    # eight slow calls that repeat one another, then the quiet host: the minimum is 1 ms, not 3
    durations = iter([3.0] * 8 + [1.0] * 1000)
    s = run(durations, Target(rel=0.05, cap_s=10.0, min_s=0.05, statistic="min"))
    assert s.convergence["converged"] and min(s.wall_ms) == pytest.approx(1.0)


def test_drift_between_blocks_widens_the_interval() -> None:
    from hackscan.perf.stats import summarize

    drifting = [1.0 + 0.01 * (i % 3) for i in range(50)] + [1.5 + 0.01 * (i % 3) for i in range(50)]
    ci = summarize(drifting)["median_ci"]
    assert ci[0] <= 1.01 and ci[1] >= 1.5, ci  # the two halves' medians are both inside
    steady_ci = summarize([1.0 + 0.01 * (i % 3) for i in range(100)])["median_ci"]
    assert steady_ci[1] - steady_ci[0] <= 0.02


def test_fixed_counts_without_a_target() -> None:
    vc = VirtualClock(steady())
    clock = Clock(now=vc.now, snapshot=Snapshot(), threads_at_capture=0, captured_before_import=True)
    s = time_series("main", vc.call, InputPlan([[torch.rand(4)]]), clock, Flusher(torch.device("cpu"), 0), start=0,
                    warmup=1, iterations=10, min_iterations=3, budget_s=100.0, adaptive=False, keep_fingerprints=False)
    assert len(s.wall_ms) == 10 and s.convergence is None


def test_spread_is_the_larger_side_of_the_interval_relative_to_the_statistic() -> None:
    spread, ci = spread_of([1.0, 1.01, 1.02, 1.2, 5.0, 5.0, 5.0, 5.0], "min")
    assert ci[0] == 1.0 and spread == pytest.approx(ci[1] - 1.0)
    assert spread_of([], "median")[0] == float("inf")


def test_the_parent_recomputes_the_spread_and_states_non_convergence() -> None:
    wide = summarize([1.0, 10.0] * 20)
    forged = {"target": 0.05, "calls": 40, "elapsed_s": 3.0, "cap_s": 3.0, "stopped": "narrow"}
    out = _converged(forged, wide, cuda=True)
    assert not out["converged"] and out["spread"] > 0.05
    assert out["note"].startswith("did not converge: spread +-") and "> target +-5% after 40 reps/3.0 s" in out["note"]
    narrow = _converged(dict(forged), summarize([1.0] * 40), cuda=True)
    assert narrow["converged"] and "note" not in narrow


def test_the_table_states_the_interval_reached_or_why_not() -> None:
    perf = {"measured": True, "device": {"type": "cpu"}, "candidate": {"wall_ms": summarize([1.0] * 10)},
            "baselines": {}, "convergence": {
                "candidate": {"target": 0.05, "spread": 0.01, "converged": True, "calls": 10, "elapsed_s": 0.1},
                "eager_fp32": {"target": 0.05, "spread": 0.2, "converged": False, "calls": 900, "elapsed_s": 3.0,
                               "note": "did not converge: spread +-20.0% > target +-5% after 900 reps/3.0 s"}}}
    text = table(perf)
    assert "repeated until narrow within the target +-5%: candidate +-1.0% (10 calls, 0.1 s)" in text
    assert "eager fp32: did not converge: spread +-20.0% > target +-5% after 900 reps/3.0 s" in text


def test_modes_are_checked() -> None:
    assert PerfOptions.for_device("cpu").targeted()
    assert not PerfOptions.from_dict({"mode": "thorough"}).targeted()
    with pytest.raises(ValueError, match="unknown perf mode"):
        PerfOptions.from_dict({"mode": "fast"})


def test_a_model_whose_memory_grows_stops_the_series_where_the_cap_is_passed() -> None:
    # a cache keyed by input keeps one output per call: the worker's memory check says stop after
    # the fourth timed call; the series keeps the four timings and says why it ended
    vc = VirtualClock(steady())
    clock = Clock(now=vc.now, snapshot=Snapshot(), threads_at_capture=0, captured_before_import=True)
    held: list[int] = []

    def cached_call(inputs: list[Any]) -> Any:
        held.append(1)
        return vc.call(inputs)

    def stop() -> str | None:
        return "grew" if len(held) > 4 else None  # one warm-up call, then four timed ones

    s = time_series("main", cached_call, InputPlan([[torch.rand(4)]]), clock, Flusher(torch.device("cpu"), 0),
                    start=0, warmup=1, iterations=10, min_iterations=3, budget_s=100.0, adaptive=False,
                    keep_fingerprints=False, target=Target(rel=1e-9, cap_s=10.0, statistic="median"),
                    memory_stop=stop)
    assert len(s.wall_ms) == 4 and s.memory_stop == "grew"
    assert s.convergence is not None and s.convergence["stopped"] == "memory"
    assert s.to_dict()["memory_stop"] == "grew"
    # a flat model runs its whole count under the same check
    flat = time_series("main", vc.call, InputPlan([[torch.rand(4)]]), clock, Flusher(torch.device("cpu"), 0),
                       start=0, warmup=1, iterations=10, min_iterations=3, budget_s=100.0, adaptive=False,
                       keep_fingerprints=False, memory_stop=lambda: None)
    assert len(flat.wall_ms) == 10 and flat.memory_stop is None


def test_the_parent_says_when_a_series_stopped_for_memory() -> None:
    conv = _converged({"target": 0.05, "calls": 12, "elapsed_s": 0.1, "cap_s": 5.0, "stopped": "memory"},
                      summarize([1.0] * 12), True)
    assert conv is not None and "memory grew" in conv["note"]
