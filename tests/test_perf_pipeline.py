"""The performance stage as the normal command runs it: inside the dynamic stage's workers.

Two kinds of test.  The fast ones drive ``DynamicRun._perf`` with scripted worker sessions (the
raw measurements of ``test_perf_support``) on a pretend GPU, so that what only a GPU produces (an
events-vs-wall gap, a time under the bound, a parent clock that contradicts the worker) is seen to
reach ``report.performance`` and the findings through the pipeline's own code.  The slow ones run
real workers on the CPU end to end.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hackscan.config import Config
from hackscan.inputs import Submission
from hackscan.model import Report, Severity, Stage, Verdict
from hackscan.pipeline import RunOptions
from hackscan.registry import load_registry

from . import test_perf_support as raw
from .conftest import FIXTURES, ROOT

CANDIDATE = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)
"""
REFERENCE = (FIXTURES / "dynamic" / "relu" / "reference.py").read_text()
FORWARD_LINE = 9


class FakeSession:
    """A worker that answers from a script: ``replies[cmd]`` is a reply dict, or a callable of the
    request returning one (it may sleep, as a worker working would), or an exception to raise."""

    def __init__(self, replies: dict[str, Any]):
        self.replies = replies
        self.requests: list[dict[str, Any]] = []
        self.dead = None
        self.timeouts: list[float] = []

    def restart_clock(self, timeout: float) -> None:
        self.timeouts.append(timeout)

    def request(self, msg: dict[str, Any], timeout: float | None = None) -> Any:
        self.requests.append(copy.deepcopy(msg))
        r = self.replies.get(msg["cmd"], {"ok": False, "error": {"message": f"no script for {msg['cmd']}"}})
        if isinstance(r, BaseException):
            raise r
        return copy.deepcopy(r(msg) if callable(r) else r)

    def cmds(self) -> list[str]:
        return [m["cmd"] for m in self.requests]


def _run(options: RunOptions, sub_path: str = "kernels/x/cand.py", reference: str = REFERENCE) -> Any:
    from hackscan.dynamic.stage import DynamicRun

    sub = Submission(path=sub_path, code=CANDIDATE, file=sub_path, reference=reference,
                     reference_path="kernels/x/reference.py")
    report = Report(sub_path, Verdict.CLEAN)
    run = DynamicRun(sub, report, options, Config(), pool=None, registry=load_registry())
    run._r_load = {"input_shapes": [[16, 16384]], "input_dtypes": ["float32"], "dims": {}}
    return run


def _judged(ids: list[str]) -> tuple[Any, dict[str, Any], Any]:
    from hackscan.dynamic.plan import Plan

    records = {i: SimpleNamespace(status="pass") for i in ids}
    j = SimpleNamespace(correctness_passed=True, records=records)
    refs = {i: {"out32": [], "out64": None, "structure": ""} for i in ids}
    plan = Plan([{"id": i, "family": "original"} for i in ids], [], 0.0, [])
    return j, refs, plan


def _compile_reply(ms: float = 0.5) -> dict[str, Any]:
    return {"ok": True, "compile": {"schema": raw.SCHEMA, "role": "reference", "elapsed_s": 3.0,
                                    "timers": {"watched": 40, "changed": []},
                                    "baseline": {"tf32": True, "compile_s": 2.5,
                                                 "series": {"main": raw.series(ms, fingerprints={})}}}}


def _spin(seconds_per_call: float) -> Any:
    def reply(msg: dict[str, Any]) -> dict[str, Any]:
        time.sleep(seconds_per_call * msg["calls"])
        return {"ok": True, "spin": {"calls": msg["calls"], "child_s": seconds_per_call * msg["calls"]}}
    return reply


def _perf(run: Any, ref: FakeSession, cand: FakeSession, device: str = "cuda",
          ids: tuple[str, ...] = ("original", "original_b", "perf_0", "perf_1")) -> tuple[dict[str, Any], list[Any]]:
    from hackscan.dynamic.perf_run import TimingSets

    run.timing_sets = TimingSets.plan(device, 1 << 20, 8.0)
    j, refs, plan = _judged(list(ids))
    findings = run._perf(ref, cand, j, refs, plan, device)
    return run.info.get("_performance") or {}, findings


@pytest.fixture(autouse=True)
def fresh_compile_cache():
    from hackscan.dynamic.perf_run import COMPILE_CACHE

    COMPILE_CACHE.clear()
    yield
    COMPILE_CACHE.clear()


def _sessions(cand_raw: dict[str, Any], ref_raw: dict[str, Any], spin_s: float = 0.0, **ref_extra: Any):
    ref = FakeSession({"perf": {"ok": True, "perf": ref_raw}, "perf_compile": _compile_reply(), **ref_extra})
    cand = FakeSession({"perf": {"ok": True, "perf": cand_raw}, "ping": {"ok": True}, "spin": _spin(spin_s)})
    return ref, cand


def test_events_vs_wall_gap_reaches_the_report_through_the_pipeline() -> None:
    run = _run(RunOptions(seed=1))
    ref, cand = _sessions(raw.candidate(0.05, wall_ms=2.0), raw.reference(strict_ms=4.0, tf32_ms=2.0))
    perf, findings = _perf(run, ref, cand)
    by_rule = {f.rule: f for f in findings}
    assert "HS601" in by_rule, [f.rule for f in findings]
    f = by_rule["HS601"]
    assert f.stage is Stage.PERFORMANCE and f.severity is Severity.ERROR
    assert f.location.line == FORWARD_LINE and f.location.path == "kernels/x/cand.py"
    assert perf["valid"] is False and "work escaped the events" in perf["invalid_reasons"]
    # the honest time is the wall clock: the speedup is not credited
    assert perf["speedup"]["eager_tf32"] == pytest.approx(1.0, rel=0.05)


def test_time_below_the_bound_reaches_the_report_through_the_pipeline() -> None:
    run = _run(RunOptions(seed=1))
    work = {"flops": 0, "flops_by_op": {}, "bytes_read": 1 << 30, "bytes_written": 1 << 30, "aliased_outputs": 0}
    ref, cand = _sessions(raw.candidate(0.01, wall_ms=0.011), raw.reference(strict_ms=1.2, tf32_ms=1.1, work=work))
    perf, findings = _perf(run, ref, cand)
    assert "HS604" in {f.rule for f in findings}
    assert perf["bound"]["reliable"] and perf["bound"]["candidate_over_bound"] < 0.1


def test_parent_clock_is_asked_and_contradicts_forged_times() -> None:
    run = _run(RunOptions(seed=1))
    # the worker says 0.1 ms per call; back-to-back calls take 2 ms each by the parent's clock
    ref, cand = _sessions(raw.candidate(0.1, wall_ms=0.1), raw.reference(strict_ms=0.3, tf32_ms=0.2), spin_s=0.002)
    perf, findings = _perf(run, ref, cand)
    # then the paired blocks (this script has none for it: the first fails and the rounds stop)
    assert cand.cmds() == ["perf", "ping", "ping", "ping", "spin", "perf_block"]
    spin = cand.requests[4]
    assert spin["calls"] == 500  # 1 s of calls at the reported 0.1 ms, capped
    assert perf["outside_clock"]["checked"] and perf["outside_clock"]["contradicts"]
    assert "HS609" in {f.rule for f in findings}


def _block(ms: float) -> Any:
    def reply(msg: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "block": {"wall_ms": [ms] * msg["calls"], "event_ms": [ms] * msg["calls"],
                                      "timers_changed": 0}}
    return reply


def test_paired_blocks_alternate_between_the_workers_and_give_the_speedup() -> None:
    run = _run(RunOptions(seed=1))
    # absolute series say 3x against TF32; the blocks, timed in alternation, say 1.5x
    ref, cand = _sessions(raw.candidate(1.0, wall_ms=1.0), raw.reference(strict_ms=6.0, tf32_ms=3.0),
                          spin_s=0.0008, perf_block=_block(1.5))
    cand.replies["perf_block"] = _block(1.0)
    # the fresh pairs of workers the rounds go on in (stage._fresh_pair starts them from the worker
    # server; here scripted): each is asked for blocks only, and closed after its rounds
    fresh: list[tuple[FakeSession, FakeSession]] = []
    closed: list[int] = []

    def fresh_pair(i: int, specs: Any, sets: Any, opts: Any, device: str) -> Any:
        pair = (FakeSession({"perf_block": _block(1.5)}), FakeSession({"perf_block": _block(1.0)}))
        fresh.append(pair)
        return pair[0], pair[1], lambda: closed.append(i)

    run._fresh_pair = fresh_pair
    perf, _ = _perf(run, ref, cand)
    blocks_c = [m for m in cand.requests if m["cmd"] == "perf_block"]
    blocks_r = [m for m in ref.requests if m["cmd"] == "perf_block"]
    assert ref.cmds()[0] == "perf" and ref.cmds()[-1] == "perf_compile"
    # every round: the candidate's block and one per eager baseline, never torch.compile
    assert len(blocks_r) == 2 * len(blocks_c) and {m["baseline"] for m in blocks_r} == {"eager_fp32", "eager_tf32"}
    assert [m["round"] for m in blocks_c] == list(range(len(blocks_c)))
    assert perf["speedup"]["eager_tf32"] == pytest.approx(1.5)
    assert perf["unpaired_speedup"]["eager_tf32"] == pytest.approx(3.0, rel=0.02)
    # four pairs of processes that agree: the interval over them is narrow at the minimum
    assert len(fresh) == 3 and closed == [1, 2, 3]
    assert all(set(r.cmds()) == {"perf_block"} and set(c.cmds()) == {"perf_block"} for r, c in fresh)
    assert perf["convergence"]["paired"]["converged"] is True
    assert perf["convergence"]["paired"]["processes"] == perf["paired"]["processes"] == 4
    assert perf["paired"]["rounds_per_process"][0] == len(blocks_c) >= 16


def test_quick_perf_mode_times_in_the_scans_own_pair_only() -> None:
    # --perf quick (an RL gate's budget): no fresh pair is started, and the report says why the
    # spread between processes is unknown; the worker itself is asked for the "target" series
    run = _run(RunOptions(seed=1, extra={"perf_mode": "quick"}))
    ref, cand = _sessions(raw.candidate(1.0, wall_ms=1.0), raw.reference(strict_ms=6.0, tf32_ms=3.0),
                          spin_s=0.0008, perf_block=_block(1.5))
    cand.replies["perf_block"] = _block(1.0)
    spawned: list[int] = []
    run._fresh_pair = lambda i, *a: spawned.append(i)
    perf, _ = _perf(run, ref, cand)
    assert spawned == []
    assert perf["speedup"]["eager_tf32"] == pytest.approx(1.5)
    assert perf["convergence"]["paired"]["processes"] == 1 and perf["convergence"]["paired"]["converged"] is False
    assert [m["options"]["mode"] for m in ref.requests if m["cmd"] == "perf"] == ["target"]


def test_paired_speedup_without_fresh_workers_says_the_spread_between_processes_is_unknown() -> None:
    run = _run(RunOptions(seed=1))
    ref, cand = _sessions(raw.candidate(1.0, wall_ms=1.0), raw.reference(strict_ms=6.0, tf32_ms=3.0),
                          spin_s=0.0008, perf_block=_block(1.5))
    cand.replies["perf_block"] = _block(1.0)
    perf, _ = _perf(run, ref, cand)  # no worker server here: no fresh pair can be started
    conv = perf["convergence"]["paired"]
    assert perf["speedup"]["eager_tf32"] == pytest.approx(1.5)
    assert conv["converged"] is False and conv["processes"] == 1
    assert "spread between processes is not known" in conv["note"] and "no worker server" in conv["note"]
    assert perf["speedup_rerun_confidence"] == 0.95


def test_honest_worker_passes_the_parent_clock() -> None:
    run = _run(RunOptions(seed=1))
    ref, cand = _sessions(raw.candidate(1.0, wall_ms=1.0), raw.reference(strict_ms=2.0, tf32_ms=1.5), spin_s=0.0008)
    perf, findings = _perf(run, ref, cand)
    assert perf["outside_clock"]["checked"] and not perf["outside_clock"]["contradicts"]
    assert not [f for f in findings if f.severity is not Severity.INFO], [f.rule for f in findings]


def test_workers_are_asked_in_order_with_the_pipeline_options() -> None:
    run = _run(RunOptions(seed=1))
    ref, cand = _sessions(raw.candidate(1.0), raw.reference(strict_ms=2.0, tf32_ms=1.0))
    perf, _ = _perf(run, ref, cand)
    assert ref.cmds() == ["perf", "perf_compile"]
    opts = ref.requests[0]["options"]
    # the compile baseline has its own request and allowance; the other worker stays alive
    assert opts["compile"] == "never" and opts["exclusive_device"] is False and opts["tf32"] is True
    assert opts["budget_s"] == 4.0 and opts["sets"] == 4
    assert ref.requests[0]["sets"]["original"] == ["original", "original_b", "perf_0", "perf_1"]
    assert ref.timeouts[-1] == 300.0
    base = perf["baselines"]
    assert set(base) == {"eager_fp32", "eager_tf32", "compile"}
    for name in base:
        row = base[name]
        assert {"median", "p10", "p90", "n"} <= set(row["time_ms"]), row
        assert row["speedup"] == perf["speedup"][name] and row["ms"] > 0
    assert base["compile"]["compile_s"] == 2.5
    assert perf["headline_baseline"] == "eager_tf32"
    assert perf["input_sets"] == {"target": 4, "drawn": 4, "passed": 4, "timed": None}


def test_compile_baseline_is_compiled_once_per_reference() -> None:
    first = _run(RunOptions(seed=1), "kernels/x/a.py")
    ref1, cand1 = _sessions(raw.candidate(1.0), raw.reference(strict_ms=2.0, tf32_ms=1.0))
    perf1, _ = _perf(first, ref1, cand1)
    assert "perf_compile" in ref1.cmds() and "reused" not in perf1["baselines"]["compile"]
    second = _run(RunOptions(seed=2), "kernels/x/b.py")
    ref2, cand2 = _sessions(raw.candidate(0.5), raw.reference(strict_ms=2.0, tf32_ms=1.0))
    perf2, _ = _perf(second, ref2, cand2)
    assert ref2.cmds() == ["perf"]
    row = perf2["baselines"]["compile"]
    assert row["reused"] is True and row["measured_with"] == "kernels/x/a.py"
    assert perf2["speedup"]["compile"] == pytest.approx(1.0, rel=0.05)
    # another reference compiles again
    third = _run(RunOptions(seed=3), "kernels/y/c.py", reference=REFERENCE.replace("16384", "8192"))
    ref3, cand3 = _sessions(raw.candidate(0.5), raw.reference(strict_ms=2.0, tf32_ms=1.0))
    _perf(third, ref3, cand3)
    assert "perf_compile" in ref3.cmds()


@pytest.mark.parametrize("device, baselines, reason", [
    ("cpu", None, "off on the CPU by default"),
    ("cuda", ("eager", "tf32"), "not requested (--baselines eager,tf32)"),
])
def test_compile_baseline_not_run_says_why(device: str, baselines: tuple[str, ...] | None, reason: str) -> None:
    run = _run(RunOptions(seed=1, baselines=baselines))
    ref, cand = _sessions(raw.candidate(1.0, device=device), raw.reference(strict_ms=2.0, device=device))
    perf, _ = _perf(run, ref, cand, device=device, ids=("original", "original_b", "perf_0"))
    assert "perf_compile" not in ref.cmds()
    assert reason in perf["baselines"]["compile"]["skipped"]
    from hackscan.perf.render import table

    assert "torch.compile  skipped" in table(perf)


def test_compile_baseline_on_the_cpu_when_asked() -> None:
    run = _run(RunOptions(seed=1, baselines=("eager", "compile")))
    ref, cand = _sessions(raw.candidate(1.0, device="cpu"), raw.reference(strict_ms=2.0, device="cpu"))
    perf, _ = _perf(run, ref, cand, device="cpu", ids=("original", "original_b", "perf_0"))
    assert ref.cmds() == ["perf", "perf_compile"]
    assert ref.requests[0]["options"]["tf32"] is False
    assert perf["speedup"]["compile"] > 0


def test_no_eager_tf32_when_not_asked() -> None:
    run = _run(RunOptions(seed=1, baselines=("eager", "compile")))
    ref, cand = _sessions(raw.candidate(1.0), raw.reference(strict_ms=2.0, tf32_ms=None))
    _perf(run, ref, cand)
    assert ref.requests[0]["options"]["tf32"] is False


def test_compile_that_overruns_its_allowance_is_skipped_and_remembered() -> None:
    from hackscan.dynamic.pool import WorkerFailure

    run = _run(RunOptions(seed=1))
    ref, cand = _sessions(raw.candidate(1.0), raw.reference(strict_ms=2.0, tf32_ms=1.0),
                          perf_compile=WorkerFailure("timeout", "the worker ran past its time limit"))
    perf, findings = _perf(run, ref, cand)
    assert "did not finish within 300 s" in perf["baselines"]["compile"]["skipped"]
    assert perf["measured"] and "eager_tf32" in perf["speedup"]
    # the next candidate of this reference does not wait for it again
    again = _run(RunOptions(seed=2), "kernels/x/b.py")
    ref2, cand2 = _sessions(raw.candidate(1.0), raw.reference(strict_ms=2.0, tf32_ms=1.0))
    perf2, _ = _perf(again, ref2, cand2)
    assert ref2.cmds() == ["perf"] and "did not finish" in perf2["baselines"]["compile"]["skipped"]


@pytest.mark.parametrize("reply, expected", [
    ({"ok": True, "compile": {"error": "BackendCompilerFailed: boom"}}, "torch.compile failed: BackendCompilerFailed"),
    ({"ok": False, "error": {"message": "RuntimeError: no"}}, "torch.compile failed: RuntimeError: no"),
    ({"ok": True, "compile": {"timers": {"changed": [{"name": "time.perf_counter"}]},
                              "baseline": {"series": {}}}}, "timer was replaced"),
    ({"ok": True, "compile": None, "reason": "no input sets"}, "no input sets"),
    ({"ok": True, "compile": {"baseline": "garbage"}}, "malformed"),
])
def test_compile_failures_are_reasons(reply: dict[str, Any], expected: str) -> None:
    run = _run(RunOptions(seed=1))
    ref, cand = _sessions(raw.candidate(1.0), raw.reference(strict_ms=2.0, tf32_ms=1.0), perf_compile=reply)
    perf, _ = _perf(run, ref, cand)
    assert expected in perf["baselines"]["compile"]["skipped"]


def test_fewer_timing_sets_are_reported() -> None:
    from hackscan.dynamic.perf_run import TimingSets, timing_sets_report

    ts = TimingSets.plan("cuda", 3 << 30, 12.0)  # 3 GiB per probe, 12 GiB: the three that always run fit
    assert ts.target == 4 and ts.extra == 1 and "3 of 4 timing sets" in ts.note
    rep = timing_sets_report(ts, 3, {"method": {"input_sets": 2, "input_set_bytes": 3 << 30,
                                                "input_pool_cap_bytes": 8 << 30}})
    assert rep["timed"] == 2 and "pool holds 2 of 3" in rep["note"] and "address may go unseen" in rep["note"]
    assert TimingSets.plan("cpu", 1 << 20, 8.0).target == 3
    assert TimingSets.plan("cpu", 1 << 20, 8.0, requested=4).extra == 2
    assert "note" not in timing_sets_report(TimingSets.plan("cpu", 1 << 20, 8.0), 3, {"method": {"input_sets": 3}})
    # a replacement worker (the first crashed on a shape probe) holds fewer sets: not the pool's doing
    rep = timing_sets_report(TimingSets.plan("cpu", 1 << 20, 8.0), 3,
                             {"method": {"input_sets": 2, "input_sets_given": 2, "input_set_bytes": 1 << 20,
                                         "input_pool_cap_bytes": 512 << 20}})
    assert "held by the worker that timed" in rep["note"] and "pool holds" not in rep["note"]


def test_a_candidate_that_failed_correctness_is_not_timed_and_says_so() -> None:
    run = _run(RunOptions(seed=1))
    ref, cand = _sessions(raw.candidate(1.0), raw.reference())
    j, refs, plan = _judged(["original"])
    j.correctness_passed = False
    assert run._perf(ref, cand, j, refs, plan, "cuda") == []
    assert ref.requests == [] and cand.requests == []
    assert run.info["_performance"] == {"measured": False, "reason": "the candidate did not pass correctness"}


def test_baseline_names_on_the_command_line() -> None:
    from typer.testing import CliRunner

    from hackscan.cli import app

    clean = str(FIXTURES / "meta" / "ok_resolved_fstring_source.py")
    res = CliRunner().invoke(app, [clean, "--static", "--baselines", "eager,bogus"])
    assert res.exit_code == 2 and "unknown baseline 'bogus'" in res.output
    assert CliRunner().invoke(app, [clean, "--static", "--baselines", "eager_fp32,torch.compile"]).exit_code == 0


# ----------------------------------------------------------------------------- real workers (CPU)
@pytest.fixture(scope="module")
def pool():
    pytest.importorskip("torch")
    from hackscan.dynamic.pool import WorkerPool

    p = WorkerPool()
    yield p
    p.close()


def _scan(path: Path, pool: Any, **kw: Any) -> Report:
    from hackscan.dynamic import run_dynamic_stage
    from hackscan.engine import StaticScanner
    from hackscan.inputs import discover

    sub = next(s for s in discover([str(path.parent)]) if isinstance(s, Submission) and s.path.endswith(path.name))
    assert sub.reference, sub
    report = StaticScanner(Config()).scan(sub)
    return run_dynamic_stage(sub, report, RunOptions(device="cpu", timeout=120.0, **kw), Config(), pool=pool)


@pytest.mark.slow
def test_cpu_pipeline_measures_with_a_pre_import_baseline_and_the_parent_clock(pool: Any) -> None:
    rep = _scan(FIXTURES / "dynamic" / "relu" / "legit.py", pool, seed=11)
    perf = rep.performance
    assert perf and perf["measured"], (perf, rep.dynamic)
    method = perf["method"]
    assert method["clock_captured_before_import"] and method["memory_baseline_before_import"]
    assert method["exclusive_device"] is False
    assert perf["input_sets"]["target"] == 3 and perf["input_sets"]["timed"] == 3 and method["refresh"] == "mix"
    assert perf["memory"]["basis"].startswith("since before import")
    assert perf["outside_clock"]["checked"] and perf["outside_clock"]["informational"]
    assert "off on the CPU by default" in perf["baselines"]["compile"]["skipped"]
    assert perf["baselines"]["eager_fp32"]["speedup"] > 0
    # the paired rounds went on in fresh pairs of real workers (loaded again, readied by perf_setup),
    # and the headline's interval is taken over the pairs
    pair = perf["paired"]
    assert pair["processes"] >= 4 and len(pair["rounds_per_process"]) == pair["processes"], pair.get("spawn_errors")
    assert all(n > 0 for n in pair["rounds_per_process"]) and not pair.get("spawn_errors")
    row = pair["baselines"]["eager_fp32"]
    assert row["between_processes"] is True and len(row["process_speedups"]) == pair["processes"]
    assert perf["speedup_rerun_confidence"] == 0.99
    assert perf["speedup_rerun_ci"]["eager_fp32"][0] < perf["speedup"]["eager_fp32"] < perf["speedup_rerun_ci"]["eager_fp32"][1]
    assert not [f for f in rep.findings if f.stage is Stage.PERFORMANCE and f.severity is not Severity.INFO]
    from hackscan.output.text import render_text

    # the full statistics are one flag away (--perf-stats); the default block is three lines
    text = render_text([rep], perf_stats=True)
    assert "torch.compile  skipped" in text and "parent clock:" in text and "eager fp32" in text
    assert "eager fp32" in render_text([rep])


@pytest.mark.slow
def test_cpu_quick_mode_leaves_a_rejected_candidate_untimed(pool: Any) -> None:
    """--perf quick on a real worker: a candidate the static stage and the probes already reject
    is not timed (the reason names its errors); the verdict is the one timing would have left."""
    rep = _scan(FIXTURES / "dynamic" / "relu" / "hack_value_guard.py", pool, seed=3, extra={"perf_mode": "quick"})
    assert rep.verdict is Verdict.HACK
    perf = rep.performance
    assert perf["measured"] is False and perf["reason"].startswith("already rejected ("), perf
    assert perf["baselines_wanted"] == ["eager_fp32"]
    assert rep.dynamic["ran"] and rep.dynamic["performance_skipped"] == perf["reason"]


@pytest.mark.slow
def test_cpu_compile_baseline_runs_once_per_reference_when_asked(pool: Any) -> None:
    pytest.importorskip("torch._inductor")
    from hackscan.dynamic.perf_run import COMPILE_CACHE

    COMPILE_CACHE.clear()
    relu = FIXTURES / "dynamic" / "relu"
    first = _scan(relu / "legit.py", pool, seed=5, baselines=("eager", "compile")).performance
    row = first["baselines"]["compile"]
    assert "skipped" not in row, row
    assert row["compile_s"] > 0 and row["speedup"] > 0 and "reused" not in row
    second = _scan(relu / "legit_tuned_fast_path.py", pool, seed=6, baselines=("eager", "compile")).performance
    assert second["baselines"]["compile"]["reused"] is True
    assert second["baselines"]["compile"]["measured_with"].endswith("legit.py")


def test_protocol_documents_the_pipeline_requests() -> None:
    text = (ROOT / "hackscan" / "dynamic" / "PROTOCOL.md").read_text()
    for word in ("`spin`", "`ping`", "`perf_compile`", "prepare(", "exclusive_device", "--baselines"):
        assert word in text, word


# ----------------------------------------------------------------------------- fresh timing pairs
class PairSession(FakeSession):
    """A freshly spawned worker: ``load`` arrives by send/recv (the two loads overlap), the rest by
    request; ``close`` is recorded."""

    def __init__(self, replies: dict[str, Any]):
        super().__init__(replies)
        self.closed = False
        self.compile_allowance = 0.0
        self._sent: dict[str, Any] | None = None

    def send(self, msg: dict[str, Any]) -> None:
        self._sent = msg

    def recv(self) -> Any:
        assert self._sent is not None
        return self.request(self._sent)

    def close(self) -> None:
        self.closed = True


def _fresh_run(cand_load: dict[str, Any]) -> tuple[Any, list[PairSession]]:
    run = _run(RunOptions(seed=1))
    run._again = {"zygote": object(), "timeout": 30.0, "reference": {"cmd": "load", "code": "ref"},
                  "candidate": {"cmd": "load", "code": "cand"}, "compile_allowance": 60.0}
    probes = {"ok": True, "probes": [{"id": "original", "inputs": ["x"]}, {"id": "perf_0", "inputs": ["y"]}]}
    made = [PairSession({"load": {"ok": True}, "probe": probes, "perf_setup": {"ok": True, "ready": True}}),
            PairSession({"load": cand_load, "probe": {"ok": True}, "perf_setup": {"ok": True, "ready": True}})]
    queue = list(made)
    run._spawn = lambda zygote, role, path, device, timeout: queue.pop(0)
    return run, made


def test_a_fresh_pair_loads_again_gets_the_timing_inputs_and_readies_its_blocks() -> None:
    run, (ref, cand) = _fresh_run({"ok": True})
    specs = [{"id": "original", "family": "original"}, {"id": "perf_0", "family": "original"}]
    got = run._fresh_pair(1, specs, {"original": ["original", "perf_0"]}, {"budget_s": 1.0}, "cpu")
    assert not isinstance(got, str), got
    assert ref.cmds() == ["load", "probe", "perf_setup"] and cand.cmds() == ["load", "probe", "perf_setup"]
    assert ref.requests[1]["probes"] == specs
    # the candidate sees tokens, never probe names; its inputs are stored, not run
    stored = cand.requests[1]["probes"]
    assert all(p["store_only"] for p in stored) and {p["inputs"][0] for p in stored} == {"x", "y"}
    ids = [p["id"] for p in stored] + cand.requests[2]["sets"]["original"]
    assert not {"original", "perf_0"} & set(ids) and sorted(ids[:2]) == sorted(ids[2:])
    assert cand.compile_allowance == 60.0
    got[2]()
    assert ref.closed and cand.closed and not run.protocol_findings


def test_a_candidate_that_fails_in_a_fresh_pair_is_reported_once_and_the_pair_closed() -> None:
    run, (ref, cand) = _fresh_run({"ok": False, "error": {"message": "RuntimeError: refusing to run twice"}})
    got = run._fresh_pair(1, [{"id": "original"}], {"original": ["original"]}, {}, "cpu")
    assert isinstance(got, str) and "refusing to run twice" in got
    assert ref.closed and cand.closed
    assert [f.rule for f in run.protocol_findings] == ["HS408"] and "fresh pair" in run.protocol_findings[0].message
    run2, _ = _fresh_run({"ok": False, "error": {"message": "torch.OutOfMemoryError: CUDA out of memory"}})
    got = run2._fresh_pair(1, [{"id": "original"}], {"original": ["original"]}, {}, "cpu")
    # out of memory beside the first pair's workers: the harness's doing as much as the candidate's
    assert isinstance(got, str) and not run2.protocol_findings


def test_compile_warms_up_with_the_device_shared_and_times_alone() -> None:
    """Among other candidates, torch.compile's compilation (CPU work) runs with the device shared;
    only its timed series holds the device exclusively (stage._between_timings)."""
    from hackscan.dynamic.schedule import DeviceGate

    log: list[tuple] = []
    gate = DeviceGate(log)
    held_when: list[tuple[bool, bool]] = []

    def compile_reply(msg: dict[str, Any]) -> dict[str, Any]:
        held_when.append((bool(msg.get("warm_only")), "cuda:0" in gate._timing))
        if msg.get("warm_only"):
            return {"ok": True, "compile": {"schema": raw.SCHEMA, "role": "reference", "elapsed_s": 2.5,
                                            "timers": {"watched": 40, "changed": []},
                                            "baseline": {"tf32": True, "compile_s": 2.5, "warm": True}}}
        return _compile_reply()

    run = _run(RunOptions(seed=1))
    run.slot = SimpleNamespace(gate=gate, key="cuda:0")
    ref, cand = _sessions(raw.candidate(1.0), raw.reference(strict_ms=2.0, tf32_ms=1.0), perf_compile=compile_reply)
    out: dict[str, Any] = {}
    run._exclusive(None, lambda: out.setdefault("findings", _perf(run, ref, cand)[1]))
    assert held_when == [(True, False), (False, True)]
    assert ref.cmds() == ["perf", "perf_compile", "perf_compile"]
    row = run.info["_performance"]["baselines"]["compile"]
    assert row["time_ms"]["median"] > 0 and row["compile_s"] == 2.5
    run._release_work()  # the work share _exclusive takes back after timing, as the stage ends
    kinds = [x[1] for x in sorted(log, key=lambda x: x[3])]
    assert kinds == ["timing", "work", "timing", "work"]


def test_measure_compile_warm_then_time_compiles_once(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from hackscan.perf.worker import baselines, measure

    made: list[str] = []
    calls: list[int] = []

    def fake_compiled(model: Any, mode: str) -> Any:
        made.append(mode)

        def run(*args: Any) -> Any:
            calls.append(1)
            return model(*args)
        return run

    monkeypatch.setattr(baselines, "compiled", fake_compiled)
    model = torch.nn.ReLU()
    sets = {"original": [[torch.randn(64)]]}
    opts = {"budget_s": 0.2, "warmup": 1, "tf32": False}
    warm: dict[str, Any] = {}
    first = measure.measure_compile(model, sets, device="cpu", options=opts, warm=warm, warm_only=True)
    assert first["baseline"].get("warm") and "series" not in first["baseline"] and len(calls) == 1
    second = measure.measure_compile(model, sets, device="cpu", options=opts, warm=warm)
    assert made == ["default"] and second["baseline"]["series"]["main"]
    assert second["baseline"]["compile_s"] == first["baseline"]["compile_s"]


def _with_static(run: Any, *findings: Any) -> Any:
    run.report = run.report.with_(findings=tuple(findings))
    return run


def _static_finding(rule: str, line: int) -> Any:
    from hackscan.model import Confidence, Finding, Location

    r = load_registry().get(rule)
    return Finding(rule=rule, name=r.name, severity=Severity.ERROR, confidence=Confidence.HIGH,
                   message=f"{rule} says so", location=Location("kernels/x/cand.py", line, 1), stage=Stage.STATIC)


def test_quick_mode_knows_a_candidate_already_rejected_before_timing() -> None:
    """--perf quick does not time a candidate whose findings so far reject it (stage._rejected_before_timing):
    a static error stands, a fallback error too even when the candidate's own count says its kernel
    ran on every probe (its word softens nothing)."""
    run = _with_static(_run(RunOptions(seed=1)), _static_finding("HS105", 9))
    assert run._rejected_before_timing([]) == ["HS105"]
    fallback = _with_static(_run(RunOptions(seed=1)), _static_finding("HS107", 9))
    assert fallback._rejected_before_timing([]) == ["HS107"]
    fallback.info["custom_code"] = {"judged": True, "ran": True, "called_on_every_probe": True, "not_called_on": [],
                                    "calls_per_probe": {"original": 1, "randn": 1}}
    assert fallback._rejected_before_timing([]) == ["HS107"]
    clean = _run(RunOptions(seed=1))
    assert clean._rejected_before_timing([]) == []
