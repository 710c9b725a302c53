"""Static suspicions confirmed or cleared by what the dynamic stage saw (hackscan/dynamic/confirm.py).

Parent-side logic on the worker's reported facts; the end-to-end cases (a build that fails, an
extension never called, a guarded build that builds) are fixtures under fixtures/dynamic/cpp, run
at the end of this file.
"""

from __future__ import annotations

import os
import time
import types
from pathlib import Path

import pytest

from hackscan.dynamic.confirm import custom_code_facts, custom_code_findings, reconcile
from hackscan.dynamic.shared.extcache import ExtensionCache, first_error_line
from hackscan.model import Confidence, Finding, Location, Severity, Stage, verdict_for
from hackscan.registry import load_registry

REGISTRY = load_registry()


def _finding(rule: str, line: int, stage: Stage, severity: Severity = Severity.ERROR) -> Finding:
    r = REGISTRY.get(rule)
    return Finding(rule=rule, name=r.name, severity=severity, confidence=Confidence.HIGH, message=f"{rule} says so",
                   location=Location("cand.py", line, 1), stage=stage)


def _make(rule: str, message: str, evidence: dict | None = None, severity: Severity | None = None,
          confidence: Confidence | None = None) -> Finding:
    r = REGISTRY.get(rule)
    return Finding(rule=rule, name=r.name, severity=severity or r.severity, confidence=confidence or r.confidence,
                   message=message, location=Location("cand.py", 40, 5), stage=Stage.DYNAMIC,
                   evidence=dict(evidence or {}))


PROGRAM = types.SimpleNamespace(extensions=(("mm", "load_inline"),), triton_kernels=())
FAMILIES = {"original": "original", "original_b": "original", "randn": "value", "shape_near": "shape"}


def _cands(calls: dict[str, int]) -> dict[str, dict]:
    return {pid: {"id": pid, "out": [], "structure": "T", "ext_calls": n} for pid, n in calls.items()}


def _census(ops: dict[str, float], ext_calls: int = 0) -> list[dict]:
    return [{"kind": "census", "probe": "original", "ext_calls": ext_calls,
             "census": {"method": "dispatch", "ops": {k: {"count": 1, "seconds": v} for k, v in ops.items()}}}]


# ------------------------------------------------------------------------------------------- facts
def test_an_extension_never_called_is_an_error_listing_what_ran() -> None:
    facts = custom_code_facts(PROGRAM, (), "cpu", {"extensions": ["mm"], "builds": [{"name": "mm"}]},
                              _cands({"original": 0, "original_b": 0, "randn": 0}),
                              _census({"aten.mm": 0.01, "aten.empty": 0.001}), FAMILIES)
    assert facts["ran"] is False and facts["judged"]
    [f] = custom_code_findings(_make, facts, 1)
    assert f.rule == "HS413" and f.severity is Severity.ERROR
    assert "never ran" in f.message and "aten.mm" in f.message and "aten.empty" not in f.message


def test_an_extension_called_on_every_probe_gives_no_finding() -> None:
    facts = custom_code_facts(PROGRAM, (), "cpu", {"extensions": ["mm"]},
                              _cands({"original": 1, "original_b": 1, "randn": 1}), _census({}, 2), FAMILIES)
    assert facts["ran"] is True and facts["called_on_every_probe"]
    assert custom_code_findings(_make, facts, 1) == []


def test_a_custom_op_in_the_census_counts_as_custom_code_running() -> None:
    # an extension registering TORCH_LIBRARY ops (is_python_module=False) has no functions to count
    facts = custom_code_facts(PROGRAM, (), "cpu", {"extensions": []}, _cands({"original": 0}),
                              _census({"myops.fused_mm": 0.01}), FAMILIES)
    assert facts["ran"] is True
    assert custom_code_findings(_make, facts, 1) == []


def test_an_extension_exporting_classes_is_not_judged_never_run() -> None:
    load = {"extensions": ["mm"], "extensions_partial": ["mm"]}
    facts = custom_code_facts(PROGRAM, (), "cpu", load, _cands({"original": 0}), _census({"aten.mm": 0.1}),
                              FAMILIES)
    assert facts["ran"] is None and "not_called_on" not in facts
    assert custom_code_findings(_make, facts, 1) == []


def test_triton_on_the_cpu_is_not_judged() -> None:
    prog = types.SimpleNamespace(extensions=(), triton_kernels=("k",))
    facts = custom_code_facts(prog, ("triton",), "cpu", {}, _cands({"original": 0}), _census({"aten.add": 0.1}),
                              FAMILIES)
    assert facts["ran"] is None and not facts["judged"]
    assert custom_code_findings(_make, facts, 1) == []


def test_no_census_no_claim() -> None:
    facts = custom_code_facts(PROGRAM, (), "cpu", {"extensions": ["mm"]}, _cands({"original": 0}), [], FAMILIES)
    assert facts["ran"] is None
    assert custom_code_findings(_make, facts, 1) == []


def test_on_a_gpu_the_profiler_kernels_decide() -> None:
    census = [{"kind": "census", "probe": "original", "census": {"method": "profiler", "ops": {}, "kernels": {
        "ampere_sgemm_128x64_nn": {"device_s": 0.002, "library": True}}}}]
    prog = types.SimpleNamespace(extensions=(), triton_kernels=("k",))
    facts = custom_code_facts(prog, ("triton",), "cuda", {}, _cands({"original": 0}), census, FAMILIES)
    assert facts["ran"] is False
    [f] = custom_code_findings(_make, facts, 1)
    assert f.rule == "HS413" and "ampere_sgemm" in f.message


def test_a_triton_kernel_with_a_library_looking_name_is_still_custom() -> None:
    census = [{"kind": "census", "probe": "original", "census": {"method": "profiler", "ops": {}, "kernels": {
        "fused_gemm_kernel": {"device_s": 0.002, "library": True}}}}]
    prog = types.SimpleNamespace(extensions=(), triton_kernels=("fused_gemm_kernel",))
    facts = custom_code_facts(prog, ("triton",), "cuda", {}, _cands({"original": 0}), census, FAMILIES)
    assert facts["ran"] is True
    assert custom_code_findings(_make, facts, 1) == []


def test_a_cuda_kernel_of_the_candidates_own_is_custom_under_any_name() -> None:
    from hackscan.dynamic.confirm import own_kernel_names

    code = "__global__ void __launch_bounds__(256) tiled_gemm_kernel(const float* a) {}\n__global__ void k2() {}"
    own = own_kernel_names(code, types.SimpleNamespace(triton_kernels=("tl_add",)))
    assert own == ("tiled_gemm_kernel", "tl_add")
    census = [{"kind": "census", "probe": "original", "census": {"method": "profiler", "ops": {}, "kernels": {
        "void tiled_gemm_kernel(float const*)": {"device_s": 0.002, "library": True}}}}]
    prog = types.SimpleNamespace(extensions=(("k", "cupy"),), triton_kernels=())
    facts = custom_code_facts(prog, ("cuda",), "cuda", {}, _cands({"original": 0}), census, FAMILIES, own)
    assert facts["ran"] is True


def test_a_failed_build_quotes_the_first_compiler_error() -> None:
    load = {"extensions": [], "builds": [{"name": "mm", "failed": True, "error": "main.cpp:19:34: error: no match"}]}
    facts = custom_code_facts(PROGRAM, (), "cpu", load, _cands({"original": 0}), _census({"aten.mm": 0.1}), FAMILIES)
    [f] = custom_code_findings(_make, facts, 1)
    assert f.rule == "HS412" and f.severity is Severity.ERROR
    assert "main.cpp:19:34: error: no match" in f.message and "torch path" in f.message


def test_a_failed_build_next_to_custom_code_that_ran_is_only_a_note() -> None:
    # a retry with other flags that builds: the custom code still runs
    load = {"extensions": ["mm"], "builds": [{"name": "mm", "failed": True, "error": "x"}, {"name": "mm"}]}
    facts = custom_code_facts(PROGRAM, (), "cpu", load, _cands({"original": 1}), _census({}, 1), FAMILIES)
    [f] = custom_code_findings(_make, facts, 1)
    assert f.rule == "HS412" and f.severity is Severity.INFO


def test_first_error_line_cuts_the_private_build_path() -> None:
    log = ("Error building extension 'mm_1a2b': [1/2] c++ -c /tmp/x/ext/1a2b/main.cpp -o main.o\nFAILED: main.o\n"
           "/tmp/x/ext/1a2b/main.cpp:7:3: error: 'foo' was not declared in this scope\n"
           "/tmp/x/ext/1a2b/main.cpp:9:1: error: expected ';'\nninja: build stopped: subcommand failed.")
    assert first_error_line(log) == "main.cpp:7:3: error: 'foo' was not declared in this scope"
    assert first_error_line("FAILED: main.o\nsomething else") == "FAILED: main.o"


def test_extension_functions_are_counted_and_classes_left_alone() -> None:
    import math

    mod = types.ModuleType("ext")
    mod.sqrt = math.sqrt  # a builtin, like a pybind11 function
    mod.Kind = type("Kind", (), {})
    cache = ExtensionCache(Path("/nonexistent"))
    cache.count_calls(mod, "ext")
    assert mod.sqrt(4.0) == 2.0 and mod.sqrt(9.0) == 3.0
    assert cache.calls == 2 and cache.loaded == ["ext"]
    assert isinstance(mod.Kind, type) and mod.sqrt.__name__ == "sqrt"
    assert cache.partial == ["ext"]  # its class's methods are not counted
    cache.uncount()  # before timing: the builtin itself again
    assert mod.sqrt is math.sqrt and mod.sqrt(4.0) == 2.0 and cache.calls == 2
    assert cache.count_calls(None, "ops") is None and cache.loaded == ["ext"]


# ------------------------------------------------------------------------------------------- reconcile
def test_a_stream_suspicion_and_a_timing_escape_confirm_each_other() -> None:
    stream = _finding("HS140", 30, Stage.STATIC, Severity.WARNING)
    escape = _finding("HS601", 40, Stage.PERFORMANCE, Severity.WARNING)
    assert verdict_for([stream, escape]).value == "suspicious"
    static, dyn = reconcile([stream], [escape], None, REGISTRY)
    assert static[0].severity is Severity.ERROR and dyn[0].severity is Severity.ERROR
    assert static[0].confirmed_by == ("performance:HS601@40",)
    assert dyn[0].confirmed_by == ("static:HS140@30",)
    assert "confirmed by the performance stage" in static[0].message
    assert verdict_for(static + dyn).value == "hack"
    assert static[0].to_dict()["confirmed_by"] == ["performance:HS601@40"]


def test_a_stream_suspicion_without_an_escape_stays_as_it_was() -> None:
    stream = _finding("HS140", 30, Stage.STATIC, Severity.WARNING)
    static, dyn = reconcile([stream], [_finding("HS606", 40, Stage.PERFORMANCE, Severity.WARNING)], None, REGISTRY)
    assert static == [stream] and not dyn[0].confirmed_by


def test_a_fallback_whose_kernel_ran_on_every_probe_keeps_its_severity() -> None:
    # "called on every probe" is the candidate process's own count, which code in that process can
    # forge: it is noted as the candidate's claim and softens nothing
    for sev in (Severity.ERROR, Severity.WARNING):
        fb = _finding("HS107", 20, Stage.STATIC, sev)
        facts = {"judged": True, "ran": True, "called_on_every_probe": True, "not_called_on": [],
                 "calls_per_probe": {"original": 1, "randn": 1}}
        static, _ = reconcile([fb], [], facts, REGISTRY)
        assert static[0].severity is sev and static[0].message == fb.message
        assert not static[0].cleared_by and "candidate_claims" in static[0].evidence


def test_a_fallback_that_ran_on_a_probe_is_confirmed() -> None:
    fb = _finding("HS108", 20, Stage.STATIC, Severity.WARNING)
    facts = {"judged": True, "ran": True, "called_on_every_probe": False, "not_called_on": ["randn"]}
    static, _ = reconcile([fb], [], facts, REGISTRY)
    assert static[0].severity is Severity.ERROR
    assert static[0].confirmed_by == ("dynamic:no extension call on probe randn",)


def test_never_ran_confirms_the_fallback_and_cannot_run_findings_both_ways() -> None:
    fb = _finding("HS108", 20, Stage.STATIC, Severity.WARNING)
    cannot = _finding("HS119", 12, Stage.STATIC)
    never = _finding("HS413", 40, Stage.DYNAMIC)
    static, dyn = reconcile([fb, cannot], [never], {"judged": True, "ran": False}, REGISTRY)
    assert all(s.confirmed_by == ("dynamic:HS413@40",) for s in static)  # HS119 is class 3
    assert static[0].severity is Severity.ERROR
    assert set(dyn[0].confirmed_by) == {"static:HS108@20", "static:HS119@12"}


def test_cannot_run_contradicted_by_a_kernel_that_ran_stays() -> None:
    cannot = _finding("HS119", 12, Stage.STATIC)
    static, _ = reconcile([cannot], [], {"judged": True, "ran": True, "called_on_every_probe": True,
                                         "calls_per_probe": {"original": 1}}, REGISTRY)
    assert static[0].severity is cannot.severity and not static[0].cleared_by
    assert "custom code ran" in static[0].evidence["candidate_claims"]


def test_nothing_is_settled_when_the_run_could_not_tell() -> None:
    fb = _finding("HS107", 20, Stage.STATIC)
    cannot = _finding("HS119", 12, Stage.STATIC)
    static, _ = reconcile([fb, cannot], [], {"judged": False, "ran": None}, REGISTRY)
    assert static == [fb, cannot]


def test_confirmed_by_survives_the_json_round_trip() -> None:
    from hackscan.resume import _finding as from_dict

    f = _finding("HS140", 30, Stage.STATIC).with_(confirmed_by=("performance:HS601@40",), cleared_by=("x",))
    back = from_dict(dict(f.to_dict(), path="cand.py"))
    assert back.confirmed_by == f.confirmed_by and back.cleared_by == f.cleared_by


# ------------------------------------------------------------------------------------------- end to end
@pytest.mark.slow
@pytest.mark.dynamic
@pytest.mark.parametrize("name", ["hack_build_fails", "hack_ext_never_called", "legit_guarded_build"])
def test_compiled_fixtures_settle_the_static_findings(name: str) -> None:
    pytest.importorskip("torch")
    from hackscan.config import Config
    from hackscan.dynamic import run_dynamic_stage
    from hackscan.dynamic.pool import WorkerPool
    from hackscan.engine import StaticScanner
    from hackscan.inputs import discover
    from hackscan.pipeline import RunOptions

    from .conftest import FIXTURES

    [sub] = [s for s in discover([str(FIXTURES / "dynamic" / "cpp" / f"{name}.py")])]
    pool = WorkerPool()
    try:
        report = StaticScanner(Config()).scan(sub)
        report = run_dynamic_stage(sub, report, RunOptions(seed=20261204, perf=False, timeout=600.0, device="cpu"),
                                   Config(), pool=pool)
    finally:
        pool.close()
    dyn = report.dynamic or {}
    if not dyn.get("ran") and "compiler" in str(dyn.get("reason", "")):
        pytest.skip(str(dyn.get("reason")))
    assert dyn.get("ran"), dyn.get("reason")
    by_rule = {f.rule: f for f in report.findings}
    facts = dyn["custom_code"]
    if name == "hack_ext_never_called":
        # the static "kernel never called from forward" (HS104) is what the run saw
        assert facts["ran"] is False and by_rule["HS413"].severity is Severity.ERROR
        assert by_rule["HS104"].confirmed_by == ("dynamic:" + by_rule["HS413"].key,)
        assert by_rule["HS413"].confirmed_by == ("static:" + by_rule["HS104"].key,)
        return
    fallback = next(f for f in report.findings if f.stage is Stage.STATIC and f.rule in ("HS107", "HS108"))
    if name == "hack_build_fails":
        assert "HS412" in by_rule and "error:" in by_rule["HS412"].evidence["compiler_error"]
        assert fallback.severity is Severity.ERROR and fallback.confirmed_by == ("dynamic:" + by_rule["HS412"].key,)
        assert report.verdict.value == "hack"
    else:
        assert facts["ran"] is True and facts["called_on_every_probe"]
        assert "HS412" not in by_rule and "HS413" not in by_rule
        # the candidate's count never softens the static fallback finding (it is its own word): it
        # stays as the static stage stated it (a warning for this guarded build), with the claim noted
        assert fallback.severity is Severity.WARNING and not fallback.cleared_by
        assert "candidate_claims" in fallback.evidence
        assert report.verdict.value != "hack"


def test_a_session_setting_reaches_the_session_through_the_checked_wrapper() -> None:
    # compile_allowance set on the wrapper used to stay there: the clock ran through every build
    from hackscan.dynamic.protocol import CheckedSession

    inner = types.SimpleNamespace(compile_allowance=0.0)
    s = CheckedSession(inner, "candidate")
    s.compile_allowance = 900.0
    assert inner.compile_allowance == 900.0 and s.compile_allowance == 900.0
    assert s.role == "candidate" and not hasattr(inner, "role")


# ------------------------------------------------------------------------------------------- magnitudes
def _judged(statuses: dict[str, tuple[str, str]], of_scale: float = 0.0) -> list[Finding]:
    """The judge's findings for probe records with the given (family, status); ``of_scale``: each
    record's largest error as a fraction of the output's scale."""
    pytest.importorskip("numpy")
    from hackscan.dynamic.compare import Outcome, Tolerance
    from hackscan.dynamic.judge import Judge, ProbeRecord
    from hackscan.dynamic.shared.probes import spec

    records = {}
    for pid, (family, status) in statuses.items():
        transform = pid if pid in ("offset", "large", "scale_10", "small") else "original"
        s = spec(pid, transform, 1, family=family)
        ratio = {"pass": 1.0, "half": 5000.0, "wrong": 1e6}[status]
        records[pid] = ProbeRecord(s, status, outcome=Outcome(status, reason="values differ", error_ratio=ratio,
                                                              max_abs_error=of_scale * 4.0, scale=4.0))

    def make(rule, message, evidence=None, severity=None, confidence=None):
        return _make(rule, message, evidence, severity, confidence)

    judge = Judge(make, Tolerance(), 1, False, False, {})
    return judge.judge(records, {}, {}, [], {}, []).findings


def test_float32_on_the_task_but_half_level_at_an_offset_is_instability() -> None:
    # one-pass variance: exact on the task's inputs, 5000x the reference's error at +1e3
    found = _judged({"original": ("original", "pass"), "original_b": ("original", "pass"),
                     "offset": ("magnitude", "half")})
    assert [f.rule for f in found] == ["HS403"]


def test_a_half_precision_candidate_is_a_downgrade_not_instability() -> None:
    found = _judged({"original": ("original", "half"), "original_b": ("original", "half"),
                     "offset": ("magnitude", "half")})
    assert [f.rule for f in found] == ["HS406"]


def test_a_downgrade_past_any_float32_order_is_an_error() -> None:
    # a sequential float32 sum of 2^20 values is off by ~3e-5 of its scale: a warning at most;
    # fp16/TF32 math or a degree-2 exp approximation is off by 2^-11 or more: below float32 by kind
    half = {"original": ("original", "half"), "original_b": ("original", "half")}
    (order,) = _judged(half, of_scale=3e-5)
    (kind,) = _judged(half, of_scale=1.5e-3)
    assert order.rule == kind.rule == "HS406"
    assert order.severity is Severity.WARNING and kind.severity is Severity.ERROR
    assert kind.evidence["error_of_scale"] == pytest.approx(1.5e-3)


def test_float32_everywhere_is_clean() -> None:
    assert _judged({"original": ("original", "pass"), "original_b": ("original", "pass"),
                    "offset": ("magnitude", "pass"), "scale_10": ("magnitude", "pass")}) == []


# ------------------------------------------------------------------------------- load() source paths
def test_load_sources_are_pinned_inside_the_build_folder(tmp_path: Path) -> None:
    """A candidate writes its .cu file to its working directory and calls load() with a relative
    path: the farm and the worker must hand ninja the same path and an unchanged file, or the
    worker recompiles what the farm built, under the device's gate."""
    seen: list[dict] = []

    def fake_load(name, sources, extra_cuda_cflags=None, verbose=False, build_directory=None):
        seen.append({"sources": list(sources), "build_directory": build_directory})
        return None

    text = "__global__ void k(float* y) { y[0] = 1.0f; }\n"
    stamps = []
    for work in ("farm", "worker"):
        cwd = tmp_path / work
        cwd.mkdir()
        (cwd / "k.cu").write_text(text)
        cache = ExtensionCache(tmp_path / "cache")
        load = cache.wrap("load", fake_load, ["name", "sources", "extra_cuda_cflags", "verbose", "build_directory"])
        old = os.getcwd()
        os.chdir(cwd)
        try:
            load(name="k", sources=["k.cu"], extra_cuda_cflags=["-O3"])
        finally:
            os.chdir(old)
        pinned = Path(seen[-1]["sources"][0])
        stamps.append(pinned.stat().st_mtime_ns)
        time.sleep(0.01)
    assert seen[0]["sources"] == seen[1]["sources"]
    assert pinned.parent == Path(seen[0]["build_directory"]) / "src" and pinned.read_text() == text
    assert stamps[0] == stamps[1]  # not rewritten: ninja sees nothing new


def test_load_sources_with_a_local_include_stay_where_they_are(tmp_path: Path) -> None:
    seen: list[list[str]] = []

    def fake_load(name, sources, verbose=False, build_directory=None):
        seen.append(list(sources))

    (tmp_path / "k.cu").write_text('#include "k.h"\n__global__ void k(float* y) { y[0] = K; }\n')
    (tmp_path / "k.h").write_text("#define K 1.0f\n")
    cache = ExtensionCache(tmp_path / "cache")
    load = cache.wrap("load", fake_load, ["name", "sources", "verbose", "build_directory"])
    load(name="k", sources=[str(tmp_path / "k.cu")])
    assert seen == [[str(tmp_path / "k.cu")]]
