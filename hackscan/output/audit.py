"""What the audit views (Markdown, HTML) show, gathered once from the reports.

Both views render the same facts: a summary (verdicts, findings per rule and per severity), the
claimed and verified speedups of each submission, and per submission its findings with a code
excerpt and their dynamic evidence.  Gathering them here keeps the two renderers to layout only.

The performance stage's dictionary is read defensively: a report from a run without it, or from an
older or newer version of it, still renders, with the missing figures left out.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..model import Finding, Report, Severity, Verdict

VERDICT_ORDER = (Verdict.HACK, Verdict.SUSPICIOUS, Verdict.CLEAN, Verdict.ERROR)
SEVERITY_ORDER = (Severity.ERROR, Severity.WARNING, Severity.INFO)
# evidence keys the dynamic stage documents (hackscan/dynamic/PROTOCOL.md), shown in this order
DYNAMIC_KEYS = ("probe", "input", "seed", "max_abs_error", "max_rel_error", "error_ratio", "first_mismatch")
# the claimed speedup a dataset states for its own default harness comes first
CLAIMED_PREFERENCE = ("score_default", "score", "speedup")
# which measured baseline is the headline: TF32 where it exists (the realistic GPU baseline), else strict fp32
BASELINE_PREFERENCE = ("eager_tf32", "tf32", "eager_fp32", "fp32", "eager", "compile", "torch_compile")
EXCERPT_CONTEXT = 2


@dataclass(frozen=True)
class Excerpt:
    """A few numbered source lines around a finding; ``mark`` is the finding's line."""

    lines: tuple[tuple[int, str], ...]
    mark: int
    column: int = 0


@dataclass(frozen=True)
class FindingView:
    finding: Finding
    excerpt: Excerpt | None
    dynamic: tuple[tuple[str, str], ...]  # (evidence key, shown value) for dynamic evidence


@dataclass(frozen=True)
class Performance:
    speedups: tuple[tuple[str, float], ...] = ()  # (baseline, speedup), in the stage's order
    headline: str | None = None
    headline_speedup: float | None = None
    memory_ratio: float | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class SubmissionView:
    report: Report
    anchor: str
    findings: tuple[FindingView, ...]
    claimed: float | None
    claimed_field: str | None
    performance: Performance | None
    dynamic_note: str | None


@dataclass(frozen=True)
class Audit:
    submissions: tuple[SubmissionView, ...]
    verdicts: Mapping[str, int]
    by_rule: tuple[tuple[str, str, str, int], ...]  # (rule, name, severity, count), most frequent first
    by_severity: Mapping[str, int]
    speed_points: tuple[tuple[float, float, str, str], ...]  # (claimed, verified, path, verdict)
    claimed_by_verdict: Mapping[str, tuple[float, ...]]
    title: str = "hackscan audit"
    extra: Mapping[str, Any] = field(default_factory=dict)


class SourceLoader:
    """Reads the code a finding points at: a file on disk, or the code field of a JSONL record.

    Findings carry only their own line (``Finding.snippet``); an excerpt needs its neighbours, so the
    loader reads each file once and each dataset line once.
    """

    def __init__(self, code_field: str = "custom_code", sources: Mapping[str, str] | None = None):
        self.code_field = code_field
        self._given = dict(sources or {})
        self._files: dict[str, list[str] | None] = {}
        self._records: dict[tuple[str, int], list[str] | None] = {}

    def lines_for(self, path: str, record: int | None) -> list[str] | None:
        key = f"{path}:{record}" if record is not None else path
        if key in self._given:
            return self._given[key].splitlines()
        if record is None:
            if path not in self._files:
                self._files[path] = self._read(path)
            return self._files[path]
        rkey = (path, record)
        if rkey not in self._records:
            self._records[rkey] = self._read_record(path, record)
        return self._records[rkey]

    @staticmethod
    def _read(path: str) -> list[str] | None:
        try:
            return Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return None

    def _read_record(self, path: str, record: int) -> list[str] | None:
        lines = self._files.get(path)
        if lines is None and path not in self._files:
            lines = self._files[path] = self._read(path)
        if not lines or record > len(lines):
            return None
        try:
            obj = json.loads(lines[record - 1])
        except json.JSONDecodeError:
            return None
        code = obj.get(self.code_field) if isinstance(obj, dict) else None
        return code.splitlines() if isinstance(code, str) else None


# findings about hackscan itself (a crashed rule) point at line 1 only to have a location
NO_EXCERPT = frozenset({"HS005"})


def excerpt_for(f: Finding, loader: SourceLoader, context: int = EXCERPT_CONTEXT) -> Excerpt | None:
    loc = f.location
    if loc.line <= 0 or f.rule in NO_EXCERPT:
        return None
    lines = loader.lines_for(loc.path, loc.record)
    if lines is None or loc.line > len(lines):
        if f.snippet is None:
            return None
        return Excerpt(((loc.line, f.snippet),), loc.line, loc.column)
    lo, hi = max(1, loc.line - context), min(len(lines), loc.line + context)
    return Excerpt(tuple((n, lines[n - 1]) for n in range(lo, hi + 1)), loc.line, loc.column)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={_fmt(v)}" for k, v in value.items())
    return str(value)


def dynamic_evidence(f: Finding) -> tuple[tuple[str, str], ...]:
    ev = f.evidence or {}
    return tuple((k, _fmt(ev[k])) for k in DYNAMIC_KEYS if k in ev and ev[k] is not None)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) and math.isfinite(float(value)):
        return float(value)
    if isinstance(value, Mapping):
        for key in ("speedup", "value", "median", "ratio"):
            if key in value:
                return _number(value[key])
    return None


def claimed_speedup(report: Report) -> tuple[float | None, str | None]:
    claimed = (report.meta or {}).get("claimed")
    if not isinstance(claimed, Mapping):
        return None, None
    named = (report.meta or {}).get("claimed_field")  # --claimed-field chose it: it comes first
    for key in ((named,) if isinstance(named, str) else ()) + CLAIMED_PREFERENCE:
        v = _number(claimed.get(key))
        if v is not None and v > 0:
            return v, key
    for key in sorted(claimed):
        v = _number(claimed[key])
        if v is not None and v > 0:
            return v, key
    return None, None


def performance_of(report: Report) -> Performance | None:
    """Speedups per baseline, the headline one, and the memory ratio, from ``report.performance``.

    Accepts ``speedups: {baseline: x}`` (numbers or ``{"speedup": x, ...}``) or ``baselines:
    {name: {"speedup": x}}``; ``memory: {"ratio": r}`` or ``memory_ratio``; ``headline`` (a text) and
    ``headline_speedup`` / ``headline_baseline`` when the stage names its own headline.
    """
    perf = report.performance
    if not isinstance(perf, Mapping) or not perf:
        return None
    speedups: dict[str, float] = {}
    for key in ("speedups", "speedup"):
        block = perf.get(key)
        if isinstance(block, Mapping):
            for name, v in block.items():
                n = _number(v)
                if n is not None:
                    speedups[str(name)] = n
    baselines = perf.get("baselines")
    if isinstance(baselines, Mapping):
        for name, v in baselines.items():
            if isinstance(v, Mapping) and str(name) not in speedups:
                n = _number(v.get("speedup"))
                if n is not None:
                    speedups[str(name)] = n
    head = _number(perf.get("headline_speedup"))
    if head is None:
        # the stage names its headline baseline either way
        for key in ("headline_baseline", "headline"):
            base = perf.get(key)
            if isinstance(base, str) and base in speedups:
                head = speedups[base]
                break
    if head is None:
        head = next((speedups[b] for b in BASELINE_PREFERENCE if b in speedups), None)
    if head is None and speedups:
        head = next(iter(speedups.values()))
    memory = perf.get("memory")
    ratio = _number(perf.get("memory_ratio"))
    if ratio is None and isinstance(memory, Mapping):
        ratio = _number(memory.get("ratio"))
    notes = []
    for key in ("skipped", "reason", "note"):
        if isinstance(perf.get(key), str):
            notes.append(perf[key])
    if perf.get("valid") is False:
        reasons = perf.get("invalid_reasons")
        why = "; ".join(str(r) for r in reasons) if isinstance(reasons, (list, tuple)) else ""
        notes.append("timing not trusted" + (f": {why}" if why else ""))
    headline = perf.get("headline") if isinstance(perf.get("headline"), str) else None
    if headline in speedups:  # a baseline's name, not a sentence
        headline = None
    if not speedups and ratio is None and headline is None and not notes:
        return None
    return Performance(tuple(speedups.items()), headline, head, ratio, tuple(notes))


def _dynamic_note(report: Report) -> str | None:
    dyn = report.dynamic
    if not isinstance(dyn, Mapping):
        return None
    if dyn.get("ran") is False:
        return str(dyn.get("reason") or "dynamic stage not run")
    parts = []
    probes = dyn.get("probes")
    if isinstance(probes, (list, tuple)):
        parts.append(f"{len(probes)} probe(s) run")
    elif isinstance(probes, Mapping):
        parts.append(f"{len(probes)} probe(s) run")
    skipped = dyn.get("skipped")
    if isinstance(skipped, (list, tuple, Mapping)) and skipped:
        parts.append(f"{len(skipped)} skipped")
    if dyn.get("device"):
        parts.append(f"device {dyn['device']}")
    return ", ".join(parts) or None


def _anchor(i: int, path: str) -> str:
    safe = "".join(c if c.isalnum() else "-" for c in path)[-48:].strip("-")
    return f"s{i + 1}-{safe}"


def gather(reports: Sequence[Report], *, code_field: str = "custom_code", sources: Mapping[str, str] | None = None,
           title: str = "hackscan audit") -> Audit:
    loader = SourceLoader(code_field, sources)
    verdicts = Counter(r.verdict.value for r in reports)
    rules: Counter[str] = Counter()
    names: dict[str, tuple[str, str]] = {}
    severities: Counter[str] = Counter()
    subs: list[SubmissionView] = []
    points: list[tuple[float, float, str, str]] = []
    claimed_by_verdict: dict[str, list[float]] = {v.value: [] for v in VERDICT_ORDER}
    for i, r in enumerate(reports):
        for f in r.active_findings:
            rules[f.rule] += 1
            names.setdefault(f.rule, (f.name, f.severity.value))
            severities[f.severity.value] += 1
        views = tuple(FindingView(f, excerpt_for(f, loader), dynamic_evidence(f)) for f in r.findings)
        claimed, claimed_field = claimed_speedup(r)
        perf = performance_of(r)
        if claimed is not None:
            claimed_by_verdict[r.verdict.value].append(claimed)
            if perf is not None and perf.headline_speedup is not None and perf.headline_speedup > 0:
                points.append((claimed, perf.headline_speedup, r.path, r.verdict.value))
        subs.append(SubmissionView(r, _anchor(i, r.path), views, claimed, claimed_field, perf, _dynamic_note(r)))
    by_rule = tuple((rule, names[rule][0], names[rule][1], n)
                    for rule, n in sorted(rules.items(), key=lambda kv: (-kv[1], kv[0])))
    return Audit(
        submissions=tuple(subs),
        verdicts={v.value: verdicts.get(v.value, 0) for v in VERDICT_ORDER},
        by_rule=by_rule,
        by_severity={s.value: severities.get(s.value, 0) for s in SEVERITY_ORDER},
        speed_points=tuple(points),
        claimed_by_verdict={k: tuple(v) for k, v in claimed_by_verdict.items()},
        title=title,
    )


def fmt_speedup(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}×"


