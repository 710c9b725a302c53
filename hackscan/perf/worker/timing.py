"""One timed series: warm-up, then timed calls, each on fresh inputs with a cold cache.

Every call is measured twice, the way the two kinds of harness do it:

* ``event_ms``: CUDA events recorded on the current stream around the call (what most harnesses
  report);
* ``wall_ms``: the host clock from before the call until a *device-wide* synchronisation returns.

The two agree for honest code (up to a constant host overhead that ``calibrate`` measures on an
empty region).  Work pushed to a side stream, a background thread or deferred to later shows up in
the wall clock but not in the events; the parent turns a gap into a finding (HS601).

On the CPU there are no events: both numbers are the wall clock.
"""

from __future__ import annotations

import math
import os
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..stats import drift_widened, median_interval, min_interval, quantile
from .clock import Clock
from .fingerprint import fingerprint
from .plan import REPEAT, InputPlan


@dataclass
class Series:
    name: str
    warmup: list[int] = field(default_factory=list)
    indices: list[int] = field(default_factory=list)
    event_ms: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)
    fingerprints: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    # main-distribution calls interleaved with a hidden series, so both see the same machine load
    paired_event_ms: list[float] = field(default_factory=list)
    paired_wall_ms: list[float] = field(default_factory=list)
    error: str | None = None
    off_default_stream: bool = False
    threads_before: int = 0
    threads_after: int = 0
    new_threads: list[str] = field(default_factory=list)
    # how an interval-targeted series ended (see Target): None for a fixed-budget series
    convergence: dict[str, Any] | None = None
    # why the series stopped before its count: the candidate's memory grew past the worker's cap
    memory_stop: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "convergence": self.convergence,
            "warmup": self.warmup,
            "indices": self.indices,
            "event_ms": self.event_ms,
            "wall_ms": self.wall_ms,
            "fingerprints": {str(k): v for k, v in self.fingerprints.items()},
            "paired_event_ms": self.paired_event_ms,
            "paired_wall_ms": self.paired_wall_ms,
            "error": self.error,
            "off_default_stream": self.off_default_stream,
            "threads_before": self.threads_before,
            "threads_after": self.threads_after,
            "new_threads": self.new_threads,
            "memory_stop": self.memory_stop,
        }


class Flusher:
    """Evicts the last-level cache between calls by writing a buffer twice its size."""

    def __init__(self, device: torch.device, nbytes: int | None):
        if nbytes is None:
            nbytes = default_flush_bytes(device)
        self.nbytes = int(nbytes)
        self.buf = torch.empty(self.nbytes, dtype=torch.uint8, device=device) if self.nbytes > 0 else None

    def __call__(self) -> None:
        if self.buf is not None:
            self.buf.zero_()


def default_flush_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
        return max(2 * l2, 64 << 20)
    llc = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in sorted(os.listdir(base)):
            size = open(os.path.join(base, entry, "size")).read().strip()
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
            llc = max(llc, int(size.rstrip("KMG")) * mult)
    except (OSError, ValueError):
        llc = 32 << 20
    # one pass over the last-level cache evicts most of it; more costs more time than it buys
    # accuracy on a shared CPU
    return min(max(llc, 8 << 20), 32 << 20)


def _one_call(call: Callable[[list[Any]], Any], inputs: list[Any], clock: Clock,
              events: tuple[Any, Any] | None) -> tuple[Any, float, float, bool]:
    off_default = False
    if events is not None:
        stream = clock.current_stream()
        off_default = stream != clock.default_stream()
        clock.sync()
        t0 = clock.now()
        clock.record(events[0], stream)
        out = call(inputs)
        clock.record(events[1], stream)
        clock.sync()
        t1 = clock.now()
        event_ms = float(clock.elapsed(events[0], events[1]))
    else:
        t0 = clock.now()
        out = call(inputs)
        t1 = clock.now()
        event_ms = (t1 - t0) * 1e3
    return out, event_ms, (t1 - t0) * 1e3, off_default


def calibrate(clock: Clock, flush: Flusher, calls: int = 10) -> dict[str, Any]:
    """The wall-minus-event gap of an empty region: the host overhead every measurement carries."""
    events = (clock.new_event(), clock.new_event()) if clock.cuda else None
    gaps: list[float] = []
    walls: list[float] = []
    for _ in range(calls):
        flush()
        _, ev, wall, _ = _one_call(lambda _inputs: None, [], clock, events)
        gaps.append(wall - ev)
        walls.append(wall)
    gaps.sort()
    walls.sort()
    return {"gap_ms": gaps[len(gaps) // 2], "wall_ms": walls[len(walls) // 2], "calls": calls}


@dataclass(frozen=True)
class Target:
    """Repeat calls until the 95 % interval of the series' statistic (the median of the events on a
    GPU, the minimum of the wall clock on a CPU: what the parent's speedups use) is within
    ``rel`` of the statistic on either side, or ``cap_s`` seconds of timed calls have passed, or
    ``max_calls`` were made.  A fixed budget is either too short on a noisy host (wide intervals,
    undecided findings) or too long on a quiet one; this spends time only where the noise is."""

    rel: float = 0.05
    cap_s: float = 3.0
    # not declared narrow before this long and this many calls: a short steady stretch of a loaded
    # host repeats one (slow) value and would look converged (measured: 8 calls, +-4 %, 3x off)
    min_s: float = 0.0
    min_calls: int = 20
    max_calls: int = 5000
    statistic: str = "median"  # or "min"


def spread_of(values: list[float], statistic: str) -> tuple[float, tuple[float, float]]:
    """The relative half-width of the statistic's interval (the larger side) and the interval: the
    interval the parent computes (stats.summarize), block drift included."""
    vals = sorted(values)
    if not vals:
        return math.inf, (math.nan, math.nan)
    if statistic == "min":
        stat, ci = vals[0], drift_widened(values, "min", min_interval(vals))
    else:
        stat, ci = quantile(vals, 0.5), drift_widened(values, "median", median_interval(vals))
    if not stat > 0:
        return math.inf, ci
    return max(stat - ci[0], ci[1] - stat) / stat, ci


def _converged(values: list[float], target: Target, min_calls: int, elapsed_s: float) -> bool:
    if len(values) < max(min_calls, target.min_calls) or elapsed_s < target.min_s:
        return False
    return spread_of(values, target.statistic)[0] <= target.rel


def time_series(name: str, call: Callable[[list[Any]], Any], plan: InputPlan, clock: Clock, flush: Callable[[], None], *,
                start: int, warmup: int, iterations: int, min_iterations: int, budget_s: float, adaptive: bool,
                hidden: str | None = None, samples: int = 256, keep_fingerprints: bool = True,
                pair: tuple[InputPlan, int] | None = None, target: Target | None = None,
                memory_stop: Callable[[], str | None] | None = None) -> Series:
    """Run ``warmup`` + up to ``iterations`` calls on inputs ``start, start+1, ...`` of ``plan``.

    The count is fixed (``iterations``) unless the estimate from the warm-up says the series would
    exceed ``budget_s``; with ``adaptive`` it is sized to the budget.  It never drops below
    ``min_iterations``.  Every output (warm-up included) is fingerprinted after the clock stops.
    With ``pair = (main_plan, first_index)`` each timed call is preceded by a timed call on the main
    distribution, so that a comparison of the two is not skewed by the load of a shared machine.
    With ``target`` the count is not fixed: calls go on until the statistic's interval is narrow
    enough or the target's cap is reached (``Series.convergence`` says which).
    ``memory_stop`` is asked after every timed call: a reason ends the series there (a candidate that
    keeps something per call would otherwise fill the device and fail with an out-of-memory error
    at a call count that depends on the device's size; stopped, its timings so far stand and the
    memory measurement after the series reports the growth).
    """
    series = Series(name)
    series.threads_before = threading.active_count()
    before_names = {t.name for t in threading.enumerate()}
    events = (clock.new_event(), clock.new_event()) if clock.cuda else None
    j = start
    try:
        est: list[float] = []
        for _ in range(max(warmup, 1 if adaptive or budget_s > 0 else 0)):
            inputs = plan.inputs_for(j, hidden)
            flush()
            out, _ev, wall, _ = _one_call(call, inputs, clock, events)
            if keep_fingerprints:
                series.fingerprints[j] = fingerprint(out, samples)
            del out
            series.warmup.append(j)
            est.append(wall)
            j += 1
        per_call_s = (sorted(est)[len(est) // 2] / 1e3) * (2 if pair else 1) if est else 0.0
        n = iterations
        if per_call_s > 0:
            fits = int(budget_s / per_call_s)
            n = min(iterations, fits) if (adaptive or fits < iterations) else iterations
        n = max(n, min_iterations)
        if target is not None:
            n = max(target.max_calls, min_iterations)
        values = series.event_ms if clock.cuda else series.wall_ms
        t_start = clock.now()
        check_at = max(min_iterations, 1)
        stopped = "max_calls"
        for k in range(n):
            repeated = None
            if pair is not None:
                paired = pair[0].inputs_for(pair[1] + k)
                if hidden == REPEAT:
                    # the values of the call just before, copied before that call may write to them
                    repeated = plan.copy_of(j, paired)
                flush()
                out, ev, wall, _ = _one_call(call, paired, clock, events)
                del out
                series.paired_event_ms.append(ev)
                series.paired_wall_ms.append(wall)
            inputs = repeated if repeated is not None else plan.inputs_for(j, hidden)
            flush()
            out, ev, wall, off_default = _one_call(call, inputs, clock, events)
            series.off_default_stream |= off_default
            if keep_fingerprints and k < iterations:
                # the reference validates calls up to warm-up + iterations (PerfOptions.calls): the
                # further calls of a targeted series would cost time and report size for nothing
                series.fingerprints[j] = fingerprint(out, samples)
            del out
            series.indices.append(j)
            series.event_ms.append(ev)
            series.wall_ms.append(wall)
            j += 1
            if memory_stop is not None and (why := memory_stop()) is not None:
                series.memory_stop = why
                stopped = "memory"
                break
            if target is None:
                continue
            if k + 1 >= check_at:
                # checked every tenth of the calls so far: sorting thousands of values after
                # every call would cost more than the calls of a fast kernel
                check_at = k + 1 + max(1, (k + 1) // 10)
                if _converged(values, target, min_iterations, clock.now() - t_start):
                    stopped = "narrow"
                    break
            if k + 1 >= min_iterations and clock.now() - t_start >= target.cap_s:
                stopped = "cap"
                break
        if target is not None:
            spread, _ci = spread_of(values, target.statistic)
            series.convergence = {"target": target.rel, "spread": spread if math.isfinite(spread) else None,
                                  "converged": spread <= target.rel, "stopped": stopped if spread > target.rel else "narrow",
                                  "calls": len(values), "elapsed_s": round(clock.now() - t_start, 3),
                                  "cap_s": target.cap_s, "statistic": target.statistic}
    except Exception as exc:  # a candidate that fails while timed: report it, keep what was measured
        series.error = f"{type(exc).__name__}: {exc}"[:500] + "\n" + "".join(traceback.format_exc(limit=4))[-1500:]
    return _closed(series, before_names)


def _closed(series: Series, before_names: set[str]) -> Series:
    series.threads_after = threading.active_count()
    series.new_threads = sorted({t.name for t in threading.enumerate()} - before_names)
    return series
