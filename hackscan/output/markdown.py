"""The audit report as Markdown: a summary people read first, then each submission with its evidence.

Candidate code and messages are untrusted text: table cells escape ``|``, prose escapes HTML
(Markdown renderers pass raw HTML through), and code excerpts sit in fences longer than any
backtick run inside them, so no candidate can break out of its excerpt.  Control and bidi
characters become visible escapes first (``escape.visible``): a viewer or a terminal showing the
Markdown source must not obey them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ..classes import CLASSES, DEFINITIONS
from ..model import Report
from .audit import VERDICT_ORDER, Audit, FindingView, SubmissionView, fmt_speedup, gather
from .escape import visible
from .plots import text_bars
from .verified import claimed_vs_verified, shares_line, table_rows, wanted

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>#|])")


def md_text(text: str) -> str:
    """Prose: escape Markdown and HTML metacharacters, keep it on one line."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(visible(text).split()))


def md_cell(text: str) -> str:
    return md_text(text)


def code_span(text: str) -> str:
    text = " ".join(visible(text).split())
    run = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * (run + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or run else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def fence(body: str, lang: str = "") -> str:
    body = visible(body)  # lines and tabs kept: it is code
    run = max((len(m) for m in re.findall(r"`{3,}", body)), default=2)
    ticks = "`" * max(3, run + 1)
    return f"{ticks}{lang}\n{body}\n{ticks}"


def _excerpt_block(view: FindingView, lang: str) -> str | None:
    ex = view.excerpt
    if ex is None:
        return None
    width = len(str(ex.lines[-1][0]))
    rows = []
    for n, text in ex.lines:
        mark = ">" if n == ex.mark else " "
        rows.append(f"{mark}{n:>{width}} | {text.rstrip()}")
    return fence("\n".join(rows), lang)


def _finding(view: FindingView, lang: str) -> list[str]:
    f = view.finding
    loc = f.location
    where = f"line {loc.line}" + (f":{loc.column}" if loc.column else "")
    if loc.unit:
        where += f" in {code_span(loc.unit)}"
    head = (f"- **{f.rule}** {code_span(f.name)} · {f.severity.value} ({f.confidence.value} confidence) · "
            f"{f.stage.value} · {where}")
    if f.suppressed:
        head += f" · suppressed: {md_text(f.suppression_reason or '')}"
    out = [head, f"  {md_text(f.message)}"]
    block = _excerpt_block(view, lang)
    if block:
        out.append("")
        out.extend("  " + line for line in block.splitlines())
    if view.dynamic:
        out.append("")
        out.append("  dynamic evidence: " + "; ".join(f"{k} = {code_span(v)}" for k, v in view.dynamic))
    out.append("")
    return out


def _lang(report: Report) -> str:
    path = report.path.split(":")[0]
    return "cuda" if path.endswith((".cu", ".cuh")) else "cpp" if path.endswith((".cpp", ".cc")) else "python"


def _submission(sv: SubmissionView) -> list[str]:
    r = sv.report
    out = [f"### {md_text(r.path)}", "", f"**Verdict: {r.verdict.value}**"
           + (f" — {md_text(r.error)}" if r.error else "")
           + (f" · rejected for {', '.join(r.rejected_for)}" if r.rejected_for else ""), ""]
    facts: list[str] = []
    if r.reference:
        facts.append(f"reference: {code_span(r.reference)}")
    if sv.claimed is not None:
        facts.append(f"claimed speedup: {fmt_speedup(sv.claimed)} ({code_span(sv.claimed_field or '')})")
    if sv.performance is not None:
        p = sv.performance
        if p.speedups:
            facts.append("measured speedup: " + ", ".join(f"{md_text(b)} {fmt_speedup(x)}" for b, x in p.speedups))
        if p.memory_ratio is not None:
            facts.append(f"peak memory vs reference: {p.memory_ratio:.2f}×")
        if p.headline and not p.speedups:
            facts.append(md_text(p.headline))
        facts.extend(md_text(n) for n in p.notes)
    if sv.dynamic_note:
        facts.append(f"dynamic stage: {md_text(sv.dynamic_note)}")
    if r.skipped:
        facts.append("rules skipped: " + ", ".join(f"{s.rule} ({md_text(s.reason)})" for s in r.skipped))
    out.extend(f"- {x}" for x in facts)
    if facts:
        out.append("")
    lang = _lang(r)
    for view in sv.findings:
        out.extend(_finding(view, lang))
    return out


def _class_table(audit: Audit) -> list[str]:
    """Rejected results per verdict class, with what the class means (docs/usage.md: verdict classes)."""
    counts = Counter(c for sv in audit.submissions for c in sv.report.rejected_for)
    if not counts:
        return []
    out = ["", "| rejected for | submissions | meaning |", "|---|---:|---|"]
    out += [f"| {c} | {counts[c]} | {md_cell(DEFINITIONS[c])} |" for c in CLASSES if counts[c]]
    return out


def render_markdown(reports: Sequence[Report], *, code_field: str = "custom_code",
                    sources: Mapping[str, str] | None = None, title: str = "hackscan audit", **_: Any) -> str:
    audit = gather(reports, code_field=code_field, sources=sources, title=title)
    return render_audit_markdown(audit)


def render_audit_markdown(audit: Audit) -> str:
    n = len(audit.submissions)
    out = [f"# {md_text(audit.title)}", ""]
    out.append(f"{n} submission{'s' * (n != 1)}: " + ", ".join(f"{audit.verdicts[v.value]} {v.value}" for v in VERDICT_ORDER) + ".")
    out += ["", "## Summary", "", "| verdict | submissions |", "|---|---:|"]
    out += [f"| {v.value} | {audit.verdicts[v.value]} |" for v in VERDICT_ORDER]
    out += _class_table(audit)
    out += ["", "| severity | findings |", "|---|---:|"]
    out += [f"| {k} | {c} |" for k, c in audit.by_severity.items()]
    out += ["", "### Findings per rule", ""]
    if audit.by_rule:
        out += ["| rule | name | severity | findings |", "|---|---|---|---:|"]
        out += [f"| {rule} | {md_cell(name)} | {sev} | {c} |" for rule, name, sev, c in audit.by_rule]
        out += ["", fence("\n".join(text_bars([(f"{rule} {name}", c) for rule, name, _, c in audit.by_rule])))]
    else:
        out.append("No findings.")
    out += ["", "### Claimed versus verified speedup", ""]
    if audit.speed_points:
        out += ["| submission | verdict | claimed | verified | verified / claimed |", "|---|---|---:|---:|---:|"]
        for claimed, verified, path, verdict in audit.speed_points:
            out.append(f"| {md_cell(path)} | {verdict} | {claimed:.2f}× | {verified:.2f}× | {verified / claimed:.2f} |")
    else:
        claimed_any = any(audit.claimed_by_verdict.values())
        out.append("No submission has both a claimed and a measured speedup"
                   + (" (the performance stage did not run or measured nothing)." if claimed_any else "."))
    if any(audit.claimed_by_verdict.values()):
        out += ["", "| verdict | submissions with a claim | median claimed | max claimed |", "|---|---:|---:|---:|"]
        for verdict, vals in audit.claimed_by_verdict.items():
            if vals:
                s = sorted(vals)
                out.append(f"| {verdict} | {len(s)} | {s[len(s) // 2]:.2f}× | {s[-1]:.2f}× |")
    reports = [sv.report for sv in audit.submissions]
    if wanted(reports):
        t = claimed_vs_verified(reports)
        out += ["", "### Claimed versus verified (geometric mean)", "",
                "| baseline | claimed | verified | n |", "|---|---:|---:|---:|"]
        out += [f"| {label} | {c} | {v} | {n} |" for label, c, v, n in table_rows(t)]
        out += ["", md_text(shares_line(t))]
    out += ["", "## Submissions", ""]
    flagged = [sv for sv in audit.submissions if sv.findings or sv.report.error or sv.performance]
    quiet = [sv for sv in audit.submissions if not (sv.findings or sv.report.error or sv.performance)]
    for sv in flagged:
        out.extend(_submission(sv))
    if quiet:
        out += ["### Submissions without findings", "", "| submission | verdict | claimed | measured |", "|---|---|---:|---:|"]
        for sv in quiet:
            measured = fmt_speedup(sv.performance.headline_speedup) if sv.performance else "–"
            out.append(f"| {md_cell(sv.report.path)} | {sv.report.verdict.value} | {fmt_speedup(sv.claimed)} | {measured} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"
