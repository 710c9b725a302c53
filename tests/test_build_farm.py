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

def _scan(tmp_path: Path, code: str, farm_mode: str, cache: Path) -> Any:
    pytest.importorskip("torch")
    from hackscan.config import Config
    from hackscan.dynamic import run_dynamic_stage
    from hackscan.dynamic.pool import WorkerPool
    from hackscan.engine import StaticScanner
    from hackscan.inputs import discover
    from hackscan.pipeline import RunOptions

    folder = tmp_path / f"cand-{farm_mode}"
    folder.mkdir()
    (folder / "reference.py").write_text((RELU / "reference.py").read_text())
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
