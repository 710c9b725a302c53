import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor row_sum(torch::Tensor x) {
    TORCH_CHECK(x.dim() == 2, "row_sum expects a 2-D tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "row_sum expects float32");
    auto xc = x.contiguous();
    const int64_t rows = xc.size(0);
    const int64_t cols = xc.size(1);
    auto out = torch::empty({rows}, xc.options());
    const float* src = xc.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            const float* row = src + r * cols;
            double acc = 0.0;
            for (int64_t c = 0; c < cols; ++c) {
                acc += row[c];
            }
            dst[r] = static_cast<float>(acc);
        }
    });
    return out;
}
"""

row_sum_ext = load_inline(
    name="hackscan_seed_row_sum",
    cpp_sources=cpp_source,
    functions=["row_sum"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return row_sum_ext.row_sum(x)
