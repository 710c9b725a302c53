"""The command line as users meet it: exit codes, formats, files, bad input."""

from __future__ import annotations

import json
import os
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
    assert _run(CLEAN, "--select", "HS999").exit_code == 2
    assert _run(CLEAN, "--ref", "/no/such/ref.py").exit_code == 2
    assert _run(CLEAN, "--format", "pdf").exit_code == 2


def _one_line_error(res, *words: str) -> None:
    """A usage error: exit 2, one line on stderr naming what was wrong, no box, no usage block."""
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hackscan: error: "), res.stderr
    assert "Usage:" not in res.stderr and "╭" not in res.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


def test_bad_option_values_are_one_line_errors() -> None:
    _one_line_error(_run(CLEAN, "--device", "tpu"), "--device", "'tpu'", "'auto'", "'cpu'", "'cuda'")
    _one_line_error(_run("rules", "--stage", "bogus"), "--stage", "'static'", "'dynamic'", "'performance'")
    _one_line_error(_run("rules", "--format", "xml"), "--format", "'json'")
    for opt, value in (("--fail-on", "fatal"), ("--mode", "strict"), ("--sandbox", "maybe"), ("--format", "pdf")):
        _one_line_error(_run(CLEAN, opt, value), opt, repr(value))
    _one_line_error(_run(CLEAN, "--no-such-option"), "--no-such-option")
    _one_line_error(_run(CLEAN, "--limit", "0"), "--limit")
    _one_line_error(_run(CLEAN, "--timeout", "-1"), "--timeout")
    _one_line_error(_run(CLEAN, "--jobs", "x"), "--jobs")


def test_rules_stage_filters() -> None:
    res = _run("rules", "--stage", "performance", "--format", "json")
    stages = {r["stage"] for r in json.loads(res.stdout)}
    assert res.exit_code == 0 and stages == {"performance"}


def test_output_paths_checked_before_the_scan(tmp_path: Path, monkeypatch) -> None:
    import hackscan.pipeline as pipeline

    def no_scan(*a, **k):  # the scan must not start when the report could not be written
        raise AssertionError("the scan started")

    monkeypatch.setattr(pipeline, "run_items", no_scan)
    monkeypatch.setattr(pipeline, "run", no_scan)
    _one_line_error(_run(CLEAN, "--static", "-o", str(tmp_path / "nope" / "r.json")), "nope", "does not exist")
    _one_line_error(_run(CLEAN, "--static", "-o", str(tmp_path)), "is a directory")
    _one_line_error(_run(CLEAN, "--static", "--stream", str(tmp_path / "nope" / "s.jsonl")), "does not exist")
    _one_line_error(_run(CLEAN, "--static", "--stream", str(tmp_path)), "is a directory")


def test_one_seed_is_drawn_for_the_whole_run(tmp_path: Path, monkeypatch) -> None:
    # without --seed the CLI draws one seed for every submission of the run, so the one seed the
    # report prints replays the whole run (issue 17); a static scan draws none
    import hackscan.pipeline as pipeline

    seen: list[object] = []

    def fake(items, config, options, *a, **k):
        seen.append(options.seed)
        raise SystemExit(0)

    monkeypatch.setattr(pipeline, "run_resumable", fake)
    _run(CLEAN, CLEAN, "--device", "cpu")
    _run(CLEAN, CLEAN, "--device", "cpu")
    _run(CLEAN, "--device", "cpu", "--seed", "5")
    _run(CLEAN, "--static")
    assert len(seen) == 4 and all(isinstance(x, int) for x in seen[:2]) and seen[2:] == [5, None]
    assert seen[0] != seen[1]  # fresh each run


def test_unwritable_output_folder_refused(tmp_path: Path) -> None:
    import os

    if os.geteuid() == 0:  # root writes anywhere: the permission check cannot be exercised
        import pytest

        pytest.skip("running as root")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    _one_line_error(_run(CLEAN, "--static", "-o", str(locked / "r.json")), "permission denied")


def test_help_has_no_markup_damage_or_type_noise() -> None:
    res = runner.invoke(app, ["scan", "--help"], terminal_width=200)
    assert res.exit_code == 0
    assert "[tool.hackscan]" in res.output
    for noise in ("<list[", "<bool>", "{paths}", "<str>", "<int range>", "<path>"):
        assert noise not in res.output, noise
    assert "PATH..." in res.output and "--limit N" in res.output


def test_missing_file_next_to_good_one_keeps_results(tmp_path: Path) -> None:
    res = _run(CLEAN, str(tmp_path / "gone.py"), "--static", "--format", "json")
    doc = json.loads(res.stdout)
    assert [r["verdict"] for r in doc["results"]] == ["clean", "error"]
    assert res.exit_code == 1


def test_every_bad_input_the_readme_names_gets_a_result(tmp_path: Path) -> None:
    """docs/usage.md, "Exit codes and bad input": a missing file, a binary file, an unreadable JSONL line, a record
    without code each get a result with verdict error; the other results stay."""
    binary = tmp_path / "blob.py"
    binary.write_bytes(b"\x00\x01\x02")
    data = tmp_path / "d.jsonl"
    data.write_text("not json\n" + json.dumps({"other": 1}) + "\n" + json.dumps({"custom_code": "x = 1\n"}) + "\n")
    res = _run(CLEAN, str(tmp_path / "gone.py"), str(binary), str(data), "--static", "--format", "json")
    assert res.exit_code == 1, res.output
    got = {r["path"]: (r["verdict"], r.get("error", "")) for r in json.loads(res.stdout)["results"]}
    assert got[CLEAN][0] == "clean"
    assert got[str(tmp_path / "gone.py")] == ("error", "no such file or directory")
    assert got[str(binary)][0] == "error" and "binary" in got[str(binary)][1]
    assert got[f"{data}:1"][0] == "error" and "invalid JSON" in got[f"{data}:1"][1]
    assert got[f"{data}:2"][0] == "error" and "custom_code" in got[f"{data}:2"][1]
    assert got[f"{data}:3"][0] != "error"  # the readable record is analysed (no reference: a warning)


def test_single_missing_file_gets_a_report(tmp_path: Path) -> None:
    res = _run(str(tmp_path / "gone.py"), "--static", "--format", "json")
    assert res.exit_code == 1, res.output  # an error-severity finding, as for any bad input
    (r,) = json.loads(res.stdout)["results"]
    assert r["verdict"] == "error" and r["findings"][0]["rule"] == "HS006"


def test_rules_and_explain() -> None:
    res = _run("rules", "--format", "json")
    ids = [r["id"] for r in json.loads(res.stdout)]
    assert "HS001" in ids and ids == sorted(ids)
    exp = _run("explain", "unresolved-extension-source")
    assert exp.exit_code == 0 and "HS002" in exp.output and "Legitimate look-alike" in exp.output
    assert _run("explain", "HS999").exit_code == 2
    # a dynamic rule names the unit that decides it, as a static one names its check
    exp = _run("explain", "HS503")
    assert "decided by: hackscan.dynamic.rules.integrity:output_ignores_new_input_values" in exp.output


def test_jsonl_findings_name_the_record(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"custom_code": "def f(:\n", "ref_code": None}) + "\n")
    res = _run(str(data), "--static", "--format", "json")
    r = json.loads(res.stdout)["results"][0]
    assert r["path"].endswith("d.jsonl:1") and r["record"] == 1
    assert r["findings"][0]["record"] == 1


def test_jsonl_text_location_is_an_editor_triple(tmp_path: Path) -> None:
    """``path:line:col`` must point into the named file: the record's own line of the .jsonl, the
    position inside the record's code in words after it."""
    data = tmp_path / "d.jsonl"
    data.write_text("\n" + json.dumps({"custom_code": "x = 1\ndef f(:\n"}) + "\nnot json\n")
    out = _run(str(data), "--static").stdout
    assert f"{data}:2:1: (record 2, code line 2 column 7) HS001 " in out
    assert f"{data}:3:1: (record 3) HS006 " in out
    # the JSON report keeps the code position and names the record
    f = json.loads(_run(str(data), "--static", "-f", "json").stdout)["results"][0]["findings"][0]
    assert (f["path"], f["record"], f["line"], f["column"]) == (str(data), 2, 2, 7)


def _dataset(tmp_path: Path, n: int) -> Path:
    data = tmp_path / "runs.jsonl"
    data.write_text("".join(json.dumps({"custom_code": f"x = {i}\n"}) + "\n" for i in range(n)))
    return data


def _records(res) -> list[int]:
    assert res.exit_code == 0, res.output
    return [r["record"] for r in json.loads(res.stdout)["results"]]


def test_limit_takes_the_first_n(tmp_path: Path) -> None:
    data = _dataset(tmp_path, 10)
    res = _run(str(data), "--static", "-f", "json", "--limit", "3")
    assert _records(res) == [1, 2, 3]
    assert f"--limit 3: took 3 of 10 submission(s): {data} records 1, 2, 3" in res.stderr


def test_sample_is_random_and_repeatable_with_its_seed(tmp_path: Path) -> None:
    data = _dataset(tmp_path, 40)
    runs = [_records(_run(str(data), "--static", "-f", "json", "--sample", "5", "--seed", str(s))) for s in (7, 7, 8)]
    assert len(runs[0]) == 5 and runs[0] == sorted(runs[0]) and len(set(runs[0])) == 5
    assert runs[0] == runs[1]            # the same seed takes the same records
    assert runs[0] != runs[2]            # another seed, another sample (fixed seeds: not flaky)
    assert runs[0] != [1, 2, 3, 4, 5]
    # without --seed a fresh one is drawn and stated, and replaying it takes the same records
    res = _run(str(data), "--static", "-f", "json", "--sample", "5")
    line = next(x for x in res.stderr.splitlines() if "--sample 5 --seed" in x)
    seed = line.split("--seed ")[1].split(":")[0]
    assert _records(_run(str(data), "--static", "-f", "json", "--sample", "5", "--seed", seed)) == _records(res)
    # a sample larger than the dataset takes everything
    assert _records(_run(str(data), "--static", "-f", "json", "--sample", "99", "--seed", "1")) == list(range(1, 41))
    _one_line_error(_run(str(data), "--static", "--sample", "2", "--limit", "2"), "--limit", "--sample")


def test_console_script_runs_without_traceback(tmp_path: Path) -> None:
    exe = shutil.which("hackscan") or str(Path(sys.executable).parent / "hackscan")
    # the script must import the hackscan under test (an editable install may point at another checkout)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([exe, str(tmp_path / "missing.py")], capture_output=True, text=True, cwd=ROOT, env=env)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "no such file" in proc.stdout
    proc = subprocess.run([exe, "rules", "--stage", "bogus"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("hackscan: error: ")
