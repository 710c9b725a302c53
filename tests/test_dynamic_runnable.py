"""What can run where, decided from the source before anything runs; and the fallback census."""

from __future__ import annotations

import textwrap

from hackscan.dynamic.census_judge import fallback_share
from hackscan.dynamic.runnable import Target, choose_device, inspect
from hackscan.inputs import Submission

CPU = {"cuda": False, "cxx": "/usr/bin/c++", "nvcc": None, "triton": False}
GPU = {"cuda": True, "cxx": "/usr/bin/c++", "nvcc": "/usr/bin/nvcc", "triton": True}


def _sub(code: str, language: str = "python") -> Submission:
    return Submission(path="c.py", code=textwrap.dedent(code), language=language, file="c.py")


PURE = """
import torch
import torch.nn as nn
class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""

CUDA = """
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
ext = load_inline(name="k", cpp_sources="torch::Tensor f(torch::Tensor x);",
                  cuda_sources="__global__ void k(float* y) {}", functions=["f"])
class ModelNew(nn.Module):
    def forward(self, x):
        return ext.f(x)
"""

CPP = CUDA.replace('cuda_sources="__global__ void k(float* y) {}", ', "")


def test_the_forward_line_is_where_findings_go() -> None:
    t = inspect(_sub(PURE))
    assert t.problem is None and t.forward_line == 5 and not t.custom and not t.needs


def test_cuda_sources_need_a_gpu_and_nvcc() -> None:
    t = inspect(_sub(CUDA))
    assert "cuda" in t.needs and t.custom
    assert choose_device("auto", CPU, t)[0] is None and "CUDA GPU" in choose_device("auto", CPU, t)[1]
    assert choose_device("auto", GPU, t) == ("cuda", None)
    assert choose_device("cpu", GPU, t)[0] is None


def test_a_cxx_only_extension_runs_on_the_cpu_even_under_auto_on_a_gpu_host() -> None:
    t = inspect(_sub(CPP))
    assert t.needs == frozenset({"cxx"})
    assert choose_device("auto", GPU, t) == ("cpu", None)
    assert choose_device("auto", dict(CPU, cxx=None), t)[0] is None


def test_a_cxx_only_extension_is_not_handed_device_pointers_under_device_cuda() -> None:
    # on an H200 such candidates died with SIGSEGV: their host loops read device memory
    t = inspect(_sub(CPP))
    device, why = choose_device("cuda", GPU, t)
    assert device is None and "C++ only" in why and "--device cpu" in why
    assert choose_device("cpu", GPU, t) == ("cpu", None)


def test_pure_pytorch_follows_the_device_asked_for() -> None:
    t = inspect(_sub(PURE))
    assert choose_device("auto", CPU, t) == ("cpu", None)
    assert choose_device("auto", GPU, t) == ("cuda", None)
    assert choose_device("cuda", CPU, t)[0] is None


def test_what_has_no_modelnew_or_no_host_says_so() -> None:
    assert "ModelNew" in inspect(_sub("import torch\n")).problem
    assert "standalone" in inspect(_sub("__global__ void k() {}", language="cuda")).problem
    assert "parse" in inspect(_sub("def broken(:\n")).problem
    assert isinstance(inspect(_sub(PURE)), Target)


def _census(ops: dict[str, tuple[float, int]], total: float = 1.0) -> dict:
    return {"method": "dispatch", "total_s": total,
            "ops": {k: {"count": 1, "seconds": s, "work": w} for k, (s, w) in ops.items()}}


def test_the_fallback_share_counts_work_in_the_references_own_ops_only() -> None:
    ref = _census({"aten.mm": (0.5, 1000), "aten.relu": (0.01, 10)})
    share, detail = fallback_share(_census({"aten.mm": (0.9, 1000), "aten.empty": (0.1, 10)}), ref)
    assert share == 1000 / 1010 and detail["reference_ops_used"] == ["aten.mm"]
    # an epilogue in ATen, the main work custom: a small share
    share, _ = fallback_share(_census({"aten.relu": (0.01, 10), "aten.zeros": (0.2, 1000)}), ref)
    assert share == 10 / 1010
    # allocation and views never count, even when they are all the candidate does in ATen
    share, _ = fallback_share(_census({"aten.empty_like": (0.5, 1000), "aten.copy_": (0.5, 1000)}), ref)
    assert share == 0.0
    assert fallback_share({}, ref)[0] is None


def test_cuda_source_the_static_stage_cannot_resolve_still_makes_a_cuda_candidate() -> None:
    # the kernel is written to a file at run time and the extension falls back to torch on a CPU:
    # running it there would judge the fallback, not the candidate
    code = """
    import os, tempfile, torch
    import torch.nn as nn
    from torch.utils.cpp_extension import load
    class ModelNew(nn.Module):
        def __init__(self):
            super().__init__()
            src = "__global__ void k(float* y) { y[threadIdx.x] = 0.f; }"
            path = os.path.join(tempfile.mkdtemp(), "k" + ".cu")
            open(path, "w").write(src)
            try:
                self.ext = load(name="k", sources=[path])
            except Exception:
                self.ext = None
        def forward(self, x):
            return self.ext.k(x) if self.ext is not None and x.is_cuda else torch.relu(x)
    """
    t = inspect(_sub(code))
    assert "cuda" in t.needs and t.custom
    assert choose_device("auto", CPU, t)[0] is None
