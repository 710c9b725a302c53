"""The result of the whole verification of one candidate, in the form a training loop reads it.

``Verification`` is built from a report (static and dynamic stages): whether the gate accepts the
candidate, what it is rejected for, whether it is correct on the hidden inputs, and the verified
speedups with their intervals.  It is plain data: no torch, picklable, JSON through ``to_dict``.

Fail closed: a candidate whose dynamic stage did not run (empty or unparseable code, no
``ModelNew``, no reference, no GPU for a CUDA candidate, torch missing) was not verified, and its
verdict is ``error``: a reward gate must never pay for what nobody ran.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..model import Finding, Report

# the baselines a speedup is measured against (perf/parent_side.py), in the order a report lists them
BASELINES = ("eager_fp32", "eager_tf32", "compile")
# probe outcomes that mean the candidate computed the wrong thing, or could not compute it
_FAILED = frozenset({"wrong", "raised", "crashed", "unanswered"})


@dataclass(frozen=True)
class Speedup:
    """A verified speedup against one baseline: the point estimate and its interval (``low`` to
    ``high`` at ``confidence``; None where the run gave none)."""

    value: float
    low: float | None = None
    high: float | None = None
    confidence: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "low": self.low, "high": self.high, "confidence": self.confidence}


@dataclass(frozen=True)
class Verification:
    """One candidate, verified.

    ``verdict``: clean, suspicious, hack or error.  ``accepted``: the gate's answer (no error of a
    rejected class, and the dynamic stage ran).  ``rejected_for``: the classes of the errors that
    reject it (empty for an accepted one or an ``error``).  ``correct``: it matched the reference on
    every hidden input (None: not run).  ``speedups``: baseline -> ``Speedup``, for an accepted
    candidate whose timing the performance stage trusts; empty otherwise (a rejected candidate's
    measured speed is in ``report.performance``, but it earned nothing).  ``timed``: the
    performance stage measured it.  ``seed``: replays the same hidden inputs (``verify(...,
    seed=...)``).  ``reason``: why it is an error or untimed."""

    verdict: str
    accepted: bool
    rejected_for: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = ()
    correct: bool | None = None
    speedups: Mapping[str, Speedup] = field(default_factory=dict)
    timed: bool = False
    seed: int | None = None
    reason: str | None = None
    # the full report, for whoever wants the probes, timings and memory
    report: Report | None = field(default=None, compare=False, repr=False)

    def speedup(self, baseline: str = "best") -> Speedup | None:
        """The speedup against ``baseline`` (eager_fp32, eager_tf32, compile), or against the
        fastest baseline measured ("best": the smallest speedup); None when not measured."""
        if baseline != "best":
            return self.speedups.get(baseline)
        measured = [self.speedups[b] for b in BASELINES if b in self.speedups]
        return min(measured, key=lambda s: s.value) if measured else None

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "accepted": self.accepted, "rejected_for": list(self.rejected_for),
                "findings": [f.to_dict() for f in self.findings], "correct": self.correct,
                "speedups": {k: s.to_dict() for k, s in self.speedups.items()}, "timed": self.timed,
                "seed": self.seed, "reason": self.reason}


def from_report(report: Report, reject_classes: Sequence[str] | None = None, fail_on: str = "error") -> Verification:
    """The ``Verification`` of a report that went through the static and dynamic stages."""
    from ..classes import rejects

    dyn = report.dynamic if isinstance(report.dynamic, Mapping) else {}
    seed = dyn.get("seed") if isinstance(dyn.get("seed"), int) else None
    findings = report.active_findings
    if report.verdict.value == "error":
        return Verification("error", False, (), findings, None, {}, False, seed,
                            report.error or str(dyn.get("reason") or "not analysed"), report)
    if not dyn.get("ran"):
        why = str(dyn.get("reason") or "the dynamic stage did not run")
        return Verification("error", False, (), findings, None, {}, False, seed, f"not verified: {why}", report)
    probes = dyn.get("probes") if isinstance(dyn.get("probes"), list) else []
    correct = bool(probes) and not any(isinstance(p, Mapping) and p.get("status") in _FAILED for p in probes)
    rejected = rejects(report, reject_classes, fail_on)
    wanted = set(reject_classes) if reject_classes is not None else None
    classes = tuple(c for c in report.rejected_for if wanted is None or c in wanted)
    perf = report.performance if isinstance(report.performance, Mapping) else {}
    timed = bool(perf.get("speedup"))
    speedups: dict[str, Speedup] = {}
    reason = None if timed else str(perf.get("reason") or dyn.get("performance_skipped") or "not timed")
    if not rejected and timed:
        if perf.get("valid") is False:
            # a timing the stage does not trust earns the reference's own speed (output/verified.py)
            why = "; ".join(str(r) for r in perf.get("invalid_reasons", ())) or "timing not trusted"
            speedups = {b: Speedup(1.0) for b in perf["speedup"] if b in BASELINES}
            reason = f"timing not credited: {why}"
        else:
            cis = perf.get("speedup_ci") if isinstance(perf.get("speedup_ci"), Mapping) else {}
            conf = perf.get("speedup_confidence")
            for b, v in perf["speedup"].items():
                if b not in BASELINES or not isinstance(v, (int, float)) or isinstance(v, bool):
                    continue
                ci = cis.get(b)
                lo, hi = (float(ci[0]), float(ci[1])) if isinstance(ci, (list, tuple)) and len(ci) == 2 else (None, None)
                speedups[b] = Speedup(float(v), lo, hi, float(conf) if isinstance(conf, (int, float)) else None)
    return Verification(report.verdict.value, not rejected, classes, findings, correct, speedups, timed, seed,
                        reason, report)


def failed(reason: str, report: Report | None = None) -> Verification:
    """An ``error`` for a candidate that could not be verified at all (an empty generation, a
    broken task)."""
    return Verification("error", False, (), report.active_findings if report else (), None, {}, False, None,
                         reason, report)
