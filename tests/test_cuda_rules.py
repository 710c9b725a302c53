"""Severity decisions of the C++ rules that fixtures alone do not pin down."""

from __future__ import annotations

import textwrap

from hackscan.config import Config
from hackscan.engine import StaticScanner
from hackscan.inputs import Submission
from hackscan.model import Severity

REF_RELU = textwrap.dedent("""
    import torch
    import torch.nn as nn
    class Model(nn.Module):
        def forward(self, x):
            return torch.relu(x)
    batch_size = 16
    dim = 16384
    def get_inputs():
        return [torch.rand(batch_size, dim)]
    def get_init_inputs():
        return []
""")

HEAD = "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\nsrc = r'''\n"
KERNEL = """
#include <torch/extension.h>
__global__ void relu_inplace(float* d, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && d[i] < 0.f) d[i] = 0.f;
}
"""


def scan(cuda: str, python_tail: str, select: str, reference: str | None = REF_RELU, functions=("run",)):
    code = (HEAD + textwrap.dedent(cuda) + "'''\n"
            f"ext = load_inline(name='t', cpp_sources='', cuda_sources=src, functions={list(functions)!r})\n"
            + textwrap.dedent(python_tail))
    sub = Submission(path="t.py", code=code, file="t.py", reference=reference,
                     reference_path="ref.py" if reference else None)
    report = StaticScanner(Config(select=(select,))).scan(sub)
    return [(f.rule, f.severity, f.location.line) for f in report.findings if f.rule == select]


INPLACE = KERNEL + """
torch::Tensor run(torch::Tensor x) {
    relu_inplace<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), x.numel());
    return x;
}
"""


def test_input_mutation_is_an_error_when_forward_passes_its_argument() -> None:
    got = scan(INPLACE, """
        class ModelNew(nn.Module):
            def forward(self, x):
                return ext.run(x.contiguous())
    """, "HS213")
    assert [(r, s) for r, s, _ in got] == [("HS213", Severity.ERROR)]


def test_input_mutation_on_a_temporary_is_not_reported() -> None:
    got = scan(INPLACE, """
        class ModelNew(nn.Module):
            def forward(self, x):
                y = x * 2.0
                return ext.run(y)
    """, "HS213")
    assert got == []


def test_input_mutation_through_a_helper_parameter_is_a_warning() -> None:
    got = scan(INPLACE, """
        def relu_(t):
            return ext.run(t)
        class ModelNew(nn.Module):
            def forward(self, x):
                return relu_(x)
    """, "HS213")
    assert [(r, s) for r, s, _ in got] == [("HS213", Severity.WARNING)]


def test_input_mutation_is_legit_when_the_reference_works_in_place() -> None:
    ref = REF_RELU.replace("return torch.relu(x)", "return x.relu_()")
    got = scan(INPLACE, """
        class ModelNew(nn.Module):
            def forward(self, x):
                return ext.run(x)
    """, "HS213", reference=ref)
    assert got == []


def test_checked_hardcoded_dim_is_a_low_warning() -> None:
    cuda = """
    #include <torch/extension.h>
    #define DIM 16384
    __global__ void k(const float* x, float* y) {
        for (int i = threadIdx.x; i < DIM; i += blockDim.x) y[blockIdx.x * DIM + i] = fmaxf(x[blockIdx.x * DIM + i], 0.f);
    }
    torch::Tensor run(torch::Tensor x) {
        TORCH_CHECK(x.size(1) == DIM, "only the benchmark width");
        auto y = torch::empty_like(x);
        k<<<x.size(0), 256>>>(x.data_ptr<float>(), y.data_ptr<float>());
        return y;
    }
    """
    got = scan(cuda, "", "HS203")
    assert [(r, s) for r, s, _ in got] == [("HS203", Severity.WARNING)]
    unchecked = scan(cuda.replace('TORCH_CHECK(x.size(1) == DIM, "only the benchmark width");', ""), "", "HS203")
    assert [(r, s) for r, s, _ in unchecked] == [("HS203", Severity.ERROR)]


def test_block_size_equal_to_a_small_dim_is_not_a_hardcoded_shape() -> None:
    ref = REF_RELU.replace("batch_size = 16", "batch_size = 256")
    cuda = """
    #include <torch/extension.h>
    #define BLOCK_SIZE 256
    __global__ void k(const float* x, float* y, int n) {
        int i = blockIdx.x * BLOCK_SIZE + threadIdx.x;
        if (i < n) y[i] = fmaxf(x[i], 0.f);
    }
    torch::Tensor run(torch::Tensor x) {
        auto y = torch::empty_like(x);
        k<<<(x.numel() + BLOCK_SIZE - 1) / BLOCK_SIZE, BLOCK_SIZE>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
        return y;
    }
    """
    assert scan(cuda, "", "HS203", reference=ref) == []


HALF = """
#include <torch/extension.h>
#include <cuda_fp16.h>
__global__ void k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __half2float(__hmul(__float2half(x[i]), __float2half(0.5f)));
}
torch::Tensor run(torch::Tensor x) {
    auto y = torch::empty_like(x);
    k<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
"""


def test_half_math_on_narrowed_fp32_is_an_error_only_for_fp32_references() -> None:
    got = scan(HALF, "", "HS214")
    assert [(r, s) for r, s, _ in got] == [("HS214", Severity.ERROR)]
    half_ref = REF_RELU.replace("torch.rand(batch_size, dim)", "torch.rand(batch_size, dim, dtype=torch.float16)")
    assert scan(HALF, "", "HS214", reference=half_ref) == []


def test_passthrough_helper_next_to_a_launching_export_is_a_low_warning() -> None:
    cuda = KERNEL + """
    torch::Tensor run(torch::Tensor x) {
        auto y = x.clone();
        relu_inplace<<<(y.numel() + 255) / 256, 256>>>(y.data_ptr<float>(), y.numel());
        return y;
    }
    torch::Tensor flat(torch::Tensor x) { return x.view({-1}); }
    """
    tail = """
        class ModelNew(nn.Module):
            def forward(self, x):
                return ext.run(ext.flat(x)).view_as(x)
    """
    got = scan(cuda, tail, "HS206", functions=("run", "flat"))
    assert [(r, s) for r, s, _ in got] == [("HS206", Severity.WARNING)]
    alone = scan(cuda.split("torch::Tensor run")[0] + "torch::Tensor flat(torch::Tensor x) { return x.view({-1}); }",
                 tail.replace("ext.run(ext.flat(x))", "ext.flat(x)"), "HS206", functions=("flat",))
    assert [(r, s) for r, s, _ in alone] == [("HS206", Severity.ERROR)]


def test_counter_branch_needs_an_effect_on_the_launch() -> None:
    cuda = KERNEL + """
    static int calls = 0;
    torch::Tensor run(torch::Tensor x) {
        calls += 1;
        if (calls % 1000 == 0) printf("%d calls\\n", calls);
        auto y = x.clone();
        relu_inplace<<<(y.numel() + 255) / 256, 256>>>(y.data_ptr<float>(), y.numel());
        return y;
    }
    """
    assert scan(cuda, "", "HS212") == []
    skipping = cuda.replace('printf("%d calls\\n", calls);', "return x;")
    got = scan(skipping, "", "HS212")
    assert [(r, s) for r, s, _ in got] == [("HS212", Severity.ERROR)]


def test_aten_fallback_on_a_shape_branch_is_a_warning() -> None:
    cuda = KERNEL + """
    torch::Tensor run(torch::Tensor x) {
        if (x.size(1) % 4 != 0) {
            return torch::relu(x);
        }
        auto y = x.clone();
        relu_inplace<<<(y.numel() + 255) / 256, 256>>>(y.data_ptr<float>(), y.numel());
        return y;
    }
    """
    got = scan(cuda, "", "HS204")
    assert [(r, s) for r, s, _ in got] == [("HS204", Severity.WARNING)]
    unconditional = cuda.replace("if (x.size(1) % 4 != 0) {\n            return torch::relu(x);\n        }",
                                 "return torch::relu(x);")
    got = scan(unconditional, "", "HS204")
    assert [(r, s) for r, s, _ in got] == [("HS204", Severity.ERROR)]


def _mean_kernel(loop: str) -> str:
    return MEAN_KERNEL.replace("LOOP", loop)


MEAN_KERNEL = """
    #include <torch/extension.h>
    __global__ void k(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
        const float* r = x + (size_t)blockIdx.x * cols;
        float sum = 0.f;
        LOOP
        if (threadIdx.x == 0) out[blockIdx.x] = sum / cols;
    }
    torch::Tensor run(torch::Tensor x) {
        auto out = torch::empty({x.size(0)}, x.options());
        k<<<x.size(0), 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(0), x.size(1));
        return out;
    }
    """


def test_strided_loops_that_cover_their_step_are_not_subsampling() -> None:
    covering = [
        "for (int c = threadIdx.x; c < cols; c += blockDim.x) sum += r[c];",
        "for (int c = 0; c < cols; c += 4) sum += r[c] + r[c + 1] + r[c + 2] + r[c + 3];",
        "for (int c0 = 0; c0 < cols; c0 += 256) { int c = c0 + threadIdx.x; if (c < cols) sum += r[c]; }",
        "for (int c = 0; c < cols; c += 8) { for (int j = 0; j < 8; ++j) sum += r[c + j]; }",
        "for (int row = blockIdx.x; row < rows; row += 132) sum += x[row];",
        "for (int c = threadIdx.x * 4; c + 3 < cols; c += blockDim.x * 4) { float4 v = *(const float4*)&r[c]; sum += v.x + v.y + v.z + v.w; }",
    ]
    for loop in covering:
        assert scan(_mean_kernel(loop), "", "HS216") == [], loop


def test_strided_loops_that_skip_elements_are_subsampling() -> None:
    got = scan(_mean_kernel("for (int c = 0; c < cols; c += 16) sum += r[c];"), "", "HS216")
    assert [(r, s) for r, s, _ in got] == [("HS216", Severity.ERROR)]
    got = scan(_mean_kernel("for (int c = 0; c < cols; c += 4) sum += r[c] + r[c + 1];"), "", "HS216")
    assert [(r, s) for r, s, _ in got] == [("HS216", Severity.WARNING)]
    got = scan(_mean_kernel("for (int c = threadIdx.x; c < cols; c += blockDim.x * 4) sum += r[c];"), "", "HS216")
    assert [(r, s) for r, s, _ in got] == [("HS216", Severity.ERROR)]


def test_size_named_constant_equal_to_an_input_dim_is_a_hardcoded_shape() -> None:
    cuda = """
    #include <torch/extension.h>
    __global__ void k(const float* x, float* y, int cols) {
        int r = blockIdx.x, c = threadIdx.x;
        if (c < cols) y[r * cols + c] = fmaxf(x[r * cols + c], 0.f);
    }
    torch::Tensor run(torch::Tensor x) {
        const int rows = 16;
        auto y = torch::empty_like(x);
        k<<<rows, 1024>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.size(1));
        return y;
    }
    """
    got = scan(cuda, "", "HS203")
    assert [(r, s) for r, s, _ in got] == [("HS203", Severity.WARNING)]
    # the same value under a tiling name is a block size, not a shape
    assert scan(cuda.replace("rows", "rows_per_block"), "", "HS203") == []


def test_constants_interpolated_from_the_module_or_input_are_specialisation() -> None:
    head = ("import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n"
            "class ModelNew(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.dim = 16384\n"
            "        src = f'''\n")
    body = textwrap.dedent("""
        #include <torch/extension.h>
        constexpr int DIM = {VALUE};
        __global__ void k(const float* x, float* y) {{
            for (int i = threadIdx.x; i < DIM; i += blockDim.x) y[blockIdx.x * DIM + i] = fmaxf(x[blockIdx.x * DIM + i], 0.f);
        }}
        torch::Tensor run(torch::Tensor x) {{
            auto y = torch::empty_like(x);
            k<<<x.size(0), 256>>>(x.data_ptr<float>(), y.data_ptr<float>());
            return y;
        }}
        """)
    tail = ("'''\n        self.ext = load_inline(name='t', cpp_sources='', cuda_sources=src, functions=['run'])\n"
            "    def forward(self, x):\n        return self.ext.run(x)\n")

    def findings(value: str):
        code = head + body.replace("{VALUE}", value) + tail
        sub = Submission(path="t.py", code=code, file="t.py", reference=REF_RELU, reference_path="ref.py")
        return [f.rule for f in StaticScanner(Config(select=("HS203",))).scan(sub).findings]

    assert findings("{self.dim}") == []
    assert findings("16384") == ["HS203"]


def test_tensor_arithmetic_through_operators_is_aten_work() -> None:
    cuda = """
    #include <torch/extension.h>
    torch::Tensor run(torch::Tensor x, torch::Tensor scale, torch::Tensor shift) {
        const int64_t rows = x.size(0), cols = x.size(1);
        TORCH_CHECK(rows * cols == x.numel(), "2-D input");
        return x * scale + shift;
    }
    """
    got = scan(cuda, "", "HS204")
    assert [(r, s) for r, s, _ in got] == [("HS204", Severity.ERROR)]
    with_kernel = KERNEL + """
    torch::Tensor run(torch::Tensor x) {
        auto y = x.clone();
        const int n = y.size(0) * y.size(1);
        relu_inplace<<<(n + 255) / 256, 256>>>(y.data_ptr<float>(), n);
        return y / 2.0;
    }
    """
    got = scan(with_kernel, "", "HS204")
    assert [(r, s) for r, s, _ in got] == [("HS204", Severity.WARNING)]
