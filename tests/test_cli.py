"""The command line as users meet it: exit codes, formats, files, bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from hackscan.cli import app

from .conftest import FIXTURES, ROOT

runner = CliRunner()
SYNTAX = str(FIXTURES / "meta" / "hack_syntax_error.py")
CLEAN = str(FIXTURES / "meta" / "ok_resolved_fstring_source.py")


def _run(*args: str):
    return runner.invoke(app, list(args))


def test_default_command_is_scan_and_exit_codes() -> None:
    ok = _run(CLEAN, "--static")
    assert ok.exit_code == 0, ok.output
    assert "clean" in ok.output
    bad = _run(SYNTAX, "--static")
    assert bad.exit_code == 1
    assert "HS001" in bad.output and "^" in bad.output


def test_fail_on_levels() -> None:
    warn = str(FIXTURES / "meta" / "hack_unresolved_source.py")  # HS002 is a warning
    assert _run(warn, "--static", "--select", "HS002").exit_code == 0
    assert _run(warn, "--static", "--select", "HS002", "--fail-on", "warning").exit_code == 1
    assert _run(SYNTAX, "--static", "--fail-on", "never").exit_code == 0


def test_json_contract(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = _run(SYNTAX, CLEAN, "--static", "--format", "json", "--output", str(out))
    assert res.exit_code == 1
    doc = json.loads(out.read_text())
    assert [r["verdict"] for r in doc["results"]] == ["error", "clean"]
    f = doc["results"][0]["findings"][0]
    for key in ("rule", "name", "severity", "confidence", "line", "column", "message", "stage"):
        assert key in f
    assert f["rule"] == "HS001" and f["stage"] == "static" and f["line"] == 6
    assert doc["summary"]["verdicts"]["error"] == 1


def test_usage_errors_exit_2() -> None:
    assert _run("/no/such/path.py").exit_code == 2
    assert _run(CLEAN, "--select", "HS999").exit_code == 2
    assert _run(CLEAN, "--ref", "/no/such/ref.py").exit_code == 2
    assert _run(CLEAN, "--format", "pdf").exit_code == 2


def test_missing_file_next_to_good_one_keeps_results(tmp_path: Path) -> None:
    res = _run(CLEAN, str(tmp_path / "gone.py"), "--static", "--format", "json")
    doc = json.loads(res.stdout)
    assert [r["verdict"] for r in doc["results"]] == ["clean", "error"]
    assert res.exit_code == 1


def test_rules_and_explain() -> None:
    res = _run("rules", "--format", "json")
    ids = [r["id"] for r in json.loads(res.stdout)]
    assert "HS001" in ids and ids == sorted(ids)
    exp = _run("explain", "unresolved-extension-source")
    assert exp.exit_code == 0 and "HS002" in exp.output and "Legitimate look-alike" in exp.output
    assert _run("explain", "HS999").exit_code == 2


def test_jsonl_findings_name_the_record(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"custom_code": "def f(:\n", "ref_code": None}) + "\n")
    res = _run(str(data), "--static", "--format", "json")
    r = json.loads(res.stdout)["results"][0]
    assert r["path"].endswith("d.jsonl:1") and r["record"] == 1
    assert r["findings"][0]["record"] == 1


def test_console_script_runs_without_traceback(tmp_path: Path) -> None:
    exe = shutil.which("hackscan") or str(Path(sys.executable).parent / "hackscan")
    proc = subprocess.run([exe, str(tmp_path / "missing.py")], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "no such file" in proc.stderr
