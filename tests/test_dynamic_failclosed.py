"""The dynamic stage fails closed (issue 13): nothing the candidate's process says is trusted, a
missing or forged answer is a finding, a broken run is verdict ``error`` (exit 2), and finished
results survive the death of the hackscan process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("numpy")

import numpy as np  # noqa: E402

from hackscan.config import Config  # noqa: E402
from hackscan.engine import StaticScanner  # noqa: E402
from hackscan.inputs import Submission  # noqa: E402
from hackscan.model import Severity, Stage, Verdict  # noqa: E402
from hackscan.pipeline import RunOptions  # noqa: E402

from .conftest import FIXTURES, ROOT  # noqa: E402

RELU = FIXTURES / "dynamic" / "relu"
REFERENCE = (RELU / "reference.py").read_text()


def _candidate(forward_body: str, module_prefix: str = "") -> str:
    return textwrap.dedent(f"""\
import torch
import torch.nn as nn
{module_prefix}

class ModelNew(nn.Module):
    def forward(self, x):
{textwrap.indent(textwrap.dedent(forward_body), '        ')}
""")


@pytest.fixture(scope="module")
def pool():
    from hackscan.dynamic.pool import WorkerPool

    p = WorkerPool()
    yield p
    p.close()


def _run(code: str, pool, reference: str = REFERENCE):
    from hackscan.dynamic import run_dynamic_stage

    sub = Submission(path="cand.py", code=code, file="cand.py", reference=reference, reference_path="reference.py")
    report = StaticScanner(Config()).scan(sub)
    return run_dynamic_stage(sub, report, RunOptions(seed=7, perf=False, timeout=60.0, device="cpu"), Config(),
                             pool=pool)


def _dyn(report, rule: str):
    return [f for f in report.findings if f.stage is Stage.DYNAMIC and f.rule == rule and not f.suppressed]


# ------------------------------------------------------------------------------------- no workers
def test_every_probe_and_check_must_come_back_once_as_raw_outputs() -> None:
    from hackscan.dynamic.judge import audit_probe_reply

    out = np.zeros(3, dtype=np.float32)
    msg = {"probes": [{"id": "a"}, {"id": "b"}, {"id": "s", "store_only": True}],
           "plan": [{"kind": "repeat", "probe": "original", "id": "repeat"},
                    {"kind": "follow", "probe": "original", "other": "original_b", "cycles": 2, "id": "follow"}]}
    good = {"probes": [{"id": "a", "out": [out], "structure": "T"}, {"id": "b", "error": {"message": "boom"}},
                       {"id": "s", "stored": True}],
            "integrity": [{"kind": "repeat", "probe": "original", "outs": [[out], [out], [out]]},
                          {"kind": "follow", "probe": "original", "outs": [[out], [out]],
                           "order": ["original", "original"]}]}
    probes, checks, problems = audit_probe_reply(msg, good)
    assert problems == []
    # the follow check's order is the plan's, never the one the candidate reported
    assert checks[1]["order"] == ["original", "original_b"]
    assert [p["id"] for p in probes] == ["a", "b", "s"]

    dodged = {"probes": [{"id": "a", "stored": True}, {"id": "b", "out": ["not a tensor"], "structure": "T"},
                         {"id": "zz", "out": [out], "structure": "T"}, {"id": "s", "stored": True}],
              "integrity": [{"kind": "follow", "probe": "original", "outs": [[out]]}]}
    probes, checks, problems = audit_probe_reply(msg, dodged)
    text = " | ".join(problems)
    assert "'a': answered 'stored'" in text and "'b': no output" in text and "nobody asked for ('zz')" in text
    assert "'repeat': an answer for another check" in text and "'follow': no answer" in text
    # unanswered is not passed: each becomes an error result the judge counts against the candidate
    assert all("error" in p for p in probes if p["id"] in ("a", "b")) and all("error" in c for c in checks)


def test_a_reply_that_does_not_echo_its_request_is_dropped_and_recorded() -> None:
    from hackscan.dynamic.protocol import CheckedSession

    class FakeSession:
        dead = None

        def __init__(self):
            self.sent, self.queue = [], []

        def send(self, msg):
            self.sent.append(msg)
            # a forged frame first, then a replay of an old reply, then the real worker's answer
            self.queue += [{"ok": True, "probes": []}, {"ok": True, "nonce": "x", "seq": 0},
                           {"ok": True, "real": True, "nonce": msg["nonce"], "seq": msg["seq"]}]

        def recv(self, timeout=None):
            return self.queue.pop(0)

    fake = FakeSession()
    s = CheckedSession(fake, "candidate")
    reply = s.request({"cmd": "probe"})
    assert reply["real"] and len(s.violations) == 2
    assert s.violations[0]["why"] == "no nonce / sequence number"
    again = s.request({"cmd": "probe"})
    assert fake.sent[0]["nonce"] != fake.sent[1]["nonce"] and fake.sent[1]["seq"] == 2 and again["real"]


# ------------------------------------------------------------------------------------- candidates
@pytest.mark.slow
def test_forged_frames_on_the_workers_own_socket_are_rejected(pool) -> None:
    report = _run((RELU / "hack_forged_frame.py").read_text(), pool)
    assert report.verdict is Verdict.HACK, [f.message for f in report.findings]
    found = _dyn(report, "HS411")
    assert found and found[0].severity is Severity.ERROR and found[0].evidence["count"] >= 1


@pytest.mark.slow
def test_a_worker_class_rewritten_through_sys_modules_is_rejected(pool) -> None:
    # every probe answered "stored" (nothing to compare) and no integrity check run
    code = _candidate("return torch.zeros_like(x)", module_prefix=textwrap.dedent('''
        import sys
        W = next(m for m in list(sys.modules.values()) if "CandidateWorker" in getattr(m, "__dict__", {})).CandidateWorker
        W.run_batch = lambda self, msg: {"probes": [{"id": p["id"], "stored": True} for p in msg["probes"]],
                                         "items": [], "changes": []}
    '''))
    report = _run(code, pool)
    assert report.verdict is Verdict.HACK
    assert _dyn(report, "HS410") and _dyn(report, "HS410")[0].severity is Severity.ERROR
    # the original probes count as not passed (their outputs are still wrong: zeros), never as skipped
    assert _dyn(report, "HS408") or _dyn(report, "HS401"), [f.rule for f in report.findings]


@pytest.mark.slow
@pytest.mark.parametrize("exc", ["SystemExit(0)", "KeyboardInterrupt()", "RuntimeError('no')"])
def test_a_candidate_that_raises_on_every_call_is_rejected(pool, exc) -> None:
    report = _run(_candidate(f"raise {exc}"), pool)
    found = _dyn(report, "HS408")
    assert found and found[0].severity is Severity.ERROR, [f.message for f in report.findings]
    assert report.verdict is Verdict.HACK


@pytest.mark.slow
def test_a_candidate_that_dies_on_a_later_batch_is_rejected(pool) -> None:
    # right on the task's own shape, then kills its worker on any other shape
    code = _candidate("if tuple(x.shape) != (16, 16384):\n    os._exit(0)\nreturn torch.clamp(x, min=0.0)",
                      module_prefix="import os")
    report = _run(code, pool)
    found = _dyn(report, "HS408")
    assert found and found[0].severity is Severity.ERROR, [f.message for f in report.findings]


# ------------------------------------------------------------------------------------- infrastructure
def _kill_before_extras(monkeypatch, what: str) -> None:
    from hackscan.dynamic import stage

    fetch = stage.DynamicRun._fetch_extras

    def killing(self, ref, refs, cands, integrity):
        if what == "reference":
            ref.kill()
        else:
            zygote = self.pool.zygote(self.options.device)
            os.kill(zygote.proc.pid, signal.SIGKILL)
            zygote.proc.wait(timeout=10)
        return fetch(self, ref, refs, cands, integrity)

    monkeypatch.setattr(stage.DynamicRun, "_fetch_extras", killing)


@pytest.mark.slow
@pytest.mark.parametrize("what", ["reference", "zygote"])
def test_a_dead_reference_or_worker_server_is_verdict_error(pool, monkeypatch, what) -> None:
    from hackscan.dynamic.pool import WorkerPool

    _kill_before_extras(monkeypatch, what)
    # only --sandbox off has a worker server to kill (sandboxed workers are each started fresh)
    use = WorkerPool(sandbox="off") if what == "zygote" else pool
    try:
        report = _run(_candidate("return torch.clamp(x, min=0.0)"), use)
    finally:
        if use is not pool:
            use.close()
    assert report.verdict is Verdict.ERROR
    assert report.dynamic["failed"] and report.dynamic["ran"] is False
    # the workers may go down with their server: either way the run is unproven
    assert any(w in report.dynamic["reason"] for w in ("reference", "worker server")), report.dynamic["reason"]


@pytest.mark.slow
def test_the_command_exits_2_when_the_reference_worker_dies(monkeypatch, tmp_path) -> None:
    from typer.testing import CliRunner

    from hackscan.cli import app

    _kill_before_extras(monkeypatch, "reference")
    cand = tmp_path / "cand.py"
    cand.write_text(_candidate("return torch.clamp(x, min=0.0)"))
    ref = tmp_path / "problem.py"
    ref.write_text(REFERENCE)
    for mode in ("audit", "gate"):
        res = CliRunner().invoke(app, ["scan", str(cand), "--ref", str(ref), "--device", "cpu", "--no-perf",
                                       "--seed", "7", "--format", "json", "--fail-on", "never", "--mode", mode])
        assert res.exit_code == 2, res.output
        doc = json.loads(res.stdout)
        assert doc["results"][0]["verdict"] == "error" and doc["results"][0]["dynamic"]["failed"]


def test_an_internal_error_is_verdict_error_not_the_static_verdict() -> None:
    from hackscan.pipeline import _guarded

    sub = Submission(path="c.py", code=_candidate("return x"), file="c.py", reference=REFERENCE)
    report = StaticScanner(Config()).scan(sub)

    def broken(*args):
        raise KeyError("bug")

    out = _guarded(broken, sub, report, RunOptions(), Config())
    assert out.verdict is Verdict.ERROR and out.dynamic["failed"] and "KeyError" in out.dynamic["reason"]


# ------------------------------------------------------------------------------------- results survive
def test_stream_writes_one_line_per_result_and_o_cleans_its_partial_file(tmp_path) -> None:
    from typer.testing import CliRunner

    from hackscan.cli import app

    files = []
    for i in range(3):
        f = tmp_path / f"c{i}.py"
        f.write_text("x = 1\n" if i != 1 else "def f(:\n")
        files.append(str(f))
    stream = tmp_path / "s.jsonl"
    res = CliRunner().invoke(app, ["scan", *files, "--static", "--stream", str(stream), "--fail-on", "never"])
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in stream.read_text().splitlines()]
    assert sorted(x["index"] for x in lines) == [0, 1, 2]
    assert {x["path"]: x["verdict"] for x in lines}[files[1]] == "error"
    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["scan", *files, "--static", "-o", str(out), "-f", "json", "--fail-on", "never"])
    assert res.exit_code == 0 and out.exists() and not Path(str(out) + ".partial.jsonl").exists()


@pytest.mark.slow
def test_a_batch_whose_parent_is_killed_keeps_the_finished_results(tmp_path) -> None:
    (tmp_path / "reference.py").write_text(REFERENCE)
    (tmp_path / "a_fast.py").write_text(_candidate("return torch.clamp(x, min=0.0)"))
    # the second candidate takes long enough to be killed during (its orphaned worker exits soon after)
    (tmp_path / "b_slow.py").write_text(_candidate("time.sleep(0.5)\nreturn torch.clamp(x, min=0.0)",
                                                   module_prefix="import time\ntime.sleep(15)"))
    out = tmp_path / "report.json"
    partial = Path(str(out) + ".partial.jsonl")
    proc = subprocess.Popen([sys.executable, "-m", "hackscan", str(tmp_path), "--device", "cpu", "--no-perf",
                             "--seed", "7", "-f", "json", "-o", str(out)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 120
        while time.monotonic() < end and proc.poll() is None:
            if partial.exists() and partial.read_text().count("\n") >= 1:
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the run finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not out.exists()
    lines = [json.loads(x) for x in partial.read_text().splitlines()]
    assert len(lines) == 1 and lines[0]["path"].endswith("a_fast.py") and lines[0]["dynamic"]["ran"]
