"""hackscan measuring itself against an annotated corpus: recall and false-positive rate per rule and class.

The corpus is annotated source (``hackscan/annotations.py``): ``expect`` / ``todo-expect`` mark hack
sites, ``legit-for`` marks a legitimate look-alike file for the rules it names.  Definitions, also
printed with every table:

* positives(R): annotated sites ``expect: R`` and ``todo-expect: R`` (a known miss is still a hack);
* recall(R) = found / positives, a site being found when R fires on that line;
* legit files(R): files annotated ``legit-for: R``; FP rate(R) = legit files in which R fires
  anywhere / legit files(R): the chance that a legitimate look-alike gets flagged;
* stray(R): findings of R on lines not annotated ``expect``/``todo-expect`` for R, in any file
  (a ``spurious:`` annotation still counts: it is a false alarm, only a known one);
  precision(R) = found / (found + stray).

A class (TAXONOMY.md; the rule's ``taxonomy`` field) adds up its rules: a site counts for every
class of its rule, and a legit file of the class is flagged when any of its rules that the file is
legit for fires in it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..annotations import parse_annotations
from ..config import Config
from ..inputs import InputOptions, Submission, discover
from ..model import Report, Stage

if TYPE_CHECKING:
    from ..pipeline import RunOptions
from ..registry import Registry, load_registry

DEFINITIONS = (
    "recall = annotated sites (expect + todo-expect) found on their line / annotated sites",
    "FP rate = legit look-alike files (legit-for: R) in which R fires anywhere / legit look-alike files for R",
    "stray = findings of R on lines not annotated for R, in any file; precision = found / (found + stray)",
)

TAXONOMY_NAMES = {
    0: "meta", 1: "value guard", 2: "shape guard / hardcoded shapes", 3: "torch fallback (Python)",
    4: "torch fallback (C++)", 5: "try/except fallback", 6: "identity / constant", 7: "unwritten output",
    8: "output caching", 9: "timing escape", 10: "timer tampering", 11: "harness detection",
    12: "reference reuse", 13: "input mutation", 14: "precision downgrade", 15: "partial computation",
    16: "numerically unsafe", 17: "parameter blind spot", 18: "seed / input replay", 19: "obfuscation",
    20: "task degeneracy",
}


@dataclass
class Tally:
    """Counts for one rule or one class."""

    key: str
    label: str
    positives: int = 0
    found: int = 0
    stray: int = 0
    legit_files: int = 0
    legit_flagged: int = 0
    hack_files: int = 0
    missed: list[str] = field(default_factory=list)  # path:line of missed sites
    false_alarms: list[str] = field(default_factory=list)  # path:line of stray findings

    @property
    def recall(self) -> float | None:
        return self.found / self.positives if self.positives else None

    @property
    def fp_rate(self) -> float | None:
        return self.legit_flagged / self.legit_files if self.legit_files else None

    @property
    def precision(self) -> float | None:
        return self.found / (self.found + self.stray) if (self.found + self.stray) else None

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "label": self.label, "positives": self.positives, "found": self.found,
                "recall": self.recall, "legit_files": self.legit_files, "legit_flagged": self.legit_flagged,
                "fp_rate": self.fp_rate, "stray": self.stray, "precision": self.precision,
                "hack_files": self.hack_files, "missed": self.missed, "false_alarms": self.false_alarms}


@dataclass
class Measurement:
    files: int
    annotated_files: int
    rules: list[Tally]
    classes: list[Tally]
    stages: tuple[str, ...] = ("static",)

    def to_dict(self) -> dict[str, Any]:
        return {"files": self.files, "annotated_files": self.annotated_files, "stages": list(self.stages),
                "definitions": list(DEFINITIONS), "rules": [t.to_dict() for t in self.rules],
                "classes": [t.to_dict() for t in self.classes]}


def _scan(subs: Sequence[Submission], config: Config, jobs: int, dynamic: bool, options: RunOptions | None = None) -> list[Report]:
    """Scan each file in the mode its annotations ask for (``# hackscan-test: mode=audit``)."""
    from ..parallel import scan_items

    by_mode: dict[str, list[int]] = defaultdict(list)
    anns = [parse_annotations(s.code) for s in subs]
    for i, a in enumerate(anns):
        by_mode[a.mode or config.mode].append(i)
    reports: list[Report | None] = [None] * len(subs)
    for mode, idx in sorted(by_mode.items()):
        out = scan_items([subs[i] for i in idx], config.with_(mode=mode), jobs=jobs)
        for i, r in zip(idx, out, strict=True):
            reports[i] = r
    if dynamic:
        from ..pipeline import RunOptions, _guarded, dynamic_available

        reason = dynamic_available()
        if reason is None:
            from ..dynamic import run_dynamic_stage

            opts = options or RunOptions()
            for i, sub in enumerate(subs):
                reports[i] = _guarded(run_dynamic_stage, sub, reports[i], opts, config)  # type: ignore[arg-type]
    return [r for r in reports if r is not None]


def measure(paths: Iterable[str], *, config: Config | None = None, registry: Registry | None = None,
            jobs: int = 1, dynamic: bool = False, run_options: RunOptions | None = None) -> Measurement:
    """Scan every file under ``paths`` and compare what fired with what the annotations say."""
    registry = registry or load_registry()
    config = config or Config()
    subs = [s for s in discover(list(paths), InputOptions()) if isinstance(s, Submission)]
    reports = _scan(subs, config, jobs, dynamic, run_options)
    # a rule is measured only where the stage that emits it ran: annotations of dynamic rules are
    # not misses of a static-only measurement
    stage_set = {Stage.STATIC, Stage.DYNAMIC, Stage.PERFORMANCE} if dynamic else {Stage.STATIC}
    known = {r.id for r in registry if r.stage in stage_set}
    rules: dict[str, Tally] = {}

    def tally(rule: str) -> Tally:
        if rule not in rules:
            r = registry.get(rule)
            rules[rule] = Tally(rule, r.name)
        return rules[rule]

    annotated = 0
    per_file: list[tuple[Submission, Any, set[tuple[str, int]]]] = []
    for sub, rep in zip(subs, reports, strict=True):
        ann = parse_annotations(sub.code)
        if ann.expected or ann.todo or ann.legit_for or ann.spurious:
            annotated += 1
        actual = {(f.rule, f.location.line) for f in rep.findings if not f.suppressed and f.rule in known}
        per_file.append((sub, ann, actual))
        positives = ann.expected | ann.todo
        for rule, line in positives:
            if rule not in known:
                continue
            t = tally(rule)
            t.positives += 1
            if (rule, line) in actual:
                t.found += 1
            else:
                t.missed.append(f"{sub.path}:{line}")
        for rule in {r for r, _ in positives if r in known}:
            tally(rule).hack_files += 1
        for rule, line in actual - positives - ann.optional:
            t = tally(rule)
            t.stray += 1
            t.false_alarms.append(f"{sub.path}:{line}")
        fired = {r for r, _ in actual}
        for rule in ann.legit_for:
            if rule not in known:
                continue
            t = tally(rule)
            t.legit_files += 1
            if rule in fired:
                t.legit_flagged += 1
    classes = _classes(per_file, registry, known)
    stages = ("static", "dynamic") if dynamic else ("static",)
    return Measurement(len(subs), annotated, [rules[k] for k in sorted(rules)], classes, stages)


def _classes(per_file: list[tuple[Submission, Any, set[tuple[str, int]]]], registry: Registry,
             known: set[str]) -> list[Tally]:
    out: dict[int, Tally] = {}
    tax = {r.id: (r.taxonomy or (0,)) for r in registry}

    def cls(c: int) -> Tally:
        if c not in out:
            out[c] = Tally(str(c), TAXONOMY_NAMES.get(c, "?"))
        return out[c]

    for sub, ann, actual in per_file:
        positives = {(r, ln) for r, ln in ann.expected | ann.todo if r in known}
        hack_classes: set[int] = set()
        for rule, line in positives:
            for c in tax[rule]:
                t = cls(c)
                t.positives += 1
                hack_classes.add(c)
                if (rule, line) in actual:
                    t.found += 1
                else:
                    t.missed.append(f"{sub.path}:{line} ({rule})")
        for c in hack_classes:
            cls(c).hack_files += 1
        for rule, _line in actual - positives - ann.optional:
            for c in tax.get(rule, (0,)):
                cls(c).stray += 1
        legit_classes: dict[int, set[str]] = defaultdict(set)
        for rule in ann.legit_for:
            if rule in known:
                for c in tax[rule]:
                    legit_classes[c].add(rule)
        fired = {r for r, _ in actual}
        for c, rules in legit_classes.items():
            t = cls(c)
            t.legit_files += 1
            if rules & fired:
                t.legit_flagged += 1
    return [out[c] for c in sorted(out)]


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def _frac(a: int, b: int, rate: float | None) -> str:
    return "–" if not b else f"{a}/{b} ({_pct(rate)})"


def table_rows(tallies: Sequence[Tally]) -> list[list[str]]:
    return [[t.key, t.label, _frac(t.found, t.positives, t.recall), _frac(t.legit_flagged, t.legit_files, t.fp_rate),
             str(t.stray), _pct(t.precision)] for t in tallies]


def _text_table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return out


def render_measurement(m: Measurement, fmt: str = "text", show_misses: bool = False) -> str:
    if fmt == "json":
        return json.dumps(m.to_dict(), indent=2) + "\n"
    header = ["rule", "name", "recall", "FP rate (legit files)", "stray", "precision"]
    cheader = ["class", "hack class", "recall", "FP rate (legit files)", "stray", "precision"]
    if fmt == "markdown":
        def md(h: list[str], rows: list[list[str]]) -> list[str]:
            return ["| " + " | ".join(h) + " |", "|" + "---|" * len(h)] + ["| " + " | ".join(r) + " |" for r in rows]

        out = [f"{m.files} files ({m.annotated_files} annotated), stages: {', '.join(m.stages)}", ""]
        out += md(header, table_rows(m.rules)) + [""] + md(cheader, table_rows(m.classes)) + [""]
        out += [f"- {d}" for d in DEFINITIONS]
        return "\n".join(out) + "\n"
    out = [f"hackscan measure: {m.files} files ({m.annotated_files} annotated), stages: {', '.join(m.stages)}", ""]
    out += _text_table(header, table_rows(m.rules)) + [""]
    out += _text_table(cheader, table_rows(m.classes)) + [""]
    out += ["Definitions:"] + [f"  {d}" for d in DEFINITIONS]
    if show_misses:
        out.append("")
        for t in m.rules:
            for where in t.missed:
                out.append(f"missed      {t.key} {where}")
            for where in t.false_alarms:
                out.append(f"false alarm {t.key} {where}")
    return "\n".join(out) + "\n"
