"""Parent side of the performance plug-in (PROTOCOL.md, "perf: parent side").

``PerfContext`` is what ``hackscan.perf.parent_side.evaluate`` receives: the reference outputs for
the timed input sets, the same correctness check the dynamic stage uses, and a factory for
findings located where the dynamic stage puts its own.  No torch: tensors are numpy arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..model import Finding, Report
from .compare import Tolerance, compare


@dataclass(frozen=True)
class PerfContext:
    device: str
    options: Mapping[str, Any]
    errors: Mapping[str, str]
    # key -> per input set: the reference's float32 output leaves (numpy arrays)
    reference_outputs: Mapping[str, Sequence[Sequence[Any]]]
    # key -> per input set: the reference's float64 output leaves (None where unavailable)
    reference_outputs64: Mapping[str, Sequence[Sequence[Any] | None]] = field(default_factory=dict)
    structures: Mapping[str, Sequence[str]] = field(default_factory=dict)
    tolerance: Tolerance = Tolerance()
    finding_factory: Callable[..., Finding] | None = None
    static_report: Report | None = None
    # the parent's own timing of back-to-back calls (HS609): {"calls", "parent_s", "rtt_s", "child_s"}
    outside: Mapping[str, Any] | None = None

    def check(self, key: str, index: int, output: Sequence[Any]) -> tuple[bool, dict[str, Any]]:
        """Is ``output`` (the leaves of one timed call's output) right for input set ``index`` of ``key``?"""
        refs = self.reference_outputs.get(key) or []
        if index >= len(refs):
            return False, {"detail": f"no reference output for {key}[{index}]"}
        r64s = self.reference_outputs64.get(key) or []
        r64 = r64s[index] if index < len(r64s) else None
        structure = (self.structures.get(key) or [""] * len(refs))[index]
        o = compare(list(output), structure, refs[index], r64, structure, self.tolerance)
        return o.level in ("pass", "half", "skip"), o.evidence()

    def finding(self, rule_id: str, message: str, evidence: Mapping[str, Any] | None = None,
                severity: Any = None, confidence: Any = None) -> Finding:
        if self.finding_factory is None:
            raise RuntimeError("no finding factory in this context")
        return self.finding_factory(rule_id, message, dict(evidence or {}), severity=severity, confidence=confidence,
                                    stage="performance")
