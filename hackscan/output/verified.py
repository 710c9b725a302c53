"""Claimed against verified: the run's summary table in the form the KernelBench-Verified audit
published it.

Per baseline (strict fp32, TF32, ``torch.compile``) the geometric mean of the claimed speedups and of
the verified ones, over the same candidates; the share of candidates per verdict; the share that
need more memory than the reference.

A verified speedup is what the performance stage measured, credited only where the candidate earned
it: verdict clean or suspicious and a timing the stage trusts (``performance.valid``).  A candidate
rejected as a hack or an error, or whose timing is not trusted, is credited 1.0x: whoever scores
with this table falls back to the reference for it, which is neither faster nor slower.  A
candidate that was never timed (static only, CPU without the baseline, the stage skipped) is left
out of that baseline's mean rather than counted as 1.0x, and ``n`` says how many entered each mean.
The claimed mean is taken over the candidates with a claim (``--claimed-field``, else a ``score*``
field of the record).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..model import Report, Verdict
from .audit import claimed_speedup, performance_of

BASELINES = (("eager_fp32", "strict fp32"), ("eager_tf32", "TF32"), ("compile", "torch.compile"))
CREDITED = frozenset({Verdict.CLEAN, Verdict.SUSPICIOUS})


def _geomean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v > 0 and math.isfinite(v)]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def _speedups(report: Report) -> Mapping[str, Any]:
    perf = report.performance if isinstance(report.performance, Mapping) else None
    measured = perf.get("speedup") if perf else None
    return measured if isinstance(measured, Mapping) else {}


def _wanted(report: Report) -> Sequence[str]:
    perf = report.performance if isinstance(report.performance, Mapping) else None
    wanted = perf.get("baselines_wanted") if perf else None
    return [str(w) for w in wanted] if isinstance(wanted, list) else []


def verified_speedup(report: Report, baseline: str, run_measured: bool = True) -> float | None:
    """The speedup credited to one candidate against one baseline (see the module's docstring).
    ``run_measured``: the run timed this baseline for some candidate (on a CPU there is no TF32 or
    compile column, and a rejected candidate must not make one up)."""
    perf = report.performance if isinstance(report.performance, Mapping) else None
    value = _speedups(report).get(baseline)
    if report.verdict not in CREDITED:
        # a rejected candidate is credited the reference's own speed, whether or not it was timed;
        # only where the dynamic stage ran (a static-only run verifies no speedup at all)
        ran = isinstance(report.dynamic, Mapping) and bool(report.dynamic.get("ran"))
        return 1.0 if ran and run_measured else None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    if perf and perf.get("valid") is False:
        return 1.0
    return float(value)


def claimed_vs_verified(reports: Sequence[Report]) -> dict[str, Any]:
    """The table's figures; JSON-typed (numbers rounded to 4 significant digits)."""
    n = len(reports)
    claims = {i: c for i, r in enumerate(reports) if (c := claimed_speedup(r)[0]) is not None}
    fields = sorted({f for r in reports if (f := claimed_speedup(r)[1]) is not None})
    rows = []
    for key, label in BASELINES:
        # the run times this baseline: some candidate was timed against it, or one that --perf quick
        # left untimed as already rejected would have been (``baselines_wanted``)
        timed = any(key in _speedups(r) or key in _wanted(r) for r in reports)
        credited = [(i, v) for i, r in enumerate(reports) if (v := verified_speedup(r, key, timed)) is not None]
        if not credited:
            rows.append({"baseline": key, "label": label, "n": 0, "verified": None, "claimed": None})
            continue
        paired = [i for i, _ in credited if i in claims]
        rows.append({"baseline": key, "label": label, "n": len(credited),
                     "verified": _round(_geomean([v for _, v in credited])),
                     # the claim over the very candidates the verified mean covers
                     "claimed": _round(_geomean([claims[i] for i in paired])), "n_claimed": len(paired)})
    verdicts = {v.value: sum(1 for r in reports if r.verdict is v) for v in Verdict}
    ratios = [p.memory_ratio for r in reports if (p := performance_of(r)) is not None and p.memory_ratio is not None]
    return {
        "submissions": n,
        "claimed": {"n": len(claims), "fields": fields, "geomean": _round(_geomean(list(claims.values())))},
        "speedup_geomean": rows,
        "verdict_share": {k: _round(c / n) if n else None for k, c in verdicts.items()},
        "more_memory_than_reference": {"n": len(ratios), "share": _round(sum(1 for r in ratios if r > 1.0) / len(ratios))
                                       if ratios else None},
    }


def _round(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.4g}")


def _x(v: Any) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _pct(v: Any) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def table_rows(t: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(baseline, claimed, verified, n) for the views."""
    return [(r["label"], _x(r["claimed"]), _x(r["verified"]), str(r["n"])) for r in t["speedup_geomean"]]


def shares_line(t: Mapping[str, Any]) -> str:
    shares = ", ".join(f"{k} {_pct(v)}" for k, v in t["verdict_share"].items())
    mem = t["more_memory_than_reference"]
    more = f"{_pct(mem['share'])} of {mem['n']} measured" if mem["n"] else "not measured"
    return f"verdicts: {shares}; more memory than the reference: {more}"


def render_text_table(t: Mapping[str, Any]) -> str:
    """The plain-text block at the end of the text report."""
    lines = [f"claimed vs verified (geometric mean; {t['claimed']['n']} of {t['submissions']} with a claim"
             + (f" in {', '.join(t['claimed']['fields'])}, {_x(t['claimed']['geomean'])} over all"
                if t["claimed"]["fields"] else "") + "):"]
    lines.append(f"  {'baseline':<14} {'claimed':>9} {'verified':>9} {'n':>5}")
    for label, claimed, verified, n in table_rows(t):
        lines.append(f"  {label:<14} {claimed:>9} {verified:>9} {n:>5}")
    lines.append("  " + shares_line(t))
    return "\n".join(lines)


def wanted(reports: Sequence[Report]) -> bool:
    """The table is worth showing: some candidate states a claim or was timed."""
    return any(claimed_speedup(r)[0] is not None or (isinstance(r.performance, Mapping) and r.performance.get("speedup"))
               for r in reports)
