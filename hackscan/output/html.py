"""The audit report as one self-contained HTML file: inline CSS and SVG, no script, no network.

A Content-Security-Policy forbids every fetch and every script, so a report opened from a mail or a
CI artifact cannot call out, and text from a candidate that slipped past escaping still could not
run.  Everything from a candidate (paths, messages, code) goes through ``html.escape``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from .. import __version__
from ..classes import CLASSES, DEFINITIONS
from ..model import Report
from .audit import Audit, FindingView, SubmissionView, fmt_speedup, gather
from .escape import visible
from .plots import SEVERITY_COLORS, VERDICT_COLORS, claimed_strip, hbar, speedup_scatter

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"

_CSS = """
:root { --fg:#1c1e21; --muted:#606770; --line:#dadde1; --bg:#fff; --code:#f6f8fa; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg);
       margin: 0 auto; max-width: 1180px; padding: 16px 24px 48px; }
h1 { font-size: 22px; margin: 8px 0 4px; } h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid var(--line); }
.muted { color: var(--muted); }
.cards { display: flex; gap: 12px; flex-wrap: wrap; margin: 12px 0; }
.card { border: 1px solid var(--line); border-left: 6px solid #999; border-radius: 6px; padding: 8px 14px; min-width: 130px; }
.card .n { font-size: 26px; font-weight: 700; } .card .k { color: var(--muted); }
.charts { display: flex; gap: 24px; flex-wrap: wrap; align-items: flex-start; }
.chart { border: 1px solid var(--line); border-radius: 6px; padding: 10px; background: #fff; max-width: 100%; min-width: 0; }
/* on a narrow window a chart shrinks with its box (the SVGs keep their proportions through their viewBox) */
.chart > svg { max-width: 100%; height: auto; }
table { border-collapse: collapse; margin: 6px 0 12px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 10px; text-align: left; vertical-align: top; }
th { background: #f0f2f5; } td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.badge { display: inline-block; border-radius: 10px; padding: 0 8px; color: #fff; font-size: 12px; font-weight: 600; }
details.sub { border: 1px solid var(--line); border-radius: 6px; margin: 10px 0; padding: 4px 12px; }
details.sub > summary { cursor: pointer; font-weight: 600; padding: 4px 0; }
.finding { border-top: 1px dashed var(--line); padding: 8px 0; }
.finding .head { font-weight: 600; } .finding .msg { margin: 2px 0 6px; }
pre.code { background: var(--code); border: 1px solid var(--line); border-radius: 4px; padding: 6px 0; margin: 4px 0;
           overflow-x: auto; font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
pre.code span.ln { display: inline-block; width: 4.5em; padding-right: 8px; text-align: right; color: var(--muted);
                   user-select: none; }
pre.code span.row { display: block; padding-right: 8px; } pre.code span.hit { background: #fff3cd; }
dl.ev { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 4px 0; font-size: 13px; }
dl.ev dt { color: var(--muted); } dl.ev dd { margin: 0; font-family: ui-monospace, monospace; word-break: break-all; }
.facts { margin: 4px 0 8px; padding-left: 18px; }
/* findings per rule as HTML, not SVG: a label wraps inside its own column instead of running past the
   chart's edge, whatever font the reader's browser picks (an SVG label has a width fixed in advance) */
.hbars { display: grid; grid-template-columns: fit-content(55%) minmax(120px, 1fr); gap: 6px 8px;
         width: 640px; max-width: 100%; font-size: 12px; align-items: center; }
.hbars .t { grid-column: 1 / -1; font-size: 14px; font-weight: 600; }
.hbars .bl { text-align: right; overflow-wrap: anywhere; min-width: 0; }
.hbars .bt { display: flex; align-items: center; gap: 4px; min-width: 0; }
.hbars .bf { display: inline-block; height: 18px; min-width: 1px; }
.perf-note { margin: 8px 0; }
.untimed { color: var(--muted); }
.static-only { display: inline-block; border: 1px solid #2e86c1; color: #1b4f72; border-radius: 10px; padding: 0 7px;
               font-size: 12px; margin-left: 4px; background: #eaf2f8; }
.static-only-note { color: #1b4f72; }
.badge.s-warning { color: #1c1e21; }
"""


# the order results are listed in: what needs a person's eyes first (a hack, then a candidate that could not
# be analysed at all), then doubtful ones, then the clean; Python's sort is stable, so the input order holds
# within one verdict
DISPLAY_ORDER = ("hack", "error", "suspicious", "clean")


def _rank(sv: SubmissionView) -> int:
    v = sv.report.verdict.value
    return DISPLAY_ORDER.index(v) if v in DISPLAY_ORDER else len(DISPLAY_ORDER)


def ordered(audit: Audit) -> list[SubmissionView]:
    return sorted(audit.submissions, key=_rank)


def _timed(sv: SubmissionView) -> bool:
    p = sv.performance
    return p is not None and (bool(p.speedups) or p.headline_speedup is not None)


def _e(text: Any) -> str:
    # control and bidi characters as visible escapes first: a browser renders U+202E as a
    # direction change, and a saved page viewed in a terminal obeys ESC
    return escape(visible(text), quote=True)


def _badge(verdict: str) -> str:
    return f'<span class="badge v-{_e(verdict)}" style="background:{VERDICT_COLORS.get(verdict, "#555")}">{_e(verdict)}</span>'


def _sev(sev: str) -> str:
    return f'<span class="badge s-{_e(sev)}" style="background:{SEVERITY_COLORS.get(sev, "#555")}">{_e(sev)}</span>'


def _excerpt(view: FindingView) -> str:
    ex = view.excerpt
    if ex is None:
        return ""
    rows = []
    for n, text in ex.lines:
        cls = "row hit" if n == ex.mark else "row"
        rows.append(f'<span class="{cls}"><span class="ln">{n}</span>{_e(text.rstrip())}</span>')
    return '<pre class="code">' + "".join(rows) + "</pre>"


def _finding(view: FindingView) -> str:
    f = view.finding
    loc = f.location
    where = f"line {loc.line}" + (f":{loc.column}" if loc.column else "")
    if loc.unit:
        where += f" in {_e(loc.unit)}"
    parts = [f'<div class="finding" data-rule="{_e(f.rule)}">',
             f'<div class="head">{_sev(f.severity.value)} {_e(f.rule)} <code>{_e(f.name)}</code> '
             f'<span class="muted">{_e(f.confidence.value)} confidence · {_e(f.stage.value)} · {where}'
             + (f" · suppressed: {_e(f.suppression_reason or '')}" if f.suppressed else "") + "</span></div>",
             f'<div class="msg">{_e(f.message)}</div>', _excerpt(view)]
    if view.dynamic:
        parts.append('<dl class="ev">' + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in view.dynamic) + "</dl>")
    parts.append("</div>")
    return "".join(parts)


def static_only(sv: SubmissionView) -> str | None:
    """Why only the static stage saw this submission (its dynamic stage did not run here: a CUDA or
    Triton kernel on a host without a GPU, torch missing, --static), or None when it ran.  Its
    verdict then rests on the static rules alone, which the report must not let pass for a run."""
    dyn = sv.report.dynamic
    if isinstance(dyn, Mapping) and dyn.get("ran") is False:
        return str(dyn.get("reason") or "dynamic stage not run").removeprefix("dynamic stage not run: ")
    return None


def _static_badge(sv: SubmissionView) -> str:
    why = static_only(sv)
    if why is None:
        return ""
    return f' <span class="static-only" title="{_e(why)}">static stage only</span>'


def _submission(sv: SubmissionView, any_timed: bool = False) -> str:
    r = sv.report
    errors = sum(1 for f in r.active_findings if f.severity.value == "error")
    warnings = sum(1 for f in r.active_findings if f.severity.value == "warning")
    facts = []
    if r.error:
        facts.append(f"analysis: {_e(r.error)}")
    if r.reference:
        facts.append(f"reference: <code>{_e(r.reference)}</code>")
    if sv.claimed is not None:
        facts.append(f"claimed speedup: {fmt_speedup(sv.claimed)} <span class='muted'>({_e(sv.claimed_field)})</span>")
    p = sv.performance
    if p is not None:
        if p.speedups:
            facts.append("measured speedup: " + ", ".join(f"{_e(b)} <b>{fmt_speedup(x)}</b>" for b, x in p.speedups))
        if p.memory_ratio is not None:
            facts.append(f"peak memory vs reference: {p.memory_ratio:.2f}×")
        if p.headline and not p.speedups:
            facts.append(_e(p.headline))
        if not _timed(sv) and p.notes:
            # the stage ran for this candidate and said why it measured nothing
            facts.append('<span class="untimed perf-untimed">not timed: ' + "; ".join(_e(n) for n in p.notes)
                         + "</span>")
        else:
            facts.extend(_e(n) for n in p.notes)
    if any_timed and not _timed(sv) and (p is None or not p.notes):
        # other candidates of this run were timed: say here that this one was not, rather than in a
        # global note that would sit above the measured ones
        facts.append('<span class="untimed perf-untimed">not timed: the performance stage measured nothing '
                     "for this submission</span>")
    if static_only(sv) is not None:
        facts.insert(0, '<span class="static-only-note">only the static stage saw this submission; the dynamic '
                        f"stage did not run: {_e(static_only(sv))}</span>")
    elif sv.dynamic_note:
        facts.append(f"dynamic stage: {_e(sv.dynamic_note)}")
    if r.skipped:
        facts.append("rules skipped: " + ", ".join(f"{_e(s.rule)} ({_e(s.reason)})" for s in r.skipped))
    rejected = f" · rejected for {_e(', '.join(r.rejected_for))}" if r.rejected_for else ""
    head = (f'<summary>{_badge(r.verdict.value)}{_static_badge(sv)} {_e(r.path)} <span class="muted">· {errors} error(s), '
            f"{warnings} warning(s){rejected}</span></summary>")
    body = ('<ul class="facts">' + "".join(f"<li>{x}</li>" for x in facts) + "</ul>" if facts else "")
    body += "".join(_finding(v) for v in sv.findings)
    return (f'<details class="sub" id="{_e(sv.anchor)}" data-verdict="{_e(r.verdict.value)}" open>'
            f"{head}{body}</details>")


def _rule_bars(by_rule: Sequence[tuple[str, str, str, int]]) -> str:
    """Findings per rule: one row per rule, the full label (never cut) and a bar scaled to the largest count."""
    rows = []
    vmax = max((c for *_, c in by_rule), default=0) or 1
    for rule, name, sev, c in by_rule:
        color = SEVERITY_COLORS.get(sev, "#555")
        rows.append(f'<span class="bl" data-rule="{_e(rule)}-label">{_e(rule)} {_e(name)}</span>'
                    f'<span class="bt"><span class="bf" style="width:{100 * c / vmax:.1f}%;background:{color}" '
                    f'title="{_e(rule)} {_e(name)}: {c}"></span><span class="bv">{c}</span></span>')
    if not rows:
        rows.append('<span class="muted" style="grid-column:1 / -1">nothing to show</span>')
    return ('<div class="hbars" id="rule-chart" role="figure" aria-label="findings per rule">'
            '<div class="t">Findings per rule</div>' + "".join(rows) + "</div>")


def _perf_summary_note(audit: Audit) -> str:
    """A note about the performance stage, only when it says something true of the whole run.

    Nothing timed at all: say so once.  Some timed: each untimed candidate says so itself (its row and its
    block), so no global note could contradict the measured figures shown below it.  Timed but nothing
    claimed: say why the claimed-versus-verified chart is absent, next to where it would be.
    """
    timed = [sv for sv in audit.submissions if _timed(sv)]
    if not audit.submissions:
        return ""
    if not timed:
        return ('<p class="muted perf-note" id="perf-note">No candidate was timed: the performance stage did not '
                "run here (it times candidates on a GPU) or measured nothing, so the report shows no measured "
                "speedups.</p>")
    if not audit.speed_points:
        return (f'<p class="muted perf-note" id="perf-note">{len(timed)} of {len(audit.submissions)} '
                "submission(s) timed; none states a claimed speedup, so there is no claimed-versus-verified "
                "chart. The measured speedups are in the overview above.</p>")
    return ""


def _verified_table(audit: Audit) -> str:
    """The claimed-versus-verified table (geometric means per baseline, verdict and memory shares)."""
    from .verified import claimed_vs_verified, shares_line, table_rows, wanted

    reports = [sv.report for sv in audit.submissions]
    # without a claim there is nothing to set the verified speedups against: they are in the
    # overview, and a table of dashes under "claimed" only says the data set had no claim field
    if not wanted(reports) or all(sv.claimed is None for sv in audit.submissions):
        return ""
    t = claimed_vs_verified(reports)
    rows = "".join(f'<tr><td>{_e(label)}</td><td class="num">{_e(c)}</td><td class="num">{_e(v)}</td>'
                   f'<td class="num">{_e(n)}</td></tr>' for label, c, v, n in table_rows(t))
    return ('<table id="claimed-vs-verified"><caption>Claimed versus verified speedup (geometric mean)</caption>'
            '<thead><tr><th>baseline</th><th class="num">claimed</th><th class="num">verified</th>'
            f'<th class="num">n</th></tr></thead><tbody>{rows}</tbody></table>'
            f'<p class="muted" id="verified-shares">{_e(shares_line(t))}</p>')


def _link(sv: SubmissionView) -> str:
    if sv.findings or sv.report.error or sv.performance:
        return f'<a href="#{_e(sv.anchor)}">{_e(sv.report.path)}</a>'
    return _e(sv.report.path)


def render_html(reports: Sequence[Report], *, code_field: str = "custom_code",
                sources: Mapping[str, str] | None = None, title: str = "hackscan audit", **_: Any) -> str:
    return render_audit_html(gather(reports, code_field=code_field, sources=sources, title=title))


def render_audit_html(audit: Audit) -> str:
    n = len(audit.submissions)
    verdicts = [v for v in DISPLAY_ORDER if v in audit.verdicts]
    subs = ordered(audit)
    any_timed = any(_timed(sv) for sv in subs)
    cards = "".join(
        f'<div class="card" style="border-left-color:{VERDICT_COLORS[v]}"><div class="n">{audit.verdicts[v]}</div>'
        f'<div class="k">{v}</div></div>' for v in verdicts)
    charts = [_rule_bars(audit.by_rule)]
    charts.append(hbar([(v, audit.verdicts[v], VERDICT_COLORS[v]) for v in verdicts],
                       title="Verdicts", width=360, label_width=90))
    if audit.speed_points:
        charts.append(speedup_scatter(audit.speed_points, title="Claimed versus verified speedup"))
    speed_note = _perf_summary_note(audit)
    if any(audit.claimed_by_verdict.values()):
        charts.append(claimed_strip(audit.claimed_by_verdict, title="Claimed speedup by verdict"))
    rule_rows = "".join(f'<tr><td>{_e(rule)}</td><td><code>{_e(name)}</code></td><td>{_sev(sev)}</td>'
                        f'<td class="num">{c}</td></tr>' for rule, name, sev, c in audit.by_rule)
    by_class = Counter(c for sv in subs for c in sv.report.rejected_for)
    class_rows = "".join(f'<tr><td>{_e(c)}</td><td class="num">{by_class[c]}</td><td>{_e(DEFINITIONS[c])}</td></tr>'
                         for c in CLASSES if by_class[c])
    sev_rows = "".join(f'<tr><td>{_sev(k)}</td><td class="num">{c}</td></tr>' for k, c in audit.by_severity.items())
    sub_rows = []
    for sv in subs:
        r = sv.report
        p = sv.performance
        if static_only(sv) is not None and not _timed(sv):
            measured = f'<span class="untimed" title="{_e(static_only(sv))}">not run</span>'
        elif _timed(sv) or not any_timed:
            measured = fmt_speedup(p.headline_speedup if p else None)
        else:
            why = "; ".join(p.notes) if p is not None and p.notes else "the performance stage measured nothing"
            measured = f'<span class="untimed" title="{_e(why)}">not timed</span>'
        sub_rows.append(
            f'<tr data-verdict="{_e(r.verdict.value)}"><td>{_link(sv)}</td><td>{_badge(r.verdict.value)}{_static_badge(sv)}</td>'
            f'<td class="num">{len(r.active_findings)}</td><td class="num">{fmt_speedup(sv.claimed)}</td>'
            f'<td class="num">{measured}</td>'
            f'<td class="num">{"–" if p is None or p.memory_ratio is None else f"{p.memory_ratio:.2f}×"}</td></tr>')
    details = "".join(_submission(sv, any_timed) for sv in subs
                      if sv.findings or sv.report.error or sv.performance)
    summary_line = f"{n} submission{'s' * (n != 1)}: " + ", ".join(f"{audit.verdicts[v]} {v}" for v in verdicts)
    verified = _verified_table(audit)
    n_static = sum(static_only(sv) is not None for sv in subs)
    static_line = (f'<p class="static-only-note" id="static-only">{n_static} of {n} submission(s) were seen by the '
                   "static stage only (marked <span class=\"static-only\">static stage only</span>): their "
                   "dynamic stage could not run here, so nothing was executed, compared or timed for them.</p>"
                   if n_static else "")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="hackscan {_e(__version__)}">
<title>{_e(audit.title)}</title>
<style>{_CSS}</style>
</head>
<body>
<h1>{_e(audit.title)}</h1>
<p class="muted" id="summary-line">{_e(summary_line)} · hackscan {_e(__version__)}</p>
<div class="cards" id="verdicts">{cards}</div>
{static_line}
<h2>All submissions</h2>
<table id="submissions"><thead><tr><th>submission</th><th>verdict</th><th class="num">findings</th>
<th class="num">claimed</th><th class="num">measured</th><th class="num">memory</th></tr></thead>
<tbody>{"".join(sub_rows)}</tbody></table>
<h2>Summary</h2>
<div class="charts" id="charts">{"".join(f'<div class="chart">{c}</div>' for c in charts)}</div>
{speed_note}
{verified}
<div class="charts">
<table id="by-class"><thead><tr><th>rejected for</th><th class="num">submissions</th><th>meaning</th></tr></thead>
<tbody>{class_rows or '<tr><td colspan="3" class="muted">nothing rejected</td></tr>'}</tbody></table>
<table id="by-severity"><thead><tr><th>severity</th><th class="num">findings</th></tr></thead><tbody>{sev_rows}</tbody></table>
<table id="by-rule"><thead><tr><th>rule</th><th>name</th><th>severity</th><th class="num">findings</th></tr></thead>
<tbody>{rule_rows or '<tr><td colspan="4" class="muted">no findings</td></tr>'}</tbody></table>
</div>
<h2>Findings</h2>
<div id="findings">{details or '<p class="muted">No findings.</p>'}</div>
<p class="muted" id="explain-hint">A rule's documentation, with a hack it catches and a legitimate look-alike:
<code>hackscan explain HSxxx</code>.</p>
</body>
</html>
"""
