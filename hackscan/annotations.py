"""Annotated source: the expected findings written on the lines they belong to.

Fixtures and self-measurement corpora carry their expectations inline (CodeQL's expected output,
semgrep's ``ruleid:``):

* ``# expect: HS101`` (Python) or ``// expect: HS201`` (CUDA, also inside a CUDA string): a finding
  of that rule on this line.  Several ids may be listed, comma-separated.
* ``# expect: HS172 warning``: the same, and the finding must have that severity (``error``,
  ``warning`` or ``info``), for fixtures whose point is the severity (a warning that must not become
  an error).  Ids without one are matched on rule and line only.
* ``# todo-expect: HS101``: a known miss, written down rather than hidden (CodeQL's MISSING).
* ``# spurious: HS105``: a known false alarm, written down (CodeQL's SPURIOUS).
* ``# may: HS607``: a measured finding whose figure sits near its threshold on some devices (the
  performance stage's memory ratio, a time against the hardware bound): on this line it is neither
  required nor a false alarm.  Never the only annotation of a hack: the finding the fixture is
  about stays an ``expect``.
* ``# legit-for: HS101, HS102`` anywhere in the file: this file is a legitimate look-alike for
  those rules; they must not fire anywhere in it.
* ``# hackscan-test: mode=audit`` switches the scan mode for this file.

Matching is by (rule, line), never by counts per file, so a miss and a false alarm cannot cancel.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

_ID = r"HS\d{3}(?:[ \t]+(?:error|warning|info)\b)?"
_ANN = re.compile(rf"(?:#|//)\s*(?P<kind>expect|todo-expect|spurious|legit-for|may)\s*:\s*(?P<ids>{_ID}(?:\s*,\s*{_ID})*)")
_MODE = re.compile(r"(?:#|//)\s*hackscan-test:\s*mode=(?P<mode>audit|gate)")


@dataclass(frozen=True)
class Annotations:
    expected: frozenset[tuple[str, int]] = frozenset()
    todo: frozenset[tuple[str, int]] = frozenset()
    spurious: frozenset[tuple[str, int]] = frozenset()
    legit_for: frozenset[str] = frozenset()
    mode: str | None = None
    # (rule, line) -> the severity an ``expect`` states, only where it states one
    severities: Mapping[tuple[str, int], str] = field(default_factory=dict)
    # ``may``: findings allowed on their line, not required (a device-dependent measured figure)
    optional: frozenset[tuple[str, int]] = frozenset()

    @property
    def expected_rules(self) -> frozenset[str]:
        return frozenset(r for r, _ in self.expected)

    def restricted(self, rules: Iterable[str]) -> Annotations:
        keep = set(rules)
        return Annotations(
            expected=frozenset(e for e in self.expected if e[0] in keep),
            todo=frozenset(e for e in self.todo if e[0] in keep),
            spurious=frozenset(e for e in self.spurious if e[0] in keep),
            legit_for=frozenset(r for r in self.legit_for if r in keep),
            mode=self.mode,
            severities={k: v for k, v in self.severities.items() if k[0] in keep},
            optional=frozenset(e for e in self.optional if e[0] in keep),
        )

    def severity_mismatches(self, actual: Iterable[tuple[str, int, str]]) -> list[str]:
        """``rule@line: expected S, found T`` for each finding whose severity differs from the stated one."""
        out = []
        for rule, line, severity in sorted(set(actual)):
            want = self.severities.get((rule, line))
            if want is not None and want != severity:
                out.append(f"{rule}@{line}: expected {want}, found {severity}")
        return out


def parse_annotations(text: str) -> Annotations:
    expected: set[tuple[str, int]] = set()
    todo: set[tuple[str, int]] = set()
    spurious: set[tuple[str, int]] = set()
    optional: set[tuple[str, int]] = set()
    legit: set[str] = set()
    severities: dict[tuple[str, int], str] = {}
    mode = None
    if ("expect" not in text and "legit-for" not in text and "spurious" not in text and "hackscan-test" not in text
            and "may:" not in text):
        return Annotations()
    for lineno, line in enumerate(text.splitlines(), start=1):
        for m in _ANN.finditer(line):
            ids = []
            kind = m.group("kind")
            for item in m.group("ids").split(","):
                rule, *severity = item.split()
                ids.append(rule)
                if severity and kind == "expect":
                    severities[(rule, lineno)] = severity[0]
            if kind == "legit-for":
                legit.update(ids)
                continue
            target = {"expect": expected, "todo-expect": todo, "spurious": spurious, "may": optional}[kind]
            target.update((i, lineno) for i in ids)
        mm = _MODE.search(line)
        if mm:
            mode = mm.group("mode")
    return Annotations(frozenset(expected), frozenset(todo), frozenset(spurious), frozenset(legit), mode, severities,
                       frozenset(optional))


@dataclass
class Comparison:
    """Expected vs actual (rule, line) pairs for one file."""

    path: str
    missing: list[tuple[str, int]] = field(default_factory=list)
    unexpected: list[tuple[str, int]] = field(default_factory=list)
    matched: list[tuple[str, int]] = field(default_factory=list)
    known_missing: list[tuple[str, int]] = field(default_factory=list)
    known_spurious: list[tuple[str, int]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.missing and not self.unexpected

    def describe(self) -> str:
        parts = []
        if self.missing:
            parts.append("missing " + ", ".join(f"{r}@{ln}" for r, ln in sorted(self.missing)))
        if self.unexpected:
            parts.append("unexpected " + ", ".join(f"{r}@{ln}" for r, ln in sorted(self.unexpected)))
        return f"{self.path}: " + ("; ".join(parts) or "ok")


def compare(path: str, ann: Annotations, actual: Iterable[tuple[str, int]]) -> Comparison:
    actual_set = set(actual)
    cmp = Comparison(path)
    for exp in sorted(ann.expected):
        (cmp.matched if exp in actual_set else cmp.missing).append(exp)
    for todo in sorted(ann.todo):
        if todo not in actual_set:
            cmp.known_missing.append(todo)
    for act in sorted(actual_set - ann.expected - ann.optional):
        if act in ann.spurious:
            cmp.known_spurious.append(act)
        elif act in ann.todo:
            cmp.matched.append(act)  # a known miss that is now found: fine, update the annotation
        else:
            cmp.unexpected.append(act)
    return cmp
