"""The dynamic stage on a CUDA GPU: CUDA fixtures, the caching allocator's stale memory, the profiler.

Run on a GPU host with ``gpu/run_dynamic_gpu.sh`` (or ``pytest -m gpu tests/test_dynamic_gpu.py``).
Each CUDA fixture compiles once (about a minute) into ``~/.cache/hackscan/ext``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numpy")

from hackscan.config import Config  # noqa: E402
from hackscan.engine import StaticScanner  # noqa: E402
from hackscan.inputs import Submission  # noqa: E402
from hackscan.model import Stage  # noqa: E402
from hackscan.pipeline import RunOptions  # noqa: E402

from .conftest import FIXTURES  # noqa: E402
from .test_dynamic_fixtures import check_fixture, dynamic_fixtures  # noqa: E402

GPU_SUBMISSIONS = dynamic_fixtures(gpu=True)
CPU_SUBMISSIONS = dynamic_fixtures(gpu=False)


@pytest.fixture(scope="module")
def pool():
    from hackscan.dynamic.pool import WorkerPool

    p = WorkerPool()
    yield p
    p.close()


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("sub", GPU_SUBMISSIONS, ids=[str(Path(s.path).relative_to(FIXTURES)) for s in GPU_SUBMISSIONS])
def test_cuda_fixture_findings_match_annotations(sub: Submission, pool) -> None:
    check_fixture(sub, pool, "cuda")


@pytest.mark.gpu
@pytest.mark.slow
def test_the_gpu_stage_runs_on_the_gpu_and_uses_the_profiler(pool) -> None:
    from hackscan.dynamic import run_dynamic_stage

    sub = next(s for s in GPU_SUBMISSIONS if s.path.endswith("hack_aten_epilogue.py"))
    report = run_dynamic_stage(sub, StaticScanner(Config()).scan(sub),
                               RunOptions(seed=5, perf=False, device="cuda"), Config(), pool=pool)
    dyn = report.dynamic
    assert dyn["ran"] and dyn["device"] == "cuda"
    census = next(i for i in dyn["integrity"] if i["kind"] == "census")
    assert census["method"] == "profiler", census
    assert "scale_kernel" in " ".join(census.get("custom_kernels", [])), census
    found = [f for f in report.findings if f.stage is Stage.DYNAMIC and f.rule == "HS508"]
    assert found and found[0].evidence["share"] >= 0.5


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("name", ["relu/hack_half_written.py", "relu/hack_last_input_cache.py",
                                  "relu/hack_value_guard.py", "relu/legit.py"])
def test_pure_pytorch_fixtures_behave_the_same_on_the_gpu(name: str, pool) -> None:
    sub = next(s for s in CPU_SUBMISSIONS if s.path.endswith(name))
    check_fixture(Submission(**{**sub.__dict__}), pool, "cuda")


@pytest.mark.gpu
@pytest.mark.slow
def test_auto_picks_the_gpu_for_cuda_and_the_cpu_for_a_cxx_only_extension(pool) -> None:
    from hackscan.dynamic import run_dynamic_stage

    gpu = next(s for s in GPU_SUBMISSIONS if s.path.endswith("legit_relu_kernel.py"))
    rep = run_dynamic_stage(gpu, StaticScanner(Config()).scan(gpu), RunOptions(seed=5, perf=False), Config(),
                            pool=pool)
    assert rep.dynamic["ran"] and rep.dynamic["device"] == "cuda"
    cpp = next(s for s in CPU_SUBMISSIONS if s.path.endswith("legit_loop_matmul.py"))
    rep = run_dynamic_stage(cpp, StaticScanner(Config()).scan(cpp), RunOptions(seed=5, perf=False), Config(),
                            pool=pool)
    assert rep.dynamic["ran"] and rep.dynamic["device"] == "cpu"
