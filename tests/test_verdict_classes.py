"""Verdict classes: every rule has one, results say what they are rejected for, the gate picks classes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import hackscan
from hackscan.classes import CLASSES, DEFINITIONS, TAXONOMY_CLASS, ClassError, class_for, parse_classes
from hackscan.cli import app
from hackscan.config import ConfigError, parse_config
from hackscan.registry import RegistryError, load_registry, parse_rule

from .conftest import FIXTURES, ROOT

runner = CliRunner()
PRECISION_ONLY = str(FIXTURES / "python" / "precision" / "hack_half_cast.py")
NO_KERNEL_ONLY = str(FIXTURES / "python" / "matmul" / "hack_no_kernel.py")


def test_every_rule_and_taxonomy_class_has_a_verdict_class() -> None:
    assert set(TAXONOMY_CLASS) == set(range(21))
    assert set(DEFINITIONS) == set(CLASSES)
    for rule in load_registry():
        assert rule.verdict_class in CLASSES, rule.id
        assert rule.to_dict()["class"] == rule.verdict_class


def test_overrides_win_over_the_taxonomy() -> None:
    reg = load_registry()
    # a candidate that crashes never ran its custom code; its taxonomy entry is 0 (meta)
    assert reg.get("HS408").verdict_class == "no-kernel"
    assert reg.get("HS172").verdict_class == "precision"  # taxonomy [14, 10]: the first one counts
    assert reg.get("HS409").verdict_class == "task"


def test_registry_refuses_an_unknown_class() -> None:
    data = dict(id="HS199", name="x-y", severity="error", confidence="high", stage="static", languages=["python"],
                taxonomy=[3], message="m", summary="s", description="d", hack_example="h", legit_example="l",
                check="a.b:c", verdict_class="cheating")
    with pytest.raises(RegistryError, match="verdict_class 'cheating'"):
        parse_rule(data)
    with pytest.raises(ClassError):
        class_for([], None)


def test_parse_classes_orders_and_rejects_unknown_names() -> None:
    assert parse_classes("precision, gaming") == ("gaming", "precision")
    with pytest.raises(ClassError, match="unknown verdict class 'hacks'"):
        parse_classes(["gaming,hacks"])
    with pytest.raises(ClassError, match="names no verdict class"):
        parse_classes(" , ")


def test_json_results_carry_their_classes() -> None:
    res = runner.invoke(app, [PRECISION_ONLY, NO_KERNEL_ONLY, "--static", "-f", "json"])
    doc = json.loads(res.stdout)
    by_path = {Path(r["path"]).name: r for r in doc["results"]}
    assert by_path["hack_half_cast.py"]["verdict"] == "hack"
    assert by_path["hack_half_cast.py"]["rejected_for"] == ["precision"]
    assert by_path["hack_no_kernel.py"]["rejected_for"] == ["no-kernel"]
    assert all(f["class"] in CLASSES for r in doc["results"] for f in r["findings"])
    assert doc["summary"]["rejected_by_class"]["precision"] == 1
    assert doc["summary"]["rejected_by_class"]["gaming"] == 0


def test_text_and_markdown_group_by_class() -> None:
    text = runner.invoke(app, [PRECISION_ONLY, NO_KERNEL_ONLY, "--static", "--no-color"]).stdout
    assert "rejected for precision" in text
    assert "Rejected for: 1 no-kernel, 1 precision." in text
    md = runner.invoke(app, [PRECISION_ONLY, "--static", "-f", "markdown"]).stdout
    assert "| rejected for | submissions | meaning |" in md
    assert "· rejected for precision" in md
    html = runner.invoke(app, [PRECISION_ONLY, "--static", "-f", "html"]).stdout
    assert '<table id="by-class">' in html and "rejected for precision" in html


def test_gate_rejects_only_the_chosen_classes() -> None:
    assert runner.invoke(app, [PRECISION_ONLY, "--static"]).exit_code == 1  # every class by default
    assert runner.invoke(app, [PRECISION_ONLY, "--static", "--reject-class", "gaming,no-kernel"]).exit_code == 0
    assert runner.invoke(app, [PRECISION_ONLY, "--static", "--reject-class", "precision"]).exit_code == 1
    bad = runner.invoke(app, [PRECISION_ONLY, "--static", "--reject-class", "speed"])
    assert bad.exit_code == 2
    assert "unknown verdict class 'speed'" in bad.output and "Traceback" not in bad.output


def test_unanalysable_results_fail_whatever_the_classes(tmp_path: Path) -> None:
    data = tmp_path / "runs.jsonl"
    data.write_text(json.dumps({"custom_code": "None"}) + "\n" + json.dumps({"custom_code": "  \n"}) + "\n")
    res = runner.invoke(app, [str(data), "--static", "-f", "json", "--reject-class", "precision"])
    assert res.exit_code == 1
    results = json.loads(res.stdout)["results"]
    assert [r["verdict"] for r in results] == ["error", "error"]
    assert [r["findings"][0]["rule"] for r in results] == ["HS006", "HS006"]
    assert 'the string "None"' in results[0]["error"] and "empty" in results[1]["error"]


def test_config_and_api_choose_classes() -> None:
    assert parse_config({"reject-class": ["precision"]}).reject_classes == ("precision",)
    assert parse_config({}).reject_classes is None
    with pytest.raises(ConfigError, match="unknown verdict class"):
        parse_config({"reject-class": "fast"})
    (report,) = hackscan.scan_paths([PRECISION_ONLY], mode="gate")  # with the fixture folder's reference
    assert report.rejected_for == ("precision",)
    assert hackscan.Scanner().rejects(report)
    assert not hackscan.Scanner(reject_classes=["gaming"]).rejects(report)
    assert hackscan.Scanner(reject_classes=["gaming"]).rejects(hackscan.scan_source("def f(:\n"))


def test_label_file_is_well_formed_and_the_benchmark_scores_it() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import label_precision as lp
    finally:
        sys.path.pop(0)
    labels = lp.load_labels(lp.LABELS)
    assert len(labels) >= 60
    assert len({(r["file"], r["record"]) for r in labels}) == len(labels)
    assert all(r["reason"].strip() and r["line"] >= 1 for r in labels)
    assert all(r["classes"] for r in labels if r["expected"] == "reject")
    assert {r["level"] for r in labels} == {1, 2, 3}

    class Rep:  # a stand-in report: verdict and classes are all measure() reads
        def __init__(self, verdict: str, classes: tuple[str, ...]):
            self.verdict = type("V", (), {"value": verdict})()
            self.rejected_for = classes

    rows = [dict(file="f", record=1, expected="reject", classes=["precision"], reason="r1"),
            dict(file="f", record=2, expected="clean", classes=[], reason="r2"),
            dict(file="f", record=3, expected="unsure", classes=[], reason="r3")]
    got = lp.measure(rows, {("f", 1): Rep("hack", ("no-kernel",)), ("f", 2): Rep("hack", ("gaming",)),
                            ("f", 3): Rep("clean", ())})
    assert got["judged"] == 2
    assert got["table"]["reject"]["precision"] == 0.5 and got["table"]["reject"]["recall"] == 1.0
    assert got["table"]["precision"]["recall"] == 0.0
    assert [m["record"] for m in got["misses"]] == [1, 2]


def test_class_table_matches_the_registry() -> None:
    """``classes`` reads rule classes from the rule files itself (the registry imports it); both
    must give every rule the same class."""
    from hackscan.classes import class_of_rule
    from hackscan.registry import load_registry

    rules = load_registry()
    assert len(rules) > 50
    assert {r.id: class_of_rule(r.id) for r in rules} == {r.id: r.verdict_class for r in rules}
