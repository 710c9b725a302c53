"""Candidates run only in child workers: a crash, hang, memory blow-up, import error or exit is a
finding (or a stated reason) for that candidate, and never stops the scan."""

from __future__ import annotations

import textwrap
import time

import pytest

pytest.importorskip("torch")
pytest.importorskip("numpy")

from hackscan.config import Config  # noqa: E402
from hackscan.engine import StaticScanner  # noqa: E402
from hackscan.inputs import Submission  # noqa: E402
from hackscan.model import Stage, Verdict  # noqa: E402
from hackscan.pipeline import RunOptions  # noqa: E402

from .conftest import FIXTURES  # noqa: E402

REFERENCE = (FIXTURES / "dynamic" / "relu" / "reference.py").read_text()


def _candidate(forward_body: str, module_prefix: str = "", init_body: str = "pass") -> str:
    return textwrap.dedent(f"""\
import torch
import torch.nn as nn
{module_prefix}

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        {init_body}

    def forward(self, x):
{textwrap.indent(textwrap.dedent(forward_body), '        ')}
""")


@pytest.fixture(scope="module")
def pool():
    from hackscan.dynamic.pool import WorkerPool

    p = WorkerPool()
    yield p
    p.close()


def _run(code: str, pool, reference: str | None = REFERENCE, timeout: float = 60.0, **extra):
    from hackscan.dynamic import run_dynamic_stage

    sub = Submission(path="cand.py", code=code, file="cand.py", reference=reference,
                     reference_path="reference.py" if reference else None)
    report = StaticScanner(Config()).scan(sub)
    opts = RunOptions(seed=7, perf=False, timeout=timeout, extra={"dynamic": extra} if extra else {})
    return run_dynamic_stage(sub, report, opts, Config(), pool=pool)


def _dyn(report, rule: str):
    return [f for f in report.findings if f.stage is Stage.DYNAMIC and f.rule == rule]


@pytest.mark.slow
def test_a_segfaulting_candidate_is_a_finding_and_the_pool_survives(pool) -> None:
    code = _candidate("import ctypes\nctypes.string_at(0)\nreturn x")
    report = _run(code, pool)
    found = _dyn(report, "HS408")
    assert found and "SIGSEGV" in found[0].message, [f.message for f in report.findings]
    assert found[0].location.line == code.splitlines().index("    def forward(self, x):") + 1
    # the next candidate runs normally in a fresh worker
    ok = _run(_candidate("return torch.clamp(x, min=0.0)"), pool)
    assert ok.dynamic["ran"] and not _dyn(ok, "HS408")


@pytest.mark.slow
def test_a_hanging_candidate_is_killed_at_its_time_limit(pool) -> None:
    start = time.monotonic()
    report = _run(_candidate("while True:\n    pass"), pool, timeout=6.0)
    assert time.monotonic() - start < 45
    found = _dyn(report, "HS408")
    assert found and "time limit" in found[0].message


@pytest.mark.slow
def test_a_candidate_over_its_memory_limit_is_stopped(pool) -> None:
    code = _candidate("self.hog = [torch.ones(1 << 28) for _ in range(64)]\nreturn x")  # 64 GiB
    report = _run(code, pool, memory_gb=3)
    found = _dyn(report, "HS408")
    assert found, [f.message for f in report.findings]
    assert any(w in found[0].message.lower() for w in ("memory", "allocate", "sigkill", "limit")), found[0].message


@pytest.mark.slow
def test_import_errors_and_exits_are_findings(pool) -> None:
    missing = _run(_candidate("return x", module_prefix="import not_a_real_module_hs"), pool)
    assert _dyn(missing, "HS408") and "cannot be imported" in _dyn(missing, "HS408")[0].message
    exits = _run(_candidate("return x", module_prefix="import sys\nsys.exit(3)"), pool)
    assert _dyn(exits, "HS408") and "SystemExit" in _dyn(exits, "HS408")[0].message
    noisy = _run(_candidate("print('x' * 100000)\nreturn torch.clamp(x, min=0.0)",
                            module_prefix="import sys\nprint('noise', file=sys.stderr)"), pool)
    assert noisy.dynamic["ran"] and not _dyn(noisy, "HS408"), [f.message for f in noisy.findings]


@pytest.mark.slow
def test_a_broken_reference_skips_the_stage_with_the_reason(pool) -> None:
    report = _run(_candidate("return x"), pool, reference=REFERENCE.replace("torch.relu(x)", "x.nope()"))
    assert report.dynamic["ran"] is False
    assert "reference" in report.dynamic["reason"]
    assert not [f for f in report.findings if f.stage is Stage.DYNAMIC]


def test_what_cannot_run_here_is_said_per_candidate(pool) -> None:
    from hackscan.dynamic import run_dynamic_stage

    cu = Submission(path="k.cu", code="__global__ void k() {}", language="cuda", file="k.cu", reference=REFERENCE)
    r = run_dynamic_stage(cu, StaticScanner(Config()).scan(cu), RunOptions(perf=False), Config(), pool=pool)
    assert r.dynamic["ran"] is False and "standalone" in r.dynamic["reason"]
    no_ref = Submission(path="c.py", code=_candidate("return x"), file="c.py")
    r = run_dynamic_stage(no_ref, StaticScanner(Config()).scan(no_ref), RunOptions(perf=False), Config(), pool=pool)
    assert "no reference" in r.dynamic["reason"]
    no_new = Submission(path="c.py", code="import torch\n", file="c.py", reference=REFERENCE)
    r = run_dynamic_stage(no_new, StaticScanner(Config()).scan(no_new), RunOptions(perf=False), Config(), pool=pool)
    assert "no ModelNew" in r.dynamic["reason"]


@pytest.mark.slow
def test_a_cuda_extension_on_a_cpu_only_machine_is_not_run(pool) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code = _candidate("return ext.relu(x)", module_prefix=textwrap.dedent('''
        from torch.utils.cpp_extension import load_inline
        src = "__global__ void k(float* y) { y[threadIdx.x] = 0.f; }"
        ext = load_inline(name="k", cpp_sources="", cuda_sources=src, functions=["relu"])
    '''))
    report = _run(code, pool)
    assert report.dynamic["ran"] is False and "CUDA" in report.dynamic["reason"]
    # the static stage could not tell this one needs a GPU: its own "no CUDA" error is the
    # candidate's word, so it cannot leave the static verdict standing (a hack could raise it on
    # purpose): the result is error, with the reason
    calls_cuda = _run(_candidate("return torch.clamp(x.cuda(), min=0.0)"), pool)
    assert calls_cuda.dynamic["ran"] is False and "CUDA" in calls_cuda.dynamic["reason"]
    assert calls_cuda.verdict is Verdict.ERROR


@pytest.mark.slow
def test_reference_outputs_never_enter_the_candidate_worker(pool, monkeypatch) -> None:
    from hackscan.dynamic import stage

    sent: dict[str, list] = {"reference": [], "candidate": []}
    spawn = stage.DynamicRun._spawn

    def recording(self, zygote, role, path, device, timeout):
        session = spawn(self, zygote, role, path, device, timeout)
        original = session.send

        def send(msg):
            sent[role].append(msg)
            return original(msg)

        session.send = send
        return session

    monkeypatch.setattr(stage.DynamicRun, "_spawn", recording)
    report = _run(_candidate("return torch.clamp(x, min=0.0)"), pool)
    assert report.dynamic["ran"]

    def keys(obj, acc):
        if isinstance(obj, dict):
            for k, v in obj.items():
                acc.add(k)
                keys(v, acc)
        elif isinstance(obj, list):
            for v in obj:
                keys(v, acc)
        return acc

    cand_keys = keys(sent["candidate"], set())
    assert sent["candidate"] and not cand_keys & {"out32", "out32b", "out64", "outq", "census"}
    assert {"inputs", "setups"} <= cand_keys


def test_the_clock_stops_while_a_build_runs_but_only_for_the_allowance() -> None:
    from hackscan.dynamic.pool import Session

    s = Session.__new__(Session)
    s.deadline, s.compile_allowance, s._paused_remaining, s._paused_at, s.builds = 100.0, 50.0, None, 0.0, []
    s._progress({"build": "start", "at": 10.0})
    assert s.deadline == 60.0  # the build may take the allowance
    s._progress({"build": "end", "at": 40.0})
    assert s.deadline == 130.0 and s.compile_allowance == 20.0  # the 90 s left at the start come back
    s._progress({"build": "start", "at": 50.0})
    s._progress({"build": "end", "at": 100.0})
    assert s.compile_allowance == -30.0 and s.deadline == 180.0
    s._progress({"build": "start", "at": 110.0})
    assert s.deadline == 110.0  # spent: a worker's own notices cannot stop the clock again


def test_the_build_allowance_reaches_the_session_through_its_checks() -> None:
    # the stage sets the allowance on the checked session it holds; the clock that stops is the
    # session's own (a build longer than --timeout was a false HS408 while it stayed on the wrapper)
    from hackscan.dynamic.pool import Session
    from hackscan.dynamic.protocol import CheckedSession

    s = Session.__new__(Session)
    s.deadline, s.compile_allowance, s._paused_remaining, s._paused_at, s.builds = 100.0, 0.0, None, 0.0, []
    checked = CheckedSession(s, "candidate")
    checked.compile_allowance = 50.0
    assert s.compile_allowance == 50.0 and checked.compile_allowance == 50.0
    s._progress({"build": "start", "at": 10.0})
    assert s.deadline == 60.0


@pytest.mark.slow
def test_a_file_that_defines_model_too_is_its_own_reference(tmp_path, pool) -> None:
    from hackscan.dynamic import run_dynamic_stage
    from hackscan.inputs import discover

    path = tmp_path / "both.py"
    path.write_text(REFERENCE + "\n\n" + _candidate("return x.clamp(min=0.0) if self.training else x"))
    sub = next(iter(discover([str(path)])))
    assert sub.self_reference
    report = run_dynamic_stage(sub, StaticScanner(Config()).scan(sub), RunOptions(seed=3, perf=False), Config(),
                               pool=pool)
    assert report.dynamic["ran"] and not [f for f in report.findings if f.stage is Stage.DYNAMIC]


@pytest.mark.slow
def test_a_second_scan_does_not_recompile_the_extension(pool) -> None:
    from hackscan.dynamic import run_dynamic_stage
    from hackscan.inputs import discover

    folder = FIXTURES / "dynamic" / "cpp"
    sub = next(s for s in discover([str(folder)]) if s.path.endswith("legit_loop_matmul.py"))
    runs = [run_dynamic_stage(sub, StaticScanner(Config()).scan(sub), RunOptions(seed=s, perf=False), Config(),
                              pool=pool) for s in (1, 2)]
    builds = [r.dynamic["compile"]["builds"] for r in runs]
    assert builds[0] and builds[0][0]["key"] == builds[1][0]["key"]
    assert runs[1].dynamic["compile"]["seconds"] < 10.0, runs[1].dynamic["compile"]
