"""SARIF 2.1.0, for code-scanning UIs.  Rules come from the registry; suppressed findings are kept
and marked (``suppressions`` with ``kind: inSource``), as semgrep does."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import __version__
from ..model import Finding, Report
from ..registry import load_registry
from .escape import json_text

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
_PRECISION = {"high": "high", "medium": "medium", "low": "low"}


def _uri(path: str) -> str:
    p = Path(path)
    if p.is_absolute():
        return p.as_uri()
    return p.as_posix()


def _result(f: Finding, index: dict[str, int]) -> dict[str, Any]:
    loc = f.location
    region: dict[str, Any] = {}
    if loc.record is not None:
        # a JSONL record: the region is the record's line in the dataset; the line inside the
        # record's code goes into the property bag
        region = {"startLine": loc.record}
    elif loc.line > 0:
        region = {"startLine": loc.line, "startColumn": max(loc.column, 1)}
        if loc.end_line:
            region["endLine"] = loc.end_line
            if loc.end_column:
                region["endColumn"] = loc.end_column
        if f.snippet is not None:
            region["snippet"] = {"text": f.snippet}
    physical: dict[str, Any] = {"artifactLocation": {"uri": _uri(loc.path)}}
    if region:
        physical["region"] = region
    result: dict[str, Any] = {
        "ruleId": f.rule,
        "ruleIndex": index.get(f.rule, 0),
        "level": _LEVEL[f.severity.value],
        "message": {"text": f.message},
        "locations": [{"physicalLocation": physical}],
        "properties": {"confidence": f.confidence.value, "stage": f.stage.value, "name": f.name},
    }
    if loc.record is not None:
        result["properties"]["record"] = loc.record
        result["properties"]["codeLine"] = loc.line
        result["properties"]["codeColumn"] = loc.column
    if loc.unit:
        result["properties"]["unit"] = loc.unit
    if f.evidence:
        result["properties"]["evidence"] = json.loads(json.dumps(f.to_dict().get("evidence", {})))
    if f.suppressed:
        result["suppressions"] = [{"kind": "inSource", "justification": f.suppression_reason or ""}]
    return result


def as_sarif(reports: Sequence[Report]) -> dict[str, Any]:
    registry = load_registry()
    rules = list(registry)
    index = {r.id: i for i, r in enumerate(rules)}
    driver_rules = []
    for r in rules:
        driver_rules.append({
            "id": r.id,
            "name": r.name,
            "shortDescription": {"text": r.summary},
            "fullDescription": {"text": r.description},
            "help": {"text": f"{r.description}\n\nHack:\n{r.hack_example}\n\nLegitimate:\n{r.legit_example}"},
            "defaultConfiguration": {"level": _LEVEL[r.severity.value]},
            "properties": {"precision": _PRECISION[r.confidence.value], "tags": [r.stage.value, *r.languages],
                           "taxonomy": list(r.taxonomy)},
        })
    results = [_result(f, index) for rep in reports for f in rep.findings]
    artifacts = sorted({f.location.path for rep in reports for f in rep.findings})
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "hackscan", "version": __version__,
                                "rules": driver_rules}},
            "artifacts": [{"location": {"uri": _uri(a)}} for a in artifacts],
            "results": results,
            "properties": {"verdicts": {rep.path: rep.verdict.value for rep in reports}},
        }],
    }


def render_sarif(reports: Sequence[Report]) -> str:
    # json.dumps escapes C0 controls itself; json_text escapes the C1 and bidi characters it leaves raw
    return json_text(json.dumps(as_sarif(reports), indent=2, ensure_ascii=False)) + "\n"
