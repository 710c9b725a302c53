"""`--resume`: results streamed as each candidate completes are kept, keyed by a content hash of the
candidate, its reference, the options and hackscan's version; only the rest runs again, and the
final report equals a one-shot run's."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from hackscan.config import Config
from hackscan.inputs import InputProblem, Submission
from hackscan.pipeline import ResultStream, RunOptions, run_items, run_resumable
from hackscan.resume import StreamError, load_done, report_from_dict, result_key, settings_digest

from .conftest import FIXTURES

ROOT = Path(__file__).resolve().parent.parent
RELU = FIXTURES / "dynamic" / "relu"


def _subs(n: int = 3) -> list[Submission]:
    codes = [(FIXTURES / "dynamic" / "relu" / name).read_text()
             for name in ("legit.py", "hack_inplace.py", "hack_output_reuse.py")]
    return [Submission(path=f"c{i}.py", code=codes[i % len(codes)]) for i in range(n)]


def test_a_report_survives_its_json_form_field_for_field() -> None:
    items = [*_subs(), InputProblem("missing.py", "no such file or directory")]
    reports = run_items(items, Config(), RunOptions(static_only=True))
    assert any(r.findings for r in reports)
    for r in reports:
        back = report_from_dict(json.loads(json.dumps(r.to_dict())))
        assert back.to_dict() == r.to_dict()
    rich = reports[1].with_(meta={"claimed": {"score_default": 2.5}}, dynamic={"ran": True, "seed": 3},
                            performance={"speedup": {"eager_fp32": 1.5}}, error="x")
    assert report_from_dict(json.loads(json.dumps(rich.to_dict()))).to_dict() == rich.to_dict()


def test_the_key_moves_with_what_changes_a_result_and_only_with_that() -> None:
    sub = _subs(1)[0]
    base = RunOptions(static_only=True)
    key = result_key(sub, settings_digest(base, Config()))
    assert key == result_key(sub, settings_digest(replace(base, jobs=8), Config(fail_on="warning")))
    moved = [
        result_key(replace(sub, code=sub.code + "\n# edited"), settings_digest(base, Config())),
        result_key(replace(sub, reference="x = 1"), settings_digest(base, Config())),
        result_key(replace(sub, path="other.py"), settings_digest(base, Config())),
        result_key(sub, settings_digest(replace(base, seed=4), Config())),
        result_key(sub, settings_digest(replace(base, device="cuda"), Config())),
        result_key(sub, settings_digest(replace(base, baselines=("eager",)), Config())),
        result_key(sub, settings_digest(base, Config(select=("HS1",)))),
        result_key(sub, settings_digest(base, Config(harness="plain"))),
    ]
    assert key not in moved and len(set(moved)) == len(moved)
    # a seed the command line drew (no --seed) does not move it: a resumed run draws another
    drawn = [result_key(sub, settings_digest(replace(base, seed=s, extra={"seed_drawn": True}), Config())) for s in (4, 5)]
    assert drawn == [key, key]


def test_hackscans_version_is_part_of_the_key(monkeypatch) -> None:
    import hackscan.resume as resume

    sub = _subs(1)[0]
    before = result_key(sub, settings_digest(RunOptions(), Config()))
    monkeypatch.setattr(resume, "__version__", "99.0")
    assert result_key(sub, settings_digest(RunOptions(), Config())) != before


def test_a_line_cut_by_a_kill_is_dropped_and_a_foreign_file_refused(tmp_path) -> None:
    subs = _subs(2)
    opts = RunOptions(static_only=True)
    reports = run_items(subs, Config(), opts)
    keys = [result_key(s, settings_digest(opts, Config())) for s in subs]
    path = tmp_path / "s.jsonl"
    sink = ResultStream(str(path))
    sink(0, reports[0], keys[0])
    sink.close()
    whole = json.dumps(dict(reports[1].to_dict(), index=1, key=keys[1]))
    with open(path, "a") as fh:
        fh.write(whole[: len(whole) // 2])  # the kill came mid-write
    assert list(load_done(str(path))) == [keys[0]]
    # the next run's first line starts on a line of its own, not glued to the cut one
    sink = ResultStream(str(path))
    sink(1, reports[1], keys[1])
    sink.close()
    assert set(load_done(str(path))) == set(keys)  # line 2, cut, is skipped; line 3 is whole
    lines = path.read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[2])["key"] == keys[1]
    (tmp_path / "foreign.jsonl").write_text('{"a": 1}\nnot json\n{"b": 2}\n')
    with pytest.raises(StreamError, match="line 1 is not a hackscan result"):
        load_done(str(tmp_path / "foreign.jsonl"))
    assert load_done(str(tmp_path / "absent.jsonl")) == {}


def test_resumable_runs_only_what_the_stream_lacks_and_keeps_the_input_order(tmp_path, monkeypatch) -> None:
    import hackscan.pipeline as pipeline

    subs = _subs(4)
    opts = RunOptions(static_only=True)
    one_shot = run_items(subs, Config(), opts)
    path = tmp_path / "s.jsonl"
    sink = ResultStream(str(path))
    run_resumable(subs[:2], Config(), opts, {}, sink)  # the first run got through two of four
    sink.close()
    seen: list[str] = []
    real = pipeline.run_items

    def counting(items, *a, **kw):
        seen.extend(i.path for i in items)
        return real(items, *a, **kw)

    monkeypatch.setattr(pipeline, "run_items", counting)
    sink = ResultStream(str(path))
    reports, reused = run_resumable(subs, Config(), opts, load_done(str(path)), sink)
    sink.close()
    assert reused == 2 and seen == ["c2.py", "c3.py"]
    assert [r.to_dict() for r in reports] == [r.to_dict() for r in one_shot]
    assert sorted(json.loads(x)["index"] for x in path.read_text().splitlines()) == [0, 1, 2, 3]


def test_the_command_resumes_and_says_so_and_refuses_without_a_stream(tmp_path) -> None:
    from typer.testing import CliRunner

    from hackscan.cli import app

    files = []
    for i in range(3):
        f = tmp_path / f"c{i}.py"
        f.write_text(f"x = {i}\n")
        files.append(str(f))
    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["scan", *files, "--static", "--resume", "--fail-on", "never"])
    assert res.exit_code == 2 and "--resume needs the stream" in res.output
    stream = tmp_path / "s.jsonl"
    res = CliRunner().invoke(app, ["scan", *files[:2], "--static", "--stream", str(stream), "--fail-on", "never"])
    assert res.exit_code == 0
    res = CliRunner().invoke(app, ["scan", *files, "--static", "--stream", str(stream), "--resume", "-f", "json",
                                   "-o", str(out), "--fail-on", "never", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "--resume: 2 of 3 result(s) taken" in res.output
    assert [r["path"] for r in json.loads(out.read_text())["results"]] == files
    (tmp_path / "bad.jsonl").write_text("garbage\nmore\n")
    res = CliRunner().invoke(app, ["scan", *files, "--static", "--stream", str(tmp_path / "bad.jsonl"), "--resume"])
    assert res.exit_code == 2 and "not a hackscan result" in res.output


# what differs between two runs of the same candidates: how long things took (t32, t64: the
# reference's own probe timings), and memory
_VOLATILE = re.compile(r"(_s|_ms|_mb)$|^(timings|seconds|t32|t64)$")


def _stable(value):
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if not _VOLATILE.search(k)}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


@pytest.mark.slow
def test_a_killed_run_resumes_without_losing_or_rerunning_a_result(tmp_path) -> None:
    folder = tmp_path / "relu"
    folder.mkdir()
    for name in ("reference.py", "legit.py", "hack_inplace.py", "hack_output_reuse.py"):
        (folder / name).write_text((RELU / name).read_text())
    args = [sys.executable, "-m", "hackscan", str(folder), "--device", "cpu", "--no-perf", "--seed", "7",
            "-f", "json", "--no-progress", "--fail-on", "never"]
    out = tmp_path / "report.json"
    partial = Path(str(out) + ".partial.jsonl")
    proc = subprocess.Popen([*args, "-o", str(out)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 300
        while time.monotonic() < end and proc.poll() is None:
            if partial.exists() and partial.read_text().count("\n") >= 1:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the run finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not out.exists()
    before = [json.loads(x) for x in partial.read_text().splitlines() if x.endswith("}")]
    done_paths = {x["path"] for x in before}
    assert 1 <= len(done_paths) < 3
    # resumed: the progress log names each candidate whose dynamic stage starts (its workers launch)
    res = subprocess.run([*args, "-o", str(out), "--resume", "--progress"], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    started = re.findall(r"dynamic \[\d+/\d+\] (\S+): setup", res.stderr)
    all_paths = {str(folder / n) for n in ("legit.py", "hack_inplace.py", "hack_output_reuse.py")}
    assert sorted(started) == sorted(all_paths - done_paths), res.stderr
    assert f"--resume: {len(done_paths)} of 3 result(s) taken" in res.stderr
    resumed = json.loads(out.read_text())
    assert not partial.exists()
    # the results streamed before the kill are in the final report unchanged
    by_path = {r["path"]: r for r in resumed["results"]}
    for x in before:
        assert by_path[x["path"]] == {k: v for k, v in x.items() if k not in ("index", "key")}
    one_shot = tmp_path / "one_shot.json"
    res = subprocess.run([*args, "-o", str(one_shot)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    assert _stable(resumed) == _stable(json.loads(one_shot.read_text()))
