"""The JSON report: a stable contract for machines.

``{"results": [{"path", "verdict", "findings": [{"rule", "name", "severity", "confidence", "line",
"column", "message", "stage", ...}]}]}`` plus ``version``, ``summary`` and per-result extras
(``record``, ``skipped_rules``, ``dynamic``, ``performance``).  Fields are only ever added.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from .. import __version__
from ..classes import CLASSES
from ..model import Report
from .escape import json_text
from .verified import claimed_vs_verified


def summary(reports: Sequence[Report]) -> dict[str, Any]:
    verdicts = Counter(r.verdict.value for r in reports)
    rules = Counter(f.rule for r in reports for f in r.findings if not f.suppressed)
    severities = Counter(f.severity.value for r in reports for f in r.findings if not f.suppressed)
    by_class = Counter(c for r in reports for c in r.rejected_for)
    return {
        "submissions": len(reports),
        "verdicts": {k: verdicts.get(k, 0) for k in ("hack", "suspicious", "clean", "error")},
        "findings_by_rule": dict(sorted(rules.items())),
        "findings_by_severity": {k: severities.get(k, 0) for k in ("error", "warning", "info")},
        # how many results each verdict class rejected (a result rejected for two classes counts in both)
        "rejected_by_class": {k: by_class.get(k, 0) for k in CLASSES},
        # geometric-mean claimed vs verified speedups, verdict and memory shares (output/verified.py)
        "claimed_vs_verified": claimed_vs_verified(reports),
    }


def as_document(reports: Sequence[Report]) -> dict[str, Any]:
    return {
        "tool": "hackscan",
        "version": __version__,
        "summary": summary(reports),
        "results": [r.to_dict() for r in reports],
    }


def render_json(reports: Sequence[Report]) -> str:
    # json.dumps escapes C0 controls itself; json_text escapes the C1 and bidi characters it leaves raw
    return json_text(json.dumps(as_document(reports), indent=2, ensure_ascii=False)) + "\n"
