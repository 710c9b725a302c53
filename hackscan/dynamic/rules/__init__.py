"""Dynamic and performance rules as units: one function per HS4xx / HS5xx / HS6xx rule.

The stages gather facts (the workers' raw reports, the parent's comparisons); each rule's unit
function, named after the rule and marked with its id by ``@rule_unit``, decides from those facts
whether its rule fires and with what message, evidence, severity and confidence, and returns a
``Decision`` (or ``None``).  The stage turns a decision into a ``Finding`` with the unit's id
(``found``), so a rule id is spelled in two places only: its TOML (``unit = "module:function"``)
and the decorator, which the registry test holds together.

Units live in topic modules: ``hackscan/dynamic/rules/<topic>.py`` for the dynamic stage and
``hackscan/perf/rules/<topic>.py`` for the performance stage.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ...model import Confidence, Finding, Severity

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Decision:
    """What a unit decided: the finding's words and facts.  ``message`` for the dynamic stage;
    ``args`` fill the TOML's message template for the performance stage."""

    evidence: Mapping[str, Any] = field(default_factory=dict)
    message: str = ""
    args: Mapping[str, Any] = field(default_factory=dict)
    severity: Severity | None = None
    confidence: Confidence | None = None


def rule_unit(rule_id: str) -> Callable[[F], F]:
    """Mark ``fn`` as the unit of ``rule_id``: the stage reports its decisions under that id."""

    def mark(fn: F) -> F:
        fn.rule_id = rule_id  # type: ignore[attr-defined]
        return fn

    return mark


def rule_id_of(unit: Callable[..., Any]) -> str:
    rid = getattr(unit, "rule_id", None)
    if not isinstance(rid, str):
        raise TypeError(f"{getattr(unit, '__name__', unit)!r} is not a rule unit (no @rule_unit)")
    return rid


MakeFinding = Callable[..., Finding]


def found(make: MakeFinding, unit: Callable[..., Any], decision: Decision) -> Finding:
    """The dynamic stage's finding for ``decision``, under the id of the unit that made it."""
    return make(rule_id_of(unit), decision.message, dict(decision.evidence), severity=decision.severity,
                confidence=decision.confidence)


def report(make: MakeFinding, out: list[Finding], unit: Callable[..., Decision | None], *args: Any,
           **kw: Any) -> Decision | None:
    """Run ``unit`` on the facts and append its finding to ``out`` when it decides one."""
    decision = unit(*args, **kw)
    if decision is not None:
        out.append(found(make, unit, decision))
    return decision
