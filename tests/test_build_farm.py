"""The build farm (dynamic/farm.py): a candidate's extensions are compiled before it takes a device.

Unit tests: how the farm is sized, which candidates it takes, the CUDA architecture list.  The
dynamic tests run real C++ candidates on the CPU with ``build_farm = on``: the farm compiles once
and the candidate's own worker finds the build (counted from the shared object's modification
time: ``compiled`` in each build's entry), a farm compile error rejects the candidate with the
same finding as without the farm, and the farm plants nothing outside the candidate's own source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hackscan.dynamic.farm import BuildFarm, arch_list, builds_at_import
from hackscan.dynamic.runnable import Target

ROOT = Path(__file__).resolve().parent.parent
RELU = ROOT / "kernels" / "relu"


def test_farm_splits_the_cores_between_its_builds() -> None:
    f = BuildFarm(jobs=8, cores=16, memory=128 << 30)
    assert (f.slots, f.max_jobs) == (8, 2)
    assert f.env() == {"MAX_JOBS": "2"}
    # two cores: one build at a time, with both
    assert (BuildFarm(jobs=8, cores=2, memory=128 << 30).slots, BuildFarm(jobs=8, cores=2).max_jobs) == (1, 2)
    # memory bounds it too (a CUDA build takes a few GiB)
    assert BuildFarm(jobs=8, cores=64, memory=8 << 30).slots == 2
    assert BuildFarm(jobs=1, cores=64).slots == 1


def test_farm_takes_candidates_that_compile_at_import() -> None:
    assert builds_at_import(Target(extension_kinds=("load_inline",)))
    assert builds_at_import(Target(extension_kinds=("load",)))
    assert builds_at_import(Target(needs=frozenset({"cxx"})))
    # cupy compiles at its first call, Triton at its first launch: nothing to build at import
    assert not builds_at_import(Target(extension_kinds=("cupy",), needs=frozenset({"cuda"})))
    assert not builds_at_import(Target())


def test_arch_list_prefers_the_option_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0")
    assert arch_list(["0"], "9.0+PTX") == "9.0+PTX"
    assert arch_list(["0"]) == "8.0"
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST")
    assert arch_list([]) is None  # the CPU, or no GPU visible


def test_arch_list_reads_the_visible_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    class Done:
        stdout = "0, 9.0\n1, 8.6\n2, 7.5\n"

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: Done())
    # GPU 2 is not visible to this run; the highest gets +PTX as torch's own choice does
    assert arch_list(["0", "1"]) == "8.6;9.0+PTX"


# ------------------------------------------------------------------------------- dynamic, CPU

def _scan(tmp_path: Path, code: str, farm_mode: str, cache: Path, reference: str | None = None) -> Any:
    pytest.importorskip("torch")
    from hackscan.config import Config
    from hackscan.dynamic import run_dynamic_stage
    from hackscan.dynamic.pool import WorkerPool
    from hackscan.engine import StaticScanner
    from hackscan.inputs import discover
    from hackscan.pipeline import RunOptions

    folder = tmp_path / f"cand-{farm_mode}"
    folder.mkdir(parents=True)
    (folder / "reference.py").write_text(reference or (RELU / "reference.py").read_text())
    (folder / "candidate.py").write_text(code)
    sub = next(s for s in discover([str(folder / "candidate.py")]))
    pool = WorkerPool(cache_root=str(cache))
    opts = RunOptions(device="cpu", timeout=240.0, seed=11, perf=False, extra={"build_farm": farm_mode})
    try:
        return run_dynamic_stage(sub, StaticScanner(Config()).scan(sub), opts, Config(), pool=pool)
    finally:
        pool.close()


@pytest.mark.slow
def test_farm_builds_once_and_the_worker_finds_the_build(tmp_path: Path) -> None:
    from hackscan.dynamic.sandbox import key_for

    code = (RELU / "clean_cpp_relu.py").read_text()
    cache = tmp_path / "cache"
    r = _scan(tmp_path, code, "on", cache)
    dyn = r.dynamic
    assert dyn.get("ran"), dyn
    farm_builds = dyn["build_farm"]["builds"]
    worker_builds = dyn["compile"]["builds"]
    # one compile in all, in the farm; the worker's own load of the same build compiled nothing
    assert [b["compiled"] for b in farm_builds] == [True], farm_builds
    assert [b["compiled"] for b in worker_builds] == [False], worker_builds
    assert farm_builds[0]["key"] == worker_builds[0]["key"]
    assert dyn["compile"]["compiled"] == 0
    assert r.verdict.value in ("clean", "suspicious"), [f.rule for f in r.findings]
    # what the farm harvested is filed under the candidate's own source, nowhere else
    assert [p.name for p in (cache / "sandboxed").iterdir()] == [key_for(code)]


@pytest.mark.slow
def test_farm_compile_error_rejects_as_without_the_farm(tmp_path: Path) -> None:
    code = (RELU / "clean_cpp_relu.py").read_text().replace("return y;\n}", "return y\n}", 1)
    assert code != (RELU / "clean_cpp_relu.py").read_text()
    without = _scan(tmp_path, code, "off", tmp_path / "cache-off")
    with_farm = _scan(tmp_path, code, "on", tmp_path / "cache-on")
    dyn = with_farm.dynamic
    # the farm's compile failed; the worker raised torch's error again without compiling
    assert dyn["build_farm"]["failed_builds"], dyn["build_farm"]
    assert [b.get("replayed") for b in dyn["compile"]["builds"]] == [True], dyn["compile"]
    assert with_farm.verdict.value == without.verdict.value == "hack"

    def rows(r: Any) -> list[tuple[str, int, str]]:
        return sorted((f.rule, f.location.line, f.message) for f in r.findings if f.stage.value == "dynamic")

    assert rows(with_farm), with_farm.findings
    assert rows(with_farm) == rows(without)
    assert "does not compile" in rows(with_farm)[0][2]


LAZY = (RELU / "clean_cpp_relu.py").read_text().replace(
    "relu_ext = load_inline(", "def build():\n    return load_inline(", 1).replace(
    """    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return relu_ext.relu_forward(x)""",
    """    def __init__(self):
        super(ModelNew, self).__init__()
        self.ext = None
        # a buffer moved to the GPU before anything is built: the farm must build past it
        self.register_buffer("scale", torch.ones(1).cuda() if torch.cuda.is_available() else torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.ext is None:  # built on first use
            self.ext = build()
        return self.ext.relu_forward(x) * self.scale.to(x.device)""")


def test_the_farm_worker_reads_a_gpu_where_a_build_asks() -> None:
    """A farm worker's torch.cuda.is_available() reads True and .cuda() keeps the value on the
    CPU (prebuild.pretend_gpu); run in a child, as it changes torch for the whole process."""
    import subprocess
    import sys

    pytest.importorskip("torch")
    code = ("import torch\nfrom hackscan.dynamic.worker.prebuild import pretend_gpu\n"
            "before = torch.cuda.is_available()\npretend_gpu()\n"
            "t = torch.ones(2).cuda(); m = torch.nn.Linear(2, 2).cuda()\n"
            "print(before, torch.cuda.is_available(), t.device.type, m.weight.device.type)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=ROOT, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.split() == ["False", "True", "cpu", "cpu"], out.stderr[-2000:]


@pytest.mark.slow
def test_farm_builds_what_a_first_call_builds(tmp_path: Path) -> None:
    """A build made on ModelNew's first call is reached by the farm: constructed with the
    reference's init inputs, then called once on the CPU; the candidate's own worker then compiles
    nothing.  (On the CPU the farm does not pretend a GPU, as the real worker sees none: the
    ``.cuda()`` branch is the GPU's, covered by the test above.)"""
    assert "def build():" in LAZY and "self.ext = build()" in LAZY
    r = _scan(tmp_path, LAZY, "on", tmp_path / "cache")
    dyn = r.dynamic
    assert dyn.get("ran"), dyn
    farm = dyn["build_farm"]
    assert farm["exercised"] == {"constructed": "True", "forward": "ran"}, farm
    assert [b["compiled"] for b in farm["builds"]] == [True], farm
    # the worker builds on its first call too, during the probes: from the farm's cache
    assert dyn["compile"]["builds"] == [], dyn["compile"]
    assert [b["compiled"] for b in dyn["compile"]["later_builds"]] == [False], dyn["compile"]
    assert farm["builds"][0]["key"] == dyn["compile"]["later_builds"][0]["key"]
    assert dyn["compile"]["compiled"] == 0
    assert r.verdict.value in ("clean", "suspicious"), [f.rule for f in r.findings]


@pytest.mark.slow
def test_a_farm_build_failure_is_reported_when_the_stage_stops_before_the_load(tmp_path: Path) -> None:
    """The stage stops before the candidate's worker loads (here its reference does not run): the
    compile error the farm saw is still reported, as HS412, or the failed build goes unsaid."""
    code = (RELU / "clean_cpp_relu.py").read_text().replace("return y;\n}", "return y\n}", 1)
    broken_ref = (RELU / "reference.py").read_text().replace(
        "return torch.relu(x)", "raise RuntimeError('this reference does not run')")
    r = _scan(tmp_path, code, "on", tmp_path / "cache", reference=broken_ref)
    dyn = r.dynamic
    assert dyn.get("failed") and "reference does not run" in dyn["reason"], dyn
    assert "compile" not in dyn  # the candidate's worker never loaded
    assert dyn["build_farm"]["failed_builds"], dyn["build_farm"]
    hs412 = [f for f in r.findings if f.rule == "HS412"]
    assert len(hs412) == 1, [f.rule for f in r.findings]
    assert "seen in the build farm" in hs412[0].message and "error" in hs412[0].evidence["compiler_error"]
    # the same failure with a working reference is reported by the worker's own load, not twice
    ok = _scan(tmp_path / "ok", code, "on", tmp_path / "cache-ok")
    assert "compile" in ok.dynamic
    assert not any("seen in the build farm" in f.message for f in ok.findings)


def test_a_candidate_waits_for_its_farm_without_holding_the_gpu() -> None:
    """While a candidate waits for its farm build (no GPU in the farm's sandbox, nothing of the
    candidate on the device), another candidate can be timed on its GPU; the wait ends with the
    candidate holding its share of the gate again, and the farm's results taken."""
    import threading
    from types import SimpleNamespace

    from hackscan.dynamic.schedule import DeviceGate, Slot
    from hackscan.dynamic.stage import DynamicRun

    class Bare(DynamicRun):
        def __init__(self, slot: Slot) -> None:  # only what the gate and the farm's results need
            self.slot, self._work_held, self.on_phase = slot, None, None
            self.timings, self.info, self.build_failures = {}, {}, {}
            self._farm_thread, self._farm_out = None, None
            self.sub = SimpleNamespace(path="candidate.py")

    gate = DeviceGate(log=[])
    run = Bare(Slot(gate, "cuda:0", None))
    run._hold_work()
    release = threading.Event()

    def farm() -> None:
        release.wait(20)
        run._farm_out = {"builds": [{"name": "ext", "key": "k1", "failed": True, "error": "error: x"}],
                         "failures": {"k1": "Error building extension 'ext'"}, "seconds": 1.5, "waited_s": 0.0}

    run._farm_thread = threading.Thread(target=farm)
    run._farm_thread.start()
    waiter = threading.Thread(target=run._await_prebuild)
    waiter.start()
    timed = threading.Event()

    def other_candidate_timed() -> None:
        with gate.timing("cuda:0", "other"):
            timed.set()

    t = threading.Thread(target=other_candidate_timed)
    t.start()
    assert timed.wait(10), "the waiting candidate kept its hold on the GPU's gate"
    assert waiter.is_alive()  # the farm is still building
    release.set()
    waiter.join(10)
    t.join(10)
    assert run._work_held is not None  # back to its share of the gate for the rest of its run
    assert run.build_failures == {"k1": "Error building extension 'ext'"}
    assert run.info["build_farm"]["failed_builds"] == ["k1"] and run.timings["farm_s"] == 1.5
    run._release_work()
    assert not waiter.is_alive() and not t.is_alive()


# ------------------------------------------------------------------------------- the reference stays out
def test_the_farm_exercises_the_candidate_with_values_not_the_reference_source() -> None:
    """The farm's candidate worker runs the candidate's code, and its build folder reaches the real
    worker through the cache: the reference's source must never enter it (the candidate could
    carry it across and compute the right answer there).  ``exercise`` takes packed values."""
    import inspect

    pytest.importorskip("torch")
    import torch

    from hackscan.dynamic.worker import prebuild
    from hackscan.dynamic.worker.values import pack

    assert "reference" not in inspect.signature(prebuild.exercise).parameters
    seen: list[Any] = []

    class Cand(torch.nn.Module):
        def __init__(self, k: int) -> None:
            super().__init__()
            seen.append(("init", k))

        def forward(self, x: Any) -> Any:
            seen.append(("call", tuple(x.shape)))
            return x

    done = prebuild.exercise(Cand, pack([3]), pack([torch.zeros(2, 5)]), 42, lambda: 0)
    assert done == {"constructed": True, "forward": "ran"} and seen == [("init", 3), ("call", (2, 5))]
    assert prebuild.exercise(Cand, pack([3]), None, 42, lambda: 0)["forward"].startswith("skipped")


@pytest.mark.slow
def test_the_farm_draws_the_reference_values_in_a_sandbox_of_their_own() -> None:
    pytest.importorskip("torch")
    from hackscan.dynamic import farm
    from hackscan.dynamic.pool import WorkerPool

    ref = (RELU / "reference.py").read_text()
    pool = WorkerPool()
    try:
        drawn = farm._draw(pool.zygote("cpu", None, farm=BuildFarm(jobs=1)), ref, 42, 60.0, None)
    finally:
        pool.close()
    assert drawn is not None and "init_inputs" in drawn and drawn.get("inputs") is not None, drawn
    assert drawn["input_bytes"] > 0
