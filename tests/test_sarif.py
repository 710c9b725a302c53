"""SARIF 2.1.0 output validates against the official OASIS schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from hackscan import scan_paths
from hackscan.output.sarif import as_sarif

from .conftest import FIXTURES, ROOT

SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text())


def test_sarif_validates_and_keeps_suppressed_findings(tmp_path: Path) -> None:
    audit_file = tmp_path / "sup.py"
    audit_file.write_text("import torch\n\nclass ModelNew:\n    def forward(self, x):\n        return x  # hackscan: ignore[HS004] reason\n")
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text(json.dumps({"custom_code": "def f(:\n"}) + "\n" + "{bad\n")
    reports = scan_paths([str(FIXTURES / "meta"), str(audit_file), str(jsonl)], mode="audit")
    doc = as_sarif(reports)
    jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft7Validator)
    results = doc["runs"][0]["results"]
    rules = {r["id"] for r in doc["runs"][0]["tool"]["driver"]["rules"]}
    assert {"HS001", "HS002", "HS006"} <= {r["ruleId"] for r in results}
    assert all(r["ruleId"] in rules for r in results)
    # JSONL findings point at the record's line, with the code line in the property bag
    rec = next(r for r in results if r["ruleId"] == "HS001" and "record" in r["properties"])
    assert rec["locations"][0]["physicalLocation"]["region"]["startLine"] == 1


def test_sarif_marks_suppressed(tmp_path: Path) -> None:
    from hackscan.model import Confidence, Finding, Location, Report, Severity, Verdict

    f = Finding(rule="HS002", name="unresolved-extension-source", severity=Severity.WARNING,
                confidence=Confidence.MEDIUM, message="m", location=Location("a.py", 3, 2),
                suppressed=True, suppression_reason="reviewed")
    doc = as_sarif([Report(path="a.py", verdict=Verdict.CLEAN, findings=(f,))])
    jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft7Validator)
    (res,) = doc["runs"][0]["results"]
    assert res["suppressions"] == [{"kind": "inSource", "justification": "reviewed"}]


def test_schema_rejects_a_broken_log() -> None:
    import pytest

    doc = as_sarif([])
    doc["runs"][0]["results"] = [{"ruleId": "HS001", "level": "fatal", "message": {"text": "x"}}]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft7Validator)
