"""The C++ call / launch graph: node names are a contract with hackscan/python/program.py."""

from __future__ import annotations

import textwrap

import networkx as nx

from hackscan.cuda.builder import build_cuda_facts
from hackscan.cuda.graph import aten_name, cuda_graph, is_compute
from hackscan.units import MappedText, Unit

SRC = """
#include <torch/extension.h>
__device__ float act(float v) { return v > 0.f ? v : 0.f; }
__device__ float twice(float v) { return act(v) * 2.f; }
__global__ void k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = twice(x[i]);
}
static void launch(const float* x, float* y, int n) { k<<<(n + 255) / 256, 256>>>(x, y, n); }
torch::Tensor run(torch::Tensor x) {
    auto y = torch::empty_like(x);
    launch(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return at::matmul(y, x.t());
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }
"""


def graph() -> nx.DiGraph:
    u = Unit(id="g:cuda", language="cuda", mapped=MappedText.verbatim(textwrap.dedent(SRC), 1, 0), extension="g")
    return cuda_graph(build_cuda_facts([u]))


def test_node_names_and_kinds() -> None:
    g = graph()
    assert g.nodes["export:g.run"]["kind"] == "export"
    assert g.nodes["cpp:g:run"]["kind"] == "cpp"
    assert g.nodes["cpp:g:launch"]["kind"] == "cpp"
    assert g.nodes["kernel:g:k"]["kind"] == "kernel"
    assert g.nodes["device:g:twice"]["kind"] == "device"
    assert g.nodes["aten:at::matmul"]["compute"] is True
    assert g.nodes["aten:torch::empty_like"]["compute"] is False
    assert g.nodes["aten:Tensor.data_ptr"]["compute"] is False


def test_edges_bind_call_launch() -> None:
    g = graph()
    assert g.edges["export:g.run", "cpp:g:run"]["kind"] == "binds"
    assert g.edges["cpp:g:run", "cpp:g:launch"]["kind"] == "calls"
    assert g.edges["cpp:g:launch", "kernel:g:k"]["kind"] == "launches"
    assert g.edges["kernel:g:k", "device:g:twice"]["kind"] == "calls"
    assert g.edges["device:g:twice", "device:g:act"]["kind"] == "calls"
    assert nx.has_path(g, "export:g.run", "device:g:act")
    assert nx.has_path(g, "export:g.run", "aten:at::matmul")
    # device code never gets aten nodes, and edge lines are host lines
    assert not any(n.startswith("aten:") for n in g.successors("kernel:g:k"))
    assert g.edges["cpp:g:launch", "kernel:g:k"]["line"] == 9


def test_launch_of_an_undefined_kernel_keeps_a_node() -> None:
    u = Unit(id="h:cuda", language="cuda", extension="h",
             mapped=MappedText.verbatim("void go(float* y) { missing<<<1, 1>>>(y); }", 1, 0))
    g = cuda_graph(build_cuda_facts([u]))
    assert g.nodes["kernel:h:missing"]["defined"] is False
    assert g.has_edge("cpp:h:go", "kernel:h:missing")


def test_compute_classification() -> None:
    assert is_compute("at::matmul") and is_compute("torch::conv2d") and is_compute(".mm")
    assert not is_compute("torch::empty") and not is_compute("at::cuda::getCurrentCUDAStream")
    assert not is_compute("torch::kFloat32") and not is_compute("torch::TensorOptions") and not is_compute(".size")
    assert not is_compute("std::max")
    assert aten_name(".mm") == "aten:Tensor.mm" and aten_name("std::max") is None
