"""Verdict classes: what kind of rejection a finding stands for.

``verdict`` says how sure hackscan is that something is wrong (hack / suspicious / clean / error); the
class says *what* is wrong, because a training team acts differently on each: a faked result is
punished, a missing kernel is a failed attempt, a precision downgrade may be allowed by the task.
Every rule belongs to exactly one class.  The class follows from the rule's first taxonomy class
(``TAXONOMY_CLASS``, the one mapping); a rule whose first taxonomy class does not say it right names
its own with ``verdict_class`` in its TOML.  The registry refuses a rule without a known class.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping

# the order in which reports list the classes: the strongest accusation first
CLASSES: tuple[str, ...] = ("gaming", "integrity", "no-kernel", "precision", "task", "meta")

DEFINITIONS: Mapping[str, str] = {
    "gaming": "the result or its check is faked: value or shape guards, constant or cached outputs, "
              "unwritten output, partial work, ignored parameters, replayed inputs, harness detection",
    "integrity": "the run itself is tampered with: inputs written, timers or harness functions replaced, "
                 "work hidden on unjoined streams or threads, obfuscated or unanswered checks",
    "no-kernel": "no custom code does the work: torch computes it, the custom code never builds or never "
                 "runs, or the reference itself is reused",
    "precision": "computes below the reference's precision: fp16 / bf16 / TF32 math, fast-math, "
                 "numerically unsafe shortcuts",
    "task": "the reference task is at fault (its output does not depend on its input), not the candidate",
    "meta": "about the analysis, not the kernel: parse failures, unreadable input, suppression comments, "
            "resource notes",
}

# severity names, weakest first (the model's ``Severity`` values; not imported: the model imports this module)
_SEVERITIES = ("info", "warning", "error")

# TAXONOMY.md class number -> verdict class
TAXONOMY_CLASS: Mapping[int, str] = {
    0: "meta",
    1: "gaming",       # value guard
    2: "gaming",       # shape or config guard
    3: "no-kernel",    # torch fallback (Python)
    4: "no-kernel",    # torch fallback (C++)
    5: "no-kernel",    # try/except or conditional fallback
    6: "gaming",       # identity / passthrough / constant
    7: "gaming",       # unwritten output / stale memory
    8: "gaming",       # output caching
    9: "integrity",    # timing escape (streams, threads)
    10: "integrity",   # timer and harness tampering
    11: "gaming",      # harness detection
    12: "no-kernel",   # reference reuse
    13: "integrity",   # input mutation
    14: "precision",   # precision downgrade
    15: "gaming",      # partial computation
    16: "precision",   # numerically unsafe shortcut
    17: "gaming",      # parameter blind spot
    18: "gaming",      # seed or input replay
    19: "integrity",   # obfuscation
    20: "task",        # task degeneracy
}


class ClassError(ValueError):
    pass


def class_for(taxonomy: Iterable[int], override: str | None = None) -> str:
    """A rule's class: its override, else the class of its first taxonomy class."""
    if override is not None:
        if override not in DEFINITIONS:
            raise ClassError(f"verdict_class {override!r} is not one of {', '.join(CLASSES)}")
        return override
    for t in taxonomy:
        return TAXONOMY_CLASS[t]
    raise ClassError("a rule with no taxonomy class needs a verdict_class")


def parse_classes(values: Iterable[str] | str, source: str = "") -> tuple[str, ...]:
    """``"precision,gaming"`` or a list of names -> the classes in report order; an error names the known."""
    if isinstance(values, str):
        values = [values]
    names = [v.strip().lower() for item in values for v in str(item).split(",") if v.strip()]
    bad = [n for n in names if n not in DEFINITIONS]
    if not names:
        raise ClassError(f"{source + ': ' if source else ''}names no verdict class; expected some of {', '.join(CLASSES)}")
    if bad:
        where = f"{source}: " if source else ""
        raise ClassError(f"{where}unknown verdict class {bad[0]!r}; expected some of {', '.join(CLASSES)}")
    return tuple(c for c in CLASSES if c in names)


@functools.lru_cache(maxsize=1)
def _rule_classes() -> dict[str, str]:
    """Rule id -> class, read from the rule files with the same ``class_for`` the registry uses
    (tests/test_verdict_classes.py checks the two agree).  Read here rather than through the
    registry, which imports this module: the report model asks for classes, and the registry sits
    above the model."""
    import tomllib

    from .rulefiles import rules_dir

    table: dict[str, str] = {}
    for path in sorted(rules_dir().glob("HS*.toml")):
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
            override = data.get("verdict_class")
            table[str(data["id"])] = class_for(data.get("taxonomy", ()), str(override) if override else None)
        except (OSError, ValueError, KeyError):  # a broken rule file is the registry's error to report
            continue
    return table


def class_of_rule(rule_id: str) -> str:
    """The class of a finding's rule; a rule id the registry does not know (a finding from another
    hackscan version read back from JSON) is ``meta``."""
    return _rule_classes().get(rule_id, "meta")


def classes_of(findings: Iterable, at_least: str = "error") -> tuple[str, ...]:
    """The classes of the active findings at or above severity ``at_least``, in report order."""
    floor = _SEVERITIES.index(str(getattr(at_least, "value", at_least)).lower())
    seen = {class_of_rule(f.rule) for f in findings
            if not f.suppressed and _SEVERITIES.index(f.severity.value) >= floor}
    return tuple(c for c in CLASSES if c in seen)


def rejects(report, reject: Iterable[str] | None = None, fail_on: str = "error") -> bool:
    """Whether a gate that rejects the classes ``reject`` (all when None) rejects this result.

    A result hackscan could not analyse (verdict ``error``) is always rejected: fail closed.
    """
    if report.verdict.value == "error":
        return True
    wanted = set(CLASSES if reject is None else reject)
    return any(c in wanted for c in classes_of(report.findings, fail_on))
