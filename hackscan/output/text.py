"""Human-readable text: one block per finding with the source line and a caret (ruff's style)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ..classes import CLASSES
from ..model import Finding, Report, Severity, Verdict
from .escape import visible

# everything a candidate can influence (paths, messages, source lines, evidence, reasons) goes
# through ``_v``: one line each, control and bidi characters shown as escapes (see escape.py); the
# colours are added around our own words only, after escaping

_COLORS = {"error": "\x1b[31m", "warning": "\x1b[33m", "info": "\x1b[36m", "hack": "\x1b[1;31m",
           "suspicious": "\x1b[1;33m", "clean": "\x1b[32m", "error-verdict": "\x1b[1;35m"}
_RESET = "\x1b[0m"


def _c(text: str, key: str, color: bool) -> str:
    return f"{_COLORS[key]}{text}{_RESET}" if color else text


def _v(text: object) -> str:
    return visible(text, keep="")


def _block(text: str) -> str:
    """A multi-line block (the performance table): lines kept, everything else escaped."""
    return visible(text, keep="\n")


def _where(f: Finding) -> str:
    """``path:line:col:`` as editors and CI annotators parse it: the triple always points into the
    file named.  A dataset finding's line and column are inside its record's code, not the .jsonl
    file, so the triple points at the record's own line and the position in the code follows in
    words: ``runs.jsonl:12:1: (record 12, code line 5 column 3)``."""
    loc = f.location
    path = _v(loc.path)
    if loc.record is not None:
        from ..engine import INPUT_ERROR  # lazy: the engine is loaded anyway when there are findings

        inside = ""
        if loc.line > 0 and f.rule != INPUT_ERROR:  # an unreadable record has no position in code
            inside = f", code line {loc.line}" + (f" column {loc.column}" if loc.column > 0 else "")
        return f"{path}:{loc.record}:1: (record {loc.record}{inside})"
    if loc.line <= 0:  # a whole-file problem (missing, binary): no line to point at
        return f"{path}:"
    return f"{path}:{loc.line}:{max(loc.column, 1)}:"


def render_finding(f: Finding, color: bool = False) -> str:
    loc = f.location
    head = (f"{_where(f)} {f.rule} {_c(f.severity.value, f.severity.value, color)}"
            f"[{f.confidence.value}] {_v(f.name)}: {_v(f.message)}")
    if f.stage.value != "static":
        head += f"  ({f.stage.value})"
    if f.suppressed:
        head += f"  [suppressed: {_v(f.suppression_reason)}]"
    lines = [head]
    if f.snippet is not None and loc.line > 0:
        num = str(loc.line)
        pad = " " * len(num)
        src = _v(f.snippet.replace("\t", " "))
        lines.append(f"{pad} |")
        lines.append(f"{num} | {src}")
        if loc.column > 0:
            lines.append(f"{pad} | {' ' * (loc.column - 1)}^")
    ev = f.evidence
    for key in ("probe", "input", "seed", "max_abs_error", "max_rel_error", "error_ratio", "first_mismatch"):
        if key in ev:
            lines.append(f"  {key}: {_v(ev[key])}")
    return "\n".join(lines)


def render_text(reports: Sequence[Report], color: bool = False, perf_stats: bool = False) -> str:
    out: list[str] = []
    seeds = _seeds(reports)
    counts = {v: 0 for v in Verdict}
    n_findings = 0
    for r in reports:
        counts[r.verdict] += 1
        for f in r.findings:
            out.append(render_finding(f, color))
            out.append("")
            n_findings += 0 if f.suppressed else 1
        key = "error-verdict" if r.verdict is Verdict.ERROR else r.verdict.value
        errs = sum(1 for f in r.active_findings if f.severity is Severity.ERROR)
        warns = sum(1 for f in r.active_findings if f.severity is Severity.WARNING)
        detail = f"{errs} error{'s' * (errs != 1)}, {warns} warning{'s' * (warns != 1)}"
        if r.error:
            detail += f"; {_v(r.error)}"
        line = f"{_v(r.path)}: {_c(r.verdict.value, key, color)} ({detail})"
        if r.rejected_for:
            line += f" rejected for {', '.join(r.rejected_for)}"
        if r.skipped:
            line += f"; {len(r.skipped)} rule(s) skipped: {_v(r.skipped[0].reason)}"
        if r.performance and isinstance(r.performance, dict):
            from ..perf.render import headline as perf_headline  # torch-free

            headline = perf_headline(r.performance)
            if headline:
                line += f"; {_v(headline)}"
        out.append(line)
        dyn = r.dynamic if isinstance(r.dynamic, dict) else None
        if dyn is not None and not dyn.get("ran") and dyn.get("reason"):
            # what could not run here, and why, belongs next to the verdict it qualifies
            out.append(f"  dynamic stage not run: {_v(str(dyn['reason']).removeprefix('dynamic stage not run: '))}")
        if len(seeds) > 1 and dyn is not None and dyn.get("ran") and _seed_of(dyn) is not None:
            # each submission drew its own seed: the one that replays this submission
            out.append(f"  seed: {_seed_of(dyn)} (replay with --seed {_seed_of(dyn)})")
        if r.performance:
            from ..perf.render import table  # torch-free; imported only when a report has timings

            # three lines by default; the statistics behind them with --perf-stats
            block = table(r.performance, stats=perf_stats)
            if block:
                out.append(_block(block))
        out.append("")
    total = len(reports)
    out.append(
        f"Scanned {total} submission{'s' * (total != 1)}: "
        + ", ".join(f"{counts[v]} {v.value}" for v in (Verdict.HACK, Verdict.SUSPICIOUS, Verdict.CLEAN, Verdict.ERROR))
        + f"; {n_findings} finding{'s' * (n_findings != 1)}."
    )
    rules = sorted({f.rule for r in reports for f in r.active_findings})
    if rules:
        # the door to each rule's documentation, named where a reader first wonders what a rule means
        out.append(f"What a rule checks, with a hack it catches and a legitimate look-alike: hackscan explain {rules[0]}"
                   + (f" (rules here: {', '.join(rules[:8])}{', ...' if len(rules) > 8 else ''})" if len(rules) > 1 else ""))
    by_class = Counter(c for r in reports for c in r.rejected_for)
    if by_class:
        # the classes say what kind of rejection: a training team treats a faked result, a missing
        # kernel and a precision downgrade differently
        out.append("Rejected for: " + ", ".join(f"{by_class[c]} {c}" for c in CLASSES if by_class[c]) + ".")
    from .verified import claimed_vs_verified, render_text_table, wanted

    if wanted(reports):
        out.append(_block(render_text_table(claimed_vs_verified(reports))))
    if len(seeds) == 1:
        # the dynamic stage's probes and inputs follow from this one number: the same findings again
        seed = next(iter(seeds))
        out.append(f"seed: {seed} (replay with --seed {seed})")
    elif seeds:
        out.append(f"seeds: one per submission, shown with each ({len(seeds)} different); "
                   "--seed S fixes one for the whole run")
    return "\n".join(out) + "\n"


def _seed_of(dyn: dict) -> int | None:
    seed = dyn.get("seed")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def _seeds(reports: Sequence[Report]) -> set[int]:
    """The seeds of the dynamic stages that ran (a stage that did not run drew nothing that matters)."""
    found: set[int] = set()
    for r in reports:
        dyn = r.dynamic if isinstance(r.dynamic, dict) else None
        if dyn is not None and dyn.get("ran") and _seed_of(dyn) is not None:
            found.add(_seed_of(dyn))  # type: ignore[arg-type]
    return found
