"""HS119 custom-code-cannot-run: the cases fixtures do not pin down (where certainty stops), and the
fallback rules' wording when the kernel provably never runs."""

from __future__ import annotations

import importlib
import textwrap

import pytest

from hackscan.config import Config
from hackscan.cuda.buildability import MISSING_APIS
from hackscan.engine import StaticScanner
from hackscan.inputs import Submission

KERNEL = r"""
__global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu_forward(torch::Tensor x) {
    auto y = torch::empty_like(x);
    relu_kernel<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
"""


def findings(cpp: str, cuda: str = KERNEL, extra: str = "functions=['relu_forward']", tail: str = "",
             select: str = "HS119") -> list:
    code = ("import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n"
            f"cpp = r'''{cpp}'''\ncuda = r'''{cuda}'''\n"
            f"ext = load_inline(name='relu_ext', cpp_sources=cpp, cuda_sources=cuda, {extra})\n"
            + textwrap.dedent(tail or """
                class ModelNew(nn.Module):
                    def forward(self, x):
                        return ext.relu_forward(x)
            """))
    sub = Submission(path="t.py", code=code, file="t.py")
    return [f for f in StaticScanner(Config(select=(select,))).scan(sub).findings if f.rule == select]


def reasons(got: list) -> list[str]:
    return [f.evidence["reason"] for f in got]


@pytest.mark.parametrize("api", sorted(MISSING_APIS))
def test_missing_apis_do_not_exist_in_the_installed_torch(api: str) -> None:
    module, _, attr = api.rpartition(".")
    try:
        owner = importlib.import_module(module)
    except ImportError:
        return
    assert not hasattr(owner, attr), f"{api} exists: it must leave MISSING_APIS"


def test_undeclared_binding_points_at_the_definition_in_the_cuda_string() -> None:
    got = findings("")
    assert reasons(got) == ["undeclared"]
    assert got[0].location.unit == "relu_ext:cuda" and "cpp_sources is empty" in got[0].message


def test_prototype_in_cpp_sources_is_a_declaration() -> None:
    assert findings("torch::Tensor relu_forward(torch::Tensor x);") == []


@pytest.mark.parametrize("cpp", [
    "DECLARE_OP(relu_forward)",                      # a macro could declare it: not certain
    '#include "relu.h"',                             # a local header could declare it
    "#define DECL(n) torch::Tensor n##_forward(torch::Tensor)\nDECL(relu);",  # pasted tokens
])
def test_no_finding_when_cpp_sources_might_declare_the_name(cpp: str) -> None:
    assert findings(cpp) == []


def test_name_defined_nowhere_is_not_claimed() -> None:
    # a name the user never defines could come from a header (a libc function): not certain
    got = findings("", extra="functions=['expf', 'relu_forward']")
    assert reasons(got) == ["undeclared"] and "`relu_forward`" in got[0].message and "expf" not in got[0].message


def test_empty_functions_list_still_writes_a_second_module() -> None:
    cpp = "torch::Tensor relu_forward(torch::Tensor x);\n" \
          "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"relu_forward\", &relu_forward); }"
    assert reasons(findings(cpp, extra="functions=[]")) == ["duplicate-module"]
    assert findings(cpp, extra="verbose=False") == []


def test_module_of_another_name_or_under_ifdef_is_not_a_duplicate() -> None:
    other = "torch::Tensor relu_forward(torch::Tensor x);\n" \
            "PYBIND11_MODULE(other_module, m) { m.def(\"relu_forward\", &relu_forward); }"
    assert findings(other) == []
    guarded = "torch::Tensor relu_forward(torch::Tensor x);\n#ifdef STANDALONE\n" \
              "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"relu_forward\", &relu_forward); }\n#endif"
    assert findings(guarded) == []


def test_launch_in_cpp_sources_only_under_cudacc_guard_is_not_claimed() -> None:
    cpp = "#ifdef __CUDACC__\n" + KERNEL + "\n#endif\ntorch::Tensor relu_forward(torch::Tensor x);"
    assert findings(cpp) == []


def test_unpacked_keywords_leave_the_call_unknown() -> None:
    assert findings("", extra="**opts") == []


def test_keyword_call_only_on_functions_bindings() -> None:
    tail = """
        class ModelNew(nn.Module):
            def forward(self, x):
                return ext.relu_forward(x, stream=0)
    """
    assert reasons(findings("torch::Tensor relu_forward(torch::Tensor x);", tail=tail)) == ["unbindable-call"]
    own = "torch::Tensor relu_forward(torch::Tensor x);\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {" \
          " m.def(\"relu_forward\", &relu_forward, py::arg(\"x\"), py::arg(\"stream\") = 0); }"
    assert findings(own, extra="verbose=False", tail=tail) == []


def test_flag_fallback_says_the_torch_path_is_what_runs() -> None:
    tail = """
        class ModelNew(nn.Module):
            def forward(self, x):
                if ext is None:
                    return torch.relu(x)
                return ext.relu_forward(x)
    """
    broken = findings("", tail=tail, select="HS108")
    sound = findings("torch::Tensor relu_forward(torch::Tensor x);", tail=tail, select="HS108")
    assert broken and "the torch path is what runs" in broken[0].message
    assert sound and "does not build" in sound[0].message and "torch path is what runs" not in sound[0].message


def test_corpus_records_read_by_hand(corpus_path) -> None:
    """Records read by hand (record: reason, host line): each one's extension cannot build or its
    call cannot succeed; the counts guard against the rule drifting into guesses."""
    from collections import Counter

    from hackscan.inputs import discover

    scanner = StaticScanner(Config(select=("HS119",)))
    got: dict[int, set[tuple[str, int]]] = {}
    per_reason: Counter[str] = Counter()
    for sub in discover([str(corpus_path)]):
        if isinstance(sub, Submission):
            found = {(f.evidence["reason"], f.location.line) for f in scanner.scan(sub).findings
                     if f.rule == "HS119"}
            if found:
                got[sub.record] = found
                per_reason.update(r for r, _ in found)
    read = {2: ("duplicate-module", 207), 15: ("undeclared", 18), 19: ("missing-api", 64),
            35: ("cuda-as-cpp", 260), 98: ("unbindable-call", 177), 248: ("missing-api", 77),
            157: ("unbindable-call", 413), 193: ("cuda-as-cpp", 191)}
    for record, fact in read.items():
        assert fact in got.get(record, set()), record
    assert len(got) == 68
    assert per_reason == {"duplicate-module": 35, "undeclared": 36, "unbindable-call": 20, "cuda-as-cpp": 3,
                          "missing-api": 2}


def test_tuple_launch_only_where_the_parameter_is_a_tensor() -> None:
    call = """
        class ModelNew(nn.Module):
            def forward(self, x):
                return ext.relu_forward((4,), (256,))
    """
    cpp = "torch::Tensor relu_forward(torch::Tensor x);"
    assert reasons(findings(cpp, tail=call)) == ["unbindable-call"]
    sizes = KERNEL.replace("torch::Tensor relu_forward(torch::Tensor x)",
                           "torch::Tensor relu_forward(std::vector<int64_t> grid, std::vector<int64_t> block)")
    # a tuple converts to std::vector<int64_t>: the call binds
    assert findings("torch::Tensor relu_forward(std::vector<int64_t> grid, std::vector<int64_t> block);",
                    cuda=sizes, tail=call) == []
