"""The nouns every stage shares: where a thing is, what was found there, and the verdict.

These are frozen dataclasses so that a report handed to a training loop can be shared across
threads and cached without defensive copies.  Everything here is plain data: no torch, no parsing.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .util.quick_init import quick_init


class Severity(str, enum.Enum):
    """How bad the finding is if it is true."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]

    @classmethod
    def parse(cls, value: str | Severity) -> Severity:
        if isinstance(value, Severity):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            raise ValueError(f"unknown severity {value!r}; expected one of error, warning, info") from None


_SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2}


class Confidence(str, enum.Enum):
    """How likely the finding is to be true (CodeQL's `precision`, bandit's confidence)."""

    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"

    @classmethod
    def parse(cls, value: str | Confidence) -> Confidence:
        if isinstance(value, Confidence):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            raise ValueError(f"unknown confidence {value!r}; expected one of high, medium, low") from None


class Verdict(str, enum.Enum):
    HACK = "hack"  # at least one error-severity finding
    SUSPICIOUS = "suspicious"  # warnings only
    CLEAN = "clean"  # nothing above info
    ERROR = "error"  # nothing could be analysed


class Stage(str, enum.Enum):
    STATIC = "static"
    DYNAMIC = "dynamic"
    PERFORMANCE = "performance"


@quick_init
@dataclass(frozen=True)
class Location:
    """A place in the file the user gave us.

    ``line`` and ``column`` are 1-based and always refer to the *host* file (the ``.py`` or ``.cu``
    the user passed, or the code field of a JSONL record), also for findings inside a CUDA string
    embedded in Python: the unit's source map translates.  ``record`` is the 1-based line of the
    JSONL record when the submission came from a dataset.  ``unit`` names the embedded unit
    (``cuda_source``, ``triton:add_kernel``) when the finding lies in one.
    """

    path: str
    line: int = 0
    column: int = 0
    end_line: int | None = None
    end_column: int | None = None
    record: int | None = None
    unit: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "line": self.line, "column": self.column}
        if self.end_line is not None:
            out["end_line"] = self.end_line
            out["end_column"] = self.end_column
        if self.record is not None:
            out["record"] = self.record
        if self.unit is not None:
            out["unit"] = self.unit
        return out


@quick_init
@dataclass(frozen=True)
class Finding:
    """One match of one rule at one place."""

    rule: str
    name: str
    severity: Severity
    confidence: Confidence
    message: str
    location: Location
    stage: Stage = Stage.STATIC
    evidence: Mapping[str, Any] = field(default_factory=dict)
    suppressed: bool = False
    suppression_reason: str | None = None
    # ids of findings (rule@line) from the other stage that speak of the same cause
    related: tuple[str, ...] = ()
    snippet: str | None = None
    # "stage:rule@line" of the other stage's findings that prove this one (a static suspicion the
    # dynamic stage saw happen, a dynamic observation the static stage explains)
    confirmed_by: tuple[str, ...] = ()
    # "stage:rule@line" (or "dynamic:<fact>") that contradict this finding: it was downgraded or
    # withdrawn, and its message says so
    cleared_by: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.rule}@{self.location.line}"

    def with_(self, **changes: Any) -> Finding:
        # What ``dataclasses.replace`` does (a new instance with the fields changed), without its
        # per-field bookkeeping: the engine calls this for every finding (snippet, suppression).
        # Unknown names (and subclasses) still go through ``replace``.
        if type(self) is not Finding or not _FINDING_FIELDS.issuperset(changes):
            return replace(self, **changes)
        new = object.__new__(Finding)
        d = new.__dict__
        d.update(self.__dict__)
        d.update(changes)
        return new

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rule": self.rule,
            "name": self.name,
            "severity": self.severity.value,
            "confidence": self.confidence.value,
            "line": self.location.line,
            "column": self.location.column,
            "message": self.message,
            "stage": self.stage.value,
            "class": _class_of_rule(self.rule),
        }
        loc = self.location.to_dict()
        loc.pop("line")
        loc.pop("column")
        out.update(loc)
        if self.evidence:
            out["evidence"] = _jsonable(self.evidence)
        if self.suppressed:
            out["suppressed"] = True
            out["suppression_reason"] = self.suppression_reason
        if self.related:
            out["related"] = list(self.related)
        if self.confirmed_by:
            out["confirmed_by"] = list(self.confirmed_by)
        if self.cleared_by:
            out["cleared_by"] = list(self.cleared_by)
        if self.snippet is not None:
            out["snippet"] = self.snippet
        return out


_FINDING_FIELDS = frozenset(Finding.__dataclass_fields__)


@dataclass(frozen=True)
class SkippedRule:
    rule: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "reason": self.reason}


@dataclass(frozen=True)
class Report:
    """The findings of one submission and its verdict."""

    path: str
    verdict: Verdict
    findings: tuple[Finding, ...] = ()
    skipped: tuple[SkippedRule, ...] = ()
    # a short description of why analysis failed, when verdict is ERROR
    error: str | None = None
    record: int | None = None
    reference: str | None = None
    # free-form facts for the report: task ids, claimed speedups, stage notes
    meta: Mapping[str, Any] = field(default_factory=dict)
    # filled by the dynamic stage: which probes ran, which were skipped and why
    dynamic: Mapping[str, Any] | None = None
    # filled by the performance stage: timings per baseline, speedups, memory, bound
    performance: Mapping[str, Any] | None = None
    # what the static stage learnt of the candidate's program (``python.program.Outline``: model
    # class, forward's position, extensions), so the dynamic stage need not parse it again
    program: Any = field(default=None, compare=False)

    @property
    def active_findings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if not f.suppressed)

    @property
    def rejected_for(self) -> tuple[str, ...]:
        """The verdict classes of the active error findings, strongest accusation first."""
        if self.verdict is Verdict.ERROR:
            return ()
        from .classes import classes_of

        return classes_of(self.findings, "error")

    def with_(self, **changes: Any) -> Report:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "verdict": self.verdict.value,
            # the verdict classes (hackscan/classes.py) of the active error findings: what the
            # result is rejected for; empty for clean, suspicious and error results
            "rejected_for": list(self.rejected_for),
            "findings": [f.to_dict() for f in self.findings],
        }
        if self.record is not None:
            out["record"] = self.record
        if self.reference is not None:
            out["reference"] = self.reference
        if self.skipped:
            out["skipped_rules"] = [s.to_dict() for s in self.skipped]
        if self.error is not None:
            out["error"] = self.error
        if self.meta:
            out["meta"] = _jsonable(self.meta)
        if self.dynamic is not None:
            out["dynamic"] = _jsonable(self.dynamic)
        if self.performance is not None:
            out["performance"] = _jsonable(self.performance)
        return out


def verdict_for(findings: tuple[Finding, ...] | list[Finding], analysed: bool = True) -> Verdict:
    """hack if any active error, suspicious if any active warning, else clean."""
    if not analysed:
        return Verdict.ERROR
    worst = -1
    for f in findings:
        if not f.suppressed:
            worst = max(worst, f.severity.rank)
    if worst >= Severity.ERROR.rank:
        return Verdict.HACK
    if worst >= Severity.WARNING.rank:
        return Verdict.SUSPICIOUS
    return Verdict.CLEAN


def _class_of_rule(rule_id: str) -> str:
    from .classes import class_of_rule  # the registry is read once, when a report is first written

    return class_of_rule(rule_id)


def _jsonable(value: Any) -> Any:
    """Best-effort conversion of evidence values (tuples, enums, numbers) to JSON types."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return str(value)
        return value
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)
