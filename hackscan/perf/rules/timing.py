"""Timing rules (HS601, HS602, HS604, HS605, HS609): is the measured time the candidate's work.

Figures come in already read and with their intervals (``parent_side``); ``o`` is the rule's
options (TOML, config, run).  Decisions are taken on intervals, never on a point figure alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ...model import Confidence, Severity
from ..reading import _s
from . import Decision, Undecided, rule_unit

Interval = tuple[float, float]


@rule_unit("HS601")
def timing_escape(o: Mapping[str, Any], claimed: float, wall: float, gap: float, wall_ci: Interval,
                  ev_ci: Interval, ref_gap: float, host_overhead: float,
                  new_threads: Sequence[str]) -> Decision | Undecided | None:
    """Events on the current stream against the device-wide synchronised wall clock: decided on the
    intervals (the wall clock's lowest plausible median against the events' highest), so noise on
    either clock cannot make the gap."""
    gap_lo = wall_ci[0] - ev_ci[1] - ref_gap
    point = gap >= float(o["min_gap_ms"]) and wall >= float(o["min_ratio"]) * claimed
    sure = gap_lo >= float(o["min_gap_ms"]) and wall_ci[0] >= float(o["min_ratio"]) * ev_ci[1]
    if point and not sure:
        return Undecided(f"wall clock {wall:.4g} ms against events {claimed:.4g} ms",
                         (wall_ci[0] / ev_ci[1], wall_ci[1] / ev_ci[0]) if ev_ci[0] > 0 else (0.0, math.inf),
                         f"the ratio {float(o['min_ratio']):g}x or the gap {float(o['min_gap_ms']):g} ms")
    if not sure:
        return None
    strong = wall >= float(o["error_ratio"]) * claimed and gap >= float(o["error_min_ms"])
    threads = f"; new threads: {', '.join(new_threads)}" if new_threads else ""
    return Decision(args={"event_ms": claimed, "wall_ms": wall, "gap_ms": gap, "threads": threads},
                    evidence={"event_ms": claimed, "wall_ms": wall, "gap_ms": gap, "host_overhead_ms": host_overhead,
                              "reference_gap_ms": ref_gap, "new_threads": list(new_threads)},
                    severity=None if strong else Severity.WARNING, confidence=None if strong else Confidence.MEDIUM)


@rule_unit("HS602")
def timer_tampered(side: str, changed: Sequence[Mapping[str, Any]]) -> Decision | None:
    """A side whose captured clocks, event methods or comparisons were replaced (``changed``, the
    worker's list, each name cut to length: the worker ran untrusted code)."""
    if not changed:
        return None
    names = ", ".join(sorted({_s(c.get("name"), 80) + f" ({_s(c.get('change'), 20)})" for c in changed}))
    return Decision(args={"side": side, "names": names}, evidence={"side": side, "changed": list(changed)})


@rule_unit("HS604")
def faster_than_hardware_bound(o: Mapping[str, Any], claimed: float | None, claimed_ci: Interval | None,
                               bound: Mapping[str, Any]) -> Decision | Undecided | None:
    """The candidate's slowest plausible time below what the device needs to move the task's bytes
    or do its FLOPs (``bound``: the terms ``parent_side._bound`` measured and trusted)."""
    if claimed is None:
        return None
    c_hi = claimed_ci[1] if claimed_ci is not None else claimed
    bound_ms, memory_ms, compute_ms, floor_ms = (bound[k] for k in ("bound_ms", "memory_ms", "compute_ms",
                                                                    "write_floor_ms"))
    slack = float(o["slack"])
    if claimed_ci is not None and claimed_ci[0] < slack * bound_ms <= c_hi:
        return Undecided(f"candidate time {claimed:.4g} ms against the bound {bound_ms:.4g} ms",
                         (claimed_ci[0] / bound_ms, claimed_ci[1] / bound_ms), f"{slack:g}x of the bound")
    if not c_hi < slack * bound_ms:
        return None
    # How strong the evidence is depends on which term is beaten.  Below the time it takes just to
    # write the outputs: nothing legitimate gets there (error).  Below the bytes term: inputs left
    # unread, which a task's structure rarely allows (warning).  Below the FLOP term only: triangular
    # or diagonal operands, algebra (Strassen) or sparsity legitimately do fewer FLOPs than the
    # reference's count (information).
    if c_hi < float(o["error_fraction"]) * floor_ms:
        severity, confidence = None, None
    elif c_hi < slack * memory_ms:
        severity, confidence = Severity.WARNING, Confidence.LOW
    else:
        severity, confidence = Severity.INFO, Confidence.LOW
    beaten_memory = c_hi < slack * memory_ms
    read, written, flops = bound["bytes_read"], bound["bytes_written"], bound["flops"]
    bw, peak = bound["bandwidth_Bps"], bound["peak_flops"]
    what = "move its bytes" if beaten_memory else "do the reference's FLOPs"
    detail = (f"{(bound['eff_read'] + bound['eff_written']) / 1e6:.4g} MB at {bw / 1e9:.4g} GB/s" if beaten_memory
              else f"{flops / 1e9:.4g} GFLOP at {peak / 1e12:.4g} TFLOP/s")
    shown = memory_ms if beaten_memory else compute_ms
    return Decision(args={"time_ms": claimed, "bound_ms": shown, "limited_by": what, "detail": detail},
                    evidence={"time_ms": claimed, "bound_ms": bound_ms, "write_floor_ms": floor_ms,
                              "memory_ms": memory_ms, "compute_ms": compute_ms, "bytes_read": int(read),
                              "bytes_written": int(written), "flops": int(flops), "bandwidth_GBps": bw / 1e9,
                              "peak_tflops": peak / 1e12, "time_ci_ms": bound["time_ci_ms"]},
                    severity=severity, confidence=confidence)


@rule_unit("HS605")
def implausible_speedup(o: Mapping[str, Any], speedup: float, ci: Interval | None, baseline: str,
                        label: str) -> Decision | Undecided | None:
    """The headline speedup's whole interval above the plausibility ceiling (information only)."""
    ceiling = float(o["ceiling"])
    ci = ci or (speedup, speedup)
    if ci[0] <= ceiling < ci[1]:
        return Undecided(f"speedup {speedup:.3g}x vs {label}", ci, f"the ceiling {ceiling:g}x")
    if ci[0] > ceiling:  # the whole interval past the ceiling, not just the figure
        return Decision(args={"speedup": speedup, "baseline": label, "ceiling": ceiling},
                        evidence={"speedup": speedup, "baseline": baseline, "ceiling": ceiling})
    return None


@rule_unit("HS609")
def timing_contradicted_by_parent_clock(o: Mapping[str, Any], claimed_ms: float, calls: int, per_call: float,
                                        claimed_ci: Interval | None = None, total_ms: float = 0.0,
                                        evidence: Mapping[str, Any] | None = None,
                                        paired: Mapping[str, Any] | None = None) -> Decision | Undecided | None:
    """The parent's own clock over back-to-back calls against the worker's reported per-call time.
    With ``paired`` (the paired blocks' outside bound, already decided against the reference
    worker's non-call time in the same round), its verdict is taken as it stands."""
    if paired is not None:
        if not paired.get("contradicts"):
            return None
        return Decision(args={"claimed_ms": paired["claimed_ms"], "calls": calls, "outside_ms": paired["floor_ms"]},
                        evidence={"source": "paired blocks: the parent's clock per block request, less the reference "
                                            "worker's non-call time in the same round", **paired})
    w_ci = claimed_ci or (claimed_ms, claimed_ms)
    ratio = float(o["ratio"])
    excess = total_ms - calls * w_ci[1] >= float(o["min_excess_ms"])
    if excess and w_ci[0] * ratio < per_call <= w_ci[1] * ratio:
        return Undecided(f"parent clock {per_call:.4g} ms per call against the reported {claimed_ms:.4g} ms",
                         (per_call / w_ci[1], per_call / w_ci[0]) if w_ci[0] > 0 else (0.0, math.inf),
                         f"the ratio {ratio:g}x")
    if per_call > ratio * w_ci[1] and excess:
        return Decision(args={"claimed_ms": claimed_ms, "calls": calls, "outside_ms": per_call},
                        evidence=dict(evidence or {}))
    return None
