"""The static stage: submission -> units -> facts -> rules -> findings -> report.

One ``StaticScanner`` holds the selected rules and configuration and is safe to share across
threads (it holds no per-scan state, only a small thread-safe cache of parsed references); each
``scan`` builds a fresh ``ScanContext`` and releases its facts when done.  A rule that crashes
becomes an ``analysis-failure`` finding for that submission; it never takes the scan down.
"""

from __future__ import annotations

import gc
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .config import Config
from .context import Hit, ReferenceCache, ScanContext, location_for
from .inputs import InputProblem, Submission
from .model import Confidence, Finding, Location, Report, Severity, SkippedRule, Stage, Verdict, verdict_for
from .registry import Registry, Rule, load_registry
from .suppress import find_suppressions
from .units import MappedText, Unit

SYNTAX_ERROR = "HS001"
UNRESOLVED_SOURCE = "HS002"
SUPPRESSION_IN_GATE = "HS003"
UNUSED_SUPPRESSION = "HS004"
ANALYSIS_FAILURE = "HS005"
INPUT_ERROR = "HS006"

# one rule of a scan plan: the rule, its check function (None when it failed to resolve), and its
# id, options and ``requires_reference``
_PlanEntry = tuple[Rule, "Callable[..., Any] | None", str, Any, bool]


@dataclass(frozen=True)
class ScanOptions:
    config: Config = Config()


class StaticDeadline(BaseException):
    """The static analysis of one submission ran past its deadline.  A ``BaseException``: a rule's
    own ``except Exception`` must not swallow it."""


def deadline_seconds() -> float:
    """Each submission's static deadline: ``HACKSCAN_STATIC_DEADLINE`` seconds, 60 by default (a
    file takes milliseconds; the value resolver's own bounds stop the known blow-ups long before)."""
    import os

    try:
        return float(os.environ.get("HACKSCAN_STATIC_DEADLINE") or 60.0)
    except ValueError:
        return 60.0


@contextmanager
def static_deadline(seconds: float) -> Iterator[None]:
    """Raise ``StaticDeadline`` in this thread after ``seconds`` (a real-time timer, SIGALRM).  On
    a thread other than the main one, or where the timer is in use, nothing is armed: the parallel
    scanner's per-file timeout and the resolver's bounds still hold there."""
    import signal

    if (threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer")
            or not seconds > 0 or signal.getitimer(signal.ITIMER_REAL)[0] > 0):
        yield
        return

    def expired(signum: int, frame: Any) -> None:
        raise StaticDeadline(f"the static analysis ran past its {seconds:g} s deadline")

    # ``_signal.signal`` is what ``signal.signal`` calls, without the conversion of its arguments
    # and result to enums: that conversion, twice per scan, was half of this guard's cost (which
    # runs for every sample a training loop scores).  It takes the plain ints, not the enums.
    import _signal

    previous = _signal.signal(signal.SIGALRM, expired) or _signal.SIG_DFL
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _signal.signal(signal.SIGALRM, previous)


class StaticScanner:
    def __init__(self, config: Config | None = None, registry: Registry | None = None,
                 reference_cache_size: int = 8):
        self.config = config or Config()
        # references parsed once for consecutive candidates of one task (0 turns the cache off)
        self.references = ReferenceCache(reference_cache_size)
        self.registry = registry or load_registry()
        selected = self.registry.select(self.config.select, self.config.ignore)
        self.rules: list[Rule] = [r for r in selected if r.stage is Stage.STATIC and r.check]
        self._selected_ids = {r.id for r in selected}
        self._plans: list[tuple[Rule, frozenset[str], Callable[..., Any] | None]] | None = None
        # the plan narrowed to the rules that apply to one set of languages (a handful of sets occur)
        self._plans_for: dict[frozenset[str], list[_PlanEntry]] = {}

    def _plan(self) -> list[tuple[Rule, frozenset[str], Callable[..., Any] | None]]:
        """Each rule with the languages that make it apply (``any`` stands for all; a CUDA rule
        applies to C++ units and the reverse) and its check function: worked out once, not per
        rule and submission.  Built on the first scan (importing the check modules), then kept."""
        if self._plans is None:
            plans = []
            for rule in self.rules:
                langs = set(rule.languages)
                if langs & {"cuda", "cpp"}:
                    langs |= {"cuda", "cpp"}
                try:
                    check = rule.check_function()
                except Exception:  # resolved again in the scan, where the failure becomes a finding
                    check = None
                plans.append((rule, frozenset(langs), check))
            self._plans = plans
        return self._plans

    def _plan_for(self, langs: frozenset[str]) -> list[_PlanEntry]:
        """The rules of ``_plan`` that apply to a submission with units in ``langs``, in plan order:
        worked out once per language set rather than tested rule by rule in every scan.  Each
        comes with the fields ``_run_rules`` reads of it (a rule is frozen), unpacked once here
        rather than read attribute by attribute for every rule of every scan."""
        plan = self._plans_for.get(langs)
        if plan is None:
            plan = [(rule, check, rule.id, rule.options, rule.requires_reference)
                    for rule, applies_to, check in self._plan()
                    if "any" in applies_to or not applies_to.isdisjoint(langs)]
            self._plans_for[langs] = plan  # racing threads store equal lists
        return plan

    # ------------------------------------------------------------------ entry points
    def scan(self, item: Submission | InputProblem) -> Report:
        if isinstance(item, InputProblem):
            return self._input_problem(item)
        try:
            # what ``scan_gc`` does, called directly
            _pause_gc()
            try:
                with static_deadline(deadline_seconds()):
                    return self._scan(item)
            finally:
                _resume_gc()
        except StaticDeadline as exc:
            # this submission alone: an error result, and the next submission is scanned
            finding = self._finding_for(
                self.registry.get(ANALYSIS_FAILURE), Location(item.file or item.path, 1, 1, record=item.record),
                f"hackscan failed to analyse this submission: {exc}")
            return Report(path=item.path, verdict=Verdict.ERROR, findings=(finding,), error=str(exc),
                          record=item.record, meta=dict(item.meta))
        except Exception as exc:  # a bug in hackscan must not lose the other submissions
            finding = self._finding_for(
                self.registry.get(ANALYSIS_FAILURE),
                Location(item.file or item.path, 1, 1, record=item.record),
                f"hackscan failed to analyse this submission: {type(exc).__name__}: {exc}",
                evidence={"traceback": traceback.format_exc(limit=6)},
            )
            return Report(path=item.path, verdict=Verdict.ERROR, findings=(finding,),
                          error=f"{type(exc).__name__}: {exc}", record=item.record, meta=dict(item.meta))

    def scan_many(self, items: Iterable[Submission | InputProblem]) -> list[Report]:
        """Scan every item; the collector is tuned for the batch while it runs (``batch_gc``)."""
        with batch_gc():
            return [self.scan(i) for i in items]

    # ------------------------------------------------------------------ internals
    def _input_problem(self, item: InputProblem) -> Report:
        rule = self.registry.get(INPUT_ERROR)
        path = item.path.rsplit(":", 1)[0] if item.record is not None else item.path
        finding = self._finding_for(rule, Location(path, item.record or 0, 0, record=item.record),
                                    f"cannot read input: {item.reason}")
        return Report(path=item.path, verdict=Verdict.ERROR, findings=(finding,), error=item.reason,
                      record=item.record)

    def _scan(self, sub: Submission) -> Report:
        host = None
        units: list[Unit]
        if sub.language == "python":
            from .python.module import HostModule

            try:
                host = HostModule.parse(sub.code, sub.file or sub.path)
            except (SyntaxError, ValueError) as exc:
                return self._syntax_error(sub, exc)
            units = list(host.units)
        else:
            units = [Unit(id=sub.path.rsplit("/", 1)[-1], language=sub.language,
                          mapped=MappedText.verbatim(sub.code, 1, 0), role="file")]
        ctx = ScanContext(sub, host, units, self.config.rule_options, self.config.mode, self.references,
                          harness=self.config.harness)
        lines = _Lines(sub, host)
        try:
            findings, skipped = self._run_rules(sub, ctx, lines)
            program = _outline(host)
        finally:
            ctx.release()
        findings = self._apply_suppressions(sub, findings)
        findings = _dedupe(findings)
        findings.sort(key=lambda f: (f.location.path, f.location.line, f.location.column, f.rule))
        # the rules' findings came with their snippets; the engine's own (suppressions, failures)
        # and those in other files get theirs here
        findings = [f if f.snippet is not None else self._with_snippet(sub, f, lines) for f in findings]
        return Report(
            path=sub.path,
            verdict=verdict_for(findings),
            findings=tuple(findings),
            skipped=tuple(skipped),
            record=sub.record,
            reference=sub.reference_path,
            meta=dict(sub.meta),
            program=program,
        )

    def _run_rules(self, sub: Submission, ctx: ScanContext,
                   lines: _Lines | None = None) -> tuple[list[Finding], list[SkippedRule]]:
        findings: list[Finding] = []
        skipped: list[SkippedRule] = []
        from_hit = self._from_hit
        for rule, check, rule_id, options, requires_reference in self._plan_for(ctx.languages):
            if requires_reference and ctx.reference is None:
                why = "no reference given" if not sub.reference else "the reference could not be parsed"
                skipped.append(SkippedRule(rule_id, why))
                continue
            ctx.rule_id, ctx.rule_defaults = rule_id, options
            try:
                hits = list((check or rule.check_function())(ctx) or ())
            except Exception as exc:
                findings.append(self._finding_for(
                    self.registry.get(ANALYSIS_FAILURE), Location(sub.file or sub.path, 1, 1, record=sub.record),
                    f"rule {rule.id} ({rule.name}) failed: {type(exc).__name__}: {exc}",
                    evidence={"rule": rule.id, "traceback": traceback.format_exc(limit=6)}))
                continue
            for hit in hits:
                findings.append(from_hit(rule, ctx, hit, lines))
        return findings, skipped

    def _syntax_error(self, sub: Submission, exc: Exception) -> Report:
        line = getattr(exc, "lineno", None) or 1
        col = getattr(exc, "offset", None) or 1
        msg = getattr(exc, "msg", None) or str(exc)
        finding = self._finding_for(self.registry.get(SYNTAX_ERROR),
                                    Location(sub.file or sub.path, line, col, record=sub.record),
                                    f"the host code does not parse: {msg}")
        finding = self._with_snippet(sub, finding)
        return Report(path=sub.path, verdict=Verdict.ERROR, findings=(finding,), error=f"syntax error: {msg}",
                      record=sub.record, reference=sub.reference_path, meta=dict(sub.meta))

    def _finding_for(self, rule: Rule, location: Location, message: str, evidence: dict | None = None) -> Finding:
        return Finding(rule=rule.id, name=rule.name, severity=self.config.severity.get(rule.id, rule.severity),
                       confidence=rule.confidence, message=message, location=location,
                       stage=Stage.STATIC, evidence=evidence or {})

    def _from_hit(self, rule: Rule, ctx: ScanContext, hit: Hit, lines: _Lines | None = None) -> Finding:
        """The finding for ``hit``; with ``lines``, already carrying its snippet when the hit lies
        in the submission's own text (what ``_with_snippet`` would add later, without a copy)."""
        if hit.message is not None:
            message = hit.message
        else:
            try:
                message = rule.message.format(**hit.args)
            except (KeyError, IndexError, ValueError):
                message = rule.message
        severity = self.config.severity.get(rule.id) or hit.severity or rule.severity
        snippet = None
        if lines is not None and hit.line > 0 and (hit.path is None or hit.path in (lines.file, lines.path)):
            snippet = lines.line(hit.line)
        return Finding(
            rule=rule.id,
            name=rule.name,
            severity=severity,
            confidence=hit.confidence or rule.confidence,
            message=message,
            location=location_for(ctx, hit),
            stage=Stage.STATIC,
            evidence=dict(hit.evidence),
            snippet=snippet,
        )

    def _apply_suppressions(self, sub: Submission, findings: list[Finding]) -> list[Finding]:
        sups = find_suppressions(sub.code)
        if not sups:
            return findings
        file_path = sub.file or sub.path
        if self.config.mode != "audit":
            rule = self.registry.get(SUPPRESSION_IN_GATE)
            if rule.id not in self._selected_ids:
                return findings
            extra = [
                self._finding_for(rule, Location(file_path, s.line, s.column, record=sub.record),
                                  f"suppression comment ignore[{', '.join(s.codes) or '*'}] in gate mode: "
                                  "ignored, and flagged because the code under training wrote it",
                                  evidence={"codes": list(s.codes), "reason": s.reason})
                for s in sups
            ]
            return findings + extra
        used: set[int] = set()
        out: list[Finding] = []
        for f in findings:
            sup = next((s for s in sups if f.location.path == file_path and s.covers(f.rule, f.name, f.location.line)), None)
            if sup is not None and f.rule not in (SUPPRESSION_IN_GATE, UNUSED_SUPPRESSION):
                used.add(id(sup))
                out.append(f.with_(suppressed=True, suppression_reason=sup.reason or "(no reason given)"))
            else:
                out.append(f)
        rule = self.registry.get(UNUSED_SUPPRESSION)
        if rule.id in self._selected_ids:
            for s in sups:
                if id(s) not in used:
                    out.append(self._finding_for(rule, Location(file_path, s.line, s.column, record=sub.record),
                                                 f"unused suppression ignore[{', '.join(s.codes) or '*'}]: "
                                                 "no finding of these rules on the line it covers",
                                                 evidence={"codes": list(s.codes)}))
        return out

    @staticmethod
    def _with_snippet(sub: Submission, f: Finding, lines: _Lines | None = None) -> Finding:
        """``f`` with the source line it points at; ``lines`` is the scan's split of ``sub.code``."""
        if f.snippet is not None or f.location.line <= 0:
            return f
        if f.location.path not in (sub.file, sub.path):
            try:
                with open(f.location.path, encoding="utf-8") as fh:
                    other = fh.read().splitlines()
            except OSError:
                return f
            line = other[f.location.line - 1] if f.location.line <= len(other) else None
        else:
            line = (lines or _Lines(sub, None)).line(f.location.line)
        return f.with_(snippet=line) if line is not None else f


class _Lines:
    """The submission's lines for snippets, split at most once per scan.

    A host file's text is usually split already (``HostSource.lines``, with line ends kept, for
    locating literals): its lines are used then instead of splitting the text again.  ``line``
    gives what ``sub.code.splitlines()[n - 1]`` gives, or None past the end.
    """

    __slots__ = ("sub", "host", "file", "path", "_lines", "_kept")

    def __init__(self, sub: Submission, host: Any):
        self.sub, self.host = sub, host
        self.file, self.path = sub.file, sub.path
        self._lines: list[str] | tuple[str, ...] | None = None
        self._kept = False  # whether ``_lines`` keep their line ends (the host's split)

    def line(self, n: int) -> str | None:
        lines = self._lines
        if lines is None:
            host = self.host
            # the host's split of this very text, when it has made one
            kept = host.source.__dict__.get("lines") if host is not None and host.source.text is self.sub.code \
                else None
            self._kept = kept is not None
            lines = self._lines = kept if kept is not None else self.sub.code.splitlines()
        if not 0 < n <= len(lines):
            return None
        # a kept line is its text and one line end: ``splitlines`` drops that end exactly
        return lines[n - 1].splitlines()[0] if self._kept else lines[n - 1]


# One scan allocates tens of thousands of objects (two syntax trees, their indexes, the facts) that
# all live until the scan ends and are then freed by reference counting.  With the default
# threshold (700) the collector runs dozens of young collections per scan, each walking the live
# trees, and every few scans a full collection walks the whole heap (imports, rule registry, the
# caller's data).  For a batch, a higher first threshold lets most of a scan's objects die before
# any collection sees them, and ``gc.freeze`` keeps what existed before the batch out of the full
# collections.  Nothing a scan creates depends on the collector (scans break their own cycles in
# ``ScanContext.release``), so results are the same; the settings are restored when the outermost
# batch ends (nested or concurrent batches share one saved state).
BATCH_GC_THRESHOLD = 50_000
_gc_lock = threading.Lock()
_gc_batches = 0
_gc_saved: tuple[tuple[int, ...], bool] | None = None


@contextmanager
def batch_gc(threshold: int = BATCH_GC_THRESHOLD) -> Iterator[None]:
    """Collector settings for many scans in a row, restored afterwards.

    Leaves the collector alone when it is disabled or already tuned above ``threshold``, and freezes
    the existing heap only when the caller has not frozen objects itself (``gc.unfreeze`` on exit
    must not thaw the caller's own freeze).  A caller that changes the collector's thresholds
    during a batch has them reset when the batch ends.
    """
    global _gc_batches, _gc_saved
    with _gc_lock:
        if _gc_batches == 0:
            saved = gc.get_threshold()
            tune = gc.isenabled() and 0 < saved[0] < threshold
            freeze = tune and gc.get_freeze_count() == 0
            if tune:
                gc.set_threshold(threshold, *saved[1:])
            if freeze:
                gc.freeze()
            _gc_saved = (saved, freeze) if tune else None
        _gc_batches += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_batches -= 1
            if _gc_batches == 0 and _gc_saved is not None:
                saved, freeze = _gc_saved
                _gc_saved = None
                gc.set_threshold(*saved)
                if freeze:
                    gc.unfreeze()


# One call on its own (a training loop scanning each sample as it comes) gets the same idea in a
# lighter form: the collector is paused while the scan runs and resumed when it returns.  The scan's
# objects are freed by reference counting at its end (``ScanContext.release`` breaks their cycles),
# and CPython's young-generation count goes down as tracked objects are freed, so resuming costs
# almost nothing; the caller's own objects stay in the generation they were in (nothing is frozen
# or promoted).  Nested and concurrent scans share one pause; the outermost resumes the collector,
# and only when it was running before.
_gc_scans = 0
_gc_paused_by_us = False


def _pause_gc() -> None:
    global _gc_scans, _gc_paused_by_us
    with _gc_lock:
        if _gc_scans == 0 and gc.isenabled():
            gc.disable()
            _gc_paused_by_us = True
        _gc_scans += 1


def _resume_gc() -> None:
    global _gc_scans, _gc_paused_by_us
    with _gc_lock:
        _gc_scans -= 1
        if _gc_scans == 0 and _gc_paused_by_us:
            _gc_paused_by_us = False
            gc.enable()


def _outline(host: Any) -> Any:
    """What the scan learnt of the candidate's program, for the dynamic stage (``Report.program``);
    None when there is no host or its extraction fails (the dynamic stage then parses it itself)."""
    if host is None:
        return None
    from .python.program import outline

    try:
        return outline(host)
    except Exception:  # the rules have reported the trouble; the dynamic stage falls back
        return None


@contextmanager
def scan_gc() -> Iterator[None]:
    """Pause the collector for one scan (see above); a no-op when it is already disabled."""
    _pause_gc()
    try:
        yield
    finally:
        _resume_gc()


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple] = set()
    out = []
    for f in findings:
        key = (f.rule, f.location.path, f.location.line, f.location.column, f.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def severity_at_least(findings: Iterable[Finding], level: Severity) -> bool:
    return any(not f.suppressed and f.severity.rank >= level.rank for f in findings)


__all__ = ["StaticScanner", "ScanOptions", "batch_gc", "scan_gc", "severity_at_least", "Confidence"]
