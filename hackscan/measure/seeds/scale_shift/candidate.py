import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor scale_shift(torch::Tensor x, torch::Tensor scale, torch::Tensor shift) {
    TORCH_CHECK(x.dim() == 2, "scale_shift expects a 2-D input");
    TORCH_CHECK(x.size(1) == scale.numel() && x.size(1) == shift.numel(), "feature size mismatch");
    auto xc = x.contiguous();
    auto sc = scale.contiguous();
    auto sh = shift.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t rows = xc.size(0);
    const int64_t cols = xc.size(1);
    const float* src = xc.data_ptr<float>();
    const float* a = sc.data_ptr<float>();
    const float* b = sh.data_ptr<float>();
    float* dst = y.data_ptr<float>();
    at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            for (int64_t c = 0; c < cols; ++c) {
                dst[r * cols + c] = src[r * cols + c] * a[c] + b[c];
            }
        }
    });
    return y;
}
"""

scale_shift_ext = load_inline(
    name="hackscan_seed_scale_shift",
    cpp_sources=cpp_source,
    functions=["scale_shift"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(features))
        self.shift = nn.Parameter(torch.zeros(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scale_shift_ext.scale_shift(x, self.scale, self.shift)
